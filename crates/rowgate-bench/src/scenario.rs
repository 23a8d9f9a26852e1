//! Scenario files (`bench/scenarios/*.toml`): one seed benchmark each — its load steps, its
//! request mix for Rowgate, and the same questions asked of peers (nginx, Datasette, …) in their
//! own URL shapes. A scenario whose feature Rowgate does not have yet says so (`unavailable`).
//!
//! A step is HTTP load (`closed`, `open`, `fresh`: `seconds`, `requests`, `rate`, `think_ms`)
//! or a WebSocket run (`idle`, `connect`, `fanout`: `table`, `hold_seconds`, `writes`,
//! `in_flight`, `writers`; a fan-out's writes are the scenario's first `[[request]]`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

use crate::load::Mode;
use crate::spec::RequestSpec;

/// A scenario file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short id (`S1`).
    pub id: String,
    /// What it measures.
    pub title: String,
    /// The seed article and its figure.
    #[serde(default)]
    pub seed: String,
    /// The DESIGN §6 target, as text for the report.
    #[serde(default)]
    pub target: String,
    /// The target that runs `request` (default `rowgate`; `rowgate-pg` for Rowgate on PostgreSQL,
    /// `rowgate-workers` for the Rowgate with many workers that bench/run starts for S8).
    #[serde(default = "rowgate")]
    pub on: String,
    /// Empty when runnable; otherwise why not (a feature that has not landed).
    #[serde(default)]
    pub unavailable: String,
    /// A footprint scenario: no load, the server is watched this many seconds.
    #[serde(default)]
    pub idle_seconds: Option<f64>,
    /// Load steps, run in order.
    #[serde(default)]
    pub load: Vec<Step>,
    /// Rowgate's request mix.
    #[serde(default)]
    pub request: Vec<RequestSpec>,
    /// The same scenario on peers: their own request mix.
    #[serde(default)]
    pub peers: BTreeMap<String, PeerMix>,
}

/// One load step.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Label in reports (default: mode and connections).
    #[serde(default)]
    pub label: String,
    /// Pacing, or the WebSocket run.
    #[serde(default = "closed")]
    pub mode: Mode,
    /// Client connections (fan-out: subscribers).
    #[serde(default = "ten")]
    pub connections: usize,
    /// Seconds to run.
    #[serde(default)]
    pub seconds: Option<f64>,
    /// Requests to send.
    #[serde(default)]
    pub requests: Option<u64>,
    /// Open loop: requests per second.
    #[serde(default)]
    pub rate: Option<f64>,
    /// Think time in milliseconds per client group (client `i` uses `think_ms[i % len]`).
    #[serde(default)]
    pub think_ms: Vec<u64>,
    /// WebSocket runs: the realtime table every connection subscribes to.
    #[serde(default)]
    pub table: Option<String>,
    /// Idle: seconds the subscribed connections are held before they close.
    #[serde(default)]
    pub hold_seconds: Option<f64>,
    /// Fan-out: writes sent one after the other (each sets unique values).
    #[serde(default)]
    pub writes: Option<u64>,
    /// Fan-out: writers sending them at once, each one write after the other (default 1).
    #[serde(default)]
    pub writers: Option<usize>,
    /// WebSocket runs: most connections opening at once (default [`DEFAULT_IN_FLIGHT`]).
    #[serde(default)]
    pub in_flight: Option<usize>,
}

/// Connections opening at once in a WebSocket run, unless a step says otherwise: below the
/// server's listen backlog (128, tokio's default), so that the run measures the server's work
/// rather than the kernel dropping connections from a full accept queue (a dropped SYN is sent
/// again a second later).
pub const DEFAULT_IN_FLIGHT: usize = 100;

/// Quick mode: most WebSocket connections per step (idle, connect).
const QUICK_SOCKETS: usize = 200;
/// Quick mode: most fan-out subscribers.
const QUICK_SUBSCRIBERS: usize = 20;
/// Quick mode: most fan-out writes.
const QUICK_WRITES: u64 = 50;

fn rowgate() -> String {
    "rowgate".into()
}

fn closed() -> Mode {
    Mode::Closed
}

fn ten() -> usize {
    10
}

/// A peer's request mix for a scenario.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PeerMix {
    /// Its requests.
    pub request: Vec<RequestSpec>,
}

