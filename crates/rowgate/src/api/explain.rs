//! The plan stage (PostgREST's `application/vnd.pgrst.plan`): a request asked for in that
//! media type answers the execution plan of its statement, PostgreSQL's `EXPLAIN`, instead of
//! its rows, when `rest.plan` allows it.
//!
//! `Accept: application/vnd.pgrst.plan` (text) or `application/vnd.pgrst.plan+json`, with
//! `for="application/json"` (the media type the rows would have been answered in: JSON, CSV, a
//! single object, or a single value's raw `text/xml`, `text/plain` or `application/octet-stream`) and `options=analyze|verbose|settings|buffers|wal` (`EXPLAIN`'s own), of
//! a read, a write (rolled back: `analyze` runs it) or a function call. Off or on SQLite, the
//! media type is not available: 406 `PGRST107`.

use crate::error::{ApiError, ErrorCode};
use crate::job::{Job, Step};

/// A plan asked for by `Accept`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlanRequest {
    /// `+json`: the plan as JSON, else as text.
    pub json: bool,
    /// The media type the rows would have had (`for=`).
    pub for_media: String,
    /// `EXPLAIN`'s options, in the order given.
    pub options: Vec<&'static str>,
}

/// `EXPLAIN`'s options a request may name.
const OPTIONS: &[&str] = &["analyze", "verbose", "settings", "buffers", "wal"];

/// The plan `Accept`'s first media range asks for, if it asks for one; 406 when the range is
/// not one Rowgate can answer (an unknown option, a `for=` of no table's media type).
pub fn asked(accept: Option<&str>) -> Option<Result<PlanRequest, ApiError>> {
    let accept = accept?;
    let range = accept.split(',').next()?.trim();
    let mut parts = range.split(';').map(str::trim);
    let media = parts.next()?;
    let is = |name: &str| media.eq_ignore_ascii_case(name);
    let json = if is("application/vnd.pgrst.plan+json") {
        true
    } else if is("application/vnd.pgrst.plan") || is("application/vnd.pgrst.plan+text") {
        false
    } else {
        return None;
    };
    let mut plan = PlanRequest {
        json,
        for_media: "application/json".to_string(),
        options: Vec::new(),
    };
    for param in parts {
        let Some((name, value)) = param.split_once('=') else {
            continue;
        };
        let value = value.trim().trim_matches('"').to_ascii_lowercase();
        match name.trim().to_ascii_lowercase().as_str() {
            // (PostgREST's short name of the single object is its full one)
            "for" if value == "application/vnd.pgrst.object" => {
                plan.for_media = "application/vnd.pgrst.object+json".to_string()
            }
            "for" => plan.for_media = value,
            "options" => {
                for option in value.split('|') {
                    match OPTIONS.iter().find(|o| **o == option) {
                        Some(o) if !plan.options.contains(o) => plan.options.push(o),
                        Some(_) => {}
                        None => return Some(Err(not_available(accept))),
                    }
                }
            }
            _ => {}
        }
    }
    // the rows' media types, and a single value's raw ones
    if !matches!(
        plan.for_media.as_str(),
        "application/json"
            | "text/csv"
            | "application/vnd.pgrst.object+json"
            | "text/xml"
            | "text/plain"
            | "application/octet-stream"
    ) {
        return Some(Err(not_available(accept)));
    }
    Some(Ok(plan))
}

/// The plan a request asks for, when `rest.plan` and the backend (PostgreSQL) allow one; 406
/// when it asks for one they do not.
/// `enabled` is `rest.plan`; `accept` the `Accept` header.
pub fn allowed(
    enabled: bool,
    accept: Option<&str>,
    dialect: &dyn rowgate_query::render::Dialect,
) -> Result<Option<PlanRequest>, ApiError> {
    match asked(accept).transpose()? {
        Some(_) if !(enabled && dialect.explains_plans()) => {
            Err(not_available(accept.unwrap_or("")))
        }
        asked => Ok(asked),
    }
}

/// 406 `PGRST107`, PostgREST's words for a media type it cannot answer.
pub fn not_available(accept: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotAcceptable,
        format!("None of these media types are available: {accept}"),
    )
}

/// Turns a job into the plan of its statement: its last statement (a read's rows, a write's,
/// a call's value), in its place, prefixed with `EXPLAIN (FORMAT …, options)`, its count left out, the rest run
/// as it would be and a write's transaction rolled back (`options=analyze` runs it); the
/// answer's `Content-Type`. `None`, the job untouched, when it ends in no statement.
pub fn apply(plan_request: &PlanRequest, job: &mut Job) -> Option<String> {
    // (after it, at most the steps that read what the transaction set: response settings)
    let last = job
        .steps
        .iter()
        .rposition(|s| matches!(s, Step::Rows { .. } | Step::Execute(_) | Step::Value(_)))?;
    let mut sql = match job.steps.remove(last) {
        Step::Rows { sql, .. } | Step::Execute(sql) | Step::Value(sql) => sql,
        _ => return None,
    };
    let mut options = vec![if plan_request.json {
        "FORMAT JSON"
    } else {
        "FORMAT TEXT"
    }
    .to_string()];
    options.extend(plan_request.options.iter().map(|o| o.to_ascii_uppercase()));
    sql.text = format!("EXPLAIN ({}) {}", options.join(", "), sql.text);
    job.steps.insert(last, Step::Explain(sql));
    job.steps.retain(|s| {
        !matches!(
            s,
            Step::Count(_) | Step::KeptCount { .. } | Step::Estimate { .. }
        )
    });
    // nothing a plan's request runs is kept
    job.rollback = true;
    job.max_affected = None;
    job.exactly_one = false;
    let mut content_type = format!(
        "application/vnd.pgrst.plan+{}; for=\"{}\"",
        if plan_request.json { "json" } else { "text" },
        plan_request.for_media
    );
    if !plan_request.options.is_empty() {
        content_type.push_str(&format!("; options={}", plan_request.options.join("|")));
    }
    content_type.push_str("; charset=utf-8");
    Some(content_type)
}
