//! Read replicas (`db.replicas`): PostgreSQL standbys that take the reads. Each has its own
//! pool; a check every `db.replica_check_ms` asks the primary for its WAL position and each
//! replica for the position it has replayed, and keeps a replica in the rotation while it
//! answers and is no more than `db.replica_max_lag_ms` behind: its lag is the age of the oldest
//! primary position (of the recent checks) it has not replayed yet. Reads go to the healthy
//! replicas in turn; a replica that fails a read (connection lost, a conflict with recovery)
//! leaves the rotation until its next good check, and the read runs on the primary.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use deadpool_postgres::Pool;

/// A PostgreSQL WAL position as one number (`hi/lo` in hex: hi × 2³² + lo).
pub type Lsn = u64;

/// The header a write answers with (the position it committed at), and a read sends back to
/// see it.
pub const POSITION_HEADER: &str = "rowgate-position";

/// `16/B374D848` → its number (`None` when it is not an LSN).
pub fn parse_lsn(text: &str) -> Option<Lsn> {
    let (hi, lo) = text.trim().split_once('/')?;
    let hex = |part: &str| {
        ((1..=8).contains(&part.len()) && part.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u32::from_str_radix(part, 16).ok())
            .flatten()
    };
    Some((u64::from(hex(hi)?) << 32) | u64::from(hex(lo)?))
}

/// An LSN as PostgreSQL writes it (`16/B374D848`).
pub fn format_lsn(lsn: Lsn) -> String {
    format!("{:X}/{:X}", lsn >> 32, lsn & 0xFFFF_FFFF)
}

/// Where a write committed: the primary's timeline then and its WAL position. A failover
/// starts a new timeline, so a position tells which history it belongs to: a standby that
/// follows another timeline may have replayed past the same LSN without the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    /// The timeline (0: not told, as in a header of an older Rowgate).
    pub timeline: u32,
    /// The WAL position.
    pub lsn: Lsn,
}

impl Position {
    /// `2:16/B374D848` (timeline, then the LSN), or an LSN alone (`16/B374D848`, no
    /// timeline); `None` when it is neither.
    pub fn parse(text: &str) -> Option<Position> {
        let (timeline, lsn) = match text.trim().split_once(':') {
            Some((timeline, lsn)) => {
                let timeline = (!timeline.is_empty()
                    && timeline.len() <= 10
                    && timeline.bytes().all(|b| b.is_ascii_digit()))
                .then(|| timeline.parse::<u32>().ok())
                .flatten()
                .filter(|t| *t > 0)?;
                (timeline, lsn)
            }
            None => (0, text),
        };
        Some(Position {
            timeline,
            lsn: parse_lsn(lsn)?,
        })
    }
}

impl std::fmt::Display for Position {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.timeline > 0 {
            write!(f, "{}:", self.timeline)?;
        }
        f.write_str(&format_lsn(self.lsn))
    }
}

/// What a server says of its replay: whether it is a standby, the position it has replayed,
/// and the timeline it follows (0: unknown, a standby not streaming).
#[derive(Debug, Clone, Copy)]
pub struct ReplayState {
    /// A standby (in recovery).
    pub standby: bool,
    /// The position replayed (a primary: its insert position).
    pub replayed: Lsn,
    /// Its timeline.
    pub timeline: u32,
}

impl ReplayState {
    /// Whether a read there sees the write at `position`: a primary sees every committed
    /// write; a standby one of its own timeline that it has replayed. A position of another
    /// timeline (a failover happened between the write and the read) is never taken as
    /// replayed by a standby: its history may have forked before the write.
    pub fn covers(&self, position: Position) -> bool {
        if !self.standby {
            return true;
        }
        let same_history = position.timeline == 0 || position.timeline == self.timeline;
        same_history && self.replayed >= position.lsn
    }
}

/// The SQL that reads a server's [`ReplayState`]: in recovery, replayed position, timeline
/// (a standby's from its WAL receiver, a primary's from its current WAL file's name).
const REPLAY_STATE_SQL: &str = "SELECT pg_is_in_recovery(), \
     (coalesce(pg_last_wal_replay_lsn(), '0/0') - '0/0'::pg_lsn)::bigint, \
     coalesce(CASE WHEN pg_is_in_recovery() \
       THEN (SELECT received_tli FROM pg_stat_wal_receiver) \
       ELSE ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int \
     END, 0)";

/// The SQL a write's transaction reads after COMMIT: the primary's insert position (past the
/// commit record) and its timeline.
pub const COMMITTED_AT_SQL: &str = "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint, \
     ('x' || substr(pg_walfile_name(pg_current_wal_insert_lsn()), 1, 8))::bit(32)::int";

/// A [`ReplayState`] from a row of [`REPLAY_STATE_SQL`].
fn replay_state_of(row: &tokio_postgres::Row) -> ReplayState {
    let replayed: i64 = row.get(1);
    let timeline: i32 = row.get(2);
    ReplayState {
        standby: row.get(0),
        replayed: Lsn::try_from(replayed).unwrap_or(0),
        timeline: u32::try_from(timeline).unwrap_or(0),
    }
}

