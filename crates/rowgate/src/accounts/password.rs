//! Passwords: hashed with Argon2id (the PHC string GoTrue also reads), checked against
//! Argon2 or bcrypt hashes (a Supabase project's people keep their passwords; a bcrypt hash is
//! replaced by an Argon2id one at their next sign-in), on threads of their own behind a
//! bounded queue: a flood of sign-ins waits there or is refused (429), and never takes the
//! threads that serve requests. The hashing threads run at the lowest priority (nice 19), so
//! they use the cores the requests leave idle: under a flood, reads keep their pace and
//! sign-ins slow down instead. An unknown email is checked against a hash made at start-up,
//! so that it costs the time a known one does. The password rules (length, character classes)
//! are Supabase's.

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Algorithm, Argon2, Params, Version};

use crate::config::AccountsConfig;

/// The password checks waiting for a hashing thread are too many.
#[derive(Debug)]
pub struct Busy;

/// The longest password taken, in bytes (Argon2 takes any length; this bounds the work).
pub const MAX_PASSWORD_BYTES: usize = 1024;

/// Work for a hashing thread.
type Work = Box<dyn FnOnce() + Send>;

/// Hashes and checks passwords.
pub struct Passwords {
    params: Params,
    /// The hashing threads' queue (they end when it is dropped).
    queue: crossbeam_channel::Sender<Work>,
    /// A hash of a random password: what an unknown email is checked against.
    decoy: String,
}

impl Passwords {
    /// Argon2id with `config`'s costs (one hash is made now, for unknown emails).
    pub fn new(config: &AccountsConfig) -> anyhow::Result<Passwords> {
        let params = Params::new(config.argon2_memory_kib, config.argon2_iterations, 1, None)
            .map_err(|e| anyhow::anyhow!("accounts: the Argon2 parameters are refused: {e}"))?;
        let decoy_password = crate::auth::secret::random_string(24)?;
        let decoy = hash_with(&params, &decoy_password)?;
        let (queue, work) = crossbeam_channel::bounded::<Work>(config.password_queue);
        for n in 0..config.password_workers.max(1) {
            let work = work.clone();
            std::thread::Builder::new()
                .name(format!("rowgate-passwords-{n}"))
                .spawn(move || {
                    // (Linux's niceness is the thread's own: this one yields to the others)
                    if let Err(e) = rustix::process::setpriority_process(None, 19) {
                        tracing::debug!("accounts: the hashing thread keeps its priority: {e}");
                    }
                    while let Ok(job) = work.recv() {
                        job();
                    }
                })?;
        }
        Ok(Passwords {
            params,
            queue,
            decoy,
        })
    }

    /// Runs `work` on a hashing thread, after those before it; `Busy` when the queue is full.
    async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, Busy> {
        let (done, result) = tokio::sync::oneshot::channel();
        let job: Work = Box::new(move || {
            let _ = done.send(work());
        });
        self.queue.try_send(job).map_err(|_| Busy)?;
        result.await.map_err(|_| Busy)
    }

    /// The Argon2id hash of `password` (a PHC string).
    pub async fn hash(&self, password: String) -> Result<anyhow::Result<String>, Busy> {
        let params = self.params.clone();
        self.run(move || hash_with(&params, &password)).await
    }

    /// Whether `password` matches `stored` (Argon2 or bcrypt); with no hash (an unknown
    /// email, an account without a password), the decoy is checked and the answer is no.
    pub async fn verify(&self, password: String, stored: Option<String>) -> Result<bool, Busy> {
        let (stored, real) = match stored.filter(|s| !s.is_empty()) {
            Some(s) => (s, true),
            None => (self.decoy.clone(), false),
        };
        let matched = self.run(move || matches(&password, &stored)).await?;
        Ok(matched && real)
    }

    /// Whether `stored` should be replaced by an Argon2id hash of this server's costs (a
    /// bcrypt hash, or Argon2 of other costs).
    pub fn outdated(&self, stored: &str) -> bool {
        match PasswordHash::new(stored) {
            Ok(hash) => {
                hash.algorithm.as_str() != "argon2id"
                    || Params::try_from(&hash).ok().is_none_or(|p| {
                        p.m_cost() != self.params.m_cost() || p.t_cost() != self.params.t_cost()
                    })
            }
            Err(_) => true,
        }
    }
}

fn argon2(params: &Params) -> Argon2<'static> {
    Argon2::new(Algorithm::Argon2id, Version::V0x13, params.clone())
}

fn hash_with(params: &Params, password: &str) -> anyhow::Result<String> {
    let mut salt = [0u8; 16];
    getrandom::fill(&mut salt).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let salt = SaltString::encode_b64(&salt)
        .map_err(|e| anyhow::anyhow!("accounts: cannot encode a salt: {e}"))?;
    Ok(argon2(params)
        .hash_password(password.as_bytes(), &salt)
        .map_err(|e| anyhow::anyhow!("accounts: cannot hash the password: {e}"))?
        .to_string())
}

