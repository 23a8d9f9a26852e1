//! `POST /oauth/token`: the OAuth 2.0 client-credentials grant (RFC 6749 §4.4). The client
//! authenticates with HTTP Basic or with `client_id`/`client_secret` form fields (not both);
//! errors are RFC 6749 §5.2 JSON (`invalid_request`, `invalid_client` 401,
//! `unsupported_grant_type`, …). Failed attempts are counted per client and per address; past
//! `auth.max_failures_per_minute` the answer is 429 with `Retry-After`.

use std::net::IpAddr;

use base64::Engine as _;
use bytes::Bytes;
use http::{header, request::Parts, Method, StatusCode};
use serde_json::json;

use std::collections::HashMap;

use crate::auth::clients::Client;
use crate::auth::{address_key, Auth};
use crate::db::Database;
use crate::reply::Reply;

/// One OAuth error answer.
fn oauth_error(status: StatusCode, error: &str, description: &str) -> Reply {
    let body = json!({"error": error, "error_description": description}).to_string();
    Reply::raw(status, "application/json", Bytes::from(body))
        .header(header::CACHE_CONTROL, "no-store")
}

/// Answers a token request from `client` (its address, as [`crate::proxies`] tells it: failed
/// requests are counted per client and per address).
pub async fn handle(
    auth: &Auth,
    db: &Database,
    parts: &Parts,
    body: &[u8],
    client: IpAddr,
) -> Reply {
    if parts.method != Method::POST {
        return oauth_error(
            StatusCode::METHOD_NOT_ALLOWED,
            "invalid_request",
            "token requests are POST",
        )
        .header(header::ALLOW, "POST");
    }
    let form_type = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|t| {
            t.trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        });
    if !form_type {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the body must be application/x-www-form-urlencoded",
        );
    }
    let mut grant_type = None;
    let (mut form_id, mut form_secret, mut scope) = (None, None, None);
    for (key, value) in form_urlencoded::parse(body) {
        let slot = match key.as_ref() {
            "grant_type" => &mut grant_type,
            "client_id" => &mut form_id,
            "client_secret" => &mut form_secret,
            "scope" => &mut scope,
            _ => continue,
        };
        if slot.is_some() {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                &format!("{key} is given twice"),
            );
        }
        *slot = Some(value.into_owned());
    }
    let basic = match basic_credentials(parts) {
        Ok(b) => b,
        Err(why) => return invalid_client(true, why),
    };
    let used_basic = basic.is_some();
    let (client_id, secret) = match (basic, form_id, form_secret) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "authenticate the client one way: HTTP Basic or form fields, not both",
            )
        }
        (Some((id, secret)), None, None) => (id, secret),
        (None, Some(id), Some(secret)) => (id, secret),
        (None, _, _) => return invalid_client(false, "no client credentials"),
    };
    match grant_type.as_deref() {
        None => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "grant_type is missing",
            )
        }
        Some("client_credentials") => {}
        Some(_) => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                "only grant_type=client_credentials is supported",
            )
        }
    }
    let keys = [format!("client:{client_id}"), address_key(client)];
    if let Some(wait) = keys.iter().find_map(|k| auth.failures.blocked(k)) {
        return oauth_error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_attempts",
            "too many failed token requests; wait before trying again",
        )
        .header(header::RETRY_AFTER, (wait.as_secs() + 1).to_string());
    }
    let accept = |clients: &HashMap<String, Client>| {
        clients.get(&client_id).and_then(|client| {
            let generation = client.secret_generation(&auth.secrets.pepper, &secret)?;
            (!client.revoked).then(|| (client.clone(), generation))
        })
    };
    let mut accepted = accept(&auth.clients.load());
    if accepted.is_none() {
        // A client added or rotated a moment ago may not be in memory yet: look again once.
        if let Err(e) = auth.refresh_clients(db).await {
            tracing::warn!("cannot re-read the clients: {e:#}");
        }
        accepted = accept(&auth.clients.load());
    }
    let Some((client, generation)) = accepted else {
        for k in &keys {
            auth.failures.fail(k);
        }
        return invalid_client(used_basic, "unknown client, wrong secret or revoked client");
    };
    let ttl = u64::try_from(client.ttl_s)
        .unwrap_or(0)
        .clamp(1, auth.config.max_token_ttl_s.max(1));
    let token = match auth.tokens.issue(&client, generation, ttl, scope.clone()) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!("cannot sign a token: {e:#}");
            return oauth_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "the token could not be signed",
            );
        }
    };
    let mut answer = json!({"access_token": token, "token_type": "bearer", "expires_in": ttl});
    if let Some(scope) = scope {
        answer["scope"] = json!(scope);
    }
    Reply::raw(
        StatusCode::OK,
        "application/json",
        Bytes::from(answer.to_string()),
    )
    .header(header::CACHE_CONTROL, "no-store")
    .header(header::PRAGMA, "no-cache")
}

/// `invalid_client` (401); with `WWW-Authenticate` when the client tried HTTP Basic.
fn invalid_client(used_basic: bool, description: &str) -> Reply {
    let reply = oauth_error(StatusCode::UNAUTHORIZED, "invalid_client", description);
    if used_basic {
        reply.header(header::WWW_AUTHENTICATE, "Basic realm=\"rowgate\"")
    } else {
        reply
    }
}

/// `Authorization: Basic base64(id:secret)` (each part form-urlencoded, RFC 6749 §2.3.1).
fn basic_credentials(parts: &Parts) -> Result<Option<(String, String)>, &'static str> {
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value
        .to_str()
        .map_err(|_| "the Authorization header is not text")?;
    let Some((scheme, encoded)) = text.split_once(' ') else {
        return Err("the Authorization header must be Basic");
    };
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err("the Authorization header must be Basic");
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .map_err(|_| "the Basic credentials are not base64")?;
    let decoded = String::from_utf8(decoded).map_err(|_| "the Basic credentials are not UTF-8")?;
    let (id, secret) = decoded
        .split_once(':')
        .ok_or("the Basic credentials have no ':'")?;
    let unescape = |s: &str| -> String {
        form_urlencoded::parse(format!("x={s}").as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    Ok(Some((unescape(id), unescape(secret))))
}
