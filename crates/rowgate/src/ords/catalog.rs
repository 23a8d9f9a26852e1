//! ORDS's metadata catalog: `/ords/{schema}/metadata-catalog/` lists the objects the role may
//! read (tables, views, duality views) with their links; `…/metadata-catalog/{object}/` (and
//! `…/item`) describes one: its name, primary key and members (columns, or a duality view's
//! top-level fields), each with an ORDS type name (`NUMBER`, `VARCHAR2`, `DATE`, `TIMESTAMP`,
//! `BOOLEAN`, `JSON`; a duality view's nested members `ARRAY` or `OBJECT`).

use bytes::Bytes;
use http::StatusCode;
use serde_json::{json, Value};

use crate::app::App;
use crate::auth::policy::Op;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;
use crate::schema::{Column, SchemaCache};

/// `metadata-catalog/`: every object `principal` may read.
pub fn list(app: &App, principal: &Principal, base: &str) -> Reply {
    let schema = app.db.schema();
    let readable = |table: &str| {
        app.auth
            .policy
            .grant(principal, table)
            .is_some_and(|g| g.allows(Op::Select))
    };
    let mut names: Vec<&str> = schema
        .tables
        .keys()
        .map(String::as_str)
        .filter(|t| readable(t))
        .chain(
            app.duality
                .views()
                .filter(|v| readable(&v.table))
                .map(|v| v.name.as_str()),
        )
        .collect();
    names.sort_unstable();
    let items: Vec<Value> = names
        .iter()
        .map(|name| {
            json!({
                "name": name,
                "links": [
                    {"rel": "describes", "href": format!("{base}{name}/")},
                    {"rel": "canonical", "href": format!("{base}metadata-catalog/{name}/"),
                     "mediaType": "application/json"},
                    {"rel": "alternate", "href": format!("{base}open-api-catalog/{name}/"),
                     "mediaType": "application/openapi+json"}
                ]
            })
        })
        .collect();
    let catalog = format!("{base}metadata-catalog/");
    // the collection envelope's members in ORDS's order
    let body = format!(
        "{{\"items\":{},\"hasMore\":false,\"limit\":{n},\"offset\":0,\"count\":{n},\"links\":{}}}",
        Value::from(items),
        json!([{"rel": "self", "href": catalog}, {"rel": "first", "href": catalog}]),
        n = names.len()
    );
    json_reply(body)
}

/// `metadata-catalog/{object}/` (or `/item`): one object, described.
pub fn describe(
    app: &App,
    principal: &Principal,
    base: &str,
    object: &str,
    item: bool,
) -> Result<Reply, ApiError> {
    let schema = app.db.schema();
    let (table_name, members, key) = match app.duality.get(object) {
        Some(view) => {
            let root = crate::engine::plan::table(&schema, &view.table)?;
            let mut members: Vec<Value> = view
                .fields
                .iter()
                .map(|(field, column)| {
                    json!({"name": field, "type": root.column(column).map_or("VARCHAR2", ords_type)})
                })
                .collect();
            members.insert(1, json!({"name": "_metadata", "type": "OBJECT"}));
            for nested in view.root.nested.iter().filter_map(|n| {
                n.member
                    .as_ref()
                    .map(|m| (m, if n.many { "ARRAY" } else { "OBJECT" }))
            }) {
                members.push(json!({"name": nested.0, "type": nested.1}));
            }
            (view.table.as_str(), members, vec!["_id".to_string()])
        }
        None => {
            let table = crate::engine::plan::table(&schema, object)?;
            let members = table
                .columns
                .iter()
                .map(|c| json!({"name": c.name, "type": ords_type(c)}))
                .collect();
            (object, members, table.primary_key.clone())
        }
    };
    readable(app, principal, &schema, table_name)?;
    let canonical = format!(
        "{base}metadata-catalog/{object}/{}",
        if item { "item" } else { "" }
    );
    let links = json!([
        {"rel": "collection", "href": format!("{base}metadata-catalog/"), "mediaType": "application/json"},
        {"rel": "canonical", "href": canonical, "mediaType": "application/json"},
        {"rel": "describes", "href": format!("{base}{object}/")}
    ]);
    let body = format!(
        "{{\"name\":{},\"primarykey\":{},\"members\":{},\"links\":{links}}}",
        Value::from(object),
        json!(key),
        Value::from(members)
    );
    Ok(json_reply(body))
}

/// Refuses an object the role may not read, as a read of it would be refused.
fn readable(
    app: &App,
    principal: &Principal,
    schema: &SchemaCache,
    table: &str,
) -> Result<(), ApiError> {
    let table = schema
        .table(table)
        .ok_or_else(|| ApiError::new(ErrorCode::TableNotFound, format!("no object '{table}'")))?;
    crate::engine::guard::Guard::new(
        &app.auth.policy,
        principal,
        table,
        &[Op::Select],
        app.db.dialect(),
    )
    .map(|_| ())
}

/// ORDS's (Oracle's) name for a column's type.
fn ords_type(column: &Column) -> &'static str {
    let decl = column.decl_type.to_ascii_lowercase();
    if decl.contains("timestamp") || decl.contains("datetime") {
        "TIMESTAMP"
    } else if decl == "date" {
        "DATE"
    } else if decl.contains("json") {
        "JSON"
    } else {
        match column.json_type {
            "integer" | "number" => "NUMBER",
            "boolean" => "BOOLEAN",
            _ => "VARCHAR2",
        }
    }
}

fn json_reply(body: String) -> Reply {
    Reply::raw(StatusCode::OK, "application/json", Bytes::from(body))
}
