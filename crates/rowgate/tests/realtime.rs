//! Realtime change feeds through a real server and real WebSocket connections, on both
//! backends:
//! insert/update/delete events, filters with enter/leave, resume with `since`, `resync` past
//! retention, row filters and column grants applied to events, writes from outside the server,
//! concurrent writers (every event once, in order), a stalled consumer closed while others go
//! on, bad client messages closed with the right code, and close 1001 on shutdown; duality
//! views followed as whole documents.

mod common;

use std::time::Duration;

use common::ws::next;
use common::{write_config, Backend, TestServer};
use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Any WebSocket, over a socket or in memory.
trait Ws:
    futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error>
    + futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
    + Unpin
{
}

impl<T> Ws for T where
    T: futures_util::Sink<Message, Error = tokio_tungstenite::tungstenite::Error>
        + futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>>
        + Unpin
{
}

/// How long a test waits for a frame that must come.
const PATIENCE: Duration = Duration::from_secs(10);

const CONFIG: &str = r#"
[realtime]
tables = ["team", "notes"]
poll_ms = 100
{extra}
[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]

[[grants]]
role = "owner"
tables = ["notes"]
ops = ["select", "insert", "update", "delete"]
filter = "owner=eq.@sub"

[[grants]]
role = "reader"
tables = ["team"]
ops = ["select"]
read_columns = ["team_id", "name"]
"#;

/// The `notes` table the tests write.
const NOTES: &str =
    "CREATE TABLE notes (id INTEGER PRIMARY KEY, owner TEXT NOT NULL, body TEXT NOT NULL)";

/// A server with CONFIG (`extra` added to its `[realtime]` section) and a `notes` table.
async fn server(b: Backend, extra: &str) -> TestServer {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &CONFIG.replace("{extra}", extra), &[]).expect("config");
    TestServer::start_prepared(b, dir, config, NOTES, |_| {}).await
}

async fn connect(s: &TestServer, query: &str) -> Socket {
    let (socket, _) = tokio_tungstenite::connect_async(format!("ws://{}/realtime{query}", s.addr))
        .await
        .expect("websocket");
    socket
}

async fn send(socket: &mut impl Ws, message: Value) {
    socket
        .send(Message::text(message.to_string()))
        .await
        .expect("send");
}

/// Waits for the close frame and returns its code.
async fn closed_with(socket: &mut impl Ws) -> u16 {
    loop {
        match tokio::time::timeout(PATIENCE, socket.next())
            .await
            .expect("closed in time")
        {
            Some(Ok(Message::Close(Some(frame)))) => {
                // answer it, as a client does (tungstenite sends the queued echo when polled),
                // so that the server is not left waiting for the handshake
                let _ = tokio::time::timeout(PATIENCE, socket.next()).await;
                return frame.code.into();
            }
            Some(Ok(_)) => {}
            other => panic!("no close frame: {other:?}"),
        }
    }
}

/// Subscribes and returns the id the subscription is live after.
async fn subscribe(
    socket: &mut impl Ws,
    table: &str,
    filter: Option<&str>,
    since: Option<i64>,
) -> i64 {
    let mut message = json!({"type": "subscribe", "table": table});
    if let Some(filter) = filter {
        message["filter"] = json!(filter);
    }
    if let Some(since) = since {
        message["since"] = json!(since);
    }
    send(socket, message).await;
    let ack = next(socket).await;
    assert_eq!(ack["type"], "subscribed", "{ack}");
    assert_eq!(ack["table"], table);
    ack["last"].as_i64().expect("last")
}

/// `PATCH /team?team_id=eq.{id}` with `{"points": points}`.
async fn set_points(s: &TestServer, id: i64, points: i64) {
    write(
        s,
        reqwest::Method::PATCH,
        &format!("/team?team_id=eq.{id}"),
        Some(json!({ "points": points })),
    )
    .await;
}

async fn write(s: &TestServer, method: reqwest::Method, path: &str, body: Option<Value>) {
    let mut request = s.client.request(method, s.url(path));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let r = request.send().await.expect("request");
    assert!(r.status().is_success(), "{path}: {}", r.status());
}

/// Insert, update and delete through the API arrive as events with the row, in order.
async fn insert_update_delete_events(b: Backend) {
    let s = server(b, "").await;
    let mut ws = connect(&s, "").await;
    let last = subscribe(&mut ws, "team", None, None).await;
    write(
        &s,
        reqwest::Method::POST,
        "/team",
        Some(json!({"team_id": 100, "name": "New", "points": 1})),
    )
    .await;
    set_points(&s, 100, 2).await;
    write(&s, reqwest::Method::DELETE, "/team?team_id=eq.100", None).await;
    let insert = next(&mut ws).await;
    assert_eq!(insert["type"], "event");
    assert_eq!(insert["op"], "insert");
    assert_eq!(insert["table"], "team");
    assert_eq!(insert["key"], json!({"team_id": 100}));
    assert_eq!(
        insert["row"],
        json!({"team_id": 100, "name": "New", "points": 1})
    );
    assert!(insert["id"].as_i64().expect("id") > last);
    let update = next(&mut ws).await;
    assert_eq!(update["op"], "update");
    assert_eq!(update["row"]["points"], 2);
    let delete = next(&mut ws).await;
    assert_eq!(delete["op"], "delete");
    assert_eq!(delete["row"]["points"], 2, "the deleted row as it was");
    let ids: Vec<i64> = [&insert, &update, &delete]
        .iter()
        .map(|e| e["id"].as_i64().expect("id"))
        .collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    send(&mut ws, json!({"type": "ping"})).await;
    assert_eq!(next(&mut ws).await, json!({"type": "pong"}));
    drop(ws);
    s.stop().await;
}

