//! What travels between a follower and its leader, and the seam a transport plugs
//! into. The broker core knows no wire: the gRPC crate implements
//! [`ReplicaConnector`] for the follower side and feeds a leader's incoming requests
//! to the service's `replica_fetch_stream`.

use bytes::Bytes;
use futures::future::BoxFuture;
use shale_records::ErrorCode;
use uuid::Uuid;

/// One replica fetch: a follower asks its leader for every partition it follows
/// there.
#[derive(Debug, Clone)]
pub struct ReplicaFetchRequest {
    pub replica_id: i32,
    /// The follower's incarnation (broker epoch).
    pub replica_epoch: i64,
    /// How long the leader may hold the request when it has nothing new.
    pub max_wait_ms: u32,
    pub max_bytes: i32,
    pub partitions: Vec<ReplicaFetchPartition>,
}

#[derive(Debug, Clone)]
pub struct ReplicaFetchPartition {
    pub topic_id: Uuid,
    pub partition: i32,
    /// The leader epoch the follower follows.
    pub current_leader_epoch: i32,
    /// The follower's log end offset.
    pub fetch_offset: i64,
    /// The epoch of the follower's last batch (-1: empty log).
    pub last_fetched_epoch: i32,
    pub partition_max_bytes: i32,
    /// The version of the partition state the follower last applied.
    pub state_version: i64,
    /// The first offset the follower serves to consumers, remote log included
    /// (`None`: not said).
    pub log_start_offset: Option<i64>,
}

#[derive(Debug, Clone, Default)]
pub struct ReplicaFetchResponse {
    pub partitions: Vec<ReplicaPartitionData>,
}

/// The leader's answer for one partition.
#[derive(Debug, Clone)]
pub struct ReplicaPartitionData {
    pub topic_id: Uuid,
    pub partition: i32,
    pub error_code: ErrorCode,
    pub error_message: String,
    pub high_watermark: i64,
    /// The leader's local log start (also sent with `OFFSET_OUT_OF_RANGE`: where the
    /// follower restarts its log).
    pub local_log_start_offset: i64,
    /// (epoch, end offset) when the follower's log diverged: it truncates there.
    pub diverging: Option<(i32, i64)>,
    pub records: Bytes,
}

/// Markers a transaction coordinator has a leader write: one producer's transaction
/// ends in each of these partitions.
#[derive(Debug, Clone)]
pub struct TxnMarkers {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub commit: bool,
    /// The coordinator epoch the markers carry (raised for every ended transaction).
    pub coordinator_epoch: i32,
    pub partitions: Vec<(Uuid, i32)>,
}

/// A leader's answer for one partition's marker.
#[derive(Debug, Clone)]
pub struct MarkerResult {
    pub topic_id: Uuid,
    pub partition: i32,
    pub error_code: ErrorCode,
    pub error_message: String,
}

/// A transport's failure, with its source.
pub type TransportError = Box<dyn std::error::Error + Send + Sync>;

/// Opens links to leaders.
pub trait ReplicaConnector: Send + Sync + 'static {
    /// A link to the broker at `address` (its inter-broker endpoint).
    fn connect<'a>(
        &'a self,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn ReplicaLink>, TransportError>>;

    /// Has the leader at `address` write transaction markers (and wait for their
    /// replication): one answer per partition.
    fn write_markers<'a>(
        &'a self,
        address: &'a str,
        markers: TxnMarkers,
    ) -> BoxFuture<'a, Result<Vec<MarkerResult>, TransportError>> {
        let _ = markers;
        Box::pin(async move { Err(format!("no transport: cannot reach {address}").into()) })
    }
}

/// One open link to a leader: one request in flight at a time.
pub trait ReplicaLink: Send {
    /// Sends a request and waits for its answer (the caller bounds the wait).
    fn fetch(
        &mut self,
        request: ReplicaFetchRequest,
    ) -> BoxFuture<'_, Result<ReplicaFetchResponse, TransportError>>;
}

/// A connector for a broker that follows no one over a network (in-process tests):
/// every connection fails.
pub struct NoReplicaTransport;

impl ReplicaConnector for NoReplicaTransport {
    fn connect<'a>(
        &'a self,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn ReplicaLink>, TransportError>> {
        Box::pin(async move { Err(format!("no replica transport: cannot reach {address}").into()) })
    }
}

/// Why a follower's fetch stream to a leader ended.
#[derive(Debug, thiserror::Error)]
pub enum ReplicationError {
    #[error("broker {leader} has no known address")]
    NoAddress { leader: i32 },
    #[error("cannot connect to leader {leader} at {address}")]
    Connect {
        leader: i32,
        address: String,
        #[source]
        source: TransportError,
    },
    #[error("replica fetch from leader {leader} failed")]
    Transport {
        leader: i32,
        #[source]
        source: TransportError,
    },
    #[error("leader {leader} did not answer in time")]
    Timeout { leader: i32 },
    #[error("applying the leader's records failed")]
    Apply(#[from] tokio::task::JoinError),
}
