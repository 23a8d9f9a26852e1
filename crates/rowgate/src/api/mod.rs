//! The AutoREST pipeline for `/{prefix}/{table}` and `/{prefix}/{table}/{key}`:
//! parse ([`request`]) → plan ([`plan`], pure) → render (`rowgate-query`) → execute ([`execute`])
//! → respond ([`respond`]). This module wires the stages per HTTP method.

pub mod guard;
pub mod plan;
pub mod request;
pub mod respond;
pub mod rows;

use bytes::Bytes;
use http::{header, request::Parts, HeaderMap, Method, StatusCode};
use rowgate_query::render::{self, Dialect};
use rowgate_query::stmt::OutputColumn;
use rowgate_query::Query;

use crate::app::{App, LARGE_BODY};
use crate::auth::Principal;
use crate::db::sqlite_job::{Encoded, Format};
use crate::error::{ApiError, ErrorCode};
use crate::job::{Access, Job, Output, Step};
use crate::schema::Table;
use guard::Guard;
use plan::OutputShape;
use request::{Count, MediaType, Prefer, Return};
use respond::{content_range, etag, Reply};

/// `count=estimated` counts exactly when the planner expects fewer rows than this.
const ESTIMATE_EXACT_BELOW: u64 = 1000;

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
) -> Result<Reply, ApiError> {
    let kept = (body.len() <= LARGE_BODY).then(|| body.clone());
    let first = handle_once(app, parts, body, &target, principal).await;
    match (first, kept) {
        (Err(e), kept) if e.code == ErrorCode::SchemaChanged => {
            app.db.reload_schema().await?;
            match kept {
                Some(body) => handle_once(app, parts, body, &target, principal).await,
                None => Err(e),
            }
        }
        (answer, _) => answer,
    }
}

async fn handle_once(
    app: &App,
    parts: &Parts,
    body: Bytes,
    target: &Target<'_>,
    principal: &Principal,
) -> Result<Reply, ApiError> {
    let schema = app.db.schema();
    let full = plan::table(&schema, target.table)?;
    let query = request::parse_query(parts.uri.query())?;
    request::check_limits(&query, &app.config.limits)?;
    let prefer = Prefer::parse(&parts.headers)?;
    let guard = Guard::new(
        &app.auth.policy,
        principal,
        full,
        &parts.method,
        &prefer,
        app.db.dialect(),
    )?;
    // The table as the role sees it: only the columns it may read (and filter and order by).
    let view = guard.grant.view(full);
    let table = Tables {
        full,
        view: &view,
        guard: &guard,
    };
    let item = target
        .key
        .map(|k| plan::item_filters(table.view, k))
        .transpose()?;
    let is_item = item.is_some();
    match parts.method {
        Method::GET | Method::HEAD => read(app, parts, &table, &query, &prefer, item).await,
        Method::POST if !is_item => insert(app, parts, &table, &query, &prefer, body).await,
        Method::PATCH | Method::DELETE => {
            modify(app, parts, &table, &query, &prefer, item, &body).await
        }
        Method::PUT => put(app, parts, &table, &query, &prefer, target.key, &body).await,
        _ => {
            let allow = if full.is_view {
                "GET, HEAD"
            } else if is_item {
                "GET, HEAD, PUT, PATCH, DELETE"
            } else {
                "GET, HEAD, POST, PUT, PATCH, DELETE"
            };
            Err(ApiError::new(
                ErrorCode::MethodNotAllowed,
                format!("{} is not allowed here", parts.method),
            )
            .details(format!("allowed: {allow}")))
        }
    }
}

/// The table of a request: whole (for writes and the role's row filter), as the role may read
/// it, and the role's guard.
struct Tables<'a> {
    full: &'a Table,
    view: &'a Table,
    guard: &'a Guard<'a>,
}

