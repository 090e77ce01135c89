//! Reads: planned under the partition's lock (which file, from where, up to which
//! offset), carried out without it with `pread`; and lookups by timestamp.

use std::fs::File;
use std::sync::Arc;

use bytes::Bytes;
use shale_records::batch::BatchIter;

use crate::chunk_reader::{ChunkReader, SEEK_CHUNK};
use crate::records::{Cuts, FileSlice, Records};
use crate::{LogError, PartitionLog};

impl PartitionLog {
    /// Prepares a read of the batches from `offset`, stopping before `max_offset`
    /// (exclusive: the high watermark). The returned plan reads without the log.
    pub fn plan_read(&self, offset: i64, max_offset: i64) -> Result<ReadPlan, LogError> {
        self.plan(offset, max_offset, None)
    }

    /// As [`PartitionLog::plan_read`], for a read of up to `max_bytes` that may be
    /// answered with a slice of the segment file ([`ReadPlan::locate`]): it also notes
    /// the index entries nearest where such a read ends, so that finding the end takes
    /// a few header reads rather than one per batch.
    pub fn plan_slice(
        &self,
        offset: i64,
        max_offset: i64,
        max_bytes: usize,
    ) -> Result<ReadPlan, LogError> {
        self.plan(offset, max_offset, Some(max_bytes))
    }

    fn plan(
        &self,
        offset: i64,
        max_offset: i64,
        max_bytes: Option<usize>,
    ) -> Result<ReadPlan, LogError> {
        let (log_start, log_end) = (self.log_start_offset(), self.log_end_offset());
        if offset < log_start || offset > log_end {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start,
                log_end,
            });
        }
        let (&base, seg) = self
            .segments
            .range(..=offset)
            .next_back()
            .expect("offset >= log start");
        // Older than the active segment and the newest sealed one: a catch-up read.
        let cold = self.segments.range(base..).nth(2).is_some();
        let (start, start_offset) = seg.lookup_entry(offset);
        let max_offset = max_offset.min(log_end);
        let anchors = max_bytes.map(|max_bytes| Anchors {
            max_bytes,
            by_size: seg.floor_position(start.saturating_add(max_bytes as u64)),
            by_offset: (max_offset < seg.next_offset).then(|| seg.lookup_entry(max_offset)),
        });
        Ok(ReadPlan {
            file: seg.file()?,
            path: crate::layout::segment_path(&self.dir, base, crate::layout::LOG_SUFFIX),
            start,
            start_offset,
            end: seg.size(),
            offset,
            max_offset,
            cold,
            anchors,
            cuts: self.cuts.clone(),
            cuts_at: self.cuts.count(),
        })
    }

    /// The first offset whose record timestamp is >= `ts`, with that timestamp, or
    /// `None` if every record is older. Within a compressed batch it answers the
    /// batch's base offset (records are not decompressed on the broker).
    /// The largest record timestamp in the log (-1: no record).
    pub fn max_timestamp(&self) -> i64 {
        self.segments
            .values()
            .map(|s| s.max_timestamp)
            .max()
            .unwrap_or(-1)
    }

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
        Ok(shale_records::record::first_at_or_after(&batch, ts))
    }
}

/// A read prepared under the partition lock and carried out without it.
pub struct ReadPlan {
    file: Arc<File>,
    /// The segment file (for errors).
    path: std::path::PathBuf,
    /// Where the offset index says to start looking.
    start: u64,
    /// The base offset of the batch the index entry names at `start`.
    start_offset: i64,
    /// Segment size when planned: bytes past it may be half written.
    end: u64,
    offset: i64,
    max_offset: i64,
    /// A segment older than the two newest: its pages are dropped from the page cache
    /// after the read, so a consumer or follower catching up from old segments does
    /// not push out the hot tail that produce and tailing consumers use.
    pub(crate) cold: bool,
    /// Set by [`PartitionLog::plan_slice`].
    anchors: Option<Anchors>,
    /// The log's cuts, and their count when planned (see [`FileSlice::is_current`]).
    cuts: Cuts,
    cuts_at: u64,
}

/// Batch starts (index entries: position and base offset) before which every batch
/// of a read planned for a slice is taken: one at most `max_bytes` past the entry the
/// read starts from, and one at or before `max_offset` (none when `max_offset` lies
/// past the segment).
#[derive(Debug, Clone, Copy)]
struct Anchors {
    max_bytes: usize,
    by_size: (u64, i64),
    by_offset: Option<(u64, i64)>,
}

/// Read size of the header walks that find where a slice ends.
const LOCATE_CHUNK: usize = 4 * 1024;
/// Most headers a walk reads before it settles for a shorter slice.
const LOCATE_MAX_BATCHES: usize = 4096;

