//! Shale's Rust client: a connection ([`Client`]), admin calls, a producer and a
//! consumer, all over the broker's gRPC API; and the `shale` CLI built on them.

pub mod consumer;
pub mod format;
pub mod partitioner;
pub mod producer;

use std::collections::BTreeMap;
use std::time::Duration;

use shale_proto::ErrorCode;
use shale_proto::v1::admin_client::AdminClient;
use shale_proto::v1::data_client::DataClient;
use shale_proto::v1::*;
use tonic::transport::{Channel, Endpoint};

pub use consumer::{ConsumedRecord, Consumer, StartFrom};
pub use producer::{Acks, Producer, ProducerRecord};

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
    Decode(#[from] shale_proto::batch::BatchError),
    #[error("{0}")]
    Invalid(String),
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
            _ => None,
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

fn check_result(r: Option<ErrorResult>) -> Result<()> {
    r.map_or(Ok(()), |e| check(e.error_code, &e.error_message))
}

/// A connection to a broker. Cheap to clone; clones share the HTTP/2 connection.
#[derive(Clone)]
pub struct Client {
    pub(crate) data: DataClient<Channel>,
    admin: AdminClient<Channel>,
}

impl Client {
    /// Connects to `bootstrap` (`host:port`, or a full `http://` URL).
    pub async fn connect(bootstrap: &str) -> Result<Self> {
        let url = if bootstrap.contains("://") {
            bootstrap.to_string()
        } else {
            format!("http://{bootstrap}")
        };
        let connect_err = |source| Error::Connect {
            address: bootstrap.to_string(),
            source,
        };
        let channel = Endpoint::from_shared(url)
            .map_err(connect_err)?
            .connect_timeout(Duration::from_secs(5))
            .tcp_nodelay(true)
            .initial_stream_window_size(8 * 1024 * 1024)
            .initial_connection_window_size(32 * 1024 * 1024)
            .connect()
            .await
            .map_err(connect_err)?;
        Ok(Self {
            data: DataClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
            admin: AdminClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        })
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
        Ok(self
            .admin
            .clone()
            .list_topics(ListTopicsRequest {})
            .await?
            .into_inner()
            .topics)
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
        let r = self
            .admin
            .clone()
            .metadata(MetadataRequest {
                topics: vec![topic.into()],
            })
            .await?
            .into_inner();
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
        let req = ListOffsetsRequest {
            partitions: vec![ListOffsetsPartition {
                topic: topic.into(),
                partition,
                timestamp,
            }],
        };
        let r = self.data.clone().list_offsets(req).await?.into_inner();
        let p = r
            .partitions
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("empty list offsets response".into()))?;
        check(p.error_code, &p.error_message)?;
        Ok((p.offset >= 0).then_some(p.offset))
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
        let req = FetchRequest {
            max_wait_ms,
            min_bytes: 1,
            max_bytes,
            partitions: vec![FetchPartition {
                topic: topic.into(),
                partition,
                fetch_offset: offset,
                partition_max_bytes: max_bytes,
            }],
        };
        let r = self.data.clone().fetch(req).await?.into_inner();
        r.partitions
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("empty fetch response".into()))
    }

    /// Sends one produce request for one partition as is and returns the broker's answer.
    pub async fn produce_raw(
        &self,
        topic: &str,
        partition: i32,
        acks: i32,
        records: bytes::Bytes,
    ) -> Result<PartitionProduceResult> {
        let req = ProduceRequest {
            acks,
            timeout_ms: 30_000,
            partitions: vec![PartitionProduceData {
                topic: topic.into(),
                partition,
                records,
            }],
        };
        let r = self.data.clone().produce(req).await?.into_inner();
        r.partitions
            .into_iter()
            .next()
            .ok_or_else(|| Error::Invalid("empty produce response".into()))
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
