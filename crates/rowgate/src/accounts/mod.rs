//! People's accounts (`[accounts]`): Supabase Auth's HTTP API at `/auth/v1`, so that
//! supabase-js's `auth.signUp`, `signInWithPassword`, `refreshSession`, `getUser`,
//! `updateUser`, `signOut` and `auth.admin.*` work against this server unchanged.
//!
//! A request goes through the stages every front end has: its route ([`Endpoint`]), its body
//! (JSON, GoTrue's `bad_json` otherwise), who asks (a person's token for `/user` and
//! `/logout`, an admin role's for `/admin/…`), then one action on the [`store`], and an answer
//! in GoTrue's shapes ([`session`]) or a refusal in its envelope ([`error`]). Passwords are
//! checked on threads of their own ([`password`]); failed sign-ins are counted per email and
//! per client address, sign-ups per address.
//!
//! Access tokens are signed by [`crate::auth::token::Tokens`] and accepted by every other front
//! end as any bearer token (their `role`, `sub` for row filters and `auth.uid()`). Refresh
//! tokens are opaque, rotated on each use, and a token used again after
//! `refresh_reuse_interval_s` ends its whole session (taken for theft).
//!
//! With `accounts.smtp_url`, email carries codes and links ([`links`], [`mail`]): a new
//! account's confirmation, magic links, password recovery and email changes. A second factor
//! (TOTP) raises a session to `aal2` ([`factors`]). Not yet: phone and anonymous sign-ins,
//! invitations; those endpoints answer 501 with what is missing.

pub mod admin;
pub mod error;
pub mod factors;
pub mod links;
pub mod mail;
pub mod password;
pub mod session;
pub mod store;

use std::net::IpAddr;
use std::time::Duration;

use bytes::Bytes;
use http::request::Parts;
use http::{Method, StatusCode};
use serde_json::{json, Map, Value as Json};

use crate::auth::{Auth, FailureLimiter};
use crate::config::{AccountsConfig, Config, LimitsConfig};
use crate::db::Database;
use crate::reply::Reply;
use error::{json_reply, AuthError};
use password::{Passwords, MAX_PASSWORD_BYTES};
use store::{Refreshed, Scope, SessionStart, Store, UserChanges, UserRow};

/// Accounts of one server: settings, tables, password hashing and limits.
pub struct Accounts {
    /// `[accounts]`.
    pub config: AccountsConfig,
    /// The `iss` of people's tokens.
    pub issuer: String,
    /// The tables.
    pub store: Store,
    /// Password hashing.
    pub passwords: Passwords,
    /// Email, when `accounts.smtp_url` is set.
    pub mailer: Option<mail::Mailer>,
    /// Failed sign-ins per email and per address.
    failed_sign_ins: FailureLimiter,
    /// Sign-ups per address.
    sign_ups: FailureLimiter,
}

impl Accounts {
    /// Opens accounts on `db` (their tables created when missing).
    pub async fn open(config: &Config, db: &Database) -> anyhow::Result<Accounts> {
        let accounts = &config.accounts;
        let store = Store::new(db);
        store.ensure_tables(db).await?;
        Ok(Accounts {
            mailer: mail::Mailer::new(accounts, &config.dir)?,
            issuer: accounts.token_issuer(&config.auth),
            passwords: Passwords::new(accounts)?,
            failed_sign_ins: FailureLimiter::with_window(
                accounts.max_failed_sign_ins_per_minute,
                Duration::from_secs(60),
            ),
            sign_ups: FailureLimiter::with_window(
                accounts.max_sign_ups_per_hour,
                Duration::from_secs(3600),
            ),
            config: accounts.clone(),
            store,
        })
    }
}

/// What a path under `/auth/v1` names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    Health,
    Settings,
    Signup,
    Token,
    Logout,
    User,
    Verify,
    Recover,
    Otp,
    AdminUsers,
    AdminUser(String),
    /// `factors`: enroll a second factor.
    Factors,
    /// `factors/{id}`: remove it.
    Factor(String),
    /// `factors/{id}/challenge`.
    FactorChallenge(String),
    /// `factors/{id}/verify`.
    FactorVerify(String),
    /// `admin/users/{id}/factors`.
    AdminUserFactors(String),
    /// `admin/users/{id}/factors/{factor}`.
    AdminUserFactor(String, String),
    /// Built by GoTrue, not here yet (email, multi-factor, …).
    NotYet(&'static str),
    Unknown,
}

