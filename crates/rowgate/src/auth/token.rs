//! Bearer tokens: JWTs this server issues (HS256 under a key derived from the master secret,
//! with `sub`, `role`, `iss`, `aud`, `iat`, `exp` and the client's secret generation `gen`) and
//! JWTs of configured outside issuers (keys from a JWKS file, picked by `kid`). Checks: the
//! algorithm must be the key's own (no `none`, no HS256 over a public key), signature, `exp` and
//! `nbf` with at most 60 s of clock skew, `iss`, `aud`; own tokens also need their client to be
//! known, not revoked, and the secret generation still accepted. [`crate::auth::Auth`] remembers
//! verified tokens (keys only change with a restart) and re-checks expiry and the client on each
//! use. People's tokens (`[accounts]`, [`crate::accounts`]) are signed here too: with the shared
//! secret of the outside issuer they are named after (Supabase's JWT secret), or with the
//! server's own key under their own issuer, and checked as the outside issuers' are (the role
//! from their `role` claim).

use std::collections::HashMap;

use anyhow::Context;
use jsonwebtoken::jwk::{AlgorithmParameters, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value as Json};

use super::clients::Client;
use crate::config::Config;

/// Clock skew allowed on `exp`, `nbf` and `iat`, in seconds (PostgREST's 30).
pub const LEEWAY_S: u64 = 30;

/// Tokens longer than this are refused before any parsing.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// The claims of a token this server issues.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OwnClaims {
    /// The client's id.
    pub sub: String,
    /// The client's role.
    pub role: String,
    /// Issuer.
    pub iss: String,
    /// Audience.
    pub aud: String,
    /// Issued at (Unix seconds).
    pub iat: u64,
    /// Expires at (Unix seconds).
    pub exp: u64,
    /// Generation of the client secret the token was issued for.
    pub gen: i64,
    /// Scope asked for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// Why a token of this server's is refused when its client is not among those in memory (one
/// added a moment ago elsewhere, or deleted).
pub const UNKNOWN_CLIENT: &str = "the token's client is unknown";

/// Why a token was refused, as PostgREST words it where it has words for it (`message`:
/// "JWT expired", "Expected 3 parts in JWT; got 2", …; `claims` for its `PGRST303`, a token
/// whose claims fail, else `PGRST301`) and as this server explains it (`details`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    /// The error's message.
    pub message: String,
    /// Its details.
    pub details: String,
    /// Whether the token's claims failed (expired, not yet valid, issued in the future,
    /// another audience) rather than the token itself.
    pub claims: bool,
}

impl Refused {
    /// A refusal PostgREST has no words for: "invalid bearer token", and why.
    pub fn invalid(why: &str) -> Refused {
        Refused::worded(INVALID, why)
    }

    /// A token refused with PostgREST's `message`.
    fn worded(message: &str, why: &str) -> Refused {
        Refused {
            message: message.to_string(),
            details: why.to_string(),
            claims: false,
        }
    }

    /// A token whose claims fail, with PostgREST's `message`.
    fn of_claims(message: &str, why: &str) -> Refused {
        Refused {
            claims: true,
            ..Refused::worded(message, why)
        }
    }

    /// An expired token (checked again on every use of a remembered one).
    pub fn expired() -> Refused {
        Refused::of_claims("JWT expired", "the token has expired")
    }
}

/// The message of a refusal PostgREST has no words for.
const INVALID: &str = "invalid bearer token";

/// A verified token: its role and all its claims (for `@claim` row filters and resource
/// parameters).
#[derive(Debug, Clone)]
pub struct Verified {
    /// The role.
    pub role: String,
    /// Every claim.
    pub claims: Map<String, Json>,
    /// For this server's own tokens: the client id and secret generation.
    pub own: Option<(String, i64)>,
}

/// An outside issuer, ready to verify.
struct External {
    issuer: String,
    audience: String,
    keys: IssuerKeys,
    /// The path to the role claim (one name, or `.a.b` segments).
    role_claim: Vec<String>,
    /// Whether a token must carry `exp` (shared secrets only; a JWKS issuer's always must).
    require_exp: bool,
}

