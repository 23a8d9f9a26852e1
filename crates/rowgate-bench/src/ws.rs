//! WebSocket runs against `/realtime` (docs/realtime.md): many connections, each subscribed to
//! one table, in three modes:
//!
//! - idle: connections opened and subscribed, then held idle — the server's RSS growth per
//!   connection, and its CPU use while nothing happens (µs per second);
//! - connect: how fast connections are opened and subscribed (connections per second, latency
//!   from connect to the `subscribed` ack);
//! - fanout: writers (one unless told) send writes over HTTP, each one after the other (the
//!   scenario's request, each setting unique values); every subscriber must get each write's
//!   event exactly once (a missing or duplicated event is an error). Frames delivered per second, and commit-to-client latency:
//!   the event's arrival minus the write's acknowledgement, in one process on one clock.
//!
//! One process may hold only so many sockets, and one source address has only ~28k ephemeral
//! ports: the connections are spread over client processes (this binary run again with the
//! hidden `ws-shard` subcommand, at most [`SOCKETS_PER_PROCESS`] connections each), each binding
//! its own source address (127.0.0.2, 127.0.0.3, …) and handing out its ports itself (see
//! [`Ports`]). The coordinator drives them in phases —
//! `connect`, `fanout`, `close` on their stdin — and reads one JSON [`Report`] per phase from
//! their stdout; it reads the server's CPU and memory between phases.

use std::borrow::Cow;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use futures_util::{SinkExt as _, StreamExt as _};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::net::{TcpSocket, TcpStream};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, watch, Semaphore};
use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::load::{self, keep_sample, new_histogram, Latency, Mode, Outcome};
use crate::procstat;
use crate::spec::{Drawn, Request, RequestSpec};

/// Most connections one client process holds (a process here may hold 20,000 descriptors).
pub const SOCKETS_PER_PROCESS: usize = 15_000;

/// The WebSocket endpoint.
const REALTIME_PATH: &str = "/realtime";

/// Longest wait for one connection's TCP connect, handshake and `subscribed` ack.
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);

/// Longest wait for the server's side of the close handshake.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// Fan-out: how long events may still come in after the last write was acknowledged.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);

/// Source ports tried per connection before giving up (a port may still be taken).
const PORT_ATTEMPTS: usize = 64;

/// Everything one WebSocket run needs.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What the row is called in reports.
    pub label: String,
    /// Idle, connect or fanout.
    pub mode: Mode,
    /// Server address.
    pub addr: SocketAddr,
    /// `Host` header value.
    pub host: String,
    /// Connections (fan-out: subscribers).
    pub connections: usize,
    /// The realtime table every connection subscribes to.
    pub table: String,
    /// Idle: how long the connections are held.
    pub hold: Duration,
    /// Fan-out: writes to send.
    pub writes: u64,
    /// Fan-out: writers sending them at once.
    pub writers: usize,
    /// Fan-out: the write (its body must set values unique to each write, e.g. `{seq}`).
    pub write: Option<RequestSpec>,
    /// Most connections opening at once, over all client processes.
    pub in_flight: usize,
    /// Server processes to read CPU and memory from.
    pub pids: Vec<u32>,
    /// Show what is going on.
    pub progress: bool,
}

/// One client process's share of a run (passed to it as JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ShardPlan {
    mode: Mode,
    addr: SocketAddr,
    host: String,
    /// Address to bind before connecting (`None`: the system's choice).
    source: Option<IpAddr>,
    connections: usize,
    table: String,
    in_flight: usize,
    writes: u64,
    writers: usize,
    write: Option<RequestSpec>,
}

/// What one client process measured in one phase (a JSON line on its stdout).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Report {
    /// Connections opened / connections still open at the close / frames delivered.
    ok: u64,
    /// Failures of any kind in the phase.
    errors: u64,
    /// A few distinct error messages.
    samples: Vec<String>,
    /// Latency histogram in µs as (value, count) pairs.
    latency: Vec<(u64, u64)>,
    /// Wall time of the phase, seconds.
    seconds: f64,
}

/// A phase of a run, as the coordinator tells the client processes.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Open and subscribe every connection.
    Connect,
    /// Send the writes and wait for their events.
    Fanout,
    /// Close every connection (those closed before count as errors) and exit.
    Close,
}

impl Phase {
    fn word(self) -> &'static str {
        match self {
            Phase::Connect => "connect",
            Phase::Fanout => "fanout",
            Phase::Close => "close",
        }
    }

    fn parse(word: &str) -> anyhow::Result<Phase> {
        [Phase::Connect, Phase::Fanout, Phase::Close]
            .into_iter()
            .find(|p| p.word() == word)
            .with_context(|| format!("unknown phase {word:?}"))
    }
}

// ---------------------------------------------------------------------------------------------
// The coordinator

