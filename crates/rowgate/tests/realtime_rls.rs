//! Realtime with row-level security at scale (issue 41): subscribers, each a user of their own
//! team of 10, follow one table whose policy shows a row to its team's members only (a policy
//! joining the membership table); one change a second per 10 subscribers is written. Every
//! subscriber gets exactly its team's rows, through the database's policies (database roles),
//! and the same through in-memory filters without them; the delivered messages a second and
//! the p99 delay of each are printed side by side (bench/RESULTS.md). 500 subscribers by
//! default; `ROWGATE_RLS_SUBSCRIBERS=5000` for the larger run; figures from a release build
//! (`cargo test --release`), as a debug build slows the server's side tenfold.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;

const SECRET: &str = "super-secret-jwt-token-with-at-least-32-characters-long";

/// How long changes are written.
const SECONDS: u64 = 8;

const CONFIG: &str = r#"
[limits]
max_connections = 20000
max_connections_per_address = 0

[realtime]
tables = ["msgs"]
poll_ms = 100
max_connections_per_address = 0

[[auth.external]]
issuer = "supabase"
secret_file = "jwt.secret"
"#;

/// The user id of subscriber `i` (a UUID).
fn user(i: usize) -> String {
    format!("00000000-0000-0000-0000-{i:012}")
}

fn token(i: usize) -> String {
    let now = jsonwebtoken::get_current_timestamp();
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"iss": "supabase", "role": "authenticated", "sub": user(i), "team": i / 10,
                "exp": now + 3600}),
        &EncodingKey::from_secret(SECRET.as_bytes()),
    )
    .expect("sign")
}

/// What one run measured.
struct Delivered {
    /// Delivered messages a second, from the first write to the last delivery.
    per_second: f64,
    p99_ms: f64,
    wrong: u64,
}

