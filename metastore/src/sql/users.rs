//! SCRAM credentials in SQL.

use crate::{Result, ScramCredential};

type Row = (String, String, Vec<u8>, Vec<u8>, Vec<u8>, i32);

/// The credential methods of one backend (see `for_each_backend!`).
macro_rules! users_sql {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        impl $ty {
            pub(super) async fn list_scram_credentials(&self) -> Result<Vec<ScramCredential>> {
                let rows: Vec<Row> = sqlx::query_as(
                    "SELECT user_name, mechanism, salt, stored_key, server_key, iterations \
                     FROM scram_credentials ORDER BY user_name, mechanism",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(user, mechanism, salt, stored_key, server_key, iterations)| {
                        ScramCredential {
                            user,
                            mechanism,
                            salt,
                            stored_key,
                            server_key,
                            iterations,
                        }
                    })
                    .collect())
            }

            pub(super) async fn upsert_scram_credential(&self, c: &ScramCredential) -> Result<()> {
                sqlx::query(
                    "INSERT INTO scram_credentials \
                     (user_name, mechanism, salt, stored_key, server_key, iterations) \
                     VALUES ($1, $2, $3, $4, $5, $6) \
                     ON CONFLICT (user_name, mechanism) DO UPDATE SET salt = excluded.salt, \
                     stored_key = excluded.stored_key, server_key = excluded.server_key, \
                     iterations = excluded.iterations",
                )
                .bind(&c.user)
                .bind(&c.mechanism)
                .bind(&c.salt)
                .bind(&c.stored_key)
                .bind(&c.server_key)
                .bind(c.iterations)
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            pub(super) async fn delete_scram_credential(&self, user: &str, mechanism: &str) -> Result<bool> {
                let r = sqlx::query(
                    "DELETE FROM scram_credentials WHERE user_name = $1 AND mechanism = $2",
                )
                .bind(user)
                .bind(mechanism)
                .execute(&self.pool)
                .await?;
                Ok(r.rows_affected() > 0)
            }
        }
    };
}

for_each_backend!(users_sql);
