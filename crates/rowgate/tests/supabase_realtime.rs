//! Supabase's realtime protocol (`/realtime/v1/websocket`, the Phoenix channels realtime-js
//! speaks) through a real server and raw WebSocket frames, on both backends: heartbeats, joins
//! answered with their bindings' ids, `postgres_changes` of every kind in Supabase's payload
//! shape with the filter and the role's grant applied, `vsn` 1.0.0 objects and 2.0.0 arrays,
//! refusals as `phx_reply` errors, leaving, an `access_token` that does not verify, and
//! broadcast between the members of a channel (binary pushes included, `self` honoured).
//! supabase-js itself runs in tests/clients.rs.

mod common;

use std::time::Duration;

use common::{write_config, Backend, TestServer};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

use common::ws::{next, Socket};

const PATIENCE: Duration = Duration::from_secs(10);

const CONFIG: &str = r#"
[realtime]
tables = ["team"]
poll_ms = 100

[[grants]]
role = "anon"
tables = ["team"]
ops = ["select", "insert", "update", "delete"]
read_columns = ["team_id", "name", "points"]
"#;

async fn server(b: Backend) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), CONFIG, &[]).expect("config");
    TestServer::start_prepared(b, dir, config, "", |_| {}).await
}

async fn connect(s: &TestServer, vsn: &str) -> Socket {
    // no apikey: the anonymous role
    let url = format!("ws://{}/realtime/v1/websocket?vsn={vsn}", s.addr);
    tokio_tungstenite::connect_async(url)
        .await
        .expect("websocket")
        .0
}

async fn push(socket: &mut Socket, frame: Value) {
    socket
        .send(Message::text(frame.to_string()))
        .await
        .expect("send");
}

/// No text frame arrives within a short while.
async fn quiet(socket: &mut Socket) {
    let waited = tokio::time::timeout(Duration::from_millis(600), socket.next()).await;
    assert!(waited.is_err(), "unexpected frame {waited:?}");
}

fn join(topic: &str, join_ref: &str, changes: Value, config: Value) -> Value {
    let mut cfg = json!({"broadcast": {"ack": false, "self": false},
        "presence": {"key": "", "enabled": false}, "postgres_changes": changes, "private": false});
    if let (Value::Object(c), Value::Object(extra)) = (&mut cfg, config) {
        c.extend(extra);
    }
    json!([join_ref, join_ref, topic, "phx_join", {"config": cfg}])
}

/// Heartbeats answer; a join answers with its bindings and ids, then `system`; inserts,
/// updates (entering the filter too) and deletes arrive in Supabase's shape, only the columns
/// the role may read; a row outside the filter does not; leaving ends them.
async fn postgres_changes_in_supabase_shape(b: Backend) {
    let s = server(b).await;
    let mut ws = connect(&s, "2.0.0").await;
    push(&mut ws, json!([null, "1", "phoenix", "heartbeat", {}])).await;
    assert_eq!(
        next(&mut ws).await,
        json!([null, "1", "phoenix", "phx_reply", {"status": "ok", "response": {}}])
    );
    let changes =
        json!([{"event": "*", "schema": "public", "table": "team", "filter": "points=gt.100"}]);
    push(&mut ws, join("realtime:t", "3", changes, json!({}))).await;
    let reply = next(&mut ws).await;
    assert_eq!(reply[0], "3");
    assert_eq!(reply[1], "3");
    assert_eq!(reply[3], "phx_reply");
    assert_eq!(reply[4]["status"], "ok");
    let bound = &reply[4]["response"]["postgres_changes"][0];
    assert_eq!(bound["filter"], "points=gt.100");
    let id = bound["id"].as_u64().expect("a numeric id");
    assert!(id > 0);
    let system = next(&mut ws).await;
    assert_eq!(system[3], "system");
    assert_eq!(system[4]["message"], "Subscribed to PostgreSQL");

    s.post(
        "/team",
        json!({"team_id": 70, "name": "Tyrrell", "points": 5}),
    )
    .send()
    .await
    .expect("insert");
    s.post(
        "/team",
        json!({"team_id": 71, "name": "Lotus", "points": 150}),
    )
    .send()
    .await
    .expect("insert");
    let event = next(&mut ws).await;
    assert_eq!(event[2], "realtime:t");
    assert_eq!(event[3], "postgres_changes");
    let data = &event[4]["data"];
    assert_eq!(event[4]["ids"], json!([id]));
    assert_eq!(data["type"], "INSERT");
    assert_eq!(
        (data["schema"].as_str(), data["table"].as_str()),
        (Some("public"), Some("team"))
    );
    assert_eq!(
        data["record"],
        json!({"team_id": 71, "name": "Lotus", "points": 150})
    );
    assert!(
        data["commit_timestamp"]
            .as_str()
            .is_some_and(|t| t.ends_with('Z')),
        "{data}"
    );
    let columns: Vec<&str> = data["columns"]
        .as_array()
        .expect("columns")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        columns,
        ["team_id", "name", "points"],
        "only the readable columns"
    );
    assert_eq!(data["columns"][0]["type"], "int4");
    // Tyrrell enters the filter: an UPDATE with its old record
    s.patch("/team?team_id=eq.70", json!({"points": 200}))
        .send()
        .await
        .expect("update");
    let event = next(&mut ws).await;
    assert_eq!(event[4]["data"]["type"], "UPDATE");
    assert_eq!(event[4]["data"]["record"]["points"], 200);
    assert_eq!(event[4]["data"]["old_record"]["points"], 5);
    s.delete("/team?team_id=eq.71")
        .send()
        .await
        .expect("delete");
    let event = next(&mut ws).await;
    assert_eq!(event[4]["data"]["type"], "DELETE");
    assert_eq!(event[4]["data"]["old_record"]["name"], "Lotus");
    assert!(event[4]["data"].get("record").is_none());
    // leaving stops the changes
    push(&mut ws, json!(["3", "9", "realtime:t", "phx_leave", {}])).await;
    assert_eq!(next(&mut ws).await[4]["status"], "ok");
    s.post(
        "/team",
        json!({"team_id": 72, "name": "Arrows", "points": 300}),
    )
    .send()
    .await
    .expect("insert");
    quiet(&mut ws).await;
}

