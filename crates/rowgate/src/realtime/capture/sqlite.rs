//! Change capture on SQLite: `_rowgate_changes` (hidden from the API like every `_rowgate_` table), triggers
//! `_rowgate_rt_{insert,update,delete}_<table>`. The triggers are re-created only when their
//! text changes (a schema change), so workers starting together converge without DDL loops.
//! Rows are JSON built by the trigger: booleans as `true`/`false`, JSON columns as JSON, blobs
//! as hex. The trigger SQL uses only functions of SQLite 3.38+, so older shells can write too.

use rusqlite::{params, Connection, OptionalExtension as _};

use super::{object, Change, Head, Op};
use crate::db::{DbError, Sqlite};
use crate::schema::{JsonKind, Table};

/// The change log.
const LOG: &str = crate::db::kept_counts::CHANGE_LOG;

/// Prefix of the capture triggers' names.
const TRIGGER_PREFIX: &str = "_rowgate_rt_";

/// Creates the change log and the triggers of `tables` (and drops triggers of tables no longer
/// listed). Writes only what differs, so a second call changes nothing.
pub async fn ensure(sqlite: &Sqlite, tables: &[Table]) -> anyhow::Result<()> {
    let wanted: Vec<(String, String)> = tables
        .iter()
        .flat_map(|t| {
            [Op::Insert, Op::Update, Op::Delete].map(|op| (trigger_name(t, op), trigger_sql(t, op)))
        })
        .collect();
    let current = sqlite
        .read(|conn| current_triggers(conn).map_err(DbError::from))
        .await?;
    let log_exists = sqlite
        .read(|conn| table_exists(conn).map_err(DbError::from))
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
            ))?;
            for name in &stale {
                conn.execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote(name)))?;
            }
            for (name, sql) in &missing {
                conn.execute_batch(&format!("DROP TRIGGER IF EXISTS {}", quote(name)))?;
                conn.execute_batch(sql)?;
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
    sqlite: &Sqlite,
    after: i64,
    upto: Option<i64>,
    table: Option<String>,
    limit: usize,
) -> Result<Vec<Change>, DbError> {
    sqlite
        .read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT id, tbl, op, pk, new, old, at FROM {LOG}
                     WHERE id > ?1 AND id <= ?2 AND (?3 IS NULL OR tbl = ?3)
                     ORDER BY id LIMIT ?4"
            ))?;
            let rows = stmt.query_map(
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
                        r.get::<_, i64>(6)?,
                    ))
                },
            )?;
            let mut changes = Vec::new();
            for row in rows {
                let (id, table, op, key, new, old, at) = row?;
                let Some(op) = Op::parse(&op) else { continue };
                changes.push(Change {
                    id,
                    table,
                    op,
                    key: key.as_deref().and_then(object),
                    new: new.as_deref().and_then(object),
                    old: old.as_deref().and_then(object),
                    at,
                });
            }
            Ok(changes)
        })
        .await
}

/// The log's last id and pruning mark.
pub async fn head(sqlite: &Sqlite) -> Result<Head, DbError> {
    sqlite
        .read(|conn| {
            let last: i64 = conn.query_row(
                &format!("SELECT coalesce(max(id), 0) FROM {LOG}"),
                [],
                |r| r.get(0),
            )?;
            // AUTOINCREMENT remembers the highest id ever given, also once pruned away
            let given: i64 = conn
                .query_row(
                    "SELECT coalesce(max(seq), 0) FROM sqlite_sequence WHERE name = ?1",
                    [LOG],
                    |r| r.get(0),
                )
                .optional()?
                .unwrap_or(0);
            let pruned_through: i64 = conn.query_row(
                &format!("SELECT coalesce(max(through), 0) FROM {LOG}_pruned"),
                [],
                |r| r.get(0),
            )?;
            Ok(Head {
                last: last.max(given),
                pruned_through,
            })
        })
        .await
}

/// Deletes the oldest changes past the retention (a chunk at a time); returns how many.
pub async fn prune(sqlite: &Sqlite, cutoff_ms: i64, keep: i64) -> Result<usize, DbError> {
    sqlite
        .write(move |conn| {
            let through: Option<i64> = conn.query_row(
                &format!(
                    "SELECT max(id) FROM (SELECT id, at FROM {LOG} ORDER BY id LIMIT 10000)
                         WHERE at < ?1 OR id <= (SELECT max(id) FROM {LOG}) - ?2"
                ),
                params![cutoff_ms, keep],
                |r| r.get(0),
            )?;
            let Some(through) = through else {
                return Ok(0);
            };
            let deleted = conn.execute(&format!("DELETE FROM {LOG} WHERE id <= ?1"), [through])?;
            conn.execute(
                &format!("UPDATE {LOG}_pruned SET through = max(through, ?1)"),
                [through],
            )?;
            Ok(deleted)
        })
        .await
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
    crate::db::kept_counts::capture_trigger(op.name(), &table.name)
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
