//! The console's API under `/_/api/`, for the roles in `console.roles` only: who is signed in
//! and what they may browse, the whole server's statistics, the OAuth clients (add, rotate,
//! retire, revoke; a secret is in the answer once and nowhere else), people's accounts
//! ([`super::users`]), the effective
//! configuration with `config check`'s findings, and the access log's recent lines. Tables are
//! not here: the console reads and writes them through the REST API with the admin's token, so
//! the same grants apply.

use bytes::Bytes;
use http::{header, Method, StatusCode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::app::App;
use crate::auth::clients::{self, ClientError};
use crate::auth::policy::Op;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;
use crate::request_body::RequestBody;

/// Most lines `GET /_/api/requests` answers.
const MAX_LINES: usize = 1000;

/// The longest client name the console takes.
const MAX_NAME: usize = 100;

/// One request to the console's API; `path` is what follows `/_/api/`.
pub async fn handle(
    app: &App,
    parts: &http::request::Parts,
    body: impl RequestBody,
    path: &str,
    principal: &Principal,
) -> Result<Reply, ApiError> {
    allowed(app, principal)?;
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        })
        .collect();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = &parts.method;
    let read = method == Method::GET || method == Method::HEAD;
    let only = |allow: &[&str]| Err(ApiError::method_not_allowed(method, allow));
    match segments.as_slice() {
        ["session"] if read => json_reply(StatusCode::OK, &session(app, principal)),
        ["session"] => only(&["GET", "HEAD"]),
        ["metrics"] if read => Ok(Reply::raw(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            Bytes::from(Box::pin(app.server_metrics_text()).await),
        )
        .header(header::CACHE_CONTROL, "no-store")),
        ["metrics"] => only(&["GET", "HEAD"]),
        ["clients"] if read => list_clients(app),
        ["clients"] if method == Method::POST => {
            let body = crate::request_body::read_body(&app.config.limits, parts, body).await?;
            Box::pin(add_client(app, &body)).await
        }
        ["clients"] => only(&["GET", "HEAD", "POST"]),
        ["clients", name, action] if method == Method::POST => {
            Box::pin(change_client(app, name, action)).await
        }
        ["clients", _, _] => only(&["POST"]),
        ["config"] if read => json_reply(StatusCode::OK, &configuration(app)?),
        ["config"] => only(&["GET", "HEAD"]),
        ["users"] if read => {
            Box::pin(super::users::list(app, parts.uri.query().unwrap_or(""))).await
        }
        ["users"] if method == Method::POST => {
            let body = crate::request_body::read_body(&app.config.limits, parts, body).await?;
            Box::pin(super::users::add(app, &body)).await
        }
        ["users"] => only(&["GET", "HEAD", "POST"]),
        ["users", id, action] if method == Method::POST => {
            Box::pin(super::users::act(app, id, action)).await
        }
        ["users", id, "sessions"] if read => Box::pin(super::users::sessions(app, id)).await,
        ["users", _, "sessions"] => only(&["GET", "HEAD"]),
        ["users", id, "sessions", session] if method == Method::DELETE => {
            Box::pin(super::users::end_session(app, id, session)).await
        }
        ["users", _, "sessions", _] => only(&["DELETE"]),
        ["users", _, _] => only(&["POST"]),
        ["requests"] if read => recent_requests(app, parts.uri.query().unwrap_or("")).await,
        ["requests"] => only(&["GET", "HEAD"]),
        _ => Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no such console endpoint: /_/api/{path}"),
        )),
    }
}

/// Whether `principal` may use the console (401 without a token, 403 for other roles).
fn allowed(app: &App, principal: &Principal) -> Result<(), ApiError> {
    if app.config.console.roles.contains(&principal.role) {
        return Ok(());
    }
    Err(crate::auth::policy::denied(principal)
        .details("the console is for the roles in console.roles"))
}

/// A JSON answer that no cache keeps (it may hold a secret).
fn json_reply(status: StatusCode, value: &Value) -> Result<Reply, ApiError> {
    let body = serde_json::to_vec(value)
        .map_err(|e| ApiError::new(ErrorCode::Internal, format!("encoding the answer: {e}")))?;
    Ok(Reply::raw(status, "application/json", Bytes::from(body))
        .header(header::CACHE_CONTROL, "no-store"))
}

