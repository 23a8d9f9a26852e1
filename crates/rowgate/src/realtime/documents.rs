//! Realtime feeds of duality views: a subscription to a view (`team_dv`) receives the whole new
//! document, with its new `_metadata.etag`, whenever a row of any of its tables changes, from
//! any writer (the change log sees them all).
//!
//! A subscription holds a [`DocumentFeed`]: the view's document read as a GET of it plans it
//! for the subscriber (row filters at every level, the subscription's filter on top-level
//! fields). For a batch of changes, [`affected`] finds the documents they touch — a root row by
//! its key, a nested row through the link to its parent, walked up to the root in one query
//! when the parent is not the root — and [`events`] reads those documents in one statement per
//! feed and frames them: `insert` (a new root row), `update`, or `delete` (the root row is gone:
//! only the key). The same two functions replay what a resuming client missed.
//!
//! What a subscriber is sent is read through the engine ([`crate::engine::Engine`]) as the
//! subscriber, as a GET of the view would be: planned on the schema of the moment, with the
//! transaction's settings and `db.pre_request`. Which documents a change touches is the
//! dispatcher's own question, asked as the server (like the change log's reader): it learns
//! keys, never what a subscriber may not read.

use std::collections::BTreeMap;
use std::sync::Arc;

use rowgate_query::render::{self, Dialect};
use rowgate_query::stmt::Sql;
use rowgate_query::{Condition, Operand, Operator, Predicate};
use serde_json::{Map, Value as Json};

use super::capture::{Change, Op};
pub use super::hub::DocumentFeed;
use super::protocol::Event;
use crate::app::App;
use crate::auth::policy;
use crate::auth::Principal;
use crate::duality::{DocTable, DualityView};
use crate::engine::facts::GivenFacts;
use crate::engine::timing::Timing;
use crate::engine::{action_plan, Planned, Planning};
use crate::error::{ApiError, ErrorCode};
use crate::job::{Access, Job, Step};

/// Checks a subscription to `view`'s documents and plans its read: every table of the view
/// must be a realtime table and readable by the role; `filter_text` filters the documents'
/// top-level fields.
pub fn prepare(
    app: &App,
    principal: &Principal,
    view: &DualityView,
    filter_text: Option<&str>,
) -> Result<DocumentFeed, ApiError> {
    let missing: Vec<&str> = view
        .tables()
        .iter()
        .map(|t| t.table.as_str())
        .filter(|t| !app.config.realtime.covers(t))
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::new(
            ErrorCode::RealtimeNotEnabled,
            format!(
                "the documents of {:?} are made of tables that are not realtime tables: {}",
                view.name,
                missing.join(", ")
            ),
        )
        .hint("list every table of the view in realtime.tables"));
    }
    app.auth.check_standing(principal)?;
    let filter = subscription_filter(app, filter_text)?;
    let schema = app.db.schema();
    let cx = app.plan_context(&schema, principal);
    // every table of the document is read as a GET reads it: the role's grants apply
    let read = action_plan::document_read(&cx, view, &filter)?;
    Ok(DocumentFeed {
        view: view.name.clone(),
        read,
        filter,
        principal: principal.clone(),
        personal: !app.config.db.pre_request.is_empty(),
    })
}

/// A subscription's filter (REST syntax), within the REST filter limits.
pub fn subscription_filter(app: &App, text: Option<&str>) -> Result<Vec<Condition>, ApiError> {
    let filter = match text.map(str::trim).filter(|t| !t.is_empty()) {
        Some(text) => policy::parse_filter(text).map_err(|e| {
            ApiError::new(ErrorCode::QueryParse, "the filter could not be parsed")
                .details(format!("{e:#}"))
        })?,
        None => Vec::new(),
    };
    crate::engine::request::check_limits(&filter, &app.config.limits)?;
    Ok(filter)
}

/// What a batch of changes did to one document.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touched {
    /// The newest change that touched it.
    pub id: i64,
    /// Its root row was inserted in the batch.
    pub inserted: bool,
    /// Its root row was deleted in the batch (and not inserted again).
    pub deleted: bool,
}