/// A job's rows, taken out of its output.
fn encoded(done: &mut Output) -> Encoded {
    Encoded {
        body: std::mem::take(&mut done.rows),
        rows: done.row_count,
    }
}

fn format_of(media: MediaType) -> Format {
    if media == MediaType::Csv {
        Format::Csv
    } else {
        Format::Json
    }
}

async fn read(
    app: &App,
    parts: &Parts,
    tables: &Tables<'_>,
    query: &Query,
    prefer: &Prefer,
    item: Option<Vec<rowgate_query::Condition>>,
) -> Result<Reply, ApiError> {
    let d = app.db.dialect();
    let table = tables.view;
    let is_item = item.is_some();
    let media = request::negotiate(
        &parts.headers,
        &[MediaType::Json, MediaType::SingleObject, MediaType::Csv],
    )?;
    let range = request::parse_range(&parts.headers)?;
    let mut plan = plan::read(
        table,
        query,
        range,
        prefer.count.is_some(),
        app.config.rest.max_rows,
        item,
        d,
    )?;
    let row_filter = &tables.guard.row_filter;
    plan.select.filters.extend(row_filter.iter().cloned());
    if let Some(count) = &mut plan.count {
        count.filters.extend(row_filter.iter().cloned());
    }
    let mut steps = Vec::with_capacity(2);
    if let Some(count) = &plan.count {
        let exact = render::count(d, count);
        steps.push(match prefer.count {
            Some(Count::Planned) => Step::Estimate {
                rows: render::matching_rows(d, count),
                count: exact,
                exact_below: None,
            },
            Some(Count::Estimated) => Step::Estimate {
                rows: render::matching_rows(d, count),
                count: exact,
                exact_below: Some(ESTIMATE_EXACT_BELOW),
            },
            _ => Step::Count(exact),
        });
    }
    steps.push(Step::Rows {
        sql: render::select(d, &plan.select),
        shape: Some(plan.shape.clone()),
    });
    let mut job = Job::new(Access::Read, steps);
    job.format = format_of(media);
    let mut done = app.db.run(job).await?;
    let (out, total) = (encoded(&mut done), done.count);
    let offset = plan.select.offset.unwrap_or(0);
    if is_item || media == MediaType::SingleObject {
        if is_item && out.rows == 0 {
            return Err(ApiError::new(
                ErrorCode::NotFound,
                format!("no row of '{}' has this key", table.name),
            ));
        }
        crate::job::expect_one(out.rows)?;
        let body = Bytes::copy_from_slice(crate::job::unwrap_single(&out.body));
        let tag = etag(&body);
        if if_none_match(&parts.headers, &tag) {
            return Ok(Reply::not_modified(tag));
        }
        let media = if is_item && media == MediaType::Json {
            MediaType::Json
        } else {
            media
        };
        return Ok(Reply::new(StatusCode::OK, media, body).header(header::ETAG, tag));
    }
    if let Some(total) = total {
        if offset > total {
            return Err(ApiError::new(
                ErrorCode::RangeNotSatisfiable,
                "Requested range not satisfiable",
            )
            .details(format!(
                "An offset of {offset} was requested, but there are only {total} rows."
            )));
        }
    }
    let status = match total {
        Some(total) if offset > 0 || offset + out.rows < total => StatusCode::PARTIAL_CONTENT,
        _ => StatusCode::OK,
    };
    let mut reply = Reply::new(status, media, Bytes::from(out.body)).header(
        header::CONTENT_RANGE,
        content_range(offset, out.rows, total),
    );
    if let Some(c) = prefer.count {
        reply = reply.applied(match c {
            Count::Exact => "count=exact",
            Count::Planned => "count=planned",
            Count::Estimated => "count=estimated",
        });
    }
    Ok(reply)
}

