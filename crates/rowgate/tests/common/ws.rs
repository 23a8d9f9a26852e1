//! WebSocket clients of the realtime tests: the next frame of any socket, and a client of
//! Supabase's realtime socket (`/realtime/v1/websocket`, `vsn` 2.0.0) speaking raw Phoenix
//! frames.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::Message;

/// A client's socket.
pub type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// How long a frame may take.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A socket to the server at `addr`, anonymous.
pub async fn connect(addr: &str) -> Socket {
    let url = format!("ws://{addr}/realtime/v1/websocket?vsn=2.0.0");
    tokio_tungstenite::connect_async(url)
        .await
        .expect("websocket")
        .0
}

/// A socket of Rowgate's own protocol (`/realtime` on the server at `addr`, as `token`'s bearer
/// or anonymous) subscribed to `table`, its `subscribed` acknowledgement read.
pub async fn follow(addr: std::net::SocketAddr, table: &str, token: Option<&str>) -> Socket {
    follow_filtered(addr, table, token, None).await
}

/// [`follow`] with a subscription `filter` (REST syntax).
pub async fn follow_filtered(
    addr: std::net::SocketAddr,
    table: &str,
    token: Option<&str>,
    filter: Option<&str>,
) -> Socket {
    let query = token.map_or(String::new(), |t| format!("?access_token={t}"));
    let (mut socket, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/realtime{query}"))
        .await
        .expect("websocket");
    let mut subscribe = json!({"type": "subscribe", "table": table});
    if let Some(filter) = filter {
        subscribe["filter"] = json!(filter);
    }
    socket
        .send(Message::text(subscribe.to_string()))
        .await
        .expect("send");
    let ack = next(&mut socket).await;
    assert_eq!(ack["type"], "subscribed", "{ack}");
    socket
}

/// The next text frame of any WebSocket (over a socket or in memory) as JSON; panics on a
/// close or after [`PATIENCE`].
pub async fn next<S>(socket: &mut S) -> Value
where
    S: futures_util::Stream<Item = Result<Message, tokio_tungstenite::tungstenite::Error>> + Unpin,
{
    loop {
        let message = tokio::time::timeout(PATIENCE, socket.next())
            .await
            .expect("a frame in time")
            .expect("open")
            .expect("frame");
        match message {
            Message::Text(text) => return serde_json::from_str(text.as_str()).expect("json"),
            Message::Close(frame) => panic!("closed: {frame:?}"),
            _ => {}
        }
    }
}

/// The reply to a `phx_join` of `topic` with `postgres_changes` on `team` filtered by each of
/// `filters` (the `system` frame that follows an accepted one is read too).
pub async fn join(socket: &mut Socket, topic: &str, filters: &[String]) -> Value {
    let changes: Vec<Value> = filters
        .iter()
        .map(|f| json!({"event": "*", "schema": "public", "table": "team", "filter": f}))
        .collect();
    let frame = json!(["1", "1", format!("realtime:{topic}"), "phx_join",
        {"config": {"postgres_changes": changes, "private": false}}]);
    socket
        .send(Message::text(frame.to_string()))
        .await
        .expect("send");
    let reply = next(socket).await;
    assert_eq!(reply[3], "phx_reply", "{reply}");
    if reply[4]["status"] == "ok" && !filters.is_empty() {
        assert_eq!(next(socket).await[3], "system");
    }
    reply
}

/// Why a join was refused.
pub fn reason(reply: &Value) -> &str {
    reply[4]["response"]["reason"].as_str().unwrap_or_default()
}
