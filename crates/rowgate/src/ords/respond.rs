//! The respond stage of the ORDS front end: rows in ORDS's AutoREST shapes.
//!
//! - A collection: `{"items":[…],"hasMore":…,"limit":…,"offset":…,"count":…,"links":[…]}`,
//!   `count` the rows in this page, links `self`, `edit`, `describedby`, `first`, `next` (when
//!   `hasMore`), `prev` (when `offset > 0`); each item carries its `self` link.
//! - An item: the row, then `links` (`self`, `edit`, `describedby`, `collection`), with an
//!   `ETag` (the same as `/api`'s for the row, so `If-Match` works on both).
//! - Keys are lower-case column names; dates and timestamps are RFC 3339 in UTC (`…T…Z`).
//! - Errors: `{"code":"NotFound","title":"Not Found","message":…,"type":
//!   "tag:oracle.com,2020:error/NotFound","instance":…}` with the status and the headers
//!   (`Allow`, `WWW-Authenticate`) of the `/api` error.

use bytes::Bytes;
use http::{header, Method, StatusCode};
use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::request::OrdsRequest;
use crate::app::App;
use crate::engine::answer::Answer;
use crate::error::{ApiError, ErrorCode};
use crate::job::{etag, unwrap_single, Output};
use crate::reply::{error_response, Reply};
use crate::schema::SchemaCache;

/// How a column's values are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Temporal {
    /// `YYYY-MM-DD` → `YYYY-MM-DDT00:00:00Z`.
    Date,
    /// `YYYY-MM-DD HH:MM:SS[.f][+00:00]` → `YYYY-MM-DDTHH:MM:SS[.f]Z`.
    Timestamp,
}

/// What the rows of an object need rewriting for ORDS: its key columns (for links) and its
/// date columns.
struct Shape<'s> {
    key: Vec<&'s str>,
    temporal: Vec<(&'s str, Temporal)>,
}

impl<'s> Shape<'s> {
    fn of(app: &App, schema: &'s SchemaCache, object: &str) -> Shape<'s> {
        if app.duality.get(object).is_some() {
            return Shape {
                key: vec!["_id"],
                temporal: Vec::new(),
            };
        }
        let Some(table) = schema.table(object) else {
            return Shape {
                key: Vec::new(),
                temporal: Vec::new(),
            };
        };
        let temporal = table
            .columns
            .iter()
            .filter_map(|c| {
                let decl = c.decl_type.as_bytes();
                let has = |word: &[u8]| {
                    decl.windows(word.len())
                        .any(|w| w.eq_ignore_ascii_case(word))
                };
                let kind = if has(b"timestamp") || has(b"datetime") {
                    Temporal::Timestamp
                } else if decl.eq_ignore_ascii_case(b"date") {
                    Temporal::Date
                } else {
                    return None;
                };
                Some((c.name.as_str(), kind))
            })
            .collect();
        Shape {
            key: table.primary_key.iter().map(String::as_str).collect(),
            temporal,
        }
    }
}

/// A member's name: borrowed from the row's text unless it has escapes.
pub(super) type Name<'a> = std::borrow::Cow<'a, str>;

/// A row's JSON members in order, values unparsed.
pub(super) fn members(text: &str) -> Result<Vec<(Name<'_>, &RawValue)>, ApiError> {
    struct Key;
    impl<'de> serde::de::DeserializeSeed<'de> for Key {
        type Value = Name<'de>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Name<'de>, D::Error> {
            d.deserialize_str(self)
        }
    }
    impl<'de> Visitor<'de> for Key {
        type Value = Name<'de>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a member name")
        }
        fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Name<'de>, E> {
            Ok(Name::Borrowed(v))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Name<'de>, E> {
            Ok(Name::Owned(v.to_string()))
        }
    }
    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(Name<'de>, &'de RawValue)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a row object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(8);
            while let Some(k) = map.next_key_seed(Key)? {
                out.push((k, map.next_value::<&'de RawValue>()?));
            }
            Ok(out)
        }
    }
    let mut de = serde_json::Deserializer::from_str(text);
    de.deserialize_map(Members).map_err(ApiError::internal)
}

