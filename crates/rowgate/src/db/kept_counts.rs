//! Exact counts kept incrementally (SQLite): `Prefer: count=exact` on a table whose changes are
//! captured ([`CHANGE_LOG`], realtime's triggers) is answered from a count kept for its
//! statement and brought up to date with the changes logged since, instead of counting again.
//!
//! A kept count is `(count, through)`: the count in a snapshot whose newest logged change was
//! `through`. A request reads, in its own read transaction, the log's newest id `head`; the
//! changes `(through, head]` of the table are each judged against the count's filters in
//! memory (`rowgate_query::eval`, the realtime matcher's): an insert that matches adds one, a
//! delete of a matching row takes one, an update moves one in or out. The result is the count
//! at the request's own snapshot, exact, whoever wrote (any process writes through the
//! triggers). It falls back to counting when the count is not kept yet, the log was pruned
//! past it, too many changes are pending, the table's triggers are not all there (checked
//! once per schema version), or a change's row cannot be judged (a column the row lacks).
//! Every [`VERIFY_EVERY`]th answer of a key is counted as well and compared: a disagreement
//! is logged and the key is never kept again.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use rowgate_query::ast::Condition;
use rowgate_query::stmt::Sql;
use rusqlite::Connection;
use serde_json::{Map, Value as Json};

use crate::error::database::DbError;

/// The change log realtime's capture triggers write.
pub const CHANGE_LOG: &str = "_rowgate_changes";

/// The name of the capture trigger of `op` (`insert`, `update`, `delete`) on `table`.
pub fn capture_trigger(op: &str, table: &str) -> String {
    format!("_rowgate_rt_{op}_{table}")
}

/// Most logged changes applied to a kept count at once; more, and it is counted again.
const MAX_PENDING: i64 = 2_000;

/// Most kept counts; past it, all are forgotten (they are rebuilt by counting).
const MAX_KEPT: usize = 4_096;

/// One answer in this many, per key, is also counted and compared. A check is a full count
/// (S7: ~2 ms for a prefix's 40,000 rows); one in 64 cost S7 a tenth of its CPU.
const VERIFY_EVERY: u64 = 1_024;

/// The kept counts of one database.
#[derive(Default)]
pub struct KeptCounts {
    state: Mutex<State>,
    /// Counts answered from a kept count (`/metrics`).
    pub kept_answers: AtomicU64,
    /// Counts of captured tables that had to be counted (`/metrics`).
    pub counted_answers: AtomicU64,
}

#[derive(Default)]
struct State {
    /// By statement (text and bound values).
    kept: HashMap<String, Kept>,
    /// Keys whose kept count once disagreed with a count: never kept again.
    refused: HashSet<String>,
    /// The schema version at which `captured` was read, and the tables whose three capture
    /// triggers were there.
    captured: Option<(i64, HashSet<String>)>,
}

#[derive(Clone, Copy)]
struct Kept {
    count: i64,
    through: i64,
    answers: u64,
}

