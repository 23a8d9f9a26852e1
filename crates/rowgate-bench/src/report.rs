//! Results: one JSON line per measured row (scenario, target, step, outcome), and the markdown
//! table made from them (req/s, latency, server CPU per request, RSS, errors, ratio to Rowgate).
//! WebSocket rows carry their own units: connections held or per second, frames per second, CPU
//! per connection, frame or second, and RSS per connection.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::load::{Mode, Outcome};

/// One measured row.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Row {
    /// Scenario id.
    pub scenario: String,
    /// Scenario title.
    pub title: String,
    /// `rowgate` or a peer.
    pub target: String,
    /// The measurement; absent when the scenario or target was not available.
    pub outcome: Option<Outcome>,
    /// Why there is no measurement.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Appends `row` to the JSON-lines file `path`.
pub fn append(path: &Path, row: &Row) -> anyhow::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(file, "{}", serde_json::to_string(row)?)?;
    Ok(())
}

/// Reads a JSON-lines results file.
pub fn read(path: &Path) -> anyhow::Result<Vec<Row>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).with_context(|| format!("in {}", path.display())))
        .collect()
}

/// One line of text for a row (printed as rows finish).
pub fn line(row: &Row) -> String {
    match &row.outcome {
        None => format!("{:<4} {:<10} not available: {}", row.scenario, row.target, row.note),
        Some(o) => format!(
            "{:<4} {:<10} {:<14} {:>16}  p50 {:>7}  p99 {:>7}  max {:>8}  cpu {:>7}  rss {:>8}  errors {}{}",
            row.scenario,
            row.target,
            o.label,
            if o.mode.is_websocket() { rate(o) } else { format!("{} req/s", rate(o)) },
            micros(o.latency_us.p50),
            micros(o.latency_us.p99),
            micros(o.latency_us.max),
            cpu(o),
            memory(o),
            o.errors,
            o.error_samples.first().map_or(String::new(), |e| format!(" (first: {e})")),
        ) + &o
            .by_request
            .iter()
            .map(|r| {
                format!(
                    "\n       {:>8} ok  p50 {:>7}  p99 {:>7}  max {:>8}  {}",
                    r.ok,
                    micros(r.latency_us.p50),
                    micros(r.latency_us.p99),
                    micros(r.latency_us.max),
                    r.request
                )
            })
            .collect::<String>(),
    }
}

/// The markdown table of `rows`: per scenario, each target and step, with the ratio of each
/// peer's req/s to Rowgate's in the same step.
pub fn markdown(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | target | step | req/s | vs Rowgate | p50 | p99 | max | server CPU/req | RSS | errors |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for row in rows {
        match &row.outcome {
            None => out.push_str(&format!(
                "| {} {} | {} | | not available: {} | | | | | | | |\n",
                row.scenario, row.title, row.target, row.note
            )),
            Some(o) => {
                let base = rows.iter().find_map(|r| match &r.outcome {
                    Some(b)
                        if r.scenario == row.scenario
                            && r.target == "rowgate"
                            && b.label == o.label =>
                    {
                        Some(b.rps)
                    }
                    _ => None,
                });
                let ratio = match base {
                    Some(b) if row.target != "rowgate" && b > 0.0 => format!("{:.2}×", o.rps / b),
                    _ => String::new(),
                };
                out.push_str(&format!(
                    "| {} {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    row.scenario,
                    row.title,
                    row.target,
                    o.label,
                    rate(o),
                    ratio,
                    micros(o.latency_us.p50),
                    micros(o.latency_us.p99),
                    micros(o.latency_us.max),
                    cpu(o),
                    memory(o),
                    o.errors
                ));
            }
        }
    }
    out
}

/// The rate: requests per second as a bare number (the table's unit); WebSocket rows say theirs
/// (an idle run counts the connections it held).
fn rate(o: &Outcome) -> String {
    match o.mode {
        Mode::Idle => format!("{} held", o.ok),
        m if m.is_websocket() => format!("{:.0} {}", o.rps, m.rate_unit()),
        _ => format!("{:.0}", o.rps),
    }
}

/// Server CPU per request, or per the WebSocket row's unit.
fn cpu(o: &Outcome) -> String {
    match o.server_cpu_us_per_request {
        None => "-".into(),
        Some(c) if o.mode.is_websocket() => format!("{c:.1} µs/{}", o.mode.cpu_unit()),
        Some(c) => format!("{c:.1} µs"),
    }
}

/// Server RSS, and what each connection added, or the PSS, when the row knows.
fn memory(o: &Outcome) -> String {
    let rss = o.server_rss_bytes.map_or("-".into(), mib);
    match (o.rss_per_connection(), o.server_pss_bytes) {
        (Some(per), _) => format!("{rss} ({:+.1}KB/conn)", per / 1024.0),
        (None, Some(pss)) => format!("{rss} (PSS {})", mib(pss)),
        (None, None) => rss,
    }
}

