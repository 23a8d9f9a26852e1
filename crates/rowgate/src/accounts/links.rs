//! What goes through an email, as GoTrue does it: a six-digit code and a link carrying the
//! code's hash (SHA-224 of the email and the code, kept in `confirmation_token` or
//! `recovery_token`), sent for a new account's confirmation, a magic link (`POST /otp`), a
//! password recovery (`POST /recover`) and a change of address (`PUT /user`, to the new one,
//! kept in `email_change_token_new` until it is confirmed); `POST /verify` takes the code with the email, or the
//! hash, and `GET /verify` (the link) redirects to the app with the session in the URL's
//! fragment. A code is good once, for `accounts.otp_exp_s`; one kind of email goes to one
//! account at most every `accounts.email_every_s`; failed codes count as failed sign-ins.

use http::StatusCode;
use serde_json::{json, Map, Value as Json};
use sha2::{Digest, Sha224};
use subtle::ConstantTimeEq;

use super::error::AuthError;
use super::mail::{Kind, Letter, Mailer};
use super::store::{NewUser, OneTime, UserRow};
use super::{metadata_of, new_uuid, now_text, session, text_of, unix_seconds, valid_email, Call};
use crate::reply::Reply;

/// The kinds of `/verify`, as GoTrue names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verify {
    Signup,
    Recovery,
    MagicLink,
    /// A confirmation or a magic link, whichever the code is.
    Email,
    /// A change of address.
    EmailChange,
}

impl Verify {
    fn parse(text: &str) -> Result<Verify, AuthError> {
        match text {
            "signup" => Ok(Verify::Signup),
            "recovery" => Ok(Verify::Recovery),
            "magiclink" => Ok(Verify::MagicLink),
            "email" => Ok(Verify::Email),
            "email_change" => Ok(Verify::EmailChange),
            "invite" | "sms" | "phone_change" => Err(AuthError::new(
                StatusCode::NOT_IMPLEMENTED,
                "not_implemented",
                format!("verifying type {text:?} is not offered yet"),
            )),
            _ => Err(AuthError::validation(format!(
                "Verify requires a verification type (signup, recovery, magiclink, email or email_change), not {text:?}"
            ))),
        }
    }

    /// The one-time tokens it may be.
    fn tokens(self) -> &'static [OneTime] {
        match self {
            Verify::Signup => &[OneTime::Confirmation],
            Verify::Recovery | Verify::MagicLink => &[OneTime::Recovery],
            Verify::Email => &[OneTime::Confirmation, OneTime::Recovery],
            Verify::EmailChange => &[OneTime::EmailChange],
        }
    }

    fn name(self) -> &'static str {
        match self {
            Verify::Signup => "signup",
            Verify::Recovery => "recovery",
            Verify::MagicLink => "magiclink",
            Verify::Email => "email",
            Verify::EmailChange => "email_change",
        }
    }
}

