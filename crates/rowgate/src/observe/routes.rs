//! Request statistics per route and method: requests by status, a latency histogram
//! ([`Histogram`]), response bytes and database time, shown at `/metrics`.
//!
//! A route is what a request reached: a table or view by name, a function, a custom resource
//! by its path template, or one of the fixed endpoints (the OpenAPI document, realtime, the
//! token endpoint, ORDS, health, metrics). Names come from the schema cache or the
//! configuration once the request was answered; a 404 keeps no name (a scan of random URLs
//! grows no series), and past [`MAX_ROUTES`] new names are counted under `(other)`.
//!
//! Recording costs a lock-free map look-up and a few relaxed atomic adds; the series
//! are rendered only when scraped.

use std::fmt::Write as _;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use indexmap::IndexMap;

use crate::histogram::{nanos, seconds, Histogram};

/// Distinct (route, name, method) series kept; later ones are counted under `(other)`.
pub const MAX_ROUTES: usize = 2048;

/// What kind of route a request reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RouteKind {
    /// A table or view under the REST prefix (named).
    Table,
    /// A function under `/rpc` (named).
    Rpc,
    /// The OpenAPI document.
    OpenApi,
    /// A custom resource (named by its path template).
    Resource,
    /// `/realtime` (WebSocket, Supabase's socket, Server-Sent Events).
    Realtime,
    /// The OAuth2 token endpoint.
    Token,
    /// The ORDS front end.
    Ords,
    /// `/live` and `/ready`.
    Health,
    /// `/metrics`.
    Metrics,
    /// The admin console at `/_/`: its pages and its API.
    Console,
    /// People's accounts at `/auth/v1`.
    Accounts,
    /// No route: refused before routing, or a path nothing serves.
    Unmatched,
}

impl RouteKind {
    /// The `route` label.
    pub fn label(self) -> &'static str {
        match self {
            RouteKind::Table => "table",
            RouteKind::Rpc => "rpc",
            RouteKind::OpenApi => "openapi",
            RouteKind::Resource => "resource",
            RouteKind::Realtime => "realtime",
            RouteKind::Token => "token",
            RouteKind::Ords => "ords",
            RouteKind::Health => "health",
            RouteKind::Metrics => "metrics",
            RouteKind::Console => "console",
            RouteKind::Accounts => "accounts",
            RouteKind::Unmatched => "unmatched",
        }
    }
}

/// The route a request reached, as the statistics and the access log name it.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RouteLabel {
    /// The kind.
    pub kind: RouteKind,
    /// The table, view, function or resource template (empty for the fixed endpoints).
    pub name: String,
}

impl RouteLabel {
    /// A route without a name.
    pub fn fixed(kind: RouteKind) -> RouteLabel {
        RouteLabel {
            kind,
            name: String::new(),
        }
    }

    /// A named route.
    pub fn named(kind: RouteKind, name: impl Into<String>) -> RouteLabel {
        RouteLabel {
            kind,
            name: name.into(),
        }
    }
}

/// The methods told apart; any other is counted as `OTHER`.
const METHODS: [&str; 8] = [
    "GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "OTHER",
];

fn method_index(method: &http::Method) -> u8 {
    let index = METHODS[..7]
        .iter()
        .position(|m| *m == method.as_str())
        .unwrap_or(7);
    u8::try_from(index).unwrap_or(7)
}

/// One answered request, as recorded.
pub struct Answered<'a> {
    /// The route it reached.
    pub route: &'a RouteLabel,
    /// Its method.
    pub method: &'a http::Method,
    /// The status sent.
    pub status: u16,
    /// From the request's arrival to its answer's head.
    pub took: Duration,
    /// The body's length, when known before it is sent.
    pub bytes: Option<u64>,
    /// Time spent waiting for the database.
    pub db: Duration,
}

/// The numbers of one (route, name, method).
#[derive(Default)]
struct Series {
    /// Answers by status class 1xx-5xx.
    classes: [AtomicU64; 5],
    /// Answers 400 and up by exact status (rare: a lock is fine).
    errors: Mutex<Vec<(u16, u64)>>,
    /// Answers by latency.
    latency: Histogram,
    /// Body bytes of the answers whose length was known.
    bytes: AtomicU64,
    /// Database time summed, in nanoseconds.
    db_ns: AtomicU64,
}

