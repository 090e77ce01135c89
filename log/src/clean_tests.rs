//! The cleaner against a model: random streams of keyed records and tombstones,
//! cleanings at random points (bounded by a random high watermark, with a small offset
//! map), restarts, and the checks a compacted log must pass after each cleaning.

use std::collections::{BTreeMap, HashMap};

use bytes::Bytes;
use proptest::prelude::*;
use shale_records::batch::{BatchHeader, BatchIter, Compression};
use shale_records::record::{BatchBuilder, Record, decode_records};

use super::*;
use crate::LogConfig;

const RETENTION: i64 = 1_000;

#[derive(Debug, Clone)]
enum Op {
    /// Records of one batch: (key, value; `None` is a tombstone), with a codec.
    Append(Vec<(u8, Option<u8>)>, bool),
    /// A cleaning bounded by this share (in percent) of the log end, with a map of
    /// this many entries.
    Clean(u8, u8),
    Reopen,
    /// The clock moves on this many ms.
    Wait(u16),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (proptest::collection::vec((0u8..12, proptest::option::weighted(0.8, any::<u8>())), 1..6), any::<bool>())
            .prop_map(|(r, z)| Op::Append(r, z)),
        2 => (0u8..=100, 2u8..40).prop_map(|(h, m)| Op::Clean(h, m)),
        1 => Just(Op::Reopen),
        1 => (0u16..1500).prop_map(Op::Wait),
    ]
}

/// Every stored record, with its batch's delete horizon, read as a consumer would
/// (fetch after fetch from the log start, each from where the last ended).
fn stored(log: &PartitionLog) -> Vec<(Record, Option<i64>)> {
    let mut out = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let bytes = log
            .plan_read(offset, i64::MAX)
            .unwrap()
            .read(512, true)
            .unwrap();
        assert!(!bytes.is_empty(), "a fetch at {offset} returned nothing");
        for item in BatchIter::new(&bytes) {
            let (h, range) = item.unwrap();
            h.validate_stored(&bytes[range.clone()]).unwrap();
            assert!(h.last_offset() >= offset, "a batch behind the fetch offset");
            for r in decode_records(&bytes.slice(range)).unwrap() {
                if r.offset >= offset {
                    out.push((r, h.delete_horizon()));
                }
            }
            offset = h.last_offset() + 1;
        }
    }
    out
}

fn append(
    log: &mut PartitionLog,
    recs: &[(u8, Option<u8>)],
    zstd: bool,
    now: i64,
    next: &mut i64,
) -> Vec<(i64, u8, Option<u8>)> {
    let codec = if zstd {
        Compression::Zstd
    } else {
        Compression::None
    };
    let mut b = BatchBuilder::new(now).with_compression(codec);
    let mut out = Vec::new();
    for (k, v) in recs {
        let key = [b'k', *k];
        b.push(Record::new(
            Some(&key),
            v.map(|v| [v; 8]).as_ref().map(|v| &v[..]),
            now,
        ));
        out.push((*next, *k, *v));
        *next += 1;
    }
    let mut bytes = b.build().to_vec();
    let mut headers: Vec<BatchHeader> = BatchIter::new(&bytes).map(|r| r.unwrap().0).collect();
    log.append(&mut bytes, &mut headers, 0, now).unwrap();
    out
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 700,
        index_interval_bytes: 128,
        retention_ms: -1,
        ..LogConfig::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn a_cleaned_log_matches_the_model(ops in proptest::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let files = FileCache::new(8);
        let mut now = 10_000i64;
        let mut log = PartitionLog::open(dir.path(), config(), now, files.clone()).unwrap();
        // Everything ever appended: offset → (key, value).
        let mut appended: BTreeMap<i64, (u8, Option<u8>)> = BTreeMap::new();
        let mut next = 0i64;
        for op in ops {
            match op {
                Op::Append(recs, zstd) => {
                    for (o, k, v) in append(&mut log, &recs, zstd, now, &mut next) {
                        appended.insert(o, (k, v));
                    }
                }
                Op::Wait(ms) => now += i64::from(ms),
                Op::Reopen => {
                    log.close(now).unwrap();
                    drop(log);
                    log = PartitionLog::open(dir.path(), config(), now, files.clone()).unwrap();
                }
                Op::Clean(share, entries) => {
                    let hw = next * i64::from(share) / 100;
                    let settings = CleanerSettings {
                        dedupe_buffer_bytes: u64::from(entries) * MAP_ENTRY_BYTES,
                        delete_retention_ms: RETENTION,
                        min_compaction_lag_ms: 0,
            drop_tombstones: true,
            drop_txn_markers_below: i64::MAX,
                    };
                    let before = stored(&log);
                    let Some(job) = log.prepare_clean(hw, now, &settings).unwrap() else {
                        continue;
                    };
                    let staged = job.run(&settings, now, &mut |_| {}).unwrap();
                    log.install_clean(staged, now).unwrap();
                    let after = stored(&log);
                    check(&appended, &before, &after, hw, log.cleaner_checkpoint().first_dirty, now);
                }
            }
        }
        // Whatever happened, a reopened log reads the same.
        let last = stored(&log);
        log.close(now).unwrap();
        drop(log);
        let log = PartitionLog::open(dir.path(), config(), now, files).unwrap();
        prop_assert_eq!(stored(&log).len(), last.len());
        prop_assert_eq!(log.log_end_offset(), next);
    }
}