/// A filter selects events; an update that moves a row into the filter is `enter` (with the
/// row), out of it `leave` (key only).
async fn filters_enter_and_leave(b: Backend) {
    let s = server(b, "").await;
    let mut ws = connect(&s, "").await;
    subscribe(&mut ws, "team", Some("points=gt.10&name=like.F*"), None).await;
    let post =
        |id: i64, name: &str, points: i64| json!({"team_id": id, "name": name, "points": points});
    write(
        &s,
        reqwest::Method::POST,
        "/team",
        Some(post(200, "Fast", 5)),
    )
    .await; // not in
    write(
        &s,
        reqwest::Method::POST,
        "/team",
        Some(post(201, "Slow", 50)),
    )
    .await; // not in
    set_points(&s, 200, 20).await; // enter
    set_points(&s, 200, 30).await; // update
    set_points(&s, 200, 3).await; // leave
    write(
        &s,
        reqwest::Method::POST,
        "/team",
        Some(post(202, "Fine", 11)),
    )
    .await; // insert
    let enter = next(&mut ws).await;
    assert_eq!(
        (enter["op"].as_str(), enter["row"]["points"].as_i64()),
        (Some("enter"), Some(20))
    );
    let update = next(&mut ws).await;
    assert_eq!(
        (update["op"].as_str(), update["row"]["points"].as_i64()),
        (Some("update"), Some(30))
    );
    let leave = next(&mut ws).await;
    assert_eq!(leave["op"], "leave");
    assert_eq!(leave["key"], json!({"team_id": 200}));
    assert!(leave.get("row").is_none(), "{leave}");
    let insert = next(&mut ws).await;
    assert_eq!(
        (insert["op"].as_str(), insert["row"]["team_id"].as_i64()),
        (Some("insert"), Some(202))
    );
    // bad filters are refused with an error frame; the connection stays
    for (filter, code) in [
        ("nope=eq.1", "PGRST204"),
        ("points=zz.1", "PGRST100"),
        ("name->>x=eq.1", "PGRST100"),
    ] {
        send(
            &mut ws,
            json!({"type": "subscribe", "table": "team", "filter": filter}),
        )
        .await;
        let error = next(&mut ws).await;
        assert_eq!(error["type"], "error", "{filter}: {error}");
        assert_eq!(error["code"], code, "{filter}: {error}");
    }
    for (table, code) in [("employee", "RG420"), ("missing", "RG420")] {
        send(&mut ws, json!({"type": "subscribe", "table": table})).await;
        let error = next(&mut ws).await;
        assert_eq!(error["code"], code, "{table}: {error}");
    }
    send(&mut ws, json!({"type": "unsubscribe", "table": "team"})).await;
    assert_eq!(
        next(&mut ws).await,
        json!({"type": "unsubscribed", "table": "team"})
    );
    drop(ws);
    s.stop().await;
}

