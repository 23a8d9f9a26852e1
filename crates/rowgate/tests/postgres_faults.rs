//! PostgreSQL faults through a real server: every pooled connection killed under it (what a
//! PostgreSQL restart does to a pool), the pool exhausted, reads sharing connections
//! (`db.shared_reads`) under concurrency and behind a slow statement. Its own test binary, so its
//! cluster is its own.

mod common;

use std::time::{Duration, Instant};

use common::{Backend, TestServer};

async fn psql_exec(url: &str, sql: &str) {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    client.batch_execute(sql).await.expect("sql");
}

/// All of Rowgate's connections are terminated: requests answer 503 with Retry-After (never a 500
/// or a hang) until the pool has new connections, and then 200 again, by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_connections_answer_503_then_recover() {
    let s = TestServer::start_with(Backend::Postgres, |c| c.db.pool_size = 4).await;
    let url = s.db_path.to_string_lossy().into_owned();
    for _ in 0..8 {
        assert_eq!(
            s.get("/team/1").send().await.expect("request").status(),
            200
        );
    }
    psql_exec(
        &url,
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
         WHERE datname = current_database() AND pid <> pg_backend_pid()",
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut saw_503 = 0;
    let mut recovered = false;
    while Instant::now() < deadline {
        let r = s
            .get("/team/1")
            .send()
            .await
            .expect("an answer, not a dropped connection");
        match r.status().as_u16() {
            200 => {
                recovered = true;
                break;
            }
            503 => {
                saw_503 += 1;
                assert_eq!(r.headers()["retry-after"], "1");
                common::assert_error(r, 503, "RG503").await;
            }
            other => panic!("status {other}: {}", r.text().await.unwrap_or_default()),
        }
    }
    assert!(
        recovered,
        "still failing after 10 s ({saw_503} answers 503)"
    );
    // Every later request is served.
    for _ in 0..8 {
        assert_eq!(
            s.get("/team/2").send().await.expect("request").status(),
            200
        );
    }
}

/// One pooled connection, held by a slow read: another request waits the acquire timeout and
/// answers 503 with Retry-After; the slow one still finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_pool_answers_503_after_the_acquire_timeout() {
    let s = TestServer::start_with(Backend::Postgres, |c| {
        c.db.pool_size = 1;
        c.db.acquire_timeout_ms = 300;
    })
    .await;
    let url = s.db_path.to_string_lossy().into_owned();
    psql_exec(
        &url,
        "CREATE VIEW slow AS SELECT 1 AS one FROM pg_sleep(1.5)",
    )
    .await;
    s.app.db.reload_schema().await.expect("reload");
    let slow = tokio::spawn(s.get("/slow").send());
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let r = s.get("/team/1").send().await.expect("request");
    let waited = started.elapsed();
    assert_eq!(r.headers()["retry-after"], "1");
    common::assert_error(r, 503, "RG503").await;
    assert!(
        waited >= Duration::from_millis(250),
        "answered after {waited:?}, before the timeout"
    );
    let slow = slow.await.expect("join").expect("request");
    assert_eq!(slow.status(), 200);
    assert_eq!(
        s.get("/team/1").send().await.expect("request").status(),
        200
    );
}

/// `db.max_lifetime_s`: a pooled connection older than that is replaced instead of reused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_connections_are_replaced() {
    let s = pid_server(|c| {
        c.db.pool_size = 1;
        c.db.max_lifetime_s = 1;
    })
    .await;
    let pid = || async {
        let r = s
            .client
            .get(s.root_url("/pid"))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status(), 200);
        r.json::<i64>().await.expect("pid")
    };
    let first = pid().await;
    assert_eq!(pid().await, first, "a young connection is reused");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let renewed = pid().await;
    assert_ne!(renewed, first, "an old connection is replaced");
    assert_eq!(pid().await, renewed);
}

/// A server with `/pid`: the backend that ran the read.
async fn pid_server(adjust: impl FnOnce(&mut rowgate::config::Config)) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = common::write_config(
        dir.path(),
        "[[resources]]\nroles = [\"*\"]\npath = \"/pid\"\nshape = \"value\"\nsql = \"SELECT pg_backend_pid()\"\n",
        &[],
    )
    .expect("config");
    TestServer::start_in(Backend::Postgres, dir, config, adjust).await
}

/// `db.shared_reads`: concurrent reads of one statement share a connection, their statements
/// pipelined: most of them ran on one backend (where each taking its own spreads them over
/// many), and every request got its own rows back, never another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_share_a_pipelined_connection_and_get_their_own_rows() {
    for shared in [1, 0] {
        let s = pid_server(|c| {
            c.db.pool_size = 16;
            c.db.shared_reads = shared;
        })
        .await;
        let tasks: Vec<_> = (0..10u64)
            .map(|task| {
                let client = s.client.clone();
                let pid_url = s.root_url("/pid");
                let team_url = s.url("/team/");
                tokio::spawn(async move {
                    let mut pids = Vec::new();
                    for n in 0..20u64 {
                        let id = 1 + (task * 7 + n) % 10;
                        let r = client
                            .get(format!("{team_url}{id}"))
                            .send()
                            .await
                            .expect("read");
                        assert_eq!(r.status(), 200);
                        let row: serde_json::Value = r.json().await.expect("json");
                        assert_eq!(row["team_id"], id, "the answer of another read: {row}");
                        let r = client.get(&pid_url).send().await.expect("pid");
                        assert_eq!(r.status(), 200);
                        pids.push(r.json::<i64>().await.expect("pid"));
                    }
                    pids
                })
            })
            .collect();
        let mut by_backend = std::collections::HashMap::<i64, usize>::new();
        for task in tasks {
            for pid in task.await.expect("task") {
                *by_backend.entry(pid).or_default() += 1;
            }
        }
        let busiest = by_backend.values().copied().max().unwrap_or(0);
        if shared == 1 {
            // (a read finds the shared connection held up only when no statement on it
            // finished for 2 ms: then it takes its own)
            assert!(
                busiest >= 100,
                "200 reads over {} backends, at most {busiest} on one: {by_backend:?}",
                by_backend.len()
            );
        } else {
            assert!(
                by_backend.len() >= 2 && busiest < 200,
                "reads taking their own connections ran on one backend: {by_backend:?}"
            );
        }
    }
}

/// A slow statement on the shared connection does not hold up the reads after it: they run
/// on connections of their own and are answered while it still runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_read_on_a_shared_connection_does_not_hold_up_the_next() {
    let s = pid_server(|c| {
        c.db.pool_size = 4;
        c.db.shared_reads = 1;
    })
    .await;
    let url = s.db_path.to_string_lossy().into_owned();
    psql_exec(&url, "CREATE VIEW slow AS SELECT 1 AS one FROM pg_sleep(3)").await;
    s.app.db.reload_schema().await.expect("reload");
    let slow = tokio::spawn(s.get("/slow").send());
    // the slow read has the shared connection (the only read in flight)
    tokio::time::sleep(Duration::from_millis(300)).await;
    for id in 1..=5 {
        let r = s.get(&format!("/team/{id}")).send().await.expect("read");
        assert_eq!(r.status(), 200);
        assert!(
            !slow.is_finished(),
            "read {id} was answered only after the slow one"
        );
    }
    let slow = slow.await.expect("join").expect("request");
    assert_eq!(slow.status(), 200);
}