/// Runs `plan` to the end over as many client processes as it needs.
pub async fn run(plan: Plan) -> anyhow::Result<Outcome> {
    check(&plan)?;
    let sizes = split(plan.connections, SOCKETS_PER_PROCESS);
    let in_flight = (plan.in_flight / sizes.len()).max(1);
    let sample = || -> anyhow::Result<Option<procstat::Sample>> {
        if plan.pids.is_empty() {
            Ok(None)
        } else {
            procstat::sample(&plan.pids).map(Some)
        }
    };
    let status = Status::new(plan.progress, &plan.label);
    let before = sample()?;
    let mut shards = Vec::with_capacity(sizes.len());
    for (index, &connections) in sizes.iter().enumerate() {
        let shard = ShardPlan {
            mode: plan.mode,
            addr: plan.addr,
            host: plan.host.clone(),
            source: source_address(plan.addr.ip(), index)?,
            connections,
            table: plan.table.clone(),
            in_flight,
            writes: plan.writes,
            writers: plan.writers,
            write: plan.write.clone(),
        };
        shards.push(Shard::spawn(index, &shard)?);
    }
    status.say(format!(
        "opening {} connections in {} client process(es)",
        plan.connections,
        shards.len()
    ));
    let connected = phase(&mut shards, Phase::Connect).await?;
    let opened = sample()?;
    let (delivered, from, to) = match plan.mode {
        Mode::Idle => {
            status.say(format!(
                "holding {} connections for {:.0} s",
                connected.ok,
                plan.hold.as_secs_f64()
            ));
            tokio::time::sleep(plan.hold).await;
            (None, opened, sample()?)
        }
        Mode::Fanout => {
            status.say(format!(
                "{} writes to {} subscribers",
                plan.writes, connected.ok
            ));
            let delivered = phase(&mut shards, Phase::Fanout).await?;
            (Some(delivered), opened, sample()?)
        }
        _ => (None, before, opened),
    };
    status.say("closing".into());
    let closed = phase(&mut shards, Phase::Close).await?;
    for shard in shards {
        shard.finish().await?;
    }
    status.done();
    let phases = Phases {
        connected,
        delivered,
        closed,
    };
    let server = Readings { before, from, to };
    Ok(outcome(plan, &phases, &server))
}

/// Refuses a plan that cannot run.
fn check(plan: &Plan) -> anyhow::Result<()> {
    anyhow::ensure!(
        plan.mode.is_websocket(),
        "{} is not a WebSocket mode",
        plan.mode.name()
    );
    anyhow::ensure!(plan.connections > 0, "connections must be at least 1");
    anyhow::ensure!(plan.in_flight > 0, "in_flight must be at least 1");
    anyhow::ensure!(!plan.table.is_empty(), "no table to subscribe to");
    if plan.mode == Mode::Fanout {
        anyhow::ensure!(plan.writes > 0, "a fan-out needs writes");
        anyhow::ensure!(
            plan.connections <= SOCKETS_PER_PROCESS,
            "a fan-out runs in one process (one clock): at most {SOCKETS_PER_PROCESS} subscribers"
        );
        let write = plan
            .write
            .clone()
            .context("a fan-out needs a write request")?;
        // Refused here rather than in the client process: the body must tell writes apart.
        Writes::draw(&Request::new(write)?, plan.writes)?;
    }
    Ok(())
}

/// What the phases of a run measured.
struct Phases {
    /// Connect: connections opened (latency: connect to ack).
    connected: Measured,
    /// Fan-out: frames delivered (latency: commit to client).
    delivered: Option<Measured>,
    /// Close: connections still open at the end.
    closed: Measured,
}

/// The server's readings: before anything connected, and around what the CPU figure covers
/// (connect: the connect phase; idle: the hold; fan-out: the writes and their delivery).
struct Readings {
    before: Option<procstat::Sample>,
    from: Option<procstat::Sample>,
    to: Option<procstat::Sample>,
}

/// The report row of a run: per mode, what its rate, latency and CPU figure count.
fn outcome(plan: Plan, phases: &Phases, server: &Readings) -> Outcome {
    let Phases {
        connected,
        delivered,
        closed,
    } = phases;
    let mut samples = Vec::new();
    for s in connected
        .samples
        .iter()
        .chain(delivered.iter().flat_map(|m| &m.samples))
        .chain(&closed.samples)
    {
        keep_sample(&mut samples, s.clone());
    }
    let errors = connected.errors + delivered.as_ref().map_or(0, |m| m.errors) + closed.errors;
    // (ok, seconds, latency, rate, what the CPU is per)
    let (ok, seconds, latency, rps, cpu_per) = match (plan.mode, delivered) {
        (Mode::Fanout, Some(d)) => (
            d.ok,
            d.seconds,
            &d.histogram,
            per_second(d.ok, d.seconds),
            d.ok as f64,
        ),
        // held: still open when the hold ended; CPU per second of the hold
        (Mode::Idle, _) => {
            let hold = plan.hold.as_secs_f64();
            (closed.ok, hold, &connected.histogram, 0.0, hold)
        }
        _ => (
            connected.ok,
            connected.seconds,
            &connected.histogram,
            per_second(connected.ok, connected.seconds),
            (connected.ok + connected.errors) as f64,
        ),
    };
    let cpu = match (server.from, server.to) {
        (Some(a), Some(b)) => Some((b.cpu_seconds - a.cpu_seconds) * 1e6 / cpu_per.max(1e-9)),
        _ => None,
    };
    Outcome {
        label: plan.label,
        mode: plan.mode,
        connections: plan.connections,
        seconds,
        ok,
        errors,
        error_samples: samples,
        rps,
        latency_us: Latency::of(latency),
        server_cpu_us_per_request: cpu,
        server_rss_bytes: server.to.map(|s| s.rss_bytes),
        server_peak_rss_bytes: server.to.map(|s| s.peak_rss_bytes),
        // a fan-out's RSS is not about connections
        server_rss_before_bytes: server
            .before
            .filter(|_| plan.mode != Mode::Fanout)
            .map(|s| s.rss_bytes),
        server_pss_bytes: None,
        by_request: Vec::new(),
    }
}

fn per_second(count: u64, seconds: f64) -> f64 {
    count as f64 / seconds.max(1e-9)
}

/// `total` connections over as few client processes as hold them, as evenly as possible.
fn split(total: usize, per_process: usize) -> Vec<usize> {
    let processes = total.div_ceil(per_process.max(1)).max(1);
    (0..processes)
        .map(|i| total / processes + usize::from(i < total % processes))
        .collect()
}

