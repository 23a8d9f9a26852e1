//! The worker's side of the supervisor: takes the inherited listening socket, dies with the
//! supervisor, and talks to it over two inherited pipes, one line per message
//! ([`crate::supervisor`] has the other side):
//!
//! - up (worker → supervisor): `ready` once serving; `recycle` past `max_requests` or
//!   `max_rss_mb`;
//! - down (supervisor → worker): `restarts N`, the supervisor's worker-restart count (shown
//!   in `/metrics`);
//! - both ways: `changed`, this worker committed captured changes (up), another worker did
//!   (down): the realtime tailer reads the change log at once;
//! - both ways: `relay JSON` up, `relay PID JSON` down: a broadcast or presence of a
//!   Supabase channel, from this worker / from worker PID ([`crate::realtime::channels`]);
//! - down: `gone PID`, that worker exited (its presences leave); `hello PID`, that worker
//!   started serving (this one's presences are told again, for it);
//! - one worker gathers every other's report on a [`Subject`] ([`Link::gather`]: one scrape of
//!   `/metrics` for the whole server, the console's recent requests): `gather-ask SUBJECT ID`
//!   up, `gather-ask SUBJECT PID ID` down to the others, `gather-reply PID ID TEXT` up from
//!   each (TEXT its report as a JSON string), `gather-part ID TEXT` down to the asker, and
//!   `gather-expect ID N TEXT` down to the asker: how many parts come, with the supervisor's
//!   own report (its series for `metrics`, else empty).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::Signal;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::sync::Notify;

use crate::observe::Metrics;

/// Environment variable that marks a worker process and names its supervisor's pid.
pub const WORKER_ENV: &str = "ROWGATE_SUPERVISOR_PID";

/// Environment variable set for every worker but the first of a generation: the warnings about
/// the configuration (grants, resources) would be the same in each, so only that one logs them.
pub const QUIET_ENV: &str = "ROWGATE_WORKER_QUIET";

/// Whether this process logs the warnings about its configuration that every worker would
/// repeat: a process alone, or the first worker of a generation.
pub fn warns_about_configuration() -> bool {
    std::env::var_os(QUIET_ENV).is_none()
}

/// Environment variable naming the worker's end of the pipe to the supervisor.
pub(crate) const UP_FD_ENV: &str = "ROWGATE_UP_FD";

/// Environment variable naming the worker's end of the pipe from the supervisor.
pub(crate) const DOWN_FD_ENV: &str = "ROWGATE_DOWN_FD";

/// A worker's message to the supervisor: it is serving.
pub(crate) const READY: &str = "ready";
/// A worker's message to the supervisor: replace me, then drain me.
pub(crate) const RECYCLE: &str = "recycle";
/// The supervisor's message to its workers: `restarts N`.
pub(crate) const RESTARTS: &str = "restarts";
/// Either way: captured changes were committed (by this worker / by another one).
pub(crate) const CHANGED: &str = "changed";
/// Either way: a relay of Supabase channels (`relay JSON` up, `relay PID JSON` down).
pub(crate) const RELAY: &str = "relay";
/// The supervisor's message to its workers: `gone PID`, that worker exited.
pub(crate) const GONE: &str = "gone";
/// The supervisor's message to its workers: `hello PID`, that worker is serving.
pub(crate) const HELLO: &str = "hello";
/// Either way: a worker asks the others for their report on a [`Subject`] (`gather-ask
/// SUBJECT ID` up, `gather-ask SUBJECT PID ID` down to the others).
pub(crate) const GATHER_ASK: &str = "gather-ask";
/// Up: a worker's report for the asker (`gather-reply PID ID TEXT`).
pub(crate) const GATHER_REPLY: &str = "gather-reply";
/// Down: another worker's report, for the asker (`gather-part ID TEXT`).
pub(crate) const GATHER_PART: &str = "gather-part";
/// Down: how many parts the asker gets, and the supervisor's own report (`gather-expect ID N
/// TEXT`).
pub(crate) const GATHER_EXPECT: &str = "gather-expect";

/// How long a gathering waits for the other workers' reports.
const GATHER_TIMEOUT: Duration = Duration::from_secs(2);

/// What one worker gathers from every other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// Their `/metrics` text (the supervisor adds its own series).
    Metrics,
    /// Their access log's recent lines (the console's log view).
    RecentRequests,
}

