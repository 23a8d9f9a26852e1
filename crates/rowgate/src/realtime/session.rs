//! One realtime connection: reads the client's messages, answers them, and writes the hub's
//! frames from the connection's bounded queue. Generic over any `Sink` + `Stream` of WebSocket
//! messages, so it runs the same over a socket or in a test.
//!
//! Order on `subscribe`: the subscription is registered (live after id L), `subscribed` is
//! sent, then the replay of the missed events `(since, L]` from the log, then the queued live
//! events (> L): in order, no gap, no duplicate.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{Sink, SinkExt as _, Stream, StreamExt as _};
use http::{HeaderMap, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::hub::{Outbox, Subscription};
use super::phoenix;
use super::protocol::{self, close, ClientMessage};
use super::subscribe::{prepare, Replay};
use super::supabase::{self, Vsn};
use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorCode};

/// What a session starts with.
pub struct Context {
    /// The server.
    pub app: Arc<App>,
    /// Who the connection acts as (from the handshake; `auth` may change it).
    pub principal: Principal,
    /// Becomes true when the server drains: close with 1001.
    pub draining: tokio::sync::watch::Receiver<bool>,
    /// Supabase's Phoenix protocol in this version, or (`None`) Rowgate's own.
    pub phoenix: Option<Vsn>,
}

/// How long a closing session waits to write its close frame and hear the client's answer.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The same for a client cut off for falling behind: its backlog is written first.
const BEHIND_CLOSE_GRACE: Duration = Duration::from_secs(10);

/// Why the session ends.
enum End {
    /// The client closed or the socket failed.
    Gone,
    /// The server closes with this code and reason.
    Close(u16, String),
}

