//! The realtime wire protocol: JSON text messages (documented in `docs/realtime.md`).
//!
//! Client → server: `auth`, `subscribe`, `unsubscribe`, `ping`. Server → client:
//! `authenticated`, `subscribed`, `event`, `resync`, `unsubscribed`, `error`, `pong`. Close
//! codes: [`close`].

use serde::Deserialize;
use serde_json::{json, Map, Value as Json};

use crate::error::ApiError;

/// A message from the client.
#[derive(Debug, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "lowercase", deny_unknown_fields)]
pub enum ClientMessage {
    /// Authenticate (or re-authenticate) with a bearer token.
    Auth {
        /// The token.
        token: String,
    },
    /// Follow a table's changes, optionally filtered, optionally from an event id on.
    Subscribe {
        /// The table.
        table: String,
        /// Filter in the REST syntax: `points=gt.10&name=like.A*`.
        #[serde(default)]
        filter: Option<String>,
        /// The last event id the client has seen: events after it are replayed first.
        #[serde(default)]
        since: Option<i64>,
    },
    /// Stop following a table.
    Unsubscribe {
        /// The table.
        table: String,
    },
    /// Keep-alive; answered with `pong`.
    Ping,
}

/// Close codes the server uses.
pub mod close {
    /// The server is shutting down or reloading: reconnect (with `since`).
    pub const GOING_AWAY: u16 = 1001;
    /// A frame the WebSocket protocol does not allow (unmasked, a control frame over 125
    /// bytes or fragmented, reserved bits, an unknown opcode: RFC 6455 §5).
    pub const PROTOCOL_ERROR: u16 = 1002;
    /// A binary message (only JSON text is spoken).
    pub const UNSUPPORTED: u16 = 1003;
    /// A text message that is not UTF-8.
    pub const INVALID_TEXT: u16 = 1007;
    /// A malformed message, too many messages, or an expired token.
    pub const POLICY: u16 = 1008;
    /// A message over `realtime.max_message_bytes`.
    pub const TOO_BIG: u16 = 1009;
    /// The client fell too far behind (`realtime.queue` events waiting): reconnect with `since`.
    pub const TRY_AGAIN: u16 = 1013;
}

/// `{"type":"authenticated","role":…}`
pub fn authenticated(role: &str) -> String {
    json!({"type": "authenticated", "role": role}).to_string()
}

/// `{"type":"subscribed","table":…,"last":…}`: live after event `last`.
pub fn subscribed(table: &str, last: i64) -> String {
    json!({"type": "subscribed", "table": table, "last": last}).to_string()
}

/// `{"type":"unsubscribed","table":…}`
pub fn unsubscribed(table: &str) -> String {
    json!({"type": "unsubscribed", "table": table}).to_string()
}

/// `{"type":"resync",…}`: events after `since` were pruned; re-read the table, then go on.
pub fn resync(table: &str, since: i64, pruned_through: i64) -> String {
    json!({"type": "resync", "table": table, "since": since, "pruned_through": pruned_through})
        .to_string()
}

/// `{"type":"error",…}` with the REST error's fields (and the table it concerns).
pub fn error(err: &ApiError, table: Option<&str>) -> String {
    let mut body: Map<String, Json> = serde_json::from_slice(&err.body()).unwrap_or_default();
    body.insert("type".into(), Json::from("error"));
    if let Some(table) = table {
        body.insert("table".into(), Json::from(table));
    }
    Json::Object(body).to_string()
}

/// One event, serialised once and shared by every subscriber with the same view.
#[derive(Debug, Clone)]
pub struct Event {
    /// The change's id.
    pub id: i64,
    /// The event JSON (see [`event`]).
    pub json: tokio_tungstenite::tungstenite::Utf8Bytes,
}

/// `{"type":"pong"}`
pub const PONG: &str = "{\"type\":\"pong\"}";

/// What an event means for one subscription.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A new matching row.
    Insert,
    /// A matching row changed and still matches.
    Update,
    /// A matching row was deleted.
    Delete,
    /// A row changed and now matches (it did not before).
    Enter,
    /// A row changed and no longer matches: only its key is sent.
    Leave,
}

impl Kind {
    /// As sent in `op`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Insert => "insert",
            Kind::Update => "update",
            Kind::Delete => "delete",
            Kind::Enter => "enter",
            Kind::Leave => "leave",
        }
    }
}

/// `{"type":"event","id":…,"table":…,"op":…,"key":{…},"row":{…}}` (no `row` for `leave`).
pub fn event(
    id: i64,
    table: &str,
    kind: Kind,
    key: Option<Map<String, Json>>,
    row: Option<Map<String, Json>>,
) -> String {
    let mut body = Map::new();
    body.insert("type".into(), Json::from("event"));
    body.insert("id".into(), Json::from(id));
    body.insert("table".into(), Json::from(table));
    body.insert("op".into(), Json::from(kind.name()));
    body.insert("key".into(), key.map_or(Json::Null, Json::Object));
    if let Some(row) = row {
        body.insert("row".into(), Json::Object(row));
    }
    Json::Object(body).to_string()
}
