//! What a replica knows of its partition's remote log: the in-memory index of finished
//! remote segments that reads below the local log start use (they never LIST the
//! bucket).

use std::sync::Arc;

use shale_metastore::RemoteSegment;

use super::{Partition, Replica};
use crate::error::Result;
use shale_cluster::rules::{RemoteRange, remote_divergence, takeover_start};

/// What this broker knows of the partition's remote segments: the in-memory index
/// the fetch path uses below the local log start (it never LISTs the bucket).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteState {
    /// False until the finished segments are read from the metastore; until then no
    /// local segment of a tiered partition may be deleted.
    pub loaded: bool,
    /// Unfinished copies (after a start or a failed copy) must be cleaned up before
    /// the next upload.
    pub needs_cleanup: bool,
    /// Finished remote segments, by base offset, contiguous.
    pub segments: Arc<Vec<RemoteSegment>>,
    /// Every offset up to this one has been in the object store (-1: none yet).
    pub end_offset: i64,
    /// Offsets below this are past total retention: gone from the object store, and
    /// their local copies are deleted too. -1: no such bound.
    pub retained_from: i64,
}

impl RemoteState {
    pub fn unloaded() -> Self {
        Self {
            loaded: false,
            needs_cleanup: true,
            segments: Arc::default(),
            end_offset: -1,
            retained_from: -1,
        }
    }

    /// First offset in the object store, -1 if none.
    pub fn start_offset(&self) -> i64 {
        self.segments.first().map_or(-1, |s| s.base_offset)
    }

    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes as u64).sum()
    }

    /// This remote log as far as it matches a replica's log (its `epochs` and
    /// `log_end`; see [`shale_cluster::rules::remote_divergence`]), and where it stops
    /// matching: segments from there on leave the index and the one holding that
    /// offset ends before it. An unloaded state is returned as it is.
    pub(crate) fn matching(mut self, epochs: &[(i32, i64)], log_end: i64) -> (Self, Option<i64>) {
        if !self.loaded {
            return (self, None);
        }
        let Some(from) = remote_divergence(&self.ranges(), self.end_offset, epochs, log_end) else {
            return (self, None);
        };
        if self.end_offset >= from {
            let segments = Arc::make_mut(&mut self.segments);
            segments.retain(|s| s.base_offset < from);
            if let Some(last) = segments.last_mut() {
                last.end_offset = last.end_offset.min(from - 1);
            }
            self.end_offset = from - 1;
            if self.retained_from > from {
                self.retained_from = from;
            }
        }
        (self, Some(from))
    }

    /// Where a replica with `epochs` and `log_end` restarts its log to take this remote
    /// log over as its own (see [`shale_cluster::rules::takeover_start`]); `None`: it keeps its
    /// log (or the remote log is not loaded).
    pub(crate) fn takeover_start(&self, epochs: &[(i32, i64)], log_end: i64) -> Option<i64> {
        if !self.loaded {
            return None;
        }
        takeover_start(&self.ranges(), self.end_offset, epochs, log_end)
    }

    fn ranges(&self) -> Vec<RemoteRange<'_>> {
        self.segments
            .iter()
            .map(|s| RemoteRange {
                base: s.base_offset,
                end: s.end_offset,
                epochs: &s.epochs,
            })
            .collect()
    }

    /// OffsetForLeaderEpoch from the remote log's lineage: the largest epoch up to
    /// `epoch` among its segments' batches, and where the next one starts (the remote
    /// log's end for the last). What a read replica answers: its own log never holds a
    /// batch.
    pub fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        let lineage: Vec<(i32, i64)> = self
            .segments
            .iter()
            .flat_map(|s| s.epochs.iter().copied())
            .collect();
        let (found, _) = lineage.iter().rev().find(|(e, _)| *e <= epoch)?;
        let next = (lineage.iter())
            .find(|(e, _)| e > found)
            .map(|(_, start)| *start);
        Some((*found, next.unwrap_or(self.end_offset + 1)))
    }

    /// The remote segment holding `offset`.
    pub fn find(&self, offset: i64) -> Option<&RemoteSegment> {
        let i = self.segments.partition_point(|s| s.end_offset < offset);
        self.segments.get(i).filter(|s| s.base_offset <= offset)
    }
}

