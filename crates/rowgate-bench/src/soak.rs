//! The soak: a mixed load held against one running server for a long time, sampling what must
//! stay flat (issue 22).
//!
//! The load, all at once, all checked:
//! - reads: single rows, pages, pages with `count=exact`, embeddings, documents and a custom
//!   resource, half with a bearer token and half anonymous, paced;
//! - writes: inserts acknowledged with their key, an update of a live row now and then, and the
//!   delete of the oldest live row once 50 are live (the table stays the same size);
//! - a follower: a WebSocket with a bearer token subscribed to the written table; when its
//!   token expires the server closes it (1008) and it reconnects with a fresh token and `since`,
//!   so it must still see every acknowledged insert and delete exactly as acknowledged;
//! - idle WebSockets (1,000 by default) subscribed with a filter nothing matches, answering the
//!   server's pings; a WebSocket that subscribes to everything and never reads, replaced every
//!   five minutes; a WebSocket opened, subscribed and closed every second;
//! - connection churn: a request on a new connection, closed after the answer, paced;
//! - tokens that expire: the client's tokens are short-lived and fetched again at half their
//!   life, and the first one, once expired, must be refused (401) every minute;
//! - client rotation: every few minutes the client's secret is rotated (`rowgate clients
//!   rotate`), new tokens come from the new secret, and the old one is retired once every
//!   token issued with it has expired.
//!
//! Every 30 s it samples the worker's resident memory and open descriptors, the server's
//! realtime subscriptions (from `/metrics`) and, on PostgreSQL, its backends. At the end it
//! fails when any request errors, when an acknowledged write is missing (or a deleted row is
//! still there), when a worker restarted, or when a sampled figure grew by more than 5% between
//! the baseline (the median of the samples in the two minutes from minute 10) and the end (the
//! median of the last five samples): medians, so that a connection opening at the moment of one
//! sample is not read as growth.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures_util::{SinkExt as _, StreamExt as _};
use http::header::{AUTHORIZATION, CONTENT_TYPE};
use http::{HeaderName, Method};
use serde::Serialize;
use serde_json::{json, Value};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::{watch, Notify, Semaphore};
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::load::Client;
use crate::procstat;
use crate::spec::Drawn;

/// The table written, followed and idly subscribed to.
const TABLE: &str = "team";

/// Live rows the writer keeps before it deletes the oldest.
const LIVE_ROWS: usize = 50;

/// Longest wait for a WebSocket's connect, upgrade and `subscribed` ack.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the never-reading subscriber is kept before it is replaced.
const STALLED_FOR: Duration = Duration::from_secs(300);

/// The server's clock-skew leeway on token expiry, plus a margin.
const EXPIRY_MARGIN: Duration = Duration::from_secs(45);

/// Most growth allowed between the baseline and the end.
const MAX_GROWTH: f64 = 0.05;

/// Everything one soak needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Server address and `Host` header value.
    pub addr: SocketAddr,
    pub host: String,
    /// The supervisor's process id (its children are the workers sampled).
    pub supervisor: u32,
    /// How long the load is held.
    pub duration: Duration,
    /// How often the server is sampled.
    pub sample_every: Duration,
    /// Where the baseline starts (clipped to a third of the run).
    pub baseline_at: Duration,
    /// Idle WebSockets held.
    pub idle_websockets: usize,
    /// Reads per second (over four keep-alive connections).
    pub reads_per_s: f64,
    /// Inserts per second.
    pub writes_per_s: f64,
    /// Requests per second on new connections.
    pub fresh_per_s: f64,
    /// How often the client's secret is rotated.
    pub rotate_every: Duration,
    /// The OAuth client whose tokens the load uses.
    pub client_id: String,
    pub client_secret: String,
    /// Shell command of `rowgate clients {action} NAME …`; `{action}` becomes `rotate --json`
    /// or `retire`.
    pub clients_command: String,
    /// Shell command printing the database's backend count (PostgreSQL), if any.
    pub backends_command: Option<String>,
    /// JSON-lines file of the samples.
    pub out: std::path::PathBuf,
}

/// One reading of the server.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Sample {
    /// Minutes since the load started.
    pub minute: f64,
    /// Resident memory of the workers, MB.
    pub worker_rss_mb: f64,
    /// Resident memory of the supervisor, MB.
    pub supervisor_rss_mb: f64,
    /// Open descriptors of the workers.
    pub fds: u64,
    /// Realtime subscriptions the server holds.
    pub subscriptions: u64,
    /// Open realtime connections the server counts.
    pub realtime_connections: u64,
    /// Database backends (PostgreSQL).
    pub backends: Option<u64>,
    /// Requests answered so far, and errors so far.
    pub requests: u64,
    pub errors: u64,
}

/// The end of a soak: the samples and whether it passed.
pub struct Outcome {
    pub samples: Vec<Sample>,
    /// What failed; empty when it passed.
    pub failures: Vec<String>,
    /// The report printed at the end.
    pub summary: String,
}

