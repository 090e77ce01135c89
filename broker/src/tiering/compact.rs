//! Remote compaction: the leader of a tiered partition with `cleanup.policy=compact`
//! compacts its remote segments too, so a changelog can stay in the bucket for years
//! holding about one record per key.
//!
//! A run (every `tiering.remote_compaction_interval_ms`, when the remote log grew since
//! the last one or a tombstone may have expired; at most
//! `tiering.remote_compaction_concurrency` partitions at once):
//! 1. builds the key map (key hash → latest offset, bounded by
//!    `log.cleaner_dedupe_buffer_size`) over the remote segments not covered by the
//!    last run, read through the read cache, and over the local log above them up to
//!    the high watermark, so a key updated locally loses its older remote copies; a
//!    map that fills covers what lies below that record, and the next run goes on
//!    from there;
//! 2. rewrites the remote segments in order, in groups of up to `segment.bytes`,
//!    keeping the latest record of each key (tombstones until their delete horizon,
//!    which the first cleaning sets, as locally), and dropping the records of aborted
//!    transactions (as the segments' aborted lists and the local index name them).
//!    Markers stay, and so do the segments' aborted lists. Offsets stay, with gaps;
//!    the last batch of a group stays, so a rewrite covers exactly the offsets it
//!    replaces;
//! 3. under the partition's `tier_lock` (so uploads and remote retention wait for one
//!    rewrite, not the whole run), checks that the group is still what the read index
//!    lists, uploads the rewrite as a new segment (new id) whose row stays
//!    `COPY_STARTED`, then swaps it in with one metastore transaction: the old rows
//!    become `COMPACTED` and the new one `COPY_FINISHED`. A crash before the swap
//!    leaves an unfinished copy, which the next upload pass deletes; after it, the
//!    rewrite is the log. A failure stops the run (groups are swapped in offset order).
//!
//! `COMPACTED` segments are no longer in any read index, but their objects stay for
//! `tiering.remote_compaction_delete_delay_ms`: a fetch already reading one finishes,
//! and its next fetch finds the rewrite, which covers the same offsets (a removed
//! offset reads as the next surviving batch, so nothing is skipped or repeated). Then
//! remote retention's pass deletes them (`COMPACTED → DELETE_STARTED → DELETE_FINISHED`).
//! A broker whose read index still names a deleted segment re-reads the metastore
//! (see `read_remote`); followers also re-read it at every remote compaction pass.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use shale_metastore::RemoteSegment;
use shale_records::batch::{BatchHeader, BatchIter};
use shale_records::compact::{
    CleanBatch, clean_aborted, clean_against_map, for_each_record, key_hash,
};
use shale_records::control::{TxnBatch, TxnCleaner};
use shale_tiering::reader::{ReadError, RemoteReader};
use shale_tiering::uploader::SealedSegment;

use super::{RemoveOnDrop, partition_ref, remote_read_error, tempfile_dir, tiered_partitions};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::partition::{Partition, RemoteState};
use crate::tier::{Progress, RemoteCompactionStats};

/// Bytes of one remote read while compacting.
const READ_BYTES: usize = 1 << 20;

