//! The OpenAPI 3.1 description of the API, generated from the schema cache: one path per table
//! and view (and per item URL where there is a primary key), one schema per table, limited to what
//! the caller's role is granted.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};

use crate::api::request::{negotiate, MediaType};
use crate::app::App;
use crate::auth::policy::{Grant, Op, Policy};
use crate::auth::Principal;
use crate::config::resources::{ParamType, Shape, Source};
use crate::duality::DualityViews;
use crate::engine::timing::Timing;
use crate::error::ApiError;
use crate::reply::Reply;
use crate::resources::{Param, Resource, Resources};
use crate::schema::functions::{Function, Returns};
use crate::schema::{SchemaCache, Table};
use schemas::{
    document_schema, error_schema, json_value, key_param, read_params, table_schema, JSON_VALUE,
};

mod ords;
mod schemas;

pub use ords::ords_catalog;

/// Answers `GET /{prefix}/` and `/openapi.json` with what `principal` may use.
pub fn reply(
    app: &App,
    headers: &HeaderMap,
    principal: &Principal,
    timing: &mut Timing,
) -> Result<Reply, ApiError> {
    let media = negotiate(
        crate::api::request::accept(headers),
        &[MediaType::OpenApi, MediaType::Json],
    )?;
    let cache = app.db.schema();
    let profile = headers.get("accept-profile").and_then(|v| v.to_str().ok());
    let schema = cache.profile(profile)?;
    // the profile it describes, named where there are several (as PostgREST's root)
    let (_, named) = crate::engine::transaction::profile_settings(&cache, schema, "");
    timing.mark("parse");
    // built from the schema cache: no database transaction
    let doc = document(
        schema,
        &app.config.rest.prefix,
        &app.resources.load(),
        &app.duality,
        &app.auth.policy,
        principal,
    );
    timing.mark("plan");
    let body = serde_json::to_vec(&doc).map_err(ApiError::internal)?;
    timing.mark("response");
    Ok(Reply::new(StatusCode::OK, media, Bytes::from(body)).profile(named))
}

