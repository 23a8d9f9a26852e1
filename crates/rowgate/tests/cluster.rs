//! A cluster on one machine, as an operator would run it: a PostgreSQL primary with two
//! streaming replicas (`pg_basebackup`), three Rowgate nodes (`serve --workers 0`, reads on the
//! replicas) and Debian's haproxy in front, health-checking them. Under a mixed load of reads
//! and writes through haproxy: a realtime subscriber on one node receives a write made through
//! another; a node killed with SIGKILL costs at most the requests in flight on it and no
//! acknowledged write; a replica that stops costs no request; a primary restart answers writes
//! 503 with `Retry-After`, reads go on from the replicas, and writes work again by themselves.

mod common;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use common::db_rows;
use common::nodes::{
    behind_haproxy, free_port, next_json, start_node, team_subscriber, under_load, Running,
};
use common::postgres::{cluster, new_demo_database, new_replica};
use serde_json::json;

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
    let (_haproxy, base) = behind_haproxy(work.path(), &ports).await;
    let client = reqwest::Client::new();

    // realtime: a subscriber on node 0 receives a write made through node 2
    let mut ws = team_subscriber(ports[0]).await;
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