/// How an outside issuer's tokens are checked.
enum IssuerKeys {
    /// Its public keys: the token's `kid` picks one, the key decides the algorithm.
    Jwks(JwkSet),
    /// A secret shared with it: HS256, HS384 or HS512.
    Shared(Vec<u8>),
}

/// Signs and checks tokens.
pub struct Tokens {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
    issuer: String,
    audience: String,
    external: Vec<External>,
    /// With `[accounts]`: the key people's tokens are signed with (an outside issuer's shared
    /// secret, or the server's own key, whose issuer is then checked as an outside one).
    accounts: Option<EncodingKey>,
}

impl Tokens {
    /// Keys from the derived HS256 key, the configured outside issuers and people's accounts.
    pub fn new(jwt_key: &[u8; 32], whole: &Config) -> anyhow::Result<Tokens> {
        let (config, dir) = (&whole.auth, &whole.dir);
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = LEEWAY_S;
        validation.validate_nbf = true;
        validation.set_issuer(&[&config.issuer]);
        validation.set_audience(&[&config.audience]);
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        let mut external = Vec::new();
        for e in &config.external {
            let shared = |secret: String, from: &str| {
                // (HS256 needs at least 256 bits: PostgREST's and Supabase's 32 characters)
                let secret = secret.trim().to_string();
                if secret.len() < 32 {
                    anyhow::bail!(
                        "auth.external {:?}: {from} must hold the shared secret, at least 32 characters",
                        e.issuer
                    );
                }
                Ok(IssuerKeys::Shared(secret.into_bytes()))
            };
            let keys = match (&e.jwks_file, &e.secret_env, &e.secret_file) {
                (Some(file), None, None) => {
                    if e.audience.is_empty() || e.issuer.is_empty() {
                        anyhow::bail!(
                            "auth.external {:?}: an issuer with a JWKS needs its issuer and audience",
                            e.issuer
                        );
                    }
                    if !e.require_exp {
                        anyhow::bail!(
                            "auth.external {:?}: require_exp = false is for shared secrets only",
                            e.issuer
                        );
                    }
                    let text = std::fs::read_to_string(dir.resolve(file))
                        .with_context(|| format!("reading JWKS file {}", file.display()))?;
                    IssuerKeys::Jwks(
                        serde_json::from_str(&text)
                            .with_context(|| format!("parsing JWKS file {}", file.display()))?,
                    )
                }
                (None, Some(var), None) => shared(
                    std::env::var(var).unwrap_or_default(),
                    &format!("the environment variable {var}"),
                )?,
                (None, None, Some(file)) => shared(
                    std::fs::read_to_string(dir.resolve(file)).with_context(|| {
                        format!("reading the shared secret file {}", file.display())
                    })?,
                    &format!("the file {}", file.display()),
                )?,
                _ => anyhow::bail!(
                    "auth.external {:?}: give exactly one of jwks_file, secret_env and secret_file",
                    e.issuer
                ),
            };
            if e.issuer == config.issuer {
                anyhow::bail!(
                    "auth.external {:?}: that is this server's own issuer (auth.issuer)",
                    e.issuer
                );
            }
            external.push(External {
                issuer: e.issuer.clone(),
                audience: e.audience.clone(),
                keys,
                role_claim: role_claim_path(&e.role_claim),
                require_exp: e.require_exp,
            });
        }
        let accounts = if whole.accounts.enabled {
            let issuer = whole.accounts.token_issuer(config);
            match external.iter().find(|e| e.issuer == issuer) {
                Some(External {
                    keys: IssuerKeys::Shared(secret),
                    ..
                }) => Some(EncodingKey::from_secret(secret)),
                Some(_) => anyhow::bail!(
                    "accounts.issuer {issuer:?} is an [[auth.external]] issuer with a JWKS: people's tokens need its shared secret to be signed"
                ),
                None => {
                    external.push(External {
                        issuer,
                        audience: whole.accounts.audience.clone(),
                        keys: IssuerKeys::Shared(jwt_key.to_vec()),
                        role_claim: role_claim_path("role"),
                        require_exp: true,
                    });
                    Some(EncodingKey::from_secret(jwt_key))
                }
            }
        } else {
            None
        };
        Ok(Tokens {
            accounts,
            encoding: EncodingKey::from_secret(jwt_key),
            decoding: DecodingKey::from_secret(jwt_key),
            validation,
            issuer: config.issuer.clone(),
            audience: config.audience.clone(),
            external,
        })
    }

