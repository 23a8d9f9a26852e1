//! `rowgate-bench`: Rowgate's load generator and scenario runner.
//!
//! - `load`: one run described on the command line (closed loop, open loop or fresh connections;
//!   WebSocket idle, connect or fan-out);
//! - `scenario`: the steps of a scenario file against Rowgate and any peers given;
//! - `soak`: a mixed load held for a long time against a running server, failing when anything
//!   grows, errs or is lost (issue 22; `bench/soak` starts the servers for it);
//! - `report`: the markdown table of a results file; `chart`: its SVG charts;
//! - `fanout-ceiling`: the frames per second the simplest server writes to N loopback sockets
//!   (what S10 is judged against);
//! - `ws-shard`, `ceiling-client` (hidden): client processes, started by the runs themselves.
//!
//! Modules: [`spec`] (request templates and checks), [`load`] (the HTTP engine), [`ws`] (the
//! WebSocket runs), [`procstat`] (server CPU and memory), [`scenario`] (scenario files),
//! [`soak`] (the soak), [`ceiling`] (the fan-out ceiling), [`report`] (results), [`chart`]
//! (charts).

mod ceiling;
mod chart;
mod load;
mod procstat;
mod report;
mod scenario;
mod soak;
mod spec;
mod ws;

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};

use load::{Mode, Plan};
use report::Row;
use spec::{Check, FieldCheck, Request, RequestSpec};

/// Rowgate's load generator and scenario runner.
#[derive(Parser, Debug)]
#[command(name = "rowgate-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// One run described by flags.
    Load(Box<LoadArgs>),
    /// Run a scenario file against Rowgate and the peers given.
    Scenario(ScenarioArgs),
    /// Hold a mixed load against a running server and check that nothing grows or is lost.
    Soak(Box<SoakArgs>),
    /// Print the markdown table of a results file.
    Report {
        /// JSON-lines results file.
        file: PathBuf,
    },
    /// Draw the charts of a results file (throughput.svg, latency.svg).
    Chart {
        /// JSON-lines results file.
        file: PathBuf,
        /// Folder to write the SVG files into.
        dir: PathBuf,
    },
    /// The fan-out ceiling of this machine: the simplest server writing frames to N loopback
    /// sockets, one write per frame per socket, to a client process that only reads.
    FanoutCeiling {
        /// Sockets (one client process holds them all: at most 15,000).
        #[arg(short = 'c', long, default_value_t = 1000)]
        connections: usize,
        /// Frames written to each socket.
        #[arg(long, default_value_t = 200)]
        events: usize,
        /// Bytes per frame.
        #[arg(long, default_value_t = 200)]
        bytes: usize,
        /// One task per socket woken through a channel per frame (as Rowgate's sessions), not
        /// one loop over all sockets.
        #[arg(long)]
        tasks: bool,
    },
    /// The client process of a fan-out ceiling run (started by it).
    #[command(hide = true)]
    CeilingClient {
        /// The server's address.
        addr: String,
        /// Sockets to open.
        connections: usize,
        /// Bytes each reads before it answers.
        total: usize,
    },
    /// A client process of a WebSocket run (started by the run, driven over stdin).
    #[command(hide = true)]
    WsShard {
        /// Its share of the run, as JSON.
        plan: String,
    },
}

