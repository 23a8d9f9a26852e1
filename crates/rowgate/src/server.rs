//! The HTTP server: our own hyper 1 accept loop (keep-alive, header-read
//! timeout, header count and body size limits), request dispatch by route, and graceful shutdown
//! (stop accepting, let in-flight requests finish up to the drain timeout).
//!
//! [`run`] is the testable entry point: give it a bound listener, the app and a shutdown future.

use std::convert::Infallible;
use std::future::Future;
use std::net::IpAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, StatusCode};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;

use crate::api::{self, Target};
use crate::app::{App, Route};
use crate::cors::Verdict;
use crate::error::{ApiError, ErrorCode};
use crate::observe::routes::{self, RouteKind, RouteLabel};
use crate::observe::{access, request_id, Metrics};
use crate::reply::{error_response, Body, Reply, Response};
use crate::request_body::RequestBody;
use crate::{auth, openapi, resources};

/// How long freshly accepted connections get to start their first request before a drain.
const ACCEPTED_GRACE: Duration = Duration::from_millis(150);

/// Pending connections the kernel queues before `accept` (mio's default of 128 overflowed when
/// thousands of WebSocket clients connected at once: SYNs dropped, 1-2 s retries).
const LISTEN_BACKLOG: u32 = 4096;

/// Binds `addr` (the first address it resolves to) with a [`LISTEN_BACKLOG`]-deep accept
/// queue.
pub async fn bind(addr: &str) -> std::io::Result<TcpListener> {
    bind_with(addr, false).await
}

/// Binds `addr`, shared with other sockets bound with `shared` too (`SO_REUSEPORT`).
async fn bind_with(addr: &str, shared: bool) -> std::io::Result<TcpListener> {
    let mut last = None;
    for address in tokio::net::lookup_host(addr).await? {
        let socket = if address.is_ipv4() {
            tokio::net::TcpSocket::new_v4()?
        } else {
            tokio::net::TcpSocket::new_v6()?
        };
        socket.set_reuseaddr(true)?;
        if shared {
            socket.set_reuseport(true)?;
        }
        match socket
            .bind(address)
            .and_then(|()| socket.listen(LISTEN_BACKLOG))
        {
            Ok(listener) => return Ok(listener),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{addr} resolves to no address"))))
}

/// The HTTP/1 settings every connection is served with, from `limits`.
pub fn http_settings(limits: &crate::config::LimitsConfig) -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_millis(limits.header_read_timeout_ms))
        .keep_alive(true)
        // pipeline_flush stays off: with it, hyper 1.x skips flushing while its read buffer holds
        // bytes, so its automatic 400/414/431 answers to malformed requests are never sent (the
        // client sees an empty reply). Only pipelined clients gain from it; none of ours pipeline.
        .max_headers(limits.max_headers);
    http
}

/// Which listener a connection came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Door {
    /// `listen`: the API, and the console unless it has an address of its own.
    Main,
    /// `console.listen`: the console, with the API beside it for the page.
    Console,
}

/// The sockets one server accepts on.
pub struct Listeners {
    /// `listen`.
    pub main: TcpListener,
    /// `console.listen`, when the console has an address of its own.
    pub console: Option<TcpListener>,
}

/// The listening socket a service manager passed, if any: systemd's socket activation
/// (`LISTEN_FDS=1`, and `LISTEN_PID` this process's when set), so that the socket outlives
/// restarts of the whole server and the port needs no privilege of it.
pub fn activated() -> anyhow::Result<Option<std::net::TcpListener>> {
    let Some(listener) = listenfd::ListenFd::from_env()
        .take_tcp_listener(0)
        .map_err(|e| anyhow::anyhow!("taking the socket passed in LISTEN_FDS: {e}"))?
    else {
        return Ok(None);
    };
    listener.set_nonblocking(true)?;
    tracing::info!("serving the socket the service manager passed (LISTEN_FDS)");
    Ok(Some(listener))
}