impl Endpoint {
    fn of(rest: &str) -> Endpoint {
        let rest = rest.trim_end_matches('/');
        match rest {
            "health" => Endpoint::Health,
            "settings" => Endpoint::Settings,
            "signup" => Endpoint::Signup,
            "token" => Endpoint::Token,
            "logout" => Endpoint::Logout,
            "user" => Endpoint::User,
            "verify" => Endpoint::Verify,
            "recover" => Endpoint::Recover,
            "otp" | "magiclink" => Endpoint::Otp,
            "admin/users" => Endpoint::AdminUsers,
            "resend" | "invite" | "admin/generate_link" | "reauthenticate" => {
                Endpoint::NotYet("is not offered yet")
            }
            "factors" => Endpoint::Factors,
            _ => {
                let parts: Vec<&str> = rest.split('/').collect();
                let id = |i: usize| parts[i].to_string();
                match parts.as_slice() {
                    ["factors", f] if !f.is_empty() => Endpoint::Factor(id(1)),
                    ["factors", f, "challenge"] if !f.is_empty() => {
                        Endpoint::FactorChallenge(id(1))
                    }
                    ["factors", f, "verify"] if !f.is_empty() => Endpoint::FactorVerify(id(1)),
                    ["admin", "users", u] if !u.is_empty() => Endpoint::AdminUser(id(2)),
                    ["admin", "users", u, "factors"] if !u.is_empty() => {
                        Endpoint::AdminUserFactors(id(2))
                    }
                    ["admin", "users", u, "factors", f] if !u.is_empty() && !f.is_empty() => {
                        Endpoint::AdminUserFactor(id(2), id(4))
                    }
                    _ => Endpoint::Unknown,
                }
            }
        }
    }

    /// The methods it answers.
    fn methods(&self) -> &'static [&'static str] {
        match self {
            Endpoint::Health | Endpoint::Settings => &["GET"],
            Endpoint::Signup
            | Endpoint::Token
            | Endpoint::Logout
            | Endpoint::Recover
            | Endpoint::Otp
            | Endpoint::Factors
            | Endpoint::FactorChallenge(_)
            | Endpoint::FactorVerify(_) => &["POST"],
            Endpoint::Factor(_) | Endpoint::AdminUserFactor(..) => &["DELETE"],
            Endpoint::AdminUserFactors(_) => &["GET"],
            Endpoint::Verify => &["GET", "POST"],
            Endpoint::User => &["GET", "PUT"],
            Endpoint::AdminUsers => &["GET", "POST"],
            Endpoint::AdminUser(_) => &["GET", "PUT", "DELETE"],
            Endpoint::NotYet(_) | Endpoint::Unknown => &[],
        }
    }
}

/// What the accounts' front end needs of the server: its database, its tokens and its limits.
pub struct Server<'a> {
    /// The database.
    pub db: &'a Database,
    /// Tokens and grants.
    pub auth: &'a Auth,
    /// Request limits.
    pub limits: &'a LimitsConfig,
}

/// One request to `/auth/v1`, once routed: what every stage reads.
pub struct Call<'a> {
    server: &'a Server<'a>,
    accounts: &'a Accounts,
    parts: &'a Parts,
    body: Bytes,
    client: IpAddr,
}

