//! Log compaction (`cleanup.policy=compact`): keep the latest record of every key.
//!
//! A cleaning works on sealed segments only, never on the active one and never on a
//! segment reaching above the offset it is given (the high watermark). It has three
//! steps, so that the partition's lock is held only for the first and the last:
//!
//! 1. [`PartitionLog::prepare_clean`] (under the lock) lists the segments from the log
//!    start to the end of the dirty section, with open handles, and the batches
//!    idempotent producers' state names.
//! 2. [`CleanJob::run`] (without it) maps each key hash of the dirty section to its
//!    latest offset (a bounded map: when it fills, the cleaning stops at that offset),
//!    then rewrites the segments from the log start, in groups of up to `segment.bytes`,
//!    into staged files (`{base}.log.cleaned` and its indexes), fsynced.
//! 3. [`PartitionLog::install_clean`] (under the lock) swaps each group in, if the log
//!    was not truncated meanwhile: it renames the staged log to `{base}.{end}.swap` and
//!    fsyncs the directory (from here the swap is decided), deletes the group's old
//!    segments, renames the staged files to their final names and fsyncs again.
//!
//! After a crash, opening the log deletes `*.cleaned` leftovers (the old segments are
//! intact) and completes every `.swap` (deletes the old segments it covers, renames it
//! into place, rebuilds its indexes): old segments or new ones, never a mix.
//!
//! What a cleaning keeps: every record whose key has no later record in the map, each
//! batch's offsets (gaps where records went), a batch whose offsets idempotent
//! producers' state names (empty if none of its records stays), and the last batch of
//! each rewritten group (so a segment always ends at its last offset and a read in a
//! gap finds the next batch in the same segment). Records without a key go. A kept
//! tombstone stays until `delete.retention.ms` after the cleaning that first kept it
//! (see `shale_records::compact`).
//!
//! Transactions: the records of aborted transactions go. A marker stays while a batch
//! of its transaction is left before it; once none is, it is treated as a tombstone
//! (it goes `delete.retention.ms` after the cleaning that first found it alone), if
//! every replica has it (see [`CleanerSettings::drop_txn_markers_below`]). Before the
//! swap that removes a marker, the producer snapshots up to it go, and an abort
//! marker's entry leaves the aborted index (the transaction has no record left either
//! way).

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use shale_records::batch::BatchHeader;
use shale_records::compact::{for_each_record, key_hash};
use shale_records::control::{AbortedFilter, TxnCleaner};
use shale_records::failpoint;

use crate::chunk_reader::{ChunkReader, SCAN_CHUNK};
use crate::files::FileCache;
use crate::layout::{LOG_SUFFIX, STAGED_SUFFIX, segment_path};
use crate::producers::ProducerStates;
use crate::segment::Segment;
use crate::{LogError, PartitionLog, sync_dir};

mod files;
mod group;
pub use files::CleanerCheckpoint;
pub(crate) use files::recover_cleaning;
use files::{dir_ino, remove_staged, swap_path};
use group::GroupClean;

/// Bytes one entry of the offset map accounts for in `log.cleaner.dedupe.buffer.size`
/// (a 16-byte key hash and an 8-byte offset, as Kafka counts them).
pub const MAP_ENTRY_BYTES: u64 = 24;
/// Output buffered before it is appended to the staged segment.
const WRITE_CHUNK: usize = 1 << 20;

/// How a cleaning runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerSettings {
    /// `log.cleaner.dedupe.buffer.size`: bytes of the key-hash → offset map.
    pub dedupe_buffer_bytes: u64,
    /// `delete.retention.ms`.
    pub delete_retention_ms: i64,
    /// `min.compaction.lag.ms`: a segment with records newer than this stays dirty.
    pub min_compaction_lag_ms: i64,
    /// Whether tombstones past their horizon go. Not while older records of their
    /// keys may be read from elsewhere (a tiered topic whose local log is trimmed:
    /// its remote segments are not compacted), or those would come back.
    pub drop_tombstones: bool,
    /// Markers below this offset whose transactions have no batch left go; markers
    /// at or above it stay (`i64::MIN`: all stay). The partition's leader passes the
    /// lowest log end of its other replicas: a replica that copied a transaction's
    /// records but not yet its marker would never see that transaction end. Followers
    /// and tiered topics (a segment's copy in the bucket lists the aborted
    /// transactions whose markers it holds, and earlier copies may still hold their
    /// records) keep every marker.
    pub drop_txn_markers_below: i64,
}

