//! Produce, fetch, list offsets, producer ids.

use std::time::Duration;

use std::sync::Arc;

use super::{Keyed, RequestContext, Service};
use shale_broker::Appended;
use shale_broker::error::{Error, Result};
use shale_broker::fetch::{FetchSpec, Fetched, ReadFrom};
use shale_broker::produce::ProduceData;
use shale_security::acl::{Operation, ResourceType};

/// Longest a produce waits for acks=all when the client names no timeout.
const DEFAULT_PRODUCE_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ProduceRequest {
    /// -1 (all), 0 or 1.
    pub acks: i32,
    /// How long acks=all may wait for the ISR (`None`: 30 s).
    pub timeout: Option<Duration>,
    /// A transactional producer's id (its batches are checked against its open
    /// transaction).
    pub transactional_id: Option<String>,
    pub partitions: Vec<ProduceData>,
}

/// A fetch's answers, and how long the client is throttled for exceeding its quota
/// (already waited out unless the client honours throttle times).
pub struct FetchAnswer {
    pub partitions: Vec<Keyed<Fetched>>,
    pub throttle: Duration,
}

pub struct FetchRequest {
    pub partitions: Vec<FetchSpec>,
    /// The client backs off by the throttle time it is told (Kafka Fetch v8+): the
    /// answer comes at once with it. Otherwise a throttled client gets its answer that
    /// much later.
    pub client_honors_throttle: bool,
    pub max_wait: Duration,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub read_from: ReadFrom,
    /// Records of the newest local segments may be answered as slices of their files,
    /// for a connection that sends them with `sendfile(2)` (see `Broker::fetch`).
    pub zero_copy: bool,
    /// Only committed records (Kafka's `isolation.level=read_committed`): reads stop
    /// at the last stable offset, and the answer names the aborted transactions.
    pub read_committed: bool,
}

/// One partition of a ListOffsets request: the first offset whose timestamp is at
/// least `timestamp` (-1: the log end, -2: the log start).
pub struct OffsetQuery {
    pub topic: String,
    pub partition: i32,
    pub timestamp: i64,
    /// Answer as for a `read_committed` consumer (bounded by the last stable offset).
    pub read_committed: bool,
}

/// One partition of an OffsetForLeaderEpoch request.
pub struct EpochQuery {
    pub topic: String,
    pub partition: i32,
    /// The epoch the client believes current (-1: not checked).
    pub current_leader_epoch: i32,
    /// The epoch whose end offset is asked for.
    pub leader_epoch: i32,
}