/// Where a PostgreSQL URL points (host, port and database; never a password), for the log and
/// `/metrics`.
pub fn display_name(url: &str) -> String {
    let Ok(config) = url.parse::<tokio_postgres::Config>() else {
        return "(a replica)".into();
    };
    format!(
        "{}/{}",
        super::postgres_connect::address(&config),
        config.get_dbname().unwrap_or("")
    )
}

/// How long one check waits for a replica.
const CHECK_TIMEOUT: Duration = Duration::from_secs(2);

/// One replica.
pub struct Replica {
    /// Where it is (host, port and database; no password), for the log and `/metrics`.
    pub name: String,
    /// Its connections.
    pub(crate) pool: Pool,
    /// The connections of `pool` its one-statement reads share ([`super::shared_reads`]).
    pub(crate) shared: super::shared_reads::SharedReads,
    /// In the rotation.
    healthy: AtomicBool,
    /// The position it had replayed at the last check.
    replayed: AtomicU64,
    /// How far behind the primary it was at the last check, in milliseconds.
    lag_ms: AtomicU64,
    /// The timeline it followed at the last check (0: unknown).
    timeline: AtomicU32,
    /// Whether it was a standby at the last check.
    standby: AtomicBool,
}

impl Replica {
    /// A replica at `name` served by `pool` (and `shared` of its connections), out of the
    /// rotation until its first check.
    pub fn new(name: String, pool: Pool, shared: super::shared_reads::SharedReads) -> Replica {
        Replica {
            name,
            pool,
            shared,
            healthy: AtomicBool::new(false),
            replayed: AtomicU64::new(0),
            lag_ms: AtomicU64::new(0),
            timeline: AtomicU32::new(0),
            standby: AtomicBool::new(true),
        }
    }

    /// Whether it is in the rotation.
    pub fn healthy(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
    }

    /// Its lag at the last check.
    pub fn lag(&self) -> Duration {
        Duration::from_millis(self.lag_ms.load(Ordering::Relaxed))
    }

    /// Whether, at its last check, it had replayed the write at `position`
    /// ([`ReplayState::covers`]).
    pub fn replayed(&self, position: Position) -> bool {
        self.last_state().covers(position)
    }

    /// Whether, at its last check, it followed the history of `position` (its timeline, or
    /// none told), so that its replay position alone tells whether it has the write.
    pub fn follows(&self, position: Position) -> bool {
        let state = self.last_state();
        !state.standby || position.timeline == 0 || position.timeline == state.timeline
    }

    fn last_state(&self) -> ReplayState {
        ReplayState {
            standby: self.standby.load(Ordering::Relaxed),
            replayed: self.replayed.load(Ordering::Relaxed),
            timeline: self.timeline.load(Ordering::Relaxed),
        }
    }

    /// A read failed on it: out of the rotation until its next good check.
    pub fn failed(&self) {
        if self.healthy.swap(false, Ordering::Relaxed) {
            tracing::warn!(replica = %self.name, "replica failed a read: reads go elsewhere");
        }
    }

    fn set_health(&self, healthy: bool, why: &str) {
        if self.healthy.swap(healthy, Ordering::Relaxed) != healthy {
            if healthy {
                tracing::info!(replica = %self.name, "replica back in the rotation");
            } else {
                tracing::warn!(replica = %self.name, why, "replica out of the rotation");
            }
        }
    }
}

/// The replicas of one database.
pub struct Replicas {
    list: Vec<Replica>,
    next: AtomicUsize,
    max_lag: Duration,
    /// The primary's position at recent checks, oldest first.
    history: Mutex<VecDeque<(Instant, Lsn)>>,
}

impl Replicas {
    /// `list`, kept in the rotation while no more than `max_lag` behind.
    pub fn new(list: Vec<Replica>, max_lag: Duration) -> Replicas {
        Replicas {
            list,
            next: AtomicUsize::new(0),
            max_lag,
            history: Mutex::new(VecDeque::new()),
        }
    }

    /// No replica is configured.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Every replica.
    pub fn list(&self) -> &[Replica] {
        &self.list
    }

    /// The next replica in the rotation, if any is healthy.
    pub fn pick(&self) -> Option<&Replica> {
        let n = self.list.len();
        if n == 0 {
            return None;
        }
        let start = self.next.fetch_add(1, Ordering::Relaxed);
        (0..n)
            .map(|i| &self.list[(start + i) % n])
            .find(|r| r.healthy())
    }

