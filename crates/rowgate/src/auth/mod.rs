//! Security: who is asking ([`Auth::authenticate`]: a bearer token, or the anonymous role) and
//! what they may do ([`policy`]). Tokens come from `POST /oauth/token` ([`crate::token_endpoint`]) for the
//! clients of [`clients`], signed with keys derived from the master secret ([`secret`]), and are
//! checked by [`token`] in memory: a bad token never takes a database connection. With
//! [`database_roles`] the database's own roles, privileges and policies decide as well.

pub mod clients;
pub mod database_roles;
pub mod policy;
pub mod secret;
pub mod token;

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use arc_swap::ArcSwap;
use http::HeaderMap;
use serde_json::{Map, Value as Json};

use crate::config::{AuthConfig, Config};
use crate::db::Database;
use crate::error::{ApiError, ErrorCode};
use clients::Client;
use policy::Policy;
use secret::Secrets;
use token::{Refused, Tokens};

/// Who a request acts as.
#[derive(Debug, Clone)]
pub struct Principal {
    /// The role whose grants apply.
    pub role: String,
    /// The token's claims (empty for the anonymous role).
    pub claims: Arc<Map<String, Json>>,
    /// No token was sent.
    pub anonymous: bool,
    /// What must still hold for the token to be honoured (`None` for the anonymous role).
    /// Long-lived uses of a principal (realtime streams) re-check it with
    /// [`Auth::check_standing`].
    pub standing: Option<Arc<Standing>>,
}

/// What can change after a token's signature was checked: time runs out, and this server's
/// own clients can be revoked, have their secret retired or their role changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// The role the token was issued for.
    pub role: String,
    /// `exp` (Unix seconds), when the token has one.
    pub exp: Option<u64>,
    /// For this server's own tokens: the client and the secret generation.
    pub client: Option<(String, i64)>,
}

impl Standing {
    /// The Unix second after which the token is refused (its `exp` plus the clock-skew
    /// leeway).
    pub fn expires_after(&self) -> Option<u64> {
        self.exp.map(|exp| exp + token::LEEWAY_S)
    }
}

/// Keys, clients, grants and the failed-attempt limiter of one server.
pub struct Auth {
    /// Token and client settings.
    pub config: AuthConfig,
    /// Derived keys.
    pub secrets: Secrets,
    /// Token signer and verifier.
    pub tokens: Tokens,
    /// Known clients by id, re-read from the database.
    pub clients: ArcSwap<HashMap<String, Client>>,
    /// Grants.
    pub policy: Policy,
    /// Failed token requests per client and per address.
    pub failures: FailureLimiter,
    /// The principal of requests without a token (built once).
    anonymous: Principal,
    /// Tokens verified before, so a client's next request skips the signature check.
    verified: std::sync::RwLock<HashMap<String, Verified>>,
    /// Counts the changes of the client registry seen by [`Auth::refresh_clients`]: long-lived
    /// streams re-check their tokens when it moves.
    pub clients_changed: tokio::sync::watch::Sender<u64>,
    /// When [`Auth::authenticate_fresh`] last re-read the clients for an unknown one.
    looked_again: tokio::sync::Mutex<Option<Instant>>,
}

/// The clients are re-read for a token of an unknown client at most this often.
const LOOK_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// Most tokens remembered as verified; when full, the memory starts over.
const VERIFIED_CAPACITY: usize = 10_000;

/// A token that verified: who it is, and what must still hold each time it is used.
#[derive(Clone)]
struct Verified {
    claims: Arc<Map<String, Json>>,
    /// Checked on every use (an expired token, a revoked client or a retired secret stops a
    /// remembered token too).
    standing: Arc<Standing>,
}

impl Auth {
    /// Loads the secret, keys and grants of `config` (no database access yet).
    pub fn new(config: &Config) -> anyhow::Result<Auth> {
        let secrets = secret::load(config)?;
        let tokens = Tokens::new(&secrets.jwt_key, config)?;
        Ok(Auth {
            config: config.auth.clone(),
            tokens,
            secrets,
            clients: ArcSwap::from_pointee(HashMap::new()),
            policy: {
                let policy = Policy::compile(&config.grants)?;
                if config.auth.database_roles {
                    policy.deferring_to_database()
                } else {
                    policy
                }
            },
            failures: FailureLimiter::new(config.auth.max_failures_per_minute),
            verified: std::sync::RwLock::new(HashMap::new()),
            anonymous: Principal {
                role: config.auth.anon_role.clone(),
                claims: Arc::new(Map::new()),
                anonymous: true,
                standing: None,
            },
            clients_changed: tokio::sync::watch::Sender::new(0),
            looked_again: tokio::sync::Mutex::new(None),
        })
    }

