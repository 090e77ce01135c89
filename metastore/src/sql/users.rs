//! SCRAM credentials in SQL.

use crate::{AclBinding, Result, ScramCredential};

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

type AclRow = (String, String, String, String, String, String, String);

/// The ACL methods of one backend (see `for_each_backend!`).
macro_rules! acls_sql {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        impl $ty {
            pub(super) async fn list_acls(&self) -> Result<Vec<AclBinding>> {
                let rows: Vec<AclRow> = sqlx::query_as(
                    "SELECT resource_type, resource_name, pattern_type, principal, host, \
                     operation, permission FROM acls ORDER BY resource_type, resource_name, \
                     pattern_type, principal, host, operation, permission",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(resource_type, resource_name, pattern_type, principal, host, operation, permission)| {
                        AclBinding {
                            resource_type,
                            resource_name,
                            pattern_type,
                            principal,
                            host,
                            operation,
                            permission,
                        }
                    })
                    .collect())
            }

            pub(super) async fn create_acls(&self, acls: &[AclBinding]) -> Result<()> {
                let mut tx = self.begin_write().await?;
                for a in acls {
                    sqlx::query(
                        "INSERT INTO acls (resource_type, resource_name, pattern_type, principal, \
                         host, operation, permission) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT DO NOTHING",
                    )
                    .bind(&a.resource_type)
                    .bind(&a.resource_name)
                    .bind(&a.pattern_type)
                    .bind(&a.principal)
                    .bind(&a.host)
                    .bind(&a.operation)
                    .bind(&a.permission)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }

            pub(super) async fn delete_acls(&self, acls: &[AclBinding]) -> Result<u64> {
                let mut tx = self.begin_write().await?;
                let mut deleted = 0;
                for a in acls {
                    let r = sqlx::query(
                        "DELETE FROM acls WHERE resource_type = $1 AND resource_name = $2 AND \
                         pattern_type = $3 AND principal = $4 AND host = $5 AND operation = $6 \
                         AND permission = $7",
                    )
                    .bind(&a.resource_type)
                    .bind(&a.resource_name)
                    .bind(&a.pattern_type)
                    .bind(&a.principal)
                    .bind(&a.host)
                    .bind(&a.operation)
                    .bind(&a.permission)
                    .execute(&mut *tx)
                    .await?;
                    deleted += r.rows_affected();
                }
                tx.commit().await?;
                Ok(deleted)
            }
        }
    };
}

for_each_backend!(acls_sql);