fn micros(us: u64) -> String {
    if us >= 10_000 {
        format!("{:.1}ms", us as f64 / 1000.0)
    } else {
        format!("{us}µs")
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}MB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Latency, Mode};

    fn outcome(label: &str, rps: f64) -> Outcome {
        Outcome {
            label: label.into(),
            mode: Mode::Closed,
            connections: 10,
            seconds: 1.0,
            ok: rps as u64,
            errors: 0,
            error_samples: vec![],
            rps,
            latency_us: Latency {
                p50: 100,
                p90: 200,
                p99: 15_000,
                p999: 20_000,
                max: 30_000,
            },
            server_cpu_us_per_request: Some(12.5),
            server_rss_bytes: Some(20 * 1024 * 1024),
            server_peak_rss_bytes: None,
            server_rss_before_bytes: None,
            server_pss_bytes: None,
            by_request: Vec::new(),
        }
    }

    #[test]
    fn rows_round_trip_and_ratios_are_per_step() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("r.jsonl");
        let rows = vec![
            Row {
                scenario: "S1".into(),
                title: "hello".into(),
                target: "rowgate".into(),
                outcome: Some(outcome("c10", 50_000.0)),
                note: String::new(),
            },
            Row {
                scenario: "S1".into(),
                title: "hello".into(),
                target: "nginx".into(),
                outcome: Some(outcome("c10", 100_000.0)),
                note: String::new(),
            },
            Row {
                scenario: "S8".into(),
                title: "idle ws".into(),
                target: "rowgate".into(),
                outcome: None,
                note: "realtime has not landed".into(),
            },
        ];
        for r in &rows {
            append(&file, r).expect("append");
        }
        assert_eq!(read(&file).expect("read"), rows);
        let md = markdown(&rows);
        assert!(md.contains("| S1 hello | nginx | c10 | 100000 | 2.00× | 100µs | 15.0ms | 30.0ms | 12.5 µs | 20.0MB | 0 |"), "{md}");
        assert!(
            md.contains("not available: realtime has not landed"),
            "{md}"
        );
        assert!(line(&rows[0]).contains("50000 req/s"));
        // the footprint row gives the PSS beside the RSS
        let mut idle = outcome("idle", 0.0);
        idle.server_pss_bytes = Some(15 * 1024 * 1024);
        assert_eq!(memory(&idle), "20.0MB (PSS 15.0MB)");
    }

    /// A mix's row is followed by a line per request, and keeps them through the file.
    #[test]
    fn a_mix_shows_each_requests_latency() {
        let mut o = outcome("510 paced", 62.0);
        o.by_request = vec![crate::load::RequestLatency {
            request: "DELETE /api/people?id=eq.{id}".into(),
            ok: 93,
            latency_us: Latency {
                p50: 1_473,
                p90: 2_000,
                p99: 200_700,
                p999: 200_700,
                max: 200_700,
            },
        }];
        let row = Row {
            scenario: "S15".into(),
            title: "4D".into(),
            target: "rowgate-4d".into(),
            outcome: Some(o),
            note: String::new(),
        };
        let text = line(&row);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text}");
        assert!(
            lines[1].contains("93 ok")
                && lines[1].contains("p99 200.7ms")
                && lines[1].ends_with("DELETE /api/people?id=eq.{id}"),
            "{text}"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("r.jsonl");
        append(&file, &row).expect("append");
        assert_eq!(read(&file).expect("read"), vec![row]);
    }

    #[test]
    fn websocket_rows_say_their_units() {
        let ws = |mode: Mode, label: &str| {
            let mut o = outcome(label, 2_000.0);
            o.mode = mode;
            o.ok = 1_000;
            if mode == Mode::Idle {
                o.server_rss_before_bytes = Some(16 * 1024 * 1024);
            }
            Row {
                scenario: "S8".into(),
                title: "ws".into(),
                target: "rowgate".into(),
                outcome: Some(o),
                note: String::new(),
            }
        };
        let idle = ws(Mode::Idle, "idle c1000");
        let o = idle.outcome.as_ref().expect("outcome");
        assert_eq!(o.rss_per_connection(), Some(4.0 * 1024.0 * 1024.0 / 1000.0));
        let md = markdown(&[idle.clone(), ws(Mode::Fanout, "fanout s10 w100")]);
        assert!(
            md.contains("| idle c1000 | 1000 held |  | 100µs | 15.0ms | 30.0ms | 12.5 µs/s | 20.0MB (+4.1KB/conn) | 0 |"),
            "{md}"
        );
        assert!(
            md.contains(
                "| 2000 frames/s |  | 100µs | 15.0ms | 30.0ms | 12.5 µs/frame | 20.0MB | 0 |"
            ),
            "{md}"
        );
        assert!(line(&idle).contains("1000 held"), "{}", line(&idle));
        // results written before the field existed still read
        let old = r#"{"label":"c10","mode":"closed","connections":10,"seconds":1.0,"ok":1,"errors":0,"error_samples":[],"rps":1.0,"latency_us":{"p50":1,"p90":1,"p99":1,"p999":1,"max":1},"server_cpu_us_per_request":null,"server_rss_bytes":null,"server_peak_rss_bytes":null}"#;
        let o: Outcome = serde_json::from_str(old).expect("old row");
        assert_eq!(o.server_rss_before_bytes, None);
    }
}
