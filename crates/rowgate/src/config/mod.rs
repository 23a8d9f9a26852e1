//! Configuration: one TOML file (`rowgate.toml`), every key overridable by a `ROWGATE_*`
//! environment variable and by CLI flags (precedence file < env < CLI). Each key is defined once,
//! as a field of the structs below (its doc comment and its default beside it); [`keys`] reads
//! the keys and their environment variables off the defaults.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};

pub mod resources;

use resources::ResourceConfig;

/// The whole configuration.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Address to listen on.
    pub listen: String,
    /// Proxies (IP addresses or CIDR blocks) whose `X-Forwarded-For`, `-Host` and `-Proto`
    /// headers are believed; from any other peer they are ignored. Empty: none is trusted.
    pub trusted_proxies: Vec<String>,
    /// Database settings.
    pub db: DbConfig,
    /// REST API settings.
    pub rest: RestConfig,
    /// Request limits.
    pub limits: LimitsConfig,
    /// Log filter (tracing `EnvFilter` syntax).
    pub log: String,
    /// A folder of `*.toml` files with more `[[resources]]` (relative to the config file).
    pub resources_dir: PathBuf,
    /// Custom resources (`[[resources]]`), see [`crate::resources`].
    pub resources: Vec<ResourceConfig>,
    /// Tokens, clients and the anonymous role (`[auth]`), see [`crate::auth`].
    pub auth: AuthConfig,
    /// What each role may do with each table (`[[grants]]`); nothing is granted otherwise.
    pub grants: Vec<GrantConfig>,
    /// JSON-relational duality views (`[[duality_views]]`), see [`crate::duality`].
    pub duality_views: Vec<crate::duality::DualityViewConfig>,
    /// Worker processes (`[supervisor]`), see [`crate::supervisor`].
    pub supervisor: SupervisorConfig,
    /// Who may read `/metrics` (`[metrics]`), see [`crate::observe`].
    pub metrics: MetricsConfig,
    /// One line per request (`[access_log]`), see [`crate::observe::access`].
    pub access_log: AccessLogConfig,
    /// Change feeds (`[realtime]`), see [`crate::realtime`].
    pub realtime: RealtimeConfig,
    /// The ORDS front end (`[ords]`), see [`crate::ords`].
    pub ords: OrdsConfig,
    /// Browser origins (`[cors]`), see [`crate::cors`].
    pub cors: CorsConfig,
    /// Answers kept for repeated reads (`[cache]`), see [`crate::cache`].
    pub cache: CacheConfig,
    /// The admin console at `/_/` (`[console]`), see [`crate::console`].
    pub console: ConsoleConfig,
    /// People's accounts with Supabase Auth's API at `/auth/v1` (`[accounts]`), see
    /// [`crate::accounts`].
    pub accounts: AccountsConfig,
    /// Where files the configuration names (templates, `resources_dir`) are read from: the
    /// config file's folder (or the working directory), or the files built into the binary
    /// for `--demo`.
    #[serde(skip)]
    pub dir: ConfigDir,
}

/// Where relative paths in the configuration are resolved.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigDir {
    /// A folder on disk.
    Path(PathBuf),
    /// Files compiled into the binary: `(relative path, contents)`.
    Embedded(&'static [(&'static str, &'static str)]),
}

impl Default for ConfigDir {
    fn default() -> Self {
        ConfigDir::Path(PathBuf::from("."))
    }
}

impl ConfigDir {
    /// A path named by the configuration, on disk: relative to the configuration's folder (the
    /// working directory for the built-in demo configuration).
    pub fn resolve(&self, path: &Path) -> PathBuf {
        match self {
            ConfigDir::Path(dir) => dir.join(path),
            ConfigDir::Embedded(_) => path.to_path_buf(),
        }
    }

    /// Reads a file named relative to this folder.
    pub fn read(&self, relative: &Path) -> std::io::Result<String> {
        match self {
            ConfigDir::Path(dir) => std::fs::read_to_string(dir.join(relative)),
            ConfigDir::Embedded(files) => files
                .iter()
                .find(|(name, _)| Path::new(name) == relative)
                .map(|(_, text)| (*text).to_string())
                .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound)),
        }
    }

    /// The `*.toml` files of a sub-folder, in name order, with their contents.
    pub fn toml_files(&self, folder: &Path) -> anyhow::Result<Vec<(PathBuf, String)>> {
        let is_toml = |p: &Path| p.extension().is_some_and(|e| e == "toml");
        let mut files = Vec::new();
        match self {
            ConfigDir::Path(dir) => {
                let folder = dir.join(folder);
                let entries = std::fs::read_dir(&folder)
                    .with_context(|| format!("reading resources_dir {}", folder.display()))?;
                for entry in entries {
                    let path = entry?.path();
                    if is_toml(&path) {
                        let text = std::fs::read_to_string(&path)
                            .with_context(|| format!("reading {}", path.display()))?;
                        files.push((path, text));
                    }
                }
            }
            ConfigDir::Embedded(all) => {
                for (name, text) in all.iter() {
                    let path = Path::new(name);
                    if path.parent() == Some(folder) && is_toml(path) {
                        files.push((path.to_path_buf(), (*text).to_string()));
                    }
                }
            }
        }
        files.sort();
        Ok(files)
    }
}

