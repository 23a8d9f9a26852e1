//! A `rowgate serve --workers 0` child process (the process is the worker: its memory can be
//! read, and its descriptors are its own), on a folder the test prepared; killed when dropped.

use std::time::{Duration, Instant};

/// A server process.
pub struct ServerProcess {
    /// The process.
    pub child: std::process::Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    _dir: tempfile::TempDir,
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl ServerProcess {
    /// Serves the SQLite file `db` of `dir` (with `dir`'s `rowgate.toml`), once it answers
    /// `/live`. `ROWGATE_TEST_BINARY` names another binary to run (a release build).
    pub async fn start(dir: tempfile::TempDir, db: &str) -> ServerProcess {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let addr = format!("127.0.0.1:{port}");
        let binary = std::env::var("ROWGATE_TEST_BINARY")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rowgate").to_string());
        let child = std::process::Command::new(binary)
            .current_dir(dir.path())
            .args(["serve", "--db", db, "--workers", "0", "--listen", &addr])
            .env("ROWGATE_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn rowgate");
        let server = ServerProcess {
            child,
            base: format!("http://{addr}"),
            addr,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while !reqwest::get(format!("{}/live", server.base))
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            assert!(Instant::now() < deadline, "rowgate did not start serving");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        server
    }

    /// The process's peak resident memory so far, in bytes.
    pub fn peak(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).expect("status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
            .expect("VmHWM")
            * 1024
    }
}