/// The hash an email's code is kept as: SHA-224 of the email and the code, in hex (GoTrue's).
pub fn code_hash(email: &str, code: &str) -> String {
    Sha224::digest(format!("{email}{code}").as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A six-digit code, uniform.
fn new_code() -> anyhow::Result<String> {
    loop {
        let mut bytes = [0u8; 4];
        getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        let n = u32::from_le_bytes(bytes);
        // (below the last whole million of u32's range: no value is likelier than another)
        if n < u32::MAX - u32::MAX % 1_000_000 {
            return Ok(format!("{:06}", n % 1_000_000));
        }
    }
}

impl Call<'_> {
    /// The mailer (422 without `accounts.smtp_url`).
    pub(super) fn mailer(&self) -> Result<&Mailer, AuthError> {
        self.accounts.mailer.as_ref().ok_or_else(|| {
            AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "email_provider_disabled",
                "Email links and codes need accounts.smtp_url: this server sends no email",
            )
        })
    }

    /// Where a link may lead: `redirect_to` when it is the app's (`site_url`'s origin, or
    /// one of `redirect_urls`), else `site_url`.
    fn redirect_target(&self, asked: Option<&str>) -> String {
        let config = &self.accounts.config;
        let origin = |url: &str| {
            let rest = url.split_once("://").map_or("", |(_, rest)| rest);
            let scheme = url.split_once("://").map_or("", |(scheme, _)| scheme);
            format!(
                "{scheme}://{}",
                rest.split(['/', '?', '#']).next().unwrap_or("")
            )
        };
        match asked.filter(|a| !a.is_empty()) {
            Some(url)
                if origin(url) == origin(&config.site_url)
                    || config.redirect_urls.iter().any(|allowed| {
                        allowed
                            .strip_suffix('*')
                            .map_or(allowed == url, |prefix| url.starts_with(prefix))
                    }) =>
            {
                url.to_string()
            }
            _ => config.site_url.clone(),
        }
    }

    /// This server's address for links: `accounts.external_url`, never the request's `Host`
    /// (whoever asks for a recovery could otherwise send the victim a link to their own host,
    /// and read the code from it).
    fn external_url(&self) -> &str {
        self.accounts.config.external_url.trim_end_matches('/')
    }

    /// Sends `row` the email `kind` with a new code (kept as its one-time token `which`),
    /// unless one was sent less than `accounts.email_every_s` ago (429); an email change's
    /// goes to `new_email`.
    pub(super) async fn send_code(
        &self,
        row: &UserRow,
        kind: Kind,
        which: OneTime,
        new_email: Option<&str>,
    ) -> Result<(), AuthError> {
        let mailer = self.mailer()?;
        let config = &self.accounts.config;
        let (_, sent) = row.one_time(which);
        let now = now_text();
        let now_s = unix_seconds(&now).unwrap_or(0);
        if let Some(sent) = sent.and_then(unix_seconds) {
            let wait = (sent + config.email_every_s as i64) - now_s;
            if wait > 0 {
                return Err(AuthError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "over_email_send_rate_limit",
                    format!(
                        "For security purposes, you can only request this after {wait} seconds."
                    ),
                ));
            }
        }
        let email = new_email
            .map(str::to_string)
            .unwrap_or_else(|| row.email.clone().unwrap_or_default());
        let code = new_code().map_err(|e| AuthError::internal(&e))?;
        let hash = code_hash(&email, &code);
        self.accounts
            .store
            .set_one_time(self.db(), &row.id, which, &hash, new_email, &now)
            .await
            .map_err(|e| AuthError::internal(&e))?;
        let link_type = match kind {
            Kind::Confirmation => "signup",
            Kind::MagicLink => "magiclink",
            Kind::Recovery => "recovery",
            Kind::EmailChange => "email_change",
        };
        let redirect_to = self.redirect_target(self.query("redirect_to").as_deref());
        let link = format!(
            "{}/auth/v1/verify?token={hash}&type={link_type}&redirect_to={}",
            self.external_url(),
            percent_encoding::utf8_percent_encode(&redirect_to, percent_encoding::NON_ALPHANUMERIC)
        );
        let data = session::metadata(row.user_metadata.as_deref());
        mailer
            .send(
                kind,
                &Letter {
                    to: &email,
                    email: row.email.as_deref().unwrap_or_default(),
                    confirmation_url: &link,
                    token: &code,
                    token_hash: &hash,
                    redirect_to: &redirect_to,
                    data: &data,
                },
            )
            .await
            .map_err(|e| {
                tracing::error!("accounts: {e:#}");
                AuthError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "unexpected_failure",
                    "Error sending the email",
                )
            })
    }

    /// The account a code or link names, and which of its one-time tokens it is; `None`
    /// when none (or it expired).
    async fn by_code(
        &self,
        kind: Verify,
        email: Option<&str>,
        code: Option<&str>,
        hash: Option<&str>,
    ) -> Result<Option<(UserRow, OneTime, String)>, AuthError> {
        let store = &self.accounts.store;
        let db = self.db();
        let found = match (email, code, hash) {
            (Some(email), Some(code), None) => {
                let row = if kind == Verify::EmailChange {
                    store
                        .by_new_email(db, email)
                        .await
                        .map_err(|e| AuthError::internal(&e))?
                } else {
                    self.account_by_email(email).await?
                };
                let hash = code_hash(email, code);
                row.and_then(|row| {
                    let which = kind.tokens().iter().copied().find(|which| {
                        let (kept, _) = row.one_time(*which);
                        !kept.is_empty() && bool::from(kept.as_bytes().ct_eq(hash.as_bytes()))
                    })?;
                    Some((row, which, hash))
                })
            }
            (None, None, Some(hash)) => {
                let mut found = None;
                for which in kind.tokens() {
                    if let Some(row) = store
                        .by_one_time(db, *which, hash)
                        .await
                        .map_err(|e| AuthError::internal(&e))?
                    {
                        found = Some((row, *which, hash.to_string()));
                        break;
                    }
                }
                found
            }
            _ => {
                return Err(AuthError::validation(
                    "Verify requires either a token (with the email) or a token hash",
                ))
            }
        };
        let now = unix_seconds(&now_text()).unwrap_or(0);
        Ok(found.filter(|(row, which, _)| {
            row.one_time(*which)
                .1
                .and_then(unix_seconds)
                .is_some_and(|at| at + self.accounts.config.otp_exp_s as i64 >= now)
        }))
    }

    /// Verifies a code or link of `kind`: a session (signed in by `otp`), or why not.
    async fn verified(
        &self,
        kind: Verify,
        email: Option<&str>,
        code: Option<&str>,
        hash: Option<&str>,
    ) -> Result<Json, AuthError> {
        let expired = |by_hash: bool| {
            AuthError::new(
                StatusCode::FORBIDDEN,
                "otp_expired",
                if by_hash {
                    "Email link is invalid or has expired"
                } else {
                    "Token has expired or is invalid"
                },
            )
        };
        let limit = email.map(|e| format!("email:{e}"));
        if limit
            .as_ref()
            .is_some_and(|k| self.accounts.failed_sign_ins.blocked(k).is_some())
        {
            return Err(AuthError::rate_limited());
        }
        let Some((row, which, hash)) = self.by_code(kind, email, code, hash).await? else {
            if let Some(k) = &limit {
                self.accounts.failed_sign_ins.fail(k);
            }
            return Err(expired(code.is_none()));
        };
        if super::banned(&row) {
            return Err(AuthError::new(
                StatusCode::FORBIDDEN,
                "user_banned",
                "User is banned",
            ));
        }
        let used = self
            .accounts
            .store
            .use_one_time(self.db(), &row.id, which, &hash, &now_text())
            .await
            .map_err(|e| AuthError::internal(&e))?;
        if !used {
            return Err(expired(code.is_none()));
        }
        let mut row = self.account_of_token(&row.id, None).await?;
        if row.email_confirmed_at.is_some() {
            // (GoTrue marks the metadata of a confirmed email)
            let mut meta = session::metadata(row.user_metadata.as_deref());
            if meta.get("email_verified") != Some(&json!(true)) {
                meta["email_verified"] = json!(true);
                let changes = super::store::UserChanges {
                    user_metadata: Some(meta.clone()),
                    ..Default::default()
                };
                self.accounts
                    .store
                    .update(self.db(), &row.id, &changes, &now_text())
                    .await
                    .map_err(|e| AuthError::internal(&e))?;
                row.user_metadata = Some(meta.to_string());
            }
        }
        self.start_session(&row, "otp").await
    }
}

