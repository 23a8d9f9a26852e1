//! The OpenAPI 3.1 description of the API, generated from the schema cache: one path per table
//! and view (and per item URL where there is a primary key), one schema per table, limited to what
//! the caller's role is granted.

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use serde_json::{json, Map, Value};

use crate::api::request::{negotiate, MediaType};
use crate::api::respond::Reply;
use crate::app::App;
use crate::auth::policy::{Grant, Op, Policy};
use crate::auth::Principal;
use crate::duality::DualityViews;
use crate::error::ApiError;
use crate::resources::declare::{ParamType, Shape, Source};
use crate::resources::{Resource, Resources};
use crate::schema::functions::{Function, Returns};
use crate::schema::relationships;
use crate::schema::{SchemaCache, Table};
use rowgate_query::SelectItem;

/// Answers `GET /{prefix}/` and `/openapi.json` with what `principal` may use.
pub fn reply(app: &App, headers: &HeaderMap, principal: &Principal) -> Result<Reply, ApiError> {
    let media = negotiate(headers, &[MediaType::OpenApi, MediaType::Json])?;
    let doc = document(
        &app.db.schema(),
        &app.config.rest.prefix,
        &app.resources.load(),
        &app.duality,
        &app.auth.policy,
        principal,
    );
    let body = serde_json::to_vec(&doc).map_err(ApiError::internal)?;
    Ok(Reply::new(StatusCode::OK, media, Bytes::from(body)))
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
                .grant(principal, name)
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
        let list = ["order", "limit", "offset", "Range"]
            .map(|p| json!({"$ref": format!("#/components/parameters/{p}")}));
        // the writes the view allows and the role's grant on the root table permits (the
        // other tables' grants are checked when a write reaches them)
        let may = |allowed: bool, op: Op| {
            allowed
                && policy
                    .grant(principal, &view.table)
                    .is_some_and(|g| g.allows(op))
        };
        let document_body = json!({"required": true, "content": {
            "application/json": {"schema": {"$ref": r}},
            "application/merge-patch+json": {"schema": {"$ref": r}}
        }});
        let written = |summary: String| {
            json!({
                "summary": summary,
                "requestBody": document_body,
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
                written(format!("insert a document of {}", view.name)),
            );
        }
        paths.insert(format!("{prefix}/{}", view.name), Value::Object(collection));
        let key =
            json!([{"name": "key", "in": "path", "required": true, "schema": {"type": "string"}}]);
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
        if view.root.writable() && policy.grant(principal, &view.table).is_some() {
            let mut put = written(format!(
                "replace a document of {} (If-Match or _metadata.etag: its etag)",
                view.name
            ));
            put["parameters"] = key.clone();
            let mut patch = written(format!(
                "change a document of {} with a JSON Merge Patch",
                view.name
            ));
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
        if !policy.may_call(principal, &f.name) || resources.function(&f.name).is_some() {
            continue;
        }
        paths.insert(format!("{prefix}/rpc/{}", f.name), function(f));
    }
    for full in schema.tables.values() {
        let Some(grant) = policy.grant(principal, &full.name) else {
            continue;
        };
        if !grant.allows(Op::Select) {
            continue;
        }
        let table = &*grant.view(full);
        schemas.insert(table.name.clone(), table_schema(table));
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
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "Rowgate",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "AutoREST API over the database schema (PostgREST query syntax)."
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "parameters": {
                "select": {"name": "select", "in": "query", "schema": {"type": "string"},
                    "description": "columns to return: col, alias:col, col::type, *"},
                "order": {"name": "order", "in": "query", "schema": {"type": "string"},
                    "description": "col.asc|desc.nullsfirst|nullslast, comma-separated"},
                "limit": {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                "offset": {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
                "or": {"name": "or", "in": "query", "schema": {"type": "string"},
                    "description": "(a.eq.1,b.gt.2)"},
                "Prefer": {"name": "Prefer", "in": "header", "schema": {"type": "string"},
                    "description": "return=minimal|headers-only|representation, count=exact, resolution=merge-duplicates|ignore-duplicates, missing=default, max-affected=N, handling=strict"},
                "Range": {"name": "Range", "in": "header", "schema": {"type": "string"},
                    "description": "FIRST-LAST rows, e.g. 0-9"}
            },
            "responses": {
                "Error": {"description": "an error", "content": {"application/json": {"schema": error_schema()}}}
            }
        }
    })
}

/// ORDS's `open-api-catalog/{object}/`: an OpenAPI 3 document of one object's ORDS endpoints
/// (`{base}` the `…/ords/{schema}` server): the collection (GET with `q`, `limit`, `offset`;
/// POST) and the item (GET, PUT, DELETE), the methods the role's grant allows, rows typed from
/// the columns the role may read (a duality view's documents from their schema).
pub fn ords_catalog(
    schema: &SchemaCache,
    duality: &DualityViews,
    policy: &Policy,
    principal: &Principal,
    base: &str,
    object: &str,
) -> Option<Value> {
    let (table_name, row) = match duality.get(object) {
        Some(view) => {
            let root = schema.table(&view.table)?;
            (
                view.table.as_str(),
                document_schema(schema, root, &view.document),
            )
        }
        None => (object, Value::Null),
    };
    let full = schema.table(table_name)?;
    let grant = policy.grant(principal, table_name)?;
    if !grant.allows(Op::Select) {
        return None;
    }
    let row = if row.is_null() {
        table_schema(&grant.view(full))
    } else {
        row
    };
    let link = json!({"type": "array", "items": {"type": "object", "properties": {
        "rel": {"type": "string"}, "href": {"type": "string"}}}});
    let mut item = row.clone();
    if let Value::Object(o) = &mut item {
        if let Some(Value::Object(props)) = o.get_mut("properties") {
            props.insert("links".into(), link.clone());
        }
    }
    let page = json!({"type": "object", "properties": {
        "items": {"type": "array", "items": item},
        "hasMore": {"type": "boolean"}, "limit": {"type": "integer"},
        "offset": {"type": "integer"}, "count": {"type": "integer"}, "links": link}});
    let error =
        json!({"description": "an error in ORDS's shape (code, title, message, type, instance)"});
    let query = |name: &str, kind: &str, what: &str| json!({"name": name, "in": "query", "schema": {"type": kind}, "description": what});
    let key = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"},
        "description": "the primary key (composite keys comma-separated in key order)"});
    let row_body = json!({"required": true, "content": {"application/json": {"schema": row}}});
    let json_of = |schema: &Value| json!({"application/json": {"schema": schema}});
    let collection = granted_methods(
        json!({
            "get": {
                "summary": format!("rows of {object}, a page at a time"),
                "parameters": [
                    query("q", "string", "a filter object: {\"col\":value}, {\"col\":{\"$gt\":1}}, {\"$orderby\":{…}}"),
                    query("limit", "integer", "rows per page"),
                    query("offset", "integer", "the page's first row")
                ],
                "responses": {"200": {"description": "a page", "content": json_of(&page)}, "default": error}
            },
            "post": {
                "summary": format!("insert a row of {object}"),
                "requestBody": row_body,
                "responses": {"201": {"description": "the stored row, its Location and ETag",
                    "content": json_of(&item)}, "default": error}
            },
            "delete": {
                "summary": format!("delete the rows of {object} a filter object selects"),
                "parameters": [query("q", "string", "a filter object (required)")],
                "responses": {"200": {"description": "{\"rowsDeleted\":N}"}, "default": error}
            }
        }),
        grant,
    );
    let mut single = granted_methods(
        json!({
            "get": {"summary": format!("one row of {object}"), "parameters": [key],
                "responses": {"200": {"description": "the row and its links; ETag", "content": json_of(&item)},
                    "default": error}},
            "put": {"summary": format!("update (or insert) one row of {object}"), "parameters": [key],
                "requestBody": row_body,
                "responses": {"200": {"description": "updated", "content": json_of(&item)},
                    "201": {"description": "inserted", "content": json_of(&item)}, "default": error}},
            "delete": {"summary": format!("delete one row of {object}"), "parameters": [key],
                "responses": {"200": {"description": "{\"rowsDeleted\":1}"}, "default": error}}
        }),
        grant,
    );
    if duality.get(object).is_some() {
        // a document's writes follow the view's permissions, checked when they run
        if let Value::Object(methods) = &mut single {
            methods.retain(|m, _| {
                m == "get" || duality.get(object).is_some_and(|v| v.root.writable())
            });
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": format!("ORDS generated API for {object}"), "version": env!("CARGO_PKG_VERSION")},
        "servers": [{"url": base.trim_end_matches('/')}],
        "paths": {format!("/{object}/"): collection, format!("/{object}/{{id}}"): single}
    }))
}

