//! The partition log: an ordered run of segments in `{data_dir}/{topic}-{partition}/`.
//!
//! Invariants: segments are contiguous (each one's base offset is the previous one's
//! next offset); only the last (active) segment is written; offsets are assigned here,
//! densely, from the log end offset. Batches are stored byte for byte as validated,
//! with only base offset and partition leader epoch patched.
//!
//! # Crash consistency
//! A segment is fsynced (log and both indexes) before the next one is created, and the
//! directory is fsynced after creating it, so after any crash only the active segment
//! can hold a torn or unsynced tail. On open, the active segment is scanned and CRC
//! checked batch by batch and truncated at the first bad batch; sealed segments are
//! trusted and scanned only when an index file is missing or malformed. What reached
//! the disk is governed by `flush.messages` / `flush.ms` (see README, "Durability").

mod epochs;
pub mod files;
mod index;
pub mod producers;
mod segment;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use shale_proto::batch::{self, BatchHeader, BatchIter};

use epochs::EpochCache;
pub use epochs::EpochEntry;
pub use files::FileCache;
use producers::{ProducerError, ProducerStates, SequenceCheck};
use segment::{ChunkReader, LOG_SUFFIX, SCAN_CHUNK, SEEK_CHUNK, Segment};

/// The subset of topic configuration the log itself obeys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// Roll the active segment before it would exceed this many bytes.
    pub segment_bytes: u64,
    /// Roll the active segment once its first batch is this old.
    pub segment_ms: i64,
    /// Bytes of log between two offset-index entries.
    pub index_interval_bytes: u64,
    /// Delete sealed segments whose newest timestamp is older than this; -1: never.
    pub retention_ms: i64,
    /// Delete the oldest sealed segments while the log is larger than this; -1: never.
    pub retention_bytes: i64,
    /// Fsync after this many messages; `u64::MAX`: leave it to the OS.
    pub flush_messages: u64,
    /// Fsync when this long has passed since the last fsync; `i64::MAX`: leave it to the OS.
    pub flush_ms: i64,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            retention_ms: 7 * 24 * 3600 * 1000,
            retention_bytes: -1,
            flush_messages: u64::MAX,
            flush_ms: i64::MAX,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("offset {offset} is outside the log [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start: i64,
        log_end: i64,
    },
    #[error("replicated batch at offset {found} does not follow the log end {expected}")]
    OutOfSequence { expected: i64, found: i64 },
    #[error(transparent)]
    Producer(#[from] ProducerError),
    #[error("log I/O failed")]
    Io(#[from] io::Error),
}

/// Offsets given to one append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The batch repeated one an idempotent producer had written: nothing was
    /// written, the offsets are the earlier ones.
    pub duplicate: bool,
}

/// A sealed segment's identity and files (offsets inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedSegmentInfo {
    pub base_offset: i64,
    pub end_offset: i64,
    pub max_timestamp: i64,
    pub size_bytes: u64,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    pub time_index_path: PathBuf,
}

/// Where the object store stands, for retention of a tiered partition's local log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierBounds {
    /// Every offset up to this one is in the object store.
    pub uploaded_through: i64,
    /// Offsets below this are past total retention (already deleted remotely).
    pub retained_from: i64,
}

/// What retention removed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RetentionOutcome {
    pub segments: usize,
    pub bytes: u64,
}

pub struct PartitionLog {
    dir: PathBuf,
    config: LogConfig,
    /// The broker's open segment files.
    files: Arc<FileCache>,
    segments: BTreeMap<i64, Segment>,
    epochs: EpochCache,
    producers: ProducerStates,
    /// The producer state covers every batch below this offset.
    producers_through: i64,
    unflushed_messages: u64,
    last_flush_ms: i64,
}

