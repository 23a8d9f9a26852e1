//! The application state shared by every connection: configuration, database handle and the
//! route table (matchit), built once at start-up.

use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::auth::Auth;
use crate::config::Config;
use crate::db::Database;
use crate::resources::{self, Resources};

/// What a URL path routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `/live`: the process is up.
    Live,
    /// `/ready`: the schema cache is loaded and the database answers.
    Ready,
    /// `/{prefix}/` and `/openapi.json`: the OpenAPI document.
    OpenApi,
    /// `/{prefix}/{table}`.
    Table,
    /// `/{prefix}/{table}/{key}`.
    Item,
    /// `/oauth/token`.
    Token,
    /// `/metrics`: Prometheus text.
    Metrics,
    /// `/realtime`: WebSocket change feeds.
    Realtime,
    /// `/realtime/sse`: one table's changes as Server-Sent Events.
    RealtimeEvents,
}

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
    /// Change feeds (`None` when no table is realtime).
    pub realtime: Option<Arc<crate::realtime::state::Realtime>>,
}

impl App {
    /// Builds the state and its routes.
    pub async fn new(config: Config, db: Arc<Database>) -> anyhow::Result<Arc<App>> {
        let mut router = matchit::Router::new();
        let prefix = &config.rest.prefix;
        router.insert("/live", Route::Live)?;
        router.insert("/ready", Route::Ready)?;
        router.insert("/openapi.json", Route::OpenApi)?;
        router.insert(prefix.as_str(), Route::OpenApi)?;
        router.insert(format!("{prefix}/"), Route::OpenApi)?;
        router.insert(format!("{prefix}/{{table}}"), Route::Table)?;
        router.insert(format!("{prefix}/{{table}}/{{key}}"), Route::Item)?;
        router.insert("/oauth/token", Route::Token)?;
        router.insert("/metrics", Route::Metrics)?;
        router.insert("/realtime", Route::Realtime)?;
        router.insert("/realtime/sse", Route::RealtimeEvents)?;
        let metrics = Arc::new(crate::observe::Metrics::new());
        let realtime = crate::realtime::state::open(&config.realtime, &db, metrics.clone()).await?;
        let compiled = compile_resources(&config, &db).await?;
        let auth = Auth::new(&config)?;
        auth.refresh_clients(&db).await?;
        for problem in auth.policy.problems(&db.schema()) {
            tracing::warn!("grants: {problem}");
        }
        Ok(Arc::new(App {
            config,
            db,
            auth: Arc::new(auth),
            router,
            resources: ArcSwap::from_pointee(compiled),
            requests: Arc::new(std::sync::atomic::AtomicU64::new(0)),
            draining: tokio::sync::watch::Sender::new(false),
            metrics,
            realtime,
        }))
    }

    /// Re-reads the custom resources from `config` and swaps them in (requests in flight finish
    /// with the set they started with); on error the current set stays. Returns how many there
    /// are.
    pub async fn reload_resources(&self, config: &Config) -> anyhow::Result<usize> {
        let compiled = compile_resources(config, &self.db).await?;
        let count = compiled.list.len();
        self.resources.store(Arc::new(compiled));
        Ok(count)
    }
}

/// Compiles the resources of `config` and checks their SQL against `db`: prepared on one of
/// SQLite's reader connections (off the async threads), or on a pooled PostgreSQL connection.
pub async fn compile_resources(config: &Config, db: &Arc<Database>) -> anyhow::Result<Resources> {
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
            let compiled = resources::compile(config, db.dialect(), None)?;
            resources::check_on_postgres(&compiled, pg).await?;
            Ok(compiled)
        }
    }
}
