//! What one client may hold of realtime, kept as tests (issue 39): an anonymous client on
//! Supabase's socket cannot subscribe past `realtime.max_subscriptions` (bindings over all its
//! channels) nor join past `realtime.max_channels`, and it cannot open more than
//! `realtime.max_connections_per_address` realtime connections (either protocol, SSE too);
//! the worker's memory stays put while it tries, and a write is still matched at once. The
//! same at scale, for legitimate clients: tests/realtime_scale.rs.

mod common;

use std::time::{Duration, Instant};

use common::ws::{connect, join, next, reason, PATIENCE};
use common::{write_config, Backend, TestServer};
use serde_json::json;

/// Realtime on `team`, read and written by the anonymous role; `extra` adds `[realtime]` keys.
fn config(extra: &str) -> String {
    format!(
        r#"
[realtime]
tables = ["team"]
poll_ms = 100
{extra}

[[grants]]
role = "anon"
tables = ["team"]
ops = ["select", "insert", "update"]
"#
    )
}

async fn server(extra: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &config(extra), &[]).expect("config");
    TestServer::start_prepared(Backend::Sqlite, dir, config, "", |_| {}).await
}

/// This process's resident memory in kB (the in-process server is its worker).
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .expect("VmRSS")
}

/// The attack that made 441,876 subscriptions out of 16 anonymous sockets in 17 s (the
/// worker grew from 56 MB to 1.2 GB, and every PATCH took 1.3-1.9 s): every socket asks for
/// 200 channels of 60 `postgres_changes` each, then 200 channels of none. Each socket gets its
/// first 60 bindings and 100 channels; the rest are refused with a `phx_reply` error naming
/// the limit. The worker's memory stays within a few MB, and a PATCH is still matched and
/// delivered at once (its latency is printed: tests judge no time).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anonymous_client_cannot_subscribe_past_the_caps() {
    // the message rate limit is lifted: the caps are what is tested
    let s = server("max_messages_per_s = 1000000").await;
    let addr = s.addr.to_string();
    let hub = &s.app.realtime.as_ref().expect("realtime").hub;
    let before = rss_kb();
    let mut sockets = Vec::new();
    for socket_no in 0..16 {
        let mut ws = connect(&addr).await;
        for topic in 0..200 {
            let filters: Vec<String> = (0..60)
                .map(|i| format!("team_id=eq.{}", 1000 + socket_no * 100_000 + topic * 60 + i))
                .collect();
            let reply = join(&mut ws, &format!("c{topic}"), &filters).await;
            if topic == 0 {
                assert_eq!(reply[4]["status"], "ok", "{reply}");
            } else {
                assert_eq!(reply[4]["status"], "error", "{reply}");
                assert!(reason(&reply).contains("Too many subscriptions"), "{reply}");
                assert!(reason(&reply).contains("max_subscriptions"), "{reply}");
            }
        }
        for topic in 0..200 {
            let reply = join(&mut ws, &format!("empty{topic}"), &[]).await;
            // the channel of the first 60 bindings counts: 99 more
            if topic < 99 {
                assert_eq!(reply[4]["status"], "ok", "{reply}");
            } else {
                assert_eq!(reply[4]["status"], "error", "{reply}");
                assert!(reason(&reply).contains("Too many channels"), "{reply}");
            }
        }
        sockets.push(ws);
    }
    assert_eq!(hub.subscriptions(), 16 * 60);
    let grown_mb = rss_kb().saturating_sub(before) / 1024;
    eprintln!("worker memory grew by {grown_mb} MB under the attack");
    assert!(grown_mb < 64, "the worker grew by {grown_mb} MB");

    // a legitimate subscriber still hears a change at once
    let mut listener = connect(&addr).await;
    let reply = join(&mut listener, "team1", &["team_id=eq.1".to_string()]).await;
    assert_eq!(reply[4]["status"], "ok", "{reply}");
    let mut took = Vec::new();
    for points in 0..5 {
        let started = Instant::now();
        let r = s
            .client
            .patch(format!("{}/team?team_id=eq.1", s.base))
            .json(&json!({"points": 1000 + points}))
            .send()
            .await
            .expect("patch");
        assert_eq!(r.status(), 204);
        took.push(started.elapsed());
        let event = next(&mut listener).await;
        assert_eq!(event[3], "postgres_changes", "{event}");
        assert_eq!(event[4]["data"]["record"]["points"], 1000 + points);
    }
    took.sort();
    eprintln!("PATCH beside the refused attack: median {:?}", took[2]);
    drop(sockets);
}

/// A client address holds at most `realtime.max_connections_per_address` realtime
/// connections, WebSockets of both protocols and SSE streams together: one more is answered
/// 429 `RG429` before any upgrade, and a connection closed makes room again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn realtime_connections_per_address_are_capped() {
    let s = server("max_connections_per_address = 3").await;
    let addr = s.addr.to_string();
    let supabase = connect(&addr).await;
    let (own, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/realtime"))
        .await
        .expect("/realtime");
    let sse_url = format!("http://{addr}/realtime/sse?table=team");
    let open_sse = || s.client.get(&sse_url).send();
    let sse = open_sse().await.expect("sse");
    assert_eq!(sse.status(), 200);
    let refused =
        tokio_tungstenite::connect_async(format!("ws://{addr}/realtime/v1/websocket?vsn=2.0.0"))
            .await
            .expect_err("a fourth WebSocket is refused");
    match refused {
        tokio_tungstenite::tungstenite::Error::Http(answer) => {
            assert_eq!(answer.status(), 429);
            let body: serde_json::Value =
                serde_json::from_slice(answer.body().as_deref().unwrap_or_default())
                    .expect("a JSON error");
            assert_eq!(body["code"], "RG429", "{body}");
        }
        other => panic!("expected 429, got {other:?}"),
    }
    common::assert_error(open_sse().await.expect("sse"), 429, "RG429").await;
    drop(sse);
    drop(own);
    drop(supabase);
    // the slots come back once the sessions have ended
    let deadline = Instant::now() + PATIENCE;
    let realtime = s.app.realtime.as_ref().expect("realtime");
    while realtime.addresses.held("127.0.0.1".parse().expect("ip")) > 0 {
        assert!(Instant::now() < deadline, "the slots were not given back");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut again = connect(&addr).await;
    assert_eq!(join(&mut again, "x", &[]).await[4]["status"], "ok");
}
