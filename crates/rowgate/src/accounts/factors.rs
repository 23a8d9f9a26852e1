//! Multi-factor sign-in with TOTP, as GoTrue's `/factors` endpoints (supabase-js's
//! `auth.mfa.enroll`, `challenge`, `verify`, `unenroll`, `listFactors`,
//! `getAuthenticatorAssuranceLevel`, and `auth.admin.mfa.*`).
//!
//! A signed-in person enrolls a factor (a new secret, its `otpauth://` URI and the QR code of
//! it as SVG), asks for a challenge, and answers it with a code from an authenticator app: the
//! factor is then verified and the session rises to `aal2`, with `totp` in its token's `amr`.
//! Row filters and policies can ask for `aal2` through the token's claims. As GoTrue: a
//! second factor is enrolled, or a verified one removed, only from an `aal2` session; a
//! challenge is answered from the address that asked for it, within
//! `accounts.mfa_challenge_exp_s`. Beyond GoTrue: a code is accepted once (RFC 6238 §5.2),
//! and wrong codes are limited per factor like failed sign-ins.

use std::time::Duration;

use http::StatusCode;
use qrcode::render::svg;
use qrcode::{EcLevel, QrCode};
use serde_json::{json, Value as Json};
use totp_rs::{Algorithm, Builder, Secret, Totp};

use super::error::AuthError;
use super::store::factors::{Accepted, FactorRow, NewFactor};
use super::store::UserRow;
use super::{earlier_text, is_uuid, new_uuid, now_text, session, text_of, unix_seconds, Call};

/// Secrets of 160 bits, as RFC 4226 recommends (and GoTrue's library makes).
const SECRET_BYTES: usize = 20;

/// The TOTP of `secret` (base32): SHA-1, six digits, 30-second steps, one step of clock skew
/// either way, as every authenticator app and GoTrue.
fn totp(secret: &str, issuer: Option<String>, account: String) -> Result<Totp, AuthError> {
    let secret = Secret::try_from_base32(secret)
        .map_err(|_| AuthError::internal(&anyhow::anyhow!("a factor's secret is not base32")))?;
    Builder::new()
        .with_algorithm(Algorithm::SHA1)
        .with_digits(6)
        .with_skew(1)
        .with_step_duration(30)
        .with_secret(secret)
        .with_issuer(issuer)
        .with_account_name(account)
        .build()
        .map_err(|e| AuthError::validation(format!("cannot make the TOTP factor: {e}")))
}

/// 422 unless TOTP factors are on.
fn totp_on(call: &Call<'_>, code: &'static str, what: &str) -> Result<(), AuthError> {
    if call.accounts.config.mfa_totp {
        Ok(())
    } else {
        Err(AuthError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code,
            format!("MFA {what} is disabled for TOTP (accounts.mfa_totp)"),
        ))
    }
}

/// Factor `id` of `row`'s account (404 `mfa_factor_not_found` otherwise).
fn factor_of(row: &UserRow, id: &str) -> Result<FactorRow, AuthError> {
    row.factor_list()
        .into_iter()
        .find(|f| f.id == id)
        .ok_or_else(|| {
            AuthError::new(
                StatusCode::NOT_FOUND,
                "mfa_factor_not_found",
                "Factor not found",
            )
        })
}

