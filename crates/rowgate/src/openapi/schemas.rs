//! The JSON schemas of the OpenAPI documents: values as the database takes them (integers within
//! their column type's range, strings without NUL, dates as dates, JSON without `\u0000`, which
//! PostgreSQL's `jsonb` refuses), rows, duality documents, errors, and the query parameters of a
//! read described by patterns of what the server accepts (filters `op.value` typed by the
//! column, `select` and `order` over the table's columns), so that a request the document calls
//! valid is one the server takes, and a generated one (schemathesis, Swagger UI) works.

use serde_json::{json, Map, Value};

use crate::config::resources::ParamType;
use crate::resources::params::Range;
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
            let mut schema = json!({"anyOf": any});
            declared_type(c, &mut schema);
            return schema;
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
    declared_type(c, &mut schema);
    schema
}

/// The column's declared type in `format`, as PostgREST states it (`integer`, `text`,
/// `INTEGER` on SQLite), unless it is a format JSON Schema defines (a `time` or `uuid` column
/// would then be held to more or less than it takes); a date's is `date` already.
fn declared_type(c: &Column, schema: &mut Value) {
    const DEFINED: [&str; 19] = [
        "date",
        "time",
        "date-time",
        "duration",
        "email",
        "idn-email",
        "hostname",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "uri",
        "uri-reference",
        "iri",
        "iri-reference",
        "uuid",
        "uri-template",
        "json-pointer",
        "relative-json-pointer",
        "regex",
    ];
    let defined = DEFINED.iter().any(|f| c.decl_type.eq_ignore_ascii_case(f));
    if schema.get("format").is_none() && !defined && !c.decl_type.is_empty() {
        schema["format"] = json!(c.decl_type);
    }
}

/// PostgREST's note on a key column (which clients such as Supabase's studio read): `Note:`,
/// then `This is a Primary Key.<pk/>` and `This is a Foreign Key to `t.c`.<fk table='t'
/// column='c'/>` as they apply; `None` for another column.
fn key_note(table: &Table, c: &Column) -> Option<String> {
    let mut lines = vec!["Note:".to_string()];
    if c.pk_position > 0 {
        lines.push("This is a Primary Key.<pk/>".into());
    }
    for fk in &table.foreign_keys {
        if let Some(i) = fk.columns.iter().position(|col| *col == c.name) {
            let to = fk.ref_columns.get(i).cloned().unwrap_or_default();
            lines.push(format!(
                "This is a Foreign Key to `{t}.{to}`.<fk table='{t}' column='{to}'/>",
                t = fk.ref_table
            ));
        }
    }
    (lines.len() > 1).then(|| lines.join("\n"))
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
        if let Some(note) = key_note(table, c) {
            schema["description"] = json!(note);
        }
        if !c.nullable && c.default.is_none() && c.pk_position == 0 && !c.generated {
            required.push(c.name.clone());
        }
        props.insert(c.name.clone(), schema);
    }
    json!({"type": "object", "properties": props, "required": required})
}

/// An inserted row's `schema`: SQLite assigns the next rowid for a null as for a key left out.
pub fn rowid_assigned(table: &Table, schema: &mut Value) {
    for c in table.columns.iter().filter(|c| rowid_alias(table, c)) {
        let field = &mut schema["properties"][&c.name];
        field["type"] = json!(["integer", "null"]);
        let note = key_note(table, c).unwrap_or_default();
        field["description"] = json!(format!("Null or left out: the next rowid.\n\n{note}"));
    }
}

/// Whether `c` is the rowid of a SQLite table under another name (its lone `INTEGER PRIMARY
/// KEY`).
fn rowid_alias(table: &Table, c: &Column) -> bool {
    !postgres(c)
        && !table.is_view
        && c.pk_position > 0
        && table.primary_key.len() == 1
        && c.decl_type.eq_ignore_ascii_case("INTEGER")
}

