use super::*;
use crate::layout::{INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_path};
use proptest::prelude::*;
use shale_records::batch::{self, BatchIter};
use shale_records::record::{BatchBuilder, Record, decode_records};
use std::path::PathBuf;

pub(crate) fn batch(first_value: u64, n: usize, ts: i64, value_len: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(ts);
    for i in 0..n {
        let mut v = format!("v{}-", first_value + i as u64).into_bytes();
        v.resize(value_len.max(v.len()), b'x');
        b.push(Record::new(None, Some(&v), ts + i as i64));
    }
    b.build().to_vec()
}

pub(crate) fn append(log: &mut PartitionLog, mut bytes: Vec<u8>, now: i64) -> AppendInfo {
    let mut headers: Vec<_> = BatchIter::new(&bytes).map(|r| r.unwrap().0).collect();
    log.append(&mut bytes, &mut headers, 0, now).unwrap()
}

/// Every record from `from` to the end, decoded, following fetch semantics.
fn read_all(log: &PartitionLog, from: i64, max_bytes: usize) -> Vec<Record> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < log.log_end_offset() {
        let bytes = log
            .plan_read(offset, i64::MAX)
            .unwrap()
            .read(max_bytes, true)
            .unwrap();
        assert!(!bytes.is_empty(), "no progress at {offset}");
        for item in BatchIter::new(&bytes) {
            let (h, r) = item.unwrap();
            h.validate(&bytes[r.clone()]).unwrap();
            for rec in decode_records(&bytes.slice(r)).unwrap() {
                if rec.offset >= offset {
                    assert_eq!(rec.offset, offset, "gap or reorder");
                    offset += 1;
                    out.push(rec);
                }
            }
        }
    }
    out
}

/// Opens a log with a small file cache, so that rolls and reads also exercise closing
/// and reopening segment files.
pub(crate) fn open_log(dir: &Path, config: LogConfig) -> Result<PartitionLog, LogError> {
    PartitionLog::open(dir, config, 0, FileCache::new(4))
}

pub(crate) fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 2048,
        index_interval_bytes: 256,
        ..LogConfig::default()
    }
}

#[test]
fn segments_roll_and_every_offset_is_found_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..100u64 {
        let info = append(&mut log, batch(i * 3, 3, 1000, 40), 0);
        assert_eq!(info.first_offset, i as i64 * 3);
        assert_eq!(info.last_offset, i as i64 * 3 + 2);
    }
    assert!(log.segment_count() > 5, "segments: {}", log.segment_count());
    assert!(log.segments.values().all(|s| s.size() <= 2048));
    for offset in 0..300 {
        let bytes = log
            .plan_read(offset, i64::MAX)
            .unwrap()
            .read(1, true)
            .unwrap();
        let (h, _) = BatchIter::new(&bytes).next().unwrap().unwrap();
        assert!(
            h.base_offset <= offset && offset <= h.last_offset(),
            "offset {offset} got {h:?}"
        );
        assert_eq!(
            h.total_size(),
            bytes.len(),
            "max_bytes 1 still yields exactly one whole batch"
        );
    }
    let records = read_all(&log, 0, 700);
    assert_eq!(records.len(), 300);
    assert_eq!(records[299].value.as_deref().unwrap()[..5], *b"v299-");
    // Reopen: sealed segments load their indexes, the active one is recovered.
    drop(log);
    let log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 300);
    assert_eq!(read_all(&log, 123, 10_000).len(), 177);
}

#[test]
fn read_stops_before_max_offset_and_at_log_end() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), LogConfig::default()).unwrap();
    for i in 0..10 {
        append(&mut log, batch(i * 2, 2, 1000, 10), 0);
    }
    let bytes = log.plan_read(4, 8).unwrap().read(1 << 20, true).unwrap();
    let offsets: Vec<_> = BatchIter::new(&bytes)
        .map(|b| b.unwrap().0.base_offset)
        .collect();
    assert_eq!(offsets, [4, 6]);
    assert!(
        log.plan_read(20, i64::MAX)
            .unwrap()
            .read(1 << 20, true)
            .unwrap()
            .is_empty()
    );
    for bad in [-1, 21] {
        assert!(matches!(
            log.plan_read(bad, i64::MAX),
            Err(LogError::OffsetOutOfRange { .. })
        ));
    }
}

#[test]
fn time_index_finds_first_record_at_or_after_a_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    // Batch i holds offsets 4i..4i+3 with timestamps 10_000 + 100i + (0..4).
    for i in 0..60 {
        append(&mut log, batch(i * 4, 4, 10_000 + 100 * i as i64, 30), 0);
    }
    assert!(log.segment_count() > 3);
    for i in 0..60i64 {
        for j in 0..4 {
            let ts = 10_000 + 100 * i + j;
            assert_eq!(
                log.offset_for_timestamp(ts).unwrap(),
                Some((4 * i + j, ts)),
                "ts {ts}"
            );
        }
        // Between batches: the next batch's first record.
        if i < 59 {
            assert_eq!(
                log.offset_for_timestamp(10_000 + 100 * i + 50)
                    .unwrap()
                    .unwrap()
                    .0,
                4 * (i + 1)
            );
        }
    }
    assert_eq!(log.offset_for_timestamp(0).unwrap(), Some((0, 10_000)));
    assert_eq!(log.offset_for_timestamp(20_000).unwrap(), None);
    // The same answers after a restart, from loaded (not rebuilt) time indexes.
    drop(log);
    let log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(
        log.offset_for_timestamp(10_000 + 100 * 37 + 2).unwrap(),
        Some((37 * 4 + 2, 13_702))
    );
}

