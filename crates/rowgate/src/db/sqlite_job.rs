//! The SQLite job interpreter: the only code that runs a request's statements on SQLite. Runs a [`Job`] on a SQLite
//! connection (a reader's, or the writer's inside its transaction) and writes result rows
//! straight into the response buffer, as JSON or CSV, without building intermediate values.

use std::io::Write as _;

use rowgate_query::stmt::Sql;
use rowgate_query::Value;
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::{Connection, ToSql};

use super::kept_counts::KeptCounts;
use super::tally::Tally;
use crate::error::database::{DbError, Kind};
pub use crate::job::Format;
use crate::job::{Job, Output, OutputShape, Step};
use crate::schema::JsonKind;

/// Result rows, encoded.
#[derive(Debug)]
pub struct Encoded {
    /// The encoded rows (a JSON array, or CSV).
    pub body: Vec<u8>,
    /// Number of rows.
    pub rows: u64,
}

struct Bound<'a>(&'a Value);

impl ToSql for Bound<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self.0 {
            Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
            Value::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
            Value::Real(f) => ToSqlOutput::Borrowed(ValueRef::Real(*f)),
            Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
            Value::Bool(b) => ToSqlOutput::Borrowed(ValueRef::Integer(i64::from(*b))),
        })
    }
}

fn prepare<'c>(conn: &'c Connection, sql: &Sql) -> Result<rusqlite::CachedStatement<'c>, DbError> {
    let mut stmt = conn.prepare_cached(&sql.text)?;
    for (i, p) in sql.params.iter().enumerate() {
        stmt.raw_bind_parameter(i + 1, Bound(p))?;
    }
    Ok(stmt)
}

impl Default for Encoded {
    fn default() -> Self {
        Encoded {
            body: Vec::with_capacity(4096),
            rows: 0,
        }
    }
}

/// Runs `job`'s steps on `conn` in order, then its checks; an error fails the whole job (a
/// write's savepoint is rolled back by the caller). A kept count is answered from `counts`.
pub fn run_job(conn: &Connection, job: &Job, counts: &KeptCounts) -> Result<Output, DbError> {
    let mut out = Encoded::default();
    let mut tally = Tally::default();
    for step in &job.steps {
        match step {
            Step::IfMatch { sql, shape, tags } => check_if_match(conn, sql, shape, tags)?,
            Step::Document {
                sql,
                shape,
                nocheck,
                tags,
            } => {
                let mut doc = Encoded::default();
                query_into(conn, sql, shape, Format::Json, &mut doc)?;
                finish(&mut doc, Format::Json);
                crate::job::check_document(doc.rows, &doc.body, nocheck, tags.as_deref())?
            }
            Step::Execute(sql) => tally.executed(execute(conn, sql)?),
            Step::Setting(sql) => {
                execute(conn, sql)?;
            }
            // (SQLite has no settings: nothing can have been asked)
            Step::ResponseSettings => {}
            Step::Rows { sql, shape } => {
                let before = out.rows;
                match shape {
                    Some(shape) => query_into(conn, sql, shape, job.format, &mut out)?,
                    None => query_into_as_declared(conn, sql, job.format, &mut out)?,
                }
                tally.returned(job.access, out.rows - before);
            }
            // SQLite has no planner estimate to offer: always exact.
            Step::Count(sql) | Step::Estimate { count: sql, .. } => {
                tally.counted(scalar(conn, sql)?)
            }
            Step::KeptCount {
                sql,
                table,
                filters,
            } => tally.counted(counts.count(conn, sql, table, filters, |s| scalar(conn, s))?),
            Step::Existing(sql) => tally.existed(scalar(conn, sql)?),
            Step::Value(sql) => tally.valued(first_value_as_declared(conn, sql)?),
            // (plans are PostgreSQL's: the plan stage answers 406 on SQLite before any job)
            Step::Explain(_) => {
                return Err(DbError::new(
                    Kind::Internal,
                    "an execution plan was asked of SQLite",
                ))
            }
            Step::Forbid { sql, error } => Tally::forbid(scalar(conn, sql)?, error)?,
        }
    }
    finish(&mut out, job.format);
    tally.finish(job, out.body)
}