/// How much of a log a cleaning could work on now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cleanable {
    /// Bytes of sealed segments wholly below the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of the sealed segments a cleaning may take as dirty.
    pub dirty_bytes: u64,
    pub first_dirty: i64,
    /// End (exclusive) of the dirty section a cleaning may take.
    pub dirty_end: i64,
    /// Max timestamp of the oldest cleanable dirty segment (-1: none), for
    /// `max.compaction.lag.ms`.
    pub oldest_dirty_timestamp: i64,
    pub last_clean_ms: i64,
}

impl Cleanable {
    /// Dirty bytes over all cleanable bytes (Kafka's cleanable ratio).
    pub fn dirty_ratio(&self) -> f64 {
        let total = self.clean_bytes + self.dirty_bytes;
        if total == 0 {
            0.0
        } else {
            self.dirty_bytes as f64 / total as f64
        }
    }
}

/// One segment a cleaning reads.
struct JobSegment {
    base: i64,
    /// The next segment's base.
    next: i64,
    /// Opened when read, one at a time (not through the broker's descriptor cache: a
    /// cleaning of a long log must not hold a descriptor per segment).
    path: PathBuf,
    size: u64,
}

/// A cleaning prepared under the partition's lock, to run without it.
pub struct CleanJob {
    dir: PathBuf,
    /// The directory's inode: a topic deleted and created again under the same name
    /// has another, and a cleaning of the old one is dropped.
    dir_ino: u64,
    files: Arc<FileCache>,
    segments: Vec<JobSegment>,
    first_dirty: i64,
    dirty_end: i64,
    /// Last offsets of the batches idempotent producers' state names.
    retained: HashSet<i64>,
    /// The aborted transactions of the dirty section (producer id, first offset):
    /// their records never enter the key map, so none supersedes a committed one.
    aborted: Vec<(i64, i64)>,
    /// The aborted transactions from the log start: their records go.
    aborted_from_start: Vec<(i64, i64)>,
    generation: u64,
    segment_bytes: u64,
    index_interval: u64,
}

/// One rewritten group, staged under `{base}.*.cleaned`.
struct StagedGroup {
    base: i64,
    end: i64,
    /// The old segments it replaces, with their sizes when read.
    replaces: Vec<(i64, u64)>,
    /// Offsets of the abort markers it removed: their aborted-index entries go.
    dropped_aborts: Vec<i64>,
    /// The last marker it removed: the producer snapshots up to there go.
    last_dropped_marker: Option<i64>,
}

/// What a cleaning counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CleanStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_read: u64,
    pub records_removed: u64,
    /// Old segments replaced / new segments written.
    pub segments_replaced: usize,
    pub segments_written: usize,
    /// Entries of the offset map.
    pub map_entries: usize,
}

/// A cleaning whose output is staged, to be installed under the lock.
pub struct StagedClean {
    dir_ino: u64,
    groups: Vec<StagedGroup>,
    /// The dirty section ended here (the map may have filled before `dirty_end`).
    covered_end: i64,
    generation: u64,
    pub stats: CleanStats,
}

impl PartitionLog {
    /// Where the cleaner stands: its checkpoint, clamped to the log.
    pub fn cleaner_checkpoint(&self) -> CleanerCheckpoint {
        CleanerCheckpoint {
            first_dirty: self
                .cleaner
                .first_dirty
                .clamp(self.log_start_offset(), self.log_end_offset()),
            ..self.cleaner
        }
    }

