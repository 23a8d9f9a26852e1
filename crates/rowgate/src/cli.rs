//! The command line (clap): `serve`, `config check|dump`, `demo init`. Flags override environment
//! variables, which override the config file (see [`crate::config`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};

use crate::app::App;
use crate::config::{self, Config, DbTarget, Layer};
use crate::db::{Database, DbOptions, PgOptions};
use crate::{demo, resources, server};

/// Rowgate: a SQL database as a PostgREST-compatible REST API.
#[derive(Parser, Debug)]
#[command(name = "rowgate", version, about)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the database over HTTP.
    Serve(ServeArgs),
    /// Check or print the effective configuration.
    Config {
        #[command(subcommand)]
        action: ConfigAction,
    },
    /// The demo database.
    Demo {
        #[command(subcommand)]
        action: DemoAction,
    },
    /// Database set-up.
    Db {
        #[command(subcommand)]
        action: DbAction,
    },
    /// Print the supervisor's state (workers, pids, restarts, uptime) from its pid file.
    Status {
        /// The pid file `serve --pid-file` writes.
        #[arg(long)]
        pid_file: PathBuf,
    },
    /// OAuth2 clients (client-credentials tokens at POST /oauth/token).
    Clients {
        #[command(subcommand)]
        action: ClientsAction,
    },
}

