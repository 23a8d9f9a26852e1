//! PostgreSQL's errors by kind, classified in one place from their SQLSTATE: constraint
//! violations as on SQLite, timeouts, a stale schema, lost connections; anything else passes
//! through with its SQLSTATE, message, detail and hint, as PostgREST passes it. `?` on a
//! `tokio_postgres::Error` gives a [`DbError`].

use crate::error::database::{DbError, Kind};

impl From<tokio_postgres::Error> for DbError {
    fn from(e: tokio_postgres::Error) -> Self {
        let Some(db) = e.as_db_error() else {
            tracing::warn!(error = %e, "PostgreSQL connection error");
            return DbError::unavailable("the database is unavailable; retry");
        };
        let message = db.message().to_string();
        let code = match db.code().code() {
            "XX000" => copied_sqlstate(&message).unwrap_or("XX000"),
            code => code,
        };
        let kind = match code {
            "23505" => Kind::UniqueViolation,
            "23503" => Kind::ForeignKeyViolation,
            "23502" => Kind::NotNullViolation,
            "23514" => Kind::CheckViolation,
            "25006" => return DbError::new(Kind::ReadOnly, message),
            "57014" => {
                return DbError::new(
                    Kind::Timeout,
                    "canceling statement due to statement timeout",
                )
            }
            "2201B" => {
                return DbError::new(Kind::InvalidRegex, "invalid regular expression")
                    .detail(message)
            }
            "42P01" | "42703" => {
                tracing::info!(%message, "the schema changed under a request");
                let mut e = DbError::new(
                    Kind::SchemaChanged,
                    "the database schema changed; retry the request",
                )
                .detail(message);
                e.sqlstate = Some(code.into());
                return e;
            }
            "42883" | "42804" => {
                return DbError {
                    sqlstate: Some(code.into()),
                    ..DbError::new(
                        Kind::TypeMismatch,
                        "an operator or value does not fit the column's type",
                    )
                    .detail(message)
                }
            }
            // undefined object: in generated SQL only a text search language (`fts(klingon)`)
            "42704" => {
                return DbError {
                    sqlstate: Some(code.into()),
                    ..DbError::new(Kind::UnknownName, message)
                        .hint("name an installed text search configuration, e.g. english or simple")
                }
            }
            "54001" | "54011" | "54023" => {
                return DbError::new(Kind::TooComplex, "the query is too large for the database")
            }
            c if c.starts_with("08") || c.starts_with("57P") || c == "53300" => {
                // Citus: a worker holding shards the statement needs
                if let Some(node) = citus_node(&message) {
                    tracing::warn!(%message, "a node of the Citus cluster is unavailable");
                    return DbError::unavailable(format!(
                        "a node of the distributed database is unavailable ({node}); retry"
                    ));
                }
                return DbError::unavailable("the database is unavailable; retry");
            }
            "0A000" | "XX000" if citus_refusal(&message) => {
                let mut err = DbError::sqlstate(
                    "0A000",
                    format!("the distributed database (Citus) cannot run this request: {message}"),
                );
                err.detail = db.detail().map(str::to_string);
                err.hint = Some(citus_hint(&message, db.hint()));
                return err;
            }
            // a write reached a standby: the server was the primary and is no more (a
            // failover), or is not yet (a promotion under way)
            "0A000" if message.contains("during recovery") => {
                tracing::warn!(%message, "a write reached a standby: following the primary");
                return DbError::unavailable(
                    "the database is read-only for now (a failover is under way); retry",
                );
            }
            _ => {
                let mut err = DbError::sqlstate(code, message);
                err.detail = db.detail().map(str::to_string);
                err.hint = db.hint().map(str::to_string);
                return err;
            }
        };
        // (the SQLSTATE marks the words as PostgreSQL's: they are the message)
        let mut err = DbError {
            sqlstate: Some(code.into()),
            ..DbError::new(kind, message)
        };
        err.detail = db.detail().map(str::to_string);
        err
    }
}

/// What a request Citus refuses (its `message`) can do instead: Citus's own hint where it
/// speaks to the request (not its advice on SQL Rowgate writes), else ours by its reason.
fn citus_hint(message: &str, theirs: Option<&str>) -> String {
    let ours = if message.contains("subqueries are not supported within INSERT") {
        "ask for the written rows without embedded ones (Prefer: return=minimal, or a select= \
         without embeds) and read them after"
    } else if message.contains("contains a reference table") {
        "embed the reference table's row in the distributed table's rows instead, or distribute \
         both tables co-located"
    } else {
        "embed between tables co-located and joined on their distribution column, or with \
         reference tables"
    };
    match theirs {
        Some(hint) if !message.contains("within INSERT") => {
            format!("{hint} (see docs/deployment.md, section Citus)")
        }
        _ => format!("{ours}; see docs/deployment.md, section Citus"),
    }
}

/// Whether `message` is Citus refusing a statement's shape (a join needing repartitioning, a
/// correlated subquery over a reference table, a subquery in a distributed INSERT, …): the
/// request's, not the server's fault.
fn citus_refusal(message: &str) -> bool {
    const MARKS: [&str; 8] = [
        "distributed",
        "reference table",
        "colocated",
        "co-located",
        "repartition",
        "shard",
        "subqueries are not supported",
        "Citus",
    ];
    MARKS.iter().any(|mark| message.contains(mark))
}

/// The worker named in Citus's "connection to the remote node user@host:port failed …".
fn citus_node(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("connection to the remote node ")?;
    let node = rest.split_whitespace().next()?;
    Some(node.rsplit_once('@').map_or(node, |(_, address)| address))
}

/// The SQLSTATE of a constraint or value error Citus reports as XX000: rows it copies to the
/// shards (a multi-row INSERT … SELECT) fail with the worker's message but not its code
/// (`ReportCopyError`). Known by PostgreSQL's own words for each.
fn copied_sqlstate(message: &str) -> Option<&'static str> {
    const WORDS: [(&str, &str); 7] = [
        ("duplicate key value violates unique constraint", "23505"),
        ("violates foreign key constraint", "23503"),
        ("violates not-null constraint", "23502"),
        ("violates check constraint", "23514"),
        ("violates exclusion constraint", "23P01"),
        ("invalid input syntax for type", "22P02"),
        ("out of range for type", "22003"),
    ];
    WORDS
        .iter()
        .find(|(words, _)| message.contains(words))
        .map(|(_, code)| *code)
}