/// A client that reconnects with `since` gets what it missed, in order, then live events; a
/// `since` older than the retained log gets `resync`.
async fn resume_with_since_and_resync_past_retention(b: Backend) {
    let s = server(b, "retention_rows = 5\nprune_ms = 200\n").await;
    let mut ws = connect(&s, "").await;
    let start = subscribe(&mut ws, "team", None, None).await;
    set_points(&s, 1, 1000).await;
    let seen = next(&mut ws).await["id"].as_i64().expect("id");
    drop(ws);
    for points in 1001..1004 {
        set_points(&s, 1, points).await;
    }
    let mut ws = connect(&s, "").await;
    let last = subscribe(&mut ws, "team", None, Some(seen)).await;
    let mut replayed = Vec::new();
    for _ in 0..3 {
        let e = next(&mut ws).await;
        replayed.push((
            e["id"].as_i64().expect("id"),
            e["row"]["points"].as_i64().expect("points"),
        ));
    }
    assert_eq!(
        replayed.iter().map(|r| r.1).collect::<Vec<_>>(),
        vec![1001, 1002, 1003]
    );
    // those up to `last` come from the log, later ones live (on PostgreSQL the tailer may not
    // have seen the writes yet): one ordered stream either way
    assert!(
        replayed[0].0 > seen,
        "{replayed:?} after {seen}, live after {last}"
    );
    assert!(replayed.windows(2).all(|w| w[0].0 < w[1].0), "{replayed:?}");
    set_points(&s, 1, 1004).await;
    assert_eq!(next(&mut ws).await["row"]["points"], 1004);
    // more than retention_rows changes later, the start is gone
    for points in 0..12 {
        set_points(&s, 2, points).await;
    }
    let mut pruned = false;
    for _ in 0..50 {
        let through = s.int(match b {
            Backend::Sqlite => "SELECT through FROM _rowgate_changes_pruned",
            Backend::Postgres => "SELECT through FROM rowgate.changes_pruned",
        });
        if through > start + 1 {
            pruned = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(pruned, "the log was pruned");
    let mut late = connect(&s, "").await;
    subscribe(&mut late, "team", None, Some(start)).await;
    let resync = next(&mut late).await;
    assert_eq!(resync["type"], "resync", "{resync}");
    assert_eq!(resync["since"], start);
    drop((ws, late));
    s.stop().await;
}

/// Row filters and column grants apply to events: an owner sees only its notes; a reader sees
/// only the columns it may read; a role without the grant is refused.
async fn access_rules_apply_to_events(b: Backend) {
    let s = server(b, "").await;
    let (alice_id, alice_token) = common::client_token(&s, "alice", "owner").await;
    let (bob_id, bob_token) = common::client_token(&s, "bob", "owner").await;
    let (_, reader_token) = common::client_token(&s, "r", "reader").await;
    let mut alice = connect(&s, &format!("?access_token={alice_token}")).await;
    let mut bob = connect(&s, "").await;
    send(&mut bob, json!({"type": "auth", "token": bob_token})).await;
    assert_eq!(
        next(&mut bob).await,
        json!({"type": "authenticated", "role": "owner"})
    );
    subscribe(&mut alice, "notes", None, None).await;
    subscribe(&mut bob, "notes", None, None).await;
    for (id, owner) in [(1, &alice_id), (2, &bob_id), (3, &alice_id)] {
        write(
            &s,
            reqwest::Method::POST,
            "/notes",
            Some(json!({"id": id, "owner": owner, "body": "b"})),
        )
        .await;
    }
    assert_eq!(next(&mut alice).await["row"]["id"], 1);
    assert_eq!(next(&mut bob).await["row"]["id"], 2);
    assert_eq!(next(&mut alice).await["row"]["id"], 3);
    // an owner change moves a note out of alice's view: leave, key only
    write(
        &s,
        reqwest::Method::PATCH,
        "/notes?id=eq.3",
        Some(json!({"owner": bob_id})),
    )
    .await;
    let leave = next(&mut alice).await;
    assert_eq!(
        (leave["op"].as_str(), &leave["key"]),
        (Some("leave"), &json!({"id": 3}))
    );
    assert!(leave.get("row").is_none());
    let enter = next(&mut bob).await;
    assert_eq!(
        (enter["op"].as_str(), enter["row"]["owner"].as_str()),
        (Some("enter"), Some(bob_id.as_str()))
    );

    let mut reader = connect(&s, &format!("?access_token={reader_token}")).await;
    subscribe(&mut reader, "team", None, None).await;
    set_points(&s, 3, 7).await;
    let e = next(&mut reader).await;
    assert_eq!(
        e["row"],
        json!({"team_id": 3, "name": e["row"]["name"]}),
        "no points column"
    );
    send(
        &mut reader,
        json!({"type": "subscribe", "table": "team", "filter": "points=gt.1"}),
    )
    .await;
    assert_eq!(
        next(&mut reader).await["code"],
        "PGRST204",
        "points is not readable"
    );
    send(&mut reader, json!({"type": "subscribe", "table": "notes"})).await;
    assert_eq!(next(&mut reader).await["code"], "42501");
    // a bad token at the handshake is an HTTP 401
    let refused =
        tokio_tungstenite::connect_async(format!("ws://{}/realtime?access_token=nope", s.addr))
            .await;
    match refused {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        other => panic!("expected 401, got {other:?}"),
    }
    drop((alice, bob, reader));
    s.stop().await;
}

/// Writes from another program (a plain SQLite connection) are captured by the triggers and
/// delivered (the tailer's poll finds them).
async fn outside_writers_produce_events(b: Backend) {
    let s = server(b, "").await;
    let mut ws = connect(&s, "").await;
    subscribe(&mut ws, "team", None, None).await;
    s.exec("INSERT INTO team (team_id, name, points) VALUES (300, 'Outside', 9)");
    let e = next(&mut ws).await;
    assert_eq!(
        (e["op"].as_str(), e["row"]["name"].as_str()),
        (Some("insert"), Some("Outside"))
    );
    drop(ws);
    s.stop().await;
}

/// A subscription's filter meets the same limits as a REST filter (list length, nesting).
async fn subscription_filters_have_the_rest_limits(b: Backend) {
    let s = server(b, "\n[limits]\nmax_list_items = 3\nmax_filter_depth = 2\n").await;
    let mut ws = connect(&s, "").await;
    for filter in [
        "team_id=in.(1,2,3,4)",
        "or=(team_id.eq.1,and(points.gt.1,or(points.lt.5,name.eq.x)))",
    ] {
        send(
            &mut ws,
            json!({"type": "subscribe", "table": "team", "filter": filter}),
        )
        .await;
        let error = next(&mut ws).await;
        assert_eq!(
            (error["type"].as_str(), error["code"].as_str()),
            (Some("error"), Some("RG102")),
            "{filter}: {error}"
        );
    }
    subscribe(&mut ws, "team", Some("team_id=in.(1,2,3)"), None).await;
    drop(ws);
    s.stop().await;
}

/// Under `realtime.tables = ["*"]`, a table created while the server runs gets change capture
/// once the schema is reloaded (on PostgreSQL the schema version used to stay 0, so a new table
/// got no trigger until a restart).
async fn tables_created_later_are_captured(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(
        dir.path(),
        "[realtime]\ntables = [\"*\"]\npoll_ms = 100\n[[grants]]\nrole = \"anon\"\ntables = [\"*\"]\nops = [\"select\"]\n",
        &[],
    )
    .expect("config");
    let s = TestServer::start_prepared(b, dir, config, NOTES, |_| {}).await;
    s.exec("CREATE TABLE gadgets (id INTEGER PRIMARY KEY, label TEXT)");
    common::wait_until_served(&s, "/gadgets").await;
    let mut ws = connect(&s, "").await;
    subscribe(&mut ws, "gadgets", None, None).await;
    // capture is added by the tailer after the reload: write until a change arrives
    for id in 1..=50 {
        s.exec(&format!("INSERT INTO gadgets VALUES ({id}, 'g{id}')"));
        let frame = tokio::time::timeout(Duration::from_millis(200), ws.next()).await;
        if let Ok(Some(Ok(Message::Text(text)))) = frame {
            let e: Value = serde_json::from_str(text.as_str()).expect("json");
            assert_eq!(
                (e["op"].as_str(), e["table"].as_str()),
                (Some("insert"), Some("gadgets")),
                "{e}"
            );
            drop(ws);
            s.stop().await;
            return;
        }
    }
    panic!("no change from a table created after start");
}

/// Eight writers at once, three subscribers: each receives every event exactly once, in
/// increasing id order.
async fn concurrent_writers_every_event_once_in_order(b: Backend) {
    let s = server(b, "").await;
    let mut subscribers = Vec::new();
    for _ in 0..3 {
        let mut ws = connect(&s, "").await;
        subscribe(&mut ws, "notes", None, None).await;
        subscribers.push(ws);
    }
    let mut writers = Vec::new();
    for w in 0..8i64 {
        let (client, url) = (s.client.clone(), s.url("/notes"));
        writers.push(tokio::spawn(async move {
            for n in 0..25i64 {
                let r = client
                    .post(&url)
                    .json(&json!({"id": w * 1000 + n, "owner": "x", "body": "y"}))
                    .send()
                    .await
                    .expect("post");
                assert_eq!(r.status(), 201);
            }
        }));
    }
    for w in writers {
        w.await.expect("writer");
    }
    for ws in &mut subscribers {
        let mut ids = Vec::new();
        let mut rows = std::collections::HashSet::new();
        for _ in 0..200 {
            let e = next(ws).await;
            ids.push(e["id"].as_i64().expect("id"));
            rows.insert(e["row"]["id"].as_i64().expect("row id"));
        }
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "in order");
        assert_eq!(rows.len(), 200, "every row once");
    }
    drop(subscribers);
    s.stop().await;
}

/// A consumer that stops reading is cut off once its queue is full (with close 1013 when the
/// frame still fits in its socket); a reading one gets every event.
async fn stalled_consumer_is_closed_others_unaffected(b: Backend) {
    const WRITES: i64 = 200;
    let s = server(b, "queue = 128\n").await;
    let mut stalled = connect(&s, "").await;
    let mut reading = connect(&s, "").await;
    subscribe(&mut stalled, "notes", None, None).await;
    subscribe(&mut reading, "notes", None, None).await;
    // enough bytes to fill the stalled socket's buffers and its queue, in few durable writes
    let big = "x".repeat(128 * 1024);
    let writer = {
        let (client, url, big) = (s.client.clone(), s.url("/notes"), big.clone());
        tokio::spawn(async move {
            for id in 0..WRITES {
                let r = client
                    .post(&url)
                    .json(&json!({"id": id, "owner": "x", "body": big}))
                    .send()
                    .await
                    .expect("post");
                assert_eq!(r.status(), 201);
            }
        })
    };
    for expected in 0..WRITES {
        assert_eq!(next(&mut reading).await["row"]["id"], expected);
    }
    writer.await.expect("writer");
    // the stalled one reads now: what its socket held, then the end
    let mut received = 0;
    let mut close_code = None;
    loop {
        match tokio::time::timeout(PATIENCE, stalled.next())
            .await
            .expect("in time")
        {
            Some(Ok(Message::Text(_))) => received += 1,
            Some(Ok(Message::Close(frame))) => {
                close_code = frame.map(|f| u16::from(f.code));
                break;
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => break,
        }
    }
    assert!(received < WRITES, "cut off: {received} of {WRITES} events");
    // the backlog, then a close frame saying why (issue 13, item 16), not a bare EOF
    assert_eq!(close_code, Some(1013), "after {received} events");
    let metrics = common::metrics_text(&s).await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("rowgate_realtime_dropped_total") && !l.ends_with(" 0")),
        "{metrics}"
    );
    // gone before the shutdown, which would wait for their close handshakes
    drop((stalled, reading));
    s.stop().await;
}

