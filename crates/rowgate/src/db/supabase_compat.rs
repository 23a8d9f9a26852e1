//! `rowgate db supabase-compat`: what a Supabase project's database has and a plain PostgreSQL
//! lacks, for its schema, GRANTs and row-level security policies to work under Rowgate's
//! database roles (`auth.database_roles`): the roles `anon`, `authenticated` and
//! `service_role` (which bypasses row-level security, as in Supabase), each granted to the user
//! Rowgate connects as so that it may switch to them; and the helpers policies call,
//! `auth.uid()`, `auth.role()` and `auth.jwt()`, reading the claims the request's transaction
//! sets (`request.jwt.claims`), as Supabase defines them. What exists already is left as it
//! is; running it again changes nothing.

use anyhow::Context as _;

/// Each role Supabase's policies name, created when missing.
const ROLES: &[(&str, &str)] = &[
    ("anon", "NOLOGIN NOINHERIT"),
    ("authenticated", "NOLOGIN NOINHERIT"),
    ("service_role", "NOLOGIN NOINHERIT BYPASSRLS"),
];

/// The `auth` schema's helpers, as Supabase's migrations define them (created when missing).
const HELPERS: &str = r#"
CREATE SCHEMA IF NOT EXISTS auth;
DO $compat$
BEGIN
  IF to_regprocedure('auth.uid()') IS NULL THEN
    CREATE FUNCTION auth.uid() RETURNS uuid LANGUAGE sql STABLE AS $fn$
      SELECT coalesce(
        nullif(current_setting('request.jwt.claim.sub', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')
      )::uuid
    $fn$;
  END IF;
  IF to_regprocedure('auth.role()') IS NULL THEN
    CREATE FUNCTION auth.role() RETURNS text LANGUAGE sql STABLE AS $fn$
      SELECT coalesce(
        nullif(current_setting('request.jwt.claim.role', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'role')
      )::text
    $fn$;
  END IF;
  IF to_regprocedure('auth.jwt()') IS NULL THEN
    CREATE FUNCTION auth.jwt() RETURNS jsonb LANGUAGE sql STABLE AS $fn$
      SELECT coalesce(
        nullif(current_setting('request.jwt.claim', true), ''),
        nullif(current_setting('request.jwt.claims', true), '')
      )::jsonb
    $fn$;
  END IF;
END
$compat$;
GRANT USAGE ON SCHEMA auth TO anon, authenticated, service_role;
GRANT EXECUTE ON FUNCTION auth.uid(), auth.role(), auth.jwt() TO anon, authenticated, service_role;
GRANT USAGE ON SCHEMA public TO anon, authenticated, service_role;
"#;

/// The statements that create what is missing, the roles granted to `authenticator` (a role
/// name, quoted here; `None`: the connecting user). Roles belong to the whole cluster: one
/// created meanwhile by another database's set-up is taken as it is.
pub fn statements(authenticator: Option<&str>) -> String {
    let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let member = authenticator.map_or("CURRENT_USER".to_string(), quote);
    let mut sql = String::new();
    for (role, options) in ROLES {
        sql.push_str(&format!(
            "DO $r$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{role}') THEN \
             CREATE ROLE {role} {options}; END IF; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $r$;\n\
             GRANT {role} TO {member};\n"
        ));
    }
    sql.push_str(HELPERS);
    sql
}

/// Runs [`statements`] on the database at `url`, in one transaction.
pub async fn install(url: &str, authenticator: Option<&str>) -> anyhow::Result<()> {
    let (client, connection) = super::postgres_connect::connect(url).await?;
    let connection = tokio::spawn(connection);
    let sql = format!("BEGIN;\n{}\nCOMMIT;", statements(authenticator));
    client.batch_execute(&sql).await.context(
        "cannot create Supabase's roles and auth helpers (connect as a superuser, or a role with CREATEROLE that owns the auth schema)",
    )?;
    drop(client);
    let _ = connection.await;
    Ok(())
}
