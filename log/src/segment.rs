//! One segment: `{base_offset:020}.log` with its `.index` and `.timeindex`.
//!
//! A segment owns the byte range of its log file up to `size`; everything past it is
//! garbage from a torn write and is truncated away on recovery. Readers get an
//! `Arc<File>` and a size snapshot, so they read without holding the partition lock.
//! The log file's descriptor comes from the broker's [`FileCache`], opened when the
//! segment is read or written and closed when it has been idle longest.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shale_records::batch::BatchHeader;

use super::chunk_reader::{ChunkReader, SCAN_CHUNK};
use super::epochs::EpochEntry;
use super::files::FileCache;
use super::index::{IndexFile, OffsetEntry, TimeEntry};

pub(crate) use crate::layout::segment_path;
use crate::layout::{INDEX_SUFFIX, KEYS_SUFFIX, LOG_SUFFIX, STAGED_SUFFIX, TIME_INDEX_SUFFIX};

pub(crate) struct Segment {
    pub base_offset: i64,
    dir: PathBuf,
    /// The `.log` file, opened through `files`.
    path: PathBuf,
    files: Arc<FileCache>,
    /// Valid bytes in the log file.
    size: u64,
    /// One past the last offset stored here (== base_offset while empty).
    pub next_offset: i64,
    /// Largest batch max-timestamp in the segment, -1 while empty.
    pub max_timestamp: i64,
    /// Wall-clock ms of the first append (or the first batch's timestamp after a
    /// restart), for `segment.ms`.
    pub rolling_timestamp: Option<i64>,
    index: IndexFile<OffsetEntry>,
    time_index: IndexFile<TimeEntry>,
    bytes_since_index_entry: u64,
    /// Max timestamp noted in the time index so far.
    time_indexed_max: i64,
    /// For a segment recovered by a scan: each leader epoch its batches carry, with
    /// the first offset of each (what the epoch checkpoint must hold).
    pub recovered_epochs: Option<Vec<EpochEntry>>,
}

impl Segment {
    /// The time retention ages this segment by: its largest record timestamp, or, for
    /// records without one (-1, Kafka's NO_TIMESTAMP), when its file was last written
    /// (`None` while empty or unreadable: nothing to age).
    pub(crate) fn retention_time(&self) -> Option<i64> {
        if self.max_timestamp >= 0 {
            return Some(self.max_timestamp);
        }
        if self.next_offset == self.base_offset {
            return None;
        }
        let modified = std::fs::metadata(&self.path)
            .and_then(|m| m.modified())
            .ok()?;
        let ms = modified
            .duration_since(std::time::UNIX_EPOCH)
            .ok()?
            .as_millis();
        i64::try_from(ms).ok()
    }

    /// Creates a new, empty segment.
    pub(crate) fn create(dir: &Path, base_offset: i64, files: &Arc<FileCache>) -> io::Result<Self> {
        // A filter left by an earlier segment at this base describes other bytes.
        crate::keys::remove_key_filter(dir, base_offset)?;
        Self::create_with(dir, base_offset, files, "")
    }

