//! The real binary as a user runs it: `demo init`, `serve --demo`, `config check|dump`,
//! graceful shutdown on SIGTERM (in-flight requests finish), statement timeout, SIGUSR1 reload.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rowgate");

/// A configuration granting the anonymous role everything (these tests are not about grants).
const OPEN_GRANTS: &str =
    "[[grants]]\nrole = \"anon\"\ntables = [\"*\"]\nops = [\"select\", \"insert\", \"update\", \"delete\"]\n";

/// A view that takes a while to compute (a few hundred ms in SQLite).
const SLOW_VIEW: &str = "CREATE VIEW slow AS WITH RECURSIVE c(x) AS \
    (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 10000000) SELECT count(*) AS n FROM c";

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

struct Server {
    child: Child,
    base: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `rowgate serve ARGS --listen 127.0.0.1:PORT` in `dir` and waits until it answers
/// `/live` (the supervisor listens before its worker serves: a connect alone proves nothing).
fn serve(dir: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut cmd = Command::new(BIN);
    cmd.current_dir(dir)
        .arg("serve")
        .args(args)
        .args(["--listen", &listen])
        .env("ROWGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().expect("spawn rowgate");
    let server = Server {
        child,
        base: format!("http://{listen}"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(&listen).is_ok()
            && get(&format!("{}/live", server.base)).0 == 200
        {
            return server;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("rowgate did not start serving on {listen}");
}

fn signal(child: &Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            return status;
        }
        assert!(Instant::now() < deadline, "process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A blocking GET over the async client: (status, body).
fn get(url: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let r = reqwest::get(url).await.expect("request");
        let status = r.status().as_u16();
        (status, r.text().await.expect("body"))
    })
}

#[test]
fn demo_init_then_serve_demo() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["demo", "init", "--db", "x.db", "--people", "1000"])
        .output()
        .expect("demo init");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("people: 1000 rows"), "{text}");

    // `serve --demo` creates rowgate-demo.db in the working directory when it is missing.
    let server = serve(dir.path(), &["--demo"], &[]);
    assert!(dir.path().join("rowgate-demo.db").exists());
    let (status, body) = get(&format!("{}/api/team/1", server.base));
    assert_eq!(status, 200);
    assert!(body.contains("\"team_id\":1"), "{body}");
}

#[test]
fn sigterm_lets_in_flight_requests_finish() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("rowgate.toml"), OPEN_GRANTS).expect("config");
    let db = dir.path().join("d.db");
    rowgate::demo::init(&db, 10, None).expect("demo");
    rusqlite::Connection::open(&db)
        .and_then(|c| c.execute_batch(SLOW_VIEW))
        .expect("view");
    let mut server = serve(dir.path(), &["--db", "d.db"], &[]);
    let url = format!("{}/api/slow", server.base);
    let request = std::thread::spawn(move || get(&url));
    std::thread::sleep(Duration::from_millis(100));
    signal(&server.child, "TERM");
    let (status, body) = request.join().expect("join");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"n\":10000000"), "{body}");
    let exit = wait_exit(&mut server.child, Duration::from_secs(10));
    assert!(exit.success(), "{exit:?}");
}

#[test]
fn statement_timeout_answers_504_and_the_server_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("rowgate.toml"), OPEN_GRANTS).expect("config");
    let db = dir.path().join("d.db");
    rowgate::demo::init(&db, 10, None).expect("demo");
    rusqlite::Connection::open(&db)
        .and_then(|c| c.execute_batch(SLOW_VIEW))
        .expect("view");
    let server = serve(
        dir.path(),
        &["--db", "d.db"],
        &[("ROWGATE_DB_STATEMENT_TIMEOUT_MS", "20")],
    );
    let (status, body) = get(&format!("{}/api/slow", server.base));
    assert_eq!(status, 504, "{body}");
    assert!(body.contains("57014"), "{body}");
    let (status, _) = get(&format!("{}/api/team", server.base));
    assert_eq!(status, 200);
}