/// `POST /verify`: `{type, token, email}` or `{type, token_hash}`.
pub async fn verify(call: &Call<'_>) -> Result<Json, AuthError> {
    let body = call.json()?;
    let kind = Verify::parse(&text_of(&body, "type")?.unwrap_or_default())?;
    let email = text_of(&body, "email")?
        .filter(|e| !e.is_empty())
        .map(|e| e.trim().to_lowercase());
    let code = text_of(&body, "token")?.filter(|t| !t.is_empty());
    let hash = text_of(&body, "token_hash")?.filter(|t| !t.is_empty());
    if hash.is_some() && (email.is_some() || code.is_some()) {
        return Err(AuthError::validation(
            "Only the token_hash and type should be provided",
        ));
    }
    call.verified(kind, email.as_deref(), code.as_deref(), hash.as_deref())
        .await
}

/// `GET /verify?token=<hash>&type=…&redirect_to=…`: the link in an email; a redirect to the
/// app with the session (or the error) in the fragment.
pub async fn follow(call: &Call<'_>) -> Result<Reply, AuthError> {
    let Some(hash) = call.query("token").filter(|t| !t.is_empty()) else {
        return Err(AuthError::validation(
            "Verify requires a token or a token hash",
        ));
    };
    let kind = Verify::parse(&call.query("type").unwrap_or_default())?;
    let target = call.redirect_target(call.query("redirect_to").as_deref());
    let encode = |pairs: &[(&str, String)]| {
        form_urlencoded::Serializer::new(String::new())
            .extend_pairs(pairs.iter().map(|(k, v)| (*k, v.as_str())))
            .finish()
    };
    let fragment = match call.verified(kind, None, None, Some(&hash)).await {
        Ok(session) => {
            let field = |name: &str| match &session[name] {
                Json::String(s) => s.clone(),
                other => other.to_string(),
            };
            encode(&[
                ("access_token", field("access_token")),
                ("expires_at", field("expires_at")),
                ("expires_in", field("expires_in")),
                ("refresh_token", field("refresh_token")),
                ("sb", String::new()),
                ("token_type", "bearer".into()),
                ("type", kind.name().into()),
            ])
        }
        Err(e) => {
            let error = match e.status.as_u16() {
                400 => "invalid_request",
                401 => "unauthorized_client",
                403 => "access_denied",
                503 => "temporarily_unavailable",
                _ => "server_error",
            };
            encode(&[
                ("error", error.into()),
                ("error_code", e.code.into()),
                ("error_description", e.message),
                ("sb", String::new()),
            ])
        }
    };
    let location = format!("{}#{fragment}", target.split('#').next().unwrap_or(""));
    Ok(Reply::empty(StatusCode::SEE_OTHER).header(http::header::LOCATION, location))
}