/// The OpenAPI document for `schema` served under `prefix`, plus the custom resources: only the
/// tables, columns, methods and resources `principal`'s role may use.
pub fn document(
    schema: &SchemaCache,
    prefix: &str,
    resources: &Resources,
    duality: &DualityViews,
    policy: &Policy,
    principal: &Principal,
) -> Value {
    let mut paths = Map::new();
    let mut schemas = Map::new();
    for view in duality.views() {
        let readable = |name: &str| {
            policy
                .described(principal, name, schema)
                .is_some_and(|g| g.allows(Op::Select))
        };
        let Some(root) = schema.table(&view.table).filter(|t| readable(&t.name)) else {
            continue;
        };
        let mut document = document_schema(schema, root, &view.document);
        if let Value::Object(d) = &mut document {
            if let Some(Value::Object(props)) = d.get_mut("properties") {
                props.insert(
                    "_metadata".into(),
                    json!({"type": "object", "properties": {"etag": {"type": "string"}}}),
                );
            }
        }
        schemas.insert(view.name.clone(), document);
        let r = format!("#/components/schemas/{}", view.name);
        let list = ["limit", "offset", "Range"]
            .map(|p| json!({"$ref": format!("#/components/parameters/{p}")}));
        // the writes the view allows and the role's grant on the root table permits (the
        // other tables' grants are checked when a write reaches them)
        let may = |allowed: bool, op: Op| {
            allowed
                && policy
                    .described(principal, &view.table, schema)
                    .is_some_and(|g| g.allows(op))
        };
        // the root's noupdate fields, which a PUT or PATCH may not change
        let noupdate: Vec<String> = view
            .root
            .fields
            .iter()
            .filter(|f| f.noupdate && f.path.len() == 1)
            .map(|f| f.name.clone())
            .collect();
        let document_body = |write: schemas::DocumentWrite, unchangeable: &[String]| {
            let body =
                schemas::document_write_schema(schema, root, &view.document, write, unchangeable);
            json!({"required": true, "content": {
                "application/json": {"schema": body},
                "application/merge-patch+json": {"schema": body}
            }})
        };
        let written = |summary: String, write: schemas::DocumentWrite, unchangeable: &[String]| {
            json!({
                "summary": summary,
                "requestBody": document_body(write, unchangeable),
                "responses": {
                    "200": {"description": "the new document; its ETag is its etag",
                        "content": {"application/json": {"schema": {"$ref": r}}}},
                    "201": {"description": "the new document, its Location and ETag",
                        "content": {"application/json": {"schema": {"$ref": r}}}},
                    "412": {"$ref": "#/components/responses/Error"},
                    "default": {"$ref": "#/components/responses/Error"}
                }
            })
        };
        let mut collection = Map::new();
        collection.insert(
            "get".into(),
            json!({
                "summary": format!("documents of the duality view {}", view.name),
                "parameters": list,
                "responses": {
                    "200": {"description": "documents", "content": {"application/json":
                        {"schema": {"type": "array", "items": {"$ref": r}}}}},
                    "default": {"$ref": "#/components/responses/Error"}
                }
            }),
        );
        if may(view.root.insert, Op::Insert) {
            collection.insert(
                "post".into(),
                written(
                    format!("insert a document of {}", view.name),
                    schemas::DocumentWrite::Insert,
                    &[],
                ),
            );
        }
        paths.insert(format!("{prefix}/{}", view.name), Value::Object(collection));
        let mut id = key_param(root);
        id["description"] = json!("the document's _id");
        let key = json!([id]);
        let mut item = Map::new();
        item.insert(
            "get".into(),
            json!({
                "summary": format!("one document of the duality view {} (its _id)", view.name),
                "parameters": key,
                "responses": {
                    "200": {"description": "the document; its ETag is its etag",
                        "content": {"application/json": {"schema": {"$ref": r}}}},
                    "default": {"$ref": "#/components/responses/Error"}
                }
            }),
        );
        if view.root.writable() && policy.described(principal, &view.table, schema).is_some() {
            let mut put = written(
                format!(
                    "replace a document of {} (If-Match or _metadata.etag: its etag)",
                    view.name
                ),
                schemas::DocumentWrite::Replace,
                &noupdate,
            );
            put["parameters"] = key.clone();
            let mut patch = written(
                format!("change a document of {} with a JSON Merge Patch", view.name),
                schemas::DocumentWrite::Patch,
                &noupdate,
            );
            patch["parameters"] = key.clone();
            item.insert("put".into(), put);
            item.insert("patch".into(), patch);
        }
        if may(view.root.delete, Op::Delete) {
            item.insert(
                "delete".into(),
                json!({
                    "summary": format!("delete a document of {}", view.name),
                    "parameters": key,
                    "responses": {
                        "204": {"description": "deleted"},
                        "default": {"$ref": "#/components/responses/Error"}
                    }
                }),
            );
        }
        paths.insert(
            format!("{prefix}/{}/{{key}}", view.name),
            Value::Object(item),
        );
    }
    for resource in &resources.list {
        if policy.authorize(principal, resource.subject()).is_err() {
            continue;
        }
        let Value::Object(ops) = custom_resource(resource) else {
            continue;
        };
        let entry = paths
            .entry(resource.path.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(existing) = entry {
            existing.extend(ops);
        }
    }
    for overloads in schema.functions.values() {
        // the first overload stands for the name (a resource function of that name wins)
        let Some(f) = overloads.first() else { continue };
        if !policy.described_call(principal, &f.name, schema)
            || resources.function(&f.name).is_some()
        {
            continue;
        }
        paths.insert(format!("{prefix}/rpc/{}", f.name), function(f));
    }
    for full in schema.tables.values() {
        let Some(grant) = policy.described(principal, &full.name, schema) else {
            continue;
        };
        let grant = &*grant;
        if !grant.allows(Op::Select) {
            continue;
        }
        let table = &*grant.view(full);
        schemas.insert(table.name.clone(), schemas::row_schema(table));
        paths.insert(
            format!("{prefix}/{}", table.name),
            granted_methods(collection(table), grant),
        );
        if !table.primary_key.is_empty() {
            paths.insert(
                format!("{prefix}/{}/{{key}}", table.name),
                granted_methods(item(table), grant),
            );
        }
    }
    let postgres = schema
        .tables
        .values()
        .flat_map(|t| &t.columns)
        .any(|c| c.input == crate::schema::input::InputType::Native);
    schemas.insert(JSON_VALUE.into(), json_value(postgres));
    // every operation can fail: its errors are the one envelope
    for path in paths.values_mut() {
        if let Value::Object(operations) = path {
            for operation in operations.values_mut() {
                if let Some(Value::Object(responses)) = operation.get_mut("responses") {
                    responses
                        .entry("default")
                        .or_insert_with(|| json!({"$ref": "#/components/responses/Error"}));
                }
            }
        }
    }
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Rowgate",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "AutoREST API over the database schema (PostgREST query syntax). \
                Requests without a token act as the anonymous role; this document lists what \
                the caller's role may use."
        },
        "paths": paths,
        // a token is optional (the anonymous role), as a bearer token or Supabase's apikey
        "security": [{}, {"bearer": []}, {"apikey": []}],
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                    "description": "a token from POST /oauth/token (client credentials), an API key, or an outside issuer's"},
                "apikey": {"type": "apiKey", "in": "header", "name": "apikey",
                    "description": "an API key (rowgate clients key NAME), as Supabase's clients send it"}
            },
            "parameters": {
                "limit": {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 0, "maximum": u64::MAX}},
                "offset": {"name": "offset", "in": "query", "schema": {"type": "integer", "maximum": u64::MAX},
                    "description": "rows to skip (a negative offset skips none, as in PostgREST)"},
                "Range": {"name": "Range", "in": "header", "schema": {"type": "string", "pattern": "^(0-[0-9]{0,6})?$"},
                    "description": "FIRST-LAST rows, e.g. 0-9 (empty: all)"},
                "Prefer": {"name": "Prefer", "in": "header", "schema": {"type": "string"},
                    "description": "return=minimal|headers-only|representation, count=exact|planned|estimated, resolution=merge-duplicates|ignore-duplicates, missing=default, max-affected=N, params=single-object, handling=strict|lenient; unknown preferences are ignored (RFC 7240) unless handling=strict"}
            },
            "responses": {
                "Error": {"description": "an error: code, message, details, hint", "content": {"application/json": {"schema": error_schema()}}}
            }
        }
    })
}

