//! Shale's Rust client: a connection ([`Client`]), admin calls, a producer and a
//! consumer, all over the broker's gRPC API; and the `shale` CLI built on them.
//!
//! Admin calls go to the bootstrap broker (any broker can answer them: the metastore
//! is shared). Produce, fetch and list-offsets go to each partition's leader, found
//! through a metadata call and cached; when a broker answers that it does not lead
//! (or cannot be reached) the client refreshes the metadata and retries with backoff
//! until its deadline.

pub mod assignor;
pub mod consumer;
pub mod format;
pub mod group;
pub mod partitioner;
pub mod producer;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shale_proto::v1::admin_client::AdminClient;
use shale_proto::v1::data_client::DataClient;
use shale_proto::v1::groups_client::GroupsClient;
use shale_proto::v1::*;
use shale_records::ErrorCode;
use tonic::transport::{Channel, Endpoint};

pub use assignor::Assignor;
pub use consumer::{ConsumedRecord, Consumer, StartFrom};
pub use group::{GroupConfig, GroupConsumer, OffsetReset, RebalanceListener};
pub use producer::{
    Acks, DeliveryFuture, Partitioner, Partitioning, Producer, ProducerConfig, ProducerRecord,
    RecordMetadata,
};

/// Largest gRPC message the client sends or accepts.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot reach a broker at {address}: {}", root_cause(.source))]
    Connect {
        address: String,
        source: tonic::transport::Error,
    },
    #[error("request failed: {0}")]
    Rpc(#[from] tonic::Status),
    #[error("{code}: {message}")]
    Broker {
        code: &'static str,
        code_value: i32,
        message: String,
    },
    #[error("cannot decode a record batch: {0}")]
    Decode(#[from] shale_records::batch::BatchError),
    #[error("{0}")]
    Invalid(String),
    #[error("timed out: {0}")]
    Timeout(String),
    /// One failure reported to several waiters (every record of a failed batch).
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
}

impl Error {
    fn from_code(code: i32, message: String) -> Option<Self> {
        if code == ErrorCode::None as i32 {
            return None;
        }
        let name = ErrorCode::try_from(code).map_or("UNKNOWN_ERROR_CODE", |c| c.as_str_name());
        let message = if message.is_empty() {
            name.to_lowercase().replace('_', " ")
        } else {
            message
        };
        Some(Error::Broker {
            code: name,
            code_value: code,
            message,
        })
    }

    /// The Kafka error code the broker answered, if any.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Broker { code_value, .. } => ErrorCode::try_from(*code_value).ok(),
            Error::Shared(e) => e.code(),
            _ => None,
        }
    }

    /// Whether the broker said leadership is elsewhere or in flux (refresh and retry).
    pub fn is_leadership(&self) -> bool {
        self.code().is_some_and(ErrorCode::is_leadership)
    }

    /// Whether the same request may succeed later (leadership moving, a broker down,
    /// replication catching up): the broker's verdict by [`ErrorCode::is_retriable`],
    /// which the broker uses too, or a transport failure.
    pub fn is_retriable(&self) -> bool {
        use tonic::Code;
        match self {
            Error::Shared(e) => e.is_retriable(),
            Error::Connect { .. } => true,
            Error::Rpc(s) => matches!(
                s.code(),
                Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown
            ),
            Error::Broker { .. } => self.code().is_some_and(ErrorCode::is_retriable),
            _ => false,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The innermost error's text (transport errors nest the same words several deep).
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

pub(crate) fn check(code: i32, message: &str) -> Result<()> {
    Error::from_code(code, message.to_string()).map_or(Ok(()), Err)
}

pub(crate) fn check_result(r: Option<ErrorResult>) -> Result<()> {
    r.map_or(Ok(()), |e| check(e.error_code, &e.error_message))
}

/// What the client knows of the cluster: broker addresses, partition leaders, and a
/// channel per broker.
#[derive(Default)]
struct ClusterView {
    brokers: HashMap<i32, String>,
    leaders: HashMap<(String, i32), i32>,
    partition_counts: HashMap<String, i32>,
    channels: HashMap<String, Channel>,
}

/// Requests being assembled per leader broker: its data client and the partitions' parts.
pub(crate) type ByLeader<T> = BTreeMap<i32, (DataClient<Channel>, Vec<T>)>;

/// How long data calls keep retrying retriable errors. Default: 60 s.
const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);

/// A connection to a cluster. Cheap to clone; clones share connections and metadata.
#[derive(Clone)]
pub struct Client {
    admin: AdminClient<Channel>,
    bootstrap_channel: Channel,
    /// Every address given at bootstrap, tried in turn when metadata is needed.
    bootstrap: Vec<String>,
    view: Arc<Mutex<ClusterView>>,
    /// Per-call deadline of data calls (a paused broker never answers).
    request_timeout: Duration,
    retry_timeout: Duration,
}

fn endpoint(address: &str) -> Result<Endpoint> {
    let url = if address.contains("://") {
        address.to_string()
    } else {
        // `host:port`, `[v6]:port`; a bare host would silently mean port 80.
        let has_port = address
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !has_port {
            return Err(Error::Invalid(format!(
                "broker address '{address}' has no port: give host:port, e.g. {address}:9093"
            )));
        }
        format!("http://{address}")
    };
    Ok(Endpoint::from_shared(url)
        .map_err(|source| Error::Connect {
            address: address.to_string(),
            source,
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(8 * 1024 * 1024)
        .initial_connection_window_size(32 * 1024 * 1024))
}

fn admin_client(channel: Channel) -> AdminClient<Channel> {
    AdminClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

pub(crate) fn data_client(channel: Channel) -> DataClient<Channel> {
    DataClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

fn broker_error(code: ErrorCode, message: String) -> Error {
    Error::from_code(code as i32, message).unwrap_or_else(|| Error::Invalid("no error".into()))
}

impl Client {
    /// Connects to the first reachable broker of `bootstrap` (`host:port` or an
    /// `http://` URL, or several separated by commas).
    pub async fn connect(bootstrap: &str) -> Result<Self> {
        let addresses: Vec<String> = bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        let mut last = None;
        for address in &addresses {
            match endpoint(address)?.connect().await {
                Ok(channel) => {
                    let mut view = ClusterView::default();
                    view.channels.insert(address.clone(), channel.clone());
                    return Ok(Self {
                        admin: admin_client(channel.clone()),
                        bootstrap_channel: channel,
                        bootstrap: addresses.clone(),
                        view: Arc::new(Mutex::new(view)),
                        request_timeout: Duration::from_secs(30),
                        retry_timeout: DEFAULT_RETRY_TIMEOUT,
                    });
                }
                Err(source) => {
                    last = Some(Error::Connect {
                        address: address.clone(),
                        source,
                    })
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no bootstrap address given".into())))
    }

    /// How long one data call may take before it counts as failed (and is retried).
    /// Default: 30 s.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long data calls keep retrying retriable errors. Default: 60 s.
    pub fn with_retry_timeout(mut self, timeout: Duration) -> Self {
        self.retry_timeout = timeout;
        self
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    pub(crate) fn retry_timeout(&self) -> Duration {
        self.retry_timeout
    }

    /// A data client of the bootstrap broker (calls any broker can answer).
    pub(crate) fn data_any(&self) -> DataClient<Channel> {
        data_client(self.bootstrap_channel.clone())
    }

    pub(crate) fn retry_deadline(&self) -> Instant {
        Instant::now() + self.retry_timeout
    }

    fn view(&self) -> std::sync::MutexGuard<'_, ClusterView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A channel to `address` (connected lazily, reused).
    fn channel(&self, address: &str) -> Result<Channel> {
        if let Some(c) = self.view().channels.get(address) {
            return Ok(c.clone());
        }
        let channel = endpoint(address)?.connect_lazy();
        self.view()
            .channels
            .insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    /// Reads the metadata of `topic` (and the live brokers) from the first broker that
    /// answers: the bootstrap broker, else any known or bootstrap address.
    pub async fn refresh_metadata(&self, topic: &str) -> Result<MetadataResponse> {
        let req = MetadataRequest {
            topics: vec![topic.into()],
        };
        let mut candidates: Vec<Option<String>> = vec![None];
        candidates.extend(self.view().brokers.values().cloned().map(Some));
        candidates.extend(self.bootstrap.iter().cloned().map(Some));
        let mut last = None;
        for address in candidates {
            let mut admin = match &address {
                None => self.admin.clone(),
                Some(a) => admin_client(self.channel(a)?),
            };
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(Duration::from_secs(5));
            match admin.metadata(request).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let mut view = self.view();
                    view.brokers = r
                        .brokers
                        .iter()
                        .map(|b| (b.broker_id, b.address.clone()))
                        .collect();
                    for t in &r.topics {
                        if t.error_code == ErrorCode::None as i32 {
                            view.partition_counts
                                .insert(t.name.clone(), t.partitions.len() as i32);
                            for p in &t.partitions {
                                view.leaders.insert((t.name.clone(), p.partition), p.leader);
                            }
                        }
                    }
                    return Ok(r);
                }
                Err(e) => last = Some(Error::Rpc(e)),
            }
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no broker to ask for metadata".into())))
    }

    /// Forgets the cached leaders of `topic` (after a leader refused or vanished).
    pub(crate) fn invalidate(&self, topic: &str) {
        self.view().leaders.retain(|(t, _), _| t != topic);
    }

    /// The leader of a partition and a data client for it.
    pub(crate) async fn leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(i32, DataClient<Channel>)> {
        let key = (topic.to_string(), partition);
        let cached = self.view().leaders.get(&key).copied();
        let leader = match cached {
            Some(l) => l,
            None => {
                self.refresh_metadata(topic).await?;
                let found = self.view().leaders.get(&key).copied();
                let count = self.view().partition_counts.get(topic).copied();
                match (found, count) {
                    (Some(l), _) => l,
                    (None, None) => {
                        return Err(broker_error(
                            ErrorCode::UnknownTopicOrPartition,
                            format!("topic '{topic}' does not exist"),
                        ));
                    }
                    (None, Some(n)) => {
                        return Err(broker_error(
                            ErrorCode::UnknownTopicOrPartition,
                            format!(
                                "partition {partition} of topic '{topic}' does not exist (it has {n})"
                            ),
                        ));
                    }
                }
            }
        };
        let address = self.view().brokers.get(&leader).cloned();
        let Some(address) = address.filter(|_| leader >= 0) else {
            self.invalidate(topic);
            return Err(broker_error(
                ErrorCode::LeaderNotAvailable,
                format!("partition {partition} of '{topic}' has no live leader right now"),
            ));
        };
        Ok((leader, data_client(self.channel(&address)?)))
    }

    /// Runs `call` against the partition's leader, refreshing metadata and retrying
    /// with backoff on retriable errors until the retry deadline.
    pub(crate) async fn with_leader<T, F, Fut>(
        &self,
        topic: &str,
        partition: i32,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(DataClient<Channel>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = self.retry_deadline();
        let mut backoff = Duration::from_millis(50);
        loop {
            let r = match self.leader(topic, partition).await {
                Ok((_, data)) => call(data).await,
                Err(e) => Err(e),
            };
            match r {
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    tracing::debug!(topic, partition, error = %e, "retrying");
                    self.invalidate(topic);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }

    /// Live brokers and the controller.
    pub async fn cluster_status(&self) -> Result<ClusterStatusResponse> {
        let r = self
            .admin
            .clone()
            .cluster_status(ClusterStatusRequest {})
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    /// Preferred leader election (see the `ElectLeaders` RPC): per partition, the
    /// leader after it, or why not. An empty `topic` means every topic.
    pub async fn elect_leaders(
        &self,
        topic: &str,
        partitions: Vec<i32>,
    ) -> Result<Vec<ElectLeadersResult>> {
        let r = self
            .admin
            .clone()
            .elect_leaders(ElectLeadersRequest {
                topic: topic.into(),
                partitions,
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.results)
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
    ) -> Result<String> {
        let r = self
            .admin
            .clone()
            .create_topic(CreateTopicRequest {
                name: name.into(),
                partitions,
                replication_factor,
                configs: configs.into_iter().collect(),
                validate_only: false,
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.topic_id)
    }

    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        let r = self
            .admin
            .clone()
            .delete_topic(DeleteTopicRequest { name: name.into() })
            .await?
            .into_inner();
        check_result(r.error)
    }

    pub async fn list_topics(&self) -> Result<Vec<TopicSummary>> {
        let r = self
            .admin
            .clone()
            .list_topics(ListTopicsRequest {})
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.topics)
    }

    pub async fn describe_topic(&self, name: &str) -> Result<DescribeTopicResponse> {
        let r = self
            .admin
            .clone()
            .describe_topic(DescribeTopicRequest { name: name.into() })
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    pub async fn alter_configs(
        &self,
        name: &str,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
    ) -> Result<()> {
        let req = AlterConfigsRequest {
            name: name.into(),
            set: set.into_iter().collect(),
            delete,
            validate_only: false,
        };
        check_result(
            self.admin
                .clone()
                .alter_configs(req)
                .await?
                .into_inner()
                .error,
        )
    }

    pub async fn create_partitions(&self, name: &str, total_count: i32) -> Result<()> {
        let req = CreatePartitionsRequest {
            name: name.into(),
            total_count,
            validate_only: false,
        };
        check_result(
            self.admin
                .clone()
                .create_partitions(req)
                .await?
                .into_inner()
                .error,
        )
    }

    /// Partition count of a topic (fails with UNKNOWN_TOPIC_OR_PARTITION if absent).
    pub async fn partition_count(&self, topic: &str) -> Result<i32> {
        let r = self.refresh_metadata(topic).await?;
        let t = r
            .topics
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("empty metadata response".into()))?;
        check(t.error_code, &format!("topic '{topic}' does not exist"))?;
        Ok(t.partitions.len() as i32)
    }

    /// Kafka ListOffsets: `timestamp` -1 latest, -2 earliest, else first offset at or
    /// after that time (`None`: no such record).
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<i64>> {
        let timeout = self.request_timeout;
        self.with_leader(topic, partition, |mut data| async move {
            let mut req = tonic::Request::new(ListOffsetsRequest {
                partitions: vec![ListOffsetsPartition {
                    topic: topic.into(),
                    partition,
                    timestamp,
                }],
            });
            req.set_timeout(timeout);
            let r = data.list_offsets(req).await?.into_inner();
            let p = r
                .partitions
                .into_iter()
                .next()
                .ok_or_else(|| Error::Invalid("empty list offsets response".into()))?;
            check(p.error_code, &p.error_message)?;
            Ok((p.offset >= 0).then_some(p.offset))
        })
        .await
    }

    /// One fetch of one partition, returned as the broker answered it (error code
    /// included), for tools and tests that look at raw batches.
    pub async fn fetch_partition(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_bytes: i32,
        max_wait_ms: u32,
    ) -> Result<FetchPartitionResult> {
        let timeout = self.request_timeout + Duration::from_millis(u64::from(max_wait_ms));
        let fetch = |mut data: DataClient<Channel>| async move {
            let mut req = tonic::Request::new(FetchRequest {
                max_wait_ms,
                min_bytes: 1,
                max_bytes,
                partitions: vec![FetchPartition {
                    topic: topic.into(),
                    partition,
                    fetch_offset: offset,
                    partition_max_bytes: max_bytes,
                }],
            });
            req.set_timeout(timeout);
            data.fetch(req)
                .await?
                .into_inner()
                .partitions
                .into_iter()
                .next()
                .ok_or_else(|| Error::Invalid("empty fetch response".into()))
        };
        if let Err(e) = self.leader(topic, partition).await
            && !e.is_retriable()
        {
            // No such partition: let the broker say so, as it would to any client.
            return fetch(data_client(self.bootstrap_channel.clone())).await;
        }
        self.with_leader(topic, partition, |data| async move {
            let p = fetch(data).await?;
            // Leadership errors are retried; others are the caller's to read.
            match Error::from_code(p.error_code, p.error_message.clone()) {
                Some(e) if e.is_leadership() => Err(e),
                _ => Ok(p),
            }
        })
        .await
    }

    /// Sends one produce request for one partition as is and returns the broker's answer.
    pub async fn produce_raw(
        &self,
        topic: &str,
        partition: i32,
        acks: i32,
        records: bytes::Bytes,
    ) -> Result<PartitionProduceResult> {
        // No such partition: send it anyway, so the broker answers as to any client.
        let mut data = match self.leader(topic, partition).await {
            Ok((_, data)) => data,
            Err(e) if e.is_retriable() => return Err(e),
            Err(_) => data_client(self.bootstrap_channel.clone()),
        };
        let timeout = self.request_timeout;
        let mut req = tonic::Request::new(ProduceRequest {
            acks,
            timeout_ms: timeout.as_millis() as u32,
            partitions: vec![PartitionProduceData {
                topic: topic.into(),
                partition,
                records,
            }],
        });
        req.set_timeout(timeout + Duration::from_secs(5));
        let r = data.produce(req).await?.into_inner();
        r.partitions
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("empty produce response".into()))
    }

    /// A groups client of the bootstrap broker.
    fn groups_any(&self) -> GroupsClient<Channel> {
        GroupsClient::new(self.bootstrap_channel.clone())
    }

    /// The coordinator of `group` (asking the bootstrap broker, then the others).
    pub async fn group_coordinator(&self, group: &str) -> Result<GroupsClient<Channel>> {
        let mut candidates = vec![self.groups_any()];
        let known: Vec<String> = self.view().brokers.values().cloned().collect();
        for a in known.iter().chain(self.bootstrap.iter()) {
            candidates.push(GroupsClient::new(self.channel(a)?));
        }
        let mut last = None;
        for mut c in candidates {
            let mut req = tonic::Request::new(FindCoordinatorRequest {
                group_id: group.into(),
            });
            req.set_timeout(Duration::from_secs(5));
            match c.find_coordinator(req).await {
                Ok(r) => {
                    let r = r.into_inner();
                    check_result(r.error)?;
                    return Ok(GroupsClient::new(self.channel(&r.address)?));
                }
                Err(e) => last = Some(Error::Rpc(e)),
            }
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no broker to ask".into())))
    }

    /// A group's committed offsets: (topic, partition) → offset.
    pub async fn committed_offsets(&self, group: &str) -> Result<BTreeMap<(String, i32), i64>> {
        Ok(self
            .committed_offsets_full(group)
            .await?
            .into_iter()
            .map(|o| ((o.topic, o.partition), o.offset))
            .collect())
    }

    pub async fn committed_offsets_full(
        &self,
        group: &str,
    ) -> Result<Vec<CommittedPartitionOffset>> {
        let r = self
            .groups_any()
            .offset_fetch(OffsetFetchRequest {
                group_id: group.into(),
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.offsets)
    }

    /// Groups known to any live broker (merged: the coordinator's view wins).
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let mut addresses: Vec<String> = self.bootstrap.clone();
        if let Ok(m) = self
            .admin
            .clone()
            .metadata(MetadataRequest { topics: vec![] })
            .await
        {
            addresses.extend(m.into_inner().brokers.into_iter().map(|b| b.address));
        }
        addresses.sort();
        addresses.dedup();
        let mut out: BTreeMap<String, GroupListing> = BTreeMap::new();
        let mut reached = false;
        for a in addresses {
            let mut c = GroupsClient::new(self.channel(&a)?);
            let mut req = tonic::Request::new(ListGroupsRequest {});
            req.set_timeout(Duration::from_secs(5));
            let Ok(r) = c.list_groups(req).await else {
                continue;
            };
            let r = r.into_inner();
            if check_result(r.error).is_err() {
                continue;
            }
            reached = true;
            for g in r.groups {
                let better = out.get(&g.group_id).is_none_or(|o| o.coordinator < 0);
                if better {
                    out.insert(g.group_id.clone(), g);
                }
            }
        }
        if !reached {
            return Err(Error::Invalid("no broker answered".into()));
        }
        Ok(out.into_values().collect())
    }

    pub async fn describe_group(&self, group: &str) -> Result<DescribeGroupResponse> {
        let r = self
            .group_coordinator(group)
            .await?
            .describe_group(DescribeGroupRequest {
                group_id: group.into(),
            })
            .await?
            .into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }

    /// Commits offsets for a group without members (admin: generation -1).
    pub async fn commit_group_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<(String, i32), i64>,
    ) -> Result<()> {
        let r = self
            .group_coordinator(group)
            .await?
            .offset_commit(OffsetCommitRequest {
                group_id: group.into(),
                generation_id: -1,
                member_id: String::new(),
                partitions: offsets
                    .iter()
                    .map(|((topic, partition), offset)| OffsetCommitPartition {
                        topic: topic.clone(),
                        partition: *partition,
                        offset: *offset,
                        metadata: String::new(),
                    })
                    .collect(),
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        for p in r.partitions {
            check(p.error_code, &p.error_message)?;
        }
        Ok(())
    }

    pub async fn delete_group(&self, group: &str) -> Result<()> {
        let r = self
            .group_coordinator(group)
            .await?
            .delete_group(DeleteGroupRequest {
                group_id: group.into(),
            })
            .await?
            .into_inner();
        check_result(r.error)
    }

    /// Tier status per partition of `topic` (every topic if `None`).
    pub async fn tiering_status(&self, topic: Option<&str>) -> Result<Vec<PartitionTieringStatus>> {
        Ok(self.tiering_status_full(topic).await?.partitions)
    }

    /// Tier status with the broker's remote-read counters.
    pub async fn tiering_status_full(&self, topic: Option<&str>) -> Result<TieringStatusResponse> {
        let req = TieringStatusRequest {
            topic: topic.unwrap_or_default().to_string(),
        };
        let r = self.admin.clone().tiering_status(req).await?.into_inner();
        check_result(r.error.clone())?;
        Ok(r)
    }
}