#[test]
fn retention_by_time_deletes_old_segments_and_advances_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_ms: 10_000,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    for i in 0..40 {
        append(&mut log, batch(i * 3, 3, 1_000 + i as i64, 40), 0); // old
    }
    let old_end = log.log_end_offset();
    for i in 0..20 {
        append(&mut log, batch(0, 3, 100_000 + i as i64, 40), 0); // recent
    }
    let before = log.segment_count();
    let out = log.apply_retention(105_000, None).unwrap();
    assert!(out.segments > 0 && log.segment_count() < before);
    assert!(log.log_start_offset() > 0 && log.log_start_offset() <= old_end);
    assert!(
        log.segments
            .values()
            .all(|s| s.max_timestamp >= 95_000 || s.base_offset == log.log_start_offset())
    );
    assert!(
        read_all(&log, log.log_start_offset(), 4096).len() as i64
            == log.log_end_offset() - log.log_start_offset()
    );
    assert!(matches!(
        log.plan_read(0, i64::MAX),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    // Far in the future everything expires, the active segment included.
    log.apply_retention(10_000_000, None).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!(log.log_start_offset(), log.log_end_offset());
    // The log start offset survives a restart (it is the first segment's base offset).
    let end = log.log_end_offset();
    drop(log);
    let log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (end, end));
}

/// Records without timestamps (-1) age from when their segment was last written, as
/// in Kafka: they are neither deleted at once nor kept for ever.
#[test]
fn records_without_timestamps_age_from_their_segments_mtime() {
    let dir = tempfile::tempdir().unwrap();
    let hour = 3_600_000;
    let config = LogConfig {
        retention_ms: hour,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    for _ in 0..40 {
        let mut b = BatchBuilder::new(-1);
        for _ in 0..3 {
            b.push(Record::new(None, Some(&[b'x'; 40]), -1));
        }
        append(&mut log, b.build().to_vec(), 0);
    }
    let before = log.segment_count();
    assert!(before > 2);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    log.apply_retention(now, None).unwrap();
    assert_eq!(log.segment_count(), before, "fresh segments were deleted");
    // The oldest segment's file last written two hours ago: it goes, the rest stay.
    let oldest = *log.segments.first_key_value().unwrap().0;
    let two_hours_ago = std::time::SystemTime::now() - std::time::Duration::from_secs(7_200);
    std::fs::File::options()
        .write(true)
        .open(segment_path(dir.path(), oldest, LOG_SUFFIX))
        .unwrap()
        .set_modified(two_hours_ago)
        .unwrap();
    let out = log.apply_retention(now, None).unwrap();
    assert_eq!((out.segments, log.segment_count()), (1, before - 1));
}

#[test]
fn retention_by_size_keeps_the_newest_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_bytes: 5000,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    for i in 0..100 {
        append(&mut log, batch(i * 3, 3, 1_000, 40), 0);
    }
    let before = log.size_bytes();
    assert!(before > 10_000);
    let out = log.apply_retention(2_000, None).unwrap();
    assert_eq!(before - out.bytes, log.size_bytes());
    assert!(log.size_bytes() >= 5000, "never below retention.bytes");
    let oldest = log.segments.values().next().unwrap().size();
    assert!(
        log.size_bytes() - oldest < 5000,
        "deleting one more would go below"
    );
    assert_eq!(log.log_end_offset(), 300);
}

fn active_log_file(log: &PartitionLog) -> PathBuf {
    segment_path(log.dir(), log.active().base_offset, LOG_SUFFIX)
}

#[test]
fn torn_tail_is_truncated_on_recovery() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..30 {
        append(&mut log, batch(i * 2, 2, 1_000, 50), 0);
    }
    let path = active_log_file(&log);
    let good_len = std::fs::metadata(&path).unwrap().len();
    drop(log);
    // A batch whose write was cut off half way.
    let partial = batch(60, 2, 1_000, 50);
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    std::io::Write::write_all(&mut f, &partial[..partial.len() / 2]).unwrap();
    drop(f);
    let mut log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 60);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), good_len);
    assert_eq!(read_all(&log, 0, 4096).len(), 60);
    // Appends continue densely after the recovered tail.
    assert_eq!(
        append(&mut log, batch(60, 2, 1_000, 50), 0).first_offset,
        60
    );
}

#[test]
fn corrupt_batch_and_everything_after_it_are_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), LogConfig::default()).unwrap();
    let sizes: Vec<_> = (0..10)
        .map(|i| {
            let b = batch(i * 2, 2, 1_000, 50);
            let n = b.len();
            append(&mut log, b, 0);
            n
        })
        .collect();
    let path = active_log_file(&log);
    drop(log);
    // Flip a payload byte of batch 6: batches 0..=5 survive.
    let mut raw = std::fs::read(&path).unwrap();
    let at: usize = sizes[..6].iter().sum::<usize>() + 70;
    raw[at] ^= 0xff;
    std::fs::write(&path, &raw).unwrap();
    let log = open_log(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), 12);
    let records = read_all(&log, 0, 1 << 20);
    assert_eq!(records.len(), 12);
    assert_eq!(&records[11].value.as_deref().unwrap()[..4], b"v11-");
}

