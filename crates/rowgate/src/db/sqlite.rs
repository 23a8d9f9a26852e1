//! The SQLite backend. Reader threads each own a read-only connection and take jobs (closures)
//! from one shared queue; one writer thread owns the only write connection and groups the write
//! jobs waiting in its queue into one transaction (group commit), each job in its own savepoint,
//! answering every job only after the COMMIT has returned (WAL, `synchronous=FULL`: durable).
//! A progress handler enforces the statement timeout; SQLite errors become [`DbError`]s here,
//! so `SQLITE_BUSY` and friends never reach a client as a 500.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rusqlite::{functions::FunctionFlags, Connection, OpenFlags};
use tokio::sync::oneshot;

use super::kept_counts::KeptCounts;
use super::sqlite_error::REGEX_ERROR_PREFIX;
use super::sqlite_job::run_job;
use super::waits::ReadWaits;
use crate::error::database::DbError;
use crate::job::{Access, Job, Output};
use crate::schema::SchemaCache;

type ReadJob = Box<dyn FnOnce(&Connection) + Send>;
/// A write job: runs inside the group transaction and returns whether it succeeded (its
/// savepoint is kept) and the callback that delivers its answer once the COMMIT is known.
/// `None` means the transaction could not start: the job does not run and is answered with the
/// error given to its completion.
type WriteJob = Box<dyn FnOnce(Option<&Connection>) -> (bool, Completion) + Send>;
type Completion = Box<dyn FnOnce(Result<(), DbError>) + Send>;

/// Most write jobs committed in one transaction.
const MAX_GROUP: usize = 128;

/// SQLite calls the progress handler every this many virtual-machine instructions.
const PROGRESS_PERIOD: i32 = 10_000;

/// Progress callbacks an inline read may take (about 500k VM instructions, a millisecond or
/// two) before it gives up and is re-run on the reader pool.
const INLINE_BUDGET: i64 = 50;

thread_local! {
    /// Read-only connections of the calling thread, one per open database (by id), for inline
    /// reads.
    static INLINE: RefCell<Vec<(u64, Conn)>> = const { RefCell::new(Vec::new()) };
}

/// The SQLite database: reader threads, the writer thread, the schema cache.
pub struct Sqlite {
    id: u64,
    path: PathBuf,
    opts: DbOptions,
    readers: crossbeam_channel::Sender<ReadJob>,
    writer: crossbeam_channel::Sender<WriteJob>,
    schema: ArcSwap<SchemaCache>,
    /// Notified after every COMMIT of the writer (realtime tails the change log on it).
    commits: Arc<tokio::sync::Notify>,
    /// Exact counts kept up to date from the change log.
    counts: Arc<KeptCounts>,
    /// Moves on whenever one of this process's connections sees that the database changed
    /// ([`Sqlite::commit_epoch`]).
    epoch: AtomicU64,
    /// Reads waiting for a reader thread.
    waits: Arc<ReadWaits>,
}

/// Settings for [`Database::open`].
#[derive(Debug, Clone)]
pub struct DbOptions {
    /// Reader threads.
    pub readers: usize,
    /// Statement timeout (zero = none).
    pub statement_timeout: Duration,
    /// Busy timeout for locks held by other processes.
    pub busy_timeout: Duration,
    /// Run short reads on the calling thread (falling back to the reader pool for long ones).
    pub inline_reads: bool,
    /// Longest string or blob a statement may build (`SQLITE_LIMIT_LENGTH`).
    pub max_value_bytes: u64,
}

