//! ORDS's REST-enabled SQL: `POST /ords/{schema}/_/sql` runs a script (an `application/sql`
//! body, or `{"statementText":…,"limit":…,"offset":…}`) and answers ORDS's
//! `{"env":…,"items":[{statementId, statementType, statementText, resultSet | result, response}]}`.
//!
//! Off unless `ords.sql_roles` names the caller's role. The SQL runs with the database
//! connection's privileges, not through the grants, so it is kept narrow:
//! - a statement must begin with a word its mode allows: `SELECT WITH VALUES TABLE EXPLAIN
//!   SHOW` for everyone listed; `INSERT UPDATE DELETE REPLACE MERGE CREATE ALTER DROP TRUNCATE
//!   COMMENT` too for the roles in `ords.sql_write_roles` (no `CREATE TEMP`). Session and
//!   transaction control (`SET`, `BEGIN`, `PRAGMA`, `ATTACH`, `COPY`, …) never runs;
//! - a reading statement runs as a read job: on a read-only SQLite connection, in a read-only
//!   PostgreSQL transaction; on PostgreSQL every job ends with `RESET ALL`, so nothing a
//!   statement sets (`set_config`) outlives it on the pooled connection;
//! - each statement is one job, under the statement timeout; a query returns at most `limit`
//!   rows (`ords.max_limit` at most), `hasMore` saying whether there were more.

use bytes::Bytes;
use http::request::Parts;
use http::{header, StatusCode};
use rowgate_query::stmt::Sql;
use serde_json::Value;

use crate::app::App;
use crate::auth::Principal;
use crate::error::{ApiError, ErrorCode};
use crate::job::{Access, Job, Step};
use crate::reply::Reply;

/// What a statement does, from its first word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Returns rows.
    Query,
    /// Changes rows.
    Dml,
    /// Changes the schema.
    Ddl,
}

/// The first words each mode allows.
const QUERIES: &[&str] = &["SELECT", "WITH", "VALUES", "TABLE", "EXPLAIN", "SHOW"];
const DML: &[&str] = &["INSERT", "UPDATE", "DELETE", "REPLACE", "MERGE"];
const DDL: &[&str] = &["CREATE", "ALTER", "DROP", "TRUNCATE", "COMMENT"];

/// Runs the script of the request for `principal`.
pub async fn run(
    app: &App,
    parts: &Parts,
    principal: &Principal,
    body: &[u8],
) -> Result<Reply, ApiError> {
    let config = &app.config.ords;
    let writer = config.sql_write_roles.contains(&principal.role);
    if !writer && !config.sql_roles.contains(&principal.role) {
        return Err(if principal.anonymous {
            ApiError::new(
                ErrorCode::LoginRequired,
                "REST-enabled SQL needs a token of a role listed in ords.sql_roles",
            )
        } else {
            ApiError::new(
                ErrorCode::PermissionDenied,
                format!(
                    "role {:?} may not use REST-enabled SQL (ords.sql_roles)",
                    principal.role
                ),
            )
        });
    }
    let (script, limit, offset) = script_of(parts, body, config.max_limit)?;
    let statements = split(&script);
    if statements.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidBody,
            "no SQL statement in the body",
        ));
    }
    let mut items = Vec::with_capacity(statements.len());
    for (i, text) in statements.iter().enumerate() {
        // ORDS's members in ORDS's order
        let mut item = format!("{{\"statementId\":{}", i + 1);
        let result = match kind_of(text, writer) {
            Ok(kind) => {
                let name = match kind {
                    Kind::Query => "query",
                    Kind::Dml => "dml",
                    Kind::Ddl => "ddl",
                };
                item.push_str(&format!(
                    ",\"statementType\":\"{name}\",\"statementText\":{}",
                    Value::from(text.as_str())
                ));
                execute(app, parts, principal, kind, text, (limit, offset)).await
            }
            Err(e) => {
                item.push_str(&format!(
                    ",\"statementType\":\"refused\",\"statementText\":{}",
                    Value::from(text.as_str())
                ));
                Err(e)
            }
        };
        match result {
            Ok(members) => item.push_str(&members),
            Err(e) => {
                item.push_str(&format!(
                    ",\"errorCode\":{},\"errorDetails\":{}",
                    Value::from(e.code_text()),
                    Value::from(e.message.as_str())
                ));
                if let Some(details) = &e.details {
                    item.push_str(&format!(
                        ",\"errorCause\":{}",
                        Value::from(details.as_str())
                    ));
                }
                item.push_str(",\"response\":[],\"result\":1");
            }
        }
        item.push('}');
        items.push(item);
    }
    let body = format!(
        "{{\"env\":{{\"defaultTimeZone\":\"UTC\"}},\"items\":[{}]}}",
        items.join(",")
    );
    Ok(Reply::raw(
        StatusCode::OK,
        "application/json",
        Bytes::from(body),
    ))
}