/// Runs the soak to the end.
pub async fn run(plan: Plan) -> anyhow::Result<Outcome> {
    let plan = Arc::new(plan);
    let (stop_tx, stop) = watch::channel(false);
    let shared = Arc::new(Shared {
        plan: plan.clone(),
        stop,
        tally: Tally::default(),
        tokens: Tokens::default(),
        rotated: Notify::new(),
        writes: Mutex::new(WriteLog::default()),
        seen: Mutex::new(Seen::default()),
    });
    shared
        .refresh_token()
        .await
        .context("the first token (is the client right?)")?;
    let workers = procstat::children(&[plan.supervisor]);
    anyhow::ensure!(
        !workers.is_empty(),
        "process {} has no worker processes (start the server with its supervisor)",
        plan.supervisor
    );

    let mut tasks = JoinSet::new();
    tasks.spawn(shared.clone().tokens_task());
    tasks.spawn(shared.clone().rotation_task());
    tasks.spawn(shared.clone().expired_token_task());
    for n in 0..4 {
        tasks.spawn(shared.clone().reads_task(n));
    }
    tasks.spawn(shared.clone().writes_task());
    tasks.spawn(shared.clone().fresh_task());
    tasks.spawn(shared.clone().follower_task());
    tasks.spawn(shared.clone().stalled_task());
    tasks.spawn(shared.clone().churn_task());
    let opening = Arc::new(Semaphore::new(50));
    for _ in 0..plan.idle_websockets {
        tasks.spawn(shared.clone().idle_task(opening.clone()));
    }

    let started = Instant::now();
    let mut samples = Vec::new();
    let mut worker_pids: HashSet<u32> = workers.into_iter().collect();
    let mut next = started;
    loop {
        next += plan.sample_every;
        let now = Instant::now();
        if next > started + plan.duration {
            tokio::time::sleep((started + plan.duration).saturating_duration_since(now)).await;
            break;
        }
        tokio::time::sleep(next.saturating_duration_since(now)).await;
        let sample = shared.sample(started, &mut worker_pids).await;
        print_sample(&sample);
        append(&plan.out, &sample)?;
        samples.push(sample);
    }
    let _ = stop_tx.send(true);
    while tasks.join_next().await.is_some() {}
    let mut failures = shared.verify_writes().await;
    failures.extend(growth_failures(&samples, plan.baseline_at, plan.duration));
    if worker_pids.len() > 1 {
        failures.push(format!(
            "a worker was restarted during the soak (worker processes seen: {:?})",
            worker_pids
        ));
    }
    let errors = shared
        .tally
        .errors
        .lock()
        .map(|e| e.clone())
        .unwrap_or_default();
    for (what, (count, examples)) in &errors {
        failures.push(format!("{count} errors in {what}, e.g. {examples:?}"));
    }
    let summary = shared.summary(&samples, plan.baseline_at, plan.duration, &failures);
    Ok(Outcome {
        samples,
        failures,
        summary,
    })
}

/// State the load's tasks share.
struct Shared {
    plan: Arc<Plan>,
    stop: watch::Receiver<bool>,
    tally: Tally,
    tokens: Tokens,
    /// Woken when the secret was rotated (fetch a token with the new one now).
    rotated: Notify,
    writes: Mutex<WriteLog>,
    seen: Mutex<Seen>,
}

/// Counts of what was done, and the errors by part of the load.
#[derive(Default)]
struct Tally {
    reads: AtomicU64,
    writes: AtomicU64,
    fresh: AtomicU64,
    churned: AtomicU64,
    expired_refused: AtomicU64,
    rotations: AtomicU64,
    follower_reconnects: AtomicU64,
    stalled_rounds: AtomicU64,
    idle_open: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, (u64, Vec<String>)>>,
}

impl Tally {
    fn error(&self, part: &'static str, message: String) {
        if let Ok(mut errors) = self.errors.lock() {
            let (count, examples) = errors.entry(part).or_default();
            *count += 1;
            crate::load::keep_sample(examples, message);
        }
    }

    fn error_count(&self) -> u64 {
        self.errors
            .lock()
            .map(|e| e.values().map(|(n, _)| n).sum())
            .unwrap_or(0)
    }

    fn requests(&self) -> u64 {
        [&self.reads, &self.writes, &self.fresh, &self.churned]
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }
}

/// The client's current secret and token.
#[derive(Default)]
struct Tokens {
    secret: RwLock<Option<String>>,
    current: RwLock<Option<Token>>,
    /// The first token fetched (its expiry is checked).
    first: Mutex<Option<Token>>,
}

#[derive(Clone)]
struct Token {
    value: String,
    lifetime: Duration,
    expires: Instant,
}

/// What the writer had acknowledged.
#[derive(Default)]
struct WriteLog {
    inserted: Vec<i64>,
    deleted: Vec<i64>,
    live: VecDeque<i64>,
}

/// What the follower saw, by key.
#[derive(Default)]
struct Seen {
    inserts: HashSet<i64>,
    deletes: HashSet<i64>,
    last_event: Option<i64>,
}

