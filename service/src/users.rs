//! Users: their SCRAM credentials, as Kafka's DescribeUserScramCredentials and
//! AlterUserScramCredentials manage them. A client derives the salted password
//! itself, so the password never reaches the broker.

use std::collections::HashSet;

use super::{RequestContext, Service};
use shale_broker::error::{Error, Result};
use shale_security::ScramMechanism;
use shale_security::acl::Operation;
use shale_security::scram::{MAX_ITERATIONS, MIN_ITERATIONS};

/// Sets a user's credential for one mechanism.
#[derive(Debug, Clone)]
pub struct ScramUpsertion {
    pub user: String,
    /// Kafka's mechanism number (1: SCRAM-SHA-256, 2: SCRAM-SHA-512).
    pub mechanism: i8,
    pub iterations: i32,
    pub salt: Vec<u8>,
    /// PBKDF2 of the password with `salt` and `iterations`.
    pub salted_password: Vec<u8>,
}

/// Removes a user's credential for one mechanism.
#[derive(Debug, Clone)]
pub struct ScramDeletion {
    pub user: String,
    pub mechanism: i8,
}

/// A user's credentials: (mechanism, iterations) of each.
pub type UserCredentials = Vec<(ScramMechanism, i32)>;

impl Service {
    /// The named users' credentials (every user's for `None`), each with its own
    /// result: RESOURCE_NOT_FOUND for a user without any, DUPLICATE_RESOURCE for a
    /// user named twice.
    pub async fn describe_user_scram_credentials(
        &self,
        ctx: &RequestContext,
        users: Option<Vec<String>>,
    ) -> Result<Vec<(String, Result<UserCredentials>)>> {
        self.call(ctx, "DescribeUserScramCredentials", async {
            self.counted(self.authorize_cluster(ctx, Operation::Describe))?;
            let rows = self.broker.metastore().list_scram_credentials().await?;
            let mut all: std::collections::BTreeMap<String, UserCredentials> = Default::default();
            for row in rows {
                if let Some(m) = ScramMechanism::from_name(&row.mechanism) {
                    all.entry(row.user).or_default().push((m, row.iterations));
                }
            }
            let Some(users) = users else {
                return Ok(all.into_iter().map(|(u, c)| (u, Ok(c))).collect());
            };
            let mut seen = HashSet::new();
            let duplicated: HashSet<&String> = users.iter().filter(|u| !seen.insert(*u)).collect();
            let mut out = Vec::new();
            let mut answered = HashSet::new();
            for user in &users {
                if !answered.insert(user) {
                    continue;
                }
                let result = if duplicated.contains(user) {
                    Err(Error::DuplicateResource(format!(
                        "user '{user}' is named twice"
                    )))
                } else {
                    all.get(user).cloned().ok_or_else(|| {
                        Error::ResourceNotFound(format!("user '{user}' has no credentials"))
                    })
                };
                out.push((user.clone(), self.counted(result)));
            }
            Ok(out)
        })
        .await
    }

    /// Applies the deletions and upsertions, user by user: a user's changes all
    /// apply or none does, and each user gets one result.
    pub async fn alter_user_scram_credentials(
        &self,
        ctx: &RequestContext,
        deletions: Vec<ScramDeletion>,
        upsertions: Vec<ScramUpsertion>,
    ) -> Vec<(String, Result<()>)> {
        self.call(ctx, "AlterUserScramCredentials", async {
            let mut order: Vec<String> = Vec::new();
            for u in deletions
                .iter()
                .map(|d| &d.user)
                .chain(upsertions.iter().map(|u| &u.user))
            {
                if !order.contains(u) {
                    order.push(u.clone());
                }
            }
            if let Err(e) = self.authorize_cluster(ctx, Operation::Alter) {
                let e = std::sync::Arc::new(e);
                return order
                    .into_iter()
                    .map(|u| (u, self.counted(Err(Error::Shared(e.clone())))))
                    .collect();
            }
            let mut out = Vec::new();
            for user in order {
                let dels: Vec<&ScramDeletion> =
                    deletions.iter().filter(|d| d.user == user).collect();
                let ups: Vec<&ScramUpsertion> =
                    upsertions.iter().filter(|u| u.user == user).collect();
                let result = self.alter_one_user(&user, &dels, &ups).await;
                out.push((user, self.counted(result)));
            }
            // This broker sees its own change at once; others on the notification.
            if let Ok(rows) = self.broker.metastore().list_scram_credentials().await {
                self.broker.security.users().replace(rows);
            }
            out
        })
        .await
    }

    async fn alter_one_user(
        &self,
        user: &str,
        deletions: &[&ScramDeletion],
        upsertions: &[&ScramUpsertion],
    ) -> Result<()> {
        if user.is_empty() {
            return Err(Error::UnacceptableCredential(
                "the user name is empty".into(),
            ));
        }
        let mechanism = |t: i8| {
            ScramMechanism::from_kafka_type(t).ok_or_else(|| {
                Error::UnsupportedSaslMechanism(format!("unknown SCRAM mechanism {t}"))
            })
        };
        let mut touched = HashSet::new();
        for t in deletions
            .iter()
            .map(|d| d.mechanism)
            .chain(upsertions.iter().map(|u| u.mechanism))
        {
            let m = mechanism(t)?;
            if !touched.insert(m) {
                return Err(Error::DuplicateResource(format!(
                    "{} of user '{user}' is changed twice",
                    m.name()
                )));
            }
        }
        let mut rows = Vec::new();
        for u in upsertions {
            let m = mechanism(u.mechanism)?;
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&u.iterations) {
                return Err(Error::UnacceptableCredential(format!(
                    "iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}, not {}",
                    u.iterations
                )));
            }
            if u.salt.is_empty() || u.salted_password.len() != m.output_len() {
                return Err(Error::UnacceptableCredential(format!(
                    "a {} credential needs a salt and a salted password of {} bytes",
                    m.name(),
                    m.output_len()
                )));
            }
            let (stored_key, server_key) = m.keys(&u.salted_password);
            rows.push(shale_metastore::ScramCredential {
                user: user.to_string(),
                mechanism: m.name().to_string(),
                salt: u.salt.clone(),
                stored_key,
                server_key,
                iterations: u.iterations,
            });
        }
        let existing = self.broker.metastore().list_scram_credentials().await?;
        for d in deletions {
            let m = mechanism(d.mechanism)?;
            if !existing
                .iter()
                .any(|c| c.user == user && c.mechanism == m.name())
            {
                return Err(Error::ResourceNotFound(format!(
                    "user '{user}' has no {} credential",
                    m.name()
                )));
            }
        }
        for d in deletions {
            let m = mechanism(d.mechanism)?;
            self.broker
                .metastore()
                .delete_scram_credential(user, m.name())
                .await?;
        }
        for row in &rows {
            self.broker.metastore().upsert_scram_credential(row).await?;
        }
        Ok(())
    }
}
