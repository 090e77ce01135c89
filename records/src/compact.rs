//! What the log cleaner does to one batch: list its keys, and rewrite it keeping only
//! the records a compaction keeps. Offsets never move: a kept record keeps its offset
//! delta, and the batch keeps its base offset, `lastOffsetDelta`, producer id, epoch
//! and base sequence, so idempotent producers' state reads the same from a cleaned log.
//!
//! A kept tombstone (a record with a null value) is kept for `delete.retention.ms`
//! after the first cleaning that kept it: that cleaning writes the delete horizon into
//! the batch (attribute bit 6, with the horizon as base timestamp and the records'
//! timestamp deltas made relative to it, so every record keeps its timestamp), and a
//! cleaning after the horizon drops the batch's tombstones.

use std::ops::Range;

use bytes::BytesMut;
use twox_hash::XxHash3_128;

use crate::batch::{
    BatchError, BatchHeader, Compression, DELETE_HORIZON_BIT, HEADER_LEN, LOG_OVERHEAD,
};
use crate::record::{Reader, put_varlong};

/// The cleaner's hash of a record key (XXH3-128: two keys share one with negligible
/// probability, so the offset map stores hashes, not keys).
pub fn key_hash(key: &[u8]) -> u128 {
    XxHash3_128::oneshot(key)
}

/// One record of a batch as the cleaner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerRecord<'a> {
    pub offset: i64,
    /// `None`: a record without a key (a compacted topic drops it).
    pub key: Option<&'a [u8]>,
    /// A null value: a delete marker for its key.
    pub tombstone: bool,
}

struct RawRecord {
    /// The whole record, length prefix excluded.
    range: Range<usize>,
    timestamp_delta: i64,
    /// Where the bytes after the offset delta (key, value, headers) start.
    rest: usize,
    offset_delta: i64,
    key: Option<Range<usize>>,
    tombstone: bool,
}

/// The header of `batch`, which must hold the whole batch.
fn whole_batch(batch: &[u8]) -> Result<BatchHeader, BatchError> {
    let h = BatchHeader::parse(batch)?;
    if h.total_size() > batch.len() {
        return Err(BatchError::Truncated {
            needed: h.total_size(),
            available: batch.len(),
        });
    }
    Ok(h)
}

/// The records section of a batch, decompressed if needed.
fn records_section(batch: &[u8], h: &BatchHeader) -> Result<Vec<u8>, BatchError> {
    let body = &batch[HEADER_LEN..h.total_size()];
    match h.compression()? {
        Compression::None => Ok(body.to_vec()),
        codec => crate::compression::decompress(codec, body),
    }
}

fn parse_records(section: &[u8], count: i32) -> Result<Vec<RawRecord>, BatchError> {
    let count = usize::try_from(count).map_err(|_| BatchError::Invalid("negative record count"))?;
    let mut r = Reader {
        buf: section,
        pos: 0,
    };
    let mut out = Vec::with_capacity(count.min(section.len()));
    for _ in 0..count {
        let len = r.varlong()?;
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| r.pos.checked_add(l))
            .filter(|e| *e <= section.len())
            .ok_or(BatchError::Invalid("record length runs past the batch"))?;
        let start = r.pos;
        let mut rec = Reader {
            buf: &section[..end],
            pos: start,
        };
        rec.i8()?;
        let timestamp_delta = rec.varlong()?;
        let offset_delta = rec.varlong()?;
        let rest = rec.pos;
        let key = rec.bytes()?;
        let tombstone = rec.bytes()?.is_none();
        out.push(RawRecord {
            range: start..end,
            timestamp_delta,
            rest,
            offset_delta,
            key,
            tombstone,
        });
        r.pos = end;
    }
    Ok(out)
}