/// `POST /factors`: a new TOTP factor (unverified until a code of it is verified).
pub async fn enroll(call: &Call<'_>) -> Result<Json, AuthError> {
    let accounts = call.accounts;
    let config = &accounts.config;
    let (_, row) = call.person().await?;
    let body = call.json()?;
    match text_of(&body, "factor_type")?.as_deref() {
        Some("totp") => totp_on(call, "mfa_totp_enroll_not_enabled", "enroll")?,
        Some("phone") => {
            return Err(AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "mfa_phone_enroll_not_enabled",
                "MFA enroll is disabled for Phone",
            ))
        }
        Some("webauthn") => {
            return Err(AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "mfa_webauthn_enroll_not_enabled",
                "MFA enroll is disabled for WebAuthn",
            ))
        }
        _ => {
            return Err(AuthError::validation(
                "factor_type needs to be totp, phone, or webauthn",
            ))
        }
    }
    let name = text_of(&body, "friendly_name")?.unwrap_or_default();
    if name.chars().count() > 255 {
        return Err(AuthError::validation(
            "friendly_name must be at most 255 characters",
        ));
    }
    let factors = row.factor_list();
    if !name.is_empty()
        && factors
            .iter()
            .any(|f| f.friendly_name.as_deref() == Some(&name))
    {
        return Err(name_taken(&name));
    }
    if factors.len() >= config.mfa_max_factors {
        return Err(AuthError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "too_many_enrolled_mfa_factors",
            "Maximum number of verified factors reached, unenroll to continue",
        ));
    }
    if factors.iter().any(FactorRow::verified) && !row.session_aal2() {
        return Err(AuthError::new(
            StatusCode::FORBIDDEN,
            "insufficient_aal",
            "AAL2 required to enroll a new factor",
        ));
    }
    // the issuer an authenticator app shows: the request's, or the site's host
    let issuer = match text_of(&body, "issuer")?.filter(|i| !i.is_empty()) {
        Some(issuer) => issuer,
        None => config
            .site_url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string))
            .unwrap_or_else(|| "Rowgate".into()),
    };
    if issuer.contains(':') || issuer.chars().count() > 255 {
        return Err(AuthError::validation(
            "issuer must be at most 255 characters, without ':'",
        ));
    }
    let account = row
        .email
        .clone()
        .filter(|e| !e.is_empty() && !e.contains(':'))
        .unwrap_or_else(|| row.id.clone());
    let mut bytes = [0u8; SECRET_BYTES];
    getrandom::fill(&mut bytes)
        .map_err(|e| AuthError::internal(&anyhow::anyhow!("no randomness for a secret: {e}")))?;
    let secret = Secret::from(bytes).to_base32();
    let totp = totp(&secret, Some(issuer), account)?;
    let uri = totp
        .to_url()
        .map_err(|e| AuthError::validation(format!("cannot make the TOTP URI: {e}")))?;
    let qr_code = QrCode::with_error_correction_level(uri.as_bytes(), EcLevel::M)
        .map_err(|e| AuthError::internal(&anyhow::anyhow!("cannot draw the QR code: {e}")))?
        .render::<svg::Color>()
        .min_dimensions(200, 200)
        .build();
    let id = new_uuid();
    let now = now_text();
    let stale_before = earlier_text(Duration::from_secs(config.mfa_challenge_exp_s));
    let added = accounts
        .store
        .add_factor(
            call.db(),
            &NewFactor {
                id: &id,
                user_id: &row.id,
                friendly_name: &name,
                secret: &secret,
            },
            &stale_before,
            &now,
        )
        .await
        .map_err(|e| AuthError::internal(&e))?;
    if !added {
        return Err(name_taken(&name));
    }
    Ok(json!({
        "id": id,
        "type": "totp",
        "friendly_name": name,
        "totp": {"qr_code": qr_code, "secret": secret, "uri": uri},
    }))
}

fn name_taken(name: &str) -> AuthError {
    AuthError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "mfa_factor_name_conflict",
        format!("A factor with the friendly name \"{name}\" for this user already exists"),
    )
}

/// `POST /factors/{id}/challenge`.
pub async fn challenge(call: &Call<'_>, factor_id: &str) -> Result<Json, AuthError> {
    totp_on(call, "mfa_totp_verify_not_enabled", "verification")?;
    let (_, row) = call.person().await?;
    let factor = factor_of(&row, factor_id)?;
    let id = new_uuid();
    let now = now_text();
    call.accounts
        .store
        .add_challenge(call.db(), &id, &factor.id, &call.client.to_string(), &now)
        .await
        .map_err(|e| AuthError::internal(&e))?;
    let expires_at =
        unix_seconds(&now).unwrap_or(0) + call.accounts.config.mfa_challenge_exp_s as i64;
    Ok(json!({"id": id, "type": "totp", "expires_at": expires_at}))
}