/// The documents of `view` that `changes` touch, by the root key's JSON text.
pub async fn affected(
    app: &App,
    view: &DualityView,
    changes: &[Change],
) -> Result<BTreeMap<String, Touched>, ApiError> {
    let chains = chains(&view.root);
    let mut out: BTreeMap<String, Touched> = BTreeMap::new();
    let mut touch = |key: &Json, id: i64, root_op: Option<Op>| {
        if key.is_null() {
            return;
        }
        let entry = out.entry(key.to_string()).or_insert(Touched {
            id,
            inserted: false,
            deleted: false,
        });
        entry.id = entry.id.max(id);
        match root_op {
            Some(Op::Insert) => {
                entry.inserted = true;
                entry.deleted = false;
            }
            Some(Op::Delete) => entry.deleted = true,
            _ => {}
        }
    };
    for change in changes {
        for chain in chains.iter().filter(|c| c.last().table == change.table) {
            let rows = [change.old.as_ref(), change.new.as_ref()];
            let node = chain.last();
            if chain.nodes.len() == 1 {
                // the root: its key
                let key = node.key.as_deref().unwrap_or_default();
                for row in rows.into_iter().flatten() {
                    touch(
                        row.get(key).unwrap_or(&Json::Null),
                        change.id,
                        Some(change.op),
                    );
                }
                continue;
            }
            for row in rows.into_iter().flatten() {
                let values: Vec<&Json> = node
                    .link
                    .iter()
                    .map(|(_, own)| row.get(own).unwrap_or(&Json::Null))
                    .collect();
                if values.iter().any(|v| v.is_null()) {
                    continue;
                }
                let root_key = chain.nodes[0].key.as_deref().unwrap_or_default();
                if chain.nodes.len() == 2 && node.link.len() == 1 && node.link[0].0 == root_key {
                    // nested right under the root by its key: the root key is the row's
                    touch(values[0], change.id, None);
                    continue;
                }
                for key in roots_of(app, chain, &values).await? {
                    touch(&key, change.id, None);
                }
            }
        }
    }
    Ok(out)
}

/// The events of `feed` for the documents `touched`, oldest change first: the documents as the
/// subscriber reads them now.
pub async fn events(
    app: &App,
    feed: &DocumentFeed,
    view: &DualityView,
    touched: &BTreeMap<String, Touched>,
) -> Result<Vec<Event>, ApiError> {
    if touched.is_empty() {
        return Ok(Vec::new());
    }
    let key_column = view.root.key.clone().unwrap_or_default();
    let keys: Vec<String> = touched
        .keys()
        .map(|k| match serde_json::from_str::<Json>(k) {
            Ok(Json::String(s)) => s,
            _ => k.clone(),
        })
        .collect();
    let path = format!(
        "/{}/{}",
        app.config.rest.prefix.trim_matches('/'),
        feed.view
    );
    let facts = GivenFacts {
        method: "GET",
        path: &path,
        headers: &[],
    };
    let plan = |planning: &Planning<'_>, _: &mut Timing| {
        // the subscriber's read, planned on the schema of the moment
        let read = action_plan::document_read(&planning.cx, view, &feed.filter)?;
        let mut select = read.select;
        select.filters.push(Condition::Pred(Predicate::new(
            key_column.clone(),
            Operator::In,
            Operand::List(keys.clone()),
        )));
        let sql = render::select(planning.cx.dialect, &select);
        let job = Job::new(
            Access::Read,
            vec![Step::Rows {
                sql,
                shape: Some(read.shape),
            }],
        )
        // the documents of changes the primary committed just now
        .on_primary();
        Ok(Planned::new(job, ()))
    };
    let executed = app
        .engine()
        .execute_plain(&feed.principal, &facts, plan)
        .await?;
    let (body, _) = crate::duality::with_metadata(&executed.outcome.rows, &view.nocheck)
        .map_err(ApiError::internal)?;
    let documents: Vec<&serde_json::value::RawValue> =
        serde_json::from_slice(&body).map_err(ApiError::internal)?;
    let mut by_key: BTreeMap<String, &str> = BTreeMap::new();
    for doc in documents {
        #[derive(serde::Deserialize)]
        struct Id {
            #[serde(rename = "_id")]
            id: Json,
        }
        let id: Id = serde_json::from_str(doc.get()).map_err(ApiError::internal)?;
        by_key.insert(id.id.to_string(), doc.get());
    }
    let mut ordered: Vec<(&String, &Touched)> = touched.iter().collect();
    ordered.sort_by_key(|(_, t)| t.id);
    let table = Json::from(feed.view.as_str()).to_string();
    let mut out = Vec::with_capacity(ordered.len());
    for (key, t) in ordered {
        let (op, row) = match (by_key.get(key.as_str()), t.deleted) {
            (Some(doc), _) if t.inserted => ("insert", Some(*doc)),
            (Some(doc), _) => ("update", Some(*doc)),
            (None, true) => ("delete", None),
            // filtered out for this subscriber
            (None, false) => continue,
        };
        let mut json = format!(
            "{{\"type\":\"event\",\"id\":{},\"table\":{table},\"op\":\"{op}\",\"key\":{{\"_id\":{key}}}",
            t.id
        );
        if let Some(row) = row {
            json.push_str(",\"row\":");
            json.push_str(row);
        }
        json.push('}');
        out.push(Event {
            id: t.id,
            json: json.into(),
        });
    }
    Ok(out)
}

