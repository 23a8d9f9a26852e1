//! How custom resources are declared in `rowgate.toml` (`[[resources]]`) or in `*.toml` files of
//! the folder `resources_dir` names: the serde shapes, nothing else. [`crate::resources::compile`] checks
//! them against the database and the template files.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One custom resource.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResourceConfig {
    /// Path template, e.g. `/teams/{id}/drivers` (none for a function).
    #[serde(default)]
    pub path: String,
    /// Served as the RPC function of this name at `/{prefix}/rpc/{function}` instead of at a
    /// path: arguments by name from the JSON body (POST) or the query string (GET), and a
    /// `rows` answer takes filters, order, limits and `select` as a table does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function: Option<String>,
    /// HTTP method(s): `"GET"` (default) or `["GET", "POST"]`. GET also answers HEAD. A function
    /// answers POST, and GET when its SQL only reads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<OneOrMany>,
    /// The SQL statement (or statements, run in one transaction; the last one's rows answer),
    /// with named parameters `:name`.
    pub sql: OneOrMany,
    /// The parameters the SQL names, by name.
    #[serde(default)]
    pub params: BTreeMap<String, ParamConfig>,
    /// The answer's shape; `template` when a template is given, else `rows`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shape: Option<Shape>,
    /// Template file (minijinja), relative to the configuration file's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template: Option<PathBuf>,
    /// Content type of a template's answer (default from the file extension: `.html` → HTML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// `Cache-Control` header value sent with successful answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_control: Option<String>,
    /// Send a strong `ETag` and answer `If-None-Match` with 304.
    #[serde(default)]
    pub etag: bool,
    /// Let the response cache keep its answers until the next commit (`[cache]`): a GET
    /// resource whose SQL reads neither the time nor randomness is kept unless this is false.
    #[serde(default = "kept_by_default")]
    pub cache: bool,
    /// The roles that may call it (the anonymous role by its name, `"*"` for every role); no one
    /// when absent, as a table no grant names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub roles: Option<Vec<String>>,
}

fn kept_by_default() -> bool {
    true
}

/// A string or a list of strings.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The items.
    pub fn items(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// What a resource answers.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// A JSON array of objects.
    Rows,
    /// One JSON object; 404 when there is no row.
    Row,
    /// The first column of the first row as a JSON value (`null` when there is no row).
    Value,
    /// 204 No Content.
    None,
    /// The rows rendered by a template.
    Template,
}

/// One parameter.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ParamConfig {
    /// Where the value comes from (default: `path` when the path template names it, else
    /// `query` for GET-only resources and `body` otherwise; a function's arguments are `body`,
    /// from the query string when it is called with GET).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<Source>,
    /// Its type (default `text`).
    #[serde(default, rename = "type")]
    pub kind: ParamType,
    /// The value used when the request has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<toml::Value>,
    /// When false, a missing value binds NULL instead of answering 400.
    #[serde(default = "yes")]
    pub required: bool,
    /// With `from = "claim"`: the token claim to take (default: the parameter's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
    /// With `type = "int"` or `"float"`: the least value taken (a value below answers 400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    /// With `type = "int"` or `"float"`: the greatest value taken (a value above answers 400).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
}

fn yes() -> bool {
    true
}

/// Where a parameter's value comes from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// A `{name}` segment of the path template.
    Path,
    /// The query string (`?name=value`; the first occurrence).
    Query,
    /// A top-level key of the JSON object body (or of a form body).
    Body,
    /// A claim of the request's bearer token (`sub`, `role`, …); never from the client's input.
    Claim,
}

/// A parameter's type: what the value must look like, and how it is bound.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ParamType {
    /// A 64-bit integer.
    Int,
    /// A finite floating-point number.
    Float,
    /// Any text.
    #[default]
    Text,
    /// `true`/`false` (also `1`/`0`, `yes`/`no`, `on`/`off`, `t`/`f`), bound as 1/0.
    Bool,
    /// A calendar date `YYYY-MM-DD`, bound as that text.
    Date,
    /// An RFC 3339 timestamp (`YYYY-MM-DDTHH:MM:SS[.frac][Z|±HH:MM]`, `T` or a space), bound as
    /// that text.
    Timestamp,
    /// Any JSON value, bound as its compact JSON text.
    Json,
}

impl ParamType {
    /// The type's name as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            ParamType::Int => "int",
            ParamType::Float => "float",
            ParamType::Text => "text",
            ParamType::Bool => "bool",
            ParamType::Date => "date",
            ParamType::Timestamp => "timestamp",
            ParamType::Json => "json",
        }
    }

    /// The PostgreSQL type a placeholder of a declared parameter of this type is cast to (an
    /// undeclared path parameter is left for PostgreSQL to type from where it is used).
    pub fn postgres_cast(self) -> Option<&'static str> {
        match self {
            ParamType::Int => Some("int8"),
            ParamType::Float => Some("float8"),
            ParamType::Text => Some("text"),
            ParamType::Bool => Some("bool"),
            ParamType::Date => Some("date"),
            ParamType::Timestamp => Some("timestamptz"),
            ParamType::Json => Some("jsonb"),
        }
    }
}

/// A file of the `resources_dir` folder: `[[resources]]` entries.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceFile {
    /// The resources it declares.
    #[serde(default)]
    pub resources: Vec<ResourceConfig>,
}
