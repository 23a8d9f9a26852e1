//! Custom resources: endpoints declared in configuration, each a path template, HTTP method(s),
//! SQL with named parameters bound from the path, query string or body, and the shape of the
//! answer (rows, one row, a value, nothing, or a minijinja template).
//!
//! [`compile`] checks every declaration once (paths, parameters and their types and defaults,
//! the SQL against the database, templates) so that a bad configuration fails `rowgate config
//! check` and start-up, never a request. [`handle`] serves a request; the compiled set is swapped
//! whole on SIGHUP (see [`crate::app::App::reload_resources`]).

pub mod declare;
mod params;
mod sql;

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use bytes::Bytes;
use http::{header, request::Parts, HeaderValue, Method, StatusCode};
use hyper::body::Incoming;
use rowgate_query::stmt::Sql;
use rowgate_query::Value;
use rusqlite::Connection;
use serde_json::Value as Json;

use crate::api::execute;
use crate::api::respond::{etag, Reply};
use crate::app::App;
use crate::auth::policy::denied;
use crate::auth::Principal;
use crate::config::Config;
use crate::error::{ApiError, ErrorCode};
use crate::job::{Access, Job, Output, Step};
use declare::{ParamType, ResourceConfig, ResourceFile, Shape, Source};
use params::Raw;

/// Paths a resource may not take: the REST prefix is added from the configuration.
const RESERVED: &[&str] = &[
    "/oauth",
    "/realtime",
    "/live",
    "/ready",
    "/metrics",
    "/openapi.json",
    "/ords",
];

/// Most template instructions one rendering may run (bounds runaway templates).
const TEMPLATE_FUEL: u64 = 50_000_000;

/// The compiled custom resources, routed by path.
pub struct Resources {
    router: matchit::Router<usize>,
    /// Per routed path: the resource index for each method.
    routes: Vec<Vec<(Method, usize)>>,
    /// Every resource, in declaration order.
    pub list: Vec<Resource>,
    templates: minijinja::Environment<'static>,
}

/// One compiled resource.
pub struct Resource {
    /// Path template (`/teams/{id}/drivers`).
    pub path: String,
    /// Methods it answers (GET also answers HEAD).
    pub methods: Vec<Method>,
    /// Its parameters.
    pub params: Vec<Param>,
    /// The answer's shape.
    pub shape: Shape,
    statements: Vec<sql::Numbered>,
    template: Option<String>,
    content_type: HeaderValue,
    cache_control: Option<HeaderValue>,
    etag: bool,
    /// Whether a statement may write (then it runs in the writer's transaction).
    writes: bool,
    /// The roles that may call it (everyone when `None`).
    pub roles: Option<Vec<String>>,
}

/// One parameter of a resource.
pub struct Param {
    /// Name (`:name` in the SQL).
    pub name: String,
    /// Where its value comes from.
    pub source: Source,
    /// Its type.
    pub kind: ParamType,
    /// The value used when the request has none.
    pub default: Option<Value>,
    /// Whether a request without a value (and no default) is refused.
    pub required: bool,
    /// The token claim a `claim` parameter takes.
    pub claim: String,
}

impl Resource {
    /// The content type of its answers.
    pub fn content_type(&self) -> &str {
        self.content_type.to_str().unwrap_or_default()
    }
}

/// Every declared resource: the config's `[[resources]]`, then the `*.toml` files of
/// `resources_dir` in name order.
pub fn declarations(config: &Config) -> anyhow::Result<Vec<ResourceConfig>> {
    let mut all = config.resources.clone();
    if !config.resources_dir.as_os_str().is_empty() {
        for (path, text) in config.dir.toml_files(&config.resources_dir)? {
            let file: ResourceFile = toml::from_str(&text)
                .with_context(|| format!("in resource file {}", path.display()))?;
            all.extend(file.resources);
        }
    }
    Ok(all)
}