/// `[db]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct DbConfig {
    /// Path of the SQLite database file, or a PostgreSQL URL (`postgres://user@host:port/db`).
    pub path: PathBuf,
    /// A PostgreSQL URL; when set it is the database (it replaces `path`).
    pub url: String,
    /// Read replicas of the PostgreSQL database (URLs): reads go to them in turn, writes,
    /// realtime and the schema to the primary (see `docs/deployment.md`).
    pub replicas: Vec<String>,
    /// A replica further behind the primary than this takes no reads until it catches up.
    pub replica_max_lag_ms: u64,
    /// A read that must see a write (`Rowgate-Position`) waits up to this long for a replica
    /// to replay it, then runs on the primary (0: at once).
    pub replica_wait_ms: u64,
    /// How often the replicas' health and lag are checked.
    pub replica_check_ms: u64,
    /// Number of reader threads (each owns a read-only connection); 0 = number of CPUs.
    pub readers: usize,
    /// Per-statement timeout in milliseconds (0 = none).
    pub statement_timeout_ms: u64,
    /// How long to wait for a lock held by another process, in milliseconds.
    pub busy_timeout_ms: u64,
    /// SQLite: the longest string or blob a statement may build, in bytes (a value growing past
    /// it fails the statement at once, instead of running on past the statement timeout).
    pub max_value_bytes: u64,
    /// How often to check `PRAGMA schema_version` for outside schema changes, in milliseconds.
    pub schema_poll_ms: u64,
    /// Run short reads on the request's own thread; long ones move to the reader threads.
    pub inline_reads: bool,
    /// PostgreSQL: most pooled connections.
    pub pool_size: usize,
    /// PostgreSQL: pooled connections that reads of one statement outside a transaction share,
    /// their statements pipelined (sent while the ones before them run), instead of each read
    /// taking a connection to itself: fewer round trips and wake-ups per read on both sides.
    /// A statement waits for those ahead of it on its connection; past 16 in flight on each,
    /// or with a slow statement holding each up, a read takes its own. At most
    /// `pool_size - 1` (the others are for writes and transactions); 0: every read takes its
    /// own connection.
    pub shared_reads: usize,
    /// PostgreSQL: how long a request waits for a free connection before a 503, in ms.
    pub acquire_timeout_ms: u64,
    /// PostgreSQL: a pooled connection older than this many seconds is closed instead of
    /// reused (0 = kept while it works).
    pub max_lifetime_s: u64,
    /// PostgreSQL: exposed schemas, comma-separated, in search order.
    pub schemas: String,
    /// PostgreSQL: schemas searched after the request's own, comma-separated (PostgREST's
    /// `db-extra-search-path`): where extensions' types, operators and functions live.
    pub extra_search_path: String,
    /// PostgreSQL: a function (`schema.name`) every API request's transaction calls after its
    /// settings (PostgREST's `db-pre-request`): it may refuse the request by raising, or set
    /// `response.headers`/`response.status`; empty for none.
    pub pre_request: String,
    /// PostgreSQL: prepare each statement once per connection and keep it (PostgREST's
    /// `db-prepared-statements`); off for a pooler in transaction mode (PgBouncer's,
    /// Supavisor's), which cannot keep a statement between transactions.
    pub prepared_statements: bool,
    /// PostgreSQL: settings a function call's transaction starts with, as PostgREST's
    /// `app.settings.*` (`"app.settings.app_host" = "localhost"`, read by
    /// `current_setting('app.settings.app_host')`): dotted names, string values.
    pub settings: std::collections::BTreeMap<String, String>,
}

/// The database a configuration names, resolved once: a SQLite file or a PostgreSQL URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DbTarget {
    /// A SQLite database file.
    Sqlite(PathBuf),
    /// A PostgreSQL connection URL.
    Postgres(String),
}

impl DbTarget {
    /// What `location` names: a `postgres://` (or `postgresql://`) URL, else a SQLite file.
    pub fn parse(location: &str) -> DbTarget {
        if location.starts_with("postgres://") || location.starts_with("postgresql://") {
            DbTarget::Postgres(location.to_string())
        } else {
            DbTarget::Sqlite(PathBuf::from(location))
        }
    }
}

impl DbConfig {
    /// The database: `url` when set, else `path` (a file, or a PostgreSQL URL).
    pub fn target(&self) -> DbTarget {
        if self.url.is_empty() {
            DbTarget::parse(&self.path.to_string_lossy())
        } else {
            DbTarget::parse(&self.url)
        }
    }

    /// The exposed PostgreSQL schemas.
    pub fn schema_list(&self) -> Vec<String> {
        names(&self.schemas)
    }

    /// The schemas searched after the request's own.
    pub fn extra_search_list(&self) -> Vec<String> {
        names(&self.extra_search_path)
    }
}

/// The names of a comma-separated list.
fn names(list: &str) -> Vec<String> {
    list.split(',')
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// `[auth]`: how tokens are issued and checked. The signing secret never sits in this file: it
/// comes from `secret_file` (created, mode 0600, on first use) or `ROWGATE_AUTH_SECRET`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// File holding the server's master secret (client-secret pepper and HS256 key are derived
    /// from it), relative to the configuration's folder.
    pub secret_file: PathBuf,
    /// `iss` of the tokens this server issues (and expects).
    pub issuer: String,
    /// `aud` of the tokens this server issues (and expects).
    pub audience: String,
    /// Longest token lifetime in seconds; a client's own `ttl` may only be shorter.
    pub max_token_ttl_s: u64,
    /// The role of requests without a token.
    pub anon_role: String,
    /// How often the running server re-reads the client table (new, rotated, revoked clients),
    /// in milliseconds.
    pub clients_poll_ms: u64,
    /// Failed token requests allowed per client and per address in a minute before 429.
    pub max_failures_per_minute: u32,
    /// Tokens of other issuers accepted for bearer auth (`[[auth.external]]`).
    pub external: Vec<ExternalIssuer>,
    /// PostgreSQL only: each request's transaction switches to the database role its token
    /// names (`anon_role` without a token), PostgREST's and Supabase's model, so the
    /// database's GRANTs and row-level security policies decide what it sees and changes.
    /// The connecting user must be a member of every such role (`GRANT anon TO
    /// authenticator`) and should own nothing. A role with no `[[grants]]` of its own is then
    /// the database's to decide; a role with grants is narrowed by them too.
    pub database_roles: bool,
}

/// An outside identity provider whose JWTs are accepted.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ExternalIssuer {
    /// Expected `iss`; with a shared secret, `""` takes tokens without one (PostgREST's).
    pub issuer: String,
    /// Expected `aud` (required with a JWKS; with a shared secret, `""` leaves it unchecked, as
    /// Supabase's anon and service-role keys carry none).
    #[serde(default)]
    pub audience: String,
    /// A JWKS file (`{"keys": [...]}`); a token's `kid` picks the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwks_file: Option<PathBuf>,
    /// An environment variable holding a shared HS256 secret (PostgREST's `jwt-secret`,
    /// Supabase's JWT secret), so that the tokens of an existing deployment keep working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_env: Option<String>,
    /// Or a file holding that secret (relative to the configuration's folder), such as a
    /// systemd credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_file: Option<PathBuf>,
    /// The claim that names the role (default `role`), or a path to it as PostgREST's
    /// `jwt-role-claim-key` writes one (`.app_metadata.role`).
    #[serde(default = "default_role_claim")]
    pub role_claim: String,
    /// Whether a token must carry `exp` (with a shared secret; default true). PostgREST takes
    /// tokens without one: `false` keeps an existing deployment's never-expiring tokens working.
    #[serde(default = "default_true")]
    pub require_exp: bool,
}

