//! Users: SCRAM credentials. The password is salted and iterated here (PBKDF2, as
//! Kafka's tools do), so it never leaves the client.

use std::num::NonZeroU32;

use ring::rand::{SecureRandom, SystemRandom};
use shale_proto::v1::*;

use crate::{Client, Error, Result, check, check_result};

/// The SCRAM mechanisms a user can have a credential for.
pub const SCRAM_MECHANISMS: [&str; 2] = ["SCRAM-SHA-256", "SCRAM-SHA-512"];

/// PBKDF2 of `password` with the mechanism's hash.
fn salted_password(
    mechanism: &str,
    password: &[u8],
    salt: &[u8],
    iterations: u32,
) -> Result<Vec<u8>> {
    let (algorithm, len) = match mechanism {
        "SCRAM-SHA-256" => (ring::pbkdf2::PBKDF2_HMAC_SHA256, 32),
        "SCRAM-SHA-512" => (ring::pbkdf2::PBKDF2_HMAC_SHA512, 64),
        other => {
            return Err(Error::Invalid(format!(
                "'{other}' is not SCRAM-SHA-256 or SCRAM-SHA-512"
            )));
        }
    };
    let iterations = NonZeroU32::new(iterations)
        .ok_or_else(|| Error::Invalid("iterations must be > 0".into()))?;
    let mut out = vec![0; len];
    ring::pbkdf2::derive(algorithm, iterations, salt, password, &mut out);
    Ok(out)
}

impl Client {
    /// The named users' credentials (every user's for an empty list).
    pub async fn describe_users(&self, users: Vec<String>) -> Result<Vec<UserScramCredentials>> {
        let r = self
            .admin
            .clone()
            .describe_user_scram_credentials(DescribeUserScramCredentialsRequest { users })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.users)
    }

    /// Sets `user`'s password for each of `mechanisms` (creating the user).
    pub async fn set_user_password(
        &self,
        user: &str,
        password: &str,
        mechanisms: &[&str],
        iterations: i32,
    ) -> Result<()> {
        let mut upsertions = Vec::new();
        for mechanism in mechanisms {
            let mut salt = vec![0u8; 32];
            SystemRandom::new()
                .fill(&mut salt)
                .map_err(|_| Error::Invalid("no randomness for a salt".into()))?;
            let salted = salted_password(
                mechanism,
                password.as_bytes(),
                &salt,
                iterations.max(0) as u32,
            )?;
            upsertions.push(ScramCredentialUpsertion {
                user: user.into(),
                mechanism: mechanism.to_string(),
                iterations,
                salt: salt.into(),
                salted_password: salted.into(),
            });
        }
        self.alter_users(Vec::new(), upsertions).await
    }

    /// Removes `user`'s credentials for each of `mechanisms`.
    pub async fn delete_user(&self, user: &str, mechanisms: &[&str]) -> Result<()> {
        let deletions = mechanisms
            .iter()
            .map(|m| ScramCredentialDeletion {
                user: user.into(),
                mechanism: m.to_string(),
            })
            .collect();
        self.alter_users(deletions, Vec::new()).await
    }

    async fn alter_users(
        &self,
        deletions: Vec<ScramCredentialDeletion>,
        upsertions: Vec<ScramCredentialUpsertion>,
    ) -> Result<()> {
        let r = self
            .admin
            .clone()
            .alter_user_scram_credentials(AlterUserScramCredentialsRequest {
                deletions,
                upsertions,
            })
            .await?
            .into_inner();
        for result in r.results {
            check(result.error_code, &result.error_message)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn salted_password_is_pbkdf2() {
        // RFC 7677's example: "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==, 4096 iterations.
        let salt = [
            0x5b, 0x6d, 0x99, 0x68, 0x9d, 0x12, 0x35, 0x8e, 0xec, 0xa0, 0x4b, 0x14, 0x12, 0x36,
            0xfa, 0x81,
        ];
        let a = salted_password("SCRAM-SHA-256", b"pencil", &salt, 4096).unwrap();
        let b = salted_password("SCRAM-SHA-256", b"pencil", &salt, 4096).unwrap();
        assert_eq!((a.len(), a == b), (32, true));
        assert_eq!(
            salted_password("SCRAM-SHA-512", b"pencil", &salt, 4096)
                .unwrap()
                .len(),
            64
        );
        assert!(salted_password("SCRAM-MD5", b"pencil", &salt, 4096).is_err());
        assert!(salted_password("SCRAM-SHA-256", b"pencil", &salt, 0).is_err());
    }
}
