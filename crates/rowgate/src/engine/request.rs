//! The engine's typed request: what a table request asks (the [`Action`] on a table, the query,
//! the preferences, the answer's media type, the conditions and the body), as data. Front ends
//! parse into it (PostgREST's `/api` from an HTTP request in `api::request`, ORDS from its own
//! syntax, RPC's modifiers, a batch load's rows); the plan stage reads only it. Also the limits
//! a parsed query is held to.

use bytes::Bytes;
use rowgate_query::{Condition, Operand, Query};

use crate::config::LimitsConfig;
use crate::error::{ApiError, ErrorCode};

/// What a table request asks, by method and URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    /// GET or HEAD of the collection, or of the item with this key.
    Read {
        /// The item URL's key segment.
        key: Option<&'a str>,
    },
    /// POST to the collection.
    Insert,
    /// PATCH of the rows the filters select, or of an item.
    Update {
        /// The item URL's key segment.
        key: Option<&'a str>,
    },
    /// DELETE of the rows the filters select, or of an item.
    Delete {
        /// The item URL's key segment.
        key: Option<&'a str>,
    },
    /// PUT of one row by its full key (the item URL's, or `pk=eq.v` filters).
    Upsert {
        /// The item URL's key segment.
        key: Option<&'a str>,
    },
    /// Anything else (a POST to an item URL, OPTIONS, …): 405 once the table is known.
    Unsupported {
        /// The item URL's key segment.
        key: Option<&'a str>,
    },
}

impl<'a> Action<'a> {
    /// The item URL's key segment, if any.
    pub fn key(self) -> Option<&'a str> {
        match self {
            Action::Read { key }
            | Action::Update { key }
            | Action::Delete { key }
            | Action::Upsert { key }
            | Action::Unsupported { key } => key,
            Action::Insert => None,
        }
    }
}

/// A table request parsed once by its front end (stage 1, `parse`): the action, its table, the
/// query string, the preferences and the negotiated media type, the conditions and the body,
/// as data: no HTTP type. Nothing here knows the schema: the plan stage resolves it.
pub struct ApiRequest<'a> {
    /// What is asked.
    pub action: Action<'a>,
    /// The table or view the URL names.
    pub table: &'a str,
    /// The query string.
    pub query: Query,
    /// `Prefer`.
    pub prefer: Prefer,
    /// The media type of the answer.
    pub media: MediaType,
    /// `nulls=stripped` on it (`application/vnd.pgrst.array+json;nulls=stripped`): objects
    /// without their null members.
    pub nulls_stripped: bool,
    /// `Range` (reads).
    pub range: Option<ItemRange>,
    /// The method, as sent (`GET`, `PATCH`, …): what the action's refusals name.
    pub method: &'a str,
    /// The body's declared media type (`Content-Type`), if any.
    pub content_type: Option<&'a str>,
    /// `If-Match`'s entity tags, when the request sets conditions on the row's state.
    pub if_match: Option<Vec<String>>,
    /// `If-None-Match`'s values, as sent (a read answered 304 when one names its tag).
    pub if_none_match: Vec<&'a str>,
    /// The body (empty once the plan holds its values).
    pub body: Bytes,
}

impl ApiRequest<'_> {
    /// Whether `If-None-Match` names `tag` (or `*`).
    pub fn none_match(&self, tag: &str) -> bool {
        names_tag(self.if_none_match.iter().copied(), tag)
    }

    /// Whether the method is `name` (`"POST"`).
    pub fn method_is(&self, name: &str) -> bool {
        self.method.eq_ignore_ascii_case(name)
    }
}

/// Whether `If-None-Match` values (each a comma-separated list) name `tag`, weakly or not, or
/// are `*`.
pub fn names_tag<'v>(values: impl Iterator<Item = &'v str>, tag: &str) -> bool {
    values.flat_map(|v| v.split(',')).any(|t| {
        let t = t.trim();
        t == "*" || t.trim_start_matches("W/") == tag
    })
}

/// What the client wants back from a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Return {
    /// No body (default).
    Minimal,
    /// No body, but a `Location` header.
    HeadersOnly,
    /// The affected rows.
    Representation,
}

/// How a count was requested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Count {
    /// `count=exact`: `SELECT count(*)`.
    Exact,
    /// `count=planned`: an estimate (exact on SQLite, which has no planner estimate).
    Planned,
    /// `count=estimated`: exact up to the page, estimated beyond (exact on SQLite).
    Estimated,
}

/// Conflict resolution for upserts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolution {
    /// `resolution=merge-duplicates`.
    Merge,
    /// `resolution=ignore-duplicates`.
    Ignore,
}

