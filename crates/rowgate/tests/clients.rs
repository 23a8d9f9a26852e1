//! Real PostgREST clients against a real server, on SQLite and PostgreSQL: postgrest-js (what
//! supabase-js uses for REST), installed by npm from `clients/js`'s lock file, and postgrest-py,
//! installed by pip into `clients/py/.venv` from its pinned requirements, on first use.
//! Resource embedding, as their users call it.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

/// `clients/py`'s Python (postgrest-py).
fn py_clients() -> &'static Path {
    static PYTHON: OnceLock<PathBuf> = OnceLock::new();
    PYTHON.get_or_init(|| venv("py").join(".venv/bin/python"))
}

/// `clients/schemathesis`'s `st`.
fn schemathesis() -> &'static Path {
    static ST: OnceLock<PathBuf> = OnceLock::new();
    ST.get_or_init(|| venv("schemathesis").join(".venv/bin/st"))
}

/// Runs `script` of `clients/py` against the server at `base`; its printed JSON.
fn run_py(base: &str, script: &str) -> Value {
    let python = py_clients();
    let dir = python.ancestors().nth(3).expect("clients/py");
    run_client(python, dir, script, base)
}

/// Runs `script` of `clients/js` against the server at `base`; its printed JSON.
fn run_js(base: &str, script: &str) -> Value {
    run_client(Path::new("node"), js_clients(), script, base)
}

/// Runs `program script` in `dir` with `ROWGATE_URL` set to `base`; the JSON it prints.
fn run_client(program: &Path, dir: &Path, script: &str, base: &str) -> Value {
    run_client_with(program, dir, script, &[("ROWGATE_URL", base)])
}

/// postgrest-js's embedding calls work unchanged: to-many with the embed's filter and order,
/// to-one aliased as a single object, `!inner`, an insert answering with an embed, and
/// PostgREST's error body for a relationship that does not exist.
async fn postgrest_js_embedding(b: Backend) {
    let s = TestServer::start(b).await;
    let base = s.base.clone();
    let results = tokio::task::spawn_blocking(move || run_js(&base, "embedding.mjs"))
        .await
        .expect("client");
    assert_eq!(
        results["teamWithDrivers"],
        json!({"data": [{"name": "Red Bull", "driver": [
            {"name": "Max Verstappen", "points": 575},
            {"name": "Sergio Perez", "points": 285}
        ]}], "error": null, "status": 200})
    );
    assert_eq!(
        results["driverWithTeam"],
        json!({"data": {"name": "Lewis Hamilton", "crew": {"name": "Mercedes"}}, "error": null, "status": 200})
    );
    assert_eq!(
        results["inner"]["data"],
        json!([{"team_id": 3, "driver": [{"name": "Max Verstappen"}]}])
    );
    assert_eq!(
        results["inserted"],
        json!({"data": [{"name": "Client Driver", "team": {"name": "McLaren"}}], "error": null, "status": 201})
    );
    let missing = &results["missing"];
    assert_eq!(missing["status"], 400, "{missing}");
    assert_eq!(missing["error"]["code"], "PGRST200", "{missing}");
    assert_eq!(
        missing["error"]["hint"],
        "Perhaps you meant 'driver' instead of 'drivers'."
    );
}

/// postgrest-py's embedding calls work unchanged: to-many with the embed's filter and order,
/// to-one aliased as one object, and PostgREST's error for a relationship that does not exist.
async fn postgrest_py_embedding(b: Backend) {
    let s = TestServer::start(b).await;
    let base = s.base.clone();
    let results = tokio::task::spawn_blocking(move || run_py(&base, "embedding.py"))
        .await
        .expect("client");
    assert_eq!(
        results["teamWithDrivers"],
        json!({"data": [{"name": "Red Bull", "driver": [
            {"name": "Max Verstappen", "points": 575},
            {"name": "Sergio Perez", "points": 285}
        ]}], "error": null})
    );
    assert_eq!(
        results["driverWithTeam"],
        json!({"data": {"name": "Lewis Hamilton", "crew": {"name": "Mercedes"}}, "error": null})
    );
    assert_eq!(results["missing"]["error"]["code"], "PGRST200", "{results}");
    assert_eq!(
        results["missing"]["error"]["hint"],
        "Perhaps you meant 'driver' instead of 'drivers'."
    );
}

/// A Supabase app's configuration: Supabase's REST prefix, its two roles.
const SUPABASE: &str = r#"
[rest]
prefix = "/rest/v1"

[realtime]
tables = ["team"]


