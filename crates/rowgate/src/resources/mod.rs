//! Custom resources: endpoints declared in configuration, each a path template, HTTP method(s),
//! SQL with named parameters bound from the path, query string or body, and the shape of the
//! answer (rows, one row, a value, nothing, or a minijinja template).
//!
//! [`compile`] checks every declaration once (paths, parameters and their types and defaults,
//! the SQL against the database, templates) so that a bad configuration fails `rowgate config
//! check` and start-up, never a request. [`serve::handle`] serves a request; the compiled set is swapped
//! whole on SIGHUP (see [`crate::app::App::reload_resources`]).

pub mod params;
pub mod serve;
pub mod sql;

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{anyhow, bail, Context};
use http::{HeaderValue, Method};
use rowgate_query::Value;
use rusqlite::Connection;

use crate::config::resources::{OneOrMany, ParamType, ResourceConfig, ResourceFile, Shape, Source};
use crate::config::Config;
use params::Raw;

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
    /// Path template (`/teams/{id}/drivers`; a function's `/{prefix}/rpc/{name}`).
    pub path: String,
    /// The RPC function it is served as (not routed by its path then).
    pub function: Option<String>,
    /// The last statement's result columns, as the database describes them (a function's
    /// `rows` take filters, order and `select` on them).
    pub columns: Vec<crate::schema::Column>,
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
    pub writes: bool,
    /// Whether its GET answers may be kept until the next commit ([`crate::cache`]): it
    /// only reads, reads neither the time nor randomness (nor a view that does), and its
    /// declaration does not say `cache = false`. Judged on SQLite only.
    pub cacheable: bool,
    /// The roles that may call it (`"*"`: every role; no one when `None`).
    pub roles: Option<Vec<String>>,
}

impl Resources {
    /// Whether a resource is declared at `path`.
    pub fn serves(&self, path: &str) -> bool {
        self.router.at(path).is_ok()
    }

    /// The resources declared at `path`: their path template (what the statistics name them
    /// by), and whether the GET one may have its answers kept ([`Resource::cacheable`]: the
    /// response cache looks only those up).
    pub fn at(&self, path: &str) -> Option<(&str, bool)> {
        let matched = self.router.at(path).ok()?;
        let methods = &self.routes[*matched.value];
        let template = methods
            .first()
            .map_or("", |(_, index)| self.list[*index].path.as_str());
        let caches_get = methods
            .iter()
            .any(|(method, index)| *method == Method::GET && self.list[*index].cacheable);
        Some((template, caches_get))
    }

    /// The resource declared as the function `name`, if any.
    pub fn function(&self, name: &str) -> Option<&Resource> {
        self.list
            .iter()
            .find(|r| r.function.as_deref() == Some(name))
    }

    /// The warning for resources that name no roles (no one may call them), if any.
    pub fn unreachable_warning(&self) -> Option<String> {
        let paths: Vec<&str> = self
            .list
            .iter()
            .filter(|r| r.roles.is_none())
            .map(|r| r.path.as_str())
            .collect();
        (!paths.is_empty()).then(|| {
            format!(
                "custom resources without roles answer 401/403 to everyone: {} \
                 (declare roles = [\"anon\", …], or [\"*\"] for every role)",
                paths.join(", ")
            )
        })
    }
}

impl Resource {
    /// What calling it asks of the policy (its declared roles decide).
    pub fn subject(&self) -> crate::auth::policy::Subject<'_> {
        crate::auth::policy::Subject::Resource {
            path: &self.path,
            roles: self.roles.as_deref(),
        }
    }
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
    /// The values a number parameter takes.
    pub range: params::Range,
}