#[test]
fn sigusr1_reloads_the_schema() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("rowgate.toml"), OPEN_GRANTS).expect("config");
    let db = dir.path().join("d.db");
    rowgate::demo::init(&db, 10, None).expect("demo");
    // Polling off: only the signal can reveal the new table.
    let server = serve(
        dir.path(),
        &["--db", "d.db"],
        &[("ROWGATE_DB_SCHEMA_POLL_MS", "0")],
    );
    rusqlite::Connection::open(&db)
        .and_then(|c| c.execute_batch("CREATE TABLE fresh (id INTEGER PRIMARY KEY, v TEXT); INSERT INTO fresh (v) VALUES ('x');"))
        .expect("ddl");
    let (status, _) = get(&format!("{}/api/fresh", server.base));
    assert_eq!(status, 404);
    signal(&server.child, "USR1");
    let mut last = 0;
    for _ in 0..100 {
        last = get(&format!("{}/api/fresh", server.base)).0;
        if last == 200 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(last, 200);
}

#[test]
fn config_check_and_dump_follow_precedence() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("rowgate.toml"),
        "listen = \"127.0.0.1:9999\"\n[rest]\nprefix = \"/rest/v1\"\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["config", "dump", "--listen", "127.0.0.1:7777"])
        .env("ROWGATE_REST_MAX_ROWS", "50")
        .output()
        .expect("dump");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("listen = \"127.0.0.1:7777\""), "{text}");
    assert!(text.contains("prefix = \"/rest/v1\""), "{text}");
    assert!(text.contains("max_rows = 50"), "{text}");

    std::fs::write(dir.path().join("bad.toml"), "[rest]\nprefx = 1\n").expect("write");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["config", "check", "--config", "bad.toml"])
        .output()
        .expect("check");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("prefx"), "{err}");
}

#[test]
fn config_check_rejects_a_broken_template_and_accepts_the_demo() {
    let dir = tempfile::tempdir().expect("tempdir");
    rowgate::demo::init(&dir.path().join("d.db"), 10, None).expect("demo");
    std::fs::create_dir_all(dir.path().join("t")).expect("dir");
    std::fs::write(
        dir.path().join("t/page.html"),
        "<p>{% for r in rows %}{{ r.name }}</p>\n",
    )
    .expect("write");
    std::fs::write(
        dir.path().join("rowgate.toml"),
        "[db]\npath = \"d.db\"\n[[resources]]\nroles = [\"*\"]\npath = \"/page\"\nsql = \"SELECT name FROM team\"\ntemplate = \"t/page.html\"\n",
    )
    .expect("write");
    let check = || {
        Command::new(BIN)
            .current_dir(dir.path())
            .args(["config", "check"])
            .output()
            .expect("check")
    };
    let out = check();
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("resource /page") && err.contains("t/page.html"),
        "{err}"
    );
    // `serve` refuses to start on it too.
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["serve", "--listen", "127.0.0.1:0"])
        .output()
        .expect("serve");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("t/page.html"));
    // Fixed, it passes and the SQL is checked against the database.
    std::fs::write(
        dir.path().join("t/page.html"),
        "<p>{% for r in rows %}{{ r.name }}{% endfor %}</p>\n",
    )
    .expect("write");
    let out = check();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("1 custom resources, 0 grants, checked against database d.db"),
        "{text}"
    );
    // A grant naming a table or column that does not exist fails the check.
    std::fs::write(
        dir.path().join("grants.toml"),
        "[db]\npath = \"d.db\"\n[[grants]]\nrole = \"r\"\ntables = [\"teem\"]\nops = [\"select\"]\n\
         [[grants]]\nrole = \"r\"\ntables = [\"team\"]\nops = [\"select\"]\nread_columns = [\"nmae\"]\n",
    )
    .expect("write");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["config", "check", "--config", "grants.toml"])
        .output()
        .expect("check");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("table \"teem\" does not exist")
            && err.contains("column \"nmae\" does not exist"),
        "{err}"
    );
    // So does a duality view whose document names a column the root table does not have,
    // and one whose document aggregates (a document shows rows, not groups).
    let err = refused_config(
        dir.path(),
        "[db]\npath = \"d.db\"\n[[duality_views]]\nname = \"team_dv\"\ntable = \"team\"\n\
         document = \"_id:team_id,nmae\"\n",
    );
    assert!(
        err.contains("duality_views[0] (\"team_dv\")") && err.contains("no column \"nmae\""),
        "{err}"
    );
    let err = refused_config(
        dir.path(),
        "[db]\npath = \"d.db\"\n[[duality_views]]\nname = \"team_dv\"\ntable = \"team\"\n\
         document = \"_id:team_id,points.sum()\"\n",
    );
    assert!(err.contains("aggregates"), "{err}");
    // The built-in demo configuration checks too (from a folder without a rowgate.toml).
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    let out = Command::new(BIN)
        .current_dir(&elsewhere)
        .args(["config", "check", "--demo", "--db", "../d.db"])
        .output()
        .expect("check demo");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("7 custom resources (2 functions), 3 grants, checked against"),
        "{text}"
    );
}