/// The row's key as an item URL segment (values comma-separated in key order).
fn key_segment(shape: &Shape, members: &[(Name<'_>, &RawValue)]) -> Option<String> {
    let mut parts = Vec::with_capacity(shape.key.len());
    for k in &shape.key {
        let (_, raw) = members
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(k))?;
        // a string key unquoted (and unescaped); a number as written
        let raw = raw.get();
        let text = if raw.starts_with('"') {
            serde_json::from_str::<String>(raw).unwrap_or_else(|_| raw.to_string())
        } else {
            raw.to_string()
        };
        parts.push(
            percent_encoding::utf8_percent_encode(&text, percent_encoding::NON_ALPHANUMERIC)
                .to_string(),
        );
    }
    (!parts.is_empty()).then(|| parts.join(","))
}

/// A date or timestamp value in RFC 3339 UTC.
fn temporal_value(raw: &RawValue, kind: Temporal) -> Option<String> {
    let text: String = serde_json::from_str(raw.get()).ok()?;
    let converted = match kind {
        Temporal::Date if text.len() == 10 => format!("{text}T00:00:00Z"),
        Temporal::Timestamp if text.len() >= 19 => {
            let mut t = text.replacen(' ', "T", 1);
            if let Some(stripped) = t.strip_suffix("+00:00").or_else(|| t.strip_suffix("+00")) {
                t = stripped.to_string();
            }
            if !t.ends_with('Z') && t.len() <= 26 && !t[19..].contains(['+', '-']) {
                t.push('Z');
            }
            t
        }
        _ => return None,
    };
    serde_json::to_string(&converted).ok()
}

/// Writes one row with lower-case keys, dates in RFC 3339, then `links`.
fn write_row(
    out: &mut String,
    text: &str,
    shape: &Shape,
    links: impl FnOnce(&mut String, Option<&str>),
) -> Result<(), ApiError> {
    let members = members(text)?;
    out.push('{');
    for (name, raw) in &members {
        push_string(out, name, true);
        out.push(':');
        let temporal = shape
            .temporal
            .iter()
            .find(|(c, _)| c.eq_ignore_ascii_case(name))
            .and_then(|(_, kind)| temporal_value(raw, *kind));
        out.push_str(temporal.as_deref().unwrap_or(raw.get()));
        out.push(',');
    }
    out.push_str("\"links\":");
    links(out, key_segment(shape, &members).as_deref());
    out.push('}');
    Ok(())
}

/// `text` as a JSON string (in lower case when asked), escaped only when it must be.
fn push_string(out: &mut String, text: &str, lower: bool) {
    let plain = text
        .bytes()
        .all(|b| b >= 0x20 && b != b'"' && b != b'\\' && !(lower && b.is_ascii_uppercase()));
    if plain {
        out.push('"');
        out.push_str(text);
        out.push('"');
    } else {
        let text = if lower {
            text.to_ascii_lowercase()
        } else {
            text.to_string()
        };
        out.push_str(&serde_json::to_string(&text).unwrap_or_default());
    }
}

fn link(rel: &str, href: &str) -> String {
    let mut out = String::with_capacity(href.len() + 24);
    push_link(&mut out, rel, &[href]);
    out
}

/// `{"rel":…,"href":…}`, the href written from its `parts`.
fn push_link(out: &mut String, rel: &str, parts: &[&str]) {
    out.push_str("{\"rel\":\"");
    out.push_str(rel);
    out.push_str("\",\"href\":\"");
    for part in parts {
        if part.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
            out.push_str(part);
        } else {
            let quoted = serde_json::to_string(part).unwrap_or_default();
            out.push_str(&quoted[1..quoted.len() - 1]);
        }
    }
    out.push_str("\"}");
}

/// The rows of an outcome (a duality view's with `_metadata`), and the first one's etag.
fn rows_of(
    answer: &Answer,
    outcome: &mut Output,
    asof: Option<i64>,
) -> Result<(Vec<u8>, Option<String>), ApiError> {
    let body = std::mem::take(&mut outcome.rows);
    let nocheck = match answer {
        Answer::Read {
            documents: Some(nocheck),
            ..
        } => Some(nocheck),
        Answer::Document {
            nocheck: Some(nocheck),
            ..
        } => Some(nocheck),
        _ => None,
    };
    // the change-log position the documents reflect, as ORDS's 16 hexadecimal digits
    let asof = asof.map(|id| format!("{id:016X}"));
    match nocheck {
        Some(nocheck) => {
            let (body, tags) = crate::duality::with_metadata_as_of(&body, nocheck, asof.as_deref())
                .map_err(ApiError::internal)?;
            Ok((body, tags.into_iter().next().map(|t| format!("\"{t}\""))))
        }
        None => Ok((body, None)),
    }
}

