//! The broker's error type, and the one place where domain errors become Kafka error
//! codes (`Error::code`). Every front end (Kafka, gRPC, HTTP) answers with it.

use std::path::PathBuf;

use shale_records::ErrorCode;
use shale_records::batch::BatchError;

use shale_config::topic::ConfigError;
use shale_log::LogError;
use shale_log::producers::ProducerError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("topic '{0}' does not exist")]
    UnknownTopic(String),
    #[error("no topic has id {0}")]
    UnknownTopicId(uuid::Uuid),
    #[error("{0}")]
    InvalidTxnState(String),
    #[error("transactional id '{0}' is unknown")]
    TransactionalIdNotFound(String),
    #[error("not attempted: another partition of the request is invalid")]
    OperationNotAttempted,
    #[error(transparent)]
    Txn(#[from] shale_coordinator::txn::TxnError),
    #[error("partition {partition} of topic '{topic}' does not exist")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("invalid topic name '{name}': {reason}")]
    InvalidTopic { name: String, reason: &'static str },
    #[error("topic '{0}' already exists")]
    TopicAlreadyExists(String),
    #[error("{0}")]
    InvalidPartitions(String),
    #[error("{0}")]
    InvalidReplicationFactor(String),
    #[error("invalid replica assignment: {0}")]
    InvalidReplicaAssignment(String),
    #[error("no reassignment is in flight for this partition")]
    NoReassignmentInProgress,
    #[error(transparent)]
    InvalidConfig(#[from] ConfigError),
    #[error("batch of {size} bytes exceeds max.message.bytes {max}")]
    MessageTooLarge { size: usize, max: i64 },
    #[error("corrupt record batch: {0}")]
    CorruptMessage(BatchError),
    /// A batch stored in this broker's log fails its checks (a damaged file).
    #[error("{0}")]
    CorruptLocal(#[source] LogError),
    #[error("{0}")]
    UnsupportedCompression(BatchError),
    #[error("record batch magic {0} is not supported; send RecordBatch v2")]
    UnsupportedMessageFormat(i8),
    #[error("invalid record batch: {0}")]
    InvalidRecord(String),
    #[error("offset {offset} is out of range: the log holds [{log_start}, {log_end})")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    /// A new leader whose high watermark has not yet reached the start of its epoch
    /// (Kafka's rule, KAFKA-7615): the latest offset it could name may be below what
    /// the last leader acknowledged. Retriable.
    #[error(
        "the high watermark {high_watermark} of the new leader has not reached the start of its epoch ({epoch_start}) yet: retry"
    )]
    OffsetNotAvailable {
        high_watermark: i64,
        epoch_start: i64,
    },
    #[error("acks must be -1 (all), 0 or 1, not {0}")]
    InvalidRequiredAcks(i32),
    #[error("{0}")]
    InvalidRequest(String),
    #[error(
        "topic '{topic}' is a read replica of {of}: it takes no writes (write to the source cluster)"
    )]
    ReadReplica { topic: String, of: String },
    #[error(
        "topic '{0}' is read-only (read.only=true: being unmounted, or unmounted): it takes no writes"
    )]
    ReadOnly(String),
    #[error(
        "local disk limit reached: partition logs hold {used} bytes, the limit is {limit}; retry once segments are uploaded and deleted"
    )]
    LocalDiskFull { used: u64, limit: u64 },
    #[error("the broker is shutting down")]
    ShuttingDown,
    #[error("local storage failed: {0}")]
    Storage(#[source] std::io::Error),
    #[error("metastore failed: {0}")]
    Metastore(#[source] shale_metastore::Error),
    #[error("tiered storage failed: {0}")]
    Tiering(#[source] shale_tiering::uploader::UploadError),
    #[error("{0}")]
    RemoteCorrupt(#[source] shale_tiering::reader::ReadError),
    #[error("{0}; retry later")]
    RemoteUnavailable(#[source] shale_tiering::reader::ReadError),
    #[error("{0}; retry later")]
    RemoteLogNotReady(String),
    #[error("this broker does not lead partition {partition} of '{topic}' (leader: {leader})")]
    NotLeader {
        topic: String,
        partition: i32,
        leader: i32,
    },
    #[error("this broker's lease lapsed: it may no longer lead; refresh metadata and retry")]
    LeaseLapsed,
    #[error("leader epoch {sent} is older than the current epoch {current}")]
    FencedLeaderEpoch { sent: i32, current: i32 },
    #[error("leader epoch {sent} is newer than this leader's epoch {current}; retry")]
    UnknownLeaderEpoch { sent: i32, current: i32 },
    #[error("broker {0} is not a replica of this partition")]
    NotReplica(i32),
    #[error("the preferred replica, broker {0}, leads already")]
    ElectionNotNeeded(i32),
    #[error("the preferred replica, broker {0}, is not alive and in sync")]
    PreferredLeaderNotAvailable(i32),
    #[error("no replica of the partition is alive (replicas {0:?})")]
    EligibleLeadersNotAvailable(Vec<i32>),
    #[error("broker {replica}'s incarnation {sent} is not its registered one ({registered})")]
    StaleBrokerEpoch {
        replica: i32,
        sent: i64,
        registered: i64,
    },
    #[error("the ISR has {isr} members, fewer than min.insync.replicas = {min}")]
    NotEnoughReplicas { isr: usize, min: usize },
    #[error("written, but the ISR shrank to {isr} members, fewer than min.insync.replicas = {min}")]
    NotEnoughReplicasAfterAppend { isr: usize, min: usize },
    #[error("the ISR did not replicate up to offset {last_offset} in time")]
    ReplicationTimeout { last_offset: i64 },
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error(transparent)]
    Group(#[from] shale_coordinator::group::GroupError),
    #[error("a broker task failed: {0}")]
    TaskFailed(#[from] tokio::task::JoinError),
    #[error("the partition log refused the leader's records: {0}")]
    Replica(#[source] LogError),
    #[error("cannot leave the ISR of {partitions} partition(s): their state keeps changing")]
    StateContention { partitions: usize },
    #[error("not authorized to {0}")]
    TopicAuthorizationFailed(String),
    #[error("not authorized to {0}")]
    GroupAuthorizationFailed(String),
    #[error("not authorized to {0} the cluster")]
    ClusterAuthorizationFailed(String),
    #[error("not authorized to {0}")]
    TransactionalIdAuthorizationFailed(String),
    #[error("{0}")]
    UnsupportedSaslMechanism(String),
    #[error("{0}")]
    UnacceptableCredential(String),
    #[error("{0}")]
    ResourceNotFound(String),
    #[error("{0}")]
    DuplicateResource(String),
    /// One error answering several partitions (a request-level refusal).
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

impl Error {
    /// The Kafka error code a client sees.
    pub fn code(&self) -> ErrorCode {
        use Error::*;
        match self {
            UnknownTopic(_) | UnknownPartition { .. } => ErrorCode::UnknownTopicOrPartition,
            UnknownTopicId(_) => ErrorCode::UnknownTopicId,
            InvalidTxnState(_) => ErrorCode::InvalidTxnState,
            TransactionalIdNotFound(_) => ErrorCode::TransactionalIdNotFound,
            OperationNotAttempted => ErrorCode::OperationNotAttempted,
            Txn(e) => e.code(),
            InvalidTopic { .. } => ErrorCode::InvalidTopicException,
            TopicAlreadyExists(_) => ErrorCode::TopicAlreadyExists,
            InvalidPartitions(_) => ErrorCode::InvalidPartitions,
            InvalidReplicationFactor(_) => ErrorCode::InvalidReplicationFactor,
            InvalidReplicaAssignment(_) => ErrorCode::InvalidReplicaAssignment,
            NoReassignmentInProgress => ErrorCode::NoReassignmentInProgress,
            NotLeader { leader, .. } if *leader < 0 => ErrorCode::LeaderNotAvailable,
            NotLeader { .. } => ErrorCode::NotLeaderOrFollower,
            FencedLeaderEpoch { .. } => ErrorCode::FencedLeaderEpoch,
            UnknownLeaderEpoch { .. } => ErrorCode::UnknownLeaderEpoch,
            LeaseLapsed => ErrorCode::NotLeaderOrFollower,
            NotReplica(_) => ErrorCode::ReplicaNotAvailable,
            ElectionNotNeeded(_) => ErrorCode::ElectionNotNeeded,
            PreferredLeaderNotAvailable(_) => ErrorCode::PreferredLeaderNotAvailable,
            EligibleLeadersNotAvailable(_) => ErrorCode::EligibleLeadersNotAvailable,
            StaleBrokerEpoch { .. } => ErrorCode::StaleBrokerEpoch,
            NotEnoughReplicas { .. } => ErrorCode::NotEnoughReplicas,
            NotEnoughReplicasAfterAppend { .. } => ErrorCode::NotEnoughReplicasAfterAppend,
            ReplicationTimeout { .. } => ErrorCode::RequestTimedOut,
            InvalidConfig(_) => ErrorCode::InvalidConfig,
            MessageTooLarge { .. } => ErrorCode::MessageTooLarge,
            CorruptMessage(_) | CorruptLocal(_) => ErrorCode::CorruptMessage,
            UnsupportedCompression(_) => ErrorCode::UnsupportedCompressionType,
            UnsupportedMessageFormat(_) => ErrorCode::UnsupportedForMessageFormat,
            InvalidRecord(_) => ErrorCode::InvalidRecord,
            OffsetOutOfRange { .. } => ErrorCode::OffsetOutOfRange,
            OffsetNotAvailable { .. } => ErrorCode::OffsetNotAvailable,
            InvalidRequiredAcks(_) => ErrorCode::InvalidRequiredAcks,
            InvalidRequest(_) => ErrorCode::InvalidRequest,
            ReadReplica { .. } | ReadOnly(_) => ErrorCode::InvalidTopicException,
            ShuttingDown => ErrorCode::LeaderNotAvailable,
            Storage(_) | LocalDiskFull { .. } => ErrorCode::KafkaStorageError,
            Metastore(e) if e.is_retriable() => ErrorCode::RequestTimedOut,
            Tiering(_) | RemoteUnavailable(_) | RemoteLogNotReady(_) => {
                ErrorCode::KafkaStorageError
            }
            RemoteCorrupt(_) => ErrorCode::CorruptMessage,
            Producer(ProducerError::OutOfOrderSequence { .. }) => {
                ErrorCode::OutOfOrderSequenceNumber
            }
            Producer(ProducerError::InvalidEpoch { .. }) => ErrorCode::InvalidProducerEpoch,
            Producer(ProducerError::UnknownProducer { .. }) => ErrorCode::UnknownProducerId,
            Producer(ProducerError::CoordinatorFenced { .. }) => {
                ErrorCode::TransactionCoordinatorFenced
            }
            Producer(ProducerError::DuplicateInRequest { .. }) => {
                ErrorCode::DuplicateSequenceNumber
            }
            TopicAuthorizationFailed(_) => ErrorCode::TopicAuthorizationFailed,
            GroupAuthorizationFailed(_) => ErrorCode::GroupAuthorizationFailed,
            ClusterAuthorizationFailed(_) => ErrorCode::ClusterAuthorizationFailed,
            TransactionalIdAuthorizationFailed(_) => ErrorCode::TransactionalIdAuthorizationFailed,
            UnsupportedSaslMechanism(_) => ErrorCode::UnsupportedSaslMechanism,
            UnacceptableCredential(_) => ErrorCode::UnacceptableCredential,
            ResourceNotFound(_) => ErrorCode::ResourceNotFound,
            DuplicateResource(_) => ErrorCode::DuplicateResource,
            Group(e) => e.code(),
            Shared(e) => e.code(),
            Metastore(_) | TaskFailed(_) | Replica(_) | StateContention { .. } => {
                ErrorCode::UnknownServerError
            }
        }
    }

    /// Whether the client may retry the same request (by its code: one answer for
    /// broker and client, [`ErrorCode::is_retriable`]).
    pub fn is_retriable(&self) -> bool {
        self.code().is_retriable()
    }
}

impl From<BatchError> for Error {
    fn from(e: BatchError) -> Self {
        match e {
            BatchError::UnsupportedMagic(m) => Error::UnsupportedMessageFormat(m),
            BatchError::UnsupportedCompression(_) => Error::UnsupportedCompression(e),
            BatchError::Invalid(reason) => Error::InvalidRecord(reason.to_string()),
            BatchError::Truncated { .. }
            | BatchError::InvalidLength(_)
            | BatchError::CrcMismatch { .. } => Error::CorruptMessage(e),
        }
    }
}

impl From<LogError> for Error {
    fn from(e: LogError) -> Self {
        match e {
            LogError::OffsetOutOfRange {
                offset,
                log_start,
                log_end,
            } => Error::OffsetOutOfRange {
                offset,
                log_start,
                log_end,
            },
            LogError::Io(e) => Error::Storage(e),
            e @ LogError::Corrupt { .. } => Error::CorruptLocal(e),
            LogError::Producer(e) => Error::Producer(e),
            e @ LogError::OutOfSequence { .. } => Error::Replica(e),
        }
    }
}

impl From<shale_metastore::Error> for Error {
    fn from(e: shale_metastore::Error) -> Self {
        use shale_metastore::Error as M;
        match e {
            M::TopicAlreadyExists(name) => Error::TopicAlreadyExists(name),
            M::TopicNotFound(name) => Error::UnknownTopic(name),
            M::PartitionCountNotIncreased { .. } => Error::InvalidPartitions(e.to_string()),
            other => Error::Metastore(other),
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot {what} {}", path.display())]
    DataDir {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("data directory {} is in use by another shale-broker process", path.display())]
    Locked {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "data directory {} belongs to cluster {found}, but the metastore is cluster {expected}: \
         refusing to start (check --metastore-url and --data-dir)",
        path.display()
    )]
    OtherCluster {
        path: PathBuf,
        found: String,
        expected: uuid::Uuid,
    },
    #[error(
        "data directory {} belongs to broker {found}, not broker {expected}: refusing to start \
         (check --broker-id and --data-dir)",
        path.display()
    )]
    OtherBroker {
        path: PathBuf,
        found: String,
        expected: i32,
    },
    #[error("cannot open metastore {url}")]
    Metastore {
        url: String,
        #[source]
        source: shale_metastore::Error,
    },
    #[error("cannot open object store {url}")]
    ObjectStore {
        url: String,
        #[source]
        source: shale_tiering::store::StoreError,
    },
    #[error("cannot open the remote read cache")]
    ReadCache(#[source] shale_tiering::reader::ReadError),
    /// A start-up step failed (reading the cluster id, loading topics, registering…).
    #[error("{step}")]
    Step {
        step: &'static str,
        #[source]
        source: Error,
    },
}

impl StartError {
    pub(crate) fn step(step: &'static str) -> impl FnOnce(Error) -> Self {
        move |source| Self::Step { step, source }
    }
}
