//! High availability on PostgreSQL (issue 43), as an operator would run it: three PostgreSQL
//! members under Patroni and etcd with synchronous replication (`common::patroni`), three
//! Rowgate nodes following the primary (`db.url` lists every member with
//! `target_session_attrs=read-write`; reads on the members as replicas), haproxy in front of
//! the nodes. Under a steady load of reads and writes with every acknowledged write recorded,
//! the primary's machine is killed (SIGKILL: Patroni and PostgreSQL), then a Rowgate node, a
//! replica's machine and an etcd member; every acknowledged write is in the database at the
//! end, the failover time is printed, and a realtime subscriber on a node that stays receives
//! every committed insert once, in the change log's order, across the failover. Supabase
//! channels span the nodes: every broadcast sent through one node reaches a member on another,
//! in order, across the failover; presence converges, and the presence of the killed node
//! leaves.

mod common;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use common::nodes::{behind_haproxy, free_port, load, start_node_with, team_subscriber, Seen};
use common::patroni::HaCluster;
use common::ws::Socket;
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use tokio_tungstenite::tungstenite::Message;

/// A member of the Supabase channel `realtime:room` on the node at `port`, following presence
/// as `key`, its join answered and the presence state read (returned).
async fn member(port: u16, key: &str) -> (Socket, Value) {
    let mut ws = common::ws::connect(&format!("127.0.0.1:{port}")).await;
    let config = json!({"broadcast": {"ack": false, "self": false},
        "presence": {"enabled": true, "key": key}, "postgres_changes": [], "private": false});
    let join = json!(["1", "1", "realtime:room", "phx_join", {"config": config}]);
    ws.send(Message::text(join.to_string()))
        .await
        .expect("join");
    let reply = common::ws::next(&mut ws).await;
    assert_eq!(reply[4]["status"], "ok", "{reply}");
    let state = common::ws::next(&mut ws).await;
    assert_eq!(state[3], "presence_state", "{state}");
    (ws, state[4].clone())
}

/// `ws` tracks its presence with `payload`.
async fn track(ws: &mut Socket, payload: Value) {
    let track = json!({"type": "presence", "event": "track", "payload": payload});
    ws.send(Message::text(
        json!(["1", "2", "realtime:room", "presence", track]).to_string(),
    ))
    .await
    .expect("track");
}

/// Every text frame of `ws` as it comes, into a list (with when it came).
fn collect(ws: futures_util::stream::SplitStream<Socket>) -> Arc<Mutex<Vec<(Instant, Value)>>> {
    let frames: Arc<Mutex<Vec<(Instant, Value)>>> = Arc::default();
    let into = frames.clone();
    tokio::spawn(async move {
        let mut ws = ws;
        while let Some(Ok(frame)) = ws.next().await {
            if let Message::Text(text) = frame {
                if let Ok(v) = serde_json::from_str::<Value>(text.as_str()) {
                    into.lock().expect("frames").push((Instant::now(), v));
                }
            }
        }
    });
    frames
}

/// The keys of a presence state.
fn keys(state: &Value) -> Vec<String> {
    let mut keys: Vec<String> = state
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    keys.sort();
    keys
}

/// Adds a team through the node at `port`; the position its write committed at.
async fn add_team(client: &reqwest::Client, port: u16, name: &str, points: i64) -> String {
    let written = client
        .post(format!("http://127.0.0.1:{port}/api/team"))
        .json(&json!({"name": name, "points": points}))
        .send()
        .await
        .expect("write");
    assert_eq!(written.status(), 201);
    written.headers()["rowgate-position"]
        .to_str()
        .expect("position")
        .to_string()
}

/// The acknowledged writes of `seen` sent after `since`: their count and the first one's
/// sending time.
fn acked_after(seen: &Mutex<Seen>, since: Instant) -> (usize, Option<Instant>) {
    let seen = seen.lock().expect("seen");
    let after: Vec<Instant> = seen
        .acked_at
        .iter()
        .copied()
        .filter(|t| *t > since)
        .collect();
    (after.len(), after.into_iter().min())
}

/// When the last write acknowledged of those sent before `at` was sent.
fn last_acked_before(seen: &Mutex<Seen>, at: Instant) -> Option<Instant> {
    let seen = seen.lock().expect("seen");
    seen.acked_at.iter().copied().filter(|t| *t <= at).max()
}

