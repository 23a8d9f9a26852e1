//! How a request's transaction starts: its settings in one statement (with database roles,
//! first the request's role; the schema profile's search path, `Prefer`'s time zone, and, where
//! the database may read them, the request's `request.*` settings and `db.settings`), then
//! `db.pre_request`'s call. The engine puts these before a job's own steps; nothing else writes
//! settings.
//!
//! The role is switched as PostgREST switches it, `set_config('role', $1, true)` (`SET LOCAL
//! ROLE` with the name bound, never spliced): it lasts to the transaction's end, so a pooled
//! connection (PgBouncer in transaction mode too) goes back to the connecting user. A role the
//! database lacks fails there (`22023`), a privilege the role lacks in the statements after
//! it (`42501`); [`role_error`] answers both as PostgREST does.

use rowgate_query::render::Dialect;
use rowgate_query::stmt::Sql;
use rowgate_query::Value;

use super::facts::{request_settings, RequestFacts};
use super::Context;
use crate::error::{ApiError, ErrorCode};
use crate::job::Step;

/// Puts the settings a request's transaction starts with, in one statement, and
/// `db.pre_request`'s call after them at the start of `steps`: `settings` always; the request's
/// settings and `db.settings` (PostgREST's `app.settings.*`) only where a function may read
/// them: `with_request`, or any request when there is a pre-request call or the database's
/// policies may read the claims (database roles: then the role first, so that what follows
/// runs as it).
pub fn start<'a>(
    cx: &Context<'a>,
    facts: &dyn RequestFacts,
    mut settings: Vec<(&'a str, String)>,
    with_request: bool,
    steps: &mut Vec<Step>,
) {
    let as_role = cx.policy.defers_to_database() && cx.dialect.has_transaction_settings();
    if with_request || cx.pre_request.is_some() || as_role {
        settings.extend(request_settings(facts, cx.principal));
        settings.extend(cx.app_settings.iter().map(|(k, v)| (k.as_str(), v.clone())));
    }
    if as_role {
        settings.insert(0, ("role", cx.principal.role.clone()));
    }
    let mut first: Vec<Step> = Vec::new();
    first.extend(self::settings(cx.dialect, &settings));
    if let Some(call) = cx.pre_request {
        first.push(Step::Setting(Sql {
            text: call.to_string(),
            params: Vec::new(),
        }));
    }
    steps.splice(0..0, first);
}

/// `SELECT set_config(name, value, true), …`: settings for the job's transaction (names and
/// values bound), run first and counting nothing; `None` for no settings.
pub fn settings(d: &dyn Dialect, pairs: &[(&str, String)]) -> Option<Step> {
    if pairs.is_empty() {
        return None;
    }
    let mut sql = Sql::default();
    let calls: Vec<String> = pairs
        .iter()
        .map(|(name, value)| {
            let name = rowgate_query::render::bind(d, &mut sql, Value::Text(name.to_string()));
            let value = rowgate_query::render::bind(d, &mut sql, Value::Text(value.clone()));
            format!("set_config({name}, {value}, true)")
        })
        .collect();
    sql.text = format!("SELECT {}", calls.join(", "));
    Some(Step::Setting(sql))
}

/// The settings and header of a request answered from `schema`'s profile `name` where there
/// are several: the search path led by it, then `extra_search_path` (PostgREST's), and
/// `Content-Profile` naming it.
pub fn profile_settings(
    cache: &crate::schema::SchemaCache,
    chosen: &crate::schema::SchemaCache,
    extra_search_path: &str,
) -> (Vec<(&'static str, String)>, Option<String>) {
    if cache.profiles.len() < 2 {
        return (Vec::new(), None);
    }
    let name = cache
        .others
        .iter()
        .find(|(_, c)| std::ptr::eq(c.as_ref(), chosen))
        .map_or(cache.profiles[0].clone(), |(n, _)| n.clone());
    let settings = if std::ptr::eq(cache, chosen) {
        Vec::new()
    } else {
        let quote = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
        let path: Vec<String> = std::iter::once(name.as_str())
            .chain(
                extra_search_path
                    .split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty() && *s != name),
            )
            .map(quote)
            .collect();
        vec![("search_path", path.join(", "))]
    };
    (settings, Some(name))
}

/// A database error of a request that ran as its role (database roles), answered as PostgREST
/// answers it: a role the database lacks (`22023`, `role "x" does not exist`) is the token's
/// fault, 401; a privilege the anonymous role lacks (`42501`; `as_anonymous`: no token, or one
/// of the anonymous role, as Supabase's anon key) is 401 too, with the database's words (a
/// login might help), and stays 403 for any other role. Other errors pass.
pub fn role_error(e: ApiError, as_anonymous: bool) -> ApiError {
    let sqlstate = e.sqlstate.as_deref().unwrap_or("");
    let unknown_role = sqlstate == "22023"
        && e.message.starts_with("role ")
        && e.message.ends_with("does not exist");
    if unknown_role {
        return ApiError {
            code: ErrorCode::UnknownRole,
            ..e
        };
    }
    if sqlstate == "42501" && as_anonymous {
        return ApiError {
            code: ErrorCode::LoginRequired,
            ..e
        };
    }
    e
}
