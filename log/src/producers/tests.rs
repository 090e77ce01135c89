use super::snapshot::{list_snapshots, snapshot_path};
use super::*;

fn header(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
    BatchHeader {
        base_offset,
        batch_length: 0,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: 1,
        max_timestamp: 1,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        record_count: count,
    }
}

#[test]
fn sequences_duplicates_and_epochs() {
    let mut s = ProducerStates::default();
    let b0 = header(7, 0, 0, 3, 100);
    assert_eq!(s.check(&[b0]), Ok(SequenceCheck::Append));
    s.record(&[b0]);
    // The same batch again is a duplicate, answered with its first offsets.
    let again = header(7, 0, 0, 3, -1);
    assert_eq!(
        s.check(&[again]),
        Ok(SequenceCheck::Written {
            count: 1,
            base_offset: 100,
            last_offset: 102
        })
    );
    // Leading repeats and what follows them (a retry of a request written in
    // part) are told apart; a repeat after a new batch is refused.
    assert_eq!(
        s.check(&[again, header(7, 0, 3, 2, -1)]),
        Ok(SequenceCheck::Written {
            count: 1,
            base_offset: 100,
            last_offset: 102
        })
    );
    assert!(matches!(
        s.check(&[header(7, 0, 3, 2, -1), again]),
        Err(ProducerError::DuplicateInRequest { .. })
    ));
    // A gap is refused; the next sequence is taken.
    assert!(matches!(
        s.check(&[header(7, 0, 4, 1, -1)]),
        Err(ProducerError::OutOfOrderSequence {
            expected: 3,
            found: 4,
            ..
        })
    ));
    assert_eq!(
        s.check(&[header(7, 0, 3, 1, -1)]),
        Ok(SequenceCheck::Append)
    );
    // Several batches in one request are checked against each other.
    assert_eq!(
        s.check(&[header(7, 0, 3, 1, -1), header(7, 0, 4, 2, -1)]),
        Ok(SequenceCheck::Append)
    );
    assert!(
        s.check(&[header(7, 0, 3, 1, -1), header(7, 0, 5, 2, -1)])
            .is_err()
    );
    // A new epoch starts at 0; an older epoch is fenced.
    assert!(s.check(&[header(7, 1, 3, 1, -1)]).is_err());
    let e1 = header(7, 1, 0, 1, 103);
    assert_eq!(s.check(&[e1]), Ok(SequenceCheck::Append));
    s.record(&[e1]);
    assert!(matches!(
        s.check(&[header(7, 0, 3, 1, -1)]),
        Err(ProducerError::InvalidEpoch { current: 1, .. })
    ));
    // An unknown producer must start at 0; producer id -1 is not checked at all.
    assert!(matches!(
        s.check(&[header(8, 0, 5, 1, -1)]),
        Err(ProducerError::UnknownProducer { .. })
    ));
    assert_eq!(
        s.check(&[header(-1, -1, -1, 1, -1)]),
        Ok(SequenceCheck::Append)
    );
}

#[test]
fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
    let mut s = ProducerStates::default();
    for i in 0..7 {
        s.record(&[header(1, 0, i, 1, i64::from(i))]);
    }
    assert!(matches!(
        s.check(&[header(1, 0, 2, 1, -1)]),
        Ok(SequenceCheck::Written { count: 1, .. })
    ));
    assert!(s.check(&[header(1, 0, 1, 1, -1)]).is_err());
    let mut w = ProducerStates::default();
    w.record(&[header(2, 0, 0, 1, 0)]);
    w.producers.get_mut(&2).unwrap().batches[0].last_seq = i32::MAX - 1;
    assert_eq!(
        w.check(&[header(2, 0, i32::MAX, 3, -1)]),
        Ok(SequenceCheck::Append)
    );
    assert_eq!(last_seq(&header(2, 0, i32::MAX, 3, -1)), 1);
}

#[test]
fn snapshots_round_trip_and_bad_ones_are_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = ProducerStates::default();
    s.record(&[header(1, 0, 0, 2, 0), header(2, 3, 0, 1, 2)]);
    s.write_snapshot(dir.path(), 3, i64::MAX).unwrap();
    s.record(&[header(1, 0, 2, 1, 3)]);
    s.write_snapshot(dir.path(), 4, i64::MAX).unwrap();
    let (at, loaded) = ProducerStates::load_snapshot(dir.path(), 10)
        .unwrap()
        .unwrap();
    assert_eq!((at, &loaded), (4, &s));
    // A torn newest snapshot falls back to the previous one.
    std::fs::write(snapshot_path(dir.path(), 4), b"SHPS\0\0").unwrap();
    let (at, _) = ProducerStates::load_snapshot(dir.path(), 10)
        .unwrap()
        .unwrap();
    assert_eq!(at, 3);
    ProducerStates::delete_snapshots_above(dir.path(), 3).unwrap();
    assert_eq!(list_snapshots(dir.path()).unwrap(), [3]);
    for o in 5..10 {
        s.write_snapshot(dir.path(), o, i64::MAX).unwrap();
    }
    assert_eq!(list_snapshots(dir.path()).unwrap(), [7, 8, 9]);
    // Those at or above the log start stay, beside the newest few.
    for o in 10..15 {
        s.write_snapshot(dir.path(), o, 9).unwrap();
    }
    assert_eq!(list_snapshots(dir.path()).unwrap(), [9, 10, 11, 12, 13, 14]);
    // Idle producers expire.
    s.expire(1 + PRODUCER_EXPIRATION_MS + 1);
    assert_eq!(s.len(), 0);
}

#[test]
fn open_transactions_and_marker_epochs_survive_a_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = ProducerStates::default();
    let mut txn = header(4, 2, 0, 3, 10);
    txn.attributes = shale_records::batch::TRANSACTIONAL_BIT;
    s.record(&[header(1, 0, 0, 1, 9), txn]);
    let mut marker = header(4, 2, -1, 1, 13);
    marker.attributes = shale_records::batch::TRANSACTIONAL_BIT;
    assert_eq!(s.first_open_txn_offset(), Some(10));
    s.write_snapshot(dir.path(), 13, i64::MAX).unwrap();
    let (_, loaded) = ProducerStates::load_snapshot(dir.path(), 13)
        .unwrap()
        .unwrap();
    assert_eq!(loaded, s, "the open transaction and its index come back");
    let done = s.end_txn(&marker, Marker::Abort, 5).unwrap();
    assert_eq!(
        (done.first_offset, done.last_offset, done.aborted),
        (10, 13, true)
    );
    assert_eq!(
        (s.first_open_txn_offset(), s.last_marker_epoch(4)),
        (None, 5)
    );
    s.write_snapshot(dir.path(), 14, i64::MAX).unwrap();
    let (_, loaded) = ProducerStates::load_snapshot(dir.path(), 14)
        .unwrap()
        .unwrap();
    assert_eq!(loaded.last_marker_epoch(4), 5);
    // A producer with a transaction open is not forgotten when idle.
    let mut idle = ProducerStates::default();
    idle.record(&[txn]);
    idle.expire(i64::MAX / 2);
    assert_eq!(idle.open_txn(4), Some((10, 2)));
}