impl Call<'_> {
    fn db(&self) -> &Database {
        self.server.db
    }

    fn query(&self, name: &str) -> Option<String> {
        form_urlencoded::parse(self.parts.uri.query().unwrap_or("").as_bytes())
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.into_owned())
    }

    /// The body as a JSON object (an empty body is `{}`).
    fn json(&self) -> Result<Map<String, Json>, AuthError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            return Ok(Map::new());
        }
        match serde_json::from_slice::<Json>(&self.body) {
            Ok(Json::Object(map)) => Ok(map),
            Ok(_) => Err(AuthError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                "Could not parse request body as JSON: the body must be a JSON object",
            )),
            Err(e) => Err(AuthError::new(
                StatusCode::BAD_REQUEST,
                "bad_json",
                format!("Could not parse request body as JSON: {e}"),
            )),
        }
    }

    fn user_agent(&self) -> Option<&str> {
        self.parts
            .headers
            .get(http::header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
    }

    /// The signed-in person the `Authorization` header's token names: its claims and the
    /// account, with its session still alive.
    async fn person(&self) -> Result<(Map<String, Json>, UserRow), AuthError> {
        let no_token = || {
            AuthError::new(
                StatusCode::UNAUTHORIZED,
                "no_authorization",
                "This endpoint requires a valid Bearer token",
            )
        };
        let header = self
            .parts
            .headers
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(no_token)?;
        let token = match header.split_once(' ') {
            Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
            _ => return Err(no_token()),
        };
        let bad_jwt = |why: String| AuthError::new(StatusCode::FORBIDDEN, "bad_jwt", why);
        let auth = self.server.auth;
        let verified = auth
            .tokens
            .verify(token, &auth.clients.load())
            .map_err(|refused| {
                bad_jwt(format!(
                    "invalid JWT: unable to parse or verify signature, {}",
                    refused.details
                ))
            })?;
        let claims = verified.claims;
        let text = |name: &str| claims.get(name).and_then(Json::as_str).map(str::to_string);
        if text("iss").as_deref() != Some(self.accounts.issuer.as_str()) {
            return Err(bad_jwt(
                "invalid claim: the token is not a person's token of this server".into(),
            ));
        }
        let sub = text("sub").ok_or_else(|| bad_jwt("invalid claim: missing sub claim".into()))?;
        if !is_uuid(&sub) {
            return Err(AuthError::new(
                StatusCode::BAD_REQUEST,
                "bad_jwt",
                "invalid claim: sub claim must be a UUID",
            ));
        }
        let session = text("session_id").filter(|s| is_uuid(s)).ok_or_else(|| {
            AuthError::new(
                StatusCode::FORBIDDEN,
                "session_not_found",
                "Session from session_id claim in JWT does not exist",
            )
        })?;
        let row = self.account_of_token(&sub, Some(&session)).await?;
        if !row.session_exists() {
            return Err(AuthError::new(
                StatusCode::FORBIDDEN,
                "session_not_found",
                "Session from session_id claim in JWT does not exist",
            ));
        }
        if banned(&row) {
            return Err(AuthError::new(
                StatusCode::FORBIDDEN,
                "user_banned",
                "User is banned",
            ));
        }
        Ok((claims, row))
    }

    /// The account of `email` (lowercased), if any.
    async fn account_by_email(&self, email: &str) -> Result<Option<UserRow>, AuthError> {
        self.accounts
            .store
            .by_email(self.db(), email)
            .await
            .map_err(|e| AuthError::internal(&e))
    }

    /// The account `sub` of a person's token (with `session`: whether it still exists).
    async fn account_of_token(
        &self,
        sub: &str,
        session: Option<&str>,
    ) -> Result<UserRow, AuthError> {
        self.accounts
            .store
            .by_id(self.db(), sub, session)
            .await
            .map_err(|e| AuthError::internal(&e))?
            .ok_or_else(|| {
                AuthError::new(
                    StatusCode::FORBIDDEN,
                    "user_not_found",
                    "User from sub claim in JWT does not exist",
                )
            })
    }

    /// A new session of `row` signed in by `method`: its tokens and the answer.
    async fn start_session(&self, row: &UserRow, method: &str) -> Result<Json, AuthError> {
        let session_id = new_uuid();
        let refresh = refresh_token().map_err(|e| AuthError::internal(&e))?;
        let now = now_text();
        let ip = self.client.to_string();
        self.accounts
            .store
            .start_session(
                self.db(),
                &SessionStart {
                    id: &session_id,
                    user_id: &row.id,
                    method,
                    token_hash: &session::token_hash(&refresh),
                    user_agent: self.user_agent(),
                    ip: Some(&ip),
                },
                &now,
            )
            .await
            .map_err(|e| AuthError::internal(&e))?;
        let mut row = row.clone();
        row.last_sign_in_at = Some(now.clone());
        let signed_in = unix_seconds(&now).unwrap_or(0);
        let session = session::Assurance {
            session_id,
            aal: "aal1",
            methods: vec![(method.to_string(), signed_in)],
        };
        self.answer(&row, &session, &refresh)
    }

    /// The session answer for `row`'s `session` with `refresh` as its refresh token.
    fn answer(
        &self,
        row: &UserRow,
        session: &session::Assurance,
        refresh: &str,
    ) -> Result<Json, AuthError> {
        let now = jsonwebtoken::get_current_timestamp();
        let accounts = self.accounts;
        let claims = session::claims(&accounts.config, &accounts.issuer, row, session, now);
        let exp = now + accounts.config.jwt_exp_s;
        let token = self
            .server
            .auth
            .tokens
            .sign_account(&claims)
            .map_err(|e| AuthError::internal(&e))?;
        Ok(session::session_json(&token, exp, now, refresh, row))
    }
}

