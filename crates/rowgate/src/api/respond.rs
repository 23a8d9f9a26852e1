//! Stage 4, respond: status, headers (`Content-Range`, `ETag`, `Preference-Applied`) and body of
//! an answer, turned into an HTTP response. Errors become `{code, message, details, hint}`.

use bytes::Bytes;
use http::{header, HeaderValue, StatusCode};

use super::request::{Action, ApiRequest, Count, MediaType, Prefer, Return};
pub use crate::engine::answer::Answer;
use crate::error::{ApiError, ErrorCode};
pub use crate::job::etag;
use crate::job::{expect_one, unwrap_single, Output};
pub use crate::reply::{error_response, tagged, tagged_as, Reply};

/// Stage 4, respond: the answer to `request` from its job's `outcome`.
pub fn answer(
    request: &ApiRequest<'_>,
    answer: Answer,
    mut outcome: Output,
) -> Result<Reply, ApiError> {
    let (media, prefer) = (request.media, &request.prefer);
    let rows = outcome.row_count;
    let body = std::mem::take(&mut outcome.rows);
    let single = |body: &[u8]| Bytes::copy_from_slice(unwrap_single(body));
    match answer {
        Answer::Read {
            documents,
            item,
            table,
            offset,
        } => {
            let (body, tag) = match documents {
                Some(nocheck) => {
                    let (body, tags) = crate::duality::with_metadata(&body, &nocheck)
                        .map_err(ApiError::internal)?;
                    (body, tags.into_iter().next().map(|t| format!("\"{t}\"")))
                }
                None => (body, None),
            };
            if item || media == MediaType::SingleObject {
                if item && rows == 0 {
                    return Err(ApiError::new(
                        ErrorCode::NotFound,
                        format!("no row of '{table}' has this key"),
                    ));
                }
                expect_one(rows)?;
                let body = single(&body);
                let tag = tag.unwrap_or_else(|| etag(&body));
                return Ok(tagged_as(&|t| request.none_match(t), tag, body, |body| {
                    Reply::new(StatusCode::OK, media, body)
                }));
            }
            let total = outcome.count;
            if let Some(total) = total {
                if offset > total {
                    // an error answer that still says how many rows there are, as PostgREST's
                    let err = ApiError::new(
                        ErrorCode::RangeNotSatisfiable,
                        "Requested range not satisfiable",
                    )
                    .details(format!(
                        "An offset of {offset} was requested, but there are only {total} rows."
                    ));
                    return Ok(
                        Reply::typed(err.status(), ApiError::content_type(), err.body())
                            .header(header::CONTENT_RANGE, format!("*/{total}")),
                    );
                }
            }
            let status = match total {
                Some(total) if offset > 0 || offset + rows < total => StatusCode::PARTIAL_CONTENT,
                _ => StatusCode::OK,
            };
            let mut reply = Reply::new(status, media, Bytes::from(body))
                .header(header::CONTENT_RANGE, content_range(offset, rows, total));
            if let Some(c) = prefer.count {
                reply = reply.applied(match c {
                    Count::Exact => "count=exact",
                    Count::Planned => "count=planned",
                    Count::Estimated => "count=estimated",
                });
            }
            // of the others, those a read honours
            for p in &prefer.applied {
                if p.starts_with("handling=") || p.starts_with("timezone=") {
                    reply = reply.applied(p);
                }
            }
            Ok(reply)
        }
        Answer::Insert {
            location,
            key,
            merged,
        } => {
            let status = if merged.is_some_and(|rows| rows <= outcome.existing) {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            let reply = match prefer.return_ {
                Return::Representation => {
                    let body = if media == MediaType::SingleObject {
                        single(&body)
                    } else {
                        Bytes::from(body)
                    };
                    Reply::new(status, media, body)
                }
                Return::HeadersOnly => {
                    let reply = Reply::empty(status);
                    match location_of(location, &key, &body) {
                        Some(url) => reply.header(header::LOCATION, url),
                        None => reply,
                    }
                }
                Return::Minimal => Reply::empty(status),
            };
            Ok(reply
                .header(
                    header::CONTENT_RANGE,
                    written_range(prefer, outcome.affected, false),
                )
                .applied_all(&prefer.applied))
        }
        Answer::Modify => {
            let reply = written(request, body, media == MediaType::SingleObject);
            Ok(reply
                .header(
                    header::CONTENT_RANGE,
                    written_range(
                        prefer,
                        outcome.affected,
                        matches!(request.action, Action::Update { .. }),
                    ),
                )
                .applied_all(&prefer.applied))
        }
        Answer::Document {
            created,
            location,
            nocheck,
        } => {
            let Some(nocheck) = nocheck else {
                return Ok(Reply::empty(StatusCode::NO_CONTENT));
            };
            let (body, tags) =
                crate::duality::with_metadata(&body, &nocheck).map_err(ApiError::internal)?;
            let body = single(&body);
            let tag = tags.into_iter().next().unwrap_or_default();
            let mut reply = Reply::new(
                if created {
                    StatusCode::CREATED
                } else {
                    StatusCode::OK
                },
                MediaType::Json,
                body.clone(),
            )
            .header(header::ETAG, format!("\"{tag}\""));
            if created {
                if let Some(id) = document_id(&body) {
                    reply = reply.header(header::LOCATION, format!("{location}{id}"));
                }
            }
            Ok(reply)
        }
        Answer::Plan { content_type } => Ok(Reply::typed(
            StatusCode::OK,
            HeaderValue::from_str(&content_type).map_err(ApiError::internal)?,
            Bytes::from(outcome.value.unwrap_or_default()),
        )),
        Answer::Handled { media, bytes } => {
            let value = outcome.value.unwrap_or_else(|| b"null".to_vec());
            Reply::new(StatusCode::OK, MediaType::Json, Bytes::from(value)).raw_of(&media, bytes)
        }
        Answer::Upsert { item } => {
            let mut reply = written(request, body, item || media == MediaType::SingleObject);
            // a row that was not there is created (PostgREST: 201 with the representation)
            if reply.status == StatusCode::OK && outcome.existing == 0 {
                reply.status = StatusCode::CREATED;
            }
            Ok(reply.applied_all(&prefer.applied))
        }
    }
}

/// 200 with the written rows (one object when `one`) for `return=representation`, else 204.
fn written(request: &ApiRequest<'_>, body: Vec<u8>, one: bool) -> Reply {
    if request.prefer.return_ != Return::Representation {
        return Reply::empty(StatusCode::NO_CONTENT);
    }
    let body = if one {
        Bytes::copy_from_slice(unwrap_single(&body))
    } else {
        Bytes::from(body)
    };
    Reply::new(StatusCode::OK, request.media, body)
}

/// `Location: /api/table?pk=eq.v` for the first inserted row, from the returned key columns.
fn location_of(mut url: String, key: &[String], returned: &[u8]) -> Option<String> {
    let rows: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_slice(returned).ok()?;
    let row = rows.first()?;
    let mut ser = form_urlencoded::Serializer::new(String::new());
    for col in key {
        let filter = match row.get(col)? {
            serde_json::Value::String(s) => format!("eq.{s}"),
            // a key column may be NULL in a view's row (an outer join's), as PostgREST says
            serde_json::Value::Null => "is.null".to_string(),
            other => format!("eq.{other}"),
        };
        ser.append_pair(col, &filter);
    }
    url.push_str(&ser.finish());
    Some(url)
}

/// A document's `_id`, as its item URL segment.
fn document_id(document: &[u8]) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Id {
        #[serde(rename = "_id")]
        id: serde_json::Value,
    }
    let id: Id = serde_json::from_slice(document).ok()?;
    let text = match id.id {
        serde_json::Value::String(s) => s,
        serde_json::Value::Number(n) => n.to_string(),
        _ => return None,
    };
    Some(percent_encoding::utf8_percent_encode(&text, UNRESERVED).to_string())
}