/// The source address of client process `index`: towards an IPv4 loopback server, 127.0.0.2,
/// 127.0.0.3, … (each with its own ephemeral ports, and leaving 127.0.0.1's to the HTTP
/// scenarios); otherwise the system's choice.
fn source_address(server: IpAddr, index: usize) -> anyhow::Result<Option<IpAddr>> {
    match server {
        IpAddr::V4(v4) if v4.is_loopback() => {
            let last = u8::try_from(index + 2)
                .ok()
                .filter(|n| *n < 255)
                .with_context(|| format!("{index} client processes: out of source addresses"))?;
            Ok(Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))))
        }
        _ => Ok(None),
    }
}

/// What a phase measured, summed over the client processes.
struct Measured {
    ok: u64,
    errors: u64,
    samples: Vec<String>,
    histogram: Histogram<u64>,
    /// The longest process's wall time (they run side by side).
    seconds: f64,
}

impl Measured {
    fn new() -> Measured {
        Measured {
            ok: 0,
            errors: 0,
            samples: Vec::new(),
            histogram: new_histogram(),
            seconds: 0.0,
        }
    }

    fn add(&mut self, report: Report) -> anyhow::Result<()> {
        self.ok += report.ok;
        self.errors += report.errors;
        for s in report.samples {
            keep_sample(&mut self.samples, s);
        }
        decode(&report.latency, &mut self.histogram)?;
        self.seconds = self.seconds.max(report.seconds);
        Ok(())
    }
}

/// Tells every client process to run `phase`, and sums up their reports.
async fn phase(shards: &mut [Shard], phase: Phase) -> anyhow::Result<Measured> {
    for shard in shards.iter_mut() {
        shard.send(phase).await?;
    }
    let mut total = Measured::new();
    for shard in shards.iter_mut() {
        total.add(shard.reply(phase).await?)?;
    }
    Ok(total)
}

/// A client process, seen from the coordinator.
struct Shard {
    index: usize,
    child: Child,
    commands: ChildStdin,
    replies: Lines<BufReader<ChildStdout>>,
}

impl Shard {
    fn spawn(index: usize, plan: &ShardPlan) -> anyhow::Result<Shard> {
        let exe =
            std::env::current_exe().context("finding this program to run client processes")?;
        let mut child = tokio::process::Command::new(exe)
            .arg("ws-shard")
            .arg(serde_json::to_string(plan)?)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting a client process")?;
        let commands = child.stdin.take().context("client process stdin")?;
        let replies = BufReader::new(child.stdout.take().context("client process stdout")?).lines();
        Ok(Shard {
            index,
            child,
            commands,
            replies,
        })
    }

    async fn send(&mut self, phase: Phase) -> anyhow::Result<()> {
        self.commands
            .write_all(format!("{}\n", phase.word()).as_bytes())
            .await
            .with_context(|| format!("client process {}: sending {}", self.index, phase.word()))
    }

    async fn reply(&mut self, phase: Phase) -> anyhow::Result<Report> {
        let line = self.replies.next_line().await?.with_context(|| {
            format!(
                "client process {} ended during {} (see its error above)",
                self.index,
                phase.word()
            )
        })?;
        serde_json::from_str(&line)
            .with_context(|| format!("client process {}: report {line:?}", self.index))
    }

    async fn finish(mut self) -> anyhow::Result<()> {
        drop(self.commands);
        let status = self.child.wait().await?;
        anyhow::ensure!(status.success(), "client process {}: {status}", self.index);
        Ok(())
    }
}

/// A spinner saying which phase a run is in (nothing in quick mode).
struct Status(Option<indicatif::ProgressBar>);

impl Status {
    fn new(show: bool, label: &str) -> Status {
        Status(show.then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.set_style(
                indicatif::ProgressStyle::with_template("{prefix:>12} {spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_spinner()),
            );
            bar.set_prefix(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        }))
    }

    fn say(&self, message: String) {
        if let Some(bar) = &self.0 {
            bar.set_message(message);
        }
    }

    fn done(&self) {
        if let Some(bar) = &self.0 {
            bar.finish_and_clear();
        }
    }
}