/// Calls `f` with every record of `batch` (exactly one stored batch), in order.
pub fn for_each_record(
    batch: &[u8],
    mut f: impl FnMut(CleanerRecord<'_>),
) -> Result<(), BatchError> {
    let h = whole_batch(batch)?;
    let section = records_section(batch, &h)?;
    for r in parse_records(&section, h.record_count)? {
        f(CleanerRecord {
            offset: h.base_offset.wrapping_add(r.offset_delta),
            key: r.key.map(|k| &section[k]),
            tombstone: r.tombstone,
        });
    }
    Ok(())
}

/// How a cleaning treats one batch.
#[derive(Debug, Clone, Copy)]
pub struct CleanBatch {
    /// The cleaning's clock.
    pub now_ms: i64,
    /// `delete.retention.ms`: how long a kept tombstone stays.
    pub delete_retention_ms: i64,
    /// Whether a tombstone past its horizon goes (else it stays, horizon or not).
    pub drop_tombstones: bool,
    /// Keep the batch even if no record survives (as an empty batch: the last batch of
    /// an idempotent producer, or of a segment).
    pub keep_empty: bool,
    /// Records at or above this offset stay as they are, past horizon or not (the
    /// cleaning's offset map does not reach them).
    pub protect_from: i64,
}

/// What cleaning did to a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleaned {
    /// Every record stays: the stored bytes are kept as they are.
    Unchanged,
    /// The batch as rewritten (fewer records, or a delete horizon set).
    Rewritten(Vec<u8>),
    /// No record survives and the batch is not needed: it goes.
    Removed,
}

/// A batch cleaned against a key map (key hash → latest offset): what to store in its
/// place, and how many of its records went.
#[derive(Debug)]
pub struct MapCleaned {
    pub cleaned: Cleaned,
    pub removed: u64,
}

impl MapCleaned {
    /// The bytes that take the batch's place (`original`: the batch as stored).
    pub fn bytes<'a>(&'a self, original: &'a [u8]) -> &'a [u8] {
        match &self.cleaned {
            Cleaned::Unchanged => original,
            Cleaned::Rewritten(b) => b,
            Cleaned::Removed => &[],
        }
    }

    pub fn changed(&self) -> bool {
        !matches!(self.cleaned, Cleaned::Unchanged)
    }
}

/// [`clean_batch`] keeping each record that no later record of its key supersedes in
/// `map` (keyed records missing from the map stay).
pub fn clean_against_map(
    batch: &[u8],
    how: CleanBatch,
    map: &std::collections::HashMap<u128, i64>,
) -> Result<MapCleaned, BatchError> {
    let h = whole_batch(batch)?;
    if h.is_control() {
        // A transaction marker's key is its type, not a record's key: it stays.
        return Ok(MapCleaned {
            cleaned: Cleaned::Unchanged,
            removed: 0,
        });
    }
    let total = h.record_count.max(0) as u64;
    let mut kept = 0u64;
    let cleaned = clean_batch(batch, how, |r| {
        let keep = r
            .key
            .and_then(|k| map.get(&key_hash(k)))
            .is_none_or(|&latest| r.offset >= latest);
        kept += u64::from(keep);
        keep
    })?;
    let removed = match cleaned {
        Cleaned::Unchanged => 0,
        _ => total.saturating_sub(kept),
    };
    Ok(MapCleaned { cleaned, removed })
}

