//! The bus between every process serving one PostgreSQL database (the workers of a node, and
//! every node): Supabase channels' broadcasts and presences ([`super::channels::Relay`]) travel
//! through a table of the database, `rowgate.relays`, which each process tails as it tails the
//! change log. No other server to run, and nothing lost to a failover: a relay is a committed
//! row, replicated as the data is.
//!
//! - **Out**: a process's relays are queued and written in batches, one transaction each that
//!   takes the relays' advisory lock (so ids follow commit order, and a reader going by
//!   `id > last` skips none), inserts them and `NOTIFY`s [`CHANNEL`]. A batch that cannot be
//!   written (the primary gone) is kept, up to [`QUEUE`] relays, and written again in order
//!   once a primary takes writes.
//! - **In**: each process reads the rows after the last it read, woken by the `NOTIFY` and
//!   every poll, and hands the others' to its channels.
//! - **Who is there**: every [`ALIVE_EVERY`] a process writes `alive`; one not heard of for
//!   [`GONE_AFTER_MS`] of the bus's time is gone, and its presences leave. The bus's time is
//!   the database's clock on the rows, so a failover, which stops every process's rows alike,
//!   ends no one's presence. A process that starts says `hello`, and the others relay their
//!   presences again; so does one that hears again from a process it took for gone.
//! - Rows older than [`KEEP_S`] are deleted, every [`PRUNE_EVERY`], by whichever process
//!   gets there.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rowgate_query::stmt::Sql;
use rowgate_query::Value;
use serde::Deserialize;
use tokio::sync::Notify;

use crate::db::Database;
use crate::job::{Access, Job, Step};
use crate::worker::Relayed;

/// The `NOTIFY` channel that wakes the readers.
pub const CHANNEL: &str = "rowgate_relays";
/// The advisory lock that orders the writers (the change log's is another).
const LOCK: i64 = 0x726f_7767_6174_6552;
/// Relays waiting to be written, at most (past it the oldest are dropped, with a warning).
pub const QUEUE: usize = 10_000;
/// Relays written in one transaction, at most.
const BATCH: usize = 500;
/// How often a process says it is alive.
pub const ALIVE_EVERY: Duration = Duration::from_secs(2);
/// A process not heard of for this long (of the bus's time) is gone.
pub const GONE_AFTER_MS: i64 = 6_000;
/// How long a process taken for gone is remembered (to ask it for its presences should it
/// speak again).
const FORGET_MS: i64 = 600_000;
/// How long relays are kept.
pub const KEEP_S: u64 = 60;
/// How often old relays are deleted.
const PRUNE_EVERY: Duration = Duration::from_secs(15);
/// How often the table is read when no `NOTIFY` comes.
const POLL: Duration = Duration::from_millis(500);

const ALIVE: &str = "alive";
const HELLO: &str = "hello";

const TABLE: &[&str] = &[
    "CREATE SCHEMA IF NOT EXISTS rowgate",
    "CREATE TABLE IF NOT EXISTS rowgate.relays (
       id bigserial PRIMARY KEY,
       origin bigint NOT NULL,
       body text NOT NULL,
       at timestamptz NOT NULL DEFAULT clock_timestamp()
     )",
];

/// This process's side of the bus.
struct Bus {
    db: Arc<Database>,
    /// This process on the bus (random: it says nothing of the machine).
    origin: u32,
    /// Relays waiting to be written.
    queue: Mutex<VecDeque<String>>,
    /// Woken when a relay is queued.
    queued: Notify,
    /// Woken by the `NOTIFY`.
    written: Arc<Notify>,
    /// Set once the table is there.
    ready: tokio::sync::watch::Sender<bool>,
}

