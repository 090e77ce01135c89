//! Transactions in the log: open transactions hold the last stable offset, markers end
//! them, aborts enter the aborted index, and all of it survives reopening, a crash
//! and truncation.

use shale_records::batch::{self, BatchIter, TRANSACTIONAL_BIT};
use shale_records::control::Marker;

use super::tests::{append, batch, open_log, small_config};
use super::*;
use crate::CleanerSettings;

fn transactional(pid: i64, epoch: i16, seq: i32, n: usize) -> Vec<u8> {
    let mut b = batch(0, n, 1_000, 10);
    batch::set_attributes(&mut b, TRANSACTIONAL_BIT);
    batch::set_producer(&mut b, pid, epoch, seq);
    b
}

fn abort_at(first: i64, last: i64, stable: i64, pid: i64) -> AbortedTxn {
    AbortedTxn {
        producer_id: pid,
        first_offset: first,
        last_offset: last,
        last_stable_offset: stable,
    }
}

#[test]
fn markers_end_transactions_and_aborts_are_indexed_across_reopen_crash_and_truncation() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(
        append(&mut log, transactional(7, 0, 0, 3), 0).first_offset,
        0
    );
    append(&mut log, batch(0, 2, 1_000, 10), 0); // 3..=4, outside any transaction
    assert_eq!(log.last_stable_offset(5), 0);
    assert_eq!(
        append(&mut log, transactional(8, 2, 0, 2), 0).first_offset,
        5
    );
    let m = log.append_marker(7, 0, Marker::Abort, 1, 0, 0).unwrap();
    assert_eq!(m, (7, true));
    // The same marker again (a retry) is not written twice: its offset is the answer.
    assert_eq!(
        log.append_marker(7, 0, Marker::Abort, 1, 0, 0).unwrap(),
        (7, false)
    );
    // Producer 8's transaction (from 5) still holds the stable offset.
    assert_eq!(log.last_stable_offset(8), 5);
    let aborted = abort_at(0, 7, 5, 7);
    assert_eq!(log.aborted_between(0, 8), [aborted]);
    let m = log.append_marker(8, 2, Marker::Commit, 1, 0, 0).unwrap();
    assert_eq!(m, (8, true));
    // Its marker is not under the high watermark yet: not stable.
    assert_eq!(log.last_stable_offset(8), 5);
    assert_eq!(log.last_stable_offset(9), 9);
    assert!(log.aborted_between(8, 9).is_empty());
    assert!(log.open_transactions().is_empty());

    // Zombies: an older producer epoch, an older coordinator epoch.
    assert!(matches!(
        log.append_marker(8, 1, Marker::Abort, 1, 0, 0),
        Err(LogError::Producer(ProducerError::InvalidEpoch { .. }))
    ));
    assert!(matches!(
        log.append_marker(8, 2, Marker::Abort, 0, 0, 0),
        Err(LogError::Producer(ProducerError::CoordinatorFenced { .. }))
    ));

    // A crash (no snapshot past the start): everything is rebuilt from the batches.
    drop(log);
    let mut log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.aborted_between(0, 9), [aborted]);
    assert_eq!(log.last_stable_offset(9), 9);
    log.close(0).unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    assert_eq!(log.aborted_between(0, 9), [aborted]);
    assert!(matches!(
        log.append_marker(8, 2, Marker::Abort, 0, 0, 0),
        Err(LogError::Producer(ProducerError::CoordinatorFenced { .. }))
    ));

    // A truncation below the abort marker reopens both transactions.
    log.truncate_to(7).unwrap();
    assert!(log.aborted_between(0, 9).is_empty());
    assert_eq!(log.last_stable_offset(7), 0);
    assert_eq!(
        log.open_transactions()
            .iter()
            .map(|t| (t.0, t.2))
            .collect::<Vec<_>>(),
        [(7, 0), (8, 5)]
    );
    drop(log);
    let mut log = open_log(dir.path(), small_config()).unwrap();
    assert!(log.aborted_between(0, 9).is_empty());
    assert_eq!(log.last_stable_offset(7), 0);
    // A replicated abort marker is taken as the leader's was.
    let marker = shale_records::control::build_marker(7, 0, Marker::Abort, 3, 1_000);
    let mut bytes = marker.to_vec();
    batch::set_base_offset(&mut bytes, 7);
    batch::set_partition_leader_epoch(&mut bytes, 0);
    let headers: Vec<_> = BatchIter::new(&bytes).map(|r| r.unwrap().0).collect();
    log.append_replicated(&bytes, &headers, 0).unwrap();
    assert_eq!(log.aborted_between(0, 8), [aborted]);
    assert_eq!(log.last_stable_offset(8), 5);
}