/// The tables of a document from the root down to one of them.
struct Chain<'v> {
    nodes: Vec<&'v DocTable>,
}

impl<'v> Chain<'v> {
    fn last(&self) -> &'v DocTable {
        self.nodes[self.nodes.len() - 1]
    }
}

/// The chain to every table of the document.
fn chains(root: &DocTable) -> Vec<Chain<'_>> {
    fn walk<'v>(node: &'v DocTable, above: &[&'v DocTable], out: &mut Vec<Chain<'v>>) {
        let mut nodes = above.to_vec();
        nodes.push(node);
        for n in &node.nested {
            walk(n, &nodes, out);
        }
        out.push(Chain { nodes });
    }
    let mut out = Vec::new();
    walk(root, &[], &mut out);
    out
}

/// The root keys of the documents holding the parent rows whose link columns have `values`:
/// one query joining the chain from the root down to the parent.
async fn roots_of(app: &App, chain: &Chain<'_>, values: &[&Json]) -> Result<Vec<Json>, ApiError> {
    let d = app.db.dialect();
    let schema = app.db.schema();
    let alias = |i: usize| format!("_{i}");
    let nodes = &chain.nodes[..chain.nodes.len() - 1];
    let root_key = nodes[0].key.as_deref().unwrap_or_default();
    let mut sql = Sql::default();
    sql.text.push_str("SELECT DISTINCT ");
    push_column(d, &alias(0), root_key, &mut sql.text);
    sql.text.push_str(" AS ");
    sql.text.push_str(&d.quote_ident("key"));
    sql.text.push_str(" FROM ");
    for (i, node) in nodes.iter().enumerate() {
        let table = crate::engine::plan::table(&schema, &node.table)?;
        if i > 0 {
            sql.text.push_str(" JOIN ");
        }
        render::push_relation(d, &table.relation(), &mut sql.text);
        sql.text.push_str(" AS ");
        sql.text.push_str(&d.quote_ident(&alias(i)));
        if i > 0 {
            for (j, (parent_column, own)) in node.link.iter().enumerate() {
                sql.text.push_str(if j == 0 { " ON " } else { " AND " });
                push_column(d, &alias(i), own, &mut sql.text);
                sql.text.push_str(" = ");
                push_column(d, &alias(i - 1), parent_column, &mut sql.text);
            }
        }
    }
    let last = nodes.len() - 1;
    for (j, ((parent_column, _), value)) in chain.last().link.iter().zip(values).enumerate() {
        sql.text.push_str(if j == 0 { " WHERE " } else { " AND " });
        push_column(d, &alias(last), parent_column, &mut sql.text);
        sql.text.push_str(" = ");
        sql.params.push(crate::engine::rows::json_value(value));
        sql.text.push_str(&d.placeholder(sql.params.len()));
    }
    let job = Job::new(Access::Read, vec![Step::Rows { sql, shape: None }]).on_primary();
    let output = app.db.run(job).await.map_err(ApiError::from)?;
    let rows: Vec<Map<String, Json>> =
        serde_json::from_slice(&output.rows).map_err(ApiError::internal)?;
    Ok(rows
        .into_iter()
        .filter_map(|mut r| r.remove("key"))
        .collect())
}

/// `"alias"."column"`.
fn push_column(d: &dyn Dialect, alias: &str, column: &str, text: &mut String) {
    text.push_str(&d.quote_ident(alias));
    text.push('.');
    text.push_str(&d.quote_ident(column));
}

/// The feeds of the views subscribed to, with their views, and what `changes` do to them.
pub async fn dispatch(app: &Arc<App>, changes: &[Change]) {
    let Some(realtime) = app.realtime.as_ref() else {
        return;
    };
    let views = app.duality.views().map(|v| v.name.as_str());
    for (view_name, feeds) in realtime.hub.document_feeds(views) {
        let Some(view) = app.duality.get(&view_name) else {
            continue;
        };
        let touched = match affected(app, view, changes).await {
            Ok(t) if t.is_empty() => continue,
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(view = %view_name, "realtime: documents not followed: {}", e.message);
                continue;
            }
        };
        for feed in feeds {
            match events(app, &feed, view, &touched).await {
                Ok(events) => realtime.hub.deliver(&view_name, &feed, &events),
                Err(e) => {
                    tracing::warn!(view = %view_name, "realtime: documents not read: {}", e.message)
                }
            }
        }
    }
}