#[test]
fn missing_or_garbage_index_of_a_sealed_segment_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..60 {
        append(&mut log, batch(i * 3, 3, 5_000 + i as i64, 40), 0);
    }
    let sealed: Vec<i64> = log.segments.keys().copied().take(3).collect();
    drop(log);
    std::fs::remove_file(segment_path(dir.path(), sealed[0], INDEX_SUFFIX)).unwrap();
    std::fs::write(
        segment_path(dir.path(), sealed[1], INDEX_SUFFIX),
        [0xffu8; 16],
    )
    .unwrap();
    std::fs::write(
        segment_path(dir.path(), sealed[2], TIME_INDEX_SUFFIX),
        [1u8; 7],
    )
    .unwrap();
    let log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(read_all(&log, 0, 300).len(), 180);
    for offset in [sealed[1] + 1, sealed[2] + 2] {
        let bytes = log
            .plan_read(offset, i64::MAX)
            .unwrap()
            .read(1, true)
            .unwrap();
        let (h, _) = BatchIter::new(&bytes).next().unwrap().unwrap();
        assert!(h.base_offset <= offset && offset <= h.last_offset());
    }
    let ts = 5_000 + (sealed[2] / 3) + 1;
    assert_eq!(log.offset_for_timestamp(ts).unwrap().unwrap().1, ts);
}

#[test]
fn tiered_retention_deletes_only_uploaded_segments() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        retention_bytes: 0,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    for i in 0..60 {
        append(&mut log, batch(i * 3, 3, 1_000, 40), 0);
    }
    let sealed = log.sealed_segments_after(-1);
    assert_eq!(
        sealed.len(),
        log.segment_count() - 1,
        "every segment but the active one"
    );
    assert!(
        sealed
            .windows(2)
            .all(|w| w[0].end_offset + 1 == w[1].base_offset)
    );
    assert_eq!(
        sealed.last().unwrap().end_offset + 1,
        log.active().base_offset
    );
    assert!(
        sealed
            .iter()
            .all(|s| s.log_path.exists() && s.index_path.exists() && s.time_index_path.exists())
    );
    assert_eq!(
        log.sealed_segments_after(sealed[1].end_offset)[0].base_offset,
        sealed[2].base_offset
    );
    // A remote log ending inside a segment: that segment comes first.
    assert_eq!(
        log.sealed_segments_after(sealed[1].base_offset)[0],
        sealed[1]
    );
    // Nothing uploaded: nothing deleted, though retention.bytes = 0 wants it all gone.
    assert_eq!(
        log.apply_retention(
            0,
            Some(TierBounds {
                uploaded_through: -1,
                retained_from: -1
            })
        )
        .unwrap()
        .segments,
        0
    );
    // Uploaded through the end of the third segment: exactly three go.
    assert_eq!(
        log.apply_retention(
            0,
            Some(TierBounds {
                uploaded_through: sealed[2].end_offset,
                retained_from: -1
            })
        )
        .unwrap()
        .segments,
        3
    );
    assert_eq!(log.log_start_offset(), sealed[3].base_offset);
    // Segments the remote tier retired go even when local retention would keep them.
    let mut keep_all = log.config().clone();
    keep_all.retention_bytes = -1;
    log.set_config(keep_all);
    let bounds = TierBounds {
        uploaded_through: sealed[4].end_offset,
        retained_from: sealed[4].base_offset + 1,
    };
    assert_eq!(
        log.apply_retention(0, Some(bounds)).unwrap().segments,
        1,
        "only the wholly retired one"
    );
    assert_eq!(log.log_start_offset(), sealed[4].base_offset);
    let mut sized = log.config().clone();
    sized.retention_bytes = 0;
    log.set_config(sized);
    // A boundary in the middle of a segment keeps that segment.
    let bounds = TierBounds {
        uploaded_through: sealed[4].end_offset - 1,
        retained_from: -1,
    };
    assert_eq!(log.apply_retention(0, Some(bounds)).unwrap().segments, 0);
    assert_eq!(log.log_start_offset(), sealed[4].base_offset);
}

#[test]
fn segment_ms_rolls_an_old_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_ms: 1_000,
        ..LogConfig::default()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    append(&mut log, batch(0, 1, 1, 10), 10_000);
    append(&mut log, batch(1, 1, 1, 10), 10_500);
    assert_eq!(log.segment_count(), 1);
    append(&mut log, batch(2, 1, 1, 10), 11_001);
    assert_eq!(log.segment_count(), 2);
    assert_eq!(log.active().base_offset, 2);
}

/// An idle log rolls without an append once its active segment is old enough, and
/// tells when its oldest record past an offset came.
#[test]
fn an_idle_active_segment_rolls_by_age_without_an_append() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), LogConfig::default()).unwrap();
    assert!(
        !log.roll_if_older(1_000, 50_000).unwrap(),
        "empty: nothing to roll"
    );
    assert_eq!(log.first_append_after(-1), None);
    append(&mut log, batch(0, 2, 1, 10), 10_000);
    assert_eq!(log.first_append_after(-1), Some(10_000));
    assert!(!log.roll_if_older(1_000, 11_000).unwrap());
    assert!(log.roll_if_older(1_000, 11_001).unwrap());
    assert_eq!((log.segment_count(), log.active().base_offset), (2, 2));
    assert!(log.has_sealed_after(-1));
    assert!(
        !log.roll_if_older(1_000, 99_000).unwrap(),
        "the new one is empty"
    );
    append(&mut log, batch(2, 1, 1, 10), 20_000);
    assert_eq!(log.first_append_after(-1), Some(10_000));
    assert_eq!(log.first_append_after(1), Some(20_000));
    assert_eq!(log.first_append_after(2), None);
}

