//! The ORDS front end: Oracle REST Data Services' AutoREST URLs and envelopes over the same
//! pipeline as `/api` (so grants, row filters, ETags and limits apply unchanged), for an ORDS
//! user's scripts and clients with the host changed (`docs/ords.md`).
//!
//! `/ords/{schema}/{object}/` is a collection and `/ords/{schema}/{object}/{key}` an item
//! (composite keys comma-separated), `{object}` a table, view or duality view by its lower-case
//! name and `{schema}` the configured alias (`ords.schema`); `/ords/{schema}/oauth/token` issues
//! client-credentials tokens as `/oauth/token` does. Here: the path parsed into a [`Target`],
//! the request turned into an [`ApiRequest`](crate::engine::request::ApiRequest) ([`request`]: `q=` filter objects, `limit`,
//! `offset`), planned and run as any other, and answered in ORDS's shapes ([`respond`]:
//! the collection envelope, links, errors).

pub mod batchload;
pub mod catalog;
pub mod request;
pub mod respond;
pub mod sql;

use std::net::IpAddr;
use std::sync::Arc;

use http::request::Parts;
use http::Method;

use crate::app::App;
use crate::engine::action_plan;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;
use crate::request_body::RequestBody;

/// What an `/ords/…` path names, after the schema alias.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `oauth/token`
    Token,
    /// `{object}/`
    Collection(String),
    /// `{object}/{key}`
    Item(String, String),
    /// `_/sql`: REST-enabled SQL.
    Sql,
    /// `open-api-catalog/{object}/`: the object's OpenAPI document.
    OpenApi(String),
    /// `metadata-catalog/`, or `metadata-catalog/{object}/` (`item`: `…/{object}/item`).
    Catalog {
        /// The object described, if one.
        object: Option<String>,
        /// Its item's description.
        item: bool,
    },
}

/// Parses the path under `/ords/`: the schema alias, then what it names.
pub fn target(path: &str) -> Result<(String, Target), ApiError> {
    let rest = path.strip_prefix("/ords/").ok_or_else(not_found)?;
    let segments: Vec<std::borrow::Cow<'_, str>> = rest
        .split('/')
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8_lossy())
        .collect();
    let target = match segments.as_slice() {
        [_, oauth, token] if oauth == "oauth" && token == "token" => Target::Token,
        [_, underscore, sql] if underscore == "_" && sql == "sql" => Target::Sql,
        [_, catalog, object] | [_, catalog, object, _]
            if catalog == "open-api-catalog"
                && !object.is_empty()
                && segments.get(3).is_none_or(|s| s.is_empty()) =>
        {
            Target::OpenApi(object.to_string())
        }
        [_, catalog] | [_, catalog, _] if catalog == "metadata-catalog" => {
            match segments.get(2).filter(|o| !o.is_empty()) {
                None => Target::Catalog {
                    object: None,
                    item: false,
                },
                Some(object) => Target::Catalog {
                    object: Some(object.to_string()),
                    item: false,
                },
            }
        }
        [_, catalog, object, last] if catalog == "metadata-catalog" && !object.is_empty() => {
            match last.as_ref() {
                "" => Target::Catalog {
                    object: Some(object.to_string()),
                    item: false,
                },
                "item" => Target::Catalog {
                    object: Some(object.to_string()),
                    item: true,
                },
                _ => return Err(not_found()),
            }
        }
        [_, object] | [_, object, _] if object.is_empty() => return Err(not_found()),
        [_, object] => Target::Collection(object.to_string()),
        [_, object, key] if key.is_empty() => Target::Collection(object.to_string()),
        [_, object, key] => Target::Item(object.to_string(), key.to_string()),
        _ => return Err(not_found()),
    };
    Ok((segments[0].to_string(), target))
}

fn not_found() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no ORDS resource at this path: /ords/{schema}/{object}/ or /ords/{schema}/{object}/{key}",
    )
}

/// Serves one `/ords/…` request; errors are answered in ORDS's shape.
pub async fn handle(app: &Arc<App>, parts: &Parts, body: impl RequestBody, peer: IpAddr) -> Reply {
    match serve(app, parts, body, peer).await {
        Ok(reply) => reply,
        Err(err) => respond::error(&err),
    }
}

