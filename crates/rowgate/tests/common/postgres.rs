//! A real PostgreSQL for tests: one cluster per test process, made with the installed `initdb`
//! on a temporary directory and a free port, started with `postgres` under a watchdog that stops
//! it and removes its directory when the test process exits. Each test gets its own database.
//!
//! Run as root (CI), the server runs as the `postgres` user (`initdb` refuses root). When the
//! binaries are missing or the cluster cannot start, the test fails with the reason — it never
//! silently skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::is_root;

/// The running cluster.
pub struct PgCluster {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its data directory.
    pub dir: PathBuf,
}

static CLUSTER: OnceLock<Result<PgCluster, String>> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);

/// The process-wide cluster, started on first use.
pub fn cluster() -> &'static PgCluster {
    match CLUSTER.get_or_init(start) {
        Ok(c) => c,
        Err(e) => panic!("cannot start PostgreSQL for the tests: {e}"),
    }
}

/// A new empty database in the cluster; returns its connection URL.
pub fn new_database() -> String {
    let c = cluster();
    let name = next_name();
    psql(c.port, "postgres", &format!("CREATE DATABASE {name}"));
    c.url(&name)
}

/// The demo database of this test process (200 people), made once and copied for each test.
static DEMO_TEMPLATE: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();

/// A new database holding the demo data (200 people): a copy of a template loaded once per
/// test process (`CREATE DATABASE … TEMPLATE`, a file copy), not loaded again per test.
pub async fn new_demo_database() -> String {
    let c = cluster();
    let template = DEMO_TEMPLATE
        .get_or_init(|| async {
            let name = format!("demo_{}", std::process::id());
            psql(c.port, "postgres", &format!("CREATE DATABASE {name}"));
            rowgate::demo::postgres::init(&c.url(&name), 200)
                .await
                .expect("demo init");
            name
        })
        .await;
    let name = next_name();
    psql(
        c.port,
        "postgres",
        &format!("CREATE DATABASE {name} TEMPLATE {template}"),
    );
    c.url(&name)
}

/// A database name no other test of any test process uses.
fn next_name() -> String {
    format!(
        "t{}_{}",
        std::process::id(),
        NEXT_DB.fetch_add(1, Ordering::Relaxed)
    )
}

impl PgCluster {
    /// The URL of database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Stops the server (fast shutdown, as `pg_ctl stop -m fast` does) and keeps it down until
    /// [`PgCluster::start_again`]. Returns once it no longer accepts connections.
    pub fn stop(&self) {
        let base = self.dir.parent().expect("cluster base");
        std::fs::write(base.join("hold"), b"").expect("hold file");
        std::fs::write(base.join("held"), b"").expect("held file");
        stop_server(&self.dir);
    }