#[derive(Debug, Clone)]
enum Op {
    Append {
        batches: usize,
        records: usize,
        value_len: usize,
    },
    Roll,
    Reopen,
    /// Reopen after garbage was left past the last complete batch (a torn write).
    TornReopen(usize),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..4, 1usize..6, 0usize..300).prop_map(|(batches, records, value_len)| Op::Append { batches, records, value_len }),
        1 => Just(Op::Roll),
        1 => Just(Op::Reopen),
        1 => (1usize..100).prop_map(Op::TornReopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any sequence of appends, rolls, restarts and torn tails reads back exactly
    /// what was appended, in order, with dense offsets, from every starting offset.
    #[test]
    fn appends_rolls_and_restarts_read_back_exactly(ops in proptest::collection::vec(op(), 1..40), interval in 1u64..2000) {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig { segment_bytes: 3000, index_interval_bytes: interval, ..LogConfig::default() };
        let mut log = open_log(dir.path(), config.clone()).unwrap();
        let mut model: Vec<Vec<u8>> = Vec::new();
        for op in ops {
            match op {
                Op::Append { batches, records, value_len } => {
                    let mut bytes = Vec::new();
                    for _ in 0..batches {
                        let first = model.len() as u64;
                        bytes.extend(batch(first, records, 7, value_len));
                        for i in 0..records {
                            let mut v = format!("v{}-", first + i as u64).into_bytes();
                            v.resize(value_len.max(v.len()), b'x');
                            model.push(v);
                        }
                    }
                    let info = append(&mut log, bytes, 0);
                    prop_assert_eq!(info.last_offset + 1, model.len() as i64);
                }
                Op::Roll => log.force_roll(0).unwrap(),
                Op::Reopen => {
                    drop(log);
                    log = open_log(dir.path(), config.clone()).unwrap();
                }
                Op::TornReopen(n) => {
                    let path = active_log_file(&log);
                    drop(log);
                    let junk = batch(0, 3, 7, 50);
                    let mut f = std::fs::OpenOptions::new().append(true).open(&path).unwrap();
                    std::io::Write::write_all(&mut f, &junk[..n.min(junk.len() - 1)]).unwrap();
                    drop(f);
                    log = open_log(dir.path(), config.clone()).unwrap();
                }
            }
            prop_assert_eq!(log.log_end_offset(), model.len() as i64);
        }
        let got: Vec<_> = read_all(&log, 0, 1000).into_iter().map(|r| r.value.unwrap().to_vec()).collect();
        prop_assert_eq!(&got, &model);
        if !model.is_empty() {
            let mid = model.len() / 2;
            let tail: Vec<_> = read_all(&log, mid as i64, 1).into_iter().map(|r| r.value.unwrap().to_vec()).collect();
            prop_assert_eq!(&tail[..], &model[mid..]);
        }
    }
}

#[test]
fn truncation_cuts_at_batch_boundaries_across_segments_and_survives_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..60u64 {
        append(&mut log, batch(i * 3, 3, 1000, 40), 0);
    }
    let segments = log.segment_count();
    assert!(segments > 3);
    // Mid-batch: the whole batch holding offset 100 (99..=101) goes.
    log.truncate_to(100).unwrap();
    assert_eq!(log.log_end_offset(), 99);
    assert!(log.segment_count() < segments);
    assert_eq!(read_all(&log, 0, 1 << 20).len(), 99);
    // Appends continue densely after the cut, and a reopen agrees.
    assert_eq!(append(&mut log, batch(0, 2, 1000, 40), 0).first_offset, 99);
    drop(log);
    let mut log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 101);
    assert_eq!(read_all(&log, 0, 1 << 20).len(), 101);
    // Below the log start: the log restarts empty there.
    log.reset_to(500).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (500, 500));
    assert!(log.epochs().is_empty());
}

#[test]
fn epochs_follow_appends_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    let mut b = batch(0, 3, 1000, 10);
    let mut h: Vec<_> = BatchIter::new(&b).map(|r| r.unwrap().0).collect();
    log.append(&mut b, &mut h, 0, 0).unwrap();
    log.start_epoch(2).unwrap();
    let mut b = batch(0, 3, 1000, 10);
    let mut h: Vec<_> = BatchIter::new(&b).map(|r| r.unwrap().0).collect();
    log.append(&mut b, &mut h, 2, 0).unwrap();
    assert_eq!(log.epoch_end_offset(0), Some((0, 3)));
    assert_eq!(log.epoch_end_offset(1), Some((0, 3)));
    assert_eq!(log.epoch_end_offset(2), Some((2, 6)));
    log.truncate_to(3).unwrap();
    assert_eq!(log.latest_epoch(), 0);
    // Without its checkpoint, the epochs are rebuilt from the batches.
    drop(log);
    std::fs::remove_file(dir.path().join(epochs::CHECKPOINT_FILE)).unwrap();
    let log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.epoch_end_offset(0), Some((0, 3)));
}

