//! `/auth/v1/admin/users`: accounts managed by a token whose role is one of
//! `accounts.admin_roles` (Supabase's `service_role`): list (paged, newest first, `filter` on
//! the email; `X-Total-Count` and `Link` as GoTrue sends them), create, read, change (email,
//! password, metadata, role, `ban_duration`), delete. A new password or a ban ends every
//! session of the account.

use std::time::Duration;

use http::StatusCode;
use serde_json::{json, Map, Value as Json};

use super::error::{json_reply, AuthError};
use super::store::{NewUser, Scope, UserChanges, UserRow};
use super::{
    acceptable_password, hashed, is_uuid, merged, metadata_of, new_uuid, now_text, session,
    text_of, valid_email, Accounts, Call,
};
use crate::db::Database;
use crate::reply::Reply;

/// The caller must hold an admin role.
fn admit(call: &Call<'_>) -> Result<(), AuthError> {
    let principal = call
        .server
        .auth
        .authenticate(&call.parts.headers)
        .map_err(|e| AuthError::new(StatusCode::FORBIDDEN, "bad_jwt", e.message))?;
    if principal.anonymous {
        return Err(AuthError::new(
            StatusCode::UNAUTHORIZED,
            "no_authorization",
            "This endpoint requires a valid Bearer token",
        ));
    }
    if !call.accounts.config.admin_roles.contains(&principal.role) {
        return Err(AuthError::new(
            StatusCode::FORBIDDEN,
            "not_admin",
            "User not allowed",
        ));
    }
    Ok(())
}

/// `GET /admin/users?page=&per_page=&filter=`.
pub async fn list(call: &Call<'_>) -> Result<Reply, AuthError> {
    admit(call)?;
    let number = |name: &str, default: u64| -> Result<u64, AuthError> {
        match call.query(name).filter(|v| !v.is_empty()) {
            None => Ok(default),
            Some(v) => v.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                AuthError::validation(format!(
                    "Bad Pagination Parameters: {name} must be a positive number"
                ))
            }),
        }
    };
    let page = number("page", 1)?;
    let per_page = number("per_page", 50)?.min(1000);
    let filter = call.query("filter").filter(|f| !f.is_empty());
    let accounts = call.accounts;
    let (users, total) = page_of(accounts, call.db(), filter.as_deref(), page, per_page).await?;
    let path = call.parts.uri.path();
    let last = total.div_ceil(per_page).max(1);
    let mut links = Vec::new();
    if page < last {
        links.push(format!(
            "<{path}?page={}&per_page={per_page}>; rel=\"next\"",
            page + 1
        ));
    }
    links.push(format!(
        "<{path}?page={last}&per_page={per_page}>; rel=\"last\""
    ));
    Ok(json_reply(
        StatusCode::OK,
        &json!({"users": users, "aud": accounts.config.audience}),
    )
    .header(
        http::HeaderName::from_static("x-total-count"),
        total.to_string(),
    )
    .header(http::header::LINK, links.join(", ")))
}

/// The account `id` (404 as GoTrue says it).
async fn account(call: &Call<'_>, id: &str) -> Result<UserRow, AuthError> {
    if !is_uuid(id) {
        return Err(AuthError::new(
            StatusCode::NOT_FOUND,
            "validation_failed",
            "user_id must be an UUID",
        ));
    }
    call.accounts
        .store
        .by_id(call.db(), id, None)
        .await
        .map_err(|e| AuthError::internal(&e))?
        .ok_or_else(|| AuthError::new(StatusCode::NOT_FOUND, "user_not_found", "User not found"))
}

/// Account `id`, for a caller holding an admin role.
pub(super) async fn admitted_account(call: &Call<'_>, id: &str) -> Result<UserRow, AuthError> {
    admit(call)?;
    account(call, id).await
}

/// A Go duration (`"24h"`, `"1h30m"`, `"90s"`, `"876000h"`), as `ban_duration` takes it.
fn go_duration(text: &str) -> Option<Duration> {
    let mut total = 0f64;
    let mut rest = text;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let number: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 0.001,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += number * seconds;
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total.min(1e12)))
}