fn default_role_claim() -> String {
    "role".into()
}

fn default_true() -> bool {
    true
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            secret_file: PathBuf::from("rowgate.secret"),
            issuer: "rowgate".into(),
            audience: "rowgate".into(),
            max_token_ttl_s: 3600,
            anon_role: "anon".into(),
            clients_poll_ms: 1000,
            max_failures_per_minute: 10,
            external: Vec::new(),
            database_roles: false,
        }
    }
}

/// One `[[grants]]` entry: what `role` may do with `table` (`*`: every table without an entry
/// of its own).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GrantConfig {
    /// The role.
    pub role: String,
    /// Table or view names (or `"*"`).
    #[serde(default)]
    pub tables: Vec<String>,
    /// Allowed operations on the tables: `select`, `insert`, `update`, `delete`.
    #[serde(default)]
    pub ops: Vec<String>,
    /// Database functions the role may call at `/{prefix}/rpc/{name}` (or `"*"`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<String>,
    /// Columns the role may read (and filter and order by); all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_columns: Option<Vec<String>>,
    /// Columns the role may write; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_columns: Option<Vec<String>>,
    /// Row filter in the REST filter syntax, token claims as `@claim` (`owner=eq.@sub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
}

/// `[supervisor]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct SupervisorConfig {
    /// Worker processes; 0 runs one process without a supervisor.
    pub workers: usize,
    /// Where the supervisor writes its pid (and its state, with `.json` appended); none when
    /// empty.
    pub pid_file: PathBuf,
    /// Replace a worker after this many requests (0: never).
    pub max_requests: u64,
    /// Replace a worker whose resident memory passes this many MiB (0: never).
    pub max_rss_mb: u64,
    /// The first pause before restarting a worker that keeps dying, in milliseconds; it
    /// doubles with each quick death in a row, up to 5 s.
    pub restart_backoff_ms: u64,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            workers: 1,
            pid_file: PathBuf::new(),
            max_requests: 0,
            max_rss_mb: 0,
            restart_backoff_ms: 100,
        }
    }
}

/// `[metrics]`: the Prometheus text at `/metrics`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Serve `/metrics` at all.
    pub enabled: bool,
    /// Answer requests from loopback addresses without a token (turn off behind a proxy on
    /// the same host, which makes every client look local).
    pub loopback: bool,
    /// Roles (from a bearer token) that may read the metrics from anywhere.
    pub roles: Vec<String>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            enabled: true,
            loopback: true,
            roles: Vec::new(),
        }
    }
}

/// `[console]`: the admin console in the browser at `/_/`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ConsoleConfig {
    /// Serve the console at `/_/` at all.
    pub enabled: bool,
    /// Roles (from a bearer token) that may use it: its statistics, clients, configuration and
    /// log. Tables are browsed and edited with the role's own grants.
    pub roles: Vec<String>,
    /// An address of its own for the console (`127.0.0.1:8081`): `/_/` is served there only,
    /// with the API beside it for the page; empty: on `listen`, with the API.
    pub listen: String,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            roles: vec!["admin".into()],
            listen: String::new(),
        }
    }
}

/// `[accounts]`: people's accounts (sign-up, sign-in, sessions) with Supabase Auth's API at
/// `/auth/v1`, stored in the database (`auth.users` and its siblings on PostgreSQL, in
/// Supabase's shapes; `_rowgate_auth_*` tables on SQLite).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccountsConfig {
    /// Serve `/auth/v1` at all.
    pub enabled: bool,
    /// `iss` of the access tokens issued to people. When an `[[auth.external]]` issuer of that
    /// name has a shared secret (Supabase's JWT secret), tokens are signed with it, so that the
    /// project's anon and service-role keys and its other services keep working; otherwise
    /// with this server's own key. Empty: `auth.issuer` followed by `/auth/v1`.
    pub issuer: String,
    /// `aud` of those tokens (Supabase's `authenticated`).
    pub audience: String,
    /// The role a new account's tokens carry (Supabase's `authenticated`).
    pub role: String,
    /// Roles (from a bearer token) that may use the admin endpoints (`/auth/v1/admin/…`).
    pub admin_roles: Vec<String>,
    /// Lifetime of an access token, in seconds.
    pub jwt_exp_s: u64,
    /// Where the app lives: links in emails and redirects lead there.
    pub site_url: String,
    /// Whether anyone may sign up (`POST /auth/v1/signup`); admins can always create accounts.
    pub signup: bool,
    /// New accounts are confirmed at once, without an email (Supabase's `mailer_autoconfirm`);
    /// `false` sends a confirmation link and code (needs `smtp_url`).
    pub autoconfirm: bool,
    /// Shortest password accepted (Supabase's default is 6; NIST SP 800-63B asks for 8).
    pub min_password_length: usize,
    /// Character classes a password must contain, as Supabase's setting:
    /// `""`, `"letters_digits"`, `"lower_upper_letters_digits"` or
    /// `"lower_upper_letters_digits_symbols"`.
    pub password_requirements: String,
    /// A refresh token already used may be used again within this many seconds (two tabs
    /// refreshing at once, an answer lost on the way): it gets the same new token. Later, its
    /// reuse is taken for theft and revokes every token of its session.
    pub refresh_reuse_interval_s: u64,
    /// Argon2id memory cost in KiB (OWASP's 19 MiB by default).
    pub argon2_memory_kib: u32,
    /// Argon2id passes.
    pub argon2_iterations: u32,
    /// Threads per worker that hash passwords (off the threads that serve requests, at the
    /// lowest priority).
    pub password_workers: usize,
    /// Password checks that may wait for a hashing thread; past it, 429.
    pub password_queue: usize,
    /// Failed sign-ins allowed per email address from one client address a minute (ten times
    /// as many per client address), then 429; and failed codes per email address.
    pub max_failed_sign_ins_per_minute: u32,
    /// Sign-ups allowed per client address an hour, then 429.
    pub max_sign_ups_per_hour: u32,
    /// Largest `user_metadata` (and `app_metadata`), in bytes of JSON.
    pub max_metadata_bytes: usize,
    /// The SMTP server email is sent through (`smtp://host:25` plain, `smtp://host:587?tls=required`
    /// with STARTTLS, `smtps://user:password@host:465`); empty: no email (accounts are then
    /// confirmed at once, and recovery, magic links and one-time codes are off).
    pub smtp_url: String,
    /// The sender of those emails.
    pub email_from: String,
    /// A folder of templates replacing the built-in emails (`confirmation.html`,
    /// `magic_link.html`, `recovery.html`, `email_change.html`; minijinja, first line
    /// `Subject: …`), relative to the configuration's folder.
    pub email_templates_dir: PathBuf,
    /// This server's address as the people's browsers reach it, for the links in emails
    /// (needed with `smtp_url`; never taken from a request's `Host`).
    pub external_url: String,
    /// Where links may send people after they are followed, besides `site_url` (URLs; a `*` at
    /// the end takes any path under one).
    pub redirect_urls: Vec<String>,
    /// How long a link or one-time code in an email is valid, in seconds.
    pub otp_exp_s: u64,
    /// The least time between two emails of one kind to one account, in seconds.
    pub email_every_s: u64,
    /// Whether people may enroll and verify TOTP second factors (`/auth/v1/factors`).
    pub mfa_totp: bool,
    /// Most factors one account may have (verified or not).
    pub mfa_max_factors: usize,
    /// How long a second-factor challenge may be answered, in seconds (and how long an
    /// unverified factor is kept).
    pub mfa_challenge_exp_s: u64,
}

