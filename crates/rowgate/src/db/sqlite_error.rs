//! SQLite's errors by kind, classified in one place: constraint violations, timeouts, busy
//! databases, SQLite's size limits, a stale schema, a statement wrong in itself, and
//! PostgreSQL's SQLSTATEs for the errors both backends share. `?` on a `rusqlite::Error` gives a
//! [`DbError`].

use rusqlite::{ffi, ErrorCode as SqliteCode};

use crate::error::database::{DbError, Kind};

/// Starts the message of every error raised by `regexp()`, so it can be recognised.
pub(crate) const REGEX_ERROR_PREFIX: &str = "invalid regular expression: ";

/// Messages of SQLite's size limits (bound variables, expression depth, result columns, …):
/// a request that builds such a statement is too complex, not a server fault.
const LIMIT_MESSAGES: &[&str] = &[
    "too many SQL variables",
    "variable number must be between",
    "Expression tree is too large",
    "too many columns",
    "too many arguments on function",
    "too many terms in",
    "parser stack overflow",
    "pattern too complex",
];

fn hits_a_limit(message: &str) -> bool {
    LIMIT_MESSAGES.iter().any(|m| message.contains(m))
}

/// A statement beyond one of SQLite's limits; `message` is SQLite's own (no SQL).
fn too_complex(message: String) -> DbError {
    DbError::new(Kind::TooComplex, "the query is too large for the database")
        .detail(message)
        .hint("use fewer filters, list items or columns per request")
}

/// Whether the disk refused a write outright (full, over the file-size limit, or the device
/// failed it: `write()` returned an error, so nothing of it was written): the transaction did
/// not commit.
pub(crate) fn write_refused(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, _) => {
            f.code == SqliteCode::DiskFull || f.extended_code == ffi::SQLITE_IOERR_WRITE
        }
        _ => false,
    }
}

/// The answer to a write the disk refused: nothing of its transaction was written.
pub(crate) fn refused_write() -> DbError {
    DbError::new(
        Kind::StorageFull,
        "the database could not write: the disk is full, the file size limit is reached, or the device failed the write",
    )
    .hint("nothing was written; free space (or raise the limit, or see to the disk) and retry")
}

/// The SQLSTATE PostgreSQL gives a missing table (`42P01`) or column (`42703`), when SQLite
/// says a statement names one.
fn missing_object(message: &str) -> Option<&'static str> {
    if message.starts_with("no such table") {
        Some("42P01")
    } else if message.starts_with("no such column") {
        Some("42703")
    } else {
        None
    }
}

/// A statement named a table or column the database no longer has: the schema cache is stale.
/// The REST pipeline reloads it and plans the request again; elsewhere it is a 503 to retry.
fn schema_changed(sqlstate: &str, message: String) -> DbError {
    tracing::info!(%message, "the schema changed under a request");
    let mut e = DbError::new(
        Kind::SchemaChanged,
        "the database schema changed; retry the request",
    )
    .detail(message);
    e.sqlstate = Some(sqlstate.into());
    e
}

/// SQLite's words for a statement that is wrong in itself (its generic `SQLITE_ERROR`), each
/// with the SQLSTATE PostgreSQL gives the same mistake: a part of the message, and the code.
const STATEMENT_FAULTS: &[(&str, &str)] = &[
    ("syntax error", "42601"),
    ("incomplete input", "42601"),
    ("unrecognized token", "42601"),
    ("values were supplied", "42601"),
    ("values for", "42601"),
    ("do not have the same number of result columns", "42601"),
    ("no such function", "42883"),
    ("wrong number of arguments to function", "42883"),
    ("ambiguous column name", "42702"),
    ("misuse of aggregate", "42803"),
    ("misuse of window function", "42803"),
    ("aggregate functions are not allowed", "42803"),
    ("no such collation sequence", "42704"),
    ("no such index", "42704"),
    ("no such view", "42704"),
    ("no such trigger", "42704"),
    ("already exists", "42P07"),
    ("ORDER BY term out of range", "42P10"),
];