/// One partition of a DeleteRecords request: delete the records below `offset` (-1:
/// the high watermark).
pub struct DeleteRecordsQuery {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
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
            let txn = req.transactional_id.as_deref();
            let refused = txn.map_or(Ok(()), |id| {
                self.authorize(ctx, Operation::Write, ResourceType::TransactionalId, id)
            });
            let results = if let Err(e) = refused {
                let e = Arc::new(e);
                keys.iter().map(|_| Err(Error::Shared(e.clone()))).collect()
            } else {
                let acks = req.acks;
                self.on_allowed_topics(
                    ctx,
                    Operation::Write,
                    req.partitions,
                    |p| &p.topic,
                    |parts| self.broker.produce(acks, timeout, txn, parts),
                )
                .await
            };
            self.keyed(keys, results)
        })
        .await
    }

    /// Reads each partition from its offset (long-polling up to `max_wait` for
    /// `min_bytes`); one answer per partition, in order, and how long the client is
    /// throttled for exceeding its fetch quota (the front end enforces it).
    pub async fn fetch(&self, ctx: &RequestContext, req: FetchRequest) -> FetchAnswer {
        self.call(ctx, "Fetch", async {
            let keys: Vec<(String, i32)> = req
                .partitions
                .iter()
                .map(|s| (s.topic.clone(), s.partition))
                .collect();
            let (max_wait, min_bytes, max_bytes) = (req.max_wait, req.min_bytes, req.max_bytes);
            let (read_from, zero_copy) = (&req.read_from, req.zero_copy);
            let committed = req.read_committed;
            let results = self
                .on_allowed_topics(
                    ctx,
                    Operation::Read,
                    req.partitions,
                    |s| &s.topic,
                    |parts| {
                        self.broker.fetch(
                            parts, max_wait, min_bytes, max_bytes, read_from, zero_copy, committed,
                        )
                    },
                )
                .await;
            let bytes: u64 = results
                .iter()
                .filter_map(|r| r.as_ref().ok())
                .map(|f| f.records.len() as u64)
                .sum();
            let throttle = self.fetch_quotas.record(&ctx.quota_key(), bytes);
            if !throttle.is_zero() {
                shale_broker::stats::RequestStats::add(
                    &self.broker.stats().requests.throttled_fetches,
                    1,
                );
            }
            FetchAnswer {
                partitions: self.keyed(keys, results),
                throttle,
            }
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
            let keys = queries
                .iter()
                .map(|q| (q.topic.clone(), q.partition))
                .collect();
            let results = self
                .on_allowed_topics(
                    ctx,
                    Operation::Describe,
                    queries,
                    |q| &q.topic,
                    |qs| {
                        futures::future::join_all(qs.into_iter().map(|q| async move {
                            let found = self
                                .broker
                                .list_offset_as(
                                    &q.topic,
                                    q.partition,
                                    q.timestamp,
                                    q.read_committed,
                                )
                                .await?;
                            Ok(found.map(|(offset, timestamp)| OffsetAndTimestamp {
                                offset,
                                timestamp,
                            }))
                        }))
                    },
                )
                .await;
            self.keyed(keys, results)
        })
        .await
    }

    /// A new idempotent producer's id (unique in the cluster) and epoch; for a
    /// transactional producer (`transactional_id`), its id and next epoch, with its
    /// transaction timeout and, when it restarts its transactions, the id and epoch it
    /// had (`expected`; -1, -1 otherwise).
    pub async fn init_producer_id(
        &self,
        ctx: &RequestContext,
        transactional_id: Option<String>,
        timeout_ms: i32,
        expected: (i64, i16),
    ) -> Result<(i64, i16)> {
        self.call(ctx, "InitProducerId", async {
            let r = match transactional_id {
                Some(id) => {
                    self.init_transactional_producer(ctx, &id, timeout_ms, expected)
                        .await
                }
                None => match self.may_write_idempotently(ctx) {
                    Ok(()) => (self.broker.coordinators().producer_ids())
                        .init_producer_id()
                        .await
                        .map_err(Error::from),
                    Err(e) => Err(e),
                },
            };
            self.counted(r)
        })
        .await
    }

    /// For each query, the largest epoch at most the one asked for and the offset
    /// where it ends on the leader (its log end for the current epoch): a client
    /// compares it with its position to detect a truncated log.
    pub async fn offsets_for_leader_epochs(
        &self,
        ctx: &RequestContext,
        queries: Vec<EpochQuery>,
    ) -> Vec<Keyed<(i32, i64)>> {
        self.call(ctx, "OffsetForLeaderEpoch", async {
            let keys = queries
                .iter()
                .map(|q| (q.topic.clone(), q.partition))
                .collect();
            let results = self
                .on_allowed_topics(
                    ctx,
                    Operation::Describe,
                    queries,
                    |q| &q.topic,
                    |qs| async move {
                        qs.iter()
                            .map(|q| {
                                let p = self.broker.leader_partition(&q.topic, q.partition)?;
                                p.epoch_end_offset(q.current_leader_epoch, q.leader_epoch)
                            })
                            .collect()
                    },
                )
                .await;
            self.keyed(keys, results)
        })
        .await
    }

    /// Deletes each partition's records below its offset; answers the partition's log
    /// start afterwards (Kafka's low watermark). The new start is in the metastore
    /// when this answers: no replica, and no later leader, serves the deleted records.
    pub async fn delete_records(
        &self,
        ctx: &RequestContext,
        queries: Vec<DeleteRecordsQuery>,
    ) -> Vec<Keyed<i64>> {
        self.call(ctx, "DeleteRecords", async {
            let keys = queries
                .iter()
                .map(|q| (q.topic.clone(), q.partition))
                .collect();
            let results = self
                .on_allowed_topics(
                    ctx,
                    Operation::Delete,
                    queries,
                    |q| &q.topic,
                    |qs| {
                        futures::future::join_all(qs.into_iter().map(|q| async move {
                            self.broker
                                .delete_records(&q.topic, q.partition, q.offset)
                                .await
                        }))
                    },
                )
                .await;
            self.keyed(keys, results)
        })
        .await
    }

    /// An idempotent producer needs IDEMPOTENT_WRITE on the cluster, or WRITE on some
    /// topic (as Kafka grants it since 3.0).
    fn may_write_idempotently(&self, ctx: &RequestContext) -> Result<()> {
        if !self.broker.security.authorizer().enabled()
            || self
                .broker
                .topics_snapshot()
                .iter()
                .any(|t| self.may(ctx, Operation::Write, ResourceType::Topic, &t.meta.name))
        {
            return Ok(());
        }
        self.authorize_cluster(ctx, Operation::IdempotentWrite)
    }
}
