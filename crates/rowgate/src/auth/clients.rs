//! OAuth2 clients: kept in the database (`_rowgate_clients` on SQLite, `rowgate.clients` on
//! PostgreSQL; neither is ever exposed by the REST API), managed by `rowgate clients …`, and held
//! in memory by a running server, which re-reads them every `auth.clients_poll_ms`.
//!
//! A secret is 256 random bits shown once; only its HMAC-SHA256 under the server's pepper is
//! stored. A client has two secret slots: `rotate` issues a new secret and keeps the current one
//! working; `retire` drops the previous one, and the tokens issued with it stop working too
//! (tokens carry the generation of the secret they were issued for).

use std::collections::HashMap;

use anyhow::Context;
use base64::Engine as _;
use rowgate_query::render::Dialect;
use rowgate_query::stmt::Sql;
use rowgate_query::Value;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

use super::secret::{hmac_sha256, random_string, Secrets};
use crate::db::Database;
use crate::job::{Access, Job, Step};

/// One client as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Client {
    /// Public identifier (random).
    pub client_id: String,
    /// Name given by the administrator (unique).
    pub name: String,
    /// The role its tokens carry.
    pub role: String,
    /// Token lifetime in seconds (capped by `auth.max_token_ttl_s`).
    pub ttl_s: i64,
    /// HMAC of the current secret.
    #[serde(skip_serializing)]
    pub secret_hash: String,
    /// Generation of the current secret.
    pub secret_gen: i64,
    /// HMAC of the previous secret, while it still works.
    #[serde(skip_serializing)]
    pub prev_hash: Option<String>,
    /// Generation of the previous secret.
    pub prev_gen: Option<i64>,
    /// Revoked: no token, old or new, works.
    pub revoked: bool,
    /// Creation time, Unix seconds.
    pub created_s: i64,
}

impl Client {
    /// The generation of the slot `secret` matches, if any (constant-time comparisons).
    pub fn secret_generation(&self, pepper: &[u8], secret: &str) -> Option<i64> {
        let hash = hash_secret(pepper, secret);
        let matches = |stored: &str| bool::from(stored.as_bytes().ct_eq(hash.as_bytes()));
        if matches(&self.secret_hash) {
            return Some(self.secret_gen);
        }
        match (&self.prev_hash, self.prev_gen) {
            (Some(prev), Some(generation)) if matches(prev) => Some(generation),
            _ => None,
        }
    }

    /// Whether tokens issued for secret generation `generation` still work.
    pub fn accepts(&self, generation: i64) -> bool {
        !self.revoked && (generation == self.secret_gen || Some(generation) == self.prev_gen)
    }
}

/// Why a change to the clients failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request itself is wrong (no name, no role).
    #[error("{0}")]
    Invalid(String),
    /// `add` of a name taken already.
    #[error("a client named {0:?} exists already")]
    Exists(String),
    /// No client has that name.
    #[error("no client named {0:?}")]
    NotFound(String),
    /// The database failed.
    #[error("{0}")]
    Database(#[from] anyhow::Error),
}

/// What `add` and `rotate` hand back, once.
#[derive(Debug, Clone, Serialize)]
pub struct Issued {
    /// The client's id.
    pub client_id: String,
    /// Its new secret (not stored anywhere).
    pub client_secret: String,
}

fn hash_secret(pepper: &[u8], secret: &str) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(hmac_sha256(pepper, secret.as_bytes()))
}

/// The client table's name in `d`'s SQL.
fn table(d: &dyn Dialect) -> &'static str {
    if d.has_schemas() {
        "rowgate.clients"
    } else {
        "_rowgate_clients"
    }
}

const COLUMNS: &str =
    "client_id, name, role, ttl_s, secret_hash, secret_gen, prev_hash, prev_gen, revoked, created_s";

fn sql(text: String, params: Vec<Value>) -> Sql {
    Sql { text, params }
}

/// Creates the client table if it is missing.
pub async fn ensure_table(db: &Database) -> anyhow::Result<()> {
    let d = db.dialect();
    let mut steps = Vec::new();
    if d.has_schemas() {
        steps.push(Step::Execute(sql(
            "CREATE SCHEMA IF NOT EXISTS rowgate".into(),
            vec![],
        )));
    }
    steps.push(Step::Execute(sql(
        format!(
            "CREATE TABLE IF NOT EXISTS {} (client_id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, \
             role TEXT NOT NULL, ttl_s BIGINT NOT NULL, secret_hash TEXT NOT NULL, \
             secret_gen BIGINT NOT NULL, prev_hash TEXT, prev_gen BIGINT, \
             revoked BOOLEAN NOT NULL DEFAULT FALSE, created_s BIGINT NOT NULL)",
            table(d)
        ),
        vec![],
    )));
    db.run(Job::new(Access::Write, steps))
        .await
        .map_err(|e| anyhow::anyhow!("cannot create the client table: {}", e.message))?;
    Ok(())
}

