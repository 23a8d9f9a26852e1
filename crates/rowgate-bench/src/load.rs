//! The load engine: C client connections sending a weighted mix of requests in one of three modes,
//! recording latencies in an HDR histogram and checking every answer.
//!
//! - closed loop: each connection sends its next request when the previous answer is in (ab/wrk
//!   style, keep-alive), optionally thinking between requests;
//! - open loop: requests are due at a fixed rate and latency counts from the *intended* send time,
//!   so a slow server is not hidden by a client that waits (no coordinated omission);
//! - fresh: a new TCP connection for every request, closed after the answer (httperf
//!   `--num-calls=1` style): connections per second.

use std::error::Error as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};

use crate::procstat;
use crate::spec::{Drawn, Request};

/// How requests are paced, or which WebSocket run it is (those are run by [`crate::ws`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Next request when the last answer is in.
    Closed,
    /// A fixed rate (requests per second across all connections).
    Open,
    /// A new connection per request.
    Fresh,
    /// WebSocket: connections subscribed, then held idle (server memory and CPU per connection).
    Idle,
    /// WebSocket: connect + subscribe rate.
    Connect,
    /// WebSocket: writes fanned out to subscribers (frames per second, commit-to-client latency).
    Fanout,
}

impl Mode {
    /// Every mode.
    pub const ALL: [Mode; 6] = [
        Mode::Closed,
        Mode::Open,
        Mode::Fresh,
        Mode::Idle,
        Mode::Connect,
        Mode::Fanout,
    ];

    /// Its name in scenario files and labels.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Closed => "closed",
            Mode::Open => "open",
            Mode::Fresh => "fresh",
            Mode::Idle => "idle",
            Mode::Connect => "connect",
            Mode::Fanout => "fanout",
        }
    }

    /// Whether [`crate::ws`] runs it (rather than the HTTP engine here).
    pub fn is_websocket(self) -> bool {
        matches!(self, Mode::Idle | Mode::Connect | Mode::Fanout)
    }

    /// What its rate counts: answers, connections subscribed or frames delivered.
    pub fn rate_unit(self) -> &'static str {
        match self {
            Mode::Closed | Mode::Open | Mode::Fresh => "req/s",
            Mode::Idle | Mode::Connect => "conn/s",
            Mode::Fanout => "frames/s",
        }
    }

    /// What the server CPU figure is per: a request, a connection, a frame, or (idle) a second.
    pub fn cpu_unit(self) -> &'static str {
        match self {
            Mode::Closed | Mode::Open | Mode::Fresh => "req",
            Mode::Idle => "s",
            Mode::Connect => "conn",
            Mode::Fanout => "frame",
        }
    }
}

/// Everything one run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What the row is called in reports.
    pub label: String,
    /// Server address.
    pub addr: SocketAddr,
    /// `Host` header value.
    pub host: String,
    /// Pacing.
    pub mode: Mode,
    /// Client connections (concurrent requests).
    pub connections: usize,
    /// Stop after this long (requests in flight finish).
    pub duration: Option<Duration>,
    /// Stop after this many requests.
    pub requests: Option<u64>,
    /// Open loop: requests per second.
    pub rate: Option<f64>,
    /// Think time per client, by client group (client `i` uses `think[i % len]`).
    pub think: Vec<Duration>,
    /// The request mix.
    pub mix: Vec<Request>,
    /// Server processes to read CPU and memory from.
    pub pids: Vec<u32>,
    /// Show a progress bar.
    pub progress: bool,
}

/// What a run measured.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Outcome {
    /// Label.
    pub label: String,
    /// Pacing.
    pub mode: Mode,
    /// Connections.
    pub connections: usize,
    /// Wall time of the run, seconds.
    pub seconds: f64,
    /// Answers that passed their checks.
    pub ok: u64,
    /// Failed checks and transport errors.
    pub errors: u64,
    /// A few distinct error messages.
    pub error_samples: Vec<String>,
    /// Passed answers per second.
    pub rps: f64,
    /// Latency percentiles in microseconds: p50, p90, p99, p99.9, max.
    pub latency_us: Latency,
    /// Server CPU microseconds per answered request (when pids were given).
    pub server_cpu_us_per_request: Option<f64>,
    /// Server RSS after the run, bytes.
    pub server_rss_bytes: Option<u64>,
    /// Server peak RSS, bytes.
    pub server_peak_rss_bytes: Option<u64>,
    /// WebSocket runs: server RSS before the connections opened, bytes (the difference to
    /// `server_rss_bytes` is what the connections cost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_rss_before_bytes: Option<u64>,
    /// The footprint scenario: the server's proportional set size (shared pages counted once
    /// over its processes), bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_pss_bytes: Option<u64>,
    /// A mix of several requests: the latency of each kind (the tail of a mix may be one of
    /// them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub by_request: Vec<RequestLatency>,
}

