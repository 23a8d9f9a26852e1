//! Stage 1, parse: an HTTP request for a table resource becomes an [`ApiRequest`] — the query
//! string parsed by `rowgate-query`, the `Prefer`, `Accept`, `Content-Type`, `Range` and
//! conditional headers decoded, the body parsed as JSON (or a form). Nothing here knows the schema.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Method};
use http_body_util::{BodyExt, Limited};
use rowgate_query::{Condition, Operand, Query};
use serde_json::Value as Json;

use crate::config::LimitsConfig;
use crate::error::{ApiError, ErrorCode};

pub use super::body::{
    body_media, csv_field, csv_reader, empty_json, form_pairs, invalid_csv, invalid_json,
    BodyMedia, FormPair,
};

/// What a request's body can be: hyper's `Incoming` from a connection, or any other body of
/// bytes (a test calling the app as a service, without a socket; a second front end).
pub trait RequestBody:
    hyper::body::Body<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
    + Send
    + Unpin
    + 'static
{
}

impl<B> RequestBody for B where
    B: hyper::body::Body<Data = Bytes, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + Unpin
        + 'static
{
}

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
    /// The action of `method` on the collection, or on the item `key`.
    pub fn of(method: &Method, key: Option<&'a str>) -> Action<'a> {
        match *method {
            Method::GET | Method::HEAD => Action::Read { key },
            Method::POST if key.is_none() => Action::Insert,
            Method::PATCH => Action::Update { key },
            Method::DELETE => Action::Delete { key },
            Method::PUT => Action::Upsert { key },
            _ => Action::Unsupported { key },
        }
    }

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

/// A table request parsed once (stage 1, `parse`): the action, its table, the query string,
/// the preferences and the negotiated media type, the conditional headers and the body. Nothing
/// here knows the schema: the plan stage resolves it.
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
    /// The method, as sent.
    pub method: &'a Method,
    /// The headers (content type, conditional requests).
    pub headers: &'a HeaderMap,
    /// The body (empty once the plan holds its values).
    pub body: Bytes,
}

impl<'a> ApiRequest<'a> {
    /// Parses the request for `table` (and item `key`) within `limits`. `negotiated_elsewhere`:
    /// a later stage answers a read in the media type `Accept` asks for (a media type handler,
    /// an execution plan), so its rows are read as JSON's would be.
    pub fn parse(
        parts: &'a http::request::Parts,
        table: &'a str,
        key: Option<&'a str>,
        body: Bytes,
        limits: &LimitsConfig,
        negotiated_elsewhere: bool,
    ) -> Result<ApiRequest<'a>, ApiError> {
        let query = parse_query(parts.uri.query())?;
        check_limits(&query.filters, limits)?;
        let prefer = Prefer::parse(&parts.headers)?;
        let action = Action::of(&parts.method, key);
        let offered = [MediaType::Json, MediaType::SingleObject, MediaType::Csv];
        let negotiated = negotiation(&parts.headers, &offered);
        let nulls_stripped = negotiated.as_ref().is_ok_and(|(_, strip)| *strip);
        let (media, range) = match action {
            Action::Read { .. } if negotiated_elsewhere => {
                (MediaType::Json, parse_range(&parts.method, &parts.headers)?)
            }
            Action::Read { .. } => (negotiated?.0, parse_range(&parts.method, &parts.headers)?),
            _ if negotiated_elsewhere => (MediaType::Json, None),
            // A singular `Accept` guards every write, whatever it returns: unless exactly one
            // row is affected, the write answers 406 and commits nothing (as PostgREST).
            // Without a representation the other media types do not matter.
            _ if prefer.return_ == Return::Representation => (negotiated?.0, None),
            _ => (negotiated.map_or(MediaType::Json, |(m, _)| m), None),
        };
        Ok(ApiRequest {
            action,
            table,
            query,
            prefer,
            media,
            nulls_stripped,
            range,
            method: &parts.method,
            headers: &parts.headers,
            body,
        })
    }

    /// `If-Match` values, when the header is present.
    pub fn if_match(&self) -> Option<Vec<String>> {
        let values: Vec<String> = self
            .headers
            .get_all(header::IF_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_string())
            .collect();
        (!values.is_empty()).then_some(values)
    }
}