/// Rewrites `batch` (exactly one stored batch) keeping the records `keep` accepts;
/// records without a key go, and so do tombstones past the batch's delete horizon.
pub fn clean_batch(
    batch: &[u8],
    how: CleanBatch,
    keep: impl FnMut(CleanerRecord<'_>) -> bool,
) -> Result<Cleaned, BatchError> {
    clean_records(batch, how, keep, false)
}

/// A batch of an aborted transaction as a cleaning leaves it: without its records
/// (empty if `how.keep_empty`, else removed).
pub fn clean_aborted(batch: &[u8], how: CleanBatch) -> Result<MapCleaned, BatchError> {
    let all = CleanBatch {
        protect_from: i64::MAX,
        ..how
    };
    let cleaned = clean_batch(batch, all, |_| false)?;
    let removed = match cleaned {
        Cleaned::Unchanged => 0,
        _ => BatchHeader::parse(batch)?.record_count.max(0) as u64,
    };
    Ok(MapCleaned { cleaned, removed })
}

/// A transaction marker (a control batch) as a cleaning leaves it. A marker whose
/// transaction has no batch left before it (`alone`) is treated as a tombstone: the
/// first cleaning that finds it so writes its delete horizon, and the first one past
/// that horizon removes it (unless `how.keep_empty`: it then stays as it is, since a
/// marker is never emptied). Any other marker stays.
pub fn clean_marker(batch: &[u8], how: CleanBatch, alone: bool) -> Result<Cleaned, BatchError> {
    let h = whole_batch(batch)?;
    if !h.is_control() {
        return Err(BatchError::Invalid("not a control batch"));
    }
    if !alone {
        return Ok(Cleaned::Unchanged);
    }
    match h.delete_horizon() {
        None => clean_records(batch, how, |_| true, true),
        Some(t) if how.now_ms >= t && !how.keep_empty => Ok(Cleaned::Removed),
        Some(_) => Ok(Cleaned::Unchanged),
    }
}

/// [`clean_batch`]; `set_horizon`: the batch gets a delete horizon (if it has none)
/// whether or not it keeps a tombstone.
fn clean_records(
    batch: &[u8],
    how: CleanBatch,
    mut keep: impl FnMut(CleanerRecord<'_>) -> bool,
    set_horizon: bool,
) -> Result<Cleaned, BatchError> {
    let h = whole_batch(batch)?;
    let section = records_section(batch, &h)?;
    let records = parse_records(&section, h.record_count)?;
    let horizon_passed = how.drop_tombstones && h.delete_horizon().is_some_and(|t| how.now_ms >= t);
    let offset_of = |r: &RawRecord| h.base_offset.wrapping_add(r.offset_delta);
    let kept: Vec<&RawRecord> = records
        .iter()
        .filter(|r| {
            let rec = CleanerRecord {
                offset: offset_of(r),
                key: r.key.clone().map(|k| &section[k]),
                tombstone: r.tombstone,
            };
            rec.offset >= how.protect_from
                || (rec.key.is_some() && !(r.tombstone && horizon_passed) && keep(rec))
        })
        .collect();
    // A batch that keeps a tombstone gets its delete horizon at its first cleaning.
    let new_horizon = (h.delete_horizon().is_none()
        && (set_horizon
            || kept
                .iter()
                .any(|r| r.tombstone && offset_of(r) < how.protect_from)))
    .then(|| how.now_ms.saturating_add(how.delete_retention_ms));
    if kept.len() == records.len() && new_horizon.is_none() {
        return Ok(Cleaned::Unchanged);
    }
    if kept.is_empty() && !how.keep_empty {
        return Ok(Cleaned::Removed);
    }
    let base_timestamp = new_horizon.unwrap_or(h.base_timestamp);
    let mut attributes = h.attributes;
    if new_horizon.is_some() {
        attributes |= DELETE_HORIZON_BIT;
    }
    let mut body = BytesMut::new();
    let mut scratch = BytesMut::new();
    let mut max_timestamp = i64::MIN;
    for r in &kept {
        let timestamp = h.base_timestamp.wrapping_add(r.timestamp_delta);
        max_timestamp = max_timestamp.max(timestamp);
        if new_horizon.is_none() {
            put_varlong(&mut body, (r.range.end - r.range.start) as i64);
            body.extend_from_slice(&section[r.range.clone()]);
            continue;
        }
        scratch.clear();
        scratch.extend_from_slice(&section[r.range.start..r.range.start + 1]);
        put_varlong(&mut scratch, timestamp.wrapping_sub(base_timestamp));
        put_varlong(&mut scratch, r.offset_delta);
        scratch.extend_from_slice(&section[r.rest..r.range.end]);
        put_varlong(&mut body, scratch.len() as i64);
        body.extend_from_slice(&scratch);
    }
    let codec = h.compression()?;
    let compressed;
    let records: &[u8] = if kept.is_empty() || codec == Compression::None {
        // An empty batch is written uncompressed.
        attributes &= !0x07;
        &body
    } else {
        compressed = crate::compression::compress(codec, &body);
        &compressed
    };
    // LogAppendTime batches give every record the batch's max timestamp: it stays.
    let max_timestamp = if kept.is_empty() || h.is_log_append_time() {
        h.max_timestamp
    } else {
        max_timestamp
    };
    let mut out = Vec::with_capacity(HEADER_LEN + records.len());
    out.extend_from_slice(&batch[..HEADER_LEN]);
    out.extend_from_slice(records);
    let length = i32::try_from(out.len() - LOG_OVERHEAD)
        .map_err(|_| BatchError::Invalid("cleaned batch is too large"))?;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    out[21..23].copy_from_slice(&attributes.to_be_bytes());
    out[27..35].copy_from_slice(&base_timestamp.to_be_bytes());
    out[35..43].copy_from_slice(&max_timestamp.to_be_bytes());
    out[57..61].copy_from_slice(&(kept.len() as i32).to_be_bytes());
    let crc = crc32c::crc32c(&out[21..]);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(Cleaned::Rewritten(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{BatchBuilder, Record, decode_records};
    use bytes::Bytes;

    fn batch(codec: Compression, recs: &[(Option<&str>, Option<&str>)]) -> Vec<u8> {
        let mut b = BatchBuilder::new(1_000).with_compression(codec);
        for (i, (k, v)) in recs.iter().enumerate() {
            let mut r = Record::new(k.map(str::as_bytes), v.map(str::as_bytes), 1_000 + i as i64);
            r.headers = vec![("h".into(), Some(Bytes::from_static(b"x")))];
            b.push(r);
        }
        let mut out = b.build().to_vec();
        crate::batch::set_base_offset(&mut out, 100);
        crate::batch::set_producer(&mut out, 7, 1, 40);
        out
    }

    const HOW: CleanBatch = CleanBatch {
        now_ms: 50_000,
        delete_retention_ms: 10_000,
        drop_tombstones: true,
        keep_empty: false,
        protect_from: i64::MAX,
    };

    #[test]
    fn kept_records_keep_offsets_timestamps_headers_and_producer_fields() {
        for codec in [Compression::None, Compression::Zstd, Compression::Lz4] {
            let b = batch(
                codec,
                &[
                    (Some("a"), Some("1")),
                    (Some("b"), Some("2")),
                    (Some("a"), Some("3")),
                    (None, Some("x")),
                ],
            );
            let Cleaned::Rewritten(out) = clean_batch(&b, HOW, |r| r.offset != 100).unwrap() else {
                panic!("records were dropped")
            };
            let h = BatchHeader::parse(&out).unwrap();
            h.validate_stored(&out).unwrap();
            assert!(
                h.validate(&out).is_err(),
                "fewer records than the offset span"
            );
            assert_eq!(
                (h.base_offset, h.last_offset(), h.record_count),
                (100, 103, 2)
            );
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (7, 1, 40)
            );
            assert_eq!(h.compression().unwrap(), codec);
            let recs = decode_records(&Bytes::from(out)).unwrap();
            let got: Vec<_> = recs
                .iter()
                .map(|r| (r.offset, r.timestamp, r.headers.len()))
                .collect();
            assert_eq!(got, [(101, 1_001, 1), (102, 1_002, 1)], "{codec:?}");
            assert_eq!(h.max_timestamp, 1_002);
        }
    }

    #[test]
    fn tombstones_get_a_horizon_then_go_after_it() {
        let b = batch(
            Compression::Gzip,
            &[(Some("a"), None), (Some("b"), Some("2"))],
        );
        let Cleaned::Rewritten(first) = clean_batch(&b, HOW, |_| true).unwrap() else {
            panic!("a kept tombstone sets the horizon")
        };
        let h = BatchHeader::parse(&first).unwrap();
        assert_eq!(h.delete_horizon(), Some(60_000));
        let recs = decode_records(&Bytes::from(first.clone())).unwrap();
        assert_eq!(
            recs.iter().map(|r| r.timestamp).collect::<Vec<_>>(),
            [1_000, 1_001]
        );
        assert_eq!(recs[0].value, None);
        // Before the horizon: nothing to do. After it: the tombstone goes.
        assert_eq!(
            clean_batch(&first, HOW, |_| true).unwrap(),
            Cleaned::Unchanged
        );
        let later = CleanBatch {
            now_ms: 60_000,
            ..HOW
        };
        let Cleaned::Rewritten(second) = clean_batch(&first, later, |_| true).unwrap() else {
            panic!("the tombstone is past its horizon")
        };
        let recs = decode_records(&Bytes::from(second)).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!((recs[0].offset, recs[0].timestamp), (101, 1_001));
    }

    #[test]
    fn an_emptied_batch_goes_unless_it_must_stay() {
        let b = batch(Compression::Snappy, &[(Some("a"), Some("1"))]);
        assert_eq!(clean_batch(&b, HOW, |_| false).unwrap(), Cleaned::Removed);
        let keep = CleanBatch {
            keep_empty: true,
            ..HOW
        };
        let Cleaned::Rewritten(out) = clean_batch(&b, keep, |_| false).unwrap() else {
            panic!("kept empty")
        };
        let h = BatchHeader::parse(&out).unwrap();
        h.validate_stored(&out).unwrap();
        assert_eq!(
            (h.record_count, h.last_offset(), h.base_sequence),
            (0, 100, 40)
        );
        assert_eq!(out.len(), HEADER_LEN);
    }

    #[test]
    fn for_each_record_lists_keys_and_tombstones() {
        let b = batch(Compression::Lz4, &[(Some("a"), None), (None, Some("2"))]);
        let mut seen = Vec::new();
        for_each_record(&b, |r| {
            seen.push((r.offset, r.key.map(<[u8]>::to_vec), r.tombstone))
        })
        .unwrap();
        assert_eq!(seen, [(100, Some(b"a".to_vec()), true), (101, None, false)]);
        assert_ne!(key_hash(b"a"), key_hash(b"b"));
    }

    #[test]
    fn a_marker_alone_gets_a_horizon_then_goes_after_it() {
        use crate::control::{Marker, build_marker, parse_marker};
        let mut m = build_marker(7, 2, Marker::Abort, 4, 1_000).to_vec();
        crate::batch::set_base_offset(&mut m, 30);
        assert_eq!(clean_marker(&m, HOW, false).unwrap(), Cleaned::Unchanged);
        assert!(
            clean_marker(
                &batch(Compression::None, &[(Some("a"), Some("1"))]),
                HOW,
                true
            )
            .is_err()
        );
        let Cleaned::Rewritten(first) = clean_marker(&m, HOW, true).unwrap() else {
            panic!("a marker alone gets its horizon")
        };
        let h = BatchHeader::parse(&first).unwrap();
        h.validate_stored(&first).unwrap();
        assert_eq!(h.delete_horizon(), Some(60_000));
        assert_eq!((h.base_offset, h.producer_id, h.producer_epoch), (30, 7, 2));
        assert!(h.is_control() && h.is_transactional());
        assert_eq!(parse_marker(&first).unwrap(), (Marker::Abort, 4));
        let recs = decode_records(&Bytes::from(first.clone())).unwrap();
        assert_eq!(recs[0].timestamp, 1_000);
        // Before the horizon it stays; after it, it goes, unless it must stay.
        assert_eq!(clean_marker(&first, HOW, true).unwrap(), Cleaned::Unchanged);
        let later = CleanBatch {
            now_ms: 60_000,
            ..HOW
        };
        assert_eq!(clean_marker(&first, later, true).unwrap(), Cleaned::Removed);
        let kept = CleanBatch {
            keep_empty: true,
            ..later
        };
        assert_eq!(
            clean_marker(&first, kept, true).unwrap(),
            Cleaned::Unchanged
        );
    }
}