/// Answers a request to `/auth/v1/{rest}` from `client` (its address, as
/// [`crate::proxies`] tells it); `accounts` is `None` when they are off.
pub async fn handle(
    server: &Server<'_>,
    accounts: Option<&Accounts>,
    parts: &Parts,
    body: impl crate::request_body::RequestBody,
    rest: &str,
    client: IpAddr,
) -> Reply {
    let Some(accounts) = accounts else {
        return AuthError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "accounts are off (accounts.enabled)",
        )
        .reply(&parts.headers);
    };
    match serve(server, accounts, parts, body, rest, client).await {
        Ok(reply) => reply,
        Err(e) => e.reply(&parts.headers),
    }
}

async fn serve(
    server: &Server<'_>,
    accounts: &Accounts,
    parts: &Parts,
    body: impl crate::request_body::RequestBody,
    rest: &str,
    client: IpAddr,
) -> Result<Reply, AuthError> {
    let endpoint = Endpoint::of(rest);
    match &endpoint {
        Endpoint::Unknown => {
            return Err(AuthError::new(
                StatusCode::NOT_FOUND,
                "not_found",
                format!("no such endpoint: /auth/v1/{rest}"),
            ))
        }
        Endpoint::NotYet(why) => {
            return Err(AuthError::new(
                StatusCode::NOT_IMPLEMENTED,
                "not_implemented",
                format!("/auth/v1/{rest} {why}"),
            ))
        }
        _ => {}
    }
    let methods = endpoint.methods();
    if !methods.contains(&parts.method.as_str()) {
        return Ok(AuthError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            format!("/auth/v1/{rest} takes {}", methods.join(", ")),
        )
        .reply(&parts.headers)
        .header(http::header::ALLOW, methods.join(", ")));
    }
    // GoTrue reads at most 1 MB of a body
    let limits = LimitsConfig {
        body_bytes: server.limits.body_bytes.min(1024 * 1024),
        ..server.limits.clone()
    };
    let body = crate::request_body::read_body(&limits, parts, body)
        .await
        .map_err(|e| {
            let status = e.status();
            let code = if status == StatusCode::PAYLOAD_TOO_LARGE {
                "request_entity_too_large"
            } else {
                "validation_failed"
            };
            AuthError::new(status, code, e.message.clone())
        })?;
    let call = Call {
        server,
        accounts,
        parts,
        body,
        client,
    };
    let ok = |body: Json| Ok(json_reply(StatusCode::OK, &body));
    match (&endpoint, &parts.method) {
        (Endpoint::Health, _) => ok(json!({
            "version": env!("CARGO_PKG_VERSION"),
            "name": "GoTrue",
            "description": "Rowgate's accounts, with Supabase Auth's API"
        })),
        (Endpoint::Settings, _) => ok(settings(&accounts.config)),
        (Endpoint::Signup, _) => ok(sign_up(&call).await?),
        (Endpoint::Token, _) => ok(token(&call).await?),
        (Endpoint::Logout, _) => {
            log_out(&call).await?;
            Ok(Reply::empty(StatusCode::NO_CONTENT))
        }
        (Endpoint::User, &Method::GET) => ok(session::user_json(&call.person().await?.1)),
        (Endpoint::User, _) => ok(update_user(&call).await?),
        (Endpoint::Verify, &Method::GET) => links::follow(&call).await,
        (Endpoint::Verify, _) => ok(links::verify(&call).await?),
        (Endpoint::Recover, _) => ok(links::recover(&call).await?),
        (Endpoint::Otp, _) => ok(links::one_time_code(&call).await?),
        (Endpoint::AdminUsers, &Method::GET) => admin::list(&call).await,
        (Endpoint::AdminUsers, _) => ok(admin::create(&call).await?),
        (Endpoint::AdminUser(id), &Method::GET) => ok(admin::get(&call, id).await?),
        (Endpoint::AdminUser(id), &Method::PUT) => ok(admin::update(&call, id).await?),
        (Endpoint::AdminUser(id), _) => ok(admin::delete(&call, id).await?),
        (Endpoint::Factors, _) => ok(factors::enroll(&call).await?),
        (Endpoint::FactorChallenge(id), _) => ok(factors::challenge(&call, id).await?),
        (Endpoint::FactorVerify(id), _) => ok(factors::verify(&call, id).await?),
        (Endpoint::Factor(id), _) => ok(factors::unenroll(&call, id).await?),
        (Endpoint::AdminUserFactors(user), _) => ok(factors::admin_list(&call, user).await?),
        (Endpoint::AdminUserFactor(user, id), _) => {
            ok(factors::admin_remove(&call, user, id).await?)
        }
        _ => Err(AuthError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "no such endpoint",
        )),
    }
}