/// Malformed, binary, oversized and flooding messages close the connection with 1008, 1003,
/// 1009 and 1008.
async fn bad_client_messages_are_closed(b: Backend) {
    let s = server(b, "max_message_bytes = 1024\nmax_messages_per_s = 20\n").await;
    let mut ws = connect(&s, "").await;
    ws.send(Message::text("{not json")).await.expect("send");
    assert_eq!(closed_with(&mut ws).await, 1008);
    let mut ws = connect(&s, "").await;
    send(
        &mut ws,
        json!({"type": "subscribe", "table": "team", "extra": 1}),
    )
    .await;
    assert_eq!(closed_with(&mut ws).await, 1008, "unknown fields");
    let mut ws = connect(&s, "").await;
    ws.send(Message::binary(vec![1u8, 2, 3]))
        .await
        .expect("send");
    assert_eq!(closed_with(&mut ws).await, 1003);
    let mut ws = connect(&s, "").await;
    ws.send(Message::text("x".repeat(4096)))
        .await
        .expect("send");
    assert_eq!(closed_with(&mut ws).await, 1009);
    let mut ws = connect(&s, "").await;
    for _ in 0..100 {
        if ws.send(Message::text("{\"type\":\"ping\"}")).await.is_err() {
            break;
        }
    }
    let code = loop {
        match tokio::time::timeout(PATIENCE, ws.next())
            .await
            .expect("in time")
        {
            Some(Ok(Message::Close(Some(frame)))) => break u16::from(frame.code),
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(code, 1008, "flooding");
    // a plain GET is told to upgrade
    let r = s
        .client
        .get(s.root_url("/realtime"))
        .send()
        .await
        .expect("get");
    common::assert_error(r, 426, "RG426").await;
    s.stop().await;
}

/// On shutdown, open feeds are closed with 1001 (going away: reconnect and resume).
async fn shutdown_closes_feeds_with_going_away(b: Backend) {
    let s = server(b, "").await;
    let mut ws = connect(&s, "").await;
    subscribe(&mut ws, "team", None, None).await;
    let stopping = tokio::spawn(s.stop());
    assert_eq!(closed_with(&mut ws).await, 1001);
    stopping.await.expect("stopped");
}

/// Two nodes on one database: a change written through either reaches subscribers of both
/// (PostgreSQL: through the database's NOTIFY; SQLite: the file's log, found by the poll).
async fn nodes_share_changes(b: Backend) {
    let a = server(b, "").await;
    let config = write_config(a.dir.path(), &CONFIG.replace("{extra}", ""), &[]).expect("config");
    let other = TestServer::start_beside(&a, config).await;
    let mut on_a = connect(&a, "").await;
    let mut on_other = connect(&other, "").await;
    subscribe(&mut on_a, "team", None, None).await;
    subscribe(&mut on_other, "team", None, None).await;
    set_points(&other, 4, 44).await;
    set_points(&a, 5, 55).await;
    for ws in [&mut on_a, &mut on_other] {
        let first = next(ws).await;
        let second = next(ws).await;
        assert_eq!(
            (
                first["row"]["points"].as_i64(),
                second["row"]["points"].as_i64()
            ),
            (Some(44), Some(55))
        );
    }
    drop((on_a, on_other));
    other.stop().await;
    a.stop().await;
}

/// An open Server-Sent Events stream, read message by message.
struct EventStream {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl EventStream {
    async fn open(s: &TestServer, query: &str, last_event_id: Option<i64>) -> EventStream {
        let mut request = s.client.get(s.root_url(&format!("/realtime/sse{query}")));
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id.to_string());
        }
        let r = request.send().await.expect("sse");
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["content-type"], "text/event-stream");
        EventStream {
            body: Box::pin(r.bytes_stream()),
            buffer: String::new(),
        }
    }

    /// The next message's fields (`event`, `id`, `data` parsed as JSON).
    async fn next(&mut self) -> (Option<String>, Option<i64>, Value) {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let message: String = self.buffer.drain(..end + 2).collect();
                let field = |name: &str| {
                    message
                        .lines()
                        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
                        .map(str::to_string)
                };
                let Some(data) = field("data") else {
                    continue; // retry: and comments
                };
                return (
                    field("event"),
                    field("id").and_then(|i| i.parse().ok()),
                    serde_json::from_str(&data).expect("json data"),
                );
            }
            let chunk = tokio::time::timeout(PATIENCE, self.body.next())
                .await
                .expect("a message in time")
                .expect("open")
                .expect("chunk");
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("utf-8"));
        }
    }
}

