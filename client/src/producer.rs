//! Producer: partitions records (explicit, Kafka's murmur2 key hash, or sticky for
//! unkeyed records), packs them into RecordBatch v2 batches of up to `batch_size`
//! bytes, and sends one request per group of partitions. Each partition's batches in a
//! request are appended together, so a record's offset is the partition's base offset
//! plus its position among that partition's records.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use shale_proto::batch::Compression;
use shale_proto::record::{BatchBuilder, Record};
use shale_proto::v1::data_client::DataClient;
use shale_proto::v1::{PartitionProduceData, ProduceRequest};
use tonic::transport::Channel;

use crate::partitioner::partition_for_key;
use crate::{ByLeader, Client, Error, Result, check};

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
    fn wire(self) -> i32 {
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

#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub partition: Option<i32>,
    /// Milliseconds since the epoch; now if unset.
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Where an acknowledged record went (`offset` -1 with `Acks::None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    pub partition: i32,
    pub offset: i64,
}

pub struct Producer {
    client: Client,
    topic: String,
    partitions: i32,
    acks: Acks,
    batch_size: usize,
    compression: Compression,
    max_request_bytes: usize,
    sticky_partition: i32,
    sticky_bytes: usize,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Producer {
    pub async fn new(client: Client, topic: &str, acks: Acks) -> Result<Self> {
        let partitions = client.partition_count(topic).await?;
        Ok(Self {
            client,
            topic: topic.to_string(),
            partitions,
            acks,
            batch_size: 256 * 1024,
            compression: Compression::None,
            max_request_bytes: 8 * 1024 * 1024,
            sticky_partition: (now_ms() % i64::from(partitions.max(1))) as i32,
            sticky_bytes: 0,
        })
    }

    /// Largest batch, in bytes (Kafka `batch.size`). Default: 256 KiB.
    /// Codec of the batches sent (Kafka `compression.type`). Default: none. The broker
    /// stores compressed batches as they come; consumers decompress.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.compression = compression;
        self
    }

    pub fn with_batch_size(mut self, bytes: usize) -> Self {
        self.batch_size = bytes.max(1);
        self
    }

    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    fn partition_of(&mut self, r: &ProducerRecord) -> Result<i32> {
        if let Some(p) = r.partition {
            if !(0..self.partitions).contains(&p) {
                return Err(Error::Invalid(format!(
                    "partition {p} does not exist: topic '{}' has {} partitions",
                    self.topic, self.partitions
                )));
            }
            return Ok(p);
        }
        if let Some(key) = &r.key {
            return Ok(partition_for_key(key, self.partitions));
        }
        // Sticky: fill a batch's worth for one partition, then move on.
        let size = r.value.as_ref().map_or(0, Bytes::len) + 16;
        if self.sticky_bytes + size > self.batch_size && self.sticky_bytes > 0 {
            self.sticky_partition = (self.sticky_partition + 1) % self.partitions.max(1);
            self.sticky_bytes = 0;
        }
        self.sticky_bytes += size;
        Ok(self.sticky_partition)
    }

    /// Sends every record and waits for the acknowledgements; the result is in input
    /// order. Nothing is sent if any record names a partition that does not exist.
    pub async fn send_all(&mut self, records: Vec<ProducerRecord>) -> Result<Vec<RecordMetadata>> {
        let now = now_ms();
        let mut placed = Vec::with_capacity(records.len());
        // Per partition: finished batches, the batch being filled, record count.
        let mut per_partition: BTreeMap<i32, (Vec<Bytes>, Option<BatchBuilder>, usize)> =
            BTreeMap::new();
        for r in records {
            let p = self.partition_of(&r)?;
            let entry = per_partition.entry(p).or_default();
            placed.push((p, entry.2));
            entry.2 += 1;
            let ts = r.timestamp.unwrap_or(now);
            let compression = self.compression;
            let builder = entry
                .1
                .get_or_insert_with(|| BatchBuilder::new(ts).with_compression(compression));
            builder.push(Record {
                offset: 0,
                timestamp: ts,
                key: r.key,
                value: r.value,
                headers: r.headers,
            });
            if builder.size_bytes() >= self.batch_size {
                entry.0.extend(entry.1.take().map(BatchBuilder::build));
            }
        }
        // Pack partitions into requests of bounded size.
        let mut requests: Vec<Vec<(i32, Bytes)>> = vec![Vec::new()];
        let mut request_bytes = 0;
        for (p, (mut batches, open, _)) in per_partition {
            batches.extend(open.map(BatchBuilder::build));
            let mut data = BytesMut::with_capacity(batches.iter().map(Bytes::len).sum());
            batches.iter().for_each(|b| data.extend_from_slice(b));
            if request_bytes > 0 && request_bytes + data.len() > self.max_request_bytes {
                requests.push(Vec::new());
                request_bytes = 0;
            }
            request_bytes += data.len();
            requests
                .last_mut()
                .expect("never empty")
                .push((p, data.freeze()));
        }
        let mut base_offsets = BTreeMap::new();
        for request in requests.into_iter().filter(|r| !r.is_empty()) {
            base_offsets.extend(self.send_request(request).await?);
        }
        Ok(placed
            .into_iter()
            .map(|(partition, i)| RecordMetadata {
                partition,
                offset: match (self.acks, base_offsets.get(&partition)) {
                    (Acks::None, _) | (_, None) => -1,
                    (_, Some(base)) => base + i as i64,
                },
            })
            .collect())
    }

    /// Sends partitions' batches to their leaders (one request per leader, in
    /// parallel), retrying partitions that got a retriable error (after a metadata
    /// refresh and backoff) until the client's retry deadline. A partition's batches
    /// are only resent after their previous attempt ended, which keeps its order.
    async fn send_request(&self, data: Vec<(i32, Bytes)>) -> Result<Vec<(i32, i64)>> {
        let deadline = self.client.retry_deadline();
        let mut pending = data;
        let mut done = Vec::with_capacity(pending.len());
        let mut backoff = Duration::from_millis(50);
        loop {
            let mut groups: ByLeader<(i32, Bytes)> = BTreeMap::new();
            let mut retry = Vec::new();
            let mut last_error = None;
            for (p, records) in pending {
                match self.client.leader(&self.topic, p).await {
                    Ok((leader, data)) => groups
                        .entry(leader)
                        .or_insert_with(|| (data, Vec::new()))
                        .1
                        .push((p, records)),
                    Err(e) if e.is_retriable() => {
                        retry.push((p, records));
                        last_error = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            let sends = groups
                .into_values()
                .map(|(data, parts)| self.send_to(data, parts));
            for (parts, outcome) in futures::future::join_all(sends).await {
                match outcome {
                    Ok(results) => {
                        for ((p, records), r) in parts.into_iter().zip(results) {
                            match r {
                                Ok(base) => done.push((p, base)),
                                Err(e) if e.is_retriable() => {
                                    retry.push((p, records));
                                    last_error = Some(e);
                                }
                                Err(e) => return Err(e),
                            }
                        }
                    }
                    Err(e) if e.is_retriable() => {
                        retry.extend(parts);
                        last_error = Some(e);
                    }
                    Err(e) => return Err(e),
                }
            }
            let Some(error) = last_error else {
                return Ok(done);
            };
            if Instant::now() + backoff >= deadline {
                return Err(error);
            }
            tracing::debug!(topic = %self.topic, partitions = retry.len(), %error, "retrying produce");
            self.client.invalidate(&self.topic);
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(1));
            pending = retry;
        }
    }

    /// One produce request to one broker; per partition, its base offset or error.
    async fn send_to(
        &self,
        mut data: DataClient<Channel>,
        parts: Vec<(i32, Bytes)>,
    ) -> (Vec<(i32, Bytes)>, Result<Vec<Result<i64>>>) {
        let timeout = self.client.request_timeout();
        let mut req = tonic::Request::new(ProduceRequest {
            acks: self.acks.wire(),
            timeout_ms: timeout.as_millis().min(u128::from(u32::MAX)) as u32,
            partitions: parts
                .iter()
                .map(|(partition, records)| PartitionProduceData {
                    topic: self.topic.clone(),
                    partition: *partition,
                    records: records.clone(),
                })
                .collect(),
        });
        // The broker answers acks=all within `timeout`; give the network a little more.
        req.set_timeout(timeout + Duration::from_secs(2));
        let outcome = match data.produce(req).await {
            Ok(resp) => {
                let by_partition: BTreeMap<i32, _> = resp
                    .into_inner()
                    .partitions
                    .into_iter()
                    .map(|p| (p.partition, p))
                    .collect();
                Ok(parts
                    .iter()
                    .map(|(partition, _)| {
                        let p = by_partition.get(partition).ok_or_else(|| {
                            Error::Invalid("partition missing from produce response".into())
                        })?;
                        check(p.error_code, &p.error_message)?;
                        Ok(p.base_offset)
                    })
                    .collect())
            }
            Err(status) => Err(Error::Rpc(status)),
        };
        (parts, outcome)
    }
}