/// Checks and compiles the configured resources. With a connection, every statement is prepared
/// against the database (unknown tables and syntax errors fail here); without one (`config check`
/// before the database exists) only the SQL's parameters are checked.
pub fn compile(
    config: &Config,
    dialect: &dyn rowgate_query::render::Dialect,
    conn: Option<&Connection>,
) -> anyhow::Result<Resources> {
    let declared = declarations(config)?;
    let mut templates = minijinja::Environment::new();
    templates.set_fuel(Some(TEMPLATE_FUEL));
    let dir = config.dir.clone();
    templates.set_loader(move |name| match dir.read(Path::new(name)) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(minijinja::Error::new(
            minijinja::ErrorKind::InvalidOperation,
            format!("reading template {name}: {e}"),
        )),
    });
    let mut list = Vec::with_capacity(declared.len());
    let mut problems = Vec::new();
    for decl in &declared {
        match compile_one(config, decl, dialect, conn, &templates) {
            Ok(resource) => list.push(resource),
            Err(e) => problems.push(format!("resource {}: {e:#}", decl.path)),
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    let mut router: matchit::Router<usize> = matchit::Router::new();
    let mut routes: Vec<Vec<(Method, usize)>> = Vec::new();
    for (index, resource) in list.iter().enumerate() {
        let slot = match router.at(&resource.path) {
            Ok(m) if list[routes[*m.value][0].1].path == resource.path => *m.value,
            _ => {
                router
                    .insert(resource.path.clone(), routes.len())
                    .map_err(|e| anyhow!("resource {}: {e}", resource.path))?;
                routes.push(Vec::new());
                routes.len() - 1
            }
        };
        for method in &resource.methods {
            if routes[slot].iter().any(|(m, _)| m == method) {
                bail!("resource {}: {method} is declared twice", resource.path);
            }
            routes[slot].push((method.clone(), index));
        }
    }
    Ok(Resources {
        router,
        routes,
        list,
        templates,
    })
}

fn compile_one(
    config: &Config,
    decl: &ResourceConfig,
    dialect: &dyn rowgate_query::render::Dialect,
    conn: Option<&Connection>,
    templates: &minijinja::Environment<'static>,
) -> anyhow::Result<Resource> {
    let path = decl.path.as_str();
    check_path(config, path)?;
    let path_names = path_parameters(path)?;
    let methods = decl
        .method
        .items()
        .into_iter()
        .map(|m| match m.to_ascii_uppercase().as_str() {
            "GET" => Ok(Method::GET),
            "POST" => Ok(Method::POST),
            "PUT" => Ok(Method::PUT),
            "PATCH" => Ok(Method::PATCH),
            "DELETE" => Ok(Method::DELETE),
            _ => Err(anyhow!(
                "method {m:?} is not one of GET, POST, PUT, PATCH, DELETE"
            )),
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if methods.is_empty() {
        bail!("no method");
    }
    let get_only = methods.iter().all(|m| *m == Method::GET);
    let postgres = dialect.name() == "postgres";
    let cast = |name: &str| {
        decl.params
            .get(name)
            .filter(|_| postgres)
            .and_then(|p| p.kind.postgres_cast())
    };

    let statements = decl
        .sql
        .items()
        .into_iter()
        .map(|s| sql::number(s, dialect, &cast).map_err(|e| anyhow!("in the SQL: {e}")))
        .collect::<anyhow::Result<Vec<_>>>()?;
    if statements.is_empty() {
        bail!("no SQL statement");
    }
    let used: BTreeSet<&str> = statements
        .iter()
        .flat_map(|s| s.names.iter().map(String::as_str))
        .collect();

    let mut params = Vec::new();
    for name in &used {
        if !decl.params.contains_key(*name) && !path_names.iter().any(|p| p == name) {
            bail!(
                "the SQL uses :{name}, which is neither declared in params nor a {{{name}}} of the path"
            );
        }
    }
    for name in &path_names {
        if !used.contains(name.as_str()) {
            bail!("the path names {{{name}}} but the SQL never uses :{name}");
        }
    }
    for name in &path_names {
        if !decl.params.contains_key(name) {
            params.push(Param {
                name: name.clone(),
                source: Source::Path,
                kind: ParamType::Text,
                default: None,
                required: true,
                claim: name.clone(),
            });
        }
    }
    for (name, p) in &decl.params {
        if !used.contains(name.as_str()) {
            bail!("parameter {name} is declared but the SQL never uses :{name}");
        }
        let in_path = path_names.contains(name);
        let source = p.from.unwrap_or(if in_path {
            Source::Path
        } else if get_only {
            Source::Query
        } else {
            Source::Body
        });
        if (source == Source::Path) != in_path {
            bail!(
                "parameter {name}: from = \"path\" exactly when the path template has {{{name}}}"
            );
        }
        if source == Source::Body && get_only {
            bail!("parameter {name} comes from the body, but GET requests have no body");
        }
        let default = match &p.default {
            None => None,
            Some(v) => {
                Some(default_value(p.kind, v).with_context(|| format!("default of {name}"))?)
            }
        };
        params.push(Param {
            name: name.clone(),
            source,
            kind: p.kind,
            default,
            required: p.required,
            claim: p.claim.clone().unwrap_or_else(|| name.clone()),
        });
        if p.claim.is_some() && source != Source::Claim {
            bail!("parameter {name}: claim = … goes with from = \"claim\"");
        }
    }

    let shape = match (decl.shape, &decl.template) {
        (None | Some(Shape::Template), Some(_)) => Shape::Template,
        (Some(Shape::Template), None) => bail!("shape = \"template\" needs a template file"),
        (Some(shape), Some(_)) => {
            bail!("a template is only used with shape = \"template\", not {shape:?}")
        }
        (Some(shape), None) => shape,
        (None, None) => Shape::Rows,
    };
    let template = match &decl.template {
        Some(file) => {
            let name = file.to_string_lossy().into_owned();
            templates
                .get_template(&name)
                .map_err(|e| anyhow!("template {name}: {}", template_error(&e)))?;
            Some(name)
        }
        None => None,
    };
    let content_type = match (&decl.content_type, &template) {
        (Some(ct), _) => {
            HeaderValue::from_str(ct).with_context(|| format!("content_type {ct:?}"))?
        }
        (None, Some(name)) => HeaderValue::from_static(content_type_for(name)),
        (None, None) => HeaderValue::from_static("application/json; charset=utf-8"),
    };
    if decl.content_type.is_some() && template.is_none() {
        bail!("content_type is only for template answers (JSON answers are application/json)");
    }
    let cache_control = decl
        .cache_control
        .as_deref()
        .map(HeaderValue::from_str)
        .transpose()
        .context("cache_control")?;

    let writes = match conn {
        Some(conn) => {
            let mut writes = false;
            for s in &statements {
                let stmt = conn
                    .prepare(&s.text)
                    .map_err(|e| anyhow!("the SQL does not prepare: {}", sqlite_message(&e)))?;
                writes |= !stmt.readonly();
            }
            writes
        }
        // PostgreSQL cannot say whether a statement writes: judged from its words, and a
        // resource answering anything but GET runs as a write (a SELECT may call a function
        // that writes); a GET runs read-only, so such a function fails it (405)
        None if postgres => {
            let mut writes = !get_only;
            for s in &statements {
                writes |=
                    sql::may_write(&s.text, dialect).map_err(|e| anyhow!("in the SQL: {e}"))?;
            }
            writes
        }
        None => true,
    };
    // (on PostgreSQL checked by `check_on_postgres`, once the SQL is known to prepare)
    if writes && get_only && conn.is_some() {
        bail!("{GET_WRITES}");
    }
    Ok(Resource {
        path: path.to_string(),
        methods,
        params,
        shape,
        statements,
        template,
        content_type,
        cache_control,
        etag: decl.etag,
        writes,
        roles: decl.roles.clone(),
    })
}

/// Why a GET resource whose SQL writes is refused.
const GET_WRITES: &str = "GET resources may only read; declare method = \"POST\" (or PUT, PATCH, DELETE) for SQL that writes";

/// Prepares every statement of `resources` on PostgreSQL, so SQL that does not prepare (a
/// syntax error, an unknown table or column, a type PostgreSQL cannot infer) fails the load as
/// it does on SQLite, naming the resource; then refuses a GET resource whose SQL may write.
pub async fn check_on_postgres(
    resources: &Resources,
    db: &crate::db::postgres::Postgres,
) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for resource in &resources.list {
        let before = problems.len();
        for statement in &resource.statements {
            if let Err(e) = db.check_statement(&statement.text).await {
                problems.push(format!(
                    "resource {}: the SQL does not prepare: {e:#}",
                    resource.path
                ));
            }
        }
        let get_only = resource.methods.iter().all(|m| *m == Method::GET);
        if problems.len() == before && resource.writes && get_only {
            problems.push(format!("resource {}: {GET_WRITES}", resource.path));
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// A resource path must be absolute and stay clear of the built-in routes.
fn check_path(config: &Config, path: &str) -> anyhow::Result<()> {
    if !path.starts_with('/') {
        bail!("the path must start with '/'");
    }
    let prefix = config.rest.prefix.as_str();
    for reserved in RESERVED.iter().copied().chain(std::iter::once(prefix)) {
        let under = path
            .strip_prefix(reserved)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
        if under {
            bail!("the path shadows the built-in route {reserved} (the REST prefix, /oauth, /realtime, /live, /ready, /metrics, /openapi.json and /ords are reserved)");
        }
    }
    Ok(())
}

/// The `{name}` segments of a path template.
fn path_parameters(path: &str) -> anyhow::Result<Vec<String>> {
    let mut names = Vec::new();
    let mut rest = path;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| anyhow!("unclosed '{{' in the path"))?;
        let name = &rest[open + 1..open + close];
        let name = name.strip_prefix('*').unwrap_or(name);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            bail!("path parameter {{{name}}} must be a name of letters, digits and _");
        }
        names.push(name.to_string());
        rest = &rest[open + close + 1..];
    }
    Ok(names)
}

fn default_value(kind: ParamType, v: &toml::Value) -> anyhow::Result<Value> {
    let result = match v {
        toml::Value::Datetime(d) => params::coerce(kind, Raw::Text(&d.to_string())),
        other => {
            let json = serde_json::to_value(other)?;
            params::coerce(kind, Raw::Json(&json))
        }
    };
    result.map_err(|e| anyhow!("{e}"))
}

fn content_type_for(template: &str) -> &'static str {
    let ext = Path::new(template)
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "xml" => "application/xml; charset=utf-8",
        "json" => "application/json; charset=utf-8",
        "csv" => "text/csv; charset=utf-8",
        _ => "text/plain; charset=utf-8",
    }
}