impl Series {
    /// Counts one answer.
    fn count(&self, answered: &Answered<'_>) {
        let class = usize::from(answered.status / 100).clamp(1, 5) - 1;
        self.classes[class].fetch_add(1, Ordering::Relaxed);
        if answered.status >= 400 {
            let mut errors = self.errors.lock().unwrap_or_else(|e| e.into_inner());
            match errors.iter_mut().find(|(s, _)| *s == answered.status) {
                Some((_, n)) => *n += 1,
                None => errors.push((answered.status, 1)),
            }
        }
        self.latency.record(answered.took);
        if let Some(bytes) = answered.bytes {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
        if !answered.db.is_zero() {
            self.db_ns.fetch_add(nanos(answered.db), Ordering::Relaxed);
        }
    }
}

type SeriesKey = (RouteKind, String, u8);

/// A counter family rendered from each series: its name, help, and value.
type Total = (&'static str, &'static str, fn(&Series) -> String);

/// A [`SeriesKey`] borrowed: hashed as the tuple is, so a look-up builds no `String`.
struct SeriesRef<'a> {
    kind: RouteKind,
    name: &'a str,
    method: u8,
}

impl Hash for SeriesRef<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // as `(RouteKind, String, u8)` hashes: field after field
        self.kind.hash(state);
        self.name.hash(state);
        self.method.hash(state);
    }
}

impl indexmap::Equivalent<SeriesKey> for SeriesRef<'_> {
    fn equivalent(&self, key: &SeriesKey) -> bool {
        self.kind == key.0 && self.name == key.1 && self.method == key.2
    }
}

/// The statistics of one worker.
#[derive(Default)]
pub struct RouteStats {
    /// Read without a lock on every request (arc-swap: no shared counter is written, so two
    /// threads recording at once do not pass a cache line between them); replaced whole,
    /// under `adding`, when a series is added.
    series: ArcSwap<IndexMap<SeriesKey, Arc<Series>>>,
    adding: Mutex<()>,
}

impl RouteStats {
    /// Counts one answered request.
    pub fn record(&self, answered: &Answered<'_>) {
        let method = method_index(answered.method);
        let key = SeriesRef {
            kind: answered.route.kind,
            name: &answered.route.name,
            method,
        };
        // counted through the map's guard: cloning the `Arc` would write its shared count
        let map = self.series.load();
        match map.get(&key) {
            Some(series) => series.count(answered),
            None => self.add(answered.route, method).count(answered),
        }
    }

    /// The series of a (route, name, method) not seen before (or of `(other)`).
    fn add(&self, route: &RouteLabel, method: u8) -> Arc<Series> {
        let key = SeriesRef {
            kind: route.kind,
            name: &route.name,
            method,
        };
        let _adding = self.adding.lock().unwrap_or_else(|e| e.into_inner());
        let current = self.series.load_full();
        if let Some(found) = current.get(&key) {
            return found.clone();
        }
        let name = if current.len() >= MAX_ROUTES && !route.name.is_empty() {
            "(other)".to_string()
        } else {
            route.name.clone()
        };
        let mut grown = IndexMap::clone(&current);
        let series = grown.entry((route.kind, name, method)).or_default().clone();
        self.series.store(Arc::new(grown));
        series
    }