#[test]
fn compaction_keeps_markers() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    for seq in 0..3 {
        append(&mut log, transactional(3, 0, seq, 1), 0);
        let epoch = log.log_end_offset() as i32;
        log.append_marker(3, 0, Marker::Commit, epoch, 0, 0)
            .unwrap();
    }
    // The markers share one key (their type): none may supersede another.
    let mut records = Vec::new();
    for item in BatchIter::new(&std::fs::read(dir.path().join(format!("{:020}.log", 0))).unwrap()) {
        records.push(item.unwrap().0.is_control());
    }
    assert_eq!(records, [false, true, false, true, false, true]);
    assert!(matches!(
        shale_records::compact::clean_against_map(
            &shale_records::control::build_marker(3, 0, Marker::Commit, 0, 0),
            shale_records::compact::CleanBatch {
                now_ms: 0,
                delete_retention_ms: 0,
                drop_tombstones: true,
                keep_empty: false,
                protect_from: i64::MAX,
            },
            &std::collections::HashMap::from([(
                shale_records::compact::key_hash(&[0, 0, 0, 1]),
                i64::MAX
            )]),
        )
        .unwrap()
        .cleaned,
        shale_records::compact::Cleaned::Unchanged
    ));
}

/// A keyed batch (one record per key, value `v`), transactional for `pid` if given.
fn keyed(keys: &[u8], v: u8, txn: Option<(i64, i32)>) -> Vec<u8> {
    let mut b = shale_records::record::BatchBuilder::new(1_000);
    for k in keys {
        b.push(shale_records::record::Record::new(
            Some(&[*k]),
            Some(&[v]),
            1_000,
        ));
    }
    let mut bytes = b.build().to_vec();
    if let Some((pid, seq)) = txn {
        batch::set_attributes(&mut bytes, TRANSACTIONAL_BIT);
        batch::set_producer(&mut bytes, pid, 0, seq);
    }
    bytes
}

#[test]
fn compaction_never_lets_an_aborted_or_open_transaction_supersede_committed_records() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    append(&mut log, keyed(&[1, 2, 3], 10, None), 0); // 0..=2 committed
    append(&mut log, keyed(&[1], 20, Some((5, 0))), 0); // 3: aborted below
    log.append_marker(5, 0, Marker::Abort, 1, 0, 0).unwrap(); // 4
    append(&mut log, keyed(&[3], 50, None), 0); // 5: supersedes key 3
    append(&mut log, keyed(&[2], 30, Some((6, 0))), 0); // 6: still open
    append(&mut log, keyed(&[9], 40, None), 0); // 7
    log.force_roll(0).unwrap();
    clean_all(&mut log, 2_000);
    let values = stored_values(dir.path());
    // The cleaning ran (key 3's old value went); key 1's aborted value went, its
    // committed one stays, and key 2's stays beside the open transaction's.
    assert_eq!(values[&3], [50], "{values:?}");
    assert_eq!(values[&1], [10], "{values:?}");
    assert!(values[&2].contains(&10), "{values:?}");
}

/// A cleaning of the sealed segments up to the log end (`delete.retention.ms` 1 s).
fn clean_all(log: &mut PartitionLog, now: i64) {
    let settings = CleanerSettings {
        dedupe_buffer_bytes: 1 << 20,
        delete_retention_ms: 1_000,
        min_compaction_lag_ms: 0,
        drop_tombstones: true,
        drop_txn_markers_below: i64::MAX,
    };
    let end = log.log_end_offset();
    let job = log.prepare_clean(end, now, &settings).unwrap();
    let staged = job
        .expect("dirty segments")
        .run(&settings, now, &mut |_| {});
    log.install_clean(staged.unwrap(), now).unwrap();
}

