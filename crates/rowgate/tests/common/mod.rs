//! Test harness: starts a real Rowgate server on a free port over a fresh demo database, and
//! instantiates each API test once per backend (`backend_tests!`).

#![allow(dead_code, missing_docs)]

pub mod citus;
pub mod nodes;
pub mod patroni;
pub mod postgres;
pub mod process;
pub mod ws;

use std::net::SocketAddr;

use rowgate::config::Config;
use tokio::sync::oneshot;

/// Two custom resources declared as RPC functions (`[[resources]]` TOML): `add_them(a, b)`, a
/// value, and `drivers_above(min_points)`, rows.
pub const FUNCTION_RESOURCES: &str = r#"
[[resources]]
roles = ["*"]
function = "add_them"
shape = "value"
sql = "SELECT :a + :b"
params.a = { type = "int" }
params.b = { type = "int" }

[[resources]]
roles = ["*"]
function = "drivers_above"
sql = "SELECT driver_id, name, points, team_id FROM driver WHERE points > :min_points"
params.min_points = { type = "int", default = 0 }
"#;

/// The database a test runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// A running server; dropped → shut down.
pub struct TestServer {
    pub addr: SocketAddr,
    /// `console.listen`'s address, when the test gave the console one.
    pub console_addr: Option<SocketAddr>,
    pub base: String,
    pub client: reqwest::Client,
    pub dir: tempfile::TempDir,
    pub db_path: std::path::PathBuf,
    pub app: std::sync::Arc<rowgate::app::App>,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
}

/// Every test server keeps its master secret in its own folder, and, unless the test's
/// configuration grants something itself, grants the anonymous role everything (the API tests
/// are about the API; tests/security.rs is about grants).
fn test_auth(config: &mut Config, dir: &std::path::Path) {
    config.auth.secret_file = dir.join("rowgate.secret");
    config.auth.clients_poll_ms = 100;
    if config.grants.is_empty() {
        config.grants.push(grant_everything("anon"));
    }
}

/// A grant of every operation on every table and function to `role`.
pub fn grant_everything(role: &str) -> rowgate::config::GrantConfig {
    rowgate::config::GrantConfig {
        role: role.into(),
        tables: vec!["*".into()],
        ops: ["select", "insert", "update", "delete"]
            .map(String::from)
            .to_vec(),
        read_columns: None,
        write_columns: None,
        filter: None,
        functions: vec!["*".into()],
    }
}

impl TestServer {
    /// Starts a server on a new demo database (200 people).
    pub async fn start(backend: Backend) -> TestServer {
        Self::start_with(backend, |_| {}).await
    }