impl Scenario {
    /// Reads a scenario file.
    pub fn load(path: &Path) -> anyhow::Result<Scenario> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let s: Scenario =
            toml::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        if s.unavailable.is_empty() && s.idle_seconds.is_none() {
            anyhow::ensure!(!s.load.is_empty(), "{}: no [[load]] steps", path.display());
            for step in &s.load {
                step.check()
                    .with_context(|| format!("{}: step {}", path.display(), step.label()))?;
            }
            let needs_requests = s
                .load
                .iter()
                .any(|step| !step.mode.is_websocket() || step.mode == Mode::Fanout);
            anyhow::ensure!(
                !needs_requests || !s.request.is_empty(),
                "{}: no [[request]]",
                path.display()
            );
        }
        Ok(s)
    }

    /// The request mix for `target` (`rowgate` or a peer), if it applies.
    pub fn mix_for(&self, target: &str) -> Option<&[RequestSpec]> {
        // `rowgate:old`, `rowgate:new`: two builds of the same server, side by side (bench/ab)
        let own = target.split_once(':').map_or(target, |(name, _)| name);
        if own == self.on {
            Some(&self.request)
        } else {
            self.peers.get(target).map(|p| p.request.as_slice())
        }
    }
}

impl Step {
    /// The step's label.
    pub fn label(&self) -> String {
        if !self.label.is_empty() {
            return self.label.clone();
        }
        let mode = self.mode.name();
        match (self.mode, self.writes) {
            (Mode::Fanout, Some(writes)) => match self.writers {
                Some(writers) if writers > 1 => {
                    format!("{mode} s{} w{writes} x{writers}", self.connections)
                }
                _ => format!("{mode} s{} w{writes}", self.connections),
            },
            _ => format!("{mode} c{}", self.connections),
        }
    }

