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
        let code = db.code().code();
        let message = db.message().to_string();
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
                return DbError::unavailable("the database is unavailable; retry")
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
