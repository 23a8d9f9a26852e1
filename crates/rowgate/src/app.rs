//! The application state shared by every connection: configuration, database handle and the
//! route table (matchit), built once at start-up.

use std::sync::Arc;

use anyhow::Context as _;
use arc_swap::ArcSwap;

use crate::auth::Auth;
use crate::config::Config;
use crate::db::Database;
use crate::resources::{self, Resources};

pub use crate::routes::Route;

/// Shared application state.
pub struct App {
    /// Effective configuration.
    pub config: Config,
    /// The database.
    pub db: Arc<Database>,
    /// Tokens, clients and grants.
    pub auth: Arc<Auth>,
    /// Route table of the built-in routes.
    pub router: matchit::Router<Route>,
    /// The custom resources, swapped whole on reload.
    pub resources: ArcSwap<Resources>,
    /// Requests served so far (worker recycling).
    pub requests: Arc<std::sync::atomic::AtomicU64>,
    /// What `/metrics` shows.
    pub metrics: Arc<crate::observe::Metrics>,
    /// Turns true when the server drains: connections finish and close, realtime sessions
    /// close with 1001 (they subscribe to it when they start).
    pub draining: tokio::sync::watch::Sender<bool>,
    /// JSON-relational duality views, compiled against the schema at start.
    pub duality: crate::duality::DualityViews,
    /// Change feeds (`None` when no table is realtime).
    pub realtime: Option<Arc<crate::realtime::state::Realtime>>,
    /// Request bodies over [`LARGE_BODY`] handled at once (`limits.large_bodies`): a large
    /// write body costs several times its size while it is planned and run.
    pub large_bodies: Arc<tokio::sync::Semaphore>,
    /// Which browser origins may call (`[cors]`).
    pub cors: crate::cors::Cors,
    /// The peers whose `X-Forwarded-*` headers count (`trusted_proxies`).
    pub trusted_proxies: crate::proxies::TrustedProxies,
    /// Open connections per client address (`limits.max_connections_per_address`; `None`: no
    /// limit).
    pub connections_per_address: Option<Arc<crate::per_address::ConnectionsPerAddress>>,
    /// Answers to reads kept until the next commit (`[cache]`; SQLite only).
    pub cache: Option<crate::cache::ResponseCache>,
    /// `db.pre_request` as the statement every API request's transaction runs after its
    /// settings (checked against the database at start).
    pub pre_request: Option<String>,
    /// One line per request (`[access_log]`; `None` when off).
    pub access_log: Option<crate::observe::access::AccessLog>,
    /// The pipes to the supervisor, under one (a scrape of `/metrics` gathers every worker's).
    pub link: std::sync::OnceLock<Arc<crate::worker::Link>>,
    /// People's accounts at `/auth/v1` (`[accounts]`), when on.
    pub accounts: Option<Arc<crate::accounts::Accounts>>,
}

/// A request body larger than this takes one of the `limits.large_bodies` slots.
pub const LARGE_BODY: usize = 1024 * 1024;

