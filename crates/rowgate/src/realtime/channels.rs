//! Supabase's channels on this worker, by topic: their members, the broadcasts relayed between
//! them and who is present (Phoenix presence: `presence_state` when a member joins,
//! `presence_diff` with the joins and leaves when one tracks, untracks, leaves or goes). The
//! `postgres_changes` of a channel are the hub's subscriptions; this is the rest of it.
//!
//! Under a supervisor the channel spans the workers: this worker's broadcasts, tracks and
//! untracks go out as [`Relay`]s (through [`Channels::connect_outlet`]; the supervisor passes
//! them on to the other workers), and theirs come in through [`Channels::receive`]: a broadcast
//! reaches the members here, a presence is kept under its worker's origin until it is untracked
//! or that worker is [`Channels::gone`]. A new worker hears every presence at once: the others
//! [`Channels::announce`] theirs when it starts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};
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

/// One tracked presence: whose (a connection of this worker, or of the worker `origin`), and
/// what it says.
struct Presence {
    origin: Option<u32>,
    connection: u64,
    key: String,
    /// Its meta: the tracked payload with its `phx_ref`.
    meta: Json,
}

impl Presence {
    fn of(&self, origin: Option<u32>, connection: u64) -> bool {
        self.origin == origin && self.connection == connection
    }
}

#[derive(Default)]
struct Channel {
    members: Vec<Member>,
    present: Vec<Presence>,
}

/// What one worker tells the others of its channels.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Relay {
    /// A member broadcast `payload` on `topic`.
    Broadcast {
        /// The channel.
        topic: String,
        /// What it sent.
        payload: Json,
    },
    /// The worker's `connection` is present in `topic` as `key` with `meta`.
    Track {
        /// The channel.
        topic: String,
        /// The connection, as its worker numbers it.
        connection: u64,
        /// Its presence key.
        key: String,
        /// What it tracked, with its `phx_ref`.
        meta: Json,
    },
    /// The worker's `connection` is no longer present in `topic`.
    Untrack {
        /// The channel.
        topic: String,
        /// The connection.
        connection: u64,
    },
}

/// Where this worker's relays go.
type Outlet = Box<dyn Fn(String) + Send + Sync>;

/// Every channel of this worker.
pub struct Channels {
    topics: Mutex<HashMap<String, Channel>>,
    next_ref: AtomicU64,
    /// This worker's mark in the refs of its presences, so that they differ from other
    /// workers' (random: it says nothing of the process).
    mark: u32,
    /// Where this worker's relays go, under a supervisor.
    outlet: OnceLock<Outlet>,
}

impl Default for Channels {
    fn default() -> Self {
        let mut mark = [0u8; 4];
        // (without randomness the refs are still unique within this worker)
        let _ = getrandom::fill(&mut mark);
        Channels {
            topics: Mutex::default(),
            next_ref: AtomicU64::new(0),
            mark: u32::from_le_bytes(mark),
            outlet: OnceLock::new(),
        }
    }
}

impl Channels {
    /// Sends this worker's relays to `outlet` (the line to the supervisor), from now on.
    pub fn connect_outlet(&self, outlet: impl Fn(String) + Send + Sync + 'static) {
        let _ = self.outlet.set(Box::new(outlet));
    }