/// What a URL's parts keep unencoded: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// A read's `Content-Location`, as PostgREST's: the relation's URL with the query's parameters
/// sorted by name (each name's in the order given) and encoded alike, so that equal requests
/// have equal locations (`/api/no_pk?b=eq.1&a=eq.1` → `/api/no_pk?a=eq.1&b=eq.1`).
pub fn content_location(prefix: &str, table: &str, query: Option<&str>) -> String {
    // (one string built in place: the pairs borrow the query unless they hold escapes)
    let query = query.unwrap_or("");
    let mut url = String::with_capacity(prefix.len() + table.len() + 2 * query.len() + 2);
    url.push_str(prefix.trim_end_matches('/'));
    url.push('/');
    url.extend(percent_encoding::utf8_percent_encode(table, UNRESERVED));
    let mut pairs: Vec<_> = form_urlencoded::parse(query.as_bytes()).collect();
    pairs.sort_by(|a, b| a.0.cmp(&b.0));
    for (i, (name, value)) in pairs.iter().enumerate() {
        url.push(if i == 0 { '?' } else { '&' });
        url.extend(percent_encoding::utf8_percent_encode(name, UNRESERVED));
        url.push('=');
        url.extend(percent_encoding::utf8_percent_encode(value, UNRESERVED));
    }
    url
}

/// A write's `Content-Range`, as PostgREST's: with `Prefer: count=…`, `*/N` for the `affected`
/// rows; else, for an update (`ranged`), `0-(N-1)/*` (`*/*` when none), for an insert or a
/// delete `*/*`.
fn written_range(prefer: &Prefer, affected: u64, ranged: bool) -> String {
    match (prefer.count, affected) {
        (Some(_), n) => format!("*/{n}"),
        (None, 0) => "*/*".to_string(),
        (None, n) if ranged => format!("0-{}/*", n - 1),
        (None, _) => "*/*".to_string(),
    }
}

/// `Content-Range` of a read: `first-last/total` (`*` when unknown or empty).
pub fn content_range(offset: u64, rows: u64, total: Option<u64>) -> String {
    let total = total.map_or_else(|| "*".to_string(), |t| t.to_string());
    if rows == 0 {
        format!("*/{total}")
    } else {
        format!("{offset}-{}/{total}", offset + rows - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ranges() {
        assert_eq!(content_range(0, 42, None), "0-41/*");
        assert_eq!(content_range(10, 5, Some(42)), "10-14/42");
        assert_eq!(content_range(0, 0, Some(0)), "*/0");
    }

    #[test]
    fn parameters_are_sorted_by_name_and_encoded_alike() {
        assert_eq!(
            content_location("/api", "no_pk", Some("b=eq.1&a=eq.1")),
            "/api/no_pk?a=eq.1&b=eq.1"
        );
        assert_eq!(
            content_location("/api/", "simple_pk", None),
            "/api/simple_pk"
        );
        assert_eq!(
            content_location("/api", "simple_pk", Some("")),
            "/api/simple_pk"
        );
        // the same name keeps its order; spaces and commas are encoded one way
        assert_eq!(
            content_location("", "t", Some("select=a,%20b&id=gt.1&id=lt.9&d")),
            "/t?d=&id=gt.1&id=lt.9&select=a%2C%20b"
        );
    }
}