#[test]
fn sighup_reloads_custom_resources() {
    let dir = tempfile::tempdir().expect("tempdir");
    rowgate::demo::init(&dir.path().join("d.db"), 10, None).expect("demo");
    let config = |greeting: &str| {
        format!("[db]\npath = \"d.db\"\n[[resources]]\nroles = [\"*\"]\npath = \"/hi\"\nshape = \"value\"\nsql = \"SELECT '{greeting}'\"\n")
    };
    std::fs::write(dir.path().join("rowgate.toml"), config("hello")).expect("write");
    let server = serve(dir.path(), &[], &[]);
    let url = format!("{}/hi", server.base);
    assert_eq!(get(&url), (200, "\"hello\"".to_string()));
    // A broken file is ignored: the running set stays.
    std::fs::write(
        dir.path().join("rowgate.toml"),
        "[[resources]]\nroles = [\"*\"]\npath = \"/hi\"\nsql = \"SELEC\"\n",
    )
    .expect("write");
    signal(&server.child, "HUP");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(get(&url), (200, "\"hello\"".to_string()));
    std::fs::write(dir.path().join("rowgate.toml"), config("bonjour")).expect("write");
    signal(&server.child, "HUP");
    let mut last = String::new();
    for _ in 0..100 {
        last = get(&url).1;
        if last == "\"bonjour\"" {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(last, "\"bonjour\"");
}

/// Issue 13, items 19 and 20: a database file that does not exist is an error unless `--create`
/// asks for an empty one (a typo must not serve an empty database); a log written to a file
/// has no colour codes.
#[test]
fn missing_database_is_an_error_and_logs_are_plain() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = Command::new(BIN)
        .current_dir(dir.path())
        .args(["serve", "--db", "typo.db", "--listen", "127.0.0.1:0"])
        .env("ROWGATE_LOG", "info")
        .output()
        .expect("serve");
    assert!(!out.status.success(), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("typo.db") && err.contains("--create"), "{err}");
    assert!(!dir.path().join("typo.db").exists(), "no file was created");

    let text = serve_logged(
        dir.path(),
        &["--db", "new.db", "--create", "--workers", "0"],
        || {
            assert!(dir.path().join("new.db").exists());
        },
    );
    assert!(text.contains("INFO"), "{text}");
    assert!(
        !text.contains('\u{1b}'),
        "colour codes in a log file: {text:?}"
    );
}

/// A server on a fresh database with `ddl`, granting anon select and insert; the peak memory
/// its process grew by while `bodies` were posted at once to `table`, and their statuses.
fn post_large_bodies(ddl: &str, table: &str, bodies: Vec<String>) -> (u64, Vec<u16>, i64) {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("t.db");
    rusqlite::Connection::open(&db)
        .and_then(|c| c.execute_batch(ddl))
        .expect("create");
    std::fs::write(
        dir.path().join("rowgate.toml"),
        "[[grants]]\nrole = \"anon\"\ntables = [\"*\"]\nops = [\"select\", \"insert\"]\n",
    )
    .expect("config");
    let server = serve(dir.path(), &["--db", "t.db", "--workers", "0"], &[]);
    let peak_kb = || -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .expect("VmHWM")
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let url = format!("{}/api/{table}", server.base);
    let post = |body: String| {
        reqwest::Client::new()
            .post(&url)
            .header("Content-Type", "application/json")
            .body(body)
            .send()
    };
    // a first write warms the server up (its threads, caches and statements)
    let small = rt.block_on(post("[]".to_string())).expect("small insert");
    assert_eq!(small.status().as_u16(), 201);
    let idle_kb = peak_kb();
    let statuses: Vec<u16> = rt.block_on(async {
        futures_util::future::join_all(bodies.into_iter().map(post))
            .await
            .into_iter()
            .map(|r| r.expect("answer").status().as_u16())
            .collect()
    });
    let grown_kb = peak_kb().saturating_sub(idle_kb);
    println!(
        "{table}: peak RSS grew {} MB (idle {} MB)",
        grown_kb / 1024,
        idle_kb / 1024
    );
    let stored = rusqlite::Connection::open(&db)
        .and_then(|c| {
            c.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
                r.get::<_, i64>(0)
            })
        })
        .expect("count");
    (grown_kb, statuses, stored)
}