/// Starts the bus of this process on `db` (PostgreSQL) for `channels`, whose relays then go
/// out through it; `location` is the database's URL, for the `LISTEN`.
pub fn spawn(db: &Arc<Database>, location: &str, channels: Arc<dyn Relayed>) {
    let mut origin = [0u8; 4];
    let _ = getrandom::fill(&mut origin);
    let bus = Arc::new(Bus {
        db: db.clone(),
        origin: u32::from_le_bytes(origin),
        queue: Mutex::new(VecDeque::new()),
        queued: Notify::new(),
        written: Arc::new(Notify::new()),
        ready: tokio::sync::watch::channel(false).0,
    });
    let out = bus.clone();
    channels.connect_outlet(Box::new(move |relay| out.push(relay)));
    bus.push(HELLO.to_string());
    crate::db::postgres::spawn_listener(location, CHANNEL, bus.written.clone());
    tokio::spawn(bus.clone().write_loop());
    tokio::spawn(bus.read_loop(channels));
}

impl Bus {
    /// Queues `relay` (a relay's JSON, or a word of the bus) to be written.
    fn push(&self, relay: String) {
        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        if queue.len() >= QUEUE {
            queue.pop_front();
            tracing::warn!(
                "realtime bus: {QUEUE} relays wait to be written; the oldest is dropped"
            );
        }
        queue.push_back(relay);
        drop(queue);
        self.queued.notify_one();
    }

