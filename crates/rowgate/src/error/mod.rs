//! The one table of error codes: every error a client can see has a row here (code, HTTP status,
//! pipeline stage), and every error answer is the JSON `{code, message, details, hint}`.
//!
//! Codes follow PostgREST where it has one (so its clients recognise them); database constraint
//! errors carry the SQLSTATE-style code PostgREST passes through (`23505`, …) on every backend.

use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use serde::Serialize;

pub mod database;

use database::{DbError, Kind};

pub mod raised;

/// The pipeline stage an error belongs to (for logs and docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Reading the HTTP request (headers, body, media types).
    Request,
    /// Parsing the query string.
    Parse,
    /// Resolving the request against the schema cache.
    Plan,
    /// Running SQL.
    Execute,
    /// The server itself.
    Server,
}

macro_rules! error_codes {
    ($( $variant:ident => ($code:literal, $status:expr, $stage:ident, $doc:literal) ),* $(,)?) => {
        /// Every error kind a client can receive.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum ErrorCode { $( #[doc = $doc] $variant, )* }

        impl ErrorCode {
            /// All codes, for documentation and tests.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];
            /// The stable code string.
            pub fn code(self) -> &'static str { match self { $(ErrorCode::$variant => $code,)* } }
            /// The HTTP status.
            pub fn status(self) -> StatusCode { match self { $(ErrorCode::$variant => $status,)* } }
            /// The pipeline stage.
            pub fn stage(self) -> Stage { match self { $(ErrorCode::$variant => Stage::$stage,)* } }
            /// One-line description.
            pub fn describe(self) -> &'static str { match self { $(ErrorCode::$variant => $doc,)* } }
        }
    };
}