impl Subject {
    /// The word naming it in the messages.
    pub fn word(self) -> &'static str {
        match self {
            Subject::Metrics => "metrics",
            Subject::RecentRequests => "recent-requests",
        }
    }

    /// The subject `word` names.
    pub fn from_word(word: &str) -> Option<Subject> {
        [Subject::Metrics, Subject::RecentRequests]
            .into_iter()
            .find(|s| s.word() == word)
    }
}

/// This worker's report on a subject, when another worker gathers it (its metrics text with
/// the gauges read now; its recent access-log lines).
pub type Report = Arc<dyn Fn(Subject) -> String + Send + Sync>;

/// What a gathering brought: the asker's own report, every other worker's and the
/// supervisor's, and whether every worker answered in time.
pub struct Gathered {
    /// The reports, the asker's first.
    pub parts: Vec<String>,
    /// Every worker answered within [`GATHER_TIMEOUT`].
    pub complete: bool,
}

/// A gathering waiting for the other workers' reports.
#[derive(Default)]
struct Gathering {
    /// How many parts come (from the supervisor), and its own report.
    expect: Option<(usize, String)>,
    parts: Vec<String>,
}

/// Dies with the supervisor (parent-death signal; if it is gone already, exits), and returns
/// the inherited listening socket.
pub fn listener(supervisor: &str) -> anyhow::Result<std::net::TcpListener> {
    nix::sys::prctl::set_pdeathsig(Signal::SIGTERM).context("setting the parent-death signal")?;
    if nix::unistd::getppid().as_raw().to_string() != supervisor {
        anyhow::bail!("the supervisor {supervisor} is gone");
    }
    let listener = listenfd::ListenFd::from_env()
        .take_tcp_listener(0)
        .context("taking the socket from the supervisor")?
        .context("no socket was passed by the supervisor")?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// What spans the workers through the supervisor's relay (Supabase channels' broadcasts and
/// presences: `crate::realtime::channels`): the worker hands it what other workers relayed and
/// carries up what it relays.
pub trait Relayed: Send + Sync {
    /// Where this worker's relays go (each a JSON text, written up to the supervisor).
    fn connect_outlet(&self, outlet: Box<dyn Fn(String) + Send + Sync>);
    /// A relay (JSON text) from the worker `origin`; false when it cannot be read.
    fn receive_text(&self, origin: u32, relay: &str) -> bool;
    /// The worker `origin` is gone: what it relayed is forgotten.
    fn gone(&self, origin: u32);
    /// A new worker joined: what this worker holds is relayed again.
    fn announce(&self);
}

/// What a worker's realtime shares with the other workers (through the supervisor): the two
/// wake-ups of the tailer (changes committed elsewhere, changes committed here), and the
/// Supabase channels.
pub struct ChangeFeeds {
    /// Woken when another worker committed changes.
    pub elsewhere: Arc<Notify>,
    /// Woken by this worker's tailer when it dispatched changes this worker committed.
    pub committed_here: Arc<Notify>,
    /// The channels, whose broadcasts and presences span the workers through the supervisor
    /// (`None`: through the database's bus, [`crate::realtime::bus`], which spans the nodes
    /// too).
    pub channels: Option<Arc<dyn Relayed>>,
}

/// Where a worker puts what the others did: the wake-up of its tailer, and the channels when
/// the supervisor relays them.
type Heard = (Arc<Notify>, Option<Arc<dyn Relayed>>);

/// The worker's two pipes to its supervisor.
pub struct Link {
    /// Lines to the supervisor, written in order by one task (never blocking the caller).
    up: tokio::sync::mpsc::UnboundedSender<String>,
    /// Gatherings under way, by id.
    gatherings: std::sync::Mutex<std::collections::HashMap<u64, Gathering>>,
    /// Woken when a part of a gathering arrives.
    gathered: Notify,
    next_gathering: AtomicU64,
}

impl Link {
    /// Opens the inherited pipes (`None` outside a supervisor) and starts reading what the
    /// supervisor says: restart counts into `metrics`, other workers' changes into
    /// `feeds.elsewhere`, their relays into `feeds.channels`, their gatherings answered with
    /// `report`; and tells the supervisor whenever `feeds.committed_here` is woken (this
    /// worker's realtime tailer dispatched changes this worker committed) and what this
    /// worker's channels relay.
    pub fn open(
        metrics: Arc<Metrics>,
        feeds: Option<ChangeFeeds>,
        report: Report,
    ) -> Option<Arc<Link>> {
        let up = inherited(UP_FD_ENV, true)?;
        let mut up = tokio::net::unix::pipe::Sender::from_file(up)
            .map_err(|e| tracing::warn!("cannot write to the supervisor's pipe: {e}"))
            .ok()?;
        let (lines, mut queued) = tokio::sync::mpsc::unbounded_channel::<String>();
        tokio::spawn(async move {
            while let Some(line) = queued.recv().await {
                if up.write_all(line.as_bytes()).await.is_err() {
                    break; // the supervisor is gone; the parent-death signal follows
                }
            }
        });
        let link = Arc::new(Link {
            up: lines,
            gatherings: std::sync::Mutex::default(),
            gathered: Notify::new(),
            next_gathering: AtomicU64::new(0),
        });
        if let Some(down) = inherited(DOWN_FD_ENV, false) {
            match tokio::net::unix::pipe::Receiver::from_file(down) {
                Ok(down) => {
                    let heard = feeds
                        .as_ref()
                        .map(|f| (f.elsewhere.clone(), f.channels.clone()));
                    tokio::spawn(listen(down, metrics, heard, link.clone(), report));
                }
                Err(e) => tracing::warn!("cannot read the supervisor's pipe: {e}"),
            }
        }
        if let Some(feeds) = feeds {
            let speaker = link.clone();
            if let Some(channels) = &feeds.channels {
                channels.connect_outlet(Box::new(move |relay| {
                    speaker.say(&format!("{RELAY} {relay}"))
                }));
            }
            let speaker = link.clone();
            tokio::spawn(async move {
                loop {
                    feeds.committed_here.notified().await;
                    speaker.say(CHANGED);
                }
            });
        }
        Some(link)
    }

    /// Sends one message line to the supervisor (when it is gone, the line is dropped: the
    /// parent-death signal follows).
    pub fn say(&self, message: &str) {
        let _ = self.up.send(format!("{message}\n"));
    }

    /// Every worker's report on `subject`: `own` (this worker's), every other worker's and the
    /// supervisor's, asked for through the supervisor. A worker that does not answer within
    /// [`GATHER_TIMEOUT`] is left out (and `complete` is false).
    pub async fn gather(&self, subject: Subject, own: String) -> Gathered {
        let id = self.next_gathering.fetch_add(1, Ordering::Relaxed);
        self.lock_gatherings().insert(id, Gathering::default());
        self.say(&format!("{GATHER_ASK} {} {id}", subject.word()));
        let complete = tokio::time::timeout(GATHER_TIMEOUT, async {
            loop {
                let woken = self.gathered.notified();
                if let Some(g) = self.lock_gatherings().get(&id) {
                    if g.expect.as_ref().is_some_and(|(n, _)| g.parts.len() >= *n) {
                        return;
                    }
                }
                woken.await;
            }
        })
        .await
        .is_ok();
        let gathering = self.lock_gatherings().remove(&id).unwrap_or_default();
        let supervisor = gathering.expect.map(|(_, text)| text).unwrap_or_default();
        let mut parts = Vec::with_capacity(gathering.parts.len() + 2);
        parts.push(own);
        parts.extend(gathering.parts);
        parts.push(supervisor);
        Gathered { parts, complete }
    }

    fn lock_gatherings(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<u64, Gathering>> {
        self.gatherings.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A part of gathering `id` arrived (`expect`: the supervisor's count and report).
    fn gathered(&self, id: u64, part: Option<String>, expect: Option<(usize, String)>) {
        if let Some(g) = self.lock_gatherings().get_mut(&id) {
            g.parts.extend(part);
            if expect.is_some() {
                g.expect = expect;
            }
        }
        self.gathered.notify_waiters();
    }

    /// Says `ready`, and, with `max_requests` or `max_rss_mb` set, asks once to be recycled
    /// when the worker passes either (checked every 200 ms; `requests` counts requests).
    pub fn ready(self: &Arc<Self>, requests: Arc<AtomicU64>, max_requests: u64, max_rss_mb: u64) {
        self.say(READY);
        if max_requests == 0 && max_rss_mb == 0 {
            return;
        }
        let link = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(200));
            loop {
                tick.tick().await;
                let served = requests.load(Ordering::Relaxed);
                let rss_mb = crate::observe::resident_bytes().unwrap_or(0) >> 20;
                if (max_requests > 0 && served >= max_requests)
                    || (max_rss_mb > 0 && rss_mb >= max_rss_mb)
                {
                    tracing::info!(served, rss_mb, "asking to be recycled");
                    link.say(RECYCLE);
                    return;
                }
            }
        });
    }
}

/// The pipe end whose descriptor number the environment variable `name` holds, opened anew
/// through `/proc/self/fd` (no unsafe descriptor adoption needed).
fn inherited(name: &str, write: bool) -> Option<std::fs::File> {
    let fd = std::env::var(name).ok()?;
    std::fs::OpenOptions::new()
        .read(!write)
        .write(write)
        .open(format!("/proc/self/fd/{fd}"))
        .map_err(|e| tracing::warn!("cannot open the supervisor's pipe {name}={fd}: {e}"))
        .ok()
}

/// Reads the supervisor's lines until the pipe closes; `heard`: where other workers' changes
/// and relays go.
async fn listen(
    down: tokio::net::unix::pipe::Receiver,
    metrics: Arc<Metrics>,
    heard: Option<Heard>,
    link: Arc<Link>,
    report: Report,
) {
    let mut lines = tokio::io::BufReader::new(down).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let (word, rest) = line.split_once(' ').unwrap_or((line.as_str(), ""));
        let origin = || {
            rest.split(' ')
                .next()
                .and_then(|pid| pid.parse::<u32>().ok())
        };
        // `ID TEXT` and `ID N TEXT` of the gathering messages
        let mut words = rest.splitn(3, ' ');
        match (word, &heard) {
            (GATHER_ASK, _) => {
                let subject = words.next().and_then(Subject::from_word);
                let (Some(subject), Some(asker), Some(id)) = (subject, words.next(), words.next())
                else {
                    tracing::debug!(line, "a bad gathering from the supervisor");
                    continue;
                };
                let text = serde_json::to_string(&report(subject)).unwrap_or_default();
                link.say(&format!("{GATHER_REPLY} {asker} {id} {text}"));
            }
            (GATHER_PART, _) => {
                let part = rest.split_once(' ').and_then(|(id, text)| {
                    Some((id.parse().ok()?, serde_json::from_str::<String>(text).ok()?))
                });
                if let Some((id, text)) = part {
                    link.gathered(id, Some(text), None);
                }
            }
            (GATHER_EXPECT, _) => {
                let id = words.next().and_then(|id| id.parse().ok());
                let n = words.next().and_then(|n| n.parse().ok());
                let text = words
                    .next()
                    .and_then(|t| serde_json::from_str::<String>(t).ok());
                if let (Some(id), Some(n), Some(text)) = (id, n, text) {
                    link.gathered(id, None, Some((n, text)));
                }
            }
            (RESTARTS, _) => match rest.parse::<u64>() {
                Ok(n) => metrics.set_worker_restarts(n),
                Err(_) => tracing::debug!(line, "a bad restart count from the supervisor"),
            },
            (CHANGED, Some((elsewhere, _))) => elsewhere.notify_one(),
            (RELAY, Some((_, Some(channels)))) => {
                let received = match (origin(), rest.split_once(' ')) {
                    (Some(origin), Some((_, json))) => channels.receive_text(origin, json),
                    _ => false,
                };
                if !received {
                    tracing::debug!(line, "a bad relay from the supervisor");
                }
            }
            (GONE, Some((_, Some(channels)))) => {
                if let Some(origin) = origin() {
                    channels.gone(origin);
                }
            }
            (HELLO, Some((_, Some(channels)))) => channels.announce(),
            (CHANGED | RELAY | GONE | HELLO, None) | (RELAY | GONE | HELLO, Some((_, None))) => {}
            _ => tracing::debug!(line, "unknown message from the supervisor"),
        }
    }
}

/// Catches and ignores `signals` (through tokio's handler: no unsafe `sigaction`). A worker
/// ignores SIGHUP (the supervisor reloads by replacing workers); every server ignores SIGXFSZ,
/// so a write past the file-size limit fails with EFBIG, which the SQLite writer handles as a
/// fatal I/O error (logged, exit 74), instead of killing the process with a core dump.
pub fn ignore_signals(signals: &[tokio::signal::unix::SignalKind]) {
    for kind in signals {
        if let Ok(mut caught) = tokio::signal::unix::signal(*kind) {
            tokio::spawn(async move { while caught.recv().await.is_some() {} });
        }
    }
}

/// SIGXFSZ (file size limit exceeded), which tokio does not name.
pub const FILE_SIZE_LIMIT: tokio::signal::unix::SignalKind =
    tokio::signal::unix::SignalKind::from_raw(nix::libc::SIGXFSZ);