/// `GET /settings`, as GoTrue's.
fn settings(config: &AccountsConfig) -> Json {
    let external: Map<String, Json> = [
        "anonymous_users",
        "apple",
        "azure",
        "bitbucket",
        "discord",
        "facebook",
        "figma",
        "fly",
        "github",
        "gitlab",
        "google",
        "keycloak",
        "kakao",
        "linkedin_oidc",
        "notion",
        "spotify",
        "slack_oidc",
        "workos",
        "twitch",
        "twitter",
        "phone",
        "zoom",
    ]
    .into_iter()
    .map(|name| (name.to_string(), json!(false)))
    .chain([("email".to_string(), json!(true))])
    .collect();
    json!({
        "external": external,
        "disable_signup": !config.signup,
        "mailer_autoconfirm": config.autoconfirm,
        "phone_autoconfirm": false,
        "sms_provider": "",
        "saml_enabled": false,
    })
}

/// A text member of a body (`null` and absent alike).
fn text_of(body: &Map<String, Json>, key: &str) -> Result<Option<String>, AuthError> {
    match body.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(AuthError::new(
            StatusCode::BAD_REQUEST,
            "bad_json",
            format!("Could not parse request body as JSON: {key} must be a string"),
        )),
    }
}

/// A metadata member (an object, within `accounts.max_metadata_bytes`).
fn metadata_of(
    config: &AccountsConfig,
    body: &Map<String, Json>,
    key: &str,
) -> Result<Option<Map<String, Json>>, AuthError> {
    match body.get(key) {
        None | Some(Json::Null) => Ok(None),
        Some(Json::Object(map)) => {
            let size = Json::Object(map.clone()).to_string().len();
            if size > config.max_metadata_bytes {
                return Err(AuthError::validation(format!(
                    "{key} is too large: {size} bytes of JSON, at most {} (accounts.max_metadata_bytes)",
                    config.max_metadata_bytes
                )));
            }
            Ok(Some(map.clone()))
        }
        Some(_) => Err(AuthError::validation(format!(
            "{key} must be a JSON object"
        ))),
    }
}

/// `email` checked and lowercased.
fn valid_email(email: Option<String>) -> Result<String, AuthError> {
    let email = email.unwrap_or_default().trim().to_lowercase();
    if email.is_empty() {
        return Err(AuthError::validation("An email address is required"));
    }
    if email.len() > 255 {
        return Err(AuthError::validation("An email address is too long"));
    }
    let shaped = email.split_once('@').is_some_and(|(local, domain)| {
        !local.is_empty()
            && domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
            && !domain.contains('@')
    });
    if !shaped || email.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(AuthError::validation(
            "Unable to validate email address: invalid format",
        ));
    }
    Ok(email)
}

/// A new password checked against the rules.
fn acceptable_password(config: &AccountsConfig, password: &str) -> Result<(), AuthError> {
    if password.len() > MAX_PASSWORD_BYTES {
        return Err(AuthError::validation(format!(
            "Password cannot be longer than {MAX_PASSWORD_BYTES} characters"
        )));
    }
    match password::weaknesses(config, password) {
        Some((reasons, message)) => Err(AuthError::weak_password(reasons, message)),
        None => Ok(()),
    }
}

/// A password hashed (429 when the hashing threads are swamped).
async fn hashed(accounts: &Accounts, password: &str) -> Result<String, AuthError> {
    accounts
        .passwords
        .hash(password.to_string())
        .await
        .map_err(|_| AuthError::rate_limited())?
        .map_err(|e| AuthError::internal(&e))
}

