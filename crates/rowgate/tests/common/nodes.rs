//! Rowgate nodes as an operator runs them, for the cluster tests (`cluster.rs`, `ha.rs`):
//! `rowgate serve` processes on free ports over one PostgreSQL, Debian's haproxy in front of
//! them, and a load of reads and writes through it that records every acknowledged write.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use super::debian_program;

pub const BIN: &str = env!("CARGO_BIN_EXE_rowgate");

/// Writes made by the load so far, across its phases (each team's name is new: names are
/// unique).
static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A process killed when the test ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A free port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// A Rowgate node on `port` in `dir`: the primary at `primary`, reads on `replicas`.
pub fn start_node(dir: &Path, port: u16, primary: &str, replicas: &[String]) -> Running {
    start_node_with(dir, port, primary, replicas, "")
}

/// [`start_node`] with `more` at the end of its configuration's `[db]` section.
pub fn start_node_with(
    dir: &Path,
    port: u16,
    primary: &str,
    replicas: &[String],
    more: &str,
) -> Running {
    std::fs::create_dir_all(dir).expect("node dir");
    let replicas: Vec<String> = replicas.iter().map(|r| format!("{r:?}")).collect();
    std::fs::write(
        dir.join("rowgate.toml"),
        format!(
            "listen = \"127.0.0.1:{port}\"\n\n[db]\nurl = {primary:?}\nreplicas = [{}]\n\
             replica_check_ms = 200\npool_size = 4\nacquire_timeout_ms = 1000\n{more}\n\n\
             [realtime]\ntables = [\"team\"]\n\n[[grants]]\nrole = \"anon\"\ntables = [\"*\"]\n\
             ops = [\"select\", \"insert\", \"update\", \"delete\"]\n",
            replicas.join(", ")
        ),
    )
    .expect("config");
    let child = Command::new(BIN)
        .current_dir(dir)
        .args(["serve", "--workers", "0"])
        // the master secret every node shares (tokens of one verify on the others)
        .env(
            "ROWGATE_AUTH_SECRET",
            "cluster-test-secret-of-at-least-32-bytes",
        )
        .env("ROWGATE_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("node.log")).expect("log"))
        .spawn()
        .expect("rowgate serve");
    Running(child)
}

/// Debian's haproxy on `port` in front of `nodes`, checking each every 200 ms (`/live`: a node
/// whose database is down still answers, with its own 503).
pub fn start_haproxy(dir: &Path, port: u16, nodes: &[u16]) -> Running {
    let program = debian_program(&["/usr/sbin/haproxy"], "haproxy");
    let servers: String = nodes
        .iter()
        .enumerate()
        .map(|(i, p)| format!("    server n{i} 127.0.0.1:{p} check\n"))
        .collect();
    let config = format!(
        "global\n    maxconn 2000\n\ndefaults\n    mode http\n    timeout connect 1s\n    \
         timeout client 30s\n    timeout server 30s\n    retries 3\n    option redispatch\n    \
         retry-on conn-failure empty-response\n\nfrontend api\n    bind 127.0.0.1:{port}\n    \
         default_backend nodes\n\nbackend nodes\n    balance roundrobin\n    \
         http-request disable-l7-retry if METH_POST || {{ method PATCH }}\n    \
         option httpchk GET /live\n    default-server inter 200ms fall 2 rise 2\n{servers}"
    );
    std::fs::write(dir.join("haproxy.cfg"), config).expect("haproxy.cfg");
    let child = Command::new(program)
        .args(["-db", "-f"])
        .arg(dir.join("haproxy.cfg"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("haproxy.log")).expect("log"))
        .spawn()
        .expect("haproxy");
    Running(child)
}

/// Waits until the nodes on `ports` are ready, then puts haproxy in front of them (its
/// configuration in `dir`); haproxy and its base URL, once it answers.
pub async fn behind_haproxy(dir: &Path, ports: &[u16]) -> (Running, String) {
    let client = reqwest::Client::new();
    for port in ports {
        wait_ok(&client, &format!("http://127.0.0.1:{port}/ready")).await;
    }
    let proxy = free_port();
    let haproxy = start_haproxy(dir, proxy, ports);
    let base = format!("http://127.0.0.1:{proxy}");
    wait_ok(&client, &format!("{base}/live")).await;
    (haproxy, base)
}

/// A realtime subscriber (Rowgate's protocol) of `team` on the node at `port`, subscribed.
pub async fn team_subscriber(
    port: u16,
) -> tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>> {
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{port}/realtime"))
        .await
        .expect("websocket");
    ws.send(Message::text(r#"{"type":"subscribe","table":"team"}"#))
        .await
        .expect("subscribe");
    let subscribed = next_json(&mut ws).await;
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    ws
}

/// Waits until `url` answers 200.
pub async fn wait_ok(client: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client.get(url).send().await {
            if r.status() == 200 {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{url} never answered 200");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the load saw.
#[derive(Default)]
pub struct Seen {
    /// Names of the teams whose insert was acknowledged (201).
    pub acked: Vec<String>,
    /// When each was sent.
    pub acked_at: Vec<Instant>,
    /// Requests answered, by phase.
    pub ok: usize,
    /// Requests that failed (no answer, or a status other than expected), with why.
    pub failed: Vec<String>,
    /// 503s with Retry-After (the primary down).
    pub unavailable: usize,
    /// Of them, reads.
    pub unavailable_reads: usize,
}

/// `clients` tasks reading and writing through `base` until `stop`, recording into `seen`.
pub fn load(
    base: &str,
    clients: usize,
    seen: &Arc<Mutex<Seen>>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..clients)
        .map(|c| {
            let (base, seen, stop) = (base.to_string(), seen.clone(), stop.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::builder()
                    .timeout(Duration::from_secs(10))
                    .build()
                    .expect("client");
                for i in 0usize.. {
                    if *stop.borrow() {
                        return;
                    }
                    let (request, name) = if i % 2 == 0 {
                        (
                            client.get(format!("{base}/api/team?select=name&limit=5")),
                            None,
                        )
                    } else {
                        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let name = format!("load-{c}-{n}");
                        let body = json!({"name": name, "points": i});
                        (
                            client.post(format!("{base}/api/team")).json(&body),
                            Some(name),
                        )
                    };
                    let sent = Instant::now();
                    let answer = request.send().await;
                    record(&seen, answer, name.map(|n| (n, sent)), i);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect()
}

/// One answer of the load, into `seen` (`write`: the team a write inserts, and when it was
/// sent).
pub fn record(
    seen: &Mutex<Seen>,
    answer: reqwest::Result<reqwest::Response>,
    write: Option<(String, Instant)>,
    i: usize,
) {
    let mut seen = seen.lock().expect("seen");
    match answer {
        Ok(r) if r.status() == 200 || r.status() == 201 => {
            seen.ok += 1;
            if let (true, Some((name, sent))) = (r.status() == 201, write) {
                seen.acked.push(name);
                seen.acked_at.push(sent);
            }
        }
        Ok(r) if r.status() == 503 && r.headers().contains_key("retry-after") => {
            seen.unavailable += 1;
            seen.unavailable_reads += usize::from(write.is_none());
        }
        Ok(r) => seen.failed.push(format!("{} (request {i})", r.status())),
        Err(e) => seen.failed.push(format!("{e}")),
    }
}

/// Runs the load for `time`; what it saw.
pub async fn under_load(
    base: &str,
    time: Duration,
    during: impl FnOnce() + Send + 'static,
) -> Seen {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let tasks = load(base, 4, &seen, &stopped);
    tokio::time::sleep(time / 4).await;
    tokio::task::spawn_blocking(during).await.expect("event");
    tokio::time::sleep(time * 3 / 4).await;
    stop.send_replace(true);
    for task in tasks {
        task.await.expect("client");
    }
    Arc::try_unwrap(seen)
        .ok()
        .expect("one owner")
        .into_inner()
        .expect("seen")
}

/// The next JSON text frame of a WebSocket (10 s at most).
pub async fn next_json<S>(ws: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .expect("a frame within 10 s")
            .expect("open")
            .expect("frame");
        if let Message::Text(text) = frame {
            return serde_json::from_str(text.as_str()).expect("json");
        }
    }
}