/// Whether `If-None-Match` names `tag` (or `*`).
pub fn if_none_match(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
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

impl Prefer {
    /// The transaction settings the preferences ask for, for [`crate::engine::transaction::settings`]:
    /// the time zone, where the database has one (on SQLite `timezone=` is neither honoured nor
    /// listed as applied).
    pub fn settings(
        &mut self,
        d: &dyn rowgate_query::render::Dialect,
    ) -> Vec<(&'static str, String)> {
        match &self.timezone {
            Some(zone) if d.has_schemas() => vec![("TimeZone", zone.clone())],
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

    /// Decodes every `Prefer` header. Unknown preferences are ignored, unless `handling=strict`
    /// is given, in which case they are an error (RFC 7240, as PostgREST).
    pub fn parse(headers: &HeaderMap) -> Result<Prefer, ApiError> {
        let mut p = Prefer {
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
        };
        let mut invalid = Vec::new();
        for value in headers.get_all("prefer") {
            let Ok(text) = value.to_str() else {
                invalid.push("<non-ASCII>".to_string());
                continue;
            };
            for item in text.split([',', ';']) {
                let item = item.trim();
                if item.is_empty() {
                    continue;
                }
                let ok = match item {
                    "return=minimal" => set(&mut p.return_, Return::Minimal),
                    "return=headers-only" => set(&mut p.return_, Return::HeadersOnly),
                    "return=representation" => set(&mut p.return_, Return::Representation),
                    "count=exact" => set(&mut p.count, Some(Count::Exact)),
                    "count=planned" => set(&mut p.count, Some(Count::Planned)),
                    "count=estimated" => set(&mut p.count, Some(Count::Estimated)),
                    "resolution=merge-duplicates" => {
                        set(&mut p.resolution, Some(Resolution::Merge))
                    }
                    "resolution=ignore-duplicates" => {
                        set(&mut p.resolution, Some(Resolution::Ignore))
                    }
                    "missing=default" => set(&mut p.missing_default, true),
                    "handling=strict" => set(&mut p.strict, true),
                    "handling=lenient" => set(&mut p.strict, false),
                    "params=single-object" => set(&mut p.single_object, true),
                    "tx=commit" => set(&mut p.tx_rollback, Some(false)),
                    "tx=rollback" => set(&mut p.tx_rollback, Some(true)),
                    _ => match item.strip_prefix("max-affected=").map(str::parse::<u64>) {
                        Some(Ok(n)) => set(&mut p.max_affected, Some(n)),
                        _ => match item.strip_prefix("timezone=") {
                            Some(zone) if !zone.is_empty() => {
                                set(&mut p.timezone, Some(zone.to_string()))
                            }
                            _ => false,
                        },
                    },
                };
                if ok {
                    p.applied.push(item.to_string());
                } else {
                    invalid.push(item.to_string());
                }
            }
        }
        if p.strict && !invalid.is_empty() {
            return Err(ApiError::new(
                ErrorCode::InvalidPreference,
                "Invalid preferences given with handling=strict",
            )
            .details(format!("Invalid preferences: {}", invalid.join(", "))));
        }
        Ok(p)
    }
}

fn set<T>(slot: &mut T, value: T) -> bool {
    *slot = value;
    true
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

/// The schema a request names (PostgREST's profiles): `Accept-Profile` for GET and HEAD,
/// `Content-Profile` for the other methods; `None` when it names none.
pub fn profile(parts: &http::request::Parts) -> Option<&str> {
    let name = if matches!(parts.method, Method::GET | Method::HEAD) {
        "accept-profile"
    } else {
        "content-profile"
    };
    parts.headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether `Accept` asks for `media` before anything else the answer could be: `media` itself
/// (or `type/*`) comes, by weight, before JSON, CSV, a single object and `*/*` (ranges of
/// nothing the answer could be, `text/html` from a browser, are passed over); `*/*` (a value
/// of any media type) whatever it asks.
pub fn prefers(headers: &HeaderMap, media: &str) -> bool {
    if media == "*/*" {
        return true; // PostgREST's domain of any media type: whatever is asked
    }
    const ROWS: [&str; 6] = [
        "application/json",
        "application/vnd.pgrst.object+json",
        "application/vnd.pgrst.object",
        "text/csv",
        "application/*",
        "*/*",
    ];
    let media = media.to_ascii_lowercase();
    for range in accepted(headers) {
        let matches = range.media == media
            || range
                .media
                .strip_suffix("/*")
                .is_some_and(|t| media.starts_with(&format!("{t}/")) && t != "application");
        if matches {
            return true;
        }
        if ROWS.contains(&range.media.as_str()) {
            return false;
        }
    }
    false
}

/// One media range of `Accept`: lower-cased, with its weight and `nulls=stripped`.
struct MediaRange {
    media: String,
    nulls_stripped: bool,
}

/// `Accept`'s media ranges, the heaviest first (in their order among equals), weight-0 ones
/// left out; none when there is no `Accept`.
fn accepted(headers: &HeaderMap) -> Vec<MediaRange> {
    let Some(text) = headers
        .get(header::ACCEPT)
        .map(|v| v.to_str().unwrap_or(""))
    else {
        return Vec::new();
    };
    let mut ranges: Vec<(f32, usize, MediaRange)> = Vec::new();
    for (i, part) in text.split(',').enumerate() {
        let mut params = part.split(';');
        let media = params.next().unwrap_or("").trim();
        let (mut q, mut nulls_stripped) = (1.0, false);
        for p in params.map(str::trim) {
            if let Some(w) = p
                .strip_prefix("q=")
                .and_then(|w| w.trim().parse::<f32>().ok())
            {
                q = w;
            }
            nulls_stripped |= p.eq_ignore_ascii_case("nulls=stripped");
        }
        if q > 0.0 && !media.is_empty() {
            let media = media.to_ascii_lowercase();
            ranges.push((
                q,
                i,
                MediaRange {
                    media,
                    nulls_stripped,
                },
            ));
        }
    }
    ranges.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    ranges.into_iter().map(|(_, _, r)| r).collect()
}

/// `Accept`'s media ranges (lower-cased), the heaviest first; none when there is no `Accept`.
pub fn accepted_media(headers: &HeaderMap) -> Vec<String> {
    accepted(headers).into_iter().map(|r| r.media).collect()
}

/// Chooses the answer's media type from `Accept` (first acceptable wins; absent means JSON).
pub fn negotiate(headers: &HeaderMap, offered: &[MediaType]) -> Result<MediaType, ApiError> {
    negotiation(headers, offered).map(|(media, _)| media)
}

/// [`negotiate`], and whether the chosen range asks for `nulls=stripped` (PostgREST's
/// `application/vnd.pgrst.array+json;nulls=stripped`, or of a singular object).
pub fn negotiation(
    headers: &HeaderMap,
    offered: &[MediaType],
) -> Result<(MediaType, bool), ApiError> {
    if headers.get(header::ACCEPT).is_none() {
        return Ok((offered[0], false));
    }
    for MediaRange {
        media,
        nulls_stripped,
    } in &accepted(headers)
    {
        let pgrst = media.starts_with("application/vnd.pgrst.");
        let found = match media.as_str() {
            "*/*" | "application/*" => Some(offered[0]),
            "application/json" => Some(MediaType::Json),
            "application/vnd.pgrst.array+json" | "application/vnd.pgrst.array" => {
                Some(MediaType::Json)
            }
            "application/vnd.pgrst.object+json" | "application/vnd.pgrst.object" => {
                Some(MediaType::SingleObject)
            }
            "text/csv" | "text/*" => Some(MediaType::Csv),
            "application/openapi+json" => Some(MediaType::OpenApi),
            _ => None,
        };
        if let Some(m) = found.filter(|m| offered.contains(m)) {
            return Ok((m, *nulls_stripped && pgrst));
        }
    }
    Err(ApiError::new(
        ErrorCode::NotAcceptable,
        format!(
            "None of these media types are available: {}",
            headers
                .get(header::ACCEPT)
                .map_or("", |v| v.to_str().unwrap_or(""))
        ),
    ))
}

/// A `Range: a-b` request header (`Range-Unit: items`), as offset and limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ItemRange {
    /// First row (0-based).
    pub offset: u64,
    /// Number of rows, when bounded.
    pub limit: Option<u64>,
}

/// Decodes the `Range` header of a GET, if present (`0-9`, `10-`, optionally prefixed
/// `items=`). Other methods ignore it, HEAD too: RFC 9110 §14.2 defines ranges for GET only,
/// and PostgREST reads them so.
pub fn parse_range(
    method: &http::Method,
    headers: &HeaderMap,
) -> Result<Option<ItemRange>, ApiError> {
    let Some(value) = headers
        .get(header::RANGE)
        .filter(|_| method == http::Method::GET)
    else {
        return Ok(None);
    };
    let bad = || {
        ApiError::new(ErrorCode::InvalidRange, "invalid Range header")
            .hint("use Range: FIRST-LAST, e.g. 0-9 (with Range-Unit: items)")
    };
    let text = value.to_str().map_err(|_| bad())?.trim();
    if text.is_empty() {
        // an empty Range asks for nothing in particular: the whole result
        return Ok(None);
    }
    let text = text.strip_prefix("items=").unwrap_or(text);
    let (a, b) = text.split_once('-').ok_or_else(bad)?;
    let first: u64 = a.trim().parse().map_err(|_| bad())?;
    let last = b.trim();
    if last.is_empty() {
        return Ok(Some(ItemRange {
            offset: first,
            limit: None,
        }));
    }
    let last: u64 = last.parse().map_err(|_| bad())?;
    if last < first {
        return Err(ApiError::new(
            ErrorCode::RangeNotSatisfiable,
            "Requested range not satisfiable",
        )
        .details(
            "The lower boundary must be lower than or equal to the upper boundary in the Range header.",
        ));
    }
    Ok(Some(ItemRange {
        offset: first,
        limit: Some((last - first).saturating_add(1)),
    }))
}

/// Decodes the query string with `rowgate-query`.
pub fn parse_query(raw: Option<&str>) -> Result<Query, ApiError> {
    let pairs: Vec<FormPair<'_>> = form_pairs(raw.unwrap_or("").as_bytes())
        .map_err(|e| ApiError {
            code: ErrorCode::QueryParse,
            ..e
        })?
        .collect();
    Ok(rowgate_query::parse::parse_query(
        pairs.iter().map(|(k, v)| (k.as_ref(), v.as_ref())),
    )?)
}

/// Refuses filters nested deeper than `limits.max_filter_depth` or lists longer than
/// `limits.max_list_items` (400 `RG102`).
pub fn check_limits(
    filters: &[Condition],
    limits: &crate::config::LimitsConfig,
) -> Result<(), ApiError> {
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

/// Decodes a write's body: JSON (an object or an array of objects) or a URL-encoded form (one
/// object of strings). An empty body is an error.
pub fn parse_body(headers: &HeaderMap, body: &[u8]) -> Result<Json, ApiError> {
    match body_media(headers, body)? {
        BodyMedia::Json => {
            if body.iter().all(u8::is_ascii_whitespace) {
                return Err(empty_json());
            }
            serde_json::from_slice(body).map_err(invalid_json)
        }
        BodyMedia::Form => Ok(Json::Object(
            form_pairs(body)?
                .map(|(k, v)| (k.into_owned(), Json::String(v.into_owned())))
                .collect(),
        )),
        BodyMedia::Csv => csv_body(body),
    }
}

/// A CSV body (a header line naming the columns, then one line per row) as JSON objects of
/// strings, `NULL` read as null, as PostgREST reads one; every line must have the header's
/// number of fields.
fn csv_body(body: &[u8]) -> Result<Json, ApiError> {
    let mut reader = csv_reader(body);
    let names = reader.headers().map_err(invalid_csv)?.clone();
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(invalid_csv)?;
        let row = names
            .iter()
            .zip(record.iter())
            .map(|(name, value)| {
                let value = csv_field(value).map_or(Json::Null, |t| Json::String(t.to_string()));
                (name.to_string(), value)
            })
            .collect();
        rows.push(Json::Object(row));
    }
    Ok(Json::Array(rows))
}

/// Reads the request body up to the configured limit (413 beyond it).
pub async fn read_body(
    limits: &LimitsConfig,
    parts: &http::request::Parts,
    body: impl RequestBody,
) -> Result<Bytes, ApiError> {
    if matches!(parts.method, Method::GET | Method::HEAD) {
        return Ok(Bytes::new());
    }
    let limit = limits.body_bytes;
    let too_large = || {
        ApiError::new(ErrorCode::PayloadTooLarge, "the request body is too large")
            .details(format!("the limit is {limit} bytes"))
    };
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let timeout = Duration::from_millis(limits.body_read_timeout_ms);
    let Ok(read) =
        tokio::time::timeout(timeout, collect(Limited::new(body, limit), declared)).await
    else {
        return Err(ApiError::new(
            ErrorCode::RequestTimeout,
            "the request body did not arrive in time",
        )
        .details(format!(
            "the limit is {} ms for the whole body",
            timeout.as_millis()
        )));
    };
    match read {
        Ok(bytes) => Ok(bytes),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(too_large())
        }
        Err(e) => Err(
            ApiError::new(ErrorCode::InvalidBody, "could not read the request body")
                .details(e.to_string()),
        ),
    }
}

/// A body's bytes in one buffer, made once: a body of one chunk is kept as it is; several are
/// copied into a buffer of the declared length (collecting the chunks first and joining them
/// after would hold a large body twice).
async fn collect<B: RequestBody>(
    mut body: Limited<B>,
    declared: Option<usize>,
) -> Result<Bytes, Box<dyn std::error::Error + Send + Sync>> {
    let mut first: Option<Bytes> = None;
    let mut joined = bytes::BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        match first.take() {
            None if joined.is_empty() => first = Some(data),
            Some(head) => {
                joined.reserve(declared.unwrap_or(0).max(head.len() + data.len()));
                joined.extend_from_slice(&head);
                joined.extend_from_slice(&data);
            }
            None => joined.extend_from_slice(&data),
        }
    }
    Ok(first.unwrap_or_else(|| joined.freeze()))
}

/// Whether the method reads.
pub fn is_read(method: &Method) -> bool {
    method == Method::GET || method == Method::HEAD
}

/// What the engine takes of a PostgREST request (`/api`, RPC) by `principal`: its head as the
/// facts the database may be told, and the schema profile its `Accept-Profile` or
/// `Content-Profile` names.
pub fn engine_request<'r>(
    parts: &'r http::request::Parts,
    principal: &'r crate::auth::Principal,
) -> crate::engine::Request<'r> {
    crate::engine::Request {
        principal,
        facts: parts,
        profile: profile(parts),
    }
}

