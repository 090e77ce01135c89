//! Replication between brokers, as in Kafka: followers pull.
//!
//! A follower runs one fetcher per leader broker. The fetcher keeps one bidirectional
//! `ReplicaFetch` stream open to that leader and sends a request for every partition
//! it follows there (its log end offset and the epoch of its last batch); it sends the
//! next request when it has applied the answer. The leader:
//! - refuses a request from another incarnation of the follower than the registered
//!   one (`STALE_BROKER_EPOCH`), so a request sent before a restart cannot vouch for a
//!   log the restart may have lost;
//! - refuses a request naming an old leader epoch (`FENCED_LEADER_EPOCH`);
//! - compares the follower's last epoch with its own epoch checkpoint and, if the
//!   follower's log diverged, answers with the end offset of that epoch: the follower
//!   truncates there and asks again (so no divergent tail survives a failover);
//! - records the follower's log end, raises the HW to the smallest log end over the
//!   ISR, adds a follower back to the ISR once it has reached both the HW and the start
//!   of the leader's epoch (a new leader's HW can lag what the old one acknowledged),
//!   removes an ISR member whose log end went backwards (compare-and-set in the
//!   metastore either way), and answers with batches from the follower's offset (not bounded by
//!   the HW) and its HW; with nothing new it holds the request up to
//!   `replica_fetch_max_wait_ms`, waking on the next append.
//!
//! A follower that has not caught up for `replica_lag_time_max_ms` is dropped from the
//! ISR by the leader ([`Broker::shrink_isrs`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use shale_metastore::{PartitionState, StateGuard};
use shale_proto::v1::replication_client::ReplicationClient;
use shale_proto::v1::replication_server::Replication;
use shale_proto::v1::*;
use shale_records::ErrorCode;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::api::{MAX_MESSAGE_BYTES, error_fields};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::partition::{FollowerFetch, FollowerPosition, LeaderRead, Partition, Role};

/// Bytes per partition in one replica fetch answer.
const PARTITION_MAX_BYTES: i32 = 8 << 20;
/// Bytes in one replica fetch answer.
const RESPONSE_MAX_BYTES: i32 = 32 << 20;

pub struct ReplicationService {
    broker: Arc<Broker>,
}

impl ReplicationService {
    pub fn new(broker: Arc<Broker>) -> Self {
        Self { broker }
    }
}

#[tonic::async_trait]
impl Replication for ReplicationService {
    type ReplicaFetchStream = ReceiverStream<Result<ReplicaFetchResponse, Status>>;