impl Resource {
    /// Its statements with the parameters' `values` bound (NULL for a value not given).
    ///
    /// Each value moves into the last place that names it and is copied only into those
    /// before (a JSON argument of megabytes is not copied for its one use).
    pub fn bound(&self, mut values: Vec<(String, Value)>) -> Vec<rowgate_query::stmt::Sql> {
        let mut last_use: std::collections::HashMap<&str, (usize, usize)> = Default::default();
        for (i, s) in self.statements.iter().enumerate() {
            for (j, n) in s.names.iter().enumerate() {
                last_use.insert(n.as_str(), (i, j));
            }
        }
        self.statements
            .iter()
            .enumerate()
            .map(|(i, s)| rowgate_query::stmt::Sql {
                text: s.text.clone(),
                params: s
                    .names
                    .iter()
                    .enumerate()
                    .map(
                        |(j, n)| match values.iter_mut().find(|(name, _)| name == n) {
                            None => Value::Null,
                            Some((_, v)) if last_use.get(n.as_str()) == Some(&(i, j)) => {
                                std::mem::replace(v, Value::Null)
                            }
                            Some((_, v)) => v.clone(),
                        },
                    )
                    .collect(),
            })
            .collect()
    }

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
            Err(e) => problems.push(format!("resource {}: {e:#}", decl_label(decl))),
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    let mut router: matchit::Router<usize> = matchit::Router::new();
    let mut routes: Vec<Vec<(Method, usize)>> = Vec::new();
    let mut functions = BTreeSet::new();
    for (index, resource) in list.iter().enumerate() {
        if let Some(name) = &resource.function {
            if !functions.insert(name.as_str()) {
                bail!("function {name} is declared twice");
            }
            continue;
        }
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
    let function = decl.function.as_deref();
    let path = match function {
        Some(name) => {
            if !decl.path.is_empty() {
                bail!(
                    "a function has no path: it is served at {}/rpc/{name}",
                    config.rest.prefix
                );
            }
            if decl.method.is_some() {
                bail!("a function has no method: it answers POST, and GET when its SQL only reads");
            }
            if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                bail!("function {name:?} must be a name of letters, digits and _");
            }
            if decl.template.is_some() {
                bail!("a function answers JSON: it takes no template");
            }
            format!("{}/rpc/{name}", config.rest.prefix)
        }
        None if decl.path.is_empty() => bail!("a resource needs a path (or a function name)"),
        None => {
            check_path(config, &decl.path)?;
            decl.path.clone()
        }
    };
    let path_names = match function {
        Some(_) => Vec::new(),
        None => path_parameters(&path)?,
    };
    let declared = match (&decl.method, function) {
        (_, Some(_)) => OneOrMany::One("POST".into()),
        (Some(methods), None) => methods.clone(),
        (None, None) => OneOrMany::One("GET".into()),
    };
    let declared_methods = declared
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
    if declared_methods.is_empty() {
        bail!("no method");
    }
    let get_only = declared_methods.iter().all(|m| *m == Method::GET);
    let cast = |name: &str| {
        decl.params
            .get(name)
            .filter(|_| dialect.types_parameters())
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
                range: params::Range::default(),
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
        if function.is_some() && !matches!(source, Source::Body | Source::Claim) {
            bail!("parameter {name}: a function's arguments come from the body (or the query string of a GET), or from a claim");
        }
        let range = params::Range {
            min: p.min,
            max: p.max,
        };
        if range != params::Range::default() && !matches!(p.kind, ParamType::Int | ParamType::Float)
        {
            bail!("parameter {name}: min and max go with type = \"int\" or \"float\"");
        }
        if let (Some(min), Some(max)) = (p.min, p.max) {
            if min > max {
                bail!("parameter {name}: min ({min}) is above max ({max})");
            }
        }
        let default = match &p.default {
            None => None,
            Some(v) => Some(
                default_value(p.kind, v)
                    .and_then(|v| range.admit(&v).map(|()| v).map_err(|why| anyhow!(why)))
                    .with_context(|| format!("default of {name}"))?,
            ),
        };
        params.push(Param {
            name: name.clone(),
            source,
            kind: p.kind,
            default,
            required: p.required,
            claim: p.claim.clone().unwrap_or_else(|| name.clone()),
            range,
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
            let compiled = templates
                .get_template(&name)
                .map_err(|e| anyhow!("template {name}: {}", template_error(&e)))?;
            check_template_names(templates, &compiled)
                .map_err(|why| anyhow!("template {name}: {why}"))?;
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

    let mut columns = Vec::new();
    let writes = match conn {
        Some(conn) => {
            let mut writes = false;
            for s in &statements {
                let stmt = conn
                    .prepare(&s.text)
                    .map_err(|e| anyhow!("the SQL does not prepare: {}", sqlite_message(&e)))?;
                writes |= !stmt.readonly();
                columns = stmt
                    .columns()
                    .iter()
                    .map(|c| {
                        let decl = c.decl_type().unwrap_or_default();
                        crate::schema::Column::of_result(
                            c.name().to_string(),
                            decl.to_string(),
                            crate::schema::classify(decl),
                        )
                    })
                    .collect();
            }
            writes
        }
        // PostgreSQL cannot say whether a statement writes: judged from its words, and a
        // resource answering anything but GET runs as a write (a SELECT may call a function
        // that writes); a GET runs read-only, so such a function fails it (405). A function
        // is judged by its words alone: called with GET, it runs read-only all the same.
        None if !dialect.reports_read_only() => {
            let mut writes = !get_only && function.is_none();
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
    let methods = match function {
        Some(_) if !writes => vec![Method::GET, Method::POST],
        _ => declared_methods,
    };
    let cacheable = match conn {
        Some(conn) if decl.cache && !writes => {
            let views =
                crate::schema::volatile::volatile_views(&crate::schema::volatile::views_sql(conn)?);
            !crate::schema::volatile::reads_volatile(
                statements.iter().map(|s| s.text.as_str()),
                &views,
            )
        }
        _ => false,
    };
    Ok(Resource {
        path,
        function: function.map(str::to_string),
        columns,
        methods,
        params,
        shape,
        statements,
        template,
        content_type,
        cache_control,
        etag: decl.etag,
        writes,
        cacheable,
        roles: decl.roles.clone(),
    })
}

/// How a declaration is named in problems: its path, or its function.
fn decl_label(decl: &ResourceConfig) -> String {
    match &decl.function {
        Some(name) => format!("function {name}"),
        None => decl.path.clone(),
    }
}

/// Why a GET resource whose SQL writes is refused.
const GET_WRITES: &str = "GET resources may only read; declare method = \"POST\" (or PUT, PATCH, DELETE) for SQL that writes";

/// Prepares every statement of `resources` on PostgreSQL (keeping the last one's result
/// columns), so SQL that does not prepare (a
/// syntax error, an unknown table or column, a type PostgreSQL cannot infer) fails the load as
/// it does on SQLite, naming the resource; then refuses a GET resource whose SQL may write.
pub async fn check_on_postgres(
    resources: &mut Resources,
    db: &crate::db::postgres::Postgres,
) -> anyhow::Result<()> {
    let mut problems = Vec::new();
    for resource in &mut resources.list {
        let before = problems.len();
        for statement in &resource.statements {
            match db.check_statement(&statement.text).await {
                Ok(columns) => resource.columns = columns,
                Err(e) => problems.push(format!(
                    "resource {}: the SQL does not prepare: {e:#}",
                    resource.path
                )),
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
    // ORDS modules map to resources under /ords/{schema}/, clear of ORDS's own paths there
    let module_root = format!("/ords/{}", config.ords.schema);
    if crate::routes::under(path, &module_root) && path.len() > module_root.len() + 1 {
        for own in ["oauth", "metadata-catalog", "open-api-catalog"] {
            if crate::routes::under(path, &format!("{module_root}/{own}")) {
                bail!("the path shadows ORDS's {module_root}/{own}");
            }
        }
        return Ok(());
    }
    let reserved = crate::routes::reserved_by(path)
        .or_else(|| crate::routes::under(path, prefix).then_some(prefix));
    if let Some(reserved) = reserved {
        bail!(
            "the path shadows the built-in route {reserved} (the REST prefix, {} are reserved)",
            crate::routes::RESERVED.join(", ")
        );
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

/// What a template's render gets besides its own names (see `serve::render`).
const TEMPLATE_CONTEXT: &[&str] = &["rows", "row", "params"];

/// Refuses a template that calls a filter, test or function the environment does not have:
/// minijinja finds those only when rendering reaches them (a 500 on a request), so the
/// compiled instructions are read here and each name is tried once.
fn check_template_names(
    env: &minijinja::Environment<'static>,
    template: &minijinja::Template<'_, '_>,
) -> Result<(), String> {
    use minijinja::machinery::Instruction;
    use minijinja::ErrorKind;
    let compiled = minijinja::machinery::get_compiled_template(template);
    let undeclared = template.undeclared_variables(false);
    let known = |probe: String, missing: ErrorKind| !matches!(env.render_str(&probe, ()), Err(e) if e.kind() == missing);
    for instructions in std::iter::once(&compiled.instructions).chain(compiled.blocks.values()) {
        for index in 0..instructions.len() {
            let Some(instruction) = u32::try_from(index).ok().and_then(|i| instructions.get(i))
            else {
                continue;
            };
            match instruction {
                Instruction::ApplyFilter(name, ..)
                    if !known(format!("{{{{ none|{name} }}}}"), ErrorKind::UnknownFilter) =>
                {
                    return Err(format!("unknown filter {name:?}"));
                }
                Instruction::PerformTest(name, ..)
                    if !known(
                        format!("{{% if none is {name} %}}{{% endif %}}"),
                        ErrorKind::UnknownTest,
                    ) =>
                {
                    return Err(format!("unknown test {name:?}"));
                }
                Instruction::CallFunction(name, _)
                    if undeclared.contains(*name)
                        && !TEMPLATE_CONTEXT.contains(name)
                        && !env.globals().any(|(g, _)| g == *name) =>
                {
                    return Err(format!("unknown function {name:?}"));
                }
                _ => {}
            }
        }
    }
    Ok(())
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