/// `subscribers` follow `msgs` (through the policies when `rls`, else each filtering its
/// team's rows in memory); one change a second per 10 of them is written for [`SECONDS`].
async fn run(subscribers: usize, rls: bool) -> Delivered {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("jwt.secret"), SECRET).expect("secret");
    let grants = if rls {
        ""
    } else {
        "\n[[grants]]\nrole = \"authenticated\"\ntables = [\"msgs\"]\nops = [\"select\"]\n"
    };
    let config = write_config(dir.path(), &format!("{CONFIG}{grants}"), &[]).expect("config");
    let members: Vec<String> = (0..subscribers)
        .map(|i| format!("({}, '{}')", i / 10, user(i)))
        .collect();
    let setup = format!(
        "{}
CREATE TABLE msgs (id bigserial PRIMARY KEY, team int NOT NULL, sent bigint NOT NULL);
CREATE TABLE members (team int, user_id uuid, PRIMARY KEY (user_id, team));
INSERT INTO members VALUES {};
ALTER TABLE msgs ENABLE ROW LEVEL SECURITY;
CREATE POLICY team_reads ON msgs FOR SELECT TO authenticated
  USING (team IN (SELECT team FROM members WHERE user_id = auth.uid()));
GRANT SELECT ON msgs, members TO authenticated;",
        rowgate::db::supabase_compat::statements(None),
        members.join(", ")
    );
    let s = TestServer::start_prepared(Backend::Postgres, dir, config, &setup, move |c| {
        c.auth.database_roles = rls;
        c.db.pool_size = 16;
    })
    .await;
    // one change a second per 10 subscribers, spread over the teams, ten writes a second;
    // each reaches its team's 10 members (fewer in a last, smaller team)
    let teams = subscribers.div_ceil(10);
    let per_tick = (teams / 10).max(1);
    let changes = SECONDS as usize * 10 * per_tick;
    let expected: u64 = (0..changes)
        .map(|w| (subscribers - (w % teams) * 10).min(10) as u64)
        .sum();
    let received = Arc::new(AtomicU64::new(0));
    let last = Arc::new(AtomicU64::new(0));
    let wrong = Arc::new(AtomicU64::new(0));
    let delays = Arc::new(std::sync::Mutex::new(Vec::new()));
    let start = Instant::now();
    let mut readers = Vec::new();
    for i in 0..subscribers {
        let filter = (!rls).then(|| format!("team=eq.{}", i / 10));
        let mut socket =
            ws::follow_filtered(s.addr, "msgs", Some(&token(i)), filter.as_deref()).await;
        let (received, wrong, delays) = (received.clone(), wrong.clone(), delays.clone());
        let last = last.clone();
        readers.push(tokio::spawn(async move {
            let team = (i / 10) as i64;
            // (until the writes begin, once every subscriber is in: longer)
            let mut patience = Duration::from_secs(120);
            while let Ok(Some(event)) = tokio::time::timeout(patience, text(&mut socket)).await {
                // (a subscriber's own rows may come late, not never)
                patience = Duration::from_secs(60);
                if event["row"]["team"].as_i64() != Some(team) {
                    wrong.fetch_add(1, Ordering::Relaxed);
                }
                let sent = event["row"]["sent"].as_u64().unwrap_or(0);
                let now = start.elapsed().as_micros() as u64;
                received.fetch_add(1, Ordering::Relaxed);
                last.fetch_max(now, Ordering::Relaxed);
                delays
                    .lock()
                    .expect("delays")
                    .push(now.saturating_sub(sent));
            }
        }));
    }
    let first_write = start.elapsed().as_micros() as u64;
    let mut written = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for _ in 0..SECONDS * 10 {
        tick.tick().await;
        let sent = start.elapsed().as_micros();
        let rows: Vec<String> = (0..per_tick)
            .map(|k| format!("({}, {sent})", (written + k) % teams))
            .collect();
        written += per_tick;
        s.exec(&format!(
            "INSERT INTO msgs (team, sent) VALUES {}",
            rows.join(", ")
        ));
    }
    // every message delivered (or none for a while: the count below says how many were not)
    let mut quiet_since = (Instant::now(), received.load(Ordering::Relaxed));
    while received.load(Ordering::Relaxed) < expected
        && quiet_since.0.elapsed() < Duration::from_secs(30)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = received.load(Ordering::Relaxed);
        if now != quiet_since.1 {
            quiet_since = (Instant::now(), now);
        }
    }
    for reader in &readers {
        reader.abort();
    }
    let messages = received.load(Ordering::Relaxed);
    assert_eq!(written, changes);
    assert_eq!(
        messages, expected,
        "every member gets each of its team's rows once"
    );
    let mut delays = delays.lock().expect("delays").clone();
    delays.sort_unstable();
    let p99 = delays
        .get(delays.len().saturating_sub(1) * 99 / 100)
        .copied()
        .unwrap_or(0);
    let seconds = (last.load(Ordering::Relaxed).saturating_sub(first_write)) as f64 / 1e6;
    Delivered {
        per_second: messages as f64 / seconds.max(SECONDS as f64),
        p99_ms: p99 as f64 / 1000.0,
        wrong: wrong.load(Ordering::Relaxed),
    }
}

/// The next text frame as JSON (`None` once the socket ends), waiting as long as it takes.
async fn text(socket: &mut ws::Socket) -> Option<serde_json::Value> {
    use futures_util::StreamExt as _;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        match socket.next().await? {
            Ok(Message::Text(text)) => return serde_json::from_str(text.as_str()).ok(),
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(_) => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_realtime_policies_at_scale() {
    let subscribers: usize = std::env::var("ROWGATE_RLS_SUBSCRIBERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(500);
    let with = run(subscribers, true).await;
    let without = run(subscribers, false).await;
    assert_eq!(
        (with.wrong, without.wrong),
        (0, 0),
        "no row of another team"
    );
    let rate = |d: &Delivered| d.per_second;
    println!(
        "{subscribers} subscribers, {} changes/s: with row-level security {:.0} messages/s, p99 {:.1} ms; \
         in-memory filters, no RLS: {:.0} messages/s, p99 {:.1} ms",
        subscribers / 10,
        rate(&with),
        with.p99_ms,
        rate(&without),
        without.p99_ms
    );
}
