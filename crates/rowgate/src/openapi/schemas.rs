//! The JSON schemas of the OpenAPI documents: values as the database takes them (integers within
//! their column type's range, strings without NUL, dates as dates, JSON without `\u0000`, which
//! PostgreSQL's `jsonb` refuses), rows, duality documents, errors, and the query parameters of a
//! read described by patterns of what the server accepts (filters `op.value` typed by the
//! column, `select` and `order` over the table's columns), so that a request the document calls
//! valid is one the server takes, and a generated one (schemathesis, Swagger UI) works.

use serde_json::{json, Map, Value};

use crate::schema::input::InputType;
use crate::schema::relationships;
use crate::schema::{Column, SchemaCache, Table};
use rowgate_query::SelectItem;

/// The name of the component schema of any JSON value a `json`/`jsonb` column takes.
pub const JSON_VALUE: &str = "JsonValue";

/// The JSON value schema (recursive: arrays and objects of it; on PostgreSQL, whose text and
/// `jsonb` cannot hold NUL, strings and keys without it).
pub fn json_value(postgres: bool) -> Value {
    let me = format!("#/components/schemas/{JSON_VALUE}");
    let text = if postgres {
        json!({"type": "string", "pattern": NO_NUL})
    } else {
        json!({"type": "string"})
    };
    let mut object = json!({"type": "object", "additionalProperties": {"$ref": me}});
    if postgres {
        object["propertyNames"] = json!({"pattern": NO_NUL});
    }
    json!({"anyOf": [
        {"type": ["null", "boolean", "number"]},
        text,
        {"type": "array", "items": {"$ref": me}},
        object
    ]})
}

/// Text without NUL (PostgreSQL's text cannot hold it).
const NO_NUL: &str = "^[^\\u0000]*$";

/// What a column holds, for its schema and its filter's pattern.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    /// An integer within these bounds.
    Integer(i64, i64),
    /// A floating-point or exact number, below this magnitude.
    Number(Option<f64>),
    Boolean,
    Date,
    Timestamp,
    Time,
    Json,
    Text,
    /// Something else (arrays, ranges, …): described loosely, filtered by `is.null` only.
    Other,
}

/// Whether the column is PostgreSQL's (whose text cannot hold NUL).
fn postgres(c: &Column) -> bool {
    c.input == InputType::Native
}

fn kind(c: &Column) -> Kind {
    let decl = c.decl_type.to_ascii_lowercase();
    let postgres = postgres(c);
    if let Some((min, max)) = c.integer_range() {
        return Kind::Integer(min, max);
    }
    match c.json_type {
        "number" if postgres && (decl.starts_with("real") || decl == "float4") => {
            Kind::Number(Some(3.0e38))
        }
        "number" if decl.starts_with("numeric") || decl.starts_with("decimal") => {
            // numeric(p, s): below 10^(p - s)
            let digits: Vec<i32> = decl
                .split(|ch: char| !ch.is_ascii_digit())
                .filter_map(|d| d.parse().ok())
                .collect();
            match digits.as_slice() {
                [p] => Kind::Number(Some(10f64.powi(*p))),
                [p, s] => Kind::Number(Some(10f64.powi(p - s))),
                _ => Kind::Number(None),
            }
        }
        "number" => Kind::Number(None),
        "boolean" => Kind::Boolean,
        "array" => Kind::Other,
        _ if c.json_kind == crate::schema::JsonKind::Json => Kind::Json,
        _ => match c.input {
            InputType::Date => Kind::Date,
            InputType::Timestamp => Kind::Timestamp,
            InputType::Time => Kind::Time,
            InputType::Native if decl == "date" => Kind::Date,
            InputType::Native if decl.starts_with("timestamp") => Kind::Timestamp,
            InputType::Native if decl.starts_with("time") => Kind::Time,
            InputType::Native if decl == "text" || decl.starts_with("character") => Kind::Text,
            InputType::Native => Kind::Other,
            _ => Kind::Text,
        },
    }
}

/// A calendar date the database takes (days past the 28th are left out of the pattern: it
/// cannot tell months apart).
const DATE: &str =
    "^(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])$";

/// A date and time the database takes: a [`DATE`], a time, an optional fraction and an offset
/// within ±15:59 (PostgreSQL's range), `T` or a space between.
const TIMESTAMP: &str = "^(000[1-9]|00[1-9][0-9]|0[1-9][0-9]{2}|[1-9][0-9]{3})-(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])[T ]([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-](0[0-9]|1[0-5]):[0-5][0-9])?$";