fn rows_response(table: &Table) -> Value {
    let r = format!("#/components/schemas/{}", table.name);
    json!({"description": "rows", "content": {
        "application/json": {"schema": {"type": "array", "items": {"$ref": r}}},
        "text/csv": {"schema": {"type": "string"}},
        "application/vnd.pgrst.object+json": {"schema": {"$ref": r}}
    }})
}

/// A write's answer: with `Prefer: return=representation` the rows (or, for an item's PUT, the
/// row) as JSON, else no body (`Location` for an insert with `return=headers-only`).
fn written_response(what: &str) -> Value {
    json!({"description": format!("{what}; with Prefer: return=representation, the rows as application/json")})
}

/// One row of a write, the table's columns only: with every column an insert needs, or (an
/// update) any of them.
fn row_schema(table: &Table, insert: bool) -> Value {
    let mut row = table_schema(table);
    row["additionalProperties"] = json!(false);
    if insert {
        schemas::rowid_assigned(table, &mut row);
    } else {
        row.as_object_mut().map(|r| r.remove("required"));
    }
    row
}

/// A body of one row.
fn row_body(table: &Table, insert: bool) -> Value {
    json!({"required": true, "content": {"application/json": {"schema": row_schema(table, insert)}}})
}

/// A collection write's body: an insert's row or array of rows, an update's one object.
fn body(table: &Table, insert: bool) -> Value {
    let row = row_schema(table, insert);
    if !insert {
        return json!({"required": true, "content": {"application/json": {"schema": row}}});
    }
    let rows = json!({"type": "array", "items": row, "allOf": same_keys(table, &row)});
    json!({"required": true, "content": {"application/json": {"schema": {"oneOf": [row, rows]}}}})
}

/// PostgREST's "All object keys must match" in JSON Schema: for each column an object may
/// leave out, either every object of the array has it or none has.
fn same_keys(table: &Table, row: &Value) -> Vec<Value> {
    let required = row["required"].as_array().cloned().unwrap_or_default();
    table
        .columns
        .iter()
        .filter(|c| !c.generated && !required.iter().any(|r| r == c.name.as_str()))
        .map(|c| {
            json!({"anyOf": [
                {"items": {"required": [c.name]}},
                {"items": {"not": {"required": [c.name]}}},
            ]})
        })
        .collect()
}

/// A path item with only the methods `grant` allows.
fn granted_methods(mut path: Value, grant: &Grant) -> Value {
    if let Value::Object(methods) = &mut path {
        methods.retain(|method, _| match method.as_str() {
            "get" | "head" => grant.allows(Op::Select),
            "post" => grant.allows(Op::Insert),
            "patch" => grant.allows(Op::Update),
            "delete" => grant.allows(Op::Delete),
            "put" => grant.allows(Op::Insert) && grant.allows(Op::Update),
            _ => true,
        });
    }
    path
}

