//! `GET /realtime/sse?table=T[&filter=…][&since=N]`: one table's change feed as Server-Sent
//! Events, for clients that only need to listen (a browser `EventSource` reconnects by itself
//! and sends `Last-Event-ID`, which resumes like `since`).
//!
//! A request that cannot subscribe gets the REST error (4xx JSON) before any stream starts.
//! The stream: `retry: 1000`, `event: subscribed` (live after `last`), then the missed events
//! and the live ones as `id: N` + `data: {event JSON}` (the WebSocket event, unchanged),
//! `event: resync` past retention, and `event: close` (`{"code":1001|1008|1013,…}`) before the
//! server ends a stream.

use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, StatusCode};
use tokio::sync::{mpsc, watch};

use super::hub::{Event, Outbox, Subscription};
use super::protocol::{self, close};
use super::subscribe::{prepare, Replay};
use crate::app::App;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;

/// Chunks waiting for the client's socket.
const BODY_CHUNKS: usize = 16;

/// Opens the stream (or refuses the request).
pub fn open(
    app: &Arc<App>,
    parts: &http::request::Parts,
    client: std::net::IpAddr,
) -> Result<Reply, ApiError> {
    let Some(realtime) = app.realtime.clone() else {
        return Err(ApiError::new(ErrorCode::NotFound, "realtime is off")
            .hint("list tables in realtime.tables"));
    };
    if parts.method != Method::GET {
        return Err(ApiError::method_not_allowed(&parts.method, &["GET"]));
    }
    let query: Vec<(String, String)> = parts
        .uri
        .query()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let param = |name: &str| {
        query
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let Some(table) = param("table").map(str::to_string) else {
        return Err(ApiError::new(
            ErrorCode::QueryParse,
            "the table to follow is missing: /realtime/sse?table=…",
        ));
    };
    let resume = parts
        .headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .or_else(|| param("since"));
    let since = match resume {
        None => None,
        Some(text) => Some(text.trim().parse::<i64>().map_err(|_| {
            ApiError::new(
                ErrorCode::QueryParse,
                "since/Last-Event-ID must be an event id",
            )
            .details(format!("got {text:?}"))
        })?),
    };
    let principal = app.auth.authenticate(&super::token_headers(parts))?;
    let prepared = prepare(app, &realtime.hub, &principal, &table, param("filter"))?;
    let slot = realtime
        .addresses
        .admit(client, app.config.realtime.max_connections_per_address)?;
    let outbox = Outbox::new(app.config.realtime.queue);
    let connection = realtime.hub.connect(&outbox, principal.standing.clone());
    let last = realtime.hub.subscribe(
        &table,
        Subscription {
            connection,
            outbox: outbox.clone(),
            filter: prepared.filter.clone(),
            view: prepared.view.clone(),
            documents: prepared.documents.clone(),
            audience: prepared.audience.clone(),
            binding: None,
        },
    );
    let (body, chunks) = mpsc::channel::<Bytes>(BODY_CHUNKS);
    let app = app.clone();
    // seen as changed once, so a stream opened while draining closes at its first look
    let mut draining = app.draining.subscribe();
    draining.mark_changed();
    tokio::spawn(async move {
        // the address's slot is held until the stream ends
        let _slot = slot;
        app.metrics.realtime_connection(1);
        let feed = Feed {
            body,
            outbox,
            draining,
        };
        feed.run(&app, &table, &prepared, since, last).await;
        if let Some(realtime) = &app.realtime {
            realtime.hub.disconnect(connection, [&table]);
        }
        app.metrics.realtime_connection(-1);
    });
    Ok(Reply::stream(
        StatusCode::OK,
        HeaderValue::from_static("text/event-stream"),
        chunks,
    )
    .header(header::CACHE_CONTROL, "no-cache")
    .header(header::HeaderName::from_static("x-accel-buffering"), "no"))
}

/// One open stream.
struct Feed {
    body: mpsc::Sender<Bytes>,
    outbox: Arc<Outbox>,
    draining: watch::Receiver<bool>,
}

impl Feed {
    async fn run(
        mut self,
        app: &App,
        table: &str,
        prepared: &super::subscribe::Prepared,
        since: Option<i64>,
        last: i64,
    ) {
        let hello = format!(
            "retry: 1000\n\n{}",
            named("subscribed", &protocol::subscribed(table, last))
        );
        if !self.put(Bytes::from(hello)).await {
            return;
        }
        if let Some(since) = since.filter(|s| *s < last) {
            match Replay::start(app, since, last).await {
                Ok(Replay::Resync(head)) => {
                    let text = protocol::resync(table, since, head.pruned_through);
                    if !self.put(Bytes::from(named("resync", &text))).await {
                        return;
                    }
                }
                Ok(mut replay) => loop {
                    match replay.next_batch(app, table, prepared).await {
                        Ok(batch) if batch.is_empty() => break,
                        Ok(batch) => {
                            for event in &batch {
                                if !self.put(event_chunk(event)).await {
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            self.close(close::TRY_AGAIN, &e.message).await;
                            return;
                        }
                    }
                },
                Err(e) => {
                    self.close(close::TRY_AGAIN, &e.message).await;
                    return;
                }
            }
        }
        loop {
            tokio::select! {
                biased;
                () = self.outbox.wake.notified() => {
                    if let Some((code, reason)) = self.outbox.closing() {
                        self.close(code, reason).await;
                        return;
                    }
                    // a comment line keeps proxies from timing the stream out; a client that
                    // is gone fails the write
                    if self.outbox.take_ping() && !self.put(Bytes::from_static(b": ping\n\n")).await {
                        return;
                    }
                    loop {
                        let waiting = self.outbox.take();
                        if waiting.is_empty() {
                            break;
                        }
                        for event in &waiting {
                            if !self.put(event_chunk(event)).await {
                                if let Some((code, reason)) = self.outbox.closing() {
                                    self.close(code, reason).await;
                                }
                                return;
                            }
                        }
                    }
                }
                changed = self.draining.changed() => {
                    if changed.is_err() || *self.draining.borrow() {
                        self.close(close::GOING_AWAY, "the server is shutting down").await;
                        return;
                    }
                }
                () = self.body.closed() => return,
            }
        }
    }

    /// Hands a chunk to the response body; false when the client is gone or the connection
    /// was flagged while the client did not read.
    async fn put(&mut self, chunk: Bytes) -> bool {
        let send = self.body.send(chunk);
        tokio::pin!(send);
        let mut woken = false;
        let sent = loop {
            tokio::select! {
                sent = &mut send => break sent.is_ok(),
                () = self.outbox.wake.notified() => {
                    woken = true;
                    if self.outbox.is_closed() {
                        break false;
                    }
                }
            }
        };
        if woken {
            // The wake-up (events queued during the hello or a replay, or the sweeper's ping)
            // went to this send: keep it for the loop. The hub notifies only when the queue
            // turns non-empty, so a lost wake-up would leave events waiting forever.
            self.outbox.wake.notify_one();
        }
        sent
    }

    /// Ends the stream with `event: close` (if the client still reads).
    async fn close(&mut self, code: u16, reason: &str) {
        let text = serde_json::json!({"type": "close", "code": code, "reason": reason}).to_string();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(1),
            self.body.send(Bytes::from(named("close", &text))),
        )
        .await;
    }
}

/// `event: NAME` + `data: …`.
fn named(name: &str, data: &str) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// `id: N` + `data: {event}`.
fn event_chunk(event: &Event) -> Bytes {
    Bytes::from(format!(
        "id: {}\ndata: {}\n\n",
        event.id,
        event.json.as_str()
    ))
}
