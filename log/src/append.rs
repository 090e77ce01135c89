//! Appending: batches from a producer (offsets and the leader epoch stamped here) and
//! batches copied from the leader (kept as they are), rolling segments as they fill,
//! with fsyncs per `flush.messages` / `flush.ms`.
//!
//! # Crash consistency
//! The leader-epoch checkpoint is written before the batches of a new epoch: a crash
//! in between leaves an epoch entry beyond the log end, which opening trims, never a
//! batch whose epoch the checkpoint lacks.

use shale_records::batch::{self, BatchHeader};
use shale_records::control;

use crate::producers::{MarkerCheck, SequenceCheck};
use crate::segment::Segment;
use crate::{AbortedTxn, AppendInfo, CompletedTxn, LogError, PartitionLog, sync_dir};

impl PartitionLog {
    /// Appends batches that the caller validated (`headers[i]` describes the i-th batch
    /// of `records`), assigning offsets from the log end and stamping `leader_epoch`.
    pub fn append(
        &mut self,
        records: &mut [u8],
        headers: &mut [BatchHeader],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        // A retry: the leading batches that were written are answered with their
        // offsets, and only the rest is written.
        let mut written = None;
        let (records, headers) = match self.producers.check(headers)? {
            SequenceCheck::Append => (records, headers),
            SequenceCheck::Written {
                count,
                base_offset,
                last_offset,
            } => {
                if count == headers.len() {
                    return Ok(AppendInfo {
                        first_offset: base_offset,
                        last_offset,
                        duplicate: true,
                    });
                }
                written = Some((base_offset, last_offset));
                let skip = headers[..count].iter().map(BatchHeader::total_size).sum();
                (&mut records[skip..], &mut headers[count..])
            }
        };
        let first_offset = self.log_end_offset();
        let mut next = first_offset;
        let mut pos = 0usize;
        for h in headers.iter_mut() {
            let bytes = &mut records[pos..pos + h.total_size()];
            batch::set_base_offset(bytes, next);
            batch::set_partition_leader_epoch(bytes, leader_epoch);
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            next = h.last_offset() + 1;
            pos += h.total_size();
        }
        if self.epochs.assign(leader_epoch, first_offset) {
            self.persist_epochs()?;
        }
        let info = self.write_batches(records, headers, now_ms);
        self.record_landed_producers(records, headers);
        let info = self.forget_unwritten_epochs(info)?;
        Ok(match written {
            None => info,
            // The answer's base offset is the first written batch's, if the rest
            // follows it without a gap (another producer may have written between);
            // else it is unknown (-1), as for Kafka's duplicates.
            Some((base, end)) => AppendInfo {
                first_offset: if end + 1 == info.first_offset {
                    base
                } else {
                    -1
                },
                ..info
            },
        })
    }

    /// Appends batches copied from the leader, which carry their offsets and epochs.
    /// Each must start at or after the end of what precedes it: after, where the
    /// leader's cleaner removed the offsets between (a compacted topic).
    pub fn append_replicated(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut next = self.log_end_offset();
        for h in headers {
            if h.base_offset < next {
                return Err(LogError::OutOfSequence {
                    expected: next,
                    found: h.base_offset,
                });
            }
            next = h.last_offset() + 1;
        }
        // Epochs reach the checkpoint before their batches reach the log, so a crash in
        // between never leaves the checkpoint behind the log (see `record_epochs`).
        let mut changed = false;
        for h in headers {
            changed |= self.epochs.assign(h.partition_leader_epoch, h.base_offset);
        }
        if changed {
            self.persist_epochs()?;
        }
        let info = self.write_batches(records, headers, now_ms);
        self.record_landed_producers(records, headers);
        self.forget_unwritten_epochs(info)
    }