    /// Creates the files of a segment a cleaning writes, under staged names
    /// (`{base}.log.cleaned`, …): written, sealed and renamed into place by the cleaner.
    pub(crate) fn create_staged(
        dir: &Path,
        base_offset: i64,
        files: &Arc<FileCache>,
    ) -> io::Result<Self> {
        let staged = format!(".{}", STAGED_SUFFIX);
        for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            // Leftovers of a cleaning that failed before its swap.
            match std::fs::remove_file(segment_path(dir, base_offset, &format!("{suffix}{staged}")))
            {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Self::create_with(dir, base_offset, files, &staged)
    }

    /// The staged files' paths: log, offset index, time index.
    pub(crate) fn staged_paths(dir: &Path, base_offset: i64) -> [(PathBuf, PathBuf); 3] {
        let staged = format!(".{}", STAGED_SUFFIX);
        [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX].map(|suffix| {
            (
                segment_path(dir, base_offset, &format!("{suffix}{staged}")),
                segment_path(dir, base_offset, suffix),
            )
        })
    }

    fn create_with(
        dir: &Path,
        base_offset: i64,
        files: &Arc<FileCache>,
        staged: &str,
    ) -> io::Result<Self> {
        let path = segment_path(dir, base_offset, &format!("{LOG_SUFFIX}{staged}"));
        files.create(&path)?;
        Ok(Self {
            base_offset,
            dir: dir.to_path_buf(),
            path,
            files: files.clone(),
            size: 0,
            next_offset: base_offset,
            max_timestamp: -1,
            rolling_timestamp: None,
            index: IndexFile::create(&segment_path(
                dir,
                base_offset,
                &format!("{INDEX_SUFFIX}{staged}"),
            ))?,
            time_index: IndexFile::create(&segment_path(
                dir,
                base_offset,
                &format!("{TIME_INDEX_SUFFIX}{staged}"),
            ))?,
            bytes_since_index_entry: 0,
            time_indexed_max: -1,
            recovered_epochs: None,
        })
    }

    /// Forgets the cached handle of this segment's log file (its files are renamed
    /// or deleted by the caller).
    pub(crate) fn forget_file(&self) {
        self.files.forget(&self.path);
    }

    /// Opens an existing segment. `next_offset` is known for a sealed segment (the next
    /// segment's base offset) and `None` for the active one, which is always scanned
    /// and CRC-checked. A sealed segment is scanned only if an index file is missing or
    /// malformed.
    pub(crate) fn open(
        dir: &Path,
        base_offset: i64,
        next_offset: Option<i64>,
        index_interval: u64,
        files: &Arc<FileCache>,
    ) -> io::Result<Self> {
        let path = segment_path(dir, base_offset, LOG_SUFFIX);
        // No descriptor for a sealed segment with good indexes: opened when read.
        let size = std::fs::metadata(&path)?.len();
        let index_path = segment_path(dir, base_offset, INDEX_SUFFIX);
        let time_path = segment_path(dir, base_offset, TIME_INDEX_SUFFIX);
        if let Some(next) = next_offset {
            let span = (next - base_offset) as u64;
            let index = IndexFile::<OffsetEntry>::load(&index_path, |e| {
                u64::from(e.position) < size && u64::from(e.relative_offset) < span
            })?;
            let time_index =
                IndexFile::<TimeEntry>::load(&time_path, |e| u64::from(e.relative_offset) < span)?;
            // A non-empty segment's offset index starts with its first batch, and its
            // time index holds at least the entry written at seal: an empty or torn
            // file (a crash before the fsync of a seal reached it) is rebuilt, or the
            // segment's max timestamp would read as -1 and retention would misjudge it.
            let complete = |index: &IndexFile<OffsetEntry>, time: &IndexFile<TimeEntry>| {
                size == 0
                    || (index.first().is_some_and(|e| e.position == 0) && time.last().is_some())
            };
            if let (Some(index), Some(time_index)) = (index, time_index)
                && complete(&index, &time_index)
            {
                let max_timestamp = time_index.last().map_or(-1, |e| e.timestamp);
                return Ok(Self {
                    base_offset,
                    dir: dir.to_path_buf(),
                    path,
                    files: files.clone(),
                    size,
                    next_offset: next,
                    max_timestamp,
                    rolling_timestamp: None,
                    index,
                    time_index,
                    bytes_since_index_entry: 0,
                    time_indexed_max: max_timestamp,
                    recovered_epochs: None,
                });
            }
            tracing::warn!(segment = %path.display(), "index files missing, incomplete or malformed, rebuilding");
        }
        let mut seg = Self {
            base_offset,
            dir: dir.to_path_buf(),
            path,
            files: files.clone(),
            size,
            next_offset: base_offset,
            max_timestamp: -1,
            rolling_timestamp: None,
            index: IndexFile::create(&index_path)?,
            time_index: IndexFile::create(&time_path)?,
            bytes_since_index_entry: 0,
            time_indexed_max: -1,
            recovered_epochs: Some(Vec::new()),
        };
        seg.recover(index_interval, next_offset.is_none())?;
        if let Some(next) = next_offset {
            // A sealed segment's rebuilt indexes end as seal left them, durably. It
            // covers the offsets up to the next segment's base, whether or not its last
            // batch reaches it (a cleaning may have removed the offsets between).
            seg.seal()?;
            seg.next_offset = seg.next_offset.max(next);
        }
        Ok(seg)
    }

    /// Scans the log batch by batch from the start, truncating at the first torn,
    /// corrupt (CRC, when `check_crc`) or out-of-sequence batch, and rebuilds both indexes.
    fn recover(&mut self, index_interval: u64, check_crc: bool) -> io::Result<()> {
        let file = self.file()?;
        let mut reader = ChunkReader::new(&file, self.size, SCAN_CHUNK);
        let mut pos = 0u64;
        while let Some(batch) = reader.next_batch(pos, check_crc) {
            let h = match batch {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!(segment = self.base_offset, position = pos, error = %e, "truncating corrupt log tail");
                    break;
                }
            };
            // Offsets only grow; a cleaned (compacted) segment has gaps between batches.
            let in_sequence = if pos == 0 {
                h.base_offset >= self.base_offset
            } else {
                h.base_offset >= self.next_offset
            };
            if !in_sequence || h.last_offset() - self.base_offset > i64::from(u32::MAX) {
                tracing::warn!(
                    segment = self.base_offset,
                    position = pos,
                    "truncating log tail with out-of-sequence offsets"
                );
                break;
            }
            self.rolling_timestamp.get_or_insert(h.max_timestamp);
            if let Some(epochs) = &mut self.recovered_epochs
                && epochs
                    .last()
                    .is_none_or(|e| e.epoch < h.partition_leader_epoch)
            {
                epochs.push(EpochEntry {
                    epoch: h.partition_leader_epoch,
                    start_offset: h.base_offset,
                });
            }
            self.index_batch(&h, pos, index_interval);
            pos += h.total_size() as u64;
        }
        if pos < self.size {
            file.set_len(pos)?;
            file.sync_all()?;
        }
        self.size = pos;
        self.index.flush()?;
        self.time_index.flush()
    }