#[test]
fn a_segment_tail_exports_as_a_segment_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..30u64 {
        append(&mut log, batch(i * 3, 3, 1000 + i as i64, 40), 0);
    }
    let seg = log.sealed_segments_after(-1).remove(0);
    let from = seg.base_offset + 3;
    let out = tempfile::tempdir().unwrap();
    let tail = export_segment_tail(&seg, from, out.path(), 256).unwrap();
    assert_eq!((tail.base_offset, tail.end_offset), (from, seg.end_offset));
    let copied = std::fs::read(&tail.log_path).unwrap();
    let original = std::fs::read(&seg.log_path).unwrap();
    assert!(original.ends_with(&copied) && copied.len() < original.len());
    assert_eq!(
        BatchIter::new(&copied)
            .next()
            .unwrap()
            .unwrap()
            .0
            .base_offset,
        from
    );
    assert!(tail.index_path.exists() && tail.time_index_path.exists());
    // Not at a batch start: refused.
    assert!(export_segment_tail(&seg, from + 1, out.path(), 256).is_err());
}

fn idempotent(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let mut b = batch(seq as u64, n, 1000, 10);
    batch::set_producer(&mut b, pid, epoch, seq);
    b
}

fn try_append(log: &mut PartitionLog, mut bytes: Vec<u8>) -> Result<AppendInfo, LogError> {
    let mut headers: Vec<_> = BatchIter::new(&bytes).map(|r| r.unwrap().0).collect();
    log.append(&mut bytes, &mut headers, 0, 0)
}

/// An append of several batches that fails after a roll (here the new segment's file
/// cannot be created) keeps the batches written before it, and the producer state
/// knows them: the retry of the request writes only the batch that was missing, and
/// is answered from the first batch's offset.
#[test]
fn batches_written_before_a_failed_roll_are_known_to_the_producer_state() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 600,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    // Fill the active segment until one more batch fits and two do not: an append of
    // two rolls between them.
    let mut seq = 0;
    let size = idempotent(5, 0, 0, 4).len();
    while log.active().size() as usize + 2 * size <= 600 {
        try_append(&mut log, idempotent(5, 0, seq, 4)).unwrap();
        seq += 4;
    }
    assert!(log.active().size() as usize + size <= 600);
    let first = idempotent(5, 0, seq, 4);
    let second = idempotent(5, 0, seq + 4, 4);
    let next_base = log.log_end_offset() + 4;
    let blocker = segment_file(dir.path(), next_base, "log");
    std::fs::create_dir(&blocker).unwrap();
    let both = [first.clone(), second].concat();
    assert!(
        try_append(&mut log, both.clone()).is_err(),
        "the roll fails"
    );
    assert_eq!(log.log_end_offset(), next_base, "the first batch landed");
    std::fs::remove_dir(&blocker).unwrap();
    let retry = try_append(&mut log, both.clone()).unwrap();
    assert_eq!(
        (retry.first_offset, retry.last_offset, retry.duplicate),
        (next_base - 4, next_base + 3, false),
        "{retry:?}"
    );
    assert_eq!(log.log_end_offset(), next_base + 4);
    let again = try_append(&mut log, both).unwrap();
    assert_eq!(
        (again.first_offset, again.last_offset, again.duplicate),
        (next_base - 4, next_base + 3, true)
    );
    assert!(try_append(&mut log, first).unwrap().duplicate);
}

#[test]
fn idempotent_batches_are_deduplicated_across_rolls_crashes_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 600,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config.clone()).unwrap();
    let mut seq = 0;
    for _ in 0..20 {
        let info = try_append(&mut log, idempotent(5, 0, seq, 4)).unwrap();
        assert!(!info.duplicate);
        seq += 4;
    }
    assert!(log.segment_count() > 3, "rolled, so snapshots were written");
    let end = log.log_end_offset();
    // A retry of the last batch answers its first offsets and writes nothing.
    let dup = try_append(&mut log, idempotent(5, 0, seq - 4, 4)).unwrap();
    assert_eq!(
        (dup.first_offset, dup.last_offset, dup.duplicate),
        (end - 4, end - 1, true)
    );
    assert_eq!(log.log_end_offset(), end);
    // A gap is refused and writes nothing.
    let gap = try_append(&mut log, idempotent(5, 0, seq + 1, 1)).unwrap_err();
    assert!(matches!(
        gap,
        LogError::Producer(ProducerError::OutOfOrderSequence { .. })
    ));
    assert_eq!(log.log_end_offset(), end);
    // After a crash (no clean close) the state is rebuilt from snapshot + headers.
    drop(log);
    let mut log = open_log(dir.path(), config.clone()).unwrap();
    assert!(
        try_append(&mut log, idempotent(5, 0, seq - 4, 4))
            .unwrap()
            .duplicate
    );
    assert!(try_append(&mut log, idempotent(5, 0, seq - 1, 1)).is_err());
    // Without any snapshot, the whole log is read.
    for f in std::fs::read_dir(dir.path()).unwrap() {
        let p = f.unwrap().path();
        if p.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    drop(log);
    let mut log = open_log(dir.path(), config.clone()).unwrap();
    assert!(
        try_append(&mut log, idempotent(5, 0, seq - 4, 4))
            .unwrap()
            .duplicate
    );
    // Truncating the last two batches makes their sequences new again.
    log.truncate_to(end - 8).unwrap();
    let again = try_append(&mut log, idempotent(5, 0, seq - 8, 4)).unwrap();
    assert_eq!((again.first_offset, again.duplicate), (end - 8, false));
    // A clean close saves the state at the log end.
    log.close(0).unwrap();
    drop(log);
    let mut log = open_log(dir.path(), config).unwrap();
    assert!(
        try_append(&mut log, idempotent(5, 0, seq - 8, 4))
            .unwrap()
            .duplicate
    );
    assert_eq!(log.producer_count(), 1);
}