    /// The dirty section a cleaning bounded by `clean_below` (the high watermark)
    /// could take now, and the sizes of the clean and dirty parts.
    pub fn cleanable(&self, clean_below: i64, now_ms: i64, min_lag_ms: i64) -> Cleanable {
        // Nothing of an undecided transaction is cleaned.
        let clean_below = self.last_stable_offset(clean_below);
        let checkpoint = self.cleaner_checkpoint();
        let mut out = Cleanable {
            clean_bytes: 0,
            dirty_bytes: 0,
            first_dirty: checkpoint.first_dirty,
            dirty_end: checkpoint.first_dirty,
            oldest_dirty_timestamp: -1,
            last_clean_ms: checkpoint.last_clean_ms,
        };
        let active = self.active().base_offset;
        let mut iter = self.segments.iter().peekable();
        let mut blocked = false;
        while let Some((base, seg)) = iter.next() {
            let Some((next, _)) = iter.peek() else { break };
            let next = **next;
            if next <= checkpoint.first_dirty {
                out.clean_bytes += seg.size();
                continue;
            }
            let too_new = min_lag_ms > 0 && seg.max_timestamp > now_ms.saturating_sub(min_lag_ms);
            blocked |= *base >= active || next > clean_below || too_new;
            if blocked {
                break;
            }
            if out.oldest_dirty_timestamp < 0 {
                out.oldest_dirty_timestamp = seg.max_timestamp;
            }
            out.dirty_bytes += seg.size();
            out.dirty_end = next;
        }
        out
    }

    /// Prepares a cleaning of the sealed segments below `clean_below`, or `None` when
    /// none of them is dirty.
    pub fn prepare_clean(
        &self,
        clean_below: i64,
        now_ms: i64,
        settings: &CleanerSettings,
    ) -> Result<Option<CleanJob>, LogError> {
        let c = self.cleanable(clean_below, now_ms, settings.min_compaction_lag_ms);
        if c.dirty_end <= c.first_dirty {
            return Ok(None);
        }
        let pairs = |from: i64| {
            (self.aborted_between(from, c.dirty_end).iter())
                .map(|a| (a.producer_id, a.first_offset))
                .collect()
        };
        let mut segments = Vec::new();
        let mut iter = self.segments.range(..c.dirty_end).peekable();
        while let Some((base, seg)) = iter.next() {
            let next = iter.peek().map_or(c.dirty_end, |(n, _)| **n);
            segments.push(JobSegment {
                base: *base,
                next,
                path: segment_path(&self.dir, *base, LOG_SUFFIX),
                size: seg.size(),
            });
        }
        Ok(Some(CleanJob {
            dir: self.dir.clone(),
            dir_ino: dir_ino(&self.dir)?,
            files: self.files.clone(),
            segments,
            first_dirty: c.first_dirty,
            dirty_end: c.dirty_end,
            retained: self.producers.batch_last_offsets(),
            aborted: pairs(c.first_dirty),
            aborted_from_start: pairs(self.log_start_offset()),
            generation: self.rewrites,
            segment_bytes: self.config.segment_bytes,
            index_interval: self.config.index_interval_bytes,
        }))
    }