#[derive(Args, Debug)]
struct LoadArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    url: String,
    /// Path and query; `{name}` is replaced by a --var.
    #[arg(long, default_value = "/")]
    path: String,
    /// closed, open or fresh (HTTP); idle, connect or fanout (WebSocket at /realtime, where the
    /// request described by the other flags is a fan-out's write).
    #[arg(long, default_value = "closed")]
    mode: String,
    /// Client connections (fan-out: subscribers).
    #[arg(short = 'c', long, default_value_t = 10)]
    connections: usize,
    /// WebSocket: the realtime table to subscribe to.
    #[arg(long, default_value = "team")]
    table: String,
    /// Idle: seconds to hold the connections.
    #[arg(long)]
    hold_seconds: Option<f64>,
    /// Fan-out: writes to send.
    #[arg(long)]
    writes: Option<u64>,
    /// Fan-out: writers sending them at once.
    #[arg(long, default_value_t = 1)]
    writers: usize,
    /// WebSocket: most connections opening at once.
    #[arg(long, default_value_t = scenario::DEFAULT_IN_FLIGHT)]
    in_flight: usize,
    /// Seconds to run.
    #[arg(short = 'd', long)]
    seconds: Option<f64>,
    /// Requests to send.
    #[arg(short = 'n', long)]
    requests: Option<u64>,
    /// Open loop: requests per second.
    #[arg(long)]
    rate: Option<f64>,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Header `Name: value` (repeatable).
    #[arg(short = 'H', long = "header")]
    headers: Vec<String>,
    /// Request body (a template).
    #[arg(long)]
    body: Option<String>,
    /// Variable `name=LO..HI`, `name=A..Z` or `name=seq` (repeatable).
    #[arg(long = "var")]
    vars: Vec<String>,
    /// Expected status.
    #[arg(long)]
    status: Option<u16>,
    /// Expected start of the content type.
    #[arg(long)]
    content_type: Option<String>,
    /// Expected length of a JSON array body.
    #[arg(long)]
    json_len: Option<usize>,
    /// Expected JSON field `field=value` (value is a template).
    #[arg(long)]
    json_field: Option<String>,
    /// Text the body must contain.
    #[arg(long)]
    contains: Option<String>,
    /// Server process id to read CPU and RSS from (repeatable).
    #[arg(long = "pid")]
    pids: Vec<u32>,
    /// Label of the row.
    #[arg(long, default_value = "load")]
    label: String,
    /// Append the result as a JSON line to this file.
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Args, Debug)]
struct ScenarioArgs {
    /// Scenario files.
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// `name=URL` of a target (`rowgate=http://127.0.0.1:8080`, `nginx=…`; repeatable).
    #[arg(long = "target", required = true)]
    targets: Vec<String>,
    /// `name=PID` of a target's server process (repeatable; several per target sum up).
    #[arg(long = "pid")]
    pids: Vec<String>,
    /// A few seconds per step at most (CI smoke run: every scenario runs and checks answers).
    #[arg(long)]
    quick: bool,
    /// Append results as JSON lines to this file.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Exit with an error when any answer fails its checks.
    #[arg(long)]
    strict: bool,
}

#[derive(Args, Debug)]
struct SoakArgs {
    /// Server base URL, e.g. http://127.0.0.1:8080.
    #[arg(long)]
    url: String,
    /// The server's supervisor process id (its workers are sampled).
    #[arg(long)]
    pid: u32,
    /// Minutes to hold the load.
    #[arg(long, default_value_t = 60.0)]
    minutes: f64,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30.0)]
    sample_seconds: f64,
    /// Minute from which the baseline is taken (at most a third of the run).
    #[arg(long, default_value_t = 10.0)]
    baseline_minute: f64,
    /// Idle WebSockets held.
    #[arg(long, default_value_t = 1000)]
    idle_websockets: usize,
    /// Reads per second.
    #[arg(long, default_value_t = 200.0)]
    reads_per_s: f64,
    /// Inserts per second.
    #[arg(long, default_value_t = 10.0)]
    writes_per_s: f64,
    /// Requests per second on new connections.
    #[arg(long, default_value_t = 10.0)]
    fresh_per_s: f64,
    /// Minutes between rotations of the client's secret.
    #[arg(long, default_value_t = 5.0)]
    rotate_minutes: f64,
    /// The OAuth client (role `writer`, short token lifetime) and its secret.
    #[arg(long)]
    client_id: String,
    #[arg(long)]
    client_secret: String,
    /// Shell command `rowgate clients {action} NAME --db …`; `{action}` is `rotate --json` or
    /// `retire`.
    #[arg(long)]
    clients_command: String,
    /// Shell command printing the database's backend count (PostgreSQL).
    #[arg(long)]
    backends_command: Option<String>,
    /// Folder for samples.jsonl, summary.md and soak.svg.
    #[arg(long)]
    out: PathBuf,
    /// Title of the chart.
    #[arg(long, default_value = "Rowgate soak")]
    title: String,
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rowgate-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rowgate-bench: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Load(args) => load_command(*args).await,
        Command::Scenario(args) => scenario_command(args).await,
        Command::Soak(args) => soak_command(*args).await,
        Command::Report { file } => {
            print!("{}", report::markdown(&report::read(&file)?));
            Ok(())
        }
        Command::Chart { file, dir } => {
            for path in chart::write(&report::read(&file)?, &dir)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
        Command::WsShard { plan } => ws::shard(&plan).await,
        Command::FanoutCeiling {
            connections,
            events,
            bytes,
            tasks,
        } => {
            let c = ceiling::run(connections, events, bytes, tasks).await?;
            let seconds = c.elapsed.as_secs_f64();
            #[allow(clippy::cast_precision_loss)]
            let frames = c.frames as f64;
            println!(
                "fan-out ceiling ({}): {} frames of {bytes} B to {connections} sockets in {seconds:.3} s: {:.0} frames/s, {:.2} µs server CPU per frame",
                if tasks { "a task per socket" } else { "one loop" },
                c.frames,
                frames / seconds,
                c.cpu_seconds * 1e6 / frames
            );
            Ok(())
        }
        Command::CeilingClient {
            addr,
            connections,
            total,
        } => ceiling::client(&addr, connections, total).await,
    }
}