    async fn replica_fetch(
        &self,
        request: Request<Streaming<ReplicaFetchRequest>>,
    ) -> Result<Response<Self::ReplicaFetchStream>, Status> {
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(2);
        let broker = self.broker.clone();
        tokio::spawn(async move {
            loop {
                let req = tokio::select! {
                    _ = broker.cancel.cancelled() => break,
                    msg = inbound.message() => match msg {
                        Ok(Some(req)) => req,
                        _ => break,
                    },
                };
                let resp = broker.serve_replica_fetch(req).await;
                if tx.send(Ok(resp)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

impl Broker {
    /// Leader side of one replica fetch request (see the module docs).
    async fn serve_replica_fetch(
        self: &Arc<Self>,
        req: ReplicaFetchRequest,
    ) -> ReplicaFetchResponse {
        let mut appended = self.shared.appended.subscribe();
        let max_wait = Duration::from_millis(u64::from(req.max_wait_ms).min(5_000));
        let deadline = tokio::time::Instant::now() + max_wait;
        loop {
            appended.borrow_and_update();
            let results = self.serve_replica_once(&req).await;
            let news = results.iter().any(|(r, _)| match r {
                Ok(read) => !read.records.is_empty() || read.diverging.is_some(),
                Err(_) => true,
            });
            if news || tokio::time::Instant::now() >= deadline {
                return self.answer_replica_fetch(&req, results).await;
            }
            let _ = tokio::time::timeout_at(deadline, appended.changed()).await;
        }
    }

    async fn serve_replica_once(
        self: &Arc<Self>,
        req: &ReplicaFetchRequest,
    ) -> Vec<(Result<LeaderRead>, Option<Arc<Partition>>)> {
        let mut budget = req.max_bytes.clamp(1, RESPONSE_MAX_BYTES) as usize;
        let incarnation = self.check_replica_epoch(req.replica_id, req.replica_epoch);
        let work: Vec<(Result<Arc<Partition>>, FollowerFetch)> = req
            .partitions
            .iter()
            .map(|p| {
                let fetch = FollowerFetch {
                    replica_id: req.replica_id,
                    replica_epoch: req.replica_epoch,
                    current_leader_epoch: p.current_leader_epoch,
                    fetch_offset: p.fetch_offset,
                    last_fetched_epoch: p.last_fetched_epoch,
                    max_bytes: p.partition_max_bytes.clamp(1, PARTITION_MAX_BYTES) as usize,
                };
                let partition = match incarnation {
                    Ok(()) => self.partition_by_id(&p.topic_id, p.partition),
                    Err(registered) => Err(Error::StaleBrokerEpoch {
                        replica: req.replica_id,
                        sent: req.replica_epoch,
                        registered,
                    }),
                };
                (partition, fetch)
            })
            .collect();
        tokio::task::spawn_blocking(move || {
            let now = now_ms();
            work.into_iter()
                .map(|(p, mut fetch)| match p {
                    Err(e) => (Err(e), None),
                    Ok(p) => {
                        fetch.max_bytes = fetch.max_bytes.min(budget.max(1));
                        let read = p.serve_replica(&fetch, now);
                        if let Ok(read) = &read {
                            budget = budget.saturating_sub(read.records.len());
                        }
                        (read, Some(p))
                    }
                })
                .collect()
        })
        .await
        .unwrap_or_else(|e| vec![(Err(Error::Internal(e.to_string())), None)])
    }

    /// Whether a replica fetch comes from the follower's registered incarnation; else
    /// the registered epoch (-1: unknown broker). A newer incarnation than this broker
    /// knows means its view is stale: it refreshes, and the follower asks again.
    fn check_replica_epoch(&self, replica: i32, sent: i64) -> std::result::Result<(), i64> {
        let registered = self
            .brokers()
            .iter()
            .find(|b| b.broker_id == replica)
            .map_or(-1, |b| b.broker_epoch);
        if registered == sent {
            return Ok(());
        }
        if registered < sent {
            self.changes.notify_one();
        }
        Err(registered)
    }

    async fn answer_replica_fetch(
        &self,
        req: &ReplicaFetchRequest,
        results: Vec<(Result<LeaderRead>, Option<Arc<Partition>>)>,
    ) -> ReplicaFetchResponse {
        let mut partitions = Vec::with_capacity(results.len());
        for (wanted, (r, p)) in req.partitions.iter().zip(results) {
            if let (Ok(read), Some(p)) = (&r, &p)
                && let Some((role, isr)) = &read.isr_change
            {
                if isr.contains(&req.replica_id) {
                    tracing::info!(topic = %p.topic, partition = p.index, replica = req.replica_id,
                        "follower caught up, adding it to the ISR");
                } else {
                    tracing::warn!(topic = %p.topic, partition = p.index, replica = req.replica_id,
                        "follower's log went backwards (it lost records), removing it from the ISR");
                }
                self.write_isr(p, role, isr.clone()).await;
            }
            let (error_code, error_message) =
                error_fields(&self.request_stats.errors, r.as_ref().err());
            // Out of range: the follower needs the leader's local log start to restart at.
            let range_start = match &r {
                Err(Error::OffsetOutOfRange { log_start, .. }) => *log_start,
                _ => -1,
            };
            let read = r.ok();
            let diverging = read.as_ref().and_then(|r| r.diverging);
            partitions.push(ReplicaFetchPartitionResult {
                topic_id: wanted.topic_id.clone(),
                partition: wanted.partition,
                error_code,
                error_message,
                high_watermark: read.as_ref().map_or(-1, |r| r.high_watermark),
                local_log_start_offset: read
                    .as_ref()
                    .map_or(range_start, |r| r.local_log_start_offset),
                diverging_epoch: diverging.map_or(-1, |d| d.0),
                diverging_end_offset: diverging.map_or(-1, |d| d.1),
                records: read.map(|r| r.records).unwrap_or_default(),
            });
        }
        ReplicaFetchResponse { partitions }
    }

    /// Writes a new ISR for a partition this broker leads (compare-and-set on the
    /// version its role came from). Skipped while this broker's lease is not valid.
    pub(crate) async fn write_isr(&self, p: &Partition, role: &Role, isr: Vec<i32>) {
        if !self.lease_valid() {
            return;
        }
        // Eligible replicas back in the ISR are plain members again; and once the ISR
        // reaches min.insync.replicas, records can commit without the others: none of
        // them stays eligible (KIP-966).
        let min_isr = p.config().min_insync_replicas.max(1) as usize;
        let elr = if isr.len() >= min_isr {
            Vec::new()
        } else {
            role.elr
                .iter()
                .copied()
                .filter(|b| !isr.contains(b))
                .collect()
        };
        let next = PartitionState {
            topic_id: p.topic_id,
            partition: p.index,
            replicas: role.replicas.clone(),
            leader: role.leader,
            leader_epoch: role.leader_epoch,
            isr,
            elr,
            version: role.version,
        };
        match self
            .metastore
            .update_partition_state(&next, StateGuard::default())
            .await
        {
            Ok(stored) => {
                tracing::info!(topic = %p.topic, partition = p.index, isr = ?stored.isr,
                    elr = ?stored.elr, "ISR changed");
                p.set_isr(stored.isr, stored.elr, stored.version);
            }
            Err(e) => {
                tracing::info!(topic = %p.topic, partition = p.index, error = %e, "ISR change not written");
                self.changes.notify_one();
            }
        }
    }

    /// Leader: drops followers that have not caught up within `replica_lag_time_max_ms`.
    pub(crate) async fn shrink_isrs(&self) -> Result<()> {
        let lag = self.config.cluster.replica_lag_time_max_ms as i64;
        let now = now_ms();
        for p in self.all_partitions() {
            if let Some((role, isr)) = p.isr_to_shrink(now, lag) {
                tracing::warn!(topic = %p.topic, partition = p.index, from = ?role.isr, to = ?isr,
                    "followers fell behind, shrinking the ISR");
                self.write_isr(&p, &role, isr).await;
            }
        }
        Ok(())
    }

    /// Starts a fetcher for every leader broker this broker follows partitions of
    /// (fetchers end by themselves when nothing is left to follow there).
    pub(crate) fn ensure_fetchers(self: &Arc<Self>) {
        let leaders: std::collections::BTreeSet<i32> = self
            .all_partitions()
            .iter()
            .filter_map(|p| p.follower_position().map(|pos| pos.leader))
            .collect();
        let mut fetchers = self.fetchers.lock().unwrap_or_else(|e| e.into_inner());
        fetchers.retain(|_, handle| !handle.is_finished());
        for leader in leaders {
            if !fetchers.contains_key(&leader) {
                let broker = self.clone();
                fetchers.insert(
                    leader,
                    tokio::spawn(async move { broker.run_fetcher(leader).await }),
                );
            }
        }
    }

    fn followed_from(&self, leader: i32) -> Vec<(Arc<Partition>, FollowerPosition)> {
        self.all_partitions()
            .into_iter()
            .filter_map(|p| {
                let pos = p.follower_position()?;
                (pos.leader == leader).then_some((p, pos))
            })
            .collect()
    }

    async fn run_fetcher(self: Arc<Self>, leader: i32) {
        tracing::info!(leader, "replica fetcher started");
        let max_wait = self.config.cluster.replica_fetch_max_wait_ms;
        while !self.cancel.is_cancelled() {
            if self.followed_from(leader).is_empty() {
                break;
            }
            if let Err(e) = self.fetch_from(leader, max_wait).await {
                tracing::debug!(leader, error = %e, "replica fetch stream ended");
                tokio::select! {
                    _ = self.cancel.cancelled() => break,
                    _ = tokio::time::sleep(Duration::from_millis(200)) => {}
                }
            }
        }
        tracing::info!(leader, "replica fetcher stopped");
    }

    /// One stream to `leader`, used until it fails or nothing is followed there.
    async fn fetch_from(self: &Arc<Self>, leader: i32, max_wait_ms: u64) -> anyhow::Result<()> {
        let address = self
            .broker_address(leader)
            .ok_or_else(|| anyhow::anyhow!("broker {leader} has no known address"))?;
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .initial_stream_window_size(8 * 1024 * 1024)
            .initial_connection_window_size(32 * 1024 * 1024)
            .connect()
            .await?;
        let mut client = ReplicationClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let (tx, rx) = mpsc::channel(1);
        let mut answers = client
            .replica_fetch(ReceiverStream::new(rx))
            .await?
            .into_inner();
        // A leader that stops answering (paused, partitioned) is given up on.
        let answer_timeout = Duration::from_millis(max_wait_ms + 5_000);
        loop {
            let followed = self.followed_from(leader);
            if followed.is_empty() || self.cancel.is_cancelled() {
                return Ok(());
            }
            let request = ReplicaFetchRequest {
                replica_id: self.config.broker_id,
                replica_epoch: self.broker_epoch(),
                max_wait_ms: max_wait_ms as u32,
                max_bytes: RESPONSE_MAX_BYTES,
                partitions: followed
                    .iter()
                    .map(|(p, pos)| ReplicaFetchPartition {
                        topic_id: p.topic_id.to_string(),
                        partition: p.index,
                        current_leader_epoch: pos.leader_epoch,
                        fetch_offset: pos.log_end_offset,
                        last_fetched_epoch: pos.last_epoch,
                        partition_max_bytes: PARTITION_MAX_BYTES,
                    })
                    .collect(),
            };
            tx.send(request).await?;
            let answer = tokio::select! {
                _ = self.cancel.cancelled() => return Ok(()),
                a = tokio::time::timeout(answer_timeout, answers.message()) => a,
            };
            let answer = answer
                .map_err(|_| anyhow::anyhow!("leader {leader} did not answer in time"))??
                .ok_or_else(|| anyhow::anyhow!("leader {leader} closed the stream"))?;
            let stale = self.apply_replica_answer(followed, answer).await?;
            if stale {
                // Someone has newer metadata than this broker: catch up, then go on.
                self.changes.notify_one();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Applies a leader's answer; true if the leader said this broker's view is stale.
    async fn apply_replica_answer(
        &self,
        followed: Vec<(Arc<Partition>, FollowerPosition)>,
        answer: ReplicaFetchResponse,
    ) -> anyhow::Result<bool> {
        let by_key: HashMap<(String, i32), (Arc<Partition>, FollowerPosition)> = followed
            .into_iter()
            .map(|(p, pos)| ((p.topic_id.to_string(), p.index), (p, pos)))
            .collect();
        let stats = &self.request_stats;
        let bytes: usize = answer.partitions.iter().map(|r| r.records.len()).sum();
        crate::stats::RequestStats::add(&stats.replicated_bytes, bytes as u64);
        let stale = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            let mut stale = false;
            for r in answer.partitions {
                let Some((p, pos)) = by_key.get(&(r.topic_id.clone(), r.partition)) else {
                    continue;
                };
                let outcome = apply_one(p, pos, &r, now);
                match outcome {
                    Ok(s) => stale |= s,
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot apply replicated data");
                    }
                }
            }
            stale
        })
        .await?;
        Ok(stale)
    }
}

/// Applies one partition of a leader's answer; true if this broker's metadata is stale.
/// A stale answer (the partition's role or log moved meanwhile) is dropped.
fn apply_one(
    p: &Partition,
    pos: &FollowerPosition,
    r: &ReplicaFetchPartitionResult,
    now: i64,
) -> Result<bool> {
    match ErrorCode::try_from(r.error_code).unwrap_or(ErrorCode::UnknownServerError) {
        ErrorCode::None => {}
        ErrorCode::OffsetOutOfRange if pos.log_end_offset < r.local_log_start_offset => {
            tracing::info!(topic = %p.topic, partition = p.index, log_end_offset = pos.log_end_offset,
                leader_log_start = r.local_log_start_offset, "log ends before the leader's log starts, restarting it there");
            p.reset_to(pos, r.local_log_start_offset)?;
            return Ok(false);
        }
        code => {
            tracing::debug!(topic = %p.topic, partition = p.index, ?code, message = %r.error_message, "replica fetch refused");
            return Ok(true);
        }
    }
    if r.diverging_end_offset >= 0 {
        p.truncate_diverged(pos, r.diverging_epoch, r.diverging_end_offset)?;
        return Ok(false);
    }
    p.append_from_leader(pos, &r.records, r.high_watermark, now)?;
    Ok(false)
}