/// What a write returns, from `Prefer: return=` and `select=`.
fn returning(
    d: &dyn Dialect,
    table: &Table,
    query: &Query,
    prefer: &Prefer,
) -> Result<(Vec<OutputColumn>, OutputShape), ApiError> {
    match prefer.return_ {
        Return::Representation => plan::output(table, query.select.as_deref(), d),
        Return::HeadersOnly if !table.primary_key.is_empty() => {
            let pk: Vec<rowgate_query::SelectItem> = table
                .primary_key
                .iter()
                .map(|c| rowgate_query::SelectItem::Column {
                    name: c.clone(),
                    path: Vec::new(),
                    alias: None,
                    cast: None,
                })
                .collect();
            plan::output(table, Some(&pk), d)
        }
        _ => Ok((
            Vec::new(),
            OutputShape {
                keys: Vec::new(),
                kinds: Vec::new(),
            },
        )),
    }
}

/// The media type of a write's answer. A singular `Accept` guards every write, whatever it
/// returns: unless exactly one row is affected, the write answers 406 and commits nothing (as
/// PostgREST). Without a representation the other media types do not matter.
fn write_media(parts: &Parts, prefer: &Prefer) -> Result<MediaType, ApiError> {
    let offered = [MediaType::Json, MediaType::SingleObject, MediaType::Csv];
    if prefer.return_ == Return::Representation {
        request::negotiate(&parts.headers, &offered)
    } else {
        Ok(request::negotiate(&parts.headers, &offered).unwrap_or(MediaType::Json))
    }
}

/// The checks a write's job makes: `max-affected` under `handling=strict`, and exactly one row
/// for a singular-object answer.
fn write_job(steps: Vec<Step>, prefer: &Prefer, media: MediaType) -> Job {
    let mut job = Job::new(Access::Write, steps);
    job.format = format_of(media);
    job.max_affected = prefer.max_affected.filter(|_| prefer.strict);
    job.exactly_one = media == MediaType::SingleObject;
    job
}
async fn insert(
    app: &App,
    parts: &Parts,
    tables: &Tables<'_>,
    query: &Query,
    prefer: &Prefer,
    body: Bytes,
) -> Result<Reply, ApiError> {
    let d = app.db.dialect();
    let table = tables.full;
    let media = write_media(parts, prefer)?;
    let (cols, shape) = returning(d, tables.view, query, prefer)?;
    let read = |sink: &mut dyn rows::RowSink| {
        request::read_rows(&parts.headers, &body, query.columns.as_deref(), sink)
    };
    let plan = plan::insert(d, table, query, (body.len(), read), prefer, cols, shape)?;
    // planned: the rows hold the body's values (see `handle`)
    drop(body);
    let returns_rows = !plan.shape.keys.is_empty();
    let mut steps = Vec::with_capacity(plan.stmts.len() * 2);
    for mut stmt in plan.stmts {
        tables.guard.check_writable(&stmt.columns)?;
        steps.extend(tables.guard.insert_checks(d, table, &mut stmt)?);
        // the rows move into the statement's parameters: a large body is held once more
        let sql = render::insert(d, stmt);
        steps.push(if returns_rows {
            Step::Rows {
                sql,
                shape: Some(plan.shape.clone()),
            }
        } else {
            Step::Execute(sql)
        });
    }
    let mut done = app.db.run(write_job(steps, prefer, media)).await?;
    let (out, affected) = (encoded(&mut done), done.affected);
    let mut reply = match prefer.return_ {
        Return::Representation => {
            let body = if media == MediaType::SingleObject {
                Bytes::copy_from_slice(crate::job::unwrap_single(&out.body))
            } else {
                Bytes::from(out.body)
            };
            Reply::new(StatusCode::CREATED, media, body)
        }
        Return::HeadersOnly => {
            let mut r = Reply::empty(StatusCode::CREATED);
            if let Some(location) = location(app, table, &out.body) {
                r = r.header(header::LOCATION, location);
            }
            r
        }
        Return::Minimal => Reply::empty(StatusCode::CREATED),
    };
    reply = reply.header(header::CONTENT_RANGE, format!("*/{affected}"));
    Ok(reply.applied_all(&prefer.applied))
}

