//! The console's Users page API under `/_/api/users` (with `[accounts]` on): people's
//! accounts listed newest first and searched by email, added (confirmed at once), banned (until
//! lifted: every session ends), their ban lifted, signed out everywhere, and their sessions
//! listed (when, from where, with what) and ended one by one. The same
//! operations as `/auth/v1/admin/users` ([`crate::accounts::admin`]), for the console's roles.

use http::StatusCode;
use serde::Deserialize;
use serde_json::json;

use crate::accounts::admin;
use crate::accounts::error::{json_reply, AuthError};
use crate::accounts::store::Scope;
use crate::accounts::Accounts;
use crate::app::App;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;

/// Accounts a page of the console shows.
const PER_PAGE: u64 = 50;

/// A ban from the console lasts until it is lifted (GoTrue's "forever", 100 years).
const BAN: std::time::Duration = std::time::Duration::from_secs(876_000 * 3600);

/// The accounts, or 404 when they are off.
fn accounts(app: &App) -> Result<&Accounts, ApiError> {
    app.accounts.as_deref().ok_or_else(|| {
        ApiError::new(
            ErrorCode::NotFound,
            "people's accounts are off (accounts.enabled)",
        )
    })
}

/// A refusal of the accounts, as the console's answers say it.
fn refused(e: AuthError) -> ApiError {
    let code = match (e.status, e.code) {
        (StatusCode::NOT_FOUND, _) => ErrorCode::NotFound,
        (_, "email_exists") => ErrorCode::UniqueViolation,
        (status, _) if status.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::ConsoleRequestInvalid,
    };
    ApiError::new(code, e.message)
}

/// `GET /_/api/users?filter=&page=`: `{users, total, per_page}`.
pub async fn list(app: &App, query: &str) -> Result<Reply, ApiError> {
    let accounts = accounts(app)?;
    let param = |name: &str| {
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    };
    let page = param("page")
        .and_then(|p| p.parse::<u64>().ok())
        .filter(|p| *p > 0)
        .unwrap_or(1);
    let filter = param("filter").filter(|f| !f.trim().is_empty());
    let (users, total) = admin::page_of(accounts, &app.db, filter.as_deref(), page, PER_PAGE)
        .await
        .map_err(refused)?;
    Ok(json_reply(
        StatusCode::OK,
        &json!({"users": users, "total": total, "per_page": PER_PAGE}),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewAccount {
    email: String,
    password: String,
}

/// `POST /_/api/users` `{email, password}`: a confirmed account.
pub async fn add(app: &App, body: &[u8]) -> Result<Reply, ApiError> {
    let accounts = accounts(app)?;
    let new: NewAccount = serde_json::from_slice(body).map_err(|e| {
        ApiError::new(
            ErrorCode::ConsoleRequestInvalid,
            format!("the body must be {{\"email\", \"password\"}}: {e}"),
        )
    })?;
    let row = admin::add_confirmed(accounts, &app.db, &new.email, &new.password)
        .await
        .map_err(refused)?;
    Ok(json_reply(
        StatusCode::CREATED,
        &crate::accounts::session::user_json(&row),
    ))
}

/// Account `id` checked to be a UUID (404 otherwise).
fn account_id(id: &str) -> Result<&str, ApiError> {
    if crate::accounts::is_uuid(id) {
        Ok(id)
    } else {
        Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no account {id:?}: an account's id is a UUID"),
        ))
    }
}

/// `GET /_/api/users/{id}/sessions`: the account's sessions, newest first.
pub async fn sessions(app: &App, id: &str) -> Result<Reply, ApiError> {
    let accounts = accounts(app)?;
    let sessions = accounts
        .store
        .sessions(&app.db, account_id(id)?)
        .await
        .map_err(|e| refused(AuthError::internal(&e)))?;
    Ok(json_reply(StatusCode::OK, &json!({"sessions": sessions})))
}

/// `DELETE /_/api/users/{id}/sessions/{session}`: ends one session (its refresh tokens
/// with it).
pub async fn end_session(app: &App, id: &str, session: &str) -> Result<Reply, ApiError> {
    let accounts = accounts(app)?;
    let session = account_id(session)?;
    accounts
        .store
        .end_sessions(&app.db, account_id(id)?, Scope::Local(session))
        .await
        .map_err(|e| refused(AuthError::internal(&e)))?;
    Ok(json_reply(
        StatusCode::OK,
        &json!({"id": id, "ended": session}),
    ))
}

/// `POST /_/api/users/{id}/{ban|unban|sign-out}`.
pub async fn act(app: &App, id: &str, action: &str) -> Result<Reply, ApiError> {
    let accounts = accounts(app)?;
    let id = account_id(id)?;
    match action {
        "ban" => admin::ban(accounts, &app.db, id, Some(BAN)).await,
        "unban" => admin::ban(accounts, &app.db, id, None).await,
        "sign-out" => accounts
            .store
            .end_sessions(&app.db, id, Scope::Global)
            .await
            .map_err(|e| AuthError::internal(&e)),
        other => {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                format!("no such action on an account: {other:?}"),
            )
            .hint("ban, unban or sign-out"))
        }
    }
    .map_err(refused)?;
    Ok(json_reply(
        StatusCode::OK,
        &json!({"id": id, "done": action}),
    ))
}
