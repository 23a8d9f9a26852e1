//! Supabase Realtime's protocol on a WebSocket session (`/realtime/v1/websocket`): what each
//! Phoenix message does. `phx_join` on `realtime:{name}` subscribes the channel's
//! `postgres_changes` bindings through the same checks as `/realtime` (the table realtime, the
//! role's grant, the filter in the REST syntax Supabase uses too) and enters the channel for
//! broadcasts; `heartbeat`, `access_token`, `broadcast`, `presence` and `phx_leave` are
//! answered as Supabase's server answers them. The session ([`super::session`]) reads frames
//! and writes the answers this returns; the hub frames the change events.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value as Json};

use super::channels::Member;
use super::hub::{Outbox, Subscription};
use super::subscribe::prepare;
use super::supabase::{self, Binding, Events, Message, Vsn};
use crate::app::App;
use crate::auth::Principal;

/// The prefix of every channel topic.
const TOPIC_PREFIX: &str = "realtime:";

/// What a connection speaking Supabase's protocol has joined.
pub struct State {
    /// Its protocol version.
    pub vsn: Vsn,
    channels: HashMap<String, Channel>,
    next_id: u64,
}

/// One joined channel.
struct Channel {
    /// Its bindings: the table and the binding's id.
    bindings: Vec<(String, u64)>,
}

/// The connection a message came on.
pub struct Caller<'a> {
    /// The server.
    pub app: &'a Arc<App>,
    /// Who the connection acts as (an `access_token` may change it).
    pub principal: &'a mut Principal,
    /// Its queue.
    pub outbox: &'a Arc<Outbox>,
    /// Its id in the hub.
    pub connection: u64,
}

impl State {
    /// A connection's state, speaking `vsn`.
    pub fn new(vsn: Vsn) -> State {
        State {
            vsn,
            channels: HashMap::new(),
            next_id: 1,
        }
    }

    /// The tables its bindings follow (unsubscribed when the connection ends).
    pub fn tables(&self) -> Vec<String> {
        let mut tables: Vec<String> = self
            .channels
            .values()
            .flat_map(|c| c.bindings.iter().map(|(t, _)| t.clone()))
            .collect();
        tables.sort_unstable();
        tables.dedup();
        tables
    }

    /// The `postgres_changes` bindings it holds over all its channels.
    pub fn subscriptions(&self) -> usize {
        self.channels.values().map(|c| c.bindings.len()).sum()
    }

    /// The topics it has joined (left when the connection ends).
    pub fn topics(&self) -> impl Iterator<Item = &String> {
        self.channels.keys()
    }

    /// Handles one message; the frames to send back, in order.
    pub fn handle(&mut self, caller: Caller<'_>, message: Message) -> Vec<String> {
        let vsn = self.vsn;
        let ok = |response: Json| vec![supabase::reply(vsn, &message, true, response)];
        match (message.topic.as_str(), message.event.as_str()) {
            ("phoenix", "heartbeat") => ok(json!({})),
            (_, "phx_join") => self.join(caller, &message),
            (_, "phx_leave") => {
                self.leave(&caller, &message.topic);
                ok(json!({}))
            }
            (_, "access_token") => self.access_token(caller, &message),
            (topic, "broadcast") if self.channels.contains_key(topic) => {
                if let Some(realtime) = &caller.app.realtime {
                    realtime
                        .channels
                        .broadcast(topic, caller.connection, &message.payload);
                }
                ok(json!({}))
            }
            (topic, "presence") if self.channels.contains_key(topic) => {
                let payload = &message.payload;
                if let Some(realtime) = &caller.app.realtime {
                    match payload["event"].as_str() {
                        Some("track") => {
                            realtime
                                .channels
                                .track(topic, caller.connection, &payload["payload"])
                        }
                        Some("untrack") => realtime.channels.untrack(topic, caller.connection),
                        _ => {}
                    }
                }
                ok(json!({}))
            }
            (_, event) => vec![supabase::reply(
                vsn,
                &message,
                false,
                json!({"reason": format!("unknown event {event:?} on {:?} (join it first)", message.topic)}),
            )],
        }
    }