    /// The series in Prometheus's text format, each labelled with `pid`.
    pub fn render(&self, pid: &str) -> String {
        let map = self.series.load_full();
        let mut rows: Vec<(&SeriesKey, &Arc<Series>)> = map.iter().collect();
        rows.sort_by(|a, b| a.0.cmp(b.0));
        let mut out = String::new();
        let labels = |(kind, name, method): &SeriesKey| {
            format!(
                "route=\"{}\",name=\"{}\",method=\"{}\",pid=\"{pid}\"",
                kind.label(),
                escape(name),
                METHODS[usize::from(*method)]
            )
        };
        family(
            &mut out,
            "rowgate_requests_total",
            "counter",
            "requests answered, by route, method and status (class below 400, exact from 400 on)",
        );
        for (key, s) in &rows {
            let labels = labels(key);
            let mut errors = s.errors.lock().unwrap_or_else(|e| e.into_inner()).clone();
            errors.sort_unstable();
            let classes = ["1xx", "2xx", "3xx"]
                .iter()
                .zip(&s.classes)
                .map(|(class, n)| (class.to_string(), n.load(Ordering::Relaxed)));
            let statuses = errors
                .into_iter()
                .map(|(status, n)| (status.to_string(), n));
            for (status, n) in classes.chain(statuses).filter(|(_, n)| *n > 0) {
                let _ = writeln!(
                    out,
                    "rowgate_requests_total{{{labels},status=\"{status}\"}} {n}"
                );
            }
        }
        family(
            &mut out,
            "rowgate_request_duration_seconds",
            "histogram",
            "time from a request's arrival to its answer's head, by route and method",
        );
        for (key, s) in &rows {
            s.latency
                .render(&mut out, "rowgate_request_duration_seconds", &labels(key));
        }
        let totals: [Total; 2] = [
            (
                "rowgate_response_bytes_total",
                "body bytes of the answers whose length was known before sending (not streams)",
                |s| s.bytes.load(Ordering::Relaxed).to_string(),
            ),
            (
                "rowgate_database_seconds_total",
                "time requests spent waiting for the database (queue and statements), by route and method",
                |s| seconds(s.db_ns.load(Ordering::Relaxed)).to_string(),
            ),
        ];
        for (name, help, value) in totals {
            family(&mut out, name, "counter", help);
            for (key, s) in &rows {
                let _ = writeln!(out, "{name}{{{}}} {}", labels(key), value(s));
            }
        }
        out
    }
}

/// A family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// A label value escaped as the text format requires (backslash, quote, newline).
pub fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answered(route: &RouteLabel, status: u16, millis: u64) -> Answered<'_> {
        Answered {
            route,
            method: &http::Method::GET,
            status,
            took: Duration::from_millis(millis),
            bytes: Some(10),
            db: Duration::from_millis(1),
        }
    }

    /// Classes below 400, exact statuses from 400, cumulative buckets whose `+Inf` is the
    /// count, names escaped.
    #[test]
    fn series_render_as_prometheus_text() {
        let stats = RouteStats::default();
        let team = RouteLabel::named(RouteKind::Table, "team");
        let odd = RouteLabel::named(RouteKind::Table, "a\"b");
        stats.record(&answered(&team, 200, 0));
        stats.record(&answered(&team, 206, 3));
        stats.record(&answered(&team, 404, 20_000));
        stats.record(&answered(&odd, 500, 1));
        let text = stats.render("7");
        let team_labels = "route=\"table\",name=\"team\",method=\"GET\",pid=\"7\"";
        for line in [
            format!("rowgate_requests_total{{{team_labels},status=\"2xx\"}} 2"),
            format!("rowgate_requests_total{{{team_labels},status=\"404\"}} 1"),
            format!("rowgate_request_duration_seconds_bucket{{{team_labels},le=\"0.0001\"}} 1"),
            format!("rowgate_request_duration_seconds_bucket{{{team_labels},le=\"0.005\"}} 2"),
            format!("rowgate_request_duration_seconds_bucket{{{team_labels},le=\"10\"}} 2"),
            format!("rowgate_request_duration_seconds_bucket{{{team_labels},le=\"+Inf\"}} 3"),
            format!("rowgate_request_duration_seconds_count{{{team_labels}}} 3"),
            format!("rowgate_response_bytes_total{{{team_labels}}} 30"),
            format!("rowgate_database_seconds_total{{{team_labels}}} 0.003"),
            "rowgate_requests_total{route=\"table\",name=\"a\\\"b\",method=\"GET\",pid=\"7\",status=\"500\"} 1".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        assert_eq!(
            text.matches("# TYPE rowgate_requests_total counter")
                .count(),
            1
        );
    }

    /// Past the limit, new names share one series.
    #[test]
    fn names_past_the_limit_are_other() {
        let stats = RouteStats::default();
        for i in 0..MAX_ROUTES + 5 {
            stats.record(&answered(
                &RouteLabel::named(RouteKind::Table, format!("t{i}")),
                200,
                0,
            ));
        }
        let text = stats.render("1");
        let other = "rowgate_requests_total{route=\"table\",name=\"(other)\",method=\"GET\",pid=\"1\",status=\"2xx\"} 5";
        assert!(text.lines().any(|l| l == other), "{other}");
    }
}