    /// Lets the watchdog start the server again after [`PgCluster::stop`]; returns once it
    /// accepts connections.
    pub fn start_again(&self) {
        let base = self.dir.parent().expect("cluster base");
        std::fs::remove_file(base.join("hold")).expect("hold file");
        let deadline = Instant::now() + Duration::from_secs(30);
        while !ready(self.port) {
            assert!(Instant::now() < deadline, "postgres did not start again");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Runs `command` (a server) as the server user under a shell that stops it (SIGINT) when the
/// test process is gone, and waits until it accepts connections on `port` (its `log` in the
/// failure); the shell's process.
pub fn watched(command: &str, port: u16, log: &Path, what: &str) -> std::process::Child {
    let script = format!(
        "{command} & server=$!; \
         while [ -d /proc/{parent} ] && kill -0 $server 2>/dev/null; do sleep 0.1; done; \
         kill -INT $server 2>/dev/null; wait $server",
        parent = std::process::id(),
    );
    let watchdog = shell_as_server_user(&script).unwrap_or_else(|e| panic!("starting {what}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !ready(port) {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        assert!(Instant::now() < deadline, "{what} did not start: {text}");
        std::thread::sleep(Duration::from_millis(50));
    }
    watchdog
}

/// Stops the server of data directory `dir` (fast shutdown, as `pg_ctl stop -m fast` does);
/// returns once it is gone.
pub fn stop_server(dir: &Path) {
    let pidfile = std::fs::read_to_string(dir.join("postmaster.pid")).expect("pid file");
    let pid = pidfile.lines().next().expect("pid").trim().to_string();
    let ok = Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill");
    assert!(ok.success(), "kill -INT {pid}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(Instant::now() < deadline, "postgres did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether the server on `port` accepts connections.
pub fn ready(port: u16) -> bool {
    Command::new(bin("pg_isready"))
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-U", "postgres"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs one SQL command with psql (setup, not the code under test); what it printed (unaligned,
/// tuples only).
pub fn psql(port: u16, db: &str, sql: &str) -> String {
    let out = Command::new(bin("psql"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-U",
            "postgres",
            "-d",
            db,
        ])
        .args(["-v", "ON_ERROR_STOP=1", "-qAt", "-c", sql])
        .output()
        .expect("psql");
    assert!(
        out.status.success(),
        "psql {sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The directory of the PostgreSQL server binaries.
pub fn bindir() -> Option<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|p| p.join("initdb").exists() && p.join("postgres").exists())
        .collect();
    found.sort();
    found.pop()
}

pub fn bin(name: &str) -> PathBuf {
    match bindir() {
        Some(dir) if dir.join(name).exists() => dir.join(name),
        _ => PathBuf::from(name),
    }
}

/// `cmd`, run as the postgres user when we are root.
pub fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// `path` and what is under it made the server user's when the tests run as root (the servers
/// run as that user).
pub fn give_to_server_user(path: &Path) {
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(path)
            .status()
            .expect("chown");
        assert!(ok.success(), "chown {} to postgres", path.display());
    }
}

/// `script` run by `/bin/sh` as the server user, detached from the test's standard streams.
pub fn shell_as_server_user(script: &str) -> std::io::Result<std::process::Child> {
    as_server_user(Path::new("/bin/sh"))
        .args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
}

/// A new cluster in `data` made by `initdb` (the server user's, trusting local connections of
/// `postgres`, UTF-8, the C locale).
pub fn initdb(initdb: &Path, data: &Path) -> Result<(), String> {
    let out = as_server_user(initdb)
        .arg("-D")
        .arg(data)
        .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C"])
        .arg("--no-sync")
        .output()
        .map_err(|e| format!("initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(())
}

pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| e.to_string())
}

fn start() -> Result<PgCluster, String> {
    let dir_root = bindir().ok_or(
        "no PostgreSQL server binaries under /usr/lib/postgresql (install the postgresql package)",
    )?;
    let base = std::env::temp_dir().join(format!("rowgate-pg-{}", std::process::id()));
    let data = base.join("data");
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    if is_root() {
        let ok = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(&base)
            .status()
            .map_err(|e| e.to_string())?;
        if !ok.success() {
            return Err("chown to postgres failed".into());
        }
    }
    initdb(&dir_root.join("initdb"), &data)?;
    let port = free_port()?;
    // The watchdog: starts postgres, and when this test process is gone (or postgres died),
    // stops it (fast shutdown) and removes the cluster directory. While a `hold` file exists
    // (see `PgCluster::stop`), a stopped postgres is left down; once it is removed, it is
    // started again on the same port.
    let script = format!(
        "run() {{ {postgres} -D {data} -p {port} -k {base} -c listen_addresses=127.0.0.1 \
           -c TimeZone=UTC -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
           -c max_connections=200 -c max_wal_senders=50 >>{base}/server.log 2>&1 & pg=$!; }}; run; \
         while [ -d /proc/{parent} ]; do \
           if ! kill -0 $pg 2>/dev/null; then \
             if [ -e {base}/hold ]; then sleep 0.05; continue; fi; \
             if [ -e {base}/held ]; then rm -f {base}/held; run; else break; fi; \
           fi; sleep 0.1; \
         done; \
         kill -INT $pg 2>/dev/null; wait $pg; rm -rf {base}",
        postgres = dir_root.join("postgres").display(),
        data = data.display(),
        base = base.display(),
        parent = std::process::id(),
    );
    shell_as_server_user(&script).map_err(|e| format!("starting postgres: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if ready(port) {
            break;
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(base.join("server.log")).unwrap_or_default();
            return Err(format!(
                "postgres did not become ready on port {port}: {log}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(PgCluster { port, dir: data })
}

/// A streaming replica of the process's cluster (`pg_basebackup -R`), on a port of its own,
/// stopped with the test process.
pub struct PgReplica {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its data directory.
    pub dir: PathBuf,
    /// The shell that runs it, and stops it when the test process is gone.
    _watchdog: std::process::Child,
}

static NEXT_REPLICA: AtomicU32 = AtomicU32::new(0);

/// A new hot standby of the cluster, streaming from it, once it accepts connections.
pub fn new_replica() -> PgReplica {
    let c = cluster();
    let base = c.dir.parent().expect("cluster base");
    let dir = base.join(format!(
        "replica-{}",
        NEXT_REPLICA.fetch_add(1, Ordering::Relaxed)
    ));
    // one base backup at a time: each takes two of the primary's WAL senders, and the
    // replicas streaming already take one each (`max_wal_senders`)
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = as_server_user(&bin("pg_basebackup"))
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &c.port.to_string(),
            "-U",
            "postgres",
        ])
        .arg("-D")
        .arg(&dir)
        .args(["-R", "-X", "stream", "--checkpoint=fast", "--no-sync"])
        .output()
        .expect("pg_basebackup");
    assert!(
        out.status.success(),
        "pg_basebackup: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let port = free_port().expect("port");
    let command = format!(
        "{postgres} -D {dir} -p {port} -k {dir} -c listen_addresses=127.0.0.1 -c TimeZone=UTC \
           -c fsync=off -c max_connections=200 -c max_wal_senders=50 -c hot_standby_feedback=on \
           -c max_standby_streaming_delay=-1 >>{dir}/server.log 2>&1",
        postgres = bin("postgres").display(),
        dir = dir.display(),
    );
    let watchdog = watched(&command, port, &dir.join("server.log"), "the replica");
    PgReplica {
        port,
        dir,
        _watchdog: watchdog,
    }
}

impl PgReplica {
    /// The URL of database `name` on the replica.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Waits until the replica holds database `name` (replicated from the primary).
    pub fn wait_for(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let found = Command::new(bin("psql"))
                .args([
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &self.port.to_string(),
                    "-U",
                    "postgres",
                ])
                .args(["-d", name, "-Atc", "SELECT 1 FROM team LIMIT 1"])
                .output()
                .is_ok_and(|o| o.status.success());
            if found {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "database {name} never reached the replica"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops applying the primary's changes (they still arrive).
    pub fn pause_replay(&self) {
        psql(self.port, "postgres", "SELECT pg_wal_replay_pause()");
    }

    /// Applies the primary's changes again.
    pub fn resume_replay(&self) {
        psql(self.port, "postgres", "SELECT pg_wal_replay_resume()");
    }

    /// Stops the replica (fast shutdown); returns once it no longer accepts connections.
    pub fn stop(&self) {
        stop_server(&self.dir);
    }
}

/// PgBouncer in front of the process's cluster, in transaction mode: each transaction takes a
/// server connection from a pool of `server_pool` and gives it back (prepared statements do not
/// survive that, as with Supabase's Supavisor on port 6543).
pub struct PgBouncer {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// The shell that runs it, and stops it when the test process is gone.
    _watchdog: std::process::Child,
}

/// A new PgBouncer (Debian's `pgbouncer`) in transaction mode with `server_pool` server
/// connections per database, once it accepts connections.
pub fn new_pgbouncer(server_pool: u32) -> PgBouncer {
    let c = cluster();
    let base = c.dir.parent().expect("cluster base");
    let dir = base.join(format!(
        "pgbouncer-{}",
        NEXT_REPLICA.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("pgbouncer dir");
    let port = free_port().expect("port");
    std::fs::write(dir.join("users.txt"), "\"postgres\" \"\"\n").expect("users");
    std::fs::write(
        dir.join("pgbouncer.ini"),
        format!(
            "[databases]\n* = host=127.0.0.1 port={primary}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\n\
             listen_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {dir}/users.txt\n\
             pool_mode = transaction\ndefault_pool_size = {server_pool}\nmax_client_conn = 500\n\
             logfile = {dir}/pgbouncer.log\npidfile = {dir}/pgbouncer.pid\n\
             ignore_startup_parameters = extra_float_digits,options\n",
            primary = c.port,
            dir = dir.display(),
        ),
    )
    .expect("pgbouncer.ini");
    give_to_server_user(&dir);
    let program =
        super::debian_program(&["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"], "pgbouncer");
    let command = format!("{} {}/pgbouncer.ini", program.display(), dir.display());
    let watchdog = watched(&command, port, &dir.join("pgbouncer.log"), "pgbouncer");
    PgBouncer {
        port,
        _watchdog: watchdog,
    }
}