    /// A token for `client`, issued for its secret generation `generation`, living `ttl_s`.
    pub fn issue(
        &self,
        client: &Client,
        generation: i64,
        ttl_s: u64,
        scope: Option<String>,
    ) -> anyhow::Result<String> {
        let now = jsonwebtoken::get_current_timestamp();
        let claims = OwnClaims {
            sub: client.client_id.clone(),
            role: client.role.clone(),
            iss: self.issuer.clone(),
            aud: self.audience.clone(),
            iat: now,
            exp: now + ttl_s,
            gen: generation,
            scope,
        };
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &self.encoding)
            .context("signing the token")
    }

    /// A person's access token of `claims` (HS256), when `[accounts]` are on.
    pub fn sign_account(&self, claims: &Map<String, Json>) -> anyhow::Result<String> {
        let key = self
            .accounts
            .as_ref()
            .context("accounts are off: no key signs people's tokens")?;
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, key)
            .context("signing the token")
    }

    /// Checks `token`; `clients` are the known clients by id.
    pub fn verify(
        &self,
        token: &str,
        clients: &HashMap<String, Client>,
    ) -> Result<Verified, Refused> {
        let refuse = Refused::invalid;
        if token.len() > MAX_TOKEN_BYTES {
            return Err(refuse("the token is too long"));
        }
        let header = jsonwebtoken::decode_header(token).map_err(|_| undecodable(token))?;
        // RFC 7515 §4.1.11: a recipient must refuse a JWS whose `crit` names an extension it
        // does not understand; this server understands none (an empty list is invalid too).
        if header.crit.is_some() {
            return Err(refuse(
                "the token's header lists critical extensions (crit) this server does not understand",
            ));
        }
        if !self.external.is_empty() {
            // (a token without `iss` goes to the issuer configured as "")
            let issuer = unverified_issuer(token).unwrap_or_default();
            if let Some(ext) = self.external.iter().find(|e| e.issuer == issuer) {
                return verify_external(ext, &header, token);
            }
        }
        if header.alg != Algorithm::HS256 {
            return Err(algorithm_refused());
        }
        let data =
            jsonwebtoken::decode::<Map<String, Json>>(token, &self.decoding, &self.validation)
                .map_err(|e| describe(&e))?;
        let claims = data.claims;
        check_issued_at(&claims)?;
        let text = |name: &str| claims.get(name).and_then(Json::as_str);
        let (Some(sub), Some(role), Some(generation)) = (
            text("sub"),
            text("role"),
            claims.get("gen").and_then(Json::as_i64),
        ) else {
            return Err(refuse("the token lacks this server's claims"));
        };
        let client = clients.get(sub).ok_or_else(|| refuse(UNKNOWN_CLIENT))?;
        if client.revoked {
            return Err(refuse("the token's client is revoked"));
        }
        if !client.accepts(generation) {
            return Err(refuse("the token was issued for a retired client secret"));
        }
        if client.role != role {
            return Err(refuse(
                "the client's role has changed since the token was issued",
            ));
        }
        Ok(Verified {
            role: client.role.clone(),
            own: Some((client.client_id.clone(), generation)),
            claims,
        })
    }
}

