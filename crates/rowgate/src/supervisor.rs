//! The supervisor: `rowgate serve` binds the listening socket, starts `workers` worker processes
//! of the same binary that inherit it (`LISTEN_FDS`, the systemd convention, read back with
//! `listenfd`), and keeps them running. It never touches the database.
//!
//! - A worker that exits for any reason is restarted at once; workers that keep dying before
//!   they serve (a crash loop) are restarted after a pause that doubles from `supervisor.restart_backoff_ms` (100 ms) up to 5 s.
//!   Each exit is logged with its cause (signal name or exit code) and counted. A worker of the
//!   first set that dies before serving stops `serve` with an error (the configuration or the
//!   database is broken).
//! - SIGHUP: start a fresh set of workers (they read the configuration anew), wait until each
//!   says it is serving, then SIGTERM the old ones, which stop
//!   accepting and drain. The socket stays open throughout, so no connection is refused.
//!   (Readiness comes through a pipe per worker, not a signal: signals sent at once coalesce.)
//! - SIGTERM/SIGINT: SIGTERM every worker, wait for them to drain, exit. SIGUSR1 is passed on
//!   (schema reload).
//! - Recycling: a worker past `supervisor.max_requests` or `supervisor.max_rss_mb` asks to be
//!   replaced; its replacement starts first, and it drains once that one serves.
//! - Workers die with the supervisor (parent-death signal, set by the worker itself).
//! - With `supervisor.pid_file`, the supervisor's pid is written there and its state (workers,
//!   pids, restarts, uptime) to the same path plus `.json`, which `rowgate status` prints.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

use crate::worker::{
    Subject, CHANGED, DOWN_FD_ENV, GATHER_ASK, GATHER_EXPECT, GATHER_PART, GATHER_REPLY, GONE,
    HELLO, QUIET_ENV, READY, RECYCLE, RELAY, RESTARTS, UP_FD_ENV, WORKER_ENV,
};

/// Longest pause before restarting a worker that keeps dying.
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// A worker that lived shorter than this counts as a crash loop.
const QUICK_DEATH: Duration = Duration::from_secs(2);

/// Crashes counted for backoff even when each worker served a while first: more than
/// [`CRASH_ALLOWANCE`] in this window.
const CRASH_WINDOW: Duration = Duration::from_secs(60);

/// Worker crashes in [`CRASH_WINDOW`] restarted without a pause.
const CRASH_ALLOWANCE: usize = 10;

/// When workers died: the pause before the next start grows with deaths in a row that came
/// quickly after a start (a worker that cannot serve), and with crashes crowding the last
/// minute even when each worker served first (a worker that serves, then crashes on some
/// request, again and again). A crash is an exit with an error code or a fault signal; a
/// worker killed from outside (SIGKILL, SIGTERM, SIGINT) did not crash.
struct Deaths {
    /// The first pause (`supervisor.restart_backoff_ms`).
    base: Duration,
    quick_in_a_row: u32,
    recent: std::collections::VecDeque<Instant>,
}

impl Deaths {
    fn new(base: Duration) -> Deaths {
        Deaths {
            base,
            quick_in_a_row: 0,
            recent: std::collections::VecDeque::new(),
        }
    }

    /// A worker got as far as serving: the quick deaths before it were no crash loop.
    fn served(&mut self) {
        self.quick_in_a_row = 0;
    }

    /// Records a death at `now` of a worker that lived `lived` (and `crashed`, or was killed);
    /// returns the pause before the next start.
    fn record(&mut self, now: Instant, lived: Duration, crashed: bool) -> Option<Duration> {
        if lived < QUICK_DEATH {
            self.quick_in_a_row += 1;
        } else {
            self.quick_in_a_row = 0;
        }
        if crashed {
            self.recent.push_back(now);
        }
        while self
            .recent
            .front()
            .is_some_and(|t| now.duration_since(*t) > CRASH_WINDOW)
        {
            self.recent.pop_front();
        }
        let crowded =
            u32::try_from(self.recent.len().saturating_sub(CRASH_ALLOWANCE)).unwrap_or(u32::MAX);
        let n = self.quick_in_a_row.saturating_sub(1).max(crowded);
        (n > 0).then(|| backoff(self.base, n))
    }
}

/// How long new workers get to start serving on a reload before the old ones go anyway.
const READY_TIMEOUT: Duration = Duration::from_secs(30);

