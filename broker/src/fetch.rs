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
            .map(|s| self.partition(&s.topic, s.partition))
            .collect();
        if lookups.iter().any(Result::is_err) {
            // An unknown partition answers at once, with whatever the others hold.
            let reads = lookups
                .into_iter()
                .zip(&specs)
                .map(|(p, s)| p.map(|p| (p, s.offset, s.max_bytes)))
                .collect();
            return read_all(reads, max_bytes).await;
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
            let results = read_all(reads, max_bytes).await;
            let total: usize = results
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .map(|f| f.records.len())
                .sum();
            if total >= min_bytes.max(0) as usize
                || results.iter().any(Result::is_err)
                || watchers.is_empty()
                || tokio::time::Instant::now() >= deadline
                || self.cancel.is_cancelled()
            {
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

    /// Kafka ListOffsets for one partition; see [`Partition::list_offset`].
    pub async fn list_offset(
        &self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>> {
        let p = self.partition(topic, partition)?;
        tokio::task::spawn_blocking(move || p.list_offset(timestamp))
            .await
            .map_err(|e| Error::Internal(e.to_string()))?
    }
}

async fn read_all(
    reads: Vec<Result<(Arc<Partition>, i64, i32)>>,
    max_bytes: i32,
) -> Vec<Result<Fetched>> {
    let n = reads.len();
    let joined = tokio::task::spawn_blocking(move || {
        let mut remaining = max_bytes.max(0) as usize;
        let mut first = true;
        reads
            .into_iter()
            .map(|r| {
                let (p, offset, partition_max) = r?;
                let (plan, offsets) = p.plan_read(offset)?;
                let limit = remaining.min(partition_max.max(0) as usize);
                // The response's first batch comes whole, however large.
                let records = plan.read(limit, first).map_err(Error::Storage)?;
                if !records.is_empty() {
                    first = false;
                }
                remaining = remaining.saturating_sub(records.len());
                Ok(Fetched { records, offsets })
            })
            .collect::<Vec<_>>()
    })
    .await;
    joined.unwrap_or_else(|e| {
        (0..n)
            .map(|_| Err(Error::Internal(e.to_string())))
            .collect()
    })
}
