//! The users' SCRAM credentials as this broker knows them: a copy of the metastore's,
//! replaced whole at every refresh (on each change notification, and polled), so an
//! authentication never waits for the database.

use std::collections::HashMap;
use std::sync::{Mutex, RwLock};

use super::scram::{ScramMechanism, StoredCredential};

pub struct Users {
    credentials: RwLock<HashMap<(String, ScramMechanism), StoredCredential>>,
    /// Key derivations (PLAIN) at once: each costs milliseconds of CPU, and they
    /// come from clients that have not authenticated yet.
    derivations: tokio::sync::Semaphore,
    /// Makes an unknown user's made-up salt stable and unguessable, and keys the
    /// verified passwords.
    secret: [u8; 32],
    /// Passwords verified (`verify_password_cached`).
    verified: Mutex<Verified>,
}

/// HMAC of user and password → (user, StoredKey of the credential it matched).
type Verified = HashMap<Vec<u8>, (String, Vec<u8>)>;

impl Default for Users {
    fn default() -> Self {
        let mut secret = [0u8; 32];
        // Without randomness the salts are merely predictable; nothing else depends on it.
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut secret);
        Self {
            credentials: Default::default(),
            derivations: tokio::sync::Semaphore::new(2),
            secret,
            verified: Default::default(),
        }
    }
}

/// Verified passwords remembered at most (then forgotten all at once).
const MAX_VERIFIED: usize = 4096;

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
        self.verify(user, password).await.is_some()
    }

    /// Like [`Users::verify_password`], for front ends that carry the password with
    /// every request (gRPC): a password verified once is remembered, keyed by an HMAC
    /// of user and password, for as long as the credential it matched stays the
    /// user's (a changed or deleted credential is derived again, and fails).
    pub async fn verify_password_cached(&self, user: &str, password: &[u8]) -> bool {
        let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &self.secret);
        let mut ctx = ring::hmac::Context::with_key(&key);
        ctx.update(user.as_bytes());
        ctx.update(&[0]);
        ctx.update(password);
        let tag = ctx.sign().as_ref().to_vec();
        let remembered = self.lock_verified().get(&tag).cloned();
        if let Some((u, stored_key)) = remembered
            && u == user
            && self
                .current(user)
                .is_some_and(|(_, c)| c.stored_key == stored_key)
        {
            return true;
        }
        let Some(stored_key) = self.verify(user, password).await else {
            return false;
        };
        let mut verified = self.lock_verified();
        if verified.len() >= MAX_VERIFIED {
            verified.clear();
        }
        verified.insert(tag, (user.to_string(), stored_key));
        true
    }

    /// Like [`Users::verify_password`], giving the StoredKey of the credential the
    /// password matched: a session kept on it ends when [`Users::credential_key`]
    /// no longer gives the same (the password changed or the user was deleted).
    pub async fn verify_password_key(&self, user: &str, password: &[u8]) -> Option<Vec<u8>> {
        self.verify(user, password).await
    }

    /// The StoredKey of the credential a password of `user` is checked against.
    pub fn credential_key(&self, user: &str) -> Option<Vec<u8>> {
        self.current(user).map(|(_, c)| c.stored_key)
    }

    fn lock_verified(&self) -> std::sync::MutexGuard<'_, Verified> {
        self.verified.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The credential a password is checked against: SHA-512's, else SHA-256's.
    fn current(&self, user: &str) -> Option<(ScramMechanism, StoredCredential)> {
        [ScramMechanism::Sha512, ScramMechanism::Sha256]
            .into_iter()
            .find_map(|m| self.scram(user, m).map(|c| (m, c)))
    }

    /// The StoredKey of the credential `password` matched, if it did.
    async fn verify(&self, user: &str, password: &[u8]) -> Option<Vec<u8>> {
        let (m, cred) = self.current(user).unwrap_or_else(|| {
            let m = ScramMechanism::Sha512;
            (m, self.scram_or_decoy(user, m))
        });
        let _permit = self.derivations.acquire().await.ok()?;
        let password = password.to_vec();
        tokio::task::spawn_blocking(move || {
            cred.matches_password(m, &password)
                .then_some(cred.stored_key)
        })
        .await
        .ok()
        .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(user: &str, password: &str) -> shale_metastore::ScramCredential {
        let m = ScramMechanism::Sha512;
        let salt = b"salt".to_vec();
        let (stored_key, server_key) = m.keys(&m.salted_password(password.as_bytes(), &salt, 4096));
        shale_metastore::ScramCredential {
            user: user.into(),
            mechanism: m.name().into(),
            salt,
            stored_key,
            server_key,
            iterations: 4096,
        }
    }

    #[tokio::test]
    async fn a_remembered_password_stops_working_when_the_credential_changes() {
        let users = Users::default();
        users.replace(vec![row("u", "first")]);
        assert!(users.verify_password_cached("u", b"first").await);
        assert!(
            users.verify_password_cached("u", b"first").await,
            "remembered"
        );
        assert!(!users.verify_password_cached("u", b"second").await);
        assert!(
            !users.verify_password_cached("v", b"first").await,
            "another user"
        );
        users.replace(vec![row("u", "second")]);
        assert!(!users.verify_password_cached("u", b"first").await);
        assert!(users.verify_password_cached("u", b"second").await);
        users.replace(Vec::new());
        assert!(
            !users.verify_password_cached("u", b"second").await,
            "deleted"
        );
    }
}
