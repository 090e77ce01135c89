//! The follower's side of replication for one partition: where its log stands for the
//! next fetch, and applying the leader's answers (batches, a divergence to cut, a log
//! start to restart at). Each does nothing if the answer went stale meanwhile.

use super::{Partition, Replica, validate_replicated_batches};
use crate::error::Result;

/// A follower's log end, the epoch of its last batch, and whom it follows at which
/// epoch: what its next replica fetch says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerPosition {
    pub log_end_offset: i64,
    pub last_epoch: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    /// The version of the partition state it applied last.
    pub state_version: i64,
    /// A replica a reassignment is adding (its copy is throttled).
    pub moving: bool,
    /// The first offset it serves to consumers, its remote log included.
    pub log_start_offset: i64,
}

impl Partition {
    /// Follower: where its log stands, for the next replica fetch (`None` while this
    /// broker leads or the partition has no leader).
    pub fn follower_position(&self) -> Option<FollowerPosition> {
        // A read replica's every replica follows the source's bucket, not a leader.
        if !self.config().read_replica_of.is_empty() {
            return None;
        }
        let r = self.replica();
        if r.role.leader == self.broker_id || r.role.leader < 0 {
            return None;
        }
        Some(FollowerPosition {
            log_end_offset: r.log.log_end_offset(),
            last_epoch: r.log.latest_epoch(),
            leader: r.role.leader,
            leader_epoch: r.role.leader_epoch,
            state_version: r.role.version,
            moving: r.role.adding.contains(&self.broker_id),
            log_start_offset: self.offsets_of(&r.log).log_start_offset,
        })
    }

    /// Follower: appends batches from the leader (checked like a produce, but kept
    /// with their offsets and epochs) and takes the leader's HW, capped by its own end.
    /// Like the two below, it does nothing (false) if the answer is stale: this
    /// replica no longer follows that leader at that epoch, or its log moved since
    /// the request (`from`) was made.
    pub fn append_from_leader(
        &self,
        from: &FollowerPosition,
        records: &[u8],
        leader_hw: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let headers = if records.is_empty() {
            Vec::new()
        } else {
            validate_replicated_batches(records)?
        };
        let mut r = self.replica();
        if !self.still_at(&r, from) {
            return Ok(false);
        }
        if !headers.is_empty() {
            r.log.append_replicated(records, &headers, now_ms)?;
        }
        let hw = leader_hw.min(r.log.log_end_offset());
        r.log.settle_transactions(hw);
        self.high_watermark.send_if_modified(|cur| {
            let changed = *cur != hw;
            *cur = hw;
            changed
        });
        Ok(true)
    }

    /// Follower: cuts the divergent tail the leader pointed at (its `epoch` ended at
    /// `end_offset` there).
    pub fn truncate_diverged(
        &self,
        from: &FollowerPosition,
        epoch: i32,
        end_offset: i64,
    ) -> Result<bool> {
        let mut r = self.replica();
        if !self.still_at(&r, from) {
            return Ok(false);
        }
        let target =
            shale_cluster::rules::truncation_point(end_offset, r.log.epoch_end_offset(epoch));
        tracing::info!(topic = %self.topic, partition = self.index, epoch, leader_end_offset = end_offset,
            log_end_offset = r.log.log_end_offset(), truncate_to = target, "follower log diverged from the leader");
        r.log.truncate_to(target)?;
        // What matched the cut tail may not match what replaces it.
        self.install_remote_state(&r, self.whole_remote_state());
        let leo = r.log.log_end_offset();
        self.high_watermark.send_if_modified(|cur| {
            let changed = *cur > leo;
            *cur = (*cur).min(leo);
            changed
        });
        Ok(true)
    }

    /// Follower: restarts the log empty at `offset` (the leader's local log start, when
    /// this log ends before it).
    pub fn reset_to(&self, from: &FollowerPosition, offset: i64) -> Result<bool> {
        let mut r = self.replica();
        if !self.still_at(&r, from) {
            return Ok(false);
        }
        r.log.reset_to(offset)?;
        self.install_remote_state(&r, self.whole_remote_state());
        self.high_watermark.send_replace(offset);
        Ok(true)
    }

    /// Whether this replica still follows as it did at `from`, with the same log end
    /// (and is not closed).
    fn still_at(&self, r: &Replica, from: &FollowerPosition) -> bool {
        !r.closed
            && r.role.leader != self.broker_id
            && r.role.leader == from.leader
            && r.role.leader_epoch == from.leader_epoch
            && r.log.log_end_offset() == from.log_end_offset
    }
}