/// vsn 1.0.0 speaks JSON objects; an event filter takes only its kind; a rejoin of the same
/// topic replaces the channel.
async fn vsn_1_objects_and_event_filters(b: Backend) {
    let s = server(b).await;
    let mut ws = connect(&s, "1.0.0").await;
    let changes = json!([{"event": "DELETE", "schema": "public", "table": "team"}]);
    for join_ref in ["1", "2"] {
        push(&mut ws, json!({"topic": "realtime:d", "event": "phx_join", "ref": join_ref, "join_ref": join_ref,
            "payload": {"config": {"postgres_changes": changes}}})).await;
        let reply = next(&mut ws).await;
        assert_eq!(reply["event"], "phx_reply");
        assert_eq!(reply["ref"], join_ref);
        assert_eq!(reply["payload"]["status"], "ok");
        assert_eq!(next(&mut ws).await["event"], "system");
    }
    s.post(
        "/team",
        json!({"team_id": 73, "name": "Ligier", "points": 1}),
    )
    .send()
    .await
    .expect("insert");
    s.delete("/team?team_id=eq.73")
        .send()
        .await
        .expect("delete");
    let event = next(&mut ws).await;
    assert_eq!(event["event"], "postgres_changes");
    assert_eq!(event["join_ref"], "2", "the channel's latest join");
    assert_eq!(event["payload"]["data"]["type"], "DELETE");
    quiet(&mut ws).await;
}

/// Refusals are `phx_reply` errors naming the reason; a bad vsn is refused at the handshake;
/// an `access_token` that does not verify closes the channel; a malformed frame closes the
/// connection (1008).
async fn refusals(b: Backend) {
    let s = server(b).await;
    for query in ["vsn=9", "apikey=not.a.key&vsn=2.0.0"] {
        let bad = format!("ws://{}/realtime/v1/websocket?{query}", s.addr);
        assert!(
            tokio_tungstenite::connect_async(bad).await.is_err(),
            "{query}"
        );
    }
    let mut ws = connect(&s, "2.0.0").await;
    let team = |extra: Value| {
        let mut entry = json!({"event": "INSERT", "schema": "public", "table": "team"});
        if let (Value::Object(e), Value::Object(x)) = (&mut entry, extra) {
            e.extend(x);
        }
        json!([entry])
    };
    let open = json!({});
    for (changes, config, reason) in [
        (
            team(json!({"table": "driver"})),
            &open,
            "not a realtime table",
        ),
        (team(json!({"filter": "nope=eq.1"})), &open, "nope"),
        (team(json!({"filter": "wins=eq.1"})), &open, "wins"),
        (team(json!({"event": "TRUNCATE"})), &open, "event"),
        (json!([{"event": "*", "schema": "public"}]), &open, "table"),
        (json!([]), &json!({"private": true}), "private"),
    ] {
        push(&mut ws, join("realtime:r", "5", changes, config.clone())).await;
        let reply = next(&mut ws).await;
        assert_eq!(reply[4]["status"], "error", "{reply}");
        let text = reply[4]["response"]["reason"].as_str().unwrap_or_default();
        assert!(text.contains(reason), "{text} should say {reason}");
    }
    push(&mut ws, join("realtime:r", "6", json!([]), json!({}))).await;
    assert_eq!(next(&mut ws).await[4]["status"], "ok");
    push(
        &mut ws,
        json!(["6", "7", "realtime:r", "access_token", {"access_token": "not.a.jwt"}]),
    )
    .await;
    assert_eq!(next(&mut ws).await[3], "system");
    assert_eq!(next(&mut ws).await[3], "phx_close");
    ws.send(Message::text("{not json")).await.expect("send");
    let closed = tokio::time::timeout(PATIENCE, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(frame))) => return frame.map(|f| u16::from(f.code)),
                Some(Ok(_)) => continue,
                _ => return None,
            }
        }
    })
    .await
    .expect("closed in time");
    assert_eq!(closed, Some(1008));
}

