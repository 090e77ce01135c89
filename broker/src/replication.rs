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

pub(crate) mod follower;

use std::sync::Arc;
use std::time::Duration;

use shale_metastore::{PartitionState, StateGuard};
use shale_records::ErrorCode;

pub use crate::transport::*;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::partition::{FollowerFetch, LeaderRead, Partition, Role};

/// Bytes per partition in one replica fetch answer.
const PARTITION_MAX_BYTES: i32 = 8 << 20;
/// Bytes in one replica fetch answer.
const RESPONSE_MAX_BYTES: i32 = 32 << 20;

impl Broker {
    /// Leader side of one replica fetch request (see the module docs).
    pub async fn serve_replica_fetch(
        self: &Arc<Self>,
        req: ReplicaFetchRequest,
    ) -> ReplicaFetchResponse {
        let mut appended = self.registry.shared().appended.subscribe();
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
                    state_version: p.state_version,
                    log_start_offset: p.log_start_offset,
                    max_bytes: p.partition_max_bytes.clamp(1, PARTITION_MAX_BYTES) as usize,
                };
                let partition = match incarnation {
                    Ok(()) => self.partition_by_id(p.topic_id, p.partition),
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
        .unwrap_or_else(|e| vec![(Err(Error::from(e)), None)])
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
            self.registry.stale();
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
                let lost = (!isr.contains(&req.replica_id)).then_some(req.replica_id);
                self.write_isr(p, role, isr.clone(), lost).await;
            }
            // A follower that saw a newer partition state than this leader applied: the
            // metadata is reloaded before its fetches count (see `rules::state_known`).
            if matches!(r, Err(Error::NotLeader { .. })) {
                self.registry.stale();
            }
            // Out of range: the follower needs the leader's local log start to restart at.
            let range_start = match &r {
                Err(Error::OffsetOutOfRange { log_start, .. }) => *log_start,
                _ => -1,
            };
            let (error_code, error_message) = match &r {
                Ok(_) => (ErrorCode::None, String::new()),
                Err(e) => {
                    self.stats.requests.errors.count(e.code());
                    (e.code(), e.to_string())
                }
            };
            let read = r.ok();
            partitions.push(ReplicaPartitionData {
                topic_id: wanted.topic_id,
                partition: wanted.partition,
                error_code,
                error_message,
                high_watermark: read.as_ref().map_or(-1, |r| r.high_watermark),
                local_log_start_offset: read
                    .as_ref()
                    .map_or(range_start, |r| r.local_log_start_offset),
                diverging: read.as_ref().and_then(|r| r.diverging),
                records: read.map(|r| r.records).unwrap_or_default(),
            });
        }
        ReplicaFetchResponse { partitions }
    }

    /// Writes a new ISR for a partition this broker leads (compare-and-set on the
    /// version its role came from). Skipped while this broker's lease is not valid.
    pub(crate) async fn write_isr(
        &self,
        p: &Partition,
        role: &Role,
        isr: Vec<i32>,
        lost: Option<i32>,
    ) {
        if !self.lease_valid() {
            p.isr_change_not_sent(role.version);
            return;
        }
        // Eligible replicas as KIP-966 keeps them (see `rules::elr_after_isr_change`).
        let min_isr = p.config().min_insync_replicas.max(1) as usize;
        let elr =
            shale_cluster::rules::elr_after_isr_change(&role.elr, &role.isr, &isr, lost, min_isr);
        let recovering = shale_cluster::rules::still_recovering(&role.recovering, &isr);
        let next = PartitionState {
            topic_id: p.topic_id,
            partition: p.index,
            replicas: role.replicas.clone(),
            leader: role.leader,
            leader_epoch: role.leader_epoch,
            isr,
            elr,
            recovering,
            adding: role.adding.clone(),
            removing: role.removing.clone(),
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
                p.set_isr(stored);
            }
            Err(e) => {
                tracing::info!(topic = %p.topic, partition = p.index, error = %e, "ISR change not written");
                // The write may still have been applied (a lost answer): the followers
                // it adds keep counting for the HW until the metadata reloaded here
                // shows the partition's state.
                self.registry.stale();
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
                self.write_isr(&p, &role, isr, None).await;
            }
        }
        Ok(())
    }
}