/// Milliseconds since the process-wide clock start; the progress handler compares with it.
fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    let start = *START.get_or_init(Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// A connection plus what its progress handler checks: the statement deadline, and an
/// instruction budget (unlimited except during inline reads).
struct Conn {
    conn: Connection,
    deadline: Arc<AtomicU64>,
    budget: Arc<AtomicI64>,
    timeout: Duration,
    /// `PRAGMA data_version` when [`Sqlite::commit_epoch`] last read it on this connection.
    seen_version: Cell<Option<i64>>,
}

impl Conn {
    fn open(path: &Path, flags: OpenFlags, opts: &DbOptions) -> rusqlite::Result<Conn> {
        let conn = Connection::open_with_flags(path, flags)?;
        conn.busy_timeout(opts.busy_timeout)?;
        conn.set_prepared_statement_cache_capacity(256);
        conn.execute_batch("PRAGMA case_sensitive_like = ON; PRAGMA foreign_keys = ON;")?;
        // An unknown double-quoted identifier must be an error, never a string literal: with a
        // stale schema cache, `"code"` after a rename would otherwise read as the text 'code'.
        conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_DQS_DML, false)?;
        // One step that builds a huge value (`s || s` doubling) sees no progress callback while
        // it copies: the length limit fails it at once instead, whatever the statement timeout.
        let max_length = i32::try_from(opts.max_value_bytes)
            .unwrap_or(i32::MAX)
            .max(1);
        conn.set_limit(rusqlite::limits::Limit::SQLITE_LIMIT_LENGTH, max_length)?;
        register_regexp(&conn)?;
        let deadline = Arc::new(AtomicU64::new(u64::MAX));
        let budget = Arc::new(AtomicI64::new(i64::MAX));
        let (d, b) = (deadline.clone(), budget.clone());
        conn.progress_handler(
            PROGRESS_PERIOD,
            Some(move || {
                b.fetch_sub(1, Ordering::Relaxed) <= 0 || now_ms() > d.load(Ordering::Relaxed)
            }),
        );
        Ok(Conn {
            conn,
            deadline,
            budget,
            timeout: opts.statement_timeout,
            seen_version: Cell::new(None),
        })
    }

    fn open_reader(path: &Path, opts: &DbOptions) -> rusqlite::Result<Conn> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let conn = Conn::open(path, flags, opts)?;
        conn.conn.execute_batch("PRAGMA query_only = ON;")?;
        Ok(conn)
    }

    fn arm(&self) {
        if !self.timeout.is_zero() {
            let ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
            self.deadline
                .store(now_ms().saturating_add(ms), Ordering::Relaxed);
        }
    }

    fn disarm(&self) {
        self.deadline.store(u64::MAX, Ordering::Relaxed);
    }
}

/// `regexp(pattern, text)`, so that `text REGEXP pattern` works (for `match`/`imatch`).
pub(crate) fn register_regexp(conn: &Connection) -> rusqlite::Result<()> {
    conn.create_scalar_function(
        "regexp",
        2,
        FunctionFlags::SQLITE_UTF8 | FunctionFlags::SQLITE_DETERMINISTIC,
        |ctx| {
            let re = ctx.get_or_create_aux(0, |vr| -> Result<regex::Regex, BoxError> {
                regex::RegexBuilder::new(vr.as_str()?)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| format!("{REGEX_ERROR_PREFIX}{e}").into())
            })?;
            match ctx.get_raw(1) {
                rusqlite::types::ValueRef::Null => Ok(None),
                rusqlite::types::ValueRef::Text(t) => {
                    Ok(Some(re.is_match(&String::from_utf8_lossy(t))))
                }
                rusqlite::types::ValueRef::Integer(i) => Ok(Some(re.is_match(&i.to_string()))),
                rusqlite::types::ValueRef::Real(f) => Ok(Some(
                    re.is_match(
                        &rowgate_query::eval::sqlite_text(&rowgate_query::Value::Real(f))
                            .unwrap_or_default(),
                    ),
                )),
                rusqlite::types::ValueRef::Blob(_) => Ok(Some(false)),
            }
        },
    )
}

type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

impl Sqlite {
    /// Opens the database file (creating it if missing), switches it to WAL, starts the reader
    /// and writer threads and loads the schema cache.
    pub fn open(path: &Path, opts: &DbOptions) -> anyhow::Result<Sqlite> {
        require_folder(path)?;
        let write_flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX
            | OpenFlags::SQLITE_OPEN_URI;
        let writer = Conn::open(path, write_flags, opts)?;
        let mode: String = writer
            .conn
            .query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            anyhow::bail!("could not switch {} to WAL (got {mode})", path.display());
        }
        writer.conn.execute_batch("PRAGMA synchronous = FULL;")?;
        let schema = SchemaCache::introspect(&writer.conn)?;

