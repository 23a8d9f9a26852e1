//! Database roles (`auth.database_roles`, PostgreSQL): each request's transaction runs as the
//! role its token names ([`crate::engine::transaction::start`]). What is checked once, at
//! start: the connecting user may switch to the anonymous role (else every request without a
//! token would fail), and which of the roles `[[grants]]` name it may not switch to (each a
//! warning: their requests will answer 401 `22023`).

use anyhow::bail;
use rowgate_query::stmt::Sql;
use rowgate_query::Value;

use crate::config::Config;
use crate::db::Database;
use crate::job::{Access, Job, Step};

/// The roles the connecting user may `SET ROLE` to (its own and those it is a member of).
pub async fn switchable(db: &Database) -> anyhow::Result<Vec<String>> {
    let sql = Sql {
        text: "SELECT coalesce(json_agg(rolname ORDER BY rolname), '[]') FROM pg_roles \
               WHERE pg_has_role(current_user, oid, 'MEMBER')"
            .into(),
        params: Vec::<Value>::new(),
    };
    let output = db
        .run(Job::new(Access::Read, vec![Step::Value(sql)]).on_primary())
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the database's roles: {}", e.message))?;
    Ok(serde_json::from_slice(&output.value.unwrap_or_default()).unwrap_or_default())
}

/// Refuses to start when the connecting user may not switch to the anonymous role; warns of
/// each role `[[grants]]` names that it may not switch to.
pub async fn check(config: &Config, db: &Database) -> anyhow::Result<()> {
    if !config.auth.database_roles {
        return Ok(());
    }
    let roles = switchable(db).await?;
    let anon = &config.auth.anon_role;
    if !roles.contains(anon) {
        bail!(
            "auth.database_roles: the database user Rowgate connects as may not switch to the anonymous role {anon:?} (auth.anon_role): create it and let the user switch to it, e.g. CREATE ROLE {anon} NOLOGIN; GRANT {anon} TO <the user in db.url>"
        );
    }
    let mut named: Vec<&str> = config.grants.iter().map(|g| g.role.as_str()).collect();
    named.sort_unstable();
    named.dedup();
    for role in named.into_iter().filter(|r| !roles.iter().any(|x| x == r)) {
        tracing::warn!(
            "auth.database_roles: [[grants]] name the role {role:?}, which the database user may not switch to: its requests answer 401 (22023)"
        );
    }
    Ok(())
}
