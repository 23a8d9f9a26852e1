//! Stage 5, respond: status, headers (`Content-Range`, `ETag`, `Preference-Applied`) and body of
//! an answer, turned into an HTTP response. Errors become `{code, message, details, hint}`.

use bytes::Bytes;
use http::{header, HeaderName, HeaderValue, StatusCode};
use http_body_util::Full;

use super::request::MediaType;
use crate::error::{ApiError, ErrorCode};
pub use crate::job::etag;

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
        if !self.applied.is_empty() {
            if let Ok(v) = HeaderValue::from_str(&self.applied.join(", ")) {
                headers.insert(HeaderName::from_static("preference-applied"), v);
            }
        }
        response
    }
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

/// An error as an HTTP response.
pub fn error_response(err: &ApiError, head: bool) -> Response {
    let body = if head { Bytes::new() } else { err.body() };
    let mut response = http::Response::new(Body::Left(Full::new(body)));
    *response.status_mut() = err.status();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, ApiError::content_type());
    if err.status() == StatusCode::UNAUTHORIZED {
        let invalid = err.code == ErrorCode::InvalidToken;
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
    if err.status() == StatusCode::SERVICE_UNAVAILABLE {
        // The database is busy, restarting or out of connections: worth a retry shortly.
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    }
    response
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
}