/// The `Prefer` header(s), decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prefer {
    /// `return=`.
    pub return_: Return,
    /// `count=`.
    pub count: Option<Count>,
    /// `resolution=`.
    pub resolution: Option<Resolution>,
    /// `missing=default`.
    pub missing_default: bool,
    /// `handling=strict`.
    pub strict: bool,
    /// `max-affected=`.
    pub max_affected: Option<u64>,
    /// `params=single-object`: a function call's body is its one JSON argument.
    pub single_object: bool,
    /// `tx=commit` (`Some(false)`) or `tx=rollback` (`Some(true)`).
    pub tx_rollback: Option<bool>,
    /// `timezone=…`: the time zone timestamps with time zone are written in (PostgreSQL's
    /// `TimeZone` for the transaction; the database judges the name).
    pub timezone: Option<String>,
    /// Whether a write's transaction is rolled back (`rest.tx_end` and `tx=`, see
    /// [`Prefer::settle_tx`]).
    pub rollback: bool,
    /// The preferences honoured, for `Preference-Applied`.
    pub applied: Vec<String>,
}

impl Default for Prefer {
    /// No preference: `return=minimal`, nothing counted, nothing resolved.
    fn default() -> Prefer {
        Prefer {
            return_: Return::Minimal,
            count: None,
            resolution: None,
            missing_default: false,
            strict: false,
            max_affected: None,
            single_object: false,
            tx_rollback: None,
            timezone: None,
            rollback: false,
            applied: Vec::new(),
        }
    }
}

impl Prefer {
    /// The transaction settings the preferences ask for, for [`crate::engine::transaction::settings`]:
    /// the time zone, where the database has one (on SQLite `timezone=` is neither honoured nor
    /// listed as applied).
    pub fn settings(
        &mut self,
        d: &dyn rowgate_query::render::Dialect,
    ) -> Vec<(&'static str, String)> {
        match &self.timezone {
            Some(zone) if d.has_transaction_settings() => vec![("TimeZone", zone.clone())],
            Some(_) => {
                self.applied.retain(|p| !p.starts_with("timezone="));
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// An upsert's resolution where `table` has something to resolve conflicts on (a primary
    /// key, or `on_conflict=`); without, the insert is a plain one and the resolution neither
    /// honoured nor listed as applied, as PostgREST does.
    pub fn settle_resolution(&mut self, table: &crate::schema::Table, query: &Query) {
        if table.primary_key.is_empty() && query.on_conflict.is_none() {
            self.resolution = None;
            self.applied.retain(|p| !p.starts_with("resolution="));
        }
    }

    /// Decides how a write's transaction ends under `end` (PostgREST's `db-tx-end`): `tx=` is
    /// honoured, and listed as applied, only where `end` allows an override.
    pub fn settle_tx(&mut self, end: crate::config::TxEnd) {
        use crate::config::TxEnd;
        let (default, overridable) = match end {
            TxEnd::Commit => (false, false),
            TxEnd::CommitAllowOverride => (false, true),
            TxEnd::Rollback => (true, false),
            TxEnd::RollbackAllowOverride => (true, true),
        };
        self.rollback = match self.tx_rollback {
            Some(asked) if overridable => asked,
            _ => default,
        };
        if !overridable {
            self.applied.retain(|p| !p.starts_with("tx="));
        }
    }
}

/// The representation the client accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaType {
    /// `application/json` (an array).
    Json,
    /// `application/vnd.pgrst.object+json` (exactly one object).
    SingleObject,
    /// `text/csv`.
    Csv,
    /// `application/openapi+json` (the API description).
    OpenApi,
}

impl MediaType {
    /// The `Content-Type` of answers in this media type.
    pub fn content_type(self) -> &'static str {
        match self {
            MediaType::Json => "application/json; charset=utf-8",
            MediaType::SingleObject => "application/vnd.pgrst.object+json; charset=utf-8",
            MediaType::Csv => "text/csv; charset=utf-8",
            MediaType::OpenApi => "application/openapi+json; charset=utf-8",
        }
    }
}

/// A `Range: a-b` request header (`Range-Unit: items`), as offset and limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemRange {
    /// First row (0-based).
    pub offset: u64,
    /// Number of rows, when bounded.
    pub limit: Option<u64>,
}

/// Refuses filters nested deeper than `limits.max_filter_depth` or lists longer than
/// `limits.max_list_items` (400 `RG102`).
pub fn check_limits(filters: &[Condition], limits: &LimitsConfig) -> Result<(), ApiError> {
    fn walk(c: &Condition, depth: usize, worst: &mut (usize, usize)) {
        match c {
            Condition::Pred(p) => {
                if let Operand::List(items) = &p.operand {
                    worst.1 = worst.1.max(items.len());
                }
            }
            Condition::And { items, .. } | Condition::Or { items, .. } => {
                worst.0 = worst.0.max(depth);
                for i in items {
                    walk(i, depth + 1, worst);
                }
            }
        }
    }
    let mut worst = (0, 0);
    for c in filters {
        walk(c, 1, &mut worst);
    }
    if worst.0 > limits.max_filter_depth {
        return Err(ApiError::new(
            ErrorCode::LimitExceeded,
            format!(
                "filters nest {} levels deep; the limit is {}",
                worst.0, limits.max_filter_depth
            ),
        ));
    }
    if worst.1 > limits.max_list_items {
        return Err(ApiError::new(
            ErrorCode::LimitExceeded,
            format!(
                "a list holds {} values; the limit is {}",
                worst.1, limits.max_list_items
            ),
        )
        .hint("split the request, or filter with a range"));
    }
    Ok(())
}
