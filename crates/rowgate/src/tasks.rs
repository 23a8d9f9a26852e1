//! The background tasks of a serving process, started in one place ([`start`]): the OAuth
//! client refresher, realtime (tailer, pruner, pinger, standing checker) and the schema
//! watchers (PostgreSQL's `NOTIFY`, the fingerprint poll, SIGUSR1), and the read replicas'
//! checks. Each runs until the
//! process ends. The CLI adds the SIGHUP configuration reloader of a process serving alone.

use std::sync::Arc;
use std::time::Duration;

use crate::app::App;
use crate::config::DbTarget;

/// Starts every background task of `app`.
pub fn start(app: &Arc<App>) {
    crate::auth::spawn_client_refresher(app.auth.clone(), app.db.clone());
    crate::realtime::spawn(app);
    spawn_schema_watchers(app);
    spawn_replica_checks(app);
}

/// Checks the read replicas' health and lag every `db.replica_check_ms` (`db.replicas`).
fn spawn_replica_checks(app: &Arc<App>) {
    if !app.db.has_replicas() {
        return;
    }
    let db = app.db.clone();
    let every = Duration::from_millis(app.config.db.replica_check_ms.max(1));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = db.check_replicas().await {
                tracing::warn!(error = %e, "checking the replicas: the primary does not answer");
            }
        }
    });
}

/// Reloads the schema cache on SIGUSR1, when the database's schema fingerprint changes, and, on
/// PostgreSQL, at once on `NOTIFY rowgate, 'reload schema'` (see `rowgate db setup`).
fn spawn_schema_watchers(app: &Arc<App>) {
    if let DbTarget::Postgres(location) = app.config.db.target() {
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        tokio::spawn(async move {
            loop {
                if let Err(e) = crate::db::postgres::listen_for_reloads(&location, &tx).await {
                    tracing::debug!(error = %e, "schema notifications: reconnecting");
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let app = app.clone();
        tokio::spawn(async move {
            while rx.recv().await.is_some() {
                match app.db.reload_schema().await {
                    Ok(_) => tracing::info!("NOTIFY: schema cache reloaded"),
                    Err(e) => tracing::warn!(error = %e, "NOTIFY: schema reload failed"),
                }
            }
        });
    }
    let poll = Duration::from_millis(app.config.db.schema_poll_ms);
    if !poll.is_zero() {
        let app = app.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(poll);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                match app.db.reload_schema_if_changed().await {
                    Ok(true) => tracing::info!("schema changed: cache reloaded"),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(error = %e, "schema check failed"),
                }
            }
        });
    }
    #[cfg(unix)]
    {
        let app = app.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
                return;
            };
            while usr1.recv().await.is_some() {
                match app.db.reload_schema().await {
                    Ok(_) => tracing::info!("SIGUSR1: schema cache reloaded"),
                    Err(e) => tracing::warn!(error = %e, "SIGUSR1: schema reload failed"),
                }
            }
        });
    }
}