    /// `phx_join`: authenticates with the join's `access_token` when it carries one,
    /// subscribes every `postgres_changes` binding (all or none), enters the channel, and
    /// answers with the bindings and their ids, then the `system` message Supabase sends once
    /// the changes flow (and an empty presence state when presence is on).
    fn join(&mut self, mut caller: Caller<'_>, message: &Message) -> Vec<String> {
        let vsn = self.vsn;
        let refuse = |reason: String| {
            vec![supabase::reply(
                vsn,
                message,
                false,
                json!({"reason": reason}),
            )]
        };
        let Some(name) = message.topic.strip_prefix(TOPIC_PREFIX) else {
            return refuse(format!("a topic is {TOPIC_PREFIX}{{name}}"));
        };
        let Some(realtime) = caller.app.realtime.clone() else {
            return refuse("realtime is off".into());
        };
        let hub = &realtime.hub;
        // a rejoin (the client's after an error or a reconnect) replaces the channel
        self.leave(&caller, &message.topic);
        if let Some(token) = message.payload.get("access_token").and_then(Json::as_str) {
            if let Err(reason) = authenticate(&mut caller, token) {
                return refuse(format!("Unauthorized: {reason}"));
            }
        }
        let config = &message.payload["config"];
        if config["private"].as_bool() == Some(true) {
            // Supabase authorizes private channels' broadcasts and presence by RLS on
            // realtime.messages, which Rowgate has not: refused rather than opened to all
            return refuse(
                "private channels are not supported: join it with private: false".into(),
            );
        }
        let requested = match &config["postgres_changes"] {
            Json::Null => Vec::new(),
            Json::Array(items) => items.clone(),
            _ => return refuse("config.postgres_changes must be an array".into()),
        };
        // what one connection may hold: an anonymous client must not make 400,000
        // subscriptions (each change is matched against them) out of a few sockets
        let limits = &caller.app.config.realtime;
        if self.channels.len() >= limits.max_channels {
            return refuse(format!(
                "Too many channels: at most {} per connection (realtime.max_channels)",
                limits.max_channels
            ));
        }
        let held = self.subscriptions();
        if held + requested.len() > limits.max_subscriptions {
            return refuse(format!(
                "Too many subscriptions: this join asks for {} postgres_changes, the connection \
                 holds {held} of at most {} (realtime.max_subscriptions)",
                requested.len(),
                limits.max_subscriptions
            ));
        }
        let join_ref = message.join_ref.clone().unwrap_or_default();
        let mut channel = Channel {
            bindings: Vec::new(),
        };
        let mut answered = Vec::new();
        for entry in &requested {
            match self.bind(&caller, entry, &message.topic, &join_ref) {
                Ok((table, subscription)) => {
                    let id = subscription.binding.as_ref().map_or(0, |b| b.id);
                    hub.subscribe(&table, subscription);
                    channel.bindings.push((table, id));
                    let mut answer = entry.clone();
                    answer["id"] = json!(id);
                    answered.push(answer);
                }
                Err(reason) => {
                    for (table, id) in &channel.bindings {
                        hub.unsubscribe_binding(table, caller.connection, *id);
                    }
                    return refuse(reason);
                }
            }
        }
        let presence = config["presence"]["enabled"].as_bool() == Some(true);
        let key = match config["presence"]["key"].as_str() {
            Some(key) if !key.is_empty() => key.to_string(),
            // a key of its own, as Supabase's server makes one
            _ => format!("{}-{}", caller.connection, self.next_id),
        };
        let present = realtime.channels.join(
            &message.topic,
            Member {
                connection: caller.connection,
                outbox: caller.outbox.clone(),
                vsn,
                echo: config["broadcast"]["self"].as_bool() == Some(true),
                presence,
                key,
            },
        );
        let has_bindings = !channel.bindings.is_empty();
        self.channels.insert(message.topic.clone(), channel);
        let mut frames = vec![supabase::reply(
            vsn,
            message,
            true,
            json!({"postgres_changes": answered}),
        )];
        let push = |event: &str, payload: Json| {
            supabase::encode(vsn, Some(&join_ref), None, &message.topic, event, &payload)
        };
        if has_bindings {
            frames.push(push(
                "system",
                json!({"channel": name, "extension": "postgres_changes",
                    "message": "Subscribed to PostgreSQL", "status": "ok"}),
            ));
        }
        if presence {
            frames.push(push("presence_state", present));
        }
        frames
    }