    /// Swaps a staged cleaning in (see the module doc), unless the log was truncated
    /// or reset since it was prepared; groups whose segments retention removed
    /// meanwhile are dropped. Returns the number of groups installed.
    pub fn install_clean(&mut self, staged: StagedClean, now_ms: i64) -> Result<usize, LogError> {
        if staged.dir_ino != dir_ino(&self.dir)? {
            // The directory is another partition's now (its topic was deleted and
            // created again): leave it alone.
            tracing::info!(dir = %self.dir.display(), "partition directory replaced during a cleaning: its output is dropped");
            return Ok(0);
        }
        if staged.generation != self.rewrites {
            tracing::info!(dir = %self.dir.display(), "log truncated during a cleaning: its output is dropped");
            staged.discard(&self.dir);
            return Ok(0);
        }
        let mut installed = 0;
        let mut whole = true;
        let mut failed = None;
        let StagedClean {
            groups,
            covered_end,
            ..
        } = staged;
        for group in groups {
            if failed.is_some() {
                remove_staged(&self.dir, group.base);
                continue;
            }
            let intact = group
                .replaces
                .iter()
                .all(|(b, size)| self.segments.get(b).is_some_and(|s| s.size() == *size))
                && self.segments.contains_key(&group.end);
            if !intact {
                // Retention took some of its segments meanwhile. Those left keep
                // records this cleaning meant to remove: the dirty section stays
                // where it was, so the next cleaning sees them again.
                whole &= !group
                    .replaces
                    .iter()
                    .any(|(b, _)| self.segments.contains_key(b));
                remove_staged(&self.dir, group.base);
                continue;
            }
            // Before the swap: an entry without its marker, or a snapshot holding its
            // transaction open, would outlive a crash right after it.
            let forgotten = group.last_dropped_marker.map_or(Ok(()), |m| {
                self.aborted.forget_markers(&group.dropped_aborts)?;
                ProducerStates::delete_snapshots_through(&self.dir, m)
            });
            if let Err(e) = forgotten {
                remove_staged(&self.dir, group.base);
                whole = false;
                failed = Some(e);
                continue;
            }
            failpoint::hit("clean-before-swap");
            let staged_log = &Segment::staged_paths(&self.dir, group.base)[0].0;
            if let Err(e) = std::fs::rename(staged_log, swap_path(&self.dir, group.base, group.end))
            {
                // Nothing of this group changed: it and the rest are dropped.
                remove_staged(&self.dir, group.base);
                whole = false;
                failed = Some(e);
                continue;
            }
            if let Err(e) = self.finish_swap(&group) {
                // Past the swap file's fsync the swap is decided, and the log in memory
                // no longer matches its files: stop the process, so that opening the
                // log completes the swap (as after a crash there).
                tracing::error!(dir = %self.dir.display(), base = group.base, error = %e,
                    "cannot complete the swap of a cleaned segment: aborting, recovery completes it");
                std::process::abort();
            }
            installed += 1;
        }
        self.rewrites += 1;
        self.cleaner = CleanerCheckpoint {
            first_dirty: if whole {
                covered_end.max(self.cleaner.first_dirty)
            } else {
                self.cleaner.first_dirty
            },
            last_clean_ms: now_ms,
        };
        self.cleaner.persist(&self.dir)?;
        match failed {
            Some(e) => Err(e.into()),
            None => Ok(installed),
        }
    }

    /// Completes the swap of a group whose staged log is the swap file now: from
    /// here on the swap is decided (recovery completes it), so the caller treats an
    /// error as fatal.
    fn finish_swap(&mut self, group: &StagedGroup) -> Result<(), LogError> {
        let dir = self.dir.clone();
        let [log, index, time_index] = Segment::staged_paths(&dir, group.base);
        let swap = swap_path(&dir, group.base, group.end);
        sync_dir(&dir)?;
        failpoint::hit("clean-after-swap");
        for (base, _) in &group.replaces {
            if let Some(seg) = self.segments.remove(base) {
                seg.delete()?;
            }
        }
        // The deletions are durable before the new log takes its name, so no crash
        // leaves the new segment beside old ones it replaces.
        sync_dir(&dir)?;
        failpoint::hit("clean-after-delete");
        std::fs::rename(&index.0, &index.1)?;
        std::fs::rename(&time_index.0, &time_index.1)?;
        std::fs::rename(&swap, &log.1)?;
        sync_dir(&dir)?;
        failpoint::hit("clean-after-rename");
        let seg = Segment::open(
            &dir,
            group.base,
            Some(group.end),
            self.config.index_interval_bytes,
            &self.files,
        )?;
        self.segments.insert(group.base, seg);
        Ok(())
    }

    /// After a truncation or reset to `offset`: offsets from there are dirty again.
    pub(crate) fn forget_cleaned_from(&mut self, offset: i64) -> io::Result<()> {
        if self.cleaner.first_dirty > offset {
            self.cleaner.first_dirty = offset;
            self.cleaner.persist(&self.dir)?;
        }
        Ok(())
    }
}

