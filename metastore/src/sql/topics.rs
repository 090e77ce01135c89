//! Topics in SQL: creating (with each partition's initial state), reading, deleting,
//! altering configs and adding partitions.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::cluster::PARTITION_STATE_COLUMNS;
use super::{is_unique_violation, now_ms};
use crate::cluster::encode_ids;
use crate::remote::{encode_aborted, encode_epochs};
use crate::{
    Error, NewTopic, PartitionState, RemoteSegment, RemoteSegmentState, RestoredTopic, Result,
    Topic,
};

type TopicRow = (Uuid, String, i32, i32, i64);

const SELECT_TOPIC: &str =
    "SELECT id, name, partitions, replication_factor, created_at_ms FROM topics WHERE name = $1";

/// Checks that `assignments` gives `count` partitions `replication_factor` distinct
/// replicas each.
fn check_assignments(
    assignments: &[Vec<i32>],
    count: usize,
    replication_factor: i32,
) -> Result<()> {
    if assignments.len() != count {
        return Err(Error::InvalidAssignment(format!(
            "{} replica assignments for {count} partitions",
            assignments.len()
        )));
    }
    for replicas in assignments {
        let mut distinct = replicas.clone();
        distinct.sort_unstable();
        distinct.dedup();
        if replicas.len() != replication_factor as usize || distinct.len() != replicas.len() {
            return Err(Error::InvalidAssignment(format!(
                "replicas {replicas:?} are not {replication_factor} distinct brokers"
            )));
        }
    }
    Ok(())
}