    /// Makes the table when it is missing (under the writers' lock: processes starting
    /// together would race) and reads the last relay's id: this process hears what comes
    /// after. Again until it works.
    async fn ensure(&self) -> i64 {
        loop {
            let mut steps = vec![Step::Execute(Sql {
                text: format!("SELECT pg_advisory_xact_lock({LOCK})"),
                params: vec![],
            })];
            steps.extend(TABLE.iter().map(|text| {
                Step::Execute(Sql {
                    text: text.to_string(),
                    params: vec![],
                })
            }));
            steps.push(Step::Value(Sql {
                text: "SELECT coalesce(max(id), 0) FROM rowgate.relays".into(),
                params: vec![],
            }));
            match self.db.run(Job::new(Access::Write, steps)).await {
                Ok(out) => {
                    self.ready.send_replace(true);
                    let text = out
                        .value
                        .and_then(|v| String::from_utf8(v).ok())
                        .unwrap_or_default();
                    return text.trim_matches('"').parse().unwrap_or(0);
                }
                Err(e) => {
                    tracing::warn!("realtime bus: cannot make rowgate.relays: {}", e.message);
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Writes the queue as it fills, `alive` every [`ALIVE_EVERY`], and deletes old rows.
    async fn write_loop(self: Arc<Self>) {
        let _ = self.ready.subscribe().wait_for(|ready| *ready).await;
        let mut alive = tokio::time::interval(ALIVE_EVERY);
        alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut pruned = Instant::now();
        loop {
            tokio::select! {
                () = self.queued.notified() => {}
                _ = alive.tick() => self.push(ALIVE.to_string()),
            }
            loop {
                let batch: Vec<String> = {
                    let queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                    queue.iter().take(BATCH).cloned().collect()
                };
                if batch.is_empty() {
                    break;
                }
                match self.write(&batch).await {
                    Ok(()) => {
                        let mut queue = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                        let n = batch.len().min(queue.len());
                        queue.drain(..n);
                    }
                    Err(e) => {
                        // kept, in order, until a primary takes them
                        tracing::debug!("realtime bus: relays not written yet: {e}");
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                }
            }
            if pruned.elapsed() >= PRUNE_EVERY {
                pruned = Instant::now();
                let prune = Sql {
                    text: format!(
                        "DELETE FROM rowgate.relays WHERE at < clock_timestamp() - interval '{KEEP_S} seconds'"
                    ),
                    params: vec![],
                };
                if let Err(e) = self
                    .db
                    .run(Job::new(Access::Write, vec![Step::Execute(prune)]))
                    .await
                {
                    tracing::debug!("realtime bus: old relays not deleted: {}", e.message);
                }
            }
        }
    }

    /// Writes `batch` in one transaction, in order after every relay committed before.
    async fn write(&self, batch: &[String]) -> Result<(), String> {
        let body = serde_json::to_string(batch).map_err(|e| e.to_string())?;
        let steps = vec![
            Step::Execute(Sql {
                text: format!("SELECT pg_advisory_xact_lock({LOCK})"),
                params: vec![],
            }),
            Step::Execute(Sql {
                text: "INSERT INTO rowgate.relays (origin, body) \
                       SELECT $1::bigint, value FROM json_array_elements_text($2::json)"
                    .into(),
                params: vec![Value::Int(i64::from(self.origin)), Value::Text(body)],
            }),
            Step::Execute(Sql {
                text: format!("SELECT pg_notify('{CHANNEL}', '')"),
                params: vec![],
            }),
        ];
        self.db
            .run(Job::new(Access::Write, steps))
            .await
            .map(|_| ())
            .map_err(|e| e.message)
    }

    /// Reads the others' relays into `channels` as they are written.
    async fn read_loop(self: Arc<Self>, channels: Arc<dyn Relayed>) {
        let mut last = self.ensure().await;
        let mut heard: HashMap<u32, i64> = HashMap::new();
        // those taken for gone, and when: one heard again (it was only slow) is asked for its
        // presences; forgotten after FORGET_MS (the ended processes of a long life add up)
        let mut silent: HashMap<u32, i64> = HashMap::new();
        let mut now_ms = 0i64;
        loop {
            tokio::select! {
                () = self.written.notified() => {}
                () = tokio::time::sleep(POLL) => {}
            }
            loop {
                let rows = match self.fetch(last).await {
                    Ok(rows) => rows,
                    Err(e) => {
                        tracing::debug!("realtime bus: reading failed: {e}");
                        break;
                    }
                };
                let more = rows.len() == BATCH;
                for row in rows {
                    last = last.max(row.id);
                    if now_ms > 0 && row.at_ms - now_ms > GONE_AFTER_MS / 2 {
                        // nothing was written for a while, by anyone: the bus was down (a
                        // failover). Everyone's silence starts over; the living are heard again
                        // within a beat.
                        for at in heard.values_mut() {
                            *at = row.at_ms;
                        }
                    }
                    now_ms = now_ms.max(row.at_ms);
                    let Ok(origin) = u32::try_from(row.origin) else {
                        continue;
                    };
                    if origin == self.origin {
                        continue;
                    }
                    heard.insert(origin, row.at_ms);
                    if silent.remove(&origin).is_some() {
                        tracing::info!(
                            origin,
                            "realtime bus: a process taken for gone speaks again"
                        );
                        self.push(HELLO.to_string());
                    }
                    match row.body.as_str() {
                        ALIVE => {}
                        HELLO => channels.announce(),
                        relay => {
                            if !channels.receive_text(origin, relay) {
                                tracing::debug!(relay, "realtime bus: a relay not understood");
                            }
                        }
                    }
                }
                if !more {
                    break;
                }
            }
            heard.retain(|origin, at| {
                let alive = now_ms - *at <= GONE_AFTER_MS;
                if !alive {
                    tracing::info!(
                        origin,
                        "realtime bus: a process went silent; its presences leave"
                    );
                    channels.gone(*origin);
                    silent.insert(*origin, now_ms);
                }
                alive
            });
            silent.retain(|_, at| now_ms - *at <= FORGET_MS);
        }
    }

    /// The relays after `last`, in order.
    async fn fetch(&self, last: i64) -> Result<Vec<Row>, String> {
        let sql = Sql {
            text: format!(
                "SELECT id, origin, body, (extract(epoch FROM at) * 1000)::bigint AS at_ms \
                 FROM rowgate.relays WHERE id > $1::bigint ORDER BY id LIMIT {BATCH}"
            ),
            params: vec![Value::Int(last)],
        };
        let out = self
            .db
            .run(Job::new(Access::Read, vec![Step::Rows { sql, shape: None }]).on_primary())
            .await
            .map_err(|e| e.message)?;
        serde_json::from_slice(&out.rows).map_err(|e| e.to_string())
    }
}

/// One relay as read.
#[derive(Deserialize)]
struct Row {
    id: i64,
    origin: i64,
    body: String,
    at_ms: i64,
}
