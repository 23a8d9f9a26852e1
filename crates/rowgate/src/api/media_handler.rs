//! The media handler stage (PostgREST's media type handlers): before a read is parsed, picks
//! the handler `Accept` asks for, if any ([`pick`]); once it is planned, turns the read into
//! its aggregate over the read's rows, answered raw in its media type ([`apply`]).
//!
//! As PostgREST negotiates: for each media range of `Accept`, heaviest first, a handler of
//! the table for any media type (`*/*`) or for that one (only for the table's own rows: no
//! `select=` but `*`), then one for any rows (`anyelement`) of that media type; the first
//! range a built-in media type answers (`application/json`, `text/csv`, PostgREST's vendored
//! types, `*/*`) ends the search. A handler is used only by roles granted its aggregate.

use http::request::Parts;
use rowgate_query::ast::QualifiedName;
use rowgate_query::render::{self, Dialect};

use super::request;
use super::respond::Answer;
use crate::engine::action_plan::ActionPlan;
use crate::job::Step;
use crate::schema::media::MediaHandler;
use crate::schema::SchemaCache;

/// Media ranges a built-in media type answers: the search for a handler ends at them.
fn built_in(media: &str) -> bool {
    media.starts_with("application/vnd.pgrst.")
        || matches!(
            media,
            "application/json" | "text/csv" | "*/*" | "application/*" | "text/*"
        )
}

/// The handler that answers a read of `table` with the request's `Accept`, if any.
pub fn pick<'s>(
    schema: &'s SchemaCache,
    table: &str,
    parts: &Parts,
    may_call: impl Fn(&str) -> bool,
) -> Option<&'s MediaHandler> {
    if schema.media_handlers.is_empty() {
        return None;
    }
    // the table's own rows: no `select=` but `*`
    let whole = whole_rows(parts.uri.query());
    let headers = &parts.headers;
    let handlers = || {
        schema
            .media_handlers
            .iter()
            .filter(|h| may_call(&h.function.name))
    };
    for media in request::accepted_media(request::accept(headers)) {
        // PostgREST's own vendored media types are never a handler's
        if media.starts_with("application/vnd.pgrst.") {
            return None;
        }
        let own = |wanted: &str| {
            handlers().find(|h| whole && h.relation.as_deref() == Some(table) && h.media == wanted)
        };
        let found = own("*/*")
            .or_else(|| own(&media))
            .or_else(|| handlers().find(|h| h.relation.is_none() && h.media == media));
        if found.is_some() {
            return found;
        }
        if built_in(&media) {
            return None;
        }
    }
    None
}

/// Whether a query string asks for the table's own rows: no `select=`, or `select=*`.
fn whole_rows(query: Option<&str>) -> bool {
    form_urlencoded::parse(query.unwrap_or("").as_bytes())
        .filter(|(k, _)| k == "select")
        .all(|(_, v)| v.trim() == "*" || v.trim().is_empty())
}

/// Turns a planned read into `handler`'s aggregate over its rows (each row cast to the table's
/// type `row_type` for a table's handler): one value, answered raw; the function may set the
/// answer's headers as any function may (PostgREST's `response.headers`).
pub fn apply(
    handler: &MediaHandler,
    plan: &mut ActionPlan,
    d: &dyn Dialect,
    row_type: &QualifiedName,
) {
    let Some(sql) = plan.take_rows() else {
        return;
    };
    let row = match &handler.relation {
        Some(_) => format!("CAST(_h AS {})", render::qualified(d, row_type)),
        None => "_h".to_string(),
    };
    let mut wrapped = sql;
    wrapped.text = format!(
        "SELECT {} FROM ({}) AS _h",
        render::call(d, &handler.function, &row),
        wrapped.text
    );
    plan.job.steps.push(Step::Value(wrapped));
    plan.job.steps.push(Step::ResponseSettings);
    plan.answer = Answer::Handled {
        media: handler.media.clone(),
        bytes: handler.bytes,
    };
}
