//! A latency histogram of Prometheus's kind, lock-free: a count per bucket and the sum, each a
//! relaxed atomic add, rendered as the cumulative `_bucket`, `_sum` and `_count` lines when
//! scraped. Requests' latencies by route (`observe::routes`) and reads' waits for a reader
//! (`db::waits`) are such histograms.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, in seconds (and `+Inf`): from 100 µs, since most answers take
/// well under a millisecond, to 10 s.
pub const BUCKETS: [f64; 16] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Durations counted by bucket, and summed.
#[derive(Default)]
pub struct Histogram {
    /// Durations by bucket (not cumulative; the last is `+Inf`).
    buckets: [AtomicU64; BUCKETS.len() + 1],
    /// Durations summed, in nanoseconds.
    sum_ns: AtomicU64,
}

impl Histogram {
    /// Counts one duration.
    pub fn record(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = BUCKETS
            .iter()
            .position(|le| seconds <= *le)
            .unwrap_or(BUCKETS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(nanos(took), Ordering::Relaxed);
    }

    /// Appends the series of `name` labelled `labels` (`a="1",b="2"`): its cumulative buckets,
    /// sum (in seconds) and count.
    pub fn render(&self, out: &mut String, name: &str, labels: &str) {
        let mut cumulative = 0u64;
        for (i, bucket) in self.buckets.iter().enumerate() {
            cumulative += bucket.load(Ordering::Relaxed);
            let le = BUCKETS.get(i).map_or("+Inf".to_string(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(
            out,
            "{name}_sum{{{labels}}} {}",
            seconds(self.sum_ns.load(Ordering::Relaxed))
        );
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

/// A duration in nanoseconds (saturating).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Nanoseconds in seconds.
#[allow(clippy::cast_precision_loss)]
pub fn seconds(ns: u64) -> f64 {
    ns as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_and_inf_is_the_count() {
        let h = Histogram::default();
        for millis in [0, 3, 20_000] {
            h.record(Duration::from_millis(millis));
        }
        let mut text = String::new();
        h.render(&mut text, "x_seconds", "pid=\"7\"");
        for line in [
            "x_seconds_bucket{pid=\"7\",le=\"0.0001\"} 1",
            "x_seconds_bucket{pid=\"7\",le=\"0.005\"} 2",
            "x_seconds_bucket{pid=\"7\",le=\"10\"} 2",
            "x_seconds_bucket{pid=\"7\",le=\"+Inf\"} 3",
            "x_seconds_sum{pid=\"7\"} 20.003",
            "x_seconds_count{pid=\"7\"} 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
    }
}
