//! The SQL implementations. PostgreSQL and SQLite run the very same statements (both
//! accept `$n` parameters and `ON CONFLICT … DO UPDATE`), so one macro body serves both
//! and the two cannot drift apart; only connection setup and migrations differ.
//!
//! Every multi-statement change runs in one transaction, so a crash leaves either the
//! old or the new state.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use uuid::Uuid;

use crate::{Error, Metastore, NewTopic, RemoteSegment, RemoteSegmentState, Result, Topic};

pub struct PostgresMetastore {
    pool: PgPool,
}

impl PostgresMetastore {
    pub async fn connect(url: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect(url)
            .await?;
        sqlx::migrate!("../migrations/postgres").run(&pool).await?;
        Ok(Self { pool })
    }
}

pub struct SqliteMetastore {
    pool: SqlitePool,
}

impl SqliteMetastore {
    pub async fn connect(url: &str) -> Result<Self> {
        let options = SqliteConnectOptions::from_str(url)?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // Metadata changes are rare and must survive power loss.
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        sqlx::migrate!("../migrations/sqlite").run(&pool).await?;
        Ok(Self { pool })
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.is_unique_violation())
}

type TopicRow = (Uuid, String, i32, i32, i64);

type RemoteSegmentRow = (Uuid, Uuid, i32, i64, i64, i64, i32, i64, String, i64, i64);

const REMOTE_SEGMENT_COLUMNS: &str = "segment_id, topic_id, partition_id, base_offset, end_offset, \
     max_timestamp, leader_epoch, size_bytes, state, created_at_ms, updated_at_ms";

fn remote_segment(row: RemoteSegmentRow) -> Result<RemoteSegment> {
    let (
        segment_id,
        topic_id,
        partition,
        base_offset,
        end_offset,
        max_timestamp,
        leader_epoch,
        size_bytes,
        state,
        c,
        u,
    ) = row;
    let state = RemoteSegmentState::parse(&state).ok_or_else(|| {
        Error::CorruptRow(format!("remote segment {segment_id} has state '{state}'"))
    })?;
    Ok(RemoteSegment {
        segment_id,
        topic_id,
        partition,
        base_offset,
        end_offset,
        max_timestamp,
        leader_epoch,
        size_bytes,
        state,
        created_at_ms: c,
        updated_at_ms: u,
    })
}

const SELECT_TOPIC: &str =
    "SELECT id, name, partitions, replication_factor, created_at_ms FROM topics WHERE name = $1";

