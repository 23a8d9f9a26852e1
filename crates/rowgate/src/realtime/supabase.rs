//! Supabase Realtime's wire format (the Phoenix channel protocol realtime-js speaks), as data:
//! frames decoded and encoded for `vsn` 1.0.0 (JSON objects) and 2.0.0 (JSON arrays
//! `[join_ref, ref, topic, event, payload]`, and the binary "user broadcast push" realtime-js
//! sends for `channel.send`), and a `postgres_changes` binding's messages built from a captured
//! change. No I/O: [`super::phoenix`] runs the sessions.

use serde_json::{json, Map, Value as Json};

use super::capture::Change;
use super::protocol::{Event, Kind};

/// The protocol version a client asked for (`vsn` in the URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vsn {
    /// `1.0.0`: JSON objects.
    V1,
    /// `2.0.0` (realtime-js's default): JSON arrays, binary broadcast pushes.
    V2,
}

impl Vsn {
    /// The version `vsn` names (2.0.0 when absent); `None` for one not spoken.
    pub fn parse(vsn: Option<&str>) -> Option<Vsn> {
        match vsn {
            None | Some("2.0.0") => Some(Vsn::V2),
            Some("1.0.0") => Some(Vsn::V1),
            Some(_) => None,
        }
    }
}

/// One Phoenix message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// The channel's join reference (echoed as given).
    pub join_ref: Option<String>,
    /// The message's reference (a reply carries the request's).
    pub reference: Option<String>,
    /// `realtime:{name}`, or `phoenix` for heartbeats.
    pub topic: String,
    /// `phx_join`, `heartbeat`, `broadcast`, …
    pub event: String,
    /// Always an object.
    pub payload: Json,
}

/// Decodes a text frame.
pub fn decode_text(vsn: Vsn, text: &str) -> Result<Message, String> {
    let json: Json = serde_json::from_str(text).map_err(|e| format!("malformed message: {e}"))?;
    let string = |v: &Json| v.as_str().map(str::to_string);
    let message = match (vsn, json) {
        (Vsn::V2, Json::Array(items)) if items.len() == 5 => Message {
            join_ref: string(&items[0]),
            reference: string(&items[1]),
            topic: string(&items[2]).ok_or("the topic must be a string")?,
            event: string(&items[3]).ok_or("the event must be a string")?,
            payload: items[4].clone(),
        },
        (Vsn::V1, Json::Object(map)) => Message {
            join_ref: map.get("join_ref").and_then(string),
            reference: map.get("ref").and_then(string),
            topic: map
                .get("topic")
                .and_then(string)
                .ok_or("the topic must be a string")?,
            event: map
                .get("event")
                .and_then(string)
                .ok_or("the event must be a string")?,
            payload: map.get("payload").cloned().unwrap_or(Json::Null),
        },
        _ => return Err("not a Phoenix message of this vsn".into()),
    };
    if !message.payload.is_object() {
        return Err("the payload must be an object".into());
    }
    Ok(message)
}

/// Decodes a binary frame: realtime-js's user broadcast push (kind 3: lengths of the join ref,
/// ref, topic, event and metadata, the payload's encoding, then those strings and the
/// payload), as the `broadcast` message it stands for.
pub fn decode_binary(bytes: &[u8]) -> Result<Message, String> {
    let bad = || "not a broadcast push".to_string();
    let header = bytes.get(..7).ok_or_else(bad)?;
    if header[0] != 3 {
        return Err(bad());
    }
    let mut at = 7;
    let mut field = |len: u8| -> Result<String, String> {
        let end = at + usize::from(len);
        let text = bytes.get(at..end).ok_or_else(bad)?;
        at = end;
        String::from_utf8(text.to_vec()).map_err(|_| bad())
    };
    let join_ref = field(header[1])?;
    let reference = field(header[2])?;
    let topic = field(header[3])?;
    let event = field(header[4])?;
    let _metadata = field(header[5])?;
    let body = &bytes[at..];
    if header[6] != 1 {
        return Err("binary broadcast payloads are not relayed; send JSON".into());
    }
    let payload: Json = serde_json::from_slice(body).map_err(|_| bad())?;
    let some = |s: String| (!s.is_empty()).then_some(s);
    Ok(Message {
        join_ref: some(join_ref),
        reference: some(reference),
        topic,
        event: "broadcast".into(),
        payload: json!({"type": "broadcast", "event": event, "payload": payload}),
    })
}