impl Default for AccountsConfig {
    fn default() -> Self {
        AccountsConfig {
            enabled: false,
            issuer: String::new(),
            audience: "authenticated".into(),
            role: "authenticated".into(),
            admin_roles: vec!["service_role".into()],
            jwt_exp_s: 3600,
            site_url: "http://localhost:3000".into(),
            signup: true,
            autoconfirm: true,
            min_password_length: 8,
            password_requirements: String::new(),
            refresh_reuse_interval_s: 10,
            argon2_memory_kib: 19_456,
            argon2_iterations: 2,
            password_workers: 1,
            password_queue: 64,
            max_failed_sign_ins_per_minute: 10,
            max_sign_ups_per_hour: 30,
            max_metadata_bytes: 16 * 1024,
            smtp_url: String::new(),
            email_from: "Rowgate <no-reply@localhost>".into(),
            email_templates_dir: PathBuf::new(),
            external_url: String::new(),
            redirect_urls: Vec::new(),
            otp_exp_s: 3600,
            email_every_s: 60,
            mfa_totp: true,
            mfa_max_factors: 10,
            mfa_challenge_exp_s: 300,
        }
    }
}

impl AccountsConfig {
    /// The `iss` of people's tokens (`issuer`, or the server's own followed by `/auth/v1`).
    pub fn token_issuer(&self, auth: &AuthConfig) -> String {
        if self.issuer.is_empty() {
            format!("{}/auth/v1", auth.issuer.trim_end_matches('/'))
        } else {
            self.issuer.clone()
        }
    }
}

/// `[access_log]`: one line per answered request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct AccessLogConfig {
    /// `off`, `json` or `logfmt`.
    pub format: AccessLogFormat,
    /// The file the lines are appended to; standard output when empty.
    pub path: PathBuf,
    /// Lines each worker keeps in memory for the console's log view (0: none).
    pub recent: usize,
}

impl Default for AccessLogConfig {
    fn default() -> Self {
        AccessLogConfig {
            format: AccessLogFormat::Off,
            path: PathBuf::new(),
            recent: 1000,
        }
    }
}

/// `access_log.format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessLogFormat {
    /// No access log.
    #[default]
    Off,
    /// A JSON object per line.
    Json,
    /// `key=value` pairs per line (logfmt).
    Logfmt,
}

/// `[cache]`: encoded answers to reads, kept while the database has not changed (SQLite).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CacheConfig {
    /// Keep answers to GET requests and serve them again until the next commit (SQLite; on
    /// PostgreSQL with `postgres_poll_ms`).
    pub enabled: bool,
    /// The most memory the kept answers may take, in MiB.
    pub max_mb: u64,
    /// Answers larger than this many KiB are not kept.
    pub max_entry_kb: u64,
    /// PostgreSQL: how often the primary's WAL position is read to end kept answers after
    /// commits made elsewhere, in milliseconds (0, the default: no cache on PostgreSQL, whose
    /// commits made elsewhere could otherwise be missed for up to this long).
    pub postgres_poll_ms: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: true,
            max_mb: 16,
            max_entry_kb: 256,
            postgres_poll_ms: 0,
        }
    }
}

/// `[cors]`: which browser origins may call the server (CORS).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CorsConfig {
    /// Origins allowed (`https://app.example.com`); `*` any (PostgREST's default); none turns
    /// CORS off.
    pub origins: Vec<String>,
    /// Allow credentials (cookies, HTTP authentication): the origin is echoed, never `*`.
    pub allow_credentials: bool,
    /// How long a browser may cache a preflight's answer, in seconds.
    pub max_age_s: u64,
}

impl Default for CorsConfig {
    fn default() -> Self {
        CorsConfig {
            origins: vec!["*".into()],
            allow_credentials: false,
            max_age_s: 86_400,
        }
    }
}

/// `[ords]`: Oracle REST Data Services' AutoREST URLs, `/ords/{schema}/{object}/…`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct OrdsConfig {
    /// Serve the ORDS front end under `/ords`.
    pub enabled: bool,
    /// The schema alias in its URLs (`/ords/{schema}/team/`), as ORDS's REST-enabled schema's.
    pub schema: String,
    /// Rows per page when a request gives no `limit` (ORDS's default: 25).
    pub default_limit: u64,
    /// Largest `limit` a request may ask for (ORDS's `misc.pagination.maxRows`: 10,000).
    pub max_limit: u64,
    /// Roles that may run queries through REST-enabled SQL (`POST /ords/{schema}/_/sql`); none
    /// turns it off. The SQL runs with the database connection's privileges, not the grants:
    /// list only trusted roles.
    pub sql_roles: Vec<String>,
    /// Roles that may also change rows and the schema through it (INSERT, UPDATE, DELETE,
    /// MERGE, CREATE, ALTER, DROP).
    pub sql_write_roles: Vec<String>,
}

impl Default for OrdsConfig {
    fn default() -> Self {
        OrdsConfig {
            enabled: true,
            schema: "rowgate".into(),
            default_limit: 25,
            max_limit: 10_000,
            sql_roles: Vec::new(),
            sql_write_roles: Vec::new(),
        }
    }
}

