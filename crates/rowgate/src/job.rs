//! What a request asks of the database, as data: a short list of rendered statements and what to
//! do with each, plus the checks on the outcome. The planner and the custom resources build jobs;
//! a backend runs them (`db::sqlite_job` for SQLite, `db::postgres`) in one transaction, so the same job runs on
//! any backend and the HTTP layer never holds a connection.

use rowgate_query::ast::Condition;
use rowgate_query::stmt::Sql;
use rowgate_query::Value;

use sha2::{Digest, Sha256};

use crate::error::database::{DbError, Kind};
use crate::schema::JsonKind;

/// Whether a job only reads (any reader connection) or writes (the writer's transaction,
/// answered after COMMIT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Reads only; may run more than once (inline attempt, then the reader pool).
    Read,
    /// Writes; runs once, in one transaction with its own savepoint.
    Write,
}

/// How result rows are encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A JSON array of objects.
    Json,
    /// A JSON array of objects without their null members, at any depth (PostgreSQL's
    /// `json_strip_nulls`: `Accept: application/vnd.pgrst.array+json;nulls=stripped`).
    JsonNullsStripped,
    /// CSV with a header line.
    Csv,
}

/// One statement and what to do with it.
#[derive(Debug, Clone)]
pub enum Step {
    /// Fails with 412 unless this statement returns exactly one row whose representation (JSON,
    /// `shape`) has one of these ETags (`*` matches any row).
    IfMatch {
        /// The row's current representation.
        sql: Sql,
        /// Its shape.
        shape: OutputShape,
        /// Acceptable ETags.
        tags: Vec<String>,
    },
    /// Fails with 404 unless this statement (a duality view's document read) returns exactly
    /// one document and, when `tags` are given, with 412 unless its etag is one of them.
    Document {
        /// The document's read.
        sql: Sql,
        /// Its shape.
        shape: OutputShape,
        /// The fields left out of its etag.
        nocheck: Vec<Vec<String>>,
        /// Acceptable etags (`*` matches any).
        tags: Option<Vec<String>>,
    },
    /// Changes rows; their number adds to [`Output::affected`].
    Execute(Sql),
    /// Sets up the transaction (`SELECT set_config(…, true)`: the caller's claims, the time
    /// zone): run for its effect, counting nothing (PostgreSQL).
    Setting(Sql),
    /// Reads the `response.headers` and `response.status` settings a function or trigger made
    /// in the transaction (PostgreSQL; PostgREST's response settings) into
    /// [`Output::response`].
    ResponseSettings,
    /// Rows into [`Output::rows`] (and, in a write, into `affected`): with `shape`, or, when
    /// `None`, with the statement's own column names and declared types.
    Rows {
        /// The statement.
        sql: Sql,
        /// Keys and value kinds.
        shape: Option<OutputShape>,
    },
    /// One integer into [`Output::count`].
    Count(Sql),
    /// The exact count of one table's rows under filters the server can evaluate on a row
    /// (its own and the role's row filter), into [`Output::count`]: SQLite may answer it from
    /// a count it keeps, brought up to date with the changes captured since
    /// (`db::kept_counts`), instead of counting again; otherwise it is `sql`'s count.
    KeptCount {
        /// `SELECT count(*) …` of the rows.
        sql: Sql,
        /// The table counted.
        table: String,
        /// Its filters, ANDed.
        filters: Vec<Condition>,
    },
    /// The statement's execution plan (PostgreSQL's `EXPLAIN (…)`, prefixed to it) into
    /// [`Output::value`]: its JSON, or its lines of text.
    Explain(Sql),
    /// A count of the rows an upsert will overwrite (those whose conflict keys exist), added
    /// to [`Output::existing`]: an upsert that inserts nothing answers 200, not 201.
    Existing(Sql),
    /// A row count into [`Output::count`] from the planner's estimate for `rows` where the
    /// backend has one (PostgreSQL), else exact by `count`. With `exact_below`, an estimate
    /// under that many rows is replaced by the exact count (PostgREST's `count=estimated`).
    Estimate {
        /// `SELECT 1 FROM … WHERE …`: the rows to estimate.
        rows: Sql,
        /// The exact count of the same rows.
        count: Sql,
        /// Count exactly when the estimate is below this.
        exact_below: Option<u64>,
    },
    /// The first column of the first row, as JSON, into [`Output::value`].
    Value(Sql),
    /// Fails with `error` (and rolls back) unless this count is zero: an access rule's check.
    Forbid {
        /// `SELECT count(*) …` of the rows that break the rule.
        sql: Sql,
        /// The refusal (of kind [`Kind::Refused`]).
        error: DbError,
    },
}