/// A column's value schema (`null` allowed when the column is nullable).
pub fn column_schema(c: &Column) -> Value {
    let json = format!("#/components/schemas/{JSON_VALUE}");
    let mut schema = match kind(c) {
        Kind::Integer(min, max) => json!({"type": "integer", "minimum": min, "maximum": max}),
        Kind::Number(Some(bound)) => {
            json!({"type": "number", "exclusiveMinimum": -bound, "exclusiveMaximum": bound})
        }
        Kind::Number(None) => json!({"type": "number"}),
        Kind::Boolean => json!({"type": "boolean"}),
        Kind::Date => json!({"type": "string", "format": "date", "pattern": DATE}),
        Kind::Timestamp => json!({"type": "string", "pattern": TIMESTAMP}),
        Kind::Time => json!({"type": "string",
            "pattern": "^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9](\\.[0-9]{1,6})?)?$"}),
        Kind::Json => return json!({"$ref": json}),
        // text columns take any JSON value as its text (as PostgREST's do): a string, or a
        // number, an array or an object written as JSON (escaped: NUL and all)
        Kind::Text => {
            let mut any = if postgres(c) {
                // written as text, nested strings and keys cannot hold NUL either
                vec![
                    json!({"type": "string", "pattern": NO_NUL}),
                    json!({"type": ["number", "boolean"]}),
                    json!({"type": "array", "items": {"$ref": json}}),
                    json!({"type": "object", "additionalProperties": {"$ref": json},
                        "propertyNames": {"pattern": NO_NUL}}),
                ]
            } else {
                vec![json!({"type": ["string", "number", "boolean", "array", "object"]})]
            };
            if c.nullable {
                any.push(json!({"type": "null"}));
            }
            return json!({"anyOf": any, "description": c.decl_type});
        }
        Kind::Other => json!({}),
    };
    if let Some((min, exclusive)) = c.bounds.minimum {
        let key = if exclusive {
            "exclusiveMinimum"
        } else {
            "minimum"
        };
        schema[key] = json!(min);
    }
    if let Some((max, exclusive)) = c.bounds.maximum {
        let key = if exclusive {
            "exclusiveMaximum"
        } else {
            "maximum"
        };
        schema[key] = json!(max);
    }
    if c.nullable {
        if let Some(Value::String(t)) = schema.get("type").cloned() {
            schema["type"] = json!([t, "null"]);
        }
    }
    schema["description"] = json!(c.decl_type);
    schema
}

/// A table's (or view's) rows as answered: every column typed (a `select` may leave any out;
/// values as stored, so without the patterns that keep generated requests within what the
/// database takes, such as dates past the 28th).
pub fn row_schema(table: &Table) -> Value {
    let mut schema = table_schema(table);
    if let Some(o) = schema.as_object_mut() {
        o.remove("required");
    }
    if let Some(Value::Object(props)) = schema.get_mut("properties") {
        for p in props.values_mut() {
            if let Some(p) = p.as_object_mut() {
                p.remove("pattern");
            }
        }
    }
    schema
}

/// A table's (or view's) rows as written: every column typed; the columns an insert must give
/// required.
pub fn table_schema(table: &Table) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for c in &table.columns {
        let mut schema = column_schema(c);
        if let Some(d) = &c.default {
            schema["default"] = json!(d);
        }
        if c.pk_position > 0 {
            schema["description"] = json!(format!("{} (primary key)", c.decl_type));
        }
        if !c.nullable && c.default.is_none() && c.pk_position == 0 && !c.generated {
            required.push(c.name.clone());
        }
        props.insert(c.name.clone(), schema);
    }
    json!({"type": "object", "properties": props, "required": required})
}

/// The error envelope.
pub fn error_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "code": {"type": "string"}, "message": {"type": "string"},
            "details": {"type": ["string", "null"]}, "hint": {"type": ["string", "null"]}
        }
    })
}

/// The JSON schema of a duality view's documents (or of an embed in them): fields typed from
/// the columns they name, nested arrays and objects from the related tables'.
pub fn document_schema(schema: &SchemaCache, table: &Table, items: &[SelectItem]) -> Value {
    document_level(schema, table, items, None)
}

/// How a write sends a document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocumentWrite {
    /// POST: a new document (a field left out takes its column's default).
    Insert,
    /// PUT: the whole document (a field left out becomes null).
    Replace,
    /// PATCH: the fields that change.
    Patch,
}

