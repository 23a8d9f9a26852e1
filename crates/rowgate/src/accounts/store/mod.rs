//! Where accounts live: on PostgreSQL in Supabase Auth's own tables (`auth.users`,
//! `auth.sessions`, `auth.refresh_tokens`, `auth.identities`, `auth.mfa_amr_claims`, created in
//! its shapes when missing, so that `auth.uid()` and policies joining `auth.users` work and an
//! existing Supabase project's people can sign in); on SQLite in `_rowgate_auth_*` tables of the
//! same columns (never exposed by the REST API). Every statement is parameterised; times are
//! written and read as RFC 3339 text in UTC.
//!
//! Refresh tokens are stored as their SHA-256 (GoTrue keeps them in clear): a copy of the
//! database signs no one in.

use rowgate_query::stmt::Sql;
use rowgate_query::Value;
use serde::Deserialize;
use serde_json::Value as Json;

use crate::db::{Database, DbErrorKind};
use crate::job::{Access, Job, Step};

pub mod factors;

/// GoTrue's `instance_id` for every row it reads.
const INSTANCE: &str = "00000000-0000-0000-0000-000000000000";

/// One account as stored (the columns the API shows or checks).
#[derive(Debug, Clone, Deserialize)]
pub struct UserRow {
    /// Its id (a UUID).
    pub id: String,
    /// Its audience.
    pub aud: Option<String>,
    /// The role its tokens carry.
    pub role: Option<String>,
    /// Lowercased email.
    pub email: Option<String>,
    /// The password's hash (Argon2id, or bcrypt from Supabase).
    pub encrypted_password: Option<String>,
    /// When the email was confirmed.
    pub email_confirmed_at: Option<String>,
    /// When the account was invited.
    pub invited_at: Option<String>,
    /// The hash of the confirmation code sent last (`""` when none).
    pub confirmation_token: Option<String>,
    /// When a confirmation was last sent.
    pub confirmation_sent_at: Option<String>,
    /// The hash of the recovery or magic-link code sent last (`""` when none).
    pub recovery_token: Option<String>,
    /// When a recovery was last sent.
    pub recovery_sent_at: Option<String>,
    /// The address an email change waits to move to (`""` when none).
    pub email_change: Option<String>,
    /// The hash of the code sent to that address.
    pub email_change_token_new: Option<String>,
    /// When it was sent.
    pub email_change_sent_at: Option<String>,
    /// The last sign-in.
    pub last_sign_in_at: Option<String>,
    /// Created.
    pub created_at: Option<String>,
    /// Last changed.
    pub updated_at: Option<String>,
    /// Phone number (not used by this server; shown as Supabase shows it).
    pub phone: Option<String>,
    /// When the phone was confirmed.
    pub phone_confirmed_at: Option<String>,
    /// Banned until then.
    pub banned_until: Option<String>,
    /// Soft-deleted.
    pub deleted_at: Option<String>,
    /// `app_metadata` as JSON text.
    pub app_metadata: Option<String>,
    /// `user_metadata` as JSON text.
    pub user_metadata: Option<String>,
    /// Anonymous account (true/false, or 1/0 on SQLite).
    pub is_anonymous: Option<Json>,
    /// Its multi-factor factors, as a JSON array (text; `[]` or none when it has none).
    #[serde(default)]
    pub factors: Option<String>,
    /// With a session: how it was authenticated, newest first, as a JSON array of
    /// `{"method", "at"}` (text).
    #[serde(default)]
    pub session_amr: Option<String>,
    /// With a session: its assurance level (`aal1`, `aal2`).
    #[serde(default)]
    pub session_aal: Option<String>,
    /// With a session: whether it still exists (1 or 0).
    #[serde(default)]
    pub session_live: Option<Json>,
}

impl UserRow {
    /// Whether the account is anonymous.
    pub fn anonymous(&self) -> bool {
        matches!(&self.is_anonymous, Some(Json::Bool(true)))
            || self.is_anonymous.as_ref().and_then(Json::as_i64) == Some(1)
    }

    /// The one-time token `which` kept (`""` when none) and when it was sent.
    pub fn one_time(&self, which: OneTime) -> (&str, Option<&str>) {
        let (token, sent) = match which {
            OneTime::Confirmation => (&self.confirmation_token, &self.confirmation_sent_at),
            OneTime::Recovery => (&self.recovery_token, &self.recovery_sent_at),
            OneTime::EmailChange => (&self.email_change_token_new, &self.email_change_sent_at),
        };
        (token.as_deref().unwrap_or(""), sent.as_deref())
    }

    /// Whether the session the row was read with still exists.
    pub fn session_exists(&self) -> bool {
        self.session_live.as_ref().and_then(Json::as_i64) == Some(1)
    }

    /// The session's authentication methods, newest first: `(method, when)`.
    pub fn session_methods(&self) -> Vec<(String, String)> {
        #[derive(Deserialize)]
        struct Method {
            method: String,
            at: Option<String>,
        }
        self.session_amr
            .as_deref()
            .and_then(|text| serde_json::from_str::<Vec<Method>>(text).ok())
            .unwrap_or_default()
            .into_iter()
            .map(|m| (m.method, m.at.unwrap_or_default()))
            .collect()
    }

    /// Whether the session signed in with a second factor.
    pub fn session_aal2(&self) -> bool {
        self.session_aal.as_deref() == Some("aal2")
    }

    /// Its factors.
    pub fn factor_list(&self) -> Vec<factors::FactorRow> {
        self.factors
            .as_deref()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }
}

/// A new account.
pub struct NewUser {
    /// Its id.
    pub id: String,
    /// Lowercased email.
    pub email: String,
    /// The password's hash (`None`: no password).
    pub password_hash: Option<String>,
    /// Confirmed at once.
    pub confirmed: bool,
    /// Audience and role.
    pub aud: String,
    /// The role its tokens carry.
    pub role: String,
    /// `user_metadata`.
    pub user_metadata: Json,
    /// `app_metadata`.
    pub app_metadata: Json,
}