/// The answers of one request of a mix.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RequestLatency {
    /// Its method and path template.
    pub request: String,
    /// Answers that passed their checks.
    pub ok: u64,
    /// Their latency percentiles in microseconds.
    pub latency_us: Latency,
}

impl Outcome {
    /// Server memory per connection held: the RSS growth over the connections that passed.
    pub fn rss_per_connection(&self) -> Option<f64> {
        let (before, after) = (self.server_rss_before_bytes?, self.server_rss_bytes?);
        (self.ok > 0).then(|| (after as f64 - before as f64) / self.ok as f64)
    }
}

/// Latency percentiles, microseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p999: u64,
    /// Maximum.
    pub max: u64,
}

impl Latency {
    /// The percentiles of `histogram`.
    pub fn of(histogram: &Histogram<u64>) -> Latency {
        Latency {
            p50: histogram.value_at_quantile(0.50),
            p90: histogram.value_at_quantile(0.90),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
        }
    }
}

/// Shared state of a run.
struct Shared {
    plan: Plan,
    started: Instant,
    deadline: Option<Instant>,
    seq: AtomicU64,
    done: AtomicU64,
    stop: AtomicBool,
    weights: Vec<u32>,
    samples: Mutex<Vec<String>>,
    tally: Mutex<Tally>,
}

/// What the connection tasks measured, merged as they go: one set of histograms per run, not
/// per connection (each is ~170 KB: 5,100 paced clients holding their own took 4.5 GB and
/// seconds of page faults at the start of a step, which the step's latencies then measured).
struct Tally {
    histogram: Histogram<u64>,
    /// Per request of the mix (by its index).
    by_request: Vec<Histogram<u64>>,
    ok: u64,
    errors: u64,
}

/// A connection task's answers not yet merged into the run's [`Tally`].
#[derive(Default)]
struct Pending {
    /// (index of the request in the mix, µs) of each answer that passed its checks.
    latencies: Vec<(usize, u64)>,
    errors: u64,
}

/// Answers a connection task keeps before merging them (one lock per this many).
const MERGE_EVERY: usize = 256;

impl Pending {
    fn merge_into(&mut self, tally: &Mutex<Tally>) {
        if let Ok(mut tally) = tally.lock() {
            for &(kind, micros) in &self.latencies {
                let _ = tally.histogram.record(micros);
                let _ = tally.by_request[kind].record(micros);
            }
            tally.ok += self.latencies.len() as u64;
            tally.errors += self.errors;
        }
        self.latencies.clear();
        self.errors = 0;
    }
}

/// Distinct error messages kept per run.
const MAX_SAMPLES: usize = 5;

/// Keeps `error` among `samples` when it is new and there is room.
pub fn keep_sample(samples: &mut Vec<String>, error: String) {
    if samples.len() < MAX_SAMPLES && !samples.contains(&error) {
        samples.push(error);
    }
}

