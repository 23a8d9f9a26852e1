//! Errors a function raises on purpose to choose its answer, as PostgREST reads them:
//!
//! - `RAISE SQLSTATE 'PT402'` answers status 402 (the three characters after `PT`), with the
//!   message as the reason phrase and the error's message, detail and hint as the body;
//!   a `PT` code whose rest is not a status answers 500, keeping the code.
//! - `RAISE SQLSTATE 'PGRST' USING MESSAGE = '{"code": …, "message": …, "details": …,
//!   "hint": …}', DETAIL = '{"status": 332, "status_text": …, "headers": {…}}'` chooses the
//!   whole answer: the body from MESSAGE, the status, reason phrase and headers from DETAIL;
//!   500 `PGRST121` when either is not of that shape.
//!
//! Unlike the database's own server errors, whose text goes to the log, these texts are the
//! function author's words for the client, so they are answered as raised.

use http::{HeaderName, HeaderValue, StatusCode};
use serde::Deserialize;

use super::{ApiError, ErrorCode, More};

/// What a raised error asks of the answer beyond its body: a `PT` code's status and reason
/// phrase, a `PGRST` error's headers too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The status.
    pub status: StatusCode,
    /// The reason phrase, when one was given that HTTP/1.1 can carry.
    pub reason: Option<String>,
    /// Headers added to the answer.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

/// MESSAGE of a `PGRST` error.
#[derive(Deserialize)]
struct Message {
    code: String,
    message: String,
    details: Option<String>,
    hint: Option<String>,
}

/// DETAIL of a `PGRST` error.
#[derive(Deserialize)]
struct Detail {
    status: u16,
    status_text: Option<String>,
    headers: serde_json::Map<String, serde_json::Value>,
}

/// The answer to an error the database raised with `sqlstate`, when the function chose it
/// (a `PT` or `PGRST` code); `None` for every other error.
pub fn answer(
    sqlstate: &str,
    message: &str,
    detail: Option<&str>,
    hint: Option<&str>,
) -> Option<ApiError> {
    if sqlstate == "PGRST" {
        return Some(pgrst(message, detail).unwrap_or_else(|e| e));
    }
    let status = sqlstate.strip_prefix("PT")?;
    let mut err = ApiError::new(ErrorCode::Database, message);
    err.sqlstate = Some(sqlstate.into());
    err.details = detail.map(str::to_string);
    err.hint = hint.map(str::to_string);
    let status = status
        .parse::<u16>()
        .ok()
        .and_then(final_status)
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    err.more = Some(Box::new(More::Raised(Answer {
        status,
        reason: reason(message),
        headers: Vec::new(),
    })));
    Some(err)
}

/// A status an error's answer may have: a final one (RFC 9110 §15: 1xx are interim) that
/// carries its body (not 204 or 304).
fn final_status(code: u16) -> Option<StatusCode> {
    ((200..=599).contains(&code) && code != 204 && code != 304)
        .then(|| StatusCode::from_u16(code).ok())
        .flatten()
}

/// Whether a header a database function sets is the connection's or the body's framing,
/// which are the server's to set (RFC 9110 §7.6.1's hop-by-hop fields, and the length).
pub fn is_framing(name: &HeaderName) -> bool {
    use http::header;
    [
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::CONNECTION,
        header::TE,
        header::UPGRADE,
        header::TRAILER,
        HeaderName::from_static("keep-alive"),
        HeaderName::from_static("proxy-connection"),
    ]
    .contains(name)
}

/// `text` as a reason phrase, when it is one (visible ASCII, spaces and tabs).
fn reason(text: &str) -> Option<String> {
    (!text.is_empty()
        && text
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b)))
    .then(|| text.to_string())
}