fn check(
    appended: &BTreeMap<i64, (u8, Option<u8>)>,
    before: &[(Record, Option<i64>)],
    after: &[(Record, Option<i64>)],
    hw: i64,
    first_dirty: i64,
    now: i64,
) {
    let key_of = |r: &Record| r.key.as_ref().unwrap()[1];
    // Offsets increase, and every stored record is the one appended at its offset.
    for w in after.windows(2) {
        assert!(w[0].0.offset < w[1].0.offset, "offsets must increase");
    }
    for (r, _) in after {
        let (k, v) = appended[&r.offset];
        assert_eq!(key_of(r), k);
        assert_eq!(r.value, v.map(|v| Bytes::from(vec![v; 8])));
    }
    // Nothing at or above the high watermark moved.
    let above = |s: &[(Record, Option<i64>)]| -> Vec<i64> {
        s.iter()
            .filter(|(r, _)| r.offset >= hw)
            .map(|(r, _)| r.offset)
            .collect()
    };
    assert_eq!(
        above(before),
        above(after),
        "records above the high watermark changed"
    );
    assert!(first_dirty <= hw);
    // The latest record of every key is there, unless it is a tombstone gone past its
    // horizon: then no record of its key is left.
    let mut latest: HashMap<u8, (i64, Option<u8>)> = HashMap::new();
    for (o, (k, v)) in appended {
        latest.insert(*k, (*o, *v));
    }
    let present: HashMap<i64, &Record> = after.iter().map(|(r, _)| (r.offset, r)).collect();
    for (k, (o, v)) in &latest {
        if v.is_some() {
            assert!(
                present.contains_key(o),
                "latest value of key {k} at {o} is gone"
            );
        } else if !present.contains_key(o) {
            assert!(
                !after.iter().any(|(r, _)| key_of(r) == *k),
                "key {k}: its tombstone is gone but an older record is not"
            );
        }
    }
    // Below the dirty section each key appears at most once.
    let mut seen = HashMap::new();
    for (r, _) in after.iter().filter(|(r, _)| r.offset < first_dirty) {
        if let Some(prev) = seen.insert(key_of(r), r.offset) {
            panic!(
                "key {} twice in the cleaned section: {prev} and {}",
                key_of(r),
                r.offset
            );
        }
    }
    // A tombstone in the cleaned section has a horizon this cleaning has not reached,
    // at most delete.retention.ms away: older ones were dropped.
    for (r, horizon) in after
        .iter()
        .filter(|(r, _)| r.offset < first_dirty && r.value.is_none())
    {
        let h = horizon.expect("a kept tombstone's batch has a delete horizon");
        assert!(
            h > now && h <= now + RETENTION,
            "tombstone at {} with horizon {h} at {now}",
            r.offset
        );
    }
}

/// A cleaning with room for every key.
const SETTINGS: CleanerSettings = CleanerSettings {
    dedupe_buffer_bytes: 1 << 20,
    delete_retention_ms: RETENTION,
    min_compaction_lag_ms: 0,
    drop_tombstones: true,
    drop_txn_markers_below: i64::MAX,
};

/// A log of 40 batches of two updates to 5 keys, over several segments.
fn forty_updates(dir: &Path, files: &Arc<FileCache>) -> (PartitionLog, i64) {
    let mut log = PartitionLog::open(dir, config(), 0, files.clone()).unwrap();
    let mut next = 0;
    for i in 0..40u8 {
        let recs = [(i % 3, Some(i)), (i % 5, Some(i))];
        append(&mut log, &recs, false, 1_000, &mut next);
    }
    (log, next)
}

