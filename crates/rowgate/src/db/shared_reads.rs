//! Reads that share connections (`db.shared_reads`): a read that is one statement outside a
//! transaction runs on one of a few pooled connections kept for such reads, beside the other
//! reads on it, instead of taking a connection to itself. tokio-postgres pipelines the
//! statements of a shared connection: each is sent while the ones before it run, and
//! PostgreSQL's backend reads them in one go and answers them in order. A backend that finds
//! its next statement waiting does not sleep between statements, and neither side makes a
//! system call per statement for its reads: measured with pgbench on this machine, five
//! statements pipelined over two connections answered about three times the statements per
//! second of ten connections each waiting for its answer.
//!
//! What it costs: a statement waits for the ones ahead of it on its connection (head-of-line).
//! So each read goes to the connection with the fewest in flight; a connection on which no
//! statement has finished for [`STALLED`] while some are in flight (a slow one at the head)
//! takes no more; and past [`PIPELINE_DEPTH`] in flight, or with every shared connection
//! stalled, a read takes a connection of its own as before (where a wait for one shows in
//! `rowgate_db_reads_waiting`; a wait behind a pipelined statement does not). Reads in a
//! transaction (several statements, a role switched, a pooler in transaction mode) never
//! share. A shared connection that closed, or lived past `db.max_lifetime_s`, is replaced at
//! the next read; the one it replaces goes back to the pool when its last read ends.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use deadpool_postgres::{Object, Pool};

/// Reads in flight on every shared connection past which a read takes a connection of its
/// own: a slow statement holds up at most this many behind it.
pub const PIPELINE_DEPTH: usize = 16;

/// A shared connection on which no statement finished for this long while some are in flight
/// has a slow one at its head: reads go elsewhere until it moves.
pub const STALLED: Duration = Duration::from_millis(2);

/// Microseconds since the first call: a clock cheap to keep in an atomic.
fn now_us() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// The shared connections of one pool (the primary's or a replica's).
pub struct SharedReads {
    slots: Vec<Mutex<Option<Arc<Lent>>>>,
    /// A shared connection older than this is replaced (zero: kept while it works).
    max_lifetime: Duration,
}

/// One shared connection and the reads on it now.
struct Lent {
    client: Object,
    in_flight: AtomicUsize,
    /// When it last made progress ([`now_us`]): a read on it finished, or it took one while
    /// idle.
    moved_us: AtomicU64,
}

impl Lent {
    /// Whether a slow statement holds it up: some in flight, none finished for [`STALLED`].
    fn stalled(&self, load: usize) -> bool {
        load > 0
            && now_us().saturating_sub(self.moved_us.load(Ordering::Relaxed))
                > STALLED.as_micros() as u64
    }
}

/// A shared connection lent to one read: derefs to the connection; the read counts as in
/// flight on it until this is dropped.
pub struct Shared(Arc<Lent>);

impl std::ops::Deref for Shared {
    type Target = Object;

    fn deref(&self) -> &Object {
        &self.0.client
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.0.moved_us.store(now_us(), Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
    }
}

impl SharedReads {
    /// `connections` shared connections (none: every read takes a connection of its own).
    pub fn new(connections: usize, max_lifetime: Duration) -> SharedReads {
        SharedReads {
            slots: (0..connections).map(|_| Mutex::new(None)).collect(),
            max_lifetime,
        }
    }

    /// A shared connection of `pool` for one read: the live one with the fewest reads in
    /// flight that is not [stalled](STALLED), a slot filled from `pool` first when it is
    /// empty, closed or too old. `None` when there are no shared connections, every one is
    /// stalled or has [`PIPELINE_DEPTH`] in flight, or the pool has no connection to give at
    /// once (the read then waits for one of its own, as every read did without sharing).
    pub async fn lend(&self, pool: &Pool) -> Option<Shared> {
        if self.slots.is_empty() {
            return None;
        }
        let mut best: Option<(usize, Arc<Lent>)> = None;
        let mut empty = None;
        for (n, slot) in self.slots.iter().enumerate() {
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            if slot.as_ref().is_some_and(|lent| !self.usable(lent)) {
                *slot = None;
            }
            match slot.as_ref() {
                None => empty = empty.or(Some(n)),
                Some(lent) => {
                    let load = lent.in_flight.load(Ordering::Relaxed);
                    if lent.stalled(load) {
                        continue;
                    }
                    if best.as_ref().is_none_or(|(fewest, _)| load < *fewest) {
                        best = Some((load, lent.clone()));
                    }
                }
            }
        }
        let lent = match (best, empty) {
            (Some((0, lent)), _) => lent,
            (_, Some(n)) => self.fill(n, pool).await?,
            (Some((load, lent)), None) if load < PIPELINE_DEPTH => lent,
            (Some(_), None) | (None, None) => return None,
        };
        if lent.in_flight.fetch_add(1, Ordering::Relaxed) == 0 {
            lent.moved_us.store(now_us(), Ordering::Relaxed);
        }
        Some(Shared(lent))
    }

    /// Whether `lent` may take more reads: open, and not past its lifetime.
    fn usable(&self, lent: &Lent) -> bool {
        !lent.client.is_closed()
            && (self.max_lifetime.is_zero()
                || Object::metrics(&lent.client).age() < self.max_lifetime)
    }

    /// Fills slot `n` with a connection of `pool` taken now (`None` when none is free at
    /// once); if another read filled it meanwhile, that one is used and this one returned.
    async fn fill(&self, n: usize, pool: &Pool) -> Option<Arc<Lent>> {
        let timeouts = deadpool_postgres::Timeouts {
            wait: Some(Duration::ZERO),
            ..pool.timeouts()
        };
        let client = pool.timeout_get(&timeouts).await.ok()?;
        let mut slot = self.slots[n].lock().unwrap_or_else(|e| e.into_inner());
        Some(
            slot.get_or_insert_with(|| {
                Arc::new(Lent {
                    client,
                    in_flight: AtomicUsize::new(0),
                    moved_us: AtomicU64::new(now_us()),
                })
            })
            .clone(),
        )
    }
}