fn append_in_epoch(log: &mut PartitionLog, epoch: i32, n: usize) {
    let mut b = batch(0, n, 1000, 10);
    let mut h: Vec<_> = BatchIter::new(&b).map(|r| r.unwrap().0).collect();
    log.append(&mut b, &mut h, epoch, 0).unwrap();
}

/// A crash between an append and its checkpoint write (the order before this fix)
/// leaves a checkpoint without the newest epoch: opening takes it from the batches.
#[test]
fn a_checkpoint_behind_the_log_is_completed_from_the_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    append_in_epoch(&mut log, 0, 3);
    // Epoch 3 begins while the active segment of epoch 0 is still open, and another
    // segment rolls within it.
    for _ in 0..100 {
        append_in_epoch(&mut log, 3, 3);
    }
    assert!(log.segment_count() > 2);
    let full = log.epochs().to_vec();
    assert_eq!(full.len(), 2);
    drop(log);
    let checkpoint = dir.path().join(epochs::CHECKPOINT_FILE);
    std::fs::write(&checkpoint, "0\n1\n0 0\n").unwrap();
    let log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.epochs(), &full[..]);
    assert_eq!(log.epoch_end_offset(0), Some((0, 3)));
    // And it was written back.
    drop(log);
    let text = std::fs::read_to_string(&checkpoint).unwrap();
    assert_eq!(text, "0\n2\n0 0\n3 3\n");
}

/// The checkpoint is written before the batches: if it cannot be written, neither
/// are they; and a write of batches that fails leaves no epoch naming offsets the log
/// does not have.
#[test]
fn the_epoch_checkpoint_is_written_before_the_batches() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    append_in_epoch(&mut log, 0, 3);
    let blocker = dir.path().join(format!("{}.tmp", epochs::CHECKPOINT_FILE));
    std::fs::create_dir(&blocker).unwrap();
    let mut b = batch(0, 3, 1000, 10);
    let mut h: Vec<_> = BatchIter::new(&b).map(|r| r.unwrap().0).collect();
    assert!(log.append(&mut b, &mut h, 4, 0).is_err());
    assert_eq!(
        log.log_end_offset(),
        3,
        "batches written without their epoch"
    );
    assert_eq!(log.latest_epoch(), 0);
    std::fs::remove_dir(&blocker).unwrap();
    // The active segment's file can no longer be written (as on EIO or ENOSPC).
    let active = active_log_file(&log);
    let seg = log.segments.values_mut().last().unwrap();
    seg.replace_file_for_test(std::fs::File::open(&active).unwrap());
    let mut b = batch(0, 3, 1000, 10);
    let mut h: Vec<_> = BatchIter::new(&b).map(|r| r.unwrap().0).collect();
    assert!(log.append(&mut b, &mut h, 5, 0).is_err());
    assert_eq!(log.latest_epoch(), 0, "epoch 5 wrote nothing");
    let loaded = epochs::EpochCache::load(dir.path()).unwrap().unwrap();
    assert_eq!(loaded.latest_epoch(), 0);
}

/// A sealed segment's index files cut to zero length (a crash before they reached the
/// disk) are rebuilt, with seal's final time entry, and fsynced: the segment keeps its
/// max timestamp, so retention and time lookups still see its age.
#[test]
fn empty_index_files_of_a_sealed_segment_are_rebuilt_with_its_max_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..60 {
        append(&mut log, batch(i * 3, 3, 5_000 + i as i64, 40), 0);
    }
    let sealed: Vec<(i64, i64)> = log
        .segments
        .values()
        .take(2)
        .map(|s| (s.base_offset, s.max_timestamp))
        .collect();
    let time_entries =
        |log: &PartitionLog, base: i64| log.segments[&base].time_index_entries_for_test();
    let before = time_entries(&log, sealed[0].0);
    drop(log);
    for suffix in [INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        std::fs::write(segment_path(dir.path(), sealed[0].0, suffix), []).unwrap();
    }
    std::fs::write(segment_path(dir.path(), sealed[1].0, TIME_INDEX_SUFFIX), []).unwrap();
    let log = open_log(dir.path(), small_config()).unwrap();
    for (base, max_ts) in &sealed {
        assert_eq!(log.segments[base].max_timestamp, *max_ts, "segment {base}");
    }
    assert_eq!(time_entries(&log, sealed[0].0), before);
    let len = std::fs::metadata(segment_path(dir.path(), sealed[0].0, TIME_INDEX_SUFFIX))
        .unwrap()
        .len();
    assert_eq!(
        len as usize,
        before.len() * 12,
        "rebuilt entries are on disk"
    );
    let ts = sealed[0].1;
    assert!(log.offset_for_timestamp(ts).unwrap().is_some());
}