/// Changes to an account (`None`: unchanged).
#[derive(Default)]
pub struct UserChanges {
    /// A new email (lowercased), confirmed.
    pub email: Option<String>,
    /// A new password hash.
    pub password_hash: Option<String>,
    /// The new `user_metadata` (whole).
    pub user_metadata: Option<Json>,
    /// The new `app_metadata` (whole).
    pub app_metadata: Option<Json>,
    /// Confirm the email now.
    pub confirm: bool,
    /// A new role.
    pub role: Option<String>,
    /// Banned until (`Some(None)`: lift the ban).
    pub banned_until: Option<Option<String>>,
}

/// Which sessions a sign-out ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope<'a> {
    /// Every session of the account.
    Global,
    /// This one.
    Local(&'a str),
    /// Every other one.
    Others(&'a str),
}

/// What using a refresh token came to.
#[derive(Debug)]
pub enum Refreshed {
    /// A new token of the session (the used one is revoked).
    Rotated {
        /// The session.
        session_id: String,
        /// The account.
        user_id: String,
    },
    /// No such token (never issued, or its session ended).
    Unknown,
    /// Used before, outside the reuse interval: taken for theft, its session is ended now
    /// (with every token of it).
    Reused,
}

/// Which of an account's one-time tokens (the hash of the code an email carries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OneTime {
    /// A new account's confirmation.
    Confirmation,
    /// A password recovery or a magic link (as GoTrue keeps them).
    Recovery,
    /// A change of address, sent to the new one.
    EmailChange,
}

impl OneTime {
    /// Its column and the column of when it was sent.
    fn columns(self) -> (&'static str, &'static str) {
        match self {
            OneTime::Confirmation => ("confirmation_token", "confirmation_sent_at"),
            OneTime::Recovery => ("recovery_token", "recovery_sent_at"),
            OneTime::EmailChange => ("email_change_token_new", "email_change_sent_at"),
        }
    }
}

/// The tables, named for the backend.
pub struct Store {
    postgres: bool,
    users: &'static str,
    sessions: &'static str,
    refresh_tokens: &'static str,
    identities: &'static str,
    amr: &'static str,
    factors: &'static str,
    challenges: &'static str,
}

/// Collects one statement's parameters.
struct Binder {
    postgres: bool,
    params: Vec<Value>,
}

impl Binder {
    fn new(store: &Store) -> Binder {
        Binder {
            postgres: store.postgres,
            params: Vec::new(),
        }
    }

    /// The placeholder of `value`, cast to `cast` on PostgreSQL (whose parameters travel as
    /// text).
    fn bind(&mut self, value: Value, cast: &str) -> String {
        self.params.push(value);
        let n = self.params.len();
        if self.postgres {
            format!("${n}::{cast}")
        } else {
            format!("?{n}")
        }
    }

    fn text(&mut self, value: &str, cast: &str) -> String {
        self.bind(Value::Text(value.to_string()), cast)
    }

    fn optional(&mut self, value: Option<&str>, cast: &str) -> String {
        self.bind(
            value.map_or(Value::Null, |v| Value::Text(v.to_string())),
            cast,
        )
    }

    fn sql(self, text: String) -> Sql {
        Sql {
            text,
            params: self.params,
        }
    }
}

/// A [`Step::Value`] read of a count, as a number.
fn counted(value: Option<Vec<u8>>) -> Option<u64> {
    let text = String::from_utf8(value?).ok()?;
    text.trim_matches('"').parse().ok()
}

/// A database failure, worded for the log.
fn failed(what: &str, e: crate::db::DbError) -> anyhow::Error {
    anyhow::anyhow!("accounts: cannot {what}: {}", e.message)
}

impl Store {
    /// The tables of `db`'s backend.
    pub fn new(db: &Database) -> Store {
        if db.dialect().has_schemas() {
            Store {
                postgres: true,
                users: "auth.users",
                sessions: "auth.sessions",
                refresh_tokens: "auth.refresh_tokens",
                identities: "auth.identities",
                amr: "auth.mfa_amr_claims",
                factors: "auth.mfa_factors",
                challenges: "auth.mfa_challenges",
            }
        } else {
            Store {
                postgres: false,
                users: "_rowgate_auth_users",
                sessions: "_rowgate_auth_sessions",
                refresh_tokens: "_rowgate_auth_refresh_tokens",
                identities: "_rowgate_auth_identities",
                amr: "_rowgate_auth_amr_claims",
                factors: "_rowgate_auth_mfa_factors",
                challenges: "_rowgate_auth_mfa_challenges",
            }
        }
    }

    /// Creates the tables that are missing (on PostgreSQL in Supabase Auth's shapes; an
    /// existing Supabase database's are used as they are).
    pub async fn ensure_tables(&self, db: &Database) -> anyhow::Result<()> {
        let tables = if self.postgres {
            [POSTGRES_TABLES, factors::POSTGRES_TABLES]
        } else {
            [SQLITE_TABLES, factors::SQLITE_TABLES]
        };
        let statements: Vec<String> = tables.concat().iter().map(|s| s.to_string()).collect();
        let steps = statements
            .into_iter()
            .map(|text| {
                Step::Execute(Sql {
                    text,
                    params: vec![],
                })
            })
            .collect();
        db.run(Job::new(Access::Write, steps))
            .await
            .map_err(|e| failed("create the account tables", e))?;
        if !self.postgres {
            // (sessions made before second factors lack their column)
            let has_column = Sql {
                text: format!(
                    "SELECT count(*) FROM pragma_table_info('{}') WHERE name = 'factor_id'",
                    self.sessions
                ),
                params: vec![],
            };
            let out = db
                .run(Job::new(Access::Read, vec![Step::Value(has_column)]).on_primary())
                .await
                .map_err(|e| failed("read the sessions' columns", e))?;
            if counted(out.value) == Some(0) {
                let add = Sql {
                    text: format!("ALTER TABLE {} ADD COLUMN factor_id TEXT", self.sessions),
                    params: vec![],
                };
                db.run(Job::new(Access::Write, vec![Step::Execute(add)]))
                    .await
                    .map_err(|e| failed("add the sessions' factor column", e))?;
            }
        }
        Ok(())
    }

    /// A timestamp column as RFC 3339 text in UTC.
    fn time(&self, column: &str) -> String {
        if self.postgres {
            format!("to_char({column} AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')")
        } else {
            column.to_string()
        }
    }