/// What the supervisor needs to run.
#[derive(Debug, Serialize, Deserialize)]
pub struct Options {
    /// Worker processes to keep running.
    pub workers: usize,
    /// The arguments a worker is started with (after the binary).
    pub worker_args: Vec<String>,
    /// Where to write the pid (and, with `.json` appended, the state).
    pub pid_file: Option<PathBuf>,
    /// How long workers get to drain on shutdown before they are killed.
    #[serde(with = "millis")]
    pub drain: Duration,
    /// The first pause before restarting a worker that keeps dying (doubling, at most
    /// [`MAX_BACKOFF`]).
    #[serde(with = "millis")]
    pub backoff: Duration,
}

/// A duration as whole milliseconds, in a [`HandOver`].
mod millis {
    use std::time::Duration;

    use serde::{Deserialize as _, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        u64::deserialize(d).map(Duration::from_millis)
    }
}

/// What `serve` hands to the supervisor it becomes: everything the supervisor needs, worked
/// out from the command line and the configuration before the hand-over.
#[derive(Debug, Serialize, Deserialize)]
pub struct HandOver {
    /// The address to listen on (unless systemd passed a socket).
    pub listen: String,
    /// The log filter (`log`).
    pub log: String,
    /// How to run the workers.
    pub options: Options,
}

/// Holds the JSON of a [`HandOver`] while `serve` re-executes itself as the supervisor.
const HAND_OVER_ENV: &str = "ROWGATE_SUPERVISE";

/// One running worker.
struct Worker {
    started: Instant,
    generation: u64,
    /// Asked to be replaced (recycling) and told to drain: its exit is expected.
    retired: bool,
    /// Lines to the worker, written whole and in order by a task of their own; a worker that
    /// does not read loses messages (past [`TOLD_AHEAD`]) rather than stalling the supervisor.
    down: tokio::sync::mpsc::Sender<String>,
}

/// The lines the supervisor keeps for a worker that has not read them yet.
const TOLD_AHEAD: usize = 4096;

impl Worker {
    /// Sends one line to the worker.
    fn tell(&self, message: &str) {
        if self.down.try_send(format!("{message}\n")).is_err() {
            tracing::debug!(message, "a worker is not reading: a message is dropped");
        }
    }
}

/// What a worker says through its pipe.
enum Said {
    /// `ready`: it is serving.
    Ready(u32),
    /// `recycle`: it reached `max_requests` or `max_rss_mb`; start its replacement, then drain it.
    Recycle(u32),
    /// `changed`: it committed captured changes; the other workers are told.
    Changed(u32),
    /// `relay JSON`: a broadcast or presence of its Supabase channels; the other workers are
    /// told, with its pid.
    Relay(u32, String),
    /// `gather-ask SUBJECT ID`: it gathers every worker's report on SUBJECT (`/metrics`, the
    /// console's recent requests); the others are asked for theirs, and it is told how many
    /// answers come.
    GatherAsk(u32, String),
    /// `gather-reply PID ID TEXT`: its report for the asker PID.
    GatherReply(String),
}

/// The state `rowgate status` shows.
#[derive(Serialize)]
struct State<'a> {
    supervisor_pid: u32,
    listen: &'a str,
    started_unix: u64,
    uptime_s: u64,
    workers: Vec<WorkerState>,
    restarts: u64,
    last_exit: Option<&'a str>,
}

#[derive(Serialize)]
struct WorkerState {
    pid: u32,
    generation: u64,
    uptime_s: u64,
}

/// mimalloc's option that commits (and touches) arena memory eagerly: worth it in a worker
/// (`/data` ran ~12% faster with it), 5-6 MB of RSS for nothing in the supervisor.
const EAGER_COMMIT_ENV: &str = "MIMALLOC_ARENA_EAGER_COMMIT";

/// Set when the supervisor re-executed itself to turn eager commit off (its workers get the
/// allocator's default back).
const LEAN_ENV: &str = "ROWGATE_SUPERVISOR_LEAN";

