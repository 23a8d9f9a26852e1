//! PostgREST's front end for `/{prefix}/{table}` and `/{prefix}/{table}/{key}`, as a chain of
//! named, timed stages (PostgREST's `App.hs`, with its stage names): `parse` ([`request`]: an
//! HTTP request into the engine's [`ApiRequest`](crate::engine::request::ApiRequest)) → `plan`
//! ([`crate::engine::action_plan`]: the schema, the guard, statements rendered by
//! `rowgate-query`, one [`Job`](crate::job::Job)) → `transaction` (run by
//! [`crate::engine::Engine::execute`]) → `response` ([`respond::answer`]). `jwt`
//! (authentication) comes before, in the server. [`crate::engine::timing`] names the stages in
//! `Server-Timing`; [`allow`] answers `OPTIONS`.

pub mod allow;
pub mod explain;
pub mod media_handler;
pub mod request;
pub mod respond;

use bytes::Bytes;
use http::{request::Parts, Method};
use rowgate_query::ast::QualifiedName;

use crate::app::{App, LARGE_BODY};
use crate::auth::Principal;
use crate::engine::timing::Timing;
use crate::engine::{Executed, Planned, Planning};
use crate::error::ApiError;
pub use crate::reply::if_none_match;
use request::ApiRequest;
use respond::Reply;

/// What the URL names: a table (or view) and, for item URLs, the key segment.
pub struct Target<'a> {
    /// Table or view name.
    pub table: &'a str,
    /// Item URL key (`/api/team/3` → `3`).
    pub key: Option<&'a str>,
}

/// Serves one table/view request for `principal`: parsed and planned here, executed by the
/// engine ([`crate::engine::Engine::execute`]: settings, `db.pre_request`, the transaction, and
/// one more plan after a schema change the cache had not seen, so that such a request is
/// answered as if the cache had been current: 404 `PGRST205`, 400 `PGRST204`, or the rows). A
/// body over [`LARGE_BODY`] is not kept for a second plan (an insert drops it once its rows are
/// planned, so that it is not held beside them): such a request answers 503 `PGRST002`, to be
/// retried.
pub async fn handle(
    app: &App,
    parts: &Parts,
    body: Bytes,
    target: Target<'_>,
    principal: &Principal,
    timing: &mut Timing,
) -> Result<Reply, ApiError> {
    let again = body.len() <= LARGE_BODY;
    let mut body = Some(body);
    let engine = app.engine();
    let request = request::engine_request(parts, principal);
    let executed = engine
        .execute(
            &request,
            |planning, timing| {
                let body = if again { body.clone() } else { body.take() };
                plan_stages(
                    app,
                    parts,
                    body.unwrap_or_default(),
                    &target,
                    planning,
                    timing,
                )
                .map(|mut planned| {
                    planned.again = again;
                    planned
                })
            },
            timing,
        )
        .await?;
    let Executed {
        answer:
            TablePlan {
                request,
                answer,
                cacheable,
                location,
            },
        mut outcome,
        profile,
        ..
    } = executed;
    let response = std::mem::take(&mut outcome.response);
    let reply = respond::answer(&request, answer, outcome)
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

/// What a table request's plan answers with.
struct TablePlan<'p> {
    /// The request, as parsed.
    request: ApiRequest<'p>,
    /// How its outcome answers.
    answer: respond::Answer,
    /// Whether the answer may be kept until the next commit.
    cacheable: bool,
    /// A collection's `Content-Location`.
    location: Option<String>,
}

/// The `parse` and `plan` stages of a table request, at one attempt.
fn plan_stages<'p>(
    app: &App,
    parts: &'p Parts,
    body: Bytes,
    target: &Target<'p>,
    planning: &Planning<'_>,
    timing: &mut Timing,
) -> Result<Planned<TablePlan<'p>>, ApiError> {
    let context = &planning.cx;
    let schema = context.schema;
    let read = matches!(parts.method, Method::GET | Method::HEAD);
    // an execution plan instead of the rows (PostgreSQL, `rest.plan`)
    let explain = explain::allowed(
        app.config.rest.plan,
        request::accept(&parts.headers),
        context.dialect,
    )?;
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
    if let Some(table) = schema.table(target.table) {
        request.prefer.settle_resolution(table, &request.query);
    }
    let mut plan = crate::engine::action_plan::plan(&request, context)?;
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
    let settings = request.prefer.settings(context.dialect);
    let write_reads_settings =
        plan.job.access == crate::job::Access::Write && context.dialect.has_transaction_settings();
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
    // a collection's rows are at the request's URL, its parameters sorted (PostgREST's)
    let location = (read && target.key.is_none() && explain.is_none()).then(|| {
        respond::content_location(&app.config.rest.prefix, target.table, parts.uri.query())
    });
    Ok(Planned {
        job: plan.job,
        answer: TablePlan {
            request,
            answer: plan.answer,
            cacheable,
            location,
        },
        settings,
        // a write's defaults, triggers and checks may read the request (`request.jwt.claims`,
        // `request.headers`, …, and `db.settings`) as they do under PostgREST, and so may
        // `db.pre_request`'s function, called after them
        reads_request: write_reads_settings || calls_a_function,
        // a write's triggers may set the answer's headers and status (PostgREST's settings)
        sets_response: write_reads_settings,
        again: true,
        client_sql: false,
    })
}