/// `Location: /api/table?pk=eq.v` for the first inserted row, from the returned key columns.
fn location(app: &App, table: &Table, returned: &[u8]) -> Option<String> {
    let rows: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_slice(returned).ok()?;
    let row = rows.first()?;
    let mut url = format!("{}/{}?", app.config.rest.prefix, table.name);
    let mut ser = form_urlencoded::Serializer::new(String::new());
    for col in &table.primary_key {
        let v = match row.get(col)? {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        ser.append_pair(col, &format!("eq.{v}"));
    }
    url.push_str(&ser.finish());
    Some(url)
}

/// Whether `If-None-Match` names `tag` (or `*`).
pub(crate) fn if_none_match(headers: &HeaderMap, tag: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| {
            let t = t.trim();
            t == "*" || t.trim_start_matches("W/") == tag
        })
}

/// `If-Match` values, when the header is present.
fn if_match(headers: &HeaderMap) -> Option<Vec<String>> {
    let values: Vec<String> = headers
        .get_all(header::IF_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|t| t.trim().to_string())
        .collect();
    (!values.is_empty()).then_some(values)
}

/// The `If-Match` check a write starts with, when the request has one.
fn if_match_step(
    precondition: Option<((rowgate_query::stmt::Sql, OutputShape), Vec<String>)>,
) -> Vec<Step> {
    let mut steps = Vec::with_capacity(2);
    if let Some(((sql, shape), tags)) = precondition {
        steps.push(Step::IfMatch { sql, shape, tags });
    }
    steps
}

/// The statement that reads an item's default representation (for `If-Match`).
fn current_item(
    d: &dyn Dialect,
    tables: &Tables<'_>,
    key: Vec<rowgate_query::Condition>,
) -> Result<(rowgate_query::stmt::Sql, OutputShape), ApiError> {
    let mut plan = plan::read(tables.view, &Query::default(), None, false, 0, Some(key), d)?;
    plan.select
        .filters
        .extend(tables.guard.row_filter.iter().cloned());
    Ok((render::select(d, &plan.select), plan.shape))
}

async fn modify(
    app: &App,
    parts: &Parts,
    tables: &Tables<'_>,
    query: &Query,
    prefer: &Prefer,
    item: Option<Vec<rowgate_query::Condition>>,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let d = app.db.dialect();
    let table = tables.full;
    let media = write_media(parts, prefer)?;
    let (cols, shape) = returning(d, tables.view, query, prefer)?;
    let cols = if prefer.return_ == Return::Representation {
        cols
    } else {
        Vec::new()
    };
    if query.filters.is_empty() && item.is_none() && app.config.rest.refuse_unfiltered_writes {
        return Err(ApiError::new(
            ErrorCode::UnfilteredWrite,
            format!("{} without a filter would change every row", parts.method),
        )
        .hint("add a filter (to change every row: ?id=not.is.null), or set rest.refuse_unfiltered_writes = false"));
    }
    let mut filters = plan::conditions(tables.view, &query.filters, d)?;
    let precondition = match (&item, if_match(&parts.headers)) {
        (Some(key), Some(tags)) => Some((current_item(d, tables, key.clone())?, tags)),
        _ => None,
    };
    if let Some(key) = item {
        filters.extend(key);
    }
    filters.extend(tables.guard.row_filter.iter().cloned());
    if query.limit.is_some() || query.offset.is_some() {
        return Err(ApiError::new(
            ErrorCode::QueryParse,
            "limit and offset are not supported on PATCH and DELETE",
        )
        .hint("select the rows with filters instead"));
    }
    let mut steps = if_match_step(precondition);
    let sql = if parts.method == Method::PATCH {
        let json = request::parse_body(&parts.headers, body)?;
        match plan::update(table, filters, &json, cols)? {
            Some(stmt) => {
                tables
                    .guard
                    .check_writable(stmt.set.iter().map(|(c, _)| c))?;
                steps.extend(tables.guard.update_check(d, table, &stmt));
                Some(render::update(d, &stmt))
            }
            None => None,
        }
    } else {
        Some(render::delete(d, &plan::delete(table, filters, cols)?))
    };
    let returns_rows = prefer.return_ == Return::Representation;
    match sql {
        Some(sql) if returns_rows => steps.push(Step::Rows {
            sql,
            shape: Some(shape),
        }),
        Some(sql) => steps.push(Step::Execute(sql)),
        None => {}
    }
    let mut done = app.db.run(write_job(steps, prefer, media)).await?;
    let (out, affected) = (encoded(&mut done), done.affected);
    let reply = if returns_rows {
        let body = if media == MediaType::SingleObject {
            Bytes::copy_from_slice(crate::job::unwrap_single(&out.body))
        } else {
            Bytes::from(out.body)
        };
        Reply::new(StatusCode::OK, media, body)
    } else {
        Reply::empty(StatusCode::NO_CONTENT)
    };
    let range = if affected == 0 {
        "*/*".to_string()
    } else {
        format!("0-{}/*", affected - 1)
    };
    Ok(reply
        .header(header::CONTENT_RANGE, range)
        .applied_all(&prefer.applied))
}