/// Broadcasts reach the channel's other members, as text and from realtime-js's binary
/// pushes; the sender hears its own only with `self`; members of other channels hear nothing.
async fn broadcast_between_members(b: Backend) {
    let s = server(b).await;
    let mut alice = connect(&s, "2.0.0").await;
    let mut bob = connect(&s, "2.0.0").await;
    let mut carol = connect(&s, "2.0.0").await;
    push(
        &mut alice,
        join(
            "realtime:room",
            "1",
            json!([]),
            json!({"broadcast": {"self": true}}),
        ),
    )
    .await;
    push(&mut bob, join("realtime:room", "1", json!([]), json!({}))).await;
    push(
        &mut carol,
        join("realtime:other", "1", json!([]), json!({})),
    )
    .await;
    for ws in [&mut alice, &mut bob, &mut carol] {
        assert_eq!(next(ws).await[4]["status"], "ok");
    }
    let message = json!({"type": "broadcast", "event": "cursor", "payload": {"x": 1}});
    push(
        &mut bob,
        json!(["1", "2", "realtime:room", "broadcast", message]),
    )
    .await;
    assert_eq!(next(&mut bob).await[3], "phx_reply", "acknowledged");
    assert_eq!(
        next(&mut alice).await,
        json!([null, null, "realtime:room", "broadcast", message])
    );
    // realtime-js's binary push from alice: bob hears it, and so does alice (self)
    let mut frame = vec![3u8, 1, 1, 13, 4, 0, 1];
    frame.extend_from_slice(b"13realtime:roommove");
    frame.extend_from_slice(br#"{"y":2}"#);
    alice.send(Message::binary(frame)).await.expect("send");
    let heard = json!([null, null, "realtime:room", "broadcast",
        {"type": "broadcast", "event": "move", "payload": {"y": 2}}]);
    assert_eq!(next(&mut bob).await, heard);
    let mut alice_heard = Vec::new();
    for _ in 0..2 {
        alice_heard.push(next(&mut alice).await);
    }
    assert!(alice_heard.contains(&heard), "{alice_heard:?}");
    quiet(&mut carol).await;
}

/// Presence: a member that tracks itself is announced to the channel's members that follow
/// presence (itself included), one joining later gets the state with it, and its leaving (an
/// untrack, or its connection closing) is announced.
async fn presence_is_tracked(b: Backend) {
    let s = server(b).await;
    let mut alice = connect(&s, "2.0.0").await;
    let mut bob = connect(&s, "2.0.0").await;
    let presence = |key: &str| json!({"presence": {"enabled": true, "key": key}});
    push(
        &mut alice,
        join("realtime:room", "1", json!([]), presence("alice")),
    )
    .await;
    assert_eq!(next(&mut alice).await[4]["status"], "ok");
    assert_eq!(next(&mut alice).await[3], "presence_state");
    let track = json!({"type": "presence", "event": "track", "payload": {"online": true}});
    push(
        &mut alice,
        json!(["1", "2", "realtime:room", "presence", track]),
    )
    .await;
    let mut heard = Vec::new();
    for _ in 0..2 {
        heard.push(next(&mut alice).await);
    }
    let diff = heard
        .iter()
        .find(|f| f[3] == "presence_diff")
        .unwrap_or_else(|| panic!("no presence_diff in {heard:?}"));
    let meta = &diff[4]["joins"]["alice"]["metas"][0];
    assert_eq!(meta["online"], true);
    assert!(meta["phx_ref"].is_string());
    assert!(
        heard.iter().any(|f| f[3] == "phx_reply"),
        "track() resolves"
    );
    // bob joins later: the state has alice
    push(
        &mut bob,
        join("realtime:room", "1", json!([]), presence("bob")),
    )
    .await;
    assert_eq!(next(&mut bob).await[4]["status"], "ok");
    let state = next(&mut bob).await;
    assert_eq!(state[3], "presence_state");
    assert_eq!(state[4]["alice"]["metas"][0]["online"], true);
    // alice's connection closes: bob hears her leave
    alice.close(None).await.expect("close");
    let left = next(&mut bob).await;
    assert_eq!(left[3], "presence_diff");
    assert_eq!(left[4]["leaves"]["alice"]["metas"][0]["online"], true);
}

backend_tests!(
    presence_is_tracked,
    postgres_changes_in_supabase_shape,
    vsn_1_objects_and_event_filters,
    refusals,
    broadcast_between_members,
);