fn template_error(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    if let Some(line) = e.line() {
        text.push_str(&format!(" (line {line})"));
    }
    text
}

/// SQLite's own message, without the statement text.
fn sqlite_message(e: &rusqlite::Error) -> String {
    match e {
        rusqlite::Error::SqliteFailure(f, Some(msg)) => format!("{msg} ({:?})", f.code),
        rusqlite::Error::SqlInputError { msg, offset, .. } => format!("{msg} at byte {offset}"),
        other => other.to_string(),
    }
}

/// Serves a request whose path no built-in route matched: a custom resource, or 404.
pub async fn handle(
    app: &App,
    parts: &Parts,
    body: Incoming,
    principal: &Principal,
) -> Result<Reply, ApiError> {
    let resources = app.resources.load_full();
    let path = parts.uri.path();
    let not_found = || {
        ApiError::new(ErrorCode::NotFound, format!("no route for {path}"))
            .hint(format!("tables are under {}/", app.config.rest.prefix))
    };
    let matched = resources.router.at(path).map_err(|_| not_found())?;
    let route = &resources.routes[*matched.value];
    let method = if parts.method == Method::HEAD {
        Method::GET
    } else {
        parts.method.clone()
    };
    let Some(&(_, index)) = route.iter().find(|(m, _)| *m == method) else {
        let allow: Vec<&str> = route.iter().map(|(m, _)| m.as_str()).collect();
        return Err(ApiError::new(
            ErrorCode::MethodNotAllowed,
            format!("{} is not allowed here", parts.method),
        )
        .details(format!("allowed: {}", allow.join(", "))));
    };
    let resource = &resources.list[index];
    if let Some(roles) = &resource.roles {
        if !roles.contains(&principal.role) {
            return Err(denied(principal).details(format!(
                "{} is open to roles {}",
                resource.path,
                roles.join(", ")
            )));
        }
    }
    let path_values: Vec<(String, String)> = matched
        .params
        .iter()
        .map(|(k, v)| {
            let decoded = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
            (k.to_string(), decoded.into_owned())
        })
        .collect();
    let body = if resource.params.iter().any(|p| p.source == Source::Body) {
        let bytes = crate::server::read_body(app, parts, body).await?;
        body_object(parts, &bytes)?
    } else {
        serde_json::Map::new()
    };
    let values = bind(resource, &path_values, parts.uri.query(), &body, principal)?;
    let output = app.db.run(job(resource, &values)).await?;
    respond(&resources, resource, parts, output, &values)
}