impl PartitionLog {
    /// Opens (creating if needed) the log in `dir` and recovers it.
    pub fn open(
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
        files: Arc<FileCache>,
    ) -> Result<Self, LogError> {
        std::fs::create_dir_all(dir)?;
        let mut bases = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if let Some(base) = name
                .strip_suffix(&format!(".{LOG_SUFFIX}"))
                .and_then(|b| b.parse::<i64>().ok())
            {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        let mut segments = BTreeMap::new();
        for (i, base) in bases.iter().enumerate() {
            let next = bases.get(i + 1).copied();
            let seg = Segment::open(dir, *base, next, config.index_interval_bytes, &files)?;
            segments.insert(*base, seg);
        }
        if segments.is_empty() {
            segments.insert(0, Segment::create(dir, 0, &files)?);
            sync_dir(dir)?;
        }
        let end = segments.last_key_value().map_or(0, |(_, s)| s.next_offset);
        let epochs = match EpochCache::load(dir)? {
            Some(mut epochs) => {
                // Recovery may have cut a tail the checkpoint still names, and a
                // checkpoint written before an append reached the log (older versions
                // wrote it after) may lack the newest epochs: take those from the
                // batches.
                let mut changed = epochs.truncate_from_end(end);
                for e in epochs_after(&segments, epochs.latest_epoch())? {
                    changed |= epochs.assign(e.epoch, e.start_offset);
                }
                if changed {
                    epochs.persist()?;
                }
                epochs
            }
            None => {
                let epochs = EpochCache::new(dir, scan_epochs(&segments)?);
                // An empty list needs no file: a missing checkpoint reads as empty.
                if !epochs.entries().is_empty() {
                    epochs.persist()?;
                }
                epochs
            }
        };
        let mut log = Self {
            dir: dir.to_path_buf(),
            config,
            files,
            segments,
            epochs,
            producers: ProducerStates::default(),
            producers_through: 0,
            unflushed_messages: 0,
            last_flush_ms: now_ms,
        };
        log.rebuild_producers()?;
        Ok(log)
    }

    /// Loads the newest producer snapshot at or below the log end and reads the batch
    /// headers after it.
    fn rebuild_producers(&mut self) -> io::Result<()> {
        let end = self.log_end_offset();
        let (from, mut states) = ProducerStates::load_snapshot(&self.dir, end)?
            .unwrap_or((self.log_start_offset(), ProducerStates::default()));
        let first_segment = self
            .segments
            .range(..=from)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        for seg in self.segments.range(first_segment..).map(|(_, s)| s) {
            let file = seg.file()?;
            // In the segment holding `from`, start at its batch (found through the
            // index), so a clean restart (snapshot at the log end) reads nothing.
            let mut pos = if seg.base_offset <= from {
                ChunkReader::new(&file, seg.size(), SEEK_CHUNK)
                    .seek_offset(seg.lookup_position(from), from)?
                    .map_or(seg.size(), |b| b.position)
            } else {
                0
            };
            let mut reader = ChunkReader::new(&file, seg.size(), SCAN_CHUNK);
            while let Some(Ok(h)) = reader.next_batch(pos, false) {
                states.record(std::slice::from_ref(&h));
                pos += h.total_size() as u64;
            }
        }
        self.producers = states;
        self.producers_through = end;
        Ok(())
    }

    /// Idempotent producers this partition knows.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Saves the producer state (at segment seals and close), forgetting idle producers.
    fn snapshot_producers(&mut self, now_ms: i64) -> io::Result<()> {
        self.producers.expire(now_ms);
        self.producers
            .write_snapshot(&self.dir, self.producers_through)
    }

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
        self.producers_through = offset;
        tracing::info!(dir = %self.dir.display(), offset, "log reset");
        Ok(())
    }

