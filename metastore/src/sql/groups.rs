//! Group offsets and producer ids in SQL: committing, reading and deleting a group's
//! offsets, and reserving producer ids.

use uuid::Uuid;

use crate::{CommittedOffset, Error, Result};

/// The group offset and producer id methods of one backend (see `for_each_backend!`).
macro_rules! groups_sql {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        impl $ty {
            pub(super) async fn allocate_producer_ids(&self, count: i64) -> Result<i64> {
                let (first,): (i64,) = sqlx::query_as(
                    "UPDATE producer_ids SET next_id = next_id + $1 WHERE id = 1 RETURNING next_id - $1",
                )
                .bind(count)
                .fetch_one(&self.pool)
                .await?;
                Ok(first)
            }

            pub(super) async fn commit_offsets(
                &self,
                group: &str,
                offsets: &[CommittedOffset],
                live: Option<&[i32]>,
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                if let Some(assumed) = live {
                    // Running leases as `list_brokers` counts them.
                    let rows: Vec<(i32,)> = sqlx::query_as(concat!(
                        "SELECT broker_id FROM brokers \
                         WHERE lease_epoch = broker_epoch AND lease_expires_ms > ", $now, " \
                         ORDER BY broker_id",
                    ))
                    .fetch_all(&mut *tx)
                    .await?;
                    let now: Vec<i32> = rows.into_iter().map(|(id,)| id).collect();
                    let mut assumed = assumed.to_vec();
                    assumed.sort_unstable();
                    if now != assumed {
                        return Err(Error::LiveBrokersChanged { assumed, now });
                    }
                }
                for o in offsets {
                    sqlx::query(
                        "INSERT INTO group_offsets (group_id, topic_id, partition_id, committed, metadata, commit_ms) \
                         VALUES ($1, $2, $3, $4, $5, $6) \
                         ON CONFLICT (group_id, topic_id, partition_id) DO UPDATE SET \
                         committed = excluded.committed, metadata = excluded.metadata, commit_ms = excluded.commit_ms",
                    )
                    .bind(group)
                    .bind(o.topic_id)
                    .bind(o.partition)
                    .bind(o.offset)
                    .bind(&o.metadata)
                    .bind(o.commit_ms)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| super::unknown_topic_on_fk(e, o.topic_id))?;
                }
                tx.commit().await?;
                Ok(())
            }

            pub(super) async fn committed_offsets(&self, group: &str) -> Result<Vec<CommittedOffset>> {
                let rows: Vec<(Uuid, i32, i64, String, i64)> = sqlx::query_as(
                    "SELECT topic_id, partition_id, committed, metadata, commit_ms FROM group_offsets \
                     WHERE group_id = $1 ORDER BY topic_id, partition_id",
                )
                .bind(group)
                .fetch_all(&self.pool)
                .await?;
                Ok(rows
                    .into_iter()
                    .map(|(topic_id, partition, offset, metadata, commit_ms)| CommittedOffset {
                        topic_id,
                        partition,
                        offset,
                        metadata,
                        commit_ms,
                    })
                    .collect())
            }

            pub(super) async fn offset_groups(&self) -> Result<Vec<String>> {
                let rows: Vec<(String,)> =
                    sqlx::query_as("SELECT DISTINCT group_id FROM group_offsets ORDER BY group_id")
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows.into_iter().map(|(g,)| g).collect())
            }

            pub(super) async fn delete_group_offsets(&self, group: &str) -> Result<u64> {
                let r = sqlx::query("DELETE FROM group_offsets WHERE group_id = $1")
                    .bind(group)
                    .execute(&self.pool)
                    .await?;
                Ok(r.rows_affected())
            }

            pub(super) async fn delete_committed_offsets(
                &self,
                group: &str,
                partitions: &[(Uuid, i32)],
            ) -> Result<()> {
                let mut tx = self.begin_write().await?;
                for (topic_id, partition) in partitions {
                    sqlx::query(
                        "DELETE FROM group_offsets WHERE group_id = $1 AND topic_id = $2 AND partition_id = $3",
                    )
                    .bind(group)
                    .bind(topic_id)
                    .bind(partition)
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(())
            }
        }
    };
}

for_each_backend!(groups_sql);