/// A whole job.
#[derive(Debug, Clone)]
pub struct Job {
    /// Read or write.
    pub access: Access,
    /// The statements, run in order in one transaction.
    pub steps: Vec<Step>,
    /// Encoding of rows.
    pub format: Format,
    /// Fail (and roll back) when more rows than this were affected (`handling=strict`).
    pub max_affected: Option<u64>,
    /// Fail (and roll back) unless exactly one row was affected or returned (singular objects).
    pub exactly_one: bool,
    /// Answer as usual, but roll the write back (`Prefer: tx=rollback`, `rest.tx_end`).
    pub rollback: bool,
    /// A read that must see every commit so far: it runs on the primary even when read
    /// replicas take the reads (the OAuth clients, realtime's rows).
    pub primary: bool,
}

impl Job {
    /// A job of `steps` with no checks, rows as JSON.
    pub fn new(access: Access, steps: Vec<Step>) -> Job {
        Job {
            access,
            steps,
            format: Format::Json,
            max_affected: None,
            exactly_one: false,
            rollback: false,
            primary: false,
        }
    }

    /// This job, run on the primary even when replicas take the reads.
    pub fn on_primary(mut self) -> Job {
        self.primary = true;
        self
    }
}

impl Job {
    /// Every statement of its steps.
    pub fn statements(&self) -> impl Iterator<Item = &Sql> {
        self.steps.iter().flat_map(|step| {
            let (first, second) = match step {
                Step::IfMatch { sql, .. }
                | Step::Document { sql, .. }
                | Step::Rows { sql, .. }
                | Step::Forbid { sql, .. }
                | Step::Execute(sql)
                | Step::Setting(sql)
                | Step::Count(sql)
                | Step::KeptCount { sql, .. }
                | Step::Explain(sql)
                | Step::Existing(sql)
                | Step::Value(sql) => (Some(sql), None),
                Step::Estimate { rows, count, .. } => (Some(rows), Some(count)),
                Step::ResponseSettings => (None, None),
            };
            first.into_iter().chain(second)
        })
    }

    /// Rows as JSON objects without their null members (when they are JSON at all).
    pub fn strip_nulls(&mut self) {
        if self.format == Format::Json {
            self.format = Format::JsonNullsStripped;
        }
    }

    /// The checks after the steps: `max_affected` and `exactly_one` against the rows affected.
    pub fn check(&self, affected: u64) -> Result<(), DbError> {
        if let Some(max) = self.max_affected {
            if affected > max {
                return Err(DbError::new(
                    Kind::MaxAffected { affected },
                    "Query result exceeds max-affected preference constraint",
                )
                .detail(format!("The query affects {affected} rows")));
            }
        }
        if self.exactly_one {
            expect_one(affected)?;
        }
        Ok(())
    }
}

/// The `If-Match` check both backends make of an item's current representation (`rows` rows
/// encoded in `body`): exactly one row whose ETag is one of `tags` (or `*`), else 412.
pub fn check_if_match(rows: u64, body: &[u8], tags: &[String]) -> Result<(), DbError> {
    let holds = rows == 1 && {
        let tag = etag(unwrap_single(body));
        tags.iter().any(|t| t == "*" || *t == tag)
    };
    if holds {
        Ok(())
    } else {
        Err(precondition_failed())
    }
}

/// The check of a [`Step::Document`] on its read (`rows` documents encoded in `body`): exactly
/// one, whose etag is one of `tags` (or `*`) when they are given.
pub fn check_document(
    rows: u64,
    body: &[u8],
    nocheck: &[Vec<String>],
    tags: Option<&[String]>,
) -> Result<(), DbError> {
    if rows != 1 {
        return Err(DbError::new(Kind::NotFound, "no document has this _id"));
    }
    let Some(tags) = tags else {
        return Ok(());
    };
    let (_, etags) = crate::duality::with_metadata(body, nocheck).map_err(DbError::internal)?;
    if etags
        .iter()
        .any(|e| tags.iter().any(|t| t == "*" || t == e))
    {
        Ok(())
    } else {
        Err(DbError::new(
            Kind::PreconditionFailed,
            "the document has changed since the etag given (_metadata.etag or If-Match)",
        )
        .hint("GET the document again for its current etag"))
    }
}