    /// Starts a server, letting the test adjust the configuration first.
    pub async fn start_with(backend: Backend, adjust: impl FnOnce(&mut Config)) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_in(backend, dir, Config::default(), adjust).await
    }

    /// Starts a server configured by `toml` (written as `rowgate.toml` beside the database,
    /// with `files` — templates and the like — next to it).
    pub async fn start_toml(backend: Backend, toml: &str, files: &[(&str, &str)]) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = write_config(dir.path(), toml, files).expect("config");
        Self::start_in(backend, dir, config, |_| {}).await
    }

    /// Starts a server on a fresh PostgreSQL database of the test cluster holding the demo
    /// data (200 people).
    pub async fn start_postgres() -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        Self::start_postgres_with(dir, Config::default(), |_| {}).await
    }

    /// As [`TestServer::start_postgres`], keeping `dir` (the configuration's folder) alive.
    async fn start_postgres_with(
        dir: tempfile::TempDir,
        config: Config,
        adjust: impl FnOnce(&mut Config),
    ) -> TestServer {
        Self::start_prepared(Backend::Postgres, dir, config, "", adjust).await
    }

    /// Starts a server on a demo database in `dir` with `config` (adjusted by the test).
    pub async fn start_in(
        backend: Backend,
        dir: tempfile::TempDir,
        config: Config,
        adjust: impl FnOnce(&mut Config),
    ) -> TestServer {
        Self::start_prepared(backend, dir, config, "", adjust).await
    }

    /// Starts a server with `config` (its folder `dir`) on the PostgreSQL database at `url`,
    /// which the test made.
    pub async fn start_at(url: &str, dir: tempfile::TempDir, mut config: Config) -> TestServer {
        let db_path = std::path::PathBuf::from(url);
        config.db.path = db_path.clone();
        config.db.pool_size = 8;
        Self::launch(dir, config, |_| {}, db_path).await
    }

    /// A second server (another node) on `other`'s database, with `config`.
    pub async fn start_beside(other: &TestServer, mut config: Config) -> TestServer {
        let dir = tempfile::tempdir().expect("tempdir");
        // the same master secret: tokens of one node work on the other
        std::fs::copy(
            other.dir.path().join("rowgate.secret"),
            dir.path().join("rowgate.secret"),
        )
        .expect("secret");
        config.db.path = other.db_path.clone();
        config.db.pool_size = 8;
        config.db.readers = 2;
        Self::launch(dir, config, |_| {}, other.db_path.clone()).await
    }

    /// Starts a server on a demo database (a SQLite file in `dir`, or a fresh PostgreSQL
    /// database) on which `setup` (SQL) has run before the server opens it.
    pub async fn start_prepared(
        backend: Backend,
        dir: tempfile::TempDir,
        mut config: Config,
        setup: &str,
        adjust: impl FnOnce(&mut Config),
    ) -> TestServer {
        let db_path = match backend {
            Backend::Postgres => {
                let url = postgres::new_demo_database().await;
                config.db.pool_size = 8;
                std::path::PathBuf::from(url)
            }
            Backend::Sqlite => {
                let path = dir.path().join("demo.db");
                std::fs::write(&path, sqlite_demo()).expect("demo copy");
                config.db.readers = 2;
                path
            }
        };
        if !setup.is_empty() {
            db_exec(&db_path, setup);
        }
        config.db.path = db_path.clone();
        Self::launch(dir, config, adjust, db_path).await
    }

    /// Serves `config` (its database ready at `db_path`) on a free port, after the test's
    /// adjustments.
    async fn launch(
        dir: tempfile::TempDir,
        mut config: Config,
        adjust: impl FnOnce(&mut Config),
        db_path: std::path::PathBuf,
    ) -> TestServer {
        test_auth(&mut config, dir.path());
        adjust(&mut config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        // the console's own address (`127.0.0.1:0`: any free port)
        let console = match config.console.listen.as_str() {
            "" => None,
            at => Some(
                tokio::net::TcpListener::bind(at)
                    .await
                    .expect("bind console"),
            ),
        };
        let console_addr = console
            .as_ref()
            .map(|l| l.local_addr().expect("console addr"));
        let prefix = config.rest.prefix.clone();
        let app = rowgate::cli::start(config).await.expect("start");
        let app_handle = app.clone();
        let (tx, rx) = oneshot::channel::<()>();
        let listeners = rowgate::server::Listeners {
            main: listener,
            console,
        };
        let task = tokio::spawn(rowgate::server::run_all(listeners, app, async move {
            let _ = rx.await;
        }));
        TestServer {
            addr,
            console_addr,
            base: format!("http://{addr}{prefix}"),
            client: reqwest::Client::new(),
            dir,
            db_path,
            app: app_handle,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// Calls the app as a service, without a socket (axum's `oneshot` habit), for tests about
    /// what the API answers rather than about the connection: `path` is under the REST
    /// prefix; the answer's status, headers and body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: &str,
    ) -> (u16, http::HeaderMap, bytes::Bytes) {
        use http_body_util::BodyExt as _;
        let request = http::Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.app.config.rest.prefix))
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(http_body_util::Full::new(bytes::Bytes::from(
                body.to_string(),
            )))
            .expect("request");
        let loopback = std::net::IpAddr::from([127, 0, 0, 1]);
        let response = rowgate::server::dispatch(&self.app, request, loopback).await;
        let (parts, body) = response.into_parts();
        let bytes = body.collect().await.expect("body").to_bytes();
        (parts.status.as_u16(), parts.headers, bytes)
    }

    /// `{base}{path}` — path starts with `/`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A URL outside the REST prefix.
    pub fn root_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.get(self.url(path))
    }

    pub fn post(&self, path: &str, body: serde_json::Value) -> reqwest::RequestBuilder {
        self.client.post(self.url(path)).json(&body)
    }

    pub fn patch(&self, path: &str, body: serde_json::Value) -> reqwest::RequestBuilder {
        self.client.patch(self.url(path)).json(&body)
    }

    pub fn put(&self, path: &str, body: serde_json::Value) -> reqwest::RequestBuilder {
        self.client.put(self.url(path)).json(&body)
    }

    pub fn delete(&self, path: &str) -> reqwest::RequestBuilder {
        self.client.delete(self.url(path))
    }

    /// Direct SQL on the database file (outside the server), for setup and checks.
    pub fn sql(&self) -> rusqlite::Connection {
        let conn = rusqlite::Connection::open(&self.db_path).expect("open");
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .expect("busy");
        conn
    }

    /// Stops accepting and waits for the server to drain.
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.expect("join").expect("server");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// The SQLite demo database's file (200 people), generated once per test process and copied
/// for each test.
fn sqlite_demo() -> &'static [u8] {
    static FILE: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    FILE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("demo.db");
        rowgate::demo::init(&path, 200, None).expect("demo init");
        std::fs::read(&path).expect("demo file")
    })
}

