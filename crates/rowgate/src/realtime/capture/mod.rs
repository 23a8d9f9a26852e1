//! Change capture in the database: triggers on every realtime table append
//! `(id, table, op, key, new row, old row, time)` to a change log in the same transaction as
//! the write, so writes from any client — this server, another worker or node, the `sqlite3`
//! shell, `psql` — are captured. Ids are monotonic and follow commit order. One module per
//! backend ([`sqlite`], [`postgres`]); here the shared types and the dispatch.

pub mod citus;
pub mod postgres;
pub mod sqlite;

/// The channel PostgreSQL's capture notifies after a change is logged (the tailers' wake-up).
pub const CHANNEL: &str = "rowgate_changes";

/// PostgreSQL's advisory lock that orders the log's appends by commit (see [`postgres`]).
pub const CAPTURE_LOCK: i64 = 0x726f_7767_6174_6501;

/// The columns of PostgreSQL's `rowgate.changes` (the log, and a Citus worker's outbox).
const LOG_COLUMNS: &str = "id bigserial PRIMARY KEY,
           tbl text NOT NULL,
           op text NOT NULL,
           pk jsonb,
           new jsonb,
           old jsonb,
           at bigint NOT NULL";

use serde_json::{Map, Value as Json};

use crate::db::{Database, DbError};
use crate::schema::Table;

/// What happened to a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A new row.
    Insert,
    /// A changed row (old and new).
    Update,
    /// A removed row.
    Delete,
}

impl Op {
    fn parse(text: &str) -> Option<Op> {
        match text {
            "insert" => Some(Op::Insert),
            "update" => Some(Op::Update),
            "delete" => Some(Op::Delete),
            _ => None,
        }
    }

    /// As the trigger names it.
    pub fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Delete => "delete",
        }
    }
}

/// One captured change.
#[derive(Debug, Clone)]
pub struct Change {
    /// Position in the log (monotonic).
    pub id: i64,
    /// Table name.
    pub table: String,
    /// What happened.
    pub op: Op,
    /// The primary key (`None` for a keyless table).
    pub key: Option<Map<String, Json>>,
    /// The row after (insert, update).
    pub new: Option<Map<String, Json>>,
    /// The row before (update, delete).
    pub old: Option<Map<String, Json>>,
    /// When it was written, in Unix milliseconds (the database's clock).
    pub at: i64,
}

/// Where the log stands: its last id, and the last id pruned (events up to it are gone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Head {
    /// The newest change's id (0: none yet).
    pub last: i64,
    /// Changes up to this id were pruned.
    pub pruned_through: i64,
}

/// Creates the change log and the triggers of `tables` (and drops triggers of tables no longer
/// listed).
pub async fn ensure(db: &Database, tables: &[Table]) -> anyhow::Result<()> {
    match db {
        Database::Sqlite(db) => sqlite::ensure(db, tables).await,
        Database::Postgres(db) => postgres::ensure(db, tables).await,
    }
}

/// Up to `limit` changes after `after`, oldest first (of `table` only, when given, and not
/// past `upto`).
pub async fn fetch(
    db: &Database,
    after: i64,
    upto: Option<i64>,
    table: Option<String>,
    limit: usize,
) -> Result<Vec<Change>, DbError> {
    match db {
        Database::Sqlite(db) => sqlite::fetch(db, after, upto, table, limit).await,
        Database::Postgres(db) => postgres::fetch(db, after, upto, table, limit).await,
    }
}

/// The log's last id and pruning mark.
pub async fn head(db: &Database) -> Result<Head, DbError> {
    match db {
        Database::Sqlite(db) => sqlite::head(db).await,
        Database::Postgres(db) => postgres::head(db).await,
    }
}

/// Deletes changes older than `max_age_ms` or beyond the newest `max_rows` (the oldest 10,000
/// per call at most); returns how many.
pub async fn prune(db: &Database, max_age_ms: u64, max_rows: u64) -> Result<usize, DbError> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let cutoff = now_ms.saturating_sub(i64::try_from(max_age_ms).unwrap_or(i64::MAX));
    let keep = i64::try_from(max_rows).unwrap_or(i64::MAX);
    match db {
        Database::Sqlite(db) => sqlite::prune(db, cutoff, keep).await,
        Database::Postgres(db) => postgres::prune(db, cutoff, keep).await,
    }
}

/// A captured row (JSON text) as a map.
fn object(text: &str) -> Option<Map<String, Json>> {
    match serde_json::from_str(text) {
        Ok(Json::Object(map)) => Some(map),
        _ => None,
    }
}
