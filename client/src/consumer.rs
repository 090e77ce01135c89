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
        }
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

    /// Moves a position that fell outside the log (retention, or a bad start offset)
    /// to the nearest end, as Kafka's `auto.offset.reset=earliest` would for the start.
    async fn reset_out_of_range(&mut self, partition: i32) -> Result<()> {
        let earliest = self
            .client
            .list_offset(&self.topic, partition, -2)
            .await?
            .unwrap_or(0);
        let latest = self
            .client
            .list_offset(&self.topic, partition, -1)
            .await?
            .unwrap_or(0);
        if let Some(pos) = self.positions.get_mut(&partition) {
            let reset = if *pos < earliest { earliest } else { latest };
            tracing::warn!(
                partition,
                from = *pos,
                to = reset,
                "offset out of range, resetting"
            );
            *pos = reset;
        }
        Ok(())
    }
}
