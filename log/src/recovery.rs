//! What opening a log rebuilds from its batches: idempotent producers' state (from the
//! newest snapshot plus the batch headers after it) and leader epochs missing from the
//! checkpoint.

use std::collections::BTreeMap;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::chunk_reader::{ChunkReader, SCAN_CHUNK, SEEK_CHUNK};
use crate::epochs::EpochCache;
use crate::producers::ProducerStates;
use crate::segment::Segment;
use crate::{EpochEntry, PartitionLog};

impl PartitionLog {
    /// Loads the newest producer snapshot at or below the log end and reads the batch
    /// headers after it (and the markers among them, which end transactions and enter
    /// the aborted index again from the snapshot on).
    pub(crate) fn rebuild_producers(&mut self) -> io::Result<()> {
        let end = self.log_end_offset();
        let (from, states) = ProducerStates::load_snapshot(&self.dir, end)?
            .unwrap_or((self.log_start_offset(), ProducerStates::default()));
        self.producers = states;
        self.aborted.truncate_from(from)?;
        self.unstable_ended.clear();
        let first_segment = self
            .segments
            .range(..=from)
            .next_back()
            .map_or(i64::MIN, |(b, _)| *b);
        let bases: Vec<i64> = self
            .segments
            .range(first_segment..)
            .map(|(b, _)| *b)
            .collect();
        for base in bases {
            let seg = &self.segments[&base];
            let (file, size) = (seg.file()?, seg.size());
            // In the segment holding `from`, start at its batch (found through the
            // index), so a clean restart (snapshot at the log end) reads nothing.
            let mut pos = if base <= from {
                ChunkReader::new(&file, size, SEEK_CHUNK)
                    .seek_offset(seg.lookup_position(from), from)?
                    .map_or(size, |b| b.position)
            } else {
                0
            };
            let mut reader = ChunkReader::new(&file, size, SCAN_CHUNK);
            let mut marker = Vec::new();
            while let Some(Ok(h)) = reader.next_batch(pos, false) {
                if h.is_control() {
                    marker.resize(h.total_size(), 0);
                    file.read_exact_at(&mut marker, pos)?;
                }
                self.record_batch(&h, &marker);
                pos += h.total_size() as u64;
            }
        }
        self.producers_through = end;
        Ok(())
    }
}

/// Epochs newer than `latest` in the batches, with their first offsets: from the
/// active segment, whose batches recovery has just read, and from older segments only
/// while each starts in such an epoch (the epoch may begin in one of them).
pub(crate) fn epochs_after(
    segments: &BTreeMap<i64, Segment>,
    latest: i32,
) -> io::Result<Vec<EpochEntry>> {
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
pub(crate) fn first_batch_epoch(seg: &Segment) -> io::Result<Option<i32>> {
    let file = seg.file()?;
    let mut reader = ChunkReader::new(&file, seg.size(), SEEK_CHUNK);
    Ok(match reader.next_batch(0, false) {
        Some(Ok(h)) => Some(h.partition_leader_epoch),
        _ => None,
    })
}

/// Rebuilds the epoch list from the batch headers (a log without a checkpoint).
pub(crate) fn scan_epochs(segments: &BTreeMap<i64, Segment>) -> io::Result<Vec<EpochEntry>> {
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
