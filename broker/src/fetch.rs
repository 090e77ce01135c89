//! The fetch and list-offsets paths.
//!
//! Fetch reads whole batches from each requested partition up to the high watermark,
//! bounded by the partition's and the response's byte limits (the first batch of the
//! response is always returned whole, however large). With less than `min_bytes`
//! available it long-polls: it waits on the partitions' high-watermark channels until
//! enough arrives or `max_wait` passes.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;

use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::partition::{Partition, PartitionOffsets};

/// Longest a fetch may wait.
const MAX_WAIT_CAP: Duration = Duration::from_secs(30);

pub struct FetchSpec {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub max_bytes: i32,
}

pub struct Fetched {
    pub records: Bytes,
    pub offsets: PartitionOffsets,
}

impl Broker {
    pub async fn fetch(
        &self,
        specs: Vec<FetchSpec>,
        max_wait: Duration,
        min_bytes: i32,
        max_bytes: i32,
    ) -> Vec<Result<Fetched>> {
        let deadline = tokio::time::Instant::now() + max_wait.min(MAX_WAIT_CAP);
        let lookups: Vec<Result<Arc<Partition>>> = specs
            .iter()
            .map(|s| self.leader_partition(&s.topic, s.partition))
            .collect();
        if lookups.iter().any(Result::is_err) {
            // An unknown partition answers at once, with whatever the others hold.
            let reads = lookups
                .into_iter()
                .zip(&specs)
                .map(|(p, s)| p.map(|p| (p, s.offset, s.max_bytes)))
                .collect();
            return self.read_all(reads, max_bytes).await;
        }
        let partitions: Vec<Arc<Partition>> = lookups.into_iter().flatten().collect();
        loop {
            // Subscribe before reading so an append in between still wakes us.
            let mut watchers: Vec<_> = partitions.iter().map(|p| p.subscribe()).collect();
            let reads = partitions
                .iter()
                .zip(&specs)
                .map(|(p, s)| Ok((p.clone(), s.offset, s.max_bytes)))
                .collect();
            let results = self.read_all(reads, max_bytes).await;
            let total: usize = results
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .map(|f| f.records.len())
                .sum();
            let done = total >= min_bytes.max(0) as usize
                || results.iter().any(Result::is_err)
                || watchers.is_empty()
                || tokio::time::Instant::now() >= deadline
                || self.cancel.is_cancelled();
            if done {
                let stats = &self.stats.requests;
                crate::stats::RequestStats::add(&stats.fetch_requests, 1);
                crate::stats::RequestStats::add(&stats.fetched_bytes, total as u64);
                return results;
            }
            let changed = select_all(watchers.iter_mut().map(|w| Box::pin(w.changed())));
            tokio::select! {
                _ = changed => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = self.cancel.cancelled() => {}
            }
        }
    }

    /// Kafka ListOffsets for one partition: remote segments below the local log first
    /// for a timestamp, then the local log (see [`Partition::list_offset`]).
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>> {
        let p = self.leader_partition(topic, partition)?;
        let found = match timestamp {
            ts if ts >= 0 => self.remote_offset_for_timestamp(&p, ts).await?,
            _ => None,
        };
        let found = match found {
            Some(found) => Some(found),
            None => {
                let p = p.clone();
                tokio::task::spawn_blocking(move || p.list_offset(timestamp))
                    .await
                    .map_err(Error::from)??
            }
        };
        // A segment may still hold records below the log start (DeleteRecords moved
        // it inside the segment): they are gone, the answer is the log start.
        let log_start = p.offsets().log_start_offset;
        Ok(found.map(|(offset, ts)| (offset.max(log_start), ts)))
    }

    /// Reads every partition within the response's byte budget: from the object store
    /// below the local log start, else from the local log. When the budget covers
    /// every partition's own limit, the partitions are read at once (a replay's remote
    /// reads overlap; each partition may return its first batch whole, however
    /// large); otherwise one after another, each with what the ones before it left.
    async fn read_all(
        &self,
        reads: Vec<Result<(Arc<Partition>, i64, i32)>>,
        max_bytes: i32,
    ) -> Vec<Result<Fetched>> {
        let wanted: u64 = reads
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .map(|(_, _, limit)| (*limit).max(0) as u64)
            .sum();
        if reads.len() > 1 && wanted <= max_bytes.max(0) as u64 {
            return futures::future::join_all(reads.into_iter().map(|read| async move {
                let (p, offset, limit) = read?;
                self.read_one(&p, offset, limit.max(0) as usize, true).await
            }))
            .await;
        }
        let mut remaining = max_bytes.max(0) as usize;
        // The response's first batch comes whole, however large.
        let mut whole_first = true;
        let mut out = Vec::with_capacity(reads.len());
        for read in reads {
            let result = match read {
                Ok((p, offset, partition_max)) => {
                    let limit = remaining.min(partition_max.max(0) as usize);
                    self.read_one(&p, offset, limit, whole_first).await
                }
                Err(e) => Err(e),
            };
            if let Ok(f) = &result {
                whole_first &= f.records.is_empty();
                remaining = remaining.saturating_sub(f.records.len());
            }
            out.push(result);
        }
        out
    }

    pub(crate) async fn read_one(
        &self,
        p: &Partition,
        offset: i64,
        limit: usize,
        whole_first: bool,
    ) -> Result<Fetched> {
        let (plan, offsets) = p.plan_fetch(offset)?;
        let Some(plan) = plan else {
            // Below the local log: the object store, or out of range. A tiered
            // partition whose remote log is not known yet cannot tell which: retriable,
            // never out of range (a client would reset its position and skip records).
            if p.config().remote_storage_enable && !p.remote_state().loaded {
                return Err(Error::RemoteLogNotReady(format!(
                    "the remote log of partition {} of '{}' is not loaded yet",
                    p.index, p.topic
                )));
            }
            return match self.read_remote(p, offset, limit, whole_first).await {
                Some(records) => Ok(Fetched {
                    records: records?,
                    offsets,
                }),
                None => {
                    let now = p.offsets();
                    Err(Error::OffsetOutOfRange {
                        offset,
                        log_start: now.log_start_offset,
                        log_end: now.log_end_offset,
                    })
                }
            };
        };
        // Local reads are page-cache preads, but a cold page blocks on the disk: keep
        // them off the async workers.
        let records = tokio::task::spawn_blocking(move || plan.read(limit, whole_first)).await??;
        Ok(Fetched { records, offsets })
    }
}
