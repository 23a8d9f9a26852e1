//! Connecting to PostgreSQL, and saying why it failed in one sentence: where (`host:port`, the
//! database and the user, never the password) and the reason once (the server's message, or the
//! system's: connection refused, unknown host, no answer). The errors of tokio-postgres and
//! deadpool repeat their causes in their chains ("Error occurred while creating a new object:
//! db error: db error: FATAL: …"); the messages made here have no chain.

use std::time::Duration;

use deadpool_postgres::{PoolError, TimeoutType};
use tokio_postgres::config::Host;
use tokio_postgres::error::SqlState;
use tokio_postgres::tls::NoTlsStream;
use tokio_postgres::{Client, Config, Connection, NoTls, Socket};

/// Where `config` points: `host:port`, or a Unix socket's folder and port; the hosts of a
/// multi-host URL comma-separated (`a:5432,b:5432`).
pub fn address(config: &Config) -> String {
    let ports = config.get_ports();
    let port = |i: usize| {
        ports
            .get(i)
            .or_else(|| (ports.len() == 1).then(|| &ports[0]))
            .copied()
            .unwrap_or(5432)
    };
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| match host {
            Host::Tcp(host) => format!("{host}:{}", port(i)),
            Host::Unix(path) => format!("{}:{}", path.display(), port(i)),
        })
        .collect();
    if hosts.is_empty() {
        format!("localhost:{}", port(0))
    } else {
        hosts.join(",")
    }
}

/// `config` with what following a primary among several hosts needs when the URL leaves it
/// out: a connect timeout per host (a host that answers nothing must not use up the whole
/// wait before the next is tried) and TCP keepalives that notice a vanished server within
/// seconds rather than the system's two hours. `wait` is the whole wait for a connection.
pub fn with_failover_defaults(mut config: Config, url: &str, wait: Duration) -> Config {
    let given = |key: &str| url.contains(key);
    let hosts = config.get_hosts().len().max(1) as u32;
    if hosts > 1 && !given("connect_timeout") {
        config.connect_timeout((wait / hosts).max(Duration::from_millis(250)));
    }
    if !given("keepalives_idle") {
        config.keepalives_idle(Duration::from_secs(10));
    }
    if !given("keepalives_interval") {
        config.keepalives_interval(Duration::from_secs(3));
    }
    if !given("keepalives_retries") {
        config.keepalives_retries(3);
    }
    config
}

/// Whether `config` asks for the read-write server of its hosts (`target_session_attrs=
/// read-write`: the primary, wherever it is now).
pub fn follows_primary(config: &Config) -> bool {
    config.get_target_session_attrs() == tokio_postgres::config::TargetSessionAttrs::ReadWrite
}

/// Where and as whom `config` connects: `host:port (database "d", user "u")`.
pub fn target(config: &Config) -> String {
    let user = config.get_user().unwrap_or_default();
    // PostgreSQL's default database is the user's name
    let database = config.get_dbname().unwrap_or(user);
    format!("{} (database {database:?}, user {user:?})", address(config))
}

/// Why a connection failed, each cause once: the server's message with its detail and hint, or
/// tokio-postgres's words and the system's reason ("error connecting to server: Connection
/// refused (os error 111)").
pub fn reason(e: &tokio_postgres::Error) -> String {
    if let Some(db) = e.as_db_error() {
        let mut text = db.message().to_string();
        for extra in [db.detail(), db.hint()].into_iter().flatten() {
            text.push_str(&format!(" ({extra})"));
        }
        if db.code() == &SqlState::INVALID_CATALOG_NAME {
            text.push_str(
                " on that server: create it (`createdb NAME`; then `rowgate demo init --db URL` \
                 for the demo) or fix db.url",
            );
        }
        return text;
    }
    let mut parts: Vec<String> = Vec::new();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = cause {
        let text = error.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        cause = error.source();
    }
    parts.join(": ")
}

/// The error of a connection to `config` that failed with `e`.
pub fn failure(config: &Config, e: &tokio_postgres::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot connect to PostgreSQL at {}: {}",
        target(config),
        reason(e)
    )
}

/// Why a pool of connections to `target` (see [`target`]) gave none: a connection that
/// failed, or none made or freed within `wait`.
pub fn pool_failure(target: &str, e: &PoolError, wait: Duration) -> String {
    match e {
        PoolError::Backend(e) => format!("cannot connect to PostgreSQL at {target}: {}", reason(e)),
        PoolError::Timeout(TimeoutType::Create) => format!(
            "cannot connect to PostgreSQL at {target}: no answer within {} ms \
             (db.acquire_timeout_ms)",
            wait.as_millis()
        ),
        PoolError::Timeout(_) => format!(
            "no free connection to PostgreSQL at {target} within {} ms (db.pool_size, \
             db.acquire_timeout_ms)",
            wait.as_millis()
        ),
        other => format!("no connection to PostgreSQL at {target}: {other}"),
    }
}

/// One connection to the database at `url` (`rowgate db setup`, `demo init`, the listeners).
pub async fn connect(url: &str) -> anyhow::Result<(Client, Connection<Socket, NoTlsStream>)> {
    let config: Config = url
        .parse()
        .map_err(|e| anyhow::anyhow!("invalid PostgreSQL URL: {}", reason(&e)))?;
    connect_with(&with_failover_defaults(config, url, Duration::from_secs(5))).await
}

/// One connection as `config` says.
pub async fn connect_with(
    config: &Config,
) -> anyhow::Result<(Client, Connection<Socket, NoTlsStream>)> {
    config.connect(NoTls).await.map_err(|e| failure(config, &e))
}

/// The connection settings of `url` (user, password, database, options, TLS mode, timeouts)
/// for another server of the same cluster, at `host:port`: a Citus worker, as the coordinator
/// names it.
pub fn at_node(url: &str, host: &str, port: u16) -> anyhow::Result<Config> {
    let base: Config = url
        .parse()
        .map_err(|e| anyhow::anyhow!("invalid PostgreSQL URL: {}", reason(&e)))?;
    let mut node = Config::new();
    node.host(host).port(port).ssl_mode(base.get_ssl_mode());
    if let Some(user) = base.get_user() {
        node.user(user);
    }
    if let Some(password) = base.get_password() {
        node.password(password);
    }
    if let Some(dbname) = base.get_dbname() {
        node.dbname(dbname);
    }
    if let Some(options) = base.get_options() {
        node.options(options);
    }
    if let Some(name) = base.get_application_name() {
        node.application_name(name);
    }
    if let Some(timeout) = base.get_connect_timeout() {
        node.connect_timeout(*timeout);
    }
    Ok(with_failover_defaults(node, url, Duration::from_secs(5)))
}
