//! A cluster on one machine, as an operator would run it: a PostgreSQL primary with two
//! streaming replicas (`pg_basebackup`), three Rowgate nodes (`serve --workers 0`, reads on the
//! replicas) and Debian's haproxy in front, health-checking them. Under a mixed load of reads
//! and writes through haproxy: a realtime subscriber on one node receives a write made through
//! another; a node killed with SIGKILL costs at most the requests in flight on it and no
//! acknowledged write; a replica that stops costs no request; a primary restart answers writes
//! 503 with `Retry-After`, reads go on from the replicas, and writes work again by themselves.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::postgres::{cluster, new_demo_database, new_replica};
use common::{db_rows, debian_program};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

const BIN: &str = env!("CARGO_BIN_EXE_rowgate");

/// Writes made by the load so far, across its phases (each team's name is new: names are
/// unique).
static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A process killed when the test ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port")
}

/// A Rowgate node on `port` in `dir`: the primary at `primary`, reads on `replicas`.
fn start_node(dir: &Path, port: u16, primary: &str, replicas: &[String]) -> Running {
    std::fs::create_dir_all(dir).expect("node dir");
    let replicas: Vec<String> = replicas.iter().map(|r| format!("{r:?}")).collect();
    std::fs::write(
        dir.join("rowgate.toml"),
        format!(
            "listen = \"127.0.0.1:{port}\"\n\n[db]\nurl = {primary:?}\nreplicas = [{}]\n\
             replica_check_ms = 200\npool_size = 4\nacquire_timeout_ms = 1000\n\n\
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
fn start_haproxy(dir: &Path, port: u16, nodes: &[u16]) -> Running {
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

/// Waits until `url` answers 200.
async fn wait_ok(client: &reqwest::Client, url: &str) {
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
struct Seen {
    /// Names of the teams whose insert was acknowledged (201).
    acked: Vec<String>,
    /// Requests answered, by phase.
    ok: usize,
    /// Requests that failed (no answer, or a status other than expected), with why.
    failed: Vec<String>,
    /// 503s with Retry-After (the primary down).
    unavailable: usize,
}

/// `clients` tasks reading and writing through `base` until `stop`, recording into `seen`.
fn load(
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
                    let answer = request.send().await;
                    record(&seen, answer, name, i);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        })
        .collect()
}

/// One answer of the load, into `seen` (`name`: the team a write inserts).
fn record(
    seen: &Mutex<Seen>,
    answer: reqwest::Result<reqwest::Response>,
    name: Option<String>,
    i: usize,
) {
    let mut seen = seen.lock().expect("seen");
    match answer {
        Ok(r) if r.status() == 200 || r.status() == 201 => {
            seen.ok += 1;
            if let (true, Some(name)) = (r.status() == 201, name) {
                seen.acked.push(name);
            }
        }
        Ok(r) if r.status() == 503 && r.headers().contains_key("retry-after") => {
            seen.unavailable += 1;
        }
        Ok(r) => seen.failed.push(format!("{} (request {i})", r.status())),
        Err(e) => seen.failed.push(format!("{e}")),
    }
}

/// Runs the load for `time`; what it saw.
async fn under_load(base: &str, time: Duration, during: impl FnOnce() + Send + 'static) -> Seen {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_survives_node_replica_and_primary_failures() {
    let started = Instant::now();
    let primary = new_demo_database().await;
    let name = primary.rsplit('/').next().expect("database").to_string();
    let replicas = [new_replica(), new_replica()];
    for replica in &replicas {
        replica.wait_for(&name);
    }
    let replica_urls: Vec<String> = replicas.iter().map(|r| r.url(&name)).collect();
    let work = tempfile::tempdir().expect("tempdir");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes: Vec<Option<Running>> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let dir = work.path().join(format!("node{i}"));
            Some(start_node(&dir, *port, &primary, &replica_urls))
        })
        .collect();
    let client = reqwest::Client::new();
    for port in &ports {
        wait_ok(&client, &format!("http://127.0.0.1:{port}/ready")).await;
    }
    let proxy = free_port();
    let _haproxy = start_haproxy(work.path(), proxy, &ports);
    let base = format!("http://127.0.0.1:{proxy}");
    wait_ok(&client, &format!("{base}/live")).await;

    // realtime: a subscriber on node 0 receives a write made through node 2
    let (mut ws, _) =
        tokio_tungstenite::connect_async(format!("ws://127.0.0.1:{}/realtime", ports[0]))
            .await
            .expect("websocket");
    ws.send(Message::text(r#"{"type":"subscribe","table":"team"}"#))
        .await
        .expect("subscribe");
    let subscribed = next_json(&mut ws).await;
    assert_eq!(subscribed["type"], "subscribed", "{subscribed}");
    let r = client
        .post(format!("http://127.0.0.1:{}/api/team", ports[2]))
        .json(&json!({"name": "Across nodes", "points": 1}))
        .send()
        .await
        .expect("write on node 2");
    assert_eq!(r.status(), 201);
    let event = next_json(&mut ws).await;
    assert_eq!(event["op"], "insert", "{event}");
    assert_eq!(event["row"]["name"], "Across nodes", "{event}");

    // node 1 killed outright under load: at most the requests in flight on it fail
    let killed = nodes[1].take().expect("node 1");
    let seen = under_load(&base, Duration::from_secs(4), move || drop(killed)).await;
    assert!(
        seen.failed.len() <= 4,
        "more than the in-flight requests failed: {:?}",
        seen.failed
    );
    assert!(seen.ok > 50, "{} requests answered", seen.ok);
    let mut acked = seen.acked;

    // a replica stops under load: no request fails
    let [stopping, _left] = replicas;
    let seen = under_load(&base, Duration::from_secs(3), move || stopping.stop()).await;
    assert!(seen.failed.is_empty(), "{:?}", seen.failed);
    assert_eq!(seen.unavailable, 0);
    acked.extend(seen.acked);

    // the primary restarts under load: writes answer 503 with Retry-After meanwhile, reads go
    // on from the replica left, nothing else fails, and writes work again by themselves
    let seen = under_load(&base, Duration::from_secs(4), || {
        cluster().stop();
        std::thread::sleep(Duration::from_secs(1));
        cluster().start_again();
    })
    .await;
    assert!(seen.failed.is_empty(), "{:?}", seen.failed);
    assert!(
        seen.unavailable > 0,
        "no write was refused while the primary was down"
    );
    acked.extend(seen.acked);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client
            .post(format!("{base}/api/team"))
            .json(&json!({"name": "After the restart", "points": 1}))
            .send()
            .await
            .expect("write");
        if r.status() == 201 {
            break;
        }
        assert_eq!(r.status(), 503, "{}", r.text().await.unwrap_or_default());
        assert!(Instant::now() < deadline, "writes never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // no acknowledged write was lost
    let stored: Vec<String> = db_rows(
        &PathBuf::from(&primary),
        "SELECT name FROM team WHERE name LIKE 'load-%'",
    )
    .into_iter()
    .filter_map(|row| row.into_iter().next().flatten())
    .collect();
    let missing: Vec<&String> = acked.iter().filter(|n| !stored.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not stored: {missing:?}"
    );
    assert!(acked.len() > 20, "{} writes acknowledged", acked.len());
    assert!(
        started.elapsed() < Duration::from_secs(180),
        "{:?}",
        started.elapsed()
    );
}

/// The next JSON text frame of a WebSocket (10 s at most).
async fn next_json<S>(ws: &mut S) -> Value
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
