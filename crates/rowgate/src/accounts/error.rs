//! Supabase Auth's errors: a status, an `error_code` and a message, in the envelope the client
//! asks for. A client that sends `X-Supabase-Api-Version: 2024-01-01` or later (supabase-js
//! always does) gets `{"code": "<error_code>", "message": …}` and the header back (auth-js
//! reads the code only then); any other gets GoTrue's older `{"code": <status>, "error_code":
//! …, "msg": …}`. Both carry `x-sb-error-code`.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Value as Json};

use crate::reply::Reply;

/// The API version that brought the newer envelope.
const NEW_ENVELOPE: &str = "2024-01-01";

/// One refusal.
#[derive(Debug)]
pub struct AuthError {
    /// Its status.
    pub status: StatusCode,
    /// GoTrue's `error_code`.
    pub code: &'static str,
    /// What to tell the client.
    pub message: String,
    /// For `weak_password`: the reasons.
    pub reasons: Vec<&'static str>,
}

impl AuthError {
    /// A refusal of `status` with GoTrue's `code`.
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> AuthError {
        AuthError {
            status,
            code,
            message: message.into(),
            reasons: Vec::new(),
        }
    }

    /// 400 `validation_failed`.
    pub fn validation(message: impl Into<String>) -> AuthError {
        AuthError::new(StatusCode::BAD_REQUEST, "validation_failed", message)
    }

    /// 400 `invalid_credentials`: the same for an unknown email and a wrong password.
    pub fn invalid_credentials() -> AuthError {
        AuthError::new(
            StatusCode::BAD_REQUEST,
            "invalid_credentials",
            "Invalid login credentials",
        )
    }

    /// 422 `weak_password` with its reasons.
    pub fn weak_password(reasons: Vec<&'static str>, message: String) -> AuthError {
        AuthError {
            reasons,
            ..AuthError::new(StatusCode::UNPROCESSABLE_ENTITY, "weak_password", message)
        }
    }

    /// 429 `over_request_rate_limit`.
    pub fn rate_limited() -> AuthError {
        AuthError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "over_request_rate_limit",
            "Request rate limit reached",
        )
    }

    /// 500, with `e` in the log only.
    pub fn internal(e: &anyhow::Error) -> AuthError {
        tracing::error!("accounts: {e:#}");
        AuthError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unexpected_failure",
            "Unexpected failure, please check server logs for more information",
        )
    }

    /// The answer, in the envelope `request` asks for.
    pub fn reply(self, request: &HeaderMap) -> Reply {
        let newer = request
            .get("x-supabase-api-version")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.len() == 10 && v >= NEW_ENVELOPE);
        let mut body = if newer {
            json!({"code": self.code, "message": self.message})
        } else {
            json!({"code": self.status.as_u16(), "error_code": self.code, "msg": self.message})
        };
        if !self.reasons.is_empty() {
            body["weak_password"] = json!({"reasons": self.reasons});
        }
        let reply = json_reply(self.status, &body)
            .header(http::HeaderName::from_static("x-sb-error-code"), self.code);
        if newer {
            reply.header(
                http::HeaderName::from_static("x-supabase-api-version"),
                NEW_ENVELOPE,
            )
        } else {
            reply
        }
    }
}

/// `body` as a JSON answer of `status`, never cached.
pub fn json_reply(status: StatusCode, body: &Json) -> Reply {
    Reply::raw(status, "application/json", Bytes::from(body.to_string()))
        .header(http::header::CACHE_CONTROL, "no-store")
}