/// Fails with 412 unless the row's current representation matches one of `tags`.
fn check_if_match(
    conn: &Connection,
    current: &Sql,
    shape: &OutputShape,
    tags: &[String],
) -> Result<(), DbError> {
    let mut out = Encoded::default();
    query_into(conn, current, shape, Format::Json, &mut out)?;
    finish(&mut out, Format::Json);
    crate::job::check_if_match(out.rows, &out.body, tags)
}

/// Runs a statement that changes rows without returning them; returns the number changed.
pub fn execute(conn: &Connection, sql: &Sql) -> Result<u64, DbError> {
    let mut stmt = prepare(conn, sql)?;
    let n = stmt.raw_execute()?;
    Ok(n as u64)
}

/// Runs a query returning one integer (a count).
pub fn scalar(conn: &Connection, sql: &Sql) -> Result<u64, DbError> {
    let mut stmt = prepare(conn, sql)?;
    let mut rows = stmt.raw_query();
    match rows.next()? {
        Some(row) => Ok(u64::try_from(row.get::<_, i64>(0)?).unwrap_or(0)),
        None => Ok(0),
    }
}

/// Runs a query and appends its rows to `out` (which must be empty or hold rows of the same
/// format from an earlier call with the same shape; call [`finish`] at the end).
pub fn query_into(
    conn: &Connection,
    sql: &Sql,
    shape: &OutputShape,
    format: Format,
    out: &mut Encoded,
) -> Result<(), DbError> {
    let mut stmt = prepare(conn, sql)?;
    encode_rows(&mut stmt, shape, format, out)
}

/// Like [`query_into`] for SQL written by hand (custom resources): the keys are the statement's
/// own column names, booleans and JSON recognised by the declared types of its result columns.
pub fn query_into_as_declared(
    conn: &Connection,
    sql: &Sql,
    format: Format,
    out: &mut Encoded,
) -> Result<(), DbError> {
    let mut stmt = prepare(conn, sql)?;
    let shape = declared_shape(&stmt);
    encode_rows(&mut stmt, &shape, format, out)
}

/// The first column of the first row as JSON (`null` when there is no row), typed as declared.
pub fn first_value_as_declared(conn: &Connection, sql: &Sql) -> Result<Vec<u8>, DbError> {
    let mut stmt = prepare(conn, sql)?;
    let kind = declared_shape(&stmt)
        .kinds
        .first()
        .copied()
        .unwrap_or(JsonKind::Auto);
    let mut rows = stmt.raw_query();
    let mut out = Vec::new();
    match rows.next()? {
        Some(row) if row.as_ref().column_count() > 0 => {
            write_json_value(&mut out, row.get_ref(0)?, kind);
        }
        _ => out.extend_from_slice(b"null"),
    }
    Ok(out)
}

fn declared_shape(stmt: &rusqlite::Statement<'_>) -> OutputShape {
    let columns = stmt.columns();
    OutputShape {
        keys: columns.iter().map(|c| c.name().to_string()).collect(),
        kinds: columns
            .iter()
            .map(|c| crate::schema::classify(c.decl_type().unwrap_or("")).1)
            .collect(),
        sort: Vec::new(),
    }
}

