//! The metastore: where topics, partitions, configs (and later replica sets, leases,
//! remote segments and group offsets) live. One [`Metastore`] trait, implemented for
//! PostgreSQL (clusters) and SQLite (the embedded single-node default) by the same SQL,
//! and checked by one conformance suite run against both (`tests/conformance.rs`).

mod cluster;
mod groups;
mod remote;
mod sql;
mod txns;
mod users;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use uuid::Uuid;

pub use cluster::{BrokerLease, ControllerLease, PartitionState, Recovering, StateGuard};
pub use groups::CommittedOffset;
pub use remote::{RemoteAbortedTxn, RemoteLog, RemoteSegment, RemoteSegmentState};
pub use sql::{PostgresMetastore, SqliteMetastore};
pub use txns::{TxnOffsets, TxnRecord, TxnState};
pub use users::{AclBinding, ScramCredential};

/// A topic as the metastore records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub id: Uuid,
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
    /// Topic-level config overrides only (Kafka names); defaults are the broker's business.
    pub configs: BTreeMap<String, String>,
    pub created_at_ms: i64,
}

/// What a caller asks for when creating a topic. Validation of names and configs is the
/// broker's job; the metastore only enforces uniqueness and positive counts.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
    pub configs: BTreeMap<String, String>,
    /// Replica broker ids of each partition (`partitions` lists of
    /// `replication_factor` ids), preferred leader first.
    pub assignments: Vec<Vec<i32>>,
}

/// A topic brought back from the object store alone (`shale cluster restore`): its id,
/// name, configs and partition count as they were, each partition's remote log, and
/// leader epochs above every epoch its remote log names, so a new leader's batches
/// never pass for the bucket's.
#[derive(Debug, Clone)]
pub struct RestoredTopic {
    pub id: Uuid,
    pub topic: NewTopic,
    pub created_at_ms: i64,
    /// Each partition's first leader epoch, by partition.
    pub leader_epochs: Vec<i32>,
    /// Each partition's log start offset (records below were deleted), by partition.
    pub log_starts: Vec<i64>,
    /// The remote logs' segments, `CopyFinished`.
    pub segments: Vec<RemoteSegment>,
    /// Each partition's highest offset copied once (-1: none), by partition: where
    /// its log goes on when that is past its segments (their records expired).
    pub copied_ends: Vec<i64>,
    /// Segments whose objects the restore left out (`DeleteStarted`): the partition's
    /// next leader deletes them before it copies, so no later restore meets them.
    pub leftovers: Vec<RemoteSegment>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("topic '{0}' already exists")]
    TopicAlreadyExists(String),
    #[error("topic '{0}' does not exist")]
    TopicNotFound(String),
    #[error("topic '{topic}' has {current} partitions; the new count {requested} must be larger")]
    PartitionCountNotIncreased {
        topic: String,
        current: i32,
        requested: i32,
    },
    #[error("remote segment {0} does not exist")]
    RemoteSegmentNotFound(Uuid),
    #[error("remote segment {segment_id} is {actual:?}, not {expected:?}")]
    RemoteSegmentStateConflict {
        segment_id: Uuid,
        expected: RemoteSegmentState,
        actual: RemoteSegmentState,
    },
    #[error("a remote segment cannot go from {from:?} to {to:?}")]
    IllegalTransition {
        from: RemoteSegmentState,
        to: RemoteSegmentState,
    },
    #[error("remote segment {segment_id} overlaps finished remote segment {other}")]
    RemoteSegmentOverlap { segment_id: Uuid, other: Uuid },
    #[error(
        "partition {partition} of topic {topic_id} changed (version {actual}, expected {expected})"
    )]
    PartitionStateConflict {
        topic_id: Uuid,
        partition: i32,
        expected: i64,
        actual: i64,
    },
    #[error("partition {partition} of topic {topic_id} has no state")]
    PartitionStateNotFound { topic_id: Uuid, partition: i32 },
    #[error("broker {0} still holds its lease")]
    BrokerStillAlive(i32),
    #[error("broker {0} has never registered")]
    BrokerNotFound(i32),
    #[error("broker {broker_id} incarnation {broker_epoch} was replaced by a newer registration")]
    BrokerEpochFenced { broker_id: i32, broker_epoch: i64 },
    #[error("broker {0} has no running lease in the incarnation the change was made for")]
    BrokerNotAlive(i32),
    #[error(
        "the brokers with running leases are {now:?}, not {assumed:?}: the group's coordinator may have moved"
    )]
    LiveBrokersChanged { assumed: Vec<i32>, now: Vec<i32> },
    #[error(
        "partition {partition} of topic {topic_id} moved to leader epoch {current}; a copy made under epoch {copied} cannot finish"
    )]
    StaleLeaderEpoch {
        topic_id: Uuid,
        partition: i32,
        copied: i32,
        current: i32,
    },
    #[error("{0}")]
    InvalidAssignment(String),
    #[error("topic {0} does not exist")]
    UnknownTopicId(Uuid),
    #[error("metastore row is corrupt: {0}")]
    CorruptRow(String),
    #[error("transactional id '{transactional_id}' changed since version {expected}")]
    TxnConflict {
        transactional_id: String,
        expected: i64,
    },
    #[error("metastore URL '{0}' is not supported: use postgres://… or sqlite://…")]
    UnsupportedUrl(String),
    #[error("cannot reach PostgreSQL at {host}: {reason}")]
    Unreachable { host: String, reason: String },
    #[error("metastore database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("metastore migration failed")]
    Migration(#[from] sqlx::migrate::MigrateError),
}