        let (read_tx, read_rx) = crossbeam_channel::unbounded::<ReadJob>();
        for i in 0..opts.readers.max(1) {
            let conn = Conn::open_reader(path, opts)?;
            let rx = read_rx.clone();
            std::thread::Builder::new()
                .name(format!("rowgate-read-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        conn.arm();
                        job(&conn.conn);
                        conn.disarm();
                    }
                })?;
        }
        let (write_tx, write_rx) = crossbeam_channel::unbounded::<WriteJob>();
        let commits = Arc::new(tokio::sync::Notify::new());
        let committed = commits.clone();
        std::thread::Builder::new()
            .name("rowgate-write".into())
            .spawn(move || writer_loop(&writer, &write_rx, &committed))?;
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Ok(Sqlite {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            path: path.to_path_buf(),
            opts: opts.clone(),
            readers: read_tx,
            writer: write_tx,
            schema: ArcSwap::from_pointee(schema),
            commits,
            epoch: AtomicU64::new(0),
            counts: Arc::default(),
            waits: Arc::default(),
        })
    }

    /// The counts it keeps up to date from the change log.
    pub fn kept_counts(&self) -> &KeptCounts {
        &self.counts
    }

    /// Notified after every COMMIT of this process's writer.
    pub fn commits(&self) -> Arc<tokio::sync::Notify> {
        self.commits.clone()
    }

    /// The current schema cache.
    pub fn schema(&self) -> Arc<SchemaCache> {
        self.schema.load_full()
    }

    /// Runs `f` on a read-only connection. Short reads run right here on the calling thread's
    /// own connection (no hand-off to another thread); one that outlasts a small instruction
    /// budget is abandoned and run again on the reader pool, under the statement timeout. `f`
    /// may therefore run twice: it must only read.
    pub async fn read<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: Fn(&Connection) -> Result<T, DbError> + Send + 'static,
    {
        if self.opts.inline_reads {
            if let Some(result) = self.read_inline(&f) {
                return result;
            }
        }
        let (tx, rx) = oneshot::channel();
        let waiting = self.waits.wait();
        let job: ReadJob = Box::new(move |conn| {
            drop(waiting);
            let _ = tx.send(f(conn));
        });
        self.readers
            .send(job)
            .map_err(|_| DbError::unavailable("database is shutting down"))?;
        rx.await
            .map_err(|_| DbError::internal("reader thread dropped a job"))?
    }

    /// The reads waiting for a reader thread now, and their waits so far.
    pub fn read_waits(&self) -> &ReadWaits {
        &self.waits
    }

    /// `f` on this thread's connection within [`INLINE_BUDGET`]; `None` when it ran out of
    /// budget (or no connection could be opened) and must go to the pool.
    fn read_inline<T>(
        &self,
        f: &dyn Fn(&Connection) -> Result<T, DbError>,
    ) -> Option<Result<T, DbError>> {
        self.with_thread_conn(|conn| {
            conn.budget.store(INLINE_BUDGET, Ordering::Relaxed);
            conn.arm();
            let result = f(&conn.conn);
            let exhausted = conn.budget.load(Ordering::Relaxed) <= 0;
            conn.budget.store(i64::MAX, Ordering::Relaxed);
            conn.disarm();
            if !conn.conn.is_autocommit() {
                let _ = conn.conn.execute_batch("ROLLBACK");
            }
            (!(exhausted && result.is_err())).then_some(result)
        })
        .flatten()
    }

    /// `f` with the calling thread's own read-only connection to this database (opened on
    /// first use); `None` when none can be opened or it is in use further up the stack.
    fn with_thread_conn<T>(&self, f: impl FnOnce(&Conn) -> T) -> Option<T> {
        INLINE.with(|cell| {
            let mut conns = cell.try_borrow_mut().ok()?;
            let index = match conns.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    let conn = Conn::open_reader(&self.path, &self.opts)
                        .map_err(|e| tracing::warn!(error = %e, "no inline read connection"))
                        .ok()?;
                    conns.push((self.id, conn));
                    conns.len() - 1
                }
            };
            Some(f(&conns[index].1))
        })
    }

    /// A number that stays the same for as long as nothing has been committed to the database,
    /// by any connection of any process (the `sqlite3` shell, another worker, this process's
    /// writer); `None` when it cannot be told. An answer read after this call, and kept with
    /// its number, is current for as long as a later call returns the same number (the
    /// response cache's freshness: `crate::cache`).
    ///
    /// Each thread's connection compares its `PRAGMA data_version` (which moves when another
    /// connection commits, and is read in a read transaction of its own: the WAL index in
    /// shared memory, no I/O) with what it read last time, and moves the shared number on when
    /// it differs, or when the connection is new. A commit made before this call is therefore
    /// either seen by this call, or was seen by an earlier call on this thread after it
    /// happened; either way the number moved on after the commit, past the number of any
    /// answer read before it.
    pub fn commit_epoch(&self) -> Option<u64> {
        self.with_thread_conn(|conn| {
            let version = conn
                .conn
                .prepare_cached("PRAGMA data_version")
                .and_then(|mut stmt| stmt.query_row([], |r| r.get::<_, i64>(0)))
                .ok()?;
            if conn.seen_version.replace(Some(version)) != Some(version) {
                self.epoch.fetch_add(1, Ordering::SeqCst);
            }
            Some(self.epoch.load(Ordering::SeqCst))
        })
        .flatten()
    }

    /// Runs `f` on a reader connection and waits for it on the calling thread (start-up and
    /// reloads, not requests).
    pub fn read_blocking<T, F>(&self, f: F) -> anyhow::Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> T + Send + 'static,
    {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let job: ReadJob = Box::new(move |conn| {
            let _ = tx.send(f(conn));
        });
        self.readers
            .send(job)
            .map_err(|_| anyhow::anyhow!("the database is shutting down"))?;
        rx.recv()
            .map_err(|_| anyhow::anyhow!("a reader thread dropped a job"))
    }

    /// Runs `f` inside the writer's transaction (in its own savepoint) and answers once the
    /// transaction has durably committed. An `Err` from `f` rolls back only `f`'s changes.
    pub async fn write<T, F>(&self, f: F) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, DbError> + Send + 'static,
    {
        self.write_then(f, true).await
    }

    /// [`Sqlite::write`], its changes kept (`keep`) or rolled back to its savepoint even when
    /// `f` succeeds (`Prefer: tx=rollback`): it is answered all the same.
    pub async fn write_then<T, F>(&self, f: F, keep: bool) -> Result<T, DbError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T, DbError> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        let job: WriteJob = Box::new(move |conn| {
            let result = match conn {
                Some(conn) => f(conn),
                None => Err(DbError::unavailable("the database is unavailable")),
            };
            let ok = result.is_ok() && keep;
            let completion: Completion = Box::new(move |commit| {
                let _ = tx.send(commit.and(result));
            });
            (ok, completion)
        });
        self.writer
            .send(job)
            .map_err(|_| DbError::unavailable("database is shutting down"))?;
        rx.await
            .map_err(|_| DbError::internal("writer thread dropped a job"))?
    }

    /// Runs a [`Job`]: a read on a reader connection (several steps in one read transaction), a
    /// write in the writer's transaction, answered after COMMIT.
    pub async fn run(&self, job: Job) -> Result<Output, DbError> {
        match job.access {
            Access::Read if job.steps.len() > 1 => {
                let counts = self.counts.clone();
                self.read(move |conn| in_read_transaction(conn, |c| run_job(c, &job, &counts)))
                    .await
            }
            Access::Read => {
                let counts = self.counts.clone();
                self.read(move |conn| run_job(conn, &job, &counts)).await
            }
            Access::Write => {
                let keep = !job.rollback;
                let counts = self.counts.clone();
                self.write_then(move |conn| run_job(conn, &job, &counts), keep)
                    .await
            }
        }
    }

    /// Re-reads the schema and swaps it in; returns whether it changed.
    pub async fn reload_schema(&self) -> Result<bool, DbError> {
        let fresh = self
            .read(|conn| SchemaCache::introspect(conn).map_err(DbError::from))
            .await?;
        let changed = fresh.version != self.schema.load().version;
        self.schema.store(Arc::new(fresh));
        Ok(changed)
    }

    /// Reloads the schema when `PRAGMA schema_version` moved since the cache was read.
    pub async fn reload_schema_if_changed(&self) -> Result<bool, DbError> {
        let version = self
            .read(|conn| {
                conn.query_row("PRAGMA schema_version", [], |r| r.get::<_, i64>(0))
                    .map_err(DbError::from)
            })
            .await?;
        if version == self.schema.load().version {
            return Ok(false);
        }
        self.reload_schema().await
    }
}

