//! The produce path: route each partition's batches to its log, answer per acks.
//!
//! One node has no followers, so `acks=all` is answered like `acks=1`: after the
//! append, which is also when the high watermark covers the batch.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::broker::{Broker, now_ms};
use crate::error::{Error, Result};
use crate::partition::{Appended, Partition};

/// One partition's share of a produce request.
pub struct ProduceData {
    pub topic: String,
    pub partition: i32,
    pub records: Bytes,
}

impl Broker {
    /// Appends each partition's batches; the outer error rejects the whole request.
    pub async fn produce(
        &self,
        acks: i32,
        data: Vec<ProduceData>,
    ) -> Result<Vec<Result<Appended>>> {
        if !matches!(acks, -1..=1) {
            return Err(Error::InvalidRequiredAcks(acks));
        }
        if self.cancel.is_cancelled() {
            return Err(Error::ShuttingDown);
        }
        let limit = self.config.log.local_disk_limit_bytes;
        let used = self.local_log_bytes.load(Ordering::Relaxed);
        if limit > 0 && used >= limit {
            return Ok(data
                .iter()
                .map(|_| Err(Error::LocalDiskFull { used, limit }))
                .collect());
        }
        let bytes: u64 = data.iter().map(|d| d.records.len() as u64).sum();
        self.local_log_bytes.fetch_add(bytes, Ordering::Relaxed);
        let stats = &self.request_stats;
        crate::metrics::RequestStats::add(&stats.produce_requests, 1);
        crate::metrics::RequestStats::add(&stats.produced_bytes, bytes);
        let targets: Vec<(Result<Arc<Partition>>, Bytes)> = data
            .into_iter()
            .map(|d| (self.partition(&d.topic, d.partition), d.records))
            .collect();
        tokio::task::spawn_blocking(move || {
            let now = now_ms();
            targets
                .into_iter()
                .map(|(p, records)| p?.append(&records, now))
                .collect()
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))
    }
}
