//! Read replicas on PostgreSQL (`db.replicas`), with real hot standbys of the test cluster
//! (`pg_basebackup -R`, streaming): reads go to a replica and writes to the primary, a write
//! answers its position and a read carrying it sees the write, a replica that lags or stops
//! leaves the rotation and the primary answers.

mod common;

use std::time::{Duration, Instant};

use common::postgres::{new_replica, PgReplica};
use common::*;
use rowgate::config::Config;
use serde_json::{json, Value};

/// A custom resource that tells which server answered: `true` on a standby.
const WHERE: &str = r#"
[[resources]]
roles = ["*"]
path = "/where"
shape = "value"
sql = "SELECT pg_is_in_recovery()"
"#;

/// A server on a fresh demo database whose reads go to `replica` (checked every 50 ms, in the
/// rotation while no more than `max_lag_ms` behind).
async fn server(replica: &PgReplica, max_lag_ms: u64) -> TestServer {
    server_waiting(replica, max_lag_ms, 0).await
}

/// [`server`] whose reads carrying a position wait up to `wait_ms` for the replica.
async fn server_waiting(replica: &PgReplica, max_lag_ms: u64, wait_ms: u64) -> TestServer {
    let port = replica.port;
    let resources = toml::from_str::<Config>(WHERE)
        .expect("resources")
        .resources;
    let s = TestServer::start_with(Backend::Postgres, move |c: &mut Config| {
        let primary = c.db.path.to_string_lossy().into_owned();
        let name = primary.rsplit('/').next().expect("database").to_string();
        c.db.replicas = vec![format!("postgres://postgres@127.0.0.1:{port}/{name}")];
        c.db.replica_check_ms = 50;
        c.db.replica_max_lag_ms = max_lag_ms;
        c.db.replica_wait_ms = wait_ms;
        c.resources = resources;
    })
    .await;
    replica.wait_for(&database_of(&s));
    s
}

fn database_of(s: &TestServer) -> String {
    let url = s.db_path.to_string_lossy().into_owned();
    url.rsplit('/').next().expect("database").to_string()
}

/// Adds a team (the primary takes the write); the position it answers.
async fn add_team(s: &TestServer, name: &str, points: i64) -> String {
    let r = s
        .post("/team", json!({"name": name, "points": points}))
        .header("Prefer", "return=minimal")
        .send()
        .await
        .expect("write");
    assert_eq!(r.status(), 201);
    r.headers()["rowgate-position"]
        .to_str()
        .expect("position")
        .to_string()
}

/// Whether a standby answered `/where` (with `position` sent, if any).
async fn on_standby(s: &TestServer, position: Option<&str>) -> bool {
    let mut request = s.client.get(s.root_url("/where"));
    if let Some(position) = position {
        request = request.header("Rowgate-Position", position);
    }
    let r = request.send().await.expect("where");
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.expect("json") == json!(true)
}

/// Waits until `/where` answers `standby` (a replica joins or leaves the rotation at its next
/// check).
async fn wait_for(s: &TestServer, standby: bool, position: Option<&str>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while on_standby(s, position).await != standby {
        assert!(
            Instant::now() < deadline,
            "reads never went to the {}",
            if standby { "replica" } else { "primary" }
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads go to the replica, writes to the primary (a standby refuses them), and the write's
/// rows reach the replica's reads by streaming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_to_the_replica_and_writes_to_the_primary() {
    let replica = new_replica();
    let s = server(&replica, 5_000).await;
    wait_for(&s, true, None).await;
    for _ in 0..10 {
        assert!(on_standby(&s, None).await, "a read went to the primary");
    }
    let position = add_team(&s, "Replicated", 1).await;
    assert!(position.contains('/'), "{position}");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (_, rows) = get_json(&s, "/team?name=eq.Replicated&select=points").await;
        if rows == json!([{"points": 1}]) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the write never reached the replica"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // the replica's series at /metrics
    let metrics = metrics_text(&s).await;
    let up = format!(
        "rowgate_replica_up{{replica=\"127.0.0.1:{}/{}\"",
        replica.port,
        database_of(&s)
    );
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with(&up) && l.ends_with(" 1")),
        "{metrics}"
    );
    assert!(
        metrics.contains("rowgate_replica_lag_seconds{replica="),
        "{metrics}"
    );
    // a read answers no position: only writes do
    let r = s.get("/team?limit=1").send().await.expect("read");
    assert!(r.headers().get("rowgate-position").is_none());
    // a position that is not one
    let r = s
        .get("/team")
        .header("Rowgate-Position", "yesterday")
        .send()
        .await
        .expect("bad position");
    assert_error(r, 400, "RG131").await;
}