/// Runs `plan` to the end.
pub async fn run(plan: Plan) -> anyhow::Result<Outcome> {
    anyhow::ensure!(
        !plan.mode.is_websocket(),
        "{} is a WebSocket mode",
        plan.mode.name()
    );
    anyhow::ensure!(!plan.mix.is_empty(), "no requests to send");
    anyhow::ensure!(plan.connections > 0, "connections must be at least 1");
    anyhow::ensure!(
        plan.duration.is_some() || plan.requests.is_some(),
        "give a duration or a request count"
    );
    if plan.mode == Mode::Open {
        anyhow::ensure!(plan.rate.is_some_and(|r| r > 0.0), "open loop needs a rate");
    }
    let before = if plan.pids.is_empty() {
        None
    } else {
        Some(procstat::sample(&plan.pids)?)
    };
    let started = Instant::now();
    let by_request_histograms = plan.mix.iter().map(|_| new_histogram()).collect();
    let shared = Arc::new(Shared {
        weights: plan.mix.iter().map(|r| r.spec.weight).collect(),
        deadline: plan.duration.map(|d| started + d),
        plan,
        started,
        seq: AtomicU64::new(0),
        done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        samples: Mutex::new(Vec::new()),
        tally: Mutex::new(Tally {
            histogram: new_histogram(),
            by_request: by_request_histograms,
            ok: 0,
            errors: 0,
        }),
    });
    let progress = progress_bar(&shared);
    let mut tasks = Vec::with_capacity(shared.plan.connections);
    for client in 0..shared.plan.connections {
        let shared = shared.clone();
        tasks.push(tokio::spawn(
            async move { client_loop(&shared, client).await },
        ));
    }
    for t in tasks {
        t.await.context("client task")?;
    }
    let tally = shared
        .tally
        .lock()
        .map_err(|_| anyhow::anyhow!("a client task panicked"))?;
    let (ok, errors) = (tally.ok, tally.errors);
    let seconds = shared.started.elapsed().as_secs_f64();
    shared.stop.store(true, Ordering::Relaxed);
    if let Some(bar) = progress {
        bar.finish_and_clear();
    }
    let plan = &shared.plan;
    let after = match before {
        Some(_) => Some(procstat::sample(&plan.pids)?),
        None => None,
    };
    let cpu = match (before, after) {
        (Some(b), Some(a)) if ok + errors > 0 => {
            Some((a.cpu_seconds - b.cpu_seconds) * 1e6 / (ok + errors) as f64)
        }
        _ => None,
    };
    let samples = shared.samples.lock().map(|s| s.clone()).unwrap_or_default();
    Ok(Outcome {
        label: plan.label.clone(),
        mode: plan.mode,
        connections: plan.connections,
        seconds,
        ok,
        errors,
        error_samples: samples,
        rps: ok as f64 / seconds.max(1e-9),
        latency_us: Latency::of(&tally.histogram),
        server_cpu_us_per_request: cpu,
        server_rss_bytes: after.map(|a| a.rss_bytes),
        server_peak_rss_bytes: after.map(|a| a.peak_rss_bytes),
        server_rss_before_bytes: None,
        server_pss_bytes: None,
        by_request: if plan.mix.len() > 1 {
            plan.mix
                .iter()
                .zip(&tally.by_request)
                .map(|(r, h)| RequestLatency {
                    request: format!("{} {}", r.spec.method, r.spec.path),
                    ok: h.len(),
                    latency_us: Latency::of(h),
                })
                .collect()
        } else {
            Vec::new()
        },
    })
}

/// Watches idle servers for `seconds`: their RSS, and their CPU use in µs per second (reported
/// in the CPU column) — the footprint scenario.
pub async fn idle(pids: &[u32], seconds: Duration) -> anyhow::Result<Outcome> {
    anyhow::ensure!(
        !pids.is_empty(),
        "the footprint scenario needs the server's pid"
    );
    let before = procstat::sample(pids)?;
    tokio::time::sleep(seconds).await;
    let after = procstat::sample(pids)?;
    let secs = seconds.as_secs_f64();
    Ok(Outcome {
        label: "idle".into(),
        mode: Mode::Closed,
        connections: 0,
        seconds: secs,
        ok: 0,
        errors: 0,
        error_samples: Vec::new(),
        rps: 0.0,
        latency_us: Latency::default(),
        server_cpu_us_per_request: Some(
            (after.cpu_seconds - before.cpu_seconds) * 1e6 / secs.max(1e-9),
        ),
        server_rss_bytes: Some(after.rss_bytes),
        server_peak_rss_bytes: Some(after.peak_rss_bytes),
        server_rss_before_bytes: None,
        server_pss_bytes: Some(after.pss_bytes),
        by_request: Vec::new(),
    })
}

/// An empty latency histogram: 1 µs to 10 minutes, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 600_000_000, 3)
        .unwrap_or_else(|_| Histogram::new(3).unwrap_or_else(|_| unreachable!()))
}