async fn serve(
    app: &Arc<App>,
    parts: &Parts,
    body: impl RequestBody,
    peer: IpAddr,
) -> Result<Reply, ApiError> {
    let config = &app.config.ords;
    if !config.enabled {
        return Err(not_found());
    }
    // a custom resource declared under /ords/{schema}/ (an ORDS module's handler) answers first
    if app.resources.load().serves(parts.uri.path()) {
        let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
        return crate::resources::serve::handle(app, parts, body, &principal).await;
    }
    let (schema, target) = target(parts.uri.path())?;
    if !schema.eq_ignore_ascii_case(&config.schema) {
        return Err(ApiError::new(
            ErrorCode::NotFound,
            format!("no REST-enabled schema '{schema}'"),
        )
        .hint(format!(
            "the schema alias is '{}' (ords.schema)",
            config.schema
        )));
    }
    match target {
        Target::Token => {
            let body = crate::request_body::read_body(&app.config.limits, parts, body).await?;
            let client = app.trusted_proxies.client_address(peer, &parts.headers);
            Ok(crate::token_endpoint::handle(&app.auth, &app.db, parts, &body, client).await)
        }
        Target::Catalog { object, item } => {
            if parts.method != http::Method::GET && parts.method != http::Method::HEAD {
                return Err(ApiError::method_not_allowed(
                    &parts.method,
                    &["GET", "HEAD"],
                ));
            }
            let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
            let base = request::base_url(app, peer, &parts.headers);
            match object {
                None => Ok(catalog::list(app, &principal, &base)),
                Some(object) => {
                    let object = resolve(app, &object)?;
                    catalog::describe(app, &principal, &base, &object, item)
                }
            }
        }
        Target::OpenApi(object) => {
            if parts.method != http::Method::GET && parts.method != http::Method::HEAD {
                return Err(ApiError::method_not_allowed(
                    &parts.method,
                    &["GET", "HEAD"],
                ));
            }
            let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
            let object = resolve(app, &object)?;
            let base = request::base_url(app, peer, &parts.headers);
            let schema = app.db.schema();
            let document = crate::openapi::ords_catalog(
                &schema,
                &app.duality,
                &app.auth.policy,
                &principal,
                &base,
                &object,
            )
            .ok_or_else(|| {
                ApiError::new(
                    ErrorCode::TableNotFound,
                    format!("no object '{object}' to describe"),
                )
            })?;
            Ok(Reply::raw(
                http::StatusCode::OK,
                "application/openapi+json",
                bytes::Bytes::from(document.to_string()),
            ))
        }
        Target::Sql => {
            if parts.method != http::Method::POST {
                return Err(ApiError::method_not_allowed(&parts.method, &["POST"]));
            }
            let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
            let crate::app::AdmittedBody { bytes, _slot } = app.read_body(parts, body).await?;
            sql::run(app, parts, &principal, &bytes).await
        }
        Target::Collection(object) => answer(app, parts, body, peer, &object, None).await,
        Target::Item(object, key) => answer(app, parts, body, peer, &object, Some(&key)).await,
    }
}

/// A request on a collection (no `key`) or an item, from `peer`: parsed as ORDS's, planned and
/// run as any other, answered in ORDS's shapes.
async fn answer(
    app: &Arc<App>,
    parts: &Parts,
    body: impl RequestBody,
    peer: IpAddr,
    object: &str,
    key: Option<&str>,
) -> Result<Reply, ApiError> {
    let principal = app.auth.authenticate_fresh(&app.db, &parts.headers).await?;
    // a read is answered from the response cache while nothing was committed, as `/api`'s
    // are (`crate::cache`), before anything else is done for it: kept under the role, and
    // apart for a trusted proxy, whose forwarding headers name the links' host (another
    // client's same headers do not)
    let keyed_as: std::borrow::Cow<'_, str> = if app.trusted_proxies.trusts(peer) {
        format!("{}\0trusted proxy", principal.role).into()
    } else {
        principal.role.as_str().into()
    };
    let served = async {
        let crate::app::AdmittedBody { bytes, _slot } = app.read_body(parts, body).await?;
        let object = resolve(app, object)?;
        if parts.method == Method::POST && key == Some("batchload") {
            return batchload::load(app, parts, &principal, &object, &bytes).await;
        }
        read_or_write(app, parts, peer, &principal, &object, key, bytes).await
    };
    crate::cache::through(
        app.cache.as_ref(),
        &app.db,
        &app.metrics,
        parts,
        &keyed_as,
        served,
    )
    .await
}

