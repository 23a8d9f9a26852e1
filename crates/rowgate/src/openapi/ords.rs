//! ORDS's `open-api-catalog/{object}/`: an OpenAPI 3 document of one object's ORDS endpoints,
//! the methods the role's grant allows, rows typed from the columns the role may read.

use serde_json::{json, Value};

use super::granted_methods;
use super::schemas::{document_schema, table_schema};
use crate::auth::policy::{Op, Policy};
use crate::auth::Principal;
use crate::duality::DualityViews;
use crate::schema::SchemaCache;

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
    let grant = &*policy.described(principal, table_name, schema)?;
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