/// Binds `addr` as [`bind`] does, shared (`SO_REUSEPORT`) with the other workers of the same
/// server, which bind it too: the console's own address under the supervisor (which holds
/// only the main socket).
pub async fn bind_shared(addr: &str) -> std::io::Result<TcpListener> {
    bind_with(addr, true).await
}

/// Serves one connection's bytes — a socket, or any stream (the fuzz target `http_connection`
/// feeds bytes over an in-memory pipe) — until the client is done, or the drain has let its
/// request finish (`app.draining`).
pub fn connection<S>(
    app: &Arc<App>,
    http: &http1::Builder,
    stream: S,
    peer: IpAddr,
) -> impl Future<Output = ()> + Send + 'static
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    connection_at(app, http, stream, peer, Door::Main)
}

/// As [`connection`], for a connection that came in at `door` (its requests carry it).
pub fn connection_at<S>(
    app: &Arc<App>,
    http: &http1::Builder,
    stream: S,
    peer: IpAddr,
    door: Door,
) -> impl Future<Output = ()> + Send + 'static
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service_app = app.clone();
    let service = service_fn(move |mut req: Request<hyper::body::Incoming>| {
        let app = service_app.clone();
        if door == Door::Console {
            req.extensions_mut().insert(Door::Console);
        }
        async move { Ok::<_, Infallible>(dispatch(&app, req, peer).await) }
    });
    let conn = http
        .serve_connection(TokioIo::new(crate::mended::Mended::new(stream)), service)
        .with_upgrades();
    let mut drain = app.draining.subscribe();
    // the requests' database time and read-your-writes positions, kept per connection
    crate::db::request::scoped(async move {
        tokio::pin!(conn);
        let ended = tokio::select! {
            ended = conn.as_mut() => ended,
            () = async { let _ = drain.wait_for(|d| *d).await; } => {
                conn.as_mut().graceful_shutdown();
                conn.await
            }
        };
        if let Err(e) = ended {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    })
}

/// Serves `listener` until `shutdown` completes, then drains open connections.
pub async fn run(
    listener: TcpListener,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    let listeners = Listeners {
        main: listener,
        console: None,
    };
    run_all(listeners, app, shutdown).await
}

