//! Cross-origin requests from browsers (CORS), for every route: the API, the token endpoint,
//! custom resources, ORDS, realtime's SSE.
//!
//! `cors.origins` lists the origins allowed; `["*"]`, the default, allows any, as PostgREST
//! does when `server-cors-allowed-origins` is unset. A preflight (`OPTIONS` with `Origin` and
//! `Access-Control-Request-Method`) is answered here, before routing: 204 with the allowed
//! methods, the headers the browser asked for, and `Access-Control-Max-Age`; from an origin not
//! allowed, 403. Every other answer to an allowed origin carries `Access-Control-Allow-Origin`
//! and `Access-Control-Expose-Headers` (`Content-Range`, `Location`, `ETag`,
//! `Preference-Applied`, …), so that scripts can read them. With `cors.allow_credentials` the
//! origin is echoed (never `*`, which browsers refuse with credentials) with
//! `Access-Control-Allow-Credentials: true` and `Vary: Origin`.

use http::{header, HeaderMap, HeaderValue, Method, StatusCode};

use crate::config::CorsConfig;
use crate::error::{ApiError, ErrorCode};

/// The methods a preflight allows.
const METHODS: &str = "GET, HEAD, POST, PATCH, PUT, DELETE, OPTIONS";

/// The request headers a preflight allows when the browser names none.
const REQUEST_HEADERS: &str = "Authorization, Content-Type, Accept, Accept-Profile, Content-Profile, Prefer, Range, If-Match, If-None-Match, apikey, x-client-info";

/// The answer headers scripts may read.
const EXPOSED: &str = "Content-Encoding, Content-Location, Content-Range, Content-Type, Date, ETag, Location, Preference-Applied, Range-Unit, Retry-After, Rowgate-Position, Server-Timing";

/// The compiled CORS policy.
#[derive(Debug, Clone)]
pub struct Cors {
    any: bool,
    origins: Vec<String>,
    credentials: bool,
    max_age: HeaderValue,
}

/// What a request's CORS headers ask of the answer.
pub enum Verdict {
    /// Not a cross-origin request, or CORS is off: nothing to add.
    None,
    /// A preflight, answered here.
    Preflight(http::Response<()>),
    /// A preflight from an origin not allowed.
    Refused(ApiError),
    /// An allowed origin: these headers go on the answer.
    Allowed(HeaderValue),
}

impl Cors {
    /// The policy of `[cors]`.
    pub fn new(config: &CorsConfig) -> Cors {
        Cors {
            any: config.origins.iter().any(|o| o == "*"),
            origins: config
                .origins
                .iter()
                .map(|o| o.trim_end_matches('/').to_ascii_lowercase())
                .collect(),
            credentials: config.allow_credentials,
            max_age: HeaderValue::from(config.max_age_s),
        }
    }

    /// What the request with `method` and `headers` asks.
    pub fn verdict(&self, method: &Method, headers: &HeaderMap) -> Verdict {
        let Some(origin) = headers.get(header::ORIGIN) else {
            return Verdict::None;
        };
        if self.origins.is_empty() {
            return Verdict::None;
        }
        let allowed = self.any
            || origin
                .to_str()
                .is_ok_and(|o| self.origins.iter().any(|a| a.eq_ignore_ascii_case(o)));
        let preflight = *method == Method::OPTIONS
            && headers.contains_key(header::ACCESS_CONTROL_REQUEST_METHOD);
        match (preflight, allowed) {
            (true, false) => Verdict::Refused(
                ApiError::new(
                    ErrorCode::PermissionDenied,
                    "this origin may not call the API from a browser",
                )
                .hint("list it in cors.origins"),
            ),
            (false, false) => Verdict::None,
            (true, true) => {
                let mut answer = http::Response::new(());
                *answer.status_mut() = StatusCode::NO_CONTENT;
                let h = answer.headers_mut();
                self.allow(origin, h);
                h.insert(
                    header::ACCESS_CONTROL_ALLOW_METHODS,
                    HeaderValue::from_static(METHODS),
                );
                let asked = headers
                    .get(header::ACCESS_CONTROL_REQUEST_HEADERS)
                    .cloned()
                    .unwrap_or(HeaderValue::from_static(REQUEST_HEADERS));
                h.insert(header::ACCESS_CONTROL_ALLOW_HEADERS, asked);
                h.insert(header::ACCESS_CONTROL_MAX_AGE, self.max_age.clone());
                Verdict::Preflight(answer)
            }
            (false, true) => Verdict::Allowed(origin.clone()),
        }
    }

    /// Adds the headers of an allowed origin's answer.
    pub fn decorate(&self, origin: &HeaderValue, headers: &mut HeaderMap) {
        self.allow(origin, headers);
        headers.insert(
            header::ACCESS_CONTROL_EXPOSE_HEADERS,
            HeaderValue::from_static(EXPOSED),
        );
    }

    /// `Access-Control-Allow-Origin` (and the credentials headers).
    fn allow(&self, origin: &HeaderValue, headers: &mut HeaderMap) {
        if self.any && !self.credentials {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
            return;
        }
        headers.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin.clone());
        headers.append(header::VARY, HeaderValue::from_static("Origin"));
        if self.credentials {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_CREDENTIALS,
                HeaderValue::from_static("true"),
            );
        }
    }
}
