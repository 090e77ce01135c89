//! The users' SCRAM credentials as this broker knows them: a copy of the metastore's,
//! replaced whole at every refresh (on each change notification, and polled), so an
//! authentication never waits for the database.

use std::collections::HashMap;
use std::sync::RwLock;

use super::scram::{ScramMechanism, StoredCredential};

#[derive(Default)]
pub struct Users {
    credentials: RwLock<HashMap<(String, ScramMechanism), StoredCredential>>,
}

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
    pub async fn verify_password(&self, user: &str, password: &[u8]) -> bool {
        let Some((m, cred)) = [ScramMechanism::Sha512, ScramMechanism::Sha256]
            .into_iter()
            .find_map(|m| self.scram(user, m).map(|c| (m, c)))
        else {
            return false;
        };
        let password = password.to_vec();
        tokio::task::spawn_blocking(move || cred.matches_password(m, &password))
            .await
            .unwrap_or(false)
    }
}