[[grants]]
role = "anon"
tables = ["team", "driver"]
ops = ["select"]

[[grants]]
role = "service_role"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]
"#;

/// [`SUPABASE`] with the RPC functions.
fn supabase_config() -> String {
    format!("{SUPABASE}{FUNCTION_RESOURCES}")
}

/// Supabase's two keys for `s`: long-lived tokens of an anon client and a service_role one,
/// once the server knows the clients.
async fn anon_and_service_keys(s: &TestServer) -> (String, String) {
    let mut keys = Vec::new();
    for (name, role) in [("web", "anon"), ("backend", "service_role")] {
        rowgate::auth::clients::add(&s.app.db, &s.app.auth.secrets, name, role, 3600)
            .await
            .expect("client");
        let key = rowgate::auth::api_key(&s.app.db, &s.app.auth.tokens, name, 365)
            .await
            .expect("key");
        keys.push(key);
    }
    // the server learns of the new clients within auth.clients_poll_ms
    for _ in 0..50 {
        let status = s
            .get("/team?limit=1")
            .header("apikey", &keys[1])
            .send()
            .await
            .expect("get")
            .status();
        if status == 200 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (keys[0].clone(), keys[1].clone())
}

/// supabase-js works unchanged with only its URL and keys changed: an anon key and a
/// service-role key (long-lived tokens of those roles), reads with filters and embedding,
/// writes refused to anon and done by the service role, rpc() by POST and GET with a
/// set-returning call shaped by select/order/limit, PGRST202 for an unknown function.
async fn supabase_js_app(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &supabase_config(), &[]).expect("config");
    let s = TestServer::start_prepared(b, dir, config, "", |_| {}).await;
    let (anon, service) = anon_and_service_keys(&s).await;
    let root = s.root_url("");
    let results = tokio::task::spawn_blocking(move || {
        run_client_with(
            Path::new("node"),
            js_clients(),
            "supabase.mjs",
            &[
                // Node 20's WebSocket (a browser's), which realtime-js needs
                ("NODE_OPTIONS", "--experimental-websocket"),
                ("ROWGATE_REALTIME", "1"),
                ("ROWGATE_ROOT", &root),
                ("ROWGATE_ANON_KEY", &anon),
                ("ROWGATE_SERVICE_KEY", &service),
            ],
        )
    })
    .await
    .expect("client");
    assert_eq!(
        results["select"],
        json!({"data": [{"name": "Red Bull", "driver": [
            {"name": "Max Verstappen", "points": 575},
            {"name": "Sergio Perez", "points": 285}
        ]}], "error": null, "status": 200})
    );
    // a key of the anon role is a token: refused as a role, not as a login
    assert_eq!(results["anonInsert"]["status"], 403, "{results}");
    assert_eq!(
        results["insert"],
        json!({"data": {"team_id": 90, "name": "Rowgate Racing", "points": 28}, "error": null, "status": 201})
    );
    assert_eq!(results["update"]["data"], json!([{"points": 30}]));
    assert_eq!(
        results["delete"]["data"],
        json!([{"name": "Rowgate Racing"}])
    );
    assert_eq!(
        results["rpc"],
        json!({"data": 3, "error": null, "status": 200})
    );
    assert_eq!(results["rpcGet"]["data"], json!(42));
    assert_eq!(
        results["rpcRows"]["data"],
        json!([{"name": "Max Verstappen"}, {"name": "Sergio Perez"}])
    );
    assert_eq!(results["rpcMissing"]["status"], 404);
    assert_eq!(results["rpcMissing"]["error"]["code"], "PGRST202");
    // realtime: the subscription holds, the insert inside the filter arrives (the one outside
    // it does not), in Supabase's payload shape
    assert_eq!(results["subscribeStatus"], "SUBSCRIBED", "{results}");
    assert_eq!(results["channelTopic"], "realtime:teams");
    assert_eq!(
        results["realtime"],
        json!({"eventType": "INSERT", "schema": "public", "table": "team",
            "new": {"team_id": 92, "name": "Brawn", "points": 172}, "old": {},
            "hasCommitTimestamp": true}),
        "{results}"
    );
    // presence: track() resolves and the channel's state shows the member
    assert_eq!(results["tracked"], "ok", "{results}");
    assert_eq!(
        results["presence"],
        json!({"keys": ["me"], "online": true}),
        "{results}"
    );
}

