//! Realtime change feeds: [`capture`] (triggers append every write to a change log in the
//! same transaction), [`hub`] (this worker's subscriptions and the fan-out), [`subscribe`]
//! (checks of a subscription request, replay), [`session`] (one WebSocket connection, generic
//! over Sink/Stream), [`sse`] (one Server-Sent Events stream), [`protocol`] (the JSON
//! messages), [`state`] (what a worker holds: the hub, set up from the configuration), and
//! here the tailer that reads the log into the hub, the standing checker and the WebSocket
//! upgrade.
//!
//! The tailer wakes on this worker's own commits, on the supervisor's word that another worker
//! committed, and every `realtime.poll_ms` (writers outside Rowgate); it prunes the log past
//! `realtime.retention_s` / `retention_rows` every `realtime.prune_ms`.

pub mod addresses;
pub mod bus;
pub mod capture;
pub mod channels;
pub mod documents;
pub mod hub;
pub mod index;
pub mod phoenix;
pub mod protocol;
pub mod session;
pub mod sse;
pub mod state;
pub mod subscribe;
pub mod supabase;
pub mod visibility;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{header, HeaderMap, HeaderValue, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

use crate::app::App;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;
use state::realtime_tables;
pub use state::{check, open, Realtime};

/// Changes read from the log per query by the tailer.
const TAIL_BATCH: usize = 1000;

/// Starts the tailer (and pruner) of `app`'s realtime feeds.
pub fn spawn(app: &Arc<App>) {
    let Some(realtime) = app.realtime.clone() else {
        return;
    };
    if let crate::config::DbTarget::Postgres(location) = app.config.db.target() {
        // Supabase channels' broadcasts and presences reach every process through the database
        bus::spawn(&app.db, &location, realtime.channels.clone());
        // every node's tailer is woken by the capture trigger's NOTIFY
        crate::db::postgres::spawn_listener(
            &location,
            capture::CHANNEL,
            realtime.elsewhere.clone(),
        );
        // on a Citus cluster, the changes captured on the workers are moved into the log
        let (app, poll) = (
            app.clone(),
            Duration::from_millis(app.config.realtime.poll_ms.max(10)),
        );
        tokio::spawn(async move {
            if let crate::db::Database::Postgres(db) = &*app.db {
                capture::citus::gather_forever(db, &location, poll).await;
            }
        });
    }
    if app.config.realtime.ping_s > 0 {
        // One sweeper pings the connections silent for a round, a slice at a time so that a
        // round's pings are spread over it; a WebSocket client silent for two rounds is closed.
        const SLICES: u64 = 16;
        let realtime = realtime.clone();
        let round_ms = app.config.realtime.ping_s.saturating_mul(1000);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(round_ms / SLICES));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            for slice in (0..SLICES).cycle() {
                tick.tick().await;
                // a tick early: a client pinged one round ago is due again now
                realtime
                    .hub
                    .sweep(slice, SLICES, round_ms - round_ms / SLICES);
            }
        });
    }
    spawn_standing_checker(app, &realtime);
    let app = app.clone();
    tokio::spawn(async move {
        let config = &app.config.realtime;
        let poll = Duration::from_millis(config.poll_ms.max(10));
        let commits = app.db.commits();
        let mut schema_version = app.db.schema().version;
        let mut pruned = Instant::now();
        loop {
            let own = tokio::select! {
                () = commits.notified() => true,
                () = realtime.elsewhere.notified() => false,
                () = tokio::time::sleep(poll) => false,
            };
            let version = app.db.schema().version;
            if version != schema_version {
                schema_version = version;
                match realtime_tables(config, &app.db.schema()) {
                    Ok(tables) => {
                        if let Err(e) = capture::ensure(&app.db, &tables).await {
                            tracing::warn!("realtime: capture not updated: {e:#}");
                        }
                    }
                    Err(e) => tracing::warn!("realtime: {e:#}"),
                }
            }
            tail(&app, &realtime, own).await;
            if pruned.elapsed() >= Duration::from_millis(config.prune_ms) {
                pruned = Instant::now();
                let max_age = config.retention_s.saturating_mul(1000);
                match capture::prune(&app.db, max_age, config.retention_rows).await {
                    Ok(0) => {}
                    Ok(n) => tracing::debug!(changes = n, "realtime: change log pruned"),
                    Err(e) => tracing::warn!("realtime: pruning failed: {e}"),
                }
            }
        }
    });
}