/// Issue 13, item 3: a 10 MB JSON array of 1.3 million small objects took a worker to 927 MB,
/// four at once to 1.78 GB. A body's rows are now bound as compact JSON texts of about 1 MiB
/// each, the body is dropped once planned, and at most `limits.large_bodies` (2) large bodies
/// are handled at once: the worker's peak memory stays within 4x `limits.body_bytes` (10 MiB)
/// per body being handled, and every write is answered.
#[test]
fn large_bodies_are_bounded() {
    let mut body = String::with_capacity(10_500_000);
    body.push('[');
    for i in 0..1_300_000u32 {
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!("{{\"a\":{}}}", i % 10));
    }
    body.push(']');
    let (grown_kb, statuses, stored) =
        post_large_bodies("CREATE TABLE t (a INTEGER)", "t", vec![body; 4]);
    assert!(
        statuses.iter().all(|s| *s == 201 || *s == 503),
        "{statuses:?}"
    );
    assert!(statuses.contains(&201), "{statuses:?}");
    let created = statuses.iter().filter(|s| **s == 201).count() as i64;
    assert_eq!(stored, created * 1_300_000);
    // 1.78 GB before; about 46 MB now
    assert!(grown_kb < 2 * 4 * 10 * 1024, "grew {grown_kb} kB");
}

/// The same bound when the rows are as large as the body (long strings: nothing to compact).
#[test]
fn large_string_bodies_are_bounded() {
    let row = format!("{{\"b\":\"{}\"}}", "x".repeat(10_000));
    let body = format!("[{}]", vec![row; 1_040].join(","));
    assert!(body.len() > 10_000_000);
    let (grown_kb, statuses, stored) =
        post_large_bodies("CREATE TABLE s (b TEXT)", "s", vec![body]);
    assert_eq!(statuses, vec![201]);
    assert_eq!(stored, 1_040);
    assert!(grown_kb < 4 * 10 * 1024, "grew {grown_kb} kB");
}

