//! What a worker's realtime side holds (the hub, the wake-up from other workers) and its
//! set-up from the configuration: capture triggers on the realtime tables, the hub live from the
//! log's end. No request handling here: [`crate::app::App`] holds a [`Realtime`].

use std::sync::Arc;

use anyhow::Context as _;
use tokio::sync::Notify;

use super::capture;
use super::hub::Hub;
use crate::config::RealtimeConfig;
use crate::db::Database;
use crate::observe::Metrics;
use crate::schema::{SchemaCache, Table};

/// The realtime part of a running server.
pub struct Realtime {
    /// Subscriptions and fan-out.
    pub hub: Hub,
    /// Supabase's channels: members, broadcasts, presence.
    pub channels: Arc<super::channels::Channels>,
    /// Realtime connections per client address.
    pub addresses: super::addresses::Addresses,
    /// Woken when another worker committed changes (the supervisor says so).
    pub elsewhere: Arc<Notify>,
    /// With database roles: the checker of what each subscriber's role may see.
    pub checker: Option<super::visibility::Checker>,
    /// Woken by the tailer when it dispatched changes this worker committed (a worker under
    /// a supervisor passes it on, so that the other workers read them at once).
    pub committed_here: Arc<Notify>,
}

/// Sets up capture for the configured tables and returns the hub, live from the log's end
/// (`None` when realtime is off).
pub async fn open(
    config: &RealtimeConfig,
    db: &Database,
    metrics: Arc<Metrics>,
    checker: Option<super::visibility::Checker>,
) -> anyhow::Result<Option<Arc<Realtime>>> {
    if config.tables.is_empty() {
        return Ok(None);
    }
    let tables = realtime_tables(config, &db.schema())?;
    capture::ensure(db, &tables).await?;
    let head = capture::head(db)
        .await
        .map_err(|e| anyhow::anyhow!("reading the change log: {e}"))?;
    Ok(Some(Arc::new(Realtime {
        hub: Hub::new(head.last, metrics),
        channels: Default::default(),
        addresses: Default::default(),
        elsewhere: Arc::new(Notify::new()),
        checker,
        committed_here: Arc::new(Notify::new()),
    })))
}

/// The tables `config` names (`*`: every table), checked against the schema.
pub(super) fn realtime_tables(
    config: &RealtimeConfig,
    schema: &SchemaCache,
) -> anyhow::Result<Vec<Table>> {
    if config.tables.iter().any(|t| t == "*") {
        return Ok(schema
            .tables
            .values()
            .filter(|t| !t.is_view)
            .cloned()
            .collect());
    }
    config
        .tables
        .iter()
        .map(|name| match schema.table(name) {
            Some(t) if t.is_view => anyhow::bail!(
                "realtime.tables: {name:?} is a view; changes are captured on tables only"
            ),
            Some(t) => Ok(t.clone()),
            None => anyhow::bail!("realtime.tables: no table {name:?} in the database"),
        })
        .collect()
}

/// Checks `realtime.tables` against the schema (for `config check`).
pub fn check(config: &RealtimeConfig, schema: &SchemaCache) -> anyhow::Result<()> {
    if config.tables.is_empty() {
        return Ok(());
    }
    realtime_tables(config, schema)
        .map(|_| ())
        .context("realtime")
}