/// The script, `limit` and `offset` of a request: an `application/sql` body, or JSON's
/// `statementText`.
fn script_of(parts: &Parts, body: &[u8], max_limit: u64) -> Result<(String, u64, u64), ApiError> {
    let media = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::new(ErrorCode::InvalidBody, "the SQL is not UTF-8"))?;
    match media.as_str() {
        "application/sql" | "text/plain" => Ok((text.to_string(), max_limit, 0)),
        "application/json" => {
            let json: Value = serde_json::from_str(text).map_err(|e| {
                ApiError::new(ErrorCode::InvalidBody, "the body is not valid JSON")
                    .details(e.to_string())
            })?;
            let script = json["statementText"].as_str().ok_or_else(|| {
                ApiError::new(ErrorCode::InvalidBody, "statementText (the SQL) is missing")
            })?;
            let limit = json["limit"]
                .as_u64()
                .unwrap_or(max_limit)
                .clamp(1, max_limit.max(1));
            let offset = json["offset"].as_u64().unwrap_or(0);
            Ok((script.to_string(), limit, offset))
        }
        _ => Err(ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "send the SQL as application/sql, or {\"statementText\":…} as application/json",
        )),
    }
}

/// What `text` does, if its mode allows it.
fn kind_of(text: &str, writer: bool) -> Result<Kind, ApiError> {
    let words = first_words(text);
    let first = words.first().map(String::as_str).unwrap_or("");
    let kind = if QUERIES.contains(&first) {
        Kind::Query
    } else if DML.contains(&first) {
        Kind::Dml
    } else if DDL.contains(&first) {
        Kind::Ddl
    } else {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("REST-enabled SQL does not run {first} statements"),
        )
        .hint("queries (SELECT, WITH, VALUES, EXPLAIN); with ords.sql_write_roles also INSERT, UPDATE, DELETE, MERGE and CREATE, ALTER, DROP"));
    };
    let temporary = matches!(words.get(1).map(String::as_str), Some("TEMP" | "TEMPORARY"));
    if kind != Kind::Query && !writer {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            format!("only the roles in ords.sql_write_roles may run {first} statements"),
        ));
    }
    if kind == Kind::Ddl && temporary {
        return Err(ApiError::new(
            ErrorCode::PermissionDenied,
            "temporary objects would outlive the statement on a pooled connection",
        ));
    }
    Ok(kind)
}

/// The first two words of a statement, upper-case, past comments.
fn first_words(text: &str) -> Vec<String> {
    let mut rest = text;
    let mut words = Vec::with_capacity(2);
    while words.len() < 2 {
        rest = rest.trim_start();
        if let Some(after) = rest.strip_prefix("--") {
            rest = after.split_once('\n').map_or("", |(_, r)| r);
        } else if let Some(after) = rest.strip_prefix("/*") {
            rest = after.split_once("*/").map_or("", |(_, r)| r);
        } else {
            let end = rest
                .find(|c: char| !c.is_ascii_alphabetic())
                .unwrap_or(rest.len());
            if end == 0 {
                break;
            }
            words.push(rest[..end].to_ascii_uppercase());
            rest = &rest[end..];
        }
    }
    words
}