/// Serves `listeners` until `shutdown` completes, then drains open connections.
pub async fn run_all(
    listeners: Listeners,
    app: Arc<App>,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()> {
    // The accept loop is a task of the runtime, not the future the caller's `block_on` runs:
    // on a runtime thread, a connection's task is spawned into that thread's own queue and runs
    // there next, where from `block_on`'s thread every connection woke that thread and then a
    // runtime thread (two wake-ups and context switches per connection: S6's fresh connections
    // spent ~15% of their CPU in them). It stops, closing the listeners, when `stop` is dropped.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let accepting = tokio::spawn(accept_until(listeners, app.clone(), stopped));
    shutdown.await;
    drop(stop);
    accepting.await?;
    // A connection accepted a moment ago may not have sent its request yet, and hyper closes
    // idle connections at once when draining: give such connections time to start theirs
    // (under a supervisor, the socket stays open in the other workers, so nothing else waits).
    tokio::time::sleep(ACCEPTED_GRACE).await;
    app.draining.send_replace(true);
    let drain = Duration::from_millis(app.config.limits.drain_timeout_ms);
    // upgraded (realtime) connections count until their session has sent its close frame
    let open = || app.metrics.open_connections.load(Ordering::Relaxed);
    let waited = tokio::time::timeout(drain, async {
        while open() > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    if waited.is_err() {
        tracing::warn!("drain timeout: closing the remaining connections");
    }
    Ok(())
}

/// Accepts connections on `listeners` and serves each, until `stopped` resolves (its sender
/// dropped); the listeners are closed when it returns.
async fn accept_until(
    listeners: Listeners,
    app: Arc<App>,
    mut stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let http = http_settings(&app.config.limits);
    let max_connections = app.config.limits.max_connections;
    let Listeners { main, console } = listeners;
    loop {
        let at_console = async {
            match &console {
                Some(console) => console.accept().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            accepted = main.accept() => {
                accept(&app, &http, max_connections, accepted, Door::Main).await;
            }
            accepted = at_console => {
                accept(&app, &http, max_connections, accepted, Door::Console).await;
            }
            _ = &mut stopped => break,
        }
    }
}

/// Serves a connection just accepted at `door`, or refuses it past `limits.max_connections`
/// or, unless it comes from a trusted proxy, past `limits.max_connections_per_address`.
async fn accept(
    app: &Arc<App>,
    http: &http1::Builder,
    max_connections: usize,
    accepted: std::io::Result<(tokio::net::TcpStream, std::net::SocketAddr)>,
    door: Door,
) {
    let (stream, peer) = match accepted {
        Ok(accepted) => accepted,
        Err(e) => {
            // EMFILE and friends: back off instead of spinning.
            tracing::warn!(error = %e, "accept failed");
            tokio::time::sleep(Duration::from_millis(20)).await;
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    if app.metrics.open_connections.load(Ordering::Relaxed) >= max_connections {
        app.metrics.refused();
        tokio::spawn(refuse_connection(stream, TOO_MANY_OPEN));
        return;
    }
    let address_slot = match &app.connections_per_address {
        Some(counts) if !app.trusted_proxies.trusts(peer.ip()) => match counts.admit(peer.ip()) {
            Some(slot) => Some(slot),
            None => {
                app.metrics.refused_per_address();
                tokio::spawn(refuse_connection(stream, TOO_MANY_FROM_ADDRESS));
                return;
            }
        },
        _ => None,
    };
    app.metrics.accepted();
    let stream = Counted {
        stream,
        _open: OpenConnection::new(app.metrics.clone()),
        _address: address_slot,
    };
    tokio::spawn(connection_at(app, http, stream, peer.ip(), door));
}

/// A connection's stream, counted as open while it lives, whoever holds it: hyper, or the
/// WebSocket session it was upgraded to. The counts move with the socket, so an upgraded
/// connection is never counted twice (it was, between the 101 answer and hyper letting go of
/// the socket: at `limits.max_connections`, a connection accepted then was refused).
struct Counted<S> {
    stream: S,
    _open: OpenConnection,
    /// Its place in its address's count (`None`: not counted, from a trusted proxy or with no
    /// limit).
    _address: Option<crate::per_address::AddressSlot>,
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Counted<S> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Counted<S> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// Counts an open connection while it lives.
struct OpenConnection(Arc<Metrics>);

impl OpenConnection {
    fn new(metrics: Arc<Metrics>) -> OpenConnection {
        metrics.open_connections.fetch_add(1, Ordering::Relaxed);
        OpenConnection(metrics)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The answer's body past `limits.max_connections`.
const TOO_MANY_OPEN: &str = "{\"code\":\"RG503\",\"message\":\"too many open connections; retry\",\"details\":null,\"hint\":\"the server holds limits.max_connections connections\"}";

/// The answer's body past `limits.max_connections_per_address`.
const TOO_MANY_FROM_ADDRESS: &str = "{\"code\":\"RG503\",\"message\":\"too many open connections from this address; close some and retry\",\"details\":null,\"hint\":\"the server holds limits.max_connections_per_address connections per client address\"}";

/// Answers a connection over a connection limit with a 503 (`body`) and closes it.
async fn refuse_connection(mut stream: tokio::net::TcpStream, body: &'static str) {
    use tokio::io::AsyncWriteExt as _;
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    use tokio::io::AsyncReadExt as _;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(answer.as_bytes()).await?;
        stream.shutdown().await?;
        // Read what the client sent before closing, so the close does not reset the connection
        // and take the answer with it.
        let mut sink = [0u8; 4096];
        while stream.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Routes one request and turns any error into its JSON answer: the app as a service. The
/// accept loop calls it with hyper's bodies; a test may call it with any body, no socket.
pub async fn dispatch(app: &Arc<App>, req: Request<impl RequestBody>, peer: IpAddr) -> Response {
    let started = Instant::now();
    app.requests.fetch_add(1, Ordering::Relaxed);
    // (what the connection counted before this request is not its own)
    crate::db::request::take_time();
    let request_id = request_id::of(req.headers());
    let method = req.method().clone();
    // the target and the client's address are kept only for the access log's line
    let target = app.access_log.as_ref().map(|_| {
        let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let address = app.trusted_proxies.client_address(peer, req.headers());
        (target.to_string(), address)
    });
    let mut routed = Routed::new(app.access_log.is_some());
    let head = req.method() == Method::HEAD;
    let verbose = app.config.rest.client_error_verbosity == crate::config::ErrorVerbosity::Verbose;
    let mut allowed = None;
    let mut database = Duration::ZERO;
    let mut response = match app.cors.verdict(req.method(), req.headers()) {
        Verdict::Preflight(answer) => {
            let (parts, ()) = answer.into_parts();
            Response::from_parts(parts, Body::Left(http_body_util::Full::new(Bytes::new())))
        }
        Verdict::Refused(err) => error_response(&err, head, verbose),
        verdict => {
            if let Verdict::Allowed(origin) = verdict {
                allowed = Some(origin);
            }
            let routed_reply = route(app, req, peer, &mut routed).await;
            database = crate::db::request::take_time();
            match routed_reply {
                Ok(reply) => reply.into_response(head),
                Err(err) => error_response(&err, head, verbose),
            }
        }
    };
    if let Some(origin) = &allowed {
        app.cors.decorate(origin, response.headers_mut());
    }
    if app.db.uses_positions() {
        // read-your-writes: where this request's writes committed
        if let Some(position) = crate::db::request::take_committed() {
            if let Ok(value) = HeaderValue::from_str(&position.to_string()) {
                response.headers_mut().insert(
                    http::HeaderName::from_static(crate::db::replicas::POSITION_HEADER),
                    value,
                );
            }
        }
    }
    let status = response.status().as_u16();
    app.metrics.response(status);
    let took = started.elapsed();
    if status == 404 {
        // a name nothing serves is not a series (random URLs would grow them)
        routed.route.name.clear();
    }
    let answered = routes::Answered {
        route: &routed.route,
        method: &method,
        status,
        took,
        bytes: hyper::body::Body::size_hint(response.body()).exact(),
        db: database,
    };
    app.metrics.routes.record(&answered);
    if let (Some(log), Some((target, address))) = (&app.access_log, &target) {
        log.log(&access::Entry {
            answered: &answered,
            request_id: request_id.to_str().unwrap_or(""),
            target,
            role: routed.role.as_deref(),
            client: routed.client.as_deref(),
            peer,
            address: *address,
        });
    }
    response
        .headers_mut()
        .insert(request_id::HEADER, request_id);
    let millis = took.as_secs_f64() * 1000.0;
    // after the stages of a table request, when they are timed (`rest.server_timing`)
    let total = match response
        .headers()
        .get("server-timing")
        .map(HeaderValue::to_str)
    {
        Some(Ok(stages)) => format!("{stages}, total;dur={millis:.3}"),
        _ => format!("total;dur={millis:.3}"),
    };
    if let Ok(v) = HeaderValue::from_str(&total) {
        response.headers_mut().insert("server-timing", v);
    }
    response
}

/// What routing learnt of a request, for its statistics and its access log line.
struct Routed {
    /// The route it reached.
    route: RouteLabel,
    /// Whether the access log wants who acted.
    wants_who: bool,
    /// The role it acted as, once authenticated (access log only).
    role: Option<String>,
    /// The OAuth client of its token, when one of this server's (access log only).
    client: Option<String>,
}

impl Routed {
    fn new(wants_who: bool) -> Routed {
        Routed {
            route: RouteLabel::fixed(RouteKind::Unmatched),
            wants_who,
            role: None,
            client: None,
        }
    }

    /// The request acts as `principal`.
    fn acting(&mut self, principal: &auth::Principal) {
        if self.wants_who {
            self.role = Some(principal.role.clone());
            self.client = principal
                .standing
                .as_ref()
                .and_then(|s| s.client.as_ref())
                .map(|(id, _)| id.clone());
        }
    }
}

/// The API route a URL matched, and what its path names (decoded).
struct ApiUrl {
    /// Which route.
    route: Route,
    /// A table or view.
    table: Option<String>,
    /// An item URL's key.
    key: Option<String>,
    /// A function (`/rpc/{function}`).
    function: Option<String>,
}

/// One request to the API's routes (the OpenAPI document, tables and items, functions), its
/// `principal` known: `OPTIONS` answers the methods allowed ([`api::allow`]); the others go
/// through their pipelines.
async fn api_route(
    app: &Arc<App>,
    url: ApiUrl,
    parts: &http::request::Parts,
    body: impl RequestBody,
    principal: &auth::Principal,
    timing: &mut crate::engine::timing::Timing,
) -> Result<Reply, ApiError> {
    let ApiUrl {
        route,
        table,
        key,
        function,
    } = url;
    if parts.method == Method::OPTIONS {
        let cache = app.db.schema();
        let schema = cache.profile(api::request::profile(parts))?;
        timing.mark("parse");
        let policy = &app.auth.policy;
        let reply = match route {
            Route::OpenApi => Ok(api::allow::root()),
            Route::Rpc => api::allow::function(
                schema,
                &app.resources.load(),
                policy,
                principal,
                &function.unwrap_or_default(),
            ),
            _ => api::allow::relation(
                schema,
                policy,
                principal,
                &table.unwrap_or_default(),
                key.is_some(),
            ),
        };
        timing.mark("response");
        return reply;
    }
    match route {
        Route::OpenApi => {
            if !(parts.method == Method::GET || parts.method == Method::HEAD) {
                return Err(ApiError::method_not_allowed(
                    &parts.method,
                    &["GET", "HEAD", "OPTIONS"],
                ));
            }
            openapi::reply(app, &parts.headers, principal, timing)
        }
        Route::Rpc => {
            let name = function.unwrap_or_default();
            crate::rpc::handle(app, parts, body, &name, principal, timing).await
        }
        _ => {
            // the slot of a large body is held until the answer; the bytes go to the handler,
            // which may drop them once planned
            let crate::app::AdmittedBody { bytes, _slot } = app.read_body(parts, body).await?;
            let table = table.unwrap_or_default();
            api::handle(
                app,
                parts,
                bytes,
                Target {
                    table: &table,
                    key: key.as_deref(),
                },
                principal,
                timing,
            )
            .await
        }
    }
}

/// A read answered from the response cache when it holds a current answer, else by `served`
/// (whose answer it may keep): [`crate::cache`].
async fn through_cache(
    app: &App,
    parts: &http::request::Parts,
    principal: &auth::Principal,
    served: impl Future<Output = Result<Reply, ApiError>>,
) -> Result<Reply, ApiError> {
    crate::cache::through(
        app.cache.as_ref(),
        &app.db,
        &app.metrics,
        parts,
        &principal.role,
        served,
    )
    .await
}

/// The position a read must see (`Rowgate-Position`, as a write answered it), if the request
/// sent one.
fn read_position(
    headers: &http::HeaderMap,
) -> Result<Option<crate::db::replicas::Position>, ApiError> {
    let Some(value) = headers.get(crate::db::replicas::POSITION_HEADER) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(crate::db::replicas::Position::parse)
        .map(Some)
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::PositionInvalid,
                "Rowgate-Position is not a WAL position",
            )
            .hint("send back the Rowgate-Position a write answered, such as 1:0/16B3748")
        })
}

/// What HTTP/1.1 framing requires of every request before it is routed (RFC 9112): exactly
/// one `Host` header (§3.2), and no transfer coding but `chunked` (§6.1: 501, since a body
/// coded otherwise cannot be read), applied once (400).
fn check_framing(parts: &http::request::Parts) -> Result<(), ApiError> {
    if parts.version == http::Version::HTTP_11 {
        let mut hosts = parts.headers.get_all(header::HOST).iter();
        if hosts.next().is_none() || hosts.next().is_some() {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                "an HTTP/1.1 request needs exactly one Host header",
            ));
        }
    }
    let mut chunked = 0;
    for value in parts.headers.get_all(header::TRANSFER_ENCODING) {
        let codings = value.to_str().unwrap_or("?");
        for coding in codings.split(',').map(str::trim) {
            if !coding.eq_ignore_ascii_case("chunked") {
                return Err(ApiError::new(
                    ErrorCode::NotImplemented,
                    format!("the transfer coding {codings:?} is not implemented"),
                )
                .hint("send the body as is, or chunked"));
            }
            chunked += 1;
        }
    }
    // chunked twice is no framing a sender may use (§6.1): whoever reads it once would take
    // the rest for another request
    if chunked > 1 {
        return Err(ApiError::new(
            ErrorCode::BadRequest,
            "the chunked transfer coding is applied more than once",
        ));
    }
    Ok(())
}

/// Each route's work is boxed: an async function's state holds its branches' futures side by
/// side, not overlapped, and hyper moves the request's future (once per request), so an
/// unboxed `route` made every request copy some 15 KB (a quarter of `/xyz`'s instructions
/// under callgrind). A box costs an allocation and the copy of one branch's few KB.
async fn route(
    app: &Arc<App>,
    req: Request<impl RequestBody>,
    peer: IpAddr,
    routed: &mut Routed,
) -> Result<Reply, ApiError> {
    let (mut parts, body) = req.into_parts();
    check_framing(&parts)?;
    if app.db.uses_positions() {
        crate::db::request::begin(read_position(&parts.headers)?);
    }
    let Ok(matched) = app.router.at(parts.uri.path()) else {
        let caches_get = match app.resources.load().at(parts.uri.path()) {
            Some((template, caches_get)) => {
                routed.route = RouteLabel::named(RouteKind::Resource, template);
                caches_get
            }
            None => false,
        };
        let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
        routed.acting(&principal);
        let served = Box::pin(resources::serve::handle(app, &parts, body, &principal));
        // (a resource whose answers are never kept costs the cache nothing)
        if caches_get {
            return through_cache(app, &parts, &principal, served).await;
        }
        return served.await;
    };
    let route = *matched.value;
    let param = |name: &str| {
        matched.params.get(name).map(|p| {
            percent_encoding::percent_decode_str(p)
                .decode_utf8_lossy()
                .into_owned()
        })
    };
    let (table, key) = (param("table"), param("key"));
    routed.route = match route {
        Route::Live | Route::Ready => RouteLabel::fixed(RouteKind::Health),
        Route::OpenApi => RouteLabel::fixed(RouteKind::OpenApi),
        Route::Table | Route::Item => {
            RouteLabel::named(RouteKind::Table, table.clone().unwrap_or_default())
        }
        Route::Rpc => RouteLabel::named(RouteKind::Rpc, param("function").unwrap_or_default()),
        Route::Ords => RouteLabel::fixed(RouteKind::Ords),
        Route::Realtime | Route::RealtimeSupabase | Route::RealtimeEvents => {
            RouteLabel::fixed(RouteKind::Realtime)
        }
        Route::Metrics => RouteLabel::fixed(RouteKind::Metrics),
        Route::Token => RouteLabel::fixed(RouteKind::Token),
        Route::Console => RouteLabel::fixed(RouteKind::Console),
        Route::Accounts => RouteLabel::fixed(RouteKind::Accounts),
    };
    match route {
        Route::Live => Ok(Reply::raw(
            StatusCode::OK,
            "application/json",
            Bytes::from_static(b"{\"status\":\"live\"}"),
        )),
        Route::Ready => {
            Box::pin(app.db.ping()).await?;
            Ok(Reply::raw(
                StatusCode::OK,
                "application/json",
                Bytes::from_static(b"{\"status\":\"ready\"}"),
            ))
        }
        Route::OpenApi | Route::Table | Route::Item | Route::Rpc => {
            // the API's routes, in stages timed for `Server-Timing` (`rest.server_timing`)
            let mut timing = crate::engine::timing::Timing::start(app.config.rest.server_timing);
            let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
            routed.acting(&principal);
            timing.mark("jwt");
            let url = ApiUrl {
                route,
                table,
                key,
                function: param("function"),
            };
            let served = Box::pin(api_route(app, url, &parts, body, &principal, &mut timing));
            let reply = match route {
                Route::Table | Route::Item => {
                    through_cache(app, &parts, &principal, served).await?
                }
                _ => served.await?,
            };
            Ok(match timing.header() {
                Some(stages) => {
                    reply.header(http::HeaderName::from_static("server-timing"), stages)
                }
                None => reply,
            })
        }
        Route::Ords => Ok(Box::pin(crate::ords::handle(app, &parts, body, peer)).await),
        Route::Realtime | Route::RealtimeSupabase | Route::RealtimeEvents => {
            Box::pin(crate::realtime::know_token_client(app, &parts)).await;
            // counted per client: behind a trusted proxy, the address it forwards for
            let client = app.trusted_proxies.client_address(peer, &parts.headers);
            match route {
                Route::Realtime => crate::realtime::upgrade(app, &mut parts, client),
                Route::RealtimeSupabase => {
                    crate::realtime::upgrade_supabase(app, &mut parts, client)
                }
                _ => crate::realtime::sse::open(app, &parts, client),
            }
        }
        Route::Metrics => {
            let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
            routed.acting(&principal);
            let client = app.trusted_proxies.client_address(peer, &parts.headers);
            crate::observe::check_access(&app.config.metrics, &principal, client)?;
            if !(parts.method == Method::GET || parts.method == Method::HEAD) {
                return Err(ApiError::method_not_allowed(
                    &parts.method,
                    &["GET", "HEAD"],
                ));
            }
            Ok(Reply::raw(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                Bytes::from(Box::pin(app.server_metrics_text()).await),
            ))
        }
        Route::Console => {
            if !app.config.console.enabled {
                return Err(ApiError::new(
                    ErrorCode::NotFound,
                    "no such resource: the console is off (console.enabled)",
                ));
            }
            let door = parts
                .extensions
                .get::<Door>()
                .copied()
                .unwrap_or(Door::Main);
            if !app.config.console.listen.is_empty() && door != Door::Console {
                return Err(ApiError::new(
                    ErrorCode::NotFound,
                    "no such resource: the console has an address of its own (console.listen)",
                ));
            }
            let Some(api_path) = crate::console::api_path(parts.uri.path()) else {
                return crate::console::assets::serve(&parts);
            };
            let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
            routed.acting(&principal);
            Box::pin(crate::console::admin::handle(
                app, &parts, body, api_path, &principal,
            ))
            .await
        }
        Route::Accounts => {
            let client = app.trusted_proxies.client_address(peer, &parts.headers);
            let rest = param("rest").unwrap_or_default();
            let server = crate::accounts::Server {
                db: &app.db,
                auth: &app.auth,
                limits: &app.config.limits,
            };
            let accounts = app.accounts.as_deref();
            Ok(Box::pin(crate::accounts::handle(
                &server, accounts, &parts, body, &rest, client,
            ))
            .await)
        }
        Route::Token => {
            let body = api::request::read_body(&app.config.limits, &parts, body).await?;
            let client = app.trusted_proxies.client_address(peer, &parts.headers);
            Ok(Box::pin(crate::token_endpoint::handle(
                &app.auth, &app.db, &parts, &body, client,
            ))
            .await)
        }
    }
}