macro_rules! sql_metastore {
    ($ty:ty, $db:ty) => {
        impl $ty {
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
        }

        #[async_trait]
        impl Metastore for $ty {
            async fn create_topic(&self, t: NewTopic) -> Result<Topic> {
                let id = Uuid::new_v4();
                let created_at_ms = now_ms();
                let mut tx = self.pool.begin().await?;
                let inserted = sqlx::query(
                    "INSERT INTO topics (id, name, partitions, replication_factor, created_at_ms) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(id)
                .bind(&t.name)
                .bind(t.partitions)
                .bind(t.replication_factor)
                .bind(created_at_ms)
                .execute(&mut *tx)
                .await;
                match inserted {
                    Err(e) if is_unique_violation(&e) => return Err(Error::TopicAlreadyExists(t.name)),
                    other => other?,
                };
                for (k, v) in &t.configs {
                    sqlx::query("INSERT INTO topic_configs (topic_id, key, value) VALUES ($1, $2, $3)")
                        .bind(id)
                        .bind(k)
                        .bind(v)
                        .execute(&mut *tx)
                        .await?;
                }
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

            async fn get_topic(&self, name: &str) -> Result<Option<Topic>> {
                let mut conn = self.pool.acquire().await?;
                let row: Option<TopicRow> =
                    sqlx::query_as(SELECT_TOPIC).bind(name).fetch_optional(&mut *conn).await?;
                match row {
                    Some(row) => Ok(Some(Self::load(&mut *conn, row).await?)),
                    None => Ok(None),
                }
            }

            async fn list_topics(&self) -> Result<Vec<Topic>> {
                // Two queries whatever the topic count: brokers call this on every refresh.
                let mut tx = self.pool.begin().await?;
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

            async fn delete_topic(&self, name: &str) -> Result<Topic> {
                let mut tx = self.pool.begin().await?;
                let row: Option<TopicRow> =
                    sqlx::query_as(SELECT_TOPIC).bind(name).fetch_optional(&mut *tx).await?;
                let row = row.ok_or_else(|| Error::TopicNotFound(name.to_string()))?;
                let topic = Self::load(&mut *tx, row).await?;
                sqlx::query("DELETE FROM topic_configs WHERE topic_id = $1")
                    .bind(topic.id)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM topics WHERE id = $1").bind(topic.id).execute(&mut *tx).await?;
                tx.commit().await?;
                Ok(topic)
            }

            async fn alter_topic_configs(
                &self,
                name: &str,
                set: &BTreeMap<String, String>,
                delete: &[String],
            ) -> Result<Topic> {
                let mut tx = self.pool.begin().await?;
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

            async fn add_partitions(&self, name: &str, total: i32) -> Result<Topic> {
                let mut tx = self.pool.begin().await?;
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
                let topic = Self::load(&mut *tx, row).await?;
                tx.commit().await?;
                Ok(topic)
            }

            async fn add_remote_segment(&self, s: &RemoteSegment) -> Result<()> {
                if s.state != RemoteSegmentState::CopyStarted {
                    return Err(Error::IllegalTransition { from: RemoteSegmentState::CopyStarted, to: s.state });
                }
                sqlx::query(&format!(
                    "INSERT INTO remote_segments ({REMOTE_SEGMENT_COLUMNS}) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
                ))
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
                .execute(&self.pool)
                .await?;
                Ok(())
            }

            async fn transition_remote_segment(
                &self,
                segment_id: Uuid,
                from: RemoteSegmentState,
                to: RemoteSegmentState,
            ) -> Result<RemoteSegment> {
                if !from.can_become(to) {
                    return Err(Error::IllegalTransition { from, to });
                }
                let mut tx = self.pool.begin().await?;
                let select = format!("SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE segment_id = $1");
                let row: Option<RemoteSegmentRow> =
                    sqlx::query_as(&select).bind(segment_id).fetch_optional(&mut *tx).await?;
                let mut seg = remote_segment(row.ok_or(Error::RemoteSegmentNotFound(segment_id))?)?;
                if seg.state != from {
                    return Err(Error::RemoteSegmentStateConflict { segment_id, expected: from, actual: seg.state });
                }
                if to == RemoteSegmentState::CopyFinished {
                    let other: Option<(Uuid,)> = sqlx::query_as(
                        "SELECT segment_id FROM remote_segments WHERE topic_id = $1 AND partition_id = $2 \
                         AND state = 'COPY_FINISHED' AND base_offset <= $3 AND end_offset >= $4 LIMIT 1",
                    )
                    .bind(seg.topic_id)
                    .bind(seg.partition)
                    .bind(seg.end_offset)
                    .bind(seg.base_offset)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some((other,)) = other {
                        return Err(Error::RemoteSegmentOverlap { segment_id, other });
                    }
                }
                let now = now_ms();
                let updated = sqlx::query(
                    "UPDATE remote_segments SET state = $1, updated_at_ms = $2 WHERE segment_id = $3 AND state = $4",
                )
                .bind(to.as_str())
                .bind(now)
                .bind(segment_id)
                .bind(from.as_str())
                .execute(&mut *tx)
                .await;
                let updated = match updated {
                    // A concurrent finish of the same base offset won the unique index.
                    Err(e) if is_unique_violation(&e) => {
                        return Err(Error::RemoteSegmentOverlap { segment_id, other: Uuid::nil() });
                    }
                    other => other?,
                };
                if updated.rows_affected() != 1 {
                    return Err(Error::RemoteSegmentStateConflict { segment_id, expected: from, actual: to });
                }
                tx.commit().await?;
                seg.state = to;
                seg.updated_at_ms = now;
                Ok(seg)
            }

            async fn remote_segment_topic_ids(&self) -> Result<Vec<Uuid>> {
                let rows: Vec<(Uuid,)> = sqlx::query_as(
                    "SELECT DISTINCT topic_id FROM remote_segments WHERE state <> 'DELETE_FINISHED'",
                )
                .fetch_all(&self.pool)
                .await?;
                Ok(rows.into_iter().map(|(id,)| id).collect())
            }

            async fn undeleted_remote_segments(&self, topic_id: Uuid) -> Result<Vec<RemoteSegment>> {
                let sql = format!(
                    "SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = $1 \
                     AND state <> 'DELETE_FINISHED' ORDER BY partition_id, base_offset"
                );
                let rows: Vec<RemoteSegmentRow> = sqlx::query_as(&sql).bind(topic_id).fetch_all(&self.pool).await?;
                rows.into_iter().map(remote_segment).collect()
            }

            async fn list_remote_segments(
                &self,
                topic_id: Uuid,
                partition: i32,
                states: &[RemoteSegmentState],
            ) -> Result<Vec<RemoteSegment>> {
                if states.is_empty() {
                    return Ok(Vec::new());
                }
                let placeholders: Vec<String> = (0..states.len()).map(|i| format!("${}", i + 3)).collect();
                let sql = format!(
                    "SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = $1 AND partition_id = $2 \
                     AND state IN ({}) ORDER BY base_offset, created_at_ms",
                    placeholders.join(", ")
                );
                let mut query = sqlx::query_as::<_, RemoteSegmentRow>(&sql).bind(topic_id).bind(partition);
                for s in states {
                    query = query.bind(s.as_str());
                }
                query.fetch_all(&self.pool).await?.into_iter().map(remote_segment).collect()
            }
        }
    };
}

sql_metastore!(PostgresMetastore, sqlx::Postgres);
sql_metastore!(SqliteMetastore, sqlx::Sqlite);