fn collection(table: &Table) -> Value {
    let mut ops = Map::new();
    ops.insert(
        "get".into(),
        json!({
            "summary": format!("read {}", table.name),
            "parameters": read_params(table, true),
            "responses": {"200": rows_response(table), "206": rows_response(table)}
        }),
    );
    let w = table.writes;
    {
        let written = read_params(table, false);
        // the conflict targets an upsert may name: the primary key and unique columns
        let targets: Vec<String> = std::iter::once(table.primary_key.join(","))
            .chain(table.unique.iter().map(|u| u.join(",")))
            .filter(|t| !t.is_empty())
            .collect();
        if w.insert {
            ops.insert(
            "post".into(),
            json!({
                "summary": format!("insert into {}", table.name),
                "parameters": [{"$ref": "#/components/parameters/Prefer"},
                    {"name": "on_conflict", "in": "query", "schema": {"type": "string", "enum": targets},
                     "description": "the conflict target of an upsert (Prefer: resolution=…)"}],
                "requestBody": body(table, true),
                "responses": {"201": written_response("created")}
            }),
        );
        }
        if w.update {
            ops.insert(
            "patch".into(),
            json!({
                "summary": format!("update {}", table.name), "parameters": written,
                "requestBody": body(table, false),
                "responses": {"200": written_response("updated"), "204": {"description": "updated"}}
            }),
        );
        }
        if w.delete {
            ops.insert(
            "delete".into(),
            json!({
                "summary": format!("delete from {}", table.name), "parameters": written,
                "responses": {"200": written_response("deleted"), "204": {"description": "deleted"}}
            }),
        );
        }
    }
    Value::Object(ops)
}

fn item(table: &Table) -> Value {
    let key = key_param(table);
    let r = format!("#/components/schemas/{}", table.name);
    let one = json!({"description": "the row", "headers": {"ETag": {"schema": {"type": "string"}}},
        "content": {"application/json": {"schema": {"$ref": r}}}});
    let mut ops = Map::new();
    ops.insert(
        "get".into(),
        json!({"summary": format!("read one {}", table.name),
        "parameters": [key], "responses": {"200": one, "304": {"description": "not modified"},
        "404": {"description": "no such row"}}}),
    );
    let w = table.writes;
    {
        // the key comes from the URL: the body holds the other columns
        let mut others = table.clone();
        others.columns.retain(|c| c.pk_position == 0);
        let prefer = json!({"$ref": "#/components/parameters/Prefer"});
        for (verb, what, body) in [
            ("put", "insert or replace", Some(row_body(&others, true))),
            ("patch", "update", Some(row_body(&others, false))),
            ("delete", "delete", None),
        ] {
            let takes = match verb {
                "put" => w.insert && w.update,
                "patch" => w.update,
                _ => w.delete,
            };
            if !takes {
                continue;
            }
            let mut op = json!({"summary": format!("{what} one {}", table.name),
                "parameters": [key, prefer], "responses": {"200": written_response("done"),
                "201": written_response("inserted"), "204": {"description": "done"},
                "412": {"description": "If-Match does not match"}}});
            if let Some(body) = body {
                op["requestBody"] = body;
            }
            ops.insert(verb.into(), op);
        }
    }
    Value::Object(ops)
}