/// The changes a body asks of an account (the fields of GoTrue's admin create and update).
async fn changes_of(
    call: &Call<'_>,
    body: &Map<String, Json>,
    current: Option<&UserRow>,
) -> Result<UserChanges, AuthError> {
    let accounts = call.accounts;
    let config = &accounts.config;
    let mut changes = UserChanges {
        confirm: body.get("email_confirm").and_then(Json::as_bool) == Some(true),
        role: text_of(body, "role")?.filter(|r| !r.is_empty()),
        ..UserChanges::default()
    };
    if let Some(email) = text_of(body, "email")? {
        changes.email = Some(valid_email(Some(email))?);
    }
    if let Some(password) = text_of(body, "password")?.filter(|p| !p.is_empty()) {
        acceptable_password(config, &password)?;
        changes.password_hash = Some(hashed(accounts, &password).await?);
    }
    let old = |text: Option<&String>| session::metadata(text.map(String::as_str));
    if let Some(meta) = metadata_of(config, body, "user_metadata")? {
        changes.user_metadata = Some(merged(
            old(current.and_then(|c| c.user_metadata.as_ref())),
            meta,
        ));
    }
    if let Some(meta) = metadata_of(config, body, "app_metadata")? {
        changes.app_metadata = Some(merged(
            old(current.and_then(|c| c.app_metadata.as_ref())),
            meta,
        ));
    }
    if let Some(ban) = text_of(body, "ban_duration")? {
        changes.banned_until = Some(match ban.as_str() {
            "none" => None,
            _ => {
                let length = go_duration(&ban).ok_or_else(|| {
                    AuthError::validation(format!("invalid format for ban duration: {ban:?}"))
                })?;
                Some(super::later_text(length))
            }
        });
    }
    Ok(changes)
}

/// `POST /admin/users`.
pub async fn create(call: &Call<'_>) -> Result<Json, AuthError> {
    admit(call)?;
    let accounts = call.accounts;
    let body = call.json()?;
    if text_of(&body, "email")?.is_none_or(|e| e.is_empty()) {
        return Err(AuthError::validation(
            "Cannot create a user without either an email or phone",
        ));
    }
    let changes = changes_of(call, &body, None).await?;
    let now = now_text();
    let row = add_account(accounts, call.db(), &changes, &now).await?;
    if changes.banned_until.is_some() {
        let ban = UserChanges {
            banned_until: changes.banned_until,
            ..UserChanges::default()
        };
        accounts
            .store
            .update(call.db(), &row.id, &ban, &now)
            .await
            .map_err(|e| AuthError::internal(&e))?;
        return get(call, &row.id).await;
    }
    Ok(session::user_json(&row))
}

/// Adds the account `changes` describe (an email at least; without a password, one nobody
/// knows, as GoTrue), as an admin does; 422 `email_exists` for a taken address.
pub async fn add_account(
    accounts: &Accounts,
    db: &Database,
    changes: &UserChanges,
    now: &str,
) -> Result<UserRow, AuthError> {
    let password_hash = match changes.password_hash.clone() {
        Some(hash) => hash,
        None => {
            let random =
                crate::auth::secret::random_string(48).map_err(|e| AuthError::internal(&e))?;
            hashed(accounts, &random).await?
        }
    };
    let mut app_metadata = json!({"provider": "email", "providers": ["email"]});
    if let Some(Json::Object(more)) = &changes.app_metadata {
        for (k, v) in more {
            app_metadata[k] = v.clone();
        }
    }
    let user = NewUser {
        id: new_uuid(),
        email: changes.email.clone().unwrap_or_default(),
        password_hash: Some(password_hash),
        confirmed: changes.confirm,
        aud: accounts.config.audience.clone(),
        role: changes
            .role
            .clone()
            .unwrap_or_else(|| accounts.config.role.clone()),
        user_metadata: changes.user_metadata.clone().unwrap_or_else(|| json!({})),
        app_metadata,
    };
    accounts
        .store
        .insert(db, &user, now)
        .await
        .map_err(|e| AuthError::internal(&e))?
        .ok_or_else(|| {
            AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "email_exists",
                "A user with this email address has already been registered",
            )
        })
}