/// Encodes a message as a text frame.
pub fn encode(
    vsn: Vsn,
    join_ref: Option<&str>,
    reference: Option<&str>,
    topic: &str,
    event: &str,
    payload: &Json,
) -> String {
    match vsn {
        Vsn::V2 => json!([join_ref, reference, topic, event, payload]).to_string(),
        Vsn::V1 => {
            let mut map = Map::new();
            map.insert("topic".into(), json!(topic));
            map.insert("event".into(), json!(event));
            map.insert("payload".into(), payload.clone());
            map.insert("ref".into(), json!(reference));
            if let Some(join_ref) = join_ref {
                map.insert("join_ref".into(), json!(join_ref));
            }
            Json::Object(map).to_string()
        }
    }
}

/// `phx_reply` to `request`: `{"status": …, "response": …}`.
pub fn reply(vsn: Vsn, request: &Message, ok: bool, response: Json) -> String {
    let status = if ok { "ok" } else { "error" };
    encode(
        vsn,
        request.join_ref.as_deref(),
        request.reference.as_deref(),
        &request.topic,
        "phx_reply",
        &json!({"status": status, "response": response}),
    )
}

/// Which changes a binding asks for (`event` of its `postgres_changes` entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Events {
    /// `*`.
    All,
    /// `INSERT`.
    Insert,
    /// `UPDATE`.
    Update,
    /// `DELETE`.
    Delete,
}

impl Events {
    /// The `event` of a `postgres_changes` entry.
    pub fn parse(event: &str) -> Option<Events> {
        Some(match event.to_ascii_uppercase().as_str() {
            "*" => Events::All,
            "INSERT" => Events::Insert,
            "UPDATE" => Events::Update,
            "DELETE" => Events::Delete,
            _ => return None,
        })
    }
}

/// One `postgres_changes` binding of a joined channel: where its messages go and what it
/// asks for. Its filter and column view are the hub subscription's.
#[derive(Debug)]
pub struct Binding {
    /// Its id, as the join reply gave it (the client matches messages by it).
    pub id: u64,
    /// The channel's topic and join reference.
    pub topic: String,
    /// The channel's join reference.
    pub join_ref: String,
    /// The client's protocol version.
    pub vsn: Vsn,
    /// The changes it asks for.
    pub events: Events,
    /// The schema it named.
    pub schema: String,
    /// The table's columns and their PostgreSQL type names (`columns` of each message).
    pub columns: Json,
}

impl Binding {
    /// The `postgres_changes` message of `change` seen as `kind`, if the binding asks for it:
    /// a row entering the filter is an `UPDATE`, one leaving it is not sent (Supabase filters
    /// updates by the new row). `project` keeps the columns the subscriber may read.
    pub fn frame(
        &self,
        change: &Change,
        kind: Kind,
        project: impl Fn(Option<&Map<String, Json>>) -> Option<Map<String, Json>>,
    ) -> Option<Event> {
        let (name, wanted) = match kind {
            Kind::Insert => ("INSERT", Events::Insert),
            Kind::Update | Kind::Enter => ("UPDATE", Events::Update),
            Kind::Delete => ("DELETE", Events::Delete),
            Kind::Leave => return None,
        };
        if self.events != Events::All && self.events != wanted {
            return None;
        }
        let mut data = Map::new();
        data.insert("type".into(), json!(name));
        data.insert("schema".into(), json!(self.schema));
        data.insert("table".into(), json!(change.table));
        data.insert("commit_timestamp".into(), json!(timestamp(change.at)));
        data.insert("columns".into(), self.columns.clone());
        if kind != Kind::Delete {
            data.insert(
                "record".into(),
                project(change.new.as_ref()).map_or(Json::Null, Json::Object),
            );
        }
        if kind != Kind::Insert {
            data.insert(
                "old_record".into(),
                project(change.old.as_ref()).map_or(json!({}), Json::Object),
            );
        }
        data.insert("errors".into(), Json::Null);
        let payload = json!({"ids": [self.id], "data": data});
        Some(Event {
            id: change.id,
            json: encode(
                self.vsn,
                Some(&self.join_ref),
                None,
                &self.topic,
                "postgres_changes",
                &payload,
            )
            .into(),
        })
    }
}