/// The operations of one custom resource: its parameters (path and query as parameters, body
/// ones as a JSON object body) and its answer.
fn custom_resource(resource: &Resource) -> Value {
    let schema_of = |p: &Param| match p.kind {
        ParamType::Int | ParamType::Float => {
            let integer = p.kind == ParamType::Int;
            let mut schema = if integer {
                json!({"type": "integer", "format": "int64"})
            } else {
                json!({"type": "number"})
            };
            if let Some(min) = p.range.min {
                schema["minimum"] = schemas::bound(integer, min, true);
            }
            if let Some(max) = p.range.max {
                schema["maximum"] = schemas::bound(integer, max, false);
            }
            schema
        }
        ParamType::Bool => json!({"type": "boolean"}),
        ParamType::Date => json!({"type": "string", "format": "date"}),
        ParamType::Timestamp => json!({"type": "string", "format": "date-time"}),
        ParamType::Text => json!({"type": "string"}),
        ParamType::Json => json!({}),
    };
    let mut params = Vec::new();
    let mut body_props = Map::new();
    let mut query_props = Map::new();
    let mut body_required = Vec::new();
    for p in &resource.params {
        let required = p.required && p.default.is_none();
        match p.source {
            Source::Path | Source::Query => params.push(json!({
                "name": p.name,
                "in": if p.source == Source::Path { "path" } else { "query" },
                "required": required || p.source == Source::Path,
                "schema": schema_of(p),
            })),
            Source::Body => {
                query_props.insert(p.name.clone(), schema_of(p));
                body_props.insert(p.name.clone(), schemas::resource_argument(p.kind, p.range));
                if required {
                    body_required.push(p.name.clone());
                }
            }
            Source::Claim => {}
        }
    }
    let ok = match resource.shape {
        Shape::Rows => json!({"description": "rows", "content": {"application/json":
            {"schema": {"type": "array", "items": {"type": "object"}}}}}),
        Shape::Row => json!({"description": "one row", "content": {"application/json":
            {"schema": {"type": "object"}}}}),
        Shape::Value => {
            json!({"description": "a value", "content": {"application/json": {"schema": {}}}})
        }
        Shape::Template => json!({"description": "a rendered page", "content": {
            resource.content_type().split(';').next().unwrap_or("text/html"): {"schema": {"type": "string"}}}}),
        Shape::None => json!({"description": "done"}),
    };
    let status = if resource.shape == Shape::None {
        "204"
    } else {
        "200"
    };
    let mut ops = Map::new();
    for method in &resource.methods {
        let mut parameters = params.clone();
        // a function's arguments come in the query string of a GET
        let by_query = resource.function.is_some() && *method == http::Method::GET;
        if by_query {
            parameters.extend(query_props.iter().map(|(name, schema)| {
                json!({"name": name, "in": "query", "required": body_required.contains(name), "schema": schema})
            }));
        }
        let mut op = json!({
            "summary": match &resource.function {
                Some(name) => format!("function {name}"),
                None => format!("custom resource {} {}", method, resource.path),
            },
            "parameters": parameters,
            "responses": {
                status: ok,
                "400": {"$ref": "#/components/responses/Error"},
            },
        });
        if !body_props.is_empty() && !by_query {
            op["requestBody"] = json!({"required": !body_required.is_empty(),
                "content": {"application/json": {"schema": {
                "type": "object", "properties": body_props, "required": body_required,
                "additionalProperties": false}}}});
        }
        if resource.shape == Shape::Row {
            op["responses"]["404"] = json!({"$ref": "#/components/responses/Error"});
        }
        ops.insert(method.as_str().to_ascii_lowercase(), op);
    }
    Value::Object(ops)
}

/// The operations of a database function at `/{prefix}/rpc/{name}`: POST with its arguments
/// as a JSON object, and GET with them in the query string unless it is VOLATILE.
fn function(f: &Function) -> Value {
    let typed = |json_type: &str| {
        if json_type.is_empty() {
            json!({})
        } else {
            json!({"type": json_type})
        }
    };
    let named: Vec<_> = f.params.iter().filter(|p| !p.name.is_empty()).collect();
    let required: Vec<&str> = named
        .iter()
        .filter(|p| !p.has_default)
        .map(|p| p.name.as_str())
        .collect();
    let properties: Map<String, Value> = named
        .iter()
        .map(|p| {
            (
                p.name.clone(),
                schemas::function_argument(&p.decl_type, p.json_type),
            )
        })
        .collect();
    let ok = match &f.returns {
        Returns::Void => json!({"description": "done"}),
        Returns::Scalar { set, json_type, .. } => {
            let value = typed(json_type);
            let schema = if *set {
                json!({"type": "array", "items": value})
            } else {
                value
            };
            json!({"description": "its value", "content": {"application/json": {"schema": schema}}})
        }
        Returns::Rows { set, table } => {
            let row = table_schema(table);
            let schema = if *set {
                json!({"type": "array", "items": row})
            } else {
                row
            };
            json!({"description": "its rows", "content": {"application/json": {"schema": schema}}})
        }
    };
    let status = if matches!(f.returns, Returns::Void) {
        "204"
    } else {
        "200"
    };
    let responses = json!({status: ok, "default": {"$ref": "#/components/responses/Error"}});
    let mut ops = Map::new();
    ops.insert(
        "post".into(),
        json!({
            "summary": format!("function {}", f.signature()),
            "requestBody": {"required": !required.is_empty(), "content": {"application/json": {"schema":
                {"type": "object", "properties": properties, "required": required,
                 "additionalProperties": false}}}},
            "responses": responses,
        }),
    );
    if !f.volatile {
        let parameters: Vec<Value> = named
            .iter()
            .map(|p| json!({"name": p.name, "in": "query", "required": !p.has_default, "schema": typed(p.json_type)}))
            .collect();
        ops.insert(
            "get".into(),
            json!({
                "summary": format!("function {}", f.signature()),
                "parameters": parameters,
                "responses": responses,
            }),
        );
    }
    Value::Object(ops)
}
