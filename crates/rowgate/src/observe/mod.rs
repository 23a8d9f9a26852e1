//! What a worker counts and shows at `/metrics` (Prometheus text format): responses by status
//! class, requests by route ([`routes`]), connections, worker restarts (told by the
//! supervisor), realtime connections and events, resident memory; and what it tells of each
//! request: its id ([`request_id`]) and its line in the access log ([`access`]).
//!
//! Each worker process has its own numbers (a scrape through the shared port reaches one of
//! them; each series carries the worker's `pid` label so they stay apart when summed). The
//! counters are handles registered once, so counting costs one atomic add.

pub mod access;
pub mod merge;
pub mod request_id;
pub mod routes;

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use metrics::{Counter, Gauge, Key, KeyName, Label, Level, Metadata, Recorder, SharedString};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle, PrometheusRecorder};

use crate::auth::Principal;
use crate::config::MetricsConfig;
use crate::error::{ApiError, ErrorCode};

static METADATA: Metadata<'static> = Metadata::new("rowgate", Level::INFO, Some(module_path!()));

/// The worker's metrics.
pub struct Metrics {
    recorder: PrometheusRecorder,
    handle: PrometheusHandle,
    pid: String,
    /// Responses by status class: 1xx .. 5xx.
    responses: [Counter; 5],
    /// Connections open now (also `limits.max_connections`' count): each socket while it lives,
    /// through hyper or the WebSocket session it was upgraded to (`server::Counted`).
    pub open_connections: AtomicUsize,
    accepted: Counter,
    refused: Counter,
    refused_per_address: Counter,
    worker_restarts: Gauge,
    /// Realtime connections open now.
    realtime_connections: std::sync::atomic::AtomicI64,
    /// Events waiting in realtime connections' queues (read at scrape time).
    realtime_queued: AtomicUsize,
    /// Realtime subscriptions held (read at scrape time).
    realtime_subscriptions: AtomicUsize,
    realtime_changes: Counter,
    realtime_frames: Counter,
    realtime_dropped: Counter,
    realtime_match_us: Counter,
    cache_hits: Counter,
    cache_misses: Counter,
    /// Memory the response cache holds (read at scrape time).
    cache_bytes: std::sync::atomic::AtomicU64,
    /// Exact counts answered from kept counts, and counted (read at scrape time).
    counts: [std::sync::atomic::AtomicU64; 2],
    /// Access log lines dropped because its writer was behind (read at scrape time).
    access_log_dropped: std::sync::atomic::AtomicU64,
    /// Requests by route and method.
    pub routes: routes::RouteStats,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers every series.
    pub fn new() -> Metrics {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let pid = std::process::id().to_string();
        let key = |name: &'static str, labels: Vec<Label>| {
            let mut labels = labels;
            labels.push(Label::new("pid", pid.clone()));
            Key::from_parts(name, labels)
        };
        let describe = |name: &'static str, help: &'static str| {
            recorder.describe_counter(
                KeyName::from_const_str(name),
                None,
                SharedString::const_str(help),
            );
        };
        describe(
            "rowgate_http_responses_total",
            "HTTP responses sent, by status class",
        );
        describe(
            "rowgate_http_connections_total",
            "client connections accepted",
        );
        describe(
            "rowgate_http_connections_refused_total",
            "connections answered 503 because limits.max_connections were open",
        );
        let responses = ["1xx", "2xx", "3xx", "4xx", "5xx"].map(|class| {
            recorder.register_counter(
                &key(
                    "rowgate_http_responses_total",
                    vec![Label::new("class", class)],
                ),
                &METADATA,
            )
        });
        let accepted =
            recorder.register_counter(&key("rowgate_http_connections_total", vec![]), &METADATA);
        let refused = recorder.register_counter(
            &key("rowgate_http_connections_refused_total", vec![]),
            &METADATA,
        );
        describe(
            "rowgate_http_connections_refused_per_address_total",
            "connections answered 503 because their address held limits.max_connections_per_address",
        );
        let refused_per_address = recorder.register_counter(
            &key("rowgate_http_connections_refused_per_address_total", vec![]),
            &METADATA,
        );
        recorder.describe_gauge(
            KeyName::from_const_str("rowgate_worker_restarts"),
            None,
            SharedString::const_str(
                "workers the supervisor restarted after an unexpected exit, since it started",
            ),
        );
        let worker_restarts =
            recorder.register_gauge(&key("rowgate_worker_restarts", vec![]), &METADATA);
        describe(
            "rowgate_realtime_changes_total",
            "captured changes read from the log and matched against subscriptions",
        );
        describe(
            "rowgate_realtime_frames_total",
            "event frames queued to realtime connections",
        );
        describe(
            "rowgate_realtime_dropped_total",
            "event frames not delivered because a connection fell too far behind (closed 1013)",
        );
        let realtime_changes =
            recorder.register_counter(&key("rowgate_realtime_changes_total", vec![]), &METADATA);
        let realtime_frames =
            recorder.register_counter(&key("rowgate_realtime_frames_total", vec![]), &METADATA);
        let realtime_dropped =
            recorder.register_counter(&key("rowgate_realtime_dropped_total", vec![]), &METADATA);
        describe(
            "rowgate_realtime_match_microseconds_total",
            "time spent matching captured changes against subscriptions and queueing their frames",
        );
        let realtime_match_us = recorder.register_counter(
            &key("rowgate_realtime_match_microseconds_total", vec![]),
            &METADATA,
        );
        describe(
            "rowgate_counts_kept_total",
            "exact counts of captured tables answered from a kept count brought up to date",
        );
        describe(
            "rowgate_counts_counted_total",
            "exact counts of captured tables that had to be counted (none kept, or too far behind)",
        );
        describe(
            "rowgate_access_log_dropped_total",
            "access log lines dropped because the writer was behind (never waited for)",
        );
        describe(
            "rowgate_cache_hits_total",
            "reads answered from the response cache",
        );
        describe(
            "rowgate_cache_misses_total",
            "reads run and kept by the response cache (it held no current answer for them)",
        );
        let cache_hits =
            recorder.register_counter(&key("rowgate_cache_hits_total", vec![]), &METADATA);
        let cache_misses =
            recorder.register_counter(&key("rowgate_cache_misses_total", vec![]), &METADATA);
        Metrics {
            cache_hits,
            cache_misses,
            cache_bytes: std::sync::atomic::AtomicU64::new(0),
            counts: Default::default(),
            access_log_dropped: std::sync::atomic::AtomicU64::new(0),
            routes: routes::RouteStats::default(),
            realtime_connections: std::sync::atomic::AtomicI64::new(0),
            realtime_queued: AtomicUsize::new(0),
            realtime_subscriptions: AtomicUsize::new(0),
            realtime_changes,
            realtime_frames,
            realtime_dropped,
            realtime_match_us,
            recorder,
            handle,
            pid,
            responses,
            open_connections: AtomicUsize::new(0),
            accepted,
            refused,
            refused_per_address,
            worker_restarts,
        }
    }

    /// Counts a response with this status.
    pub fn response(&self, status: u16) {
        let class = usize::from(status / 100).clamp(1, 5) - 1;
        self.responses[class].increment(1);
    }

    /// Counts an accepted connection.
    pub fn accepted(&self) {
        self.accepted.increment(1);
    }

    /// Counts a connection refused for `limits.max_connections`.
    pub fn refused(&self) {
        self.refused.increment(1);
    }

    /// Counts a connection refused for `limits.max_connections_per_address`.
    pub fn refused_per_address(&self) {
        self.refused_per_address.increment(1);
    }

    /// A realtime connection opened (`1`) or closed (`-1`).
    pub fn realtime_connection(&self, delta: i64) {
        self.realtime_connections
            .fetch_add(delta, Ordering::Relaxed);
    }

    /// Events waiting in realtime connections' queues now, and the subscriptions held.
    pub fn set_realtime_load(&self, queued: usize, subscriptions: usize) {
        self.realtime_queued.store(queued, Ordering::Relaxed);
        self.realtime_subscriptions
            .store(subscriptions, Ordering::Relaxed);
    }

    /// `changes` read from the log, `frames` queued to connections.
    pub fn realtime_changes(&self, changes: u64, frames: u64) {
        self.realtime_changes.increment(changes);
        self.realtime_frames.increment(frames);
    }

    /// Time spent matching changes and queueing their frames.
    pub fn realtime_matched(&self, took: std::time::Duration) {
        self.realtime_match_us
            .increment(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
    }

    /// A frame not delivered to a connection that fell behind.
    pub fn realtime_dropped(&self) {
        self.realtime_dropped.increment(1);
    }

    /// A read answered from the response cache.
    pub fn cache_hit(&self) {
        self.cache_hits.increment(1);
    }

    /// A read the response cache had no current answer for, run and kept.
    pub fn cache_miss(&self) {
        self.cache_misses.increment(1);
    }

    /// The memory the response cache holds now.
    pub fn set_cache_bytes(&self, bytes: u64) {
        self.cache_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Exact counts of captured tables answered from kept counts, and counted, so far.
    pub fn set_kept_counts(&self, kept: u64, counted: u64) {
        self.counts[0].store(kept, Ordering::Relaxed);
        self.counts[1].store(counted, Ordering::Relaxed);
    }

    /// Access log lines dropped so far.
    pub fn set_access_log_dropped(&self, dropped: u64) {
        self.access_log_dropped.store(dropped, Ordering::Relaxed);
    }

    /// The supervisor's restart count.
    pub fn set_worker_restarts(&self, n: u64) {
        #[allow(clippy::cast_precision_loss)]
        self.worker_restarts.set(n as f64);
    }

    /// The Prometheus text, with the gauges read now.
    pub fn render(&self) -> String {
        let gauge = |name: &'static str, value: f64| {
            self.recorder
                .register_gauge(
                    &Key::from_parts(name, vec![Label::new("pid", self.pid.clone())]),
                    &METADATA,
                )
                .set(value);
        };
        let load = |value: &AtomicUsize| value.load(Ordering::Relaxed) as u64;
        #[allow(clippy::cast_sign_loss)]
        let gauges = [
            (
                "rowgate_http_connections_open",
                load(&self.open_connections),
            ),
            (
                "rowgate_realtime_connections",
                self.realtime_connections.load(Ordering::Relaxed).max(0) as u64,
            ),
            ("rowgate_realtime_queued", load(&self.realtime_queued)),
            (
                "rowgate_realtime_subscriptions",
                load(&self.realtime_subscriptions),
            ),
            (
                "rowgate_cache_bytes",
                self.cache_bytes.load(Ordering::Relaxed),
            ),
            (
                "rowgate_process_resident_bytes",
                resident_bytes().unwrap_or(0),
            ),
        ];
        for (name, value) in gauges {
            #[allow(clippy::cast_precision_loss)]
            gauge(name, value as f64);
        }
        for (name, value) in [
            ("rowgate_counts_kept_total", &self.counts[0]),
            ("rowgate_counts_counted_total", &self.counts[1]),
            ("rowgate_access_log_dropped_total", &self.access_log_dropped),
        ] {
            self.recorder
                .register_counter(
                    &Key::from_parts(name, vec![Label::new("pid", self.pid.clone())]),
                    &METADATA,
                )
                .absolute(value.load(Ordering::Relaxed));
        }
        let mut text = self.handle.render();
        text.push_str(&self.routes.render(&self.pid));
        text
    }
}