/// Becomes the supervisor: re-executes this binary (same pid, same arguments) with `plan` in
/// the environment, where [`handed_over`] finds it before anything else runs. The fresh image
/// maps only what supervising touches (the configuration, the database's preparation and the
/// command line were dealt with here, and their pages stay behind: an idle supervisor went
/// from 9.0 to 7.1 MB resident), and mimalloc's eager arena commit is turned off in it
/// (mimalloc reads its options before `main`: only a fresh `exec` can change them). If the
/// `exec` fails, supervises from this process as it is.
pub fn hand_over(plan: HandOver) -> anyhow::Result<()> {
    use std::os::unix::process::CommandExt as _;
    let exe = std::env::current_exe().context("finding the rowgate binary")?;
    let mut command = std::process::Command::new(exe);
    command
        .args(std::env::args_os().skip(1))
        .env(HAND_OVER_ENV, serde_json::to_string(&plan)?);
    if std::env::var_os(EAGER_COMMIT_ENV).is_none() {
        command.env(EAGER_COMMIT_ENV, "0").env(LEAN_ENV, "1");
    }
    let error = command.exec();
    tracing::debug!("supervising without a fresh image: {error}");
    run(&plan.listen, plan.options)
}

/// The plan [`hand_over`] left for this process, if it is the supervisor `serve` became.
pub fn handed_over() -> Option<anyhow::Result<HandOver>> {
    let plan = std::env::var_os(HAND_OVER_ENV)?;
    Some(
        plan.into_string()
            .map_err(|_| anyhow::anyhow!("{HAND_OVER_ENV} is not UTF-8"))
            .and_then(|plan| serde_json::from_str(&plan).map_err(anyhow::Error::from))
            .with_context(|| format!("reading the supervisor's plan ({HAND_OVER_ENV})")),
    )
}

/// Binds `listen` (or takes the socket systemd passed, [`crate::server::activated`]), runs the
/// workers until SIGTERM/SIGINT.
pub fn run(listen: &str, options: Options) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(supervise(listen, options))
}

/// The event loop: each event (a worker's exit, a signal, a worker's message, the state tick)
/// is one method of [`Supervisor`].
async fn supervise(listen: &str, options: Options) -> anyhow::Result<()> {
    let listener = match crate::server::activated()? {
        Some(listener) => listener,
        None => crate::server::bind(listen)
            .await
            .with_context(|| format!("binding {listen}"))?
            .into_std()?,
    };
    // Workers inherit the socket: it must survive exec.
    nix::fcntl::fcntl(
        &listener,
        nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
    )
    .context("sharing the socket with workers")?;
    let local = listener.local_addr()?.to_string();
    tracing::info!(
        "supervisor {} on http://{local}/ with {} worker(s)",
        std::process::id(),
        options.workers
    );
    if let Some(path) = &options.pid_file {
        std::fs::write(path, format!("{}\n", std::process::id()))
            .with_context(|| format!("writing the pid file {}", path.display()))?;
    }
    // Handlers first: a signal must never meet its default action (exit).
    let mut hup = signal(SignalKind::hangup())?;
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut usr1 = signal(SignalKind::user_defined1())?;
    let (exits, mut exited) = mpsc::unbounded_channel::<(u32, ExitStatus)>();
    let (says, mut said) = mpsc::unbounded_channel::<Said>();
    let mut supervisor = Supervisor::new(options, listener, local, exits, says);
    for _ in 0..supervisor.options.workers {
        supervisor.spawn()?;
    }
    supervisor.write_state();
    let mut tick = tokio::time::interval(Duration::from_secs(5));
    loop {
        tokio::select! {
            Some((pid, status)) = exited.recv() => supervisor.exited(pid, status).await?,
            _ = hup.recv() => supervisor.reload(),
            Some(said) = said.recv() => supervisor.heard(said),
            _ = usr1.recv() => supervisor.signal(|_| true, Signal::SIGUSR1),
            _ = term.recv() => break,
            _ = int.recv() => break,
            _ = tick.tick() => supervisor.tick(),
        }
    }
    supervisor.stop(&mut exited).await;
    Ok(())
}

/// A reload in progress: the generation being started, how many of it serve, since when.
#[derive(Clone, Copy)]
struct Reload {
    generation: u64,
    ready: usize,
    since: Instant,
}

