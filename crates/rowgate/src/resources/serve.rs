//! Serving a custom resource: match the compiled set's routes, check the role, bind the
//! parameters (path, query string, body, token claims), run the job and answer in the declared
//! shape (rows, one row, a value, nothing, or a rendered template).

use bytes::Bytes;
use http::{header, request::Parts, Method, StatusCode};
use rowgate_query::Value;

use super::params::{self, Raw};
use super::{template_error, Resource, Resources};
use crate::app::App;
use crate::auth::policy::denied;
use crate::auth::Principal;
use crate::config::resources::{Shape, Source};
use crate::engine::body::{read_one_object, Member, Members, Wanted};
use crate::error::{ApiError, ErrorCode};
use crate::job::{Access, Job, Output, Step};
use crate::reply::{tagged, Reply};
use crate::request_body::RequestBody;

/// Serves a request whose path no built-in route matched: a custom resource, or 404.
pub async fn handle(
    app: &App,
    parts: &Parts,
    body: impl RequestBody,
    principal: &Principal,
) -> Result<Reply, ApiError> {
    let resources = app.resources.load_full();
    let path = parts.uri.path();
    let not_found = || {
        let prefix = &app.config.rest.prefix;
        if path
            .strip_prefix(prefix.as_str())
            .is_some_and(|rest| rest.starts_with('/'))
        {
            // under the API: deeper than a table's item (PostgREST's words)
            return ApiError::new(
                ErrorCode::InvalidPath,
                "Invalid path specified in request URL",
            )
            .hint(format!(
                "{prefix}/table, {prefix}/table/key or {prefix}/rpc/function"
            ));
        }
        ApiError::new(ErrorCode::NotFound, format!("no route for {path}"))
            .hint(format!("tables are under {prefix}/"))
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
        return Err(ApiError::method_not_allowed(&parts.method, &allow));
    };
    let resource = &resources.list[index];
    app.auth.policy.authorize(principal, resource.subject())?;
    let path_values: Vec<(String, String)> = matched
        .params
        .iter()
        .map(|(k, v)| {
            let decoded = percent_encoding::percent_decode_str(v).decode_utf8_lossy();
            (k.to_string(), decoded.into_owned())
        })
        .collect();
    let body = if resource.params.iter().any(|p| p.source == Source::Body) {
        let admitted = app.read_body(parts, body).await?;
        body_object(resource, parts, &admitted.bytes)?
    } else {
        Members::new()
    };
    let values = bind(resource, &path_values, parts.uri.query(), &body, principal)?;
    // run by the engine, as every request is: `db.pre_request`, and once more after a schema
    // change the cache had not seen
    let executed = app
        .engine()
        .execute_plain(principal, parts, |_, _| {
            Ok(crate::engine::Planned::new(
                job(resource, values.clone()),
                (),
            ))
        })
        .await?;
    respond(&resources, resource, parts, executed.outcome, &values)
}

/// A body's top-level object (JSON or form), of its members only those the resource's body
/// parameters name (a nested value as its compact text, no tree of it built); an empty body is
/// an empty object.
fn body_object(resource: &Resource, parts: &Parts, bytes: &[u8]) -> Result<Members, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Members::new());
    }
    let wanted = |key: &str| {
        let named = resource
            .params
            .iter()
            .any(|p| p.source == Source::Body && p.name == key);
        if named {
            Wanted::Kept
        } else {
            Wanted::Ignored
        }
    };
    match read_one_object(
        crate::request_body::content_type(&parts.headers),
        bytes,
        &wanted,
    )? {
        crate::engine::body::Shape::Object(members) => Ok(members),
        _ => Err(ApiError::new(
            ErrorCode::InvalidBody,
            "the request body must be a JSON object",
        )),
    }
}

/// Each parameter's value, from its source or its default.
pub fn bind(
    resource: &Resource,
    path_values: &[(String, String)],
    query: Option<&str>,
    body: &Members,
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
            Source::Body => body.get(&p.name).map(|member| match member {
                Member::Scalar(json) => Raw::Json(json),
                Member::Nested(text) => Raw::Nested(text),
            }),
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
            (Some(raw), _) => {
                let value = params::coerce(p.kind, raw).map_err(|why| {
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
                })?;
                p.range.admit(&value).map_err(|why| {
                    ApiError::new(
                        ErrorCode::InvalidParameter,
                        format!("parameter {} is out of range", p.name),
                    )
                    .details(why)
                    .hint(format!("{} must be {}", p.name, p.range.describe()))
                })?;
                value
            }
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
pub fn job(resource: &Resource, values: Vec<(String, Value)>) -> Job {
    let mut statements = resource.bound(values);
    let last = statements.pop();
    let mut steps: Vec<Step> = statements.into_iter().map(Step::Execute).collect();
    if let Some(sql) = last {
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
            crate::job::expect_one(output.row_count)?;
            Bytes::copy_from_slice(crate::job::unwrap_single(&output.rows))
        }
        Shape::Template => render(resources, resource, &output.rows, values)?,
        Shape::Rows => Bytes::from(output.rows),
        Shape::Value => Bytes::from(output.value.unwrap_or_else(|| b"null".to_vec())),
    };
    let cacheable = matches!(parts.method, Method::GET | Method::HEAD);
    let ok = |body| Reply::typed(StatusCode::OK, resource.content_type.clone(), body);
    let mut reply = if cacheable && resource.etag {
        // a 304 carries the Cache-Control the 200 would (RFC 9110 §15.4.5)
        tagged(&parts.headers, body, ok)
    } else {
        ok(body)
    };
    if let (true, Some(cc)) = (cacheable, &resource.cache_control) {
        reply = reply.header(header::CACHE_CONTROL, cc.to_str().unwrap_or_default());
    }
    if cacheable && resource.cacheable {
        reply = reply.cacheable();
    }
    Ok(reply)
}

/// The page of a template resource: its rows (JSON text, read straight into the template's
/// values, no `serde_json::Value` between), the first of them as `row`, and the parameters.
fn render(
    resources: &Resources,
    resource: &Resource,
    rows: &[u8],
    values: &[(String, Value)],
) -> Result<Bytes, ApiError> {
    use minijinja::Value as Page;
    let name = resource.template.as_deref().unwrap_or_default();
    let rows: Page = serde_json::from_slice(rows).map_err(ApiError::internal)?;
    let params: Page = values
        .iter()
        .map(|(k, v)| {
            let value = match v {
                Value::Null => Page::from(()),
                Value::Int(i) => Page::from(*i),
                Value::Real(f) => Page::from(*f),
                Value::Text(t) => Page::from(t.as_str()),
                Value::Bool(b) => Page::from(*b),
            };
            (k.clone(), value)
        })
        .collect();
    let row = rows
        .get_item_by_index(0)
        .ok()
        .filter(|r| !r.is_undefined())
        .unwrap_or_else(|| Page::from(()));
    let template = resources
        .templates
        .get_template(name)
        .map_err(ApiError::internal)?;
    let text = template
        .render(minijinja::context! { rows => rows, row => row, params => params })
        .map_err(|e| ApiError::internal(format!("template {name}: {}", template_error(&e))))?;
    Ok(Bytes::from(text))
}