impl Partition {
    pub fn remote_state(&self) -> RemoteState {
        self.remote
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Installs what is known of the remote log, as far as it matches this replica's
    /// log (see [`RemoteState::matching`]); returns where it stops matching. Reads,
    /// local retention and copies see only the matching part, so a remote log written
    /// under epochs this log does not share (after an unclean election) is never
    /// served by this replica, nor taken for a copy of its own records.
    pub fn set_remote_state(&self, state: RemoteState) -> Option<i64> {
        let r = self.replica();
        self.install_remote_state(&r, state)
    }

    /// `state` as far as it matches this replica's log, without installing it.
    pub fn matching_remote(&self, state: RemoteState) -> RemoteState {
        let r = self.replica();
        state.matching(&epochs_of(&r), r.log.log_end_offset()).0
    }

    /// [`Partition::set_remote_state`] under the replica lock (which orders it with
    /// truncations of the log).
    pub(super) fn install_remote_state(&self, r: &Replica, state: RemoteState) -> Option<i64> {
        *self.remote_full.lock().unwrap_or_else(|e| e.into_inner()) = state.clone();
        let (state, diverged) = state.matching(&epochs_of(r), r.log.log_end_offset());
        *self.remote.lock().unwrap_or_else(|e| e.into_inner()) = state;
        diverged
    }

    /// The remote log as last installed, before matching it to this log.
    pub(crate) fn whole_remote_state(&self) -> RemoteState {
        self.remote_full
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A replica taking the lead whose log the remote log holds more than, and matches
    /// to its end (an unclean election of a replica that lost what the bucket kept),
    /// restarts its log after the remote log: it loses nothing of its own that way,
    /// where cutting the remote log at its log end would lose the bucket's records.
    /// The refresh re-reads the remote log just before a state making this replica
    /// leader is applied, so the view decided on is the whole remote log.
    pub(super) fn adopt_remote_log(&self, r: &mut Replica) -> Result<()> {
        let whole = self.whole_remote_state();
        let log_end = r.log.log_end_offset();
        let Some(start) = whole.takeover_start(&epochs_of(r), log_end) else {
            return Ok(());
        };
        tracing::warn!(topic = %self.topic, partition = self.index, log_end_offset = log_end,
            remote_end_offset = whole.end_offset,
            "leading with less than the remote log holds, which matches all of this log: restarting the log after it");
        r.log.reset_to(start)?;
        self.high_watermark.send_replace(start);
        self.install_remote_state(r, whole);
        Ok(())
    }

    /// A read-replica partition (see `read_replicas`) takes the source's remote log
    /// whole: its log, which never takes a record, restarts after the remote log's end
    /// whenever that moves on, so every offset is read from the remote log, and the
    /// high watermark follows (waking consumers waiting at the end).
    pub(crate) fn follow_remote_log(&self, state: RemoteState) -> Result<()> {
        let mut r = self.replica();
        let next = state.end_offset + 1;
        // Back too: after the source cut its remote log (an unclean election there),
        // its new records come at the offsets it gave up.
        if next != r.log.log_end_offset() || r.log.log_start_offset() != next {
            r.log.reset_to(next)?;
            self.high_watermark.send_replace(next);
        }
        self.install_remote_state(&r, state);
        Ok(())
    }

    /// This log's leader epochs with the offset each starts at, oldest first.
    pub fn epoch_lineage(&self) -> Vec<(i32, i64)> {
        epochs_of(&self.replica())
    }

    /// The leader epochs of this log's batches in `[base, end]`, with the offset each
    /// starts at (the first from `base`): what a copy of that range records.
    pub fn epochs_between(&self, base: i64, end: i64) -> Vec<(i32, i64)> {
        let r = self.replica();
        let epochs = r.log.epochs();
        let first = epochs
            .partition_point(|e| e.start_offset <= base)
            .saturating_sub(1);
        epochs[first..]
            .iter()
            .take_while(|e| e.start_offset <= end)
            .map(|e| (e.epoch, e.start_offset.max(base)))
            .collect()
    }
}

fn epochs_of(r: &Replica) -> Vec<(i32, i64)> {
    r.log
        .epochs()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect()
}

#[cfg(test)]
pub(super) mod tests {
    use shale_metastore::RemoteSegmentState;

    use super::*;

    pub(crate) fn segment(base: i64, end: i64, epochs: &[(i32, i64)]) -> RemoteSegment {
        RemoteSegment {
            segment_id: uuid::Uuid::new_v4(),
            topic_id: uuid::Uuid::nil(),
            partition: 0,
            base_offset: base,
            end_offset: end,
            max_timestamp: 0,
            leader_epoch: 0,
            size_bytes: 0,
            state: RemoteSegmentState::CopyFinished,
            created_at_ms: 0,
            updated_at_ms: 0,
            epochs: epochs.to_vec(),
            object_end_offset: end,
            aborted: Vec::new(),
        }
    }

    #[test]
    fn epochs_end_where_the_next_starts_in_the_remote_lineage() {
        let state = RemoteState {
            loaded: true,
            needs_cleanup: false,
            segments: Arc::new(vec![
                segment(0, 99, &[(2, 0), (4, 60)]),
                segment(100, 199, &[(4, 100), (7, 150)]),
            ]),
            end_offset: 199,
            retained_from: 0,
        };
        assert_eq!(state.epoch_end_offset(2), Some((2, 60)));
        assert_eq!(state.epoch_end_offset(3), Some((2, 60)));
        assert_eq!(state.epoch_end_offset(4), Some((4, 150)));
        assert_eq!(state.epoch_end_offset(9), Some((7, 200)));
        assert_eq!(state.epoch_end_offset(1), None);
    }
}