/// A body's top-level object (JSON or form); an empty body is an empty object.
fn body_object(parts: &Parts, bytes: &[u8]) -> Result<serde_json::Map<String, Json>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(serde_json::Map::new());
    }
    match crate::api::request::parse_body(&parts.headers, bytes)? {
        Json::Object(map) => Ok(map),
        _ => Err(ApiError::new(
            ErrorCode::InvalidBody,
            "the request body must be a JSON object",
        )),
    }
}

/// Each parameter's value, from its source or its default.
fn bind(
    resource: &Resource,
    path_values: &[(String, String)],
    query: Option<&str>,
    body: &serde_json::Map<String, Json>,
    principal: &Principal,
) -> Result<Vec<(String, Value)>, ApiError> {
    let query_pairs: Vec<(String, String)> = form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .into_owned()
        .collect();
    let mut values = Vec::with_capacity(resource.params.len());
    for p in &resource.params {
        let raw = match p.source {
            Source::Path => path_values
                .iter()
                .find(|(k, _)| *k == p.name)
                .map(|(_, v)| Raw::Text(v)),
            Source::Query => query_pairs
                .iter()
                .find(|(k, _)| *k == p.name)
                .map(|(_, v)| Raw::Text(v)),
            Source::Body => body.get(&p.name).map(Raw::Json),
            Source::Claim => match principal.claims.get(&p.claim) {
                Some(value) => Some(Raw::Json(value)),
                None if p.required && p.default.is_none() => {
                    return Err(denied(principal).details(format!(
                        "parameter {} needs the token claim {:?}",
                        p.name, p.claim
                    )))
                }
                None => None,
            },
        };
        let value = match (raw, &p.default) {
            (Some(raw), _) => params::coerce(p.kind, raw).map_err(|why| {
                ApiError::new(
                    ErrorCode::InvalidParameter,
                    format!("parameter {} has the wrong type", p.name),
                )
                .details(why)
                .hint(format!(
                    "{} must be {}",
                    p.name,
                    params::expectation(p.kind)
                ))
            })?,
            (None, Some(default)) => default.clone(),
            (None, None) if !p.required => Value::Null,
            (None, None) => {
                let place = match p.source {
                    Source::Path => "in the path",
                    Source::Query => "in the query string",
                    Source::Body => "in the request body",
                    Source::Claim => "in the token",
                };
                return Err(ApiError::new(
                    ErrorCode::MissingParameter,
                    format!("parameter {} is missing", p.name),
                )
                .hint(format!(
                    "give {} ({}) {place}",
                    p.name,
                    params::expectation(p.kind)
                )));
            }
        };
        values.push((p.name.clone(), value));
    }
    Ok(values)
}

