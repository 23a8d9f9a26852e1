//! The PostgreSQL backend: a deadpool of tokio-postgres clients with prepared statements
//! (`prepare_cached`), or, with `db.prepared_statements = false` (PostgREST's
//! `db-prepared-statements`, for poolers in transaction mode: PgBouncer's, Supavisor's), unnamed
//! statements parsed with each execution (`Session`). A job runs on one client, in a
//! transaction when it writes or has several steps. Rows come out as JSON built by PostgreSQL itself (`row_to_json`: exact numerics,
//! timestamps, json, arrays, bytea as PostgreSQL prints them); parameters are sent as text and
//! PostgreSQL parses them for the type the statement needs, as PostgREST does, so a bad value is
//! its `22P02` (a 400), never a client-side type error.

use std::future::Future as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use bytes::BytesMut;
use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, TimeoutType};
use rowgate_query::stmt::Sql;
use rowgate_query::Value;
use tokio_postgres::types::{Format as WireFormat, IsNull, ToSql, Type};
use tokio_postgres::NoTls;

use super::postgres_connect;
use super::replicas::{Lsn, Position, Replicas};
use super::request;
use super::shared_reads::SharedReads;
use super::tally::Tally;
use crate::error::database::DbError;
use crate::job::{Access, Format, Job, Output, OutputShape, Step};
use crate::schema::SchemaCache;

/// What `rowgate db setup` installs: an event trigger that sends `NOTIFY rowgate, 'reload
/// schema'` after every DDL command, so running servers reload their schema cache at once.
pub const SETUP: &str = "
CREATE OR REPLACE FUNCTION rowgate_notify_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
BEGIN
    NOTIFY rowgate, 'reload schema';
END $$;
DROP EVENT TRIGGER IF EXISTS rowgate_ddl;
CREATE EVENT TRIGGER rowgate_ddl ON ddl_command_end EXECUTE FUNCTION rowgate_notify_ddl();
";

/// The channel and payload that ask servers to reload their schema cache.
const RELOAD_CHANNEL: &str = "rowgate";
const RELOAD_PAYLOAD: &str = "reload schema";

/// Installs [`SETUP`] in the database at `url` (needs a superuser).
pub async fn setup(url: &str) -> anyhow::Result<()> {
    let (client, connection) = super::postgres_connect::connect(url).await?;
    let connection = tokio::spawn(connection);
    client
        .batch_execute(SETUP)
        .await
        .context("cannot install the DDL event trigger (a superuser is needed)")?;
    drop(client);
    let _ = connection.await;
    Ok(())
}