/// The topic methods of one backend (see `for_each_backend!`).
macro_rules! topics_sql {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        impl $ty {
            async fn insert_partition_states<'e, E>(
                exec: &mut E,
                topic_id: Uuid,
                first: i32,
                assignments: &[Vec<i32>],
            ) -> Result<()>
            where
                for<'c> &'c mut E: sqlx::Executor<'c, Database = $db>,
            {
                for (i, replicas) in assignments.iter().enumerate() {
                    let s = PartitionState::initial(topic_id, first + i as i32, replicas.clone());
                    sqlx::query(&format!(
                        "INSERT INTO partition_state ({PARTITION_STATE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, '', '', '')"
                    ))
                    .bind(s.topic_id)
                    .bind(s.partition)
                    .bind(encode_ids(&s.replicas))
                    .bind(s.leader)
                    .bind(s.leader_epoch)
                    .bind(encode_ids(&s.isr))
                    .bind(encode_ids(&s.elr))
                    .bind(s.version)
                    .execute(&mut *exec)
                    .await?;
                }
                Ok(())
            }

            async fn load<'e, E>(exec: E, row: TopicRow) -> Result<Topic>
            where
                E: sqlx::Executor<'e, Database = $db>,
            {
                let (id, name, partitions, replication_factor, created_at_ms) = row;
                let configs: Vec<(String, String)> =
                    sqlx::query_as("SELECT key, value FROM topic_configs WHERE topic_id = $1")
                        .bind(id)
                        .fetch_all(exec)
                        .await?;
                Ok(Topic {
                    id,
                    name,
                    partitions,
                    replication_factor,
                    configs: configs.into_iter().collect(),
                    created_at_ms,
                })
            }

            /// Inserts a topic's row and configs; `TopicAlreadyExists` on a taken name
            /// or id.
            async fn insert_topic<'e, E>(exec: &mut E, id: Uuid, t: &NewTopic, created_at_ms: i64) -> Result<()>
            where
                for<'c> &'c mut E: sqlx::Executor<'c, Database = $db>,
            {
                let inserted = sqlx::query(
                    "INSERT INTO topics (id, name, partitions, replication_factor, created_at_ms) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(id)
                .bind(&t.name)
                .bind(t.partitions)
                .bind(t.replication_factor)
                .bind(created_at_ms)
                .execute(&mut *exec)
                .await;
                match inserted {
                    Err(e) if is_unique_violation(&e) => return Err(Error::TopicAlreadyExists(t.name.clone())),
                    other => other?,
                };
                for (k, v) in &t.configs {
                    sqlx::query("INSERT INTO topic_configs (topic_id, key, value) VALUES ($1, $2, $3)")
                        .bind(id)
                        .bind(k)
                        .bind(v)
                        .execute(&mut *exec)
                        .await?;
                }
                Ok(())
            }

            pub(super) async fn create_topic(&self, t: NewTopic) -> Result<Topic> {
                check_assignments(&t.assignments, t.partitions.max(0) as usize, t.replication_factor)?;
                let id = Uuid::new_v4();
                let created_at_ms = now_ms();
                let mut tx = self.begin_write().await?;
                Self::insert_topic(&mut *tx, id, &t, created_at_ms).await?;
                Self::insert_partition_states(&mut *tx, id, 0, &t.assignments).await?;
                tx.commit().await?;
                Ok(Topic {
                    id,
                    name: t.name,
                    partitions: t.partitions,
                    replication_factor: t.replication_factor,
                    configs: t.configs,
                    created_at_ms,
                })
            }

            pub(super) async fn restore_topics(&self, topics: &[RestoredTopic]) -> Result<Vec<Topic>> {
                let mut tx = self.begin_write().await?;
                let mut out = Vec::new();
                for r in topics {
                    out.push(Self::restore_topic(&mut *tx, r).await?);
                }
                tx.commit().await?;
                Ok(out)
            }

            async fn restore_topic<'e, E>(exec: &mut E, r: &RestoredTopic) -> Result<Topic>
            where
                for<'c> &'c mut E: sqlx::Executor<'c, Database = $db>,
            {
                let t = &r.topic;
                let count = t.partitions.max(0) as usize;
                check_assignments(&t.assignments, count, t.replication_factor)?;
                if [r.leader_epochs.len(), r.log_starts.len(), r.copied_ends.len()] != [count; 3] {
                    return Err(Error::InvalidAssignment(format!(
                        "{} leader epochs, {} log starts and {} copied ends for {count} partitions",
                        r.leader_epochs.len(),
                        r.log_starts.len(),
                        r.copied_ends.len()
                    )));
                }
                let (rows,): (i64,) = sqlx::query_as(
                    "SELECT COUNT(*) FROM remote_segments WHERE topic_id = $1 AND state <> 'DELETE_FINISHED'",
                )
                .bind(r.id)
                .fetch_one(&mut *exec)
                .await?;
                if rows > 0 {
                    return Err(Error::TopicAlreadyExists(format!("{} (id {}, whose remote segments are still registered)", t.name, r.id)));
                }
                Self::insert_topic(&mut *exec, r.id, t, r.created_at_ms).await?;
                Self::insert_partition_states(&mut *exec, r.id, 0, &t.assignments).await?;
                for (i, (epoch, start)) in r.leader_epochs.iter().zip(&r.log_starts).enumerate() {
                    sqlx::query(
                        "UPDATE partition_state SET leader_epoch = $1, log_start_offset = $2 \
                         WHERE topic_id = $3 AND partition_id = $4",
                    )
                    .bind(*epoch)
                    .bind(*start)
                    .bind(r.id)
                    .bind(i as i32)
                    .execute(&mut *exec)
                    .await?;
                }
                let now = now_ms();
                // Where a partition's copies went past what is left of them, one row
                // deleted already remembers how far (as remote retention leaves it).
                let markers = r.copied_ends.iter().enumerate().filter_map(|(p, end)| {
                    let finished = r.segments.iter().filter(|s| s.partition == p as i32);
                    let finished_end = finished.map(|s| s.end_offset).max().unwrap_or(-1);
                    (*end > finished_end).then(|| RemoteSegment {
                        segment_id: Uuid::new_v4(),
                        topic_id: r.id,
                        partition: p as i32,
                        base_offset: *end,
                        end_offset: *end,
                        max_timestamp: -1,
                        leader_epoch: 0,
                        size_bytes: 0,
                        state: RemoteSegmentState::DeleteFinished,
                        created_at_ms: now,
                        updated_at_ms: now,
                        epochs: Vec::new(),
                        object_end_offset: *end,
                        aborted: Vec::new(),
                    })
                });
                let markers: Vec<RemoteSegment> = markers.collect();
                let rows = (r.segments.iter().map(|s| (s, RemoteSegmentState::CopyFinished, 1)))
                    .chain(markers.iter().map(|s| (s, RemoteSegmentState::DeleteFinished, 1)))
                    .chain(r.leftovers.iter().map(|s| (s, RemoteSegmentState::DeleteStarted, 0)));
                for (s, state, copied) in rows {
                    if s.topic_id != r.id || s.state != state {
                        return Err(Error::IllegalTransition { from: state, to: s.state });
                    }
                    sqlx::query(
                        "INSERT INTO remote_segments (segment_id, topic_id, partition_id, base_offset, \
                         end_offset, max_timestamp, leader_epoch, size_bytes, state, created_at_ms, \
                         updated_at_ms, epochs, object_end_offset, copied, aborted) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)",
                    )
                    .bind(s.segment_id)
                    .bind(s.topic_id)
                    .bind(s.partition)
                    .bind(s.base_offset)
                    .bind(s.end_offset)
                    .bind(s.max_timestamp)
                    .bind(s.leader_epoch)
                    .bind(s.size_bytes)
                    .bind(s.state.as_str())
                    .bind(s.created_at_ms)
                    .bind(s.updated_at_ms)
                    .bind(encode_epochs(&s.epochs))
                    .bind(s.object_end_offset)
                    .bind(copied)
                    .bind(encode_aborted(&s.aborted))
                    .execute(&mut *exec)
                    .await?;
                }
                Ok(Topic {
                    id: r.id,
                    name: t.name.clone(),
                    partitions: t.partitions,
                    replication_factor: t.replication_factor,
                    configs: t.configs.clone(),
                    created_at_ms: r.created_at_ms,
                })
            }

            pub(super) async fn get_topic(&self, name: &str) -> Result<Option<Topic>> {
                let mut conn = self.pool.acquire().await?;
                let row: Option<TopicRow> =
                    sqlx::query_as(SELECT_TOPIC).bind(name).fetch_optional(&mut *conn).await?;
                match row {
                    Some(row) => Ok(Some(Self::load(&mut *conn, row).await?)),
                    None => Ok(None),
                }
            }

            pub(super) async fn list_topics(&self) -> Result<Vec<Topic>> {
                // Two queries whatever the topic count: brokers call this on every refresh.
                let mut tx = self.begin_write().await?;
                let rows: Vec<TopicRow> = sqlx::query_as(
                    "SELECT id, name, partitions, replication_factor, created_at_ms FROM topics ORDER BY name",
                )
                .fetch_all(&mut *tx)
                .await?;
                let configs: Vec<(Uuid, String, String)> =
                    sqlx::query_as("SELECT topic_id, key, value FROM topic_configs").fetch_all(&mut *tx).await?;
                tx.commit().await?;
                let mut by_topic: std::collections::HashMap<Uuid, BTreeMap<String, String>> = Default::default();
                for (id, k, v) in configs {
                    by_topic.entry(id).or_default().insert(k, v);
                }
                Ok(rows
                    .into_iter()
                    .map(|(id, name, partitions, replication_factor, created_at_ms)| Topic {
                        id,
                        name,
                        partitions,
                        replication_factor,
                        configs: by_topic.remove(&id).unwrap_or_default(),
                        created_at_ms,
                    })
                    .collect())
            }

            /// Deletes a topic; `detach`: its remote segments' rows too.
            pub(super) async fn delete_topic(&self, name: &str, detach: bool) -> Result<Topic> {
                let mut tx = self.begin_write().await?;
                let row: Option<TopicRow> =
                    sqlx::query_as(SELECT_TOPIC).bind(name).fetch_optional(&mut *tx).await?;
                let row = row.ok_or_else(|| Error::TopicNotFound(name.to_string()))?;
                let topic = Self::load(&mut *tx, row).await?;
                let tables: &[&str] = if detach {
                    &["topic_configs", "partition_state", "remote_segments"]
                } else {
                    &["topic_configs", "partition_state"]
                };
                for table in tables {
                    sqlx::query(&format!("DELETE FROM {table} WHERE topic_id = $1"))
                        .bind(topic.id)
                        .execute(&mut *tx)
                        .await?;
                }
                sqlx::query("DELETE FROM topics WHERE id = $1").bind(topic.id).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(topic)
            }

            pub(super) async fn alter_topic_configs(
                &self,
                name: &str,
                set: &BTreeMap<String, String>,
                delete: &[String],
            ) -> Result<Topic> {
                let mut tx = self.begin_write().await?;
                let row: Option<TopicRow> =
                    sqlx::query_as(SELECT_TOPIC).bind(name).fetch_optional(&mut *tx).await?;
                let row = row.ok_or_else(|| Error::TopicNotFound(name.to_string()))?;
                let id = row.0;
                for k in delete {
                    sqlx::query("DELETE FROM topic_configs WHERE topic_id = $1 AND key = $2")
                        .bind(id)
                        .bind(k)
                        .execute(&mut *tx)
                        .await?;
                }
                for (k, v) in set {
                    sqlx::query(
                        "INSERT INTO topic_configs (topic_id, key, value) VALUES ($1, $2, $3) \
                         ON CONFLICT (topic_id, key) DO UPDATE SET value = excluded.value",
                    )
                    .bind(id)
                    .bind(k)
                    .bind(v)
                    .execute(&mut *tx)
                    .await?;
                }
                let topic = Self::load(&mut *tx, row).await?;
                tx.commit().await?;
                Ok(topic)
            }

            pub(super) async fn add_partitions(&self, name: &str, total: i32, assignments: &[Vec<i32>]) -> Result<Topic> {
                let mut tx = self.begin_write().await?;
                // One conditional UPDATE: concurrent callers cannot lower the count.
                let updated = sqlx::query("UPDATE topics SET partitions = $2 WHERE name = $1 AND partitions < $2")
                    .bind(name)
                    .bind(total)
                    .execute(&mut *tx)
                    .await?;
                let row: Option<TopicRow> =
                    sqlx::query_as(SELECT_TOPIC).bind(name).fetch_optional(&mut *tx).await?;
                let row = row.ok_or_else(|| Error::TopicNotFound(name.to_string()))?;
                if updated.rows_affected() == 0 {
                    return Err(Error::PartitionCountNotIncreased {
                        topic: name.to_string(),
                        current: row.2,
                        requested: total,
                    });
                }
                let first = total - assignments.len() as i32;
                // The UPDATE above locked the row, so the old count is still `first`.
                let old: Option<(i64,)> = sqlx::query_as(
                    "SELECT COUNT(*) FROM partition_state WHERE topic_id = $1",
                )
                .bind(row.0)
                .fetch_optional(&mut *tx)
                .await?;
                if old.map(|(n,)| n) != Some(i64::from(first)) {
                    return Err(Error::InvalidAssignment(format!(
                        "{} replica assignments do not match the {} new partitions",
                        assignments.len(),
                        total - old.map_or(0, |(n,)| n as i32)
                    )));
                }
                check_assignments(assignments, assignments.len(), row.3)?;
                Self::insert_partition_states(&mut *tx, row.0, first, assignments).await?;
                let topic = Self::load(&mut *tx, row).await?;
                tx.commit().await?;
                Ok(topic)
            }
        }
    };
}

for_each_backend!(topics_sql);