    /// Re-reads the clients from `db`.
    pub async fn refresh_clients(&self, db: &Database) -> anyhow::Result<()> {
        let fresh = clients::load(db).await?;
        if **self.clients.load() != fresh {
            self.clients.store(Arc::new(fresh));
            self.clients_changed.send_modify(|n| *n += 1);
        }
        Ok(())
    }

    /// The principal of a request: the anonymous role without an `Authorization` header, the
    /// token's role with a valid bearer token, else 401 `invalid_token`.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<Principal, ApiError> {
        let invalid = |why: &str| {
            ApiError::new(ErrorCode::InvalidToken, "invalid bearer token").details(why.to_string())
        };
        let token = match headers.get(http::header::AUTHORIZATION) {
            Some(value) => {
                let text = value
                    .to_str()
                    .map_err(|_| invalid("the Authorization header is not text"))?;
                match text.split_once(' ') {
                    Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => rest.trim(),
                    _ if text.eq_ignore_ascii_case("bearer") => "",
                    _ => {
                        return Err(invalid(
                            "the Authorization header must be \"Bearer <token>\"",
                        ))
                    }
                }
            }
            // Supabase's clients send their key in `apikey` (and, with a user, Authorization)
            None => match headers.get("apikey") {
                Some(value) => value
                    .to_str()
                    .map_err(|_| invalid("the apikey header is not text"))?
                    .trim(),
                None => return Ok(self.anonymous.clone()),
            },
        };
        if token.is_empty() {
            return Err(invalid("the bearer token is empty"));
        }
        let clients = self.clients.load();
        let remembered = self
            .verified
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(token)
            .cloned();
        let verified = match remembered {
            Some(v) => v,
            None => {
                let fresh = self.tokens.verify(token, &clients).map_err(refusal)?;
                let v = Verified {
                    standing: Arc::new(Standing {
                        exp: fresh.claims.get("exp").and_then(Json::as_u64),
                        client: fresh.own.clone(),
                        role: fresh.role,
                    }),
                    claims: Arc::new(fresh.claims),
                };
                let mut memory = self.verified.write().unwrap_or_else(|e| e.into_inner());
                if memory.len() >= VERIFIED_CAPACITY {
                    memory.clear();
                }
                memory.insert(token.to_string(), v.clone());
                v
            }
        };
        standing_verdict(&verified.standing, &clients).map_err(|lapse| refusal(lapse.refused()))?;
        Ok(Principal {
            role: verified.standing.role.clone(),
            claims: verified.claims,
            anonymous: false,
            standing: Some(verified.standing),
        })
    }

    /// As [`Auth::authenticate`], except that a valid token of this server's whose client is not
    /// in memory yet (added a moment ago through another worker or node) has the clients re-read
    /// from `db` first, as the token endpoint does for a client's secret: at most every
    /// [`LOOK_AGAIN_AFTER`], one request at a time, the others waiting for its answer.
    pub async fn authenticate_fresh(
        &self,
        db: &Database,
        headers: &HeaderMap,
    ) -> Result<Principal, ApiError> {
        match self.authenticate(headers) {
            Err(e) if e.details.as_deref() == Some(token::UNKNOWN_CLIENT) => {
                // (boxed: the common path's future stays small)
                Box::pin(self.look_again(db)).await;
                self.authenticate(headers)
            }
            answer => answer,
        }
    }

    /// Re-reads the clients for a token of an unknown client, unless that was done less than
    /// [`LOOK_AGAIN_AFTER`] ago.
    async fn look_again(&self, db: &Database) {
        let mut looked = self.looked_again.lock().await;
        if looked.is_none_or(|at| at.elapsed() >= LOOK_AGAIN_AFTER) {
            if let Err(e) = self.refresh_clients(db).await {
                tracing::warn!("cannot re-read the clients: {e:#}");
            }
            *looked = Some(Instant::now());
        }
    }

    /// Whether `principal`'s token is still honoured (401 `PGRST301` when it expired or its
    /// client was revoked since); the anonymous role always is.
    pub fn check_standing(&self, principal: &Principal) -> Result<(), ApiError> {
        match &principal.standing {
            None => Ok(()),
            Some(standing) => self
                .standing_verdict(standing)
                .map_err(|lapse| refusal(lapse.refused())),
        }
    }

    /// Why a token of this standing is no longer honoured, if it is not.
    pub fn standing_verdict(&self, standing: &Standing) -> Result<(), Lapse> {
        standing_verdict(standing, &self.clients.load())
    }
}

/// Why a token honoured before is no longer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lapse {
    /// Its `exp` has passed.
    Expired,
    /// Its client was revoked, its secret retired, or its role changed.
    Revoked,
}