/// A request body, and the large-body slot it holds while its request is handled.
pub struct AdmittedBody {
    /// The bytes.
    pub bytes: bytes::Bytes,
    /// Held until the request is answered (`None` for a small body).
    pub _slot: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl App {
    /// What the plan stage needs for a request by `principal`, over `schema` (the cache as it
    /// stood when the request began).
    pub fn plan_context<'a>(
        &'a self,
        schema: &'a crate::schema::SchemaCache,
        principal: &'a crate::auth::Principal,
    ) -> crate::engine::Context<'a> {
        self.engine().context(schema, principal)
    }

    /// The engine every front end runs its requests through, over this state.
    pub fn engine(&self) -> crate::engine::Engine<'_> {
        crate::engine::Engine {
            db: &self.db,
            policy: &self.auth.policy,
            rest: &self.config.rest,
            limits: &self.config.limits,
            duality: &self.duality,
            app_settings: &self.config.db.settings,
            pre_request: self.pre_request.as_deref(),
            extra_search_path: &self.config.db.extra_search_path,
            anon_role: &self.config.auth.anon_role,
        }
    }

    /// Builds the state and its routes.
    pub async fn new(config: Config, db: Arc<Database>) -> anyhow::Result<Arc<App>> {
        let mut router = matchit::Router::new();
        let prefix = &config.rest.prefix;
        for &(path, route) in crate::routes::FIXED {
            router.insert(path, route)?;
        }
        router.insert(prefix.as_str(), Route::OpenApi)?;
        router.insert(format!("{prefix}/"), Route::OpenApi)?;
        router.insert(format!("{prefix}/{{table}}"), Route::Table)?;
        router.insert(format!("{prefix}/rpc/{{function}}"), Route::Rpc)?;
        router.insert(format!("{prefix}/{{table}}/{{key}}"), Route::Item)?;
        let metrics = Arc::new(crate::observe::Metrics::new());
        // with database roles, changes are sent to the subscribers whose role may see them
        let checker = match config.db.target() {
            crate::config::DbTarget::Postgres(url) if config.auth.database_roles => {
                Some(crate::realtime::visibility::Checker::new(url))
            }
            _ => None,
        };
        let realtime =
            crate::realtime::state::open(&config.realtime, &db, metrics.clone(), checker).await?;
        let compiled = compile_resources(&config, &db).await?;
        let duality = crate::duality::compile(&config.duality_views, &db.schema())?;
        let auth = Auth::new(&config)?;
        crate::auth::database_roles::check(&config, &db).await?;
        auth.refresh_clients(&db).await?;
        if crate::worker::warns_about_configuration() {
            for problem in auth.policy.problems(&db.schema()) {
                tracing::warn!("grants: {problem}");
            }
        }
        let large_bodies = Arc::new(tokio::sync::Semaphore::new(
            config.limits.large_bodies.max(1),
        ));
        let cors = crate::cors::Cors::new(&config.cors);
        let trusted_proxies = crate::proxies::TrustedProxies::parse(&config.trusted_proxies)?;
        let connections_per_address = (config.limits.max_connections_per_address > 0).then(|| {
            crate::per_address::ConnectionsPerAddress::new(
                config.limits.max_connections_per_address,
            )
        });
        let pre_request = pre_request_call(&config.db.pre_request, &db).await?;
        // kept answers are as fresh as the database's commit epoch tells
        let cache = db
            .tells_commits()
            .then(|| crate::cache::ResponseCache::new(&config.cache))
            .flatten();
        let access_log = crate::observe::access::AccessLog::open(&config.access_log)?;
        let accounts = match config.accounts.enabled {
            true => Some(Arc::new(
                crate::accounts::Accounts::open(&config, &db).await?,
            )),
            false => None,
        };
        Ok(Arc::new(App {
            accounts,
            access_log,
            link: std::sync::OnceLock::new(),
            cache,
            pre_request,
            cors,
            trusted_proxies,
            connections_per_address,
            config,
            db,
            auth: Arc::new(auth),
            router,
            resources: ArcSwap::from_pointee(compiled),
            requests: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            draining: tokio::sync::watch::Sender::new(false),
            metrics,
            duality,
            realtime,
            large_bodies,
        }))
    }

    /// This worker's `/metrics` text, with the gauges read now.
    pub fn metrics_text(&self) -> String {
        use std::sync::atomic::Ordering;
        if let Some(realtime) = &self.realtime {
            self.metrics
                .set_realtime_load(realtime.hub.queued(), realtime.hub.subscriptions());
        }
        if let Some(cache) = &self.cache {
            self.metrics.set_cache_bytes(cache.bytes());
        }
        if let Some(sqlite) = self.db.as_sqlite() {
            let counts = sqlite.kept_counts();
            self.metrics.set_kept_counts(
                counts.kept_answers.load(Ordering::Relaxed),
                counts.counted_answers.load(Ordering::Relaxed),
            );
        }
        if let Some(log) = &self.access_log {
            self.metrics.set_access_log_dropped(log.dropped());
        }
        let mut text = self.metrics.render();
        text.push_str(&self.metrics.render_read_waits(self.db.read_waits()));
        if let Some(postgres) = self.db.as_postgres().filter(|db| db.has_replicas()) {
            let replicas = postgres.replicas().list();
            text.push_str(
                &self.metrics.render_replicas(
                    replicas
                        .iter()
                        .map(|r| (r.name.as_str(), r.healthy(), r.lag())),
                ),
            );
        }
        text
    }

    /// The whole server's `/metrics` text: this worker's, and under a supervisor every other
    /// worker's and the supervisor's ([`crate::worker::Link::gather`]).
    pub async fn server_metrics_text(&self) -> String {
        let own = self.metrics_text();
        let Some(link) = self.link.get() else {
            return own;
        };
        let gathered = link.gather(crate::worker::Subject::Metrics, own).await;
        let complete = format!(
            "# HELP rowgate_scrape_complete whether every worker answered this scrape\n# TYPE rowgate_scrape_complete gauge\nrowgate_scrape_complete {}\n",
            u8::from(gathered.complete)
        );
        crate::observe::merge::merge(
            gathered
                .parts
                .iter()
                .map(String::as_str)
                .chain([complete.as_str()]),
        )
    }

    /// This worker's report on `subject` when another worker gathers it.
    pub fn report(&self, subject: crate::worker::Subject) -> String {
        match subject {
            crate::worker::Subject::Metrics => self.metrics_text(),
            crate::worker::Subject::RecentRequests => self
                .access_log
                .as_ref()
                .map(|log| log.recent().join(""))
                .unwrap_or_default(),
        }
    }

    /// The access log's recent lines of every worker (`None` when the access log is off),
    /// oldest first.
    pub async fn recent_requests(&self) -> Option<Vec<String>> {
        let log = self.access_log.as_ref()?;
        let own = log.recent();
        let Some(link) = self.link.get() else {
            return Some(own);
        };
        let gathered = link
            .gather(crate::worker::Subject::RecentRequests, own.join(""))
            .await;
        let mut lines: Vec<String> = gathered
            .parts
            .iter()
            .flat_map(|part| part.lines())
            .map(|line| format!("{line}\n"))
            .collect();
        lines.sort_by(|a, b| {
            crate::observe::access::line_time(a).cmp(crate::observe::access::line_time(b))
        });
        Some(lines)
    }

    /// Reads a request's body (size and time limits: `api::request::read_body`). A body over
    /// [`LARGE_BODY`] must get one of the `limits.large_bodies` slots first (declared length) or
    /// once read (chunked): it waits for one up to `limits.body_read_timeout_ms`, then answers
    /// 503, so that concurrent large bodies cannot exhaust a worker's memory.
    pub async fn read_body(
        &self,
        parts: &http::request::Parts,
        body: impl crate::request_body::RequestBody,
    ) -> Result<AdmittedBody, crate::error::ApiError> {
        let declared = parts
            .headers
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        let mut slot = None;
        if declared.is_some_and(|n| n > LARGE_BODY && n <= self.config.limits.body_bytes) {
            slot = Some(self.large_body_slot().await?);
        }
        let bytes = crate::request_body::read_body(&self.config.limits, parts, body).await?;
        if slot.is_none() && bytes.len() > LARGE_BODY {
            slot = Some(self.large_body_slot().await?);
        }
        Ok(AdmittedBody { bytes, _slot: slot })
    }

    async fn large_body_slot(
        &self,
    ) -> Result<tokio::sync::OwnedSemaphorePermit, crate::error::ApiError> {
        let wait = std::time::Duration::from_millis(self.config.limits.body_read_timeout_ms);
        match tokio::time::timeout(wait, self.large_bodies.clone().acquire_owned()).await {
            Ok(Ok(permit)) => Ok(permit),
            _ => Err(crate::error::ApiError::new(
                crate::error::ErrorCode::Unavailable,
                "too many large request bodies at once; retry",
            )
            .details(format!(
                "bodies over {} bytes are handled {} at a time (limits.large_bodies)",
                LARGE_BODY, self.config.limits.large_bodies
            ))),
        }
    }

    /// Re-reads the custom resources from `config` and swaps them in (requests in flight finish
    /// with the set they started with); on error the current set stays. Returns how many there
    /// are.
    pub async fn reload_resources(&self, config: &Config) -> anyhow::Result<usize> {
        let compiled = compile_resources(config, &self.db).await?;
        let count = compiled.list.len();
        self.resources.store(Arc::new(compiled));
        // a kept answer may be a resource's that changed
        if let Some(cache) = &self.cache {
            cache.clear();
        }
        Ok(count)
    }
}