/// One statement run as its own job, by the engine (`db.pre_request` first, as for every
/// request; its errors the client's own).
async fn execute(
    app: &App,
    parts: &Parts,
    principal: &Principal,
    kind: Kind,
    text: &str,
    (limit, offset): (u64, u64),
) -> Result<String, ApiError> {
    let first = first_words(text).into_iter().next().unwrap_or_default();
    // a query that can be a subquery is paged by the database; one more row says hasMore
    let pageable =
        kind == Kind::Query && matches!(first.as_str(), "SELECT" | "WITH" | "VALUES" | "TABLE");
    let sql = if pageable {
        format!(
            "SELECT * FROM ({text}) AS sql_statement LIMIT {} OFFSET {offset}",
            limit + 1
        )
    } else {
        text.to_string()
    };
    let statement = Sql {
        text: sql,
        params: Vec::new(),
    };
    let mut steps = vec![match kind {
        Kind::Query => Step::Rows {
            sql: statement,
            shape: None,
        },
        Kind::Dml | Kind::Ddl => Step::Execute(statement),
    }];
    if app.db.dialect().has_transaction_settings() {
        // nothing the statement set (set_config, …) outlives it on the pooled connection
        steps.push(Step::Execute(Sql {
            text: "RESET ALL".into(),
            params: Vec::new(),
        }));
    }
    let access = if kind == Kind::Query {
        Access::Read
    } else {
        Access::Write
    };
    // (the SQL is the client's: what is wrong with it is the client's mistake, not a 500)
    let mut job = Some(Job::new(access, steps));
    let output = app
        .engine()
        .execute_plain(principal, parts, |_, _| {
            let job = job
                .take()
                .ok_or_else(|| ApiError::internal("planned twice"))?;
            let mut planned = crate::engine::Planned::new(job, ());
            planned.client_sql = true;
            planned.again = false;
            Ok(planned)
        })
        .await?
        .outcome;
    match kind {
        Kind::Query => {
            let rows: Vec<&serde_json::value::RawValue> =
                serde_json::from_slice(&output.rows).map_err(ApiError::internal)?;
            let limit = usize::try_from(limit).unwrap_or(usize::MAX);
            let has_more = rows.len() > limit;
            let rows = &rows[..rows.len().min(limit)];
            // the columns in their order, typed by the first row's values
            let mut metadata = Vec::new();
            if let Some(first) = rows.first() {
                for (name, value) in super::respond::members(first.get())? {
                    metadata.push(format!(
                        "{{\"columnName\":{},\"jsonColumnName\":{},\"columnTypeName\":\"{}\"}}",
                        Value::from(name.as_ref()),
                        Value::from(name.to_ascii_lowercase()),
                        type_name(value.get())
                    ));
                }
            }
            let items: Vec<&str> = rows.iter().map(|r| r.get()).collect();
            Ok(format!(
                ",\"resultSet\":{{\"metadata\":[{}],\"items\":[{}],\"hasMore\":{has_more},\"limit\":{limit},\"offset\":{offset},\"count\":{}}},\"response\":[],\"result\":0",
                metadata.join(","),
                items.join(","),
                rows.len()
            ))
        }
        Kind::Dml | Kind::Ddl => {
            let affected = output.affected;
            let words = if kind == Kind::Dml {
                let verb = match first.as_str() {
                    "INSERT" | "REPLACE" => "inserted",
                    "UPDATE" => "updated",
                    "DELETE" => "deleted",
                    _ => "merged",
                };
                format!(
                    "\n{affected} row{} {verb}.\n\n",
                    if affected == 1 { "" } else { "s" }
                )
            } else {
                format!("\n{} done.\n\n", first_words(text).join(" "))
            };
            Ok(format!(
                ",\"response\":[{}],\"result\":{affected}",
                Value::from(words)
            ))
        }
    }
}