/// Listens on the reload channel of the database at `url` and sends `()` on `reload` for every
/// `NOTIFY rowgate, 'reload schema'`, until the connection ends (returns why).
pub async fn listen_for_reloads(
    url: &str,
    reload: &tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<()> {
    listen(url, RELOAD_CHANNEL, |payload| {
        if payload == RELOAD_PAYLOAD {
            let _ = reload.try_send(());
        }
    })
    .await
}

/// Listens on `channel` of the database at `url` and calls `on` with the payload of every
/// notification, until the connection ends (returns why).
pub async fn listen(url: &str, channel: &str, mut on: impl FnMut(&str)) -> anyhow::Result<()> {
    let (client, mut connection) = super::postgres_connect::connect(url).await?;
    let listen = format!("LISTEN {channel}");
    let mut listening = Box::pin(client.batch_execute(&listen));
    // Drive the connection while LISTEN runs, then keep reading its notifications.
    let mut listened = false;
    loop {
        let message = std::future::poll_fn(|cx| {
            if !listened {
                if let std::task::Poll::Ready(done) = listening.as_mut().poll(cx) {
                    listened = true;
                    if let Err(e) = done {
                        return std::task::Poll::Ready(Some(Err(e)));
                    }
                }
            }
            connection.poll_message(cx)
        })
        .await;
        match message {
            Some(Ok(tokio_postgres::AsyncMessage::Notification(n))) => {
                if n.channel() == channel {
                    on(n.payload());
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e).context("the notification connection failed"),
            None => anyhow::bail!("the notification connection closed"),
        }
    }
}

/// Listens on `channel` of the database at `location` for as long as the process lives,
/// reconnecting a second after the connection ends (to the primary wherever it is now, when
/// the URL follows it): `wake` is woken by every notification, and after each reconnect (what
/// was notified meanwhile is for the waker's poll to find).
pub fn spawn_listener(location: &str, channel: &'static str, wake: Arc<tokio::sync::Notify>) {
    let location = location.to_string();
    tokio::spawn(async move {
        loop {
            let listened = listen(&location, channel, |_| wake.notify_one()).await;
            if let Err(e) = listened {
                tracing::debug!(error = %e, channel, "notifications: reconnecting");
            }
            wake.notify_one();
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
}

/// Settings for [`Postgres::open`].
#[derive(Debug, Clone)]
pub struct PgOptions {
    /// Most pooled connections.
    pub pool_size: usize,
    /// Pooled connections that one-statement reads share, pipelined (0: none).
    pub shared_reads: usize,
    /// A connection older than this is closed instead of reused (zero = no limit).
    pub max_lifetime: Duration,
    /// How long a request waits for a free connection before a 503.
    pub acquire_timeout: Duration,
    /// `statement_timeout` of every connection (zero = none).
    pub statement_timeout: Duration,
    /// Exposed schemas, in search order.
    pub schemas: Vec<String>,
    /// Schemas searched after them (PostgREST's `db-extra-search-path`).
    pub extra_search_path: Vec<String>,
    /// Prepare each statement once per connection and keep it (false: unnamed statements, as a
    /// pooler in transaction mode needs).
    pub prepared_statements: bool,
    /// Read replicas' URLs (`db.replicas`).
    pub replicas: Vec<String>,
    /// How far behind the primary a replica may be and still take reads.
    pub replica_max_lag: Duration,
    /// How long a read carrying a position may wait for a replica to replay it before it goes
    /// to the primary.
    pub replica_wait: Duration,
    /// Read each role's privileges with the schema (requests run as their role).
    pub privileges: bool,
    /// How often the commit clock reads the primary's WAL position, for the response cache
    /// (`None`: no cache on PostgreSQL).
    pub commit_poll: Option<Duration>,
}

/// The PostgreSQL database: a connection pool (the primary's), its read replicas, and the
/// schema cache.
pub struct Postgres {
    pool: Pool,
    /// Where `pool` connects, for messages ([`postgres_connect::target`]).
    target: String,
    /// The read replicas (none: every job runs on the primary).
    replicas: Replicas,
    /// [`PgOptions::replica_wait`].
    replica_wait: Duration,
    /// Whether statements are prepared and kept ([`PgOptions::prepared_statements`]).
    prepared: bool,
    /// Without prepared statements (a pooler in transaction mode, which keeps no session
    /// settings), every job runs in a transaction that starts with these settings.
    transaction_settings: String,
    schemas: Vec<String>,
    /// Whether the schema cache holds the roles' privileges ([`PgOptions::privileges`]).
    privileges: bool,
    schema: ArcSwap<SchemaCache>,
    /// Fingerprint of the exposed relations and columns when the cache was read.
    fingerprint: ArcSwap<String>,
    /// Notified after commits (unused until realtime capture runs on PostgreSQL).
    pub(crate) commits: Arc<tokio::sync::Notify>,
    /// The database is a Citus coordinator (distributed PostgreSQL): Citus runs a CTE over
    /// distributed tables as a subquery whose rows come back in shard order, so the rows of a
    /// statement are aggregated from a materialized CTE, which keeps the statement's order (the
    /// coordinator reads its stored rows in order).
    citus: bool,
    /// What keeps the response cache fresh ([`super::commit_clock`]); polled only when
    /// `polls` (the cache is on, and the database is not Citus, whose writes to distributed
    /// tables leave the coordinator's WAL where it was).
    clock: Arc<super::commit_clock::CommitClock>,
    clock_polls: bool,
    /// Notified after this process commits a write job: what wakes the gatherer of a Citus
    /// cluster's workers' captured changes (`realtime::capture::citus`); nobody waits on it
    /// otherwise.
    pub(crate) written: Arc<tokio::sync::Notify>,
    /// Reads waiting for a pooled connection.
    waits: Arc<super::waits::ReadWaits>,
    /// The primary's connections that one-statement reads share ([`super::shared_reads`]).
    shared: SharedReads,
}

/// The shared connections `opts` asks for, of one pool.
fn shared_reads(opts: &PgOptions) -> SharedReads {
    SharedReads::new(opts.shared_reads, opts.max_lifetime)
}

/// The schema cache's version for a catalog fingerprint (md5s in hex, one each of the exposed
/// relations' columns, the functions, the privileges on them and row-level security, and the
/// policies): the first 60 bits of each, combined, so that a change of any of them changes the
/// version (what the realtime tailer watches to add capture to new tables, and its visibility
/// checker to copy the policies again), the same on every node.
fn schema_version(fingerprint: &str) -> i64 {
    fingerprint
        .as_bytes()
        .chunks(32)
        .filter_map(|md5| std::str::from_utf8(md5.get(..15)?).ok())
        .filter_map(|hex| i64::from_str_radix(hex, 16).ok())
        .fold(0, |version, part| version ^ part)
}

/// A digest of the exposed relations, their columns and the functions: cheap to poll, changes
/// with DDL. The functions' digest follows the relations' (so it moves the version only when nothing is
/// exposed): a changed function reloads the cache without disturbing realtime capture.
const FINGERPRINT: &str = "SELECT coalesce(md5(string_agg(c.oid::text || ':' || a.attnum || ':' || a.attname || ':' || a.atttypid::text, ',' ORDER BY c.oid, a.attnum)), md5(''))
       || coalesce((SELECT md5(string_agg(p.oid::text || ':' || p.provolatile::text || ':' || p.prorettype::text || ':' || p.proargtypes::text || ':' || coalesce(array_to_string(p.proargnames, ','), '') || ':' || coalesce(p.proacl::text, ''), ',' ORDER BY p.oid))
                    FROM pg_proc p JOIN pg_namespace pn ON pn.oid = p.pronamespace
                    WHERE pn.nspname::text = ANY($1::text[])), md5(''))
       || md5(coalesce(string_agg(coalesce(c.relacl::text, '') || coalesce(a.attacl::text, '') || c.relrowsecurity::text, ',' ORDER BY c.oid, a.attnum), ''))
       || coalesce((SELECT md5(string_agg(pol.oid::text || ':' || pol.polname || ':' || pol.polcmd::text || ':' || pol.polpermissive::text || ':' || pol.polroles::text || ':' || coalesce(pg_get_expr(pol.polqual, pol.polrelid), ''), ',' ORDER BY pol.oid))
                    FROM pg_policy pol JOIN pg_class pc ON pc.oid = pol.polrelid JOIN pg_namespace pcn ON pcn.oid = pc.relnamespace
                    WHERE pcn.nspname::text = ANY($1::text[])), md5(''))
     FROM pg_class c
     JOIN pg_namespace n ON n.oid = c.relnamespace
     JOIN pg_attribute a ON a.attrelid = c.oid
     WHERE n.nspname::text = ANY($1::text[]) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
       AND a.attnum > 0 AND NOT a.attisdropped";

/// A parameter sent in text format, typed by the server.
#[derive(Debug)]
struct AsText(Option<String>);

impl ToSql for AsText {
    fn to_sql(
        &self,
        _ty: &Type,
        out: &mut BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match &self.0 {
            Some(text) => {
                out.extend_from_slice(text.as_bytes());
                Ok(IsNull::No)
            }
            None => Ok(IsNull::Yes),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    fn encode_format(&self, _ty: &Type) -> WireFormat {
        WireFormat::Text
    }

    tokio_postgres::types::to_sql_checked!();
}

/// The schema cache of `schemas`, one profile each (PostgREST's `Accept-Profile`): their
/// tables and views, then their functions; the first schema's is the default, holding the
/// others.
async fn read_schema(
    client: &tokio_postgres::Client,
    schemas: &[String],
    privileges: bool,
) -> Result<crate::schema::SchemaCache, tokio_postgres::Error> {
    let mut profiles = Vec::with_capacity(schemas.len());
    for name in schemas {
        let one = std::slice::from_ref(name);
        let mut schema = crate::schema::postgres::introspect(client, one).await?;
        schema.functions =
            crate::schema::functions::introspect(client, one, &schema.tables).await?;
        crate::schema::functions::attach_computed(&mut schema.tables, &mut schema.functions);
        schema.media_handlers = crate::schema::media::introspect(client, one).await?;
        if privileges {
            let read = crate::schema::privileges::Privileges::introspect(client, name).await?;
            schema.privileges = Some(Arc::new(read));
        }
        profiles.push((name.clone(), schema));
    }
    let mut profiles = profiles.into_iter();
    let Some((_, mut first)) = profiles.next() else {
        return Ok(crate::schema::SchemaCache::default());
    };
    first.profiles = schemas.to_vec();
    first.others = profiles
        .map(|(name, schema)| (name, Arc::new(schema)))
        .collect();
    Ok(first)
}

fn as_text(v: &Value) -> AsText {
    AsText(match v {
        Value::Null => None,
        Value::Int(i) => Some(i.to_string()),
        Value::Real(f) => Some(f.to_string()),
        Value::Text(t) => Some(t.clone()),
        Value::Bool(b) => Some(b.to_string()),
    })
}

/// Refuses to recycle a connection older than `max` (deadpool then drops it and opens another),
/// so connections are renewed over time (server-side memory, changed settings, a failover).
fn max_lifetime_hook(max: Duration) -> deadpool_postgres::Hook {
    deadpool_postgres::Hook::sync_fn(move |_, metrics| {
        if !max.is_zero() && metrics.age() > max {
            Err(deadpool_postgres::HookError::message(
                "connection reached db.max_lifetime_s",
            ))
        } else {
            Ok(())
        }
    })
}

/// `search_path` for `schemas` then `extra` (each once), escaped for libpq's `options`: each
/// name quoted as an identifier, spaces and backslashes escaped with a backslash.
fn search_path(schemas: &[String], extra: &[String]) -> String {
    search_path_sql(schemas, extra)
        .replace('\\', "\\\\")
        .replace(' ', "\\ ")
}

/// `search_path` for `schemas` then `extra` (each once), as SQL: each name quoted as an
/// identifier.
fn search_path_sql(schemas: &[String], extra: &[String]) -> String {
    let mut unique: Vec<&String> = Vec::new();
    for name in schemas.iter().chain(extra) {
        if !unique.contains(&name) {
            unique.push(name);
        }
    }
    let quoted: Vec<String> = unique
        .iter()
        .map(|s| format!("\"{}\"", s.replace('"', "\"\"")))
        .collect();
    quoted.join(",")
}

/// What a pooler in transaction mode loses of the connection's settings (it passes no startup
/// options), set again at the start of every transaction: the statement timeout and the search
/// path (read-only comes with `BEGIN READ ONLY`).
fn transaction_settings(opts: &PgOptions) -> String {
    let mut settings = format!(
        "SET LOCAL search_path = {}",
        search_path_sql(&opts.schemas, &opts.extra_search_path)
    );
    if !opts.statement_timeout.is_zero() {
        settings.push_str(&format!(
            "; SET LOCAL statement_timeout = {}",
            opts.statement_timeout.as_millis()
        ));
    }
    settings
}

/// A pool of connections to `url` with `opts`' settings: read-only unless a transaction says
/// otherwise, the search path, the statement timeout, the size and lifetime bounds; and where
/// it connects, for messages ([`postgres_connect::target`]).
fn pool(url: &str, opts: &PgOptions) -> anyhow::Result<(Pool, String)> {
    let config: tokio_postgres::Config = url.parse().context("invalid PostgreSQL URL")?;
    let mut config = postgres_connect::with_failover_defaults(config, url, opts.acquire_timeout);
    let target = postgres_connect::target(&config);
    // Every transaction is read-only unless it says otherwise (writes run in `BEGIN READ
    // WRITE`), so a read whose SQL would write (a custom resource calling a function that
    // writes) fails instead of committing. Following the primary among several hosts
    // (`target_session_attrs=read-write`), the connection first tells whether its server is
    // read-write, so read-only is set once it is made.
    let follows_primary = postgres_connect::follows_primary(&config);
    let mut options = config.get_options().unwrap_or_default().to_string();
    if !follows_primary {
        options.push_str(" -c default_transaction_read_only=on");
    }
    // The exposed schemas then `db.extra_search_path` (public) are the search path, as
    // PostgREST sets it, so that functions and views naming tables unqualified find them,
    // and extensions' operators theirs (unless the URL sets one).
    if !options.contains("search_path") {
        options.push_str(&format!(
            " -c search_path={}",
            search_path(&opts.schemas, &opts.extra_search_path)
        ));
    }
    if !opts.statement_timeout.is_zero() {
        options.push_str(&format!(
            " -c statement_timeout={}",
            opts.statement_timeout.as_millis()
        ));
    }
    config.options(options.trim_start());
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    let mut builder = Pool::builder(manager)
        .max_size(opts.pool_size.max(1))
        .wait_timeout(Some(opts.acquire_timeout))
        .create_timeout(Some(opts.acquire_timeout))
        .runtime(deadpool_postgres::Runtime::Tokio1)
        .pre_recycle(max_lifetime_hook(opts.max_lifetime));
    if follows_primary {
        builder = builder.post_create(deadpool_postgres::Hook::async_fn(|client, _| {
            Box::pin(async move {
                client
                    .batch_execute("SET default_transaction_read_only = on")
                    .await
                    .map_err(deadpool_postgres::HookError::Backend)
            })
        }));
    }
    let pool = builder
        .build()
        .context("cannot build the connection pool")?;
    Ok((pool, target))
}

impl Postgres {
    /// Connects the pool to `url` and reads the schema cache; the replicas' pools connect on
    /// their first check.
    pub async fn open(url: &str, opts: &PgOptions) -> anyhow::Result<Postgres> {
        let (pool, target) = pool(url, opts)?;
        let mut replicas = Vec::with_capacity(opts.replicas.len());
        for replica in &opts.replicas {
            let name = super::replicas::display_name(replica);
            let (pool, _) = self::pool(replica, opts).with_context(|| format!("replica {name}"))?;
            replicas.push(super::replicas::Replica::new(
                name,
                pool,
                shared_reads(opts),
            ));
        }
        let replicas = Replicas::new(replicas, opts.replica_max_lag);
        let client = pool.get().await.map_err(|e| {
            anyhow::anyhow!(postgres_connect::pool_failure(
                &target,
                &e,
                opts.acquire_timeout
            ))
        })?;
        let fingerprint: String = client
            .query_one(FINGERPRINT, &[&opts.schemas])
            .await
            .with_context(|| format!("cannot read the catalog of PostgreSQL at {target}"))?
            .get(0);
        let mut schema = read_schema(&client, &opts.schemas, opts.privileges)
            .await
            .with_context(|| format!("cannot read the schema of PostgreSQL at {target}"))?;
        schema.version = schema_version(&fingerprint);
        let citus: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')",
                &[],
            )
            .await
            .with_context(|| format!("cannot read the extensions of PostgreSQL at {target}"))?
            .get(0);
        drop(client);
        let clock = Arc::new(super::commit_clock::CommitClock::default());
        let clock_polls = match opts.commit_poll {
            Some(every) if !citus => {
                super::commit_clock::spawn_poller(pool.clone(), clock.clone(), every);
                true
            }
            _ => false,
        };
        Ok(Postgres {
            pool,
            target,
            replicas,
            replica_wait: opts.replica_wait,
            prepared: opts.prepared_statements,
            transaction_settings: transaction_settings(opts),
            schemas: opts.schemas.clone(),
            privileges: opts.privileges,
            schema: ArcSwap::from_pointee(schema),
            fingerprint: ArcSwap::from_pointee(fingerprint),
            citus,
            clock,
            clock_polls,
            commits: Arc::new(tokio::sync::Notify::new()),
            written: Arc::new(tokio::sync::Notify::new()),
            waits: Arc::default(),
            shared: shared_reads(opts),
        })
    }

    /// The current schema cache.
    pub fn schema(&self) -> Arc<SchemaCache> {
        self.schema.load_full()
    }

    pub(crate) async fn client(&self) -> Result<deadpool_postgres::Object, DbError> {
        connection(&self.pool, &self.target).await
    }

    /// Answers when the database does.
    pub async fn ping(&self) -> Result<(), DbError> {
        let client = self.client().await?;
        client.simple_query("SELECT 1").await?;
        Ok(())
    }

    /// Re-reads the schema and swaps it in; returns whether the set of tables changed.
    pub async fn reload_schema(&self) -> Result<bool, DbError> {
        let client = self.client().await?;
        let fingerprint: String = client
            .query_one(FINGERPRINT, &[&self.schemas])
            .await?
            .get(0);
        let mut fresh = read_schema(&client, &self.schemas, self.privileges).await?;
        fresh.version = schema_version(&fingerprint);
        self.fingerprint.store(Arc::new(fingerprint));
        let changed = fresh.version != self.schema.load().version;
        self.schema.store(Arc::new(fresh));
        Ok(changed)
    }

    /// Reloads the schema when the exposed relations or columns changed since it was read.
    pub async fn reload_schema_if_changed(&self) -> Result<bool, DbError> {
        let client = self.client().await?;
        let now: String = client
            .query_one(FINGERPRINT, &[&self.schemas])
            .await?
            .get(0);
        drop(client);
        if now == **self.fingerprint.load() {
            return Ok(false);
        }
        self.reload_schema().await
    }

    /// Prepares `sql` on a pooled connection (nothing runs): an error says why PostgreSQL
    /// rejects it.
    pub async fn check_statement(&self, sql: &str) -> anyhow::Result<Vec<crate::schema::Column>> {
        let client = self
            .client()
            .await
            .map_err(|e| anyhow::anyhow!("{}", e.message))?;
        match client.prepare(sql).await {
            Ok(statement) => Ok(statement
                .columns()
                .iter()
                .map(|c| {
                    let ty = c.type_();
                    let category = match ty.kind() {
                        tokio_postgres::types::Kind::Array(_) => "A",
                        _ if ["numeric", "float4", "float8", "money"].contains(&ty.name()) => "N",
                        _ => "S",
                    };
                    crate::schema::Column::of_result(
                        c.name().to_string(),
                        ty.name().to_string(),
                        crate::schema::postgres::classify(ty.name(), category),
                    )
                })
                .collect()),
            Err(e) => match e.as_db_error() {
                Some(db) => anyhow::bail!("{}", db.message()),
                None => Err(e.into()),
            },
        }
    }

    /// Runs a job on one pooled connection, in a transaction when it writes or has several
    /// steps (reads then see one snapshot). A read goes to a replica in the rotation unless the
    /// job needs the primary, or the request carries a position ([`request::required`]) the
    /// replica has not replayed; a replica that fails it leaves the rotation and the next
    /// replica, or else the primary, runs it. With replicas, a write notes the position it committed at
    /// ([`request::committed`]).
    pub async fn run(&self, job: Job) -> Result<Output, DbError> {
        if job.access == Access::Read && !job.primary {
            // a replica that fails the read leaves the rotation and the next one takes it (the
            // primary may be the one that is gone)
            for _ in 0..self.replicas.list().len() {
                let Some(replica) = self.replicas.pick() else {
                    break;
                };
                if !has_replayed(replica, request::required(), self.replica_wait).await {
                    break;
                }
                match self
                    .run_on(&replica.pool, &replica.shared, &replica.name, &job)
                    .await
                {
                    // the replica went away, or cancelled the read for a conflict with its
                    // recovery
                    Err(e)
                        if e.kind == crate::error::database::Kind::Unavailable
                            || e.sqlstate.as_deref() == Some("40001") =>
                    {
                        replica.failed();
                    }
                    done => return done,
                }
            }
        }
        self.run_on(&self.pool, &self.shared, &self.target, &job)
            .await
    }

    /// The reads waiting for a pooled connection now, and their waits so far.
    pub fn read_waits(&self) -> &super::waits::ReadWaits {
        &self.waits
    }

    /// Runs `job` on a connection of `pool`, which connects to `target`: a read of one
    /// statement outside a transaction on one of the `shared` connections when there is one to
    /// take, anything else on a connection of its own.
    async fn run_on(
        &self,
        pool: &Pool,
        shared: &SharedReads,
        target: &str,
        job: &Job,
    ) -> Result<Output, DbError> {
        // (CSV names its columns from a statement prepared for the while: in a transaction,
        // where a pooler keeps the connection, when statements are not kept)
        let several = job.steps.len() > 1 || (!self.prepared && job.format == Format::Csv);
        // a pooler in transaction mode keeps no session settings: every job is a transaction
        // that sets them (read-only with BEGIN READ ONLY)
        let pooled = !self.prepared;
        let transaction = match job.access {
            Access::Write => Some("BEGIN READ WRITE"),
            Access::Read if several => Some("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
            Access::Read if pooled => Some("BEGIN READ ONLY"),
            Access::Read => None,
        };
        let waiting = (job.access == Access::Read).then(|| self.waits.wait());
        let lent = match transaction {
            None => shared.lend(pool).await.map(Lease::Shared),
            Some(_) => None,
        };
        let lease = match lent {
            Some(lease) => Ok(lease),
            None => connection(pool, target).await.map(Lease::Own),
        };
        drop(waiting);
        let lease = lease?;
        let client: &deadpool_postgres::Object = &lease;
        let session = Session {
            client,
            prepared: self.prepared,
            // (not a write's: Citus would run it as a subplan, whose errors lose their SQLSTATE)
            materialize: self.citus && job.access == Access::Read,
        };
        let begin = transaction.map(|begin| {
            if pooled {
                format!("{begin}; {}", self.transaction_settings)
            } else {
                begin.to_string()
            }
        });
        let result: Result<Output, DbError> = match begin {
            // A read sends BEGIN and its first statement in one flight (the statement is sent
            // when first polled, after BEGIN; each later one after the one before answered):
            // a round trip less. A read only: should BEGIN fail, what ran without it wrote
            // nothing, and its answer is dropped for BEGIN's error.
            Some(begin) if job.access == Access::Read => {
                let (begun, result) =
                    tokio::join!(client.batch_execute(&begin), run_steps(&session, job));
                begun.map_err(DbError::from).and(result)
            }
            Some(begin) => match client.batch_execute(&begin).await {
                Ok(()) => run_steps(&session, job).await,
                Err(e) => Err(e.into()),
            },
            None => run_steps(&session, job).await,
        };
        if transaction.is_some() {
            let commit = result.is_ok() && !job.rollback;
            let end = if commit { "COMMIT" } else { "ROLLBACK" };
            let ended = client.batch_execute(end).await.map_err(DbError::from);
            if let (Ok(_), Err(e)) = (&result, ended) {
                return Err(drop_idle_when_gone(pool, e));
            }
            if commit && job.access == Access::Write {
                self.written.notify_one();
            }
            if job.access == Access::Write {
                // before the write is answered: nothing kept before it is served after it
                self.clock.written();
            }
            if commit
                && job.access == Access::Write
                && (!self.replicas.is_empty() || self.clock_polls)
            {
                // the insert position is past this transaction's commit record (committed
                // whatever this tells: unknown, the write is answered without its position)
                if let Ok(row) = client
                    .query_one(super::replicas::COMMITTED_AT_SQL, &[])
                    .await
                {
                    let (lsn, timeline): (i64, i32) = (row.get(0), row.get(1));
                    request::committed(Position {
                        timeline: u32::try_from(timeline).unwrap_or(0),
                        lsn: Lsn::try_from(lsn).unwrap_or(0),
                    });
                }
            }
        }
        result.map_err(|e| drop_idle_when_gone(pool, e))
    }

    /// The response cache's commit epoch ([`super::commit_clock`]): `None` when the clock
    /// does not run, is not known now, or the request names a position it has not read yet.
    pub fn commit_epoch(&self) -> Option<u64> {
        if !self.clock_polls {
            return None;
        }
        self.clock.epoch(request::required())
    }

    /// Whether the commit clock runs (the response cache may keep answers).
    pub fn tells_commits(&self) -> bool {
        self.clock_polls
    }

    /// Whether read replicas are configured.
    pub fn has_replicas(&self) -> bool {
        !self.replicas.is_empty()
    }

    /// The read replicas.
    pub fn replicas(&self) -> &Replicas {
        &self.replicas
    }

    /// Checks the replicas against the primary's position now ([`Replicas::check`]); with
    /// the primary gone (a failover under way) they are checked all the same, so that reads
    /// go on from those that answer.
    pub async fn check_replicas(&self) -> Result<(), DbError> {
        let primary = self.primary_position().await;
        self.replicas.check(primary.as_ref().ok().copied()).await;
        primary.map(|_| ())
    }

    /// The primary's WAL insert position now.
    async fn primary_position(&self) -> Result<Lsn, DbError> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT (pg_current_wal_insert_lsn() - '0/0'::pg_lsn)::bigint",
                &[],
            )
            .await?;
        Ok(Lsn::try_from(row.get::<_, i64>(0)).unwrap_or(0))
    }
}

/// The connection a job runs on: shared with other reads, or its own. (On the stack for the
/// job, as the pooled connection was before; boxing it would cost each job an allocation.)
#[allow(clippy::large_enum_variant)]
enum Lease {
    Shared(super::shared_reads::Shared),
    Own(deadpool_postgres::Object),
}

impl std::ops::Deref for Lease {
    type Target = deadpool_postgres::Object;

    fn deref(&self) -> &deadpool_postgres::Object {
        match self {
            Lease::Shared(shared) => shared,
            Lease::Own(own) => own,
        }
    }
}

/// `e`, after dropping the idle connections of `pool` when it says the server is gone or
/// no longer the primary: a failover leaves nothing pooled that points at the old one.
fn drop_idle_when_gone(pool: &Pool, e: DbError) -> DbError {
    if e.kind == crate::error::database::Kind::Unavailable {
        pool.retain(|_, _| false);
    }
    e
}

/// A connection of `pool`, which connects to `target` (503 when none comes within the acquire
/// timeout).
async fn connection(pool: &Pool, target: &str) -> Result<deadpool_postgres::Object, DbError> {
    pool.get().await.map_err(|e| {
        let wait = pool.timeouts().wait.unwrap_or_default();
        tracing::warn!("{}", postgres_connect::pool_failure(target, &e, wait));
        // no connection could be made: those kept point at a server gone (a busy pool, whose
        // connections are all lent, keeps them)
        if !matches!(e, deadpool_postgres::PoolError::Timeout(TimeoutType::Wait)) {
            pool.retain(|_, _| false);
        }
        DbError::unavailable("the database is unavailable; retry")
    })
}

/// Whether `replica` has replayed the write at `required` (no position: yes): known from its
/// last check, or, when it then followed the write's timeline, its replay position asked now,
/// and again every millisecond for up to `wait` when the replica keeps up (its lag at the last
/// check within `wait`: one that lags further would make every such read wait in vain).
async fn has_replayed(
    replica: &super::replicas::Replica,
    required: Option<Position>,
    wait: Duration,
) -> bool {
    let Some(required) = required else {
        return true;
    };
    if replica.replayed(required) {
        return true;
    }
    if !replica.follows(required) {
        return false;
    }
    let Ok(client) = replica.pool.get().await else {
        return false;
    };
    let wait = if replica.lag() <= wait {
        wait
    } else {
        Duration::ZERO
    };
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // (a primary has no replay position: it has every committed write)
        let asked = client
            .query_one(
                "SELECT coalesce((pg_last_wal_replay_lsn() - '0/0'::pg_lsn)::bigint >= $1::bigint, true)",
                &[&AsText(Some(required.lsn.to_string()))],
            )
            .await;
        match asked {
            Ok(row) if row.get::<_, bool>(0) => return true,
            Ok(_) => {}
            Err(_) => return false,
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn run_steps(client: &Session<'_>, job: &Job) -> Result<Output, DbError> {
    let mut rows = String::new();
    let mut tally = Tally::default();
    let mut csv_columns: Option<Vec<String>> = None;
    for step in &job.steps {
        match step {
            Step::IfMatch { sql, shape, tags } => check_if_match(client, sql, shape, tags).await?,
            Step::Document {
                sql, nocheck, tags, ..
            } => {
                let (json, n) = json_rows(client, sql, false, None).await?;
                crate::job::check_document(n, json.as_bytes(), nocheck, tags.as_deref())?
            }
            Step::Execute(sql) => tally.executed(client.execute(&sql.text, &sql.params).await?),
            Step::Setting(sql) => {
                client.execute(&sql.text, &sql.params).await?;
            }
            Step::ResponseSettings => {
                let row = client.query_one("SELECT nullif(current_setting('response.headers', true), ''), nullif(current_setting('response.status', true), '')",
                    &[],
                )
                .await?;
                tally.responded(crate::job::ResponseSettings {
                    headers: row.get(0),
                    status: row.get(1),
                });
            }
            // the keys and JSON types come from the statement itself (its aliases and
            // PostgreSQL's types): the shape SQLite needs to type its values is not needed here
            Step::Rows { sql, shape } => {
                let sorted = shape.as_ref().filter(|s| !s.sort.is_empty());
                if job.format == Format::Csv && csv_columns.is_none() {
                    let mut names = client.column_names(&sql.text).await?;
                    // not the hidden columns a write's rows are ordered by
                    names.truncate(sorted.map_or(usize::MAX, |s| s.keys.len()));
                    csv_columns = Some(names);
                }
                let strip = job.format == Format::JsonNullsStripped;
                let (json, n) = json_rows(client, sql, strip, sorted).await?;
                append_json_array(&mut rows, &json);
                tally.returned(job.access, n);
            }
            Step::Count(sql) | Step::KeptCount { sql, .. } => {
                tally.counted(count_of(client, sql).await?)
            }
            Step::Existing(sql) => tally.existed(count_of(client, sql).await?),
            Step::Forbid { sql, error } => Tally::forbid(count_of(client, sql).await?, error)?,
            Step::Estimate {
                rows,
                count: exact,
                exact_below,
            } => {
                let explain = format!("EXPLAIN (FORMAT JSON) {}", rows.text);
                let plan: serde_json::Value =
                    client.query_one(&explain, &rows.params).await?.get(0);
                let estimate = plan[0]["Plan"]["Plan Rows"]
                    .as_f64()
                    .map(|n| n.max(0.0) as u64);
                tally.counted(match (estimate, exact_below) {
                    (Some(n), Some(limit)) if n >= *limit => n,
                    (Some(n), None) => n,
                    _ => count_of(client, exact).await?,
                });
            }
            Step::Explain(sql) => {
                let rows = client.query(&sql.text, &sql.params).await?;
                let plan = match rows.first().map(|r| r.columns()[0].type_().clone()) {
                    Some(Type::JSON) => {
                        let value: serde_json::Value = rows[0].get(0);
                        value.to_string()
                    }
                    _ => rows
                        .iter()
                        .map(|r| r.get::<_, String>(0))
                        .collect::<Vec<_>>()
                        .join("\n"),
                };
                tally.valued(plan.into_bytes());
            }
            Step::Value(sql) => {
                let text = format!(
                    "WITH _r AS ({}) SELECT (SELECT value FROM json_each(row_to_json(_r)) LIMIT 1)::text FROM _r LIMIT 1",
                    sql.text
                );
                let found = client.query_opt(&text, &sql.params).await?;
                let json: Option<String> = found.and_then(|r| r.get(0));
                tally.valued(json.unwrap_or_else(|| "null".into()).into_bytes());
            }
        }
    }
    if rows.is_empty() {
        rows.push_str("[]");
    }
    let rows = match job.format {
        Format::Json | Format::JsonNullsStripped => rows.into_bytes(),
        Format::Csv => json_to_csv(&rows, &csv_columns.unwrap_or_default())?,
    };
    tally.finish(job, rows)
}

/// The one integer of a `SELECT count(*) …`.
async fn count_of(client: &Session<'_>, sql: &Sql) -> Result<u64, DbError> {
    let n: i64 = client.query_one(&sql.text, &sql.params).await?.get(0);
    Ok(u64::try_from(n).unwrap_or(0))
}

/// Appends the elements of JSON array `json` to the array being built in `acc`.
fn append_json_array(acc: &mut String, json: &str) {
    let inner = json.trim();
    let inner = &inner[1..inner.len().saturating_sub(1).max(1)];
    if inner.trim().is_empty() {
        return;
    }
    if acc.is_empty() {
        acc.push('[');
    } else {
        acc.pop();
        acc.push(',');
    }
    acc.push_str(inner);
    acc.push(']');
}

/// The statement's rows as one compact JSON array built by PostgreSQL (without null members,
/// at any depth, when `strip_nulls`), and how many there are. With `sorted` (a write's
/// representation), the rows end in hidden columns after its keys that say their order: they
/// are ordered by them in the aggregate, where PostgreSQL guarantees an order, and left out of
/// each row's JSON.
async fn json_rows(
    client: &Session<'_>,
    sql: &Sql,
    strip_nulls: bool,
    sorted: Option<&OutputShape>,
) -> Result<(String, u64), DbError> {
    use rowgate_query::render::Dialect as _;
    let quote = |name: &str| rowgate_query::render::Postgres.quote_ident(name);
    let record = match sorted {
        None => "_r".to_string(),
        Some(shape) => {
            let keys: Vec<String> = shape
                .keys
                .iter()
                .map(|k| format!("_r.{}", quote(k)))
                .collect();
            format!("(SELECT _k FROM (SELECT {}) AS _k)", keys.join(", "))
        }
    };
    let row = if strip_nulls {
        format!("json_strip_nulls(row_to_json({record}))")
    } else {
        format!("row_to_json({record})")
    };
    let order = match sorted {
        None => String::new(),
        Some(shape) => {
            let terms: Vec<String> = shape
                .sort
                .iter()
                .enumerate()
                .map(|(n, key)| {
                    format!(
                        "_r.{} {} NULLS {}",
                        quote(&format!("_rg_sort_{n}")),
                        if key.descending { "DESC" } else { "ASC" },
                        if key.nulls_first { "FIRST" } else { "LAST" }
                    )
                })
                .collect();
            format!(" ORDER BY {}", terms.join(", "))
        }
    };
    let materialized = if client.materialize {
        "MATERIALIZED "
    } else {
        ""
    };
    let text = format!(
        "WITH _r AS {materialized}({}) SELECT coalesce('[' || string_agg({row}::text, ','{order}) || ']', '[]'), count(*) FROM _r",
        sql.text
    );
    let row = client.query_one(&text, &sql.params).await?;
    let n: i64 = row.get(1);
    Ok((row.get(0), u64::try_from(n).unwrap_or(0)))
}

async fn check_if_match(
    client: &Session<'_>,
    current: &Sql,
    _shape: &OutputShape,
    tags: &[String],
) -> Result<(), DbError> {
    let (json, n) = json_rows(client, current, false, None).await?;
    crate::job::check_if_match(n, json.as_bytes(), tags)
}

fn bound(params: &[Value]) -> Vec<AsText> {
    params.iter().map(as_text).collect()
}

fn refs(params: &[AsText]) -> Vec<&(dyn ToSql + Sync)> {
    params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
}

/// One job's connection, and how it runs statements: prepared once per connection and kept
/// (`prepare_cached`), or, when statements are not kept, unnamed, parsed with each execution
/// (their parameters' types left to the server, as a prepared statement's are).
struct Session<'c> {
    client: &'c deadpool_postgres::Object,
    prepared: bool,
    /// The rows a statement gives are aggregated from a materialized CTE ([`Postgres::citus`]).
    materialize: bool,
}

impl Session<'_> {
    /// The rows of `text` with `params`.
    async fn query(
        &self,
        text: &str,
        params: &[Value],
    ) -> Result<Vec<tokio_postgres::Row>, DbError> {
        let values = bound(params);
        if self.prepared {
            let stmt = self.client.prepare_cached(text).await?;
            return Ok(self.client.query(&stmt, &refs(&values)).await?);
        }
        Ok(self.client.query_typed(text, &unprepared(&values)).await?)
    }

    /// The rows `text` with `params` changes.
    async fn execute(&self, text: &str, params: &[Value]) -> Result<u64, DbError> {
        let values = bound(params);
        if self.prepared {
            let stmt = self.client.prepare_cached(text).await?;
            return Ok(self.client.execute(&stmt, &refs(&values)).await?);
        }
        let rows = self
            .client
            .query_typed_raw(text, unprepared(&values))
            .await?;
        futures_util::pin_mut!(rows);
        while futures_util::TryStreamExt::try_next(&mut rows)
            .await?
            .is_some()
        {}
        Ok(rows.rows_affected().unwrap_or(0))
    }

    /// The first row of `text` with `params`, if any.
    async fn query_opt(
        &self,
        text: &str,
        params: &[Value],
    ) -> Result<Option<tokio_postgres::Row>, DbError> {
        Ok(self.query(text, params).await?.into_iter().next())
    }

    /// The one row of an aggregate query.
    async fn query_one(
        &self,
        text: &str,
        params: &[Value],
    ) -> Result<tokio_postgres::Row, DbError> {
        self.query_opt(text, params)
            .await?
            .ok_or_else(|| DbError::internal("an aggregate query returned no row"))
    }

    /// The names of the columns `text` answers (a statement prepared for the while when
    /// statements are not kept).
    async fn column_names(&self, text: &str) -> Result<Vec<String>, DbError> {
        let stmt = if self.prepared {
            self.client.prepare_cached(text).await?
        } else {
            self.client.prepare(text).await?
        };
        Ok(stmt
            .columns()
            .iter()
            .map(|c| c.name().to_string())
            .collect())
    }
}

/// Parameters of an unnamed statement, each of the unspecified type (oid 0): the server infers
/// it from the statement, as it does for a prepared one.
fn unprepared(values: &[AsText]) -> Vec<(&(dyn ToSql + Sync), Type)> {
    let unspecified = Type::new(
        "unspecified".into(),
        0,
        tokio_postgres::types::Kind::Pseudo,
        "pg_catalog".into(),
    );
    values
        .iter()
        .map(|v| (v as &(dyn ToSql + Sync), unspecified.clone()))
        .collect()
}

/// A JSON array of objects as CSV with a header line of `columns` (in the statement's order).
fn json_to_csv(json: &str, columns: &[String]) -> Result<Vec<u8>, DbError> {
    let rows: Vec<serde_json::Map<String, serde_json::Value>> =
        serde_json::from_str(json).map_err(DbError::internal)?;
    let mut writer = csv::WriterBuilder::new()
        .terminator(csv::Terminator::CRLF)
        .from_writer(Vec::new());
    writer.write_record(columns).map_err(DbError::internal)?;
    for row in &rows {
        let fields: Vec<String> = columns
            .iter()
            .map(|c| match row.get(c) {
                None | Some(serde_json::Value::Null) => String::new(),
                Some(serde_json::Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
            })
            .collect();
        writer.write_record(&fields).map_err(DbError::internal)?;
    }
    writer.into_inner().map_err(DbError::internal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_arrays_append() {
        let mut acc = String::new();
        append_json_array(&mut acc, "[]");
        assert_eq!(acc, "");
        append_json_array(&mut acc, "[{\"a\":1}]");
        append_json_array(&mut acc, "[{\"a\":2},{\"a\":3}]");
        assert_eq!(acc, "[{\"a\":1},{\"a\":2},{\"a\":3}]");
        let csv = json_to_csv(&acc, &["a".to_string()]).expect("csv");
        assert_eq!(
            String::from_utf8(csv).expect("utf8"),
            "a\r\n1\r\n2\r\n3\r\n"
        );
    }
}
