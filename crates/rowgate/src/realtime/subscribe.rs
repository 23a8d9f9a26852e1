//! What a subscription request must pass, and the replay of what a client missed: shared by
//! the WebSocket sessions and the Server-Sent Events streams.
//!
//! [`prepare`] checks a request against the configuration, the schema cache and the role's
//! grant through the same [`Guard`] as a REST read (table realtime, `select` granted, filter
//! columns present and readable, the REST filter limits, filter evaluable in memory) and
//! returns the filter to match (the client's AND the role's row filter) and the column view. [`replay`] reads `(since, last]` from
//! the log in batches.

use std::collections::HashSet;
use std::sync::Arc;

use rowgate_query::ast::Condition;

use super::capture::{self, Head};
use super::documents::{self, DocumentFeed};
use super::hub::{classify, frame, Event, Hub, View};
use super::visibility::Audience;
use crate::app::App;
use crate::auth::policy::{self, Op};
use crate::auth::Principal;
use crate::engine::guard::Guard;
use crate::error::{ApiError, ErrorCode};

/// Changes read from the log per query while replaying.
const REPLAY_BATCH: usize = 500;

/// A subscription request that passed the checks.
pub struct Prepared {
    /// The client's filter and the role's row filter.
    pub filter: Vec<Condition>,
    /// The columns the role may read.
    pub view: Arc<View>,
    /// For a duality view: its documents' feed.
    pub documents: Option<Arc<DocumentFeed>>,
    /// With database roles: whose role and claims decide which changes it sees.
    pub audience: Option<Arc<Audience>>,
}

/// Checks a request to follow `table` with `filter_text` as `principal`.
pub fn prepare(
    app: &App,
    hub: &Hub,
    principal: &Principal,
    table: &str,
    filter_text: Option<&str>,
) -> Result<Prepared, ApiError> {
    if let Some(view) = app.duality.get(table) {
        let feed = documents::prepare(app, principal, view, filter_text)?;
        return Ok(Prepared {
            filter: Vec::new(),
            view: hub.view(&principal.role, table, None),
            documents: Some(hub.document_feed(feed)),
            // (read through the engine as the subscriber)
            audience: None,
        });
    }
    if !app.config.realtime.covers(table) {
        return Err(ApiError::new(
            ErrorCode::RealtimeNotEnabled,
            format!("table {table:?} is not a realtime table"),
        )
        .hint("list it in realtime.tables"));
    }
    // a token revoked or expired since the connection opened subscribes to nothing
    app.auth.check_standing(principal)?;
    let schema = app.db.schema();
    let Some(shape) = schema.table(table) else {
        return Err(ApiError::new(
            ErrorCode::TableNotFound,
            format!("no table {table:?}"),
        ));
    };
    // the same decision as a REST read of the table: the role's grant and row filter
    let guard = Guard::new(
        &app.auth.policy,
        principal,
        shape,
        &[Op::Select],
        app.db.dialect(),
    )?;
    let grant = guard.grant;
    // with the same limits as a REST filter
    let mut filter = documents::subscription_filter(app, filter_text)?;
    for condition in &filter {
        for column in policy::columns_of(condition) {
            if shape.column(column).is_none() || !grant.readable(column) {
                return Err(ApiError::new(
                    ErrorCode::ColumnNotFound,
                    format!("no readable column {column:?} in {table:?}"),
                ));
            }
        }
    }
    // What only the database can evaluate (JSON paths, PostgreSQL operators) is refused.
    let nulls = |_: &str| Some(rowgate_query::ast::Value::Null);
    if let Err(e) = rowgate_query::eval::eval_all(&filter, &nulls) {
        return Err(ApiError::new(
            ErrorCode::QueryParse,
            "the filter cannot be used for events",
        )
        .details(e.to_string()));
    }
    filter.extend(guard.row_filter);
    let readable: Option<HashSet<String>> = shape
        .columns
        .iter()
        .any(|c| !grant.readable(&c.name))
        .then(|| {
            shape
                .columns
                .iter()
                .filter(|c| grant.readable(&c.name))
                .map(|c| c.name.clone())
                .collect()
        });
    Ok(Prepared {
        filter,
        view: hub.view(&principal.role, table, readable),
        documents: None,
        audience: app
            .auth
            .policy
            .defers_to_database()
            .then(|| Arc::new(Audience::of(principal))),
    })
}

/// What a client that saw event `since` missed of `table`, up to `last`.
pub enum Replay {
    /// Events after `since` were pruned (up to this id): the client must re-read.
    Resync(Head),
    /// The missed events, read in batches by [`Replay::next_batch`].
    Events {
        /// The newest id already read.
        after: i64,
        /// Where the live stream takes over.
        last: i64,
    },
}

impl Replay {
    /// Starts a replay (reads where the log stands).
    pub async fn start(app: &App, since: i64, last: i64) -> Result<Replay, ApiError> {
        let head = capture::head(&app.db).await?;
        Ok(if since < head.pruned_through {
            Replay::Resync(head)
        } else {
            Replay::Events { after: since, last }
        })
    }

    /// The next batch of matching events (empty: done).
    pub async fn next_batch(
        &mut self,
        app: &App,
        table: &str,
        prepared: &Prepared,
    ) -> Result<Vec<Event>, ApiError> {
        let Replay::Events { after, last } = self else {
            return Ok(Vec::new());
        };
        let view = prepared
            .documents
            .as_ref()
            .and_then(|feed| app.duality.get(&feed.view).map(|v| (feed, v)));
        loop {
            // a view's documents follow all its tables
            let only = view.is_none().then(|| table.to_string());
            let changes = capture::fetch(&app.db, *after, Some(*last), only, REPLAY_BATCH).await?;
            let Some(newest) = changes.last().map(|c| c.id) else {
                return Ok(Vec::new());
            };
            *after = newest;
            if let Some((feed, view)) = view {
                let touched = documents::affected(app, view, &changes).await?;
                let events = documents::events(app, feed, view, &touched).await?;
                if !events.is_empty() {
                    return Ok(events);
                }
                continue;
            }
            // with database roles: what the subscriber's role may see of them
            let verdicts = match (&prepared.audience, app.realtime.as_ref()) {
                (Some(audience), Some(realtime)) => match &realtime.checker {
                    Some(checker) => Some(
                        checker
                            .verdicts(&app.db.schema(), std::slice::from_ref(audience), &changes)
                            .await,
                    ),
                    None => None,
                },
                _ => None,
            };
            let events: Vec<Event> = changes
                .iter()
                .filter_map(|c| {
                    let seen = |side| match (&prepared.audience, &verdicts) {
                        (None, _) => true,
                        (Some(audience), Some(v)) => v.sees(audience, c.id, side),
                        (Some(_), None) => false,
                    };
                    classify(c, &prepared.filter, seen).map(|k| frame(c, k, &prepared.view))
                })
                .collect();
            if !events.is_empty() {
                return Ok(events);
            }
        }
    }
}
