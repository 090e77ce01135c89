//! Transactions in a replicated partition: the check of a transactional producer's
//! first batch, markers replicated to followers like any batch, and the same last
//! stable offset and aborted transactions on both replicas.

use shale_records::batch::{self, TRANSACTIONAL_BIT};
use shale_records::control::Marker;

use super::tests::{batch, replicate_once, two_replicas};
use super::*;

fn transactional(pid: i64, seq: i32, n: usize) -> Vec<u8> {
    let mut b = batch(n, 10);
    batch::set_attributes(&mut b, TRANSACTIONAL_BIT);
    batch::set_producer(&mut b, pid, 0, seq);
    b
}

#[test]
fn markers_replicate_and_both_replicas_agree_on_what_is_stable() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
    // Unverified, a transactional producer's first batch here is refused.
    let err = a.append(&transactional(9, 0, 3), None, 0).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::InvalidTxnState);
    assert_eq!(a.offsets().log_end_offset, 0);
    a.append_verified(&transactional(9, 0, 3), None, Some(0), 0)
        .unwrap();
    // Its next batches need no check: the transaction is open here.
    a.append(&transactional(9, 3, 1), None, 0).unwrap();
    replicate_once(&a, &b, 2);
    replicate_once(&a, &b, 2);
    assert_eq!((a.high_watermark(), a.last_stable_offset()), (4, 0));
    assert_eq!(b.last_stable_offset(), 0);
    let (offset, epoch) = a.append_marker(9, 0, Marker::Abort, 1, 0).unwrap();
    assert_eq!((offset, epoch), (4, 0));
    // Not stable until the follower has the marker too.
    assert_eq!(a.last_stable_offset(), 0);
    replicate_once(&a, &b, 2);
    replicate_once(&a, &b, 2);
    assert_eq!((a.high_watermark(), b.offsets().log_end_offset), (5, 5));
    assert_eq!((a.last_stable_offset(), b.last_stable_offset()), (5, 5));
    let aborted = a.aborted_between(0, 5);
    assert_eq!(aborted.len(), 1);
    assert_eq!((aborted[0].producer_id, aborted[0].first_offset), (9, 0));
    assert_eq!(
        b.aborted_between(0, 5),
        aborted,
        "the follower indexed the abort too"
    );
    // The same marker again writes nothing and answers where the first one is; a
    // late batch of the ended transaction, verified against the record before the
    // marker, is refused, and so is a request mixing producers.
    assert_eq!(a.append_marker(9, 0, Marker::Abort, 1, 0).unwrap(), (4, 0));
    let mut two = transactional(9, 4, 1);
    two.extend_from_slice(&transactional(10, 0, 1));
    let err = a.append_verified(&two, None, Some(1), 0).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::InvalidRecord);
    let err = (a.append_verified(&transactional(9, 4, 1), None, Some(0), 0)).unwrap_err();
    assert_eq!(err.code(), shale_records::ErrorCode::InvalidTxnState);
    assert_eq!(a.offsets().log_end_offset, 5);
}
