//! PostgreSQL stopped and started again under a real server with clients asking all along: while
//! it is down every request answers 503 with `Retry-After` (never a 500, a hang or a dropped
//! connection), and once it is back the server recovers by itself. Its own test binary, so
//! stopping its cluster disturbs no other test.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Backend, TestServer};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_answers_503_while_down_then_recovers() {
    let s = TestServer::start_with(Backend::Postgres, |c| {
        c.db.pool_size = 4;
        c.db.acquire_timeout_ms = 500;
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    // Readers and writers keep asking through the whole restart; every answer is recorded.
    let mut clients = Vec::new();
    for i in 0..4 {
        let (client, stop) = (s.client.clone(), stop.clone());
        let (read, write) = (s.url("/team/1"), s.url("/team"));
        clients.push(tokio::spawn(async move {
            let mut statuses = Vec::new();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let name = (i % 2 == 1).then(|| format!("restart-{i}-{n}"));
                let r = match &name {
                    None => client.get(&read).send().await,
                    Some(name) => {
                        client
                            .post(&write)
                            .json(&json!({"name": name, "points": 0}))
                            .send()
                            .await
                    }
                };
                let r = r.expect("an answer, not a dropped connection");
                let status = r.status().as_u16();
                if status == 503 {
                    assert_eq!(r.headers()["retry-after"], "1");
                    let body: serde_json::Value = r.json().await.expect("JSON error");
                    assert_eq!(body["code"], "RG503", "{body}");
                } else {
                    assert!(
                        status == 200 || status == 201,
                        "status {status}: {}",
                        r.text().await.unwrap_or_default()
                    );
                }
                statuses.push((status, name));
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            statuses
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    tokio::task::spawn_blocking(|| common::postgres::cluster().stop())
        .await
        .expect("stop");
    // Down: a direct request answers 503 within the acquire timeout, never hangs.
    tokio::time::sleep(Duration::from_millis(700)).await;
    let started = Instant::now();
    let r = s.get("/team/2").send().await.expect("request");
    assert_eq!(r.status(), 503);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    tokio::task::spawn_blocking(|| common::postgres::cluster().start_again())
        .await
        .expect("start");
    // Back: 200 again by itself, within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = s.get("/team/1").send().await.expect("request");
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(Instant::now() < deadline, "no recovery after the restart");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for c in clients {
        all.extend(c.await.expect("client"));
    }
    let unavailable = all.iter().filter(|(s, _)| *s == 503).count();
    assert!(unavailable > 0, "no request saw the outage: {}", all.len());
    // Every acknowledged insert is in the database.
    let stored: std::collections::HashSet<String> = s
        .rows("SELECT name FROM team WHERE name LIKE 'restart-%'")
        .into_iter()
        .filter_map(|r| r[0].clone())
        .collect();
    let acknowledged: Vec<&String> = all
        .iter()
        .filter(|(s, _)| *s == 201)
        .filter_map(|(_, name)| name.as_ref())
        .collect();
    assert!(!acknowledged.is_empty());
    for name in acknowledged {
        assert!(stored.contains(name), "acknowledged {name} is missing");
    }
}
