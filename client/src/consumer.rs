//! Consumer of explicitly assigned partitions: long-polls the broker with one fetch for
//! all of them, decodes batches into records and tracks each partition's position.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use shale_proto::v1::{FetchPartition, FetchPartitionResult, FetchRequest};
use shale_records::ErrorCode;
use shale_records::batch::BatchIter;
use shale_records::record::decode_records;

use crate::{ByLeader, Client, Error, Result, check};

/// Where a consumer starts in a partition the group has no committed offset for, and
/// where a position the log no longer holds moves to (`auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// Fail the poll.
    None,
}

impl std::str::FromStr for OffsetReset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "earliest" => Ok(OffsetReset::Earliest),
            "latest" => Ok(OffsetReset::Latest),
            "none" => Ok(OffsetReset::None),
            _ => Err(format!(
                "auto.offset.reset must be earliest, latest or none, not '{s}'"
            )),
        }
    }
}

/// Where a consumer starts in each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartFrom {
    Earliest,
    Latest,
    Offset(i64),
    /// First record at or after this time (ms since the epoch); the end if none.
    Timestamp(i64),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub topic: Arc<str>,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

pub struct Consumer {
    client: Client,
    topic: Arc<str>,
    positions: BTreeMap<i32, i64>,
    /// Response size limit. Default: 50 MiB.
    pub max_bytes: i32,
    /// Per-partition limit. Default: 8 MiB.
    pub partition_max_bytes: i32,
    /// Where a position the log no longer (or never) holds moves to: Kafka's
    /// `auto.offset.reset`. Default: latest, as in Kafka.
    pub offset_reset: OffsetReset,
}

impl Consumer {
    /// Assigns `partitions` (all of the topic's if `None`) at `start`.
    pub async fn new(
        client: Client,
        topic: &str,
        partitions: Option<Vec<i32>>,
        start: StartFrom,
    ) -> Result<Self> {
        let count = client.partition_count(topic).await?;
        let partitions = partitions.unwrap_or_else(|| (0..count).collect());
        let mut positions = BTreeMap::new();
        for p in partitions {
            if !(0..count).contains(&p) {
                return Err(Error::Invalid(format!(
                    "partition {p} does not exist: topic '{topic}' has {count} partitions"
                )));
            }
            let offset = match start {
                StartFrom::Offset(o) => o,
                StartFrom::Earliest => client.list_offset(topic, p, -2).await?.unwrap_or(0),
                StartFrom::Latest => client.list_offset(topic, p, -1).await?.unwrap_or(0),
                StartFrom::Timestamp(ts) => match client.list_offset(topic, p, ts).await? {
                    Some(o) => o,
                    None => client.list_offset(topic, p, -1).await?.unwrap_or(0),
                },
            };
            positions.insert(p, offset);
        }
        Ok(Self {
            client,
            topic: topic.into(),
            positions,
            max_bytes: 50 << 20,
            partition_max_bytes: 1 << 20,
            offset_reset: OffsetReset::Latest,
        })
    }

    /// Assigns partitions at known positions.
    pub fn at_positions(client: Client, topic: &str, positions: BTreeMap<i32, i64>) -> Self {
        Self {
            client,
            topic: topic.into(),
            positions,
            max_bytes: 50 << 20,
            partition_max_bytes: 1 << 20,
            offset_reset: OffsetReset::Latest,
        }
    }

    /// This consumer with `auto.offset.reset` set to `reset`.
    pub fn with_offset_reset(mut self, reset: OffsetReset) -> Self {
        self.offset_reset = reset;
        self
    }

    pub fn positions(&self) -> &BTreeMap<i32, i64> {
        &self.positions
    }

    /// Positions of the assigned partitions, to move (seek), add or remove (pause).
    pub fn positions_mut(&mut self) -> &mut BTreeMap<i32, i64> {
        &mut self.positions
    }

