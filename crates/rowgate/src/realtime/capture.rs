//! Change capture in the database: triggers on every realtime table append
//! `(id, table, op, key, new row, old row, time)` to a change log in the same transaction as
//! the write, so writes from any client — this server, another worker, the `sqlite3` shell —
//! are captured. Ids are monotonic and follow commit order (SQLite has one writer at a time).
//!
//! SQLite: `_rowgate_changes` (hidden from the API like every `_rowgate_` table), triggers
//! `_rowgate_rt_{insert,update,delete}_<table>`. The triggers are re-created only when their
//! text changes (a schema change), so workers starting together converge without DDL loops.
//! Rows are JSON built by the trigger: booleans as `true`/`false`, JSON columns as JSON, blobs
//! as hex. The trigger SQL uses only functions of SQLite 3.38+, so older shells can write too.

use rusqlite::{params, Connection, OptionalExtension as _};
use serde_json::{Map, Value as Json};

use crate::db::{map_error, Database};
use crate::error::{ApiError, ErrorCode};
use crate::schema::{JsonKind, Table};

/// The change log.
const LOG: &str = "_rowgate_changes";

/// Prefix of the capture triggers' names.
const TRIGGER_PREFIX: &str = "_rowgate_rt_";

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
/// listed). Writes only what differs, so a second call changes nothing.
pub async fn ensure(db: &Database, tables: &[Table]) -> anyhow::Result<()> {
    let sqlite = sqlite_only(db)?;
    let wanted: Vec<(String, String)> = tables
        .iter()
        .flat_map(|t| {
            [Op::Insert, Op::Update, Op::Delete].map(|op| (trigger_name(t, op), trigger_sql(t, op)))
        })
        .collect();
    let current = sqlite
        .read(|conn| current_triggers(conn).map_err(map_error))
        .await?;
    let log_exists = sqlite
        .read(|conn| table_exists(conn).map_err(map_error))
        .await?;
    let stale: Vec<String> = current
        .iter()
        .filter(|(name, sql)| !wanted.iter().any(|(n, s)| n == name && s == sql))
        .map(|(name, _)| name.clone())
        .collect();
    let missing: Vec<(String, String)> = wanted
        .into_iter()
        .filter(|(name, sql)| !current.iter().any(|(n, s)| n == name && s == sql))
        .collect();
    if log_exists && stale.is_empty() && missing.is_empty() {
        return Ok(());
    }
    sqlite
        .write(move |conn| {
            conn.execute_batch(&format!(
                "CREATE TABLE IF NOT EXISTS {LOG} (
                   id INTEGER PRIMARY KEY AUTOINCREMENT,
                   tbl TEXT NOT NULL,
                   op TEXT NOT NULL,
                   pk TEXT,
                   new TEXT,
                   old TEXT,
                   at INTEGER NOT NULL);
                 CREATE TABLE IF NOT EXISTS {LOG}_pruned (through INTEGER NOT NULL);
                 INSERT INTO {LOG}_pruned (through)
                   SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM {LOG}_pruned);"
            ))
            .map_err(map_error)?;
            for name in &stale {
                conn.execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote(name)))
                    .map_err(map_error)?;
            }
            for (name, sql) in &missing {
                conn.execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote(name)))
                    .map_err(map_error)?;
                conn.execute_batch(sql).map_err(map_error)?;
            }
            Ok(())
        })
        .await
        .map_err(|e| anyhow::anyhow!("setting up change capture: {e}"))?;
    tracing::info!(tables = tables.len(), "realtime: change capture set up");
    Ok(())
}

/// Up to `limit` changes after `after`, oldest first (of `table` only, when given, and not
/// past `upto`).
pub async fn fetch(
    db: &Database,
    after: i64,
    upto: Option<i64>,
    table: Option<String>,
    limit: usize,
) -> Result<Vec<Change>, ApiError> {
    let sqlite = db.as_sqlite().ok_or_else(unsupported)?;
    sqlite
        .read(move |conn| {
            let mut stmt = conn
                .prepare_cached(&format!(
                    "SELECT id, tbl, op, pk, new, old FROM {LOG}
                     WHERE id > ?1 AND id <= ?2 AND (?3 IS NULL OR tbl = ?3)
                     ORDER BY id LIMIT ?4"
                ))
                .map_err(map_error)?;
            let rows = stmt
                .query_map(
                    params![
                        after,
                        upto.unwrap_or(i64::MAX),
                        table,
                        i64::try_from(limit).unwrap_or(i64::MAX)
                    ],
                    |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, Option<String>>(3)?,
                            r.get::<_, Option<String>>(4)?,
                            r.get::<_, Option<String>>(5)?,
                        ))
                    },
                )
                .map_err(map_error)?;
            let mut changes = Vec::new();
            for row in rows {
                let (id, table, op, key, new, old) = row.map_err(map_error)?;
                let Some(op) = Op::parse(&op) else { continue };
                changes.push(Change {
                    id,
                    table,
                    op,
                    key: key.as_deref().and_then(object),
                    new: new.as_deref().and_then(object),
                    old: old.as_deref().and_then(object),
                });
            }
            Ok(changes)
        })
        .await
}