/// A histogram as (value, count) pairs, small enough for a JSON line.
fn encode(histogram: &Histogram<u64>) -> Vec<(u64, u64)> {
    histogram
        .iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// Adds the pairs of [`encode`] to `into`.
fn decode(pairs: &[(u64, u64)], into: &mut Histogram<u64>) -> anyhow::Result<()> {
    for &(value, count) in pairs {
        into.record_n(value, count)
            .context("a client process's latency")?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// A client process

/// The `ws-shard` subcommand: one client process's connections, driven phase by phase by the
/// commands on stdin; one JSON report per phase on stdout.
pub async fn shard(plan: &str) -> anyhow::Result<()> {
    let plan: ShardPlan = serde_json::from_str(plan).context("the client process's plan")?;
    let writes = match (&plan.write, plan.mode) {
        (Some(spec), Mode::Fanout) => {
            Some(Writes::draw(&Request::new(spec.clone())?, plan.writes)?)
        }
        _ => None,
    };
    let mut commands = BufReader::new(tokio::io::stdin()).lines();
    let mut clients: Option<Clients> = None;
    while let Some(line) = commands.next_line().await? {
        let phase = Phase::parse(line.trim())?;
        let report = match (phase, clients.as_ref()) {
            (Phase::Connect, None) => {
                let deliveries = writes
                    .as_ref()
                    .map(|w| Arc::new(Deliveries::new(plan.connections, w.keys.clone())));
                let (opened, report) = Clients::open(&plan, deliveries).await;
                clients = Some(opened);
                report
            }
            (Phase::Fanout, Some(c)) => {
                let writes = writes.as_ref().context("fanout without writes")?;
                c.fanout(&plan, writes).await
            }
            (Phase::Close, Some(_)) => {
                let report = clients.take().context("no connections")?.close().await;
                emit(&report)?;
                return Ok(());
            }
            (phase, _) => bail!("phase {} out of order", phase.word()),
        };
        emit(&report)?;
    }
    // stdin closed: the coordinator is gone
    Ok(())
}

/// Locks `m`, also after a panic elsewhere (what it holds is counts, never half-written).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn emit(report: &Report) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(report)?)?;
    out.flush()?;
    Ok(())
}

/// What every connection task of a process shares.
struct Context {
    plan: ShardPlan,
    ports: Ports,
    config: WebSocketConfig,
    /// Limits the connections opening at once.
    gate: Semaphore,
    /// Fan-out: where events are recorded.
    deliveries: Option<Arc<Deliveries>>,
}

/// How a connection task ended.
enum End {
    /// It never opened (already counted).
    NotOpened,
    /// It stayed open until told to close.
    Held,
    /// It was closed or failed before: why.
    Lost(String),
}

/// A client process's connections.
struct Clients {
    tasks: Vec<tokio::task::JoinHandle<End>>,
    /// Which connections opened.
    opened: Vec<bool>,
    /// Tells every connection to close.
    stop: watch::Sender<bool>,
    deliveries: Option<Arc<Deliveries>>,
}

impl Clients {
    /// Opens and subscribes every connection of `plan`, at most `in_flight` at a time.
    async fn open(plan: &ShardPlan, deliveries: Option<Arc<Deliveries>>) -> (Clients, Report) {
        // Small buffers for many idle connections; a fan-out subscriber reads many frames.
        let buffer = if plan.mode == Mode::Fanout {
            16 * 1024
        } else {
            1024
        };
        let context = Arc::new(Context {
            plan: plan.clone(),
            ports: Ports::starting_at(fastrand::usize(..)),
            config: WebSocketConfig::default()
                .read_buffer_size(buffer)
                .write_buffer_size(0),
            gate: Semaphore::new(plan.in_flight.max(1)),
            deliveries: deliveries.clone(),
        });
        let (stop, stopped) = watch::channel(false);
        let (done, mut opened_rx) = mpsc::unbounded_channel();
        let started = Instant::now();
        let tasks: Vec<_> = (0..plan.connections)
            .map(|index| {
                let (context, stopped, done) = (context.clone(), stopped.clone(), done.clone());
                tokio::spawn(connection(index, context, stopped, done))
            })
            .collect();
        drop(done);
        let mut report = Report::default();
        let mut histogram = new_histogram();
        let mut opened = vec![false; plan.connections];
        while let Some((index, result)) = opened_rx.recv().await {
            match result {
                Ok(latency) => {
                    report.ok += 1;
                    opened[index] = true;
                    let _ = histogram.record(micros(latency));
                }
                Err(e) => {
                    report.errors += 1;
                    keep_sample(&mut report.samples, e);
                }
            }
            if report.ok + report.errors == plan.connections as u64 {
                break;
            }
        }
        report.seconds = started.elapsed().as_secs_f64();
        report.latency = encode(&histogram);
        let clients = Clients {
            tasks,
            opened,
            stop,
            deliveries,
        };
        (clients, report)
    }

    /// Sends the writes (`plan.writers` at once, each writer one after the other), then waits
    /// until every open connection has every acknowledged write's event (or
    /// [`DELIVERY_TIMEOUT`] passed).
    async fn fanout(&self, plan: &ShardPlan, writes: &Writes) -> Report {
        let mut report = Report::default();
        let Some(deliveries) = self.deliveries.clone() else {
            report.errors += 1;
            report.samples.push("no deliveries to record".into());
            return report;
        };
        let subscribers = self.opened.iter().filter(|o| **o).count() as u64;
        let first_sent = deliveries.now();
        // µs after the epoch at which each write was acknowledged (None: it failed)
        let acked: Mutex<Vec<Option<u64>>> = Mutex::new(vec![None; writes.drawn.len()]);
        let failures: Mutex<Report> = Mutex::new(Report::default());
        let next = AtomicUsize::new(0);
        let writer = || async {
            let mut client = load::Client::new(plan.addr, plan.host.clone(), false);
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                let Some(drawn) = writes.drawn.get(n) else {
                    return;
                };
                let answer = client.exchange(drawn).await;
                let at = deliveries.now();
                match answer
                    .and_then(|(status, ct, body)| writes.request.check(drawn, status, &ct, &body))
                {
                    Ok(()) => lock(&acked)[n] = Some(at),
                    Err(e) => {
                        let mut failed = lock(&failures);
                        failed.errors += 1;
                        keep_sample(
                            &mut failed.samples,
                            format!("write {} {}: {e}", drawn.method, drawn.path),
                        );
                    }
                }
            }
        };
        futures_util::future::join_all((0..plan.writers.max(1)).map(|_| writer())).await;
        let acked = acked.into_inner().unwrap_or_else(|e| e.into_inner());
        let failed = failures.into_inner().unwrap_or_else(|e| e.into_inner());
        report.errors += failed.errors;
        report.samples = failed.samples;
        let expected = subscribers * acked.iter().flatten().count() as u64;
        let deadline = Instant::now() + DELIVERY_TIMEOUT;
        while deliveries.delivered() < expected && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let tally = deliveries.tally(&self.opened, &acked);
        report.ok = tally.frames;
        report.errors += tally.missing + tally.duplicates + tally.strays;
        for e in tally.problems() {
            keep_sample(&mut report.samples, e);
        }
        report.latency = encode(&tally.histogram);
        report.seconds = tally.last_arrival.saturating_sub(first_sent) as f64 / 1e6;
        report
    }

    /// Closes every connection; those that were lost before count as errors.
    async fn close(self) -> Report {
        let started = Instant::now();
        let _ = self.stop.send(true);
        let mut report = Report::default();
        for task in self.tasks {
            match task.await {
                Ok(End::Held) => report.ok += 1,
                Ok(End::NotOpened) => {}
                Ok(End::Lost(e)) => {
                    report.errors += 1;
                    keep_sample(&mut report.samples, e);
                }
                Err(e) => {
                    report.errors += 1;
                    keep_sample(&mut report.samples, format!("connection task: {e}"));
                }
            }
        }
        report.seconds = started.elapsed().as_secs_f64();
        report
    }
}

/// One connection: opens and subscribes (saying how long it took on `opened`), then follows its
/// subscription until told to stop, recording events for a fan-out.
async fn connection(
    index: usize,
    context: Arc<Context>,
    mut stop: watch::Receiver<bool>,
    opened: mpsc::UnboundedSender<(usize, Result<Duration, String>)>,
) -> End {
    let socket = {
        let _permit = context.gate.acquire().await;
        let started = Instant::now();
        // Boxed: the handshake's state is freed once open, not kept in every task for its life.
        let result = match Box::pin(tokio::time::timeout(OPEN_TIMEOUT, open(&context))).await {
            Ok(result) => result,
            Err(_) => Err(format!(
                "no subscribed ack within {} s",
                OPEN_TIMEOUT.as_secs()
            )),
        };
        let (socket, report) = match result {
            Ok(socket) => (Some(socket), Ok(started.elapsed())),
            Err(e) => (None, Err(e)),
        };
        let _ = opened.send((index, report));
        socket
    };
    drop(opened);
    let Some(mut socket) = socket else {
        return End::NotOpened;
    };
    loop {
        tokio::select! {
            biased;
            _ = stop.changed() => break,
            message = socket.next() => match message {
                Some(Ok(Message::Text(text))) => {
                    if let Some(deliveries) = &context.deliveries {
                        deliveries.record(index, text.as_str());
                    }
                }
                Some(Ok(Message::Close(frame))) => {
                    return End::Lost(match frame {
                        Some(f) => format!("closed by the server: {} {}", f.code, f.reason),
                        None => "closed by the server".into(),
                    });
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return End::Lost(format!("connection lost: {e}")),
                None => return End::Lost("connection closed by the server".into()),
            },
        }
    }
    // The close handshake: the server then closes the TCP connection first, so its TIME_WAIT
    // does not hold this side's port.
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, async {
        if socket.close(None).await.is_ok() {
            while let Some(Ok(_)) = socket.next().await {}
        }
    })
    .await;
    End::Held
}

/// The source ports of a client process, handed out one after the other (from a random start,
/// wrapping around) rather than left to the kernel: binding port 0 makes it search the range for
/// a free port each time, which takes ever longer as thousands are taken — the client then
/// spends its CPU in the kernel, not on the server.
struct Ports {
    next: AtomicUsize,
}

impl Ports {
    /// The first port handed out after wrapping around (below it: privileged ports).
    const LOWEST: usize = 1024;
    const COUNT: usize = 65536 - Self::LOWEST;

    fn starting_at(start: usize) -> Ports {
        Ports {
            next: AtomicUsize::new(start % Self::COUNT),
        }
    }

    fn next(&self) -> u16 {
        let n = self.next.fetch_add(1, Ordering::Relaxed) % Self::COUNT;
        u16::try_from(Self::LOWEST + n).unwrap_or(u16::MAX)
    }
}

/// A TCP connection to the plan's server, from its source address when it has one (trying the
/// next port while one is still in use there).
async fn connect(context: &Context) -> Result<TcpStream, String> {
    let plan = &context.plan;
    let socket = || {
        if plan.addr.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| format!("socket: {e}"))
    };
    let Some(source) = plan.source else {
        return socket()?
            .connect(plan.addr)
            .await
            .map_err(|e| format!("connect: {e}"));
    };
    let mut last = String::new();
    for _ in 0..PORT_ATTEMPTS {
        let from = SocketAddr::new(source, context.ports.next());
        let attempt = socket()?;
        let connected = match attempt.bind(from) {
            Ok(()) => attempt.connect(plan.addr).await,
            Err(e) => Err(e),
        };
        match connected {
            Ok(stream) => return Ok(stream),
            Err(e) if is_taken(&e) => last = format!("{from}: {e}"),
            Err(e) => return Err(format!("connect from {from}: {e}")),
        }
    }
    Err(format!(
        "no free source port in {PORT_ATTEMPTS} tries: {last}"
    ))
}