async fn soak_command(a: SoakArgs) -> anyhow::Result<()> {
    let (addr, host) = resolve(&a.url)?;
    let minutes = |m: f64| Duration::from_secs_f64(m.max(0.0) * 60.0);
    std::fs::create_dir_all(&a.out).with_context(|| format!("creating {}", a.out.display()))?;
    let samples_path = a.out.join("samples.jsonl");
    let _ = std::fs::remove_file(&samples_path);
    let plan = soak::Plan {
        addr,
        host,
        supervisor: a.pid,
        duration: minutes(a.minutes),
        sample_every: Duration::from_secs_f64(a.sample_seconds.max(1.0)),
        baseline_at: minutes(a.baseline_minute),
        idle_websockets: a.idle_websockets,
        reads_per_s: a.reads_per_s,
        writes_per_s: a.writes_per_s,
        fresh_per_s: a.fresh_per_s,
        rotate_every: minutes(a.rotate_minutes),
        client_id: a.client_id,
        client_secret: a.client_secret,
        clients_command: a.clients_command,
        backends_command: a.backends_command,
        out: samples_path,
    };
    let outcome = soak::run(plan).await?;
    print!("{}", outcome.summary);
    std::fs::write(a.out.join("summary.md"), &outcome.summary)?;
    let chart = a.out.join("soak.svg");
    chart::soak(&outcome.samples, &a.title, &chart)?;
    println!("wrote {}", chart.display());
    if !outcome.failures.is_empty() {
        bail!("the soak failed ({} findings)", outcome.failures.len());
    }
    Ok(())
}

/// `http://host:port` → (socket address, Host header value).
fn resolve(url: &str) -> anyhow::Result<(SocketAddr, String)> {
    let rest = url
        .strip_prefix("http://")
        .with_context(|| format!("{url}: only http:// URLs"))?;
    let authority = rest.split('/').next().unwrap_or(rest);
    let addr = authority
        .to_socket_addrs()
        .with_context(|| format!("resolving {authority}"))?
        .next()
        .with_context(|| format!("{authority} has no address"))?;
    if !addr.ip().is_loopback() {
        bail!("{addr}: benchmarks only target loopback addresses");
    }
    Ok((addr, authority.to_string()))
}

fn parse_mode(mode: &str) -> anyhow::Result<Mode> {
    Mode::ALL
        .into_iter()
        .find(|m| m.name() == mode)
        .with_context(|| {
            let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
            format!("mode {mode:?}: one of {}", names.join(", "))
        })
}

async fn load_command(a: LoadArgs) -> anyhow::Result<()> {
    let (addr, host) = resolve(&a.url)?;
    let vars = a
        .vars
        .iter()
        .map(|v| {
            v.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--var {v}: name=range"))
        })
        .collect::<anyhow::Result<BTreeMap<_, _>>>()?;
    let json_field = a
        .json_field
        .as_deref()
        .map(|f| {
            f.split_once('=')
                .map(|(field, value)| FieldCheck {
                    field: field.into(),
                    value: value.into(),
                })
                .with_context(|| format!("--json-field {f}: field=value"))
        })
        .transpose()?;
    let spec = RequestSpec {
        method: a.method,
        path: a.path,
        headers: a.headers,
        body: a.body,
        vars,
        weight: 1,
        check: Check {
            status: a.status,
            or_status: None,
            content_type: a.content_type,
            json_len: a.json_len,
            array_at: None,
            json_field,
            contains: a.contains,
            matches: None,
        },
    };
    let mode = parse_mode(&a.mode)?;
    let outcome = if mode.is_websocket() {
        ws::run(ws::Plan {
            label: a.label.clone(),
            mode,
            addr,
            host,
            connections: a.connections,
            table: a.table,
            hold: Duration::try_from_secs_f64(a.hold_seconds.unwrap_or(0.0))
                .context("--hold-seconds")?,
            writes: a.writes.unwrap_or(0),
            writers: a.writers,
            write: (mode == Mode::Fanout).then_some(spec),
            in_flight: a.in_flight,
            pids: a.pids,
            progress: true,
        })
        .await?
    } else {
        load::run(Plan {
            label: a.label.clone(),
            addr,
            host,
            mode,
            connections: a.connections,
            duration: a.seconds.map(Duration::from_secs_f64),
            requests: a.requests,
            rate: a.rate,
            think: Vec::new(),
            mix: vec![Request::new(spec)?],
            pids: a.pids,
            progress: true,
        })
        .await?
    };
    let row = Row {
        scenario: "-".into(),
        title: a.label,
        target: a.url,
        outcome: Some(outcome),
        note: String::new(),
    };
    println!("{}", report::line(&row));
    if let Some(out) = &a.out {
        report::append(out, &row)?;
    }
    Ok(())
}