/// Runs a parameterless statement from the connection's statement cache (transaction control
/// on every request: parsed once, not per request).
fn run_cached(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs `run` in a read transaction (one snapshot for several statements). BEGIN and COMMIT
/// come from the statement cache: no parsing per request.
pub fn in_read_transaction<T>(
    conn: &Connection,
    run: impl FnOnce(&Connection) -> Result<T, DbError>,
) -> Result<T, DbError> {
    run_cached(conn, "BEGIN")?;
    let result = run(conn);
    let _ = run_cached(conn, "COMMIT");
    result
}

fn writer_loop(
    writer: &Conn,
    rx: &crossbeam_channel::Receiver<WriteJob>,
    committed: &tokio::sync::Notify,
) {
    let conn = &writer.conn;
    let mut completions: Vec<Completion> = Vec::with_capacity(MAX_GROUP);
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => batch.push(job),
                Err(_) => break,
            }
        }
        if let Err(e) = run_cached(conn, "BEGIN IMMEDIATE") {
            let err = DbError::from(e);
            tracing::error!(%err, "could not begin a write transaction");
            for job in batch {
                let (_, completion) = job(None);
                completion(Err(err.clone()));
            }
            continue;
        }
        for job in batch {
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (a full disk or an I/O error in the
                // middle of a statement): what ran is undone, and a savepoint now would start a
                // transaction of its own that commits on RELEASE. The rest is not run.
                let (_, completion) = job(None);
                completion(Err(transaction_lost()));
                continue;
            }
            let savepoint = run_cached(conn, "SAVEPOINT job");
            writer.arm();
            let (ok, completion) = job(Some(conn));
            writer.disarm();
            let end = match (savepoint, ok) {
                // SQLite rolled the whole transaction back under the job: no savepoint is
                // left to roll back to, and the batch's answer says nothing was written
                (Ok(()), _) if conn.is_autocommit() => Ok(()),
                (Ok(()), true) => run_cached(conn, "RELEASE job"),
                (Ok(()), false) => run_cached(conn, "ROLLBACK TO job")
                    .and_then(|()| run_cached(conn, "RELEASE job")),
                (Err(e), _) => Err(e),
            };
            match end {
                Ok(()) => completions.push(completion),
                Err(e) => completion(Err(DbError::from(e))),
            }
        }
        let commit = if conn.is_autocommit() {
            tracing::error!(
                "the database rolled a write transaction back (disk full or an I/O error)"
            );
            Err(transaction_lost())
        } else {
            let commit = run_cached(conn, "COMMIT");
            if let Err(e) = &commit {
                exit_on_io_error(e);
            }
            commit.map_err(DbError::from)
        };
        if commit.is_err() {
            let _ = conn.execute_batch("ROLLBACK");
        } else {
            committed.notify_one();
        }
        for completion in completions.drain(..) {
            completion(commit.clone());
        }
    }
}

