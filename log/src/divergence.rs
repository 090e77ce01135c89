//! Leader epochs and truncation: where each epoch starts in this log (what followers'
//! divergence checks ask), a new leader's epoch, cutting a divergent tail, and
//! restarting the log empty at an offset.

use crate::chunk_reader::{ChunkReader, SEEK_CHUNK};
use crate::producers::ProducerStates;
use crate::segment::Segment;
use crate::{EpochEntry, LogError, PartitionLog, sync_dir};

impl PartitionLog {
    /// Epoch of the last batch (-1: none).
    pub fn latest_epoch(&self) -> i32 {
        self.epochs.latest_epoch()
    }

    /// Leader epochs and their start offsets, oldest first.
    pub fn epochs(&self) -> &[EpochEntry] {
        self.epochs.entries()
    }

    /// The largest known epoch <= `epoch` and where it ended in this log.
    pub fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// Where `epoch` starts in this log, if it has that epoch.
    pub fn epoch_start_offset(&self, epoch: i32) -> Option<i64> {
        self.epochs
            .entries()
            .iter()
            .find(|e| e.epoch == epoch)
            .map(|e| e.start_offset)
    }

    /// Notes that `epoch` starts at the log end (a leader taking over).
    /// A log that never held a batch records nothing: its first append records the
    /// epoch (before writing), and until then no fetch can diverge from it.
    pub fn start_epoch(&mut self, epoch: i32) -> Result<(), LogError> {
        let end = self.log_end_offset();
        if self.epochs.entries().is_empty() && end == self.log_start_offset() {
            return Ok(());
        }
        if self.epochs.assign(epoch, end) {
            self.persist_epochs()?;
        }
        Ok(())
    }

    /// Removes every batch from the one holding `offset` on (a follower dropping a
    /// divergent tail). Below the log start it empties the log, which restarts at
    /// `offset`.
    /// Epochs starting at or after `offset` leave the checkpoint even when no batch
    /// does (an epoch this replica led without writing): otherwise a follower would
    /// keep naming an epoch its leader does not know, and diverge forever.
    pub fn truncate_to(&mut self, offset: i64) -> Result<(), LogError> {
        if offset >= self.log_end_offset() {
            if self.epochs.truncate_from_end(offset) {
                self.persist_epochs()?;
            }
            return Ok(());
        }
        if offset <= self.log_start_offset() {
            return self.reset_to(offset);
        }
        self.rewrites += 1;
        self.cuts.add();
        self.forget_cleaned_from(offset)?;
        let doomed: Vec<i64> = self.segments.range(offset..).map(|(b, _)| *b).collect();
        for base in doomed {
            if let Some(seg) = self.segments.remove(&base) {
                seg.delete()?;
            }
        }
        let (&base, seg) = self
            .segments
            .last_key_value()
            .expect("a segment below the cut remains");
        let file = seg.file()?;
        let mut reader = ChunkReader::new(&file, seg.size(), SEEK_CHUNK);
        let cut = reader
            .seek_offset(seg.lookup_position(offset), offset)?
            .map_or(seg.size(), |b| b.position);
        crate::keys::remove_key_filter(&self.dir, base)?;
        file.set_len(cut)?;
        file.sync_all()?;
        let reopened = Segment::open(
            &self.dir,
            base,
            None,
            self.config.index_interval_bytes,
            &self.files,
        )?;
        self.segments.insert(base, reopened);
        sync_dir(&self.dir)?;
        let end = self.log_end_offset();
        if self.epochs.truncate_from_end(end) {
            self.epochs.persist()?;
        }
        ProducerStates::delete_snapshots_above(&self.dir, end)?;
        self.rebuild_producers()?;
        tracing::info!(dir = %self.dir.display(), log_end_offset = end, "truncated log");
        Ok(())
    }

    /// Deletes every segment and restarts the log, empty, at `offset` (a follower
    /// whose leader's log no longer holds this log's end).
    /// The empty segment exists before the old ones go (a segment already based at
    /// `offset` is emptied in place), so a failure midway never leaves the log without
    /// one.
    pub fn reset_to(&mut self, offset: i64) -> Result<(), LogError> {
        self.rewrites += 1;
        self.cuts.add();
        self.forget_cleaned_from(offset)?;
        match self.segments.get_mut(&offset) {
            Some(seg) => seg.clear()?,
            None => {
                let seg = Segment::create(&self.dir, offset, &self.files)?;
                self.segments.insert(offset, seg);
            }
        }
        let doomed: Vec<i64> = self
            .segments
            .keys()
            .copied()
            .filter(|b| *b != offset)
            .collect();
        let mut failed = None;
        for base in doomed {
            let seg = self.segments.remove(&base).expect("listed above");
            if let Err(e) = seg.delete() {
                tracing::error!(dir = %self.dir.display(), base_offset = base, error = %e,
                    "cannot delete a segment of a reset log");
                failed.get_or_insert(e);
            }
        }
        sync_dir(&self.dir)?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        self.epochs.truncate_from_end(i64::MIN);
        self.epochs.persist()?;
        ProducerStates::delete_snapshots_above(&self.dir, i64::MIN)?;
        self.producers = ProducerStates::default();
        self.aborted.truncate_from(i64::MIN)?;
        self.unstable_ended.clear();
        self.producers_through = offset;
        tracing::info!(dir = %self.dir.display(), offset, "log reset");
        Ok(())
    }
}