fn encode_rows(
    stmt: &mut rusqlite::Statement<'_>,
    shape: &OutputShape,
    format: Format,
    out: &mut Encoded,
) -> Result<(), DbError> {
    let mut rows = stmt.raw_query();
    let keys: Vec<Vec<u8>> = match format {
        Format::Json | Format::JsonNullsStripped => shape
            .keys
            .iter()
            .map(|k| {
                let mut b = serde_json::to_vec(k).unwrap_or_default();
                b.push(b':');
                b
            })
            .collect(),
        Format::Csv => Vec::new(),
    };
    if format == Format::Csv && out.body.is_empty() {
        write_csv_record(&mut out.body, shape.keys.iter().map(|k| Some(k.as_bytes())));
    }
    if !shape.sort.is_empty() {
        // each row encoded apart, then ordered by its hidden columns
        let mut sorted: Vec<(Vec<rusqlite::types::Value>, Encoded)> = Vec::new();
        while let Some(row) = rows.next()? {
            let by = (0..shape.sort.len())
                .map(|i| row.get::<_, rusqlite::types::Value>(shape.keys.len() + i))
                .collect::<Result<Vec<_>, _>>()?;
            let mut one = Encoded::default();
            encode_row(row, &keys, shape, format, &mut one)?;
            sorted.push((by, one));
        }
        sorted.sort_by(|(a, _), (b, _)| sqlite_order(a, b, &shape.sort));
        for (_, one) in sorted {
            let body = match format {
                // the row's own `[`: the place in the array is this one's
                Format::Json | Format::JsonNullsStripped => &one.body[1..],
                Format::Csv => &one.body[..],
            };
            if format != Format::Csv {
                out.body.push(if out.rows == 0 { b'[' } else { b',' });
            }
            out.body.extend_from_slice(body);
            out.rows += 1;
        }
        return Ok(());
    }
    while let Some(row) = rows.next()? {
        encode_row(row, &keys, shape, format, out)?;
    }
    Ok(())
}

/// How SQLite orders two rows' hidden sort columns (`ORDER BY` with its BINARY collation:
/// NULL, then numbers by value, then text and blobs byte by byte), each key's direction and
/// null placement applied.
fn sqlite_order(
    a: &[rusqlite::types::Value],
    b: &[rusqlite::types::Value],
    keys: &[crate::job::SortKey],
) -> std::cmp::Ordering {
    use rusqlite::types::Value as V;
    use std::cmp::Ordering;
    fn rank(v: &V) -> u8 {
        match v {
            V::Null => 0,
            V::Integer(_) | V::Real(_) => 1,
            V::Text(_) => 2,
            V::Blob(_) => 3,
        }
    }
    fn number(v: &V) -> f64 {
        match v {
            V::Integer(i) => *i as f64,
            V::Real(f) => *f,
            _ => 0.0,
        }
    }
    for ((x, y), key) in a.iter().zip(b).zip(keys) {
        let ordering = match (x, y) {
            (V::Null, V::Null) => Ordering::Equal,
            (V::Null, _) if key.nulls_first => Ordering::Less,
            (V::Null, _) => Ordering::Greater,
            (_, V::Null) if key.nulls_first => Ordering::Greater,
            (_, V::Null) => Ordering::Less,
            _ => {
                let natural = match (x, y) {
                    (V::Integer(i), V::Integer(j)) => i.cmp(j),
                    (V::Text(s), V::Text(t)) => s.as_bytes().cmp(t.as_bytes()),
                    (V::Blob(s), V::Blob(t)) => s.cmp(t),
                    _ if rank(x) == 1 && rank(y) == 1 => number(x).total_cmp(&number(y)),
                    _ => rank(x).cmp(&rank(y)),
                };
                if key.descending {
                    natural.reverse()
                } else {
                    natural
                }
            }
        };
        if ordering != Ordering::Equal {
            return ordering;
        }
    }
    Ordering::Equal
}

/// Encodes one row after those already in `out` (its `[` or `,` before it, for JSON).
fn encode_row(
    row: &rusqlite::Row<'_>,
    keys: &[Vec<u8>],
    shape: &OutputShape,
    format: Format,
    out: &mut Encoded,
) -> Result<(), DbError> {
    match format {
        Format::Json => {
            out.body.push(if out.rows == 0 { b'[' } else { b',' });
            out.body.push(b'{');
            for (i, key) in keys.iter().enumerate() {
                if i > 0 {
                    out.body.push(b',');
                }
                out.body.extend_from_slice(key);
                let value = row.get_ref(i)?;
                write_json_value(&mut out.body, value, shape.kinds[i]);
            }
            out.body.push(b'}');
        }
        Format::JsonNullsStripped => {
            out.body.push(if out.rows == 0 { b'[' } else { b',' });
            out.body.push(b'{');
            let mut first = true;
            for (i, key) in keys.iter().enumerate() {
                let value = row.get_ref(i)?;
                if value == ValueRef::Null {
                    continue;
                }
                if !std::mem::take(&mut first) {
                    out.body.push(b',');
                }
                out.body.extend_from_slice(key);
                let mut written = Vec::new();
                write_json_value(&mut written, value, shape.kinds[i]);
                out.body.extend_from_slice(&strip_nested_nulls(written));
            }
            out.body.push(b'}');
        }
        Format::Csv => {
            let mut fields = Vec::with_capacity(shape.keys.len());
            for i in 0..shape.keys.len() {
                fields.push(csv_field(row.get_ref(i)?));
            }
            write_csv_record(&mut out.body, fields.iter().map(|f| f.as_deref()));
        }
    }
    out.rows += 1;
    Ok(())
}