/// Whether `password` matches the Argon2 or bcrypt hash `stored` (a hash this server cannot
/// read matches nothing).
fn matches(password: &str, stored: &str) -> bool {
    if stored.starts_with("$argon2") {
        // (the hash's own parameters; Argon2 of any variant GoTrue writes or reads)
        return PasswordHash::new(stored).is_ok_and(|hash| {
            Argon2::default()
                .verify_password(password.as_bytes(), &hash)
                .is_ok()
        });
    }
    if stored.starts_with("$2") {
        return bcrypt::verify(password, stored).unwrap_or(false);
    }
    false
}

/// A character class a rule asks for: its characters as Supabase lists them, and the test.
type CharacterClass = (&'static str, fn(char) -> bool);

/// Why a password is refused by the rules, as Supabase says it: the reasons
/// (`length`, `characters`) and the message.
pub fn weaknesses(config: &AccountsConfig, password: &str) -> Option<(Vec<&'static str>, String)> {
    let mut reasons = Vec::new();
    let mut messages = Vec::new();
    if password.chars().count() < config.min_password_length {
        reasons.push("length");
        messages.push(format!(
            "Password should be at least {} characters.",
            config.min_password_length
        ));
    }
    let sets: &[CharacterClass] = match config.password_requirements.as_str() {
        "letters_digits" => &[
            (
                "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
                |c| c.is_ascii_alphabetic(),
            ),
            ("0123456789", |c| c.is_ascii_digit()),
        ],
        "lower_upper_letters_digits" => &[
            ("abcdefghijklmnopqrstuvwxyz", |c| c.is_ascii_lowercase()),
            ("ABCDEFGHIJKLMNOPQRSTUVWXYZ", |c| c.is_ascii_uppercase()),
            ("0123456789", |c| c.is_ascii_digit()),
        ],
        "lower_upper_letters_digits_symbols" => &[
            ("abcdefghijklmnopqrstuvwxyz", |c| c.is_ascii_lowercase()),
            ("ABCDEFGHIJKLMNOPQRSTUVWXYZ", |c| c.is_ascii_uppercase()),
            ("0123456789", |c| c.is_ascii_digit()),
            ("!@#$%^&*()_+-=[]{};'\\:\"|<>?,./`~", |c| {
                c.is_ascii_punctuation()
            }),
        ],
        _ => &[],
    };
    if sets.iter().any(|(_, has)| !password.chars().any(has)) {
        reasons.push("characters");
        let names: Vec<&str> = sets.iter().map(|(name, _)| *name).collect();
        messages.push(format!(
            "Password should contain at least one character of each: {}.",
            names.join(", ")
        ));
    }
    (!reasons.is_empty()).then(|| (reasons, messages.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> AccountsConfig {
        AccountsConfig {
            argon2_memory_kib: 64,
            argon2_iterations: 1,
            ..AccountsConfig::default()
        }
    }

    /// A hash made here verifies, a wrong password does not, a Supabase bcrypt hash verifies
    /// and is outdated, and an unknown account (no hash) never matches.
    #[tokio::test]
    async fn hashes_verify_and_bcrypt_is_read() {
        let passwords = Passwords::new(&config()).expect("passwords");
        let hash = passwords
            .hash("correct horse".into())
            .await
            .expect("not busy")
            .expect("hash");
        assert!(hash.starts_with("$argon2id$v=19$m=64,t=1,p=1$"), "{hash}");
        assert!(!passwords.outdated(&hash));
        assert!(passwords
            .verify("correct horse".into(), Some(hash.clone()))
            .await
            .expect("not busy"));
        assert!(!passwords
            .verify("wrong horse".into(), Some(hash))
            .await
            .expect("not busy"));
        let bcrypt = bcrypt::hash("supabase pw", 4).expect("bcrypt");
        assert!(passwords
            .verify("supabase pw".into(), Some(bcrypt.clone()))
            .await
            .expect("not busy"));
        assert!(passwords.outdated(&bcrypt));
        assert!(!passwords
            .verify("anything".into(), None)
            .await
            .expect("not busy"));
    }

    #[test]
    fn rules_word_their_reasons_as_supabase() {
        let mut c = config();
        assert_eq!(weaknesses(&c, "short").map(|w| w.0), Some(vec!["length"]));
        assert!(weaknesses(&c, "long enough").is_none());
        c.password_requirements = "lower_upper_letters_digits".into();
        let (reasons, message) = weaknesses(&c, "alllowercase").expect("weak");
        assert_eq!(reasons, vec!["characters"]);
        assert!(message.starts_with("Password should contain at least one character of each: abcdefghijklmnopqrstuvwxyz, ABCDEFGHIJKLMNOPQRSTUVWXYZ, 0123456789"), "{message}");
        assert!(weaknesses(&c, "Mixed1234").is_none());
    }
}
