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
//! the disk is governed by `flush.messages` / `flush.ms` (see docs/durability.md).

mod append;
mod chunk_reader;
mod clean;
mod divergence;
mod epochs;
pub mod files;
mod index;
mod keys;
pub mod layout;
pub mod producers;
mod read;
mod records;
mod recovery;
mod retention;
mod segment;
mod txn;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use clean::{
    CleanJob, CleanStats, Cleanable, CleanerCheckpoint, CleanerSettings, MAP_ENTRY_BYTES,
    StagedClean,
};
use epochs::EpochCache;
pub use epochs::EpochEntry;
pub use files::FileCache;
pub use keys::{
    build_key_filter, ensure_key_filter, has_key_filter, key_filter_path, read_key_filter,
    write_key_filter, write_key_filter_tmp,
};
use layout::{KEYS_SUFFIX, LOG_SUFFIX};
use producers::{ProducerError, ProducerStates};
pub use read::ReadPlan;
pub use records::{FileSlice, Records};
use recovery::{epochs_after, scan_epochs};
pub use retention::{
    RetentionOutcome, SealedSegmentInfo, TierBounds, export_segment_tail, seal_segment_file,
    segment_log_path,
};
use segment::Segment;
use txn::AbortedIndex;
pub use txn::{ABORTED_INDEX, AbortedTxn, CompletedTxn};

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
    /// A stored batch fails its checks (CRC, framing): the file is damaged.
    #[error("corrupt batch at byte {position} of {path}: {reason}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        reason: String,
    },
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
    /// The aborted transactions whose markers the local log holds.
    aborted: AbortedIndex,
    /// Transactions that ended at or above the high watermark last seen: (first
    /// offset, marker offset). Their markers are not stable yet, so neither are they.
    unstable_ended: std::collections::BTreeSet<(i64, i64)>,
    /// Records below this offset were deleted (Kafka's DeleteRecords): the log starts
    /// here even where a segment holding them remains. Kept by the caller (the
    /// metastore), and set again after every open.
    deleted_below: i64,
    unflushed_messages: u64,
    last_flush_ms: i64,
    /// Raised by every truncation, reset and cleaning: a key filter built from a
    /// sealed segment read before one may describe bytes that are gone (see `keys`),
    /// and a cleaning prepared before one is dropped.
    rewrites: u64,
    /// Raised by every truncation and reset, before the file is cut (see
    /// [`FileSlice::is_current`]).
    cuts: records::Cuts,
    /// Where the cleaner stands (compacted topics).
    cleaner: CleanerCheckpoint,
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
        clean::recover_cleaning(dir, &files)?;
        let mut bases = Vec::new();
        let mut filters = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let name = entry?.file_name();
            let name = name.to_string_lossy();
            if name.contains(&format!(".{KEYS_SUFFIX}.tmp")) {
                // A key filter a crash cut off before its rename.
                std::fs::remove_file(dir.join(&*name))?;
                continue;
            }
            if let Some(base) = name
                .strip_suffix(&format!(".{KEYS_SUFFIX}"))
                .and_then(|b| b.parse::<i64>().ok())
            {
                filters.push(base);
            }
            if let Some(base) = name
                .strip_suffix(&format!(".{LOG_SUFFIX}"))
                .and_then(|b| b.parse::<i64>().ok())
            {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        for base in filters {
            if bases.binary_search(&base).is_err() {
                // The filter of a segment deleted since.
                keys::remove_key_filter(dir, base)?;
            }
        }
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
        if let Some((base, _)) = segments.last_key_value() {
            // The active segment is written again: no filter describes it.
            keys::remove_key_filter(dir, *base)?;
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
            aborted: AbortedIndex::load(dir)?,
            unstable_ended: Default::default(),
            deleted_below: 0,
            unflushed_messages: 0,
            last_flush_ms: now_ms,
            rewrites: 0,
            cuts: Default::default(),
            cleaner: CleanerCheckpoint::load(dir),
        };
        log.rebuild_producers()?;
        Ok(log)
    }

    /// Idempotent producers this partition knows.
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Saves the producer state (at segment seals and close), forgetting idle producers.
    fn snapshot_producers(&mut self, now_ms: i64) -> io::Result<()> {
        // The aborted transactions below the snapshot must be durable first: opening
        // rebuilds only those above it.
        self.aborted.sync()?;
        self.producers.expire(now_ms);
        self.producers
            .write_snapshot(&self.dir, self.producers_through, self.log_start_offset())
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

    /// The first offset the log holds: its first segment's base, or the offset records
    /// were deleted below if that is higher (never past the log end: a log reset below
    /// that offset starts where it was reset).
    pub fn log_start_offset(&self) -> i64 {
        let base = self.segments.first_key_value().map_or(0, |(b, _)| *b);
        base.max(self.deleted_below.min(self.log_end_offset()))
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

    /// Fsyncs everything and saves the producer state before a clean shutdown.
    pub fn close(&mut self, now_ms: i64) -> Result<(), LogError> {
        self.flush(now_ms)?;
        Ok(self.snapshot_producers(now_ms)?)
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod locate_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;