/// Server-Sent Events: `subscribed`, then events with `id:` (the WebSocket event JSON);
/// `Last-Event-ID` (what a browser sends when it reconnects) replays what was missed; requests
/// that cannot subscribe get a JSON error before any stream; shutdown ends with `close` 1001.
async fn server_sent_events(b: Backend) {
    let s = server(b, "").await;
    let mut feed = EventStream::open(&s, "?table=team&filter=points=gt.1000", None).await;
    let (event, _, ack) = feed.next().await;
    assert_eq!(
        (event.as_deref(), ack["type"].as_str()),
        (Some("subscribed"), Some("subscribed"))
    );
    set_points(&s, 6, 5).await; // not in
    set_points(&s, 7, 2001).await;
    let (event, id, data) = feed.next().await;
    assert_eq!(event, None, "events are unnamed messages");
    assert_eq!(
        (data["op"].as_str(), data["row"]["team_id"].as_i64()),
        (Some("enter"), Some(7))
    );
    assert_eq!(id, data["id"].as_i64());
    let seen = id.expect("id");
    drop(feed);
    set_points(&s, 7, 2002).await;
    set_points(&s, 8, 2003).await;
    let mut again = EventStream::open(&s, "?table=team&filter=points=gt.1000", Some(seen)).await;
    assert_eq!(again.next().await.0.as_deref(), Some("subscribed"));
    let missed: Vec<i64> = [again.next().await, again.next().await]
        .iter()
        .map(|(_, _, d)| d["row"]["points"].as_i64().expect("points"))
        .collect();
    assert_eq!(missed, vec![2002, 2003]);
    for (query, status, code) in [
        ("", 400, "PGRST100"),
        ("?table=employee", 400, "RG420"),
        ("?table=team&filter=nope=eq.1", 400, "PGRST204"),
        ("?table=team&since=abc", 400, "PGRST100"),
        ("?table=team&access_token=bad", 401, "PGRST301"),
    ] {
        let r = s
            .client
            .get(s.root_url(&format!("/realtime/sse{query}")))
            .send()
            .await
            .expect("get");
        common::assert_error(r, status, code).await;
    }
    let stopping = tokio::spawn(s.stop());
    let (event, _, data) = again.next().await;
    assert_eq!(
        (event.as_deref(), data["code"].as_i64()),
        (Some("close"), Some(1001))
    );
    stopping.await.expect("stopped");
}