/// `POST /factors/{id}/verify`: a code answering a challenge; a new session answer at `aal2`.
pub async fn verify(call: &Call<'_>, factor_id: &str) -> Result<Json, AuthError> {
    let accounts = call.accounts;
    totp_on(call, "mfa_totp_verify_not_enabled", "verification")?;
    let (claims, row) = call.person().await?;
    let factor = factor_of(&row, factor_id)?;
    let body = call.json()?;
    let code = text_of(&body, "code")?.unwrap_or_default();
    if code.is_empty() {
        return Err(AuthError::validation("Code needs to be non-empty"));
    }
    let challenge_id = text_of(&body, "challenge_id")?.unwrap_or_default();
    if !is_uuid(&challenge_id) {
        return Err(AuthError::validation("challenge_id must be a UUID"));
    }
    let limit = format!("mfa:{}", factor.id);
    if accounts.failed_sign_ins.blocked(&limit).is_some() {
        return Err(AuthError::rate_limited());
    }
    let unprocessable =
        |code, message: String| AuthError::new(StatusCode::UNPROCESSABLE_ENTITY, code, message);
    let challenge = accounts
        .store
        .challenge(call.db(), &challenge_id, &factor.id)
        .await
        .map_err(|e| AuthError::internal(&e))?
        .ok_or_else(|| {
            unprocessable(
                "mfa_factor_not_found",
                "MFA factor with the provided challenge ID not found".into(),
            )
        })?;
    let here = call.client.to_string();
    if challenge.verified_at.is_some() || challenge.ip.as_deref() != Some(here.as_str()) {
        return Err(unprocessable(
            "mfa_ip_address_mismatch",
            "Challenge and verify IP addresses mismatch.".into(),
        ));
    }
    let made = challenge.created_at.as_deref().and_then(unix_seconds);
    let now_s = jsonwebtoken::get_current_timestamp();
    if made.is_none_or(|at| at + accounts.config.mfa_challenge_exp_s as i64 <= now_s as i64) {
        return Err(unprocessable(
            "mfa_challenge_expired",
            format!(
                "MFA challenge {challenge_id} has expired, verify against another challenge or create a new challenge."
            ),
        ));
    }
    let secret = factor.secret.clone().unwrap_or_default();
    let step = totp(&secret, None, String::new())?.check(code.trim(), now_s);
    let Some(step) = step else {
        accounts.failed_sign_ins.fail(&limit);
        return Err(unprocessable(
            "mfa_verification_failed",
            "Invalid TOTP code entered".into(),
        ));
    };
    let session_id = claims
        .get("session_id")
        .and_then(Json::as_str)
        .unwrap_or_default()
        .to_string();
    let refresh = super::refresh_token().map_err(|e| AuthError::internal(&e))?;
    let accepted = accounts
        .store
        .accept_code(
            call.db(),
            &Accepted {
                user_id: &row.id,
                factor_id: &factor.id,
                challenge_id: &challenge_id,
                step,
                session_id: &session_id,
                token_hash: &session::token_hash(&refresh),
            },
            &now_text(),
        )
        .await
        .map_err(|e| AuthError::internal(&e))?;
    if !accepted {
        accounts.failed_sign_ins.fail(&limit);
        return Err(unprocessable(
            "mfa_verification_failed",
            "Invalid TOTP code entered: this code was used already, wait for the next one".into(),
        ));
    }
    let row = accounts
        .store
        .by_id(call.db(), &row.id, Some(&session_id))
        .await
        .map_err(|e| AuthError::internal(&e))?
        .filter(UserRow::session_exists)
        .ok_or_else(|| {
            AuthError::new(
                StatusCode::FORBIDDEN,
                "session_not_found",
                "Session from session_id claim in JWT does not exist",
            )
        })?;
    call.answer(
        &row,
        &session::Assurance::of_row(&row, &session_id),
        &refresh,
    )
}

/// `DELETE /factors/{id}`: a verified factor only from an `aal2` session.
pub async fn unenroll(call: &Call<'_>, factor_id: &str) -> Result<Json, AuthError> {
    let (_, row) = call.person().await?;
    let factor = factor_of(&row, factor_id)?;
    if factor.verified() && !row.session_aal2() {
        return Err(AuthError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "insufficient_aal",
            "AAL2 required to unenroll verified factor",
        ));
    }
    remove(call, &row.id, &factor.id).await?;
    Ok(json!({"id": factor.id}))
}

/// Removes factor `id` of account `user`.
async fn remove(call: &Call<'_>, user: &str, id: &str) -> Result<(), AuthError> {
    call.accounts
        .store
        .remove_factor(call.db(), user, id)
        .await
        .map_err(|e| AuthError::internal(&e))?;
    Ok(())
}

/// `GET /admin/users/{id}/factors`.
pub async fn admin_list(call: &Call<'_>, user: &str) -> Result<Json, AuthError> {
    let row = super::admin::admitted_account(call, user).await?;
    Ok(json!(row.factor_list()))
}

/// `DELETE /admin/users/{id}/factors/{factor}`.
pub async fn admin_remove(call: &Call<'_>, user: &str, id: &str) -> Result<Json, AuthError> {
    let row = super::admin::admitted_account(call, user).await?;
    let factor = factor_of(&row, id)?;
    remove(call, &row.id, &factor.id).await?;
    Ok(json!(factor))
}