/// Every stored batch: (base offset, is a marker, delete horizon).
fn stored_batches(dir: &std::path::Path) -> Vec<(i64, bool, Option<i64>)> {
    let mut out = Vec::new();
    for_each_stored(dir, |h, _| {
        out.push((h.base_offset, h.is_control(), h.delete_horizon()))
    });
    out
}

/// Each key's stored values, in offset order (markers left out).
fn stored_values(dir: &std::path::Path) -> std::collections::BTreeMap<u8, Vec<u8>> {
    let mut values: std::collections::BTreeMap<u8, Vec<u8>> = Default::default();
    for_each_stored(dir, |h, bytes| {
        if h.is_control() {
            return;
        }
        for r in shale_records::record::decode_records(&bytes).unwrap() {
            values
                .entry(r.key.unwrap()[0])
                .or_default()
                .push(r.value.unwrap()[0]);
        }
    });
    values
}

fn for_each_stored(dir: &std::path::Path, mut f: impl FnMut(&batch::BatchHeader, bytes::Bytes)) {
    let paths = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "log"))
        .collect::<std::collections::BTreeSet<_>>();
    for path in paths {
        let data = bytes::Bytes::from(std::fs::read(path).unwrap());
        for item in BatchIter::new(&data) {
            let (h, range) = item.unwrap();
            f(&h, data.slice(range));
        }
    }
}

#[test]
fn compaction_removes_aborted_records_then_markers_left_alone_after_the_retention() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1 << 20,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config.clone()).unwrap();
    append(&mut log, keyed(&[1], 10, None), 0); // 0
    append(&mut log, keyed(&[1], 20, Some((5, 0))), 0); // 1: aborted below
    append(&mut log, keyed(&[2], 30, Some((6, 0))), 0); // 2: committed below
    // The coordinator aborts producer 5's transaction at a newer epoch (a timeout):
    // its batches leave the producer state, so nothing keeps them.
    log.append_marker(5, 1, Marker::Abort, 1, 0, 0).unwrap(); // 3
    log.append_marker(6, 0, Marker::Commit, 1, 0, 0).unwrap(); // 4
    append(&mut log, keyed(&[9], 40, None), 0); // 5
    let clean = |log: &mut PartitionLog, value: u8, now: i64| {
        append(log, keyed(&[9], value, None), 0);
        log.force_roll(0).unwrap();
        clean_all(log, now);
    };
    let abort = abort_at(1, 3, 2, 5);
    assert_eq!(log.aborted_between(0, 7), [abort]);

    // First cleaning: the aborted record goes; its marker stays, since the cleaning
    // read a batch of its transaction.
    clean(&mut log, 41, 2_000);
    let values = stored_values(dir.path());
    assert_eq!(values[&1], [10], "{values:?}");
    assert_eq!(values[&2], [30], "{values:?}");
    let markers = |dir: &std::path::Path| -> Vec<(i64, Option<i64>)> {
        (stored_batches(dir).into_iter())
            .filter(|b| b.1)
            .map(|(o, _, horizon)| (o, horizon))
            .collect()
    };
    assert_eq!(markers(dir.path()), [(3, None), (4, None)]);
    assert_eq!(log.aborted_between(0, 7), [abort]);

    // Second: the abort marker is alone now, and gets its delete horizon. The commit
    // marker keeps its transaction's record.
    clean(&mut log, 42, 3_000);
    assert_eq!(markers(dir.path()), [(3, Some(4_000)), (4, None)]);
    assert_eq!(log.aborted_between(0, 7), [abort]);

    // Past the horizon, it goes, and so does its aborted-index entry, for good.
    clean(&mut log, 43, 4_000);
    assert_eq!(markers(dir.path()), [(4, None)]);
    assert!(log.aborted_between(0, 10).is_empty());
    let end = log.log_end_offset();
    drop(log);
    let log = open_log(dir.path(), config).unwrap();
    assert!(log.aborted_between(0, end).is_empty());
    assert_eq!(log.last_stable_offset(end), end);
    let values = stored_values(dir.path());
    assert_eq!(
        (values[&1].as_slice(), values[&2].as_slice()),
        (&[10][..], &[30][..])
    );
}