/// Closes (1008) every connection whose token is no longer honoured: re-checked whenever the
/// client registry changes (a revoke, a retired secret, a role change: within
/// `auth.clients_poll_ms`) and when the earliest token runs out. Idle otherwise: no timer per
/// connection.
fn spawn_standing_checker(app: &Arc<App>, realtime: &Arc<Realtime>) {
    let (app, realtime) = (app.clone(), realtime.clone());
    tokio::spawn(async move {
        let mut clients = app.auth.clients_changed.subscribe();
        let mut next: Option<u64> = None;
        loop {
            let expiry = async {
                match next {
                    // refused once the clock is past `after`: look a second later
                    Some(after) => {
                        let at = std::time::UNIX_EPOCH + Duration::from_secs(after + 1);
                        let wait = at
                            .duration_since(std::time::SystemTime::now())
                            .unwrap_or_default();
                        tokio::time::sleep(wait).await;
                    }
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                changed = clients.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
                () = realtime.hub.expiry_moved.notified() => {}
                () = expiry => {}
            }
            next = realtime
                .hub
                .recheck(|s| app.auth.standing_verdict(s).map_err(|lapse| lapse.reason()));
        }
    });
}

/// Reads every new change into the hub (and the documents they touch to the duality views'
/// feeds); tells the other workers when this worker wrote them.
async fn tail(app: &Arc<App>, realtime: &Realtime, own: bool) {
    let hub = &realtime.hub;
    loop {
        match capture::fetch(&app.db, hub.last(), None, None, TAIL_BATCH).await {
            Ok(changes) if changes.is_empty() => return,
            Ok(changes) => {
                // with database roles: what each subscriber's role may see of them (and of
                // subscribers who came while it was checked, before they are sent anything)
                let schema = app.db.schema();
                let mut verdicts = match &realtime.checker {
                    Some(checker) => {
                        let audiences = hub.audiences(&changes);
                        Some(checker.verdicts(&schema, &audiences, &changes).await)
                    }
                    None => None,
                };
                while let Err(missing) = hub.dispatch(&changes, verdicts.as_ref()) {
                    if let (Some(checker), Some(verdicts)) = (&realtime.checker, &mut verdicts) {
                        verdicts.merge(checker.verdicts(&schema, &missing, &changes).await);
                    }
                }
                documents::dispatch(app, &changes).await;
                if own {
                    realtime.committed_here.notify_one();
                }
                if changes.len() < TAIL_BATCH {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!("realtime: reading the change log failed: {e}");
                return;
            }
        }
    }
}

/// `GET /realtime/v1/websocket`: Supabase's realtime (the Phoenix protocol of realtime-js, in
/// the `vsn` the query asks for; the `apikey` query parameter as the token).
pub fn upgrade_supabase(
    app: &Arc<App>,
    parts: &mut http::request::Parts,
    client: IpAddr,
) -> Result<Reply, ApiError> {
    let vsn = parts.uri.query().and_then(|q| {
        form_urlencoded::parse(q.as_bytes())
            .find(|(k, _)| k == "vsn")
            .map(|(_, v)| v.into_owned())
    });
    let Some(vsn) = supabase::Vsn::parse(vsn.as_deref()) else {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            format!("vsn {} is not spoken", vsn.unwrap_or_default()),
        )
        .hint("vsn=1.0.0 or vsn=2.0.0"));
    };
    upgrade_speaking(app, parts, client, Some(vsn))
}

/// `GET /realtime`: checks the WebSocket handshake and the token (header, or `access_token`
/// in the query for browsers), answers 101 and runs the session on the upgraded connection.
pub fn upgrade(
    app: &Arc<App>,
    parts: &mut http::request::Parts,
    client: IpAddr,
) -> Result<Reply, ApiError> {
    upgrade_speaking(app, parts, client, None)
}