/// A Unix time in milliseconds as RFC 3339 UTC (`2026-11-24T06:00:00.123Z`).
fn timestamp(millis: i64) -> String {
    chrono::DateTime::from_timestamp_millis(millis)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}

/// A column's PostgreSQL type name as realtime-js reads it (`int4`, `bool`, `jsonb`, …): from
/// a declared type (SQLite's as written, PostgreSQL's as `format_type` prints it).
pub fn type_name(declared: &str) -> String {
    let lower = declared.to_ascii_lowercase();
    let base = lower.split('(').next().unwrap_or_default().trim();
    let (base, array) = match base.strip_suffix("[]") {
        Some(inner) => (inner.trim(), true),
        None => (base, false),
    };
    let name = match base {
        "integer" | "int" | "int4" | "mediumint" => "int4",
        "bigint" | "int8" => "int8",
        "smallint" | "int2" | "tinyint" => "int2",
        "real" | "float4" => "float4",
        "double precision" | "double" | "float" | "float8" => "float8",
        "numeric" | "decimal" => "numeric",
        "boolean" | "bool" => "bool",
        "json" => "json",
        "jsonb" => "jsonb",
        "timestamp" | "timestamp without time zone" | "datetime" => "timestamp",
        "timestamptz" | "timestamp with time zone" => "timestamptz",
        "date" => "date",
        "uuid" => "uuid",
        "character varying" | "varchar" => "varchar",
        _ => "text",
    };
    if array {
        format!("_{name}")
    } else {
        name.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_decode_in_both_versions() {
        let m = decode_text(
            Vsn::V2,
            r#"["6","6","realtime:x","phx_join",{"config":{}}]"#,
        )
        .expect("v2");
        assert_eq!(m.join_ref.as_deref(), Some("6"));
        assert_eq!(m.topic, "realtime:x");
        let m = decode_text(
            Vsn::V1,
            r#"{"topic":"phoenix","event":"heartbeat","payload":{},"ref":"7"}"#,
        )
        .expect("v1");
        assert_eq!((m.event.as_str(), m.join_ref), ("heartbeat", None));
        assert!(decode_text(Vsn::V2, r#"["6","6","realtime:x","phx_join",null]"#).is_err());
        assert!(decode_text(Vsn::V2, r#"{"topic":"x"}"#).is_err());
        assert_eq!(
            encode(Vsn::V2, None, Some("7"), "phoenix", "phx_reply", &json!({})),
            r#"[null,"7","phoenix","phx_reply",{}]"#
        );
    }

    #[test]
    fn binary_broadcast_pushes_decode() {
        // realtime-js's capture of send({type:'broadcast', event:'ev1', payload:{hello:'wörld'}})
        let mut frame = vec![3, 1, 1, 10, 3, 0, 1];
        frame.extend_from_slice(b"67realtime:xev1");
        frame.extend_from_slice("{\"hello\":\"wörld\"}".as_bytes());
        let m = decode_binary(&frame).expect("push");
        assert_eq!(m.topic, "realtime:x");
        assert_eq!(m.reference.as_deref(), Some("7"));
        assert_eq!(
            m.payload,
            json!({"type": "broadcast", "event": "ev1", "payload": {"hello": "wörld"}})
        );
        assert!(decode_binary(&frame[..9]).is_err());
        assert!(decode_binary(&[4, 0, 0, 0, 0, 0, 1]).is_err());
    }

    #[test]
    fn type_names_are_postgres_typnames() {
        assert_eq!(type_name("INTEGER"), "int4");
        assert_eq!(type_name("character varying(20)"), "varchar");
        assert_eq!(type_name("integer[]"), "_int4");
        assert_eq!(type_name("BOOLEAN"), "bool");
        assert_eq!(type_name(""), "text");
    }
}