fn progress_bar(shared: &Arc<Shared>) -> Option<indicatif::ProgressBar> {
    if !shared.plan.progress {
        return None;
    }
    let bar = match shared.plan.requests {
        Some(n) => indicatif::ProgressBar::new(n),
        None => {
            indicatif::ProgressBar::new(shared.plan.duration.map_or(0, |d| d.as_millis() as u64))
        }
    };
    bar.set_style(
        indicatif::ProgressStyle::with_template("{prefix:>12} [{bar:30}] {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    bar.set_prefix(shared.plan.label.clone());
    let (b, s) = (bar.clone(), shared.clone());
    tokio::spawn(async move {
        while !s.stop.load(Ordering::Relaxed) {
            let done = s.done.load(Ordering::Relaxed);
            let elapsed = s.started.elapsed();
            b.set_position(match s.plan.requests {
                Some(_) => done,
                None => elapsed.as_millis() as u64,
            });
            b.set_message(format!(
                "{done} requests, {:.0}/s",
                done as f64 / elapsed.as_secs_f64().max(1e-3)
            ));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    Some(bar)
}

async fn client_loop(shared: &Shared, client: usize) {
    let plan = &shared.plan;
    let mut rng = fastrand::Rng::with_seed(0x5EED ^ client as u64);
    let mut pending = Pending::default();
    let think = (!plan.think.is_empty()).then(|| plan.think[client % plan.think.len()]);
    let interval = plan.rate.map(|r| Duration::from_secs_f64(1.0 / r));
    let mut connection = Client::new(plan.addr, plan.host.clone(), plan.mode == Mode::Fresh);
    // Paced clients start spread over one think time, as independent users would, not all at
    // the first instant.
    if let Some(t) = think {
        let offset = t.mul_f64(rng.f64());
        let wake = shared
            .deadline
            .map_or(Instant::now() + offset, |d| d.min(Instant::now() + offset));
        tokio::time::sleep_until(wake.into()).await;
    }
    loop {
        if shared.deadline.is_some_and(|d| Instant::now() >= d) {
            break;
        }
        let seq = shared.seq.fetch_add(1, Ordering::Relaxed);
        if plan.requests.is_some_and(|n| seq >= n) {
            break;
        }
        let intended = match (plan.mode, interval) {
            (Mode::Open, Some(i)) => {
                let due = shared.started + i.mul_f64(seq as f64);
                if shared.deadline.is_some_and(|d| due >= d) {
                    break;
                }
                tokio::time::sleep_until(due.into()).await;
                due
            }
            _ => Instant::now(),
        };
        let (kind, request) = pick(&plan.mix, &shared.weights, &mut rng);
        let drawn = request.draw(&mut rng, seq);
        let result = connection.exchange(&drawn).await;
        let micros = u64::try_from(intended.elapsed().as_micros()).unwrap_or(u64::MAX);
        let verdict =
            result.and_then(|(status, ct, body)| request.check(&drawn, status, &ct, &body));
        match verdict {
            Ok(()) => pending.latencies.push((kind, micros.max(1))),
            Err(e) => {
                pending.errors += 1;
                if let Ok(mut samples) = shared.samples.lock() {
                    keep_sample(
                        &mut samples,
                        format!("{} {}: {e}", drawn.method, drawn.path),
                    );
                }
            }
        }
        shared.done.fetch_add(1, Ordering::Relaxed);
        if pending.latencies.len() >= MERGE_EVERY {
            pending.merge_into(&shared.tally);
        }
        if let Some(t) = think {
            let wake = Instant::now() + t;
            let wake = shared.deadline.map_or(wake, |d| wake.min(d));
            tokio::time::sleep_until(wake.into()).await;
        }
    }
    pending.merge_into(&shared.tally);
}

fn pick<'a>(mix: &'a [Request], weights: &[u32], rng: &mut fastrand::Rng) -> (usize, &'a Request) {
    if mix.len() == 1 {
        return (0, &mix[0]);
    }
    let total: u32 = weights.iter().sum();
    let mut x = rng.u32(0..total.max(1));
    for (i, (r, w)) in mix.iter().zip(weights).enumerate() {
        if x < *w {
            return (i, r);
        }
        x -= *w;
    }
    (0, &mix[0])
}

/// One client's HTTP/1.1 connection: opened on first use and kept alive, opened again when the
/// server closed it; in fresh mode closed after every answer.
pub struct Client {
    addr: SocketAddr,
    host: String,
    fresh: bool,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Client {
    /// A client of the server at `addr` (`host`: the Host header); `fresh`: a new connection
    /// for every request.
    pub fn new(addr: SocketAddr, host: String, fresh: bool) -> Client {
        Client {
            addr,
            host,
            fresh,
            sender: None,
        }
    }

    /// Sends one request (connecting first when needed) and reads the whole answer.
    pub async fn exchange(&mut self, drawn: &Drawn) -> Result<(u16, String, Bytes), String> {
        let reused = self.sender.as_ref().is_some_and(|s| !s.is_closed());
        let result = match self.send_once(drawn).await {
            // A kept-alive connection the server closed while idle (its keep-alive timeout): like
            // browsers and Go's client, send again on a new connection when the request never
            // went out, or when it is idempotent and no answer came.
            Err(e) if reused && e.may_retry(&drawn.method) => self
                .send_once(drawn)
                .await
                .map_err(|e| format!("transport: {e}")),
            other => other.map_err(|e| format!("transport: {e}")),
        };
        if self.fresh {
            self.sender = None;
        }
        result
    }

    /// One attempt: connects when there is no open connection.
    async fn send_once(&mut self, drawn: &Drawn) -> Result<(u16, String, Bytes), SendError> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.sender = Some(connect(self.addr).await.map_err(SendError::Connect)?);
        }
        let Some(s) = self.sender.as_mut() else {
            return Err(SendError::Connect(anyhow::anyhow!("no connection")));
        };
        let mut builder = http::Request::builder()
            .method(drawn.method.clone())
            .uri(&drawn.path)
            .header(http::header::HOST, &self.host);
        if self.fresh {
            builder = builder.header(http::header::CONNECTION, "close");
        }
        for (name, value) in &drawn.headers {
            builder = builder.header(name, value);
        }
        let body = drawn.body.clone().map(Bytes::from).unwrap_or_default();
        let request = builder.body(Full::new(body)).map_err(SendError::Request)?;
        let outcome = async {
            s.ready().await?;
            let response = s.send_request(request).await?;
            let status = response.status().as_u16();
            let ct = response
                .headers()
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("")
                .to_string();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, ct, body))
        }
        .await;
        outcome.map_err(|e| {
            self.sender = None;
            SendError::Http(e)
        })
    }
}

/// Why an attempt failed.
#[derive(Debug)]
enum SendError {
    Connect(anyhow::Error),
    Request(http::Error),
    Http(hyper::Error),
}

impl SendError {
    /// Whether sending again on a new connection is safe: the request never went out, or it is
    /// idempotent and the connection closed before any answer.
    fn may_retry(&self, method: &http::Method) -> bool {
        match self {
            SendError::Http(e) if e.is_canceled() => true,
            // The connection died under the request (reset, closed before the answer): only an
            // idempotent request may be sent twice.
            SendError::Http(e) => {
                method.is_idempotent() && (e.is_incomplete_message() || e.source().is_some())
            }
            _ => false,
        }
    }
}

impl std::fmt::Display for SendError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SendError::Connect(e) => write!(f, "connect: {e}"),
            SendError::Request(e) => write!(f, "request: {e}"),
            SendError::Http(e) => write!(f, "{e}"),
        }
    }
}