/// A document as a write sends it: only its fields (`additionalProperties: false`); at the
/// root, none of the key's (`_id` comes from the URL) nor the `unchangeable` ones, and, but
/// for a patch, every field whose column must be given; in nested rows their key's fields
/// (each row is found or made by its key) and the fields their columns need; nested arrays
/// may be null (none).
pub fn document_write_schema(
    schema: &SchemaCache,
    table: &Table,
    items: &[SelectItem],
    write: DocumentWrite,
    unchangeable: &[String],
) -> Value {
    let mut root = document_level(schema, table, items, Some(write != DocumentWrite::Patch));
    let keys = fields_of(table, items, |c| c.pk_position > 0);
    // fields left out of the body, and fields it need not give
    let (mut absent, mut optional) = (Vec::new(), Vec::new());
    if write == DocumentWrite::Insert {
        // a new document may name its key (a taken one is a 409), and must when rows are
        // nested in it: they refer to it by that key; its columns with defaults may be left out
        let arrays: Vec<String> = root["properties"]
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(_, p)| {
                p["type"]
                    .as_array()
                    .is_some_and(|t| t.contains(&json!("array")))
            })
            .map(|(k, _)| k.clone())
            .collect();
        if let Some(needs) = root["dependentRequired"].as_object_mut() {
            for member in arrays {
                needs.insert(member, json!(keys));
            }
        }
        optional.extend(keys);
        optional.extend(fields_of(table, items, |c| c.default.is_some()));
    } else {
        // the key comes from the URL; what a write may not change (noupdate) is left out
        absent.extend(keys);
        absent.extend(unchangeable.iter().cloned());
    }
    if let Some(props) = root["properties"].as_object_mut() {
        for field in &absent {
            props.remove(field);
        }
    }
    if let Some(Value::Array(required)) = root.get_mut("required") {
        required.retain(|r| !absent.iter().chain(&optional).any(|k| r == k));
    }
    root
}

/// The fields of `items` (top level, spreads left out) that name a column of `table` meeting
/// `pick`.
fn fields_of(table: &Table, items: &[SelectItem], pick: impl Fn(&Column) -> bool) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| match item {
            SelectItem::Column { name, alias, .. } => table
                .column(name)
                .filter(|c| pick(c))
                .map(|_| alias.clone().unwrap_or_else(|| name.clone())),
            _ => None,
        })
        .collect()
}

/// One level of a document's schema; `write`: as written (`Some(complete)`), else as read.
fn document_level(
    schema: &SchemaCache,
    table: &Table,
    items: &[SelectItem],
    write: Option<bool>,
) -> Value {
    let mut props = Map::new();
    let mut spread_needs = Map::new();
    let mut spread_keys: Vec<String> = Vec::new();
    for item in items {
        match item {
            SelectItem::Star => {
                for c in &table.columns {
                    props.insert(c.name.clone(), column_schema(c));
                }
            }
            SelectItem::Column { name, alias, .. } => {
                if let Some(c) = table.column(name) {
                    props.insert(
                        alias.clone().unwrap_or_else(|| name.clone()),
                        column_schema(c),
                    );
                }
            }
            SelectItem::Embed(e) => {
                let Ok(rel) = relationships::find(schema, table, &e.relation, e.hint.as_deref())
                else {
                    continue;
                };
                let Some(related) = schema.table(&rel.related) else {
                    continue;
                };
                // a nested row is written whole: its key and what its columns need
                let inner = document_level(schema, related, &e.select, write.map(|_| true));
                let key = e.alias.clone().unwrap_or_else(|| e.relation.clone());
                match (e.spread, inner) {
                    (true, Value::Object(mut o)) => {
                        if let Some(Value::Object(p)) = o.remove("properties") {
                            props.extend(p);
                        }
                        // a spread row is linked by its key: a complete write gives it, and
                        // its other fields need it
                        if let Some(complete) = write {
                            let keys = fields_of(related, &e.select, |c| c.pk_position > 0);
                            for field in fields_of(related, &e.select, |c| c.pk_position == 0) {
                                spread_needs.insert(field, json!(keys));
                            }
                            if complete {
                                spread_keys.extend(keys);
                            }
                        }
                    }
                    (_, inner) if rel.is_many() => {
                        let array = if write.is_some() {
                            json!({"type": ["array", "null"], "items": inner})
                        } else {
                            json!({"type": "array", "items": inner})
                        };
                        props.insert(key, array);
                    }
                    (_, inner) => {
                        props.insert(key, json!({"oneOf": [inner, {"type": "null"}]}));
                    }
                }
            }
        }
    }
    match write {
        None => json!({"type": "object", "properties": props}),
        Some(complete) => {
            // a complete write sets every field it covers: a NOT NULL column's field is
            // needed (a replacement sets what it leaves out to null, defaults or not)
            let needed =
                |c: &Column| c.pk_position > 0 || (complete && !c.nullable && !c.generated);
            let mut required = fields_of(table, items, needed);
            required.extend(spread_keys);
            json!({"type": "object", "properties": props, "additionalProperties": false,
                "required": required, "dependentRequired": spread_needs})
        }
    }
}