impl Error {
    /// Whether trying the same call again may succeed (connection trouble, not a verdict).
    pub fn is_retriable(&self) -> bool {
        matches!(
            self,
            Error::Database(
                sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
            )
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[async_trait]
pub trait Metastore: Send + Sync + 'static {
    /// Creates a topic with a fresh id; fails with `TopicAlreadyExists` on a taken name.
    async fn create_topic(&self, topic: NewTopic) -> Result<Topic>;
    /// Creates topics as they were (see [`RestoredTopic`]), all in one transaction:
    /// their partitions' states (leaders as `create_topic` gives them) and finished
    /// remote segments. `TopicAlreadyExists` on a taken name or id, or an id whose
    /// remote segments are still registered; nothing is written then.
    async fn restore_topics(&self, topics: &[RestoredTopic]) -> Result<Vec<Topic>>;
    async fn get_topic(&self, name: &str) -> Result<Option<Topic>>;
    /// All topics, ordered by name.
    async fn list_topics(&self) -> Result<Vec<Topic>>;
    /// Deletes a topic and its configs, returning what was deleted.
    async fn delete_topic(&self, name: &str) -> Result<Topic>;
    /// Deletes a topic as `delete_topic` does, and its remote segments' rows in the
    /// same transaction, so that its objects stay in the bucket (an unmount: the
    /// sweeper deletes only what rows name).
    async fn detach_topic(&self, name: &str) -> Result<Topic>;
    /// Sets and removes config overrides in one transaction.
    async fn alter_topic_configs(
        &self,
        name: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> Result<Topic>;
    /// Raises the partition count; never lowers it or leaves it equal. `assignments`
    /// holds the replicas of each new partition.
    async fn add_partitions(
        &self,
        name: &str,
        total: i32,
        assignments: &[Vec<i32>],
    ) -> Result<Topic>;

    /// Registers a (re)starting broker as a new incarnation: raises and returns its
    /// broker epoch, so no earlier incarnation can renew the lease any more. The lease
    /// keeps its expiry: an earlier incarnation that still runs (a duplicate broker id)
    /// trusts it until then, so leadership cannot move from it before then
    /// ([`StateGuard::expired`]). It does not make the new incarnation live
    /// ([`BrokerLease::is_alive`], [`StateGuard::alive`]): that takes a renewal by the
    /// new incarnation itself.
    /// `address` is where other brokers reach it, `endpoints` its address on each
    /// listener by name, `rack` the rack it runs in (`None`: not said).
    async fn register_broker(
        &self,
        broker_id: i32,
        address: &str,
        endpoints: &[(String, String)],
        rack: Option<&str>,
    ) -> Result<i64>;
    /// The cluster's id, created by the first caller.
    async fn cluster_id(&self) -> Result<Uuid>;
    /// Renews the lease of incarnation `broker_epoch` until `lease_ms` from now on the
    /// metastore's clock (`lease_ms <= 0` ends it: graceful shutdown). Fails with
    /// `BrokerEpochFenced` if a newer incarnation has registered.
    async fn renew_broker_lease(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        address: &str,
        lease_ms: i64,
    ) -> Result<()>;
    /// Every broker that ever registered, by id (dead ones have an expired lease).
    async fn list_brokers(&self) -> Result<Vec<BrokerLease>>;
    /// Marks a registered broker as being decommissioned, or no longer (`BrokerNotFound`
    /// for a broker that never registered).
    async fn set_decommissioned(&self, broker_id: i32, decommissioned: bool) -> Result<()>;
    /// Takes or renews the controller lease for `lease_ms` from now (metastore clock):
    /// succeeds when nobody holds it, the holder is `broker_id`, or the holder's lease
    /// has expired. `lease_ms <= 0` by the holder gives it up.
    async fn try_acquire_controller(
        &self,
        broker_id: i32,
        lease_ms: i64,
    ) -> Result<Option<ControllerLease>>;
    async fn controller(&self) -> Result<Option<ControllerLease>>;
    /// Every partition's state, by topic id and partition.
    async fn list_partition_states(&self) -> Result<Vec<PartitionState>>;
    /// Replaces a partition's replicas (and the reassignment in flight), leader,
    /// epoch, ISR, ELR and recovering replicas if its version is still
    /// `state.version` (compare-and-set); the stored version becomes one higher. The
    /// `guard`'s lease conditions are checked under locks of the brokers' rows, so a
    /// broker renewing its lease at the same moment is ordered before or after, never
    /// between: a broker that renewed and then read the metadata sees the change.
    async fn update_partition_state(
        &self,
        state: &PartitionState,
        guard: StateGuard,
    ) -> Result<PartitionState>;
    /// Raises the offset a partition's records were deleted below (DeleteRecords) to
    /// `offset`, never lowering it; returns the stored value. Fails with
    /// `PartitionStateNotFound` for an unknown partition.
    async fn advance_log_start(&self, topic_id: Uuid, partition: i32, offset: i64) -> Result<i64>;
    /// Every partition whose records were deleted below some offset: (topic id,
    /// partition, offset), by topic id and partition.
    async fn log_start_offsets(&self) -> Result<Vec<(Uuid, i32, i64)>>;
    /// Records partitions' local log sizes in bytes, (topic id, partition, bytes), as
    /// their leaders measured them; sizes of partitions that do not exist are dropped.
    async fn report_partition_sizes(&self, sizes: &[(Uuid, i32, i64)]) -> Result<()>;
    /// Every partition's last reported local log size: (topic id, partition, bytes).
    async fn partition_sizes(&self) -> Result<Vec<(Uuid, i32, i64)>>;
    /// Waits for change notifications and signals `notify` for each; returns only on
    /// error. Metastores without notifications return `Ok(())` at once (callers poll).
    async fn listen_for_changes(&self, notify: Arc<tokio::sync::Notify>) -> Result<()> {
        let _ = notify;
        Ok(())
    }
    /// Whether this metastore can hold a cluster of several brokers.
    fn supports_replication(&self) -> bool;

    /// Registers a segment whose copy is about to start (its state must be
    /// `CopyStarted`).
    async fn add_remote_segment(&self, segment: &RemoteSegment) -> Result<()>;
    /// Moves a remote segment from `from` to `to`, a compare-and-set on its state.
    /// Finishing a copy fails with `RemoteSegmentOverlap` if a finished segment of the
    /// partition already covers any of its offsets.
    async fn transition_remote_segment(
        &self,
        segment_id: Uuid,
        from: RemoteSegmentState,
        to: RemoteSegmentState,
    ) -> Result<RemoteSegment>;
    /// Remote compaction's swap, in one transaction: the `replaced` segments
    /// (`COPY_FINISHED`) become `COMPACTED` and their `replacements` (`COPY_STARTED`,
    /// uploaded under the current leader epoch, covering exactly the same offsets)
    /// become `COPY_FINISHED`. Nothing changes on any error.
    async fn replace_remote_segments(&self, replaced: &[Uuid], replacements: &[Uuid])
    -> Result<()>;
    /// Cuts the partition's remote log before `from`, where it diverges from the log
    /// of the leader at `leader_epoch` (after an unclean election), in one transaction
    /// and only while that epoch is current (else `StaleLeaderEpoch`): finished
    /// segments from `from` on become `DELETE_STARTED` (their objects go with the next
    /// cleanup), a row holding `from` ends before it (its object keeps the bytes; readers
    /// stop at the row's end), and offsets from `from` on no longer count as copied.
    /// Returns how many rows changed.
    async fn truncate_remote_log(
        &self,
        topic_id: Uuid,
        partition: i32,
        from: i64,
        leader_epoch: i32,
    ) -> Result<u64>;
    /// Ids of topics with remote segments not yet `DELETE_FINISHED` (rows outlive
    /// their topic, so a deleted topic's objects can still be found and removed).
    async fn remote_segment_topic_ids(&self) -> Result<Vec<Uuid>>;
    /// Every remote segment of a topic, all partitions, not yet `DELETE_FINISHED`.
    async fn undeleted_remote_segments(&self, topic_id: Uuid) -> Result<Vec<RemoteSegment>>;
    /// The highest offset of the partition ever copied to the object store (by a copy
    /// that finished, whatever became of it since); -1 if none.
    async fn remote_log_end_offset(&self, topic_id: Uuid, partition: i32) -> Result<i64>;
    /// The remote logs of every partition of a topic that has any, by partition: one
    /// read for a whole topic (a broker loading thousands of partitions).
    async fn remote_logs(&self, topic_id: Uuid) -> Result<BTreeMap<i32, RemoteLog>>;
    /// A partition's remote segments in any of `states`, by base offset.
    async fn list_remote_segments(
        &self,
        topic_id: Uuid,
        partition: i32,
        states: &[RemoteSegmentState],
    ) -> Result<Vec<RemoteSegment>>;

    /// Reserves `count` producer ids, unique across brokers, and returns the first.
    async fn allocate_producer_ids(&self, count: i64) -> Result<i64>;
    /// Stores a group's offsets (replacing earlier commits of the same partitions) in
    /// one transaction. With `live`, the brokers among which the committing broker
    /// found itself the group's coordinator, only while exactly those brokers hold
    /// running leases: else nothing is written and the answer is
    /// `LiveBrokersChanged` (a broker whose view of the cluster is stale cannot
    /// commit for a group another broker now coordinates).
    async fn commit_offsets(
        &self,
        group: &str,
        offsets: &[CommittedOffset],
        live: Option<&[i32]>,
    ) -> Result<()>;
    /// Every committed offset of a group, by topic id and partition.
    async fn committed_offsets(&self, group: &str) -> Result<Vec<CommittedOffset>>;
    /// Groups with committed offsets, by name.
    async fn offset_groups(&self) -> Result<Vec<String>>;
    /// Removes a group's committed offsets; returns how many there were.
    async fn delete_group_offsets(&self, group: &str) -> Result<u64>;
    /// Removes a group's committed offsets of these partitions (topic id, partition),
    /// in one transaction.
    async fn delete_committed_offsets(&self, group: &str, partitions: &[(Uuid, i32)])
    -> Result<()>;

    /// A transactional id's record.
    async fn transaction(&self, transactional_id: &str) -> Result<Option<TxnRecord>>;
    /// Every transactional id's record, by id.
    async fn transactions(&self) -> Result<Vec<TxnRecord>>;
    /// The records a coordinator's periodic pass looks at, by id: those with a
    /// transaction open or being decided, and those last updated before
    /// `idle_before` (ms).
    async fn transactions_to_check(&self, idle_before: i64) -> Result<Vec<TxnRecord>>;
    /// Writes a transactional id's record if the stored one is still at
    /// `record.version` (0: none stored), doing `offsets` to the offsets its
    /// transaction committed, in one transaction; returns the new version, or
    /// `TxnConflict`.
    async fn write_transaction(&self, record: &TxnRecord, offsets: TxnOffsets) -> Result<i64>;
    /// Stores offsets a transaction commits for `group` (replacing its earlier ones of
    /// the same partitions), if the transactional id's record is still at `version`;
    /// else `TxnConflict`.
    async fn put_txn_offsets(
        &self,
        transactional_id: &str,
        version: i64,
        group: &str,
        offsets: &[CommittedOffset],
    ) -> Result<()>;
    /// The partitions (topic id, partition) of `group` with offsets pending in a
    /// transaction.
    async fn pending_txn_offsets(&self, group: &str) -> Result<Vec<(Uuid, i32)>>;
    /// Removes a transactional id's record (and its pending offsets) if it is still
    /// at `version`; whether it was.
    async fn delete_transaction(&self, transactional_id: &str, version: i64) -> Result<bool>;

    /// Every user's SCRAM credentials, by user and mechanism.
    async fn list_scram_credentials(&self) -> Result<Vec<ScramCredential>>;
    /// Sets a user's credential for its mechanism, replacing an earlier one.
    async fn upsert_scram_credential(&self, credential: &ScramCredential) -> Result<()>;
    /// Removes a user's credential for a mechanism; whether there was one.
    async fn delete_scram_credential(&self, user: &str, mechanism: &str) -> Result<bool>;

    /// Every ACL binding, sorted.
    async fn list_acls(&self) -> Result<Vec<AclBinding>>;
    /// Adds the bindings (one that exists already is kept once), in one transaction.
    async fn create_acls(&self, acls: &[AclBinding]) -> Result<()>;
    /// Removes these exact bindings, in one transaction; how many there were.
    async fn delete_acls(&self, acls: &[AclBinding]) -> Result<u64>;
}

/// Opens the metastore a URL names and brings its schema up to date.
pub async fn open(url: &str) -> Result<Arc<dyn Metastore>> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresMetastore::connect(url).await?))
    } else if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteMetastore::connect(url).await?))
    } else {
        Err(Error::UnsupportedUrl(url.to_string()))
    }
}
