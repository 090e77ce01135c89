//! The SQL implementations. PostgreSQL and SQLite run the very same statements (both
//! accept `$n` parameters and `ON CONFLICT … DO UPDATE`), so one macro body serves both
//! and the two cannot drift apart; only connection setup and migrations differ.
//!
//! Every multi-statement change runs in one transaction, so a crash leaves either the
//! old or the new state.
//!
//! The statements live by area in the submodules (`topics`, `cluster`, `remote`,
//! `groups`), each a macro generating inherent methods per backend; the
//! [`Metastore`] impl here forwards every call to the inherent method of the same name
//! (inherent methods take precedence over trait methods in method resolution).

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use uuid::Uuid;

use crate::{
    AclBinding, BrokerLease, CommittedOffset, ControllerLease, Error, Metastore, NewTopic,
    PartitionState, RemoteLog, RemoteSegment, RemoteSegmentState, RestoredTopic, Result,
    ScramCredential, StateGuard, Topic, TxnOffsets, TxnRecord,
};

/// Invokes `$m!` once per backend with its type, its database, the locking suffix of a
/// `SELECT` that guards an update, whether it can hold a replicated cluster, and `$now`.
//
// `$now`: the database's clock in ms since the Unix epoch. Leases are timed by it alone,
// so brokers' clocks are never compared with each other.
macro_rules! for_each_backend {
    ($m:ident) => {
        $m!(
            $crate::sql::PostgresMetastore,
            sqlx::Postgres,
            " FOR UPDATE",
            true,
            "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
        );
        $m!(
            $crate::sql::SqliteMetastore,
            sqlx::Sqlite,
            "",
            false,
            "CAST(unixepoch('subsec') * 1000 AS INTEGER)"
        );
    };
}

mod cluster;
mod groups;
mod remote;
mod topics;
mod txns;
mod users;

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

    /// A transaction that reads, then writes (`FOR UPDATE` guards its rows).
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
        Ok(self.pool.begin().await?)
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

    /// A transaction that reads, then writes. It takes SQLite's write lock at the
    /// start: a deferred transaction that reads and then writes fails at once with
    /// SQLITE_BUSY when another connection wrote meanwhile (the busy timeout does not
    /// apply to that upgrade), which concurrent clients hit.
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// A write naming a topic id: a foreign-key violation means the topic is gone.
fn unknown_topic_on_fk(e: sqlx::Error, topic_id: Uuid) -> Error {
    if e.as_database_error()
        .is_some_and(|d| d.is_foreign_key_violation())
    {
        Error::UnknownTopicId(topic_id)
    } else {
        e.into()
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.is_unique_violation())
}