/// Whether `e` says the source address and port are taken (bound, or the same connection still
/// in TIME_WAIT).
fn is_taken(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::AddrInUse | std::io::ErrorKind::AddrNotAvailable
    )
}

/// Connects, upgrades, subscribes and waits for the ack.
async fn open(context: &Context) -> Result<WebSocketStream<TcpStream>, String> {
    let plan = &context.plan;
    let stream = connect(context).await?;
    stream
        .set_nodelay(true)
        .map_err(|e| format!("socket: {e}"))?;
    let request = format!("ws://{}{REALTIME_PATH}", plan.host)
        .into_client_request()
        .map_err(|e| format!("request: {e}"))?;
    let (mut socket, _) =
        tokio_tungstenite::client_async_with_config(request, stream, Some(context.config))
            .await
            .map_err(|e| format!("handshake: {e}"))?;
    let subscribe = serde_json::json!({"type": "subscribe", "table": plan.table}).to_string();
    socket
        .send(Message::text(subscribe))
        .await
        .map_err(|e| format!("subscribe: {e}"))?;
    loop {
        match socket.next().await {
            Some(Ok(Message::Text(text))) => match Incoming::parse(text.as_str())? {
                Incoming::Subscribed(table) if table == plan.table => return Ok(socket),
                Incoming::Refused(why) => return Err(format!("subscribe refused: {why}")),
                // nothing else comes before the ack; anything that does is not ours to judge
                _ => {}
            },
            Some(Ok(Message::Close(frame))) => {
                return Err(format!("closed before the ack: {frame:?}"));
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(format!("before the ack: {e}")),
            None => return Err("closed before the ack".into()),
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// A server message, as far as the bench cares.
#[derive(Debug, PartialEq)]
enum Incoming {
    /// `subscribed` to this table.
    Subscribed(String),
    /// An `error` (code and message).
    Refused(String),
    /// An `event` of a table, with its row.
    Event(String, Option<Map<String, Value>>),
    /// Anything else (`pong`, …).
    Other,
}

/// The wire shape of a server message (fields of other types are ignored).
#[derive(Deserialize)]
struct Wire<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default, borrow)]
    table: Option<Cow<'a, str>>,
    #[serde(default)]
    row: Option<Map<String, Value>>,
    #[serde(default, borrow)]
    code: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Cow<'a, str>>,
}

impl Incoming {
    fn parse(text: &str) -> Result<Incoming, String> {
        let wire: Wire = serde_json::from_str(text)
            .map_err(|e| format!("server message {text:?} is not understood: {e}"))?;
        let table = wire.table.map(Cow::into_owned).unwrap_or_default();
        Ok(match wire.kind.as_ref() {
            "subscribed" => Incoming::Subscribed(table),
            "event" => Incoming::Event(table, wire.row),
            "error" => Incoming::Refused(format!(
                "{} {}",
                wire.code.unwrap_or_default(),
                wire.message.unwrap_or_default()
            )),
            _ => Incoming::Other,
        })
    }
}

/// A fan-out's writes, drawn before anything connects, and how their events are recognised.
struct Writes {
    request: Request,
    drawn: Vec<Drawn>,
    keys: Arc<WriteKeys>,
}

impl Writes {
    /// Draws `count` writes of `request`, the n-th with `seq` = n.
    fn draw(request: &Request, count: u64) -> anyhow::Result<Writes> {
        let mut rng = fastrand::Rng::with_seed(0xFA40);
        let drawn: Vec<Drawn> = (0..count).map(|seq| request.draw(&mut rng, seq)).collect();
        let bodies: Vec<Option<&str>> = drawn.iter().map(|d| d.body.as_deref()).collect();
        Ok(Writes {
            request: request.clone(),
            keys: Arc::new(WriteKeys::new(&bodies)?),
            drawn,
        })
    }
}

/// Tells which write an event is: by the values the write's JSON body sets, which must differ
/// from one write to the next (`{seq}` in the body); the event's row carries them.
#[derive(Debug)]
struct WriteKeys {
    /// The fields every body sets.
    fields: Vec<String>,
    /// The values of `fields` (as JSON text) → the write's number.
    writes: HashMap<String, usize>,
}

impl WriteKeys {
    fn new(bodies: &[Option<&str>]) -> anyhow::Result<WriteKeys> {
        let mut fields: Vec<String> = Vec::new();
        let mut writes = HashMap::new();
        for (n, body) in bodies.iter().enumerate() {
            let object: Map<String, Value> = body
                .map(serde_json::from_str)
                .transpose()
                .ok()
                .flatten()
                .with_context(|| format!("write {n}: the body must be a JSON object"))?;
            if n == 0 {
                fields = object.keys().cloned().collect();
                anyhow::ensure!(!fields.is_empty(), "the writes' body sets nothing");
            }
            let key = Self::key_of(&fields, &object);
            if let Some(earlier) = writes.insert(key, n) {
                bail!("writes {earlier} and {n} set the same values: put {{seq}} in the body");
            }
        }
        Ok(WriteKeys { fields, writes })
    }

    fn key_of(fields: &[String], row: &Map<String, Value>) -> String {
        let values: Vec<Option<&Value>> = fields.iter().map(|f| row.get(f)).collect();
        serde_json::to_string(&values).unwrap_or_default()
    }

    /// The write whose values `row` holds.
    fn find(&self, row: &Map<String, Value>) -> Option<usize> {
        self.writes.get(&Self::key_of(&self.fields, row)).copied()
    }
}

/// Fan-out bookkeeping of one client process: when each subscriber got each write's event.
struct Deliveries {
    epoch: Instant,
    writes: usize,
    keys: Arc<WriteKeys>,
    /// µs after `epoch` + 1 at which subscriber s got write w's event, at `s * writes + w`;
    /// 0: not (yet).
    arrivals: Vec<AtomicU64>,
    delivered: AtomicU64,
    duplicates: AtomicU64,
    /// Messages that are no write's event.
    strays: AtomicU64,
    stray_sample: Mutex<Option<String>>,
}

/// What a fan-out's bookkeeping adds up to.
struct Tally {
    /// Events of acknowledged writes delivered to open subscribers, once each.
    frames: u64,
    missing: u64,
    duplicates: u64,
    strays: u64,
    stray_sample: Option<String>,
    /// Arrival minus acknowledgement, µs (an event may beat its write's answer: 1 µs).
    histogram: Histogram<u64>,
    /// µs after the epoch of the last counted arrival.
    last_arrival: u64,
}

impl Tally {
    fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.missing > 0 {
            out.push(format!("{} events never arrived", self.missing));
        }
        if self.duplicates > 0 {
            out.push(format!("{} events arrived twice", self.duplicates));
        }
        if let Some(s) = &self.stray_sample {
            out.push(format!(
                "{} messages were no write's event, e.g. {s}",
                self.strays
            ));
        }
        out
    }
}