/// A `PGRST` error's answer, or the `PGRST121` that says why it has none.
fn pgrst(message: &str, detail: Option<&str>) -> Result<ApiError, ApiError> {
    const MESSAGE_HINT: &str = "MESSAGE must be a JSON object with obligatory keys: 'code', 'message' and optional keys: 'details', 'hint'.";
    const DETAIL_HINT: &str = "DETAIL must be a JSON object with obligatory keys: 'status', 'headers' and optional key: 'status_text'.";
    let unparsable = |details: String, hint: &str| {
        ApiError::new(
            ErrorCode::RaiseInvalid,
            "Could not parse JSON in the \"RAISE SQLSTATE 'PGRST'\" error",
        )
        .details(details)
        .hint(hint)
    };
    let body: Message = serde_json::from_str(message).map_err(|_| {
        unparsable(
            format!("Invalid JSON value for MESSAGE: '{message}'"),
            MESSAGE_HINT,
        )
    })?;
    let detail = detail.ok_or_else(|| {
        unparsable(
            "DETAIL is missing in the RAISE statement".to_string(),
            DETAIL_HINT,
        )
    })?;
    let invalid_detail = || {
        unparsable(
            format!("Invalid JSON value for DETAIL: '{detail}'"),
            DETAIL_HINT,
        )
    };
    let answer: Detail = serde_json::from_str(detail).map_err(|_| invalid_detail())?;
    let status = final_status(answer.status).ok_or_else(invalid_detail)?;
    let mut headers = Vec::with_capacity(answer.headers.len());
    for (name, value) in answer.headers {
        let serde_json::Value::String(value) = value else {
            return Err(invalid_detail());
        };
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) else {
            return Err(invalid_detail());
        };
        if is_framing(&name) {
            continue;
        }
        headers.push((name, value));
    }
    let mut err = ApiError::new(ErrorCode::Database, body.message);
    err.sqlstate = Some(body.code.into());
    err.details = body.details;
    err.hint = body.hint;
    err.more = Some(Box::new(More::Raised(Answer {
        status,
        reason: answer.status_text.as_deref().and_then(reason),
        headers,
    })));
    Ok(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pt_codes_answer_their_status_or_500() {
        let err = answer("PT402", "Payment Required", Some("Quota"), None).expect("raised");
        assert_eq!(err.status().as_u16(), 402);
        assert_eq!(err.code_text(), "PT402");
        assert_eq!(err.details.as_deref(), Some("Quota"));
        for code in ["PT40A", "PT100", "PT204", "PT304", "PT600", "PT"] {
            let err = answer(code, "Wrong", None, None).expect("raised");
            assert_eq!(err.status().as_u16(), 500, "{code}");
            assert_eq!(err.message, "Wrong");
        }
        assert!(answer("P0001", "plain", None, None).is_none());
    }

    #[test]
    fn pgrst_chooses_the_answer_or_says_why_not() {
        let err = answer(
            "PGRST",
            r#"{"code":"123","message":"ABC","details":"DEF"}"#,
            Some(r#"{"status":332,"status_text":"Mine","headers":{"X-Header":"str"}}"#),
            None,
        )
        .expect("raised");
        assert_eq!(err.status().as_u16(), 332);
        assert_eq!(err.code_text(), "123");
        assert_eq!(err.details.as_deref(), Some("DEF"));
        for (message, detail, words) in [
            (
                "INVALID",
                Some("{}"),
                "Invalid JSON value for MESSAGE: 'INVALID'",
            ),
            (r#"{"code":"1","message":"m"}"#, None, "DETAIL is missing"),
            (r#"{"code":"1","message":"m"}"#, Some("x"), "DETAIL: 'x'"),
            (
                r#"{"code":"1","message":"m"}"#,
                Some(r#"{"status":99,"headers":{}}"#),
                "DETAIL",
            ),
        ] {
            let err = answer("PGRST", message, detail, None).expect("raised");
            assert_eq!(err.code_text(), "PGRST121");
            assert_eq!(err.status().as_u16(), 500);
            assert!(
                err.details.as_deref().unwrap_or("").contains(words),
                "{err:?}"
            );
        }
    }
}
