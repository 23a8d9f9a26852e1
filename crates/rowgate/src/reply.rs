//! An answer on its way out: [`Reply`] (status, headers, body or stream, the preferences
//! applied, whether it may be kept), turned into an HTTP response; an error's envelope
//! (`{code, message, details, hint}` with `Proxy-Status` and `WWW-Authenticate`); entity tags
//! and `If-None-Match`. Every front end answers with it.

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use http_body_util::Full;

use crate::engine::request::{ApiRequest, MediaType};
use crate::error::{ApiError, ErrorCode, More};
use crate::job::etag;

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
    /// The status.
    pub status: StatusCode,
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

/// A representation with a strong `ETag`, or 304 Not Modified when `If-None-Match` names it
/// (tables and custom resources alike).
pub fn tagged(headers: &http::HeaderMap, body: Bytes, reply: impl FnOnce(Bytes) -> Reply) -> Reply {
    let tag = etag(&body);
    tagged_as(&|tag| if_none_match(headers, tag), tag, body, reply)
}

/// As [`tagged`], with the representation's `ETag` given (a duality view document's etag).
pub fn tagged_as(
    none_match: &dyn Fn(&str) -> bool,
    tag: String,
    body: Bytes,
    reply: impl FnOnce(Bytes) -> Reply,
) -> Reply {
    if none_match(&tag) {
        return Reply::not_modified(tag);
    }
    reply(body).header(header::ETAG, tag)
}

/// Whether `If-None-Match` names `tag` (or `*`).
pub fn if_none_match(headers: &HeaderMap, tag: &str) -> bool {
    crate::engine::request::names_tag(
        headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok()),
        tag,
    )
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
}
