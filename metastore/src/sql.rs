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

use crate::cluster::{decode_ids, encode_ids};
use crate::{
    BrokerLease, CommittedOffset, ControllerLease, Error, Metastore, NewTopic, PartitionState,
    RemoteLog, RemoteSegment, RemoteSegmentState, Result, StateGuard, Topic,
};

pub struct PostgresMetastore {
    pool: PgPool,
}

impl PostgresMetastore {
    pub async fn connect(url: &str) -> Result<Self> {
        // One direct connection first: a pool reports an unreachable server only as
        // "pool timed out" after its acquire timeout; this says which host and why.
        let options = sqlx::postgres::PgConnectOptions::from_str(url)?;
        let host = format!("{}:{}", options.get_host(), options.get_port());
        let probe = tokio::time::timeout(
            Duration::from_secs(10),
            <sqlx::PgConnection as sqlx::Connection>::connect_with(&options),
        )
        .await;
        match probe {
            Err(_) => {
                return Err(Error::Unreachable {
                    host,
                    reason: "no answer within 10 s".into(),
                });
            }
            Ok(Err(sqlx::Error::Io(e))) => {
                return Err(Error::Unreachable {
                    host,
                    reason: e.to_string(),
                });
            }
            Ok(Err(e)) => return Err(e.into()),
            Ok(Ok(conn)) => {
                let _ = sqlx::Connection::close(conn).await;
            }
        }
        let pool = PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(options)
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

type PartitionStateRow = (Uuid, i32, String, i32, i32, String, String, i64);

const PARTITION_STATE_COLUMNS: &str =
    "topic_id, partition_id, replicas, leader, leader_epoch, isr, elr, version";

fn partition_state(row: PartitionStateRow) -> Result<PartitionState> {
    let (topic_id, partition, replicas, leader, leader_epoch, isr, elr, version) = row;
    Ok(PartitionState {
        topic_id,
        partition,
        replicas: decode_ids(&replicas)?,
        leader,
        leader_epoch,
        isr: decode_ids(&isr)?,
        elr: decode_ids(&elr)?,
        version,
    })
}

fn controller_lease(
    (broker_id, epoch, lease_expires_ms, remaining_ms): (i32, i64, i64, i64),
) -> ControllerLease {
    ControllerLease {
        broker_id,
        epoch,
        lease_expires_ms,
        remaining_ms,
    }
}

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

macro_rules! sql_metastore {
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
                        "INSERT INTO partition_state ({PARTITION_STATE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
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
        }

        #[async_trait]
        impl Metastore for $ty {
            async fn create_topic(&self, t: NewTopic) -> Result<Topic> {
                check_assignments(&t.assignments, t.partitions.max(0) as usize, t.replication_factor)?;
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
                for table in ["topic_configs", "partition_state"] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE topic_id = $1"))
                        .bind(topic.id)
                        .execute(&mut *tx)
                        .await?;
                }
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

            async fn add_partitions(&self, name: &str, total: i32, assignments: &[Vec<i32>]) -> Result<Topic> {
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
                    // Only a copy made under the partition's current leader epoch may
                    // finish: a deposed leader's late copy would overlap the new one's.
                    let epoch: Option<(i32,)> = sqlx::query_as(concat!(
                        "SELECT leader_epoch FROM partition_state WHERE topic_id = $1 AND partition_id = $2",
                        $for_update
                    ))
                    .bind(seg.topic_id)
                    .bind(seg.partition)
                    .fetch_optional(&mut *tx)
                    .await?;
                    if let Some((current,)) = epoch
                        && current > seg.leader_epoch
                    {
                        return Err(Error::StaleLeaderEpoch {
                            topic_id: seg.topic_id,
                            partition: seg.partition,
                            copied: seg.leader_epoch,
                            current,
                        });
                    }
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
                // `copied` remembers that this copy finished, whatever happens to it later.
                let updated = sqlx::query(
                    "UPDATE remote_segments SET state = $1, updated_at_ms = $2, \
                       copied = CASE WHEN $1 = 'COPY_FINISHED' THEN 1 ELSE copied END \
                     WHERE segment_id = $3 AND state = $4",
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

            async fn remote_log_end_offset(&self, topic_id: Uuid, partition: i32) -> Result<i64> {
                let (end,): (Option<i64>,) = sqlx::query_as(
                    "SELECT MAX(end_offset) FROM remote_segments \
                     WHERE topic_id = $1 AND partition_id = $2 AND copied = 1",
                )
                .bind(topic_id)
                .bind(partition)
                .fetch_one(&self.pool)
                .await?;
                Ok(end.unwrap_or(-1))
            }

            async fn remote_logs(&self, topic_id: Uuid) -> Result<BTreeMap<i32, RemoteLog>> {
                let mut out: BTreeMap<i32, RemoteLog> = BTreeMap::new();
                let ends: Vec<(i32, i64)> = sqlx::query_as(
                    "SELECT partition_id, MAX(end_offset) FROM remote_segments \
                     WHERE topic_id = $1 AND copied = 1 GROUP BY partition_id",
                )
                .bind(topic_id)
                .fetch_all(&self.pool)
                .await?;
                for (partition, end) in ends {
                    out.entry(partition).or_default().copied_end = end;
                }
                let unfinished: Vec<(i32,)> = sqlx::query_as(
                    "SELECT DISTINCT partition_id FROM remote_segments \
                     WHERE topic_id = $1 AND state IN ('COPY_STARTED', 'DELETE_STARTED')",
                )
                .bind(topic_id)
                .fetch_all(&self.pool)
                .await?;
                for (partition,) in unfinished {
                    out.entry(partition).or_default().unfinished = true;
                }
                let sql = format!(
                    "SELECT {REMOTE_SEGMENT_COLUMNS} FROM remote_segments WHERE topic_id = $1 \
                     AND state = 'COPY_FINISHED' ORDER BY partition_id, base_offset"
                );
                let rows = sqlx::query_as::<_, RemoteSegmentRow>(&sql)
                    .bind(topic_id)
                    .fetch_all(&self.pool)
                    .await?;
                for row in rows {
                    let seg = remote_segment(row)?;
                    out.entry(seg.partition)
                        .or_default()
                        .finished
                        .push(seg);
                }
                Ok(out)
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

            async fn register_broker(
                &self,
                broker_id: i32,
                address: &str,
                endpoints: &[(String, String)],
            ) -> Result<i64> {
                let (epoch,): (i64,) = sqlx::query_as(concat!(
                    "INSERT INTO brokers (broker_id, address, endpoints, broker_epoch, lease_expires_ms, registered_at_ms) \
                     VALUES ($1, $2, $3, 1, 0, ", $now, ") ON CONFLICT (broker_id) DO UPDATE \
                     SET address = excluded.address, endpoints = excluded.endpoints, \
                       broker_epoch = brokers.broker_epoch + 1, registered_at_ms = excluded.registered_at_ms \
                     RETURNING broker_epoch",
                ))
                .bind(broker_id)
                .bind(address)
                .bind(crate::cluster::encode_endpoints(endpoints))
                .fetch_one(&self.pool)
                .await?;
                Ok(epoch)
            }

            async fn cluster_id(&self) -> Result<Uuid> {
                sqlx::query(
                    "INSERT INTO cluster_meta (id, cluster_id) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
                )
                .bind(Uuid::new_v4())
                .execute(&self.pool)
                .await?;
                let (id,): (Uuid,) = sqlx::query_as("SELECT cluster_id FROM cluster_meta WHERE id = 1")
                    .fetch_one(&self.pool)
                    .await?;
                Ok(id)
            }

            async fn renew_broker_lease(
                &self,
                broker_id: i32,
                broker_epoch: i64,
                address: &str,
                lease_ms: i64,
            ) -> Result<()> {
                let updated = sqlx::query(concat!(
                    "UPDATE brokers SET address = $3, \
                       lease_expires_ms = CASE WHEN $4 > 0 THEN ", $now, " + $4 ELSE 0 END \
                     WHERE broker_id = $1 AND broker_epoch = $2",
                ))
                .bind(broker_id)
                .bind(broker_epoch)
                .bind(address)
                .bind(lease_ms)
                .execute(&self.pool)
                .await?;
                if updated.rows_affected() == 0 {
                    return Err(Error::BrokerEpochFenced { broker_id, broker_epoch });
                }
                Ok(())
            }

            async fn list_brokers(&self) -> Result<Vec<BrokerLease>> {
                let rows: Vec<(i32, String, String, i64, i64, i64, i64)> = sqlx::query_as(concat!(
                    "SELECT broker_id, address, endpoints, broker_epoch, lease_expires_ms, registered_at_ms, \
                       lease_expires_ms - ", $now, " FROM brokers ORDER BY broker_id",
                ))
                .fetch_all(&self.pool)
                .await?;
                let read_at = std::time::Instant::now();
                Ok(rows
                    .into_iter()
                    .map(|(broker_id, address, endpoints, broker_epoch, lease_expires_ms, registered_at_ms, remaining_ms)| {
                        BrokerLease {
                            broker_id,
                            address,
                            endpoints: crate::cluster::decode_endpoints(&endpoints),
                            broker_epoch,
                            lease_expires_ms,
                            registered_at_ms,
                            remaining_ms,
                            read_at,
                        }
                    })
                    .collect())
            }

            async fn try_acquire_controller(
                &self,
                broker_id: i32,
                lease_ms: i64,
            ) -> Result<Option<ControllerLease>> {
                // One statement: insert the first lease, or take over a lapsed one, or
                // renew our own; the epoch rises whenever the holder changes.
                let row: Option<(i32, i64, i64, i64)> = sqlx::query_as(concat!(
                    "INSERT INTO controller (id, broker_id, epoch, lease_expires_ms) VALUES (1, $1, 1, ", $now, " + $2) \
                     ON CONFLICT (id) DO UPDATE SET \
                       epoch = CASE WHEN controller.broker_id = excluded.broker_id THEN controller.epoch \
                                    ELSE controller.epoch + 1 END, \
                       broker_id = excluded.broker_id, \
                       lease_expires_ms = excluded.lease_expires_ms \
                     WHERE controller.broker_id = excluded.broker_id OR controller.lease_expires_ms <= ", $now, " \
                     RETURNING broker_id, epoch, lease_expires_ms, lease_expires_ms - ", $now,
                ))
                .bind(broker_id)
                .bind(lease_ms.max(0))
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(controller_lease))
            }

            async fn controller(&self) -> Result<Option<ControllerLease>> {
                let row: Option<(i32, i64, i64, i64)> = sqlx::query_as(concat!(
                    "SELECT broker_id, epoch, lease_expires_ms, lease_expires_ms - ", $now,
                    " FROM controller WHERE id = 1",
                ))
                .fetch_optional(&self.pool)
                .await?;
                Ok(row.map(controller_lease))
            }

            async fn list_partition_states(&self) -> Result<Vec<PartitionState>> {
                let rows: Vec<PartitionStateRow> = sqlx::query_as(&format!(
                    "SELECT {PARTITION_STATE_COLUMNS} FROM partition_state ORDER BY topic_id, partition_id"
                ))
                .fetch_all(&self.pool)
                .await?;
                rows.into_iter().map(partition_state).collect()
            }

            async fn update_partition_state(
                &self,
                s: &PartitionState,
                guard: StateGuard,
            ) -> Result<PartitionState> {
                let mut tx = self.pool.begin().await?;
                let lease_of = concat!(
                    "SELECT lease_expires_ms - ", $now, ", broker_epoch FROM brokers WHERE broker_id = $1",
                    $for_update
                );
                if let Some(broker_id) = guard.expired {
                    let lease: Option<(i64, i64)> =
                        sqlx::query_as(lease_of).bind(broker_id).fetch_optional(&mut *tx).await?;
                    if lease.is_some_and(|(remaining, _)| remaining > 0) {
                        return Err(Error::BrokerStillAlive(broker_id));
                    }
                }
                if let Some((broker_id, epoch)) = guard.alive {
                    let lease: Option<(i64, i64)> =
                        sqlx::query_as(lease_of).bind(broker_id).fetch_optional(&mut *tx).await?;
                    if !lease.is_some_and(|(remaining, e)| remaining > 0 && e == epoch) {
                        return Err(Error::BrokerNotAlive(broker_id));
                    }
                }
                let updated = sqlx::query(
                    "UPDATE partition_state SET leader = $3, leader_epoch = $4, isr = $5, elr = $6, \
                       version = version + 1 \
                     WHERE topic_id = $1 AND partition_id = $2 AND version = $7",
                )
                .bind(s.topic_id)
                .bind(s.partition)
                .bind(s.leader)
                .bind(s.leader_epoch)
                .bind(encode_ids(&s.isr))
                .bind(encode_ids(&s.elr))
                .bind(s.version)
                .execute(&mut *tx)
                .await?;
                let row: Option<PartitionStateRow> = sqlx::query_as(&format!(
                    "SELECT {PARTITION_STATE_COLUMNS} FROM partition_state WHERE topic_id = $1 AND partition_id = $2"
                ))
                .bind(s.topic_id)
                .bind(s.partition)
                .fetch_optional(&mut *tx)
                .await?;
                let Some(row) = row else {
                    return Err(Error::PartitionStateNotFound { topic_id: s.topic_id, partition: s.partition });
                };
                let current = partition_state(row)?;
                if updated.rows_affected() == 0 {
                    return Err(Error::PartitionStateConflict {
                        topic_id: s.topic_id,
                        partition: s.partition,
                        expected: s.version,
                        actual: current.version,
                    });
                }
                tx.commit().await?;
                Ok(current)
            }

            fn supports_replication(&self) -> bool {
                $replicated
            }

            async fn allocate_producer_ids(&self, count: i64) -> Result<i64> {
                let (first,): (i64,) = sqlx::query_as(
                    "UPDATE producer_ids SET next_id = next_id + $1 WHERE id = 1 RETURNING next_id - $1",
                )
                .bind(count)
                .fetch_one(&self.pool)
                .await?;
                Ok(first)
            }

            async fn commit_offsets(&self, group: &str, offsets: &[CommittedOffset]) -> Result<()> {
                let mut tx = self.pool.begin().await?;
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
                    .map_err(|e| {
                        if e.as_database_error().is_some_and(|d| d.is_foreign_key_violation()) {
                            Error::UnknownTopicId(o.topic_id)
                        } else {
                            e.into()
                        }
                    })?;
                }
                tx.commit().await?;
                Ok(())
            }

            async fn committed_offsets(&self, group: &str) -> Result<Vec<CommittedOffset>> {
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

            async fn offset_groups(&self) -> Result<Vec<String>> {
                let rows: Vec<(String,)> =
                    sqlx::query_as("SELECT DISTINCT group_id FROM group_offsets ORDER BY group_id")
                        .fetch_all(&self.pool)
                        .await?;
                Ok(rows.into_iter().map(|(g,)| g).collect())
            }

            async fn delete_group_offsets(&self, group: &str) -> Result<u64> {
                let r = sqlx::query("DELETE FROM group_offsets WHERE group_id = $1")
                    .bind(group)
                    .execute(&self.pool)
                    .await?;
                Ok(r.rows_affected())
            }

            async fn listen_for_changes(&self, notify: std::sync::Arc<tokio::sync::Notify>) -> Result<()> {
                self.listen(&notify).await
            }
        }
    };
}

// `$now`: the database's clock in ms since the Unix epoch. Leases are timed by it alone,
// so brokers' clocks are never compared with each other.
sql_metastore!(
    PostgresMetastore,
    sqlx::Postgres,
    " FOR UPDATE",
    true,
    "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
);
sql_metastore!(
    SqliteMetastore,
    sqlx::Sqlite,
    "",
    false,
    "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
);

impl SqliteMetastore {
    /// One process, no notifications: brokers poll.
    async fn listen(&self, _notify: &tokio::sync::Notify) -> Result<()> {
        Ok(())
    }
}

impl PostgresMetastore {
    /// LISTENs on the change channel (see the migration's triggers).
    async fn listen(&self, notify: &tokio::sync::Notify) -> Result<()> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.pool).await?;
        listener.listen("shale_changes").await?;
        // Anything may have changed while we were not listening.
        notify.notify_one();
        loop {
            listener.recv().await?;
            notify.notify_one();
        }
    }
}