/// The log's last id and pruning mark.
pub async fn head(db: &Database) -> Result<Head, ApiError> {
    let sqlite = db.as_sqlite().ok_or_else(unsupported)?;
    sqlite
        .read(|conn| {
            let last: i64 = conn
                .query_row(
                    &format!("SELECT coalesce(max(id), 0) FROM {LOG}"),
                    [],
                    |r| r.get(0),
                )
                .map_err(map_error)?;
            // AUTOINCREMENT remembers the highest id ever given, also once pruned away
            let given: i64 = conn
                .query_row(
                    "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = ?1",
                    [LOG],
                    |r| r.get(0),
                )
                .optional()
                .map_err(map_error)?
                .unwrap_or(0);
            let pruned_through: i64 = conn
                .query_row(
                    &format!("SELECT coalesce(max(through), 0) FROM {LOG}_pruned"),
                    [],
                    |r| r.get(0),
                )
                .map_err(map_error)?;
            Ok(Head {
                last: last.max(given),
                pruned_through,
            })
        })
        .await
}

/// Deletes changes older than `max_age_ms` or beyond the newest `max_rows`; returns how many.
pub async fn prune(db: &Database, max_age_ms: u64, max_rows: u64) -> Result<usize, ApiError> {
    let sqlite = db.as_sqlite().ok_or_else(unsupported)?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
    let cutoff = now_ms.saturating_sub(i64::try_from(max_age_ms).unwrap_or(i64::MAX));
    let keep = i64::try_from(max_rows).unwrap_or(i64::MAX);
    sqlite
        .write(move |conn| {
            let through: Option<i64> = conn
                .query_row(
                    &format!(
                        "SELECT max(id) FROM {LOG}
                         WHERE at < ?1 OR id <= (SELECT max(id) FROM {LOG}) - ?2"
                    ),
                    params![cutoff, keep],
                    |r| r.get(0),
                )
                .map_err(map_error)?;
            let Some(through) = through else {
                return Ok(0);
            };
            let deleted = conn
                .execute(&format!("DELETE FROM {LOG} WHERE id <= ?1"), [through])
                .map_err(map_error)?;
            conn.execute(
                &format!("UPDATE {LOG}_pruned SET through = max(through, ?1)"),
                [through],
            )
            .map_err(map_error)?;
            Ok(deleted)
        })
        .await
}

fn unsupported() -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        "realtime change capture is not available on this database",
    )
}

fn sqlite_only(db: &Database) -> anyhow::Result<&crate::db::Sqlite> {
    db.as_sqlite()
        .ok_or_else(|| anyhow::anyhow!("realtime is not available on PostgreSQL yet"))
}

fn object(text: &str) -> Option<Map<String, Json>> {
    match serde_json::from_str(text) {
        Ok(Json::Object(map)) => Some(map),
        _ => None,
    }
}

fn table_exists(conn: &Connection) -> rusqlite::Result<bool> {
    conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = ?1",
        [LOG],
        |r| r.get(0),
    )
}

/// The capture triggers in the database: (name, SQL).
fn current_triggers(conn: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
    let mut stmt = conn.prepare(
        "SELECT name, sql FROM sqlite_schema WHERE type = 'trigger' AND substr(name, 1, ?1) = ?2",
    )?;
    let rows = stmt.query_map(
        params![
            i64::try_from(TRIGGER_PREFIX.len()).unwrap_or(0),
            TRIGGER_PREFIX
        ],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    rows.collect()
}

fn trigger_name(table: &Table, op: Op) -> String {
    format!("{TRIGGER_PREFIX}{}_{}", op.name(), table.name)
}

/// `CREATE TRIGGER` text for `op` on `table` (stable: compared with what is stored).
fn trigger_sql(table: &Table, op: Op) -> String {
    let row = |side: &str| {
        let pairs: Vec<String> = table
            .columns
            .iter()
            .map(|c| {
                let v = format!("{side}.{}", quote(&c.name));
                let value = match c.json_kind {
                    JsonKind::Bool => format!(
                        "CASE WHEN {v} IS NULL THEN NULL WHEN {v} THEN json('true') ELSE json('false') END"
                    ),
                    JsonKind::Json => {
                        format!("CASE WHEN json_valid({v}) THEN json({v}) ELSE {v} END")
                    }
                    JsonKind::Auto => {
                        format!("CASE WHEN typeof({v}) = 'blob' THEN hex({v}) ELSE {v} END")
                    }
                };
                format!("{}, {value}", literal(&c.name))
            })
            .collect();
        format!("json_object({})", pairs.join(", "))
    };
    let key = |side: &str| {
        if table.primary_key.is_empty() {
            "NULL".to_string()
        } else {
            let pairs: Vec<String> = table
                .primary_key
                .iter()
                .map(|k| format!("{}, {side}.{}", literal(k), quote(k)))
                .collect();
            format!("json_object({})", pairs.join(", "))
        }
    };
    let (event, key, new, old) = match op {
        Op::Insert => ("INSERT", key("NEW"), row("NEW"), "NULL".to_string()),
        Op::Update => ("UPDATE", key("NEW"), row("NEW"), row("OLD")),
        Op::Delete => ("DELETE", key("OLD"), "NULL".to_string(), row("OLD")),
    };
    format!(
        "CREATE TRIGGER {name} AFTER {event} ON {table} BEGIN \
         INSERT INTO {LOG} (tbl, op, pk, new, old, at) VALUES ({tbl}, '{op}', {key}, {new}, {old}, \
         CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)); END",
        name = quote(&trigger_name(table, op)),
        table = quote(&table.name),
        tbl = literal(&table.name),
        op = op.name(),
    )
}

/// A double-quoted SQL identifier.
fn quote(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A single-quoted SQL string literal.
fn literal(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}