    /// The columns of [`UserRow`], of the table aliased `u`.
    fn user_columns(&self) -> String {
        let t = |c: &str| format!("{} AS {c}", self.time(&format!("u.{c}")));
        let (id, app, user) = if self.postgres {
            (
                "u.id::text AS id",
                "u.raw_app_meta_data::text AS app_metadata",
                "u.raw_user_meta_data::text AS user_metadata",
            )
        } else {
            (
                "u.id AS id",
                "u.raw_app_meta_data AS app_metadata",
                "u.raw_user_meta_data AS user_metadata",
            )
        };
        [
            id.to_string(),
            "u.aud AS aud".into(),
            "u.role AS role".into(),
            "u.email AS email".into(),
            "u.encrypted_password AS encrypted_password".into(),
            t("email_confirmed_at"),
            t("invited_at"),
            "u.confirmation_token AS confirmation_token".into(),
            "u.recovery_token AS recovery_token".into(),
            t("confirmation_sent_at"),
            t("recovery_sent_at"),
            "u.email_change AS email_change".into(),
            "u.email_change_token_new AS email_change_token_new".into(),
            t("email_change_sent_at"),
            t("last_sign_in_at"),
            t("created_at"),
            t("updated_at"),
            "u.phone AS phone".into(),
            t("phone_confirmed_at"),
            t("banned_until"),
            t("deleted_at"),
            app.into(),
            user.into(),
            "u.is_anonymous AS is_anonymous".into(),
            format!("{} AS factors", self.factors_of_user()),
        ]
        .join(", ")
    }

    async fn users(&self, db: &Database, sql: Sql) -> anyhow::Result<Vec<UserRow>> {
        let out = db
            .run(Job::new(Access::Read, vec![Step::Rows { sql, shape: None }]).on_primary())
            .await
            .map_err(|e| failed("read the accounts", e))?;
        Ok(serde_json::from_slice(&out.rows)?)
    }

    /// The first account (the oldest) meeting `condition` (of the table aliased `u`, its
    /// parameters bound as it is written).
    async fn first_user(
        &self,
        db: &Database,
        condition: impl FnOnce(&mut Binder) -> String,
    ) -> anyhow::Result<Option<UserRow>> {
        let mut b = Binder::new(self);
        let condition = condition(&mut b);
        let text = format!(
            "SELECT {} FROM {} u WHERE {condition} ORDER BY u.created_at LIMIT 1",
            self.user_columns(),
            self.users
        );
        Ok(self.users(db, b.sql(text)).await?.into_iter().next())
    }

    /// The account with `email` (lowercased), if any.
    pub async fn by_email(&self, db: &Database, email: &str) -> anyhow::Result<Option<UserRow>> {
        self.first_user(db, |b| {
            format!("lower(u.email) = {}", b.text(email, "text"))
        })
        .await
    }

    /// The account waiting to move to `email` (lowercased), if any.
    pub async fn by_new_email(
        &self,
        db: &Database,
        email: &str,
    ) -> anyhow::Result<Option<UserRow>> {
        self.first_user(db, |b| {
            format!("lower(u.email_change) = {}", b.text(email, "text"))
        })
        .await
    }

    /// The account `id`, if any; with `session`, what [`UserRow::session_exists`] and the
    /// session's sign-in method tell.
    pub async fn by_id(
        &self,
        db: &Database,
        id: &str,
        session: Option<&str>,
    ) -> anyhow::Result<Option<UserRow>> {
        let mut b = Binder::new(self);
        let id = b.text(id, "uuid");
        let mut columns = self.user_columns();
        if let Some(session) = session {
            let s1 = b.text(session, "uuid");
            let s2 = b.text(session, "uuid");
            let s3 = b.text(session, "uuid");
            let methods = if self.postgres {
                format!(
                    "(SELECT json_agg(json_build_object('method', a.authentication_method, 'at', {at}) \
                     ORDER BY a.created_at DESC)::text FROM {amr} a WHERE a.session_id = {s1})",
                    amr = self.amr,
                    at = self.time("a.created_at"),
                )
            } else {
                format!(
                    "(SELECT json_group_array(json_object('method', m.authentication_method, 'at', m.created_at)) \
                     FROM (SELECT a.authentication_method, a.created_at FROM {amr} a \
                     WHERE a.session_id = {s1} ORDER BY a.created_at DESC) m)",
                    amr = self.amr,
                )
            };
            let aal = if self.postgres {
                "s.aal::text"
            } else {
                "s.aal"
            };
            columns.push_str(&format!(
                ", {methods} AS session_amr, \
                 (SELECT {aal} FROM {sessions} s WHERE s.id = {s2} AND s.user_id = u.id) AS session_aal, \
                 (SELECT count(*) FROM {sessions} s WHERE s.id = {s3} AND s.user_id = u.id) AS session_live",
                sessions = self.sessions,
            ));
        }
        let text = format!("SELECT {columns} FROM {} u WHERE u.id = {id}", self.users);
        Ok(self.users(db, b.sql(text)).await?.into_iter().next())
    }