impl Lapse {
    /// The reason a realtime connection is closed with.
    pub fn reason(self) -> &'static str {
        match self {
            Lapse::Expired => "the token has expired",
            Lapse::Revoked => "the token's client is revoked or its secret retired",
        }
    }

    /// The refusal of a request carrying the token.
    fn refused(self) -> Refused {
        match self {
            Lapse::Expired => Refused::expired(),
            Lapse::Revoked => Refused::invalid(self.reason()),
        }
    }
}

/// A refused token's 401: `PGRST303` when its claims failed, else `PGRST301`.
fn refusal(refused: Refused) -> ApiError {
    let code = if refused.claims {
        ErrorCode::TokenClaimsRefused
    } else {
        ErrorCode::InvalidToken
    };
    ApiError::new(code, refused.message).details(refused.details)
}

/// What can change after the signature was checked: time, and the client.
fn standing_verdict(standing: &Standing, clients: &HashMap<String, Client>) -> Result<(), Lapse> {
    if standing
        .expires_after()
        .is_some_and(|after| jsonwebtoken::get_current_timestamp() > after)
    {
        return Err(Lapse::Expired);
    }
    if let Some((client_id, generation)) = &standing.client {
        match clients.get(client_id) {
            Some(c) if c.accepts(*generation) && c.role == standing.role => {}
            _ => return Err(Lapse::Revoked),
        }
    }
    Ok(())
}

/// Keeps the running server's view of the clients current: re-reads them every
/// `auth.clients_poll_ms`.
pub fn spawn_client_refresher(auth: Arc<Auth>, db: Arc<Database>) {
    let every = Duration::from_millis(auth.config.clients_poll_ms.max(50));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = auth.refresh_clients(&db).await {
                tracing::warn!("cannot re-read the clients: {e:#}");
            }
        }
    });
}

/// Counts failed attempts per key (a client id, an email, an address) in windows of a fixed
/// length (a minute for token requests).
pub struct FailureLimiter {
    max: u32,
    window: Duration,
    windows: Mutex<HashMap<String, (Instant, u32)>>,
}

/// How many more failures an address may have than a client.
const ADDRESS_FACTOR: u32 = 10;

/// Length of a counting window.
const WINDOW: Duration = Duration::from_secs(60);

impl FailureLimiter {
    fn new(max: u32) -> FailureLimiter {
        FailureLimiter::with_window(max, WINDOW)
    }

    /// A limiter of `max` failures per key in each `window`.
    pub fn with_window(max: u32, window: Duration) -> FailureLimiter {
        FailureLimiter {
            max,
            window,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// How long `key` must wait, when it has failed too often. An address may fail
    /// [`ADDRESS_FACTOR`] times as often as a client: many clients may share one (a proxy), and
    /// one attacker must not lock them all out.
    pub fn blocked(&self, key: &str) -> Option<Duration> {
        let max = if key.starts_with("addr:") {
            self.max.saturating_mul(ADDRESS_FACTOR)
        } else {
            self.max
        };
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        match windows.get(key) {
            Some((start, n)) if *n >= max && start.elapsed() < self.window => {
                Some(self.window.saturating_sub(start.elapsed()))
            }
            _ => None,
        }
    }

    /// Records a failure of `key`.
    pub fn fail(&self, key: &str) {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if windows.len() > 100_000 {
            windows.retain(|_, (start, _)| start.elapsed() < self.window);
        }
        let entry = windows
            .entry(key.to_string())
            .or_insert((Instant::now(), 0));
        if entry.0.elapsed() >= self.window {
            *entry = (Instant::now(), 0);
        }
        entry.1 += 1;
    }
}

/// The limiter key of an address.
pub fn address_key(ip: IpAddr) -> String {
    format!("addr:{ip}")
}

/// A long-lived API key for the client `name` (Supabase's anon and service-role keys): a
/// token of this server for the client's role, valid `days` days, bound to the client's current
/// secret generation, so that `rotate` then `retire` (or `revoke`) withdraws it. Clients send
/// it as `Authorization: Bearer …` or in the `apikey` header.
pub async fn api_key(
    db: &Database,
    tokens: &Tokens,
    name: &str,
    days: u64,
) -> anyhow::Result<String> {
    let clients = clients::load(db).await?;
    let client = clients.values().find(|c| c.name == name).with_context(|| {
        format!("no client {name:?}: add it first (rowgate clients add {name} --role …)")
    })?;
    if client.revoked {
        bail!("the client {name:?} is revoked");
    }
    if days == 0 {
        bail!("a key must be valid for at least one day");
    }
    tokens.issue(client, client.secret_gen, days.saturating_mul(86_400), None)
}
