//! Results: one JSON line per measured row (scenario, target, step, outcome), and the markdown
//! table made from them (req/s, latency, server CPU per request, RSS, errors, ratio to Rowgate).

use std::io::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use crate::load::Outcome;

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
            "{:<4} {:<10} {:<14} {:>10.0} req/s  p50 {:>7}  p99 {:>7}  max {:>8}  cpu {:>7}  rss {:>8}  errors {}{}",
            row.scenario,
            row.target,
            o.label,
            o.rps,
            micros(o.latency_us.p50),
            micros(o.latency_us.p99),
            micros(o.latency_us.max),
            o.server_cpu_us_per_request.map_or("-".into(), |c| format!("{c:.1}µs")),
            o.server_rss_bytes.map_or("-".into(), mib),
            o.errors,
            o.error_samples.first().map_or(String::new(), |e| format!(" (first: {e})")),
        ),
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
                    "| {} {} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |\n",
                    row.scenario,
                    row.title,
                    row.target,
                    o.label,
                    o.rps,
                    ratio,
                    micros(o.latency_us.p50),
                    micros(o.latency_us.p99),
                    micros(o.latency_us.max),
                    o.server_cpu_us_per_request
                        .map_or("-".into(), |c| format!("{c:.1} µs")),
                    o.server_rss_bytes.map_or("-".into(), mib),
                    o.errors
                ));
            }
        }
    }
    out
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
    }
}