error_codes! {
    QueryParse => ("PGRST100", StatusCode::BAD_REQUEST, Parse, "the query string could not be parsed"),
    InvalidBody => ("PGRST102", StatusCode::BAD_REQUEST, Request, "the request body is not valid for this request"),
    RangeNotSatisfiable => ("PGRST103", StatusCode::RANGE_NOT_SATISFIABLE, Plan, "the requested range is outside the result"),
    LimitExceeded => ("RG102", StatusCode::BAD_REQUEST, Plan, "the request exceeds a configured limit (filter nesting, list length)"),
    InvalidRange => ("RG103", StatusCode::BAD_REQUEST, Request, "the Range header is malformed"),
    MaxAffectedNeedsRows => ("PGRST128", StatusCode::BAD_REQUEST, Plan, "Prefer: max-affected with handling=strict on a call that returns no set of rows"),
    PutLimit => ("PGRST114", StatusCode::BAD_REQUEST, Plan, "PUT takes no limit or offset"),
    InvalidPut => ("PGRST105", StatusCode::METHOD_NOT_ALLOWED, Plan, "PUT needs every primary-key column filtered with eq and no limit/offset"),
    UnsupportedMediaType => ("RG415", StatusCode::UNSUPPORTED_MEDIA_TYPE, Request, "the Content-Type is not supported"),
    NotAcceptable => ("PGRST107", StatusCode::NOT_ACCEPTABLE, Request, "none of the media types in Accept can be produced"),
    InvalidProfile => ("PGRST106", StatusCode::NOT_ACCEPTABLE, Request, "the schema named by Accept-Profile or Content-Profile is not exposed"),
    AggregatesOff => ("PGRST123", StatusCode::BAD_REQUEST, Plan, "aggregate functions in select= are off (rest.aggregates)"),
    AggregateNotImplemented => ("PGRST127", StatusCode::BAD_REQUEST, Plan, "aggregates are not implemented in this place of select= (a spread embed)"),
    GroupingError => ("42803", StatusCode::BAD_REQUEST, Plan, "with aggregates, an ordered column must be one of the selected columns they are grouped by"),
    PutKeyMismatch => ("PGRST115", StatusCode::BAD_REQUEST, Plan, "the primary key in the PUT body does not match the URL"),
    SingularMismatch => ("PGRST116", StatusCode::NOT_ACCEPTABLE, Execute, "a single object was requested but the result has zero or several rows"),
    RpcMethod => ("PGRST101", StatusCode::METHOD_NOT_ALLOWED, Request, "a function is called by GET, HEAD or POST only"),
    InvalidPath => ("PGRST125", StatusCode::NOT_FOUND, Request, "the URL's path names nothing under the API's prefix (a table, an item, /rpc/ and a function)"),
    RelatedOrderNotToOne => ("PGRST118", StatusCode::BAD_REQUEST, Plan, "order=rel(col) names an embedded resource that is not to-one"),
    MethodNotAllowed => ("PGRST117", StatusCode::METHOD_NOT_ALLOWED, Request, "the HTTP method is not allowed on this resource"),
    MaxAffectedExceeded => ("PGRST124", StatusCode::BAD_REQUEST, Execute, "more rows would be affected than Prefer: max-affected allows"),
    InvalidPreference => ("PGRST122", StatusCode::BAD_REQUEST, Request, "a Prefer header value is invalid (with handling=strict)"),
    QueryTooComplex => ("RG101", StatusCode::BAD_REQUEST, Plan, "the query exceeds a database limit (too many values, filters, columns or nesting)"),
    NotEmbedded => ("PGRST108", StatusCode::BAD_REQUEST, Plan, "a parameter names an embedded resource that select= does not embed"),
    RelationshipNotFound => ("PGRST200", StatusCode::BAD_REQUEST, Plan, "no foreign-key relationship between the tables fits an embedded resource"),
    AmbiguousRelationship => ("PGRST201", StatusCode::MULTIPLE_CHOICES, Plan, "several relationships fit an embedded resource: pick one with a !hint (the candidates are in details)"),
    AmbiguousFunction => ("PGRST203", StatusCode::MULTIPLE_CHOICES, Plan, "several overloads of a function fit the arguments given (the candidates are in the message)"),
    ColumnNotFound => ("PGRST204", StatusCode::BAD_REQUEST, Plan, "a column named in the request does not exist"),
    FunctionNotFound => ("PGRST202", StatusCode::NOT_FOUND, Plan, "no function of that name takes the arguments given (the hint names one that might be meant)"),
    TableNotFound => ("PGRST205", StatusCode::NOT_FOUND, Plan, "the table or view does not exist in the schema cache"),
    NotFound => ("RG404", StatusCode::NOT_FOUND, Request, "no route or row matches the URL"),
    NoPrimaryKey => ("RG105", StatusCode::BAD_REQUEST, Plan, "the table has no primary key, so it has no item URLs or default conflict target"),
    NotModified => ("RG304", StatusCode::NOT_MODIFIED, Execute, "the representation matches If-None-Match"),
    DocumentRejected => ("RG115", StatusCode::FORBIDDEN, Execute, "a duality view document asks for a change the view does not allow (a noupdate field, a table without the insert, update or delete permission)"),
    PreconditionFailed => ("RG412", StatusCode::PRECONDITION_FAILED, Execute, "If-Match does not match the current representation"),
    BadRequest => ("RG400", StatusCode::BAD_REQUEST, Request, "the HTTP request is malformed (RFC 9112: exactly one Host header, a valid request line)"),
    UriTooLong => ("RG414", StatusCode::URI_TOO_LONG, Request, "the request's URI is too long"),
    HeadersTooLarge => ("RG431", StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE, Request, "the request's headers are too many or too large"),
    NotImplemented => ("RG501", StatusCode::NOT_IMPLEMENTED, Request, "a transfer coding other than chunked is not implemented; the connection is closed"),
    RequestTimeout => ("RG408", StatusCode::REQUEST_TIMEOUT, Request, "the request body did not arrive within limits.body_read_timeout_ms; the connection is closed"),
    PayloadTooLarge => ("RG413", StatusCode::PAYLOAD_TOO_LARGE, Request, "the request body exceeds the configured limit"),
    ReadOnlyResource => ("RG405", StatusCode::METHOD_NOT_ALLOWED, Plan, "the view cannot be written through"),
    InvalidToken => ("PGRST301", StatusCode::UNAUTHORIZED, Request, "the bearer token is malformed, revoked or not signed by a trusted key"),
    TokenClaimsRefused => ("PGRST303", StatusCode::UNAUTHORIZED, Request, "the bearer token's claims fail: expired, not yet valid, issued in the future, or for another audience"),
    LoginRequired => ("RG401", StatusCode::UNAUTHORIZED, Plan, "the anonymous role may not do this; send a bearer token"),
    UnknownRole => ("22023", StatusCode::UNAUTHORIZED, Execute, "the token's role is not a role of the database (auth.database_roles), or the connecting user may not switch to it"),
    PermissionDenied => ("42501", StatusCode::FORBIDDEN, Plan, "the token's role may not do this"),
    UniqueViolation => ("23505", StatusCode::CONFLICT, Execute, "a unique or primary-key constraint was violated"),
    ForeignKeyViolation => ("23503", StatusCode::CONFLICT, Execute, "a foreign-key constraint was violated"),
    NotNullViolation => ("23502", StatusCode::BAD_REQUEST, Execute, "a NOT NULL constraint was violated"),
    CheckViolation => ("23514", StatusCode::BAD_REQUEST, Execute, "a CHECK constraint was violated"),
    SafeUpdate => ("21000", StatusCode::BAD_REQUEST, Execute, "an UPDATE or DELETE without a filter, refused by rest.refuse_unfiltered_writes (or the database's pg-safeupdate extension)"),
    DataError => ("22000", StatusCode::BAD_REQUEST, Execute, "the database rejected a value (the code is the value error's SQLSTATE, class 22: 22P02 invalid text for the type, 22007 invalid date, 22003 out of range, …)"),
    Database => ("SQLSTATE", StatusCode::BAD_REQUEST, Execute, "another error the database raised: the code is its SQLSTATE and the status PostgREST's for it (class 42 and others 400, 42P01/42883 404, 53 503, 08 503, 25/38/39/40/55/57/58/XX/F0/HV/P0 500, 42P17 and 21000 500, P0001 400)"),
    ReadOnlyTransaction => ("25006", StatusCode::METHOD_NOT_ALLOWED, Execute, "a read tried to write (a GET may only read)"),
    StatementTimeout => ("57014", StatusCode::GATEWAY_TIMEOUT, Execute, "the statement ran longer than the statement timeout"),
    MissingParameter => ("RG110", StatusCode::BAD_REQUEST, Request, "a parameter of a custom resource is missing"),
    InvalidParameter => ("RG111", StatusCode::BAD_REQUEST, Request, "a parameter of a custom resource has the wrong type or is out of range"),
    PositionInvalid => ("RG131", StatusCode::BAD_REQUEST, Request, "the Rowgate-Position header is not a WAL position as a write answered it (16/B374D848)"),
    ConsoleRequestInvalid => ("RG130", StatusCode::BAD_REQUEST, Request, "a request of the console's API is not what it takes (a client needs a name of 1 to 100 visible characters and a role; its ttl_s a positive whole number)"),
    RealtimeNotEnabled => ("RG420", StatusCode::BAD_REQUEST, Plan, "the table is not listed in realtime.tables"),
    RealtimeCrowded => ("RG429", StatusCode::TOO_MANY_REQUESTS, Request, "the client address holds realtime.max_connections_per_address realtime connections already; close one first"),
    UpgradeRequired => ("RG426", StatusCode::UPGRADE_REQUIRED, Request, "the endpoint speaks WebSocket: send an Upgrade request"),
    SchemaChanged => ("PGRST002", StatusCode::SERVICE_UNAVAILABLE, Execute, "the database schema changed under the request and the schema cache is being reloaded; retry"),
    StorageFull => ("53100", StatusCode::INSUFFICIENT_STORAGE, Execute, "the database could not write (disk full, file size limit, a failed write); nothing was written, reads go on"),
    Unavailable => ("RG503", StatusCode::SERVICE_UNAVAILABLE, Execute, "the database is busy or unavailable; retry"),
    Internal => ("RG500", StatusCode::INTERNAL_SERVER_ERROR, Server, "an internal error; details are in the server log"),
    ResponseHeadersInvalid => ("PGRST111", StatusCode::INTERNAL_SERVER_ERROR, Execute, "response.headers set by a function or trigger is not a JSON array of one-key objects with string values"),
    RaiseInvalid => ("PGRST121", StatusCode::INTERNAL_SERVER_ERROR, Execute, "a function raised SQLSTATE 'PGRST' but its MESSAGE or DETAIL is not the JSON that chooses an answer"),
    ResponseStatusInvalid => ("PGRST112", StatusCode::INTERNAL_SERVER_ERROR, Execute, "response.status set by a function or trigger is not a status code"),
}