/// `{key}` of an item URL: typed as the primary key's one column, or the key's values
/// comma-separated.
pub fn key_param(table: &Table) -> Value {
    let schema = match table.primary_key.as_slice() {
        [one] => table.column(one).map_or(json!({"type": "string"}), |c| {
            let mut s = column_schema(c);
            // a key is never null
            if let Some(Value::Array(types)) = s.get("type").cloned() {
                s["type"] = types[0].clone();
            }
            s
        }),
        _ => json!({"type": "string", "pattern": "^[^,/]+(,[^,/]+)+$"}),
    };
    json!({"name": "key", "in": "path", "required": true, "schema": schema,
        "description": format!("primary key ({})", table.primary_key.join(", "))})
}

/// A regex alternation of `names`, escaped.
fn any_of(names: impl Iterator<Item = impl AsRef<str>>) -> String {
    let escaped: Vec<String> = names.map(|n| regex::escape(n.as_ref())).collect();
    format!("({})", escaped.join("|"))
}

/// The query parameters of a read (`paged`: with `limit`, `offset` and `Range`) or of PATCH and
/// DELETE: `select` and `order` over the table's columns, `Prefer`, and a filter per column
/// (`or` across them).
pub fn read_params(table: &Table, paged: bool) -> Vec<Value> {
    let columns = any_of(table.columns.iter().map(|c| &c.name));
    let order_term = format!("{columns}(\\.(asc|desc))?(\\.(nullsfirst|nullslast))?");
    let mut params = vec![
        json!({"name": "select", "in": "query", "schema": {"type": "string",
            "pattern": format!("^(\\*|{columns}(,{columns})*)$")},
            "description": "columns to return: col, alias:col, col::type, *, embedded rel(cols)"}),
        json!({"name": "order", "in": "query", "schema": {"type": "string",
            "pattern": format!("^{order_term}(,{order_term})*$")},
            "description": "col.asc|desc.nullsfirst|nullslast, comma-separated"}),
        json!({"$ref": "#/components/parameters/Prefer"}),
    ];
    if paged {
        for page in ["limit", "offset", "Range"] {
            params.push(json!({"$ref": format!("#/components/parameters/{page}")}));
        }
    }
    let items: Vec<String> = table
        .columns
        .iter()
        .map(|c| format!("{}\\.{}", regex::escape(&c.name), filter_value(c, true)))
        .collect();
    if !items.is_empty() {
        let item = format!("({})", items.join("|"));
        params.push(
            json!({"name": "or", "in": "query", "schema": {"type": "string",
            "pattern": format!("^\\({item}(,{item})*\\)$")},
            "description": "any of: (col.op.value,…), nesting and(…)/or(…)"}),
        );
    }
    for c in &table.columns {
        let value = filter_value(c, false);
        params.push(json!({
            "name": c.name, "in": "query", "required": false,
            "schema": {"type": "string", "pattern": format!("^{value}$")},
            "description": "filter: op.value (eq, neq, gt, gte, lt, lte, like, ilike, in, is; not. before any), e.g. eq.1, in.(1,2), is.null"
        }));
    }
    params
}

