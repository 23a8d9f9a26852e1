//! The server's master secret and what is derived from it: the pepper client secrets are hashed
//! with and the HS256 key tokens are signed with. It comes from `ROWGATE_AUTH_SECRET` or from
//! `auth.secret_file`, which is created (32 random bytes, mode 0600) when it does not exist, so
//! a fresh server needs no setup and `rowgate clients …` finds the same secret.

use std::io::Write as _;
use std::path::Path;

use anyhow::{bail, Context};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::config::Config;

/// A master secret shorter than this is refused (it is also the HS256 key's size).
const MIN_SECRET_BYTES: usize = 32;

/// Keys derived from the master secret.
#[derive(Clone)]
pub struct Secrets {
    /// HMAC key of stored client secrets.
    pub pepper: [u8; 32],
    /// HS256 key of issued tokens.
    pub jwt_key: [u8; 32],
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secrets(..)")
    }
}

/// Loads (or creates) the master secret `config` names and derives the keys.
pub fn load(config: &Config) -> anyhow::Result<Secrets> {
    let master = match std::env::var("ROWGATE_AUTH_SECRET") {
        Ok(value) => {
            if value.len() < MIN_SECRET_BYTES {
                bail!("ROWGATE_AUTH_SECRET must be at least {MIN_SECRET_BYTES} bytes long");
            }
            value.into_bytes()
        }
        Err(_) => read_or_create(&config.dir.resolve(&config.auth.secret_file))?,
    };
    Ok(Secrets {
        pepper: hmac_sha256(&master, b"rowgate client secret pepper"),
        jwt_key: hmac_sha256(&master, b"rowgate token key hs256"),
    })
}

fn read_or_create(path: &Path) -> anyhow::Result<Vec<u8>> {
    match std::fs::read_to_string(path) {
        Ok(text) => {
            let secret = text.trim().as_bytes().to_vec();
            if secret.len() < MIN_SECRET_BYTES {
                bail!(
                    "the secret in {} is shorter than {MIN_SECRET_BYTES} bytes; refusing to sign tokens with it",
                    path.display()
                );
            }
            Ok(secret)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if create(path)? {
                tracing::info!(file = %path.display(), "created a new master secret");
            }
            // ours, or the one another process (a sibling worker) linked in first
            read_or_create(path)
        }
        Err(e) => Err(e).with_context(|| format!("reading the secret file {}", path.display())),
    }
}

/// Writes a new secret to a private temporary file, then links it in place: the secret file
/// appears whole or not at all, and when several processes start at once exactly one wins.
/// Returns whether this process's secret was linked in.
fn create(path: &Path) -> anyhow::Result<bool> {
    let secret = random_string(32)?;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", random_string(6)?));
    let tmp = std::path::PathBuf::from(tmp);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let written = options.open(&tmp).and_then(|mut file| {
        file.write_all(secret.as_bytes())?;
        file.write_all(b"\n")?;
        file.sync_all()
    });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e).with_context(|| format!("creating the secret file {}", path.display())),
    }
}

/// `n` random bytes from the operating system, base64url without padding.
pub fn random_string(n: usize) -> anyhow::Result<String> {
    let mut bytes = vec![0u8; n];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no random bytes: {e}"))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// HMAC-SHA256 of `message` under `key`.
pub fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}