/// An error answer: a code plus human text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// Which row of the table.
    pub code: ErrorCode,
    /// What went wrong.
    pub message: String,
    /// Where, or more about what.
    pub details: Option<String>,
    /// What to do about it.
    pub hint: Option<String>,
    /// The database's SQLSTATE, when the database raised the error: it is the body's `code`
    /// (and, for [`ErrorCode::Database`], decides the status).
    pub sqlstate: Option<Box<str>>,
    /// The methods a 405 allows (its `Allow` header).
    pub allow: Option<Box<str>>,
    /// What a few errors carry beyond the envelope (boxed, so that every error stays small).
    pub more: Option<Box<More>>,
}

/// What a few errors carry beyond the envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum More {
    /// Details that are a JSON value rather than text (PostgREST's list of candidates in a
    /// `PGRST201`); written in place of `details`.
    DetailsJson(serde_json::Value),
    /// For a `PGRST002` (a statement met a table or column the database does not have): the
    /// database's own error, the answer once a reloaded schema cache shows that the request
    /// itself (or a function it called) named it.
    IfCurrent(ApiError),
    /// The status, reason phrase and headers a function chose when it raised the error (a
    /// `PT` or `PGRST` SQLSTATE, see [`raised`]).
    Raised(raised::Answer),
}