impl Broker {
    /// Compacts the remote segments of the compacted tiered partitions this broker
    /// leads; followers of such partitions re-read their remote logs.
    pub(crate) async fn remote_compaction_pass(self: &Arc<Self>) -> Result<()> {
        let (leaders, followers): (Vec<_>, Vec<_>) = tiered_partitions(self)
            .into_iter()
            .filter(|p| p.config().cleanup_policy.compacts())
            .partition(|p| p.is_leader());
        self.read_remote_logs(followers, true).await;
        let limit = self.config.tiering.remote_compaction_concurrency.max(1);
        futures::stream::iter(leaders)
            .for_each_concurrent(limit, |p| async move {
                if self.cancel.is_cancelled() {
                    return;
                }
                match self.compact_remote(&p).await {
                    Ok(Some(s)) => tracing::info!(topic = %p.topic, partition = p.index,
                        read = s.bytes_read, written = s.bytes_written, removed = s.records_removed,
                        replaced = s.segments_replaced, "remote segments compacted"),
                    Ok(None) => {}
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "remote compaction failed");
                    }
                }
            })
            .await;
        Ok(())
    }

    /// One remote compaction of `p` (its leader's), on the remote I/O runtime (its
    /// reads, rewrites and uploads stay off the threads serving produce and fetch);
    /// `None` when there was nothing to do.
    pub(crate) async fn compact_remote(
        self: &Arc<Self>,
        p: &Arc<Partition>,
    ) -> Result<Option<RemoteCompactionStats>> {
        let (broker, p) = (self.clone(), p.clone());
        self.tier
            .remote_io
            .run(async move { broker.compact_remote_here(&p).await })
            .await?
    }

    async fn compact_remote_here(
        &self,
        p: &Arc<Partition>,
    ) -> Result<Option<RemoteCompactionStats>> {
        let state = p.remote_state();
        let config = p.config();
        let now = now_ms();
        let epoch = p.leader_epoch();
        // A read-only topic's objects stay as they are (an unmount is taking them).
        if !p.is_leader()
            || !config.cleanup_policy.compacts()
            || config.read_only
            || !state.loaded
            || state.needs_cleanup
            || state.segments.is_empty()
        {
            return Ok(None);
        }
        let id = (p.topic_id, p.index);
        // Where the last complete run of this leader epoch got to.
        let last = self
            .tier
            .remote_compactions
            .last(id)
            .filter(|l| l.epoch == epoch);
        let first_dirty = last.map_or(0, |l| l.first_dirty);
        let unchanged = last.is_some_and(|l| {
            l.first_dirty > state.end_offset
                && now.saturating_sub(l.at_ms) < config.delete_retention_ms
        });
        if unchanged {
            return Ok(None);
        }
        let mut stats = RemoteCompactionStats::default();
        let capacity =
            (self.config.log.cleaner_dedupe_buffer_size / shale_log::MAP_ENTRY_BYTES) as usize;
        let (map, protect_from) = build_map(
            &self.tier.reader,
            p,
            &state,
            first_dirty,
            capacity,
            &mut stats,
        )
        .await?;
        let how = CleanBatch {
            now_ms: now,
            delete_retention_ms: config.delete_retention_ms,
            // Every older copy of a key is in these segments, below the tombstone, and
            // groups are swapped in offset order (a run stops at its first failure).
            drop_tombstones: true,
            keep_empty: false,
            protect_from,
        };
        let max_bytes = config.segment_bytes.max(1) as u64;
        let segments = &state.segments;
        let mut i = 0;
        while i < segments.len() && segments[i].base_offset < protect_from {
            let mut j = i + 1;
            let mut bytes = segments[i].size_bytes as u64;
            while j < segments.len()
                && bytes + segments[j].size_bytes as u64 <= max_bytes
                && segments[j].end_offset - segments[i].base_offset < i64::from(u32::MAX)
            {
                bytes += segments[j].size_bytes as u64;
                j += 1;
            }
            let group = &segments[i..j];
            i = j;
            if !p.is_leader() || p.leader_epoch() != epoch || self.cancel.is_cancelled() {
                return Ok(None);
            }
            self.rewrite_group(p, group, &map, how, epoch, &mut stats)
                .await?;
        }
        // The next run maps only what lies past what this one covered.
        let first_dirty = protect_from.min(state.end_offset + 1);
        let progress = Progress {
            epoch,
            first_dirty,
            at_ms: now,
        };
        self.tier.remote_compactions.record(id, progress, &stats);
        Ok(Some(stats))
    }

    /// Rewrites one group of remote segments, uploads the rewrite and swaps it in;
    /// `None` if it would be the one segment it replaces, unchanged.
    async fn rewrite_group(
        &self,
        p: &Arc<Partition>,
        group: &[RemoteSegment],
        map: &HashMap<u128, i64>,
        how: CleanBatch,
        epoch: i32,
        stats: &mut RemoteCompactionStats,
    ) -> Result<Option<RemoteSegment>> {
        let base = group[0].base_offset;
        let end = group.last().expect("a group has a segment").end_offset;
        let dir = tempfile_dir(&self.config.data_dir)?;
        let _cleanup = RemoveOnDrop(dir.clone());
        let path = shale_log::segment_log_path(&dir, base);
        let mut out =
            std::io::BufWriter::new(std::fs::File::create(&path).map_err(Error::Storage)?);
        let mut changed = group.len() > 1;
        let mut removed = 0u64;
        let mut txns = TxnCleaner::new(
            (p.aborted_in_both_tiers(base, end + 1).iter())
                .map(|a| (a.producer_id, a.first_offset))
                .collect(),
        );
        for seg in group {
            for_each_remote_batch(&self.tier.reader, seg, |h, batch| {
                stats.bytes_read += batch.len() as u64;
                let how = CleanBatch {
                    keep_empty: h.last_offset() == end,
                    ..how
                };
                let cleaned = match txns.visit(h, batch) {
                    TxnBatch::Aborted => clean_aborted(batch, how),
                    TxnBatch::Data | TxnBatch::Marker { .. } => clean_against_map(batch, how, map),
                }
                .map_err(|e| corrupt(seg, e))?;
                changed |= cleaned.changed();
                removed += cleaned.removed;
                std::io::Write::write_all(&mut out, cleaned.bytes(batch)).map_err(Error::Storage)
            })
            .await?;
        }
        if !changed {
            return Ok(None);
        }
        let file = out
            .into_inner()
            .map_err(|e| Error::Storage(e.into_error()))?;
        file.sync_all().map_err(Error::Storage)?;
        drop(file);
        let interval = p.config().index_interval_bytes.max(0) as u64;
        let sealed = shale_log::seal_segment_file(&dir, base, end, interval)?;
        let key_filter = match shale_log::ensure_key_filter(&sealed) {
            Ok(f) => Some(bytes::Bytes::from(f.encode())),
            Err(e) => {
                tracing::warn!(topic = %p.topic, partition = p.index, base_offset = base, error = %e,
                    "cannot build the rewrite's key filter; copying it without one");
                None
            }
        };
        // The producer state after the rewrite is the one after its last segment (none
        // if that was cut where a log diverged: its state is of the discarded history).
        let last = group.last().expect("a group has segments");
        let producer_snapshot = match last.object_end_offset == last.end_offset {
            true => (self.tier.reader.producer_snapshot(last).await).map_err(remote_read_error)?,
            false => None,
        };
        let upload = SealedSegment {
            base_offset: base,
            end_offset: end,
            max_timestamp: sealed.max_timestamp,
            leader_epoch: epoch,
            size_bytes: sealed.size_bytes,
            log_path: sealed.log_path.clone(),
            index_path: sealed.index_path.clone(),
            time_index_path: sealed.time_index_path.clone(),
            key_filter: key_filter.clone(),
            epochs: merged_epochs(group),
            replaces: group.iter().map(|s| s.segment_id).collect(),
            // The rewrite keeps every marker.
            aborted: group.iter().flat_map(|s| s.live_aborted()).collect(),
            producer_snapshot,
        };
        // Only the upload and the swap hold the tier lock: uploads, retention and the
        // local cleaner's swaps of the partition wait for one rewrite at most.
        let _tier = p.tier_lock.lock().await;
        let current = p.remote_state();
        let listed: std::collections::HashSet<_> =
            current.segments.iter().map(|s| s.segment_id).collect();
        // Read-only (an unmount): the bucket's copies stay as the unmount finds them,
        // which waits while the tier lock is held.
        if current.needs_cleanup
            || p.config().read_only
            || p.leader_epoch() != epoch
            || !group.iter().all(|s| listed.contains(&s.segment_id))
        {
            return Err(Error::RemoteLogNotReady(format!(
                "the remote log of partition {} of '{}' changed during its compaction",
                p.index, p.topic
            )));
        }
        let old: Vec<_> = group.iter().map(|s| s.segment_id).collect();
        let swapped = match self
            .tier
            .uploader
            .put_segment(&partition_ref(p), &upload)
            .await
        {
            Ok(row) => {
                shale_tiering::failpoint::hit("remote-compaction-before-swap");
                self.metastore
                    .replace_remote_segments(&old, &[row.segment_id])
                    .await
                    .map(|()| row)
                    .map_err(Error::from)
            }
            Err(e) => Err(Error::Tiering(e)),
        };
        let mut row = match swapped {
            Ok(row) => row,
            Err(e) => {
                // An unfinished rewrite may be left: the next upload pass removes it
                // (and re-reads the remote log).
                p.set_remote_state(RemoteState {
                    needs_cleanup: true,
                    ..current
                });
                return Err(e);
            }
        };
        shale_tiering::failpoint::hit("remote-compaction-after-swap");
        row.state = shale_metastore::RemoteSegmentState::CopyFinished;
        p.set_remote_state(replace_in_index(&current, group, row.clone()));
        drop(_tier);
        if let Some(f) = key_filter {
            self.tier.reader.remember_key_filter(row.segment_id, f);
        }
        stats.bytes_written += sealed.size_bytes;
        stats.records_removed += removed;
        stats.segments_replaced += group.len() as u64;
        stats.segments_written += 1;
        tracing::info!(topic = %p.topic, partition = p.index, base_offset = base, end_offset = end,
            replaced = group.len(), bytes = sealed.size_bytes, removed, "remote segments replaced by their compaction");
        Ok(Some(row))
    }
}

