//! Follower side: one fetcher per leader broker, over a [`ReplicaLink`].
//!
//! # Cancellation
//!
//! A fetcher stops at the broker's cancellation, between requests or while it waits
//! for an answer; an answer being applied is applied whole (it runs on a blocking
//! thread, each partition under its own lock), so a stop never leaves half a batch.
//! A fetcher whose leader stops answering gives up after the request's wait plus
//! five seconds and reconnects.
//!
//! # Throttling moves
//!
//! Replicas a reassignment is adding copy at most `reassignment_throttle_bytes_per_sec`
//! per fetcher (Kafka's `follower.replication.throttled.rate`): once they have fetched
//! more than the rate allows, they are left out of the requests until the time it
//! allows has passed, while the partitions this broker already follows go on.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shale_records::ErrorCode;
use uuid::Uuid;

use super::{
    PARTITION_MAX_BYTES, RESPONSE_MAX_BYTES, ReplicaFetchPartition, ReplicaFetchRequest,
    ReplicaFetchResponse, ReplicaPartitionData, ReplicationError,
};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::Result;
use crate::partition::{FollowerPosition, Partition, RemoteState};

impl Broker {
    /// Starts a fetcher for every leader broker this broker follows partitions of
    /// (fetchers end by themselves when nothing is left to follow there).
    pub(crate) fn ensure_fetchers(self: &Arc<Self>) {
        let leaders: std::collections::BTreeSet<i32> = self
            .all_partitions()
            .iter()
            .filter_map(|p| p.follower_position().map(|pos| pos.leader))
            .collect();
        self.followers.ensure(leaders, |leader| {
            let broker = self.clone();
            self.tasks
                .spawn(async move { broker.run_fetcher(leader).await })
        });
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

    /// One link to `leader`, used until it fails or nothing is followed there.
    async fn fetch_from(
        self: &Arc<Self>,
        leader: i32,
        max_wait_ms: u64,
    ) -> Result<(), ReplicationError> {
        let address = self
            .broker_address(leader)
            .ok_or(ReplicationError::NoAddress { leader })?;
        let mut link =
            self.followers
                .connect(&address)
                .await
                .map_err(|source| ReplicationError::Connect {
                    leader,
                    address: address.clone(),
                    source,
                })?;
        // A leader that stops answering (paused, partitioned) is given up on.
        let answer_timeout = Duration::from_millis(max_wait_ms + 5_000);
        let mut throttle = Throttle::new(self.config.cluster.reassignment_throttle_bytes_per_sec);
        loop {
            let mut followed = self.followed_from(leader);
            if followed.is_empty() || self.cancel.is_cancelled() {
                return Ok(());
            }
            if let Some(wait) = throttle.wait() {
                followed.retain(|(_, pos)| !pos.moving);
                if followed.is_empty() {
                    tokio::select! {
                        _ = self.cancel.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(wait) => continue,
                    }
                }
            }
            let moving_max = throttle.partition_max_bytes();
            let request = ReplicaFetchRequest {
                replica_id: self.config.broker_id,
                replica_epoch: self.broker_epoch(),
                max_wait_ms: max_wait_ms as u32,
                max_bytes: RESPONSE_MAX_BYTES,
                partitions: followed
                    .iter()
                    .map(|(p, pos)| ReplicaFetchPartition {
                        topic_id: p.topic_id,
                        partition: p.index,
                        current_leader_epoch: pos.leader_epoch,
                        fetch_offset: pos.log_end_offset,
                        last_fetched_epoch: pos.last_epoch,
                        partition_max_bytes: if pos.moving {
                            moving_max
                        } else {
                            PARTITION_MAX_BYTES
                        },
                        state_version: pos.state_version,
                        log_start_offset: Some(pos.log_start_offset),
                    })
                    .collect(),
            };
            let answer = tokio::select! {
                _ = self.cancel.cancelled() => return Ok(()),
                a = tokio::time::timeout(answer_timeout, link.fetch(request)) => a,
            };
            let answer = answer
                .map_err(|_| ReplicationError::Timeout { leader })?
                .map_err(|source| ReplicationError::Transport { leader, source })?;
            let moving: Vec<(Uuid, i32)> = (followed.iter())
                .filter(|(_, pos)| pos.moving)
                .map(|(p, _)| (p.topic_id, p.index))
                .collect();
            throttle.spend(
                (answer.partitions.iter())
                    .filter(|r| moving.contains(&(r.topic_id, r.partition)))
                    .map(|r| r.records.len() as u64)
                    .sum(),
            );
            let stale = self.apply_replica_answer(followed, answer).await?;
            if stale {
                // Someone has newer metadata than this broker: catch up, then go on.
                self.registry.stale();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// Applies a leader's answer; true if the leader said this broker's view is stale.
    async fn apply_replica_answer(
        &self,
        followed: Vec<(Arc<Partition>, FollowerPosition)>,
        answer: ReplicaFetchResponse,
    ) -> Result<bool, ReplicationError> {
        let by_key: HashMap<(Uuid, i32), (Arc<Partition>, FollowerPosition)> = followed
            .into_iter()
            .map(|(p, pos)| ((p.topic_id, p.index), (p, pos)))
            .collect();
        let stats = &self.stats.requests;
        let bytes: usize = answer.partitions.iter().map(|r| r.records.len()).sum();
        crate::stats::RequestStats::add(&stats.replicated_bytes, bytes as u64);
        let (stale, restarted) = tokio::task::spawn_blocking(move || {
            let now = now_ms();
            let (mut stale, mut restarted) = (false, Vec::new());
            for r in answer.partitions {
                let Some((p, pos)) = by_key.get(&(r.topic_id, r.partition)) else {
                    continue;
                };
                match apply_one(p, pos, &r, now) {
                    Ok(Applied::Stale) => stale = true,
                    Ok(Applied::Restart(at)) => restarted.push((p.clone(), *pos, at)),
                    Ok(Applied::Done) => {}
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cannot apply replicated data");
                    }
                }
            }
            (stale, restarted)
        })
        .await?;
        for (p, pos, at) in restarted {
            self.restart_log(p, pos, at).await;
        }
        Ok(stale)
    }

    /// Restarts a follower's log, empty, at `offset` (its leader's local log start),
    /// with the producer state copied with the remote segment that ends before it: the
    /// transactions open there (with their first offsets, below this log) and the
    /// producers' sequences. The state is fetched first, so the log is never left
    /// restarted without it because a GET failed: then the log stays as it is, and the
    /// next fetch, refused the same way, tries again. Without a copied state (no such
    /// segment, or one copied without), the log knows only what it replicates.
    async fn restart_log(&self, p: Arc<Partition>, pos: FollowerPosition, offset: i64) {
        let snapshot = match self.copied_producer_state(&p, offset).await {
            Ok(snapshot) => snapshot,
            Err(e) => {
                tracing::warn!(topic = %p.topic, partition = p.index, offset, error = %e,
                    "cannot read the producer state copied before the leader's log start: restarting the log later");
                return;
            }
        };
        let part = p.clone();
        let restarted = tokio::task::spawn_blocking(move || {
            if !part.reset_to(&pos, offset)? {
                return Ok(None);
            }
            let Some(snapshot) = snapshot else {
                return Ok(Some(false));
            };
            part.install_producer_snapshot(offset, &snapshot).map(Some)
        })
        .await
        .map_err(crate::error::Error::from);
        match restarted.and_then(|r| r) {
            Ok(None) => {}
            Ok(Some(true)) => tracing::info!(topic = %p.topic, partition = p.index, offset,
                "took the producer state copied with the remote segment before the log's start"),
            Ok(Some(false)) => tracing::info!(topic = %p.topic, partition = p.index, offset,
                "no producer state copied before the log's start: the log knows the producers it replicates"),
            Err(e) => tracing::warn!(topic = %p.topic, partition = p.index, offset, error = %e,
                "cannot restart the log at the leader's log start"),
        }
    }

    /// The producer state copied with the remote segment that ends just before
    /// `offset` (`None`: the topic is not tiered, no segment ends there, or it was
    /// copied without one, or cut where a log diverged, so the state is of a history
    /// this log does not share).
    async fn copied_producer_state(
        &self,
        p: &Arc<Partition>,
        offset: i64,
    ) -> Result<Option<bytes::Bytes>> {
        if !p.config().has_remote_log() {
            return Ok(None);
        }
        let before = |state: &RemoteState| {
            let found = state.segments.iter().find(|s| s.end_offset + 1 == offset);
            found.cloned()
        };
        // The whole remote log: the part matching this log (which ends before it) is
        // not the part in question.
        let mut seg = before(&p.whole_remote_state());
        if seg.is_none() {
            // This broker's view of the remote log may be older than the leader's copies.
            self.read_remote_logs(vec![p.clone()], true).await;
            seg = before(&p.whole_remote_state());
        }
        match seg {
            Some(seg) if seg.object_end_offset == seg.end_offset => (self.tier.reader)
                .producer_snapshot(&seg)
                .await
                .map_err(crate::tiering::remote_read_error),
            _ => Ok(None),
        }
    }
}

/// A byte budget that refills at a fixed rate (0: unlimited).
struct Throttle {
    rate: u64,
    /// Bytes fetched beyond what the rate allowed so far.
    debt: f64,
    at: Instant,
}

impl Throttle {
    fn new(rate: u64) -> Self {
        Self {
            rate,
            debt: 0.0,
            at: Instant::now(),
        }
    }

    fn refill(&mut self) {
        let now = Instant::now();
        let paid = now.duration_since(self.at).as_secs_f64() * self.rate as f64;
        self.debt = (self.debt - paid).max(0.0);
        self.at = now;
    }

    /// How long until the throttled may fetch again (`None`: now).
    fn wait(&mut self) -> Option<Duration> {
        if self.rate == 0 {
            return None;
        }
        self.refill();
        (self.debt > 0.0).then(|| Duration::from_secs_f64(self.debt / self.rate as f64))
    }

    fn spend(&mut self, bytes: u64) {
        if self.rate > 0 {
            self.refill();
            self.debt += bytes as f64;
        }
    }

    /// A throttled partition's bytes per answer: at most a tenth of a second's worth
    /// (and at least 64 KiB, so a batch that size still comes through).
    fn partition_max_bytes(&self) -> i32 {
        if self.rate == 0 {
            return PARTITION_MAX_BYTES;
        }
        (self.rate / 10).clamp(64 << 10, PARTITION_MAX_BYTES as u64) as i32
    }
}

/// What applying one partition of a leader's answer did.
enum Applied {
    Done,
    /// This broker's metadata is stale.
    Stale,
    /// The log is to restart, empty, at this offset (the leader's local log start).
    Restart(i64),
}

/// Applies one partition of a leader's answer. A stale answer (the partition's role or
/// log moved meanwhile) is dropped.
fn apply_one(
    p: &Partition,
    pos: &FollowerPosition,
    r: &ReplicaPartitionData,
    now: i64,
) -> Result<Applied> {
    match r.error_code {
        ErrorCode::None => {}
        // At the start itself: its last epoch is older than any the leader knows there,
        // so what it holds below cannot be checked (see `rules::check_follower_fetch`).
        ErrorCode::OffsetOutOfRange if pos.log_end_offset <= r.local_log_start_offset => {
            tracing::info!(topic = %p.topic, partition = p.index, log_end_offset = pos.log_end_offset,
                leader_log_start = r.local_log_start_offset, "log ends before the leader's log starts, restarting it there");
            return Ok(Applied::Restart(r.local_log_start_offset));
        }
        code => {
            tracing::debug!(topic = %p.topic, partition = p.index, ?code, message = %r.error_message, "replica fetch refused");
            return Ok(Applied::Stale);
        }
    }
    if let Some((epoch, end_offset)) = r.diverging {
        p.truncate_diverged(pos, epoch, end_offset)?;
        return Ok(Applied::Done);
    }
    p.append_from_leader(pos, &r.records, r.high_watermark, now)?;
    Ok(Applied::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_holds_back_what_goes_past_its_rate() {
        let mut unlimited = Throttle::new(0);
        unlimited.spend(u64::MAX / 2);
        assert_eq!(unlimited.wait(), None);
        assert_eq!(unlimited.partition_max_bytes(), PARTITION_MAX_BYTES);

        let mut t = Throttle::new(1 << 20);
        assert_eq!(t.wait(), None, "nothing fetched yet");
        assert_eq!(t.partition_max_bytes(), (1 << 20) / 10);
        t.spend(512 << 10);
        let wait = t.wait().expect("half a second's worth fetched at once");
        assert!(
            wait > Duration::from_millis(400) && wait <= Duration::from_millis(500),
            "{wait:?}"
        );
        // The debt is paid as time passes.
        t.at -= Duration::from_millis(600);
        assert_eq!(t.wait(), None);
        assert_eq!(Throttle::new(1000).partition_max_bytes(), 64 << 10);
    }
}