impl ApiError {
    /// The database's own error behind a `PGRST002`, if it carries one.
    pub fn take_if_current(&mut self) -> Option<ApiError> {
        match self.more.take().map(|m| *m) {
            Some(More::IfCurrent(genuine)) => Some(genuine),
            other => {
                self.more = other.map(Box::new);
                None
            }
        }
    }
}

/// `details` as text, or as a JSON value.
#[derive(Serialize)]
#[serde(untagged)]
enum Details<'a> {
    Text(&'a str),
    Json(&'a serde_json::Value),
}

/// The envelope without details and hint.
#[derive(Serialize)]
struct MinimalBody<'a> {
    code: &'a str,
    message: &'a str,
}

#[derive(Serialize)]
struct Body<'a> {
    code: &'a str,
    message: &'a str,
    details: Option<Details<'a>>,
    hint: Option<&'a str>,
}

impl ApiError {
    /// An error with a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            details: None,
            hint: None,
            sqlstate: None,
            allow: None,
            more: None,
        }
    }

    /// 405: `method` is not one of `allowed` here; the answer names them in `Allow` too (RFC
    /// 9110 §15.5.6), for every route alike.
    pub fn method_not_allowed(method: impl std::fmt::Display, allowed: &[&str]) -> Self {
        let list = allowed.join(", ");
        ApiError {
            allow: Some(list.clone().into()),
            ..ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!("{method} is not allowed here"),
            )
            .details(format!("allowed: {list}"))
        }
    }

    /// An error the database raised with `sqlstate`, as PostgREST answers it: the SQLSTATE is
    /// the code and decides the status. A server-side (5xx) error keeps its code but not its
    /// text, which goes to the log.
    pub fn database(sqlstate: &str, message: impl Into<String>) -> Self {
        let message = message.into();
        let code = if sqlstate.starts_with("22") {
            ErrorCode::DataError
        } else if sqlstate == "21000" && message.ends_with("requires a WHERE clause") {
            ErrorCode::SafeUpdate
        } else {
            ErrorCode::Database
        };
        let mut err = ApiError::new(code, message);
        err.sqlstate = Some(sqlstate.into());
        if err.status().is_server_error() {
            tracing::error!(sqlstate, cause = %err.message, "database error");
            err.message = "the database raised an error; details are in the server log".into();
        }
        err
    }

    /// The code the client sees: the SQLSTATE when the database raised the error, else the
    /// table's.
    pub fn code_text(&self) -> &str {
        self.sqlstate.as_deref().unwrap_or(self.code.code())
    }

    /// Adds details.
    pub fn details(mut self, details: impl Into<String>) -> Self {
        self.details = Some(details.into());
        self
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Sets the methods the resource allows (the 405's `Allow` header).
    pub fn allow(mut self, methods: &str) -> Self {
        self.allow = Some(methods.into());
        self
    }

    /// An internal error: the cause is logged, the client sees only a generic message (5xx bodies
    /// never carry SQL or schema text).
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(%cause, "internal error");
        ApiError::new(ErrorCode::Internal, "internal server error")
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        if let Some(More::Raised(answer)) = self.more.as_deref() {
            return answer.status;
        }
        match (&self.sqlstate, self.code) {
            (Some(sqlstate), ErrorCode::Database) => sqlstate_status(sqlstate),
            _ => self.code.status(),
        }
    }

    /// The JSON body.
    pub fn body(&self) -> Bytes {
        self.body_of(true)
    }

    /// [`ApiError::body`] with its `details` and `hint` (`verbose`), or without them (the
    /// configuration's `client_error_verbosity = "minimal"`).
    pub fn body_of(&self, verbose: bool) -> Bytes {
        if !verbose {
            let minimal = MinimalBody {
                code: self.code_text(),
                message: &self.message,
            };
            return Bytes::from(serde_json::to_vec(&minimal).unwrap_or_default());
        }
        let json = match self.more.as_deref() {
            Some(More::DetailsJson(json)) => Some(json),
            _ => None,
        };
        let details = match (json, &self.details) {
            (Some(json), _) => Some(Details::Json(json)),
            (None, Some(text)) => Some(Details::Text(text)),
            (None, None) => None,
        };
        let body = Body {
            code: self.code_text(),
            message: &self.message,
            details,
            hint: self.hint.as_deref(),
        };
        Bytes::from(serde_json::to_vec(&body).unwrap_or_default())
    }

    /// The content type of [`ApiError::body`].
    pub fn content_type() -> HeaderValue {
        HeaderValue::from_static("application/json; charset=utf-8")
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code_text(), self.message)
    }
}

