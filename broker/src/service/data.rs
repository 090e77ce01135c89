//! Produce, fetch, list offsets, producer ids.

use std::time::Duration;

use super::{Keyed, RequestContext, Service};
use crate::error::Result;
use crate::fetch::{FetchSpec, Fetched};
use crate::partition::Appended;
use crate::produce::ProduceData;

/// Longest a produce waits for acks=all when the client names no timeout.
const DEFAULT_PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ProduceRequest {
    /// -1 (all), 0 or 1.
    pub acks: i32,
    /// How long acks=all may wait for the ISR (`None`: 30 s).
    pub timeout: Option<Duration>,
    pub partitions: Vec<ProduceData>,
}

pub struct FetchRequest {
    pub partitions: Vec<FetchSpec>,
    pub max_wait: Duration,
    pub min_bytes: i32,
    pub max_bytes: i32,
}

/// One partition of a ListOffsets request: the first offset whose timestamp is at
/// least `timestamp` (-1: the log end, -2: the log start).
pub struct OffsetQuery {
    pub topic: String,
    pub partition: i32,
    pub timestamp: i64,
}

/// An offset with the timestamp of its record (-1 for the log end and start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndTimestamp {
    pub offset: i64,
    pub timestamp: i64,
}

impl Service {
    /// Appends each partition's batches; one answer per partition, in order. A
    /// request-level refusal (bad acks, shutting down, lease lapsed, disk full) is
    /// every partition's answer.
    pub async fn produce(&self, ctx: &RequestContext, req: ProduceRequest) -> Vec<Keyed<Appended>> {
        self.call(ctx, "Produce", async {
            let keys: Vec<(String, i32)> = req
                .partitions
                .iter()
                .map(|p| (p.topic.clone(), p.partition))
                .collect();
            let timeout = req.timeout.unwrap_or(DEFAULT_PRODUCE_TIMEOUT);
            let results = self.broker.produce(req.acks, timeout, req.partitions).await;
            self.keyed(keys, results)
        })
        .await
    }

    /// Reads each partition from its offset (long-polling up to `max_wait` for
    /// `min_bytes`); one answer per partition, in order.
    pub async fn fetch(&self, ctx: &RequestContext, req: FetchRequest) -> Vec<Keyed<Fetched>> {
        self.call(ctx, "Fetch", async {
            let keys: Vec<(String, i32)> = req
                .partitions
                .iter()
                .map(|s| (s.topic.clone(), s.partition))
                .collect();
            let results = self
                .broker
                .fetch(req.partitions, req.max_wait, req.min_bytes, req.max_bytes)
                .await;
            self.keyed(keys, results)
        })
        .await
    }

    /// The offset for each query (`None`: no record at or after the timestamp).
    pub async fn list_offsets(
        &self,
        ctx: &RequestContext,
        queries: Vec<OffsetQuery>,
    ) -> Vec<Keyed<Option<OffsetAndTimestamp>>> {
        self.call(ctx, "ListOffsets", async {
            let results = futures::future::join_all(queries.iter().map(|q| async move {
                let found = self
                    .broker
                    .list_offset(&q.topic, q.partition, q.timestamp)
                    .await?;
                Ok(found.map(|(offset, timestamp)| OffsetAndTimestamp { offset, timestamp }))
            }))
            .await;
            let keys = queries
                .into_iter()
                .map(|q| (q.topic, q.partition))
                .collect();
            self.keyed(keys, results)
        })
        .await
    }

    /// A new idempotent producer's id (unique in the cluster) and epoch.
    pub async fn init_producer_id(&self, ctx: &RequestContext) -> Result<(i64, i16)> {
        self.call(ctx, "InitProducerId", async {
            self.counted(self.broker.init_producer_id().await)
        })
        .await
    }
}
