//! Change capture on a Citus cluster (distributed PostgreSQL: a coordinator and workers holding
//! the shards): the same change log, ids and guarantees as on one PostgreSQL, for distributed,
//! reference and local tables alike.
//!
//! Why triggers on the shards, gathered, rather than Citus's logical-decoding CDC: the rows are
//! captured as on one PostgreSQL (`to_jsonb` of the row, in the same transaction as the write:
//! atomic, committed or not with it), so the log reads the same on both; nothing needs
//! `wal_level = logical`, replication slots that hold WAL while Rowgate is down, or a decoder of
//! pgoutput's values into JSON. Citus runs triggers on shards when they are created with
//! `citus.enable_unsafe_triggers`; "unsafe" is about triggers that reach other shards, and this
//! one writes only a table of its own node.
//!
//! - **Where a change is written.** The capture trigger (the one function, propagated by Citus to
//!   every node) appends to `rowgate.changes` of the node it fires on. On the coordinator (group
//!   0) that is the log itself, under the capture lock, with its `NOTIFY`, as on one PostgreSQL.
//!   On a worker it is that node's outbox: no lock (a transaction writing several shards of one
//!   worker holds several connections to it, which one lock would set against each other) and no
//!   `NOTIFY` (a transaction that notifies cannot be prepared, and Citus commits multi-shard
//!   writes in two phases). A reference table's trigger fires on every copy of the row: only the
//!   coordinator's copy captures it (the coordinator must hold reference tables: it is in
//!   `pg_dist_node`, as `citus_set_coordinator_host` puts it).
//! - **Gathering.** Each Rowgate process runs a gatherer; per worker, the one holding a
//!   transaction-scoped advisory lock on the coordinator moves the worker's settled changes into
//!   the log in one coordinator transaction (new ids, the capture lock, a `NOTIFY` to every
//!   tailer), noting their outbox ids in `rowgate.gathered`, then deletes them from the outbox;
//!   should that delete not happen, the next round deletes the noted ids first: every change is
//!   logged once.
//! - **Order.** Outbox ids follow insertion, not commit. A change is settled when its
//!   transaction is older than every transaction running on the worker (`xid` below the
//!   snapshot's `xmin`): the gatherer takes the outbox in id order and stops at the first change
//!   not settled. Two changes of one row are made one after the other (the second waits on the
//!   row's lock until the first commits), so the later has the higher id; the gatherer never
//!   takes it before the earlier, which is settled by then. Changes of different rows on
//!   different workers are ordered as they are gathered (Citus has no global commit order either).
//! - **Faults.** A worker that does not answer keeps its outbox; its changes are gathered, in
//!   order, when it answers again, and the other workers' meanwhile.

use std::time::Duration;

use tokio_postgres::{Client, Transaction};

use super::{CAPTURE_LOCK, CHANNEL, LOG_COLUMNS};
use crate::db::{postgres_connect, Postgres};

/// Advisory lock class of gathering a worker's outbox (the second key: its node id).
const GATHER_LOCK: i32 = 0x726f_7767;

/// Changes moved per coordinator transaction.
const BATCH: i64 = 1000;

/// Whether the database is a Citus cluster's coordinator (or a worker: the extension is there).
pub async fn installed(client: &Client) -> Result<bool, tokio_postgres::Error> {
    Ok(client
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
            &[],
        )
        .await?
        .get(0))
}

/// The outbox of a worker: the log's columns and the writing transaction's id.
fn outbox() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS rowgate.changes ({LOG_COLUMNS},
           xid xid8 NOT NULL DEFAULT pg_current_xact_id())"
    )
}

/// Makes what capture needs on every node before its triggers exist: the `rowgate` schema
/// (Citus takes it to the workers) and each worker's outbox. Run outside a transaction (the
/// workers see the schema once it is committed).
pub async fn prepare_nodes(client: &mut Client) -> anyhow::Result<()> {
    // (the pool's connections are read-only by default)
    let tx = client.build_transaction().read_only(false).start().await?;
    tx.batch_execute(
        "SET LOCAL client_min_messages = warning; CREATE SCHEMA IF NOT EXISTS rowgate",
    )
    .await?;
    tx.commit().await?;
    let tx = client.build_transaction().read_only(false).start().await?;
    let answers = tx
        .query(
            "SELECT nodename, nodeport, success, result FROM run_command_on_workers($1)",
            &[&outbox()],
        )
        .await?;
    for answer in answers {
        let (host, port, ok, result): (String, i32, bool, String) =
            (answer.get(0), answer.get(1), answer.get(2), answer.get(3));
        anyhow::ensure!(
            ok,
            "realtime on Citus: cannot create the change outbox on worker {host}:{port}: {result}"
        );
    }
    tx.commit().await?;
    Ok(())
}