    /// Refuses fields that do not belong to the step's mode, and WebSocket runs that lack theirs.
    pub fn check(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.connections > 0, "connections must be at least 1");
        let http_fields = self.seconds.is_some()
            || self.requests.is_some()
            || self.rate.is_some()
            || !self.think_ms.is_empty();
        let ws_fields = self.table.is_some()
            || self.hold_seconds.is_some()
            || self.writes.is_some()
            || self.writers.is_some()
            || self.in_flight.is_some();
        let mode = self.mode.name();
        if !self.mode.is_websocket() {
            anyhow::ensure!(
                !ws_fields,
                "table, hold_seconds, writes, writers and in_flight are for WebSocket modes, not {mode}"
            );
            return Ok(());
        }
        anyhow::ensure!(
            !http_fields,
            "seconds, requests, rate and think_ms are for HTTP modes, not {mode}"
        );
        anyhow::ensure!(self.table.is_some(), "{mode} needs a table to subscribe to");
        anyhow::ensure!(self.in_flight != Some(0), "in_flight must be at least 1");
        match self.hold_seconds {
            Some(h) if self.mode == Mode::Idle => {
                anyhow::ensure!(
                    h.is_finite() && h >= 0.0,
                    "hold_seconds {h}: not a duration"
                );
            }
            None if self.mode == Mode::Idle => bail!("idle needs hold_seconds"),
            Some(_) => bail!("hold_seconds is for idle, not {mode}"),
            None => {}
        }
        match self.writes {
            Some(w) if self.mode == Mode::Fanout => {
                anyhow::ensure!(w > 0, "writes must be at least 1");
            }
            None if self.mode == Mode::Fanout => bail!("fanout needs writes"),
            Some(_) => bail!("writes is for fanout, not {mode}"),
            None => {}
        }
        match self.writers {
            Some(0) => bail!("writers must be at least 1"),
            Some(_) if self.mode != Mode::Fanout => bail!("writers is for fanout, not {mode}"),
            _ => {}
        }
        Ok(())
    }

    /// Its run time, shortened in quick mode.
    pub fn duration(&self, quick: bool) -> Option<Duration> {
        let seconds = match (self.seconds, quick) {
            (Some(s), true) => Some(s.min(1.0)),
            (None, true) if self.requests.is_none() => Some(1.0),
            (s, _) => s,
        };
        seconds.map(Duration::from_secs_f64)
    }

    /// Its connections, fewer in quick mode: at most 64 HTTP connections,
    /// [`QUICK_SOCKETS`] WebSockets, [`QUICK_SUBSCRIBERS`] fan-out subscribers.
    pub fn connections(&self, quick: bool) -> usize {
        let cap = match self.mode {
            _ if !quick => usize::MAX,
            Mode::Closed | Mode::Open | Mode::Fresh => 64,
            Mode::Idle | Mode::Connect => QUICK_SOCKETS,
            Mode::Fanout => QUICK_SUBSCRIBERS,
        };
        self.connections.min(cap)
    }

    /// Idle: how long the connections are held, at most a second in quick mode.
    pub fn hold(&self, quick: bool) -> Duration {
        let seconds = self.hold_seconds.unwrap_or(0.0);
        Duration::from_secs_f64(if quick { seconds.min(1.0) } else { seconds })
    }

    /// Fan-out: its writes, at most [`QUICK_WRITES`] in quick mode.
    pub fn writes(&self, quick: bool) -> u64 {
        let writes = self.writes.unwrap_or(0);
        if quick {
            writes.min(QUICK_WRITES)
        } else {
            writes
        }
    }

    /// Its request count, shortened in quick mode.
    pub fn requests(&self, quick: bool) -> Option<u64> {
        match (self.requests, quick) {
            (Some(n), true) => Some(n.min(200)),
            (n, _) => n,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> anyhow::Result<Scenario> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("s.toml");
        std::fs::write(&path, text)?;
        Scenario::load(&path)
    }

    const HEAD: &str = "id = \"S0\"\ntitle = \"t\"\n";

    #[test]
    fn websocket_steps_carry_their_fields_and_shrink_in_quick_mode() {
        let s = parse(&format!(
            "{HEAD}[[load]]\nmode = \"idle\"\nconnections = 100000\ntable = \"team\"\nhold_seconds = 5\n\
             [[load]]\nmode = \"fanout\"\nconnections = 1000\ntable = \"team\"\nwrites = 200\nin_flight = 50\n\
             [[load]]\nmode = \"fanout\"\nconnections = 100\ntable = \"team\"\nwrites = 800\nwriters = 8\n\
             [[request]]\nmethod = \"PATCH\"\npath = \"/api/team?team_id=eq.1\"\n"
        ))
        .expect("parse");
        let (idle, fanout) = (&s.load[0], &s.load[1]);
        assert_eq!(idle.label(), "idle c100000");
        assert_eq!(idle.connections(false), 100_000);
        assert_eq!(idle.connections(true), QUICK_SOCKETS);
        assert_eq!(idle.hold(true), Duration::from_secs(1));
        assert_eq!(idle.hold(false), Duration::from_secs(5));
        assert_eq!(fanout.label(), "fanout s1000 w200");
        assert_eq!(fanout.connections(true), QUICK_SUBSCRIBERS);
        assert_eq!(
            (fanout.writes(false), fanout.writes(true)),
            (200, QUICK_WRITES)
        );
        assert_eq!(fanout.in_flight, Some(50));
        assert_eq!(fanout.writers, None);
        let concurrent = &s.load[2];
        assert_eq!(concurrent.label(), "fanout s100 w800 x8");
        assert_eq!(concurrent.writers, Some(8));
    }

    #[test]
    fn modes_are_written_by_their_names() {
        #[derive(Deserialize)]
        struct Line {
            mode: Mode,
        }
        for mode in Mode::ALL {
            let line: Line = toml::from_str(&format!("mode = \"{}\"", mode.name())).expect("mode");
            assert_eq!(line.mode, mode);
        }
    }

    #[test]
    fn a_websocket_scenario_without_writes_needs_no_request() {
        let s = parse(&format!(
            "{HEAD}[[load]]\nmode = \"connect\"\nconnections = 10\ntable = \"team\"\n"
        ))
        .expect("parse");
        assert!(s.request.is_empty() && s.load[0].mode.is_websocket());
    }

    #[test]
    fn fields_of_the_other_kind_of_step_are_refused() {
        for step in [
            "mode = \"idle\"\ntable = \"team\"",
            "mode = \"idle\"\nhold_seconds = 1",
            "mode = \"idle\"\ntable = \"team\"\nhold_seconds = 1\nseconds = 3",
            "mode = \"connect\"\ntable = \"team\"\nwrites = 3",
            "mode = \"connect\"\ntable = \"team\"\nin_flight = 0",
            "mode = \"fanout\"\ntable = \"team\"",
            "mode = \"fanout\"\ntable = \"team\"\nwrites = 0",
            "mode = \"fanout\"\ntable = \"team\"\nwrites = 3\nwriters = 0",
            "mode = \"connect\"\ntable = \"team\"\nwriters = 2",
            "mode = \"connect\"\ntable = \"team\"\nwrites = 0",
            "mode = \"idle\"\ntable = \"team\"\nhold_seconds = -1",
            "mode = \"closed\"\ntable = \"team\"",
            "mode = \"closed\"\nconnections = 0",
        ] {
            let text = format!("{HEAD}[[load]]\n{step}\n[[request]]\npath = \"/\"\n");
            assert!(parse(&text).is_err(), "{step}");
        }
        let fanout_without_write =
            format!("{HEAD}[[load]]\nmode = \"fanout\"\ntable = \"team\"\nwrites = 3\n");
        assert!(parse(&fanout_without_write).is_err());
    }
}