#[test]
fn a_truncation_after_a_marker_went_does_not_reopen_its_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig {
        segment_bytes: 1 << 20,
        ..small_config()
    };
    let mut log = open_log(dir.path(), config).unwrap();
    append(&mut log, keyed(&[1], 10, Some((5, 0))), 0); // 0: aborted below
    log.force_roll(0).unwrap(); // the snapshot at 1 holds the transaction open
    log.append_marker(5, 1, Marker::Abort, 1, 0, 0).unwrap(); // 1
    append(&mut log, keyed(&[7], 30, None), 0); // 2
    append(&mut log, keyed(&[9], 40, None), 0); // 3
    for (value, now) in [(41, 2_000), (42, 3_000), (43, 4_000)] {
        append(&mut log, keyed(&[9], value, None), 0);
        log.force_roll(0).unwrap();
        clean_all(&mut log, now);
    }
    assert!(
        stored_batches(dir.path()).iter().all(|b| !b.1),
        "the marker went"
    );
    // An unclean election truncates this replica to 3, past where the marker was: the
    // producer state is rebuilt from a snapshot at or below 3, or from the log start.
    log.truncate_to(3).unwrap();
    assert_eq!(log.log_end_offset(), 3);
    assert!(log.open_transactions().is_empty());
    assert_eq!(log.last_stable_offset(3), 3);
}

#[test]
fn a_log_restarted_at_a_segment_base_takes_the_producer_state_copied_with_the_segment_before() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    append(&mut log, batch(0, 2, 1_000, 10), 0); // 0..=1
    append(&mut log, transactional(7, 0, 0, 3), 0); // 2..=4, open across the roll
    log.roll(5, 0).unwrap();
    let snapshot = log
        .producer_snapshot_at(5)
        .expect("a snapshot at the new segment's base");
    assert_eq!(log.producer_snapshot_at(4), None);

    // A new replica's log, restarted at the leader's local log start (5).
    let other = tempfile::tempdir().unwrap();
    let mut new = open_log(other.path(), small_config()).unwrap();
    new.reset_to(5).unwrap();
    assert!(!new.install_producer_snapshot(5, b"not a snapshot").unwrap());
    assert!(new.install_producer_snapshot(5, &snapshot).unwrap());
    // The transaction is open from 2, below this log: nothing here is stable.
    assert_eq!(new.open_txn(7), Some((2, 0)));
    assert_eq!(new.last_stable_offset(5), 2);
    // Its next batch continues the sequence; its abort is indexed from its first offset.
    append(&mut new, transactional(7, 0, 3, 2), 0); // 5..=6
    new.append_marker(7, 0, Marker::Abort, 1, 0, 0).unwrap(); // 7
    assert_eq!(new.aborted_between(0, 8), [abort_at(2, 7, 8, 7)]);
    assert_eq!(new.last_stable_offset(8), 8);
    // It survives reopening; a log no longer empty takes no snapshot.
    drop(new);
    let mut new = open_log(other.path(), small_config()).unwrap();
    assert_eq!(new.aborted_between(0, 8), [abort_at(2, 7, 8, 7)]);
    assert!(!new.install_producer_snapshot(8, &snapshot).unwrap());
}

#[test]
fn a_roll_in_the_middle_of_a_write_snapshots_the_batches_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open_log(dir.path(), small_config()).unwrap();
    // One write (a follower's, say): a transaction's batch, then one too large to fit
    // beside it, which opens a new segment at 3.
    let mut bytes = transactional(7, 0, 0, 3);
    bytes.extend(batch(0, 30, 1_000, 100));
    append(&mut log, bytes, 0);
    let bases: Vec<i64> = log.segments.keys().copied().collect();
    assert_eq!(bases, [0, 3]);
    let snapshot = log.producer_snapshot_at(3).expect("a snapshot at 3");
    let other = tempfile::tempdir().unwrap();
    let mut new = open_log(other.path(), small_config()).unwrap();
    new.reset_to(3).unwrap();
    assert!(new.install_producer_snapshot(3, &snapshot).unwrap());
    assert_eq!(new.open_txn(7), Some((0, 0)));
    // Each batch recorded once: the transaction is still open from 0 here.
    assert_eq!(log.open_txn(7), Some((0, 0)));
}