fn verify_external(ext: &External, header: &Header, token: &str) -> Result<Verified, Refused> {
    let (key, validation) = match &ext.keys {
        IssuerKeys::Jwks(keys) => jwks_key(ext, keys, header)?,
        IssuerKeys::Shared(secret) => {
            if !matches!(
                header.alg,
                Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
            ) {
                return Err(algorithm_refused());
            }
            let mut validation = Validation::new(header.alg);
            validation.leeway = LEEWAY_S;
            validation.validate_nbf = true;
            if !ext.issuer.is_empty() {
                validation.set_issuer(&[&ext.issuer]);
            }
            if ext.audience.is_empty() {
                validation.validate_aud = false;
            } else {
                validation.set_audience(&[&ext.audience]);
            }
            // an `exp` is checked whenever present; required unless configured otherwise
            validation.set_required_spec_claims(if ext.require_exp { &["exp"] } else { &[] });
            (DecodingKey::from_secret(secret), validation)
        }
    };
    let data = jsonwebtoken::decode::<Map<String, Json>>(token, &key, &validation)
        .map_err(|e| describe(&e))?;
    check_issued_at(&data.claims)?;
    let role = claim_at(&data.claims, &ext.role_claim)
        .and_then(Json::as_str)
        .ok_or_else(|| {
            Refused::invalid(&format!(
                "the token has no {:?} claim",
                ext.role_claim.join(".")
            ))
        })?
        .to_string();
    Ok(Verified {
        role,
        claims: data.claims,
        own: None,
    })
}

/// A role claim as configured: a name (`role`), or a PostgREST path (`.app_metadata.role`,
/// `."https://example.com/role"`).
fn role_claim_path(claim: &str) -> Vec<String> {
    let Some(path) = claim.strip_prefix('.') else {
        return vec![claim.to_string()];
    };
    let mut segments = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"').unwrap_or(quoted.len());
            segments.push(quoted[..end].to_string());
            rest = quoted.get(end + 1..).unwrap_or("");
        } else {
            let end = rest.find('.').unwrap_or(rest.len());
            segments.push(rest[..end].to_string());
            rest = &rest[end..];
        }
        rest = rest.strip_prefix('.').unwrap_or(rest);
    }
    segments
}

/// The claim at `path` in `claims`.
fn claim_at<'c>(claims: &'c Map<String, Json>, path: &[String]) -> Option<&'c Json> {
    let (first, rest) = path.split_first()?;
    rest.iter()
        .try_fold(claims.get(first)?, |value, segment| value.get(segment))
}

/// The key of a JWKS issuer a token names, and the checks of its claims.
fn jwks_key(
    ext: &External,
    keys: &JwkSet,
    header: &Header,
) -> Result<(DecodingKey, Validation), Refused> {
    let refuse = Refused::invalid;
    let jwk = match &header.kid {
        Some(kid) => keys
            .find(kid)
            .ok_or_else(|| refuse("unknown key id (kid)"))?,
        None if keys.keys.len() == 1 => &keys.keys[0],
        None => return Err(refuse("the token names no key id (kid)")),
    };
    // The key decides the algorithm: never an HMAC algorithm over a public key.
    let allowed: &[Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => &[
            Algorithm::RS256,
            Algorithm::RS384,
            Algorithm::RS512,
            Algorithm::PS256,
            Algorithm::PS384,
            Algorithm::PS512,
        ],
        AlgorithmParameters::EllipticCurve(_) => &[Algorithm::ES256, Algorithm::ES384],
        AlgorithmParameters::OctetKeyPair(_) => &[Algorithm::EdDSA],
        _ => &[],
    };
    let pinned = jwk
        .common
        .key_algorithm
        .and_then(|a| Algorithm::try_from(a).ok());
    let ok = match pinned {
        Some(alg) => alg == header.alg && allowed.contains(&alg),
        None => allowed.contains(&header.alg),
    };
    if !ok {
        return Err(Refused::worded(
            BAD_ALGORITHM,
            "the token's algorithm does not fit its key",
        ));
    }
    let key = DecodingKey::from_jwk(jwk).map_err(|_| refuse("the issuer's key is unusable"))?;
    let mut validation = Validation::new(header.alg);
    validation.leeway = LEEWAY_S;
    validation.validate_nbf = true;
    validation.set_issuer(&[&ext.issuer]);
    validation.set_audience(&[&ext.audience]);
    validation.set_required_spec_claims(&["exp", "iss", "aud"]);
    Ok((key, validation))
}