    /// Adds an account (and its email identity); `None` when the email is taken.
    pub async fn insert(
        &self,
        db: &Database,
        user: &NewUser,
        now: &str,
    ) -> anyhow::Result<Option<UserRow>> {
        let mut b = Binder::new(self);
        let instance = if self.postgres {
            format!("'{INSTANCE}'::uuid, ")
        } else {
            String::new()
        };
        let instance_column = if self.postgres { "instance_id, " } else { "" };
        let values = [
            b.text(&user.id, "uuid"),
            b.text(&user.aud, "text"),
            b.text(&user.role, "text"),
            b.text(&user.email, "text"),
            b.optional(user.password_hash.as_deref(), "text"),
            b.optional(user.confirmed.then_some(now), "timestamptz"),
            b.text(&user.app_metadata.to_string(), "jsonb"),
            b.text(&user.user_metadata.to_string(), "jsonb"),
            b.text(now, "timestamptz"),
            b.text(now, "timestamptz"),
        ];
        let insert = b.sql(format!(
            "INSERT INTO {} ({instance_column}id, aud, role, email, encrypted_password, \
             email_confirmed_at, raw_app_meta_data, raw_user_meta_data, created_at, updated_at, \
             confirmation_token, recovery_token, email_change_token_new, email_change, \
             email_change_token_current, phone_change, phone_change_token, \
             reauthentication_token, is_anonymous) \
             VALUES ({instance}{}, '', '', '', '', '', '', '', '', FALSE)",
            self.users,
            values.join(", ")
        ));
        let mut b = Binder::new(self);
        let identity_data = serde_json::json!({
            "sub": user.id, "email": user.email,
            "email_verified": user.confirmed, "phone_verified": false,
        });
        let values = [
            b.text(&user.id, "uuid"),
            b.text(&user.id, "text"),
            b.text(&user.id, "uuid"),
            b.text(&identity_data.to_string(), "jsonb"),
            b.text(now, "timestamptz"),
            b.text(now, "timestamptz"),
        ];
        let email_column = if self.postgres { "" } else { ", email" };
        let email_value = if self.postgres {
            String::new()
        } else {
            format!(", {}", b.text(&user.email, "text"))
        };
        let identity = b.sql(format!(
            "INSERT INTO {} (id, provider_id, user_id, identity_data, provider, created_at, updated_at{email_column}) \
             VALUES ({}, {}, {}, {}, 'email', {}, {}{email_value})",
            self.identities, values[0], values[1], values[2], values[3], values[4], values[5]
        ));
        match db
            .run(Job::new(
                Access::Write,
                vec![Step::Execute(insert), Step::Execute(identity)],
            ))
            .await
        {
            Ok(_) => self.by_id(db, &user.id, None).await,
            Err(e) if e.kind == DbErrorKind::UniqueViolation => Ok(None),
            Err(e) => Err(failed("add the account", e)),
        }
    }

