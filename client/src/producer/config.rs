//! Producer settings: acknowledgement level, batching, retries, idempotence, and how
//! records without a partition are spread.

use std::sync::Arc;
use std::time::Duration;

use shale_records::batch::Compression;

/// Acknowledgement level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Do not report offsets. The gRPC call still completes, which keeps the order of
    /// successive sends.
    None,
    /// Answered after the leader's append.
    Leader,
    /// Answered once the high watermark covers the records.
    All,
}

impl Acks {
    pub(super) fn wire(self) -> i32 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            _ => Err(format!("acks must be 0, 1 or all, not '{s}'")),
        }
    }
}

/// Chooses the partition of a record that names none.
pub trait Partitioner: Send + Sync {
    fn partition(&self, key: Option<&[u8]>, value: Option<&[u8]>, partitions: i32) -> i32;
}

/// How records without an explicit partition are spread.
#[derive(Clone, Default)]
pub enum Partitioning {
    /// Kafka's default: murmur2 of the key; unkeyed records stick to one partition
    /// until a batch's worth went there, then move on.
    #[default]
    Default,
    /// Every record to the next partition in turn, keyed or not (Kafka's
    /// `RoundRobinPartitioner`).
    RoundRobin,
    Custom(Arc<dyn Partitioner>),
}

/// Producer settings (Kafka names in the docs of each).
#[derive(Clone)]
pub struct ProducerConfig {
    pub acks: Acks,
    /// `batch.size`: a partition's batch is sent once it holds this many bytes.
    /// Default: 256 KiB.
    pub batch_size: usize,
    /// `linger.ms`: how long a batch that is not full waits for more records.
    /// Default: 5 ms.
    pub linger: Duration,
    /// `compression.type`. Default: none.
    pub compression: Compression,
    /// `max.in.flight.requests.per.connection`, here per partition. Default: 5 (the
    /// most idempotence allows).
    pub max_in_flight: usize,
    /// `delivery.timeout.ms`: how long a record may take from `send` to its answer,
    /// retries included. Default: the client's retry timeout.
    pub delivery_timeout: Duration,
    /// `retry.backoff.ms`, doubled per attempt up to 1 s. Default: 50 ms.
    pub retry_backoff: Duration,
    /// `buffer.memory`: `send` waits while this many bytes are unsent. Default: 64 MiB.
    pub buffer_memory: usize,
    /// `enable.idempotence`. `None`: on with `acks=all`, off otherwise.
    pub idempotence: Option<bool>,
    pub partitioning: Partitioning,
}