/// The [`Metastore`] impl of one backend: each method forwards to the inherent method
/// of the same name that the area macros generate.
macro_rules! sql_metastore {
    ($ty:ty, $db:ty, $for_update:literal, $replicated:literal, $now:literal) => {
        #[async_trait]
        impl Metastore for $ty {
            async fn create_topic(&self, t: NewTopic) -> Result<Topic> {
                self.create_topic(t).await
            }

            async fn restore_topics(&self, topics: &[RestoredTopic]) -> Result<Vec<Topic>> {
                self.restore_topics(topics).await
            }

            async fn get_topic(&self, name: &str) -> Result<Option<Topic>> {
                self.get_topic(name).await
            }

            async fn list_topics(&self) -> Result<Vec<Topic>> {
                self.list_topics().await
            }

            async fn delete_topic(&self, name: &str) -> Result<Topic> {
                self.delete_topic(name, false).await
            }

            async fn detach_topic(&self, name: &str) -> Result<Topic> {
                self.delete_topic(name, true).await
            }

            async fn alter_topic_configs(
                &self,
                name: &str,
                set: &BTreeMap<String, String>,
                delete: &[String],
            ) -> Result<Topic> {
                self.alter_topic_configs(name, set, delete).await
            }

            async fn add_partitions(
                &self,
                name: &str,
                total: i32,
                assignments: &[Vec<i32>],
            ) -> Result<Topic> {
                self.add_partitions(name, total, assignments).await
            }

            async fn add_remote_segment(&self, s: &RemoteSegment) -> Result<()> {
                self.add_remote_segment(s).await
            }

            async fn transition_remote_segment(
                &self,
                segment_id: Uuid,
                from: RemoteSegmentState,
                to: RemoteSegmentState,
            ) -> Result<RemoteSegment> {
                self.transition_remote_segment(segment_id, from, to).await
            }

            async fn replace_remote_segments(
                &self,
                replaced: &[Uuid],
                replacements: &[Uuid],
            ) -> Result<()> {
                self.replace_remote_segments(replaced, replacements).await
            }

            async fn truncate_remote_log(
                &self,
                topic_id: Uuid,
                partition: i32,
                from: i64,
                leader_epoch: i32,
            ) -> Result<u64> {
                self.truncate_remote_log(topic_id, partition, from, leader_epoch)
                    .await
            }

            async fn remote_segment_topic_ids(&self) -> Result<Vec<Uuid>> {
                self.remote_segment_topic_ids().await
            }

            async fn undeleted_remote_segments(
                &self,
                topic_id: Uuid,
            ) -> Result<Vec<RemoteSegment>> {
                self.undeleted_remote_segments(topic_id).await
            }

            async fn remote_log_end_offset(&self, topic_id: Uuid, partition: i32) -> Result<i64> {
                self.remote_log_end_offset(topic_id, partition).await
            }

            async fn remote_logs(&self, topic_id: Uuid) -> Result<BTreeMap<i32, RemoteLog>> {
                self.remote_logs(topic_id).await
            }

            async fn list_remote_segments(
                &self,
                topic_id: Uuid,
                partition: i32,
                states: &[RemoteSegmentState],
            ) -> Result<Vec<RemoteSegment>> {
                self.list_remote_segments(topic_id, partition, states).await
            }

            async fn register_broker(
                &self,
                broker_id: i32,
                address: &str,
                endpoints: &[(String, String)],
                rack: Option<&str>,
            ) -> Result<i64> {
                self.register_broker(broker_id, address, endpoints, rack)
                    .await
            }

            async fn cluster_id(&self) -> Result<Uuid> {
                self.cluster_id().await
            }

            async fn renew_broker_lease(
                &self,
                broker_id: i32,
                broker_epoch: i64,
                address: &str,
                lease_ms: i64,
            ) -> Result<()> {
                self.renew_broker_lease(broker_id, broker_epoch, address, lease_ms)
                    .await
            }

            async fn list_brokers(&self) -> Result<Vec<BrokerLease>> {
                self.list_brokers().await
            }

            async fn set_decommissioned(&self, broker_id: i32, decommissioned: bool) -> Result<()> {
                self.set_decommissioned(broker_id, decommissioned).await
            }

            async fn try_acquire_controller(
                &self,
                broker_id: i32,
                lease_ms: i64,
            ) -> Result<Option<ControllerLease>> {
                self.try_acquire_controller(broker_id, lease_ms).await
            }

            async fn controller(&self) -> Result<Option<ControllerLease>> {
                self.controller().await
            }

            async fn list_partition_states(&self) -> Result<Vec<PartitionState>> {
                self.list_partition_states().await
            }

            async fn update_partition_state(
                &self,
                s: &PartitionState,
                guard: StateGuard,
            ) -> Result<PartitionState> {
                self.update_partition_state(s, guard).await
            }

            async fn advance_log_start(
                &self,
                topic_id: Uuid,
                partition: i32,
                offset: i64,
            ) -> Result<i64> {
                self.advance_log_start(topic_id, partition, offset).await
            }

            async fn log_start_offsets(&self) -> Result<Vec<(Uuid, i32, i64)>> {
                self.log_start_offsets().await
            }

            async fn report_partition_sizes(&self, sizes: &[(Uuid, i32, i64)]) -> Result<()> {
                self.report_partition_sizes(sizes).await
            }

            async fn partition_sizes(&self) -> Result<Vec<(Uuid, i32, i64)>> {
                self.partition_sizes().await
            }

            fn supports_replication(&self) -> bool {
                self.supports_replication()
            }

            async fn allocate_producer_ids(&self, count: i64) -> Result<i64> {
                self.allocate_producer_ids(count).await
            }

            async fn commit_offsets(
                &self,
                group: &str,
                offsets: &[CommittedOffset],
                live: Option<&[i32]>,
            ) -> Result<()> {
                self.commit_offsets(group, offsets, live).await
            }

            async fn committed_offsets(&self, group: &str) -> Result<Vec<CommittedOffset>> {
                self.committed_offsets(group).await
            }

            async fn offset_groups(&self) -> Result<Vec<String>> {
                self.offset_groups().await
            }

            async fn delete_group_offsets(&self, group: &str) -> Result<u64> {
                self.delete_group_offsets(group).await
            }

            async fn delete_committed_offsets(
                &self,
                group: &str,
                partitions: &[(Uuid, i32)],
            ) -> Result<()> {
                self.delete_committed_offsets(group, partitions).await
            }

            async fn transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>> {
                self.transaction(transactional_id).await
            }

            async fn transactions(&self) -> Result<Vec<TxnRecord>> {
                self.transactions().await
            }

            async fn transactions_to_check(&self, idle_before: i64) -> Result<Vec<TxnRecord>> {
                self.transactions_to_check(idle_before).await
            }

            async fn write_transaction(
                &self,
                record: &TxnRecord,
                offsets: TxnOffsets,
            ) -> Result<i64> {
                self.write_transaction(record, offsets).await
            }

            async fn put_txn_offsets(
                &self,
                transactional_id: &str,
                version: i64,
                group: &str,
                offsets: &[CommittedOffset],
            ) -> Result<()> {
                self.put_txn_offsets(transactional_id, version, group, offsets)
                    .await
            }

            async fn pending_txn_offsets(&self, group: &str) -> Result<Vec<(Uuid, i32)>> {
                self.pending_txn_offsets(group).await
            }

            async fn delete_transaction(
                &self,
                transactional_id: &str,
                version: i64,
            ) -> Result<bool> {
                self.delete_transaction(transactional_id, version).await
            }

            async fn list_scram_credentials(&self) -> Result<Vec<ScramCredential>> {
                self.list_scram_credentials().await
            }

            async fn upsert_scram_credential(&self, c: &ScramCredential) -> Result<()> {
                self.upsert_scram_credential(c).await
            }

            async fn delete_scram_credential(&self, user: &str, mechanism: &str) -> Result<bool> {
                self.delete_scram_credential(user, mechanism).await
            }

            async fn list_acls(&self) -> Result<Vec<AclBinding>> {
                self.list_acls().await
            }

            async fn create_acls(&self, acls: &[AclBinding]) -> Result<()> {
                self.create_acls(acls).await
            }

            async fn delete_acls(&self, acls: &[AclBinding]) -> Result<u64> {
                self.delete_acls(acls).await
            }

            async fn listen_for_changes(
                &self,
                notify: std::sync::Arc<tokio::sync::Notify>,
            ) -> Result<()> {
                self.listen(&notify).await
            }
        }
    };
}

for_each_backend!(sql_metastore);

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