/// The coordinator's record of what was gathered from each worker, and the settings the
/// triggers' creation needs (in the set-up transaction).
pub async fn prepare_coordinator(tx: &Transaction<'_>) -> Result<(), tokio_postgres::Error> {
    tx.batch_execute(
        "SET LOCAL citus.enable_unsafe_triggers = on;
         SET LOCAL citus.multi_shard_modify_mode = 'sequential';
         CREATE TABLE IF NOT EXISTS rowgate.gathered (
           node integer PRIMARY KEY,
           pending bigint[] NOT NULL DEFAULT '{}');",
    )
    .await
}

/// Whether `relation` (as SQL names it) is a reference table (a copy on every node).
pub async fn is_reference(
    tx: &Transaction<'_>,
    relation: &str,
) -> Result<bool, tokio_postgres::Error> {
    Ok(tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_dist_partition
                            WHERE logicalrelid = to_regclass($1)
                              AND partmethod = 'n' AND repmodel = 't')",
            &[&relation],
        )
        .await?
        .get(0))
}

/// Whether the coordinator holds copies of the reference tables (it is in the cluster's
/// metadata), without which their changes would not be captured.
pub async fn coordinator_holds_references(
    tx: &Transaction<'_>,
) -> Result<bool, tokio_postgres::Error> {
    Ok(tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_dist_node WHERE groupid = 0)",
            &[],
        )
        .await?
        .get(0))
}

/// Whether the node the trigger fires on is the coordinator (Citus's group 0).
pub const ON_COORDINATOR: &str = "(SELECT groupid = 0 FROM pg_dist_local_group)";

/// A worker as the coordinator lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    id: i32,
    host: String,
    port: u16,
}

/// A worker's outbox and the gatherer's connection to it.
struct Outbox {
    node: Node,
    client: Option<Client>,
    /// Its last round failed (said once, until it succeeds again).
    failing: bool,
}

