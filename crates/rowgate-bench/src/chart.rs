//! Charts of a results file (SVG, plotters): throughput of every scenario step for each target
//! side by side, and Rowgate's latency percentiles. Log scales: peers differ by orders of
//! magnitude. Also a soak's samples over time.

use std::path::Path;

use anyhow::Context;
use plotters::prelude::*;

use crate::report::Row;

/// Colours by target, Rowgate first.
const PALETTE: &[RGBColor] = &[
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0x7f, 0x7f, 0x7f),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Writes `throughput.svg` and `latency.svg` into `dir`; returns their paths.
pub fn write(rows: &[Row], dir: &Path) -> anyhow::Result<Vec<std::path::PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let throughput = dir.join("throughput.svg");
    let latency = dir.join("latency.svg");
    throughput_chart(rows, &throughput)?;
    latency_chart(rows, &latency)?;
    Ok(vec![throughput, latency])
}

/// Targets in order of first appearance, Rowgate first.
fn targets(rows: &[Row]) -> Vec<String> {
    let mut out = vec!["rowgate".to_string()];
    for r in rows {
        if r.outcome.is_some() && !out.contains(&r.target) {
            out.push(r.target.clone());
        }
    }
    out
}

/// Scenario steps (scenario id + step label) with a measured request rate, in order.
fn steps(rows: &[Row]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for r in rows {
        if let Some(o) = &r.outcome {
            let key = (r.scenario.clone(), o.label.clone());
            if o.rps > 0.0 && !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

fn throughput_chart(rows: &[Row], path: &Path) -> anyhow::Result<()> {
    let targets = targets(rows);
    let steps = steps(rows);
    let band = targets.len() as f64 + 1.0;
    let height = 120 + (steps.len() as f64 * band * 9.0) as u32;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let y_max = steps.len() as f64 * band;
    // WebSocket fan-outs count frames, which may pass 300k per second
    let x_max = rows
        .iter()
        .filter_map(|r| r.outcome.as_ref().map(|o| o.rps * 1.5))
        .fold(300_000f64, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Requests per second (WebSocket: connections or frames; log scale), same machine, same run",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(220)
        .build_cartesian_2d((10f64..x_max).log_scale(), 0f64..y_max)?;
    chart
        .configure_mesh()
        .y_labels(0)
        .x_desc("per second")
        .draw()?;
    let names: Vec<String> = steps.iter().map(|(s, l)| format!("{s} {l}")).collect();
    row_labels(&root, &chart, &names, |i| i as f64 * band + band / 2.0)?;
    for (ti, target) in targets.iter().enumerate() {
        let colour = PALETTE[ti % PALETTE.len()];
        let bars: Vec<Rectangle<(f64, f64)>> = steps
            .iter()
            .enumerate()
            .filter_map(|(si, (scenario, label))| {
                let rps = rows.iter().find_map(|r| match &r.outcome {
                    Some(o)
                        if r.scenario == *scenario && o.label == *label && r.target == *target =>
                    {
                        Some(o.rps)
                    }
                    _ => None,
                })?;
                let y0 = si as f64 * band + 0.5 + ti as f64;
                Some(Rectangle::new(
                    [(10.0, y0), (rps.max(10.0), y0 + 0.9)],
                    colour.filled(),
                ))
            })
            .collect();
        chart
            .draw_series(bars)?
            .label(target.as_str())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// A latency series: its name, the percentile it plots, its colour.
type Series = (&'static str, fn(&crate::load::Latency) -> u64, RGBColor);

/// Writes each row's name in the left margin, right-aligned at its centre `centre(i)`.
fn row_labels<DB: DrawingBackend>(
    root: &DrawingArea<DB, plotters::coord::Shift>,
    chart: &ChartContext<
        '_,
        DB,
        Cartesian2d<
            plotters::coord::combinators::LogCoord<f64>,
            plotters::coord::types::RangedCoordf64,
        >,
    >,
    names: &[String],
    centre: impl Fn(usize) -> f64,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let style =
        ("sans-serif", 12)
            .into_font()
            .color(&BLACK)
            .pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Right,
                plotters::style::text_anchor::VPos::Center,
            ));
    let x0 = chart.x_range().start;
    for (i, name) in names.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(x0, centre(i)));
        root.draw(&Text::new(name.clone(), (px - 6, py), style.clone()))
            .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    }
    Ok(())
}

fn latency_chart(rows: &[Row], path: &Path) -> anyhow::Result<()> {
    let mine: Vec<(String, crate::load::Latency)> = rows
        .iter()
        .filter(|r| r.target == "rowgate")
        .filter_map(|r| {
            r.outcome
                .as_ref()
                .filter(|o| o.ok > 0)
                .map(|o| (format!("{} {}", r.scenario, o.label), o.latency_us))
        })
        .collect();
    let height = 120 + mine.len() as u32 * 26;
    let root = SVGBackend::new(path, (1000, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let labels: Vec<String> = mine.iter().map(|(l, _)| l.clone()).collect();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Rowgate latency: p50, p99, max (µs, log scale)",
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(220)
        .build_cartesian_2d(
            (10f64..20_000_000f64).log_scale(),
            0f64..mine.len().max(1) as f64,
        )?;
    chart.configure_mesh().y_labels(0).x_desc("µs").draw()?;
    row_labels(&root, &chart, &labels, |i| i as f64 + 0.5)?;
    let series: [Series; 3] = [
        ("p50", |l| l.p50, PALETTE[0]),
        ("p99", |l| l.p99, PALETTE[2]),
        ("max", |l| l.max, PALETTE[4]),
    ];
    for (name, pick, colour) in series {
        chart
            .draw_series(mine.iter().enumerate().map(|(i, (_, l))| {
                Circle::new((pick(l).max(10) as f64, i as f64 + 0.5), 5, colour.filled())
            }))?
            .label(name)
            .legend(move |(x, y)| Circle::new((x + 6, y), 5, colour.filled()));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}

/// A soak's samples as four panels over time (worker RSS, descriptors, subscriptions,
/// PostgreSQL backends when sampled), each from zero so that a flat line looks flat.
pub fn soak(samples: &[crate::soak::Sample], title: &str, path: &Path) -> anyhow::Result<()> {
    let panels: Vec<crate::soak::Figure> = crate::soak::FIGURES
        .into_iter()
        .filter(|(_, read)| samples.iter().any(|s| read(s).is_some()))
        .collect();
    let root = SVGBackend::new(path, (900, 40 + 200 * panels.len() as u32)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(title, ("sans-serif", 18))?;
    let last = samples.last().map_or(1.0, |s| s.minute).max(1.0);
    for ((name, read), area) in panels.iter().zip(root.split_evenly((panels.len(), 1))) {
        let points: Vec<(f64, f64)> = samples
            .iter()
            .filter_map(|s| Some((s.minute, read(s)?)))
            .collect();
        let top = points.iter().map(|p| p.1).fold(1.0, f64::max) * 1.2;
        let mut chart = ChartBuilder::on(&area)
            .caption(*name, ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(28)
            .y_label_area_size(60)
            .build_cartesian_2d(0f64..last, 0f64..top)?;
        chart.configure_mesh().x_desc("minutes").draw()?;
        chart.draw_series(LineSeries::new(points, PALETTE[0].stroke_width(2)))?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::{Latency, Mode, Outcome};

    #[test]
    fn a_soak_chart_has_a_panel_per_sampled_figure() {
        let samples: Vec<crate::soak::Sample> = (1..=10)
            .map(|n| crate::soak::Sample {
                minute: f64::from(n),
                worker_rss_mb: 30.0,
                fds: 1050,
                subscriptions: 1002,
                ..crate::soak::Sample::default()
            })
            .collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("soak.svg");
        soak(&samples, "SQLite soak", &path).expect("chart");
        let svg = std::fs::read_to_string(&path).expect("read");
        assert!(
            svg.contains("SQLite soak") && svg.contains("worker RSS, MB"),
            "{svg}"
        );
        assert!(svg.contains("realtime subscriptions"), "{svg}");
        // no backends were sampled (SQLite): no such panel
        assert!(!svg.contains("PostgreSQL backends"), "{svg}");
    }

    #[test]
    fn charts_are_written_with_every_target_and_step() {
        let row = |target: &str, label: &str, rps: f64| Row {
            scenario: "S1".into(),
            title: "hello".into(),
            target: target.into(),
            outcome: Some(Outcome {
                label: label.into(),
                mode: Mode::Closed,
                connections: 10,
                seconds: 1.0,
                ok: rps as u64,
                errors: 0,
                error_samples: vec![],
                rps,
                latency_us: Latency {
                    p50: 120,
                    p90: 200,
                    p99: 400,
                    p999: 900,
                    max: 12_000,
                },
                server_cpu_us_per_request: None,
                server_rss_bytes: None,
                server_peak_rss_bytes: None,
                server_rss_before_bytes: None,
                server_pss_bytes: None,
                by_request: Vec::new(),
            }),
            note: String::new(),
        };
        let rows = vec![
            row("rowgate", "c10", 70_000.0),
            row("nginx", "c10", 60_000.0),
            row("rowgate", "c64", 80_000.0),
        ];
        let dir = tempfile::tempdir().expect("tempdir");
        let files = write(&rows, dir.path()).expect("charts");
        let svg = std::fs::read_to_string(&files[0]).expect("read");
        assert!(
            svg.starts_with("<svg") && svg.contains("S1 c10") && svg.contains("nginx"),
            "{svg}"
        );
        let svg = std::fs::read_to_string(&files[1]).expect("read");
        assert!(svg.contains("p99") && svg.contains("S1 c64"), "{svg}");
    }
}