impl Deliveries {
    fn new(subscribers: usize, keys: Arc<WriteKeys>) -> Deliveries {
        let writes = keys.writes.len();
        Deliveries {
            epoch: Instant::now(),
            writes,
            keys,
            arrivals: (0..subscribers * writes)
                .map(|_| AtomicU64::new(0))
                .collect(),
            delivered: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            strays: AtomicU64::new(0),
            stray_sample: Mutex::new(None),
        }
    }

    /// µs since the epoch.
    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Acquire)
    }

    /// Records a message subscriber `subscriber` just received.
    fn record(&self, subscriber: usize, text: &str) {
        let at = self.now() + 1;
        let write = match Incoming::parse(text) {
            Ok(Incoming::Event(_, Some(row))) => self.keys.find(&row),
            _ => None,
        };
        let slot = write.and_then(|w| self.arrivals.get(subscriber * self.writes + w));
        match slot {
            Some(slot) => {
                if slot
                    .compare_exchange(0, at, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    self.delivered.fetch_add(1, Ordering::AcqRel);
                } else {
                    self.duplicates.fetch_add(1, Ordering::Relaxed);
                }
            }
            None => {
                self.strays.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut sample) = self.stray_sample.lock() {
                    sample.get_or_insert_with(|| text.chars().take(200).collect());
                }
            }
        }
    }

    /// Adds up the arrivals at the `opened` subscribers of the writes `acked` (µs after the
    /// epoch; `None`: the write failed, its events are not expected).
    fn tally(&self, opened: &[bool], acked: &[Option<u64>]) -> Tally {
        let mut tally = Tally {
            frames: 0,
            missing: 0,
            duplicates: self.duplicates.load(Ordering::Relaxed),
            strays: self.strays.load(Ordering::Relaxed),
            stray_sample: self.stray_sample.lock().ok().and_then(|s| s.clone()),
            histogram: new_histogram(),
            last_arrival: 0,
        };
        for (subscriber, _) in opened.iter().enumerate().filter(|(_, o)| **o) {
            for (write, ack) in acked.iter().enumerate() {
                let Some(ack) = ack else { continue };
                let Some(slot) = self.arrivals.get(subscriber * self.writes + write) else {
                    continue;
                };
                match slot.load(Ordering::Acquire) {
                    0 => tally.missing += 1,
                    arrived => {
                        let arrived = arrived - 1;
                        tally.frames += 1;
                        tally.last_arrival = tally.last_arrival.max(arrived);
                        let _ = tally.histogram.record(arrived.saturating_sub(*ack).max(1));
                    }
                }
            }
        }
        tally
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_are_spread_evenly_over_few_processes() {
        assert_eq!(split(200, 15_000), vec![200]);
        assert_eq!(split(15_000, 15_000), vec![15_000]);
        assert_eq!(split(15_001, 15_000), vec![7_501, 7_500]);
        let parts = split(100_000, 15_000);
        assert_eq!(parts.len(), 7);
        assert_eq!(parts.iter().sum::<usize>(), 100_000);
        assert!(
            parts.iter().all(|p| (14_285..=14_286).contains(p)),
            "{parts:?}"
        );
    }

    #[test]
    fn each_process_has_its_own_source_address() {
        let v4: IpAddr = Ipv4Addr::LOCALHOST.into();
        assert_eq!(
            source_address(v4, 0).expect("address"),
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))
        );
        assert_eq!(
            source_address(v4, 6).expect("address"),
            Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 8)))
        );
        assert!(source_address(v4, 253).is_err());
        assert_eq!(
            source_address(std::net::Ipv6Addr::LOCALHOST.into(), 0).expect("v6"),
            None
        );
    }

    #[test]
    fn histograms_survive_the_trip_between_processes() {
        let mut h = new_histogram();
        for v in [1, 5, 5, 120, 3_000, 45_000, 1_200_000] {
            h.record(v).expect("record");
        }
        let line = serde_json::to_string(&Report {
            latency: encode(&h),
            ..Report::default()
        })
        .expect("json");
        let report: Report = serde_json::from_str(&line).expect("parse");
        let mut back = new_histogram();
        decode(&report.latency, &mut back).expect("decode");
        decode(&report.latency, &mut back).expect("decode");
        assert_eq!(back.len(), 2 * h.len());
        assert_eq!(back.max(), h.max());
        assert_eq!(Latency::of(&back), Latency::of(&h));
    }

    #[test]
    fn reports_add_up_over_processes() {
        let mut total = Measured::new();
        for (ok, seconds, sample) in [(10, 0.5, "a"), (7, 0.9, "b"), (3, 0.1, "a")] {
            total
                .add(Report {
                    ok,
                    errors: 1,
                    samples: vec![sample.into()],
                    latency: vec![(100, ok)],
                    seconds,
                })
                .expect("add");
        }
        assert_eq!((total.ok, total.errors, total.seconds), (20, 3, 0.9));
        assert_eq!(total.samples, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(total.histogram.len(), 20);
    }

    #[test]
    fn source_ports_go_round_above_the_privileged_ones() {
        let ports = Ports::starting_at(Ports::COUNT - 2);
        let drawn: Vec<u16> = (0..4).map(|_| ports.next()).collect();
        assert_eq!(drawn, vec![65534, 65535, 1024, 1025]);
        assert_eq!(Ports::starting_at(usize::MAX).next(), {
            let n = usize::MAX % Ports::COUNT;
            u16::try_from(Ports::LOWEST + n).expect("port")
        });
    }

    fn plan(mode: Mode) -> Plan {
        Plan {
            label: "x".into(),
            mode,
            addr: SocketAddr::from((Ipv4Addr::LOCALHOST, 8080)),
            host: "127.0.0.1:8080".into(),
            connections: 1_000,
            table: "team".into(),
            hold: Duration::from_secs(4),
            writes: 10,
            writers: 1,
            write: None,
            in_flight: 100,
            pids: vec![1],
            progress: false,
        }
    }

    fn measured(ok: u64, errors: u64, seconds: f64) -> Measured {
        let mut m = Measured::new();
        m.add(Report {
            ok,
            errors,
            samples: vec![format!("{errors} went wrong")],
            latency: vec![(250, ok)],
            seconds,
        })
        .expect("add");
        m
    }

    fn reading(cpu_seconds: f64, rss_mb: u64) -> Option<procstat::Sample> {
        Some(procstat::Sample {
            cpu_seconds,
            rss_bytes: rss_mb << 20,
            peak_rss_bytes: rss_mb << 20,
            pss_bytes: rss_mb << 19,
        })
    }

    #[test]
    fn each_mode_reports_what_it_measures() {
        let phases = |delivered| Phases {
            connected: measured(990, 10, 0.5),
            delivered,
            closed: measured(985, 5, 0.1),
        };
        let server = Readings {
            before: reading(1.0, 40),
            from: reading(2.0, 48),
            to: reading(2.5, 50),
        };
        // idle: connections held to the end; CPU per second of the hold; RSS per connection
        let idle = outcome(plan(Mode::Idle), &phases(None), &server);
        assert_eq!((idle.ok, idle.errors, idle.rps), (985, 15, 0.0));
        assert_eq!(idle.server_cpu_us_per_request, Some(125_000.0));
        let per = idle.rss_per_connection().expect("per connection");
        assert!((per - (10u64 << 20) as f64 / 985.0).abs() < 1e-6, "{per}");
        assert_eq!(idle.error_samples, vec!["10 went wrong", "5 went wrong"]);
        // connect: connections per second of the connect phase; CPU per connection tried
        let connect = outcome(plan(Mode::Connect), &phases(None), &server);
        assert_eq!((connect.ok, connect.rps), (990, 1_980.0));
        assert_eq!(connect.server_cpu_us_per_request, Some(500.0));
        assert_eq!(connect.latency_us.p50, 250);
        // fan-out: frames per second and per-frame CPU; its RSS is not per connection
        let fanout = outcome(
            plan(Mode::Fanout),
            &phases(Some(measured(9_900, 2, 0.25))),
            &server,
        );
        assert_eq!(
            (fanout.ok, fanout.errors, fanout.rps),
            (9_900, 17, 39_600.0)
        );
        let cpu = fanout.server_cpu_us_per_request.expect("cpu");
        assert!((cpu - 0.5e6 / 9_900.0).abs() < 1e-6, "{cpu}");
        assert_eq!(fanout.rss_per_connection(), None);
    }

    #[test]
    fn phases_are_words() {
        for p in [Phase::Connect, Phase::Fanout, Phase::Close] {
            assert_eq!(Phase::parse(p.word()).expect("phase"), p);
        }
        assert!(Phase::parse("dance").is_err());
    }

    #[test]
    fn server_messages_are_understood() {
        assert_eq!(
            Incoming::parse(r#"{"type":"subscribed","table":"team","last":12}"#),
            Ok(Incoming::Subscribed("team".into()))
        );
        let event = r#"{"type":"event","id":13,"table":"team","op":"update","key":{"team_id":3},"row":{"team_id":3,"name":"F\u00e9rrari","points":7}}"#;
        match Incoming::parse(event) {
            Ok(Incoming::Event(table, Some(row))) => {
                assert_eq!(table, "team");
                assert_eq!(row["points"], 7);
                assert_eq!(row["name"], "Férrari");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            Incoming::parse(
                r#"{"type":"error","table":"nope","code":"PGRST205","message":"no such table","details":null,"hint":null}"#
            ),
            Ok(Incoming::Refused("PGRST205 no such table".into()))
        );
        assert_eq!(Incoming::parse(r#"{"type":"pong"}"#), Ok(Incoming::Other));
        assert!(Incoming::parse("not json").is_err());
    }

    fn keys(bodies: &[&str]) -> anyhow::Result<WriteKeys> {
        let bodies: Vec<Option<&str>> = bodies.iter().map(|b| Some(*b)).collect();
        WriteKeys::new(&bodies)
    }

    #[test]
    fn events_are_told_apart_by_what_the_writes_set() {
        let k = keys(&[r#"{"points": 0}"#, r#"{"points": 1}"#, r#"{"points": 2}"#]).expect("keys");
        let row = |points: i64| {
            serde_json::json!({"team_id": 4, "name": "x", "points": points})
                .as_object()
                .cloned()
                .expect("object")
        };
        assert_eq!(k.find(&row(1)), Some(1));
        assert_eq!(k.find(&row(2)), Some(2));
        assert_eq!(k.find(&row(3)), None);
        assert!(keys(&[r#"{"points": 1}"#, r#"{"points": 1}"#]).is_err());
        assert!(keys(&["[1]"]).is_err());
        assert!(keys(&["{}"]).is_err());
        assert!(WriteKeys::new(&[None]).is_err());
    }

    #[test]
    fn missing_duplicated_and_stray_events_are_counted() {
        let k = Arc::new(keys(&[r#"{"points": 10}"#, r#"{"points": 11}"#]).expect("keys"));
        let d = Deliveries::new(3, k);
        let event = |points: i64| {
            format!(
                r#"{{"type":"event","id":1,"table":"team","op":"update","key":{{"team_id":1}},"row":{{"team_id":1,"points":{points}}}}}"#
            )
        };
        // subscriber 0: both, one twice; subscriber 1: only the second, and a stray;
        // subscriber 2 never opened
        d.record(0, &event(10));
        d.record(0, &event(11));
        d.record(0, &event(11));
        d.record(1, &event(11));
        d.record(1, &event(99));
        d.record(1, r#"{"type":"pong"}"#);
        assert_eq!(d.delivered(), 3);
        let t = d.tally(&[true, true, false], &[Some(0), Some(0)]);
        assert_eq!((t.frames, t.missing, t.duplicates, t.strays), (3, 1, 1, 2));
        assert_eq!(t.histogram.len(), 3);
        assert_eq!(t.problems().len(), 3);
        // a failed write's events are not expected
        let t = d.tally(&[true, true, false], &[None, Some(0)]);
        assert_eq!((t.frames, t.missing), (2, 0));
    }
}