/// An ORDS type name for a JSON value's text.
fn type_name(value: &str) -> &'static str {
    match value.as_bytes().first() {
        Some(b'0'..=b'9' | b'-') => "NUMBER",
        Some(b't' | b'f') => "BOOLEAN",
        Some(b'{' | b'[') => "JSON",
        _ => "VARCHAR2",
    }
}

/// A script split into statements at the semicolons outside quotes (`'…'`, `"…"`), comments and
/// PostgreSQL's dollar quotes (`$$…$$`, `$tag$…$tag$`); blank statements dropped.
fn split(script: &str) -> Vec<String> {
    let bytes = script.as_bytes();
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            quote @ (b'\'' | b'"') => {
                i += 1;
                while i < bytes.len() {
                    if bytes[i] == quote {
                        // a doubled quote stays inside
                        if bytes.get(i + 1) == Some(&quote) {
                            i += 2;
                            continue;
                        }
                        break;
                    }
                    i += 1;
                }
            }
            b'-' if bytes.get(i + 1) == Some(&b'-') => {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i += 2;
                while i + 1 < bytes.len() && !(bytes[i] == b'*' && bytes[i + 1] == b'/') {
                    i += 1;
                }
                i += 1;
            }
            b'$' => {
                let tag_end = script[i + 1..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .map(|n| i + 1 + n);
                if let Some(end) = tag_end.filter(|&e| bytes.get(e) == Some(&b'$')) {
                    let tag = &script[i..=end];
                    match script[end + 1..].find(tag) {
                        Some(close) => i = end + 1 + close + tag.len() - 1,
                        None => i = bytes.len(),
                    }
                }
            }
            b';' => {
                push_statement(&mut out, &script[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    push_statement(&mut out, &script[start.min(script.len())..]);
    out
}

fn push_statement(out: &mut Vec<String>, text: &str) {
    let text = text.trim();
    if !first_words(text).is_empty() {
        out.push(text.to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripts_split_at_semicolons_outside_quotes_and_comments() {
        assert_eq!(
            split("select 1; select 'a;b' ; -- x;y\nselect \"c;\" ;\n/* ; */ select 2;;"),
            vec![
                "select 1",
                "select 'a;b'",
                "-- x;y\nselect \"c;\"",
                "/* ; */ select 2"
            ]
        );
        assert_eq!(
            split("create function f() returns int as $body$ select 1; $body$ language sql; select $$;$$"),
            vec![
                "create function f() returns int as $body$ select 1; $body$ language sql",
                "select $$;$$"
            ]
        );
        assert_eq!(split("select 'it''s; fine'"), vec!["select 'it''s; fine'"]);
        assert!(split(" ; -- nothing\n").is_empty());
    }

    #[test]
    fn only_the_allowed_statements_run() {
        assert_eq!(kind_of("  select 1", false).expect("query"), Kind::Query);
        assert_eq!(
            kind_of("/* c */ -- d\n WITH x AS (select 1) select * from x", false).expect("with"),
            Kind::Query
        );
        assert_eq!(
            kind_of("insert into t values (1)", true).expect("dml"),
            Kind::Dml
        );
        assert_eq!(
            kind_of("create table t (a int)", true).expect("ddl"),
            Kind::Ddl
        );
        for (text, writer) in [
            ("insert into t values (1)", false),
            ("create table t (a int)", false),
            ("set default_transaction_read_only = off", true),
            ("begin", true),
            ("pragma query_only = off", true),
            ("attach database 'x' as y", true),
            ("create temp table t (a int)", true),
            ("create temporary view v as select 1", true),
            ("copy t to stdout", true),
            ("", true),
        ] {
            assert!(kind_of(text, writer).is_err(), "{text}");
        }
    }
}
