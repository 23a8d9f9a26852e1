//! `OPTIONS` on the API's resources: 200 with no body and an `Allow` header listing the methods
//! the resource answers, as PostgREST's `Allow` does — a relation's reads, and the writes it
//! takes (a view's as PostgreSQL passes them through), a function's GET/HEAD only when it is
//! not volatile, the root's reads — narrowed to what the role's grants permit, and to what
//! the OpenAPI document describes at that URL: PUT of one row at its item URL (PostgREST lists
//! it on the collection, which takes it only filtered by the whole key). A relation or function
//! the role may not use is refused as a GET of it would be, so `OPTIONS` reveals nothing a GET
//! would not.

use http::header::ALLOW;
use http::StatusCode;

use crate::auth::policy::{Op, Policy, Subject};
use crate::auth::Principal;
use crate::engine::plan;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;
use crate::resources::Resources;
use crate::schema::SchemaCache;

/// `OPTIONS /{prefix}/`: the OpenAPI document is read with GET and HEAD.
pub fn root() -> Reply {
    allow(&["GET", "HEAD"])
}

/// `OPTIONS /{prefix}/{table}` (`item`: `/{prefix}/{table}/{key}`, one row, which takes PUT and
/// no POST).
pub fn relation(
    schema: &SchemaCache,
    policy: &Policy,
    principal: &Principal,
    name: &str,
    item: bool,
) -> Result<Reply, ApiError> {
    let table = plan::table(schema, name)?;
    let may = |op: Op| {
        policy
            .described(principal, &table.name, schema)
            .is_some_and(|g| g.allows(op))
    };
    // a role without any grant on it is refused as its GET is
    if ![Op::Select, Op::Insert, Op::Update, Op::Delete]
        .into_iter()
        .any(may)
    {
        policy.authorize(
            principal,
            Subject::Table {
                name: &table.name,
                op: Op::Select,
            },
        )?;
    }
    let writes = table.writes;
    let has_key = !table.primary_key.is_empty();
    let methods: Vec<&str> = [
        ("GET", may(Op::Select)),
        ("HEAD", may(Op::Select)),
        ("POST", !item && writes.insert && may(Op::Insert)),
        (
            "PUT",
            item && writes.insert && writes.update && has_key && may(Op::Insert) && may(Op::Update),
        ),
        ("PATCH", writes.update && may(Op::Update)),
        ("DELETE", writes.delete && may(Op::Delete)),
    ]
    .into_iter()
    .filter_map(|(method, allowed)| allowed.then_some(method))
    .collect();
    Ok(allow(&methods))
}

/// `OPTIONS /{prefix}/rpc/{name}`: POST, and GET and HEAD when no overload of the function is
/// volatile (or, for a custom resource's function, when it does not write).
pub fn function(
    schema: &SchemaCache,
    resources: &Resources,
    policy: &Policy,
    principal: &Principal,
    name: &str,
) -> Result<Reply, ApiError> {
    let writes = match (resources.function(name), schema.functions.get(name)) {
        (Some(resource), _) => resource.writes,
        (None, Some(overloads)) if !overloads.is_empty() => overloads.iter().all(|f| f.volatile),
        _ => {
            let exposed = schema.name();
            return Err(ApiError::new(
                ErrorCode::FunctionNotFound,
                format!("Could not find the function {exposed}.{name} in the schema cache"),
            ));
        }
    };
    policy.authorize(principal, Subject::Function { name })?;
    Ok(allow(if writes {
        &["POST"]
    } else {
        &["GET", "HEAD", "POST"]
    }))
}

/// 200 with `Allow: OPTIONS,…` (PostgREST's spelling: no spaces).
fn allow(methods: &[&str]) -> Reply {
    let mut list = String::from("OPTIONS");
    for method in methods {
        list.push(',');
        list.push_str(method);
    }
    Reply::empty(StatusCode::OK).header(ALLOW, list)
}