impl std::error::Error for ApiError {}

impl From<rowgate_query::ParseError> for ApiError {
    fn from(e: rowgate_query::ParseError) -> Self {
        let code = match e.kind {
            rowgate_query::ParseErrorKind::NegativeLimit => ErrorCode::RangeNotSatisfiable,
            _ => ErrorCode::QueryParse,
        };
        ApiError {
            code,
            message: e.message,
            details: e.details,
            hint: e.hint,
            sqlstate: None,
            allow: None,
            more: None,
        }
    }
}

/// The one mapping of a database failure to an answer (sqlx's habit: the driver says what
/// kind of failure it was, the edge says what the client sees).
impl From<DbError> for ApiError {
    fn from(e: DbError) -> Self {
        let code = match e.kind {
            Kind::UniqueViolation => ErrorCode::UniqueViolation,
            Kind::ForeignKeyViolation => ErrorCode::ForeignKeyViolation,
            Kind::NotNullViolation => ErrorCode::NotNullViolation,
            Kind::CheckViolation => ErrorCode::CheckViolation,
            Kind::InvalidRegex | Kind::TypeMismatch | Kind::UnknownName => ErrorCode::QueryParse,
            Kind::ReadOnly => ErrorCode::ReadOnlyTransaction,
            Kind::Timeout => ErrorCode::StatementTimeout,
            Kind::TooComplex => ErrorCode::QueryTooComplex,
            Kind::StorageFull => ErrorCode::StorageFull,
            Kind::Unavailable => ErrorCode::Unavailable,
            Kind::PreconditionFailed => ErrorCode::PreconditionFailed,
            Kind::NotSingular { .. } => ErrorCode::SingularMismatch,
            Kind::NotFound => ErrorCode::NotFound,
            Kind::Rejected => ErrorCode::DocumentRejected,
            Kind::MaxAffected { .. } => ErrorCode::MaxAffectedExceeded,
            Kind::Refused { anonymous: true } => ErrorCode::LoginRequired,
            Kind::Refused { anonymous: false } => ErrorCode::PermissionDenied,
            Kind::Internal => return ApiError::internal(e.message),
            // generated SQL the database finds wrong: this server's fault
            Kind::Statement => return ApiError::internal(e),
            Kind::SchemaChanged => {
                let mut genuine = ApiError::database(
                    e.sqlstate.as_deref().unwrap_or("42P01"),
                    e.detail.clone().unwrap_or_default(),
                );
                genuine.hint = e.hint;
                let mut err = ApiError::new(ErrorCode::SchemaChanged, e.message);
                err.more = Some(Box::new(More::IfCurrent(genuine)));
                return err;
            }
            Kind::ResourceLimit => {
                let sqlstate = e.sqlstate.as_deref().unwrap_or("53000");
                let mut err = ApiError::database(sqlstate, e.message);
                err.hint = e.hint;
                return err;
            }
            Kind::InvalidValue | Kind::Other => {
                let sqlstate = e.sqlstate.as_deref().unwrap_or("XX000");
                if let Some(chosen) =
                    raised::answer(sqlstate, &e.message, e.detail.as_deref(), e.hint.as_deref())
                {
                    return chosen;
                }
                let mut err = ApiError::database(sqlstate, e.message);
                if !err.status().is_server_error() {
                    err.details = e.detail;
                    err.hint = e.hint;
                }
                return err;
            }
        };
        let message = match e.kind {
            // PostgreSQL's words, as PostgREST passes them (`duplicate key value violates
            // unique constraint "…"`: clients match them); SQLite's are the details of this
            // server's own
            Kind::UniqueViolation
            | Kind::ForeignKeyViolation
            | Kind::NotNullViolation
            | Kind::CheckViolation
                if e.sqlstate.is_none() =>
            {
                code.describe().to_string()
            }
            _ => e.message,
        };
        let hint = match e.kind {
            Kind::ReadOnly => Some(
                "SQL that writes needs a resource declared with method POST, PUT, PATCH or DELETE"
                    .to_string(),
            ),
            _ => e.hint,
        };
        ApiError {
            details: e.detail,
            hint,
            ..ApiError::new(code, message)
        }
    }
}