    /// Applies `changes` to account `id`; `Ok(false)` when the new email is taken.
    pub async fn update(
        &self,
        db: &Database,
        id: &str,
        changes: &UserChanges,
        now: &str,
    ) -> anyhow::Result<bool> {
        let mut b = Binder::new(self);
        let mut set = vec![format!("updated_at = {}", b.text(now, "timestamptz"))];
        if let Some(email) = &changes.email {
            set.push(format!("email = {}", b.text(email, "text")));
        }
        if let Some(hash) = &changes.password_hash {
            set.push(format!("encrypted_password = {}", b.text(hash, "text")));
        }
        if let Some(meta) = &changes.user_metadata {
            set.push(format!(
                "raw_user_meta_data = {}",
                b.text(&meta.to_string(), "jsonb")
            ));
        }
        if let Some(meta) = &changes.app_metadata {
            set.push(format!(
                "raw_app_meta_data = {}",
                b.text(&meta.to_string(), "jsonb")
            ));
        }
        if changes.confirm {
            set.push(format!(
                "email_confirmed_at = coalesce(email_confirmed_at, {})",
                b.text(now, "timestamptz")
            ));
        }
        if let Some(role) = &changes.role {
            set.push(format!("role = {}", b.text(role, "text")));
        }
        if let Some(until) = &changes.banned_until {
            set.push(format!(
                "banned_until = {}",
                b.optional(until.as_deref(), "timestamptz")
            ));
        }
        let id = b.text(id, "uuid");
        let update = b.sql(format!(
            "UPDATE {} SET {} WHERE id = {id}",
            self.users,
            set.join(", ")
        ));
        match db
            .run(Job::new(Access::Write, vec![Step::Execute(update)]))
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind == DbErrorKind::UniqueViolation => Ok(false),
            Err(e) => Err(failed("change the account", e)),
        }
    }

    /// Keeps `hash` as account `id`'s one-time token `which`, sent `now` (for an email change,
    /// to `new_email`, which waits in `email_change`).
    pub async fn set_one_time(
        &self,
        db: &Database,
        id: &str,
        which: OneTime,
        hash: &str,
        new_email: Option<&str>,
        now: &str,
    ) -> anyhow::Result<()> {
        let (token, sent) = which.columns();
        let mut b = Binder::new(self);
        let (hash, at) = (b.text(hash, "text"), b.text(now, "timestamptz"));
        let waiting = match new_email {
            Some(email) => format!(", email_change = {}", b.text(email, "text")),
            None => String::new(),
        };
        let id = b.text(id, "uuid");
        let sql = b.sql(format!(
            "UPDATE {} SET {token} = {hash}, {sent} = {at}{waiting} WHERE id = {id}",
            self.users
        ));
        db.run(Job::new(Access::Write, vec![Step::Execute(sql)]))
            .await
            .map_err(|e| failed("keep the one-time token", e))?;
        Ok(())
    }

    /// The account whose one-time token `which` is `hash`, if any.
    pub async fn by_one_time(
        &self,
        db: &Database,
        which: OneTime,
        hash: &str,
    ) -> anyhow::Result<Option<UserRow>> {
        let (token, _) = which.columns();
        self.first_user(db, |b| {
            format!("u.{token} = {} AND u.{token} <> ''", b.text(hash, "text"))
        })
        .await
    }

    /// Uses account `id`'s one-time token `which` if it is still `hash` (once: a second use
    /// finds it gone), confirming the email; whether it was.
    pub async fn use_one_time(
        &self,
        db: &Database,
        id: &str,
        which: OneTime,
        hash: &str,
        now: &str,
    ) -> anyhow::Result<bool> {
        let (token, _) = which.columns();
        let mut b = Binder::new(self);
        let (at, confirmed) = (b.text(now, "timestamptz"), b.text(now, "timestamptz"));
        let moved = if which == OneTime::EmailChange {
            "email = email_change, email_change = '', "
        } else {
            ""
        };
        let (user, hash) = (b.text(id, "uuid"), b.text(hash, "text"));
        let sql = b.sql(format!(
            "UPDATE {} SET {moved}{token} = '', updated_at = {at}, \
             email_confirmed_at = coalesce(email_confirmed_at, {confirmed}) \
             WHERE id = {user} AND {token} = {hash}",
            self.users
        ));
        let out = match db
            .run(Job::new(Access::Write, vec![Step::Execute(sql)]))
            .await
        {
            Ok(out) => out,
            // (the new address was taken meanwhile)
            Err(e) if e.kind == DbErrorKind::UniqueViolation => return Ok(false),
            Err(e) => return Err(failed("use the one-time token", e)),
        };
        if out.affected != 1 {
            return Ok(false);
        }
        if which == OneTime::EmailChange {
            // the email identity follows (on PostgreSQL its `email` column is generated)
            let mut b = Binder::new(self);
            let email = format!(
                "(SELECT u.email FROM {} u WHERE u.id = {})",
                self.users,
                b.text(id, "uuid")
            );
            let data = if self.postgres {
                format!("jsonb_set(identity_data, '{{email}}', to_jsonb({email}))")
            } else {
                format!("json_set(identity_data, '$.email', {email}), email = {email}")
            };
            let (at, user) = (b.text(now, "timestamptz"), b.text(id, "uuid"));
            let sql = b.sql(format!(
                "UPDATE {} SET identity_data = {data}, updated_at = {at} \
                 WHERE user_id = {user} AND provider = 'email'",
                self.identities
            ));
            db.run(Job::new(Access::Write, vec![Step::Execute(sql)]))
                .await
                .map_err(|e| failed("move the email identity", e))?;
        }
        Ok(true)
    }

    /// Records a sign-in of account `id` now.
    pub async fn signed_in(&self, db: &Database, id: &str, now: &str) -> anyhow::Result<()> {
        let mut b = Binder::new(self);
        let at = b.text(now, "timestamptz");
        let id = b.text(id, "uuid");
        let sql = b.sql(format!(
            "UPDATE {} SET last_sign_in_at = {at} WHERE id = {id}",
            self.users
        ));
        db.run(Job::new(Access::Write, vec![Step::Execute(sql)]))
            .await
            .map_err(|e| failed("record the sign-in", e))?;
        Ok(())
    }

    /// Removes account `id` with its sessions, tokens and identities; whether it existed.
    pub async fn delete(&self, db: &Database, id: &str) -> anyhow::Result<bool> {
        let mut steps = self.end_sessions_steps(id, Scope::Global);
        steps.extend(self.remove_factors_steps(id).into_iter().map(Step::Execute));
        let mut b = Binder::new(self);
        let user = b.text(id, "uuid");
        steps.push(Step::Execute(b.sql(format!(
            "DELETE FROM {} WHERE user_id = {user}",
            self.identities
        ))));
        let mut b = Binder::new(self);
        let user = b.text(id, "uuid");
        steps.push(Step::Execute(
            b.sql(format!("DELETE FROM {} WHERE id = {user}", self.users)),
        ));
        let out = db
            .run(Job::new(Access::Write, steps))
            .await
            .map_err(|e| failed("delete the account", e))?;
        Ok(out.affected > 0)
    }

    /// A page of accounts (newest first), optionally those whose email contains `filter`,
    /// and how many there are in all.
    pub async fn list(
        &self,
        db: &Database,
        aud: &str,
        filter: Option<&str>,
        page: u64,
        per_page: u64,
    ) -> anyhow::Result<(Vec<UserRow>, u64)> {
        let condition = |b: &mut Binder| {
            let mut text = format!("u.aud = {}", b.text(aud, "text"));
            if let Some(filter) = filter {
                let pattern = format!(
                    "%{}%",
                    filter
                        .to_lowercase()
                        .replace('\\', "\\\\")
                        .replace('%', "\\%")
                        .replace('_', "\\_")
                );
                text.push_str(&format!(
                    " AND lower(u.email) LIKE {} ESCAPE '\\'",
                    b.text(&pattern, "text")
                ));
            }
            text
        };
        let mut b = Binder::new(self);
        let filter_sql = condition(&mut b);
        let limit = b.bind(Value::Int(per_page as i64), "bigint");
        let offset = b.bind(
            Value::Int(page.saturating_sub(1).saturating_mul(per_page) as i64),
            "bigint",
        );
        let rows = b.sql(format!(
            "SELECT {} FROM {} u WHERE {filter_sql} ORDER BY u.created_at DESC, u.id LIMIT {limit} OFFSET {offset}",
            self.user_columns(),
            self.users
        ));
        let mut b = Binder::new(self);
        let filter_sql = condition(&mut b);
        let count = b.sql(format!(
            "SELECT count(*) FROM {} u WHERE {filter_sql}",
            self.users
        ));
        let users = self.users(db, rows).await?;
        let out = db
            .run(Job::new(Access::Read, vec![Step::Value(count)]).on_primary())
            .await
            .map_err(|e| failed("count the accounts", e))?;
        let total = counted(out.value).unwrap_or(0);
        Ok((users, total))
    }

    /// Starts a session of account `user` signed in by `method`, with the refresh token
    /// whose hash is `token_hash`.
    pub async fn start_session(
        &self,
        db: &Database,
        session: &SessionStart<'_>,
        now: &str,
    ) -> anyhow::Result<()> {
        let mut b = Binder::new(self);
        let values = [
            b.text(session.id, "uuid"),
            b.text(session.user_id, "uuid"),
            b.text(now, "timestamptz"),
            b.text(now, "timestamptz"),
            b.optional(session.user_agent, "text"),
            b.optional(session.ip, "inet"),
        ];
        let aal = if self.postgres {
            "'aal1'::auth.aal_level"
        } else {
            "'aal1'"
        };
        let insert_session = b.sql(format!(
            "INSERT INTO {} (id, user_id, created_at, updated_at, aal, user_agent, ip) VALUES ({}, {}, {}, {}, {aal}, {}, {})",
            self.sessions, values[0], values[1], values[2], values[3], values[4], values[5]
        ));
        let insert_token =
            self.token_insert(session.token_hash, session.user_id, None, session.id, now);
        let mut b = Binder::new(self);
        let values = [
            b.text(&crate::accounts::new_uuid(), "uuid"),
            b.text(session.id, "uuid"),
            b.text(now, "timestamptz"),
            b.text(now, "timestamptz"),
            b.text(session.method, "text"),
        ];
        let insert_amr = b.sql(format!(
            "INSERT INTO {} (id, session_id, created_at, updated_at, authentication_method) VALUES ({})",
            self.amr,
            values.join(", ")
        ));
        let mut b = Binder::new(self);
        let at = b.text(now, "timestamptz");
        let id = b.text(session.user_id, "uuid");
        let signed_in = b.sql(format!(
            "UPDATE {} SET last_sign_in_at = {at} WHERE id = {id}",
            self.users
        ));
        db.run(Job::new(
            Access::Write,
            vec![
                Step::Execute(insert_session),
                Step::Execute(insert_token),
                Step::Execute(insert_amr),
                Step::Execute(signed_in),
            ],
        ))
        .await
        .map_err(|e| failed("start the session", e))?;
        Ok(())
    }

    fn token_insert(
        &self,
        hash: &str,
        user_id: &str,
        parent: Option<&str>,
        session_id: &str,
        now: &str,
    ) -> Sql {
        let mut b = Binder::new(self);
        let values = [
            b.text(hash, "text"),
            b.text(user_id, "text"),
            b.text(now, "timestamptz"),
            b.text(now, "timestamptz"),
            b.optional(parent, "text"),
            b.text(session_id, "uuid"),
        ];
        let (instance_column, instance) = if self.postgres {
            ("instance_id, ", format!("'{INSTANCE}'::uuid, "))
        } else {
            ("", String::new())
        };
        b.sql(format!(
            "INSERT INTO {} ({instance_column}token, user_id, revoked, created_at, updated_at, parent, session_id) \
             VALUES ({instance}{}, {}, FALSE, {}, {}, {}, {})",
            self.refresh_tokens, values[0], values[1], values[2], values[3], values[4], values[5]
        ))
    }

    /// Uses the refresh token whose hash is `used`: revokes it and stores `fresh` (a hash) as
    /// its child, in one transaction. A token used before gets a sibling within
    /// `reuse_interval_s` of its use; later, its whole session is ended.
    pub async fn refresh(
        &self,
        db: &Database,
        used: &str,
        fresh: &str,
        reuse_interval_s: u64,
        now: &str,
    ) -> anyhow::Result<Refreshed> {
        let rotated = if self.postgres {
            let mut b = Binder::new(self);
            let (at, old, new) = (
                b.text(now, "timestamptz"),
                b.text(used, "text"),
                b.text(fresh, "text"),
            );
            // (a data-modifying WITH must stand at the top: run as is, then read)
            let rotate = b.sql(format!(
                "WITH used AS (UPDATE {rt} SET revoked = TRUE, updated_at = {at} \
                 WHERE token = {old} AND revoked = FALSE RETURNING user_id, session_id) \
                 INSERT INTO {rt} (instance_id, token, user_id, revoked, created_at, updated_at, parent, session_id) \
                 SELECT '{INSTANCE}'::uuid, {new}, user_id, FALSE, {at}, {at}, {old}, session_id FROM used",
                rt = self.refresh_tokens
            ));
            vec![Step::Execute(rotate), self.made(fresh)]
        } else {
            // (SQLite's writes are one at a time: the child is made, then its parent revoked)
            let mut b = Binder::new(self);
            let (new, at, old) = (
                b.text(fresh, "text"),
                b.text(now, "timestamptz"),
                b.text(used, "text"),
            );
            let child = b.sql(format!(
                "INSERT INTO {rt} (token, user_id, revoked, created_at, updated_at, parent, session_id) \
                 SELECT {new}, user_id, FALSE, {at}, {at}, {old}, session_id FROM {rt} \
                 WHERE token = {old} AND revoked = FALSE",
                rt = self.refresh_tokens
            ));
            let mut b = Binder::new(self);
            let (at, old) = (b.text(now, "timestamptz"), b.text(used, "text"));
            let revoke = b.sql(format!(
                "UPDATE {} SET revoked = TRUE, updated_at = {at} WHERE token = {old} AND revoked = FALSE",
                self.refresh_tokens
            ));
            vec![
                Step::Execute(child),
                Step::Execute(revoke),
                self.made(fresh),
            ]
        };
        if let Some(done) = self.rotation(db, rotated).await? {
            return Ok(done);
        }
        // revoked already, or unknown
        let mut b = Binder::new(self);
        let old = b.text(used, "text");
        let session_id = if self.postgres {
            "session_id::text"
        } else {
            "session_id"
        };
        let look = b.sql(format!(
            "SELECT {session_id} AS session_id, user_id, {} AS updated_at FROM {} WHERE token = {old}",
            self.time("updated_at"),
            self.refresh_tokens
        ));
        let out = db
            .run(
                Job::new(
                    Access::Read,
                    vec![Step::Rows {
                        sql: look,
                        shape: None,
                    }],
                )
                .on_primary(),
            )
            .await
            .map_err(|e| failed("read the refresh token", e))?;
        #[derive(Deserialize)]
        struct Used {
            session_id: String,
            user_id: String,
            updated_at: Option<String>,
        }
        let found: Vec<Used> = serde_json::from_slice(&out.rows)?;
        let Some(found) = found.into_iter().next() else {
            return Ok(Refreshed::Unknown);
        };
        let micros = |t: &str| crate::accounts::unix_micros(t).unwrap_or(0);
        let since_use = micros(now) - found.updated_at.as_deref().map_or(0, micros);
        if since_use < (reuse_interval_s as i64).saturating_mul(1_000_000) {
            // a sibling: two tabs refreshing at once, or an answer lost on the way
            let sibling =
                self.token_insert(fresh, &found.user_id, Some(used), &found.session_id, now);
            let steps = vec![Step::Execute(sibling), self.made(fresh)];
            if let Some(done) = self.rotation(db, steps).await? {
                return Ok(done);
            }
            return Ok(Refreshed::Unknown);
        }
        // taken for theft: the session ends, with every token of it
        let steps = self.end_sessions_steps(&found.user_id, Scope::Local(&found.session_id));
        db.run(Job::new(Access::Write, steps))
            .await
            .map_err(|e| failed("end the session of a reused refresh token", e))?;
        Ok(Refreshed::Reused)
    }

    /// The step that reads the session and account of the refresh token `fresh` (a hash),
    /// once made.
    fn made(&self, fresh: &str) -> Step {
        let mut b = Binder::new(self);
        let new = b.text(fresh, "text");
        let session_id = if self.postgres {
            "session_id::text"
        } else {
            "session_id"
        };
        Step::Rows {
            sql: b.sql(format!(
                "SELECT {session_id} AS session_id, user_id FROM {} WHERE token = {new}",
                self.refresh_tokens
            )),
            shape: None,
        }
    }

    /// Runs a rotation's steps; the session and account of the new token, if one was made.
    async fn rotation(&self, db: &Database, steps: Vec<Step>) -> anyhow::Result<Option<Refreshed>> {
        #[derive(Deserialize)]
        struct Made {
            session_id: String,
            user_id: String,
        }
        let out = db
            .run(Job::new(Access::Write, steps))
            .await
            .map_err(|e| failed("rotate the refresh token", e))?;
        let made: Vec<Made> = serde_json::from_slice(&out.rows)?;
        Ok(made.into_iter().next().map(|m| Refreshed::Rotated {
            session_id: m.session_id,
            user_id: m.user_id,
        }))
    }

    /// The steps that end account `user`'s sessions of `scope`, with their refresh tokens.
    fn end_sessions_steps(&self, user: &str, scope: Scope<'_>) -> Vec<Step> {
        let which = |b: &mut Binder| {
            let mut text = format!("user_id = {}", b.text(user, "uuid"));
            match scope {
                Scope::Global => {}
                Scope::Local(id) => text.push_str(&format!(" AND id = {}", b.text(id, "uuid"))),
                Scope::Others(id) => text.push_str(&format!(" AND id <> {}", b.text(id, "uuid"))),
            }
            text
        };
        let mut steps = Vec::new();
        for (table, column) in [
            (self.refresh_tokens, "session_id"),
            (self.amr, "session_id"),
        ] {
            let mut b = Binder::new(self);
            let sessions = which(&mut b);
            steps.push(Step::Execute(b.sql(format!(
                "DELETE FROM {table} WHERE {column} IN (SELECT id FROM {} WHERE {sessions})",
                self.sessions
            ))));
        }
        let mut b = Binder::new(self);
        let sessions = which(&mut b);
        steps.push(Step::Execute(
            b.sql(format!("DELETE FROM {} WHERE {sessions}", self.sessions)),
        ));
        steps
    }

    /// Account `user`'s sessions, newest first.
    pub async fn sessions(&self, db: &Database, user: &str) -> anyhow::Result<Vec<SessionRow>> {
        let mut b = Binder::new(self);
        let user = b.text(user, "uuid");
        let (id, ip, aal) = if self.postgres {
            ("s.id::text", "host(s.ip)", "s.aal::text")
        } else {
            ("s.id", "s.ip", "s.aal")
        };
        let sql = b.sql(format!(
            "SELECT {id} AS id, {} AS created_at, {} AS updated_at, s.user_agent AS user_agent, \
             {ip} AS ip, {aal} AS aal, \
             (SELECT a.authentication_method FROM {amr} a WHERE a.session_id = s.id \
              ORDER BY a.updated_at DESC LIMIT 1) AS method \
             FROM {} s WHERE s.user_id = {user} ORDER BY s.created_at DESC",
            self.time("s.created_at"),
            self.time("s.updated_at"),
            self.sessions,
            amr = self.amr,
        ));
        let out = db
            .run(Job::new(Access::Read, vec![Step::Rows { sql, shape: None }]).on_primary())
            .await
            .map_err(|e| failed("read the sessions", e))?;
        Ok(serde_json::from_slice(&out.rows)?)
    }

    /// Ends account `user`'s sessions of `scope`.
    pub async fn end_sessions(
        &self,
        db: &Database,
        user: &str,
        scope: Scope<'_>,
    ) -> anyhow::Result<()> {
        db.run(Job::new(
            Access::Write,
            self.end_sessions_steps(user, scope),
        ))
        .await
        .map_err(|e| failed("end the sessions", e))?;
        Ok(())
    }
}