/// `POST /recover`: a recovery email to a known address; the same answer for any other.
pub async fn recover(call: &Call<'_>) -> Result<Json, AuthError> {
    let body = call.json()?;
    let email = text_of(&body, "email")?.unwrap_or_default();
    if email.trim().is_empty() {
        return Err(AuthError::validation("Password recovery requires an email"));
    }
    let email = valid_email(Some(email))?;
    call.mailer()?;
    if let Some(row) = call.account_by_email(&email).await? {
        call.send_code(&row, Kind::Recovery, OneTime::Recovery, None)
            .await?;
    }
    Ok(json!({}))
}

/// `POST /otp` (and `/magiclink`): a magic link and code to sign in by; a new address gets an
/// account first (unless `create_user` is false), confirmed by the same code.
pub async fn one_time_code(call: &Call<'_>) -> Result<Json, AuthError> {
    let accounts = call.accounts;
    let body = call.json()?;
    if text_of(&body, "phone")?.is_some_and(|p| !p.is_empty()) {
        return Err(AuthError::new(
            StatusCode::BAD_REQUEST,
            "phone_provider_disabled",
            "Phone logins are disabled",
        ));
    }
    let email = valid_email(text_of(&body, "email")?)?;
    call.mailer()?;
    let create = body
        .get("create_user")
        .and_then(Json::as_bool)
        .unwrap_or(true);
    let data = metadata_of(&accounts.config, &body, "data")?.unwrap_or_default();
    let found = call.account_by_email(&email).await?;
    let row = match found {
        Some(row) => row,
        None if !create || !accounts.config.signup => {
            return Err(AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "otp_disabled",
                "Signups not allowed for otp",
            ))
        }
        None => new_account(call, &email, None, data, false).await?,
    };
    if row.email_confirmed_at.is_none() {
        call.send_code(&row, Kind::Confirmation, OneTime::Confirmation, None)
            .await?;
    } else {
        call.send_code(&row, Kind::MagicLink, OneTime::Recovery, None)
            .await?;
    }
    Ok(json!({}))
}

/// A new account of `email` (with a password hash, or none: a magic link's), confirmed at
/// once or not; 422 when the address is taken.
pub(super) async fn new_account(
    call: &Call<'_>,
    email: &str,
    password_hash: Option<String>,
    data: Map<String, Json>,
    confirmed: bool,
) -> Result<UserRow, AuthError> {
    let config = &call.accounts.config;
    let mut user_metadata = data;
    if confirmed {
        user_metadata.insert("email_verified".into(), json!(true));
    }
    let user = NewUser {
        id: new_uuid(),
        email: email.to_string(),
        password_hash,
        confirmed,
        aud: config.audience.clone(),
        role: config.role.clone(),
        user_metadata: Json::Object(user_metadata),
        app_metadata: json!({"provider": "email", "providers": ["email"]}),
    };
    call.accounts
        .store
        .insert(call.db(), &user, &now_text())
        .await
        .map_err(|e| AuthError::internal(&e))?
        .ok_or_else(|| {
            AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "user_already_exists",
                "User already registered",
            )
        })
}

/// The answer to a sign-up whose email is taken by a confirmed account, when sign-ups are
/// confirmed by email: a user object like a new one's (a random id, no identities), so the
/// answer does not tell who has an account (GoTrue's).
pub(super) fn look_alike(email: &str, data: Map<String, Json>) -> Json {
    let now = now_text();
    json!({
        "id": new_uuid(), "aud": "authenticated", "role": "", "email": email, "phone": "",
        "confirmation_sent_at": now, "app_metadata": {"provider": "email", "providers": ["email"]},
        "user_metadata": data, "identities": [], "created_at": now, "updated_at": now,
        "is_anonymous": false,
    })
}