/// Runs SQL directly on a test database (setup and checks, outside the server): a SQLite file
/// or a PostgreSQL URL. Several statements may be given.
pub fn db_exec(db: &std::path::Path, sql: &str) {
    db_rows(db, sql);
}

/// The rows of SQL run directly on a test database, each cell as text (NULL → None). On SQLite
/// `LIKE` is made case-sensitive first, as the server does.
pub fn db_rows(db: &std::path::Path, sql: &str) -> Vec<Vec<Option<String>>> {
    let location = db.to_string_lossy().into_owned();
    if let rowgate::config::DbTarget::Postgres(location) =
        rowgate::config::DbTarget::parse(&location)
    {
        // Its own thread and runtime: callable from sync setup code and from async tests alike.
        return std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("runtime");
                    rt.block_on(async {
                        let (client, conn) =
                            tokio_postgres::connect(&location, tokio_postgres::NoTls)
                                .await
                                .expect("connect");
                        tokio::spawn(conn);
                        let mut rows = Vec::new();
                        for m in client
                            .simple_query(sql)
                            .await
                            .unwrap_or_else(|e| panic!("{sql}: {e}"))
                        {
                            if let tokio_postgres::SimpleQueryMessage::Row(r) = m {
                                rows.push(
                                    (0..r.len()).map(|i| r.get(i).map(str::to_string)).collect(),
                                );
                            }
                        }
                        rows
                    })
                })
                .join()
                .expect("thread")
        });
    }
    let conn = rusqlite::Connection::open(db).expect("open");
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .expect("busy");
    conn.execute_batch("PRAGMA case_sensitive_like = ON")
        .expect("pragma");
    // Several statements (setup): run them as a batch, no rows.
    if sql.trim().trim_end_matches(';').contains(';') {
        conn.execute_batch(sql)
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        return Vec::new();
    }
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let n = stmt.column_count();
    let mut rows = Vec::new();
    let mut q = stmt.raw_query();
    while let Some(r) = q.next().unwrap_or_else(|e| panic!("{sql}: {e}")) {
        rows.push(
            (0..n)
                .map(|i| match r.get_ref(i).expect("cell") {
                    rusqlite::types::ValueRef::Null => None,
                    rusqlite::types::ValueRef::Integer(v) => Some(v.to_string()),
                    rusqlite::types::ValueRef::Real(v) => Some(v.to_string()),
                    rusqlite::types::ValueRef::Text(t) => {
                        Some(String::from_utf8_lossy(t).into_owned())
                    }
                    rusqlite::types::ValueRef::Blob(b) => Some(format!("{b:?}")),
                })
                .collect(),
        );
    }
    rows
}

impl TestServer {
    /// [`db_exec`] on this server's database.
    pub fn exec(&self, sql: &str) {
        db_exec(&self.db_path, sql);
    }

    /// [`db_rows`] on this server's database.
    pub fn rows(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        db_rows(&self.db_path, sql)
    }

    /// The first column of a query as integers.
    pub fn ints(&self, sql: &str) -> Vec<i64> {
        self.rows(sql)
            .into_iter()
            .map(|r| {
                r[0].as_deref()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or_else(|| panic!("{sql}: {r:?}"))
            })
            .collect()
    }

    /// A query's single integer.
    pub fn int(&self, sql: &str) -> i64 {
        self.ints(sql)
            .first()
            .copied()
            .unwrap_or_else(|| panic!("{sql}: no row"))
    }
}

/// Writes `rowgate.toml` and `files` into `dir` and loads the configuration from there (its
/// database path still to be set).
pub fn write_config(
    dir: &std::path::Path,
    toml: &str,
    files: &[(&str, &str)],
) -> anyhow::Result<Config> {
    for (name, text) in files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().expect("parent"))?;
        std::fs::write(path, text)?;
    }
    let file = dir.join("rowgate.toml");
    std::fs::write(&file, toml)?;
    rowgate::config::load(rowgate::config::Layer::File(&file), |_| None, &[])
}

