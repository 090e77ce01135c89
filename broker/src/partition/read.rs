//! The read side of a partition: its offsets at one instant, planning fetches and reads
//! bounded by the high watermark, and ListOffsets on the local log.

use bytes::Bytes;
use shale_log::{PartitionLog, ReadPlan};

use super::Partition;
use crate::error::{Error, Result};

/// Offsets and sizes of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// First offset readable, locally or from the object store.
    pub log_start_offset: i64,
    /// First offset in the local log.
    pub local_log_start_offset: i64,
    pub high_watermark: i64,
    /// The high watermark, or the first offset of an undecided transaction below it.
    pub last_stable_offset: i64,
    pub log_end_offset: i64,
    pub size_bytes: u64,
    pub segments: usize,
}

impl Partition {
    pub fn offsets(&self) -> PartitionOffsets {
        self.offsets_of(&self.replica().log)
    }

    pub(super) fn offsets_of(&self, log: &PartitionLog) -> PartitionOffsets {
        let hw = self.high_watermark();
        let local = log.log_start_offset();
        let remote = self.remote_state().start_offset();
        let start = if remote >= 0 {
            remote.min(local)
        } else {
            local
        };
        PartitionOffsets {
            // Records deleted below an offset (DeleteRecords) are gone from both tiers.
            log_start_offset: start.max(log.deleted_below()).min(local),
            local_log_start_offset: local,
            high_watermark: hw,
            last_stable_offset: log.last_stable_offset(hw),
            log_end_offset: log.log_end_offset(),
            size_bytes: log.size_bytes(),
            segments: log.segment_count(),
        }
    }

    /// Where a fetch at `offset` reads: the local log (a planned read, bounded by the
    /// high watermark) or, below the local log start, the object store; below the
    /// offset records were deleted below, nowhere (out of range). Decided under
    /// the partition's lock, so local retention cannot move the local log start between
    /// the decision and the plan. A follower answers too when `any_replica` (a
    /// consumer sent here by [`shale_cluster::placement::preferred_read_replica`]),
    /// up to the high watermark it knows. With `slice_bytes`, the plan may be answered
    /// as a slice of the segment file ([`ReadPlan::locate`]). With `read_committed`
    /// the read stops at the last stable offset instead.
    pub fn plan_fetch(
        &self,
        offset: i64,
        any_replica: bool,
        slice_bytes: Option<usize>,
        read_committed: bool,
    ) -> Result<(Option<ReadPlan>, PartitionOffsets)> {
        let r = self.replica();
        if !any_replica || r.closed || !r.role.replicas.contains(&self.broker_id) {
            self.ensure_leader(&r.role)?;
        }
        let offsets = self.offsets_of(&r.log);
        if offset < r.log.deleted_below() {
            return Err(Error::OffsetOutOfRange {
                offset,
                log_start: offsets.log_start_offset,
                log_end: offsets.log_end_offset,
            });
        }
        if offset < r.log.log_start_offset() {
            return Ok((None, offsets));
        }
        let bound = match read_committed {
            true => offsets.last_stable_offset,
            false => offsets.high_watermark,
        };
        let plan = match slice_bytes {
            Some(max_bytes) => r.log.plan_slice(offset, bound, max_bytes)?,
            None => r.log.plan_read(offset, bound)?,
        };
        Ok((Some(plan), offsets))
    }

    /// Leader: the followers a consumer at `offset` may be sent to (KIP-392): in the
    /// ISR, not leaving it by a reassignment, and holding `offset` as their last
    /// fetch said (their log start, remote log included, to their log end); none
    /// unless `offset` is readable here (log start to high watermark), so that a
    /// consumer out of range is answered here, not sent back and forth.
    pub fn followers_holding(&self, offset: i64) -> Vec<i32> {
        let r = self.replica();
        if r.closed || r.role.leader != self.broker_id {
            return Vec::new();
        }
        let here = self.offsets_of(&r.log);
        if offset < here.log_start_offset || offset > here.high_watermark {
            return Vec::new();
        }
        (r.role.isr.iter().copied())
            .filter(|b| *b != self.broker_id && !r.role.removing.contains(b))
            .filter(|b| {
                r.followers.get(b).is_some_and(|f| {
                    f.log_start.is_some_and(|start| start <= offset) && f.leo >= offset
                })
            })
            .collect()
    }