/// `rowgate ARGS` in `dir`, which must fail: its error output.
fn refused(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .env("ROWGATE_LOG", "info")
        .output()
        .expect("rowgate");
    assert!(!out.status.success(), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `config check` of `toml` (written in `dir`) fails: its error output.
fn refused_config(dir: &Path, toml: &str) -> String {
    std::fs::write(dir.join("refused.toml"), toml).expect("write");
    refused(dir, &["config", "check", "--config", "refused.toml"])
}

/// `rowgate clients …` refuses a missing SQLite file as `serve` does, creating nothing: the
/// console's sign-in hint run without `--demo` used to add the admin to a new, empty
/// `rowgate.db` that no server read.
#[test]
fn clients_refuse_a_missing_database_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [
        &["clients", "add", "admin", "--role", "admin"][..],
        &["clients", "add", "admin", "--role", "admin", "--demo"],
        &["clients", "list", "--db", "typo.db"],
    ] {
        let err = refused(dir.path(), args);
        assert!(
            err.contains("does not exist") && err.contains("--demo"),
            "{args:?}: {err}"
        );
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("dir")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert!(left.is_empty(), "{args:?} created {left:?}");
    }
}

/// The console's sign-in hint works as written on `serve --demo`: the `rowgate clients add …`
/// command it shows for the demo, run in the server's working directory, gives credentials that
/// sign in to the console (a token, then the console's session).
#[test]
fn the_consoles_sign_in_hint_works_on_the_demo() {
    let page = include_str!("../console/console.js");
    let hint = page
        .split("<code>")
        .filter_map(|s| s.split_once("</code>").map(|(code, _)| code))
        .find(|code| code.starts_with("rowgate clients add") && code.contains("--demo"))
        .expect("the sign-in hint names a `rowgate clients add … --demo` command");
    let dir = tempfile::tempdir().expect("tempdir");
    let server = serve(dir.path(), &["--demo"], &[]);
    let added = Command::new(BIN)
        .current_dir(dir.path())
        .args(hint.split_whitespace().skip(1))
        .arg("--json")
        .output()
        .expect("clients add");
    assert!(added.status.success(), "{hint}: {added:?}");
    let issued: serde_json::Value = serde_json::from_slice(&added.stdout).expect("json");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let http = reqwest::Client::new();
        let token: serde_json::Value = http
            .post(format!("{}/oauth/token", server.base))
            .form(&[
                ("grant_type", "client_credentials"),
                ("client_id", issued["client_id"].as_str().expect("id")),
                (
                    "client_secret",
                    issued["client_secret"].as_str().expect("secret"),
                ),
            ])
            .send()
            .await
            .expect("token")
            .json()
            .await
            .expect("json");
        let token = token["access_token"]
            .as_str()
            .expect("a token for the hint's client");
        let session = http
            .get(format!("{}/_/api/session", server.base))
            .bearer_auth(token)
            .send()
            .await
            .expect("session");
        assert_eq!(session.status().as_u16(), 200, "{:?}", session.text().await);
    });
}

/// `serve --demo` on a port another process holds fails before it creates the demo database
/// (it used to create it, then fail to bind), with and without the supervisor.
#[test]
fn serve_on_a_busy_port_creates_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = busy.local_addr().expect("addr").to_string();
    for workers in ["1", "0"] {
        let err = refused(
            dir.path(),
            &["serve", "--demo", "--listen", &listen, "--workers", workers],
        );
        assert!(err.contains(&format!("binding {listen}")), "{err}");
        assert!(
            !dir.path().join("rowgate-demo.db").exists(),
            "--workers {workers}: the demo database was created: {err}"
        );
    }
}