/// GETs `path` until the server answers 200 (a table created behind its back becomes reachable
/// once the schema cache reloads), asserting that it answers 404 meanwhile; gives up after 10 s.
pub async fn wait_until_served(s: &TestServer, path: &str) -> serde_json::Value {
    for _ in 0..100 {
        let (status, body) = get_json(s, path).await;
        if status == 200 {
            return body;
        }
        assert_eq!(status, 404, "{body}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("{path} was not served within 10 s");
}

/// GET `path` and return (status, JSON body).
pub async fn get_json(s: &TestServer, path: &str) -> (u16, serde_json::Value) {
    let r = s.get(path).send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(serde_json::Value::Null))
}

/// Asserts an error answer: status, JSON content type, and the code.
pub async fn assert_error(r: reqwest::Response, status: u16, code: &str) -> serde_json::Value {
    assert_eq!(r.status().as_u16(), status, "status");
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("application/json"), "content type {ct}");
    let body: serde_json::Value = r.json().await.expect("json error body");
    assert_eq!(body["code"], code, "body {body}");
    assert!(body["message"].is_string(), "message in {body}");
    body
}

/// Instantiates `async fn name(backend: Backend)` tests once per backend: SQLite and PostgreSQL.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Postgres).await
                }
            )*
        }
    };
}

/// Instantiates tests on SQLite only: a SQLite feature (inline reads), or a test not yet
/// written for both (the PostgreSQL issue lists them).
#[macro_export]
macro_rules! sqlite_tests {
    ($($name:ident),* $(,)?) => {
        mod sqlite_only {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::common::Backend::Sqlite).await
                }
            )*
        }
    };
}

/// Adds a client (as `rowgate clients add` does) and gets a token for it over HTTP.
pub async fn client_token(s: &TestServer, name: &str, role: &str) -> (String, String) {
    use serde_json::Value;
    let issued = rowgate::auth::clients::add(&s.app.db, &s.app.auth.secrets, name, role, 3600)
        .await
        .expect("add client");
    let r = token_request(s, &issued.client_id, &issued.client_secret).await;
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.expect("json");
    (
        issued.client_id,
        body["access_token"].as_str().expect("token").to_string(),
    )
}

pub async fn token_request(s: &TestServer, id: &str, secret: &str) -> reqwest::Response {
    s.client
        .post(s.root_url("/oauth/token"))
        .basic_auth(id, Some(secret))
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .expect("request")
}

/// Another process writing the database in steps: a python3 script (its `sqlite3` module)
/// that prints a line after each commit and waits for a line before going on.
pub struct SteppedWriter {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    acks: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
}

