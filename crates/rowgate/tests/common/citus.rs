//! A Citus cluster for tests (distributed PostgreSQL): a coordinator and two workers, each a
//! PostgreSQL of the installed binaries with the `citus` extension preloaded, made with `initdb`
//! on free ports and run under the watchdog of the other clusters (stopped when the test
//! process ends). One cluster per test process; each test gets its own database, with the
//! extension on every node and the workers added to the coordinator.
//!
//! Citus is not a Debian package: `../shared/tools/build-citus.sh` (which `.ci/run` calls)
//! builds and installs it. Without it a test fails saying so; it never skips.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};

use super::postgres::{bin, free_port, initdb, psql, stop_server, watched};

/// One server of the cluster.
pub struct CitusNode {
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Its data directory.
    pub dir: PathBuf,
    /// The server's command line (run again by [`CitusNode::start`]).
    command: String,
    /// The shell running it (none while stopped).
    watchdog: Mutex<Option<std::process::Child>>,
}

/// The coordinator and its workers.
pub struct CitusCluster {
    pub coordinator: CitusNode,
    pub workers: Vec<CitusNode>,
}

static CLUSTER: OnceLock<Result<CitusCluster, String>> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(0);
static NEXT_CLUSTER: AtomicU32 = AtomicU32::new(0);

/// The process's shared cluster, started on first use; panics with the reason when Citus is
/// not installed or a server cannot start.
pub fn cluster() -> &'static CitusCluster {
    match CLUSTER.get_or_init(start) {
        Ok(c) => c,
        Err(e) => panic!("cannot start the Citus cluster for the tests: {e}"),
    }
}

/// A cluster of the test's own (one that stops a node must not disturb the others').
pub fn own_cluster() -> CitusCluster {
    start().unwrap_or_else(|e| panic!("cannot start a Citus cluster for the test: {e}"))
}

/// Where the installed PostgreSQL keeps its extensions' libraries.
fn library_dir() -> PathBuf {
    let out = std::process::Command::new(bin("pg_config"))
        .arg("--pkglibdir")
        .output();
    match out {
        Ok(out) if out.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
        }
        _ => bin("postgres").parent().and_then(Path::parent).map_or_else(
            || PathBuf::from("/usr/lib/postgresql/15/lib"),
            |d| d.join("lib"),
        ),
    }
}

/// The shared tool that builds and installs Citus (beside the repository).
fn build_tool() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/tools/build-citus.sh")
}

/// Installs Citus when it is missing and the tests run as root (as `.ci/run` does): Debian's
/// PostgreSQL 15 brought to the version of its headers (the vendored source builds against
/// 15.20), then the shared tool's build.
fn install() -> Result<(), String> {
    let missing = || !library_dir().join("citus.so").exists();
    if !missing() {
        return Ok(());
    }
    let tool = build_tool();
    if !super::is_root() || !tool.exists() {
        return Err(format!(
            "Citus is not installed ({} has no citus.so): run {} as root (.ci/run does)",
            library_dir().display(),
            tool.display()
        ));
    }
    super::installing(|| {
        if !missing() {
            return Ok(());
        }
        let run = |program: &str, args: &[&str]| -> Result<(), String> {
            let status = std::process::Command::new(program)
                .args(args)
                .env("DEBIAN_FRONTEND", "noninteractive")
                .status()
                .map_err(|e| format!("{program}: {e}"))?;
            status
                .success()
                .then_some(())
                .ok_or_else(|| format!("{program} {args:?} failed ({status})"))
        };
        run("apt-get", &["update", "-qq"])?;
        run(
            "apt-get",
            &[
                "install",
                "-y",
                "-qq",
                "-o",
                "DPkg::Lock::Timeout=300",
                "postgresql-15",
                "postgresql-client-15",
                "libpq5",
                "postgresql-server-dev-15",
            ],
        )?;
        run(&tool.to_string_lossy(), &[])
    })
}

fn start() -> Result<CitusCluster, String> {
    install()?;
    let base = std::env::temp_dir().join(format!(
        "rowgate-citus-{}-{}",
        std::process::id(),
        NEXT_CLUSTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&base).map_err(|e| e.to_string())?;
    super::postgres::give_to_server_user(&base);
    // the folder goes once the test process and then its servers are gone
    super::postgres::shell_as_server_user(&format!(
        "while [ -d /proc/{pid} ]; do sleep 0.5; done; \
         while [ -n \"$(ls {base}/*/postmaster.pid 2>/dev/null)\" ]; do sleep 0.2; done; \
         rm -rf {base}",
        pid = std::process::id(),
        base = base.display()
    ))
    .map_err(|e| format!("cleanup: {e}"))?;
    let node = |name: &str| -> Result<CitusNode, String> {
        let dir = base.join(name);
        initdb(&bin("initdb"), &dir)?;
        let port = free_port()?;
        let command = format!(
            "{postgres} -D {dir} -p {port} -k {dir} -c listen_addresses=127.0.0.1 \
             -c shared_preload_libraries=citus -c TimeZone=UTC -c fsync=off \
             -c synchronous_commit=off -c full_page_writes=off -c max_connections=200 \
             -c max_prepared_transactions=200 >>{dir}/server.log 2>&1",
            postgres = bin("postgres").display(),
            dir = dir.display(),
        );
        let node = CitusNode {
            port,
            dir,
            command,
            watchdog: Mutex::new(None),
        };
        node.start();
        Ok(node)
    };
    let coordinator = node("coordinator")?;
    let workers = vec![node("worker1")?, node("worker2")?];
    Ok(CitusCluster {
        coordinator,
        workers,
    })
}

impl CitusNode {
    /// Starts the server (again); returns once it accepts connections.
    pub fn start(&self) {
        let log = self.dir.join("server.log");
        let child = watched(&self.command, self.port, &log, "a Citus node");
        *self.watchdog.lock().expect("watchdog") = Some(child);
    }

    /// Stops the server (fast shutdown); returns once it is gone.
    pub fn stop(&self) {
        stop_server(&self.dir);
        if let Some(mut child) = self.watchdog.lock().expect("watchdog").take() {
            let _ = child.wait();
        }
    }

    /// The URL of its database `name`.
    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }
}

impl CitusCluster {
    /// A new database on every node with the `citus` extension, the coordinator in the
    /// metadata (it holds the reference tables) and both workers added; the coordinator's URL.
    pub fn new_database(&self) -> String {
        let name = format!(
            "c{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        for node in std::iter::once(&self.coordinator).chain(&self.workers) {
            psql(node.port, "postgres", &format!("CREATE DATABASE {name}"));
            psql(node.port, &name, "CREATE EXTENSION citus");
        }
        let mut setup = format!(
            "SELECT citus_set_coordinator_host('127.0.0.1', {});",
            self.coordinator.port
        );
        for worker in &self.workers {
            setup.push_str(&format!(
                "SELECT citus_add_node('127.0.0.1', {});",
                worker.port
            ));
        }
        psql(self.coordinator.port, &name, &setup);
        self.coordinator.url(&name)
    }
}