/// The answer to a request on a collection, or on an item when the URL names one.
pub fn answer(
    app: &App,
    request: &OrdsRequest<'_>,
    answer: &Answer,
    outcome: Output,
    schema: &SchemaCache,
) -> Result<Reply, ApiError> {
    let is_item = request.api.action.key().is_some();
    if *request.api.method == Method::DELETE {
        // a document is one row, whatever its nested rows
        let deleted = match answer {
            Answer::Document { .. } => 1,
            _ => outcome.affected,
        };
        if is_item && deleted == 0 {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                format!("no row of '{}' has this key", request.object),
            ));
        }
        return Ok(json_reply(
            StatusCode::OK,
            format!("{{\"rowsDeleted\":{deleted}}}"),
        ));
    }
    let shape = Shape::of(app, schema, request.object);
    let collection_url = format!("{}{}/", request.base, request.object);
    if is_item {
        item(request, answer, outcome, &shape, &collection_url)
    } else {
        collection(app, request, answer, outcome, &shape, &collection_url)
    }
}

fn collection(
    app: &App,
    request: &OrdsRequest<'_>,
    answer: &Answer,
    mut outcome: Output,
    shape: &Shape,
    collection_url: &str,
) -> Result<Reply, ApiError> {
    let method = request.api.method;
    let (body, tag) = rows_of(answer, &mut outcome, request.asof)?;
    if *method == Method::POST {
        // the stored row with its links, where it lives, and its ETag
        let row = std::str::from_utf8(unwrap_single(&body)).map_err(ApiError::internal)?;
        let mut out = String::with_capacity(row.len() + 256);
        let mut location = None;
        write_row(&mut out, row, shape, |out, key| {
            location = key.map(|k| format!("{collection_url}{k}"));
            push_item_links(out, request, collection_url, key);
        })?;
        let tag = tag.unwrap_or_else(|| etag(unwrap_single(&body)));
        let mut reply = json_reply(StatusCode::CREATED, out).header(header::ETAG, tag);
        if let Some(url) = location {
            reply = reply
                .header(header::LOCATION, &url)
                .header(header::CONTENT_LOCATION, &url);
        }
        return Ok(reply);
    }
    let rows: Vec<&RawValue> = serde_json::from_slice(&body).map_err(ApiError::internal)?;
    let limit = usize::try_from(request.limit).unwrap_or(usize::MAX);
    let has_more = rows.len() > limit;
    let page = &rows[..rows.len().min(limit)];
    let mut out = String::with_capacity(body.len() + page.len() * 96 + 512);
    out.push_str("{\"items\":[");
    for (i, row) in page.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_row(&mut out, row.get(), shape, |out, key| {
            out.push('[');
            push_link(out, "self", &[collection_url, key.unwrap_or("")]);
            out.push(']');
        })?;
    }
    let (limit, offset) = (request.limit, request.offset);
    out.push_str(&format!(
        "],\"hasMore\":{has_more},\"limit\":{limit},\"offset\":{offset},\"count\":{},\"links\":[",
        page.len()
    ));
    let page_url = |offset: Option<u64>| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(o) = offset.filter(|o| *o > 0) {
            query.append_pair("offset", &o.to_string());
        }
        if limit != app.config.ords.default_limit {
            query.append_pair("limit", &limit.to_string());
        }
        if let Some(q) = &request.q {
            query.append_pair("q", q);
        }
        let query = query.finish();
        if query.is_empty() {
            collection_url.to_string()
        } else {
            format!("{collection_url}?{query}")
        }
    };
    let mut links = vec![
        link("self", &page_url(Some(offset))),
        link("edit", collection_url),
        link(
            "describedby",
            &format!("{}metadata-catalog/{}/", request.base, request.object),
        ),
        link("first", &page_url(None)),
    ];
    if has_more {
        links.push(link("next", &page_url(Some(offset + limit))));
    }
    if offset > 0 {
        links.push(link("prev", &page_url(Some(offset.saturating_sub(limit)))));
    }
    out.push_str(&links.join(","));
    out.push_str("]}");
    Ok(json_reply(StatusCode::OK, out))
}