impl Shared {
    fn stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Sleeps `d`, or less when the soak stops; false when it stopped.
    async fn pause(&self, d: Duration) -> bool {
        tokio::select! {
            () = tokio::time::sleep(d) => !self.stopped(),
            () = self.stopping() => false,
        }
    }

    /// Resolves when the soak stops.
    async fn stopping(&self) {
        let mut stop = self.stop.clone();
        let _stopped = stop.wait_for(|s| *s).await.is_ok();
    }

    fn token(&self) -> String {
        self.tokens
            .current
            .read()
            .ok()
            .and_then(|t| t.as_ref().map(|t| t.value.clone()))
            .unwrap_or_default()
    }

    fn bearer(&self) -> (HeaderName, String) {
        (AUTHORIZATION, format!("Bearer {}", self.token()))
    }

    /// Fetches a token with the current secret and makes it the current one.
    async fn refresh_token(&self) -> anyhow::Result<()> {
        let secret = self
            .tokens
            .secret
            .read()
            .ok()
            .and_then(|s| s.clone())
            .unwrap_or_else(|| self.plan.client_secret.clone());
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("grant_type", "client_credentials")
            .append_pair("client_id", &self.plan.client_id)
            .append_pair("client_secret", &secret)
            .finish();
        let drawn = Drawn::plain(
            Method::POST,
            "/oauth/token",
            vec![(
                CONTENT_TYPE,
                "application/x-www-form-urlencoded".to_string(),
            )],
            Some(body),
        );
        let mut client = Client::new(self.plan.addr, self.plan.host.clone(), true);
        let (status, _, body) = client
            .exchange(&drawn)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
        if status != 200 {
            bail!(
                "POST /oauth/token answered {status}: {}",
                String::from_utf8_lossy(&body)
            );
        }
        let answer: Value = serde_json::from_slice(&body)?;
        let value = answer["access_token"]
            .as_str()
            .context("no access_token")?
            .to_string();
        let lifetime = Duration::from_secs(answer["expires_in"].as_u64().unwrap_or(3600));
        let token = Token {
            value,
            lifetime,
            expires: Instant::now() + lifetime,
        };
        if let Ok(mut first) = self.tokens.first.lock() {
            first.get_or_insert_with(|| token.clone());
        }
        if let Ok(mut current) = self.tokens.current.write() {
            *current = Some(token);
        }
        Ok(())
    }

    fn lifetime(&self) -> Duration {
        self.tokens
            .current
            .read()
            .ok()
            .and_then(|t| t.as_ref().map(|t| t.lifetime))
            .unwrap_or(Duration::from_secs(3600))
    }

    /// Fetches a new token at half the current one's life, and at once after a rotation.
    async fn tokens_task(self: Arc<Self>) {
        loop {
            tokio::select! {
                () = tokio::time::sleep(self.lifetime() / 2) => {}
                () = self.rotated.notified() => {}
                () = self.stopping() => return,
            }
            if let Err(e) = self.refresh_token().await {
                self.tally.error("tokens", format!("{e:#}"));
            }
        }
    }