impl KeptCounts {
    /// The exact count of `table`'s rows under `filters` in `conn`'s read transaction, whose
    /// plain count is `sql`; `count` runs a statement's count.
    pub fn count(
        &self,
        conn: &Connection,
        sql: &Sql,
        table: &str,
        filters: &[Condition],
        count: impl Fn(&Sql) -> Result<u64, DbError>,
    ) -> Result<u64, DbError> {
        let count = |sql: &Sql| count(sql).map(|n| i64::try_from(n).unwrap_or(i64::MAX));
        let answer = |n: i64| u64::try_from(n).unwrap_or(0);
        let key = key_of(sql);
        let Some((head, pruned)) = self.log_position(conn, table)? else {
            return count(sql).map(answer);
        };
        let kept = {
            let state = self.lock();
            if state.refused.contains(&key) {
                return count(sql).map(answer);
            }
            state.kept.get(&key).copied()
        };
        let brought = match kept {
            Some(k) if k.through == head => Some(k.count),
            Some(k)
                if k.through < head && k.through >= pruned && head - k.through <= MAX_PENDING =>
            {
                changes_since(conn, table, k.through, head, filters)?
                    .map(|delta| k.count + delta)
                    .filter(|n| *n >= 0)
            }
            _ => None,
        };
        let answers = kept.map_or(0, |k| k.answers) + 1;
        let tally = if brought.is_some() {
            &self.kept_answers
        } else {
            &self.counted_answers
        };
        tally.fetch_add(1, Ordering::Relaxed);
        let counted = match brought {
            Some(n) if answers % VERIFY_EVERY != 0 => n,
            Some(n) => {
                let exact = count(sql)?;
                if exact != n {
                    tracing::error!(
                        table,
                        kept = n,
                        counted = exact,
                        "a kept count disagreed with the count; not keeping this one again"
                    );
                    let mut state = self.lock();
                    state.kept.remove(&key);
                    state.refused.insert(key);
                    return Ok(answer(exact));
                }
                exact
            }
            None => count(sql)?,
        };
        let mut state = self.lock();
        if state.kept.len() >= MAX_KEPT {
            state.kept.clear();
        }
        let newer = state.kept.get(&key).is_none_or(|k| k.through <= head);
        if newer {
            state.kept.insert(
                key,
                Kept {
                    count: counted,
                    through: head,
                    answers,
                },
            );
        }
        Ok(answer(counted))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The log's newest id and the id it was pruned through, in this snapshot; `None` when
    /// `table`'s changes are not all captured (no log, a trigger missing).
    fn log_position(&self, conn: &Connection, table: &str) -> Result<Option<(i64, i64)>, DbError> {
        let version: i64 = conn
            .prepare_cached("PRAGMA schema_version")?
            .query_row([], |r| r.get(0))?;
        let known = {
            let state = self.lock();
            match &state.captured {
                Some((at, tables)) if *at == version => Some(tables.contains(table)),
                _ => None,
            }
        };
        let captured = match known {
            Some(captured) => captured,
            None => {
                let tables = captured_tables(conn)?;
                let captured = tables.contains(table);
                self.lock().captured = Some((version, tables));
                captured
            }
        };
        if !captured {
            return Ok(None);
        }
        let head: i64 = conn
            .prepare_cached(&format!("SELECT coalesce(max(id), 0) FROM {CHANGE_LOG}"))?
            .query_row([], |r| r.get(0))?;
        let pruned: i64 = conn
            .prepare_cached(&format!(
                "SELECT coalesce(max(through), 0) FROM {CHANGE_LOG}_pruned"
            ))?
            .query_row([], |r| r.get(0))?;
        Ok(Some((head, pruned)))
    }
}

/// A statement's key: its text and bound values.
fn key_of(sql: &Sql) -> String {
    let mut key = sql.text.clone();
    for value in &sql.params {
        key.push('\0');
        key.push_str(&format!("{value:?}"));
    }
    key
}

/// The tables with all three capture triggers (none when there is no change log).
fn captured_tables(conn: &Connection) -> Result<HashSet<String>, DbError> {
    let has_log: bool = conn
        .prepare_cached(
            "SELECT count(*) > 1 FROM sqlite_schema WHERE type = 'table' AND name IN (?1, ?2)",
        )?
        .query_row(
            [CHANGE_LOG.to_string(), format!("{CHANGE_LOG}_pruned")],
            |r| r.get(0),
        )?;
    if !has_log {
        return Ok(HashSet::new());
    }
    let mut stmt = conn.prepare_cached(
        "SELECT tbl_name, name FROM sqlite_schema WHERE type = 'trigger' AND name LIKE '\\_rowgate\\_rt\\_%' ESCAPE '\\'",
    )?;
    let triggers: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<Result<_, _>>()?;
    Ok(triggers
        .iter()
        .map(|(table, _)| table)
        .filter(|table| {
            ["insert", "update", "delete"].iter().all(|op| {
                let name = capture_trigger(op, table);
                triggers.iter().any(|(t, n)| t == *table && *n == name)
            })
        })
        .cloned()
        .collect())
}

/// How the changes of `table` logged in `(after, through]` move the count of rows under
/// `filters`; `None` when a row cannot be judged in memory.
fn changes_since(
    conn: &Connection,
    table: &str,
    after: i64,
    through: i64,
    filters: &[Condition],
) -> Result<Option<i64>, DbError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT op, new, old FROM {CHANGE_LOG} WHERE id > ?1 AND id <= ?2 AND tbl = ?3"
    ))?;
    let mut rows = stmt.query(rusqlite::params![after, through, table])?;
    let mut delta = 0i64;
    while let Some(row) = rows.next()? {
        let op: String = row.get(0)?;
        let new: Option<String> = row.get(1)?;
        let old: Option<String> = row.get(2)?;
        let matches = |side: Option<&str>| -> Option<bool> {
            let row: Map<String, Json> = serde_json::from_str(side?).ok()?;
            crate::job::row_passes(filters, &row).ok()
        };
        let (was, is) = match op.as_str() {
            "insert" => (Some(false), matches(new.as_deref())),
            "delete" => (matches(old.as_deref()), Some(false)),
            "update" => (matches(old.as_deref()), matches(new.as_deref())),
            _ => (None, None),
        };
        let (Some(was), Some(is)) = (was, is) else {
            return Ok(None);
        };
        delta += i64::from(is) - i64::from(was);
    }
    Ok(Some(delta))
}