/// An item's links: `self`, `edit`, `describedby`, `collection`.
fn push_item_links(
    out: &mut String,
    request: &OrdsRequest<'_>,
    collection_url: &str,
    key: Option<&str>,
) {
    let key = key.unwrap_or("");
    out.push('[');
    push_link(out, "self", &[collection_url, key]);
    out.push(',');
    push_link(out, "edit", &[collection_url, key]);
    out.push(',');
    push_link(
        out,
        "describedby",
        &[&request.base, "metadata-catalog/", request.object, "/item"],
    );
    out.push(',');
    push_link(out, "collection", &[collection_url]);
    out.push(']');
}

fn item(
    request: &OrdsRequest<'_>,
    answer: &Answer,
    mut outcome: Output,
    shape: &Shape,
    collection_url: &str,
) -> Result<Reply, ApiError> {
    let method = request.api.method;
    let rows = if matches!(answer, Answer::Document { .. }) {
        1
    } else {
        outcome.row_count
    };
    let (body, tag) = rows_of(answer, &mut outcome, request.asof)?;
    if rows == 0 {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no row of '{}' has this key", request.object),
        ));
    }
    let row = std::str::from_utf8(unwrap_single(&body)).map_err(ApiError::internal)?;
    let tag = tag.unwrap_or_else(|| etag(row.as_bytes()));
    let read = *method == Method::GET || *method == Method::HEAD;
    if read && request.api.none_match(&tag) {
        return Ok(Reply::not_modified(tag));
    }
    let mut out = String::with_capacity(row.len() + 320);
    write_row(&mut out, row, shape, |out, key| {
        push_item_links(out, request, collection_url, key);
    })?;
    // a PUT of a row counted it first: none means it inserted it
    let status = if matches!(answer, Answer::Upsert { .. }) && outcome.existing == 0 {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok(json_reply(status, out).header(header::ETAG, tag))
}

fn json_reply(status: StatusCode, body: String) -> Reply {
    Reply::raw(status, "application/json", Bytes::from(body))
}

/// ORDS's name and title for a status.
fn ords_code(status: StatusCode) -> (&'static str, &'static str) {
    match status.as_u16() {
        400 => ("BadRequest", "Bad Request"),
        401 => ("Unauthorized", "Unauthorized"),
        403 => ("Forbidden", "Forbidden"),
        404 => ("NotFound", "Not Found"),
        405 => ("MethodNotAllowed", "Method Not Allowed"),
        406 => ("NotAcceptable", "Not Acceptable"),
        408 => ("RequestTimeout", "Request Timeout"),
        409 => ("Conflict", "Conflict"),
        412 => ("PreconditionFailed", "Precondition Failed"),
        413 => ("RequestEntityTooLarge", "Request Entity Too Large"),
        415 => ("UnsupportedMediaType", "Unsupported Media Type"),
        429 => ("TooManyRequests", "Too Many Requests"),
        503 => ("ServiceUnavailable", "Service Unavailable"),
        504 => ("GatewayTimeout", "Gateway Timeout"),
        s if s >= 500 => ("InternalServerError", "Internal Server Error"),
        _ => ("BadRequest", "Bad Request"),
    }
}

/// An error in ORDS's shape, with the status and headers of the `/api` answer (`Allow`,
/// `WWW-Authenticate`, `Retry-After`); Rowgate's own code, details and hint ride along under
/// `cause`.
pub fn error(err: &ApiError) -> Reply {
    let (code, title) = ords_code(err.status());
    // ORDS's members in ORDS's order, then Rowgate's own answer
    let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
    let body = format!(
        "{{\"code\":{},\"title\":{},\"message\":{},\"type\":{},\"instance\":{},\"cause\":{}}}",
        text(code),
        text(title),
        text(&err.message),
        text(&format!("tag:oracle.com,2020:error/{code}")),
        text(&format!("tag:oracle.com,2020:ecid/{}", instance())),
        String::from_utf8_lossy(&err.body())
    );
    let answer = error_response(err, true, true);
    let mut reply = Reply::typed(err.status(), ApiError::content_type(), Bytes::from(body));
    for (name, value) in answer.headers() {
        if name != header::CONTENT_TYPE {
            if let Ok(value) = value.to_str() {
                reply = reply.header(name.clone(), value);
            }
        }
    }
    reply
}

/// A short random id naming this error's occurrence (ORDS's execution context id).
fn instance() -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        return "0".repeat(24);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