/// Compiles the resources of `config` and checks their SQL against `db`: prepared on one of
/// SQLite's reader connections (off the async threads), or on a pooled PostgreSQL connection.
pub async fn compile_resources(config: &Config, db: &Arc<Database>) -> anyhow::Result<Resources> {
    let compiled = compile_resources_on(config, db).await?;
    if let Some(warning) = compiled
        .unreachable_warning()
        .filter(|_| crate::worker::warns_about_configuration())
    {
        tracing::warn!("{warning}");
    }
    Ok(compiled)
}

/// `db.pre_request` (`schema.name`, or a name the search path finds) as the call every API
/// request's transaction makes, its names quoted; prepared once here, so that a function that
/// does not exist (or takes arguments) fails the start, not every request. PostgreSQL only.
async fn pre_request_call(name: &str, db: &Database) -> anyhow::Result<Option<String>> {
    let name = name.trim();
    if name.is_empty() {
        return Ok(None);
    }
    let Database::Postgres(pg) = db else {
        anyhow::bail!("db.pre_request {name:?}: a pre-request function needs PostgreSQL");
    };
    let quoted: Vec<String> = name
        .split('.')
        .map(|part| db.dialect().quote_ident(part))
        .collect();
    let call = format!("SELECT {}()", quoted.join("."));
    pg.check_statement(&call)
        .await
        .with_context(|| format!("db.pre_request {name:?}: the function cannot be called"))?;
    Ok(Some(call))
}

async fn compile_resources_on(config: &Config, db: &Arc<Database>) -> anyhow::Result<Resources> {
    match &**db {
        Database::Sqlite(_) => {
            let (config, db) = (config.clone(), db.clone());
            tokio::task::spawn_blocking(move || {
                let sqlite = db.as_sqlite().expect("a SQLite database");
                sqlite.read_blocking(move |conn| {
                    resources::compile(&config, &rowgate_query::render::Sqlite, Some(conn))
                })?
            })
            .await?
        }
        Database::Postgres(pg) => {
            let mut compiled = resources::compile(config, db.dialect(), None)?;
            resources::check_on_postgres(&mut compiled, pg).await?;
            Ok(compiled)
        }
    }
}