impl Metrics {
    /// The series of the reads waiting for a connection (a SQLite reader thread, a pooled
    /// PostgreSQL connection): how many wait now, and how long they waited.
    pub fn render_read_waits(&self, waits: &crate::db::waits::ReadWaits) -> String {
        use std::fmt::Write as _;
        let labels = format!("pid=\"{}\"", self.pid);
        let mut text = String::new();
        routes::family(
            &mut text,
            "rowgate_db_reads_waiting",
            "gauge",
            "reads waiting now for a connection: a SQLite reader thread (db.readers), a pooled PostgreSQL connection (db.pool_size)",
        );
        let _ = writeln!(
            text,
            "rowgate_db_reads_waiting{{{labels}}} {}",
            waits.waiting()
        );
        routes::family(
            &mut text,
            "rowgate_db_read_wait_seconds",
            "histogram",
            "how long reads waited for a connection before they began",
        );
        waits
            .waited()
            .render(&mut text, "rowgate_db_read_wait_seconds", &labels);
        text
    }

    /// The read replicas' series: whether each takes reads, and its lag at the last check
    /// (`replicas`: name, in the rotation, lag).
    pub fn render_replicas<'a>(
        &self,
        replicas: impl Iterator<Item = (&'a str, bool, std::time::Duration)> + Clone,
    ) -> String {
        use std::fmt::Write as _;
        let label = |name: &str| name.replace('\\', "\\\\").replace('"', "\\\"");
        let mut text = String::from(
            "# HELP rowgate_replica_up whether the read replica takes reads (it answers and lags no more than db.replica_max_lag_ms)\n# TYPE rowgate_replica_up gauge\n",
        );
        for (name, up, _) in replicas.clone() {
            let _ = writeln!(
                text,
                "rowgate_replica_up{{replica=\"{}\",pid=\"{}\"}} {}",
                label(name),
                self.pid,
                u8::from(up)
            );
        }
        text.push_str("# HELP rowgate_replica_lag_seconds how far behind the primary the read replica was at its last check\n# TYPE rowgate_replica_lag_seconds gauge\n");
        for (name, _, lag) in replicas {
            let _ = writeln!(
                text,
                "rowgate_replica_lag_seconds{{replica=\"{}\",pid=\"{}\"}} {}",
                label(name),
                self.pid,
                lag.as_secs_f64()
            );
        }
        text
    }
}

/// Whether `principal`, whose address is `client` ([`crate::proxies`]: behind a trusted proxy,
/// the address it forwarded for), may read `/metrics` (404 when they are off, so a disabled
/// endpoint looks like none).
pub fn check_access(
    config: &MetricsConfig,
    principal: &Principal,
    client: IpAddr,
) -> Result<(), ApiError> {
    if !config.enabled {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            "no such resource: /metrics",
        ));
    }
    let local = config.loopback && client.to_canonical().is_loopback();
    if local || config.roles.contains(&principal.role) {
        return Ok(());
    }
    Err(crate::auth::policy::denied(principal)
        .details("/metrics is readable from loopback or by the roles in metrics.roles"))
}

/// This process's resident memory in bytes (from `/proc/self/statm`).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
