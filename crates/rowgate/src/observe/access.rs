//! The access log (`[access_log]`): one line per answered request, as JSON or logfmt, with its
//! time, request id, method, path, status, duration, bytes, role, client id, route, peer and address.
//!
//! Lines go to a thread of their own through a bounded queue and are written in batches (one
//! `write` for all the lines waiting), so a slow disk or pipe never holds up a request; when
//! the queue is full a line is dropped and counted (`rowgate_access_log_dropped_total`), never
//! waited for. Nothing secret is written: no header is logged, and the values of query
//! parameters that carry credentials (`apikey`, `access_token`, … [`SECRET_PARAMETERS`]) are
//! replaced by `REDACTED`.
//!
//! The writer also keeps each worker's last `access_log.recent` lines in memory, for the
//! console's log view ([`AccessLog::recent`], gathered from every worker by
//! [`crate::app::App::recent_requests`]).

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use crossbeam_channel::{Sender, TrySendError};

use super::routes::Answered;
use crate::config::{AccessLogConfig, AccessLogFormat};

/// Query parameters whose values are never written (compared without case).
pub const SECRET_PARAMETERS: [&str; 10] = [
    "apikey",
    "access_token",
    "refresh_token",
    "id_token",
    "token",
    "jwt",
    "password",
    "passwd",
    "secret",
    "client_secret",
];

/// Lines waiting for the writer before new ones are dropped.
const QUEUE: usize = 65_536;

/// The most bytes written to a file at once.
const BATCH: usize = 256 * 1024;

/// The most bytes written to a pipe at once (Linux's `PIPE_BUF`: such writes never interleave
/// with other workers').
const PIPE_BUF: usize = 4096;

/// One answered request, as logged: what the statistics count, and who asked for what.
pub struct Entry<'a> {
    /// The route, method, status, duration and bytes.
    pub answered: &'a Answered<'a>,
    /// The request's id (`X-Request-Id`).
    pub request_id: &'a str,
    /// Path and query, as sent.
    pub target: &'a str,
    /// The role the request acted as, once authenticated.
    pub role: Option<&'a str>,
    /// The OAuth client of its token, if one of this server's.
    pub client: Option<&'a str>,
    /// The connection's peer.
    pub peer: IpAddr,
    /// The client's address: the peer, or the address a trusted proxy forwards for.
    pub address: IpAddr,
}

/// The access log of one worker.
pub struct AccessLog {
    format: AccessLogFormat,
    lines: Sender<String>,
    dropped: AtomicU64,
    /// The lines written last, oldest first (at most `access_log.recent`).
    recent: Arc<Mutex<VecDeque<String>>>,
}