impl CleanJob {
    /// Builds the offset map and writes the cleaned segments to staged files.
    /// `throttle` is told of every chunk of bytes read or written (the I/O limit).
    pub fn run(
        self,
        settings: &CleanerSettings,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<StagedClean, LogError> {
        let mut stats = CleanStats::default();
        let capacity = (settings.dedupe_buffer_bytes / MAP_ENTRY_BYTES) as usize;
        let mut map: HashMap<u128, i64> = HashMap::with_capacity(capacity.min(1 << 20));
        let mut covered_end = self.dirty_end;
        let mut aborted = AbortedFilter::new(self.aborted.clone());
        'map: for seg in self.segments.iter().filter(|s| s.next > self.first_dirty) {
            let mut full_at = None;
            let done = for_each_batch(seg, &self.dir, |h, batch| {
                stats.bytes_read += batch.len() as u64;
                throttle(batch.len() as u64);
                // Markers (whose keys are their types) and aborted transactions'
                // batches add nothing.
                if h.last_offset() < self.first_dirty || !aborted.keep(h, batch) {
                    return Ok(true);
                }
                for_each_record(batch, |r| {
                    let Some(key) = r.key else { return };
                    if r.offset < self.first_dirty || full_at.is_some() {
                        return;
                    }
                    let hash = key_hash(key);
                    if map.len() >= capacity && !map.contains_key(&hash) {
                        full_at = Some(r.offset);
                        return;
                    }
                    map.insert(hash, r.offset);
                })
                .map_err(|e| corrupt(&self.dir, seg.base, e.to_string()))?;
                Ok(full_at.is_none())
            })?;
            if !done {
                covered_end = full_at.expect("stopped because the map is full");
                tracing::info!(dir = %self.dir.display(), offset = covered_end, entries = map.len(),
                    "the cleaner's offset map is full: this cleaning stops at this offset");
                break 'map;
            }
        }
        stats.map_entries = map.len();
        if covered_end <= self.first_dirty {
            return Ok(StagedClean {
                dir_ino: self.dir_ino,
                groups: Vec::new(),
                covered_end: self.first_dirty,
                generation: self.generation,
                stats,
            });
        }
        let mut groups = Vec::new();
        let mut txns = TxnCleaner::new(self.aborted_from_start.clone());
        let segments: Vec<&JobSegment> = self
            .segments
            .iter()
            .filter(|s| s.base < covered_end)
            .collect();
        let mut i = 0;
        while i < segments.len() {
            let mut j = i + 1;
            let mut bytes = segments[i].size;
            while j < segments.len()
                && bytes + segments[j].size <= self.segment_bytes
                && segments[j].next - segments[i].base <= i64::from(u32::MAX)
            {
                bytes += segments[j].size;
                j += 1;
            }
            let group = &segments[i..j];
            let clean = GroupClean {
                map: &map,
                covered_end,
                settings,
                now_ms,
            };
            match self.write_group(group, &clean, &mut txns, throttle, &mut stats) {
                Ok(Some(g)) => groups.push(g),
                Ok(None) => {}
                Err(e) => {
                    remove_staged(&self.dir, group[0].base);
                    StagedClean {
                        dir_ino: self.dir_ino,
                        groups,
                        covered_end,
                        generation: self.generation,
                        stats,
                    }
                    .discard(&self.dir);
                    return Err(e);
                }
            }
            i = j;
        }
        Ok(StagedClean {
            dir_ino: self.dir_ino,
            groups,
            covered_end,
            generation: self.generation,
            stats,
        })
    }
}

impl StagedClean {
    /// Deletes the staged files (a cleaning that will not be installed).
    fn discard(self, dir: &Path) {
        for g in self.groups {
            remove_staged(dir, g.base);
        }
    }
}

/// Calls `f` with each batch of `seg`, CRC-checked, in order, until it returns false
/// (then returns false).
fn for_each_batch(
    seg: &JobSegment,
    dir: &Path,
    mut f: impl FnMut(&BatchHeader, &[u8]) -> Result<bool, LogError>,
) -> Result<bool, LogError> {
    let file = File::open(&seg.path)?;
    let mut reader = ChunkReader::new(&file, seg.size, SCAN_CHUNK);
    let mut pos = 0u64;
    while let Some(h) = reader.next_batch(pos, false) {
        let h = h.map_err(|e| corrupt(dir, seg.base, e.to_string()))?;
        let batch = reader.read(pos, h.total_size())?;
        h.validate_stored(&batch)
            .map_err(|e| corrupt(dir, seg.base, e.to_string()))?;
        if !f(&h, &batch)? {
            return Ok(false);
        }
        pos += h.total_size() as u64;
    }
    Ok(true)
}

fn corrupt(dir: &Path, base: i64, reason: String) -> LogError {
    LogError::Corrupt {
        path: segment_path(dir, base, LOG_SUFFIX),
        position: 0,
        reason,
    }
}

#[cfg(test)]
#[path = "clean_tests.rs"]
mod tests;