    /// Rotates the client's secret every `rotate_every`, and retires the old one once every
    /// token issued with it has expired.
    async fn rotation_task(self: Arc<Self>) {
        while self.pause(self.plan.rotate_every).await {
            let rotated = match self.clients("rotate --json").await {
                Ok(out) => serde_json::from_str::<Value>(&out)
                    .ok()
                    .and_then(|v| v["client_secret"].as_str().map(str::to_string))
                    .with_context(|| format!("no client_secret in {out:?}")),
                Err(e) => Err(e),
            };
            let secret = match rotated {
                Ok(secret) => secret,
                Err(e) => {
                    self.tally.error("rotation", format!("{e:#}"));
                    continue;
                }
            };
            if let Ok(mut current) = self.tokens.secret.write() {
                *current = Some(secret);
            }
            self.rotated.notify_one();
            if !self.pause(self.lifetime() + EXPIRY_MARGIN).await {
                return;
            }
            match self.clients("retire").await {
                Ok(_) => {
                    self.tally.rotations.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => self.tally.error("rotation", format!("{e:#}")),
            }
        }
    }

    /// Runs the `clients` command with `action`; its standard output.
    async fn clients(&self, action: &str) -> anyhow::Result<String> {
        let command = self.plan.clients_command.replace("{action}", action);
        let out = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&command)
            .output()
            .await
            .with_context(|| format!("running {command}"))?;
        if !out.status.success() {
            bail!(
                "{command}: {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    }

    /// Once the first token has expired, sends it every minute: it must be refused.
    async fn expired_token_task(self: Arc<Self>) {
        let Some(first) = self.tokens.first.lock().ok().and_then(|f| f.clone()) else {
            return;
        };
        let wait = (first.expires + EXPIRY_MARGIN).saturating_duration_since(Instant::now());
        if !self.pause(wait).await {
            return;
        }
        let mut client = Client::new(self.plan.addr, self.plan.host.clone(), false);
        loop {
            let drawn = Drawn::plain(
                Method::GET,
                "/api/team?limit=1",
                vec![(AUTHORIZATION, format!("Bearer {}", first.value))],
                None,
            );
            match client.exchange(&drawn).await {
                Ok((401, _, _)) => {
                    self.tally.expired_refused.fetch_add(1, Ordering::Relaxed);
                }
                Ok((status, _, body)) => self.tally.error(
                    "expired token",
                    format!("answered {status}: {}", String::from_utf8_lossy(&body)),
                ),
                Err(e) => self.tally.error("expired token", e),
            }
            if !self.pause(Duration::from_secs(60)).await {
                return;
            }
        }
    }

    /// Paced reads over one keep-alive connection.
    async fn reads_task(self: Arc<Self>, n: u64) {
        let period = Duration::from_secs_f64(4.0 / self.plan.reads_per_s.max(0.01));
        let mut rng = fastrand::Rng::with_seed(n);
        let mut client = Client::new(self.plan.addr, self.plan.host.clone(), false);
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.stopped() {
            tick.tick().await;
            // (path and query, Prefer count=exact, only with a token)
            let (path, prefer_count, token_only) = match rng.u8(0..6) {
                0 => (format!("/api/team/{}", rng.u32(1..=10)), false, false),
                1 => (
                    format!("/api/people?order=id&limit=20&offset={}", rng.u32(0..900)),
                    false,
                    false,
                ),
                2 => (
                    format!(
                        "/api/people?select=id,last_name&last_name=like.{}*&order=id&limit=20",
                        rng.alphabetic().to_ascii_uppercase()
                    ),
                    true,
                    false,
                ),
                3 => (
                    format!(
                        "/api/team?select=name,driver(name,points)&team_id=eq.{}",
                        rng.u32(1..=10)
                    ),
                    false,
                    false,
                ),
                4 => (format!("/api/team_dv/{}", rng.u32(1..=10)), false, true),
                _ => ("/data".to_string(), false, false),
            };
            let mut headers = Vec::new();
            if token_only || rng.bool() {
                headers.push(self.bearer());
            }
            if prefer_count {
                headers.push((HeaderName::from_static("prefer"), "count=exact".into()));
            }
            let drawn = Drawn::plain(Method::GET, &path, headers, None);
            match client.exchange(&drawn).await {
                Ok((200 | 206, _, _)) => {
                    self.tally.reads.fetch_add(1, Ordering::Relaxed);
                }
                Ok((status, _, body)) => self.tally.error(
                    "reads",
                    format!("GET {path}: {status} {}", String::from_utf8_lossy(&body)),
                ),
                Err(e) => self.tally.error("reads", format!("GET {path}: {e}")),
            }
        }
    }

    /// Paced inserts, an update of a live row every third, and deletes of the oldest.
    async fn writes_task(self: Arc<Self>) {
        let period = Duration::from_secs_f64(1.0 / self.plan.writes_per_s.max(0.01));
        let run = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut client = Client::new(self.plan.addr, self.plan.host.clone(), false);
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seq = 0u64;
        while !self.stopped() {
            tick.tick().await;
            seq += 1;
            let body = json!({"name": format!("soak-{run}-{seq}"), "points": 0}).to_string();
            let answer = self
                .write(
                    &mut client,
                    Method::POST,
                    &format!("/api/{TABLE}?select=team_id"),
                    Some(body),
                    201,
                )
                .await;
            let Some(answer) = answer else { continue };
            let Some(id) = serde_json::from_slice::<Value>(&answer)
                .ok()
                .and_then(|v| v[0]["team_id"].as_i64())
            else {
                self.tally.error(
                    "writes",
                    format!("insert answered {}", String::from_utf8_lossy(&answer)),
                );
                continue;
            };
            let oldest = self.writes.lock().ok().and_then(|mut log| {
                log.inserted.push(id);
                log.live.push_back(id);
                (log.live.len() > LIVE_ROWS)
                    .then(|| log.live.pop_front())
                    .flatten()
            });
            if seq.is_multiple_of(3) {
                let body = json!({"points": seq}).to_string();
                let path = format!("/api/{TABLE}?team_id=eq.{id}");
                self.write(&mut client, Method::PATCH, &path, Some(body), 204)
                    .await;
            }
            if let Some(oldest) = oldest {
                let path = format!("/api/{TABLE}?team_id=eq.{oldest}");
                if self
                    .write(&mut client, Method::DELETE, &path, None, 204)
                    .await
                    .is_some()
                {
                    if let Ok(mut log) = self.writes.lock() {
                        log.deleted.push(oldest);
                    }
                }
            }
        }
    }

    /// One write with the current token; its body when it answered `expected`.
    async fn write(
        &self,
        client: &mut Client,
        method: Method,
        path: &str,
        body: Option<String>,
        expected: u16,
    ) -> Option<bytes::Bytes> {
        let mut headers = vec![self.bearer()];
        if method == Method::POST {
            headers.push((
                HeaderName::from_static("prefer"),
                "return=representation".into(),
            ));
        }
        if body.is_some() {
            headers.push((CONTENT_TYPE, "application/json".into()));
        }
        let drawn = Drawn::plain(method.clone(), path, headers, body);
        match client.exchange(&drawn).await {
            Ok((status, _, answer)) if status == expected => {
                self.tally.writes.fetch_add(1, Ordering::Relaxed);
                Some(answer)
            }
            Ok((status, _, answer)) => {
                self.tally.error(
                    "writes",
                    format!(
                        "{method} {path}: {status} {}",
                        String::from_utf8_lossy(&answer)
                    ),
                );
                None
            }
            Err(e) => {
                self.tally.error("writes", format!("{method} {path}: {e}"));
                None
            }
        }
    }

    /// Paced requests, each on a new connection.
    async fn fresh_task(self: Arc<Self>) {
        let period = Duration::from_secs_f64(1.0 / self.plan.fresh_per_s.max(0.01));
        let mut client = Client::new(self.plan.addr, self.plan.host.clone(), true);
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        while !self.stopped() {
            tick.tick().await;
            let drawn = Drawn::plain(Method::GET, "/xyz", Vec::new(), None);
            match client.exchange(&drawn).await {
                Ok((200, _, _)) => {
                    self.tally.fresh.fetch_add(1, Ordering::Relaxed);
                }
                Ok((status, _, _)) => self.tally.error("fresh", format!("GET /xyz: {status}")),
                Err(e) => self.tally.error("fresh", format!("GET /xyz: {e}")),
            }
        }
    }

    /// Follows the written table with a bearer token; reconnects with `since` when the token
    /// expires.
    async fn follower_task(self: Arc<Self>) {
        while !self.stopped() {
            let since = self.seen.lock().ok().and_then(|s| s.last_event);
            let mut subscribe = json!({"type": "subscribe", "table": TABLE});
            if let Some(since) = since {
                subscribe["since"] = json!(since);
            }
            let mut socket = match open(&self.plan, Some(&self.token()), subscribe, false).await {
                Ok(socket) => socket,
                Err(e) => {
                    self.tally.error("follower", e);
                    self.pause(Duration::from_secs(1)).await;
                    continue;
                }
            };
            loop {
                let message = tokio::select! {
                    m = socket.next() => m,
                    () = self.stopping() => {
                        // the writes have stopped: read what is still on its way
                        let drain = tokio::time::timeout(Duration::from_secs(5), async {
                            while let Some(Ok(m)) = socket.next().await {
                                if let Message::Text(text) = m {
                                    self.follow(text.as_str());
                                }
                            }
                        });
                        let _ = drain.await;
                        return;
                    }
                };
                match message {
                    Some(Ok(Message::Text(text))) => self.follow(text.as_str()),
                    Some(Ok(Message::Close(Some(frame))))
                        if frame.code == CloseCode::Policy && frame.reason.contains("expired") =>
                    {
                        self.tally
                            .follower_reconnects
                            .fetch_add(1, Ordering::Relaxed);
                        break;
                    }
                    Some(Ok(Message::Close(frame))) => {
                        self.tally
                            .error("follower", format!("closed by the server: {frame:?}"));
                        break;
                    }
                    Some(Ok(_)) => {}
                    Some(Err(e)) => {
                        self.tally.error("follower", format!("{e}"));
                        break;
                    }
                    None => {
                        self.tally.error("follower", "connection ended".into());
                        break;
                    }
                }
            }
        }
    }

    /// Records one message of the follower.
    fn follow(&self, text: &str) {
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            self.tally
                .error("follower", format!("not JSON: {text:.200}"));
            return;
        };
        match message["type"].as_str() {
            Some("event") => {
                let key = message["key"]["team_id"].as_i64();
                if let Ok(mut seen) = self.seen.lock() {
                    seen.last_event = message["id"].as_i64().or(seen.last_event);
                    match (message["op"].as_str(), key) {
                        (Some("insert"), Some(key)) => {
                            seen.inserts.insert(key);
                        }
                        (Some("delete"), Some(key)) => {
                            seen.deletes.insert(key);
                        }
                        _ => {}
                    }
                }
            }
            Some("resync" | "error") => self
                .tally
                .error("follower", format!("server said {text:.300}")),
            _ => {}
        }
    }

    /// Idle WebSockets: subscribed with a filter nothing matches, answering pings.
    async fn idle_task(self: Arc<Self>, opening: Arc<Semaphore>) {
        let subscribe = json!({"type": "subscribe", "table": TABLE, "filter": "team_id=eq.0"});
        while !self.stopped() {
            let permit = opening.acquire().await;
            let opened = open(&self.plan, None, subscribe.clone(), false).await;
            drop(permit);
            let mut socket = match opened {
                Ok(socket) => socket,
                Err(e) => {
                    self.tally.error("idle websockets", e);
                    self.pause(Duration::from_secs(1)).await;
                    continue;
                }
            };
            self.tally.idle_open.fetch_add(1, Ordering::Relaxed);
            let ended = loop {
                tokio::select! {
                    m = socket.next() => match m {
                        Some(Ok(Message::Text(text))) => {
                            break format!("unexpected message {:.200}", text.as_str());
                        }
                        Some(Ok(Message::Close(frame))) => break format!("closed: {frame:?}"),
                        Some(Ok(_)) => {}
                        Some(Err(e)) => break format!("{e}"),
                        None => break "connection ended".into(),
                    },
                    () = self.stopping() => {
                        let _ = socket.close(None).await;
                        return;
                    }
                }
            };
            self.tally.idle_open.fetch_sub(1, Ordering::Relaxed);
            self.tally.error("idle websockets", ended);
        }
    }

    /// A subscriber to every change that never reads (a small receive buffer), replaced every
    /// [`STALLED_FOR`]: the server must cut it off without holding its backlog.
    async fn stalled_task(self: Arc<Self>) {
        while !self.stopped() {
            let subscribe = json!({"type": "subscribe", "table": TABLE});
            match open(&self.plan, None, subscribe, true).await {
                Ok(socket) => {
                    self.pause(STALLED_FOR).await;
                    drop(socket);
                    self.tally.stalled_rounds.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    self.tally.error("stalled subscriber", e);
                    self.pause(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// A WebSocket opened, subscribed and closed every second.
    async fn churn_task(self: Arc<Self>) {
        let subscribe = json!({"type": "subscribe", "table": TABLE, "filter": "team_id=eq.0"});
        while self.pause(Duration::from_secs(1)).await {
            match open(&self.plan, None, subscribe.clone(), false).await {
                Ok(mut socket) => match socket.close(None).await {
                    Ok(()) => {
                        self.tally.churned.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => self.tally.error("websocket churn", format!("close: {e}")),
                },
                Err(e) => self.tally.error("websocket churn", e),
            }
        }
    }

    /// Reads the server now.
    async fn sample(&self, started: Instant, worker_pids: &mut HashSet<u32>) -> Sample {
        let workers = procstat::children(&[self.plan.supervisor]);
        worker_pids.extend(workers.iter().copied());
        let mb = |pids: &[u32]| {
            pids.iter()
                .filter_map(|p| procstat::resident_bytes(*p))
                .sum::<u64>() as f64
                / 1e6
        };
        let metrics = self.metrics().await;
        let gauge = |name: &str| metric(&metrics, name).map_or(0, |v| v as u64);
        Sample {
            minute: started.elapsed().as_secs_f64() / 60.0,
            worker_rss_mb: mb(&workers),
            supervisor_rss_mb: mb(&[self.plan.supervisor]),
            fds: workers.iter().filter_map(|p| procstat::open_fds(*p)).sum(),
            subscriptions: gauge("rowgate_realtime_subscriptions"),
            realtime_connections: gauge("rowgate_realtime_connections"),
            backends: self.backends().await,
            requests: self.tally.requests(),
            errors: self.tally.error_count(),
        }
    }

    async fn metrics(&self) -> String {
        let mut client = Client::new(self.plan.addr, self.plan.host.clone(), true);
        let drawn = Drawn::plain(Method::GET, "/metrics", Vec::new(), None);
        match client.exchange(&drawn).await {
            Ok((200, _, body)) => String::from_utf8_lossy(&body).into_owned(),
            Ok((status, _, _)) => {
                self.tally
                    .error("sampling", format!("/metrics answered {status}"));
                String::new()
            }
            Err(e) => {
                self.tally.error("sampling", format!("/metrics: {e}"));
                String::new()
            }
        }
    }

    async fn backends(&self) -> Option<u64> {
        let command = self.plan.backends_command.as_ref()?;
        let out = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(command)
            .output()
            .await
            .ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let count = text.trim().parse().ok();
        if count.is_none() {
            self.tally
                .error("sampling", format!("{command} printed {:?}", text.trim()));
        }
        count
    }

    /// Every acknowledged insert that was not deleted is there, every acknowledged delete is
    /// gone, and the follower saw each of them.
    async fn verify_writes(&self) -> Vec<String> {
        let (inserted, deleted, live) = match self.writes.lock() {
            Ok(log) => (
                log.inserted.clone(),
                log.deleted.clone(),
                log.live.iter().copied().collect::<Vec<_>>(),
            ),
            Err(_) => return vec!["the write log was poisoned".into()],
        };
        let mut failures = Vec::new();
        let deleted_set: HashSet<i64> = deleted.iter().copied().collect();
        let present = match self.present(&inserted).await {
            Ok(present) => present,
            Err(e) => return vec![format!("reading the written rows back: {e:#}")],
        };
        let missing: Vec<i64> = live
            .iter()
            .copied()
            .filter(|id| !deleted_set.contains(id) && !present.contains(id))
            .collect();
        let undeleted: Vec<i64> = deleted
            .iter()
            .copied()
            .filter(|id| present.contains(id))
            .collect();
        let vanished: Vec<i64> = inserted
            .iter()
            .copied()
            .filter(|id| !deleted_set.contains(id) && !live.contains(id))
            .filter(|id| !present.contains(id))
            .collect();
        if !missing.is_empty() || !vanished.is_empty() {
            failures.push(format!(
                "acknowledged inserts missing: {:?}",
                [missing, vanished].concat()
            ));
        }
        if !undeleted.is_empty() {
            failures.push(format!("acknowledged deletes still there: {undeleted:?}"));
        }
        if let Ok(seen) = self.seen.lock() {
            let unseen_inserts: Vec<i64> = inserted
                .iter()
                .copied()
                .filter(|id| !seen.inserts.contains(id))
                .collect();
            let unseen_deletes: Vec<i64> = deleted
                .iter()
                .copied()
                .filter(|id| !seen.deletes.contains(id))
                .collect();
            if !unseen_inserts.is_empty() || !unseen_deletes.is_empty() {
                failures.push(format!(
                    "the follower missed {} inserts and {} deletes (first: {:?} {:?})",
                    unseen_inserts.len(),
                    unseen_deletes.len(),
                    unseen_inserts.first(),
                    unseen_deletes.first()
                ));
            }
        }
        failures
    }

    /// Which of `ids` are in the table now.
    async fn present(&self, ids: &[i64]) -> anyhow::Result<HashSet<i64>> {
        self.refresh_token().await?;
        let mut client = Client::new(self.plan.addr, self.plan.host.clone(), false);
        let mut present = HashSet::new();
        for chunk in ids.chunks(200) {
            let list: Vec<String> = chunk.iter().map(i64::to_string).collect();
            let path = format!(
                "/api/{TABLE}?select=team_id&team_id=in.({})",
                list.join(",")
            );
            let drawn = Drawn::plain(Method::GET, &path, vec![self.bearer()], None);
            let (status, _, body) = client
                .exchange(&drawn)
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
            anyhow::ensure!(status == 200, "GET {path}: {status}");
            let rows: Vec<Value> = serde_json::from_slice(&body)?;
            present.extend(rows.iter().filter_map(|r| r["team_id"].as_i64()));
        }
        Ok(present)
    }

    /// The report printed at the end.
    fn summary(
        &self,
        samples: &[Sample],
        baseline_at: Duration,
        duration: Duration,
        failures: &[String],
    ) -> String {
        let t = &self.tally;
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let mut out = String::new();
        let minutes = duration.as_secs_f64() / 60.0;
        out += &format!(
            "soak of {minutes:.0} min: {} reads, {} writes, {} requests on new connections, {} \
             WebSockets churned, {} idle WebSockets open at the end, follower reconnected {} \
             times on token expiry, expired token refused {} times, {} secret rotations, {} \
             stalled subscribers\n",
            n(&t.reads),
            n(&t.writes),
            n(&t.fresh),
            n(&t.churned),
            n(&t.idle_open),
            n(&t.follower_reconnects),
            n(&t.expired_refused),
            n(&t.rotations),
            n(&t.stalled_rounds),
        );
        if let Ok(log) = self.writes.lock() {
            out += &format!(
                "writes acknowledged: {} inserts, {} deletes; all checked\n",
                log.inserted.len(),
                log.deleted.len()
            );
        }
        out += "| figure | baseline | end | growth |\n|---|---|---|---|\n";
        for (name, baseline, end) in growth_table(samples, baseline_at, duration) {
            out += &format!(
                "| {name} | {baseline:.1} | {end:.1} | {:+.1}% |\n",
                (end / baseline.max(f64::MIN_POSITIVE) - 1.0) * 100.0
            );
        }
        if failures.is_empty() {
            out += "PASSED\n";
        } else {
            out += "FAILED:\n";
            for f in failures {
                out += &format!("- {f}\n");
            }
        }
        out
    }
}

/// Opens a WebSocket to `/realtime` (with a bearer token, or as the anonymous role), sends
/// `subscribe` and waits for its ack; `small_buffer` shrinks the receive buffer (a client that
/// will not read).
async fn open(
    plan: &Plan,
    token: Option<&str>,
    subscribe: Value,
    small_buffer: bool,
) -> Result<WebSocketStream<TcpStream>, String> {
    tokio::time::timeout(OPEN_TIMEOUT, async {
        let socket = if plan.addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| format!("socket: {e}"))?;
        if small_buffer {
            socket
                .set_recv_buffer_size(4096)
                .map_err(|e| format!("socket: {e}"))?;
        }
        let stream = socket
            .connect(plan.addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let mut request = format!("ws://{}/realtime", plan.host)
            .into_client_request()
            .map_err(|e| format!("request: {e}"))?;
        if let Some(token) = token {
            let value = format!("Bearer {token}")
                .parse()
                .map_err(|e| format!("token: {e}"))?;
            request.headers_mut().insert(AUTHORIZATION, value);
        }
        let (mut socket, _) = tokio_tungstenite::client_async(request, stream)
            .await
            .map_err(|e| format!("handshake: {e}"))?;
        socket
            .send(Message::text(subscribe.to_string()))
            .await
            .map_err(|e| format!("subscribe: {e}"))?;
        loop {
            match socket.next().await {
                Some(Ok(Message::Text(text))) => {
                    let message: Value = serde_json::from_str(text.as_str())
                        .map_err(|e| format!("not JSON: {e}"))?;
                    match message["type"].as_str() {
                        Some("subscribed") => return Ok(socket),
                        Some("error") => return Err(format!("subscribe refused: {message}")),
                        _ => {}
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    return Err(format!("closed before the ack: {frame:?}"))
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Err(format!("before the ack: {e}")),
                None => return Err("closed before the ack".into()),
            }
        }
    })
    .await
    .unwrap_or_else(|_| Err(format!("no ack within {} s", OPEN_TIMEOUT.as_secs())))
}

/// A gauge's value summed over its series in a Prometheus text.
fn metric(text: &str, name: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    (!values.is_empty()).then(|| values.iter().sum())
}

fn print_sample(s: &Sample) {
    println!(
        "min {:5.1}: worker {:6.1} MB, supervisor {:5.1} MB, {:5} fds, {:5} subscriptions, {:5} \
         realtime connections, backends {}, {} requests, {} errors",
        s.minute,
        s.worker_rss_mb,
        s.supervisor_rss_mb,
        s.fds,
        s.subscriptions,
        s.realtime_connections,
        s.backends.map_or("-".to_string(), |b| b.to_string()),
        s.requests,
        s.errors
    );
}

fn append(path: &std::path::Path, sample: &Sample) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(file, "{}", serde_json::to_string(sample)?)?;
    Ok(())
}

/// A sampled figure: its name and how it is read from a sample (`None`: not sampled).
pub type Figure = (&'static str, fn(&Sample) -> Option<f64>);

/// The figures judged for growth.
pub const FIGURES: [Figure; 4] = [
    ("worker RSS, MB", |s| Some(s.worker_rss_mb)),
    ("worker descriptors", |s| Some(s.fds as f64)),
    ("realtime subscriptions", |s| Some(s.subscriptions as f64)),
    ("PostgreSQL backends", |s| s.backends.map(|b| b as f64)),
];

/// Each sampled figure: its baseline and its end (medians).
pub fn growth_table(
    samples: &[Sample],
    baseline_at: Duration,
    duration: Duration,
) -> Vec<(&'static str, f64, f64)> {
    let from = baseline_at.min(duration / 3).as_secs_f64() / 60.0;
    let window: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.minute >= from && s.minute <= from + 2.0)
        .collect();
    let window = if window.is_empty() {
        samples
            .iter()
            .filter(|s| s.minute >= from)
            .take(1)
            .collect()
    } else {
        window
    };
    let tail: Vec<&Sample> = samples.iter().rev().take(5).collect();

    FIGURES
        .into_iter()
        .filter_map(|(name, read)| {
            let baseline = median(window.iter().filter_map(|s| read(s)).collect())?;
            let end = median(tail.iter().filter_map(|s| read(s)).collect())?;
            Some((name, baseline, end))
        })
        .collect()
}

/// The figures that grew by more than [`MAX_GROWTH`].
fn growth_failures(samples: &[Sample], baseline_at: Duration, duration: Duration) -> Vec<String> {
    if samples.len() < 2 {
        return vec!["too few samples to judge growth (run longer)".into()];
    }
    growth_table(samples, baseline_at, duration)
        .into_iter()
        .filter(|(_, baseline, end)| *end > baseline * (1.0 + MAX_GROWTH))
        .map(|(name, baseline, end)| {
            format!(
                "{name} grew from {baseline:.1} to {end:.1} (more than {:.0}%)",
                MAX_GROWTH * 100.0
            )
        })
        .collect()
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    Some(values[values.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(minute: f64, rss: f64) -> Sample {
        Sample {
            minute,
            worker_rss_mb: rss,
            fds: 100,
            subscriptions: 1000,
            ..Sample::default()
        }
    }

    #[test]
    fn growth_is_judged_on_medians_from_the_baseline() {
        let minutes = Duration::from_secs(60 * 60);
        let ten = Duration::from_secs(600);
        let mut flat: Vec<Sample> = (1..=120).map(|n| at(f64::from(n) / 2.0, 30.0)).collect();
        // one sample caught a spike: medians ignore it
        flat[100].worker_rss_mb = 60.0;
        assert!(growth_failures(&flat, ten, minutes).is_empty());
        let growing: Vec<Sample> = (1..=120)
            .map(|n| at(f64::from(n) / 2.0, 30.0 + f64::from(n) * 0.05))
            .collect();
        let failures = growth_failures(&growing, ten, minutes);
        assert_eq!(failures.len(), 1, "{failures:?}");
        assert!(
            failures[0].starts_with("worker RSS, MB grew from 31.1 to 35.9"),
            "{failures:?}"
        );
        // no PostgreSQL: no backends row
        assert_eq!(growth_table(&flat, ten, minutes).len(), 3);
    }

    #[test]
    fn gauges_are_summed_over_series() {
        let text = "# TYPE rowgate_realtime_subscriptions gauge\n\
                    rowgate_realtime_subscriptions{pid=\"1\"} 3\n\
                    rowgate_realtime_subscriptions{pid=\"2\"} 4\n\
                    rowgate_realtime_subscriptions_other 9\n";
        assert_eq!(metric(text, "rowgate_realtime_subscriptions"), Some(7.0));
        assert_eq!(metric(text, "rowgate_nothing"), None);
    }
}
