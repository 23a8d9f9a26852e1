//! Second factors where accounts live: Supabase Auth's `auth.mfa_factors` and
//! `auth.mfa_challenges` on PostgreSQL (created in its shapes when missing), and
//! `_rowgate_auth_mfa_*` tables of the same columns on SQLite; and what a verified code does to
//! a session (`aal2`, a `totp` entry in its `amr`).
//!
//! A code is accepted once (RFC 6238 §5.2, which GoTrue leaves to chance): the time step it
//! belongs to is kept in the verified challenge's `otp_code`, and a challenge is verified only
//! while no other challenge of its factor holds that step or a later one. The factor's row is
//! locked first, so two verifications of one factor never race.

use rowgate_query::stmt::Sql;
use serde::{Deserialize, Serialize};

use super::{counted, failed, Binder, Store};
use crate::db::{Database, DbErrorKind};
use crate::job::{Access, Job, Step};

/// One factor, as the user object lists it (GoTrue's fields) and with its secret.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FactorRow {
    /// Its id.
    pub id: String,
    /// Its name, unique per account.
    #[serde(default)]
    pub friendly_name: Option<String>,
    /// `totp`.
    pub factor_type: String,
    /// `unverified` until its first code is verified, then `verified`.
    pub status: String,
    /// Created.
    pub created_at: Option<String>,
    /// Last changed.
    pub updated_at: Option<String>,
    /// The TOTP secret (base32), never shown after enrolment.
    #[serde(default, skip_serializing)]
    pub secret: Option<String>,
}

impl FactorRow {
    /// Whether a code of it was verified once.
    pub fn verified(&self) -> bool {
        self.status == "verified"
    }
}

/// A new factor.
pub struct NewFactor<'a> {
    /// Its id.
    pub id: &'a str,
    /// The account.
    pub user_id: &'a str,
    /// Its name.
    pub friendly_name: &'a str,
    /// The TOTP secret (base32).
    pub secret: &'a str,
}

/// One challenge of a factor.
#[derive(Debug, Clone, Deserialize)]
pub struct ChallengeRow {
    /// The client address it was made from.
    pub ip: Option<String>,
    /// When it was made.
    pub created_at: Option<String>,
    /// When a code answered it.
    pub verified_at: Option<String>,
}

/// A code that matched: what accepting it touches.
pub struct Accepted<'a> {
    /// The account.
    pub user_id: &'a str,
    /// The factor.
    pub factor_id: &'a str,
    /// The challenge it answers.
    pub challenge_id: &'a str,
    /// The code's time step.
    pub step: u64,
    /// The session that rises to `aal2`.
    pub session_id: &'a str,
    /// The session's next refresh token (a hash); its others are revoked.
    pub token_hash: &'a str,
}

/// Supabase Auth's factor tables as its migrations leave them (the columns read here).
pub(super) const POSTGRES_TABLES: &[&str] = &[
    "DO $t$ BEGIN CREATE TYPE auth.factor_type AS ENUM ('totp', 'webauthn', 'phone'); \
     EXCEPTION WHEN duplicate_object THEN NULL; END $t$",
    "DO $t$ BEGIN CREATE TYPE auth.factor_status AS ENUM ('unverified', 'verified'); \
     EXCEPTION WHEN duplicate_object THEN NULL; END $t$",
    "CREATE TABLE IF NOT EXISTS auth.mfa_factors (
       id uuid NOT NULL PRIMARY KEY,
       user_id uuid NOT NULL REFERENCES auth.users(id) ON DELETE CASCADE,
       friendly_name text NULL,
       factor_type auth.factor_type NOT NULL,
       status auth.factor_status NOT NULL,
       created_at timestamptz NOT NULL,
       updated_at timestamptz NOT NULL,
       secret text NULL,
       phone text NULL,
       last_challenged_at timestamptz NULL UNIQUE
     )",
    "CREATE UNIQUE INDEX IF NOT EXISTS mfa_factors_user_friendly_name_unique \
     ON auth.mfa_factors (friendly_name, user_id) WHERE trim(friendly_name) <> ''",
    "CREATE INDEX IF NOT EXISTS factor_id_created_at_idx ON auth.mfa_factors (user_id, created_at)",
    "CREATE TABLE IF NOT EXISTS auth.mfa_challenges (
       id uuid NOT NULL PRIMARY KEY,
       factor_id uuid NOT NULL REFERENCES auth.mfa_factors(id) ON DELETE CASCADE,
       created_at timestamptz NOT NULL,
       verified_at timestamptz NULL,
       ip_address inet NOT NULL,
       otp_code text NULL
     )",
    "CREATE INDEX IF NOT EXISTS mfa_challenge_created_at_idx ON auth.mfa_challenges (created_at DESC)",
];