    /// Records the producers of the batches that reached the log. After a failed
    /// write that is a prefix: batches written before a roll that failed (a full
    /// disk) stay in the log, so the producer state must know them, or a retry of one
    /// would be taken as new and stored twice.
    fn record_landed_producers(&mut self, records: &[u8], headers: &[BatchHeader]) {
        let end = self.log_end_offset();
        let mut pos = 0;
        for h in headers.iter().take_while(|h| h.last_offset() < end) {
            // Those recorded already (before a roll in the same write).
            if h.last_offset() >= self.producers_through {
                self.record_batch(h, &records[pos..pos + h.total_size()]);
            }
            pos += h.total_size();
        }
    }

    /// Writes the checkpoint; if that fails, forgets the epochs assigned past the log
    /// end in memory too, so memory and disk agree and the next append tries again.
    pub(crate) fn persist_epochs(&mut self) -> Result<(), LogError> {
        if let Err(e) = self.epochs.persist() {
            self.epochs.truncate_from_end(self.log_end_offset());
            return Err(e.into());
        }
        Ok(())
    }

    /// After a failed write, drops checkpoint entries for offsets that never made it.
    pub(crate) fn forget_unwritten_epochs(
        &mut self,
        written: Result<AppendInfo, LogError>,
    ) -> Result<AppendInfo, LogError> {
        if written.is_err() && self.epochs.truncate_from_end(self.log_end_offset()) {
            self.epochs.persist()?;
        }
        written
    }

    /// Takes one written batch (`bytes`) into the producer state: a marker ends its
    /// producer's transaction, and an abort enters the aborted index.
    pub(crate) fn record_batch(&mut self, h: &BatchHeader, bytes: &[u8]) {
        if h.is_control() {
            match control::parse_marker(bytes) {
                Ok((marker, coordinator_epoch)) => {
                    if let Some(done) = self.producers.end_txn(h, marker, coordinator_epoch) {
                        self.txn_ended(done);
                    }
                }
                Err(e) => tracing::warn!(dir = %self.dir.display(), offset = h.base_offset,
                    error = %e, "a control batch that is no transaction marker is ignored"),
            }
        } else {
            self.producers.record(std::slice::from_ref(h));
        }
        self.producers_through = h.last_offset() + 1;
    }

    fn txn_ended(&mut self, done: CompletedTxn) {
        if done.aborted {
            let stable = (self.producers.first_open_txn_offset()).unwrap_or(done.last_offset + 1);
            self.aborted.push(AbortedTxn {
                producer_id: done.producer_id,
                first_offset: done.first_offset,
                last_offset: done.last_offset,
                last_stable_offset: stable,
            });
        }
        self.unstable_ended
            .insert((done.first_offset, done.last_offset));
    }