async fn put(
    app: &App,
    parts: &Parts,
    tables: &Tables<'_>,
    query: &Query,
    prefer: &Prefer,
    key: Option<&str>,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let d = app.db.dialect();
    let table = tables.full;
    let key_values: Vec<(String, String)> = match key {
        Some(k) => {
            if !query.filters.is_empty() {
                return Err(ApiError::new(
                    ErrorCode::InvalidPut,
                    "filters are not allowed on a PUT to an item URL",
                ));
            }
            let filters = plan::item_filters(table, k)?;
            table
                .primary_key
                .iter()
                .cloned()
                .zip(filters.iter().map(|f| match f {
                    rowgate_query::Condition::Pred(p) => match &p.operand {
                        rowgate_query::Operand::Scalar(s) => s.clone(),
                        _ => String::new(),
                    },
                    _ => String::new(),
                }))
                .collect()
        }
        None => plan::put_key(table, query)?,
    };
    let key_filters = plan::key_filters(&key_values);
    let precondition = match if_match(&parts.headers) {
        Some(tags) => Some((current_item(d, tables, key_filters)?, tags)),
        None => None,
    };
    let json = request::parse_body(&parts.headers, body)?;
    let media = write_media(parts, prefer)?;
    let (cols, shape) = returning(d, tables.view, query, prefer)?;
    let returns_rows = prefer.return_ == Return::Representation;
    let cols = if returns_rows { cols } else { Vec::new() };
    let mut stmt = plan::put(d, body.len(), table, &key_values, &json, cols)?;
    tables.guard.check_writable(&stmt.columns)?;
    let mut steps = if_match_step(precondition);
    steps.extend(tables.guard.insert_checks(d, table, &mut stmt)?);
    let sql = render::insert(d, stmt);
    steps.push(if returns_rows {
        Step::Rows {
            sql,
            shape: Some(shape),
        }
    } else {
        Step::Execute(sql)
    });
    let mut done = app.db.run(write_job(steps, prefer, media)).await?;
    let out = encoded(&mut done);
    let reply = if returns_rows {
        let body = if media == MediaType::SingleObject || key.is_some() {
            Bytes::copy_from_slice(crate::job::unwrap_single(&out.body))
        } else {
            Bytes::from(out.body)
        };
        Reply::new(StatusCode::OK, media, body)
    } else {
        Reply::empty(StatusCode::NO_CONTENT)
    };
    Ok(reply.applied_all(&prefer.applied))
}
