//! Retention (by time and size, bounded by what a tiered partition has copied), the
//! sealed segments the uploader takes, and the export of a segment's tail.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::chunk_reader::{ChunkReader, SCAN_CHUNK};
use crate::files::FileCache;
use crate::layout::LOG_SUFFIX;
use crate::segment::{self, Segment};
use crate::{LogError, PartitionLog, sync_dir};

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
    /// The log's truncation count when this was taken (a key filter built from the
    /// file is installed only if no truncation happened since).
    pub generation: u64,
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

impl PartitionLog {
    /// Bytes of the segments whose base offset is above `offset`.
    pub fn bytes_after(&self, offset: i64) -> u64 {
        self.segments
            .range(offset.saturating_add(1)..)
            .map(|(_, s)| s.size())
            .sum()
    }

    /// When the oldest record above `after` came (the first append to its segment, or
    /// that batch's timestamp after a restart); `None` if no record is above it.
    pub fn first_append_after(&self, after: i64) -> Option<i64> {
        if self.log_end_offset() <= after.saturating_add(1) {
            return None;
        }
        let (_, seg) = self
            .segments
            .range(..=after.saturating_add(1))
            .next_back()
            .or_else(|| self.segments.first_key_value())?;
        seg.rolling_timestamp
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
                index_path: segment::segment_path(&self.dir, *base, crate::layout::INDEX_SUFFIX),
                time_index_path: segment::segment_path(
                    &self.dir,
                    *base,
                    crate::layout::TIME_INDEX_SUFFIX,
                ),
                generation: self.rewrites,
            });
        }
        out
    }

    /// Deletes sealed segments past `retention.ms` / `retention.bytes` (oldest first,
    /// never the active segment; an expired active segment is rolled first so that
    /// time retention can empty an idle log). For a tiered partition, `tier` limits
    /// this to segments already in the object store, and also removes segments the
    /// remote tier has retired (below the partition's log start offset). Segments
    /// wholly below the offset records were deleted below go in any case.
    pub fn apply_retention(
        &mut self,
        now_ms: i64,
        tier: Option<TierBounds>,
    ) -> Result<RetentionOutcome, LogError> {
        let expired =
            |s: &Segment, ms: i64| ms >= 0 && s.retention_time().is_some_and(|t| t < now_ms - ms);
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
            let deleted = last_offset < self.deleted_below;
            if !((by_time || by_size) && uploaded || retired || deleted) {
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
            self.forget_aborted_below_start()?;
            tracing::info!(dir = %self.dir.display(), segments = out.segments, bytes = out.bytes,
                log_start_offset = self.log_start_offset(), "retention deleted segments");
        }
        Ok(out)
    }

    /// Deletes the records below `offset` (Kafka's DeleteRecords, once the caller has
    /// made the new log start durable): the log starts there from now on, and sealed
    /// segments holding only records below it are removed at once, uploaded or not. A
    /// log that ends below `offset` (a follower behind) starts at its end until it
    /// grows past `offset`. Never moves the start back. Returns what was removed.
    pub fn delete_records_below(&mut self, offset: i64) -> Result<RetentionOutcome, LogError> {
        let mut out = RetentionOutcome::default();
        if offset <= self.deleted_below {
            return Ok(out);
        }
        self.deleted_below = offset;
        while self.segments.len() > 1 {
            let next_base = self.segments.keys().nth(1).copied().expect("len > 1");
            if next_base > self.deleted_below {
                break;
            }
            let (_, seg) = self.segments.pop_first().expect("len > 1");
            out.segments += 1;
            out.bytes += seg.size();
            seg.delete()?;
        }
        if out.segments > 0 {
            sync_dir(&self.dir)?;
            self.forget_aborted_below_start()?;
        }
        tracing::info!(dir = %self.dir.display(), deleted_below = self.deleted_below,
            segments = out.segments, log_start_offset = self.log_start_offset(),
            "records deleted");
        Ok(out)
    }

    /// The offset records were deleted below (0: none deleted).
    pub fn deleted_below(&self) -> i64 {
        self.deleted_below
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
            // At or after: a cleaning may have removed the offsets from `from` on.
            Some(Ok(h)) if h.base_offset >= from => break pos,
            Some(Ok(h)) if h.last_offset() < from => pos += h.total_size() as u64,
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
    seal_segment_file(into, from, seg.end_offset, index_interval)
}

/// Where [`seal_segment_file`] expects the `.log` file of a segment starting at `base`.
pub fn segment_log_path(dir: &Path, base_offset: i64) -> PathBuf {
    segment::segment_path(dir, base_offset, LOG_SUFFIX)
}

/// Builds the indexes of a segment whose batches were written to
/// [`segment_log_path`] in `dir` (outside any log: a tail export, a rewrite of remote
/// segments) and seals it. `end_offset` (inclusive) may lie past its last record when
/// compaction left a gap there.
pub fn seal_segment_file(
    dir: &Path,
    base_offset: i64,
    end_offset: i64,
    index_interval: u64,
) -> Result<SealedSegmentInfo, LogError> {
    let files = FileCache::new(1);
    let mut seg = Segment::open(
        dir,
        base_offset,
        Some(end_offset + 1),
        index_interval,
        &files,
    )?;
    seg.seal()?;
    Ok(SealedSegmentInfo {
        base_offset,
        end_offset,
        max_timestamp: seg.max_timestamp,
        size_bytes: seg.size(),
        log_path: segment_log_path(dir, base_offset),
        index_path: segment::segment_path(dir, base_offset, crate::layout::INDEX_SUFFIX),
        time_index_path: segment::segment_path(dir, base_offset, crate::layout::TIME_INDEX_SUFFIX),
        generation: 0,
    })
}