/// The one sweeper pings every connection silent for `ping_s`, a slice of them at a time: a
/// client that answers (any client library that reads does) stays; one silent for two rounds
/// is closed with 1001 at its next ping (within three rounds of its last word).
async fn silent_clients_are_closed_by_the_sweeper(b: Backend) {
    let s = server(b, "ping_s = 1\n").await;
    let mut silent = connect(&s, "").await;
    let mut alive = connect(&s, "").await;
    let mut talking = connect(&s, "").await;
    subscribe(&mut silent, "team", None, None).await;
    subscribe(&mut alive, "team", None, None).await;
    subscribe(&mut talking, "team", None, None).await;
    // the live client reads (and so answers pings) for a while; the silent one does nothing;
    // the talking one sends its own keep-alive twice a round (as realtime-js's heartbeats)
    let (mut alive_pinged, mut talking_pinged, mut talking_pongs) = (0, 0, 0);
    let reading = tokio::time::timeout(Duration::from_millis(4500), async {
        let mut heartbeat = tokio::time::interval(Duration::from_millis(400));
        loop {
            tokio::select! {
                message = alive.next() => match message {
                    Some(Ok(Message::Ping(_))) => alive_pinged += 1,
                    Some(Ok(_)) => {}
                    _ => break,
                },
                message = talking.next() => match message {
                    Some(Ok(Message::Ping(_))) => talking_pinged += 1,
                    Some(Ok(Message::Text(text))) if text.contains("pong") => talking_pongs += 1,
                    Some(Ok(_)) => {}
                    _ => break,
                },
                _ = heartbeat.tick() => send(&mut talking, json!({"type": "ping"})).await,
            }
        }
    })
    .await;
    assert!(reading.is_err(), "the answering clients stayed connected");
    assert!(
        alive_pinged >= 2,
        "the quiet client pinged each round: {alive_pinged}"
    );
    assert_eq!(
        talking_pinged, 0,
        "a client heard within the round is not pinged"
    );
    assert!(
        talking_pongs >= 5,
        "its keep-alives answered: {talking_pongs}"
    );
    assert_eq!(closed_with(&mut silent).await, 1001);
    let metrics = common::metrics_text(&s).await;
    for series in [
        "rowgate_realtime_connections",
        "rowgate_realtime_queued",
        "rowgate_realtime_subscriptions",
    ] {
        assert!(
            metrics.lines().any(|l| l.starts_with(series)),
            "{series} in {metrics}"
        );
    }
    // the other two keep reading (and so answering pings) while the metrics are read
    let readers = tokio::spawn(async move {
        let (mut alive, mut talking) = (alive, talking);
        loop {
            tokio::select! {
                Some(Ok(_)) = alive.next() => {}
                Some(Ok(_)) = talking.next() => {}
                else => break,
            }
        }
    });
    // the silent client's subscription went with it (once its session has ended): two are left
    let mut subscriptions = String::new();
    for _ in 0..50 {
        let metrics = common::metrics_text(&s).await;
        subscriptions = metrics
            .lines()
            .find(|l| l.starts_with("rowgate_realtime_subscriptions{"))
            .unwrap_or_default()
            .to_string();
        if subscriptions.ends_with(" 2") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(subscriptions.ends_with(" 2"), "{subscriptions}");
    readers.abort();
    drop(silent);
    s.stop().await;
}

/// The session is generic over Sink/Stream: here it runs over an in-memory pipe, no socket
/// and no HTTP upgrade, and behaves the same.
async fn session_runs_without_a_socket(b: Backend) {
    use tokio_tungstenite::tungstenite::protocol::Role;
    let s = server(b, "").await;
    let (client_end, server_end) = tokio::io::duplex(64 * 1024);
    let server_ws =
        tokio_tungstenite::WebSocketStream::from_raw_socket(server_end, Role::Server, None).await;
    let (_draining, drained) = tokio::sync::watch::channel(false);
    let principal = s
        .app
        .auth
        .authenticate(&http::HeaderMap::new())
        .expect("anonymous");
    tokio::spawn(rowgate::realtime::session::run(
        server_ws,
        rowgate::realtime::session::Context {
            app: s.app.clone(),
            principal,
            draining: drained,
            phoenix: None,
        },
    ));
    let mut client =
        tokio_tungstenite::WebSocketStream::from_raw_socket(client_end, Role::Client, None).await;
    subscribe(&mut client, "team", None, None).await;
    set_points(&s, 9, 99).await;
    let e = next(&mut client).await;
    assert_eq!(
        (e["op"].as_str(), e["row"]["points"].as_i64()),
        (Some("update"), Some(99))
    );
    send(&mut client, json!({"type": "nonsense"})).await;
    assert_eq!(closed_with(&mut client).await, 1008);
    s.stop().await;
}

/// An open WebSocket counts against `limits.max_connections` like any connection.
async fn websockets_count_as_connections(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = write_config(dir.path(), &CONFIG.replace("{extra}", ""), &[]).expect("config");
    config.limits.max_connections = 3;
    let s = TestServer::start_prepared(b, dir, config, NOTES, |_| {}).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut ws = connect(&s, "").await;
        send(&mut ws, json!({"type": "ping"})).await;
        assert_eq!(next(&mut ws).await["type"], "pong");
        held.push(ws);
    }
    let status = common::raw_status(s.addr, "GET /live HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert_eq!(status, 503);
    drop(held);
    let mut served = false;
    for _ in 0..50 {
        let fresh = reqwest::Client::new();
        if fresh
            .get(s.root_url("/live"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            served = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(served, "served again once the sockets closed");
}

/// As many WebSockets as `limits.max_connections` says fit, opened all at once: an upgraded
/// connection is counted once (it was counted twice between its 101 answer and hyper letting go
/// of the socket, and a connection accepted in that moment was refused with a 503).
async fn the_connection_limit_holds_that_many_websockets(b: Backend) {
    const LIMIT: usize = 400;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut config = write_config(dir.path(), &CONFIG.replace("{extra}", ""), &[]).expect("config");
    config.limits.max_connections = LIMIT;
    // every socket comes from 127.0.0.1
    config.realtime.max_connections_per_address = 0;
    let s = TestServer::start_prepared(b, dir, config, NOTES, |_| {}).await;
    let url = format!("ws://{}/realtime", s.addr);
    for round in 0..20 {
        let opened = futures_util::future::join_all(
            (0..LIMIT).map(|_| tokio_tungstenite::connect_async(url.clone())),
        )
        .await;
        let refused: Vec<String> = opened
            .iter()
            .filter_map(|o| o.as_ref().err().map(ToString::to_string))
            .collect();
        assert!(refused.is_empty(), "round {round}: {refused:?}");
        drop(opened);
        // the sockets close; the next round starts once the server has let go of them all
        let mut free = false;
        for _ in 0..100 {
            let body = reqwest::get(s.root_url("/metrics"))
                .await
                .expect("metrics")
                .text()
                .await
                .expect("metrics");
            // this request's own connection is the one left
            if metric(&body, "rowgate_http_connections_open") <= 1.0 {
                free = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(free, "round {round}: the closed sockets are let go of");
    }
}

/// The value of the first sample of `name` in a Prometheus text answer.
fn metric(body: &str, name: &str) -> f64 {
    body.lines()
        .find(|l| l.starts_with(name) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::MAX)
}

sqlite_tests!(
    silent_clients_are_closed_by_the_sweeper,
    session_runs_without_a_socket,
    websockets_count_as_connections,
    the_connection_limit_holds_that_many_websockets
);

/// Issue 13, item 16: the server echoes a client's Close with the client's code (RFC 6455
/// §5.5.1), so the client sees a clean close and not 1006.
async fn client_close_is_echoed(b: Backend) {
    let s = server(b, "").await;
    let mut ws = connect(&s, "").await;
    subscribe(&mut ws, "team", None, None).await;
    ws.send(Message::Close(Some(
        tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code: 4000u16.into(),
            reason: "bye".into(),
        },
    )))
    .await
    .expect("send close");
    assert_eq!(closed_with(&mut ws).await, 4000);
}

/// Issue 13, item 1: revoking a client (or retiring its secret) closes its open streams, a
/// WebSocket with 1008 and an SSE stream with `event: close`, within `auth.clients_poll_ms`
/// and a second; a subscription attempt in between is refused; other clients go on.
async fn revoked_clients_lose_their_streams(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = write_config(dir.path(), &CONFIG.replace("{extra}", ""), &[]).expect("config");
    let s =
        TestServer::start_prepared(b, dir, config, NOTES, |c| c.auth.clients_poll_ms = 200).await;
    let (_, alice) = common::client_token(&s, "alice", "reader").await;
    let (_, carol) = common::client_token(&s, "carol", "reader").await;
    let mut alice_ws = connect(&s, &format!("?access_token={alice}")).await;
    subscribe(&mut alice_ws, "team", None, None).await;
    let mut alice_sse =
        EventStream::open(&s, &format!("?table=team&access_token={alice}"), None).await;
    assert_eq!(alice_sse.next().await.0.as_deref(), Some("subscribed"));
    let mut carol_ws = connect(&s, &format!("?access_token={carol}")).await;
    subscribe(&mut carol_ws, "team", None, None).await;

    rowgate::auth::clients::revoke(&s.app.db, "alice")
        .await
        .expect("revoke");
    // Once the server has seen the revocation (clients_poll_ms), nothing more is accepted: a
    // subscription is refused and the connection closes.
    tokio::time::sleep(Duration::from_millis(600)).await;
    send(
        &mut alice_ws,
        json!({"type": "subscribe", "table": "team", "filter": "team_id=eq.1"}),
    )
    .await;
    let code = loop {
        match tokio::time::timeout(PATIENCE, alice_ws.next())
            .await
            .expect("closed in time")
        {
            Some(Ok(Message::Close(Some(frame)))) => break u16::from(frame.code),
            Some(Ok(Message::Text(text))) => {
                let m: Value = serde_json::from_str(text.as_str()).expect("json");
                assert_ne!(m["type"], "subscribed", "a revoked client subscribed: {m}");
            }
            Some(Ok(_)) => {}
            other => panic!("no close frame: {other:?}"),
        }
    };
    assert_eq!(code, 1008);
    let (event, _, data) = alice_sse.next().await;
    assert_eq!(
        (event.as_deref(), data["code"].as_i64()),
        (Some("close"), Some(1008)),
        "{data}"
    );
    assert!(
        data["reason"].as_str().unwrap_or("").contains("revoked"),
        "{data}"
    );
    // The SSE stream ends after its close event.
    let ended = tokio::time::timeout(PATIENCE, alice_sse.body.next())
        .await
        .expect("ended in time");
    assert!(ended.is_none(), "the stream went on: {ended:?}");
    // A new connection with the revoked token is refused; the other client still gets events.
    let refused =
        tokio_tungstenite::connect_async(format!("ws://{}/realtime?access_token={alice}", s.addr))
            .await;
    assert!(refused.is_err(), "a revoked token opened a stream");
    set_points(&s, 3, 4242).await;
    let event = next(&mut carol_ws).await;
    assert_eq!(event["row"]["team_id"], 3, "{event}");
}

/// A subscription to a duality view receives the whole new document (its new etag too) when
/// any of its rows changes, from any writer: the root row, a nested row, a row it refers to
/// (the team of a driver document); filtered by document fields; replayed after `since`.
async fn duality_view_documents_are_followed(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = r#"
[realtime]
tables = ["team", "driver", "race", "driver_race_map"]
poll_ms = 100

[[grants]]
role = "anon"
tables = ["*"]
ops = ["select", "insert", "update", "delete"]

[[duality_views]]
name = "team_dv"
table = "team"
document = "_id:team_id,name,points,driver(driverId:driver_id,name,points)"
update = ["team", "driver"]
nocheck = ["driver.points"]

[[duality_views]]
name = "driver_dv"
table = "driver"
document = "_id:driver_id,name,points,...team(teamId:team_id,team:name),race:driver_race_map(driverRaceMapId:driver_race_map_id,...race(raceId:race_id,name),finalPosition:position)"

[[duality_views]]
name = "posts_dv"
table = "posts"
document = "_id:id,title"
"#;
    let config = write_config(dir.path(), config, &[]).expect("config");
    let s = TestServer::start_prepared(b, dir, config, "", |_| {}).await;
    let mut ws = connect(&s, "").await;
    subscribe(&mut ws, "team_dv", None, None).await;
    let mut one = connect(&s, "").await;
    subscribe(&mut one, "driver_dv", Some("_id=eq.3"), None).await;
    // a nested row changes: the team's document, whole, with its new etag
    write(
        &s,
        reqwest::Method::PATCH,
        "/driver?driver_id=eq.3",
        Some(json!({"name": "Charles Leclerc (MON)"})),
    )
    .await;
    let event = next(&mut ws).await;
    assert_eq!(
        (&event["type"], &event["table"], &event["op"], &event["key"]),
        (
            &json!("event"),
            &json!("team_dv"),
            &json!("update"),
            &json!({"_id": 2})
        ),
        "{event}"
    );
    let (_, document) = common::get_json(&s, "/team_dv/2").await;
    assert_eq!(
        event["row"], document,
        "the event is the document a GET reads"
    );
    let event = next(&mut one).await;
    assert_eq!(
        (&event["table"], &event["key"]),
        (&json!("driver_dv"), &json!({"_id": 3}))
    );
    assert_eq!(event["row"]["name"], "Charles Leclerc (MON)");
    // a document write; the team is referred to by driver documents 3 and 4 (only 3 is followed)
    let mut team = document.clone();
    team["name"] = json!("Scuderia Ferrari");
    let r = s.put("/team_dv/2", team).send().await.expect("put");
    assert_eq!(r.status(), 200);
    let event = next(&mut ws).await;
    assert_eq!(event["row"]["name"], "Scuderia Ferrari", "{event}");
    assert_ne!(event["row"]["_metadata"], document["_metadata"]);
    let event = next(&mut one).await;
    assert_eq!(
        (&event["key"], &event["row"]["team"]),
        (&json!({"_id": 3}), &json!("Scuderia Ferrari")),
        "{event}"
    );
    let seen = event["id"].as_i64().expect("id");
    // a result two levels down, while the follower is away: replayed from `since`
    drop(one);
    write(
        &s,
        reqwest::Method::POST,
        "/driver_race_map",
        Some(json!({"race_id": 1, "driver_id": 3, "position": 1})),
    )
    .await;
    let mut back = connect(&s, "").await;
    subscribe(&mut back, "driver_dv", Some("_id=eq.3"), Some(seen)).await;
    let event = next(&mut back).await;
    assert_eq!(event["key"], json!({"_id": 3}), "{event}");
    assert_eq!(
        event["row"]["race"][0]["name"], "Bahrain Grand Prix",
        "{event}"
    );
    // a new root row is an insert, a deleted one a delete (only its key)
    write(
        &s,
        reqwest::Method::POST,
        "/team",
        Some(json!({"team_id": 30, "name": "Lotus"})),
    )
    .await;
    let mut inserted = next(&mut ws).await;
    while inserted["key"] != json!({"_id": 30}) {
        inserted = next(&mut ws).await;
    }
    assert_eq!(inserted["op"], "insert", "{inserted}");
    write(&s, reqwest::Method::DELETE, "/team?team_id=eq.30", None).await;
    let deleted = next(&mut ws).await;
    assert_eq!(
        (&deleted["op"], &deleted["key"]),
        (&json!("delete"), &json!({"_id": 30})),
        "{deleted}"
    );
    assert!(deleted.get("row").is_none());
    // a view made of a table that is not captured is refused
    send(&mut ws, json!({"type": "subscribe", "table": "posts_dv"})).await;
    let error = next(&mut ws).await;
    assert_eq!(
        (&error["type"], &error["code"]),
        (&json!("error"), &json!("RG420")),
        "{error}"
    );
    drop((ws, back));
    s.stop().await;
}

backend_tests!(
    duality_view_documents_are_followed,
    client_close_is_echoed,
    revoked_clients_lose_their_streams,
    server_sent_events,
    nodes_share_changes,
    insert_update_delete_events,
    filters_enter_and_leave,
    resume_with_since_and_resync_past_retention,
    access_rules_apply_to_events,
    outside_writers_produce_events,
    tables_created_later_are_captured,
    subscription_filters_have_the_rest_limits,
    concurrent_writers_every_event_once_in_order,
    stalled_consumer_is_closed_others_unaffected,
    bad_client_messages_are_closed,
    shutdown_closes_feeds_with_going_away,
);