/// The same columns on SQLite.
pub(super) const SQLITE_TABLES: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS _rowgate_auth_mfa_factors (
       id TEXT NOT NULL PRIMARY KEY, user_id TEXT NOT NULL, friendly_name TEXT,
       factor_type TEXT NOT NULL, status TEXT NOT NULL, created_at TEXT NOT NULL,
       updated_at TEXT NOT NULL, secret TEXT, phone TEXT, last_challenged_at TEXT,
       UNIQUE (user_id, friendly_name)
     )",
    "CREATE TABLE IF NOT EXISTS _rowgate_auth_mfa_challenges (
       id TEXT NOT NULL PRIMARY KEY, factor_id TEXT NOT NULL, created_at TEXT NOT NULL,
       verified_at TEXT, ip_address TEXT NOT NULL, otp_code TEXT
     )",
    "CREATE INDEX IF NOT EXISTS _rowgate_auth_mfa_challenges_factor ON _rowgate_auth_mfa_challenges (factor_id)",
];

/// A time step as kept in `otp_code`: zero-padded, so that text compares as numbers do.
fn step_text(step: u64) -> String {
    format!("totp:{step:020}")
}

impl Store {
    /// The expression listing the factors of the account aliased `u`, as a JSON array (text).
    pub(super) fn factors_of_user(&self) -> String {
        let (created, updated) = (self.time("f.created_at"), self.time("f.updated_at"));
        if self.postgres {
            format!(
                "(SELECT json_agg(json_build_object('id', f.id, 'friendly_name', f.friendly_name, \
                 'factor_type', f.factor_type, 'status', f.status, 'created_at', {created}, \
                 'updated_at', {updated}, 'secret', f.secret) ORDER BY f.created_at)::text \
                 FROM {} f WHERE f.user_id = u.id)",
                self.factors
            )
        } else {
            format!(
                "(SELECT json_group_array(json_object('id', f.id, 'friendly_name', f.friendly_name, \
                 'factor_type', f.factor_type, 'status', f.status, 'created_at', f.created_at, \
                 'updated_at', f.updated_at, 'secret', f.secret)) \
                 FROM (SELECT * FROM {} WHERE user_id = u.id ORDER BY created_at) f)",
                self.factors
            )
        }
    }