/// Key hash → latest offset, bounded; stops taking records at the first one whose
/// key it has no room for.
struct KeyMap {
    map: HashMap<u128, i64>,
    capacity: usize,
    /// Records below this are not mapped (an earlier run covered them).
    first_dirty: i64,
    full_at: Option<i64>,
}

impl KeyMap {
    /// Adds the records of one batch; false once the map is full. Markers and
    /// transactional batches add nothing: a marker's key is its type, and a record of
    /// an aborted or undecided transaction (the local part reaches the high watermark,
    /// past the last stable offset) must not supersede a committed one. So committed
    /// transactional records are superseded by later plain records, and kept
    /// otherwise.
    fn add(&mut self, batch: &[u8]) -> std::result::Result<bool, shale_records::batch::BatchError> {
        let h = shale_records::batch::BatchHeader::parse(batch)?;
        if h.is_control() || h.is_transactional() {
            return Ok(self.full_at.is_none());
        }
        for_each_record(batch, |r| {
            let Some(key) = r.key else { return };
            if self.full_at.is_some() || r.offset < self.first_dirty {
                return;
            }
            let hash = key_hash(key);
            if self.map.len() >= self.capacity && !self.map.contains_key(&hash) {
                self.full_at = Some(r.offset);
                return;
            }
            self.map.insert(hash, r.offset);
        })?;
        Ok(self.full_at.is_none())
    }
}