/// [`upgrade`], the session speaking Supabase's protocol in `phoenix`'s version, or Rowgate's.
fn upgrade_speaking(
    app: &Arc<App>,
    parts: &mut http::request::Parts,
    client: IpAddr,
    phoenix: Option<supabase::Vsn>,
) -> Result<Reply, ApiError> {
    let Some(realtime) = &app.realtime else {
        return Err(ApiError::new(ErrorCode::NotFound, "realtime is off")
            .hint("list tables in realtime.tables"));
    };
    let headers = &parts.headers;
    let has = |name: header::HeaderName, word: &str| {
        headers.get_all(name).iter().any(|v| {
            v.to_str().is_ok_and(|v| {
                v.split(',')
                    .any(|part| part.trim().eq_ignore_ascii_case(word))
            })
        })
    };
    let key = headers.get(header::SEC_WEBSOCKET_KEY).cloned();
    if parts.method != http::Method::GET
        || !has(header::CONNECTION, "upgrade")
        || !has(header::UPGRADE, "websocket")
        || key.is_none()
    {
        return Err(ApiError::new(
            ErrorCode::UpgradeRequired,
            "/realtime speaks WebSocket: send a GET with Upgrade: websocket",
        ));
    }
    if parts.version < http::Version::HTTP_11 {
        return Err(ApiError::new(
            ErrorCode::UpgradeRequired,
            "a WebSocket handshake needs HTTP/1.1 (RFC 6455)",
        ));
    }
    if headers
        .get(header::SEC_WEBSOCKET_VERSION)
        .is_none_or(|v| v.as_bytes() != b"13")
    {
        return Err(ApiError::new(
            ErrorCode::UpgradeRequired,
            "only WebSocket version 13 is spoken",
        ));
    }
    let principal = app.auth.authenticate(&token_headers(parts))?;
    let settings = &app.config.realtime;
    let slot = realtime
        .addresses
        .admit(client, settings.max_connections_per_address)?;
    let Some(on_upgrade) = parts.extensions.remove::<hyper::upgrade::OnUpgrade>() else {
        return Err(ApiError::internal("the connection cannot be upgraded"));
    };
    let mut ws_config = WebSocketConfig::default();
    ws_config.read_buffer_size = 1024;
    // frames queued together go out in one write (one syscall per ~4 KB instead of per frame:
    // S10 spent half its CPU in sendto); the buffer is only as big as the events sent
    ws_config.write_buffer_size = 4096;
    ws_config.max_message_size = Some(settings.max_message_bytes);
    ws_config.max_frame_size = Some(settings.max_message_bytes);
    ws_config.max_write_buffer_size = 1 << 20;
    let app = app.clone();
    // seen as changed once, so a stream opened while draining closes at its first look
    let mut draining = app.draining.subscribe();
    draining.mark_changed();
    // the socket counts as an open connection (`limits.max_connections`, the drain) for as
    // long as the session holds it: the count moves with it (`server::Counted`)
    tokio::spawn(async move {
        // the address's slot is held until the session ends
        let _slot = slot;
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(e) => {
                tracing::debug!("realtime: upgrade failed: {e}");
                return;
            }
        };
        let socket = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            Role::Server,
            Some(ws_config),
        )
        .await;
        session::run(
            socket,
            session::Context {
                app,
                principal,
                draining,
                phoenix,
            },
        )
        .await;
    });
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(
        key.as_ref().map_or(&[][..], HeaderValue::as_bytes),
    );
    Ok(Reply::empty(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::CONNECTION, "Upgrade")
        .header(header::UPGRADE, "websocket")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept))
}

/// The request's headers for authentication: its own, or an `Authorization` made from the
/// `access_token` query parameter (browsers cannot set headers on a WebSocket or EventSource),
/// or an `apikey` header from the `apikey` query parameter (Supabase's realtime client).
/// Makes sure this worker knows the client of the request's token before a realtime stream
/// authenticates it ([`crate::auth::Auth::authenticate_fresh`]: a client added a moment ago
/// elsewhere); what the token is worth is decided by the stream's own authentication.
pub async fn know_token_client(app: &App, parts: &http::request::Parts) {
    let _ = app
        .auth
        .authenticate_fresh(&app.db, &token_headers(parts))
        .await;
}

/// As [`know_token_client`], for a token a realtime message carries (a Supabase channel's
/// `access_token`).
pub async fn know_client_of(app: &App, token: &str) {
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
        headers.insert(header::AUTHORIZATION, value);
        let _ = app.auth.authenticate_fresh(&app.db, &headers).await;
    }
}

pub(crate) fn token_headers(parts: &http::request::Parts) -> HeaderMap {
    let mut headers = parts.headers.clone();
    if headers.contains_key(header::AUTHORIZATION) {
        return headers;
    }
    let query = |name: &str| {
        parts.uri.query().and_then(|q| {
            form_urlencoded::parse(q.as_bytes())
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.into_owned())
        })
    };
    if let Some(value) =
        query("access_token").and_then(|t| HeaderValue::from_str(&format!("Bearer {t}")).ok())
    {
        headers.insert(header::AUTHORIZATION, value);
    } else if let Some(value) = query("apikey").and_then(|k| HeaderValue::from_str(&k).ok()) {
        if !headers.contains_key("apikey") {
            headers.insert("apikey", value);
        }
    }
    headers
}