impl ApiError {
    /// The answer to a failure of SQL the client wrote itself (REST-enabled SQL), as PostgREST
    /// answers a database error: the SQLSTATE as the code, which decides the status (400, 404
    /// for an unknown function or table), and the database's own words. What the drivers class
    /// as generated SQL's fault — a statement wrong in itself (a server bug there), a table or
    /// column missing (a stale schema cache there, to reload and retry), a type or name that
    /// does not fit (the request's filter there) — is here the statement's. Anything else is
    /// answered as for any request.
    pub fn of_client_sql(e: DbError) -> ApiError {
        match e.kind {
            Kind::Statement | Kind::SchemaChanged | Kind::TypeMismatch | Kind::UnknownName => {
                // (without the hints meant for a request's filters)
                let sqlstate = e.sqlstate.as_deref().unwrap_or("42000");
                ApiError::database(sqlstate, e.database_words())
            }
            _ => ApiError::from(e),
        }
    }
}

/// PostgREST's HTTP status for a SQLSTATE it passes through (`mapSQLtoHTTP` in its
/// `Error.hs`), for the codes Rowgate does not answer with a row of its own.
pub fn sqlstate_status(sqlstate: &str) -> StatusCode {
    let class = sqlstate.get(..2).unwrap_or("");
    match sqlstate {
        "42883" | "42P01" => return StatusCode::NOT_FOUND,
        // a cardinality violation (a subquery of several rows): a function's or view's fault
        "42P17" | "53400" | "21000" => return StatusCode::INTERNAL_SERVER_ERROR,
        "57P01" => return StatusCode::SERVICE_UNAVAILABLE,
        "25006" => return StatusCode::METHOD_NOT_ALLOWED,
        "23503" | "23505" => return StatusCode::CONFLICT,
        "42501" => return StatusCode::FORBIDDEN,
        "P0001" => return StatusCode::BAD_REQUEST,
        _ => {}
    }
    match class {
        "08" | "53" => StatusCode::SERVICE_UNAVAILABLE,
        "0L" | "0P" | "28" => StatusCode::FORBIDDEN,
        "09" | "25" | "2D" | "38" | "39" | "3B" | "40" | "54" | "55" | "57" | "58" | "F0"
        | "HV" | "P0" | "XX" => StatusCode::INTERNAL_SERVER_ERROR,
        _ => StatusCode::BAD_REQUEST,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_errors_carry_their_sqlstate_and_postgrests_status() {
        for (sqlstate, status) in [
            ("22P02", 400),
            ("22007", 400),
            ("428C9", 400),
            ("42P17", 500),
            ("42P01", 404),
            ("53300", 503),
            ("XX000", 500),
            ("P0001", 400),
            ("21000", 500),
            ("0A000", 400),
        ] {
            let err = ApiError::database(sqlstate, "text");
            assert_eq!(err.status().as_u16(), status, "{sqlstate}");
            let body: serde_json::Value = serde_json::from_slice(&err.body()).expect("json");
            assert_eq!(body["code"], sqlstate);
            assert_eq!(
                body["message"] == "text",
                status < 500,
                "5xx bodies do not carry the database's text: {body}"
            );
        }
    }

    #[test]
    fn pg_safeupdate_refusals_are_the_clients() {
        let err = ApiError::database("21000", "UPDATE requires a WHERE clause");
        assert_eq!((err.status().as_u16(), err.code_text()), (400, "21000"));
        assert_eq!(err.message, "UPDATE requires a WHERE clause");
        let err = ApiError::database("21000", "more than one row returned by a subquery");
        assert_eq!(err.status().as_u16(), 500);
    }

    #[test]
    fn codes_are_unique_and_statuses_are_errors() {
        let mut seen = std::collections::HashSet::new();
        for c in ErrorCode::ALL {
            assert!(seen.insert(c.code()), "duplicate code {}", c.code());
            assert!(
                c.status().as_u16() >= 300,
                "{} has a success status",
                c.code()
            );
        }
    }
}