/// `POST /signup`.
async fn sign_up(call: &Call<'_>) -> Result<Json, AuthError> {
    let accounts = call.accounts;
    let config = &accounts.config;
    if !config.signup {
        return Err(AuthError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "signup_disabled",
            "Signups not allowed for this instance",
        ));
    }
    let body = call.json()?;
    let email = text_of(&body, "email")?;
    let password = text_of(&body, "password")?.unwrap_or_default();
    if email.is_none() {
        if text_of(&body, "phone")?.is_some_and(|p| !p.is_empty()) {
            return Err(AuthError::new(
                StatusCode::BAD_REQUEST,
                "phone_provider_disabled",
                "Phone signups are disabled",
            ));
        }
        return Err(AuthError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "anonymous_provider_disabled",
            "Anonymous sign-ins are disabled",
        ));
    }
    if password.is_empty() {
        return Err(AuthError::validation("Signup requires a valid password"));
    }
    acceptable_password(config, &password)?;
    let email = valid_email(email)?;
    let data = metadata_of(config, &body, "data")?.unwrap_or_default();
    let limit = format!("signup:{}", call.client);
    if accounts.sign_ups.blocked(&limit).is_some() {
        return Err(AuthError::rate_limited());
    }
    accounts.sign_ups.fail(&limit);
    let hash = hashed(accounts, &password).await?;
    if config.autoconfirm {
        let row = links::new_account(call, &email, Some(hash), data, true).await?;
        return call.start_session(&row, "password").await;
    }
    // confirmed by email: the answer is the user, without a session
    let found = call.account_by_email(&email).await?;
    let row = match found {
        // (a confirmed address: an answer like a new account's, and no email)
        Some(row) if row.email_confirmed_at.is_some() => {
            return Ok(links::look_alike(&email, data));
        }
        // (not confirmed yet: the confirmation again)
        Some(row) => row,
        None => links::new_account(call, &email, Some(hash), data, false).await?,
    };
    call.send_code(
        &row,
        mail::Kind::Confirmation,
        store::OneTime::Confirmation,
        None,
    )
    .await?;
    let row = call.account_of_token(&row.id, None).await?;
    Ok(session::user_json(&row))
}

/// `POST /token?grant_type=…`.
async fn token(call: &Call<'_>) -> Result<Json, AuthError> {
    match call.query("grant_type").as_deref() {
        Some("password") => sign_in(call).await,
        Some("refresh_token") => refresh(call).await,
        _ => Err(AuthError::new(
            StatusCode::BAD_REQUEST,
            "invalid_credentials",
            "unsupported_grant_type",
        )),
    }
}

/// Whether `row` is banned now.
fn banned(row: &UserRow) -> bool {
    let now = jsonwebtoken::get_current_timestamp() as i64;
    row.banned_until
        .as_deref()
        .and_then(unix_seconds)
        .is_some_and(|until| until > now)
}

/// `grant_type=password`: the same answer, after the same work, for an unknown email and a
/// wrong password.
async fn sign_in(call: &Call<'_>) -> Result<Json, AuthError> {
    let accounts = call.accounts;
    let body = call.json()?;
    let email = text_of(&body, "email")?.filter(|e| !e.is_empty());
    let password = text_of(&body, "password")?.unwrap_or_default();
    let Some(email) = email else {
        return Err(AuthError::validation("missing email or phone"));
    };
    let email = email.trim().to_lowercase();
    // (per address and email, and per address: someone else's failures never lock a person
    // out; guesses at one account from many addresses meet the hashing queue)
    let keys = [
        format!("email:{email}:{}", call.client),
        crate::auth::address_key(call.client),
    ];
    if keys
        .iter()
        .any(|k| accounts.failed_sign_ins.blocked(k).is_some())
    {
        return Err(AuthError::rate_limited());
    }
    let found = call.account_by_email(&email).await?;
    let stored = found.as_ref().and_then(|u| u.encrypted_password.clone());
    let matched = password.len() <= MAX_PASSWORD_BYTES
        && accounts
            .passwords
            .verify(password.clone(), stored.clone())
            .await
            .map_err(|_| AuthError::rate_limited())?;
    let Some(row) = found.filter(|_| matched) else {
        for k in &keys {
            accounts.failed_sign_ins.fail(k);
        }
        return Err(AuthError::invalid_credentials());
    };
    if banned(&row) {
        return Err(AuthError::new(
            StatusCode::BAD_REQUEST,
            "user_banned",
            "User is banned",
        ));
    }
    if row.email_confirmed_at.is_none() {
        return Err(AuthError::new(
            StatusCode::BAD_REQUEST,
            "email_not_confirmed",
            "Email not confirmed",
        ));
    }
    // a bcrypt hash (from Supabase) or older costs: replaced while the password is at hand
    if stored
        .as_deref()
        .is_some_and(|s| accounts.passwords.outdated(s))
    {
        if let Ok(Ok(hash)) = accounts.passwords.hash(password.clone()).await {
            let changes = UserChanges {
                password_hash: Some(hash),
                ..UserChanges::default()
            };
            if let Err(e) = accounts
                .store
                .update(call.db(), &row.id, &changes, &now_text())
                .await
            {
                tracing::warn!("accounts: the password hash could not be renewed: {e:#}");
            }
        }
    }
    let mut answer = call.start_session(&row, "password").await?;
    if let Some((reasons, message)) = password::weaknesses(&accounts.config, &password) {
        answer["weak_password"] = json!({"message": message, "reasons": reasons});
    }
    Ok(answer)
}

