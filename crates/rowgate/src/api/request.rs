//! Stage 1, parse: an HTTP request for a table resource becomes an [`ApiRequest`] — the query
//! string parsed by `rowgate-query`, the `Prefer`, `Accept`, `Content-Type`, `Range` and
//! conditional headers decoded, the body parsed as JSON (or a form). Nothing here knows the schema.

use bytes::Bytes;
use http::{header, HeaderMap, Method};
use rowgate_query::Query;

use crate::config::LimitsConfig;
pub use crate::engine::body::{
    body_media, csv_field, csv_reader, empty_json, form_pairs, invalid_csv, invalid_json,
    BodyMedia, FormPair,
};
pub use crate::engine::request::{
    check_limits, Action, ApiRequest, Count, ItemRange, MediaType, Prefer, Resolution, Return,
};
use crate::error::{ApiError, ErrorCode};
pub use crate::request_body::{content_type, read_body, RequestBody};

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
        let negotiated = negotiation(accept(&parts.headers), &offered);
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
            method: parts.method.as_str(),
            content_type: content_type(&parts.headers),
            if_match: if_match(&parts.headers),
            if_none_match: if_none_match_values(&parts.headers),
            body,
        })
    }
}

/// `If-Match`'s entity tags, when the header is present.
pub fn if_match(headers: &HeaderMap) -> Option<Vec<String>> {
    let values: Vec<String> = headers
        .get_all(header::IF_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_string())
        .collect();
    (!values.is_empty()).then_some(values)
}

/// `If-None-Match`'s values, as sent.
pub fn if_none_match_values(headers: &HeaderMap) -> Vec<&str> {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect()
}

impl Prefer {
    /// Decodes every `Prefer` header. Unknown preferences are ignored, unless `handling=strict`
    /// is given, in which case they are an error (RFC 7240, as PostgREST).
    pub fn parse(headers: &HeaderMap) -> Result<Prefer, ApiError> {
        let mut p = Prefer::default();
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
pub fn prefers(accept: Option<&str>, media: &str) -> bool {
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
    for range in accepted(accept) {
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

/// The `Accept` header as sent (`""` when it is not text), `None` when there is none.
pub fn accept(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::ACCEPT)
        .map(|v| v.to_str().unwrap_or(""))
}

/// `Accept`'s media ranges, the heaviest first (in their order among equals), weight-0 ones
/// left out; none when there is no `Accept`.
fn accepted(accept: Option<&str>) -> Vec<MediaRange> {
    let Some(text) = accept else {
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
pub fn accepted_media(accept: Option<&str>) -> Vec<String> {
    accepted(accept).into_iter().map(|r| r.media).collect()
}

/// Chooses the answer's media type from `Accept` (first acceptable wins; absent means JSON).
pub fn negotiate(accept: Option<&str>, offered: &[MediaType]) -> Result<MediaType, ApiError> {
    negotiation(accept, offered).map(|(media, _)| media)
}

/// [`negotiate`], and whether the chosen range asks for `nulls=stripped` (PostgREST's
/// `application/vnd.pgrst.array+json;nulls=stripped`, or of a singular object).
pub fn negotiation(
    accept: Option<&str>,
    offered: &[MediaType],
) -> Result<(MediaType, bool), ApiError> {
    let Some(text) = accept else {
        return Ok((offered[0], false));
    };
    for MediaRange {
        media,
        nulls_stripped,
    } in &accepted(accept)
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
        format!("None of these media types are available: {text}"),
    ))
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
        let pick = |a: &'static str| negotiate(Some(a), &all);
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
