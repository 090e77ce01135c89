//! The users' SCRAM credentials as this broker knows them: a copy of the metastore's,
//! replaced whole at every refresh (on each change notification, and polled), so an
//! authentication never waits for the database.

use std::collections::HashMap;
use std::sync::RwLock;

use super::scram::{ScramMechanism, StoredCredential};

pub struct Users {
    credentials: RwLock<HashMap<(String, ScramMechanism), StoredCredential>>,
    /// Key derivations (PLAIN) at once: each costs milliseconds of CPU, and they
    /// come from clients that have not authenticated yet.
    derivations: tokio::sync::Semaphore,
    /// Makes an unknown user's made-up salt stable and unguessable.
    secret: [u8; 32],
}

impl Default for Users {
    fn default() -> Self {
        let mut secret = [0u8; 32];
        // Without randomness the salts are merely predictable; nothing else depends on it.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret);
        Self {
            credentials: Default::default(),
            derivations: tokio::sync::Semaphore::new(2),
            secret,
        }
    }
}

/// The iterations of an unknown user's made-up credential.
const UNKNOWN_USER_ITERATIONS: i32 = 8192;

impl Users {
    /// Replaces the known credentials with the metastore's (rows of an unknown
    /// mechanism are skipped).
    pub fn replace(&self, rows: Vec<shale_metastore::ScramCredential>) {
        let map = rows
            .into_iter()
            .filter_map(|c| {
                let m = ScramMechanism::from_name(&c.mechanism)?;
                let stored = StoredCredential {
                    salt: c.salt,
                    stored_key: c.stored_key,
                    server_key: c.server_key,
                    iterations: c.iterations,
                };
                Some(((c.user, m), stored))
            })
            .collect();
        *self.credentials.write().unwrap_or_else(|p| p.into_inner()) = map;
    }

    pub fn scram(&self, user: &str, mechanism: ScramMechanism) -> Option<StoredCredential> {
        self.credentials
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(user.to_string(), mechanism))
            .cloned()
    }

    /// A user's credential, or, for an unknown user, a made-up one that no proof
    /// matches: an unknown user then fails where a wrong password does, with the same
    /// messages (RFC 5802, section 5.1).
    pub fn scram_or_decoy(&self, user: &str, mechanism: ScramMechanism) -> StoredCredential {
        self.scram(user, mechanism).unwrap_or_else(|| {
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.secret);
            let salt = ring::hmac::sign(&key, user.as_bytes()).as_ref().to_vec();
            StoredCredential {
                salt,
                // Not the keys of any password: H(ClientKey) is never all zeros.
                stored_key: vec![0; mechanism.output_len()],
                server_key: vec![0; mechanism.output_len()],
                iterations: UNKNOWN_USER_ITERATIONS,
            }
        })
    }

    /// Every user with a credential, and the (mechanism, iterations) of each.
    pub fn list(&self) -> Vec<(String, Vec<(ScramMechanism, i32)>)> {
        let map = self.credentials.read().unwrap_or_else(|p| p.into_inner());
        let mut by_user: std::collections::BTreeMap<String, Vec<(ScramMechanism, i32)>> =
            Default::default();
        for ((user, m), c) in map.iter() {
            by_user
                .entry(user.clone())
                .or_default()
                .push((*m, c.iterations));
        }
        by_user
            .into_iter()
            .map(|(user, mut creds)| {
                creds.sort();
                (user, creds)
            })
            .collect()
    }

    /// Whether `password` is `user`'s (PLAIN): checked against the user's SCRAM
    /// credential, SHA-512 first. The key derivation runs on the blocking pool.
    /// An unknown user costs the same derivation (against a made-up credential), so
    /// the time taken does not tell whether the user exists.
    pub async fn verify_password(&self, user: &str, password: &[u8]) -> bool {
        let (m, cred) = [ScramMechanism::Sha512, ScramMechanism::Sha256]
            .into_iter()
            .find_map(|m| self.scram(user, m).map(|c| (m, c)))
            .unwrap_or_else(|| {
                let m = ScramMechanism::Sha512;
                (m, self.scram_or_decoy(user, m))
            });
        let Ok(_permit) = self.derivations.acquire().await else {
            return false;
        };
        let password = password.to_vec();
        tokio::task::spawn_blocking(move || cred.matches_password(m, &password))
            .await
            .unwrap_or(false)
    }
}
