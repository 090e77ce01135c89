//! A partition's local segments: retention, sealing and what they hold (sizes, the
//! sealed segments still to copy), each under the replica lock.

use shale_log::{RetentionOutcome, SealedSegmentInfo, TierBounds};

use super::{Partition, PartitionOffsets, RemoteState};
use crate::error::Result;

impl Partition {
    /// Local retention. A tiered partition deletes only segments already in the object
    /// store, and nothing before the tier has loaded its state. The remote view is read
    /// under the replica lock: a follower's truncation re-matches it under that lock,
    /// so retention never goes by a view of records the log no longer holds.
    pub fn apply_retention(&self, now_ms: i64) -> Result<RetentionOutcome> {
        let config = self.config();
        let mut r = self.replica();
        let tier = config.remote_storage_enable.then(|| {
            let remote = self.remote_state();
            if remote.loaded {
                TierBounds {
                    uploaded_through: remote.end_offset,
                    retained_from: remote.retained_from,
                }
            } else {
                TierBounds {
                    uploaded_through: i64::MIN,
                    retained_from: -1,
                }
            }
        });
        Ok(r.log.apply_retention(now_ms, tier)?)
    }

    /// Deletes the local records below `offset` (DeleteRecords, already stored in the
    /// metastore); see [`PartitionLog::delete_records_below`].
    pub fn delete_records_below(&self, offset: i64) -> Result<RetentionOutcome> {
        Ok(self.replica().log.delete_records_below(offset)?)
    }

    /// The offset records were deleted below (0: none).
    pub fn deleted_below(&self) -> i64 {
        self.replica().log.deleted_below()
    }

    pub fn sealed_segments_after(&self, after: i64) -> Vec<SealedSegmentInfo> {
        self.replica().log.sealed_segments_after(after)
    }

    /// The remote segments, the offsets and the sealed local segments from the local
    /// log start, taken together under the partition's lock (local retention cannot
    /// move a segment from one list to neither in between).
    pub fn lookup_view(&self) -> (RemoteState, PartitionOffsets, Vec<SealedSegmentInfo>) {
        let r = self.replica();
        let offsets = self.offsets_of(&r.log);
        let remote = self.remote_state();
        let from = offsets.local_log_start_offset.max(offsets.log_start_offset);
        (remote, offsets, r.log.sealed_segments_after(from - 1))
    }

    /// Whether a sealed segment holds offsets above `after` (cheap).
    pub fn has_sealed_after(&self, after: i64) -> bool {
        self.replica().log.has_sealed_after(after)
    }

    /// Bytes of the local log.
    pub fn size_bytes(&self) -> u64 {
        self.replica().log.size_bytes()
    }

    /// Local bytes of the segments after `offset` (those not in the object store).
    pub fn bytes_after(&self, offset: i64) -> u64 {
        self.replica().log.bytes_after(offset)
    }

    pub fn flush_if_due(&self, now_ms: i64) -> Result<bool> {
        Ok(self.replica().log.flush_if_due(now_ms)?)
    }

    /// Seals the active segment if its first record came more than `max_age_ms` ago.
    pub fn roll_if_older(&self, max_age_ms: i64, now_ms: i64) -> Result<bool> {
        Ok(self.replica().log.roll_if_older(max_age_ms, now_ms)?)
    }

    /// When the oldest record above `after` came (see
    /// [`shale_log::PartitionLog::first_append_after`]).
    pub fn first_append_after(&self, after: i64) -> Option<i64> {
        self.replica().log.first_append_after(after)
    }
}