/// `[realtime]`: change feeds over WebSocket.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RealtimeConfig {
    /// Tables whose changes are captured and can be subscribed to (`*`: every table); none
    /// turns realtime off.
    pub tables: Vec<String>,
    /// Keep captured changes this long, in seconds (a client can resume within it).
    pub retention_s: u64,
    /// Keep at most this many captured changes.
    pub retention_rows: u64,
    /// Look for changes written outside this server this often, in milliseconds.
    pub poll_ms: u64,
    /// Prune the change log this often, in milliseconds.
    pub prune_ms: u64,
    /// Events waiting for one connection before it is closed (1013) as too slow.
    pub queue: usize,
    /// Subscriptions one connection may hold: tables on `/realtime`, `postgres_changes`
    /// bindings over all its channels on Supabase's socket (a join past it is refused).
    pub max_subscriptions: usize,
    /// Channels (topics) one connection speaking Supabase's protocol may join (Supabase's
    /// `max_channels_per_client`).
    pub max_channels: usize,
    /// Realtime connections (WebSockets of both protocols and SSE streams) from one client
    /// address at once; one more is answered 429 (0: no limit).
    pub max_connections_per_address: usize,
    /// Largest client message in bytes (1009 beyond).
    pub max_message_bytes: usize,
    /// Client messages per second before the connection is closed (1008).
    pub max_messages_per_s: u32,
    /// Ping every connection silent for this long, in seconds (spread over the round); a
    /// WebSocket client that answers nothing for two rounds is closed (0: never).
    pub ping_s: u64,
}

impl RealtimeConfig {
    /// Whether `table` is a realtime table.
    pub fn covers(&self, table: &str) -> bool {
        self.tables.iter().any(|t| t == "*" || t == table)
    }
}

impl Default for RealtimeConfig {
    fn default() -> Self {
        RealtimeConfig {
            tables: Vec::new(),
            retention_s: 86_400,
            retention_rows: 1_000_000,
            poll_ms: 500,
            prune_ms: 60_000,
            queue: 1024,
            max_subscriptions: 100,
            max_channels: 100,
            max_connections_per_address: 100,
            max_message_bytes: 16_384,
            max_messages_per_s: 100,
            ping_s: 60,
        }
    }
}

/// `[rest]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct RestConfig {
    /// URL prefix of the AutoREST API (`/api`; `/rest/v1` for Supabase-style clients).
    pub prefix: String,
    /// Largest number of rows a read returns (0 = unlimited).
    pub max_rows: u64,
    /// Refuse PATCH and DELETE without any filter (400 `21000`, as pg-safeupdate answers)
    /// instead of changing the whole table (PostgREST's behaviour, the default).
    pub refuse_unfiltered_writes: bool,
    /// Answer a `Server-Timing` header naming each stage of an API request and its duration
    /// (`jwt`, `parse`, `plan`, `transaction`, `response`), as PostgREST's
    /// `server-timing-enabled`.
    pub server_timing: bool,
    /// Take aggregate functions in `select=` (`count()`, `amount.sum()`, `avg`, `min`, `max`,
    /// grouped by the other selected columns), as PostgREST's `db-aggregates-enabled`: off by
    /// default, since one request can make the database read a whole table.
    pub aggregates: bool,
    /// Answer `Accept: application/vnd.pgrst.plan` with a request's execution plan
    /// (PostgreSQL's `EXPLAIN`; a write's rolled back), as PostgREST's `db-plan-enabled`: off by
    /// default, since a plan shows the schema's tables and indexes and `options=analyze` runs
    /// the query.
    pub plan: bool,
    /// How a write's transaction ends, as PostgREST's `db-tx-end`: `commit` (the default),
    /// `commit-allow-override` (a request's `Prefer: tx=rollback` rolls it back, for tests),
    /// `rollback` (nothing is ever kept), `rollback-allow-override` (`tx=commit` keeps it).
    pub tx_end: TxEnd,
    /// How much an error tells the client, as PostgREST's `client-error-verbosity`: `verbose`
    /// (the default: code, message, details and hint) or `minimal` (code and message).
    pub client_error_verbosity: ErrorVerbosity,
}

/// `rest.client_error_verbosity`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ErrorVerbosity {
    /// Code, message, details and hint.
    #[default]
    Verbose,
    /// Code and message only.
    Minimal,
}

/// `rest.tx_end`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxEnd {
    /// Every write commits; `Prefer: tx=…` is ignored.
    #[default]
    Commit,
    /// Writes commit unless the request prefers `tx=rollback`.
    CommitAllowOverride,
    /// Every write rolls back; `Prefer: tx=…` is ignored.
    Rollback,
    /// Writes roll back unless the request prefers `tx=commit`.
    RollbackAllowOverride,
}

/// `[limits]`
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Largest request body in bytes.
    pub body_bytes: usize,
    /// Largest number of request headers.
    pub max_headers: usize,
    /// Time allowed to read a request's headers, in milliseconds (slowloris guard); also how
    /// long a kept-alive connection waits idle for its next request (hyper times both with one
    /// timer), so it must outlast clients' pauses: nginx's `client_header_timeout` is 60 s too.
    pub header_read_timeout_ms: u64,
    /// Request bodies over 1 MiB handled at once by one worker (more wait, then 503).
    pub large_bodies: usize,
    /// Time allowed to read a request's whole body once its headers are in, in milliseconds
    /// (a client trickling or stalling a body would hold its connection slot forever).
    pub body_read_timeout_ms: u64,
    /// Time allowed for in-flight requests to finish on shutdown, in milliseconds.
    pub drain_timeout_ms: u64,
    /// Deepest nesting of `or=(…)`/`and=(…)` groups in one request (at most 32).
    pub max_filter_depth: usize,
    /// Most values in one `in.(…)` or `(any)`/`(all)` list.
    pub max_list_items: usize,
    /// Most rows one duality-view document write nests (every array at every depth
    /// together): each is a statement of its own.
    pub max_document_rows: usize,
    /// Most open client connections; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Most open connections from one client address (an IPv6 client: its /64), each worker
    /// as `max_connections`; one more is answered 503 and closed. Trusted proxies
    /// (`trusted_proxies`) are exempt. 0: no limit.
    pub max_connections_per_address: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".into(),
            trusted_proxies: Vec::new(),
            db: DbConfig::default(),
            rest: RestConfig::default(),
            limits: LimitsConfig::default(),
            log: "info".into(),
            resources_dir: PathBuf::new(),
            resources: Vec::new(),
            auth: AuthConfig::default(),
            grants: Vec::new(),
            duality_views: Vec::new(),
            supervisor: SupervisorConfig::default(),
            metrics: MetricsConfig::default(),
            access_log: AccessLogConfig::default(),
            realtime: RealtimeConfig::default(),
            ords: OrdsConfig::default(),
            cors: CorsConfig::default(),
            cache: CacheConfig::default(),
            console: ConsoleConfig::default(),
            accounts: AccountsConfig::default(),
            dir: ConfigDir::default(),
        }
    }
}