/// The key map over the remote segments from `first_dirty` on and the local log above
/// them up to the high watermark, and the offset it stops at when it fills
/// (`i64::MAX`: it covers all).
async fn build_map(
    reader: &Arc<RemoteReader>,
    p: &Partition,
    state: &RemoteState,
    first_dirty: i64,
    capacity: usize,
    stats: &mut RemoteCompactionStats,
) -> Result<(HashMap<u128, i64>, i64)> {
    let mut keys = KeyMap {
        map: HashMap::with_capacity(capacity.min(1 << 20)),
        capacity,
        first_dirty,
        full_at: None,
    };
    for seg in state
        .segments
        .iter()
        .filter(|s| s.end_offset >= first_dirty)
    {
        for_each_remote_batch(reader, seg, |_, batch| {
            stats.bytes_read += batch.len() as u64;
            if keys.full_at.is_none() {
                keys.add(batch).map_err(|e| corrupt(seg, e))?;
            }
            Ok(())
        })
        .await?;
        if keys.full_at.is_some() {
            break;
        }
    }
    // The local log above the remote one: what a key's latest value is now (from its
    // start, if records were deleted past the remote log's end).
    let mut offset = (state.end_offset + 1).max(p.offsets().local_log_start_offset);
    while keys.full_at.is_none() && offset < p.high_watermark() {
        let (bytes, _) = p.read(offset, READ_BYTES, true)?;
        if bytes.is_empty() {
            break;
        }
        for item in BatchIter::new(&bytes) {
            let local = |e: shale_records::batch::BatchError| {
                Error::Storage(std::io::Error::other(format!(
                    "local batch of partition {} of '{}' at offset {offset}: {e}",
                    p.index, p.topic
                )))
            };
            let (h, range) = item.map_err(local)?;
            if !keys.add(&bytes[range]).map_err(local)? {
                break;
            }
            offset = h.last_offset() + 1;
        }
    }
    if let Some(at) = keys.full_at {
        tracing::info!(topic = %p.topic, partition = p.index, offset = at, entries = keys.map.len(),
            "the remote compaction's key map is full: it compacts below this offset only");
    }
    Ok((keys.map, keys.full_at.unwrap_or(i64::MAX)))
}