/// The supervisor's state, changed only by its event methods.
struct Supervisor {
    options: Options,
    /// The listening socket the workers inherit (kept open for the supervisor's life).
    listener: std::net::TcpListener,
    local: String,
    started: (Instant, SystemTime),
    workers: HashMap<u32, Worker>,
    /// The current generation (one more per reload).
    generation: u64,
    /// The generation whose first worker was started (it logs the configuration's warnings;
    /// the others of its generation are quiet).
    warned: Option<u64>,
    restarts: u64,
    last_exit: Option<String>,
    deaths: Deaths,
    /// Until a worker has said it serves, a worker's death means the server cannot start.
    ever_ready: bool,
    /// Recycling: new worker → the retired one it replaces (drained once the new one serves).
    replacing: HashMap<u32, u32>,
    reloading: Option<Reload>,
    /// Where each worker's exit and messages are sent (the event loop's receivers).
    exits: mpsc::UnboundedSender<(u32, ExitStatus)>,
    says: mpsc::UnboundedSender<Said>,
}

impl Supervisor {
    fn new(
        options: Options,
        listener: std::net::TcpListener,
        local: String,
        exits: mpsc::UnboundedSender<(u32, ExitStatus)>,
        says: mpsc::UnboundedSender<Said>,
    ) -> Supervisor {
        Supervisor {
            deaths: Deaths::new(options.backoff),
            options,
            listener,
            local,
            started: (Instant::now(), SystemTime::now()),
            workers: HashMap::new(),
            generation: 0,
            warned: None,
            restarts: 0,
            last_exit: None,
            ever_ready: false,
            replacing: HashMap::new(),
            reloading: None,
            exits,
            says,
        }
    }