async fn connect(addr: SocketAddr) -> anyhow::Result<SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::{Check, RequestSpec};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A keep-alive HTTP/1.1 server on loopback answering every request `200 []`, counting them.
    async fn counting_server() -> (SocketAddr, Arc<AtomicU64>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let served = Arc::new(AtomicU64::new(0));
        let count = served.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    while let Ok(n) = socket.read(&mut chunk).await {
                        if n == 0 {
                            break;
                        }
                        buffer.extend_from_slice(&chunk[..n]);
                        while let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
                            buffer.drain(..end + 4);
                            count.fetch_add(1, Ordering::Relaxed);
                            let answer = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n[]";
                            if socket.write_all(answer.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, served)
    }

    fn request(path: &str, status: u16) -> Request {
        Request::new(RequestSpec {
            method: "GET".into(),
            path: path.into(),
            headers: Vec::new(),
            body: None,
            vars: Default::default(),
            weight: 1,
            check: Check {
                status: Some(status),
                ..Check::default()
            },
        })
        .expect("request")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_answer_is_counted_once_per_request_of_the_mix() {
        let (addr, served) = counting_server().await;
        let plan = |connections, requests, think: Vec<Duration>| Plan {
            label: "t".into(),
            addr,
            host: "localhost".into(),
            mode: Mode::Closed,
            connections,
            duration: None,
            requests: Some(requests),
            rate: None,
            think,
            // the second request's check fails: a 404 is expected where the server says 200
            mix: vec![request("/ok", 200), request("/missing", 404)],
            pids: Vec::new(),
            progress: false,
        };
        // more answers than a connection keeps before merging, and many paced connections
        for (connections, requests, think) in [
            (4, 3 * MERGE_EVERY as u64 + 7, Vec::new()),
            (
                300,
                900,
                vec![Duration::from_millis(1), Duration::from_millis(3)],
            ),
        ] {
            let before = served.load(Ordering::Relaxed);
            let outcome = run(plan(connections, requests, think)).await.expect("run");
            assert_eq!(outcome.ok + outcome.errors, requests);
            assert_eq!(served.load(Ordering::Relaxed) - before, requests);
            assert!(outcome.ok > 0 && outcome.errors > 0, "{outcome:?}");
            assert_eq!(outcome.by_request.len(), 2);
            assert_eq!(outcome.by_request[0].ok, outcome.ok);
            assert_eq!(outcome.by_request[1].ok, 0);
            assert!(outcome.latency_us.max >= outcome.latency_us.p50);
        }
    }
}