/// Waits (the load running) until `n` writes sent after `since` are acknowledged; when the
/// first of them was sent.
async fn writes_after(seen: &Mutex<Seen>, since: Instant, n: usize, what: &str) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let (count, Some(first)) = acked_after(seen, since) {
            if count >= n {
                return first;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no writes within 60 s after {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_loses_no_acknowledged_write() {
    let ha = tokio::task::spawn_blocking(HaCluster::start)
        .await
        .expect("cluster");
    ha.psql("postgres", "CREATE DATABASE app");
    ha.psql(
        "app",
        "CREATE TABLE team (team_id bigserial PRIMARY KEY, name text NOT NULL UNIQUE, \
         points int NOT NULL DEFAULT 0)",
    );
    let members: Vec<String> = (0..3).map(|i| ha.member_url(i, "app")).collect();
    let work = tempfile::tempdir().expect("tempdir");
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let mut nodes: Vec<Option<common::nodes::Running>> = ports
        .iter()
        .enumerate()
        .map(|(i, port)| {
            let dir = work.path().join(format!("node{i}"));
            Some(start_node_with(&dir, *port, &ha.url("app"), &members, ""))
        })
        .collect();
    let (_haproxy, base) = behind_haproxy(work.path(), &ports).await;

    // a realtime subscriber on node 0, which stays up throughout
    let mut ws = team_subscriber(ports[0]).await;
    let events: Arc<Mutex<Vec<Value>>> = Arc::default();
    let listening = {
        let events = events.clone();
        tokio::spawn(async move {
            use futures_util::StreamExt as _;
            while let Some(Ok(frame)) = ws.next().await {
                if let Message::Text(text) = frame {
                    if let Ok(event) = serde_json::from_str::<Value>(text.as_str()) {
                        events.lock().expect("events").push(event);
                    }
                }
            }
        })
    };

    // Supabase channel members: a watcher on node 0, a speaker on node 2 that broadcasts
    // throughout, and one on node 1, which will be killed; each present
    let (mut watcher, _) = member(ports[0], "watcher").await;
    track(&mut watcher, json!({"node": 0})).await;
    let (watcher_out, watcher_in) = watcher.split();
    let heard = collect(watcher_in);
    let (mut doomed, _) = member(ports[1], "doomed").await;
    track(&mut doomed, json!({"node": 1})).await;
    let (mut speaker, _) = member(ports[2], "speaker").await;
    track(&mut speaker, json!({"node": 2})).await;
    let (mut speaker_out, speaker_in) = speaker.split();
    // (its acknowledgements are read, or they would fill its queue)
    let _speaker_replies = collect(speaker_in);
    let (quiet, quieted) = tokio::sync::watch::channel(false);
    let speaking = tokio::spawn(async move {
        let mut sent = 0u64;
        while !*quieted.borrow() {
            let message = json!({"type": "broadcast", "event": "n", "payload": {"n": sent}});
            let frame = json!(["1", sent.to_string(), "realtime:room", "broadcast", message]);
            if speaker_out
                .send(Message::text(frame.to_string()))
                .await
                .is_err()
            {
                break;
            }
            sent += 1;
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        (sent, speaker_out)
    });

    // a steady load through haproxy
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let tasks = load(&base, 4, &seen, &stopped);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = seen.lock().expect("seen").acked.len();
    assert!(
        before > 10,
        "{before} writes acknowledged before the failover"
    );

    // a write before the failover, and the position it committed at (timeline 1)
    let client = reqwest::Client::new();
    let position = add_team(&client, ports[0], "before the failover", 1).await;
    assert!(position.starts_with("1:"), "{position}");

    // the primary's machine dies
    let old_leader = ha.leader().expect("a leader");
    ha.kill_member(old_leader);
    let killed = Instant::now();
    let resumed = writes_after(&seen, killed, 5, "the primary's death").await;
    let last = last_acked_before(&seen, killed).expect("a write before");
    let new_leader = ha.leader();
    eprintln!(
        "failover: the primary (m{old_leader}) killed; writes resumed {:.1} s after its death \
         ({:.1} s after the last write before it); new leader {new_leader:?}",
        resumed.duration_since(killed).as_secs_f64(),
        resumed.duration_since(last).as_secs_f64(),
    );
    assert!(
        resumed.duration_since(killed) < Duration::from_secs(30),
        "writes resumed only after {:?}",
        resumed.duration_since(killed)
    );

    // read-your-writes across the failover: a read carrying the old timeline's position sees
    // the write (no standby is taken to have it: the new primary answers), and writes now
    // answer positions of the new timeline
    let read = client
        .get(format!(
            "http://127.0.0.1:{}/api/team?name=eq.before%20the%20failover&select=points",
            ports[2]
        ))
        .header("Rowgate-Position", &position)
        .send()
        .await
        .expect("read");
    assert_eq!(read.status(), 200);
    assert_eq!(
        read.json::<Value>().await.expect("json"),
        json!([{"points": 1}])
    );
    let newer = add_team(&client, ports[2], "after the failover", 2).await;
    assert!(newer.starts_with("2:"), "{newer} after {position}");

    // a Rowgate node dies
    drop(nodes[1].take());
    drop(doomed);
    let at = Instant::now();
    let node_killed = at;
    writes_after(&seen, at, 10, "a node's death").await;

    // a replica's machine dies (the leader left alone)
    let leader = ha.leader().expect("a leader after the failover");
    let replica = (0..3)
        .find(|i| *i != leader && *i != old_leader)
        .expect("a replica left");
    ha.kill_member(replica);
    let at = Instant::now();
    writes_after(&seen, at, 10, "a replica's death").await;

    // an etcd member dies
    ha.kill_etcd(0);
    let at = Instant::now();
    writes_after(&seen, at, 10, "an etcd member's death").await;

    stop.send_replace(true);
    quiet.send_replace(true);
    let (sent, _speaker_out) = speaking.await.expect("speaker");
    for task in tasks {
        task.await.expect("client");
    }
    let seen = Arc::try_unwrap(seen)
        .ok()
        .expect("one owner")
        .into_inner()
        .expect("seen");

    // no acknowledged write was lost
    let stored: Vec<String> = ha
        .psql("app", "SELECT name FROM team ORDER BY team_id")
        .lines()
        .map(str::to_string)
        .collect();
    let stored_set: HashSet<&String> = stored.iter().collect();
    let missing: Vec<&String> = seen
        .acked
        .iter()
        .filter(|n| !stored_set.contains(n))
        .collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not stored: {missing:?}"
    );
    eprintln!(
        "load: {} writes acknowledged, {} answers in all, {} answered 503 (Retry-After) during \
         the failover ({} of them reads), {} failed: {:?}",
        seen.acked.len(),
        seen.ok,
        seen.unavailable,
        seen.unavailable_reads,
        seen.failed.len(),
        seen.failed
    );
    // only requests in flight on the killed node may fail outright, and reads go on from
    // the standbys while no primary takes writes
    assert!(seen.failed.len() <= 4, "{:?}", seen.failed);
    assert_eq!(seen.unavailable_reads, 0, "reads answered 503");

    // the subscriber on node 0 received every committed insert once, in the log's order
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let received = events
            .lock()
            .expect("events")
            .iter()
            .filter(|e| e["op"] == "insert")
            .count();
        if received >= stored.len() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    listening.abort();
    let events = events.lock().expect("events").clone();
    let inserts: Vec<&Value> = events.iter().filter(|e| e["op"] == "insert").collect();
    let ids: Vec<i64> = inserts.iter().filter_map(|e| e["id"].as_i64()).collect();
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "events out of order or repeated: {ids:?}"
    );
    let received: HashSet<String> = inserts
        .iter()
        .filter_map(|e| e["row"]["name"].as_str().map(str::to_string))
        .collect();
    let unseen: Vec<&String> = stored.iter().filter(|n| !received.contains(*n)).collect();
    assert!(
        unseen.is_empty(),
        "{} committed inserts never reached the subscriber: {unseen:?}; other frames: {:?}",
        unseen.len(),
        events
            .iter()
            .filter(|e| e["op"] != "insert")
            .collect::<Vec<_>>()
    );
    assert_eq!(inserts.len(), stored.len(), "an insert delivered twice");

    // every broadcast sent through node 2 reached the watcher on node 0, once, in order
    let deadline = Instant::now() + Duration::from_secs(20);
    let numbers = || -> Vec<u64> {
        heard
            .lock()
            .expect("heard")
            .iter()
            .filter(|(_, f)| f[3] == "broadcast")
            .filter_map(|(_, f)| f[4]["payload"]["n"].as_u64())
            .collect()
    };
    while (numbers().len() as u64) < sent && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let numbers = numbers();
    assert_eq!(
        numbers,
        (0..sent).collect::<Vec<u64>>(),
        "the broadcasts heard on node 0 ({} of {sent})",
        numbers.len()
    );
    eprintln!("channels: {sent} broadcasts sent through node 2, all heard on node 0 in order");

    // presence: the watcher heard the others join, and the killed node's member leave
    let doomed_left = || {
        heard
            .lock()
            .expect("heard")
            .iter()
            .any(|(_, f)| f[3] == "presence_diff" && f[4]["leaves"].get("doomed").is_some())
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !doomed_left() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let frames = heard.lock().expect("heard").clone();
    let diffs: Vec<&(Instant, Value)> = frames
        .iter()
        .filter(|(_, f)| f[3] == "presence_diff")
        .collect();
    let joined = |key: &str| diffs.iter().any(|(_, f)| f[4]["joins"].get(key).is_some());
    assert!(joined("speaker") && joined("doomed"), "{diffs:?}");
    let left = diffs
        .iter()
        .find(|(_, f)| f[4]["leaves"].get("doomed").is_some())
        .unwrap_or_else(|| panic!("the killed node's presence never left: {diffs:?}"));
    eprintln!(
        "presence: the killed node's member left {:.1} s after its node died",
        left.0.duration_since(node_killed).as_secs_f64()
    );
    // the lists converge: a newcomer on either node left sees the same members
    let (_, on_0) = member(ports[0], "late0").await;
    let (_, on_2) = member(ports[2], "late2").await;
    assert_eq!(keys(&on_0), ["speaker", "watcher"], "{on_0}");
    assert_eq!(keys(&on_2), ["speaker", "watcher"], "{on_2}");
    drop(watcher_out);
    drop(nodes);
}