    /// Starts a worker of the current generation; returns its pid.
    fn spawn(&mut self) -> anyhow::Result<u32> {
        let exe = std::env::current_exe().context("finding the rowgate binary")?;
        // Two pipes per worker, a line per message (see `crate::worker`); only the worker
        // inherits its ends: the supervisor starts one process at a time and closes its copies
        // right after.
        let (up_read, up_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).context("making a pipe")?;
        let (down_read, down_write) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .context("making a pipe")?;
        for end in [&up_write, &down_read] {
            nix::fcntl::fcntl(
                end,
                nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()),
            )
            .context("sharing a pipe with the worker")?;
        }
        let mut command = tokio::process::Command::new(exe);
        command.env_remove(HAND_OVER_ENV);
        if std::env::var_os(LEAN_ENV).is_some() {
            // the setting was the supervisor's own: workers keep the allocator's default
            command.env_remove(EAGER_COMMIT_ENV).env_remove(LEAN_ENV);
        }
        if self.warned == Some(self.generation) {
            command.env(QUIET_ENV, "1");
        } else {
            self.warned = Some(self.generation);
            command.env_remove(QUIET_ENV);
        }
        let raw = |fd: std::os::fd::RawFd| fd.to_string();
        let mut child = command
            .args(&self.options.worker_args)
            .env("LISTEN_FDS", "1")
            .env(
                "LISTEN_FDS_FIRST_FD",
                raw(std::os::fd::AsRawFd::as_raw_fd(&self.listener)),
            )
            .env_remove("LISTEN_PID")
            .env(WORKER_ENV, std::process::id().to_string())
            .env(UP_FD_ENV, raw(std::os::fd::AsRawFd::as_raw_fd(&up_write)))
            .env(
                DOWN_FD_ENV,
                raw(std::os::fd::AsRawFd::as_raw_fd(&down_read)),
            )
            .kill_on_drop(false)
            .spawn()
            .context("starting a worker")?;
        drop((up_write, down_read));
        let pid = child.id().unwrap_or(0);
        let up = tokio::net::unix::pipe::Receiver::from_owned_fd(up_read)?;
        let says = self.says.clone();
        tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt as _;
            let mut lines = tokio::io::BufReader::new(up).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let said = match line.as_str() {
                    READY => Said::Ready(pid),
                    RECYCLE => Said::Recycle(pid),
                    CHANGED => Said::Changed(pid),
                    _ => match line.split_once(' ') {
                        Some((RELAY, relay)) => Said::Relay(pid, relay.to_string()),
                        Some((GATHER_ASK, ask)) => Said::GatherAsk(pid, ask.to_string()),
                        Some((GATHER_REPLY, reply)) => Said::GatherReply(reply.to_string()),
                        _ => continue,
                    },
                };
                if says.send(said).is_err() {
                    break;
                }
            }
        });
        let (down, mut told) = tokio::sync::mpsc::channel::<String>(TOLD_AHEAD);
        let mut down_pipe = tokio::net::unix::pipe::Sender::from_owned_fd(down_write)?;
        tokio::spawn(async move {
            use tokio::io::AsyncWriteExt as _;
            while let Some(line) = told.recv().await {
                if down_pipe.write_all(line.as_bytes()).await.is_err() {
                    break; // the worker is gone
                }
            }
        });
        let worker = Worker {
            started: Instant::now(),
            generation: self.generation,
            retired: false,
            down,
        };
        worker.tell(&format!("{RESTARTS} {}", self.restarts));
        self.workers.insert(pid, worker);
        let exits = self.exits.clone();
        tokio::spawn(async move {
            if let Ok(status) = child.wait().await {
                let _ = exits.send((pid, status));
            }
        });
        Ok(pid)
    }

    /// A worker exited: a failed reload is abandoned, a retired worker is let go, any other is
    /// restarted (after a pause when workers keep dying). Before any worker has served, an exit
    /// means the server cannot start: `serve` stops with an error.
    async fn exited(&mut self, pid: u32, status: ExitStatus) -> anyhow::Result<()> {
        let Some(worker) = self.workers.remove(&pid) else {
            return Ok(());
        };
        self.tell_others(pid, &format!("{GONE} {pid}"));
        let cause = describe(status);
        if let Some(reload) = self.reloading.filter(|r| worker.generation == r.generation) {
            tracing::error!(pid, "reload failed: a new worker exited ({cause}) before serving; the running workers stay");
            self.signal(|w| w.generation == reload.generation, Signal::SIGTERM);
            self.generation = reload.generation - 1;
            self.reloading = None;
        } else if worker.generation != self.generation || worker.retired {
            tracing::info!(pid, "retired worker finished ({cause})");
        } else if !self.ever_ready {
            self.signal(|_| true, Signal::SIGTERM);
            self.remove_pid_file();
            anyhow::bail!("a worker exited ({cause}) before it could serve (its error is above)");
        } else {
            self.restarts += 1;
            for w in self.workers.values() {
                w.tell(&format!("{RESTARTS} {}", self.restarts));
            }
            tracing::warn!(
                pid,
                restarts = self.restarts,
                "worker exited ({cause}); starting another"
            );
            self.last_exit = Some(format!("worker {pid}: {cause}"));
            let lived = worker.started.elapsed();
            if let Some(pause) = self.deaths.record(Instant::now(), lived, crashed(status)) {
                tracing::warn!("workers keep dying: waiting {pause:?} before the next start");
                tokio::time::sleep(pause).await;
            }
            if let Err(e) = self.spawn() {
                tracing::error!("cannot start a worker: {e:#}");
            }
        }
        self.write_state();
        Ok(())
    }

    /// SIGHUP: a fresh generation of workers starts; the old drain once it serves.
    fn reload(&mut self) {
        self.generation += 1;
        tracing::info!(
            generation = self.generation,
            "SIGHUP: starting fresh workers, then draining the old ones"
        );
        for _ in 0..self.options.workers {
            if let Err(e) = self.spawn() {
                tracing::error!("cannot start a worker: {e:#}");
            }
        }
        self.reloading = Some(Reload {
            generation: self.generation,
            ready: 0,
            since: Instant::now(),
        });
        self.write_state();
    }

    /// A worker's message.
    fn heard(&mut self, said: Said) {
        match said {
            Said::Changed(pid) => self.tell_others(pid, CHANGED),
            Said::Relay(pid, relay) => self.tell_others(pid, &format!("{RELAY} {pid} {relay}")),
            Said::Recycle(pid) => self.recycle(pid),
            Said::GatherAsk(pid, ask) => {
                // `SUBJECT ID` → to the others: `SUBJECT PID ID`
                let Some((subject, id)) = ask.split_once(' ') else {
                    return;
                };
                self.tell_others(pid, &format!("{GATHER_ASK} {subject} {pid} {id}"));
                if let Some(asker) = self.workers.get(&pid) {
                    // the supervisor reports only its metrics
                    let own = match Subject::from_word(subject) {
                        Some(Subject::Metrics) => self.metrics_text(),
                        _ => String::new(),
                    };
                    let own = serde_json::to_string(&own).unwrap_or_default();
                    let others = self.workers.len() - 1;
                    asker.tell(&format!("{GATHER_EXPECT} {id} {others} {own}"));
                }
            }
            Said::GatherReply(reply) => {
                // `PID ID TEXT` → to PID: `ID TEXT`
                if let Some((asker, part)) = reply.split_once(' ') {
                    let asker = asker.parse::<u32>().ok();
                    if let Some(w) = asker.and_then(|pid| self.workers.get(&pid)) {
                        w.tell(&format!("{GATHER_PART} {part}"));
                    }
                }
            }
            Said::Ready(pid) => {
                // the others tell it who is present in their channels
                self.tell_others(pid, &format!("{HELLO} {pid}"));
                self.ready(pid);
            }
        }
    }

    /// The supervisor's own series for `/metrics`: its workers and its memory.
    fn metrics_text(&self) -> String {
        let rss = crate::observe::resident_bytes().unwrap_or(0);
        let pid = std::process::id();
        format!(
            "# HELP rowgate_supervisor_workers worker processes running (draining ones included)\n\
             # TYPE rowgate_supervisor_workers gauge\n\
             rowgate_supervisor_workers{{pid=\"{pid}\"}} {}\n\
             # HELP rowgate_supervisor_resident_bytes the supervisor's resident memory\n\
             # TYPE rowgate_supervisor_resident_bytes gauge\n\
             rowgate_supervisor_resident_bytes{{pid=\"{pid}\"}} {rss}\n",
            self.workers.len()
        )
    }

    /// Tells every worker but `pid`.
    fn tell_others(&self, pid: u32, message: &str) {
        for (other, w) in &self.workers {
            if *other != pid {
                w.tell(message);
            }
        }
    }

    /// A worker asked to be replaced: its replacement starts; it drains once that one serves.
    fn recycle(&mut self, pid: u32) {
        let current = self.generation;
        let Some(worker) = self
            .workers
            .get_mut(&pid)
            .filter(|w| w.generation == current && !w.retired)
        else {
            return;
        };
        tracing::info!(pid, "recycling a worker: starting its replacement");
        worker.retired = true;
        match self.spawn() {
            Ok(new) => {
                self.replacing.insert(new, pid);
            }
            Err(e) => tracing::error!("cannot start a worker: {e:#}"),
        }
        self.write_state();
    }

    /// A worker serves: whatever killed the last one was no crash loop; the worker it replaces
    /// drains; a reload whose workers all serve drains the old generation.
    fn ready(&mut self, pid: u32) {
        self.ever_ready = true;
        self.deaths.served();
        if let Some(old) = self.replacing.remove(&pid) {
            if let Ok(old) = i32::try_from(old) {
                let _ = kill(Pid::from_raw(old), Signal::SIGTERM);
            }
        }
        let generation_of = self.workers.get(&pid).map(|w| w.generation);
        let Some(mut reload) = self.reloading else {
            return;
        };
        if generation_of == Some(reload.generation) {
            reload.ready += 1;
        }
        if reload.ready >= self.options.workers {
            tracing::info!(
                "new workers ready after {:?}: draining the old ones",
                reload.since.elapsed()
            );
            self.signal(|w| w.generation < reload.generation, Signal::SIGTERM);
            self.reloading = None;
        } else {
            self.reloading = Some(reload);
        }
    }

    /// Every few seconds: a reload whose workers never serve drains the old ones anyway; the
    /// state file is refreshed.
    fn tick(&mut self) {
        if let Some(reload) = self.reloading {
            if reload.since.elapsed() > READY_TIMEOUT {
                tracing::warn!(
                    "new workers not ready after {READY_TIMEOUT:?}: draining the old ones anyway"
                );
                self.signal(|w| w.generation < reload.generation, Signal::SIGTERM);
                self.reloading = None;
            }
        }
        self.write_state();
    }

    /// SIGTERM/SIGINT: every worker drains; those still running after the drain time are
    /// killed.
    async fn stop(mut self, exited: &mut mpsc::UnboundedReceiver<(u32, ExitStatus)>) {
        tracing::info!("stopping: draining {} worker(s)", self.workers.len());
        self.signal(|_| true, Signal::SIGTERM);
        let deadline = Instant::now() + self.options.drain + Duration::from_secs(2);
        while !self.workers.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, exited.recv()).await {
                Ok(Some((pid, _))) => {
                    self.workers.remove(&pid);
                }
                _ => {
                    tracing::warn!("workers still running after the drain timeout: killing them");
                    self.signal(|_| true, Signal::SIGKILL);
                    break;
                }
            }
        }
        self.remove_pid_file();
    }

    /// Sends `sig` to the workers `which` selects.
    fn signal(&self, which: impl Fn(&Worker) -> bool, sig: Signal) {
        for (pid, w) in &self.workers {
            if which(w) {
                if let Ok(pid) = i32::try_from(*pid) {
                    let _ = kill(Pid::from_raw(pid), sig);
                }
            }
        }
    }

    /// Writes the state `rowgate status` shows (with `supervisor.pid_file`).
    fn write_state(&self) {
        let Some(path) = &self.options.pid_file else {
            return;
        };
        let mut list: Vec<WorkerState> = self
            .workers
            .iter()
            .map(|(pid, w)| WorkerState {
                pid: *pid,
                generation: w.generation,
                uptime_s: w.started.elapsed().as_secs(),
            })
            .collect();
        list.sort_by_key(|w| (w.generation, w.pid));
        let state = State {
            supervisor_pid: std::process::id(),
            listen: &self.local,
            started_unix: self
                .started
                .1
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            uptime_s: self.started.0.elapsed().as_secs(),
            workers: list,
            restarts: self.restarts,
            last_exit: self.last_exit.as_deref(),
        };
        let text = serde_json::to_string_pretty(&state).unwrap_or_default();
        let _ = write_atomically(&state_path(path), &text);
    }

    fn remove_pid_file(&self) {
        if let Some(path) = &self.options.pid_file {
            let _ = std::fs::remove_file(path);
            let _ = std::fs::remove_file(state_path(path));
        }
    }
}

