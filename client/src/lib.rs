//! Shale's Rust client: a connection ([`Client`]), admin calls, a producer and a
//! consumer, all over the broker's gRPC API; and the `shale` CLI built on them.
//!
//! Admin calls go to the bootstrap broker (any broker can answer them: the metastore
//! is shared). Produce, fetch and list-offsets go to each partition's leader, found
//! through a metadata call and cached; when a broker answers that it does not lead
//! (or cannot be reached) the client refreshes the metadata and retries with backoff
//! until its deadline.

mod acls;
mod admin;
pub mod assignor;
mod connection;
pub mod consumer;
mod data;
mod error;
mod find;
pub mod format;
pub mod group;
mod group_admin;
mod mount;
pub mod partitioner;
pub mod producer;
mod security;
mod users;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::security::Chan;
use shale_proto::v1::admin_client::AdminClient;
use shale_proto::v1::data_client::DataClient;

pub use assignor::Assignor;
pub use consumer::{ConsumedRecord, Consumer, StartFrom};
pub use error::{Error, Result};
pub(crate) use error::{check, check_result};
pub use find::FindAnswer;
pub use group::{GroupConfig, GroupConsumer, OffsetReset, RebalanceListener};
pub use producer::{
    Acks, DeliveryFuture, Partitioner, Partitioning, Producer, ProducerConfig, ProducerRecord,
    RecordMetadata,
};
pub use security::{ClientSecurity, TlsSettings};
pub use users::SCRAM_MECHANISMS;

/// What the client knows of the cluster: broker addresses, partition leaders, and a
/// channel per broker.
#[derive(Default)]
struct ClusterView {
    brokers: HashMap<i32, String>,
    leaders: HashMap<(String, i32), i32>,
    partition_counts: HashMap<String, i32>,
    channels: HashMap<String, Chan>,
}

/// Requests being assembled per leader broker: its data client and the partitions' parts.
pub(crate) type ByLeader<T> = BTreeMap<i32, (DataClient<Chan>, Vec<T>)>;

/// A connection to a cluster. Cheap to clone; clones share connections and metadata.
#[derive(Clone)]
pub struct Client {
    admin: AdminClient<Chan>,
    bootstrap_channel: Chan,
    /// Every address given at bootstrap, tried in turn when metadata is needed.
    bootstrap: Vec<String>,
    view: Arc<Mutex<ClusterView>>,
    /// Per-call deadline of data calls (a paused broker never answers).
    request_timeout: Duration,
    retry_timeout: Duration,
    /// TLS and credentials of every connection.
    security: Arc<ClientSecurity>,
}
