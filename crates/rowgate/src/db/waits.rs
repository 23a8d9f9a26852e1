//! Reads waiting for a connection: on SQLite for a reader thread (a read past the inline
//! budget queues behind the reads the threads are running), on PostgreSQL for a pooled
//! connection. How many wait now, and how long each waited, are shown at `/metrics`
//! (`rowgate_db_reads_waiting`, `rowgate_db_read_wait_seconds`): long reads queued behind
//! the readers otherwise show only as slow answers.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::histogram::Histogram;

/// The reads waiting now, and the waits so far.
#[derive(Default)]
pub struct ReadWaits {
    waiting: AtomicU64,
    waited: Histogram,
}

impl ReadWaits {
    /// A read starts waiting: it waits until the [`Waiting`] is dropped (when a connection
    /// takes it, or it is given up).
    pub fn wait(self: &Arc<Self>) -> Waiting {
        self.waiting.fetch_add(1, Ordering::Relaxed);
        Waiting {
            waits: self.clone(),
            since: Instant::now(),
        }
    }

    /// Reads waiting now.
    pub fn waiting(&self) -> u64 {
        self.waiting.load(Ordering::Relaxed)
    }

    /// How long the reads waited.
    pub fn waited(&self) -> &Histogram {
        &self.waited
    }
}

/// One read waiting for a connection.
pub struct Waiting {
    waits: Arc<ReadWaits>,
    since: Instant,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.waits.waiting.fetch_sub(1, Ordering::Relaxed);
        self.waits.waited.record(self.since.elapsed());
    }
}