impl Default for DbConfig {
    fn default() -> Self {
        DbConfig {
            path: PathBuf::from("rowgate.db"),
            url: String::new(),
            replicas: Vec::new(),
            replica_max_lag_ms: 5_000,
            replica_wait_ms: 0,
            replica_check_ms: 1_000,
            readers: 0,
            statement_timeout_ms: 10_000,
            busy_timeout_ms: 5_000,
            max_value_bytes: 64 * 1024 * 1024,
            schema_poll_ms: 1_000,
            inline_reads: true,
            pool_size: 16,
            shared_reads: 1,
            acquire_timeout_ms: 5_000,
            max_lifetime_s: 1_800,
            schemas: "public".into(),
            extra_search_path: "public".into(),
            prepared_statements: true,
            pre_request: String::new(),
            settings: Default::default(),
        }
    }
}

impl Default for RestConfig {
    fn default() -> Self {
        RestConfig {
            prefix: "/api".into(),
            max_rows: 0,
            refuse_unfiltered_writes: false,
            server_timing: false,
            aggregates: false,
            plan: false,
            tx_end: TxEnd::Commit,
            client_error_verbosity: ErrorVerbosity::Verbose,
        }
    }
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            body_bytes: 10 * 1024 * 1024,
            max_headers: 100,
            header_read_timeout_ms: 60_000,
            body_read_timeout_ms: 15_000,
            large_bodies: 2,
            drain_timeout_ms: 30_000,
            max_filter_depth: 16,
            max_list_items: 1_000,
            max_document_rows: 10_000,
            max_connections: 10_000,
            // a tenth of max_connections: one address no longer takes them all, while a NAT
            // of a few hundred browsers (each up to 6 connections and a socket per tab) fits
            max_connections_per_address: 1_000,
        }
    }
}

/// Keys whose values are tables (`[[resources]]`, `[[grants]]`, `[[auth.external]]`): they are
/// set in the file only.
const TABLE_KEYS: &[&str] = &[
    "resources",
    "grants",
    "duality_views",
    "auth.external",
    "db.settings",
];

/// One configuration key: its dotted name and the environment variable that overrides it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Key {
    /// Dotted TOML path.
    pub name: String,
    /// Environment variable that overrides it: `ROWGATE_` and the name in capitals, `_` for
    /// `.`.
    pub env: String,
}

/// Every configuration key, read off the defaults: the structs above (field, doc, `Default`)
/// are the one definition of a key. Each scalar or list value is a key; a list is given in the
/// environment comma-separated.
pub fn keys() -> Vec<Key> {
    fn walk(table: &toml::Table, prefix: &str, out: &mut Vec<Key>) {
        for (name, value) in table {
            let name = if prefix.is_empty() {
                name.clone()
            } else {
                format!("{prefix}.{name}")
            };
            match value {
                _ if TABLE_KEYS.contains(&name.as_str()) => {}
                toml::Value::Table(section) => walk(section, &name, out),
                _ => out.push(Key {
                    env: format!("ROWGATE_{}", name.to_ascii_uppercase().replace('.', "_")),
                    name,
                }),
            }
        }
    }
    let mut out = Vec::new();
    if let Ok(defaults) = toml::Table::try_from(Config::default()) {
        walk(&defaults, "", &mut out);
    }
    out
}

/// The file layer of the configuration: a file on disk, or TOML built into the binary.
pub enum Layer<'a> {
    /// No file: defaults, environment and flags only.
    None,
    /// A file; relative paths in it are resolved from its folder.
    File(&'a Path),
    /// Built-in TOML (the demo configuration) with its built-in files.
    Embedded {
        /// The TOML text.
        text: &'static str,
        /// The files it names.
        files: &'static [(&'static str, &'static str)],
    },
}

/// Builds the effective configuration: `layer` < environment < `overrides` (from CLI flags, as
/// `(dotted key, value)`).
pub fn load(
    layer: Layer<'_>,
    env: impl Fn(&str) -> Option<String>,
    overrides: &[(&str, String)],
) -> anyhow::Result<Config> {
    let (mut table, dir) = match layer {
        Layer::None => (toml::Table::new(), ConfigDir::default()),
        Layer::File(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config file {}", path.display()))?;
            let table = text
                .parse::<toml::Table>()
                .with_context(|| format!("parsing config file {}", path.display()))?;
            let folder = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
                _ => PathBuf::from("."),
            };
            (table, ConfigDir::Path(folder))
        }
        Layer::Embedded { text, files } => (
            text.parse::<toml::Table>()
                .context("parsing the built-in configuration")?,
            ConfigDir::Embedded(files),
        ),
    };
    for key in keys() {
        if let Some(value) = env(&key.env) {
            set(&mut table, &key.name, &value).with_context(|| format!("in {}", key.env))?;
        }
    }
    for (name, value) in overrides {
        set(&mut table, name, value)?;
    }
    let mut config: Config = toml::Value::Table(table)
        .try_into()
        .context("invalid configuration")?;
    config.dir = dir;
    if !config.db.url.is_empty() {
        if !matches!(DbTarget::parse(&config.db.url), DbTarget::Postgres(_)) {
            bail!(
                "db.url must be a PostgreSQL URL (postgres://user@host:port/db), got {:?}; a SQLite file goes in db.path",
                config.db.url
            );
        }
        config.db.path = PathBuf::from(&config.db.url);
    }
    config.validate()?;
    Ok(config)
}

/// Sets a dotted key from a string, typed like the key's default (numbers stay numbers, a list
/// is comma-separated).
fn set(table: &mut toml::Table, name: &str, raw: &str) -> anyhow::Result<()> {
    if !keys().iter().any(|k| k.name == name) {
        bail!("unknown configuration key {name}");
    }
    let defaults = toml::Table::try_from(Config::default())?;
    let mut parts: Vec<&str> = name.split('.').collect();
    let leaf = parts.pop().unwrap_or(name);
    let mut default_node = &defaults;
    let mut node = table;
    for part in parts {
        default_node = default_node
            .get(part)
            .and_then(|v| v.as_table())
            .context("config key shape")?;
        node = node
            .entry(part)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .with_context(|| format!("{part} must be a table"))?;
    }
    let value = match default_node.get(leaf) {
        Some(toml::Value::Integer(_)) => toml::Value::Integer(
            raw.trim()
                .parse()
                .with_context(|| format!("{name} must be a whole number, got {raw:?}"))?,
        ),
        Some(toml::Value::Boolean(_)) => toml::Value::Boolean(
            raw.trim()
                .parse()
                .with_context(|| format!("{name} must be true or false, got {raw:?}"))?,
        ),
        Some(toml::Value::Array(_)) => toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|item| !item.is_empty())
                .map(|item| toml::Value::String(item.to_string()))
                .collect(),
        ),
        _ => toml::Value::String(raw.to_string()),
    };
    node.insert(leaf.to_string(), value);
    Ok(())
}