/// An HTTP request's head is what the database is told about it (`request.method`, …).
impl crate::engine::facts::RequestFacts for http::request::Parts {
    fn method(&self) -> &str {
        self.method.as_str()
    }

    fn path(&self) -> &str {
        self.uri.path()
    }

    fn each_header(&self, visit: &mut dyn FnMut(&str, &str)) {
        for (name, value) in &self.headers {
            if let Ok(value) = value.to_str() {
                visit(name.as_str(), value);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn prefer_is_decoded_and_strict_rejects_unknown() {
        let p = Prefer::parse(&headers(&[
            ("prefer", "return=representation, count=exact"),
            ("prefer", "max-affected=5"),
        ]))
        .expect("prefer");
        assert_eq!(p.return_, Return::Representation);
        assert_eq!(p.count, Some(Count::Exact));
        assert_eq!(p.max_affected, Some(5));
        assert!(Prefer::parse(&headers(&[("prefer", "return=all")])).is_ok());
        let err = Prefer::parse(&headers(&[("prefer", "handling=strict, return=all")]))
            .expect_err("strict");
        assert_eq!(err.code, ErrorCode::InvalidPreference);
    }

    #[test]
    fn accept_negotiation() {
        let all = [MediaType::Json, MediaType::SingleObject, MediaType::Csv];
        let pick = |a: &'static str| negotiate(&headers(&[("accept", a)]), &all);
        assert_eq!(pick("text/csv").expect("csv"), MediaType::Csv);
        assert_eq!(pick("*/*").expect("any"), MediaType::Json);
        assert_eq!(
            pick("text/html;q=0.9, application/vnd.pgrst.object+json").expect("obj"),
            MediaType::SingleObject
        );
        assert_eq!(
            pick("image/png").expect_err("none").code,
            ErrorCode::NotAcceptable
        );
    }

    #[test]
    fn ranges() {
        let r = |v: &'static str| parse_range(&http::Method::GET, &headers(&[("range", v)]));
        assert_eq!(
            r("0-9").expect("ok"),
            Some(ItemRange {
                offset: 0,
                limit: Some(10)
            })
        );
        assert_eq!(
            r("5-").expect("ok"),
            Some(ItemRange {
                offset: 5,
                limit: None
            })
        );
        assert_eq!(r("x").expect_err("bad").code, ErrorCode::InvalidRange);
        assert_eq!(
            r("9-2").expect_err("bad").code,
            ErrorCode::RangeNotSatisfiable
        );
    }
}
