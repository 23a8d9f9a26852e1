//! The application state shared by every connection: configuration, database handle and the
//! route table (matchit), built once at start-up.

use std::sync::Arc;

use arc_swap::ArcSwap;

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
}

/// Shared application state.
pub struct App {
    /// Effective configuration.
    pub config: Config,
    /// The database.
    pub db: Arc<Database>,
    /// Route table of the built-in routes.
    pub router: matchit::Router<Route>,
    /// The custom resources, swapped whole on reload.
    pub resources: ArcSwap<Resources>,
}

impl App {
    /// Builds the state and its routes.
    pub fn new(config: Config, db: Arc<Database>) -> anyhow::Result<Arc<App>> {
        let mut router = matchit::Router::new();
        let prefix = &config.rest.prefix;
        router.insert("/live", Route::Live)?;
        router.insert("/ready", Route::Ready)?;
        router.insert("/openapi.json", Route::OpenApi)?;
        router.insert(prefix.as_str(), Route::OpenApi)?;
        router.insert(format!("{prefix}/"), Route::OpenApi)?;
        router.insert(format!("{prefix}/{{table}}"), Route::Table)?;
        router.insert(format!("{prefix}/{{table}}/{{key}}"), Route::Item)?;
        let compiled = compile_resources(&config, &db)?;
        Ok(Arc::new(App {
            config,
            db,
            router,
            resources: ArcSwap::from_pointee(compiled),
        }))
    }

    /// Re-reads the custom resources from `config` and swaps them in (requests in flight finish
    /// with the set they started with); on error the current set stays. Blocks while the SQL is
    /// checked on a reader connection: call it off the async threads. Returns how many there are.
    pub fn reload_resources(&self, config: &Config) -> anyhow::Result<usize> {
        let compiled = compile_resources(config, &self.db)?;
        let count = compiled.list.len();
        self.resources.store(Arc::new(compiled));
        Ok(count)
    }
}

/// Compiles the resources of `config`, preparing their SQL on one of `db`'s reader connections.
fn compile_resources(config: &Config, db: &Database) -> anyhow::Result<Resources> {
    match db.as_sqlite() {
        Some(sqlite) => {
            let config = config.clone();
            sqlite.read_blocking(move |conn| {
                resources::compile(&config, &rowgate_query::render::Sqlite, Some(conn))
            })?
        }
        // PostgreSQL: parameters and templates are checked; the SQL itself when it first runs.
        None => resources::compile(config, db.dialect(), None),
    }
}