    /// One check, against the primary's position `primary` read just now (`None`: the
    /// primary did not answer; the lags are told from the positions known).
    pub async fn check(&self, primary: Option<Lsn>) {
        let now = Instant::now();
        let history: Vec<(Instant, Lsn)> = {
            let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
            history.extend(primary.map(|at| (now, at)));
            // enough to tell any lag up to the bound (and one sample beyond it)
            while history.len() > 2
                && history
                    .get(1)
                    .is_some_and(|(t, _)| now.duration_since(*t) > self.max_lag)
            {
                history.pop_front();
            }
            history.iter().copied().collect()
        };
        for replica in &self.list {
            let state = tokio::time::timeout(CHECK_TIMEOUT, replay_state(&replica.pool)).await;
            let Ok(Ok(state)) = state else {
                replica.set_health(false, "it does not answer");
                continue;
            };
            // a server that is not a standby (a primary listed as a replica) is always current
            let replayed = if state.standby {
                state.replayed
            } else {
                Lsn::MAX
            };
            replica.replayed.store(replayed, Ordering::Relaxed);
            replica.timeline.store(state.timeline, Ordering::Relaxed);
            replica.standby.store(state.standby, Ordering::Relaxed);
            let lag = lag_of(replayed, &history, now);
            replica.lag_ms.store(
                u64::try_from(lag.as_millis()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            replica.set_health(lag <= self.max_lag, "it lags behind the primary");
        }
    }
}

/// What the server of `pool` says of its replay now.
async fn replay_state(pool: &Pool) -> Result<ReplayState, String> {
    let client = pool.get().await.map_err(|e| e.to_string())?;
    let row = client
        .query_one(REPLAY_STATE_SQL, &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok(replay_state_of(&row))
}

/// How far behind a replica that replayed `replayed` is: the age of the oldest primary
/// position in `history` (oldest first) beyond it, or zero when it has replayed them all.
fn lag_of(replayed: Lsn, history: &[(Instant, Lsn)], now: Instant) -> Duration {
    history
        .iter()
        .find(|(_, position)| *position > replayed)
        .map_or(Duration::ZERO, |(at, _)| now.duration_since(*at))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_read_and_print_as_postgresql_does() {
        assert_eq!(parse_lsn("0/16B3748"), Some(0x16B_3748));
        assert_eq!(parse_lsn("16/B374D848"), Some((0x16 << 32) | 0xB374_D848));
        assert_eq!(format_lsn(0x16B_3748), "0/16B3748");
        assert_eq!(format_lsn((0x16 << 32) | 0xB374_D848), "16/B374D848");
        for bad in [
            "",
            "0",
            "/1",
            "1/",
            "x/1",
            "1/123456789",
            "0/-1",
            "1/2/3",
            "+1/2",
        ] {
            assert_eq!(parse_lsn(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn positions_tell_their_timeline() {
        let p = Position::parse("2:16/B374D848").expect("position");
        assert_eq!((p.timeline, p.lsn), (2, (0x16 << 32) | 0xB374_D848));
        assert_eq!(p.to_string(), "2:16/B374D848");
        let old = Position::parse("0/16B3748").expect("an LSN alone");
        assert_eq!((old.timeline, old.to_string().as_str()), (0, "0/16B3748"));
        for bad in [
            "0:0/1",
            ":0/1",
            "x:0/1",
            "1:",
            "1:x/1",
            "99999999999:0/1",
            "-1:0/1",
        ] {
            assert_eq!(Position::parse(bad), None, "{bad:?}");
        }
        // a later timeline is later, whatever the LSN
        assert!(Position::parse("3:0/1") > Position::parse("2:FF/0"));
    }

    #[test]
    fn a_standby_covers_only_writes_of_its_own_timeline() {
        let standby = ReplayState {
            standby: true,
            replayed: 1000,
            timeline: 2,
        };
        let at = |timeline, lsn| Position { timeline, lsn };
        assert!(standby.covers(at(2, 1000)));
        assert!(!standby.covers(at(2, 1001)), "not replayed yet");
        assert!(
            !standby.covers(at(1, 10)),
            "an older timeline: its history may differ"
        );
        assert!(!standby.covers(at(3, 10)), "a newer timeline");
        assert!(
            standby.covers(at(0, 10)),
            "a position without its timeline: the LSN decides"
        );
        let primary = ReplayState {
            standby: false,
            replayed: 0,
            timeline: 3,
        };
        assert!(
            primary.covers(at(1, u64::MAX)),
            "the primary has every committed write"
        );
    }

    #[test]
    fn names_leave_the_password_out() {
        assert_eq!(
            display_name("postgres://app:s3cret@db.example:5433/shop"),
            "db.example:5433/shop"
        );
        assert_eq!(
            display_name("host=replica1 dbname=shop password=x"),
            "replica1:5432/shop"
        );
        assert_eq!(display_name("not a url"), "(a replica)");
    }

    #[test]
    fn lag_is_the_age_of_the_oldest_position_not_replayed() {
        let now = Instant::now();
        let history = [
            (now - Duration::from_secs(3), 100),
            (now - Duration::from_secs(2), 200),
            (now - Duration::from_secs(1), 300),
            (now, 400),
        ];
        assert_eq!(lag_of(400, &history, now), Duration::ZERO);
        assert_eq!(lag_of(500, &history, now), Duration::ZERO);
        assert_eq!(lag_of(350, &history, now), Duration::ZERO);
        assert_eq!(lag_of(300, &history, now), Duration::ZERO);
        assert_eq!(lag_of(250, &history, now), Duration::from_secs(1));
        assert_eq!(lag_of(99, &history, now), Duration::from_secs(3));
    }
}
