//! 100,000 legitimate subscriptions over 10,000 sockets (issue 39): every join is accepted,
//! each change reaches only the subscribers of its value, matched through the index rather
//! than against all of them. A test binary of its own: the server is a child process (10,000
//! sockets on each side do not fit one process's 20,000 descriptors), and its load would
//! blur the memory measured by tests/realtime_limits.rs.

mod common;

use std::time::Instant;

use common::process::ServerProcess;
use common::ws::{connect, join, next};
use serde_json::json;

/// Realtime on `team` for the anonymous role, with room for every socket: no caps per
/// address (they all come from 127.0.0.1), more than 10,000 connections, short queues.
const CONFIG: &str = r#"
[limits]
max_connections = 20000
max_connections_per_address = 0

[realtime]
tables = ["team"]
poll_ms = 100
max_connections_per_address = 0
queue = 16

[[grants]]
role = "anon"
tables = ["team"]
ops = ["select", "insert", "update"]
"#;

/// The server, a child process: 10,000 sockets on each side do not fit one process's 20,000
/// descriptors. `ROWGATE_TEST_BINARY` measures a release build with the same test
/// (bench/RESULTS.md).
async fn serve_process() -> ServerProcess {
    let dir = tempfile::tempdir().expect("tempdir");
    rowgate::demo::init(&dir.path().join("demo.db"), 200, None).expect("demo");
    std::fs::write(dir.path().join("rowgate.toml"), CONFIG).expect("config");
    ServerProcess::start(dir, "demo.db").await
}

/// A counter or gauge of `/metrics`.
async fn metric(addr: &str, name: &str) -> f64 {
    let text = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .expect("metrics")
        .text()
        .await
        .expect("text");
    text.lines()
        .find_map(|l| {
            // `name{pid="…"} value`
            let rest = l.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once("} ")?.1,
                None => rest.strip_prefix(' ')?,
            };
            value.parse().ok()
        })
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

/// 10,000 sockets each join a channel of 10 `postgres_changes` on `team` filtered by a value
/// of their own (100,000 subscriptions, on values no row has); a few more follow team 1.
/// Every join is accepted, an update of team 1 reaches exactly its followers, and the time
/// the worker spent matching it (`rowgate_realtime_match_microseconds_total`) is printed: the
/// index finds the followers of team 1 without evaluating the 100,000 others.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_subscriptions_over_ten_thousand_sockets() {
    const SOCKETS: usize = 10_000;
    const EACH: usize = 10;
    let served = serve_process().await;
    let addr = served.addr.clone();
    let opened = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for batch in 0..100 {
        let (addr, tx) = (addr.clone(), tx.clone());
        tasks.spawn(async move {
            for socket_no in batch * (SOCKETS / 100)..(batch + 1) * (SOCKETS / 100) {
                let mut ws = connect(&addr).await;
                let filters: Vec<String> = (0..EACH)
                    .map(|i| format!("team_id=eq.{}", 1_000 + socket_no * EACH + i))
                    .collect();
                let reply = join(&mut ws, "mine", &filters).await;
                assert_eq!(reply[4]["status"], "ok", "{reply}");
                tx.send((socket_no, ws)).expect("kept");
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a batch of sockets");
    }
    drop(tx);
    let mut sockets = Vec::with_capacity(SOCKETS);
    while let Some(numbered) = rx.recv().await {
        sockets.push(numbered);
    }
    sockets.sort_by_key(|(n, _)| *n);
    assert_eq!(sockets.len(), SOCKETS);
    eprintln!("{SOCKETS} sockets joined in {:?}", opened.elapsed());
    let mut followers = Vec::new();
    for _ in 0..3 {
        let mut ws = connect(&addr).await;
        let reply = join(&mut ws, "team1", &["team_id=eq.1".to_string()]).await;
        assert_eq!(reply[4]["status"], "ok", "{reply}");
        followers.push(ws);
    }
    assert_eq!(
        metric(&addr, "rowgate_realtime_subscriptions").await,
        (SOCKETS * EACH + 3) as f64
    );
    let (changes, matched, frames) = (
        metric(&addr, "rowgate_realtime_changes_total").await,
        metric(&addr, "rowgate_realtime_match_microseconds_total").await,
        metric(&addr, "rowgate_realtime_frames_total").await,
    );
    let r = reqwest::Client::new()
        .patch(format!("http://{addr}/api/team?team_id=eq.1"))
        .json(&json!({"points": 4242}))
        .send()
        .await
        .expect("patch");
    assert_eq!(r.status(), 204);
    for ws in &mut followers {
        let event = next(ws).await;
        assert_eq!(event[4]["data"]["record"]["points"], 4242, "{event}");
    }
    let new_changes = metric(&addr, "rowgate_realtime_changes_total").await - changes;
    assert_eq!(new_changes, 1.0);
    // only the three followers got a frame
    assert_eq!(
        metric(&addr, "rowgate_realtime_frames_total").await - frames,
        3.0
    );
    let micros = metric(&addr, "rowgate_realtime_match_microseconds_total").await - matched;
    eprintln!(
        "matching one change against {} subscriptions: {micros} µs",
        SOCKETS * EACH + 3
    );
    // a socket of the 10,000 hears a row of its own value
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/api/team"))
        .json(&json!({"team_id": 1_000 + 7 * EACH + 3, "name": "Scale", "points": 0}))
        .send()
        .await
        .expect("insert");
    assert_eq!(r.status(), 201);
    let event = next(&mut sockets[7].1).await;
    assert_eq!(event[3], "postgres_changes", "{event}");
    assert_eq!(event[4]["data"]["record"]["team_id"], 1_000 + 7 * EACH + 3);
}
