//! Supabase's channels on this worker, by topic: their members, the broadcasts relayed between
//! them and who is present (Phoenix presence: `presence_state` when a member joins,
//! `presence_diff` with the joins and leaves when one tracks, untracks, leaves or goes). The
//! `postgres_changes` of a channel are the hub's subscriptions; this is the rest of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Map, Value as Json};

use super::hub::Outbox;
use super::protocol::Event;
use super::supabase::{self, Vsn};

/// A member of a channel.
pub struct Member {
    /// Its connection.
    pub connection: u64,
    /// Its queue.
    pub outbox: Arc<Outbox>,
    /// Its protocol version.
    pub vsn: Vsn,
    /// Whether its own broadcasts come back to it (`config.broadcast.self`).
    pub echo: bool,
    /// Whether it follows who is present (`config.presence.enabled`).
    pub presence: bool,
    /// Its presence key (`config.presence.key`, or one made for it).
    pub key: String,
}

/// One tracked presence: whose, and what it says.
struct Presence {
    connection: u64,
    key: String,
    /// Its meta: the tracked payload with its `phx_ref`.
    meta: Json,
}

#[derive(Default)]
struct Channel {
    members: Vec<Member>,
    present: Vec<Presence>,
}

/// Every channel of this worker.
#[derive(Default)]
pub struct Channels {
    topics: Mutex<HashMap<String, Channel>>,
    next_ref: AtomicU64,
}

impl Channels {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Channel>> {
        self.topics.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Enters `member` into `topic` (in place of its connection's earlier entry, whose
    /// presence leaves); the channel's presence state, for a member that follows it.
    pub fn join(&self, topic: &str, member: Member) -> Json {
        self.leave(topic, member.connection);
        let mut topics = self.lock();
        let channel = topics.entry(topic.to_string()).or_default();
        channel.members.push(member);
        state(&channel.present)
    }

    /// Takes the connection out of `topic`; its presence leaves.
    pub fn leave(&self, topic: &str, connection: u64) {
        self.untrack(topic, connection);
        let mut topics = self.lock();
        if let Some(channel) = topics.get_mut(topic) {
            channel.members.retain(|m| m.connection != connection);
            if channel.members.is_empty() {
                topics.remove(topic);
            }
        }
    }

    /// Takes the connection out of every channel (it closed).
    pub fn disconnect(&self, connection: u64) {
        let topics: Vec<String> = self
            .lock()
            .iter()
            .filter(|(_, c)| c.members.iter().any(|m| m.connection == connection))
            .map(|(t, _)| t.clone())
            .collect();
        for topic in topics {
            self.leave(&topic, connection);
        }
    }

    /// Relays a broadcast `payload` from connection `from` to the channel's members (to the
    /// sender too when it asked for its own); how many it reached.
    pub fn broadcast(&self, topic: &str, from: u64, payload: &Json) -> usize {
        let topics = self.lock();
        let Some(channel) = topics.get(topic) else {
            return 0;
        };
        send(
            channel
                .members
                .iter()
                .filter(|m| m.connection != from || m.echo),
            topic,
            "broadcast",
            payload,
        )
    }

    /// The connection is present in `topic` with `payload` (in place of what it tracked
    /// before): the members following presence hear of it.
    pub fn track(&self, topic: &str, connection: u64, payload: &Json) {
        let phx_ref = format!("R{}", self.next_ref.fetch_add(1, Ordering::Relaxed) + 1);
        let mut meta = match payload {
            Json::Object(o) => o.clone(),
            _ => Map::new(),
        };
        meta.insert("phx_ref".into(), json!(phx_ref));
        let mut topics = self.lock();
        let Some(channel) = topics.get_mut(topic) else {
            return;
        };
        let Some(key) = channel
            .members
            .iter()
            .find(|m| m.connection == connection)
            .map(|m| m.key.clone())
        else {
            return;
        };
        let (left, kept): (Vec<Presence>, Vec<Presence>) = std::mem::take(&mut channel.present)
            .into_iter()
            .partition(|p| p.connection == connection);
        channel.present = kept;
        let joined = Presence {
            connection,
            key,
            meta: Json::Object(meta),
        };
        let diff = json!({"joins": state(std::slice::from_ref(&joined)), "leaves": state(&left)});
        channel.present.push(joined);
        send(
            channel.members.iter().filter(|m| m.presence),
            topic,
            "presence_diff",
            &diff,
        );
    }

    /// The connection is no longer present in `topic`.
    pub fn untrack(&self, topic: &str, connection: u64) {
        let mut topics = self.lock();
        let Some(channel) = topics.get_mut(topic) else {
            return;
        };
        let (left, kept): (Vec<Presence>, Vec<Presence>) = std::mem::take(&mut channel.present)
            .into_iter()
            .partition(|p| p.connection == connection);
        channel.present = kept;
        if left.is_empty() {
            return;
        }
        let diff = json!({"joins": {}, "leaves": state(&left)});
        send(
            channel.members.iter().filter(|m| m.presence),
            topic,
            "presence_diff",
            &diff,
        );
    }
}

/// Presences as Phoenix states them: `{key: {"metas": [meta, …]}}`.
fn state(present: &[Presence]) -> Json {
    let mut out = Map::new();
    for p in present {
        let entry = out
            .entry(p.key.clone())
            .or_insert_with(|| json!({"metas": []}));
        if let Some(Json::Array(metas)) = entry.get_mut("metas") {
            metas.push(p.meta.clone());
        }
    }
    Json::Object(out)
}

/// Sends `event` with `payload` on `topic` to `members`, framed once per protocol version;
/// how many took it.
fn send<'a>(
    members: impl Iterator<Item = &'a Member>,
    topic: &str,
    event: &str,
    payload: &Json,
) -> usize {
    let mut frames: Vec<(Vsn, Event)> = Vec::new();
    let mut reached = 0;
    for member in members {
        let frame = match frames.iter().find(|(v, _)| *v == member.vsn) {
            Some((_, frame)) => frame.clone(),
            None => {
                let text = supabase::encode(member.vsn, None, None, topic, event, payload);
                let frame = Event {
                    id: 0,
                    json: text.into(),
                };
                frames.push((member.vsn, frame.clone()));
                frame
            }
        };
        if member.outbox.send(&frame) {
            reached += 1;
        }
    }
    reached
}