/// Read-your-writes: with the replica's replay paused, a read without the write's position
/// goes to the replica and misses the write; the same read carrying it sees it (the primary
/// answers); once the replica has replayed it, the replica answers reads carrying it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_carrying_the_write_position_sees_the_write() {
    let replica = new_replica();
    let s = server(&replica, 600_000).await;
    wait_for(&s, true, None).await;
    replica.pause_replay();
    let position = add_team(&s, "Mine", 7).await;
    let (_, stale) = get_json(&s, "/team?name=eq.Mine&select=points").await;
    assert_eq!(
        stale,
        json!([]),
        "the paused replica answered without the write"
    );
    let r = s
        .get("/team?name=eq.Mine&select=points")
        .header("Rowgate-Position", &position)
        .send()
        .await
        .expect("read with the position");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<Value>().await.expect("json"),
        json!([{"points": 7}])
    );
    assert!(!on_standby(&s, Some(&position)).await);
    replica.resume_replay();
    wait_for(&s, true, Some(&position)).await;
    let (_, fresh) = get_json(&s, "/team?name=eq.Mine&select=points").await;
    assert_eq!(fresh, json!([{"points": 7}]));
}

/// With `db.replica_wait_ms`, a read carrying a position the replica has not replayed yet
/// waits for it: the replica, replaying again a moment later, answers it (not the primary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_may_wait_for_the_replica_to_catch_up() {
    let replica = new_replica();
    let s = server_waiting(&replica, 600_000, 10_000).await;
    wait_for(&s, true, None).await;
    replica.pause_replay();
    let position = add_team(&s, "Awaited", 3).await;
    // replay resumes 300 ms into the read's wait
    let port = replica.port;
    let resuming = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        common::postgres::psql(port, "postgres", "SELECT pg_wal_replay_resume()");
    });
    let answered_on_standby = on_standby(&s, Some(&position)).await;
    resuming.join().expect("resumed");
    assert!(
        answered_on_standby,
        "the primary answered: the read did not wait for the replica"
    );
}

/// A replica further behind than `db.replica_max_lag_ms` leaves the rotation (the primary
/// answers, with the latest rows) and returns once it has caught up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_replica_leaves_the_rotation() {
    let replica = new_replica();
    let s = server(&replica, 300).await;
    wait_for(&s, true, None).await;
    replica.pause_replay();
    add_team(&s, "Latest", 3).await;
    wait_for(&s, false, None).await;
    let metrics = metrics_text(&s).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("rowgate_replica_up{") && l.ends_with(" 0")),
        "{metrics}"
    );
    let (_, rows) = get_json(&s, "/team?name=eq.Latest&select=points").await;
    assert_eq!(rows, json!([{"points": 3}]));
    replica.resume_replay();
    wait_for(&s, true, None).await;
}

/// A replica that stops: reads go on without a single failure (a read it fails runs on the
/// primary, and the replica leaves the rotation).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_go_on_when_the_replica_stops() {
    let replica = new_replica();
    let s = server(&replica, 5_000).await;
    wait_for(&s, true, None).await;
    let client = s.client.clone();
    let url = s.url("/team?select=name&order=team_id");
    let reading = tokio::spawn(async move {
        let (mut ok, mut failed) = (0, Vec::new());
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            let r = client.get(&url).send().await.expect("read");
            if r.status() == 200 {
                ok += 1;
            } else {
                failed.push(format!(
                    "{} {}",
                    r.status(),
                    r.text().await.unwrap_or_default()
                ));
            }
        }
        (ok, failed)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    tokio::task::spawn_blocking(move || replica.stop())
        .await
        .expect("stop");
    let (ok, failed) = reading.await.expect("reader");
    assert!(failed.is_empty(), "{failed:?}");
    assert!(ok > 10, "{ok} reads");
    assert!(!on_standby(&s, None).await);
}
