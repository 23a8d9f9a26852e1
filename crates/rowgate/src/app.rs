//! The application state shared by every connection: configuration, database handle and the
//! route table (matchit), built once at start-up.

use std::sync::Arc;

use crate::config::Config;
use crate::db::Database;

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
    /// Route table.
    pub router: matchit::Router<Route>,
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
        Ok(Arc::new(App { config, db, router }))
    }
}
