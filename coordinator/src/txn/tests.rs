use super::*;

const T: Uuid = Uuid::from_u128(7);

fn fresh() -> TxnRecord {
    match init_producer(None, "app", 60_000, (-1, -1), 100, 1).unwrap() {
        Init::Ready(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_transaction_commits_and_the_next_one_starts_afresh() {
    let r = fresh();
    assert_eq!(
        (r.producer_id, r.producer_epoch, r.state),
        (100, 0, TxnState::Empty)
    );
    let r = add_partitions(&r, 100, 0, &[(T, 1), (T, 0)], 5)
        .unwrap()
        .unwrap();
    assert_eq!((r.state, r.start_ms), (TxnState::Ongoing, 5));
    // Adding what is in already writes nothing; a new one is added in order.
    assert_eq!(add_partitions(&r, 100, 0, &[(T, 0)], 6).unwrap(), None);
    let r = add_partitions(&r, 100, 0, &[(T, 0), (T, 2)], 6)
        .unwrap()
        .unwrap();
    assert_eq!(r.partitions, [(T, 0), (T, 1), (T, 2)]);
    let r = add_group(&r, 100, 0, "g", 7).unwrap().unwrap();
    check_offsets(&r, 100, 0, "g").unwrap();
    assert_eq!(
        check_offsets(&r, 100, 0, "other").unwrap_err().code(),
        ErrorCode::InvalidTxnState
    );
    let End::Prepare(p) = end_txn(&r, 100, 0, true, 8).unwrap() else {
        panic!()
    };
    assert_eq!(
        (p.state, p.marker_epoch, p.producer_epoch),
        (TxnState::PrepareCommit, 1, 0)
    );
    // While markers are written: the same end waits, another is refused.
    assert_eq!(end_txn(&p, 100, 0, true, 9).unwrap(), End::Pending);
    assert_eq!(
        end_txn(&p, 100, 0, false, 9).unwrap_err().code(),
        ErrorCode::ConcurrentTransactions
    );
    assert_eq!(
        add_partitions(&p, 100, 0, &[(T, 3)], 9).unwrap_err().code(),
        ErrorCode::ConcurrentTransactions
    );
    let c = complete(&p, 10).unwrap();
    assert_eq!((c.state, c.start_ms), (TxnState::CompleteCommit, -1));
    assert_eq!(end_txn(&c, 100, 0, true, 11).unwrap(), End::Done);
    // An abort after the commit (its answer lost) must not be told it aborted.
    assert_eq!(
        end_txn(&c, 100, 0, false, 11).unwrap_err().code(),
        ErrorCode::InvalidTxnState
    );
    let next = add_partitions(&c, 100, 0, &[(T, 3)], 12).unwrap().unwrap();
    assert_eq!(
        (next.partitions.as_slice(), next.groups.len()),
        (&[(T, 3)][..], 0)
    );
    let End::Prepare(p2) = end_txn(&next, 100, 0, false, 13).unwrap() else {
        panic!()
    };
    assert_eq!(
        p2.marker_epoch, 2,
        "every ended transaction raises the marker epoch"
    );
}

#[test]
fn zombies_are_fenced_and_a_new_producer_aborts_the_open_transaction() {
    let r = fresh();
    let r = add_partitions(&r, 100, 0, &[(T, 0)], 5).unwrap().unwrap();
    // A second instance starts: the open transaction aborts under epoch 1 first.
    let Init::AbortFirst(a) = init_producer(Some(&r), "app", 60_000, (-1, -1), 999, 6).unwrap()
    else {
        panic!()
    };
    assert_eq!((a.state, a.producer_epoch), (TxnState::PrepareAbort, 1));
    assert_eq!(
        init_producer(Some(&a), "app", 60_000, (-1, -1), 999, 7)
            .unwrap_err()
            .code(),
        ErrorCode::ConcurrentTransactions
    );
    let done = complete(&a, 8).unwrap();
    let Init::Ready(n) = init_producer(Some(&done), "app", 60_000, (-1, -1), 999, 9).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (n.producer_id, n.producer_epoch, n.state),
        (100, 2, TxnState::Empty)
    );
    // The old instance, at epoch 0, is fenced everywhere.
    for code in [
        add_partitions(&n, 100, 0, &[(T, 0)], 10)
            .unwrap_err()
            .code(),
        end_txn(&n, 100, 0, true, 10).unwrap_err().code(),
        init_producer(Some(&n), "app", 60_000, (100, 0), 999, 10)
            .unwrap_err()
            .code(),
    ] {
        assert_eq!(code, ErrorCode::ProducerFenced);
    }
    assert_eq!(
        add_partitions(&n, 5, 2, &[(T, 0)], 10).unwrap_err().code(),
        ErrorCode::InvalidProducerIdMapping
    );
}

#[test]
fn an_expired_transaction_aborts_under_a_raised_epoch_and_its_producer_may_resume() {
    let r = add_partitions(&fresh(), 100, 0, &[(T, 0)], 1_000)
        .unwrap()
        .unwrap();
    assert_eq!(expire(&r, 61_000), None);
    let a = expire(&r, 61_001).unwrap();
    assert_eq!((a.state, a.producer_epoch), (TxnState::PrepareAbort, 1));
    let done = complete(&a, 61_002).unwrap();
    assert_eq!(expire(&done, 999_999), None);
    // Only an id with nothing open or being decided expires, once idle long enough.
    assert!(!id_expired(&r, i64::MAX, 1_000), "an open transaction");
    assert!(!id_expired(&a, i64::MAX, 1_000), "one being decided");
    assert!(!id_expired(&done, 62_002, 1_000));
    assert!(id_expired(&done, 62_003, 1_000));
    assert!(id_expired(&fresh(), 1_002, 1_000));
    // The producer learns it was fenced, and restarts its transactions (KIP-360).
    assert_eq!(
        end_txn(&done, 100, 0, true, 61_003).unwrap_err().code(),
        ErrorCode::ProducerFenced
    );
    let Init::Ready(n) = init_producer(Some(&done), "app", 60_000, (100, 0), 1, 61_004).unwrap()
    else {
        panic!()
    };
    assert_eq!(n.producer_epoch, 2);
}

#[test]
fn epochs_run_out_into_a_new_producer_id_and_bad_requests_are_refused() {
    let mut r = fresh();
    r.producer_epoch = i16::MAX - 1;
    assert!(needs_producer_id(Some(&r)));
    let Init::Ready(n) = init_producer(Some(&r), "app", 60_000, (-1, -1), 555, 2).unwrap() else {
        panic!()
    };
    assert_eq!((n.producer_id, n.producer_epoch), (555, 0));
    assert_eq!(
        init_producer(None, "", 60_000, (-1, -1), 1, 1).unwrap_err(),
        TxnError::InvalidTransactionalId
    );
    assert_eq!(
        init_producer(None, "a", 0, (-1, -1), 1, 1)
            .unwrap_err()
            .code(),
        ErrorCode::InvalidTransactionTimeout
    );
    assert_eq!(
        end_txn(&fresh(), 100, 0, true, 1).unwrap_err().code(),
        ErrorCode::InvalidTxnState
    );
}