    /// Leader: writes a transaction marker for `producer_id` (the coordinator's
    /// decision), after checking that neither the producer's epoch nor the
    /// coordinator's is older than the last this partition saw. Returns the marker's
    /// offset and whether it was written now; a marker that repeats the last one
    /// (see [`crate::producers::ProducerStates::check_marker`]) is not written again,
    /// and its first offset is returned, for the caller to wait on its replication.
    pub fn append_marker(
        &mut self,
        producer_id: i64,
        producer_epoch: i16,
        marker: control::Marker,
        coordinator_epoch: i32,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(i64, bool), LogError> {
        let check = self
            .producers
            .check_marker(producer_id, producer_epoch, coordinator_epoch)?;
        if let MarkerCheck::Repeat { offset } = check {
            // Unknown only from a snapshot of an older version: the log end, past
            // which the first one cannot be.
            let offset = if offset >= 0 {
                offset
            } else {
                self.log_end_offset() - 1
            };
            return Ok((offset, false));
        }
        let mut bytes = control::build_marker(
            producer_id,
            producer_epoch,
            marker,
            coordinator_epoch,
            now_ms,
        )
        .to_vec();
        let mut headers = [BatchHeader::parse(&bytes).expect("a built marker parses")];
        let info = self.append(&mut bytes, &mut headers, leader_epoch, now_ms)?;
        Ok((info.last_offset, true))
    }

    /// Writes batches that carry their final offsets, rolling segments as needed.
    pub(crate) fn write_batches(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let first_offset = self.log_end_offset();
        let next = headers.last().map_or(first_offset, |h| h.last_offset() + 1);
        // Write runs of batches that fit the active segment, rolling between runs.
        let (mut start, mut run_start, mut run_bytes) = (0usize, 0usize, 0u64);
        for i in 0..headers.len() {
            let size = headers[i].total_size() as u64;
            let active = self.active();
            let pending_size = active.size() + run_bytes;
            let roll = (pending_size > 0 && pending_size + size > self.config.segment_bytes)
                || (run_bytes == 0
                    && active
                        .rolling_timestamp
                        .is_some_and(|t| now_ms - t > self.config.segment_ms))
                || headers[i].last_offset() - active.base_offset > i64::from(u32::MAX);
            if roll && i > run_start {
                let end = start + run_bytes as usize;
                let interval = self.config.index_interval_bytes;
                self.active_mut().append(
                    &records[start..end],
                    &headers[run_start..i],
                    now_ms,
                    interval,
                )?;
                (start, run_start, run_bytes) = (end, i, 0);
            }
            if roll && !self.active().is_empty() {
                // At the log end, not at the batch: where a cleaning on the leader left
                // a gap before it, the gap opens the new segment, and every sealed
                // segment ends at its last batch (a read in a gap finds the next one).
                let next = self.log_end_offset();
                // The snapshot the roll takes is the state at the new segment's base:
                // the batches of this write before it count.
                self.record_landed_producers(records, headers);
                self.roll(next, now_ms)?;
            }
            run_bytes += size;
        }
        if run_start < headers.len() {
            let interval = self.config.index_interval_bytes;
            self.active_mut()
                .append(&records[start..], &headers[run_start..], now_ms, interval)?;
        }
        self.unflushed_messages += headers
            .iter()
            .map(|h| h.record_count.max(0) as u64)
            .sum::<u64>();
        if self.unflushed_messages >= self.config.flush_messages {
            self.flush(now_ms)?;
        }
        Ok(AppendInfo {
            first_offset,
            last_offset: next - 1,
            duplicate: false,
        })
    }

    /// Seals the active segment and starts a new one at `next_offset`.
    pub(crate) fn roll(&mut self, next_offset: i64, now_ms: i64) -> Result<(), LogError> {
        self.active_mut().seal()?;
        self.snapshot_producers(now_ms)?;
        let seg = Segment::create(&self.dir, next_offset, &self.files)?;
        sync_dir(&self.dir)?;
        self.segments.insert(next_offset, seg);
        tracing::debug!(dir = %self.dir.display(), base_offset = next_offset, "rolled segment");
        Ok(())
    }

    /// Seals the active segment now if it holds anything (e.g. before it is tiered).
    pub fn force_roll(&mut self, now_ms: i64) -> Result<(), LogError> {
        if !self.active().is_empty() {
            let next = self.log_end_offset();
            self.roll(next, now_ms)?;
        }
        Ok(())
    }

    /// Seals the active segment if its first record came more than `max_age_ms` ago
    /// (`segment.ms` without waiting for an append: an idle partition's last records
    /// get a sealed segment, which can be uploaded). Returns whether it rolled.
    pub fn roll_if_older(&mut self, max_age_ms: i64, now_ms: i64) -> Result<bool, LogError> {
        let active = self.active();
        let due = !active.is_empty()
            && active
                .rolling_timestamp
                .is_some_and(|t| now_ms.saturating_sub(t) > max_age_ms);
        if due {
            self.force_roll(now_ms)?;
        }
        Ok(due)
    }

    /// Fsyncs the active segment and its indexes.
    pub fn flush(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.active_mut().sync()?;
        self.unflushed_messages = 0;
        self.last_flush_ms = now_ms;
        Ok(())
    }

    /// Fsyncs if `flush.ms` has passed since the last fsync and anything is unflushed.
    pub fn flush_if_due(&mut self, now_ms: i64) -> Result<bool, LogError> {
        let due = self.unflushed_messages > 0
            && now_ms.saturating_sub(self.last_flush_ms) >= self.config.flush_ms;
        if due {
            self.flush(now_ms)?;
        }
        Ok(due)
    }
}