/// The answer of a batch's jobs when SQLite rolled its transaction back by itself (it may, on
/// `SQLITE_FULL` or `SQLITE_IOERR` in the middle of a statement): nothing of it was written.
fn transaction_lost() -> DbError {
    super::sqlite_error::refused_write()
}

/// A COMMIT that failed with an I/O error (EIO from write or fsync, EFBIG, …) may have left
/// the file in a state the page cache no longer describes; retrying could acknowledge a write
/// that is not on disk (PostgreSQL's fsync lesson). The process exits at once with code 74
/// (`EX_IOERR`) and answers none of the batch's requests: their clients see the connection
/// close, and the supervisor starts a fresh worker that opens the database anew.
///
/// A write refused outright (`write()` failing with ENOSPC or EFBIG: SQLite's `SQLITE_FULL`,
/// `SQLITE_IOERR_WRITE`) leaves nothing ambiguous: the WAL holds no valid commit frame for the
/// batch, so it did not commit. That batch is rolled back and answered 507, and the worker
/// goes on serving reads.
fn exit_on_io_error(e: &rusqlite::Error) {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::SystemIoFailure)
        && !super::sqlite_error::write_refused(e)
    {
        tracing::error!(error = %e, "fatal I/O error on COMMIT: exiting without acknowledging the batch");
        std::process::exit(74);
    }
}

/// Refuses a database file whose folder does not exist, naming the folder (SQLite says only
/// "unable to open database file"). A URI (`file:…`) and `:memory:` are SQLite's to judge.
pub fn require_folder(path: &Path) -> anyhow::Result<()> {
    let text = path.to_string_lossy();
    if text.starts_with("file:") || text == ":memory:" {
        return Ok(());
    }
    match path.parent() {
        Some(folder) if !folder.as_os_str().is_empty() && !folder.is_dir() => anyhow::bail!(
            "the folder {} of the database file {} does not exist: create it (`mkdir -p {}`) or \
             name a file in an existing folder",
            folder.display(),
            path.display(),
            folder.display()
        ),
        _ => Ok(()),
    }
}