/// A request on a collection or an item, planned and run by the engine, answered in ORDS's
/// shapes; a read of tables and of views that read neither the time nor randomness is marked
/// for the response cache.
async fn read_or_write(
    app: &Arc<App>,
    parts: &Parts,
    peer: IpAddr,
    principal: &crate::auth::Principal,
    object: &str,
    key: Option<&str>,
    bytes: bytes::Bytes,
) -> Result<Reply, ApiError> {
    let mut request = request::parse(app, parts, peer, object, key, bytes)?;
    // _metadata.asof: the last change this worker had seen before the read began; the read's
    // snapshot, taken after, reflects every change up to it (no statement needed)
    request.asof = app
        .realtime
        .as_ref()
        .filter(|_| app.duality.get(object).is_some())
        .map(|r| r.hub.last());
    let executed = app
        .engine()
        .execute_plain(principal, parts, |planning, _| {
            plan_table(&request.api, planning)
        })
        .await?;
    let (answer, cacheable) = executed.answer;
    let reply = respond::answer(app, &request, &answer, executed.outcome, &executed.cache)?;
    Ok(if cacheable { reply.cacheable() } else { reply })
}

/// The plan of a table, view or duality view request, as `/api` plans it (a PUT's plan counts
/// the row it overwrites: ORDS answers one that inserted with 201). A write's triggers on
/// PostgreSQL may read the request's settings, as under `/api`. With the answer: whether it
/// may be kept until the next commit (a read of tables, and of views that read neither the time
/// nor randomness).
pub fn plan_table(
    request: &crate::api::request::ApiRequest<'_>,
    planning: &crate::engine::Planning<'_>,
) -> Result<crate::engine::Planned<(crate::engine::answer::Answer, bool)>, ApiError> {
    let cx = &planning.cx;
    let plan = action_plan::plan(request, cx)?;
    let write_reads_settings =
        plan.job.access == crate::job::Access::Write && cx.dialect.has_transaction_settings();
    let cacheable = plan.job.access == crate::job::Access::Read
        && !cx.schema.reads_volatile(
            plan.job.statements().map(|sql| sql.text.as_str()),
            cx.dialect,
        );
    let mut planned = crate::engine::Planned::new(plan.job, (plan.answer, cacheable));
    planned.reads_request = write_reads_settings;
    Ok(planned)
}

/// The table, view or duality view an ORDS object alias names (its name, whatever the case).
fn resolve(app: &App, alias: &str) -> Result<String, ApiError> {
    if let Some(view) = app
        .duality
        .views()
        .find(|v| v.name.eq_ignore_ascii_case(alias))
    {
        return Ok(view.name.clone());
    }
    let schema = app.db.schema();
    if schema.table(alias).is_some() {
        return Ok(alias.to_string());
    }
    schema
        .tables
        .keys()
        .find(|name| name.eq_ignore_ascii_case(alias))
        .cloned()
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::TableNotFound,
                format!("no object '{alias}' is REST-enabled in this schema"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_collections_items_and_the_token_endpoint() {
        let t = target;
        assert_eq!(
            t("/ords/hr/team/").expect("collection"),
            ("hr".into(), Target::Collection("team".into()))
        );
        assert_eq!(
            t("/ords/hr/team").expect("collection"),
            ("hr".into(), Target::Collection("team".into()))
        );
        assert_eq!(
            t("/ords/hr/team/3").expect("item"),
            ("hr".into(), Target::Item("team".into(), "3".into()))
        );
        assert_eq!(
            t("/ords/hr/pair/1%2C2").expect("item"),
            ("hr".into(), Target::Item("pair".into(), "1,2".into()))
        );
        assert_eq!(t("/ords/hr/oauth/token").expect("token").1, Target::Token);
        assert_eq!(t("/ords/hr/_/sql").expect("sql").1, Target::Sql);
        assert_eq!(
            t("/ords/hr/open-api-catalog/team/").expect("openapi").1,
            Target::OpenApi("team".into())
        );
        assert_eq!(
            t("/ords/hr/metadata-catalog/").expect("catalog").1,
            Target::Catalog {
                object: None,
                item: false
            }
        );
        assert_eq!(
            t("/ords/hr/metadata-catalog/team/item").expect("catalog").1,
            Target::Catalog {
                object: Some("team".into()),
                item: true
            }
        );
        for bad in [
            "/ords/hr",
            "/ords/hr/",
            "/ords/hr//",
            "/ords/hr/team/3/x",
            "/ordsx",
        ] {
            assert!(target(bad).is_err(), "{bad}");
        }
    }
}