    /// One fetch per partition leader (in parallel): waits up to `max_wait` for
    /// records and returns what arrived, in offset order per partition. Partitions
    /// whose leader moved or is unreachable are skipped this time (their metadata is
    /// refreshed for the next poll).
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<ConsumedRecord>> {
        let mut by_leader: ByLeader<FetchPartition> = BTreeMap::new();
        let mut trouble = false;
        for (&p, &offset) in &self.positions {
            match self.client.leader(&self.topic, p).await {
                Ok((leader, data)) => by_leader
                    .entry(leader)
                    .or_insert_with(|| (data, Vec::new()))
                    .1
                    .push(FetchPartition {
                        topic: self.topic.to_string(),
                        partition: p,
                        fetch_offset: offset,
                        partition_max_bytes: self.partition_max_bytes,
                    }),
                Err(e) if e.is_retriable() => trouble = true,
                Err(e) => return Err(e),
            }
        }
        let max_wait_ms = max_wait.as_millis().min(u128::from(u32::MAX)) as u32;
        let timeout = self.client.request_timeout() + max_wait;
        let fetches = by_leader.into_values().map(|(mut data, partitions)| {
            let mut req = tonic::Request::new(FetchRequest {
                max_wait_ms,
                min_bytes: 1,
                max_bytes: self.max_bytes,
                partitions,
            });
            req.set_timeout(timeout);
            async move { data.fetch(req).await }
        });
        let mut out = Vec::new();
        for resp in futures::future::join_all(fetches).await {
            let resp = match resp {
                Ok(r) => r.into_inner(),
                Err(status) => {
                    let e = Error::Rpc(status);
                    if !e.is_retriable() {
                        return Err(e);
                    }
                    trouble = true;
                    continue;
                }
            };
            for part in resp.partitions {
                if part.error_code == ErrorCode::OffsetOutOfRange as i32 {
                    self.reset_out_of_range(part.partition).await?;
                    continue;
                }
                if let Err(e) = check(part.error_code, &part.error_message) {
                    if !e.is_retriable() {
                        return Err(e);
                    }
                    trouble = true;
                    continue;
                }
                self.take_records(&part, &mut out)?;
            }
        }
        if trouble {
            self.client.invalidate(&self.topic);
            if out.is_empty() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        Ok(out)
    }

    fn take_records(
        &mut self,
        part: &FetchPartitionResult,
        out: &mut Vec<ConsumedRecord>,
    ) -> Result<()> {
        let Some(position) = self.positions.get_mut(&part.partition) else {
            return Ok(());
        };
        for batch in BatchIter::new(&part.records) {
            let (h, range) = batch?;
            if !h.is_control() {
                for r in decode_records(&part.records.slice(range))? {
                    if r.offset >= *position {
                        out.push(ConsumedRecord {
                            topic: self.topic.clone(),
                            partition: part.partition,
                            offset: r.offset,
                            timestamp: r.timestamp,
                            key: r.key,
                            value: r.value,
                            headers: r.headers,
                        });
                    }
                }
            }
            *position = (*position).max(h.last_offset() + 1);
        }
        Ok(())
    }

    /// Moves a position that fell outside the log (retention, deleted records, a bad
    /// start offset) per `offset_reset`, as Kafka's `auto.offset.reset` does: to the
    /// log start (earliest), to its end (latest), or nowhere, failing the poll (none).
    /// What a reset skips is logged.
    async fn reset_out_of_range(&mut self, partition: i32) -> Result<()> {
        let Some(&from) = self.positions.get(&partition) else {
            return Ok(());
        };
        let to = match self.offset_reset {
            OffsetReset::Earliest => self.client.list_offset(&self.topic, partition, -2).await?,
            OffsetReset::Latest => self.client.list_offset(&self.topic, partition, -1).await?,
            OffsetReset::None => {
                return Err(Error::Broker {
                    code: ErrorCode::OffsetOutOfRange.as_str_name(),
                    code_value: ErrorCode::OffsetOutOfRange as i32,
                    message: format!(
                        "offset {from} of partition {partition} of '{}' is out of range and auto.offset.reset is none",
                        self.topic
                    ),
                });
            }
        }
        .unwrap_or(0);
        if to > from {
            tracing::warn!(topic = %self.topic, partition, from, to, skipped = to - from,
                policy = ?self.offset_reset, "offset out of range: skipping records {from}..{to}");
        } else {
            tracing::warn!(topic = %self.topic, partition, from, to,
                policy = ?self.offset_reset, "offset out of range: resetting back to {to}");
        }
        self.positions.insert(partition, to);
        Ok(())
    }
}
