//! Rowgate behind PgBouncer in transaction mode (Debian's `pgbouncer`; Supabase's Supavisor on
//! port 6543 works the same way): with `db.prepared_statements = false`, many concurrent
//! requests share two server connections, and every kind of request answers as it does on a
//! direct connection, the connection's settings (read-only reads, the statement timeout, the
//! search path) included, though the pooler does not pass them on at connect time.

mod common;

use std::path::PathBuf;

use common::postgres::{new_pgbouncer, PgBouncer};
use common::*;
use rowgate::config::Config;
use serde_json::{json, Value};

/// Custom resources that show the connection's settings: a slow read (the statement timeout)
/// and the transaction's read-only flag.
const PROBES: &str = r#"
[[resources]]
roles = ["*"]
path = "/slow"
shape = "value"
sql = "SELECT pg_sleep(3) IS NULL"

[[resources]]
roles = ["*"]
path = "/settings"
shape = "row"
sql = "SELECT current_setting('transaction_read_only') AS read_only, current_setting('statement_timeout') AS timeout, current_setting('search_path') AS search_path"
"#;

/// A server whose connections go through a PgBouncer with two server connections (kept
/// running beside it).
async fn server() -> (TestServer, PgBouncer) {
    let bouncer = new_pgbouncer(2);
    let port = bouncer.port;
    let resources = toml::from_str::<Config>(PROBES)
        .expect("resources")
        .resources;
    let s = TestServer::start_with(Backend::Postgres, move |c: &mut Config| {
        let direct = c.db.path.to_string_lossy().into_owned();
        let name = direct.rsplit('/').next().expect("database").to_string();
        c.db.path = PathBuf::from(format!("postgres://postgres@127.0.0.1:{port}/{name}"));
        c.db.prepared_statements = false;
        c.db.pool_size = 8;
        c.db.statement_timeout_ms = 1000;
        c.resources = resources;
    })
    .await;
    (s, bouncer)
}

/// Concurrent reads, counts, CSV and writes through the pooler all answer as usual.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_kind_of_request_works_through_the_pooler() {
    let (s, _bouncer) = server().await;
    let reads = (0..40).map(|i| {
        let request = s.get(&format!(
            "/team?select=name&order=team_id&limit={}",
            1 + i % 10
        ));
        async move {
            let r = request.send().await.expect("read");
            assert_eq!(r.status(), 200);
            r.json::<Vec<Value>>().await.expect("json").len()
        }
    });
    let lengths = futures_util::future::join_all(reads).await;
    assert_eq!(lengths, (0..40).map(|i| 1 + i % 10).collect::<Vec<_>>());
    let r = s
        .get("/team?select=name&limit=2")
        .header("Prefer", "count=exact")
        .send()
        .await
        .expect("count");
    assert_eq!(r.status(), 206);
    assert_eq!(r.headers()["content-range"], "0-1/10");
    let r = s
        .get("/team?select=team_id,name&order=team_id&limit=1")
        .header("Accept", "text/csv")
        .send()
        .await
        .expect("csv");
    assert_eq!(
        r.text().await.expect("csv"),
        "team_id,name\r\n1,Mercedes\r\n"
    );
    let r = s
        .post("/team", json!({"name": "Pooled", "points": 1}))
        .send()
        .await
        .expect("insert");
    assert_eq!(r.status(), 201);
    let r = s
        .patch("/team?name=eq.Pooled", json!({"points": 2}))
        .send()
        .await
        .expect("update");
    assert_eq!(r.status(), 204);
    let (_, rows) = get_json(&s, "/team?name=eq.Pooled&select=points").await;
    assert_eq!(rows, json!([{"points": 2}]));
    let r = s
        .delete("/team?name=eq.Pooled")
        .send()
        .await
        .expect("delete");
    assert_eq!(r.status(), 204);
}

/// The settings a direct connection gets at connect time hold through the pooler: reads run
/// read-only, the statement timeout stops a slow statement, the search path is the exposed
/// schemas'.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_settings_hold_through_the_pooler() {
    let (s, _bouncer) = server().await;
    for _ in 0..5 {
        let r = s
            .client
            .get(s.root_url("/settings"))
            .send()
            .await
            .expect("settings");
        assert_eq!(r.status(), 200);
        let settings: Value = r.json().await.expect("json");
        assert_eq!(settings["read_only"], "on", "{settings}");
        assert_eq!(settings["timeout"], "1s", "{settings}");
        assert_eq!(settings["search_path"], "public", "{settings}");
    }
    let r = s
        .client
        .get(s.root_url("/slow"))
        .send()
        .await
        .expect("slow");
    assert_error(r, 504, "57014").await;
}

/// Database roles hold through the pooler: each transaction sets its role for itself alone
/// (`set_config('role', …, true)`), so concurrent requests of two roles sharing two server
/// connections each run as their own, and no role outlives its transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn database_roles_hold_through_the_pooler() {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    const SECRET: &str = "super-secret-jwt-token-with-at-least-32-characters-long";
    let bouncer = new_pgbouncer(2);
    let port = bouncer.port;
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("jwt.secret"), SECRET).expect("secret");
    let toml = r#"
[[auth.external]]
issuer = "supabase"
secret_file = "jwt.secret"

[[resources]]
roles = ["*"]
path = "/whoami"
shape = "value"
sql = "SELECT current_user::text"
"#;
    let config = write_config(dir.path(), toml, &[]).expect("config");
    let setup = format!(
        "{}\nGRANT SELECT ON team TO anon, authenticated;",
        rowgate::db::supabase_compat::statements(None)
    );
    let s = TestServer::start_prepared(Backend::Postgres, dir, config, &setup, move |c| {
        let direct = c.db.path.to_string_lossy().into_owned();
        let name = direct.rsplit('/').next().expect("database").to_string();
        c.db.path = PathBuf::from(format!("postgres://postgres@127.0.0.1:{port}/{name}"));
        c.db.prepared_statements = false;
        c.db.pool_size = 8;
        c.auth.database_roles = true;
    })
    .await;
    let now = jsonwebtoken::get_current_timestamp();
    let user = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": "supabase", "role": "authenticated", "sub": "u1", "exp": now + 3600}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("sign");
    let calls = (0..40).map(|i| {
        let request = s.client.get(s.root_url("/whoami"));
        let (request, role) = if i % 2 == 0 {
            (request, "anon")
        } else {
            (request.bearer_auth(&user), "authenticated")
        };
        async move {
            let r = request.send().await.expect("whoami");
            assert_eq!(r.status(), 200);
            (r.json::<Value>().await.expect("json"), role)
        }
    });
    for (answer, role) in futures_util::future::join_all(calls).await {
        assert_eq!(answer, json!(role));
    }
    let (status, _) = get_json(&s, "/team?select=name&limit=1").await;
    assert_eq!(status, 200);
    drop(bouncer);
}