    /// One `postgres_changes` entry checked and made a subscription: its table, filter and
    /// column view as `/realtime` checks them.
    fn bind(
        &mut self,
        caller: &Caller<'_>,
        entry: &Json,
        topic: &str,
        join_ref: &str,
    ) -> Result<(String, Subscription), String> {
        let app = caller.app;
        let hub = &app.realtime.as_ref().ok_or("realtime is off")?.hub;
        let text = |key: &str| entry.get(key).and_then(Json::as_str);
        let events = text("event")
            .and_then(Events::parse)
            .ok_or("postgres_changes: event is one of INSERT, UPDATE, DELETE, *")?;
        let table = text("table").ok_or(
            "postgres_changes: name a table (a whole schema is not followed; subscribe per table)",
        )?;
        let schema = text("schema").unwrap_or("public");
        let cache = app.db.schema();
        let shape = cache
            .table(table)
            .ok_or_else(|| format!("no table {table:?}"))?;
        let own_schema = shape.schema.as_deref().unwrap_or("public");
        if schema != own_schema && schema != "public" {
            return Err(format!("table {table:?} is not in schema {schema:?}"));
        }
        let prepared =
            prepare(app, hub, caller.principal, table, text("filter")).map_err(|e| e.message)?;
        if prepared.documents.is_some() {
            return Err(format!(
                "{table} is a duality view: its documents stream over /realtime"
            ));
        }
        let columns: Vec<Json> = shape
            .columns
            .iter()
            .filter(|c| prepared.view.shows(&c.name))
            .map(|c| json!({"name": c.name, "type": supabase::type_name(&c.decl_type)}))
            .collect();
        let id = self.next_id;
        self.next_id += 1;
        let binding = Binding {
            id,
            topic: topic.to_string(),
            join_ref: join_ref.to_string(),
            vsn: self.vsn,
            events,
            schema: schema.to_string(),
            columns: Json::Array(columns),
        };
        Ok((
            table.to_string(),
            Subscription {
                connection: caller.connection,
                outbox: caller.outbox.clone(),
                filter: prepared.filter,
                view: prepared.view,
                documents: None,
                audience: prepared.audience,
                binding: Some(Arc::new(binding)),
            },
        ))
    }

    /// Leaves `topic`: its bindings and its broadcasts.
    fn leave(&mut self, caller: &Caller<'_>, topic: &str) {
        let Some(channel) = self.channels.remove(topic) else {
            return;
        };
        if let Some(realtime) = &caller.app.realtime {
            for (table, id) in &channel.bindings {
                realtime
                    .hub
                    .unsubscribe_binding(table, caller.connection, *id);
            }
            realtime.channels.leave(topic, caller.connection);
        }
    }

    /// `access_token`: the connection acts with the new token from now on; one that does not
    /// verify closes the channel (`phx_close`), as Supabase's server does.
    fn access_token(&mut self, mut caller: Caller<'_>, message: &Message) -> Vec<String> {
        let token = message.payload.get("access_token").and_then(Json::as_str);
        match token.map(|t| authenticate(&mut caller, t)) {
            Some(Ok(())) => vec![supabase::reply(self.vsn, message, true, json!({}))],
            refused => {
                let reason = match refused {
                    Some(Err(reason)) => reason,
                    _ => "access_token is missing".into(),
                };
                self.leave(&caller, &message.topic);
                let join_ref = message.join_ref.as_deref();
                vec![
                    supabase::encode(
                        self.vsn,
                        join_ref,
                        None,
                        &message.topic,
                        "system",
                        &json!({"extension": "system", "status": "error",
                            "message": format!("Unauthorized: {reason}"),
                            "channel": message.topic.strip_prefix(TOPIC_PREFIX).unwrap_or_default()}),
                    ),
                    supabase::encode(
                        self.vsn,
                        join_ref,
                        join_ref,
                        &message.topic,
                        "phx_close",
                        &json!({}),
                    ),
                ]
            }
        }
    }
}

/// Makes `token` the connection's credentials; the refusal's reason otherwise.
fn authenticate(caller: &mut Caller<'_>, token: &str) -> Result<(), String> {
    let mut headers = http::HeaderMap::new();
    let value = http::HeaderValue::from_str(&format!("Bearer {token}"))
        .map_err(|_| "the token is malformed".to_string())?;
    headers.insert(http::header::AUTHORIZATION, value);
    let principal = caller
        .app
        .auth
        .authenticate(&headers)
        .map_err(|e| e.message)?;
    if let Some(realtime) = &caller.app.realtime {
        realtime
            .hub
            .set_standing(caller.connection, principal.standing.clone());
    }
    *caller.principal = principal;
    Ok(())
}
