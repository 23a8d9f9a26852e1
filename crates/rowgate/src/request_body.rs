//! How a request's body is read: [`RequestBody`], what it can be (hyper's `Incoming` from a
//! connection, or any other body of bytes: a test calling the app as a service, a second front
//! end), and [`read_body`], within `limits.body_bytes` (413) and `limits.body_read_timeout_ms`
//! (408), into one buffer made once.

use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Method};
use http_body_util::{BodyExt, Limited};

use crate::config::LimitsConfig;
use crate::error::{ApiError, ErrorCode};

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

/// The body's declared media type (`Content-Type`), if any.
pub fn content_type(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
}
