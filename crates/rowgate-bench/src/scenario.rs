//! Scenario files (`bench/scenarios/*.toml`): one seed benchmark each — its load steps, its
//! request mix for Rowgate, and the same questions asked of peers (nginx, Datasette, …) in their
//! own URL shapes. A scenario whose feature Rowgate does not have yet says so (`available`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
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
    /// The target that runs `request` (default `rowgate`; `rowgate-pg` for Rowgate on PostgreSQL).
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
    /// Pacing.
    #[serde(default = "closed")]
    pub mode: Mode,
    /// Client connections.
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
}

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
            anyhow::ensure!(!s.request.is_empty(), "{}: no [[request]]", path.display());
        }
        Ok(s)
    }

    /// The request mix for `target` (`rowgate` or a peer), if it applies.
    pub fn mix_for(&self, target: &str) -> Option<&[RequestSpec]> {
        if target == self.on {
            Some(&self.request)
        } else {
            self.peers.get(target).map(|p| p.request.as_slice())
        }
    }
}

impl Step {
    /// The step's label.
    pub fn label(&self) -> String {
        if self.label.is_empty() {
            let mode = match self.mode {
                Mode::Closed => "closed",
                Mode::Open => "open",
                Mode::Fresh => "fresh",
            };
            format!("{mode} c{}", self.connections)
        } else {
            self.label.clone()
        }
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

    /// Its connections, at most 64 in quick mode.
    pub fn connections(&self, quick: bool) -> usize {
        if quick {
            self.connections.min(64)
        } else {
            self.connections
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