/// `grant_type=refresh_token`.
async fn refresh(call: &Call<'_>) -> Result<Json, AuthError> {
    let accounts = call.accounts;
    let body = call.json()?;
    let used = text_of(&body, "refresh_token")?.unwrap_or_default();
    if used.is_empty() || used.len() > 255 {
        return Err(AuthError::validation("Refresh token is not valid"));
    }
    let fresh = refresh_token().map_err(|e| AuthError::internal(&e))?;
    let refused = |code, message: &str| AuthError::new(StatusCode::BAD_REQUEST, code, message);
    let outcome = accounts
        .store
        .refresh(
            call.db(),
            &session::token_hash(&used),
            &session::token_hash(&fresh),
            accounts.config.refresh_reuse_interval_s,
            &now_text(),
        )
        .await
        .map_err(|e| AuthError::internal(&e))?;
    let (session_id, user_id) = match outcome {
        Refreshed::Rotated {
            session_id,
            user_id,
        } => (session_id, user_id),
        Refreshed::Unknown => {
            return Err(refused(
                "refresh_token_not_found",
                "Invalid Refresh Token: Refresh Token Not Found",
            ))
        }
        Refreshed::Reused => {
            return Err(refused(
                "refresh_token_already_used",
                "Invalid Refresh Token: Already Used",
            ))
        }
    };
    let row = accounts
        .store
        .by_id(call.db(), &user_id, Some(&session_id))
        .await
        .map_err(|e| AuthError::internal(&e))?
        .filter(UserRow::session_exists)
        .ok_or_else(|| {
            refused(
                "session_not_found",
                "Invalid Refresh Token: No Valid Session Found",
            )
        })?;
    if banned(&row) {
        return Err(refused("user_banned", "Invalid Refresh Token: User Banned"));
    }
    call.answer(&row, &session::Assurance::of_row(&row, &session_id), &fresh)
}

/// `POST /logout?scope=global|local|others`.
async fn log_out(call: &Call<'_>) -> Result<(), AuthError> {
    let (claims, row) = call.person().await?;
    let session = claims
        .get("session_id")
        .and_then(Json::as_str)
        .unwrap_or_default();
    let scope = match call.query("scope").as_deref().unwrap_or("") {
        "" | "global" => Scope::Global,
        "local" => Scope::Local(session),
        "others" => Scope::Others(session),
        other => {
            return Err(AuthError::validation(format!(
                "Unsupported logout scope {other:?}"
            )))
        }
    };
    call.accounts
        .store
        .end_sessions(call.db(), &row.id, scope)
        .await
        .map_err(|e| AuthError::internal(&e))
}

/// `metadata` with `changes` merged in (a `null` removes its key).
fn merged(metadata: Json, changes: Map<String, Json>) -> Json {
    let mut merged = match metadata {
        Json::Object(map) => map,
        _ => Map::new(),
    };
    for (key, value) in changes {
        if value.is_null() {
            merged.remove(&key);
        } else {
            merged.insert(key, value);
        }
    }
    Json::Object(merged)
}