impl Config {
    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !self.rest.prefix.starts_with('/') || self.rest.prefix.ends_with('/') {
            bail!(
                "rest.prefix must start with '/' and not end with one, got {:?}",
                self.rest.prefix
            );
        }
        if let Some(route) = crate::routes::reserved_by(&self.rest.prefix) {
            bail!(
                "rest.prefix {:?} shadows the built-in route {route} ({} are reserved)",
                self.rest.prefix,
                crate::routes::RESERVED.join(", ")
            );
        }
        let anon = &self.auth.anon_role;
        if self.ords.sql_roles.contains(anon) || self.ords.sql_write_roles.contains(anon) {
            bail!(
                "ords.sql_roles and ords.sql_write_roles may not name the anonymous role {anon:?}: REST-enabled SQL runs with the database's privileges"
            );
        }
        if self.accounts.enabled {
            let accounts = &self.accounts;
            if !accounts.autoconfirm && accounts.smtp_url.is_empty() {
                bail!("accounts.autoconfirm = false sends confirmation emails: it needs accounts.smtp_url");
            }
            if !accounts.smtp_url.is_empty() && accounts.external_url.is_empty() {
                bail!(
                    "accounts.smtp_url needs accounts.external_url, this server's address as browsers reach it (https://api.example.com): the links in emails lead there (built from a request's Host header, a recovery asked for with a forged one would send the victim's code elsewhere)"
                );
            }
            if accounts.token_issuer(&self.auth) == self.auth.issuer {
                bail!("accounts.issuer must differ from auth.issuer (the OAuth clients' tokens)");
            }
            if accounts.jwt_exp_s == 0 || accounts.password_workers == 0 {
                bail!("accounts.jwt_exp_s and accounts.password_workers must be at least 1");
            }
            if accounts.argon2_memory_kib < 8 || accounts.argon2_iterations == 0 {
                bail!("accounts.argon2_memory_kib must be at least 8 and argon2_iterations at least 1");
            }
            if !matches!(
                accounts.password_requirements.as_str(),
                "" | "letters_digits"
                    | "lower_upper_letters_digits"
                    | "lower_upper_letters_digits_symbols"
            ) {
                bail!(
                    "accounts.password_requirements must be \"\", \"letters_digits\", \"lower_upper_letters_digits\" or \"lower_upper_letters_digits_symbols\", got {:?}",
                    accounts.password_requirements
                );
            }
        }
        if self.auth.database_roles && matches!(self.db.target(), DbTarget::Sqlite(_)) {
            bail!(
                "auth.database_roles switches PostgreSQL roles per request; a SQLite database has no roles: its [[grants]] decide (turn database_roles off, or use a postgres:// URL)"
            );
        }
        if self.ords.schema.is_empty() || self.ords.schema.contains('/') {
            bail!(
                "ords.schema must be one path segment, got {:?}",
                self.ords.schema
            );
        }
        // a custom setting's name is dotted, as PostgreSQL requires (`app.settings.x`)
        let word = |w: &str| {
            w.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && w.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        if let Some(name) = self
            .db
            .settings
            .keys()
            .find(|n| !n.contains('.') || !n.split('.').all(word))
        {
            bail!("db.settings: {name:?} is not a dotted setting name, like app.settings.app_host");
        }
        if self.limits.max_headers == 0 || self.limits.body_bytes == 0 {
            bail!("limits.max_headers and limits.body_bytes must be positive");
        }
        if self.limits.max_filter_depth > rowgate_query::parse::MAX_LOGIC_DEPTH {
            bail!(
                "limits.max_filter_depth may be at most {}",
                rowgate_query::parse::MAX_LOGIC_DEPTH
            );
        }
        if self.limits.max_connections == 0 {
            bail!("limits.max_connections must be positive");
        }
        crate::proxies::TrustedProxies::parse(&self.trusted_proxies)?;
        if self.cors.allow_credentials && self.cors.origins.iter().any(|o| o.trim() == "*") {
            bail!(
                "cors.origins = [\"*\"] with cors.allow_credentials = true would let every website call the API with its visitors' cookies and HTTP authentication (browsers refuse * with credentials, so the origin would be echoed instead): list the origins that may, like cors.origins = [\"https://app.example.com\"], or turn allow_credentials off"
            );
        }
        self.listen
            .parse::<std::net::SocketAddr>()
            .with_context(|| {
                format!(
                    "listen must be an address like 127.0.0.1:8080, got {:?}",
                    self.listen
                )
            })?;
        Ok(())
    }