/// One session as the console lists it.
#[derive(Debug, Clone, serde::Serialize, Deserialize)]
pub struct SessionRow {
    /// Its id.
    pub id: String,
    /// When it began.
    pub created_at: Option<String>,
    /// When it was last changed.
    pub updated_at: Option<String>,
    /// The client's `User-Agent` when it began.
    pub user_agent: Option<String>,
    /// The client's address when it began.
    pub ip: Option<String>,
    /// Its assurance level.
    pub aal: Option<String>,
    /// How it signed in (`password`, `otp`).
    pub method: Option<String>,
}

/// What starts a session.
pub struct SessionStart<'a> {
    /// The session's id.
    pub id: &'a str,
    /// The account.
    pub user_id: &'a str,
    /// How it signed in (`password`, …).
    pub method: &'a str,
    /// The first refresh token's hash.
    pub token_hash: &'a str,
    /// The client's `User-Agent`.
    pub user_agent: Option<&'a str>,
    /// The client's address.
    pub ip: Option<&'a str>,
}

/// Supabase Auth's tables as its migrations leave them (the columns this server and GoTrue
/// read), created when missing.
const POSTGRES_TABLES: &[&str] = &[
    "CREATE SCHEMA IF NOT EXISTS auth",
    "DO $t$ BEGIN CREATE TYPE auth.aal_level AS ENUM ('aal1', 'aal2', 'aal3'); \
     EXCEPTION WHEN duplicate_object THEN NULL; END $t$",
    "CREATE TABLE IF NOT EXISTS auth.users (
       instance_id uuid NULL,
       id uuid NOT NULL PRIMARY KEY,
       aud varchar(255) NULL,
       role varchar(255) NULL,
       email varchar(255) NULL,
       encrypted_password varchar(255) NULL,
       email_confirmed_at timestamptz NULL,
       invited_at timestamptz NULL,
       confirmation_token varchar(255) NULL,
       confirmation_sent_at timestamptz NULL,
       recovery_token varchar(255) NULL,
       recovery_sent_at timestamptz NULL,
       email_change_token_new varchar(255) NULL,
       email_change varchar(255) NULL,
       email_change_sent_at timestamptz NULL,
       last_sign_in_at timestamptz NULL,
       raw_app_meta_data jsonb NULL,
       raw_user_meta_data jsonb NULL,
       is_super_admin bool NULL,
       created_at timestamptz NULL,
       updated_at timestamptz NULL,
       phone text NULL UNIQUE DEFAULT NULL,
       phone_confirmed_at timestamptz NULL DEFAULT NULL,
       phone_change text NULL DEFAULT '',
       phone_change_token varchar(255) NULL DEFAULT '',
       phone_change_sent_at timestamptz NULL DEFAULT NULL,
       confirmed_at timestamptz GENERATED ALWAYS AS (LEAST(email_confirmed_at, phone_confirmed_at)) STORED,
       email_change_token_current varchar(255) NULL DEFAULT '',
       email_change_confirm_status smallint DEFAULT 0
         CHECK (email_change_confirm_status >= 0 AND email_change_confirm_status <= 2),
       banned_until timestamptz NULL,
       reauthentication_token varchar(255) NULL DEFAULT '',
       reauthentication_sent_at timestamptz NULL DEFAULT NULL,
       is_sso_user boolean NOT NULL DEFAULT false,
       deleted_at timestamptz NULL,
       is_anonymous boolean NOT NULL DEFAULT false
     )",
    "CREATE UNIQUE INDEX IF NOT EXISTS users_email_partial_key ON auth.users (email) WHERE is_sso_user = false",
    "CREATE INDEX IF NOT EXISTS users_instance_id_email_idx ON auth.users (instance_id, lower(email))",
    "CREATE TABLE IF NOT EXISTS auth.sessions (
       id uuid NOT NULL PRIMARY KEY,
       user_id uuid NOT NULL REFERENCES auth.users(id) ON DELETE CASCADE,
       created_at timestamptz NULL,
       updated_at timestamptz NULL,
       factor_id uuid NULL,
       aal auth.aal_level NULL,
       not_after timestamptz NULL,
       refreshed_at timestamp without time zone NULL,
       user_agent text NULL,
       ip inet NULL,
       tag text NULL
     )",
    "CREATE INDEX IF NOT EXISTS sessions_user_id_idx ON auth.sessions (user_id)",
    "CREATE TABLE IF NOT EXISTS auth.refresh_tokens (
       instance_id uuid NULL,
       id bigserial NOT NULL PRIMARY KEY,
       token varchar(255) NULL CONSTRAINT refresh_tokens_token_unique UNIQUE,
       user_id varchar(255) NULL,
       revoked bool NULL,
       created_at timestamptz NULL,
       updated_at timestamptz NULL,
       parent varchar(255) NULL,
       session_id uuid NULL REFERENCES auth.sessions(id) ON DELETE CASCADE
     )",
    "CREATE INDEX IF NOT EXISTS refresh_tokens_session_id_revoked_idx ON auth.refresh_tokens (session_id, revoked)",
    "CREATE INDEX IF NOT EXISTS refresh_tokens_parent_idx ON auth.refresh_tokens (parent)",
    "CREATE TABLE IF NOT EXISTS auth.identities (
       provider_id text NOT NULL,
       user_id uuid NOT NULL REFERENCES auth.users(id) ON DELETE CASCADE,
       identity_data jsonb NOT NULL,
       provider text NOT NULL,
       last_sign_in_at timestamptz NULL,
       created_at timestamptz NULL,
       updated_at timestamptz NULL,
       email text GENERATED ALWAYS AS (lower(identity_data->>'email')) STORED,
       id uuid NOT NULL PRIMARY KEY,
       CONSTRAINT identities_provider_id_provider_unique UNIQUE (provider_id, provider)
     )",
    "CREATE INDEX IF NOT EXISTS identities_user_id_idx ON auth.identities (user_id)",
    "CREATE TABLE IF NOT EXISTS auth.mfa_amr_claims (
       session_id uuid NOT NULL REFERENCES auth.sessions(id) ON DELETE CASCADE,
       created_at timestamptz NOT NULL,
       updated_at timestamptz NOT NULL,
       authentication_method text NOT NULL,
       id uuid NOT NULL PRIMARY KEY,
       CONSTRAINT mfa_amr_claims_session_id_authentication_method_pkey UNIQUE (session_id, authentication_method)
     )",
];