/// An account of `email` with `password`, confirmed at once (the console's "add").
pub async fn add_confirmed(
    accounts: &Accounts,
    db: &Database,
    email: &str,
    password: &str,
) -> Result<UserRow, AuthError> {
    let email = valid_email(Some(email.to_string()))?;
    acceptable_password(&accounts.config, password)?;
    let changes = UserChanges {
        email: Some(email),
        password_hash: Some(hashed(accounts, password).await?),
        confirm: true,
        ..UserChanges::default()
    };
    add_account(accounts, db, &changes, &now_text()).await
}

/// A page of accounts (newest first; `filter`: those whose email contains it) as user
/// objects, and how many there are in all.
pub async fn page_of(
    accounts: &Accounts,
    db: &Database,
    filter: Option<&str>,
    page: u64,
    per_page: u64,
) -> Result<(Vec<Json>, u64), AuthError> {
    let (users, total) = accounts
        .store
        .list(db, &accounts.config.audience, filter, page, per_page)
        .await
        .map_err(|e| AuthError::internal(&e))?;
    Ok((users.iter().map(session::user_json).collect(), total))
}

/// Bans account `id` for `length` (`None`: lifts its ban); a ban ends every session.
pub async fn ban(
    accounts: &Accounts,
    db: &Database,
    id: &str,
    length: Option<Duration>,
) -> Result<(), AuthError> {
    let until = length.map(super::later_text);
    let changes = UserChanges {
        banned_until: Some(until.clone()),
        ..UserChanges::default()
    };
    let internal = |e: anyhow::Error| AuthError::internal(&e);
    accounts
        .store
        .update(db, id, &changes, &now_text())
        .await
        .map_err(internal)?;
    if until.is_some() {
        accounts
            .store
            .end_sessions(db, id, Scope::Global)
            .await
            .map_err(internal)?;
    }
    Ok(())
}

/// `GET /admin/users/{id}`.
pub async fn get(call: &Call<'_>, id: &str) -> Result<Json, AuthError> {
    Ok(session::user_json(&admitted_account(call, id).await?))
}

/// `PUT /admin/users/{id}`.
pub async fn update(call: &Call<'_>, id: &str) -> Result<Json, AuthError> {
    admit(call)?;
    let accounts = call.accounts;
    let current = account(call, id).await?;
    let body = call.json()?;
    let changes = changes_of(call, &body, Some(&current)).await?;
    let db = call.db();
    let taken = !accounts
        .store
        .update(db, id, &changes, &now_text())
        .await
        .map_err(|e| AuthError::internal(&e))?;
    if taken {
        return Err(AuthError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "email_exists",
            "A user with this email address has already been registered",
        ));
    }
    if changes.password_hash.is_some() || matches!(changes.banned_until, Some(Some(_))) {
        accounts
            .store
            .end_sessions(db, id, Scope::Global)
            .await
            .map_err(|e| AuthError::internal(&e))?;
    }
    Ok(session::user_json(&account(call, id).await?))
}

/// `DELETE /admin/users/{id}`.
pub async fn delete(call: &Call<'_>, id: &str) -> Result<Json, AuthError> {
    admit(call)?;
    account(call, id).await?;
    call.accounts
        .store
        .delete(call.db(), id)
        .await
        .map_err(|e| AuthError::internal(&e))?;
    Ok(json!({}))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ban_durations_read_as_go_writes_them() {
        assert_eq!(go_duration("24h"), Some(Duration::from_secs(86_400)));
        assert_eq!(go_duration("1h30m"), Some(Duration::from_secs(5_400)));
        assert_eq!(go_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(
            go_duration("876000h"),
            Some(Duration::from_secs(876_000 * 3600))
        );
        assert_eq!(go_duration(""), None);
        assert_eq!(go_duration("forever"), None);
        assert_eq!(go_duration("12"), None);
    }
}
