//! What a signed-in person is handed, in Supabase Auth's shapes: the user object, the access
//! token's claims (`sub`, `role`, `aud`, `email`, `session_id`, `aal`, `amr`, metadata, as GoTrue
//! signs them) and the session answer (`access_token`, `refresh_token`, `expires_in`,
//! `expires_at`, `user`), which supabase-js stores and refreshes as it would GoTrue's.

use serde_json::{json, Map, Value as Json};
use sha2::{Digest, Sha256};

use super::store::UserRow;
use crate::config::AccountsConfig;

/// A JSON text column as JSON (`{}` when empty or unreadable).
pub fn metadata(text: Option<&str>) -> Json {
    text.and_then(|t| serde_json::from_str::<Json>(t).ok())
        .filter(Json::is_object)
        .unwrap_or_else(|| json!({}))
}

/// The user object of `row`.
pub fn user_json(row: &UserRow) -> Json {
    let mut user = Map::new();
    let mut put = |key: &str, value: Json| {
        user.insert(key.to_string(), value);
    };
    let text = |v: &Option<String>| v.clone().map_or(Json::Null, Json::String);
    put("id", json!(row.id));
    put("aud", json!(row.aud.clone().unwrap_or_default()));
    put("role", json!(row.role.clone().unwrap_or_default()));
    put("email", json!(row.email.clone().unwrap_or_default()));
    // (GoTrue leaves out the times that are not set)
    let optional = [
        ("email_confirmed_at", &row.email_confirmed_at),
        ("invited_at", &row.invited_at),
    ];
    for (key, value) in optional {
        if value.is_some() {
            put(key, text(value));
        }
    }
    put("phone", json!(row.phone.clone().unwrap_or_default()));
    let confirmed = row
        .email_confirmed_at
        .clone()
        .or_else(|| row.phone_confirmed_at.clone());
    // (an email change waiting for its confirmation)
    let new_email = row.email_change.clone().filter(|e| !e.is_empty());
    let change_sent = new_email.as_ref().and(row.email_change_sent_at.clone());
    let optional = [
        ("phone_confirmed_at", &row.phone_confirmed_at),
        ("confirmation_sent_at", &row.confirmation_sent_at),
        ("confirmed_at", &confirmed),
        ("recovery_sent_at", &row.recovery_sent_at),
        ("new_email", &new_email),
        ("email_change_sent_at", &change_sent),
        ("last_sign_in_at", &row.last_sign_in_at),
    ];
    for (key, value) in optional {
        if value.is_some() {
            put(key, text(value));
        }
    }
    put("app_metadata", metadata(row.app_metadata.as_deref()));
    put("user_metadata", metadata(row.user_metadata.as_deref()));
    let email = row.email.clone().unwrap_or_default();
    put(
        "identities",
        json!([{
            "identity_id": row.id,
            "id": row.id,
            "user_id": row.id,
            "identity_data": {
                "email": email,
                "email_verified": row.email_confirmed_at.is_some(),
                "phone_verified": false,
                "sub": row.id,
            },
            "provider": "email",
            "last_sign_in_at": text(&row.last_sign_in_at),
            "created_at": text(&row.created_at),
            "updated_at": text(&row.updated_at),
            "email": email,
        }]),
    );
    put("created_at", text(&row.created_at));
    put("updated_at", text(&row.updated_at));
    if row.banned_until.is_some() {
        put("banned_until", text(&row.banned_until));
    }
    put("is_anonymous", json!(row.anonymous()));
    // (GoTrue leaves them out when there are none)
    let factors = row.factor_list();
    if !factors.is_empty() {
        put("factors", json!(factors));
    }
    Json::Object(user)
}

/// A session as its access tokens tell it: its id, assurance level and how it was
/// authenticated.
pub struct Assurance {
    /// The session's id.
    pub session_id: String,
    /// `aal1`, or `aal2` after a second factor.
    pub aal: &'static str,
    /// Its methods (`password`, `otp`, `totp`) with when each was used (Unix seconds),
    /// newest first.
    pub methods: Vec<(String, i64)>,
}

impl Assurance {
    /// The session `row` was read with (its session columns).
    pub fn of_row(row: &UserRow, session_id: &str) -> Assurance {
        let methods: Vec<(String, i64)> = row
            .session_methods()
            .into_iter()
            .map(|(method, at)| (method, super::unix_seconds(&at).unwrap_or(0)))
            .collect();
        Assurance {
            session_id: session_id.to_string(),
            aal: if row.session_aal2() { "aal2" } else { "aal1" },
            methods: if methods.is_empty() {
                vec![("password".into(), 0)]
            } else {
                methods
            },
        }
    }
}

/// The claims of an access token of `row`'s session, issued `now`.
pub fn claims(
    config: &AccountsConfig,
    issuer: &str,
    row: &UserRow,
    session: &Assurance,
    now: u64,
) -> Map<String, Json> {
    let role = row
        .role
        .clone()
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| config.role.clone());
    let aud = row
        .aud
        .clone()
        .filter(|a| !a.is_empty())
        .unwrap_or_else(|| config.audience.clone());
    let claims = json!({
        "iss": issuer,
        "sub": row.id,
        "aud": aud,
        "exp": now + config.jwt_exp_s,
        "iat": now,
        "email": row.email.clone().unwrap_or_default(),
        "phone": row.phone.clone().unwrap_or_default(),
        "app_metadata": metadata(row.app_metadata.as_deref()),
        "user_metadata": metadata(row.user_metadata.as_deref()),
        "role": role,
        "aal": session.aal,
        "amr": session
            .methods
            .iter()
            .map(|(method, at)| json!({"method": method, "timestamp": at}))
            .collect::<Vec<_>>(),
        "session_id": session.session_id,
        "is_anonymous": row.anonymous(),
    });
    match claims {
        Json::Object(map) => map,
        _ => Map::new(),
    }
}

/// The session answer: `access_token` (expiring at `exp`), the refresh token and the user.
pub fn session_json(access_token: &str, exp: u64, now: u64, refresh: &str, row: &UserRow) -> Json {
    json!({
        "access_token": access_token,
        "token_type": "bearer",
        "expires_in": exp.saturating_sub(now),
        "expires_at": exp,
        "refresh_token": refresh,
        "user": user_json(row),
    })
}

/// How a refresh token is stored: its SHA-256, in hex.
pub fn token_hash(token: &str) -> String {
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
