//! Stage 4, respond: status, headers (`Content-Range`, `ETag`, `Preference-Applied`) and body of
//! an answer, turned into an HTTP response. Errors become `{code, message, details, hint}`.

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, StatusCode};
use http_body_util::Full;

use super::request::{Action, ApiRequest, Count, MediaType, Prefer, Return};
use crate::error::{ApiError, ErrorCode, More};
pub use crate::job::etag;
use crate::job::{expect_one, unwrap_single, Output};

/// The HTTP response type of the whole server: a whole body, or a stream (Server-Sent Events).
pub type Response = http::Response<Body>;

/// A response body: whole, or chunks from a channel.
pub type Body = http_body_util::Either<Full<Bytes>, Streamed>;

/// A body whose chunks come from a channel, ending when the sender is dropped.
pub struct Streamed(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Streamed {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// An answer under construction.
pub struct Reply {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
    stream: Option<tokio::sync::mpsc::Receiver<Bytes>>,
    headers: Vec<(HeaderName, HeaderValue)>,
    applied: Vec<String>,
    /// The answer depends only on the request and the database's contents: it may be kept and
    /// served again until the next commit ([`crate::cache`]).
    cacheable: bool,
}

impl Reply {
    /// An answer with a body.
    pub fn new(status: StatusCode, media: MediaType, body: Bytes) -> Reply {
        Reply {
            status,
            content_type: Some(HeaderValue::from_static(media.content_type())),
            body,
            stream: None,
            headers: Vec::new(),
            applied: Vec::new(),
            cacheable: false,
        }
    }

    /// Says `nulls=stripped` in the JSON `Content-Type` of an answer to a request that asked
    /// for it (its rows were written without nulls: [`crate::job::Format::JsonNullsStripped`]).
    pub fn nulls_stripped_if(mut self, request: &ApiRequest<'_>) -> Reply {
        if !request.nulls_stripped {
            return self;
        }
        let stripped = match self.content_type.as_ref().map(HeaderValue::as_bytes) {
            Some(t) if t == MediaType::Json.content_type().as_bytes() => {
                "application/vnd.pgrst.array+json;nulls=stripped; charset=utf-8"
            }
            Some(t) if t == MediaType::SingleObject.content_type().as_bytes() => {
                "application/vnd.pgrst.object+json;nulls=stripped; charset=utf-8"
            }
            _ => return self,
        };
        self.content_type = Some(HeaderValue::from_static(stripped));
        self
    }

    /// The answer's one JSON value as raw bytes of `media` (a function's media type handler):
    /// a string as its text (`is_bytes`: a `bytea`'s `\\x…` hex as its bytes), `null` as
    /// nothing, another value as its JSON text. The known text types say `charset=utf-8`, as
    /// PostgREST's.
    pub fn raw_of(mut self, media: &str, is_bytes: bool) -> Result<Reply, ApiError> {
        let value: serde_json::Value =
            serde_json::from_slice(&self.body).map_err(ApiError::internal)?;
        let bytes = match value {
            serde_json::Value::Null => Vec::new(),
            // bytes (a bytea, or a domain of any media type over one) as PostgreSQL's hex
            serde_json::Value::String(s) if is_bytes => {
                match s.strip_prefix("\\x").map(hex_bytes) {
                    Some(Some(bytes)) => bytes,
                    _ => s.into_bytes(),
                }
            }
            serde_json::Value::String(s) => s.into_bytes(),
            // JSON as the database wrote it
            _ => self.body.trim_ascii().to_vec(),
        };
        let content_type = match media {
            "text/plain"
            | "text/xml"
            | "text/csv"
            | "application/json"
            | "application/geo+json" => format!("{media}; charset=utf-8"),
            "*/*" => "application/octet-stream".to_string(),
            _ => media.to_string(),
        };
        self.content_type = Some(HeaderValue::from_str(&content_type).map_err(ApiError::internal)?);
        self.body = Bytes::from(bytes);
        Ok(self)
    }

    /// The answer as the transaction's `response.headers` and `response.status` settings ask
    /// (PostgREST's): each header replaces the answer's own of that name (several of one name,
    /// such as two `Set-Cookie`, all go out), the status replaces the answer's; 500 `PGRST111` /
    /// `PGRST112` when a setting is not of their shape.
    pub fn with_settings(
        mut self,
        settings: &crate::job::ResponseSettings,
    ) -> Result<Reply, ApiError> {
        if let Some(text) = &settings.headers {
            let invalid = || {
                ApiError::new(
                    ErrorCode::ResponseHeadersInvalid,
                    "response.headers guc must be a JSON array composed of objects with a single key and a string value",
                )
            };
            let list: Vec<serde_json::Map<String, serde_json::Value>> =
                serde_json::from_str(text).map_err(|_| invalid())?;
            let mut replaced: Vec<HeaderName> = Vec::new();
            for object in list {
                let mut pairs = object.into_iter();
                let (Some((name, serde_json::Value::String(value))), None) =
                    (pairs.next(), pairs.next())
                else {
                    return Err(invalid());
                };
                let name = HeaderName::from_bytes(name.as_bytes()).map_err(|_| invalid())?;
                let value = HeaderValue::from_str(&value).map_err(|_| invalid())?;
                // the connection's and the body's framing stay the server's
                if crate::error::raised::is_framing(&name) {
                    continue;
                }
                if name == header::CONTENT_TYPE {
                    self.content_type = Some(value);
                    continue;
                }
                if !replaced.contains(&name) {
                    self.headers.retain(|(n, _)| *n != name);
                    replaced.push(name.clone());
                }
                self.headers.push((name, value));
            }
        }
        if let Some(text) = &settings.status {
            self.status = text
                .trim()
                .parse::<u16>()
                .ok()
                .and_then(|code| StatusCode::from_u16(code).ok())
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::ResponseStatusInvalid,
                        "response.status guc must be a valid status code",
                    )
                })?;
        }
        Ok(self)
    }

    /// Names the schema it was answered from in `Content-Profile` (where there are several).
    pub fn profile(self, name: Option<String>) -> Reply {
        match name {
            Some(name) => self.header(HeaderName::from_static("content-profile"), name),
            None => self,
        }
    }

    /// An answer with a fixed content type.
    pub fn raw(status: StatusCode, content_type: &'static str, body: Bytes) -> Reply {
        Reply::typed(status, HeaderValue::from_static(content_type), body)
    }

    /// An answer with any content type.
    pub fn typed(status: StatusCode, content_type: HeaderValue, body: Bytes) -> Reply {
        Reply {
            status,
            content_type: Some(content_type),
            body,
            stream: None,
            headers: Vec::new(),
            applied: Vec::new(),
            cacheable: false,
        }
    }

    /// An answer without a body.
    pub fn empty(status: StatusCode) -> Reply {
        Reply {
            status,
            content_type: None,
            body: Bytes::new(),
            stream: None,
            headers: Vec::new(),
            applied: Vec::new(),
            cacheable: false,
        }
    }

    /// An answer whose body is streamed from `chunks` (ends when their sender is dropped).
    pub fn stream(
        status: StatusCode,
        content_type: HeaderValue,
        chunks: tokio::sync::mpsc::Receiver<Bytes>,
    ) -> Reply {
        Reply {
            stream: Some(chunks),
            ..Reply::typed(status, content_type, Bytes::new())
        }
    }

    /// 304 Not Modified with the current ETag.
    pub fn not_modified(tag: String) -> Reply {
        Reply::empty(StatusCode::NOT_MODIFIED).header(header::ETAG, tag)
    }

    /// Adds a header (values that are not valid header text are dropped).
    pub fn header(mut self, name: HeaderName, value: impl AsRef<str>) -> Reply {
        if let Ok(v) = HeaderValue::from_str(value.as_ref()) {
            self.headers.push((name, v));
        }
        self
    }

    /// Records one honoured preference.
    pub fn applied(mut self, pref: &str) -> Reply {
        self.applied.push(pref.to_string());
        self
    }

    /// Records honoured preferences.
    pub fn applied_all(mut self, prefs: &[String]) -> Reply {
        self.applied.extend(prefs.iter().cloned());
        self
    }

    /// Marks the answer as one that depends only on the request (its URL, its headers, its
    /// role) and on what the database holds, so that [`crate::cache`] may keep it.
    pub fn cacheable(mut self) -> Reply {
        self.cacheable = true;
        self
    }

    /// A copy to keep in the cache: a whole answer, success, marked [`Reply::cacheable`];
    /// `None` for any other (a stream, an error, a 304, an answer not marked).
    pub fn to_keep(&self) -> Option<Reply> {
        let kept = self.cacheable
            && self.stream.is_none()
            && matches!(self.status, StatusCode::OK | StatusCode::PARTIAL_CONTENT);
        kept.then(|| Reply {
            status: self.status,
            content_type: self.content_type.clone(),
            body: self.body.clone(),
            stream: None,
            headers: self.headers.clone(),
            applied: self.applied.clone(),
            cacheable: true,
        })
    }

    /// The answer with its body in a buffer of its own exact size (a body encoded into a
    /// growing buffer may hold twice its length): what the cache keeps.
    pub fn compacted(mut self) -> Reply {
        self.body = Bytes::copy_from_slice(&self.body);
        self
    }

    /// The memory a kept copy holds, about.
    pub fn kept_bytes(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.as_str().len() + v.len() + 48)
            .sum();
        let applied: usize = self.applied.iter().map(|a| a.len() + 24).sum();
        std::mem::size_of::<Reply>() + self.body.len() + headers + applied
    }

    /// The first value of a header it carries, if any (`ETag`, `Cache-Control`).
    pub fn header_value(&self, name: &HeaderName) -> Option<&HeaderValue> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, value)| value)
    }

    /// The HTTP response; `head` drops the body (HEAD requests).
    pub fn into_response(self, head: bool) -> Response {
        let body = match self.stream {
            Some(chunks) if !head => Body::Right(Streamed(chunks)),
            _ if head => Body::Left(Full::new(Bytes::new())),
            _ => Body::Left(Full::new(self.body)),
        };
        let mut response = http::Response::new(body);
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        if let Some(ct) = self.content_type {
            headers.insert(header::CONTENT_TYPE, ct);
        }
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        let applied = in_postgrest_order(self.applied);
        if !applied.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&applied.join(", ")) {
                headers.insert(HeaderName::from_static("preference-applied"), v);
            }
        }
        response
    }
}