    /// Accounts for one batch stored at `pos`: index entries every `index_interval`
    /// bytes, and a time entry with them whenever the running max timestamp grew.
    fn index_batch(&mut self, h: &BatchHeader, pos: u64, index_interval: u64) {
        let rel = (h.base_offset - self.base_offset) as u32;
        self.max_timestamp = self.max_timestamp.max(h.max_timestamp);
        if self.index.last().is_none() || self.bytes_since_index_entry >= index_interval {
            self.index.push(OffsetEntry {
                relative_offset: rel,
                position: pos as u32,
            });
            self.bytes_since_index_entry = 0;
            if self.max_timestamp > self.time_indexed_max {
                self.time_index.push(TimeEntry {
                    timestamp: self.max_timestamp,
                    relative_offset: rel,
                });
                self.time_indexed_max = self.max_timestamp;
            }
        }
        self.bytes_since_index_entry += h.total_size() as u64;
        self.next_offset = h.last_offset() + 1;
    }

    pub(crate) fn size(&self) -> u64 {
        self.size
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.size == 0
    }

    /// The log file's handle (opened through the broker's file cache if needed).
    pub(crate) fn file(&self) -> io::Result<Arc<File>> {
        self.files.open(&self.path)
    }

    /// Appends validated batches that already carry their final offsets.
    /// `batches` are back to back; `headers` describes each, in order.
    pub(crate) fn append(
        &mut self,
        batches: &[u8],
        headers: &[BatchHeader],
        now_ms: i64,
        index_interval: u64,
    ) -> io::Result<()> {
        let file = self.file()?;
        if let Err(e) = (&*file).write_all(batches) {
            // Cut off whatever part reached the file, so the next append starts at `size`
            // and no half batch sits between two good ones.
            if let Err(trunc) = file.set_len(self.size) {
                tracing::error!(segment = self.base_offset, error = %trunc, "cannot cut off a failed append");
            }
            return Err(e);
        }
        let mut pos = self.size;
        for h in headers {
            self.index_batch(h, pos, index_interval);
            pos += h.total_size() as u64;
        }
        self.size = pos;
        self.rolling_timestamp.get_or_insert(now_ms);
        // Index entries reach their files at the next fsync or seal, not per append:
        // reads use the in-memory entries, and recovery rebuilds an active segment's
        // indexes from its log anyway. That saves two writes per append.
        Ok(())
    }