/// Who is signed in, and every table, view and duality view their role may use, with the
/// operations and columns granted.
fn session(app: &App, principal: &Principal) -> Value {
    let claim = |name: &str| principal.claims.get(name).cloned().unwrap_or(Value::Null);
    let schema = app.db.schema();
    let policy = &app.auth.policy;
    // the operations every one of `grants` allows
    let ops_of = |grants: &[&crate::auth::policy::Grant]| -> Vec<&'static str> {
        [Op::Select, Op::Insert, Op::Update, Op::Delete]
            .into_iter()
            .filter(|op| grants.iter().all(|g| g.allows(*op)))
            .map(Op::name)
            .collect()
    };
    let mut tables = Vec::new();
    for (name, table) in &schema.tables {
        let Some(grant) = policy.described(principal, name, &schema) else {
            continue;
        };
        let columns: Vec<Value> = table
            .columns
            .iter()
            .filter(|c| grant.readable(&c.name))
            .map(|c| {
                json!({
                    "name": c.name,
                    "type": c.decl_type,
                    "json_type": c.json_type,
                    "nullable": c.nullable,
                    "key": c.pk_position > 0,
                    "writable": grant.writable(&c.name),
                })
            })
            .collect();
        tables.push(json!({
            "name": name,
            "kind": if table.is_view { "view" } else { "table" },
            "key": table.primary_key,
            "ops": ops_of(&[&grant]),
            "columns": columns,
            "realtime": app.config.realtime.tables.iter().any(|t| t == name),
        }));
    }
    for view in app.duality.views() {
        // a document is read and written with the grants of the tables it joins
        let grants: Option<Vec<_>> = view
            .tables()
            .iter()
            .map(|t| policy.described(principal, &t.table, &schema))
            .collect();
        let Some(grants) = grants else {
            continue;
        };
        let ops = ops_of(&grants.iter().map(|g| &**g).collect::<Vec<_>>());
        if ops.is_empty() {
            continue;
        }
        tables.push(json!({
            "name": view.name,
            "kind": "duality",
            "key": ["_id"],
            "ops": ops,
            "columns": [],
            "realtime": false,
        }));
    }
    json!({
        "role": principal.role,
        "client_id": claim("sub"),
        "client": app.auth.clients.load().get(claim("sub").as_str().unwrap_or("")).map(|c| c.name.clone()),
        "expires": claim("exp"),
        "version": env!("CARGO_PKG_VERSION"),
        // (the Users page shows when people's accounts are on)
        "accounts": app.accounts.is_some(),
        "database": match app.db.dialect().name() { "postgres" => "postgresql", other => other },
        "rest_prefix": app.config.rest.prefix,
        "access_log": app.access_log.is_some(),
        "tables": tables,
    })
}

/// Every client, without its secrets' hashes.
fn list_clients(app: &App) -> Result<Reply, ApiError> {
    let clients = app.auth.clients.load();
    let mut list: Vec<&clients::Client> = clients.values().collect();
    list.sort_by(|a, b| a.name.cmp(&b.name));
    json_reply(StatusCode::OK, &json!(list))
}

/// The body of `POST /_/api/clients`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct NewClient {
    name: String,
    role: String,
    ttl_s: Option<u64>,
}

/// `POST /_/api/clients`: a new client; its secret is in this answer only.
async fn add_client(app: &App, body: &[u8]) -> Result<Reply, ApiError> {
    let invalid = |message: String| ApiError::new(ErrorCode::ConsoleRequestInvalid, message);
    let new: NewClient = serde_json::from_slice(body).map_err(|e| {
        invalid(format!(
            "the body must be {{\"name\", \"role\", \"ttl_s\"?}}: {e}"
        ))
    })?;
    let name = new.name.trim();
    if name.is_empty() || name.chars().count() > MAX_NAME || name.chars().any(char::is_control) {
        return Err(invalid(format!(
            "a client's name takes 1 to {MAX_NAME} characters, none of them control characters"
        )));
    }
    let role = new.role.trim();
    if role.is_empty() || role.chars().any(char::is_control) {
        return Err(invalid("a client needs a role".into()));
    }
    let ttl = match new.ttl_s {
        Some(0) => return Err(invalid("ttl_s must be positive".into())),
        Some(ttl) => ttl.min(app.auth.config.max_token_ttl_s),
        None => app.auth.config.max_token_ttl_s,
    };
    let issued = clients::add(&app.db, &app.auth.secrets, name, role, ttl)
        .await
        .map_err(client_error)?;
    refreshed(app).await;
    json_reply(
        StatusCode::CREATED,
        &json!({
            "name": name,
            "role": role,
            "client_id": issued.client_id,
            "client_secret": issued.client_secret,
        }),
    )
}

/// `POST /_/api/clients/{name}/{rotate|retire|revoke}`.
async fn change_client(app: &App, name: &str, action: &str) -> Result<Reply, ApiError> {
    let answer = match action {
        "rotate" => {
            let issued = clients::rotate(&app.db, &app.auth.secrets, name)
                .await
                .map_err(client_error)?;
            json!({
                "name": name,
                "client_id": issued.client_id,
                "client_secret": issued.client_secret,
            })
        }
        "retire" => {
            clients::retire(&app.db, name).await.map_err(client_error)?;
            json!({ "name": name, "retired": true })
        }
        "revoke" => {
            clients::revoke(&app.db, name).await.map_err(client_error)?;
            json!({ "name": name, "revoked": true })
        }
        other => {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                format!("no such action on a client: {other:?}"),
            )
            .hint("rotate, retire or revoke"))
        }
    };
    refreshed(app).await;
    json_reply(StatusCode::OK, &answer)
}

