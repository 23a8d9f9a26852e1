//! The console's files, compiled into the binary (nothing is read from disk or fetched at run
//! time): `/_/` is the page, `/_/assets/NAME` its script, style sheet and vendored library.
//! Each answer has a strong `ETag` (304 when `If-None-Match` names it) and `no-cache`, so a
//! browser revalidates and a new binary's files are never mixed with an old one's; and
//! headers that keep the page to its own origin (a content security policy without inline
//! scripts, no framing).

use std::sync::OnceLock;

use bytes::Bytes;
use http::{header, HeaderName, Method, StatusCode};

use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;

/// One embedded file.
struct Asset {
    path: &'static str,
    content_type: &'static str,
    bytes: &'static [u8],
}

/// The files, by the path they are served at.
const ASSETS: &[Asset] = &[
    Asset {
        path: "/_/",
        content_type: "text/html; charset=utf-8",
        bytes: include_bytes!("../../console/index.html"),
    },
    Asset {
        path: "/_/assets/console.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/console.js"),
    },
    Asset {
        path: "/_/assets/console.css",
        content_type: "text/css; charset=utf-8",
        bytes: include_bytes!("../../console/console.css"),
    },
    Asset {
        path: "/_/assets/htm-preact-3.1.1.js",
        content_type: "text/javascript; charset=utf-8",
        bytes: include_bytes!("../../console/vendor/htm-preact-3.1.1.js"),
    },
    Asset {
        path: "/_/assets/favicon.svg",
        content_type: "image/svg+xml",
        bytes: include_bytes!("../../console/favicon.svg"),
    },
];

/// What the page may load and call: its own origin only.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; \
     form-action 'none'";

/// Each asset's `ETag`, computed once.
fn tags() -> &'static [String] {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    TAGS.get_or_init(|| ASSETS.iter().map(|a| crate::job::etag(a.bytes)).collect())
}

/// The answer to a request for one of the console's files (`/_` redirects to `/_/`).
pub fn serve(parts: &http::request::Parts) -> Result<Reply, ApiError> {
    let path = parts.uri.path();
    if path == "/_" {
        return Ok(Reply::empty(StatusCode::PERMANENT_REDIRECT).header(header::LOCATION, "/_/"));
    }
    let Some(index) = ASSETS.iter().position(|a| a.path == path) else {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no such console page: {path}"),
        ));
    };
    if !(parts.method == Method::GET || parts.method == Method::HEAD) {
        return Err(ApiError::method_not_allowed(
            &parts.method,
            &["GET", "HEAD"],
        ));
    }
    let asset = &ASSETS[index];
    let tag = tags()[index].clone();
    let reply = if crate::reply::if_none_match(&parts.headers, &tag) {
        Reply::not_modified(tag)
    } else {
        Reply::raw(
            StatusCode::OK,
            asset.content_type,
            Bytes::from_static(asset.bytes),
        )
        .header(header::ETAG, tag)
    };
    Ok(reply
        .header(header::CACHE_CONTROL, "no-cache")
        .header(header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::X_FRAME_OPTIONS, "DENY")
        .header(header::REFERRER_POLICY, "no-referrer")
        .header(
            HeaderName::from_static("cross-origin-opener-policy"),
            "same-origin",
        ))
}