/// `PUT /user`: a new password (every other session ends), `data` (merged into
/// `user_metadata`) or a new `email` (confirmed by a code sent to it).
async fn update_user(call: &Call<'_>) -> Result<Json, AuthError> {
    let accounts = call.accounts;
    let (claims, row) = call.person().await?;
    let body = call.json()?;
    if body.get("app_metadata").is_some_and(|v| !v.is_null()) {
        return Err(AuthError::new(
            StatusCode::FORBIDDEN,
            "not_admin",
            "Updating app_metadata requires admin privileges",
        ));
    }
    let new_email = match text_of(&body, "email")?.filter(|e| !e.is_empty()) {
        Some(email) => {
            let email = valid_email(Some(email))?;
            (Some(&email) != row.email.as_ref()).then_some(email)
        }
        None => None,
    };
    let mut changes = UserChanges::default();
    if let Some(password) = text_of(&body, "password")?.filter(|p| !p.is_empty()) {
        acceptable_password(&accounts.config, &password)?;
        let same = accounts
            .passwords
            .verify(password.clone(), row.encrypted_password.clone())
            .await
            .map_err(|_| AuthError::rate_limited())?;
        if same {
            return Err(AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "same_password",
                "New password should be different from the old password.",
            ));
        }
        changes.password_hash = Some(hashed(accounts, &password).await?);
    }
    if let Some(data) = metadata_of(&accounts.config, &body, "data")? {
        let whole = merged(session::metadata(row.user_metadata.as_deref()), data);
        if whole.to_string().len() > accounts.config.max_metadata_bytes {
            return Err(AuthError::validation(format!(
                "user_metadata would be larger than {} bytes (accounts.max_metadata_bytes)",
                accounts.config.max_metadata_bytes
            )));
        }
        changes.user_metadata = Some(whole);
    }
    if let Some(email) = &new_email {
        call.mailer()?;
        if call.account_by_email(email).await?.is_some() {
            return Err(AuthError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "email_exists",
                "A user with this email address has already been registered",
            ));
        }
    }
    let db = call.db();
    accounts
        .store
        .update(db, &row.id, &changes, &now_text())
        .await
        .map_err(|e| AuthError::internal(&e))?;
    // a new address is confirmed from it before it is the account's
    if let Some(email) = &new_email {
        call.send_code(
            &row,
            mail::Kind::EmailChange,
            store::OneTime::EmailChange,
            Some(email),
        )
        .await?;
    }
    if changes.password_hash.is_some() {
        let session = claims
            .get("session_id")
            .and_then(Json::as_str)
            .unwrap_or_default();
        accounts
            .store
            .end_sessions(db, &row.id, Scope::Others(session))
            .await
            .map_err(|e| AuthError::internal(&e))?;
    }
    let row = call.account_of_token(&row.id, None).await?;
    Ok(session::user_json(&row))
}

/// A new random UUID (version 4).
pub fn new_uuid() -> String {
    let mut bytes = [0u8; 16];
    // (the operating system's randomness; a failure leaves zeros, refused by the unique keys)
    let _ = getrandom::fill(&mut bytes);
    uuid::Builder::from_random_bytes(bytes)
        .into_uuid()
        .to_string()
}

/// Whether `text` is a UUID.
pub fn is_uuid(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok()
}

/// A new refresh token: 192 random bits (GoTrue's are 60).
fn refresh_token() -> anyhow::Result<String> {
    crate::auth::secret::random_string(24)
}

/// Now, as stored: RFC 3339 in UTC with microseconds.
pub fn now_text() -> String {
    later_text(Duration::ZERO)
}

/// `length` from now, as stored.
pub fn later_text(length: Duration) -> String {
    time_text(since_epoch() + length)
}

/// `length` ago, as stored.
pub fn earlier_text(length: Duration) -> String {
    time_text(since_epoch().saturating_sub(length))
}

/// The time since the Unix epoch.
fn since_epoch() -> Duration {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
}

/// `since_epoch` as stored.
fn time_text(since_epoch: Duration) -> String {
    chrono::DateTime::from_timestamp(
        i64::try_from(since_epoch.as_secs()).unwrap_or(0),
        since_epoch.subsec_nanos(),
    )
    .unwrap_or_default()
    .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// The Unix microsecond of a stored time.
pub fn unix_micros(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp_micros())
}

/// The Unix second of a stored time.
pub fn unix_seconds(text: &str) -> Option<i64> {
    chrono::DateTime::parse_from_rfc3339(text)
        .ok()
        .map(|t| t.timestamp())
}