/// Re-reads the clients at once, so this worker honours the change from its next request
/// (the others within `auth.clients_poll_ms`).
async fn refreshed(app: &App) {
    if let Err(e) = app.auth.refresh_clients(&app.db).await {
        tracing::warn!(error = %e, "re-reading the clients after a change");
    }
}

/// A change to the clients that failed, as an answer.
fn client_error(e: ClientError) -> ApiError {
    match e {
        ClientError::Invalid(message) => ApiError::new(ErrorCode::ConsoleRequestInvalid, message),
        ClientError::Exists(_) => ApiError::new(ErrorCode::UniqueViolation, e.to_string()),
        ClientError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
        ClientError::Database(e) => {
            tracing::warn!(error = %e, "changing a client");
            ApiError::new(
                ErrorCode::Unavailable,
                "the clients could not be changed; retry",
            )
        }
    }
}

/// The effective configuration (a database URL's password left out) and `config check`'s
/// findings against the schema the server holds now.
fn configuration(app: &App) -> Result<Value, ApiError> {
    let internal = |e: String| ApiError::new(ErrorCode::Internal, e);
    let mut config = serde_json::to_value(&app.config).map_err(|e| internal(e.to_string()))?;
    // `db.path` may hold a PostgreSQL URL too
    for pointer in ["/db/url", "/db/path"] {
        if let Some(url) = config.pointer_mut(pointer) {
            if let Some(text) = url.as_str() {
                *url = Value::String(without_password(text));
            }
        }
    }
    let schema = app.db.schema();
    let findings = crate::check::findings(&app.config, &app.resources.load(), Some(&schema))
        .map_err(|e| internal(format!("{e:#}")))?;
    let resources: Vec<Value> = app
        .resources
        .load()
        .list
        .iter()
        .map(|r| {
            json!({
                "path": r.path,
                "function": r.function,
                "methods": r.methods.iter().map(Method::as_str).collect::<Vec<_>>(),
                "roles": r.roles,
                "params": r.params.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({ "config": config, "findings": findings, "resources": resources }))
}

/// A PostgreSQL URL or connection string without its password.
fn without_password(url: &str) -> String {
    if let Some((scheme, rest)) = url.split_once("://") {
        let (authority, tail) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
        if let Some((user_info, host)) = authority.rsplit_once('@') {
            let user = user_info.split(':').next().unwrap_or("");
            let hidden = if user_info.contains(':') {
                ":REDACTED"
            } else {
                ""
            };
            return format!("{scheme}://{user}{hidden}@{host}{tail}");
        }
        return url.to_string();
    }
    // key=value connection strings
    if !url.to_ascii_lowercase().contains("password=") {
        return url.to_string();
    }
    url.split_whitespace()
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => "password=REDACTED".into(),
            _ => pair.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `GET /_/api/requests?q=TEXT&limit=N`: the access log's recent lines of every worker, newest
/// first, those containing TEXT (without case) only.
async fn recent_requests(app: &App, query: &str) -> Result<Reply, ApiError> {
    let mut needle = String::new();
    let mut limit = 200;
    for (key, value) in form_urlencoded::parse(query.as_bytes()) {
        match key.as_ref() {
            "q" => needle = value.to_lowercase(),
            "limit" => {
                limit = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| (1..=MAX_LINES).contains(n))
                    .ok_or_else(|| {
                        ApiError::new(
                            ErrorCode::ConsoleRequestInvalid,
                            format!("limit must be a whole number from 1 to {MAX_LINES}"),
                        )
                    })?;
            }
            _ => {}
        }
    }
    let Some(lines) = Box::pin(app.recent_requests()).await else {
        return json_reply(StatusCode::OK, &json!({ "enabled": false, "lines": [] }));
    };
    let lines: Vec<&str> = lines
        .iter()
        .rev()
        .map(|line| line.trim_end())
        .filter(|line| needle.is_empty() || line.to_lowercase().contains(&needle))
        .take(limit)
        .collect();
    json_reply(StatusCode::OK, &json!({ "enabled": true, "lines": lines }))
}

#[cfg(test)]
mod tests {
    use super::without_password;

    #[test]
    fn passwords_are_left_out() {
        assert_eq!(
            without_password("postgres://app:s3cret@db.example:5432/shop?sslmode=require"),
            "postgres://app:REDACTED@db.example:5432/shop?sslmode=require"
        );
        assert_eq!(
            without_password("postgresql://app@localhost/shop"),
            "postgresql://app@localhost/shop"
        );
        assert_eq!(
            without_password("host=/tmp dbname=shop password=s3cret user=app"),
            "host=/tmp dbname=shop password=REDACTED user=app"
        );
        assert_eq!(without_password(""), "");
        assert_eq!(without_password("data/my  shop.db"), "data/my  shop.db");
    }
}