/// The statements with their parameters bound, as a job: every statement runs, the last one's
/// result answers (per the resource's shape); reads on a reader connection (several in one read
/// transaction), writes in the writer's transaction.
fn job(resource: &Resource, values: &[(String, Value)]) -> Job {
    let bound = |s: &sql::Numbered| Sql {
        text: s.text.clone(),
        params: s
            .names
            .iter()
            .map(|n| {
                values
                    .iter()
                    .find(|(name, _)| name == n)
                    .map_or(Value::Null, |(_, v)| v.clone())
            })
            .collect(),
    };
    let (last, before) = match resource.statements.split_last() {
        Some((last, before)) => (Some(last), before),
        None => (None, &[][..]),
    };
    let mut steps: Vec<Step> = before.iter().map(|s| Step::Execute(bound(s))).collect();
    if let Some(last) = last {
        let sql = bound(last);
        steps.push(match resource.shape {
            Shape::None => Step::Execute(sql),
            Shape::Value => Step::Value(sql),
            Shape::Rows | Shape::Row | Shape::Template => Step::Rows { sql, shape: None },
        });
    }
    let access = if resource.writes {
        Access::Write
    } else {
        Access::Read
    };
    Job::new(access, steps)
}

fn respond(
    resources: &Resources,
    resource: &Resource,
    parts: &Parts,
    output: Output,
    values: &[(String, Value)],
) -> Result<Reply, ApiError> {
    let body = match resource.shape {
        Shape::None => return Ok(Reply::empty(StatusCode::NO_CONTENT)),
        Shape::Row => {
            if output.row_count == 0 {
                return Err(ApiError::new(ErrorCode::NotFound, "no row matches"));
            }
            execute::expect_one(output.row_count)?;
            Bytes::copy_from_slice(execute::unwrap_single(&output.rows))
        }
        Shape::Template => render(resources, resource, &output.rows, values)?,
        Shape::Rows => Bytes::from(output.rows),
        Shape::Value => Bytes::from(output.value.unwrap_or_else(|| b"null".to_vec())),
    };
    let cacheable = matches!(parts.method, Method::GET | Method::HEAD);
    let tag = (cacheable && resource.etag).then(|| etag(&body));
    if let Some(tag) = &tag {
        if crate::api::if_none_match(&parts.headers, tag) {
            return Ok(Reply::not_modified(tag.clone()));
        }
    }
    let mut reply = Reply::typed(StatusCode::OK, resource.content_type.clone(), body);
    if let Some(tag) = tag {
        reply = reply.header(header::ETAG, tag);
    }
    if let (true, Some(cc)) = (cacheable, &resource.cache_control) {
        reply = reply.header(header::CACHE_CONTROL, cc.to_str().unwrap_or_default());
    }
    Ok(reply)
}

fn render(
    resources: &Resources,
    resource: &Resource,
    rows: &[u8],
    values: &[(String, Value)],
) -> Result<Bytes, ApiError> {
    let name = resource.template.as_deref().unwrap_or_default();
    let rows: Json = serde_json::from_slice(rows).map_err(ApiError::internal)?;
    let params: serde_json::Map<String, Json> = values
        .iter()
        .map(|(k, v)| {
            let j = match v {
                Value::Null => Json::Null,
                Value::Int(i) => Json::from(*i),
                Value::Real(f) => Json::from(*f),
                Value::Text(t) => Json::from(t.as_str()),
                Value::Bool(b) => Json::from(*b),
            };
            (k.clone(), j)
        })
        .collect();
    let row = rows.get(0).cloned().unwrap_or(Json::Null);
    let template = resources
        .templates
        .get_template(name)
        .map_err(ApiError::internal)?;
    let text = template
        .render(minijinja::context! { rows => rows, row => row, params => params })
        .map_err(|e| ApiError::internal(format!("template {name}: {}", template_error(&e))))?;
    Ok(Bytes::from(text))
}