    /// Appends batches copied from the leader, which carry their offsets and epochs.
    /// The first must start at the log end and each follow the previous one.
    pub fn append_replicated(
        &mut self,
        records: &[u8],
        headers: &[BatchHeader],
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        let mut next = self.log_end_offset();
        for h in headers {
            if h.base_offset != next {
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
        let info = self.forget_unwritten_epochs(info)?;
        self.record_producers(headers);
        Ok(info)
    }

    /// Writes the checkpoint; if that fails, forgets the epochs assigned past the log
    /// end in memory too, so memory and disk agree and the next append tries again.
    fn persist_epochs(&mut self) -> Result<(), LogError> {
        if let Err(e) = self.epochs.persist() {
            self.epochs.truncate_from_end(self.log_end_offset());
            return Err(e.into());
        }
        Ok(())
    }

    /// After a failed write, drops checkpoint entries for offsets that never made it.
    fn forget_unwritten_epochs(
        &mut self,
        written: Result<AppendInfo, LogError>,
    ) -> Result<AppendInfo, LogError> {
        if written.is_err() && self.epochs.truncate_from_end(self.log_end_offset()) {
            self.epochs.persist()?;
        }
        written
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> &LogConfig {
        &self.config
    }

    pub fn set_config(&mut self, config: LogConfig) {
        self.config = config;
    }

    pub fn log_start_offset(&self) -> i64 {
        self.segments.first_key_value().map_or(0, |(b, _)| *b)
    }

    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(Segment::size).sum()
    }

    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    fn active(&self) -> &Segment {
        self.segments
            .last_key_value()
            .map(|(_, s)| s)
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_entry()
            .expect("a log always has an active segment")
            .into_mut()
    }

    /// Appends batches that the caller validated (`headers[i]` describes the i-th batch
    /// of `records`), assigning offsets from the log end and stamping `leader_epoch`.
    pub fn append(
        &mut self,
        records: &mut [u8],
        headers: &mut [BatchHeader],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo, LogError> {
        if let SequenceCheck::Duplicate(b) = self.producers.check(headers)? {
            return Ok(AppendInfo {
                first_offset: b.base_offset,
                last_offset: b.last_offset,
                duplicate: true,
            });
        }
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
        let info = self.forget_unwritten_epochs(info)?;
        self.record_producers(headers);
        Ok(info)
    }

    fn record_producers(&mut self, headers: &[BatchHeader]) {
        self.producers.record(headers);
        if let Some(h) = headers.last() {
            self.producers_through = h.last_offset() + 1;
        }
    }

    /// Writes batches that carry their final offsets, rolling segments as needed.
    fn write_batches(
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
                self.roll(headers[i].base_offset, now_ms)?;
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
    fn roll(&mut self, next_offset: i64, now_ms: i64) -> Result<(), LogError> {
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

    /// Prepares a read of the batches from `offset`, stopping before `max_offset`
    /// (exclusive: the high watermark). The returned plan reads without the log.
    pub fn plan_read(&self, offset: i64, max_offset: i64) -> Result<ReadPlan, LogError> {
        let (log_start, log_end) = (self.log_start_offset(), self.log_end_offset());
        if offset < log_start || offset > log_end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start,
                log_end,
            });
        }
        let (_, seg) = self
            .segments
            .range(..=offset)
            .next_back()
            .expect("offset >= log start");
        Ok(ReadPlan {
            file: seg.file()?,
            start: seg.lookup_position(offset),
            end: seg.size(),
            offset,
            max_offset: max_offset.min(log_end),
        })
    }

    /// The first offset whose record timestamp is >= `ts`, with that timestamp, or
    /// `None` if every record is older. Within a compressed batch it answers the
    /// batch's base offset (records are not decompressed on the broker).
    pub fn offset_for_timestamp(&self, ts: i64) -> Result<Option<(i64, i64)>, LogError> {
        let Some(seg) = self.segments.values().find(|s| s.max_timestamp >= ts) else {
            return Ok(None);
        };
        let file = seg.file()?;
        let mut reader = ChunkReader::new(&file, seg.size(), SEEK_CHUNK);
        let Some(found) = reader.seek_timestamp(seg.lookup_time_position(ts), ts)? else {
            return Ok(None);
        };
        let h = found.header;
        let batch = Bytes::from(reader.read(found.position, h.total_size())?);
        Ok(shale_proto::record::first_at_or_after(&batch, ts))
    }

    /// Bytes of the segments whose base offset is above `offset`.
    pub fn bytes_after(&self, offset: i64) -> u64 {
        self.segments
            .range(offset.saturating_add(1)..)
            .map(|(_, s)| s.size())
            .sum()
    }

    /// Whether a sealed segment holds offsets above `after`.
    pub fn has_sealed_after(&self, after: i64) -> bool {
        self.segments.len() > 1 && self.active().base_offset - 1 > after
    }

    /// Sealed segments whose base offset is above `after`, oldest first, as the
    /// uploader needs them (their files never change again).
    pub fn sealed_segments_after(&self, after: i64) -> Vec<SealedSegmentInfo> {
        let mut out = Vec::new();
        // From the segment holding `after + 1`: after a change of leader it may start
        // below it (segments roll at different offsets on different replicas).
        let from = self
            .segments
            .range(..=after.saturating_add(1))
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        let mut iter = self.segments.range(from..).peekable();
        while let Some((base, seg)) = iter.next() {
            let Some((next_base, _)) = iter.peek() else {
                break;
            }; // the active segment
            if **next_base - 1 <= after {
                continue;
            }
            out.push(SealedSegmentInfo {
                base_offset: *base,
                end_offset: **next_base - 1,
                max_timestamp: seg.max_timestamp,
                size_bytes: seg.size(),
                log_path: segment::segment_path(&self.dir, *base, LOG_SUFFIX),
                index_path: segment::segment_path(&self.dir, *base, "index"),
                time_index_path: segment::segment_path(&self.dir, *base, "timeindex"),
            });
        }
        out
    }

    /// Deletes sealed segments past `retention.ms` / `retention.bytes` (oldest first,
    /// never the active segment; an expired active segment is rolled first so that
    /// time retention can empty an idle log). For a tiered partition, `tier` limits
    /// this to segments already in the object store, and also removes segments the
    /// remote tier has retired (below the partition's log start offset).
    pub fn apply_retention(
        &mut self,
        now_ms: i64,
        tier: Option<TierBounds>,
    ) -> Result<RetentionOutcome, LogError> {
        let expired =
            |s: &Segment, ms: i64| ms >= 0 && s.max_timestamp >= 0 && s.max_timestamp < now_ms - ms;
        if expired(self.active(), self.config.retention_ms) {
            self.force_roll(now_ms)?;
        }
        let mut out = RetentionOutcome::default();
        let mut total = self.size_bytes();
        while self.segments.len() > 1 {
            let (_, oldest) = self.segments.first_key_value().expect("len > 1");
            let by_time = expired(oldest, self.config.retention_ms);
            let by_size = self.config.retention_bytes >= 0
                && total.saturating_sub(oldest.size()) >= self.config.retention_bytes as u64;
            let last_offset = self.segments.keys().nth(1).copied().expect("len > 1") - 1;
            let uploaded = tier.is_none_or(|t| last_offset <= t.uploaded_through);
            let retired = tier.is_some_and(|t| last_offset < t.retained_from);
            if !((by_time || by_size) && uploaded || retired) {
                break;
            }
            let (_, seg) = self.segments.pop_first().expect("len > 1");
            out.segments += 1;
            out.bytes += seg.size();
            total -= seg.size();
            seg.delete()?;
        }
        if out.segments > 0 {
            sync_dir(&self.dir)?;
            tracing::info!(dir = %self.dir.display(), segments = out.segments, bytes = out.bytes,
                log_start_offset = self.log_start_offset(), "retention deleted segments");
        }
        Ok(out)
    }

    /// Fsyncs everything and saves the producer state before a clean shutdown.
    pub fn close(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.flush(now_ms)?;
        Ok(self.snapshot_producers(now_ms)?)
    }
}

/// A read prepared under the partition lock and carried out without it.
pub struct ReadPlan {
    file: Arc<File>,
    start: u64,
    /// Segment size when planned: bytes past it may be half written.
    end: u64,
    offset: i64,
    max_offset: i64,
}

impl ReadPlan {
    /// Whole batches from the one holding `offset`, up to `max_bytes`, never a batch
    /// reaching `max_offset`. With `whole_first`, the first batch comes even if it alone
    /// is larger than `max_bytes` (so a consumer never stalls on a large batch).
    pub fn read(self, max_bytes: usize, whole_first: bool) -> io::Result<Bytes> {
        if self.offset >= self.max_offset {
            return Ok(Bytes::new());
        }
        let mut reader = ChunkReader::new(&self.file, self.end, SEEK_CHUNK);
        let Some(first) = reader.seek_offset(self.start, self.offset)? else {
            return Ok(Bytes::new());
        };
        let too_big = !whole_first && first.header.total_size() > max_bytes;
        if first.header.last_offset() >= self.max_offset || too_big {
            return Ok(Bytes::new());
        }
        let available = (self.end - first.position) as usize;
        let len = available.min(max_bytes.max(first.header.total_size()));
        let buf = reader.read(first.position, len)?;
        let mut keep = 0;
        for item in BatchIter::new(&buf) {
            let Ok((h, range)) = item else { break };
            if h.last_offset() >= self.max_offset {
                break;
            }
            keep = range.end;
        }
        let mut buf = Bytes::from(buf);
        buf.truncate(keep);
        Ok(buf)
    }
}

/// Copies the batches of a sealed segment from offset `from` (which must start a
/// batch) into a new segment in `into`, with its own indexes: the part of a segment
/// the object store does not hold yet, when the remote log ends inside it.
pub fn export_segment_tail(
    seg: &SealedSegmentInfo,
    from: i64,
    into: &Path,
    index_interval: u64,
) -> Result<SealedSegmentInfo, LogError> {
    let file = File::open(&seg.log_path)?;
    let size = file.metadata()?.len();
    let mut reader = ChunkReader::new(&file, size, SCAN_CHUNK);
    let mut pos = 0;
    let start = loop {
        match reader.next_batch(pos, false) {
            Some(Ok(h)) if h.base_offset == from => break pos,
            Some(Ok(h)) if h.base_offset < from => pos += h.total_size() as u64,
            _ => {
                return Err(LogError::Io(io::Error::other(format!(
                    "no batch starts at offset {from} in {}",
                    seg.log_path.display()
                ))));
            }
        }
    };
    let path = segment::segment_path(into, from, LOG_SUFFIX);
    let mut out = File::create(&path)?;
    let mut src = &file;
    io::Seek::seek(&mut src, io::SeekFrom::Start(start))?;
    io::copy(&mut io::Read::take(src, size - start), &mut out)?;
    drop(out);
    let files = FileCache::new(1);
    let mut tail = Segment::open(into, from, Some(seg.end_offset + 1), index_interval, &files)?;
    tail.seal()?;
    Ok(SealedSegmentInfo {
        base_offset: from,
        end_offset: seg.end_offset,
        max_timestamp: tail.max_timestamp,
        size_bytes: tail.size(),
        log_path: path,
        index_path: segment::segment_path(into, from, "index"),
        time_index_path: segment::segment_path(into, from, "timeindex"),
    })
}

/// Epochs newer than `latest` in the batches, with their first offsets: from the
/// active segment, whose batches recovery has just read, and from older segments only
/// while each starts in such an epoch (the epoch may begin in one of them).
fn epochs_after(segments: &BTreeMap<i64, Segment>, latest: i32) -> io::Result<Vec<EpochEntry>> {
    let mut newer: Vec<&Segment> = Vec::new();
    for seg in segments.values().rev() {
        let first = match &seg.recovered_epochs {
            Some(seen) => seen.first().map(|e| e.epoch),
            None => first_batch_epoch(seg)?,
        };
        newer.push(seg);
        if first.is_some_and(|e| e <= latest) {
            break;
        }
    }
    let mut out = EpochCache::new(Path::new(""), Vec::new());
    for seg in newer.into_iter().rev() {
        match &seg.recovered_epochs {
            Some(seen) => seen.iter().for_each(|e| {
                out.assign(e.epoch, e.start_offset);
            }),
            None => {
                let file = seg.file()?;
                let mut reader = ChunkReader::new(&file, seg.size(), SCAN_CHUNK);
                let mut pos = 0;
                while let Some(Ok(h)) = reader.next_batch(pos, false) {
                    out.assign(h.partition_leader_epoch, h.base_offset);
                    pos += h.total_size() as u64;
                }
            }
        }
    }
    Ok(out
        .entries()
        .iter()
        .copied()
        .filter(|e| e.epoch > latest)
        .collect())
}

/// The leader epoch of a segment's first batch (`None`: empty).
fn first_batch_epoch(seg: &Segment) -> io::Result<Option<i32>> {
    let file = seg.file()?;
    let mut reader = ChunkReader::new(&file, seg.size(), SEEK_CHUNK);
    Ok(match reader.next_batch(0, false) {
        Some(Ok(h)) => Some(h.partition_leader_epoch),
        _ => None,
    })
}

/// Rebuilds the epoch list from the batch headers (a log without a checkpoint).
fn scan_epochs(segments: &BTreeMap<i64, Segment>) -> io::Result<Vec<EpochEntry>> {
    let mut epochs = EpochCache::new(Path::new(""), Vec::new());
    for seg in segments.values() {
        let file = seg.file()?;
        let mut reader = ChunkReader::new(&file, seg.size(), SCAN_CHUNK);
        let mut pos = 0;
        while let Some(Ok(h)) = reader.next_batch(pos, false) {
            epochs.assign(h.partition_leader_epoch, h.base_offset);
            pos += h.total_size() as u64;
        }
    }
    Ok(epochs.entries().to_vec())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