/// Runs one connection until it closes.
pub async fn run<S>(socket: S, mut ctx: Context)
where
    S: Sink<Message, Error = WsError> + Stream<Item = Result<Message, WsError>> + Unpin + Send,
{
    let Some(realtime) = ctx.app.realtime.clone() else {
        return;
    };
    let hub = &realtime.hub;
    let app = ctx.app.clone();
    let settings = &app.config.realtime;
    let (mut sink, mut stream) = socket.split();
    let outbox = Outbox::new(settings.queue);
    let connection = hub.connect(&outbox, ctx.principal.standing.clone());
    let metrics = ctx.app.metrics.clone();
    metrics.realtime_connection(1);
    let mut session = Session {
        app: ctx.app.clone(),
        principal: ctx.principal.clone(),
        outbox: outbox.clone(),
        connection,
        tables: HashMap::new(),
        window: (Instant::now(), 0),
        phoenix: ctx.phoenix.map(phoenix::State::new),
    };
    let ping_every = Duration::from_secs(settings.ping_s);
    if *ctx.draining.borrow() {
        let _ = sink
            .send(close_frame(
                close::GOING_AWAY,
                "the server is shutting down",
            ))
            .await;
        metrics.realtime_connection(-1);
        hub.disconnect(connection, []);
        return;
    }
    let end = loop {
        tokio::select! {
            biased;
            () = outbox.wake.notified() => {
                if let Some((code, reason)) = outbox.closing() {
                    break End::Close(code, reason.into());
                }
                if outbox.take_ping() {
                    if u128::from(outbox.silent_ms()) > ping_every.as_millis() * 2 {
                        break End::Close(close::GOING_AWAY, "no answer to pings".into());
                    }
                    if sink.send(Message::Ping(Default::default())).await.is_err() {
                        break End::Gone;
                    }
                }
                // A client that stopped reading blocks these writes once the socket's buffers
                // are full; the hub then flags the connection, which ends the wait.
                if let Err(end) = Box::pin(deliver(&mut sink, &outbox)).await {
                    break end;
                }
            }
            changed = ctx.draining.changed() => {
                if changed.is_err() || *ctx.draining.borrow() {
                    break End::Close(close::GOING_AWAY, "the server is shutting down".into());
                }
            }
            message = stream.next() => {
                outbox.heard();
                match message {
                Some(Ok(Message::Close(_))) => {
                    // tungstenite queued the echo of the client's close: send it, so the
                    // client sees its own code and not 1006
                    let _ = tokio::time::timeout(CLOSE_GRACE, sink.flush()).await;
                    break End::Gone;
                }
                None => break End::Gone,
                Some(Err(WsError::Capacity(_))) => {
                    break End::Close(close::TOO_BIG, format!("messages are limited to {} bytes", settings.max_message_bytes));
                }
                // frames the protocol forbids: said with RFC 6455's codes before the close
                Some(Err(WsError::Protocol(e))) => {
                    break End::Close(close::PROTOCOL_ERROR, e.to_string());
                }
                Some(Err(WsError::Utf8(_))) => {
                    break End::Close(close::INVALID_TEXT, "a text message must be UTF-8".into());
                }
                Some(Err(_)) => break End::Gone,
                Some(Ok(Message::Binary(bytes))) if session.phoenix.is_some() => {
                    // realtime-js's broadcast pushes
                    let decoded = supabase::decode_binary(&bytes);
                    if let Err(end) = session.phoenix_message(decoded, &mut sink, settings).await {
                        break end;
                    }
                }
                Some(Ok(Message::Binary(_))) => {
                    break End::Close(close::UNSUPPORTED, "only JSON text messages are understood".into());
                }
                Some(Ok(Message::Text(text))) if session.phoenix.is_some() => {
                    let vsn = session.phoenix.as_ref().map_or(Vsn::V2, |p| p.vsn);
                    let decoded = supabase::decode_text(vsn, text.as_str());
                    if let Err(end) = session.phoenix_message(decoded, &mut sink, settings).await {
                        break end;
                    }
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {
                    // tungstenite queued the pong: send it
                    if sink.flush().await.is_err() {
                        break End::Gone;
                    }
                }
                Some(Ok(Message::Text(text))) => {
                    // boxed: the handler's future (subscribe, replay) is large, and an idle
                    // connection should not carry its size
                    match Box::pin(session.handle(text.as_str(), &mut sink, settings)).await {
                        Ok(()) => {}
                        Err(end) => break end,
                    }
                }
            }},
        }
    };
    let mut tables: Vec<String> = session.tables.keys().cloned().collect();
    if let Some(state) = &session.phoenix {
        tables.extend(state.tables());
        // out of its channels: its presence leaves
        realtime.channels.disconnect(connection);
    }
    hub.disconnect(connection, tables.iter());
    drop(session);
    if let End::Close(code, reason) = end {
        // A client that does not read may never take the close frame, so the wait is bounded;
        // one cut off for falling behind still has its backlog in the socket ahead of the
        // frame, and a slow reader gets longer to reach it (then it sees 1013, not an EOF).
        let grace = if code == close::TRY_AGAIN {
            BEHIND_CLOSE_GRACE
        } else {
            CLOSE_GRACE
        };
        let _ = tokio::time::timeout(grace, async {
            if sink.send(close_frame(code, &reason)).await.is_ok() {
                // let the client answer the close
                while let Some(Ok(_)) = stream.next().await {}
            }
        })
        .await;
    }
    metrics.realtime_connection(-1);
}

/// Writes every waiting event, until none waits; ends the session when the socket fails or
/// the connection was flagged (too far behind) while a write was blocked.
async fn deliver<K>(sink: &mut K, outbox: &Outbox) -> Result<(), End>
where
    K: Sink<Message, Error = WsError> + Unpin,
{
    loop {
        let waiting = outbox.take();
        if waiting.is_empty() {
            return Ok(());
        }
        let write = async {
            for event in waiting {
                sink.feed(Message::Text(event.json)).await?;
            }
            sink.flush().await
        };
        tokio::pin!(write);
        let written = loop {
            tokio::select! {
                written = &mut write => break written.is_ok(),
                () = outbox.wake.notified() => {
                    if outbox.is_closed() {
                        break false;
                    }
                }
            }
        };
        if !written {
            return Err(match outbox.closing() {
                Some((code, reason)) => End::Close(code, reason.into()),
                None => End::Gone,
            });
        }
        if outbox.ping_pending() {
            // the sweeper's wake-up went to the write above: keep it for the loop
            outbox.wake.notify_one();
        }
    }
}

/// Sends one text message.
async fn say<K>(sink: &mut K, text: String) -> Result<(), End>
where
    K: Sink<Message, Error = WsError> + Unpin,
{
    sink.send(Message::text(text)).await.map_err(|_| End::Gone)
}

/// A close frame; the reason is cut to the 123 bytes a control frame can carry.
fn close_frame(code: u16, reason: &str) -> Message {
    let mut cut = reason.len().min(123);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    Message::Close(Some(CloseFrame {
        code: CloseCode::from(code),
        reason: reason[..cut].to_string().into(),
    }))
}

struct Session {
    app: Arc<App>,
    principal: Principal,
    outbox: Arc<Outbox>,
    connection: u64,
    /// Subscribed tables (and the filter text, for the record).
    tables: HashMap<String, Option<String>>,
    /// Messages in the current second (flood guard).
    window: (Instant, u32),
    /// The channels of a connection speaking Supabase's protocol.
    phoenix: Option<phoenix::State>,
}

impl Session {
    /// Counts one client message: `Err` closes the connection once they come too fast.
    fn count_message(&mut self, settings: &crate::config::RealtimeConfig) -> Result<(), End> {
        if self.window.0.elapsed() >= Duration::from_secs(1) {
            self.window = (Instant::now(), 0);
        }
        self.window.1 += 1;
        if self.window.1 > settings.max_messages_per_s {
            return Err(End::Close(close::POLICY, "too many messages".into()));
        }
        Ok(())
    }

    /// Handles one Phoenix message (Supabase's protocol): a malformed one closes the
    /// connection (1008), as a malformed message of Rowgate's own.
    async fn phoenix_message<K>(
        &mut self,
        decoded: Result<supabase::Message, String>,
        sink: &mut K,
        settings: &crate::config::RealtimeConfig,
    ) -> Result<(), End>
    where
        K: Sink<Message, Error = WsError> + Unpin,
    {
        self.count_message(settings)?;
        let message = decoded.map_err(|why| End::Close(close::POLICY, why))?;
        if let Some(token) = message
            .payload
            .get("access_token")
            .and_then(serde_json::Value::as_str)
        {
            // (the channel's own check is synchronous)
            super::know_client_of(&self.app, token).await;
        }
        let Some(state) = self.phoenix.as_mut() else {
            return Ok(());
        };
        let caller = phoenix::Caller {
            app: &self.app,
            principal: &mut self.principal,
            outbox: &self.outbox,
            connection: self.connection,
        };
        for frame in state.handle(caller, message) {
            sink.feed(Message::text(frame))
                .await
                .map_err(|_| End::Gone)?;
        }
        sink.flush().await.map_err(|_| End::Gone)
    }

    /// Handles one client message: `Err` ends the session with a close code.
    async fn handle<K>(
        &mut self,
        text: &str,
        sink: &mut K,
        settings: &crate::config::RealtimeConfig,
    ) -> Result<(), End>
    where
        K: Sink<Message, Error = WsError> + Unpin,
    {
        self.count_message(settings)?;
        let message: ClientMessage = serde_json::from_str(text)
            .map_err(|e| End::Close(close::POLICY, format!("malformed message: {e}")))?;
        match message {
            ClientMessage::Ping => say(sink, protocol::PONG.to_string()).await,
            ClientMessage::Auth { token } => {
                if !self.tables.is_empty() {
                    let err = ApiError::new(
                        ErrorCode::InvalidBody,
                        "authenticate before subscribing (unsubscribe everything first)",
                    );
                    return say(sink, protocol::error(&err, None)).await;
                }
                let mut headers = HeaderMap::new();
                let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) else {
                    return Err(End::Close(close::POLICY, "invalid bearer token".into()));
                };
                headers.insert(http::header::AUTHORIZATION, value);
                match self
                    .app
                    .auth
                    .authenticate_fresh(&self.app.db, &headers)
                    .await
                {
                    Ok(principal) => {
                        if let Some(realtime) = &self.app.realtime {
                            realtime
                                .hub
                                .set_standing(self.connection, principal.standing.clone());
                        }
                        self.principal = principal;
                        say(sink, protocol::authenticated(&self.principal.role)).await
                    }
                    Err(e) => Err(End::Close(close::POLICY, e.message)),
                }
            }
            ClientMessage::Unsubscribe { table } => {
                if self.tables.remove(&table).is_some() {
                    if let Some(realtime) = &self.app.realtime {
                        realtime.hub.unsubscribe(&table, self.connection);
                    }
                }
                say(sink, protocol::unsubscribed(&table)).await
            }
            ClientMessage::Subscribe {
                table,
                filter,
                since,
            } => {
                if !self.tables.contains_key(&table)
                    && self.tables.len() >= settings.max_subscriptions
                {
                    let err = ApiError::new(
                        ErrorCode::LimitExceeded,
                        format!(
                            "at most {} subscriptions per connection",
                            settings.max_subscriptions
                        ),
                    );
                    return say(sink, protocol::error(&err, Some(&table))).await;
                }
                match self.subscribe(&table, filter.as_deref(), since, sink).await {
                    Ok(()) => {
                        self.tables.insert(table, filter);
                        Ok(())
                    }
                    Err(Failure::Refused(err)) => {
                        say(sink, protocol::error(&err, Some(&table))).await
                    }
                    Err(Failure::End(end)) => Err(end),
                }
            }
        }
    }

    /// Checks, registers and replays one subscription.
    async fn subscribe<K>(
        &mut self,
        table: &str,
        filter_text: Option<&str>,
        since: Option<i64>,
        sink: &mut K,
    ) -> Result<(), Failure>
    where
        K: Sink<Message, Error = WsError> + Unpin,
    {
        let app = &self.app;
        let realtime = app.realtime.clone().ok_or_else(|| {
            Failure::Refused(ApiError::new(ErrorCode::NotFound, "realtime is off"))
        })?;
        let prepared = prepare(app, &realtime.hub, &self.principal, table, filter_text)
            .map_err(Failure::Refused)?;
        let last = realtime.hub.subscribe(
            table,
            Subscription {
                connection: self.connection,
                outbox: self.outbox.clone(),
                filter: prepared.filter.clone(),
                view: prepared.view.clone(),
                documents: prepared.documents.clone(),
                audience: prepared.audience.clone(),
                binding: None,
            },
        );
        let sent = |r: Result<(), WsError>| r.map_err(|_| Failure::End(End::Gone));
        sent(
            sink.send(Message::text(protocol::subscribed(table, last)))
                .await,
        )?;
        let Some(since) = since.filter(|s| *s < last) else {
            return Ok(());
        };
        let unavailable = |e: ApiError| Failure::End(End::Close(close::TRY_AGAIN, e.message));
        let mut replay = Replay::start(app, since, last).await.map_err(unavailable)?;
        if let Replay::Resync(head) = replay {
            let text = protocol::resync(table, since, head.pruned_through);
            return sent(sink.send(Message::text(text)).await);
        }
        loop {
            let batch = replay
                .next_batch(app, table, &prepared)
                .await
                .map_err(unavailable)?;
            if batch.is_empty() {
                return Ok(());
            }
            for event in batch {
                sent(sink.feed(Message::Text(event.json)).await)?;
            }
            sent(sink.flush().await)?;
        }
    }
}

/// A subscription that did not happen.
enum Failure {
    /// Refused with an error message; the connection stays.
    Refused(ApiError),
    /// The connection ends.
    End(End),
}