/// The answer to an `If-Match` that names none of the row's current ETags.
pub fn precondition_failed() -> DbError {
    DbError::new(
        Kind::PreconditionFailed,
        "the row has changed (or is gone) since the ETag given in If-Match",
    )
    .hint("GET the row again for its current ETag")
}

/// What a job produced.
#[derive(Debug)]
pub struct Output {
    /// Encoded rows of the `Rows` steps (a finished JSON array or CSV text).
    pub rows: Vec<u8>,
    /// How many rows `rows` holds.
    pub row_count: u64,
    /// The `Count` step's result.
    pub count: Option<u64>,
    /// Rows changed (by `Execute`) or returned by `Rows` in a write.
    pub affected: u64,
    /// The `Existing` steps' rows (an upsert's rows that were there before it).
    pub existing: u64,
    /// The `Value` step's JSON.
    pub value: Option<Vec<u8>>,
    /// The `ResponseSettings` step's `response.headers` and `response.status`, as set.
    pub response: ResponseSettings,
}

/// What a function or trigger asked of the answer through `response.headers` (a JSON array
/// of one-key objects) and `response.status`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseSettings {
    /// `response.headers`, unless empty.
    pub headers: Option<String>,
    /// `response.status`, unless empty.
    pub status: Option<String>,
}

/// How to write one output column to JSON.
#[derive(Debug, Clone)]
pub struct OutputShape {
    /// Output keys, in order.
    pub keys: Vec<String>,
    /// How each value is written.
    pub kinds: Vec<JsonKind>,
    /// How the rows are ordered, by hidden columns that follow the output's (one per key): a
    /// write's representation, whose statement cannot order what it returns. Empty: as they
    /// come.
    pub sort: Vec<SortKey>,
}

/// One hidden column the rows are ordered by (`order=` of a write's representation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SortKey {
    /// Greatest first.
    pub descending: bool,
    /// NULLs before the other values.
    pub nulls_first: bool,
}

/// A JSON value as a bound value (objects and arrays as JSON text): a body's values, and
/// the rows the change log holds.
pub fn json_value(v: &serde_json::Value) -> Value {
    use serde_json::Value as Json;
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => n
            .as_i64()
            .map(Value::Int)
            .or_else(|| n.as_f64().map(Value::Real))
            .unwrap_or_else(|| Value::Text(n.to_string())),
        Json::String(s) => Value::Text(s.clone()),
        other => Value::Text(other.to_string()),
    }
}

/// Whether a row, as JSON (the change log's rows), passes `filters` (ANDed, SQL's `WHERE`: an
/// unknown is not a pass); an error when they cannot be judged in memory (a column the row
/// lacks, a JSON path, an operator only the database has).
pub fn row_passes(
    filters: &[Condition],
    row: &serde_json::Map<String, serde_json::Value>,
) -> Result<bool, rowgate_query::eval::EvalError> {
    let lookup = |column: &str| row.get(column).map(json_value);
    rowgate_query::eval::eval_all(filters, &lookup).map(|verdict| verdict == Some(true))
}

/// A strong ETag of a representation: a quoted, truncated SHA-256 of its bytes.
pub fn etag(body: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(body);
    let mut tag = String::with_capacity(34);
    tag.push('"');
    for byte in &digest[..16] {
        tag.push(char::from(HEX[usize::from(byte >> 4)]));
        tag.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
    tag.push('"');
    tag
}

/// Fails with 406 unless exactly one row was produced (singular object requests).
pub fn expect_one(rows: u64) -> Result<(), DbError> {
    if rows == 1 {
        Ok(())
    } else {
        Err(DbError::new(
            Kind::NotSingular { rows },
            "Cannot coerce the result to a single JSON object",
        )
        .detail(format!("The result contains {rows} rows")))
    }
}

/// A JSON array of exactly one object, as that object.
pub fn unwrap_single(body: &[u8]) -> &[u8] {
    if body.len() >= 2 && body[0] == b'[' && body[body.len() - 1] == b']' {
        &body[1..body.len() - 1]
    } else {
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn etags_are_quoted_and_stable() {
        let a = etag(b"{\"a\":1}");
        assert_eq!(a.len(), 34);
        assert!(a.starts_with('"') && a.ends_with('"'));
        assert_eq!(a, etag(b"{\"a\":1}"));
        assert_ne!(a, etag(b"{\"a\":2}"));
    }
}