    fn relay(&self, relay: &Relay) {
        if let Some(outlet) = self.outlet.get() {
            if let Ok(text) = serde_json::to_string(relay) {
                outlet(text);
            }
        }
    }

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
            // (other workers' presences are kept for the members to come)
            if channel.members.is_empty() && channel.present.is_empty() {
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
        self.relay(&Relay::Broadcast {
            topic: topic.to_string(),
            payload: payload.clone(),
        });
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
    /// before): the members following presence hear of it, and the other workers.
    pub fn track(&self, topic: &str, connection: u64, payload: &Json) {
        let n = self.next_ref.fetch_add(1, Ordering::Relaxed) + 1;
        let mut meta = match payload {
            Json::Object(o) => o.clone(),
            _ => Map::new(),
        };
        meta.insert("phx_ref".into(), json!(format!("R{:x}.{n}", self.mark)));
        let key = {
            let topics = self.lock();
            let Some(key) = topics.get(topic).and_then(|c| {
                c.members
                    .iter()
                    .find(|m| m.connection == connection)
                    .map(|m| m.key.clone())
            }) else {
                return;
            };
            key
        };
        let meta = Json::Object(meta);
        self.relay(&Relay::Track {
            topic: topic.to_string(),
            connection,
            key: key.clone(),
            meta: meta.clone(),
        });
        self.present(topic, None, connection, key, meta);
    }

    /// The connection is no longer present in `topic`.
    pub fn untrack(&self, topic: &str, connection: u64) {
        if self.absent(topic, None, connection) {
            self.relay(&Relay::Untrack {
                topic: topic.to_string(),
                connection,
            });
        }
    }

    /// A relay from the worker `origin` (the supervisor's name for it): a broadcast reaches
    /// the members here; a presence is kept, or let go, under that origin.
    pub fn receive(&self, origin: u32, relay: Relay) {
        match relay {
            Relay::Broadcast { topic, payload } => {
                let topics = self.lock();
                if let Some(channel) = topics.get(&topic) {
                    send(channel.members.iter(), &topic, "broadcast", &payload);
                }
            }
            Relay::Track {
                topic,
                connection,
                key,
                meta,
            } => self.present(&topic, Some(origin), connection, key, meta),
            Relay::Untrack { topic, connection } => {
                self.absent(&topic, Some(origin), connection);
            }
        }
    }

    /// The worker `origin` is gone: its presences leave.
    pub fn gone(&self, origin: u32) {
        let present: Vec<(String, u64)> = self
            .lock()
            .iter()
            .flat_map(|(topic, c)| {
                c.present
                    .iter()
                    .filter(|p| p.origin == Some(origin))
                    .map(|p| (topic.clone(), p.connection))
            })
            .collect();
        for (topic, connection) in present {
            self.absent(&topic, Some(origin), connection);
        }
    }

    /// Tells the other workers every presence of this worker's (a worker has started and
    /// knows none).
    pub fn announce(&self) {
        let tracked: Vec<Relay> = self
            .lock()
            .iter()
            .flat_map(|(topic, c)| {
                c.present
                    .iter()
                    .filter(|p| p.origin.is_none())
                    .map(|p| Relay::Track {
                        topic: topic.clone(),
                        connection: p.connection,
                        key: p.key.clone(),
                        meta: p.meta.clone(),
                    })
            })
            .collect();
        for relay in &tracked {
            self.relay(relay);
        }
    }

    /// The connection of `origin` is present in `topic`, in place of what it was: the
    /// members following presence hear of a change.
    fn present(&self, topic: &str, origin: Option<u32>, connection: u64, key: String, meta: Json) {
        let mut topics = self.lock();
        let channel = match origin {
            // a presence of this worker's needs its member; another's is kept for members to come
            None => match topics.get_mut(topic) {
                Some(channel) => channel,
                None => return,
            },
            Some(_) => topics.entry(topic.to_string()).or_default(),
        };
        if channel
            .present
            .iter()
            .any(|p| p.of(origin, connection) && p.key == key && p.meta == meta)
        {
            return; // told again (an announcement)
        }
        let (left, kept): (Vec<Presence>, Vec<Presence>) = std::mem::take(&mut channel.present)
            .into_iter()
            .partition(|p| p.of(origin, connection));
        channel.present = kept;
        let joined = Presence {
            origin,
            connection,
            key,
            meta,
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

    /// The connection of `origin` is no longer present in `topic`: whether it was.
    fn absent(&self, topic: &str, origin: Option<u32>, connection: u64) -> bool {
        let mut topics = self.lock();
        let Some(channel) = topics.get_mut(topic) else {
            return false;
        };
        let (left, kept): (Vec<Presence>, Vec<Presence>) = std::mem::take(&mut channel.present)
            .into_iter()
            .partition(|p| p.of(origin, connection));
        channel.present = kept;
        if left.is_empty() {
            return false;
        }
        let diff = json!({"joins": {}, "leaves": state(&left)});
        send(
            channel.members.iter().filter(|m| m.presence),
            topic,
            "presence_diff",
            &diff,
        );
        if channel.members.is_empty() && channel.present.is_empty() {
            topics.remove(topic);
        }
        true
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

/// The channels span the workers: relays from the supervisor come in here, and this worker's go
/// out through the outlet.
impl crate::worker::Relayed for Channels {
    fn connect_outlet(&self, outlet: Box<dyn Fn(String) + Send + Sync>) {
        Channels::connect_outlet(self, outlet);
    }

    fn receive_text(&self, origin: u32, relay: &str) -> bool {
        match serde_json::from_str(relay) {
            Ok(relay) => {
                self.receive(origin, relay);
                true
            }
            Err(_) => false,
        }
    }

    fn gone(&self, origin: u32) {
        Channels::gone(self, origin);
    }

    fn announce(&self) {
        Channels::announce(self);
    }
}
