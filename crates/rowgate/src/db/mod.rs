//! The database behind one handle. Requests hand it a [`Job`] (data); the backend runs it. The
//! schema cache, health checks and reloads go through here too. SQLite (bundled) and
//! PostgreSQL run the same jobs, each with its own interpreter.

pub mod commit_clock;
pub mod kept_counts;
pub mod postgres;
pub mod postgres_connect;
mod postgres_error;
pub mod replicas;
pub mod request;
pub mod shared_reads;
pub mod sqlite;
mod sqlite_error;
pub mod sqlite_job;
pub mod supabase_compat;
mod tally;
pub mod waits;

use std::path::Path;
use std::sync::Arc;

use rowgate_query::render::{Dialect, Postgres as PostgresDialect, Sqlite as SqliteDialect};

pub use crate::error::database::{DbError, Kind as DbErrorKind};
use crate::job::{Job, Output};
use crate::schema::SchemaCache;
pub use postgres::{PgOptions, Postgres};
pub(crate) use sqlite::register_regexp;
pub use sqlite::{in_read_transaction, DbOptions, Sqlite};

/// A database backend.
pub enum Database {
    /// A SQLite file.
    Sqlite(Sqlite),
    /// A PostgreSQL database.
    Postgres(Postgres),
}

impl Database {
    /// Opens a SQLite database file (created when missing).
    pub fn open_sqlite(path: &Path, opts: &DbOptions) -> anyhow::Result<Arc<Database>> {
        Ok(Arc::new(Database::Sqlite(Sqlite::open(path, opts)?)))
    }

    /// Connects to a PostgreSQL database.
    pub async fn open_postgres(url: &str, opts: &PgOptions) -> anyhow::Result<Arc<Database>> {
        Ok(Arc::new(Database::Postgres(
            Postgres::open(url, opts).await?,
        )))
    }

    /// The SQL dialect statements are rendered in.
    pub fn dialect(&self) -> &'static dyn Dialect {
        match self {
            Database::Sqlite(_) => &SqliteDialect,
            Database::Postgres(_) => &PostgresDialect,
        }
    }

    /// The current schema cache.
    pub fn schema(&self) -> Arc<SchemaCache> {
        match self {
            Database::Sqlite(db) => db.schema(),
            Database::Postgres(db) => db.schema(),
        }
    }

    /// Runs a job: a read on a read-only connection, a write in one transaction answered after
    /// it has committed.
    pub async fn run(&self, job: Job) -> Result<Output, DbError> {
        let started = std::time::Instant::now();
        let output = match self {
            Database::Sqlite(db) => db.run(job).await,
            Database::Postgres(db) => db.run(job).await,
        };
        // the request's database time (`/metrics`), queue wait included
        request::add_time(started.elapsed());
        output
    }

    /// The reads waiting for a connection now, and their waits so far.
    pub fn read_waits(&self) -> &waits::ReadWaits {
        match self {
            Database::Sqlite(db) => db.read_waits(),
            Database::Postgres(db) => db.read_waits(),
        }
    }

    /// Whether reads may go to read replicas (`db.replicas`, PostgreSQL).
    pub fn has_replicas(&self) -> bool {
        match self {
            Database::Sqlite(_) => false,
            Database::Postgres(db) => db.has_replicas(),
        }
    }

    /// Whether requests carry WAL positions (`Rowgate-Position`: what a read must see, where a
    /// write committed): with read replicas, or PostgreSQL's response cache.
    pub fn uses_positions(&self) -> bool {
        match self {
            Database::Sqlite(_) => false,
            Database::Postgres(db) => db.has_replicas() || db.tells_commits(),
        }
    }

    /// Checks the read replicas' health and lag (nothing without replicas).
    pub async fn check_replicas(&self) -> Result<(), DbError> {
        match self {
            Database::Sqlite(_) => Ok(()),
            Database::Postgres(db) => db.check_replicas().await,
        }
    }

    /// Whether [`Database::commit_epoch`] tells when anything was committed (SQLite; PostgreSQL
    /// with its commit clock running), so that answers can be kept until then (`crate::cache`).
    pub fn tells_commits(&self) -> bool {
        match self {
            Database::Sqlite(_) => true,
            Database::Postgres(db) => db.tells_commits(),
        }
    }

    /// A number that moves on whenever anything is committed to the database
    /// ([`Sqlite::commit_epoch`]; on PostgreSQL, [`commit_clock`]'s guarantee); `None`: no
    /// answer may be served from the cache now.
    pub fn commit_epoch(&self) -> Option<u64> {
        match self {
            Database::Sqlite(db) => db.commit_epoch(),
            Database::Postgres(db) => db.commit_epoch(),
        }
    }

    /// Answers when the database does.
    pub async fn ping(&self) -> Result<(), DbError> {
        let unavailable = |_| DbError::unavailable("the database does not answer");
        match self {
            Database::Sqlite(db) => db
                .read(|conn| {
                    conn.query_row("SELECT 1", [], |_| Ok(()))
                        .map_err(DbError::from)
                })
                .await
                .map_err(unavailable),
            Database::Postgres(db) => db.ping().await.map_err(unavailable),
        }
    }

    /// Re-reads the schema and swaps it in; returns whether it changed.
    pub async fn reload_schema(&self) -> Result<bool, DbError> {
        match self {
            Database::Sqlite(db) => db.reload_schema().await,
            Database::Postgres(db) => db.reload_schema().await,
        }
    }

    /// Reloads the schema when the database says it changed.
    pub async fn reload_schema_if_changed(&self) -> Result<bool, DbError> {
        match self {
            Database::Sqlite(db) => db.reload_schema_if_changed().await,
            Database::Postgres(db) => db.reload_schema_if_changed().await,
        }
    }

    /// Notified after this process commits a write (the realtime tailer's wake-up).
    pub fn commits(&self) -> Arc<tokio::sync::Notify> {
        match self {
            Database::Sqlite(db) => db.commits(),
            Database::Postgres(db) => db.commits.clone(),
        }
    }

    /// The SQLite backend, for what only it can do (checking custom resources' SQL at load).
    pub fn as_sqlite(&self) -> Option<&Sqlite> {
        match self {
            Database::Sqlite(db) => Some(db),
            Database::Postgres(_) => None,
        }
    }

    /// The PostgreSQL backend, if that is what this is.
    pub fn as_postgres(&self) -> Option<&Postgres> {
        match self {
            Database::Sqlite(_) => None,
            Database::Postgres(db) => Some(db),
        }
    }
}