/// The pause before the `n`-th quick restart in a row: `base` doubling, at most
/// [`MAX_BACKOFF`].
fn backoff(base: Duration, n: u32) -> Duration {
    base.saturating_mul(1u32 << n.min(10)).min(MAX_BACKOFF)
}

/// Whether a worker's exit was a crash: an error code or a fault signal, not a kill from
/// outside.
fn crashed(status: ExitStatus) -> bool {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => code != 0,
        (None, Some(sig)) => ![Signal::SIGKILL, Signal::SIGTERM, Signal::SIGINT]
            .iter()
            .any(|s| *s as i32 == sig),
        _ => true,
    }
}

/// An exit status in words: `signal SIGKILL`, `exit code 3`.
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt as _;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(sig)) => match Signal::try_from(sig) {
            Ok(s) => format!("signal {}", s.as_str()),
            Err(_) => format!("signal {sig}"),
        },
        _ => "unknown".into(),
    }
}

/// The state file beside a pid file.
pub fn state_path(pid_file: &Path) -> PathBuf {
    let mut name = pid_file.as_os_str().to_owned();
    name.push(".json");
    PathBuf::from(name)
}

fn write_atomically(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(100);

    /// Quick deaths back off from the second in a row; crashes after serving back off once more
    /// than [`CRASH_ALLOWANCE`] crowd a minute, and stop counting once they leave it; kills from
    /// outside do not count.
    #[test]
    fn deaths_back_off_when_quick_or_crowded() {
        let start = Instant::now();
        let mut quick = Deaths::new(BASE);
        assert_eq!(quick.record(start, Duration::from_millis(50), false), None);
        assert_eq!(
            quick.record(start, Duration::from_millis(50), false),
            Some(backoff(BASE, 1))
        );
        let mut served = Deaths::new(BASE);
        let lived = Duration::from_secs(10);
        let pauses: Vec<Option<Duration>> = (0..13u64)
            .map(|i| served.record(start + Duration::from_secs(3 * i), lived, true))
            .collect();
        assert_eq!(&pauses[..CRASH_ALLOWANCE], &[None; CRASH_ALLOWANCE]);
        assert_eq!(pauses[CRASH_ALLOWANCE], Some(backoff(BASE, 1)));
        assert_eq!(pauses[CRASH_ALLOWANCE + 2], Some(backoff(BASE, 3)));
        // minutes later the crowd has left the window
        assert_eq!(
            served.record(start + Duration::from_secs(300), lived, true),
            None
        );
        // workers killed from outside after serving are restarted at once, however many
        let mut killed = Deaths::new(BASE);
        for i in 0..20u64 {
            let at = start + Duration::from_secs(i);
            assert_eq!(killed.record(at, lived, false), None);
        }
    }
}