#[derive(Subcommand, Debug)]
enum ClientsAction {
    /// Add a client; prints its client_id and client_secret (shown once).
    Add {
        /// The client's name.
        name: String,
        /// The role its tokens carry.
        #[arg(long)]
        role: String,
        /// Token lifetime in seconds (at most auth.max_token_ttl_s).
        #[arg(long, default_value_t = 3600)]
        ttl: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// List the clients (never their secrets).
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Give a client a new secret; the current one keeps working until `retire`.
    Rotate {
        /// The client's name.
        name: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Stop a client's previous secret, and the tokens issued with it, from working.
    Retire {
        /// The client's name.
        name: String,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Revoke a client: its secrets and every token it holds stop working.
    Revoke {
        /// The client's name.
        name: String,
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Print a long-lived API key for a client (Supabase's anon or service-role key): a token
    /// of its role, sent as a bearer token or in the `apikey` header; withdrawn by `rotate`
    /// then `retire`, or by `revoke`.
    Key {
        /// The client's name.
        name: String,
        /// Days the key is valid.
        #[arg(long, default_value_t = 3650)]
        days: u64,
        #[command(flatten)]
        common: CommonArgs,
    },
}

#[derive(Subcommand, Debug)]
enum DbAction {
    /// PostgreSQL: install the event trigger that makes running servers reload their schema
    /// cache after DDL (`NOTIFY rowgate, 'reload schema'`). Needs a superuser; optional.
    Setup {
        /// PostgreSQL URL.
        #[arg(long)]
        db: String,
    },
    /// PostgreSQL: create what a Supabase project's database has and a plain one lacks, for
    /// its GRANTs and policies to work with auth.database_roles: the roles anon,
    /// authenticated and service_role (granted to the connecting user) and auth.uid(),
    /// auth.role(), auth.jwt(). Leaves what exists as it is. Needs a superuser.
    SupabaseCompat {
        /// PostgreSQL URL.
        #[arg(long)]
        db: String,
        /// The user Rowgate connects as, to be let switch to the roles (default: the URL's).
        #[arg(long)]
        authenticator: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigAction {
    /// Validate the configuration (file, environment, flags) and exit.
    Check(CommonArgs),
    /// Print the effective configuration as TOML.
    Dump(CommonArgs),
}

#[derive(Subcommand, Debug)]
enum DemoAction {
    /// Create (or re-create) the demo database.
    Init {
        /// Database file to create, or a PostgreSQL URL (`postgres://user@host:port/db`) whose
        /// demo tables are replaced.
        #[arg(long, default_value = DEMO_DB)]
        db: String,
        /// Rows in the `people` table.
        #[arg(long, default_value_t = demo::DEFAULT_PEOPLE)]
        people: u64,
        /// Also seed 001's 267 other tables (4D's shape: t1-t134 with this many rows, t135-t267
        /// with a tenth), as 500,000 in 4D's benchmark. SQLite only.
        #[arg(long, value_name = "ROWS")]
        wide: Option<u64>,
    },
}

/// Flags shared by `serve` and `config`.
#[derive(Args, Debug, Clone)]
pub struct CommonArgs {
    /// Config file (default: ./rowgate.toml when it exists).
    #[arg(long, env = "ROWGATE_CONFIG")]
    config: Option<PathBuf>,
    /// SQLite database file (config key db.path).
    #[arg(long)]
    db: Option<String>,
    /// Address to listen on (config key listen).
    #[arg(long)]
    listen: Option<String>,
    /// URL prefix of the REST API (config key rest.prefix).
    #[arg(long)]
    prefix: Option<String>,
    /// Serve the demo database (created in the working directory when missing).
    #[arg(long)]
    demo: bool,
}

#[derive(Args, Debug)]
struct ServeArgs {
    #[command(flatten)]
    common: CommonArgs,
    /// Worker processes under a supervisor (config key supervisor.workers; 0: one process, no
    /// supervisor).
    #[arg(long)]
    workers: Option<usize>,
    /// Write the supervisor's pid here, and its state to the same path plus .json
    /// (config key supervisor.pid_file).
    #[arg(long)]
    pid_file: Option<PathBuf>,
    /// Create an empty SQLite database when the file does not exist (without it, a missing
    /// file is an error: a typo must not serve an empty database).
    #[arg(long)]
    create: bool,
}

/// The demo database's default file name.
pub const DEMO_DB: &str = "rowgate-demo.db";

impl CommonArgs {
    fn load(&self) -> anyhow::Result<Config> {
        let default_file = Path::new("rowgate.toml");
        let layer = match &self.config {
            Some(path) => Layer::File(path.as_path()),
            None if default_file.exists() => Layer::File(default_file),
            None if self.demo => Layer::Embedded {
                text: demo::CONFIG,
                files: demo::FILES,
            },
            None => Layer::None,
        };
        let mut overrides: Vec<(&str, String)> = Vec::new();
        if self.demo && self.db.is_none() {
            overrides.push(("db.path", DEMO_DB.to_string()));
        }
        if let Some(db) = &self.db {
            // `--db` is the most specific choice: it replaces both keys of the lower layers
            if let DbTarget::Postgres(url) = DbTarget::parse(db) {
                overrides.push(("db.url", url));
            } else {
                overrides.push(("db.path", db.clone()));
                overrides.push(("db.url", String::new()));
            }
        }
        if let Some(listen) = &self.listen {
            overrides.push(("listen", listen.clone()));
        }
        if let Some(prefix) = &self.prefix {
            overrides.push(("rest.prefix", prefix.clone()));
        }
        config::load(layer, |name| std::env::var(name).ok(), &overrides)
    }
}

/// Parses the command line and runs it.
pub fn main() -> anyhow::Result<()> {
    if let Some(plan) = crate::supervisor::handed_over() {
        // `serve` became the supervisor (supervisor::hand_over): nothing else to parse
        let plan = plan?;
        init_logging(&plan.log);
        return crate::supervisor::run(&plan.listen, plan.options);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve(&args),
        Command::Status { pid_file } => status(&pid_file),
        Command::Config { action } => match action {
            ConfigAction::Check(args) => check(&args.load()?),
            ConfigAction::Dump(args) => {
                print!("{}", args.load()?.to_toml());
                Ok(())
            }
        },
        Command::Db {
            action: DbAction::Setup { db },
        } => {
            on_postgres(&db, "db setup is for PostgreSQL URLs")?
                .block_on(crate::db::postgres::setup(&db))?;
            println!(
                "installed the DDL event trigger in {db}: servers reload their schema after DDL"
            );
            Ok(())
        }
        Command::Db {
            action: DbAction::SupabaseCompat { db, authenticator },
        } => {
            on_postgres(
                &db,
                "db supabase-compat is for PostgreSQL URLs: SQLite has no roles",
            )?
            .block_on(crate::db::supabase_compat::install(
                &db,
                authenticator.as_deref(),
            ))?;
            println!(
                "Supabase's roles (anon, authenticated, service_role) and auth.uid(), auth.role(), auth.jwt() are in place; serve with auth.database_roles = true"
            );
            Ok(())
        }
        Command::Clients { action } => clients(action),
        Command::Demo { action } => match action {
            DemoAction::Init { db, people, wide } => {
                let started = std::time::Instant::now();
                let summary = match DbTarget::parse(&db) {
                    DbTarget::Postgres(_) if wide.is_some() => {
                        anyhow::bail!("--wide makes a SQLite database only")
                    }
                    DbTarget::Postgres(url) => tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?
                        .block_on(demo::postgres::init(&url, people))?,
                    DbTarget::Sqlite(path) => demo::init(&path, people, wide)?,
                };
                for (table, rows) in summary.tables {
                    println!("{table:>10}: {rows} rows");
                }
                if let Some(large) = wide {
                    println!(
                        "    t1-t267: {} tables of {large} rows, {} of {} (seed 001's shape)",
                        134,
                        demo::wide::TABLES - 134,
                        demo::wide::rows(demo::wide::TABLES, large)
                    );
                }
                println!("created {db} in {:.1?}", started.elapsed());
                Ok(())
            }
        },
    }
}

/// `rowgate status`: the state file beside the pid file, when the supervisor is alive.
fn status(pid_file: &Path) -> anyhow::Result<()> {
    let pid = std::fs::read_to_string(pid_file)
        .with_context(|| format!("reading {} (is rowgate serve running?)", pid_file.display()))?;
    let pid: i32 = pid.trim().parse().context("the pid file holds no pid")?;
    if nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err() {
        anyhow::bail!(
            "the supervisor {pid} of {} is not running",
            pid_file.display()
        );
    }
    let state = crate::supervisor::state_path(pid_file);
    let text =
        std::fs::read_to_string(&state).with_context(|| format!("reading {}", state.display()))?;
    println!("{}", text.trim_end());
    Ok(())
}

/// `rowgate clients …`: opens the database the way `serve` does (refusing a missing SQLite
/// file) and changes its client table.
fn clients(action: ClientsAction) -> anyhow::Result<()> {
    use crate::auth::{clients as store, secret};
    let common = match &action {
        ClientsAction::Add { common, .. }
        | ClientsAction::List { common, .. }
        | ClientsAction::Rotate { common, .. }
        | ClientsAction::Retire { common, .. }
        | ClientsAction::Revoke { common, .. }
        | ClientsAction::Key { common, .. } => common,
    };
    let config = common.load()?;
    require_sqlite_file(&config)?;
    init_logging("warn");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let db = open_database(&config).await?;
        let issued = |issued: store::Issued, json: bool, what: &str| {
            if json {
                println!("{}", serde_json::to_string(&issued).unwrap_or_default());
            } else {
                println!("{what}\nclient_id:     {}\nclient_secret: {}\n(the secret is shown only once)", issued.client_id, issued.client_secret);
            }
        };
        match &action {
            ClientsAction::Add {
                name,
                role,
                ttl,
                json,
                ..
            } => {
                let secrets = secret::load(&config)?;
                let done = store::add(&db, &secrets, name, role, *ttl).await?;
                issued(done, *json, &format!("added client {name:?} with role {role:?}"));
            }
            ClientsAction::Rotate { name, json, .. } => {
                let secrets = secret::load(&config)?;
                let done = store::rotate(&db, &secrets, name).await?;
                issued(
                    done,
                    *json,
                    &format!("new secret for {name:?}; the previous one works until `rowgate clients retire {name}`"),
                );
            }
            ClientsAction::Retire { name, .. } => {
                store::retire(&db, name).await?;
                println!("the previous secret of {name:?} and its tokens no longer work");
            }
            ClientsAction::Key { name, days, .. } => {
                let secrets = secret::load(&config)?;
                let tokens =
                    crate::auth::token::Tokens::new(&secrets.jwt_key, &config)?;
                println!("{}", crate::auth::api_key(&db, &tokens, name, *days).await?);
            }
            ClientsAction::Revoke { name, .. } => {
                store::revoke(&db, name).await?;
                println!("revoked {name:?}: its secrets and tokens no longer work");
            }
            ClientsAction::List { json, .. } => {
                let mut all: Vec<store::Client> = store::load(&db).await?.into_values().collect();
                all.sort_by(|a, b| a.name.cmp(&b.name));
                if *json {
                    println!("{}", serde_json::to_string(&all)?);
                } else {
                    println!("{:<20} {:<24} {:<12} {:>7} {:>4} state", "name", "client_id", "role", "ttl_s", "gen");
                    for c in &all {
                        let state = if c.revoked {
                            "revoked"
                        } else if c.prev_gen.is_some() {
                            "rotating"
                        } else {
                            "active"
                        };
                        println!("{:<20} {:<24} {:<12} {:>7} {:>4} {state}", c.name, c.client_id, c.role, c.ttl_s, c.secret_gen);
                    }
                }
            }
        }
        Ok::<_, anyhow::Error>(())
    })
}

/// `config check`: the configuration loads, and its custom resources compile (their SQL is
/// prepared against the database when it is a PostgreSQL URL or an existing file; templates are
/// parsed).
fn check(config: &Config) -> anyhow::Result<()> {
    let path = &config.db.path;
    // grants that do not parse fail before anything else
    crate::auth::policy::Policy::compile(&config.grants)?;
    let on_postgres = matches!(config.db.target(), DbTarget::Postgres(_));
    let (resources, schema, against) = if on_postgres {
        let (compiled, schema) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
            .block_on(async {
                let db = open_database(config).await?;
                let compiled = crate::app::compile_resources(config, &db).await?;
                Ok::<_, anyhow::Error>((compiled, db.schema()))
            })?;
        (compiled, Some(schema), "checked against")
    } else if path.exists() {
        let conn = rusqlite::Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_URI,
        )
        .with_context(|| format!("opening database {}", path.display()))?;
        crate::db::register_regexp(&conn)?;
        let dialect = &rowgate_query::render::Sqlite;
        let schema = crate::schema::SchemaCache::introspect(&conn)
            .with_context(|| format!("reading the schema of {}", path.display()))?;
        (
            resources::compile(config, dialect, Some(&conn))?,
            Some(Arc::new(schema)),
            "checked against",
        )
    } else {
        eprintln!(
            "warning: the database file {} does not exist: `serve` will refuse it (add --create \
             for an empty one, or `rowgate demo init --db {}`); SQL and grants not checked",
            path.display(),
            path.display()
        );
        (
            resources::compile(config, &rowgate_query::render::Sqlite, None)?,
            None,
            "SQL not checked: no",
        )
    };
    let findings = crate::check::findings(config, &resources, schema.as_deref())?;
    let mut errors = Vec::new();
    for finding in findings {
        match finding.severity {
            crate::check::Severity::Warning => eprintln!("warning: {}", finding.text),
            crate::check::Severity::Error => errors.push(finding.text),
        }
    }
    if !errors.is_empty() {
        anyhow::bail!("{}", errors.join("\n"));
    }
    println!(
        "configuration OK: {} custom resources{}, {} grants, {against} database {}",
        resources.list.len(),
        match resources
            .list
            .iter()
            .filter(|r| r.function.is_some())
            .count()
        {
            0 => String::new(),
            n => format!(" ({n} functions)"),
        },
        config.grants.len(),
        path.display()
    );
    Ok(())
}

/// Colour in the log only on a terminal, and never with `NO_COLOR` set (no-color.org): a log
/// written to a file or a pipe stays plain text.
fn log_colours() -> bool {
    use std::io::IsTerminal as _;
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(log_colours())
        // A log that cannot be written (disk full, file size limit) must not take the thread
        // down: the fallback `eprintln!` that reports it panics when stderr fails too.
        .log_internal_errors(false)
        .try_init();
}

fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    if let Ok(supervisor) = std::env::var(crate::worker::WORKER_ENV) {
        return serve_worker(&args.common, &supervisor);
    }
    let config = args.common.load()?;
    let workers = args.workers.unwrap_or(config.supervisor.workers);
    init_logging(&config.log);
    listen_address_free(&config)?;
    prepare_database(&args.common, &config, args.create)?;
    if let Some(warning) = crate::check::no_grants_warning(&config) {
        tracing::warn!("{warning}");
    }
    if workers == 0 {
        return serve_alone(&args.common, config);
    }
    let pid_file = args.pid_file.clone().or_else(|| {
        (!config.supervisor.pid_file.as_os_str().is_empty())
            .then(|| config.dir.resolve(&config.supervisor.pid_file))
    });
    crate::supervisor::hand_over(crate::supervisor::HandOver {
        listen: config.listen.clone(),
        log: config.log.clone(),
        options: crate::supervisor::Options {
            workers,
            worker_args: std::env::args().skip(1).collect(),
            pid_file,
            drain: Duration::from_millis(config.limits.drain_timeout_ms),
            backoff: Duration::from_millis(config.supervisor.restart_backoff_ms),
        },
    })
}

/// The multi-threaded runtime a serving process runs on.
fn io_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("rowgate-io")
        .build()?)
}

/// `serve --workers 0`: one process, no supervisor.
fn serve_alone(args: &CommonArgs, config: Config) -> anyhow::Result<()> {
    io_runtime()?.block_on(async move {
        let app = start(config).await?;
        let listener = match server::activated()? {
            Some(listener) => tokio::net::TcpListener::from_std(listener)?,
            None => server::bind(&app.config.listen)
                .await
                .with_context(|| format!("binding {}", app.config.listen))?,
        };
        tracing::info!(
            "Rowgate serving {} on http://{}{}/",
            app.config.db.path.display(),
            listener.local_addr()?,
            app.config.rest.prefix
        );
        spawn_config_reloader(&app, args.clone());
        crate::worker::ignore_signals(&[crate::worker::FILE_SIZE_LIMIT]);
        let console = console_listener(&app.config, false).await?;
        let listeners = server::Listeners {
            main: listener,
            console,
        };
        server::run_all(listeners, app, shutdown_signal()).await
    })
}

/// The console's own listener, when `console.listen` names an address (`shared`: under the
/// supervisor, which holds only the main socket, each worker binds it with `SO_REUSEPORT`).
async fn console_listener(
    config: &Config,
    shared: bool,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let addr = &config.console.listen;
    if addr.is_empty() || !config.console.enabled {
        return Ok(None);
    }
    let bound = if shared {
        server::bind_shared(addr).await
    } else {
        server::bind(addr).await
    };
    let listener = bound.with_context(|| format!("binding console.listen {addr}"))?;
    tracing::info!("the console on http://{}/_/", listener.local_addr()?);
    Ok(Some(listener))
}

/// A worker under the supervisor: serves on the inherited socket until SIGTERM (then drains).
/// SIGHUP is the supervisor's business (it replaces workers), so a worker ignores it.
fn serve_worker(args: &CommonArgs, supervisor: &str) -> anyhow::Result<()> {
    let listener = crate::worker::listener(supervisor)?;
    let config = args.load()?;
    init_logging(&config.log);
    io_runtime()?.block_on(async move {
        let app = start(config).await?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        // bound before the worker says it is ready, so a reload never leaves the console's
        // address without a worker
        let console = console_listener(&app.config, true).await?;
        crate::worker::ignore_signals(&[
            tokio::signal::unix::SignalKind::hangup(),
            crate::worker::FILE_SIZE_LIMIT,
        ]);
        let feeds = app.realtime.as_ref().map(|r| crate::worker::ChangeFeeds {
            elsewhere: r.elsewhere.clone(),
            committed_here: r.committed_here.clone(),
            // (on PostgreSQL the database's bus carries them, to every node)
            channels: (!matches!(app.config.db.target(), crate::config::DbTarget::Postgres(_)))
                .then(|| r.channels.clone() as Arc<dyn crate::worker::Relayed>),
        });
        let reporter = app.clone();
        let report: crate::worker::Report = Arc::new(move |subject| reporter.report(subject));
        if let Some(link) = crate::worker::Link::open(app.metrics.clone(), feeds, report) {
            let _ = app.link.set(link.clone());
            let recycle = &app.config.supervisor;
            link.ready(
                app.requests.clone(),
                recycle.max_requests,
                recycle.max_rss_mb,
            );
        }
        let listeners = server::Listeners {
            main: listener,
            console,
        };
        server::run_all(listeners, app, shutdown_signal()).await
    })
}

/// Read replicas are PostgreSQL's: refused beside a SQLite file (before any worker starts).
fn replicas_need_postgres(config: &Config) -> anyhow::Result<()> {
    if !config.db.replicas.is_empty() && !matches!(config.db.target(), DbTarget::Postgres(_)) {
        anyhow::bail!("db.replicas needs a PostgreSQL database (db.url); SQLite has no replicas");
    }
    Ok(())
}

/// Refuses a listen address that another process holds before anything is created (the demo
/// database): binds it and lets it go (the supervisor, or the one process, binds it right
/// after). A socket passed by the service manager (`LISTEN_FDS`) is not checked.
fn listen_address_free(config: &Config) -> anyhow::Result<()> {
    if std::env::var_os("LISTEN_FDS").is_some() {
        return Ok(());
    }
    let listen = &config.listen;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(server::bind(listen))
        .map(drop)
        .with_context(|| format!("binding {listen}"))
}

/// Creates the demo database when `--demo` asks for it and it is missing; refuses a missing
/// SQLite file unless `create` asks for an empty one.
fn prepare_database(args: &CommonArgs, config: &Config, create: bool) -> anyhow::Result<()> {
    replicas_need_postgres(config)?;
    let on_postgres = matches!(config.db.target(), DbTarget::Postgres(_));
    if !on_postgres {
        crate::db::sqlite::require_folder(&config.db.path)?;
    }
    if args.demo && on_postgres {
        tracing::info!(
            "--demo with a PostgreSQL database: its configuration over the tables already there \
             (`rowgate demo init --db URL` creates or replaces the demo's tables)"
        );
    } else if args.demo && !config.db.path.exists() {
        tracing::info!(path = %config.db.path.display(), "creating the demo database");
        demo::init(&config.db.path, demo::DEFAULT_PEOPLE, None)?;
    } else if create && !on_postgres && !config.db.path.exists() {
        tracing::info!(path = %config.db.path.display(), "creating an empty database");
    } else {
        require_sqlite_file(config)?;
    }
    Ok(())
}

/// Refuses a SQLite database file that does not exist, for each command that opens the
/// database (`serve` without `--create`, `clients`): SQLite would create an empty one, and a
/// typo or a forgotten `--demo` must neither serve an empty database nor add clients to one.
fn require_sqlite_file(config: &Config) -> anyhow::Result<()> {
    let path = &config.db.path;
    if matches!(config.db.target(), DbTarget::Postgres(_)) || path.exists() {
        return Ok(());
    }
    crate::db::sqlite::require_folder(path)?;
    let path = path.display();
    anyhow::bail!(
        "the database file {path} does not exist: name an existing SQLite file (--db, or \
         --demo for {DEMO_DB}, which `rowgate serve --demo` creates), add --create to `rowgate \
         serve` to start an empty one, or load the demo with `rowgate demo init --db {path}`"
    )
}

/// Opens the database, builds the app and starts its background tasks (what `serve` and the
/// tests share). A configuration built in code is checked as a loaded one is.
pub async fn start(config: Config) -> anyhow::Result<Arc<App>> {
    config.validate()?;
    let db = open_database(&config).await?;
    let app = App::new(config, db).await?;
    crate::tasks::start(&app);
    Ok(app)
}

/// The runtime a `db` command runs its work on, once `db` is a PostgreSQL URL (`refusal`
/// otherwise).
fn on_postgres(db: &str, refusal: &str) -> anyhow::Result<tokio::runtime::Runtime> {
    anyhow::ensure!(
        matches!(DbTarget::parse(db), DbTarget::Postgres(_)),
        "{refusal}"
    );
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

/// Opens the database `config` names: a PostgreSQL pool for a URL, else the SQLite file.
async fn open_database(config: &Config) -> anyhow::Result<Arc<Database>> {
    replicas_need_postgres(config)?;
    let db = if let DbTarget::Postgres(url) = config.db.target() {
        let opts = PgOptions {
            pool_size: config.db.pool_size,
            // (at most all but one of the pool's: writes and transactions need the others)
            shared_reads: config
                .db
                .shared_reads
                .min(config.db.pool_size.saturating_sub(1)),
            max_lifetime: Duration::from_secs(config.db.max_lifetime_s),
            acquire_timeout: Duration::from_millis(config.db.acquire_timeout_ms),
            statement_timeout: Duration::from_millis(config.db.statement_timeout_ms),
            schemas: config.db.schema_list(),
            extra_search_path: config.db.extra_search_list(),
            prepared_statements: config.db.prepared_statements,
            replicas: config.db.replicas.clone(),
            replica_max_lag: Duration::from_millis(config.db.replica_max_lag_ms),
            replica_wait: Duration::from_millis(config.db.replica_wait_ms),
            privileges: config.auth.database_roles,
            commit_poll: (config.cache.enabled && config.cache.postgres_poll_ms > 0)
                .then(|| Duration::from_millis(config.cache.postgres_poll_ms)),
        };
        // (its errors name the server, the database and the user)
        Database::open_postgres(&url, &opts).await?
    } else {
        let opts = DbOptions {
            readers: config.reader_threads(),
            statement_timeout: Duration::from_millis(config.db.statement_timeout_ms),
            busy_timeout: Duration::from_millis(config.db.busy_timeout_ms),
            inline_reads: config.db.inline_reads,
            max_value_bytes: config.db.max_value_bytes,
        };
        Database::open_sqlite(&config.db.path, &opts)
            .with_context(|| format!("opening database {}", config.db.path.display()))?
    };
    Ok(db)
}

/// On SIGHUP: re-reads the configuration (file, environment, flags, as at start) and swaps in
/// its custom resources; a configuration that does not load or compile is logged and ignored
/// (the running set stays). Other keys need a restart.
pub fn spawn_config_reloader(app: &Arc<App>, args: CommonArgs) {
    #[cfg(unix)]
    {
        let app = app.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                return;
            };
            while hup.recv().await.is_some() {
                let args2 = args.clone();
                let reloaded = async {
                    let config = tokio::task::spawn_blocking(move || args2.load()).await??;
                    let count = app.reload_resources(&config).await?;
                    Ok::<_, anyhow::Error>((config, count))
                }
                .await;
                match reloaded {
                    Ok((config, count)) => {
                        tracing::info!(resources = count, "SIGHUP: custom resources reloaded");
                        let mut restart_only = config.clone();
                        restart_only.resources = app.config.resources.clone();
                        restart_only.resources_dir = app.config.resources_dir.clone();
                        if restart_only != app.config {
                            tracing::warn!(
                                "SIGHUP: settings other than resources change only on restart"
                            );
                        }
                    }
                    Err(e) => tracing::error!("SIGHUP: configuration not reloaded: {e:#}"),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (app, args);
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let term = signal(SignalKind::terminate());
        let int = signal(SignalKind::interrupt());
        if let (Ok(mut term), Ok(mut int)) = (term, int) {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            tracing::info!("shutting down: draining in-flight requests");
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