/// Moves the workers' captured changes into the coordinator's log for as long as the process
/// lives: after each write this process commits and every `poll` (writes made elsewhere). Returns
/// at once when the database is not a Citus coordinator.
pub async fn gather_forever(db: &Postgres, url: &str, poll: Duration) {
    loop {
        match is_coordinator(db).await {
            Ok(true) => break,
            Ok(false) => return,
            Err(e) => {
                tracing::debug!(error = %e, "realtime on Citus: cannot tell the cluster yet");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }
    let mut outboxes: Vec<Outbox> = Vec::new();
    loop {
        tokio::select! {
            () = db.written.notified() => {}
            () = tokio::time::sleep(poll) => {}
        }
        match workers(db).await {
            Ok(nodes) => {
                outboxes.retain(|o| nodes.contains(&o.node));
                for node in nodes {
                    if !outboxes.iter().any(|o| o.node == node) {
                        outboxes.push(Outbox {
                            node,
                            client: None,
                            failing: false,
                        });
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = %e, "realtime on Citus: cannot list the workers");
                continue;
            }
        }
        for outbox in &mut outboxes {
            match outbox.gather(db, url).await {
                Ok(()) if outbox.failing => {
                    outbox.failing = false;
                    tracing::info!(
                        worker = %format!("{}:{}", outbox.node.host, outbox.node.port),
                        "realtime on Citus: gathering the worker's changes again"
                    );
                }
                Ok(()) => {}
                Err(e) => {
                    outbox.client = None;
                    if !outbox.failing {
                        outbox.failing = true;
                        tracing::warn!(
                            worker = %format!("{}:{}", outbox.node.host, outbox.node.port),
                            "realtime on Citus: the worker's changes wait: {e:#}"
                        );
                    }
                }
            }
        }
    }
}

async fn is_coordinator(db: &Postgres) -> anyhow::Result<bool> {
    let client = db.client().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(client
        .query_one(
            "SELECT to_regclass('pg_catalog.pg_dist_local_group') IS NOT NULL
                    AND (SELECT groupid = 0 FROM pg_dist_local_group)",
            &[],
        )
        .await?
        .get::<_, Option<bool>>(0)
        .unwrap_or(false))
}

/// The active primary workers.
async fn workers(db: &Postgres) -> anyhow::Result<Vec<Node>> {
    let client = db.client().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let rows = client
        .query(
            "SELECT nodeid, nodename, nodeport FROM pg_dist_node
             WHERE groupid > 0 AND noderole = 'primary' AND isactive ORDER BY nodeid",
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|r| Node {
            id: r.get(0),
            host: r.get(1),
            port: u16::try_from(r.get::<_, i32>(2)).unwrap_or(5432),
        })
        .collect())
}

impl Outbox {
    /// Moves the worker's settled changes to the log, a batch per coordinator transaction,
    /// unless another process is doing it now.
    async fn gather(&mut self, db: &Postgres, url: &str) -> anyhow::Result<()> {
        if self.client.is_none() {
            let mut config = postgres_connect::at_node(url, &self.node.host, self.node.port)?;
            config.connect_timeout(Duration::from_secs(2));
            let (client, connection) = postgres_connect::connect_with(&config).await?;
            tokio::spawn(connection);
            // (a worker added after the triggers were made has none yet)
            client
                .batch_execute(&format!("SET client_min_messages = warning; {}", outbox()))
                .await?;
            self.client = Some(client);
        }
        let Some(worker) = &self.client else {
            return Ok(());
        };
        let node = self.node.id;
        loop {
            let mut coordinator = db.client().await.map_err(|e| anyhow::anyhow!("{e}"))?;
            let tx = coordinator
                .build_transaction()
                .read_only(false)
                .start()
                .await?;
            let mine: bool = tx
                .query_one(
                    "SELECT pg_try_advisory_xact_lock($1, $2)",
                    &[&GATHER_LOCK, &node],
                )
                .await?
                .get(0);
            if !mine {
                return Ok(());
            }
            let pending: Vec<i64> = tx
                .query_opt(
                    "SELECT pending FROM rowgate.gathered WHERE node = $1",
                    &[&node],
                )
                .await?
                .map(|r| r.get(0))
                .unwrap_or_default();
            if !pending.is_empty() {
                // logged by an earlier round that could not delete them
                worker
                    .execute(
                        "DELETE FROM rowgate.changes WHERE id = ANY($1)",
                        &[&pending],
                    )
                    .await?;
            }
            let rows = worker
                .query(
                    "SELECT id, tbl, op, pk::text, new::text, old::text, at,
                            xid < pg_snapshot_xmin(pg_current_snapshot())
                     FROM rowgate.changes ORDER BY id LIMIT $1",
                    &[&BATCH],
                )
                .await?;
            let settled: Vec<&tokio_postgres::Row> =
                rows.iter().take_while(|r| r.get::<_, bool>(7)).collect();
            if settled.is_empty() {
                if !pending.is_empty() {
                    tx.execute(
                        "UPDATE rowgate.gathered SET pending = '{}' WHERE node = $1",
                        &[&node],
                    )
                    .await?;
                }
                tx.commit().await?;
                return Ok(());
            }
            let ids: Vec<i64> = settled.iter().map(|r| r.get(0)).collect();
            let tables: Vec<String> = settled.iter().map(|r| r.get(1)).collect();
            let ops: Vec<String> = settled.iter().map(|r| r.get(2)).collect();
            let keys: Vec<Option<String>> = settled.iter().map(|r| r.get(3)).collect();
            let news: Vec<Option<String>> = settled.iter().map(|r| r.get(4)).collect();
            let olds: Vec<Option<String>> = settled.iter().map(|r| r.get(5)).collect();
            let ats: Vec<i64> = settled.iter().map(|r| r.get(6)).collect();
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CAPTURE_LOCK])
                .await?;
            tx.execute(
                "INSERT INTO rowgate.changes (tbl, op, pk, new, old, at)
                 SELECT tbl, op, pk::jsonb, new::jsonb, old::jsonb, at
                 FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                             $6::int8[]) WITH ORDINALITY AS u(tbl, op, pk, new, old, at, n)
                 ORDER BY n",
                &[&tables, &ops, &keys, &news, &olds, &ats],
            )
            .await?;
            tx.execute(
                "INSERT INTO rowgate.gathered (node, pending) VALUES ($1, $2)
                 ON CONFLICT (node) DO UPDATE SET pending = excluded.pending",
                &[&node, &ids],
            )
            .await?;
            tx.execute("SELECT pg_notify($1, '')", &[&CHANNEL]).await?;
            tx.commit().await?;
            // (should this fail, the next round deletes them before it reads)
            worker
                .execute("DELETE FROM rowgate.changes WHERE id = ANY($1)", &[&ids])
                .await?;
            if settled.len() < rows.len() || rows.len() < BATCH as usize {
                return Ok(());
            }
        }
    }
}
