//! PostgreSQL's commit clock, what keeps the response cache fresh there: an epoch that moves on
//! whenever this process ends a write (before the write is answered) and whenever the
//! primary's WAL insert position has moved since it was last read (read every
//! `cache.postgres_poll_ms` by [`spawn_poller`]), and the last position read.
//!
//! The guarantee, as SQLite's where it can be: a node never answers from the cache with data
//! older than a write it has acknowledged (its own writes move the epoch synchronously), nor
//! older than the position a request's `Rowgate-Position` names (a request naming a position
//! past the one last read is not served from the cache); a commit made elsewhere (another node,
//! `psql`) ends the kept answers within one poll. While the primary does not answer the poll, the
//! epoch is unknown and nothing is served from the cache.
//!
//! Why the WAL position rather than a notification per commit: a `NOTIFY` from a trigger on
//! every table would make every writing transaction take PostgreSQL's notification lock at
//! commit (commits of all sessions one at a time), need triggers on tables Rowgate may not own,
//! and cannot run on a Citus worker (a prepared transaction cannot notify). One small query per
//! poll costs nothing of the kind. Any WAL activity (a checkpoint, autovacuum) moves the epoch
//! too: answers are dropped early, never kept late.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::replicas::{Lsn, Position};

/// The epoch and the WAL position it was last moved for.
#[derive(Debug, Default)]
pub struct CommitClock {
    epoch: AtomicU64,
    /// The primary's WAL insert position last read.
    seen: AtomicU64,
    /// The last poll was answered (the epoch is known).
    live: AtomicBool,
}

impl CommitClock {
    /// The epoch, when known and when the request's `Rowgate-Position`, if any, is not past the
    /// position last read.
    pub fn epoch(&self, required: Option<Position>) -> Option<u64> {
        if !self.live.load(Ordering::Acquire) {
            return None;
        }
        if required.is_some_and(|p| p.lsn > self.seen.load(Ordering::Acquire)) {
            return None;
        }
        Some(self.epoch.load(Ordering::Acquire))
    }

    /// This process ended a write (committed or not: either way, what was kept may be old).
    pub fn written(&self) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// A poll's answer: the primary's WAL insert position, or `None` when it did not answer.
    pub fn observed(&self, position: Option<Lsn>) {
        match position {
            Some(lsn) => {
                let before = self.seen.swap(lsn, Ordering::AcqRel);
                let was_live = self.live.swap(true, Ordering::AcqRel);
                if before != lsn || !was_live {
                    self.epoch.fetch_add(1, Ordering::AcqRel);
                }
            }
            None => self.live.store(false, Ordering::Release),
        }
    }
}

/// Reads the primary's WAL insert position through `pool` into `clock` every `every`, for as
/// long as the process lives (a standby, during a failover, answers no position: unknown).
pub fn spawn_poller(pool: deadpool_postgres::Pool, clock: Arc<CommitClock>, every: Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let position = match pool.get().await {
                Ok(client) => client
                    .query_one(
                        "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint",
                        &[],
                    )
                    .await
                    .ok()
                    .and_then(|row| Lsn::try_from(row.get::<_, i64>(0)).ok()),
                Err(_) => None,
            };
            clock.observed(position);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(lsn: Lsn) -> Option<Position> {
        Some(Position { timeline: 1, lsn })
    }

    #[test]
    fn unknown_until_a_poll_is_answered_and_again_when_one_is_not() {
        let clock = CommitClock::default();
        assert_eq!(clock.epoch(None), None);
        clock.observed(Some(100));
        let first = clock.epoch(None).expect("known");
        clock.observed(None);
        assert_eq!(clock.epoch(None), None);
        clock.observed(Some(100));
        // (what was kept before it went unknown is not served again)
        assert_ne!(clock.epoch(None), Some(first));
    }

    #[test]
    fn moves_on_with_the_wal_and_with_own_writes_only() {
        let clock = CommitClock::default();
        clock.observed(Some(100));
        let e = clock.epoch(None);
        clock.observed(Some(100));
        assert_eq!(clock.epoch(None), e, "the same position: the same epoch");
        clock.observed(Some(120));
        let moved = clock.epoch(None);
        assert_ne!(moved, e);
        clock.written();
        assert_ne!(clock.epoch(None), moved);
    }

    #[test]
    fn a_position_past_the_last_read_is_not_served_from_the_cache() {
        let clock = CommitClock::default();
        clock.observed(Some(100));
        assert!(clock.epoch(at(100)).is_some());
        assert!(clock.epoch(at(90)).is_some());
        assert_eq!(clock.epoch(at(101)), None);
    }
}