/// The `iss` of a token before it is verified (only to pick the verifier).
fn unverified_issuer(token: &str) -> Option<String> {
    unverified_part(token, 1)?
        .get("iss")?
        .as_str()
        .map(str::to_string)
}

/// Part `n` of a token (0 its header, 1 its claims) as JSON, before it is verified.
fn unverified_part(token: &str, n: usize) -> Option<Map<String, Json>> {
    use base64::Engine as _;
    let part = token.split('.').nth(n)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(part.trim_end_matches('='))
        .ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// A failed decoding or check of a token, worded as PostgREST words it.
fn describe(e: &jsonwebtoken::errors::Error) -> Refused {
    use jsonwebtoken::errors::ErrorKind;
    match e.kind() {
        ErrorKind::ExpiredSignature => Refused::expired(),
        ErrorKind::ImmatureSignature => {
            Refused::of_claims("JWT not yet valid", "the token is not valid yet (nbf)")
        }
        ErrorKind::InvalidAudience => Refused::of_claims(
            "JWT not in audience",
            "the token's audience is not accepted",
        ),
        ErrorKind::InvalidSignature => Refused::worded(
            "No suitable key or wrong key type",
            "None of the keys was able to decode the JWT",
        ),
        ErrorKind::InvalidAlgorithm => algorithm_refused(),
        ErrorKind::InvalidIssuer => Refused::invalid("the token's issuer is not accepted"),
        ErrorKind::MissingRequiredClaim(_) => Refused::invalid("the token lacks a required claim"),
        _ => Refused::worded(CRYPTO_FAILED, "the token is malformed"),
    }
}

/// PostgREST's message for a token signed with an algorithm not accepted.
const BAD_ALGORITHM: &str = "Wrong or unsupported encoding algorithm";
/// PostgREST's message for a token of three parts that do not decode.
const CRYPTO_FAILED: &str = "JWT cryptographic operation failed";

fn algorithm_refused() -> Refused {
    Refused::worded(BAD_ALGORITHM, "the token's algorithm is not accepted")
}

/// Why a token's header does not decode: not three parts, an unsigned token (`alg: none`), or
/// parts that are not base64url JSON.
fn undecodable(token: &str) -> Refused {
    let parts = token.split('.').count();
    if parts != 3 {
        return Refused::worded(
            &format!("Expected 3 parts in JWT; got {parts}"),
            "the token is malformed",
        );
    }
    if unverified_part(token, 0)
        .and_then(|header| header.get("alg")?.as_str().map(str::to_string))
        .is_some_and(|alg| alg.eq_ignore_ascii_case("none"))
    {
        return Refused::worded(
            BAD_ALGORITHM,
            "JWT is unsecured but expected 'alg' was not 'none'",
        );
    }
    Refused::worded(CRYPTO_FAILED, "the token is malformed")
}

/// A token issued in the future (`iat` beyond the allowed clock skew), refused as PostgREST
/// refuses it.
fn check_issued_at(claims: &Map<String, Json>) -> Result<(), Refused> {
    match claims.get("iat").map(Json::as_f64) {
        None => Ok(()),
        Some(Some(iat)) if iat <= (jsonwebtoken::get_current_timestamp() + LEEWAY_S) as f64 => {
            Ok(())
        }
        Some(Some(_)) => Err(Refused::of_claims(
            "JWT issued at future",
            "the token's iat is in the future",
        )),
        Some(None) => Err(Refused::of_claims(
            "The JWT 'iat' claim must be a number",
            "the token's iat is not a number",
        )),
    }
}