/// A statement SQLite finds wrong in itself ([`STATEMENT_FAULTS`]), if `message` says so.
fn statement_fault(message: &str) -> Option<DbError> {
    let (_, sqlstate) = STATEMENT_FAULTS
        .iter()
        .find(|(words, _)| message.contains(words))?;
    Some(DbError {
        kind: Kind::Statement,
        ..DbError::sqlstate(sqlstate, message)
    })
}

fn invalid_regex(detail: String) -> DbError {
    DbError::new(Kind::InvalidRegex, "invalid regular expression").detail(detail)
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        if write_refused(&e) {
            tracing::error!(error = %e, "the database could not write: disk full, file size limit or a failed write");
            return refused_write();
        }
        match &e {
            rusqlite::Error::SqliteFailure(f, msg) => {
                let text = msg.clone().unwrap_or_else(|| f.to_string());
                match f.code {
                    SqliteCode::ConstraintViolation => {
                        let kind = match f.extended_code {
                            ffi::SQLITE_CONSTRAINT_UNIQUE | ffi::SQLITE_CONSTRAINT_PRIMARYKEY => {
                                Kind::UniqueViolation
                            }
                            ffi::SQLITE_CONSTRAINT_FOREIGNKEY => Kind::ForeignKeyViolation,
                            ffi::SQLITE_CONSTRAINT_NOTNULL => Kind::NotNullViolation,
                            _ => Kind::CheckViolation,
                        };
                        DbError::new(kind, text.clone()).detail(text)
                    }
                    SqliteCode::OperationInterrupted => DbError::new(
                        Kind::Timeout,
                        "canceling statement due to statement timeout",
                    ),
                    SqliteCode::DatabaseBusy | SqliteCode::DatabaseLocked => {
                        DbError::unavailable("the database is busy; retry")
                    }
                    SqliteCode::TypeMismatch => {
                        DbError::sqlstate("22P02", "a value has the wrong type").detail(text)
                    }
                    SqliteCode::TooBig => DbError {
                        kind: Kind::ResourceLimit,
                        ..DbError::sqlstate("54000", format!("a value is too big: {text}")).hint(
                            "db.max_value_bytes bounds the strings and blobs a statement may build",
                        )
                    },
                    SqliteCode::OutOfMemory => DbError {
                        kind: Kind::ResourceLimit,
                        ..DbError::sqlstate("53200", "the database is out of memory; retry")
                    },
                    _ if text.starts_with(REGEX_ERROR_PREFIX) => {
                        invalid_regex(text[REGEX_ERROR_PREFIX.len()..].to_string())
                    }
                    _ if hits_a_limit(&text) => too_complex(text),
                    // `->`/`->>` into text that is not JSON (or a JSON path it cannot read)
                    _ if text.starts_with("malformed JSON")
                        || text.starts_with("bad JSON path") =>
                    {
                        DbError::sqlstate("22P02", "a value is not valid JSON").detail(text)
                    }
                    // PostgreSQL's words and code for the same mistake
                    _ if text.starts_with("cannot INSERT into generated column")
                        || text.starts_with("cannot UPDATE generated column") =>
                    {
                        DbError::sqlstate("428C9", "cannot write a value into a generated column")
                            .detail(text)
                    }
                    _ => match missing_object(&text) {
                        Some(sqlstate) => schema_changed(sqlstate, text),
                        None => statement_fault(&text).unwrap_or_else(|| DbError::internal(e)),
                    },
                }
            }
            rusqlite::Error::SqlInputError { msg, .. } if hits_a_limit(msg) => {
                too_complex(msg.clone())
            }
            rusqlite::Error::SqlInputError { msg, .. } => match missing_object(msg) {
                Some(sqlstate) => schema_changed(sqlstate, msg.clone()),
                None => statement_fault(msg).unwrap_or_else(|| DbError::internal(e)),
            },
            rusqlite::Error::UserFunctionError(inner) => invalid_regex(inner.to_string()),
            _ => DbError::internal(e),
        }
    }
}