/// A reset that cannot create its new segment leaves the log as it was, not empty.
#[test]
fn a_failed_reset_leaves_a_usable_log() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..20 {
        append(&mut log, batch(i * 3, 3, 1000, 40), 0);
    }
    let end = log.log_end_offset();
    // A directory where the new segment's file must go.
    std::fs::create_dir(segment_path(dir.path(), 500, LOG_SUFFIX)).unwrap();
    assert!(log.reset_to(500).is_err());
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(read_all(&log, 0, 1 << 20).len(), 60);
    // Resetting to the base of an existing segment empties it in place.
    let base = *log.segments.keys().next().unwrap();
    log.reset_to(base).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (base, base));
    append(&mut log, batch(0, 3, 1000, 40), 0);
    drop(log);
    std::fs::remove_dir(segment_path(dir.path(), 500, LOG_SUFFIX)).unwrap();
    let log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), base + 3);
}

#[test]
fn deleting_records_moves_the_log_start_inside_a_segment_and_drops_whole_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..100u64 {
        append(&mut log, batch(i * 3, 3, 1000, 40), 0);
    }
    let segments = log.segment_count();
    let second = log.segments.keys().nth(1).copied().unwrap();
    let third = log.segments.keys().nth(2).copied().unwrap();
    // Inside the second segment: the first goes, the second stays but reads start at
    // the new log start.
    let cut = second + 1;
    let out = log.delete_records_below(cut).unwrap();
    assert_eq!(out.segments, 1);
    assert_eq!(log.segment_count(), segments - 1);
    assert_eq!(log.log_start_offset(), cut);
    assert!(matches!(
        log.plan_read(cut - 1, i64::MAX),
        Err(LogError::OffsetOutOfRange { log_start, .. }) if log_start == cut
    ));
    let records = read_all(&log, cut, 4096);
    assert_eq!(records.len() as i64, 300 - cut);
    assert_eq!(records[0].offset, cut);
    // Never backwards; a second call at or below changes nothing.
    assert_eq!(log.delete_records_below(5).unwrap().segments, 0);
    assert_eq!(log.log_start_offset(), cut);
    // Exactly at the next segment's base: the segment below goes.
    assert_eq!(log.delete_records_below(third).unwrap().segments, 1);
    assert_eq!(log.log_start_offset(), third);
    // Up to the log end: only the active segment remains, and the log is empty.
    let end = log.log_end_offset();
    log.delete_records_below(end).unwrap();
    assert_eq!(log.segment_count(), 1);
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (end, end));
    // Appends go on at the end.
    assert_eq!(append(&mut log, batch(0, 2, 1000, 10), 0).first_offset, end);
    assert_eq!(read_all(&log, end, 4096).len(), 2);
}

#[test]
fn a_log_that_ends_below_the_deleted_offset_starts_at_its_end_and_retention_drops_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..10u64 {
        append(&mut log, batch(i * 3, 3, 1000, 40), 0);
    }
    // A follower 30 records long learns that records below 200 are deleted.
    log.delete_records_below(200).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (30, 30));
    // It catches up past 200: sealed segments wholly below 200 go at retention.
    for i in 10..100u64 {
        append(&mut log, batch(i * 3, 3, 1000, 40), 0);
    }
    // Reads start at 200 at once; the files go at the next retention pass.
    assert_eq!(log.log_start_offset(), 200);
    assert!(log.segments.keys().nth(1).copied().unwrap() <= 200);
    assert!(log.apply_retention(0, None).unwrap().segments > 0);
    assert_eq!(log.log_start_offset(), 200);
    assert!(log.segments.keys().nth(1).copied().unwrap() > 200);
    assert!(*log.segments.keys().next().unwrap() <= 200);
}

#[test]
fn reads_of_segments_older_than_the_two_newest_are_cold() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for i in 0..100u64 {
        append(&mut log, batch(i * 3, 3, 1000, 40), 0);
    }
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    assert!(bases.len() > 4);
    for (i, base) in bases.iter().enumerate() {
        let plan = log.plan_read(*base, i64::MAX).unwrap();
        assert_eq!(
            plan.cold,
            i + 2 < bases.len(),
            "segment {i} of {}",
            bases.len()
        );
    }
    // A cold read returns the same bytes (the advice only drops cached pages).
    assert_eq!(read_all(&log, 0, 700).len(), 300);
    assert_eq!(read_all(&log, 0, 700).len(), 300);
}

/// The `.log` and `.index` files of the segment based at `base`.
fn segment_file(dir: &Path, base: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base:020}.{suffix}"))
}

/// A closed log of 100 batches of 3 records in small segments: the bases of its second
/// segment and the one after it.
/// Points every offset-index entry of the segment based at `base` but the first 3
/// bytes off (into a batch).
pub(crate) fn misplace_index_entries(dir: &Path, base: i64) {
    let path = segment_file(dir, base, "index");
    let mut index = std::fs::read(&path).unwrap();
    assert!(index.len() >= 16);
    for entry in index.chunks_exact_mut(8).skip(1) {
        let pos = u32::from_be_bytes(entry[4..8].try_into().unwrap());
        entry[4..8].copy_from_slice(&(pos + 3).to_be_bytes());
    }
    std::fs::write(&path, &index).unwrap();
}

pub(crate) fn closed_log_of_sealed_segments(dir: &Path) -> (i64, i64) {
    let mut log = open_log(dir, small_config()).unwrap();
    for i in 0..100u64 {
        append(&mut log, batch(i * 3, 3, 1000, 40), 0);
    }
    let sealed = *log.segments.keys().nth(1).unwrap();
    let next = *log.segments.keys().nth(2).unwrap();
    (sealed, next)
}