/// Every client, by id (none when the table does not exist yet).
pub async fn load(db: &Database) -> anyhow::Result<HashMap<String, Client>> {
    let d = db.dialect();
    let exists = if d.has_schemas() {
        "SELECT to_regclass('rowgate.clients') IS NOT NULL"
    } else {
        "SELECT count(*) > 0 FROM sqlite_schema WHERE type = 'table' AND name = '_rowgate_clients'"
    };
    // (on the primary: a client just added or revoked counts at once)
    let found = db
        .run(Job::new(Access::Read, vec![Step::Value(sql(exists.into(), vec![]))]).on_primary())
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the client table: {}", e.message))?;
    let found = found.value.unwrap_or_default();
    if found != b"true" && found != b"1" {
        return Ok(HashMap::new());
    }
    let rows = db
        .run(
            Job::new(
                Access::Read,
                vec![Step::Rows {
                    sql: sql(
                        format!("SELECT {COLUMNS} FROM {} ORDER BY name", table(d)),
                        vec![],
                    ),
                    shape: None,
                }],
            )
            .on_primary(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("cannot read the client table: {}", e.message))?;
    let clients: Vec<Client> =
        serde_json::from_slice(&rows.rows).context("reading the client table")?;
    Ok(clients
        .into_iter()
        .map(|c| (c.client_id.clone(), c))
        .collect())
}

/// Adds a client with a new secret.
pub async fn add(
    db: &Database,
    secrets: &Secrets,
    name: &str,
    role: &str,
    ttl_s: u64,
) -> Result<Issued, ClientError> {
    if name.trim().is_empty() || role.trim().is_empty() {
        return Err(ClientError::Invalid(
            "a client needs a name and a role".into(),
        ));
    }
    ensure_table(db).await?;
    let d = db.dialect();
    let client_id = random_string(16)?;
    let secret = random_string(32)?;
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs());
    let ph: Vec<String> = (1..=7).map(|i| d.placeholder(i)).collect();
    let insert = sql(
        format!(
            "INSERT INTO {} (client_id, name, role, ttl_s, secret_hash, secret_gen, created_s) \
             VALUES ({}, {}, {}, {}, {}, 1, {})",
            table(d),
            ph[0],
            ph[1],
            ph[2],
            cast_int(d, &ph[3]),
            ph[4],
            cast_int(d, &ph[5]),
        ),
        vec![
            Value::Text(client_id.clone()),
            Value::Text(name.to_string()),
            Value::Text(role.to_string()),
            Value::Int(i64::try_from(ttl_s).unwrap_or(i64::MAX)),
            Value::Text(hash_secret(&secrets.pepper, &secret)),
            Value::Int(i64::try_from(created).unwrap_or(0)),
        ],
    );
    match db
        .run(Job::new(Access::Write, vec![Step::Execute(insert)]))
        .await
    {
        Ok(_) => Ok(Issued {
            client_id,
            client_secret: secret,
        }),
        Err(e) if e.kind == crate::db::DbErrorKind::UniqueViolation => {
            Err(ClientError::Exists(name.to_string()))
        }
        Err(e) => Err(anyhow::anyhow!("cannot add the client: {}", e.message).into()),
    }
}

/// PostgreSQL cannot type a bare text parameter as a bigint in a VALUES list; SQLite needs no
/// cast.
fn cast_int(d: &dyn Dialect, placeholder: &str) -> String {
    if d.types_parameters() {
        format!("{placeholder}::bigint")
    } else {
        placeholder.to_string()
    }
}

/// One UPDATE of the client named `name`; fails when there is none.
async fn update(
    db: &Database,
    name: &str,
    set: &str,
    params: Vec<Value>,
) -> Result<(), ClientError> {
    let d = db.dialect();
    let mut params = params;
    params.push(Value::Text(name.to_string()));
    let text = format!(
        "UPDATE {} SET {set} WHERE name = {}",
        table(d),
        d.placeholder(params.len())
    );
    let done = db
        .run(Job::new(
            Access::Write,
            vec![Step::Execute(sql(text, params))],
        ))
        .await
        .map_err(|e| anyhow::anyhow!("cannot update the client: {}", e.message))?;
    if done.affected == 0 {
        return Err(ClientError::NotFound(name.to_string()));
    }
    Ok(())
}

/// A new secret for `name`; the current one keeps working until [`retire`].
pub async fn rotate(db: &Database, secrets: &Secrets, name: &str) -> Result<Issued, ClientError> {
    let clients = load(db).await?;
    let Some(client) = clients.values().find(|c| c.name == name) else {
        return Err(ClientError::NotFound(name.to_string()));
    };
    let secret = random_string(32)?;
    let d = db.dialect();
    update(
        db,
        name,
        &format!(
            "prev_hash = secret_hash, prev_gen = secret_gen, secret_hash = {}, secret_gen = secret_gen + 1",
            d.placeholder(1)
        ),
        vec![Value::Text(hash_secret(&secrets.pepper, &secret))],
    )
    .await?;
    Ok(Issued {
        client_id: client.client_id.clone(),
        client_secret: secret,
    })
}

/// Drops `name`'s previous secret: it, and the tokens issued with it, stop working.
pub async fn retire(db: &Database, name: &str) -> Result<(), ClientError> {
    update(db, name, "prev_hash = NULL, prev_gen = NULL", vec![]).await
}

/// Revokes `name`: no token request or token of it works any more.
pub async fn revoke(db: &Database, name: &str) -> Result<(), ClientError> {
    update(db, name, "revoked = TRUE", vec![]).await
}