/// The demo's configuration with every table, function and document open to the anonymous
/// role and unfiltered writes allowed: everything the OpenAPI document describes is callable.
fn open_demo_config() -> String {
    include_str!("../demo/rowgate.toml")
        .replace("refuse_unfiltered_writes = true", "refuse_unfiltered_writes = false")
        .replace(
            "tables = [\"employee\", \"team\", \"driver\", \"race\", \"driver_race_map\", \"posts\", \"people\", \"team_standings\"]\nops = [\"select\"]",
            "tables = [\"*\"]\nops = [\"select\", \"insert\", \"update\", \"delete\"]\nfunctions = [\"*\"]",
        )
}

/// Schemathesis with every check over the whole OpenAPI document (tables, views, duality views,
/// custom resources, functions): no 5xx, every status and content type documented, every
/// answer and header as its schema says, 405s with the right `Allow`, required headers
/// enforced, every request the document calls valid accepted and every one it calls invalid
/// refused.
async fn openapi_schemathesis(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        &open_demo_config(),
        &[(
            "templates/blog.html",
            include_str!("../demo/templates/blog.html"),
        )],
    )
    .expect("config");
    assert!(config
        .grants
        .iter()
        .any(|g| g.role == "anon" && g.functions == ["*"]));
    let s = TestServer::start_prepared(b, dir, config, "", |_| {}).await;
    let url = s.root_url("/openapi.json");
    // schemathesis keeps a cache where it runs: in the test's own folder
    let cwd = s.dir.path().to_path_buf();
    // a request the document calls invalid may also be refused as a range nothing satisfies
    // (a negative `limit=` is 416, as PostgREST answers it)
    std::fs::write(
        cwd.join("schemathesis.toml"),
        "[checks.negative_data_rejection]\nexpected-statuses = [\"400\", \"401\", \"403\", \"404\", \"405\", \"406\", \"409\", \"415\", \"416\", \"422\", \"428\", \"429\"]\n",
    )
    .expect("schemathesis.toml");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(schemathesis())
            .current_dir(cwd)
            .args(["run", &url, "--seed", "1", "--max-examples", "5"])
            .args(["--phases", "examples,coverage,fuzzing"])
            .args(["--checks", "all"])
            .output()
            .expect("st")
    })
    .await
    .expect("schemathesis");
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// postgrest-py's rpc() works unchanged: a scalar by POST and GET, a set of rows shaped by
/// select/order/limit, PostgREST's PGRST202.
async fn postgrest_py_rpc(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &supabase_config(), &[]).expect("config");
    let s = TestServer::start_prepared(b, dir, config, "", |_| {}).await;
    let base = s.base.clone();
    let results = tokio::task::spawn_blocking(move || run_py(&base, "rpc.py"))
        .await
        .expect("client");
    assert_eq!(
        results["sum"],
        json!({"data": 3, "error": null}),
        "{results}"
    );
    assert_eq!(results["sumGet"]["data"], json!(42), "{results}");
    assert_eq!(
        results["rows"]["data"],
        json!([{"name": "Max Verstappen"}, {"name": "Sergio Perez"}]),
        "{results}"
    );
    assert_eq!(results["missing"]["error"]["code"], "PGRST202", "{results}");
}

/// postgrest-py's writes with a service-role key: insert, update, upsert and delete returning
/// their rows; the anonymous role refused.
async fn postgrest_py_writes(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &supabase_config(), &[]).expect("config");
    let s = TestServer::start_prepared(b, dir, config, "", |_| {}).await;
    let (_, service) = anon_and_service_keys(&s).await;
    let base = s.base.clone();
    let results = tokio::task::spawn_blocking(move || {
        let python = py_clients();
        let dir = python.ancestors().nth(3).expect("clients/py");
        run_client_with(
            python,
            dir,
            "writes.py",
            &[("ROWGATE_URL", &base), ("ROWGATE_SERVICE_KEY", &service)],
        )
    })
    .await
    .expect("client");
    assert_eq!(results["anonInsert"]["error"]["code"], "RG401", "{results}");
    let row = |points: i64| json!([{"team_id": 80, "name": "Py Racing", "points": points}]);
    assert_eq!(
        results["insert"],
        json!({"data": row(3), "error": null}),
        "{results}"
    );
    assert_eq!(results["update"]["data"], row(4), "{results}");
    assert_eq!(results["upsert"]["data"], row(5), "{results}");
    assert_eq!(results["delete"]["data"], row(5), "{results}");
    assert_eq!(results["after"]["data"], json!([]), "{results}");
}

backend_tests!(
    postgrest_py_writes,
    postgrest_py_rpc,
    openapi_schemathesis,
    postgrest_js_embedding,
    postgrest_py_embedding,
    supabase_js_app
);
