//! ORDS's `POST /ords/{schema}/{object}/batchload`: CSV rows (a header line naming the columns,
//! whatever their case) inserted in batches of `batchRows` (default 50), each batch one insert
//! through the same plan as a JSON POST (grants, row filters and value checks apply), committed
//! in order. The answer is ORDS's plain-text report; the load stops at the first batch that
//! fails (ORDS's `errorsMax=1`): the batches before it stay committed, the report says which
//! rows were not loaded and why. An empty field is NULL, as ORDS loads it. A caller who may not
//! insert into the table is refused (401 anonymous, 403) before a row is read.

use std::time::Instant;

use bytes::Bytes;
use http::request::Parts;
use http::StatusCode;
use rowgate_query::Query;

use crate::api::request::{Action, ApiRequest, MediaType, Prefer};
use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorCode};
use crate::reply::Reply;

/// Rows per batch when the request does not say (ORDS's default).
const DEFAULT_BATCH_ROWS: usize = 50;

/// Loads the CSV `body` into `object` as `principal`.
pub async fn load(
    app: &App,
    parts: &Parts,
    principal: &Principal,
    object: &str,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let started = Instant::now();
    if app.duality.get(object).is_some() {
        return Err(ApiError::new(
            ErrorCode::MethodNotAllowed,
            "batchload loads tables: a duality view's documents are POSTed one by one",
        ));
    }
    let mut batch_rows = DEFAULT_BATCH_ROWS;
    let mut delimiter = b',';
    for (name, value) in form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()) {
        match name.as_ref() {
            "batchRows" => {
                batch_rows = value
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| {
                        bad(format!(
                            "batchRows must be a positive number, not {value:?}"
                        ))
                    })?;
            }
            "delimiter" => match value.as_bytes() {
                [b] => delimiter = *b,
                _ => return Err(bad("delimiter must be one character")),
            },
            _ => {}
        }
    }
    let schema = app.db.schema();
    let table = crate::engine::plan::table(&schema, object)?;
    // refused before a row is read, as a JSON POST of the rows would be (401 anonymous, 403)
    crate::engine::guard::Guard::new(
        &app.auth.policy,
        principal,
        table,
        &[crate::auth::policy::Op::Insert],
        app.db.dialect(),
    )?;
    let mut csv = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(true)
        .from_reader(body);
    let headers = csv
        .headers()
        .map_err(|e| bad(format!("the CSV header line cannot be read: {e}")))?
        .clone();
    let columns: Vec<String> = headers
        .iter()
        .map(|h| {
            table
                .columns
                .iter()
                .find(|c| c.name.eq_ignore_ascii_case(h.trim()))
                .map(|c| c.name.clone())
                .ok_or_else(|| bad(format!("'{object}' has no column '{}'", h.trim())))
        })
        .collect::<Result<_, _>>()?;
    let mut report = Report::default();
    let mut batch = Vec::with_capacity(batch_rows);
    let mut records = csv.records();
    loop {
        let record = records.next();
        let at_end = record.is_none();
        if let Some(record) = record {
            let record = match record {
                Ok(r) => r,
                Err(e) => {
                    report.failed(report.processed + batch.len() + 1, 1, &bad(e.to_string()));
                    break;
                }
            };
            batch.push(object_of(&columns, &record));
        }
        if batch.len() == batch_rows || (at_end && !batch.is_empty()) {
            let rows = batch.len();
            match insert(app, parts, principal, object, std::mem::take(&mut batch)).await {
                Ok(()) => report.processed += rows,
                Err(e) => {
                    report.failed(report.processed + 1, rows, &e);
                    break;
                }
            }
        }
        if at_end {
            break;
        }
    }
    Ok(Reply::raw(
        StatusCode::OK,
        "text/plain; charset=utf-8",
        Bytes::from(report.text(started)),
    ))
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidBody, message)
}

/// One CSV record as a JSON object of its columns (an empty field: null).
fn object_of(columns: &[String], record: &csv::StringRecord) -> serde_json::Value {
    let mut row = serde_json::Map::with_capacity(columns.len());
    for (column, field) in columns.iter().zip(record.iter()) {
        let value = if field.is_empty() {
            serde_json::Value::Null
        } else {
            serde_json::Value::String(field.to_string())
        };
        row.insert(column.clone(), value);
    }
    serde_json::Value::Object(row)
}

/// Inserts one batch in one job, planned as a JSON POST of its rows, executed by the engine as
/// the load's request (`db.pre_request` and `request.*` as for any other).
async fn insert(
    app: &App,
    facts: &Parts,
    principal: &Principal,
    object: &str,
    rows: Vec<serde_json::Value>,
) -> Result<(), ApiError> {
    let body = serde_json::to_vec(&rows).map_err(ApiError::internal)?;
    let request = ApiRequest {
        action: Action::Insert,
        table: object,
        query: Query::default(),
        prefer: Prefer::default(),
        media: MediaType::Json,
        nulls_stripped: false,
        range: None,
        // the batch's rows, as JSON: the load's own request, no header invented
        method: "POST",
        content_type: Some("application/json"),
        if_match: None,
        if_none_match: Vec::new(),
        body: Bytes::from(body),
    };
    app.engine()
        .execute_plain(principal, facts, |planning, _| {
            super::plan_table(&request, planning)
        })
        .await?;
    Ok(())
}

/// What the load did, for ORDS's report.
#[derive(Default)]
struct Report {
    processed: usize,
    errors: Vec<String>,
    in_error: usize,
}

impl Report {
    /// The batch of `rows` rows from row `first` (1-based) was not loaded.
    fn failed(&mut self, first: usize, rows: usize, err: &ApiError) {
        let mut line = if rows == 1 {
            format!("#ERROR Row {first}: {}", err.message)
        } else {
            format!("#ERROR Rows {first}-{}: {}", first + rows - 1, err.message)
        };
        if let Some(details) = &err.details {
            line.push_str(&format!(" ({details})"));
        }
        self.errors.push(line);
        self.in_error += rows;
    }

    fn text(&self, started: Instant) -> String {
        let elapsed = started.elapsed();
        let millis = elapsed.as_millis();
        let mut out = String::new();
        for e in &self.errors {
            out.push_str(e);
            out.push('\n');
        }
        out.push_str(&format!(
            "#INFO Number of rows processed: {}\n",
            self.processed
        ));
        out.push_str(&format!(
            "#INFO Number of rows in error: {}\n",
            self.in_error
        ));
        if !self.errors.is_empty() {
            out.push_str(&format!(
                "#INFO Last row processed in final committed batch: {}\n",
                self.processed
            ));
        }
        out.push_str(&format!(
            "#INFO Elapsed time: {:02}:{:02}:{:02}.{:03} - ({millis} ms)\n",
            millis / 3_600_000,
            millis / 60_000 % 60,
            millis / 1000 % 60,
            millis % 1000
        ));
        out.push_str(if self.errors.is_empty() {
            "SUCCESS: Processed without errors\n"
        } else {
            "ERROR: Processed with errors\n"
        });
        out
    }
}
