//! What can go wrong running a job, by kind, as sqlx types its errors: each driver classifies
//! its own errors into a [`DbError`] (`sqlite_error`, `postgres_error`), and the HTTP edge maps
//! a kind to an answer once (`From<DbError> for ApiError`, in the module above). Nothing here knows HTTP.

/// The kind of a failure, whatever the backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A unique or primary-key constraint was violated.
    UniqueViolation,
    /// A foreign-key constraint was violated.
    ForeignKeyViolation,
    /// A NOT NULL constraint was violated.
    NotNullViolation,
    /// A CHECK constraint was violated.
    CheckViolation,
    /// The database rejected a value (SQLSTATE class 22, in `sqlstate`).
    InvalidValue,
    /// A filter's regular expression does not compile.
    InvalidRegex,
    /// An operator or value does not fit a column's type.
    TypeMismatch,
    /// A name the request chose is not one the database knows (a text search configuration).
    UnknownName,
    /// A read-only transaction tried to write.
    ReadOnly,
    /// The statement ran past the statement timeout.
    Timeout,
    /// The statement is beyond one of the database's size limits.
    TooComplex,
    /// A statement named a table or column the database no longer has: the schema cache is stale.
    SchemaChanged,
    /// The disk refused the write (full, the file-size limit, a failed write); nothing was
    /// written.
    StorageFull,
    /// The database is busy, shutting down, or cannot be reached.
    Unavailable,
    /// The database ran out of a resource for this statement (a value too big, memory), with
    /// its `sqlstate`: a server-side failure whose hint says which setting bounds it.
    ResourceLimit,
    /// Another error the database raised, passed through with its `sqlstate`.
    Other,
    /// The statement itself is wrong: its syntax, or a function, collation or object the
    /// database does not know, with the SQLSTATE PostgreSQL gives the same mistake. In SQL this
    /// server generates, a fault of the server; in SQL a client wrote (REST-enabled SQL), the
    /// client's ([`crate::error::ApiError::of_client_sql`]).
    Statement,
    /// A fault of the server, not of the request: its cause goes to the log only.
    Internal,
    /// The job's `If-Match` step found no row with one of the given ETags.
    PreconditionFailed,
    /// The row or document the job acts on does not exist.
    NotFound,
    /// A duality view's document asks for a change the view does not allow.
    Rejected,
    /// The job asked for exactly one row and got `rows`.
    NotSingular {
        /// Rows affected or returned.
        rows: u64,
    },
    /// More rows were affected than the job allows.
    MaxAffected {
        /// Rows affected.
        affected: u64,
    },
    /// An access rule's check (a `Forbid` step) found rows that break it.
    Refused {
        /// The request was anonymous (a token would help), not a role's refusal.
        anonymous: bool,
    },
}

/// A failure running a job, with the database's own words where it gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbError {
    /// What kind of failure.
    pub kind: Kind,
    /// The SQLSTATE, when the database raised the error (or the nearest one SQLite's error has).
    pub sqlstate: Option<Box<str>>,
    /// What went wrong.
    pub message: String,
    /// More about it (the constraint, the value).
    pub detail: Option<String>,
    /// What to do about it.
    pub hint: Option<String>,
}

impl DbError {
    /// A failure of `kind` with a message.
    pub fn new(kind: Kind, message: impl Into<String>) -> Self {
        DbError {
            kind,
            sqlstate: None,
            message: message.into(),
            detail: None,
            hint: None,
        }
    }

    /// Another error the database raised with `sqlstate` (class 22: an invalid value).
    pub fn sqlstate(sqlstate: &str, message: impl Into<String>) -> Self {
        let kind = if sqlstate.starts_with("22") {
            Kind::InvalidValue
        } else {
            Kind::Other
        };
        DbError {
            sqlstate: Some(sqlstate.into()),
            ..DbError::new(kind, message)
        }
    }

    /// The database is busy or gone: retry.
    pub fn unavailable(message: impl Into<String>) -> Self {
        DbError::new(Kind::Unavailable, message)
    }

    /// A fault of the server; `cause` is logged where the error is answered.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        DbError::new(Kind::Internal, cause.to_string())
    }

    /// What the database itself said: the detail where the driver put words of its own in
    /// front (a stale schema, a type mismatch), else the message.
    pub fn database_words(&self) -> &str {
        match self.kind {
            Kind::SchemaChanged | Kind::TypeMismatch => {
                self.detail.as_deref().unwrap_or(&self.message)
            }
            _ => &self.message,
        }
    }

    /// Adds a detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Self {
        self.detail = Some(detail.into());
        self
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl std::fmt::Display for DbError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.sqlstate {
            Some(code) => write!(f, "{code}: {}", self.message),
            None => write!(f, "{:?}: {}", self.kind, self.message),
        }
    }
}

impl std::error::Error for DbError {}