/// A JSON value with the null members of its objects left out, at any depth (SQLite's values
/// are 64-bit integers and doubles, which go through `serde_json` unchanged); a scalar as it is.
fn strip_nested_nulls(json: Vec<u8>) -> Vec<u8> {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.retain(|_, v| !v.is_null());
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    if !matches!(json.first(), Some(b'{' | b'[')) {
        return json;
    }
    match serde_json::from_slice::<serde_json::Value>(&json) {
        Ok(mut value) => {
            strip(&mut value);
            serde_json::to_vec(&value).unwrap_or(json)
        }
        Err(_) => json,
    }
}

/// Closes a JSON array started by [`query_into`] (or writes `[]` when there were no rows).
pub fn finish(out: &mut Encoded, format: Format) {
    if format != Format::Csv {
        if out.rows == 0 {
            out.body.extend_from_slice(b"[]");
        } else {
            out.body.push(b']');
        }
    }
}

fn write_json_value(out: &mut Vec<u8>, value: ValueRef<'_>, kind: JsonKind) {
    match value {
        ValueRef::Null => out.extend_from_slice(b"null"),
        ValueRef::Integer(i) if kind == JsonKind::Bool => {
            out.extend_from_slice(if i != 0 { b"true" } else { b"false" })
        }
        ValueRef::Integer(i) => out.extend_from_slice(itoa::Buffer::new().format(i).as_bytes()),
        ValueRef::Real(f) => {
            if f.is_finite() {
                let _ = serde_json::to_writer(&mut *out, &f);
            } else {
                out.extend_from_slice(b"null");
            }
        }
        ValueRef::Text(t) => {
            let text = match std::str::from_utf8(t) {
                Ok(text) => std::borrow::Cow::Borrowed(text),
                Err(_) => String::from_utf8_lossy(t),
            };
            if kind == JsonKind::Json
                && serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok()
            {
                out.extend_from_slice(text.trim().as_bytes());
            } else {
                let _ = serde_json::to_writer(&mut *out, text.as_ref());
            }
        }
        ValueRef::Blob(b) => {
            out.extend_from_slice(b"\"\\\\x");
            for byte in b {
                let _ = write!(out, "{byte:02x}");
            }
            out.push(b'"');
        }
    }
}

fn csv_field(value: ValueRef<'_>) -> Option<Vec<u8>> {
    match value {
        ValueRef::Null => None,
        ValueRef::Integer(i) => Some(i.to_string().into_bytes()),
        ValueRef::Real(f) => Some(f.to_string().into_bytes()),
        ValueRef::Text(t) => Some(t.to_vec()),
        ValueRef::Blob(b) => Some(
            b.iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
                .into_bytes(),
        ),
    }
}

fn write_csv_record<'a>(out: &mut Vec<u8>, fields: impl Iterator<Item = Option<&'a [u8]>>) {
    let mut writer = csv::WriterBuilder::new()
        .has_headers(false)
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    let fields: Vec<&[u8]> = fields.map(|f| f.unwrap_or(b"")).collect();
    if writer.write_record(&fields).is_ok() {
        if let Ok(bytes) = writer.into_inner() {
            out.extend_from_slice(&bytes);
        }
    }
}