#[test]
fn a_damaged_batch_is_an_error_naming_the_file_and_its_neighbours_still_read() {
    let dir = tempfile::tempdir().unwrap();
    let (sealed, next) = closed_log_of_sealed_segments(dir.path());
    // Flip a bit in the payload of the segment's third batch.
    let path = segment_file(dir.path(), sealed, "log");
    let mut bytes = std::fs::read(&path).unwrap();
    let mut pos = 0;
    for _ in 0..2 {
        pos += batch::BatchHeader::parse(&bytes[pos..])
            .unwrap()
            .total_size();
    }
    let damaged = sealed + 6;
    bytes[pos + 70] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    let log = open_log(dir.path(), small_config()).unwrap();
    match log
        .plan_read(damaged, i64::MAX)
        .unwrap()
        .read(1 << 20, true)
    {
        Err(LogError::Corrupt { path: p, .. }) => assert_eq!(p, path),
        other => panic!("{:?}", other.map(|b| b.len())),
    }
    // A read from before it ends at the batch before it; a read after it is whole.
    let before = log
        .plan_read(sealed, i64::MAX)
        .unwrap()
        .read(1 << 20, true)
        .unwrap();
    let last = BatchIter::new(&before).last().unwrap().unwrap().0;
    assert_eq!(last.last_offset(), damaged - 1);
    assert!(
        !log.plan_read(next, i64::MAX)
            .unwrap()
            .read(1 << 20, true)
            .unwrap()
            .is_empty()
    );
}

#[test]
fn a_damaged_offset_index_is_passed_over_and_reads_stay_right() {
    let dir = tempfile::tempdir().unwrap();
    let (sealed, next) = closed_log_of_sealed_segments(dir.path());
    misplace_index_entries(dir.path(), sealed);
    let log = open_log(dir.path(), small_config()).unwrap();
    for offset in sealed..next {
        let bytes = log
            .plan_read(offset, i64::MAX)
            .unwrap()
            .read(1, true)
            .unwrap();
        let (h, _) = BatchIter::new(&bytes).next().unwrap().unwrap();
        assert!(
            h.base_offset <= offset && offset <= h.last_offset(),
            "{offset}: {h:?}"
        );
    }
    assert_eq!(read_all(&log, 0, 4096).len(), 300);
}

fn keyed_batch(keys: &[&str], ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new(ts).with_compression(batch::Compression::Zstd);
    for k in keys {
        b.push(Record::new(Some(k.as_bytes()), Some(b"value"), ts));
    }
    b.build().to_vec()
}

#[test]
fn key_filters_describe_their_sealed_segment_and_go_with_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    append(&mut log, keyed_batch(&["a", "b"], 10), 0);
    log.force_roll(0).unwrap();
    append(&mut log, keyed_batch(&["c", "c2"], 20), 0);
    log.force_roll(0).unwrap();
    append(&mut log, keyed_batch(&["d"], 30), 0);
    let sealed = log.sealed_segments_after(-1);
    assert_eq!(sealed.len(), 2);
    assert!(
        read_key_filter(&sealed[0]).is_none(),
        "built only when asked"
    );
    let f = ensure_key_filter(&sealed[0]).unwrap();
    assert!(f.may_contain(b"a") && f.may_contain(b"b"));
    assert_eq!((f.summary.base_offset, f.summary.last_offset), (0, 1));
    assert_eq!(read_key_filter(&sealed[0]), Some(f));
    let second = ensure_key_filter(&sealed[1]).unwrap();
    assert!(second.may_contain(b"c"));
    // A filter that does not describe the segment (another size) is not trusted.
    let mut other = sealed[0].clone();
    other.size_bytes += 1;
    assert!(read_key_filter(&other).is_none());

    // A filter built from a listing taken before a truncation is not installed: the
    // bytes it describes may be gone.
    let listed = log.sealed_segments_after(-1);
    std::fs::remove_file(key_filter_path(&listed[0].log_path)).unwrap();
    let stale = build_key_filter(&listed[0]).unwrap();
    let tmp = write_key_filter_tmp(&listed[0], &stale).unwrap();
    log.truncate_to(3).unwrap();
    assert!(!log.install_key_filter(&listed[0], &tmp).unwrap());
    assert!(!tmp.exists() && !key_filter_path(&listed[0].log_path).exists());
    // One taken after it is.
    let now = log.sealed_segments_after(-1);
    let tmp = write_key_filter_tmp(&now[0], &build_key_filter(&now[0]).unwrap()).unwrap();
    assert!(log.install_key_filter(&now[0], &tmp).unwrap());
    assert!(key_filter_path(&now[0].log_path).exists());
    // Truncation into the second segment made it active: its filter went.
    assert!(!key_filter_path(&sealed[1].log_path).exists());
    assert!(key_filter_path(&sealed[0].log_path).exists());
    // A reopened log's active segment keeps no filter either.
    drop(log);
    std::fs::write(key_filter_path(&sealed[1].log_path), b"stale").unwrap();
    let log = open_log(dir.path(), small_config()).unwrap();
    assert!(!key_filter_path(&sealed[1].log_path).exists());
    // Retention deleting a segment deletes its filter.
    drop(log);
    let mut log = open_log(
        dir.path(),
        LogConfig {
            retention_bytes: 1,
            ..small_config()
        },
    )
    .unwrap();
    append(&mut log, keyed_batch(&["e"], 40), 0);
    log.force_roll(0).unwrap();
    log.apply_retention(0, None).unwrap();
    assert!(!key_filter_path(&sealed[0].log_path).exists());
}