/// The same columns on SQLite.
const SQLITE_TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS _rowgate_auth_users (
       id TEXT NOT NULL PRIMARY KEY, aud TEXT, role TEXT, email TEXT UNIQUE,
       encrypted_password TEXT, email_confirmed_at TEXT, invited_at TEXT,
       confirmation_token TEXT DEFAULT '', confirmation_sent_at TEXT,
       recovery_token TEXT DEFAULT '', recovery_sent_at TEXT,
       email_change_token_new TEXT DEFAULT '', email_change TEXT DEFAULT '',
       email_change_sent_at TEXT, email_change_token_current TEXT DEFAULT '',
       last_sign_in_at TEXT, raw_app_meta_data TEXT, raw_user_meta_data TEXT,
       created_at TEXT, updated_at TEXT, phone TEXT UNIQUE, phone_confirmed_at TEXT,
       phone_change TEXT DEFAULT '', phone_change_token TEXT DEFAULT '',
       reauthentication_token TEXT DEFAULT '', banned_until TEXT, deleted_at TEXT,
       is_anonymous INTEGER NOT NULL DEFAULT 0
     )",
    "CREATE TABLE IF NOT EXISTS _rowgate_auth_sessions (
       id TEXT NOT NULL PRIMARY KEY, user_id TEXT NOT NULL, created_at TEXT, updated_at TEXT,
       aal TEXT, not_after TEXT, refreshed_at TEXT, user_agent TEXT, ip TEXT, factor_id TEXT
     )",
    "CREATE INDEX IF NOT EXISTS _rowgate_auth_sessions_user ON _rowgate_auth_sessions (user_id)",
    "CREATE TABLE IF NOT EXISTS _rowgate_auth_refresh_tokens (
       id INTEGER PRIMARY KEY AUTOINCREMENT, token TEXT UNIQUE, user_id TEXT, revoked INTEGER,
       created_at TEXT, updated_at TEXT, parent TEXT, session_id TEXT
     )",
    "CREATE INDEX IF NOT EXISTS _rowgate_auth_refresh_tokens_session ON _rowgate_auth_refresh_tokens (session_id, revoked)",
    "CREATE TABLE IF NOT EXISTS _rowgate_auth_identities (
       id TEXT NOT NULL PRIMARY KEY, provider_id TEXT NOT NULL, user_id TEXT NOT NULL,
       identity_data TEXT NOT NULL, provider TEXT NOT NULL, last_sign_in_at TEXT,
       created_at TEXT, updated_at TEXT, email TEXT, UNIQUE (provider_id, provider)
     )",
    "CREATE TABLE IF NOT EXISTS _rowgate_auth_amr_claims (
       id TEXT NOT NULL PRIMARY KEY, session_id TEXT NOT NULL, created_at TEXT NOT NULL,
       updated_at TEXT NOT NULL, authentication_method TEXT NOT NULL,
       UNIQUE (session_id, authentication_method)
     )",
];