/// Calls `f` with every batch of a remote segment, in order, each CRC-checked.
async fn for_each_remote_batch(
    reader: &Arc<RemoteReader>,
    seg: &RemoteSegment,
    mut f: impl FnMut(&BatchHeader, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut offset = seg.base_offset;
    while offset <= seg.end_offset {
        let bytes = reader
            .read(seg, offset, READ_BYTES, true)
            .await
            .map_err(|e| match e {
                // Remote retention deleted it after this run listed it: the run
                // stops, and the next one starts from the remote log as it stands.
                ReadError::NotFound { .. } => Error::RemoteLogNotReady(format!(
                    "remote segment {} was deleted during its compaction",
                    seg.segment_id
                )),
                other => remote_read_error(other),
            })?;
        if bytes.is_empty() {
            break;
        }
        for item in BatchIter::new(&bytes) {
            let (h, range) = item.map_err(|e| corrupt(seg, e))?;
            f(&h, &bytes[range])?;
            offset = h.last_offset() + 1;
        }
    }
    Ok(())
}

/// The leader epochs of a rewrite of `group`: its segments' epochs within their
/// offsets, in order, each change once (none if a segment has none recorded).
fn merged_epochs(group: &[RemoteSegment]) -> Vec<(i32, i64)> {
    if group.iter().any(|s| s.epochs.is_empty()) {
        return Vec::new();
    }
    let mut out: Vec<(i32, i64)> = Vec::new();
    let within = group
        .iter()
        .flat_map(|s| s.epochs.iter().filter(|e| e.1 <= s.end_offset));
    for &(epoch, start) in within {
        if out.last().is_none_or(|last| last.0 != epoch) {
            out.push((epoch, start));
        }
    }
    out
}

fn corrupt(seg: &RemoteSegment, e: impl std::fmt::Display) -> Error {
    Error::RemoteCorrupt(shale_tiering::reader::ReadError::Corrupt {
        object: shale_tiering::layout::SegmentKey::of(seg)
            .path(shale_tiering::layout::ObjectKind::Log)
            .to_string(),
        reason: e.to_string(),
    })
}

/// The read index with `group` replaced by its rewrite.
fn replace_in_index(
    state: &RemoteState,
    group: &[RemoteSegment],
    row: RemoteSegment,
) -> RemoteState {
    let first = group[0].segment_id;
    let gone: std::collections::HashSet<_> = group.iter().map(|s| s.segment_id).collect();
    let mut segments = Vec::with_capacity(state.segments.len());
    for s in state.segments.iter() {
        if s.segment_id == first {
            segments.push(row.clone());
        } else if !gone.contains(&s.segment_id) {
            segments.push(s.clone());
        }
    }
    RemoteState {
        segments: Arc::new(segments),
        ..state.clone()
    }
}
