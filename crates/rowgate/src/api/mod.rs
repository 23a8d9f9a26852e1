//! The AutoREST pipeline for `/{prefix}/{table}` and `/{prefix}/{table}/{key}`, as a chain of
//! named, timed stages (PostgREST's `App.hs`): `parse` ([`request::ApiRequest`]) → `plan`
//! ([`action_plan`]: the schema, the guard, statements rendered by `rowgate-query`, one
//! [`Job`](crate::job::Job)) → `db` (the database runs the job) → `respond`
//! ([`respond::answer`]). `auth` comes before, in the server. [`timing`] names the stages in
//! `Server-Timing`.

pub mod action_plan;
pub mod document_write;
pub mod embed;
pub mod explain;
pub mod guard;
pub mod media_handler;
pub mod plan;
pub mod request;
pub mod respond;
pub mod rows;
pub mod timing;

use bytes::Bytes;
use http::{request::Parts, HeaderName, Method};
use rowgate_query::ast::QualifiedName;

use crate::app::{App, LARGE_BODY};
use crate::auth::Principal;
use crate::error::{ApiError, ErrorCode};
pub use request::if_none_match;
use request::ApiRequest;
use respond::Reply;
use timing::Timing;

/// What the URL names: a table (or view) and, for item URLs, the key segment.
pub struct Target<'a> {
    /// Table or view name.
    pub table: &'a str,
    /// Item URL key (`/api/team/3` → `3`).
    pub key: Option<&'a str>,
}

/// Serves one table/view request for `principal`. A statement that meets a table or column the
/// schema cache still lists but the database no longer has (a DDL change not yet picked up)
/// failed before it changed anything: the schema is reloaded and the request planned and run
/// again, so it is answered as if the cache had been current (404 `PGRST205`, 400 `PGRST204`,
/// or the rows), never with a stale plan's error. A body over [`LARGE_BODY`] is not kept for a
/// second attempt (an insert drops it once its rows are planned, so that it is not held beside
/// them): such a request answers 503 `PGRST002`, to be retried.
pub async fn handle(
    app: &App,
    parts: &Parts,
    body: Bytes,
    target: Target<'_>,
    principal: &Principal,
    timing: &mut Timing,
) -> Result<Reply, ApiError> {
    let kept = (body.len() <= LARGE_BODY).then(|| body.clone());
    let first = handle_once(app, parts, body, &target, principal, timing).await;
    let reply = match (first, kept) {
        (Err(e), kept) if e.code == ErrorCode::SchemaChanged => {
            app.db.reload_schema().await?;
            match kept {
                Some(body) => {
                    match handle_once(app, parts, body, &target, principal, timing).await {
                        // still missing with a current cache: the name is the request's own
                        // (or a function's it called), not a stale plan's
                        Err(mut again) if again.code == ErrorCode::SchemaChanged => {
                            Err(again.take_if_current().unwrap_or(e))
                        }
                        answer => answer,
                    }
                }
                None => Err(e),
            }
        }
        (answer, _) => answer,
    }?;
    Ok(match timing.header() {
        Some(stages) => reply.header(HeaderName::from_static("server-timing"), stages),
        None => reply,
    })
}

/// The stages, once.
async fn handle_once(
    app: &App,
    parts: &Parts,
    body: Bytes,
    target: &Target<'_>,
    principal: &Principal,
    timing: &mut Timing,
) -> Result<Reply, ApiError> {
    let cache = app.db.schema();
    let schema = cache.profile(request::profile(parts))?;
    let context = app.plan_context(schema, principal);
    let read = matches!(parts.method, Method::GET | Method::HEAD);
    // an execution plan instead of the rows (PostgreSQL, `rest.plan`)
    let explain = explain::allowed(app, parts, context.dialect)?;
    // else, a media type handler `Accept` asks for
    let handler = if read && explain.is_none() {
        media_handler::pick(schema, target.table, parts, |f| context.may_call(f))
    } else {
        None
    };
    let mut request = ApiRequest::parse(
        parts,
        target.table,
        target.key,
        body,
        &app.config.limits,
        handler.is_some() || explain.is_some(),
    )?;
    request.prefer.settle_tx(app.config.rest.tx_end);
    timing.mark("parse");
    let (mut settings, profile) = request::profile_settings(&cache, schema);
    if let Some(table) = schema.table(target.table) {
        request.prefer.settle_resolution(table, &request.query);
    }
    let mut plan = action_plan::plan(&request, &context)?;
    if let (Some(handler), Some(table)) = (handler, schema.table(target.table)) {
        let row_type = QualifiedName {
            schema: table.schema.clone(),
            name: table.name.clone(),
        };
        media_handler::apply(handler, &mut plan, context.dialect, &row_type);
        // the aggregate is a function: it sees the request, and `db.settings`, as any does
        if let Some(step) = plan::call_settings(&context, parts) {
            plan.job.steps.insert(0, step);
        }
    }
    if let Some(asked) = &explain {
        // (the rows' statement is the same in every media type: only their encoding differs)
        if let Some(content_type) = explain::apply(asked, &mut plan.job) {
            plan.answer = respond::Answer::Plan { content_type };
        }
    }
    settings.extend(request.prefer.settings(context.dialect));
    if let Some(step) = plan::settings(context.dialect, &settings) {
        plan.job.steps.insert(0, step);
    }
    // a write's triggers may set the answer's headers and status (PostgREST's settings)
    if plan.job.access == crate::job::Access::Write && context.dialect.has_schemas() {
        plan.job.steps.push(crate::job::Step::ResponseSettings);
    }
    if request.nulls_stripped {
        plan.job.strip_nulls();
    }
    // planned: the job holds the body's values (a large body is not kept beside them)
    request.body = Bytes::new();
    timing.mark("plan");
    let mut outcome = app.db.run(plan.job).await?;
    timing.mark("db");
    let response = std::mem::take(&mut outcome.response);
    let reply = respond::answer(&request, plan.answer, outcome)
        .and_then(|r| r.with_settings(&response))
        .map(|r| r.nulls_stripped_if(&request).profile(profile));
    timing.mark("respond");
    reply
}