/// Honoured preferences as PostgREST's `Preference-Applied` lists them: resolution, missing,
/// return, count, tx, handling, timezone, then max-affected (only under `handling=strict`),
/// each once; others (`params=…`) after them.
fn in_postgrest_order(mut applied: Vec<String>) -> Vec<String> {
    const ORDER: [&str; 8] = [
        "resolution=",
        "missing=",
        "return=",
        "count=",
        "tx=",
        "handling=",
        "timezone=",
        "max-affected=",
    ];
    let strict = applied.iter().any(|p| p == "handling=strict");
    applied.retain(|p| strict || !p.starts_with("max-affected="));
    let rank = |p: &String| {
        ORDER
            .iter()
            .position(|prefix| p.starts_with(prefix))
            .unwrap_or(ORDER.len())
    };
    applied.sort_by_key(rank);
    applied.dedup();
    applied
}

/// `WWW-Authenticate` of a 401 on the API: why the bearer token was refused, or that one is
/// needed.
pub fn bearer_challenge(invalid_token: bool) -> HeaderValue {
    if invalid_token {
        HeaderValue::from_static("Bearer error=\"invalid_token\"")
    } else {
        HeaderValue::from_static("Bearer")
    }
}

/// An error as an HTTP response (`verbose`: with its details and hint).
pub fn error_response(err: &ApiError, head: bool, verbose: bool) -> Response {
    let body = if head {
        Bytes::new()
    } else {
        err.body_of(verbose)
    };
    let mut response = http::Response::new(Body::Left(Full::new(body)));
    *response.status_mut() = err.status();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, ApiError::content_type());
    // the error's code for whatever sits in front (RFC 9209's header, as PostgREST sends it)
    if let Ok(status) = HeaderValue::from_str(&format!("Rowgate; error={}", err.code_text())) {
        response
            .headers_mut()
            .insert(HeaderName::from_static("proxy-status"), status);
    }
    if err.status() == StatusCode::UNAUTHORIZED {
        let invalid = matches!(
            err.code,
            ErrorCode::InvalidToken | ErrorCode::TokenClaimsRefused
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, bearer_challenge(invalid));
    }
    if matches!(
        err.code,
        ErrorCode::RequestTimeout | ErrorCode::NotImplemented | ErrorCode::BadRequest
    ) {
        // the request's framing is in doubt (or the rest of its body may never come): the
        // connection cannot be reused
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    if let Some(allow) = err
        .allow
        .as_deref()
        .and_then(|a| HeaderValue::from_str(a).ok())
    {
        response.headers_mut().insert(header::ALLOW, allow);
    }
    if err.status() == StatusCode::SERVICE_UNAVAILABLE {
        // The database is busy, restarting or out of connections: worth a retry shortly.
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    if let Some(More::Raised(chosen)) = err.more.as_deref() {
        for (name, value) in &chosen.headers {
            response.headers_mut().insert(name.clone(), value.clone());
        }
        if let Some(reason) = chosen
            .reason
            .as_deref()
            .and_then(|r| hyper::ext::ReasonPhrase::try_from(r.as_bytes().to_vec()).ok())
        {
            response.extensions_mut().insert(reason);
        }
    }
    response
}

/// How a request's outcome becomes its answer: what the plan stage knows that the outcome
/// does not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Rows of a read; an item (404 when there is none) or a singular object is one row with
    /// an `ETag`.
    Read {
        /// A duality view's documents: the fields left out of their etags (each document gets
        /// `_metadata.etag`; an item's `ETag` is its etag).
        documents: Option<Vec<Vec<String>>>,
        /// Whether the URL names an item.
        item: bool,
        /// The table's name (for the 404 of a missing item).
        table: String,
        /// The page's first row.
        offset: u64,
    },
    /// 201, with a representation or a `Location` built from the returned key.
    Insert {
        /// `/{prefix}/{table}?`, to which the key filters are appended.
        location: String,
        /// The primary-key columns.
        key: Vec<String>,
        /// For `resolution=merge-duplicates`, how many rows the body held: when all of them
        /// existed (counted by the job), nothing was created and the answer is 200.
        merged: Option<u64>,
    },
    /// PATCH or DELETE: 200 with the rows, or 204.
    Modify,
    /// A duality view document written: the document read back (201 with its `Location`
    /// when created, else 200), with `_metadata` and its `ETag`; 204 when deleted.
    Document {
        /// Whether a POST created it.
        created: bool,
        /// `/{prefix}/{view}/`, to which the `_id` is appended.
        location: String,
        /// The fields left out of the etag; `None` for a DELETE (nothing is answered).
        nocheck: Option<Vec<Vec<String>>>,
    },
    /// PUT: 200 with the row (an object for an item URL), or 204.
    Upsert {
        /// Whether the URL names an item.
        item: bool,
    },
    /// A read's execution plan (`application/vnd.pgrst.plan`), as the database gave it.
    Plan {
        /// Its `Content-Type` (`application/vnd.pgrst.plan+json; for="…"; charset=utf-8`).
        content_type: String,
    },
    /// A media type handler's value (its aggregate over a read's rows), raw, of its media type.
    Handled {
        /// The media type.
        media: String,
        /// The value is bytes (`bytea`'s hex), else text.
        bytes: bool,
    },
}

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
                return Ok(tagged_as(request.headers, tag, body, |body| {
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

/// A representation with a strong `ETag`, or 304 Not Modified when `If-None-Match` names it
/// (tables and custom resources alike).
pub fn tagged(headers: &http::HeaderMap, body: Bytes, reply: impl FnOnce(Bytes) -> Reply) -> Reply {
    let tag = etag(&body);
    tagged_as(headers, tag, body, reply)
}

/// As [`tagged`], with the representation's `ETag` given (a duality view document's etag).
pub fn tagged_as(
    headers: &http::HeaderMap,
    tag: String,
    body: Bytes,
    reply: impl FnOnce(Bytes) -> Reply,
) -> Reply {
    if super::request::if_none_match(headers, &tag) {
        return Reply::not_modified(tag);
    }
    reply(body).header(header::ETAG, tag)
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

/// Hex digits as bytes (`None` unless every pair is hex).
fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preferences_applied_in_postgrest_order() {
        let applied = |prefs: &[&str]| {
            in_postgrest_order(prefs.iter().map(|p| p.to_string()).collect()).join(", ")
        };
        assert_eq!(
            applied(&["return=representation", "resolution=ignore-duplicates"]),
            "resolution=ignore-duplicates, return=representation"
        );
        assert_eq!(
            applied(&[
                "max-affected=1",
                "count=exact",
                "handling=strict",
                "return=minimal"
            ]),
            "return=minimal, count=exact, handling=strict, max-affected=1"
        );
        assert_eq!(applied(&["max-affected=1", "count=exact"]), "count=exact");
    }

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