fn pairs(items: &[String], what: &str) -> anyhow::Result<Vec<(String, String)>> {
    items
        .iter()
        .map(|i| {
            i.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .with_context(|| format!("--{what} {i}: name=value"))
        })
        .collect()
}

fn pids_of(pids: &[(String, String)], target: &str) -> anyhow::Result<Vec<u32>> {
    pids.iter()
        .filter(|(t, _)| t == target)
        .map(|(_, p)| p.parse::<u32>().with_context(|| format!("pid {p}")))
        .collect()
}

/// Waits (up to two minutes) until every target's processes are quiet before a step of
/// `scenario` on `target` is measured, and says so when it had to wait long or gave up.
async fn settle(pids: &[(String, String)], scenario: &str, target: &str) {
    let every: Vec<u32> = pids.iter().filter_map(|(_, p)| p.parse().ok()).collect();
    match procstat::wait_quiet(&every, Duration::from_secs(120)).await {
        Some(waited) if waited > Duration::from_secs(5) => eprintln!(
            "{scenario} {target}: waited {:.0} s for the servers to be quiet",
            waited.as_secs_f64()
        ),
        Some(_) => {}
        None => eprintln!(
            "{scenario} {target}: the servers were still busy after 120 s; measuring anyway"
        ),
    }
}

async fn scenario_command(a: ScenarioArgs) -> anyhow::Result<()> {
    let targets = pairs(&a.targets, "target")?;
    let pids = pairs(&a.pids, "pid")?;
    let mut failed = 0u64;
    for file in &a.files {
        let scenario = scenario::Scenario::load(file)?;
        for (target, url) in &targets {
            let emit = |row: &Row| -> anyhow::Result<()> {
                println!("{}", report::line(row));
                if let Some(out) = &a.out {
                    report::append(out, row)?;
                }
                Ok(())
            };
            let blank = |note: String| Row {
                scenario: scenario.id.clone(),
                title: scenario.title.clone(),
                target: target.clone(),
                outcome: None,
                note,
            };
            if !scenario.unavailable.is_empty() {
                if target == "rowgate" {
                    emit(&blank(scenario.unavailable.clone()))?;
                }
                continue;
            }
            if let Some(idle) = scenario.idle_seconds {
                if target == "rowgate" {
                    let seconds = if a.quick { idle.min(1.0) } else { idle };
                    let target_pids = pids_of(&pids, target)?;
                    let mut row = blank(String::new());
                    row.outcome =
                        Some(load::idle(&target_pids, Duration::from_secs_f64(seconds)).await?);
                    emit(&row)?;
                }
                continue;
            }
            let Some(mix) = scenario.mix_for(target) else {
                continue;
            };
            let (addr, host) = resolve(url)?;
            let mix = mix
                .iter()
                .cloned()
                .map(Request::new)
                .collect::<anyhow::Result<Vec<_>>>()
                .with_context(|| format!("{}: requests for {target}", file.display()))?;
            let target_pids = pids_of(&pids, target)?;
            for step in &scenario.load {
                if !a.quick {
                    settle(&pids, &scenario.id, target).await;
                }
                let outcome = if step.mode.is_websocket() {
                    ws::run(ws::Plan {
                        label: step.label(),
                        mode: step.mode,
                        addr,
                        host: host.clone(),
                        connections: step.connections(a.quick),
                        table: step.table.clone().unwrap_or_default(),
                        hold: step.hold(a.quick),
                        writes: step.writes(a.quick),
                        writers: step.writers.unwrap_or(1),
                        write: mix.first().map(|r| r.spec.clone()),
                        in_flight: step.in_flight.unwrap_or(scenario::DEFAULT_IN_FLIGHT),
                        pids: target_pids.clone(),
                        progress: !a.quick,
                    })
                    .await?
                } else {
                    load::run(Plan {
                        label: step.label(),
                        addr,
                        host: host.clone(),
                        mode: step.mode,
                        connections: step.connections(a.quick),
                        duration: step.duration(a.quick),
                        requests: step.requests(a.quick),
                        rate: step.rate,
                        think: step
                            .think_ms
                            .iter()
                            .map(|ms| Duration::from_millis(*ms))
                            .collect(),
                        mix: mix.clone(),
                        pids: target_pids.clone(),
                        progress: !a.quick,
                    })
                    .await?
                };
                failed += outcome.errors;
                let mut row = blank(String::new());
                row.outcome = Some(outcome);
                emit(&row)?;
            }
        }
    }
    if a.strict && failed > 0 {
        bail!("{failed} answers failed their checks");
    }
    Ok(())
}