/// Whether `c` is a key column whose value the database assigns to a new row (the rowid, a
/// default such as a sequence or identity).
fn assigned_key(table: &Table, c: &Column) -> bool {
    c.pk_position > 0 && (rowid_alias(table, c) || c.default.is_some())
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
    document_level(schema, table, items, None, false)
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
    let mut root = document_level(
        schema,
        table,
        items,
        Some(write != DocumentWrite::Patch),
        write == DocumentWrite::Insert,
    );
    let keys = fields_of(table, items, |c| c.pk_position > 0);
    // fields left out of the body, and fields it need not give
    let (mut absent, mut optional) = (Vec::new(), Vec::new());
    if write == DocumentWrite::Insert {
        // a new document may name its key (a taken one is a 409), and must when rows are
        // nested in it (see `document_level`); its columns with defaults may be left out
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

/// One level of a document's schema; `write`: as written (`Some(complete)`), else as read;
/// `new_rows`: whether a written row may be new (its key assigned by the database when left
/// out or null).
fn document_level(
    schema: &SchemaCache,
    table: &Table,
    items: &[SelectItem],
    write: Option<bool>,
    new_rows: bool,
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
                    let mut field = column_schema(c);
                    if write.is_some() && new_rows && assigned_key(table, c) {
                        // a new row's key: null or left out, the database assigns it
                        field["type"] = json!([c.json_type, "null"]);
                    }
                    props.insert(alias.clone().unwrap_or_else(|| name.clone()), field);
                }
            }
            // (a duality view's document holds no aggregates)
            SelectItem::CountRows { .. } => {}
            SelectItem::Embed(e) => {
                let Ok(rel) = relationships::find(schema, table, &e.relation, e.hint.as_deref())
                else {
                    continue;
                };
                let Some(related) = schema.table(&rel.related) else {
                    continue;
                };
                // a nested row is written whole: its key and what its columns need
                // (rows of an array may be new; a row referred to exists)
                let inner = document_level(
                    schema,
                    related,
                    &e.select,
                    write.map(|_| true),
                    rel.is_many(),
                );
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
            let needed = |c: &Column| {
                (c.pk_position > 0 && !(new_rows && assigned_key(table, c)))
                    || (complete && !c.nullable && !c.generated && c.pk_position == 0)
            };
            let mut required = fields_of(table, items, needed);
            required.extend(spread_keys);
            let mut level = json!({"type": "object", "additionalProperties": false,
                "required": required, "dependentRequired": spread_needs});
            // a new row's nested rows refer to it by its key: without one (the database
            // assigning it), it has none
            let arrays: Vec<&String> = props
                .iter()
                .filter(|(_, p)| p["items"].is_object())
                .map(|(k, _)| k)
                .collect();
            let assigned = fields_of(table, items, |c| assigned_key(table, c));
            if let ([key], false, true) = (assigned.as_slice(), arrays.is_empty(), new_rows) {
                let empty: Map<String, Value> = arrays
                    .iter()
                    .map(|a| ((*a).clone(), json!({"maxItems": 0})))
                    .collect();
                level["anyOf"] = json!([
                    {"required": [key], "properties": {key: {"not": {"type": "null"}}}},
                    {"properties": empty},
                ]);
            }
            level["properties"] = Value::Object(props);
            level
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
            "pattern": format!("^(|\\*|{columns}(,{columns})*)$")},
            "description": "columns to return: col, alias:col, col::type, *, embedded rel(cols); empty: every column"}),
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
    number_argument("integer", min as f64, max as f64)
}

/// A number (`kind`: `integer` or `number`) within `[min, max]`, as JSON or as its decimal
/// text when a pattern can say which texts lie within.
fn number_argument(kind: &str, min: f64, max: f64) -> Value {
    let integer = kind == "integer";
    let mut schema = json!({"type": [kind, "null"], "minimum": bound(integer, min, true),
        "maximum": bound(integer, max, false)});
    if let Some(pattern) = number_text(min, max, kind == "number") {
        schema["type"] = json!([kind, "string", "null"]);
        schema["pattern"] = json!(pattern);
    }
    schema
}

/// A range's bound `value` in a schema: of an integer, the integer within (`lower`: the least).
pub fn bound(integer: bool, value: f64, lower: bool) -> Value {
    match (integer, lower) {
        // (`as` saturates: i64::MAX as f64 is above i64::MAX)
        (true, true) => json!(value.ceil() as i64),
        (true, false) => json!(value.floor() as i64),
        (false, _) => json!(value),
    }
}

/// A pattern of decimal texts all within `[min, max]` (with a fraction: `fraction`), with as
/// many digits as that allows (at most 15); none when no simple pattern stays within (a least
/// value above 1).
fn number_text(min: f64, max: f64, fraction: bool) -> Option<String> {
    // the digits d such that every number of d digits (and a fraction) is at most `bound`
    let digits = |bound: f64| {
        let d = if fraction { bound } else { bound + 1.0 }.log10().floor();
        if d >= 1.0 {
            (d as usize).min(15)
        } else {
            0
        }
    };
    let fraction = if fraction { "(\\.[0-9]{1,6})?" } else { "" };
    let mut branches = Vec::new();
    if min < 0.0 {
        let d = digits(-min);
        if d > 0 {
            branches.push(format!("-[0-9]{{1,{d}}}{fraction}"));
        }
    }
    if min <= 0.0 && max > 0.0 {
        let d = digits(max);
        if d > 0 {
            branches.push(format!("[0-9]{{1,{d}}}{fraction}"));
        }
    }
    (!branches.is_empty()).then(|| format!("^({})$", branches.join("|")))
}

/// A custom resource's argument in a JSON body of `kind` within `range` (a number's): the
/// values its parameter takes (text as a JSON string too, `null` for none).
pub fn resource_argument(kind: ParamType, range: Range) -> Value {
    match kind {
        ParamType::Int => number_argument(
            "integer",
            range.min.unwrap_or(i64::MIN as f64),
            range.max.unwrap_or(i64::MAX as f64),
        ),
        ParamType::Float => {
            // (as text: within ±1e15, as JSON: any finite number but for the range's bounds)
            let mut schema = number_argument(
                "number",
                range.min.unwrap_or(-1e15),
                range.max.unwrap_or(1e15),
            );
            if range.min.is_none() {
                schema.as_object_mut().map(|s| s.remove("minimum"));
            }
            if range.max.is_none() {
                schema.as_object_mut().map(|s| s.remove("maximum"));
            }
            schema
        }
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