/// The `op.value` a filter on `c` takes, as a regex (no anchors), by the column's kind; text
/// values inside an `or=(…)` list without the commas, parentheses and quotes that would need
/// quoting there.
fn filter_value(c: &Column, listed: bool) -> String {
    let compare = "(not\\.)?(eq|neq|gt|gte|lt|lte)";
    let null = "(not\\.)?is\\.null";
    let text = if listed {
        "[a-zA-Z0-9 _-]*"
    } else {
        "[^\\u0000]*"
    };
    match kind(c) {
        Kind::Integer(min, max) => {
            // digits that stay within the type's range
            let digits = if min >= i64::from(i32::MIN) && max <= i64::from(i32::MAX) {
                if max <= i64::from(i16::MAX) {
                    4
                } else {
                    9
                }
            } else {
                18
            };
            let n = format!("-?[0-9]{{1,{digits}}}");
            format!("({compare}\\.{n}|(not\\.)?in\\.\\({n}(,{n})*\\)|{null})")
        }
        Kind::Number(_) => {
            let n = "-?[0-9]{1,6}(\\.[0-9]{1,6})?";
            format!("({compare}\\.{n}|{null})")
        }
        Kind::Boolean => format!("((not\\.)?(eq|neq|is)\\.(true|false)|{null})"),
        Kind::Date => {
            let date = DATE.trim_start_matches('^').trim_end_matches('$');
            format!("({compare}\\.{date}|{null})")
        }
        Kind::Text => format!("({compare}\\.{text}|(not\\.)?(like|ilike)\\.{text}|{null})"),
        Kind::Timestamp | Kind::Time | Kind::Json | Kind::Other => null.to_string(),
    }
}

/// An integer within `[min, max]`, as JSON or as its decimal text.
fn integer_argument(min: i64, max: i64) -> Value {
    let digits = if max <= i64::from(i16::MAX) {
        4
    } else if max <= i64::from(i32::MAX) {
        9
    } else {
        15
    };
    json!({"type": ["integer", "string", "null"], "minimum": min, "maximum": max,
        "pattern": format!("^-?[0-9]{{1,{digits}}}$")})
}

/// A custom resource's argument in a JSON body of `kind`: the values its parameter takes
/// (text as a JSON string too, `null` for none).
pub fn resource_argument(kind: crate::resources::declare::ParamType) -> Value {
    use crate::resources::declare::ParamType;
    match kind {
        ParamType::Int => integer_argument(i64::MIN, i64::MAX),
        ParamType::Float => json!({"type": ["number", "string", "null"],
            "pattern": "^-?[0-9]{1,15}(\\.[0-9]{1,6})?$"}),
        ParamType::Bool => json!({"type": ["boolean", "string", "null"],
            "pattern": "^(true|false|t|f|yes|no|y|n|on|off|1|0)$"}),
        ParamType::Date => json!({"type": ["string", "null"], "pattern": DATE}),
        ParamType::Timestamp => json!({"type": ["string", "null"], "pattern": TIMESTAMP}),
        ParamType::Text => {
            json!({"type": ["string", "number", "boolean", "null"], "pattern": NO_NUL})
        }
        ParamType::Json => json!({"$ref": format!("#/components/schemas/{JSON_VALUE}")}),
    }
}

/// A PostgreSQL function's argument (passed through `json_to_record`, which takes a value's
/// JSON or its text): by the parameter's type.
pub fn function_argument(decl_type: &str, json_type: &str) -> Value {
    if let Some(element) = decl_type.strip_suffix("[]") {
        let item = match function_argument(element, &element_json_type(element)) {
            Value::Object(mut o) => {
                // elements are not null here (a NULL element is written null all the same)
                o.remove("pattern");
                Value::Object(o)
            }
            other => other,
        };
        return json!({"type": ["array", "null"], "items": item});
    }
    match json_type {
        "integer" => match decl_type {
            "smallint" => integer_argument(i64::from(i16::MIN), i64::from(i16::MAX)),
            "bigint" => integer_argument(i64::MIN, i64::MAX),
            _ => integer_argument(i64::from(i32::MIN), i64::from(i32::MAX)),
        },
        "number" => json!({"type": ["number", "string", "null"], "minimum": -1e15, "maximum": 1e15,
            "pattern": "^-?[0-9]{1,15}(\\.[0-9]{1,6})?$"}),
        "boolean" => json!({"type": ["boolean", "string", "null"],
            "pattern": "^(true|false|t|f|yes|no|on|off|1|0)$"}),
        _ if decl_type == "date" => json!({"type": ["string", "null"], "pattern": DATE}),
        _ => json!({"$ref": format!("#/components/schemas/{JSON_VALUE}")}),
    }
}

/// The JSON type of an array's element type by its name.
fn element_json_type(decl_type: &str) -> String {
    match decl_type {
        "smallint" | "integer" | "bigint" => "integer",
        "real" | "double precision" | "numeric" => "number",
        "boolean" => "boolean",
        _ => "string",
    }
    .to_string()
}