    /// Seals the segment: records its max timestamp in the time index and fsyncs all
    /// three files, so a sealed segment never needs recovery.
    pub(crate) fn seal(&mut self) -> io::Result<()> {
        if self.max_timestamp > self.time_indexed_max && self.next_offset > self.base_offset {
            let rel = (self.next_offset - 1 - self.base_offset) as u32;
            self.time_index.push(TimeEntry {
                timestamp: self.max_timestamp,
                relative_offset: rel,
            });
            self.time_indexed_max = self.max_timestamp;
        }
        self.sync()
    }

    /// Writes pending index entries and fsyncs the log and both indexes.
    pub(crate) fn sync(&mut self) -> io::Result<()> {
        self.index.flush()?;
        self.time_index.flush()?;
        self.file()?.sync_data()?;
        self.index.sync()?;
        self.time_index.sync()
    }

    /// File position from which to scan for `offset`: the last indexed batch at or before it.
    pub(crate) fn lookup_position(&self, offset: i64) -> u64 {
        self.lookup_entry(offset).0
    }

    /// The last indexed batch at or before `offset`: its position and base offset
    /// (0 and the segment's base when none is).
    pub(crate) fn lookup_entry(&self, offset: i64) -> (u64, i64) {
        let rel = offset
            .saturating_sub(self.base_offset)
            .clamp(0, i64::from(u32::MAX)) as u32;
        self.index
            .floor(|e| e.relative_offset <= rel)
            .map_or((0, self.base_offset), |e| {
                (
                    u64::from(e.position),
                    self.base_offset + i64::from(e.relative_offset),
                )
            })
    }

    /// The last indexed batch at or before file position `position`: its position and
    /// base offset (0 and the segment's base when none is).
    pub(crate) fn floor_position(&self, position: u64) -> (u64, i64) {
        self.index
            .floor(|e| u64::from(e.position) <= position)
            .map_or((0, self.base_offset), |e| {
                (
                    u64::from(e.position),
                    self.base_offset + i64::from(e.relative_offset),
                )
            })
    }

    /// File position from which to scan for the first batch whose timestamps reach `ts`.
    pub(crate) fn lookup_time_position(&self, ts: i64) -> u64 {
        match self.time_index.floor(|e| e.timestamp < ts) {
            Some(e) => self.lookup_position(self.base_offset + i64::from(e.relative_offset)),
            None => 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn replace_file_for_test(&mut self, file: File) {
        self.files.replace_for_test(&self.path, file);
    }

    #[cfg(test)]
    pub(crate) fn time_index_entries_for_test(&self) -> Vec<TimeEntry> {
        self.time_index.entries().to_vec()
    }

    /// Empties the segment in place: no batch, no index entry (a log reset to the
    /// segment's own base offset).
    pub(crate) fn clear(&mut self) -> io::Result<()> {
        crate::keys::remove_key_filter(&self.dir, self.base_offset)?;
        let file = self.file()?;
        file.set_len(0)?;
        file.sync_all()?;
        self.index = IndexFile::create(&segment_path(&self.dir, self.base_offset, INDEX_SUFFIX))?;
        self.time_index = IndexFile::create(&segment_path(
            &self.dir,
            self.base_offset,
            TIME_INDEX_SUFFIX,
        ))?;
        self.size = 0;
        self.next_offset = self.base_offset;
        self.max_timestamp = -1;
        self.rolling_timestamp = None;
        self.bytes_since_index_entry = 0;
        self.time_indexed_max = -1;
        Ok(())
    }

    /// Deletes the segment's files.
    pub(crate) fn delete(self) -> io::Result<()> {
        self.files.forget(&self.path);
        for suffix in [KEYS_SUFFIX, LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
            match std::fs::remove_file(segment_path(&self.dir, self.base_offset, suffix)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        Ok(())
    }
}
