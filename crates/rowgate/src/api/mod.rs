//! The AutoREST pipeline for `/{prefix}/{table}` and `/{prefix}/{table}/{key}`, as a chain of
//! named, timed stages (PostgREST's `App.hs`, with its stage names): `parse`
//! ([`request::ApiRequest`]) → `plan` ([`action_plan`]: the schema, the guard, statements
//! rendered by `rowgate-query`, one [`Job`](crate::job::Job)) → `transaction` (the database
//! runs the job) → `response` ([`respond::answer`]). `jwt` (authentication) comes before, in
//! the server. [`timing`] names the stages in `Server-Timing`; [`allow`] answers `OPTIONS`.

pub mod action_plan;
pub mod allow;
pub mod body;
pub mod compact;
pub mod document_body;
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
use http::{request::Parts, Method};
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
    Ok(reply)
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
    let (mut settings, profile) =
        request::profile_settings(&cache, schema, &app.config.db.extra_search_path);
    if let Some(table) = schema.table(target.table) {
        request.prefer.settle_resolution(table, &request.query);
    }
    let mut plan = action_plan::plan(&request, &context)?;
    let mut calls_a_function = false;
    if let (Some(handler), Some(table)) = (handler, schema.table(target.table)) {
        let row_type = QualifiedName {
            schema: table.schema.clone(),
            name: table.name.clone(),
        };
        media_handler::apply(handler, &mut plan, context.dialect, &row_type);
        // the aggregate is a function: it sees the request, and `db.settings`, as any does
        calls_a_function = true;
    }
    if let Some(asked) = &explain {
        // (the rows' statement is the same in every media type: only their encoding differs)
        if let Some(content_type) = explain::apply(asked, &mut plan.job) {
            plan.answer = respond::Answer::Plan { content_type };
        }
    }
    settings.extend(request.prefer.settings(context.dialect));
    let writes_in_postgres =
        plan.job.access == crate::job::Access::Write && context.dialect.has_schemas();
    // a write's defaults, triggers and checks may read the request (`request.jwt.claims`,
    // `request.headers`, …, and `db.settings`) as they do under PostgREST, and so may
    // `db.pre_request`'s function, called after them
    plan::start_steps(
        &context,
        parts,
        settings,
        writes_in_postgres || calls_a_function,
        &mut plan.job.steps,
    );
    // a write's triggers (and the pre-request function) may set the answer's headers and
    // status (PostgREST's settings)
    if writes_in_postgres || context.pre_request.is_some() {
        plan.job.steps.push(crate::job::Step::ResponseSettings);
    }
    if request.nulls_stripped {
        plan.job.strip_nulls();
    }
    // planned: the job holds the body's values (a large body is not kept beside them)
    request.body = Bytes::new();
    // a read of tables, and of views that read neither the time nor randomness, answers the
    // same until the next commit (`crate::cache`)
    let cacheable = read
        && explain.is_none()
        && !calls_a_function
        && plan.job.access == crate::job::Access::Read
        && !schema.reads_volatile(
            plan.job.statements().map(|sql| sql.text.as_str()),
            context.dialect,
        );
    timing.mark("plan");
    let mut outcome = app.db.run(plan.job).await?;
    timing.mark("transaction");
    let response = std::mem::take(&mut outcome.response);
    // a collection's rows are at the request's URL, its parameters sorted (PostgREST's)
    let location = (read && target.key.is_none() && explain.is_none()).then(|| {
        respond::content_location(&app.config.rest.prefix, target.table, parts.uri.query())
    });
    let reply = respond::answer(&request, plan.answer, outcome)
        .and_then(|r| r.with_settings(&response))
        .map(|r| match location {
            Some(url) => r.header(http::header::CONTENT_LOCATION, url),
            None => r,
        })
        .map(|r| r.nulls_stripped_if(&request).profile(profile))
        .map(|r| if cacheable { r.cacheable() } else { r });
    timing.mark("response");
    reply
}