    /// Leader: the lowest log end of its other replicas (those being added among them)
    /// as their last fetches said, -1 for one not heard from since this broker leads,
    /// `i64::MAX` without another replica. Follower: `i64::MIN`. A cleaning removes
    /// transaction markers only below it.
    pub fn replicas_log_end(&self) -> i64 {
        let r = self.replica();
        if r.closed || r.role.leader != self.broker_id {
            return i64::MIN;
        }
        (r.role.replicas.iter().chain(&r.role.adding))
            .filter(|b| **b != self.broker_id)
            .map(|b| r.followers.get(b).map_or(-1, |f| f.leo))
            .min()
            .unwrap_or(i64::MAX)
    }

    /// Plans a read from `offset` bounded by the high watermark.
    pub fn plan_read(&self, offset: i64) -> Result<(ReadPlan, PartitionOffsets)> {
        let r = self.replica();
        self.ensure_leader(&r.role)?;
        let hw = self.high_watermark();
        let plan = r.log.plan_read(offset, hw)?;
        Ok((plan, self.offsets_of(&r.log)))
    }

    /// Reads whole batches from `offset`; see [`ReadPlan::read`].
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        whole_first: bool,
    ) -> Result<(Bytes, PartitionOffsets)> {
        let (plan, offsets) = self.plan_read(offset)?;
        let bytes = plan.read(max_bytes, whole_first)?;
        Ok((bytes, offsets))
    }

    /// Kafka ListOffsets on the local log: -1 latest (HW), -2 earliest (remote
    /// included), -3 the record with the largest timestamp, -4 earliest local, else
    /// the first local offset with timestamp >=
    /// `timestamp` (`None` when there is none). Remote timestamps: `Broker::list_offset`.
    pub fn list_offset(&self, timestamp: i64) -> Result<Option<(i64, i64)>> {
        self.list_offset_as(timestamp, false)
    }

    /// [`Partition::list_offset`], bounded by the last stable offset instead of the
    /// high watermark when `read_committed` (Kafka's isolation level).
    pub fn list_offset_as(
        &self,
        timestamp: i64,
        read_committed: bool,
    ) -> Result<Option<(i64, i64)>> {
        let r = self.replica();
        self.ensure_leader(&r.role)?;
        let log = &r.log;
        // A new leader's high watermark can lag what its predecessor acknowledged
        // until the followers fetch again: an offset bounded by it is not answered
        // until it reaches the start of this leader's epoch.
        let high_watermark = self.high_watermark();
        let unavailable = || -> Result<Option<(i64, i64)>> {
            match log.epoch_start_offset(r.role.leader_epoch) {
                Some(epoch_start) if epoch_start > high_watermark => {
                    Err(Error::OffsetNotAvailable {
                        high_watermark,
                        epoch_start,
                    })
                }
                _ => Ok(None),
            }
        };
        // What the answer is bounded by (the readiness above is the high watermark's).
        let hw = match read_committed {
            true => log.last_stable_offset(high_watermark),
            false => high_watermark,
        };
        match timestamp {
            -1 => unavailable().map(|_| Some((hw, -1))),
            -2 => Ok(Some((self.offsets_of(log).log_start_offset, -1))),
            -4 => Ok(Some((log.log_start_offset(), -1))),
            // The (first) record with the largest timestamp, among those committed.
            -3 => match log.max_timestamp() {
                ts if ts < 0 => Ok(None),
                ts => match log.offset_for_timestamp(ts)?.filter(|(o, _)| *o < hw) {
                    Some(found) => Ok(Some(found)),
                    None => unavailable(),
                },
            },
            ts if ts >= 0 => match log.offset_for_timestamp(ts)?.filter(|(o, _)| *o < hw) {
                Some(found) => Ok(Some(found)),
                None => unavailable(),
            },
            other => Err(Error::InvalidRequest(format!(
                "unsupported ListOffsets timestamp {other}"
            ))),
        }
    }
}
