//! The parse stage of the ORDS front end: an `/ords/…` request as the [`ApiRequest`] the plan
//! stage takes — the method as the action, `q=` (a filter object, [`rowgate_query::filter_object`])
//! as filters and order with its column names matched regardless of case, `limit` (default
//! `ords.default_limit`, at most `ords.max_limit`; one more row is read to know `hasMore`) and
//! `offset` — plus what the answer's links need.

use std::net::IpAddr;

use bytes::Bytes;
use http::request::Parts;
use http::{header, HeaderMap, Method};
use rowgate_query::filter_object::parse_filter_object;
use rowgate_query::{Direction, OrderTerm, Query};

use crate::api::request::{Action, ApiRequest, MediaType, Prefer, Return};
use crate::app::App;
use crate::error::{ApiError, ErrorCode};

/// An ORDS request, parsed.
pub struct OrdsRequest<'a> {
    /// The request as the pipeline takes it.
    pub api: ApiRequest<'a>,
    /// Rows per page.
    pub limit: u64,
    /// The page's first row.
    pub offset: u64,
    /// `q=` as sent, for the links.
    pub q: Option<String>,
    /// `{scheme}://{host}/ords/{schema}/`, the links' base.
    pub base: String,
    /// The object's name.
    pub object: &'a str,
    /// For a duality view's documents: the change-log position they reflect (every change up
    /// to it), when realtime is on.
    pub asof: Option<i64>,
}

/// Parses a request to `object` (and item `key`) that came from `peer`.
pub fn parse<'a>(
    app: &App,
    parts: &'a Parts,
    peer: IpAddr,
    object: &'a str,
    key: Option<&'a str>,
    body: Bytes,
) -> Result<OrdsRequest<'a>, ApiError> {
    let config = &app.config.ords;
    let mut q = None;
    let mut limit = config.default_limit;
    let mut offset = 0;
    for (name, value) in form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "q" => q = Some(value.into_owned()),
            "limit" => {
                limit = value.parse().map_err(|_| {
                    bad_request(format!("limit must be a whole number, not {value:?}"))
                })?;
            }
            "offset" => {
                offset = value.parse().map_err(|_| {
                    bad_request(format!("offset must be a whole number, not {value:?}"))
                })?;
            }
            _ => {}
        }
    }
    let limit = limit.clamp(1, config.max_limit.max(1));
    let mut query = Query::default();
    if let Some(text) = &q {
        let columns = names(app, object);
        let parsed = parse_filter_object(text).map_err(|e| {
            let mut err = bad_request(format!("the filter object (q) is not valid: {}", e.message));
            err.hint = e.hint;
            err
        })?;
        query.filters = parsed
            .filters
            .into_iter()
            .map(|c| c.try_map_columns(&|name| Ok::<_, ApiError>(column_named(name, &columns))))
            .collect::<Result<_, _>>()?;
        query.order = parsed
            .order
            .into_iter()
            .map(|mut t| {
                t.column = column_named(&t.column, &columns);
                t
            })
            .collect();
        crate::api::request::check_limits(&query.filters, &app.config.limits)?;
    }
    let action = match (&parts.method, key) {
        (m, key) if *m == Method::GET || *m == Method::HEAD => Action::Read { key },
        (m, None) if *m == Method::POST => Action::Insert,
        (m, Some(key)) if *m == Method::PUT => Action::Upsert { key: Some(key) },
        (m, key) if *m == Method::DELETE => Action::Delete { key },
        (method, key) => {
            let allow: &[&str] = if key.is_some() {
                &["GET", "HEAD", "PUT", "DELETE"]
            } else {
                &["GET", "HEAD", "POST", "DELETE"]
            };
            return Err(ApiError::method_not_allowed(method, allow));
        }
    };
    if matches!(action, Action::Read { key: None }) {
        // pages in a stable order: the key's, unless $orderby says otherwise
        if query.order.is_empty() {
            query.order = order_by_key(app, object);
        }
        query.limit = Some(limit + 1);
        query.offset = (offset > 0).then_some(offset);
    }
    if matches!(action, Action::Delete { key: None }) && query.filters.is_empty() {
        return Err(bad_request(
            "DELETE of a collection needs a filter object (q=) saying which rows",
        ));
    }
    let mut prefer = Prefer::default();
    if matches!(action, Action::Insert | Action::Upsert { .. }) {
        prefer.return_ = Return::Representation;
    }
    Ok(OrdsRequest {
        api: ApiRequest {
            action,
            table: object,
            query,
            prefer,
            media: MediaType::Json,
            nulls_stripped: false,
            range: None,
            method: parts.method.as_str(),
            content_type: crate::api::request::content_type(&parts.headers),
            if_match: crate::api::request::if_match(&parts.headers),
            if_none_match: crate::api::request::if_none_match_values(&parts.headers),
            body,
        },
        limit,
        offset,
        q,
        base: base_url(app, peer, &parts.headers),
        object,
        asof: None,
    })
}

/// 400 in ORDS's words.
pub fn bad_request(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::QueryParse, message)
}

/// The names a filter object's members may match (whatever the case): the table's columns, or
/// a duality view's top-level fields.
fn names(app: &App, object: &str) -> Vec<String> {
    if let Some(view) = app.duality.get(object) {
        return view.fields.iter().map(|(field, _)| field.clone()).collect();
    }
    app.db
        .schema()
        .table(object)
        .map(|t| t.columns.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default()
}

/// `name` as the object spells it, when one of `columns` matches it regardless of case.
fn column_named(name: &str, columns: &[String]) -> String {
    columns
        .iter()
        .find(|c| c.as_str() == name)
        .or_else(|| columns.iter().find(|c| c.eq_ignore_ascii_case(name)))
        .cloned()
        .unwrap_or_else(|| name.to_string())
}

/// Ascending by the primary key (a duality view's `_id`).
fn order_by_key(app: &App, object: &str) -> Vec<OrderTerm> {
    let term = |column: &str| OrderTerm {
        relation: None,
        column: column.to_string(),
        path: Vec::new(),
        direction: Some(Direction::Asc),
        nulls: None,
    };
    if app.duality.get(object).is_some() {
        return vec![term("_id")];
    }
    app.db
        .schema()
        .table(object)
        .map(|t| t.primary_key.iter().map(|c| term(c)).collect())
        .unwrap_or_default()
}

/// `{scheme}://{host}/ords/{schema}/`: `X-Forwarded-Proto` and `X-Forwarded-Host` when a
/// trusted proxy (`trusted_proxies`) sets them, else `http` and `Host`: a client's own
/// `X-Forwarded-Host` would otherwise name the host of every link (and a shared cache would
/// keep them for everyone).
pub fn base_url(app: &App, peer: IpAddr, headers: &HeaderMap) -> String {
    let proxies = &app.trusted_proxies;
    let scheme = proxies
        .forwarded(peer, headers, crate::proxies::FORWARDED_PROTO)
        .unwrap_or("http");
    let host = proxies
        .forwarded(peer, headers, crate::proxies::FORWARDED_HOST)
        .or_else(|| {
            headers
                .get(header::HOST)
                .and_then(|v| v.to_str().ok())
                .filter(|v| !v.is_empty())
        })
        .unwrap_or("localhost");
    format!("{scheme}://{host}/ords/{}/", app.config.ords.schema)
}