impl ReadPlan {
    /// The batches [`ReadPlan::read`] would return (a prefix of them past 4,096 batches
    /// between index entries, which the default index interval never has), as a slice
    /// of the segment file
    /// (records that a plaintext connection sends without copying them); `max_bytes`
    /// is the plan's ([`PartitionLog::plan_slice`]). Only batch headers are read:
    /// batches are not CRC-checked here (they were when appended, and a Kafka client
    /// checks them); [`FileSlice::read`] checks them. `None` where the copying read
    /// must decide: a plan not made for a slice, a segment old enough to be read
    /// uncached (the copying read drops its pages afterwards), an index entry that does
    /// not name the batch it points at, or a header that does not parse. The kernel is
    /// asked to read the slice ahead, so that sending it rarely waits on the disk.
    pub fn locate(&self, whole_first: bool) -> Result<Option<Records>, LogError> {
        let Some(a) = self.anchors.filter(|_| !self.cold) else {
            return Ok(None);
        };
        if self.offset >= self.max_offset {
            return Ok(Some(Records::default()));
        }
        let mut reader = ChunkReader::new(&self.file, self.end, LOCATE_CHUNK);
        // The index entry must name the batch it points at (else it is damaged).
        if self.start > 0 {
            match reader.next_batch(self.start, false) {
                Some(Ok(h)) if h.base_offset == self.start_offset => {}
                _ => return Ok(None),
            }
        }
        let first = match reader.seek_offset(self.start, self.offset) {
            Ok(Some(b)) if b.header.base_offset <= self.offset => b,
            Ok(None) if self.start == 0 => return Ok(Some(Records::default())),
            _ => return Ok(None),
        };
        let first_size = first.header.total_size();
        let too_big = !whole_first && first_size > a.max_bytes;
        if first.header.last_offset() >= self.max_offset || too_big {
            return Ok(Some(Records::default()));
        }
        let limit_end = first.position + a.max_bytes.max(first_size) as u64;
        // Every batch before the nearer anchor is taken: the walk starts there, and
        // the batch there must be the one its index entry names.
        let (anchor, anchor_base) = [Some(a.by_size), a.by_offset]
            .into_iter()
            .flatten()
            .min_by_key(|(position, _)| *position)
            .expect("by_size is always set");
        let mut end = first.position + first_size as u64;
        let mut expect = None;
        if anchor > end {
            (end, expect) = (anchor, Some(anchor_base));
        }
        for _ in 0..LOCATE_MAX_BATCHES {
            let h = match reader.next_batch(end, false) {
                None => break,
                Some(Ok(h)) => h,
                Some(Err(_)) => return Ok(None),
            };
            if expect.take().is_some_and(|base| base != h.base_offset) {
                return Ok(None);
            }
            let next = end + h.total_size() as u64;
            if h.last_offset() >= self.max_offset || next > limit_end {
                break;
            }
            end = next;
        }
        let len = end - first.position;
        // Advice only: starts reading what is not cached, without waiting.
        let _ = rustix::fs::fadvise(
            &*self.file,
            first.position,
            std::num::NonZeroU64::new(len),
            rustix::fs::Advice::WillNeed,
        );
        Ok(Some(Records::Slice(FileSlice {
            file: self.file.clone(),
            position: first.position,
            len: len as usize,
            cuts: self.cuts.clone(),
            planned: self.cuts_at,
        })))
    }

    /// Whole batches from the one holding `offset`, up to `max_bytes`, never a batch
    /// reaching `max_offset`. With `whole_first`, the first batch comes even if it alone
    /// is larger than `max_bytes` (so a consumer never stalls on a large batch). Every
    /// batch returned is CRC-checked: a damaged one is an error naming the file, never
    /// bytes handed to a consumer or a follower. An offset index that points off the
    /// batches (damaged) is passed over: the segment is scanned from its start.
    pub fn read(self, max_bytes: usize, whole_first: bool) -> Result<Bytes, LogError> {
        if self.offset >= self.max_offset {
            return Ok(Bytes::new());
        }
        let mut reader = ChunkReader::new(&self.file, self.end, SEEK_CHUNK);
        // The batch found may start past `offset` where a cleaning removed the offsets
        // between; it is where the index led unless the index names another batch.
        let found = match reader.seek_offset(self.start, self.offset) {
            Ok(Some(b))
                if b.header.base_offset <= self.offset
                    || self.start == 0
                    || b.position > self.start
                    || b.header.base_offset == self.start_offset =>
            {
                Some(b)
            }
            Ok(None) if self.start == 0 => None,
            // The index pointed past the batch, or at no batch: scan from the start.
            _ => {
                tracing::error!(segment = %self.path.display(), offset = self.offset,
                    position = self.start,
                    "the offset index points off the segment's batches; reading from its start");
                reader
                    .seek_offset(0, self.offset)
                    .map_err(|e| self.corrupt(0, e.to_string()))?
            }
        };
        let Some(first) = found else {
            return Ok(Bytes::new());
        };
        let too_big = !whole_first && first.header.total_size() > max_bytes;
        if first.header.last_offset() >= self.max_offset || too_big {
            return Ok(Bytes::new());
        }
        let available = (self.end - first.position) as usize;
        let len = available.min(max_bytes.max(first.header.total_size()));
        let buf = reader.read(first.position, len)?;
        if self.cold {
            // Sealed segments are fsynced: nothing dirty is dropped. Advice only.
            let _ = rustix::fs::fadvise(
                &*self.file,
                first.position,
                std::num::NonZeroU64::new(len as u64),
                rustix::fs::Advice::DontNeed,
            );
        }
        let mut keep = 0;
        for item in BatchIter::new(&buf) {
            let Ok((h, range)) = item else { break };
            if h.last_offset() >= self.max_offset {
                break;
            }
            if let Err(e) = h.validate_stored(&buf[range.clone()]) {
                // Batches before the damaged one are good; a read at the damaged one
                // is an error, unless the index led here (a damaged index can point at
                // bytes that merely parse): then the segment is read from its start.
                if keep > 0 {
                    break;
                }
                if self.start > 0 {
                    tracing::error!(segment = %self.path.display(), offset = self.offset,
                        "the offset index points off the segment's batches; reading from its start");
                    return ReadPlan { start: 0, ..self }.read(max_bytes, whole_first);
                }
                return Err(self.corrupt(first.position + range.start as u64, e.to_string()));
            }
            keep = range.end;
        }
        let mut buf = Bytes::from(buf);
        buf.truncate(keep);
        Ok(buf)
    }

    fn corrupt(&self, position: u64, reason: String) -> LogError {
        tracing::error!(segment = %self.path.display(), position, %reason, "corrupt batch in a local segment");
        LogError::Corrupt {
            path: self.path.clone(),
            position,
            reason,
        }
    }
}