    /// The configuration as TOML (for `rowgate config dump`).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_default()
    }

    /// Number of reader threads to start.
    pub fn reader_threads(&self) -> usize {
        if self.db.readers > 0 {
            self.db.readers
        } else {
            std::thread::available_parallelism().map_or(2, |n| n.get().max(2))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_is_file_then_env_then_cli() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("rowgate.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:1\"\n[rest]\nmax_rows = 5\nprefix = \"/x\"\n",
        )
        .expect("write");
        let env = |name: &str| match name {
            "ROWGATE_REST_MAX_ROWS" => Some("7".to_string()),
            "ROWGATE_LISTEN" => Some("127.0.0.1:2".to_string()),
            _ => None,
        };
        let config =
            load(Layer::File(&file), env, &[("listen", "127.0.0.1:3".into())]).expect("load");
        assert_eq!(config.listen, "127.0.0.1:3");
        assert_eq!(config.rest.max_rows, 7);
        assert_eq!(config.rest.prefix, "/x");
        assert_eq!(config.db.busy_timeout_ms, 5_000);
    }

    #[test]
    fn db_url_names_the_postgres_database() {
        let url = "postgres://app@db:5432/app";
        let env = |name: &str| (name == "ROWGATE_DB_URL").then(|| url.to_string());
        let config = load(Layer::None, env, &[]).expect("load");
        assert_eq!(config.db.path, PathBuf::from(url));
        assert_eq!(config.db.target(), DbTarget::Postgres(url.into()));
        assert_eq!(
            DbTarget::parse("postgresql://h/d"),
            DbTarget::Postgres("postgresql://h/d".into())
        );
        assert_eq!(DbTarget::parse("pg.db"), DbTarget::Sqlite("pg.db".into()));
        // A SQLite file given on the command line (as `--db` does) replaces it.
        let config = load(
            Layer::None,
            env,
            &[("db.path", "x.db".into()), ("db.url", String::new())],
        )
        .expect("load");
        assert_eq!(config.db.path, PathBuf::from("x.db"));
        assert_eq!(config.db.target(), DbTarget::Sqlite("x.db".into()));
        let err = load(Layer::None, |_| None, &[("db.url", "x.db".into())]).expect_err("bad");
        assert!(format!("{err:#}").contains("db.url must be a PostgreSQL URL"));
        let config =
            load(Layer::None, |_| None, &[("db.max_lifetime_s", "60".into())]).expect("load");
        assert_eq!(config.db.max_lifetime_s, 60);
    }

    #[test]
    fn bad_values_are_rejected_with_the_key_name() {
        let err = load(
            Layer::None,
            |n| (n == "ROWGATE_REST_MAX_ROWS").then(|| "lots".into()),
            &[],
        )
        .expect_err("must fail");
        assert!(format!("{err:#}").contains("rest.max_rows"), "{err:#}");
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("rowgate.toml");
        std::fs::write(&file, "[rest]\nprefx = \"/x\"\n").expect("write");
        let err = load(Layer::File(&file), |_| None, &[]).expect_err("unknown key");
        assert!(format!("{err:#}").contains("prefx"), "{err:#}");
        let err =
            load(Layer::None, |_| None, &[("rest.prefix", "api".into())]).expect_err("prefix");
        assert!(format!("{err:#}").contains("rest.prefix"), "{err:#}");
        // every built-in route is reserved, and what lies under it
        for prefix in [
            "/oauth",
            "/metrics",
            "/realtime",
            "/ords",
            "/live",
            "/oauth/api",
        ] {
            let err = load(Layer::None, |_| None, &[("rest.prefix", prefix.into())])
                .expect_err("a built-in route");
            assert!(format!("{err:#}").contains("shadows"), "{prefix}: {err:#}");
        }
    }

    #[test]
    fn every_key_is_overridable_from_the_environment() {
        let keys = keys();
        let names: Vec<&str> = keys.iter().map(|k| k.name.as_str()).collect();
        for expected in [
            "listen",
            "db.path",
            "auth.issuer",
            "auth.audience",
            "auth.clients_poll_ms",
            "auth.max_failures_per_minute",
            "metrics.roles",
            "realtime.tables",
            "limits.max_connections",
        ] {
            assert!(names.contains(&expected), "{expected} in {names:?}");
        }
        assert!(!names.iter().any(|n| n.starts_with("grants")));
        // Each key set at once through its variable, to a value other than its default where
        // the type allows: the loaded configuration has every one.
        let defaults = toml::Table::try_from(Config::default()).expect("defaults");
        let mut wanted = Vec::new();
        for key in &keys {
            let mut node = &defaults;
            let parts: Vec<&str> = key.name.split('.').collect();
            for part in &parts[..parts.len() - 1] {
                node = node[*part].as_table().expect("table");
            }
            let (raw, value) = match &node[parts[parts.len() - 1]] {
                toml::Value::Integer(i) => ((i + 1).to_string(), toml::Value::Integer(i + 1)),
                toml::Value::Boolean(b) => ((!b).to_string(), toml::Value::Boolean(!b)),
                // (a list the configuration checks takes values it accepts)
                toml::Value::Array(_) if key.name == "trusted_proxies" => (
                    " 10.0.0.0/8, ::1 ".to_string(),
                    toml::Value::Array(vec!["10.0.0.0/8".into(), "::1".into()]),
                ),
                toml::Value::Array(_) => (
                    " a, b ".to_string(),
                    toml::Value::Array(vec!["a".into(), "b".into()]),
                ),
                // (PostgreSQL's: auth.database_roles, flipped on, needs it)
                // (accounts.autoconfirm, flipped off, needs one; and then an external_url)
                toml::Value::String(_) if key.name == "accounts.smtp_url" => {
                    let url = "smtp://127.0.0.1:25";
                    (url.to_string(), toml::Value::String(url.to_string()))
                }
                toml::Value::String(_) if key.name == "accounts.external_url" => {
                    let url = "https://api.example.com";
                    (url.to_string(), toml::Value::String(url.to_string()))
                }
                toml::Value::String(_) if key.name == "db.path" => {
                    let url = "postgres://app@db:5432/app";
                    (url.to_string(), toml::Value::String(url.to_string()))
                }
                toml::Value::String(text) => (text.clone(), toml::Value::String(text.clone())),
                other => panic!("{}: unexpected default {other}", key.name),
            };
            wanted.push((key, raw, value));
        }
        let env = |name: &str| {
            wanted
                .iter()
                .find(|(k, _, _)| k.env == name)
                .map(|(_, raw, _)| raw.clone())
        };
        let loaded =
            toml::Table::try_from(load(Layer::None, env, &[]).expect("load")).expect("toml");
        for (key, _, value) in &wanted {
            let mut node = &loaded;
            let parts: Vec<&str> = key.name.split('.').collect();
            for part in &parts[..parts.len() - 1] {
                node = node[*part].as_table().expect("table");
            }
            assert_eq!(&node[parts[parts.len() - 1]], value, "{}", key.env);
        }
    }

    /// The README's table of keys and the structure agree, both ways: every documented key
    /// exists with the variable the README gives, and every key is documented.
    #[test]
    fn the_readme_documents_every_key() {
        let readme = include_str!("../../../../README.md");
        let documented: Vec<(String, String)> = readme
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let key = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                let env = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
                env.starts_with("ROWGATE_")
                    .then(|| (key.to_string(), env.to_string()))
            })
            .collect();
        let keys = keys();
        for (name, env) in &documented {
            let key = keys.iter().find(|k| k.name == *name);
            assert_eq!(
                key.map(|k| k.env.as_str()),
                Some(env.as_str()),
                "README: {name}"
            );
        }
        for key in &keys {
            assert!(
                documented.iter().any(|(name, _)| *name == key.name),
                "{} is not in the README's table of keys",
                key.name
            );
        }
    }
}