    /// Adds an unverified factor, after removing the account's unverified factors made before
    /// `stale_before`; `Ok(false)` when its name is taken.
    pub async fn add_factor(
        &self,
        db: &Database,
        factor: &NewFactor<'_>,
        stale_before: &str,
        now: &str,
    ) -> anyhow::Result<bool> {
        let mut b = Binder::new(self);
        let (user, before) = (
            b.text(factor.user_id, "uuid"),
            b.text(stale_before, "timestamptz"),
        );
        let stale = format!(
            "SELECT id FROM {} WHERE user_id = {user} AND status = 'unverified' AND created_at < {before}",
            self.factors
        );
        let forget_challenges = b.sql(format!(
            "DELETE FROM {} WHERE factor_id IN ({stale})",
            self.challenges
        ));
        let mut b = Binder::new(self);
        let (user, before) = (
            b.text(factor.user_id, "uuid"),
            b.text(stale_before, "timestamptz"),
        );
        let forget = b.sql(format!(
            "DELETE FROM {} WHERE user_id = {user} AND status = 'unverified' AND created_at < {before}",
            self.factors
        ));
        let mut b = Binder::new(self);
        let values = [
            b.text(factor.id, "uuid"),
            b.text(factor.user_id, "uuid"),
            b.text(factor.friendly_name, "text"),
            b.text(factor.secret, "text"),
            b.text(now, "timestamptz"),
            b.text(now, "timestamptz"),
        ];
        let (kind, status) = if self.postgres {
            (
                "'totp'::auth.factor_type",
                "'unverified'::auth.factor_status",
            )
        } else {
            ("'totp'", "'unverified'")
        };
        let insert = b.sql(format!(
            "INSERT INTO {} (id, user_id, friendly_name, secret, created_at, updated_at, factor_type, status) \
             VALUES ({}, {kind}, {status})",
            self.factors,
            values.join(", ")
        ));
        let steps = vec![
            Step::Execute(forget_challenges),
            Step::Execute(forget),
            Step::Execute(insert),
        ];
        match db.run(Job::new(Access::Write, steps)).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind == DbErrorKind::UniqueViolation => Ok(false),
            Err(e) => Err(failed("add the factor", e)),
        }
    }

    /// Makes challenge `id` of `factor` from the client address `ip`.
    pub async fn add_challenge(
        &self,
        db: &Database,
        id: &str,
        factor: &str,
        ip: &str,
        now: &str,
    ) -> anyhow::Result<()> {
        let mut b = Binder::new(self);
        let values = [
            b.text(id, "uuid"),
            b.text(factor, "uuid"),
            b.text(now, "timestamptz"),
            b.text(ip, "inet"),
        ];
        let sql = b.sql(format!(
            "INSERT INTO {} (id, factor_id, created_at, ip_address) VALUES ({})",
            self.challenges,
            values.join(", ")
        ));
        db.run(Job::new(Access::Write, vec![Step::Execute(sql)]))
            .await
            .map_err(|e| failed("make the challenge", e))?;
        Ok(())
    }

    /// Challenge `id` of `factor`, if any.
    pub async fn challenge(
        &self,
        db: &Database,
        id: &str,
        factor: &str,
    ) -> anyhow::Result<Option<ChallengeRow>> {
        let mut b = Binder::new(self);
        let (id, factor) = (b.text(id, "uuid"), b.text(factor, "uuid"));
        let ip = if self.postgres {
            "host(c.ip_address)"
        } else {
            "c.ip_address"
        };
        let sql = b.sql(format!(
            "SELECT {ip} AS ip, {} AS created_at, {} AS verified_at FROM {} c \
             WHERE c.id = {id} AND c.factor_id = {factor}",
            self.time("c.created_at"),
            self.time("c.verified_at"),
            self.challenges
        ));
        let out = db
            .run(Job::new(Access::Read, vec![Step::Rows { sql, shape: None }]).on_primary())
            .await
            .map_err(|e| failed("read the challenge", e))?;
        let rows: Vec<ChallengeRow> = serde_json::from_slice(&out.rows)?;
        Ok(rows.into_iter().next())
    }

    /// Accepts a matching code: its challenge is verified unless a code of the same or a later
    /// time step was accepted for the factor before (`Ok(false)`: a replay). Then the factor
    /// is verified, the session rises to `aal2` with `totp` in its methods and a new refresh
    /// token, the account's `aal1` sessions end (as GoTrue's) and its other unverified factors
    /// go.
    pub async fn accept_code(
        &self,
        db: &Database,
        code: &Accepted<'_>,
        now: &str,
    ) -> anyhow::Result<bool> {
        let step = step_text(code.step);
        // the factor's row is locked until the challenge is settled
        let mut b = Binder::new(self);
        let factor = b.text(code.factor_id, "uuid");
        let lock = b.sql(format!(
            "UPDATE {} SET updated_at = updated_at WHERE id = {factor}",
            self.factors
        ));
        let mut b = Binder::new(self);
        let (at, claimed, id, factor, earlier) = (
            b.text(now, "timestamptz"),
            b.text(&step, "text"),
            b.text(code.challenge_id, "uuid"),
            b.text(code.factor_id, "uuid"),
            b.text(&step, "text"),
        );
        let claim = b.sql(format!(
            "UPDATE {c} SET verified_at = {at}, otp_code = {claimed} \
             WHERE id = {id} AND factor_id = {factor} AND verified_at IS NULL \
             AND NOT EXISTS (SELECT 1 FROM {c} p WHERE p.factor_id = {factor} \
             AND p.verified_at IS NOT NULL AND p.otp_code >= {earlier})",
            c = self.challenges
        ));
        let mut b = Binder::new(self);
        let (id, claimed) = (b.text(code.challenge_id, "uuid"), b.text(&step, "text"));
        let settled = b.sql(format!(
            "SELECT count(*) FROM {} WHERE id = {id} AND otp_code = {claimed}",
            self.challenges
        ));
        let out = db
            .run(Job::new(
                Access::Write,
                vec![
                    Step::Execute(lock),
                    Step::Execute(claim),
                    Step::Value(settled),
                ],
            ))
            .await
            .map_err(|e| failed("verify the challenge", e))?;
        if counted(out.value) != Some(1) {
            return Ok(false);
        }
        db.run(Job::new(Access::Write, self.second_factor_steps(code, now)))
            .await
            .map_err(|e| failed("raise the session to aal2", e))?;
        Ok(true)
    }

    /// What a verified code changes (see [`Store::accept_code`]).
    fn second_factor_steps(&self, code: &Accepted<'_>, now: &str) -> Vec<Step> {
        let (aal2, verified) = if self.postgres {
            ("'aal2'::auth.aal_level", "'verified'::auth.factor_status")
        } else {
            ("'aal2'", "'verified'")
        };
        let mut steps = Vec::new();
        let mut b = Binder::new(self);
        let (at, factor) = (b.text(now, "timestamptz"), b.text(code.factor_id, "uuid"));
        steps.push(b.sql(format!(
            "UPDATE {} SET status = {verified}, updated_at = {at} WHERE id = {factor}",
            self.factors
        )));
        let mut b = Binder::new(self);
        let (factor, at, session) = (
            b.text(code.factor_id, "uuid"),
            b.text(now, "timestamptz"),
            b.text(code.session_id, "uuid"),
        );
        steps.push(b.sql(format!(
            "UPDATE {} SET aal = {aal2}, factor_id = {factor}, updated_at = {at} WHERE id = {session}",
            self.sessions
        )));
        let mut b = Binder::new(self);
        let values = [
            b.text(&crate::accounts::new_uuid(), "uuid"),
            b.text(code.session_id, "uuid"),
            b.text(now, "timestamptz"),
            b.text(now, "timestamptz"),
        ];
        let at = b.text(now, "timestamptz");
        steps.push(b.sql(format!(
            "INSERT INTO {} (id, session_id, created_at, updated_at, authentication_method) \
             VALUES ({}, 'totp') ON CONFLICT (session_id, authentication_method) \
             DO UPDATE SET created_at = {at}, updated_at = {at}",
            self.amr,
            values.join(", ")
        )));
        let mut b = Binder::new(self);
        let (at, session) = (b.text(now, "timestamptz"), b.text(code.session_id, "uuid"));
        steps.push(b.sql(format!(
            "UPDATE {} SET revoked = TRUE, updated_at = {at} WHERE session_id = {session} AND revoked = FALSE",
            self.refresh_tokens
        )));
        steps.push(self.token_insert(code.token_hash, code.user_id, None, code.session_id, now));
        // the account's sessions below aal2 end, and its other unverified factors go
        for table in [self.refresh_tokens, self.amr] {
            let mut b = Binder::new(self);
            let user = b.text(code.user_id, "uuid");
            steps.push(b.sql(format!(
                "DELETE FROM {table} WHERE session_id IN \
                 (SELECT id FROM {} WHERE user_id = {user} AND (aal IS NULL OR aal < {aal2}))",
                self.sessions
            )));
        }
        let mut b = Binder::new(self);
        let user = b.text(code.user_id, "uuid");
        steps.push(b.sql(format!(
            "DELETE FROM {} WHERE user_id = {user} AND (aal IS NULL OR aal < {aal2})",
            self.sessions
        )));
        let mut b = Binder::new(self);
        let (user, factor) = (b.text(code.user_id, "uuid"), b.text(code.factor_id, "uuid"));
        let others = format!(
            "SELECT id FROM {} WHERE user_id = {user} AND status = 'unverified' AND id <> {factor}",
            self.factors
        );
        steps.push(b.sql(format!(
            "DELETE FROM {} WHERE factor_id IN ({others})",
            self.challenges
        )));
        let mut b = Binder::new(self);
        let (user, factor) = (b.text(code.user_id, "uuid"), b.text(code.factor_id, "uuid"));
        steps.push(b.sql(format!(
            "DELETE FROM {} WHERE user_id = {user} AND status = 'unverified' AND id <> {factor}",
            self.factors
        )));
        steps.into_iter().map(Step::Execute).collect()
    }

    /// Removes factor `id` of account `user` with its challenges; the sessions it raised fall
    /// back to `aal1` (their `totp` method forgotten).
    pub async fn remove_factor(&self, db: &Database, user: &str, id: &str) -> anyhow::Result<()> {
        let aal1 = if self.postgres {
            "'aal1'::auth.aal_level"
        } else {
            "'aal1'"
        };
        let mut b = Binder::new(self);
        let factor = b.text(id, "uuid");
        let forget_method = b.sql(format!(
            "DELETE FROM {} WHERE authentication_method = 'totp' AND session_id IN \
             (SELECT id FROM {} WHERE factor_id = {factor})",
            self.amr, self.sessions
        ));
        let mut b = Binder::new(self);
        let factor = b.text(id, "uuid");
        let lower = b.sql(format!(
            "UPDATE {} SET aal = {aal1}, factor_id = NULL WHERE factor_id = {factor}",
            self.sessions
        ));
        let mut b = Binder::new(self);
        let factor = b.text(id, "uuid");
        let challenges = b.sql(format!(
            "DELETE FROM {} WHERE factor_id = {factor}",
            self.challenges
        ));
        let mut b = Binder::new(self);
        let (factor, user) = (b.text(id, "uuid"), b.text(user, "uuid"));
        let remove = b.sql(format!(
            "DELETE FROM {} WHERE id = {factor} AND user_id = {user}",
            self.factors
        ));
        db.run(Job::new(
            Access::Write,
            vec![
                Step::Execute(remove),
                Step::Execute(forget_method),
                Step::Execute(lower),
                Step::Execute(challenges),
            ],
        ))
        .await
        .map_err(|e| failed("remove the factor", e))?;
        Ok(())
    }

    /// The steps that remove every factor of account `user` (SQLite has no cascades).
    pub(super) fn remove_factors_steps(&self, user: &str) -> Vec<Sql> {
        let mut b = Binder::new(self);
        let owner = b.text(user, "uuid");
        let challenges = b.sql(format!(
            "DELETE FROM {} WHERE factor_id IN (SELECT id FROM {} WHERE user_id = {owner})",
            self.challenges, self.factors
        ));
        let mut b = Binder::new(self);
        let owner = b.text(user, "uuid");
        let factors = b.sql(format!(
            "DELETE FROM {} WHERE user_id = {owner}",
            self.factors
        ));
        vec![challenges, factors]
    }
}
