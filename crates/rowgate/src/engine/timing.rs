//! `Server-Timing`: how long each stage of one request took, under PostgREST's names — `jwt`
//! (authentication), `parse` (the body read included), `plan`, `transaction` (the database's
//! work), `response` (encoding) — when `rest.server_timing` is on (as PostgREST's
//! `server-timing-enabled`). Off, it costs nothing: no clock is read.

use std::time::{Duration, Instant};

/// The stages of one request, timed.
pub struct Timing {
    /// When the current stage began; `None` when timing is off.
    since: Option<Instant>,
    stages: Vec<(&'static str, Duration)>,
}

impl Timing {
    /// Starts timing the first stage, when `on`.
    pub fn start(on: bool) -> Timing {
        Timing {
            since: on.then(Instant::now),
            stages: Vec::new(),
        }
    }

    /// Ends `stage` (its time is added to an earlier run of the same stage) and starts the next.
    pub fn mark(&mut self, stage: &'static str) {
        let Some(since) = self.since else {
            return;
        };
        let now = Instant::now();
        let took = now - since;
        match self.stages.iter_mut().find(|(name, _)| *name == stage) {
            Some((_, total)) => *total += took,
            None => self.stages.push((stage, took)),
        }
        self.since = Some(now);
    }

    /// The header's value (`jwt;dur=0.012, parse;dur=…`, in milliseconds), when timing is on.
    pub fn header(&self) -> Option<String> {
        self.since?;
        Some(
            self.stages
                .iter()
                .map(|(name, took)| format!("{name};dur={:.3}", took.as_secs_f64() * 1000.0))
                .collect::<Vec<_>>()
                .join(", "),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_named_in_order_and_summed() {
        let mut t = Timing::start(true);
        for stage in [
            "jwt",
            "parse",
            "plan",
            "transaction",
            "plan",
            "transaction",
            "response",
        ] {
            t.mark(stage);
        }
        let header = t.header().expect("on");
        let names: Vec<&str> = header
            .split(", ")
            .map(|s| s.split(';').next().unwrap_or(""))
            .collect();
        assert_eq!(names, ["jwt", "parse", "plan", "transaction", "response"]);
        assert!(header.split(", ").all(|s| s.contains(";dur=")), "{header}");
        let mut off = Timing::start(false);
        off.mark("jwt");
        assert_eq!(off.header(), None);
    }
}