impl AccessLog {
    /// Opens the log the configuration asks for (`None` when it is off); the file is appended
    /// to, created when missing.
    pub fn open(config: &AccessLogConfig) -> anyhow::Result<Option<AccessLog>> {
        if config.format == AccessLogFormat::Off {
            return Ok(None);
        }
        // a pipe (standard output under a service manager) keeps writes of at most PIPE_BUF
        // bytes whole; a file opened to append keeps every write whole
        let (mut out, batch_cap): (Box<dyn std::io::Write + Send>, usize) =
            if config.path.as_os_str().is_empty() {
                (Box::new(std::io::stdout()), PIPE_BUF)
            } else {
                let file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&config.path)
                    .map_err(|e| {
                        anyhow::anyhow!("access_log.path {}: {e}", config.path.display())
                    })?;
                (Box::new(file), BATCH)
            };
        let (lines, waiting) = crossbeam_channel::bounded::<String>(QUEUE);
        let recent = Arc::new(Mutex::new(VecDeque::new()));
        let (kept, keep) = (recent.clone(), config.recent);
        std::thread::Builder::new()
            .name("access-log".into())
            .spawn(move || {
                let mut batch = String::new();
                let mut written = Vec::new();
                let mut next = None;
                // ends when every sender is gone (the worker is done)
                while let Some(line) = next.take().or_else(|| waiting.recv().ok()) {
                    batch.push_str(&line);
                    written.push(line);
                    while let Ok(line) = waiting.try_recv() {
                        if batch.len() + line.len() > batch_cap {
                            next = Some(line);
                            break;
                        }
                        batch.push_str(&line);
                        written.push(line);
                    }
                    if let Err(e) = out.write_all(batch.as_bytes()).and_then(|()| out.flush()) {
                        tracing::warn!(error = %e, "access log: write failed");
                    }
                    batch.clear();
                    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                    for line in written.drain(..) {
                        if kept.len() >= keep {
                            kept.pop_front();
                        }
                        if keep > 0 {
                            kept.push_back(line);
                        }
                    }
                }
            })?;
        Ok(Some(AccessLog {
            format: config.format,
            lines,
            dropped: AtomicU64::new(0),
            recent,
        }))
    }

    /// Logs one request (or counts it dropped when the writer is that far behind).
    pub fn log(&self, entry: &Entry<'_>) {
        let line = match self.format {
            AccessLogFormat::Json => json_line(entry),
            _ => logfmt_line(entry),
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.lines.try_send(line)
        {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The lines written last, oldest first (each ends with a line break).
    pub fn recent(&self) -> Vec<String> {
        let kept = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        kept.iter().cloned().collect()
    }

    /// Lines dropped so far because the writer was behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// The time as RFC 3339 in UTC, to the microsecond (lines of several workers sort by it).
fn timestamp() -> String {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    let secs = i64::try_from(since.as_secs()).unwrap_or(0);
    chrono::DateTime::from_timestamp(secs, since.subsec_nanos())
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        .unwrap_or_default()
}

/// The time a line of either format was logged at (RFC 3339 in UTC to the microsecond, so
/// that times sort as text); empty when it has none.
pub fn line_time(line: &str) -> &str {
    let value = match line.find("\"time\":\"") {
        Some(at) => &line[at + 8..],
        None => line.strip_prefix("time=").unwrap_or(""),
    };
    value.split(['"', ' ']).next().unwrap_or("")
}

/// The request target with the values of [`SECRET_PARAMETERS`] replaced by `REDACTED`.
pub fn redacted(target: &str) -> std::borrow::Cow<'_, str> {
    let Some((path, query)) = target.split_once('?') else {
        return target.into();
    };
    let secret = |pair: &str| {
        let name = pair.split('=').next().unwrap_or("");
        let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
        SECRET_PARAMETERS
            .iter()
            .any(|s| s.eq_ignore_ascii_case(&name))
    };
    if !query.split('&').any(secret) {
        return target.into();
    }
    let query: Vec<String> = query
        .split('&')
        .map(|pair| {
            if secret(pair) {
                format!("{}=REDACTED", pair.split('=').next().unwrap_or(""))
            } else {
                pair.to_string()
            }
        })
        .collect();
    format!("{path}?{}", query.join("&")).into()
}

fn millis(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

fn json_line(e: &Entry<'_>) -> String {
    let a = e.answered;
    let mut line = serde_json::json!({
        "time": timestamp(),
        "request_id": e.request_id,
        "method": a.method.as_str(),
        "path": redacted(e.target),
        "status": a.status,
        "duration_ms": millis(a.took),
        "bytes": a.bytes,
        "role": e.role,
        "client": e.client,
        "route": a.route.kind.label(),
        "name": (!a.route.name.is_empty()).then_some(a.route.name.as_str()),
        "peer": e.peer.to_string(),
        "address": e.address.to_string(),
    })
    .to_string();
    line.push('\n');
    line
}

/// A logfmt value: bare when it needs no quotes, else quoted with `"` and `\` escaped.
fn logfmt_value(out: &mut String, value: &str) {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\')
    {
        out.push_str(value);
        return;
    }
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

fn logfmt_line(e: &Entry<'_>) -> String {
    let a = e.answered;
    let mut out = String::with_capacity(256);
    let mut field = |name: &str, value: &str| {
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(name);
        out.push('=');
        logfmt_value(&mut out, value);
    };
    field("time", &timestamp());
    field("request_id", e.request_id);
    field("method", a.method.as_str());
    field("path", &redacted(e.target));
    field("status", &a.status.to_string());
    field("duration_ms", &millis(a.took).to_string());
    field("bytes", &a.bytes.map(|b| b.to_string()).unwrap_or_default());
    field("role", e.role.unwrap_or(""));
    field("client", e.client.unwrap_or(""));
    field("route", a.route.kind.label());
    field("name", &a.route.name);
    field("peer", &e.peer.to_string());
    field("address", &e.address.to_string());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::routes::{RouteKind, RouteLabel};

    #[test]
    fn lines_of_both_formats_have_their_time() {
        let json = r#"{"bytes":1,"time":"2026-11-27T10:00:00.123456Z","status":200}"#;
        assert_eq!(line_time(json), "2026-11-27T10:00:00.123456Z");
        let logfmt = "time=2026-11-27T10:00:00.123456Z request_id=x method=GET";
        assert_eq!(line_time(logfmt), "2026-11-27T10:00:00.123456Z");
        assert_eq!(line_time("no time here"), "");
        assert_eq!(timestamp().len(), "2026-11-27T10:00:00.123456Z".len());
    }

    #[test]
    fn credentials_in_the_query_are_redacted() {
        assert_eq!(
            redacted("/realtime/v1/websocket?apikey=abc.def&vsn=1.0.0"),
            "/realtime/v1/websocket?apikey=REDACTED&vsn=1.0.0"
        );
        assert_eq!(
            redacted("/events?table=team&ACCESS_TOKEN=x&access%5Ftoken=y"),
            "/events?table=team&ACCESS_TOKEN=REDACTED&access%5Ftoken=REDACTED"
        );
        assert_eq!(redacted("/api/team?id=eq.3"), "/api/team?id=eq.3");
        assert_eq!(redacted("/api/team"), "/api/team");
    }

    #[test]
    fn lines_in_both_formats() {
        let route = RouteLabel::named(RouteKind::Table, "team");
        let answered = Answered {
            route: &route,
            method: &http::Method::GET,
            status: 200,
            took: Duration::from_micros(1500),
            bytes: Some(42),
            db: Duration::ZERO,
        };
        let entry = Entry {
            answered: &answered,
            request_id: "r1",
            target: "/api/team?name=eq.a b&token=t",
            role: Some("anon"),
            client: None,
            peer: IpAddr::from([127, 0, 0, 1]),
            address: IpAddr::from([203, 0, 113, 7]),
        };
        let json: serde_json::Value = serde_json::from_str(&json_line(&entry)).expect("json");
        assert_eq!(json["path"], "/api/team?name=eq.a b&token=REDACTED");
        assert_eq!(json["duration_ms"], 1.5);
        assert_eq!(json["client"], serde_json::Value::Null);
        assert_eq!(json["name"], "team");
        assert_eq!(json["address"], "203.0.113.7");
        let line = logfmt_line(&entry);
        assert!(
            line.contains(" path=\"/api/team?name=eq.a b&token=REDACTED\" status=200 duration_ms=1.5 bytes=42 role=anon client=\"\" route=table name=team peer=127.0.0.1 address=203.0.113.7\n"),
            "{line}"
        );
        assert!(line.starts_with("time=20"), "{line}");
    }
}