impl SteppedWriter {
    /// Starts `script` (python3 source).
    pub fn spawn(script: &str) -> SteppedWriter {
        let mut child = std::process::Command::new("python3")
            .args(["-c", script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("python3");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = child.stdout.take().expect("stdout");
        use std::io::BufRead as _;
        SteppedWriter {
            child,
            stdin,
            acks: std::io::BufReader::new(stdout).lines(),
        }
    }

    /// The line it printed after its next commit; `None` once it is done.
    pub fn committed(&mut self) -> Option<String> {
        self.acks.next().map(|line| line.expect("a line"))
    }

    /// Lets it go on to its next step.
    pub fn go_on(&mut self) {
        use std::io::Write as _;
        writeln!(self.stdin).expect("next step");
    }

    /// Waits for it to end, and checks that it succeeded.
    pub fn finish(mut self) {
        assert!(self.child.wait().expect("writer").success());
    }
}

/// The server's `/metrics` text.
pub async fn metrics_text(s: &TestServer) -> String {
    s.client
        .get(s.root_url("/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text")
}

/// Sends `request` on a fresh connection and returns the status of the answer's status line.
pub async fn raw_status(addr: std::net::SocketAddr, request: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    // The server may answer and close before it has read everything: ignore write errors.
    let _ = stream.write_all(request.as_bytes()).await;
    let mut head = vec![0u8; 64];
    let n = stream.read(&mut head).await.expect("read");
    let line = String::from_utf8_lossy(&head[..n]).to_string();
    line.split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line in {line:?}"))
}

/// Runs `install` while holding the machine-wide lock of the tests' installs (an exclusive lock
/// on `rowgate-test-installs.lock` in the temporary folder), so that test binaries and threads
/// running at once take turns: two `apt-get install` at once make one lose dpkg's lock, two
/// `npm ci` in one folder delete each other's files. `install` should look again for what it
/// installs first: another process may have installed it while this one waited.
pub fn installing<T>(install: impl FnOnce() -> T) -> T {
    let path = std::env::temp_dir().join("rowgate-test-installs.lock");
    // A lock file made by another user opens read-only, which is enough to lock it.
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .or_else(|_| std::fs::File::open(&path))
        .unwrap_or_else(|e| panic!("cannot open the install lock {}: {e}", path.display()));
    file.lock()
        .unwrap_or_else(|e| panic!("cannot lock {}: {e}", path.display()));
    // Unlocked when `file` is dropped, after `install`, even when it panics.
    install()
}

/// Runs `program script` in `dir` with `env`; the JSON it prints.
pub fn run_client_with(
    program: &std::path::Path,
    dir: &std::path::Path,
    script: &str,
    env: &[(&str, &str)],
) -> serde_json::Value {
    let out = std::process::Command::new(program)
        .arg(script)
        .current_dir(dir)
        .envs(env.iter().copied())
        .output()
        .expect("the client's interpreter");
    assert!(
        out.status.success(),
        "{} {script}: {}",
        program.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the script prints JSON")
}

/// The virtual environment of `clients/{name}` with its pinned `requirements.txt` installed
/// (made when missing; pip runs once per test process, under the tests' install lock); its
/// folder.
pub fn venv(name: &str) -> std::path::PathBuf {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../clients")
        .join(name);
    let python = dir.join(".venv/bin/python");
    installing(|| {
        if !python.exists() {
            let made = std::process::Command::new("python3")
                .args(["-m", "venv", ".venv"])
                .current_dir(&dir)
                .status()
                .expect("python3 is needed for the client tests");
            assert!(
                made.success(),
                "python3 -m venv in {} failed ({made}): install Debian's python3-venv",
                dir.display()
            );
        }
        let installed = std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
            ])
            .args(["-r", "requirements.txt"])
            .current_dir(&dir)
            .status()
            .expect("pip");
        assert!(
            installed.success(),
            "pip install in {} failed ({installed}): run `.venv/bin/python -m pip install -r requirements.txt` there to see why",
            dir.display()
        );
    });
    dir
}

/// `clients/js`, with its dependencies installed (`npm ci` from its lock file, once per test
/// process, when one of them is missing, under [`installing`]'s lock): the PostgREST and
/// Supabase clients, playwright-core, wscat (the README's realtime example).
pub fn js_clients() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../clients/js");
        let installed = || {
            ["@supabase/supabase-js", "playwright-core", "wscat"]
                .iter()
                .all(|package| dir.join("node_modules").join(package).exists())
        };
        if !installed() {
            installing(|| {
                if installed() {
                    return;
                }
                let status = std::process::Command::new("npm")
                    .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
                    .current_dir(&dir)
                    .status()
                    .expect("npm (Node.js) is needed for the client tests");
                assert!(
                    status.success(),
                    "npm ci in {} failed ({status}); run it there by hand to see why",
                    dir.display()
                );
            });
        }
        dir
    })
}

/// Whether the tests run as root (and so may install what they need).
pub fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.starts_with(b"0\n"))
}

/// The first of `paths` that exists, after installing Debian's `package` when none does and the
/// tests run as root (as `.ci/run` does). The install runs under [`installing`]'s lock and looks
/// again first; `apt-get update` runs first when apt does not know the package. A failure says
/// what to run.
pub fn debian_program(paths: &[&str], package: &str) -> std::path::PathBuf {
    let found = || {
        paths
            .iter()
            .map(std::path::PathBuf::from)
            .find(|p| p.exists())
    };
    if let Some(path) = found() {
        return path;
    }
    let by_hand = format!("apt-get update && apt-get install -y {package}");
    if !is_root() {
        panic!("this test needs Debian's {package} package at one of {paths:?}: run `{by_hand}` as root")
    }
    installing(|| {
        if let Some(path) = found() {
            return path;
        }
        let apt_get = |args: &[&str]| {
            std::process::Command::new("apt-get")
                .args(args)
                // wait for dpkg's lock held by anything else on the machine
                .args(["-o", "DPkg::Lock::Timeout=300"])
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .unwrap_or_else(|e| panic!("apt-get ({e}): this test needs Debian's {package} package at one of {paths:?}"))
        };
        let known = std::process::Command::new("apt-cache")
            .args(["show", "--quiet", package])
            .output()
            .is_ok_and(|o| o.status.success() && !o.stdout.is_empty());
        if !known {
            let status = apt_get(&["update", "-qq"]);
            assert!(
                status.success(),
                "apt-get update failed ({status}) before installing {package}: run `{by_hand}`"
            );
        }
        let status = apt_get(&["install", "-y", "-qq", package]);
        assert!(
            status.success(),
            "apt-get install {package} failed ({status}): run `{by_hand}`, then the tests again"
        );
        found().unwrap_or_else(|| {
            panic!("apt-get installed {package}, but none of {paths:?} exists: install the program there")
        })
    })
}