/// A database path in a folder that does not exist names the folder (SQLite says only "unable
/// to open database file"), for `serve`, `serve --create`, `serve --demo` and `demo init`.
#[test]
fn a_missing_folder_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    for args in [
        &["serve", "--db", "no/such/x.db", "--listen", "127.0.0.1:0"][..],
        &[
            "serve",
            "--db",
            "no/such/x.db",
            "--create",
            "--listen",
            "127.0.0.1:0",
        ],
        &[
            "serve",
            "--demo",
            "--db",
            "no/such/x.db",
            "--listen",
            "127.0.0.1:0",
        ],
        &["demo", "init", "--db", "no/such/x.db", "--people", "10"],
    ] {
        let err = refused(dir.path(), args);
        assert!(
            err.contains("the folder no/such of the database file no/such/x.db does not exist"),
            "{args:?}: {err}"
        );
        assert!(!err.contains("unable to open"), "{args:?}: {err}");
    }
}

/// A PostgreSQL server that is not there: one sentence naming host:port, the database and the
/// user, and the reason once (it repeated itself: "Error occurred while creating a new object:
/// db error: db error: …"), for `serve` (the pool) and `demo init` (one connection).
#[test]
fn a_closed_postgres_port_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let url = format!("postgres://someone@127.0.0.1:{port}/shop");
    for args in [
        &[
            "serve",
            "--db",
            &url,
            "--workers",
            "0",
            "--listen",
            "127.0.0.1:0",
        ][..],
        &["demo", "init", "--db", &url],
    ] {
        let err = refused(dir.path(), args);
        assert!(
            err.contains(&format!(
                "cannot connect to PostgreSQL at 127.0.0.1:{port} (database \"shop\", user \"someone\")"
            )) && err.contains("Connection refused"),
            "{args:?}: {err}"
        );
        assert!(
            !err.contains("creating a new object") && !err.contains("db error"),
            "{args:?}: {err}"
        );
        assert_eq!(err.matches("Connection refused").count(), 1, "{err}");
    }
}

/// A start-up warning is logged once, not again by the supervisor's re-execution of itself
/// nor by its worker.
#[test]
fn start_up_warnings_are_logged_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    rowgate::demo::init(&dir.path().join("d.db"), 10, None).expect("demo");
    let text = serve_logged(dir.path(), &["--db", "d.db", "--workers", "1"], || {});
    assert_eq!(text.matches("no [[grants]]").count(), 1, "{text}");
    assert_eq!(text.matches("with 1 worker(s)").count(), 1, "{text}");
    // a warning each worker finds in the configuration is logged by one of them
    std::fs::write(
        dir.path().join("rowgate.toml"),
        "[[grants]]\nrole = \"anon\"\ntables = [\"team\", \"no_such_table\"]\nops = [\"select\"]\n",
    )
    .expect("config");
    // (`/live` answers as soon as one worker serves: the first, which warns, may come later)
    let log = dir.path().join("serve.log");
    let text = serve_logged(
        dir.path(),
        &["--config", "rowgate.toml", "--db", "d.db", "--workers", "3"],
        || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while !std::fs::read_to_string(&log)
                .unwrap_or_default()
                .contains("no_such_table")
                && Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(50));
            }
            // the other workers' start, which would repeat it
            std::thread::sleep(Duration::from_millis(500));
        },
    );
    assert_eq!(text.matches("with 3 worker(s)").count(), 1, "{text}");
    assert_eq!(
        text.matches("table \"no_such_table\" does not exist")
            .count(),
        1,
        "{text}"
    );
}

/// `rowgate serve ARGS` in `dir` with its log (info, colour allowed) in a file: once it answers
/// `/live`, `while_serving` runs, then SIGTERM; the log.
fn serve_logged(dir: &Path, args: &[&str], while_serving: impl FnOnce()) -> String {
    let log = dir.join("serve.log");
    let port = free_port();
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .arg("serve")
        .args(args)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("ROWGATE_LOG", "info")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("serve");
    let base = format!("http://127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        && get(&format!("{base}/live")).0 == 200)
    {
        assert!(Instant::now() < deadline, "did not serve");
        std::thread::sleep(Duration::from_millis(20));
    }
    while_serving();
    signal(&child, "TERM");
    wait_exit(&mut child, Duration::from_secs(10));
    std::fs::read_to_string(&log).expect("log")
}