#[test]
fn a_crash_before_the_swap_keeps_the_old_segments_and_after_it_the_new() {
    for after_swap in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let files = FileCache::new(8);
        let (mut log, next) = forty_updates(dir.path(), &files);
        let settings = SETTINGS;
        let before = stored(&log);
        let job = log.prepare_clean(next, 2_000, &settings).unwrap().unwrap();
        let staged = job.run(&settings, 2_000, &mut |_| {}).unwrap();
        let group = &staged.groups[0];
        let (base, end) = (group.base, group.end);
        log.close(2_000).unwrap();
        drop(log);
        if after_swap {
            // The crash came right after the staged log became the swap file.
            let [staged_log, _, _] = Segment::staged_paths(dir.path(), base);
            std::fs::rename(staged_log.0, swap_path(dir.path(), base, end)).unwrap();
        }
        let log = PartitionLog::open(dir.path(), config(), 2_000, files).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names
                .iter()
                .any(|n| n.ends_with(".cleaned") || n.ends_with(".swap")),
            "{names:?}"
        );
        let got = stored(&log);
        if after_swap {
            assert!(got.len() < before.len(), "the swap was completed");
            let keys: Vec<u8> = got
                .iter()
                .filter(|(r, _)| r.offset < end)
                .map(|(r, _)| r.key.as_ref().unwrap()[1])
                .collect();
            let mut dedup = keys.clone();
            dedup.sort_unstable();
            dedup.dedup();
            assert_eq!(
                keys.len(),
                dedup.len(),
                "the cleaned group holds each key once"
            );
        } else {
            assert_eq!(got.len(), before.len(), "the old segments stay");
        }
        assert_eq!(log.log_end_offset(), next);
    }
}

#[test]
fn idempotent_producers_last_batches_survive_cleaning_and_a_retry_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PartitionLog::open(dir.path(), config(), 0, FileCache::new(8)).unwrap();
    let mut sent = Vec::new();
    for seq in 0..30 {
        let mut b = BatchBuilder::new(1_000);
        b.push(Record::new(Some(b"same"), Some(&[seq as u8; 40]), 1_000));
        let mut bytes = b.build().to_vec();
        shale_records::batch::set_producer(&mut bytes, 9, 0, seq);
        sent.push(bytes.clone());
        let mut headers: Vec<BatchHeader> = BatchIter::new(&bytes).map(|r| r.unwrap().0).collect();
        log.append(&mut bytes, &mut headers, 0, 1_000).unwrap();
    }
    log.force_roll(1_000).unwrap();
    let settings = CleanerSettings {
        dedupe_buffer_bytes: 1 << 20,
        delete_retention_ms: RETENTION,
        min_compaction_lag_ms: 0,
        drop_tombstones: true,
        drop_txn_markers_below: i64::MAX,
    };
    let job = log.prepare_clean(30, 2_000, &settings).unwrap().unwrap();
    let staged = job.run(&settings, 2_000, &mut |_| {}).unwrap();
    assert!(staged.stats.records_removed >= 20, "{:?}", staged.stats);
    log.install_clean(staged, 2_000).unwrap();
    log.close(2_000).unwrap();
    drop(log);
    // A restart rebuilds the producer's state from the cleaned log: a retry of its
    // last batch is still recognised.
    std::fs::read_dir(dir.path()).unwrap().for_each(|e| {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    });
    let mut log = PartitionLog::open(dir.path(), config(), 3_000, FileCache::new(8)).unwrap();
    let mut retry = sent[29].clone();
    let mut headers: Vec<BatchHeader> = BatchIter::new(&retry).map(|r| r.unwrap().0).collect();
    let info = log.append(&mut retry, &mut headers, 0, 3_000).unwrap();
    assert!(info.duplicate);
    assert_eq!(info.first_offset, 29);
    let values: Vec<_> = stored(&log).into_iter().map(|(r, _)| r.offset).collect();
    assert_eq!(values.last(), Some(&29));
}

#[test]
fn a_group_retention_took_from_leaves_the_dirty_section_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let (mut log, next) = forty_updates(dir.path(), &FileCache::new(8));
    let settings = SETTINGS;
    // Cleaned segments may be large: the cleaning merges the small ones in one group.
    log.set_config(LogConfig {
        segment_bytes: 1 << 20,
        ..config()
    });
    let job = log.prepare_clean(next, 2_000, &settings).unwrap().unwrap();
    let staged = job.run(&settings, 2_000, &mut |_| {}).unwrap();
    // Retention (DeleteRecords here) drops the group's first segment meanwhile.
    let second = *log.segments.keys().nth(1).unwrap();
    log.delete_records_below(second).unwrap();
    log.install_clean(staged, 2_000).unwrap();
    assert_eq!(
        log.cleaner_checkpoint().first_dirty,
        second,
        "the group was dropped and the dirty section did not move"
    );
    assert!(!std::fs::read_dir(dir.path()).unwrap().any(|e| {
        let n = e.unwrap().file_name().to_string_lossy().into_owned();
        n.ends_with(".cleaned") || n.ends_with(".swap")
    }));
}
