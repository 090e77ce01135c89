//! Writing one group of a cleaning: the group's segments, cleaned against the offset
//! map and the transactions' outcomes, into one staged segment.

use std::collections::HashMap;
use std::io;

use shale_records::batch::BatchHeader;
use shale_records::compact::{
    CleanBatch, Cleaned, MapCleaned, clean_aborted, clean_against_map, clean_marker,
};
use shale_records::control::{TxnBatch, TxnCleaner};

use super::files::remove_staged;
use super::{
    CleanJob, CleanStats, CleanerSettings, JobSegment, StagedGroup, WRITE_CHUNK, corrupt,
    for_each_batch,
};
use crate::LogError;
use crate::segment::Segment;

impl CleanJob {
    /// Writes one group's cleaned segment; `None` if it would be the one segment it
    /// replaces, unchanged. `txns` has read the groups before this one.
    pub(super) fn write_group(
        &self,
        group: &[&JobSegment],
        clean: &GroupClean<'_>,
        txns: &mut TxnCleaner,
        throttle: &mut dyn FnMut(u64),
        stats: &mut CleanStats,
    ) -> Result<Option<StagedGroup>, LogError> {
        let GroupClean {
            map,
            covered_end,
            settings,
            now_ms,
        } = *clean;
        let base = group[0].base;
        let end = group.last().expect("a group has a segment").next;
        let mut out = Segment::create_staged(&self.dir, base, &self.files)?;
        let mut buf: Vec<u8> = Vec::with_capacity(WRITE_CHUNK);
        let mut headers: Vec<BatchHeader> = Vec::new();
        let mut changed = group.len() > 1;
        let mut dropped_aborts = Vec::new();
        let mut last_dropped_marker = None;
        let interval = self.index_interval;
        let flush = |out: &mut Segment,
                     buf: &mut Vec<u8>,
                     headers: &mut Vec<BatchHeader>,
                     stats: &mut CleanStats,
                     throttle: &mut dyn FnMut(u64)|
         -> io::Result<()> {
            if !buf.is_empty() {
                out.append(buf, headers, now_ms, interval)?;
                stats.bytes_written += buf.len() as u64;
                throttle(buf.len() as u64);
                buf.clear();
                headers.clear();
            }
            Ok(())
        };
        for seg in group {
            let last_of_group = seg.next == end;
            for_each_batch(seg, &self.dir, |h, batch| {
                stats.bytes_read += batch.len() as u64;
                throttle(batch.len() as u64);
                let how = CleanBatch {
                    now_ms,
                    delete_retention_ms: settings.delete_retention_ms,
                    drop_tombstones: settings.drop_tombstones,
                    keep_empty: self.retained.contains(&h.last_offset())
                        || (last_of_group && h.last_offset() == end - 1),
                    protect_from: covered_end,
                };
                let cleaned = match txns.visit(h, batch) {
                    TxnBatch::Data => clean_against_map(batch, how, map),
                    TxnBatch::Aborted => clean_aborted(batch, how),
                    TxnBatch::Marker { alone } => {
                        let alone = alone && h.last_offset() < settings.drop_txn_markers_below;
                        clean_marker(batch, how, alone).map(|cleaned| {
                            let removed = matches!(cleaned, Cleaned::Removed);
                            if removed {
                                last_dropped_marker = Some(h.base_offset);
                            }
                            if removed && marker_is_abort(batch) {
                                dropped_aborts.push(h.base_offset);
                            }
                            MapCleaned {
                                removed: u64::from(removed),
                                cleaned,
                            }
                        })
                    }
                }
                .map_err(|e| corrupt(&self.dir, seg.base, e.to_string()))?;
                stats.records_read += h.record_count.max(0) as u64;
                let written = cleaned.bytes(batch);
                changed |= cleaned.changed();
                stats.records_removed += cleaned.removed;
                if !written.is_empty() {
                    let header = BatchHeader::parse(written)
                        .map_err(|e| corrupt(&self.dir, seg.base, e.to_string()))?;
                    buf.extend_from_slice(written);
                    headers.push(header);
                }
                if buf.len() >= WRITE_CHUNK {
                    flush(&mut out, &mut buf, &mut headers, stats, throttle)?;
                }
                Ok(true)
            })?;
        }
        flush(&mut out, &mut buf, &mut headers, stats, throttle)?;
        out.seal()?;
        out.forget_file();
        if !changed {
            remove_staged(&self.dir, base);
            return Ok(None);
        }
        stats.segments_replaced += group.len();
        stats.segments_written += 1;
        Ok(Some(StagedGroup {
            base,
            end,
            replaces: group.iter().map(|s| (s.base, s.size)).collect(),
            dropped_aborts,
            last_dropped_marker,
        }))
    }
}

fn marker_is_abort(batch: &[u8]) -> bool {
    matches!(
        shale_records::control::parse_marker(batch),
        Ok((shale_records::control::Marker::Abort, _))
    )
}

/// What every group of one cleaning shares.
#[derive(Clone, Copy)]
pub(super) struct GroupClean<'a> {
    pub(super) map: &'a HashMap<u128, i64>,
    pub(super) covered_end: i64,
    pub(super) settings: &'a CleanerSettings,
    pub(super) now_ms: i64,
}