fn error_schema() -> Value {
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
fn document_schema(schema: &SchemaCache, table: &Table, items: &[SelectItem]) -> Value {
    let mut props = Map::new();
    for item in items {
        match item {
            SelectItem::Star => {
                for c in &table.columns {
                    props.insert(c.name.clone(), column_type(c));
                }
            }
            SelectItem::Column { name, alias, .. } => {
                if let Some(c) = table.column(name) {
                    props.insert(
                        alias.clone().unwrap_or_else(|| name.clone()),
                        column_type(c),
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
                let inner = document_schema(schema, related, &e.select);
                let key = e.alias.clone().unwrap_or_else(|| e.relation.clone());
                match (e.spread, inner) {
                    (true, Value::Object(mut o)) => {
                        if let Some(Value::Object(p)) = o.remove("properties") {
                            props.extend(p);
                        }
                    }
                    (_, inner) if rel.is_many() => {
                        props.insert(key, json!({"type": "array", "items": inner}));
                    }
                    (_, inner) => {
                        props.insert(key, json!({"oneOf": [inner, {"type": "null"}]}));
                    }
                }
            }
        }
    }
    json!({"type": "object", "properties": props})
}

/// A column's JSON type (nullable ones may be null).
fn column_type(c: &crate::schema::Column) -> Value {
    match (c.json_type, c.nullable) {
        ("", _) => json!({}),
        (t, true) => json!({"type": [t, "null"]}),
        (t, false) => json!({"type": t}),
    }
}

fn table_schema(table: &Table) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for c in &table.columns {
        let mut p = Map::new();
        if let Value::Object(t) = column_type(c) {
            p.extend(t);
        }
        p.insert("format".into(), json!(c.decl_type));
        if let Some(d) = &c.default {
            p.insert("default".into(), json!(d));
        }
        if c.pk_position > 0 {
            p.insert("description".into(), json!("primary key"));
        }
        if !c.nullable && c.default.is_none() && c.pk_position == 0 {
            required.push(c.name.clone());
        }
        props.insert(c.name.clone(), Value::Object(p));
    }
    json!({"type": "object", "properties": props, "required": required})
}

fn filter_params(table: &Table) -> Vec<Value> {
    let mut params: Vec<Value> = [
        "select", "order", "limit", "offset", "or", "Prefer", "Range",
    ]
    .iter()
    .map(|p| json!({"$ref": format!("#/components/parameters/{p}")}))
    .collect();
    for c in &table.columns {
        params.push(json!({
            "name": c.name, "in": "query", "required": false,
            "schema": {"type": "string"},
            "description": "filter: op.value, e.g. eq.1, gt.5, in.(1,2), is.null, like.A*"
        }));
    }
    params
}

fn rows_response(table: &Table) -> Value {
    let r = format!("#/components/schemas/{}", table.name);
    json!({"description": "rows", "content": {
        "application/json": {"schema": {"type": "array", "items": {"$ref": r}}},
        "text/csv": {"schema": {"type": "string"}},
        "application/vnd.pgrst.object+json": {"schema": {"$ref": r}}
    }})
}

fn body(table: &Table) -> Value {
    let r = format!("#/components/schemas/{}", table.name);
    json!({"content": {"application/json": {"schema": {"oneOf": [
        {"$ref": r}, {"type": "array", "items": {"$ref": r}}
    ]}}}})
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
    let params = filter_params(table);
    let mut ops = Map::new();
    ops.insert(
        "get".into(),
        json!({
            "summary": format!("read {}", table.name), "parameters": params,
            "responses": {"200": rows_response(table), "206": rows_response(table)}
        }),
    );
    if !table.is_view {
        ops.insert(
            "post".into(),
            json!({
                "summary": format!("insert into {}", table.name),
                "parameters": [{"$ref": "#/components/parameters/Prefer"},
                    {"name": "columns", "in": "query", "schema": {"type": "string"}},
                    {"name": "on_conflict", "in": "query", "schema": {"type": "string"}}],
                "requestBody": body(table),
                "responses": {"201": rows_response(table)}
            }),
        );
        ops.insert(
            "patch".into(),
            json!({
                "summary": format!("update {}", table.name), "parameters": params,
                "requestBody": body(table),
                "responses": {"200": rows_response(table), "204": {"description": "updated"}}
            }),
        );
        ops.insert(
            "delete".into(),
            json!({
                "summary": format!("delete from {}", table.name), "parameters": params,
                "responses": {"200": rows_response(table), "204": {"description": "deleted"}}
            }),
        );
    }
    Value::Object(ops)
}

fn item(table: &Table) -> Value {
    let key = json!({"name": "key", "in": "path", "required": true, "schema": {"type": "string"},
        "description": format!("primary key ({})", table.primary_key.join(", "))});
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
    if !table.is_view {
        for (verb, what) in [
            ("put", "insert or replace"),
            ("patch", "update"),
            ("delete", "delete"),
        ] {
            ops.insert(
                verb.into(),
                json!({"summary": format!("{what} one {}", table.name),
                "parameters": [key], "responses": {"200": one, "204": {"description": "done"},
                "412": {"description": "If-Match does not match"}}}),
            );
        }
    }
    Value::Object(ops)
}

/// The operations of one custom resource: its parameters (path and query as parameters, body
/// ones as a JSON object body) and its answer.
fn custom_resource(resource: &Resource) -> Value {
    let schema_of = |kind: ParamType| match kind {
        ParamType::Int => json!({"type": "integer", "format": "int64"}),
        ParamType::Float => json!({"type": "number"}),
        ParamType::Bool => json!({"type": "boolean"}),
        ParamType::Date => json!({"type": "string", "format": "date"}),
        ParamType::Timestamp => json!({"type": "string", "format": "date-time"}),
        ParamType::Text => json!({"type": "string"}),
        ParamType::Json => json!({}),
    };
    let mut params = Vec::new();
    let mut body_props = Map::new();
    let mut body_required = Vec::new();
    for p in &resource.params {
        let required = p.required && p.default.is_none();
        match p.source {
            Source::Path | Source::Query => params.push(json!({
                "name": p.name,
                "in": if p.source == Source::Path { "path" } else { "query" },
                "required": required || p.source == Source::Path,
                "schema": schema_of(p.kind),
            })),
            Source::Body => {
                body_props.insert(p.name.clone(), schema_of(p.kind));
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
            parameters.extend(body_props.iter().map(|(name, schema)| {
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
            op["requestBody"] = json!({"content": {"application/json": {"schema": {
                "type": "object", "properties": body_props, "required": body_required}}}});
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
        .map(|p| (p.name.clone(), typed(p.json_type)))
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
            "requestBody": {"content": {"application/json": {"schema":
                {"type": "object", "properties": properties, "required": required}}}},
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
