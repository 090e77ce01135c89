//! A file slice ([`ReadPlan::locate`]) holds byte for byte what the copying read
//! returns.

use proptest::prelude::*;

use crate::tests::{
    append, batch, closed_log_of_sealed_segments, misplace_index_entries, open_log, small_config,
};
use crate::{LogConfig, PartitionLog, Records};

/// What the copying read returns and what a slice holds, for one read; `None` for
/// the slice where `locate` leaves the read to the copying path.
fn both(
    log: &PartitionLog,
    offset: i64,
    max_offset: i64,
    max_bytes: usize,
    whole_first: bool,
) -> (Vec<u8>, Option<Vec<u8>>) {
    let copied = log.plan_read(offset, max_offset).unwrap();
    let copied = copied.read(max_bytes, whole_first).unwrap().to_vec();
    let mut plan = log.plan_slice(offset, max_offset, max_bytes).unwrap();
    // Every segment, old ones too (whose reads are left to the copying path).
    plan.cold = false;
    let sliced = plan.locate(whole_first).unwrap().map(|r| {
        assert!(matches!(r, Records::Slice(_)) || r.is_empty());
        r.into_bytes().unwrap().to_vec()
    });
    (copied, sliced)
}

/// A log of batches of `sizes` records each (values of `value_len` bytes).
fn log_of(dir: &std::path::Path, sizes: &[usize], value_len: usize) -> PartitionLog {
    log_with(dir, sizes, value_len, -1)
}

fn log_with(
    dir: &std::path::Path,
    sizes: &[usize],
    value_len: usize,
    retention_bytes: i64,
) -> PartitionLog {
    let config = LogConfig {
        segment_bytes: 8 * 1024,
        retention_bytes,
        ..small_config()
    };
    let mut log = open_log(dir, config).unwrap();
    let mut next = 0u64;
    for &n in sizes {
        append(&mut log, batch(next, n, 1000, value_len), 0);
        next += n as u64;
    }
    log
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// From every offset (a batch's first, or one inside it), for limits that cut
    /// anywhere (a partial last batch is left out), high watermarks inside or past the
    /// segment, and with or without the first batch whole.
    #[test]
    fn a_slice_holds_what_the_copying_read_returns(
        sizes in proptest::collection::vec(1usize..8, 1..120),
        value_len in 1usize..300,
        max_bytes in 0usize..6000,
        whole_first in any::<bool>(),
        cut in 0.0f64..1.2,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let log = log_of(dir.path(), &sizes, value_len);
        let end = log.log_end_offset();
        let max_offset = ((end as f64) * cut) as i64;
        for offset in 0..=end {
            let (copied, sliced) = both(&log, offset, max_offset, max_bytes, whole_first);
            prop_assert_eq!(Some(&copied), sliced.as_ref(), "offset {} of {}", offset, end);
        }
    }
}

#[test]
fn reads_across_segment_boundaries_match_and_use_slices() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_of(dir.path(), &[3; 400], 40);
    assert!(log.segment_count() > 5);
    let end = log.log_end_offset();
    let mut offset = 0;
    while offset < end {
        let (copied, sliced) = both(&log, offset, end, 3000, true);
        assert_eq!(Some(&copied), sliced.as_ref(), "offset {offset}");
        let last = shale_records::batch::BatchIter::new(&copied)
            .map(|b| b.unwrap().0.last_offset())
            .last()
            .unwrap();
        offset = last + 1;
    }
    // The newest segments are read as slices without any help; older ones are left
    // to the copying read (their pages are dropped after it).
    let newest = *log.segments.keys().next_back().unwrap();
    let plan = log.plan_slice(newest, end, 1 << 20).unwrap();
    assert!(matches!(
        plan.locate(true).unwrap(),
        Some(Records::Slice(_))
    ));
    let plan = log.plan_slice(0, end, 1 << 20).unwrap();
    assert!(
        plan.locate(true).unwrap().is_none(),
        "the oldest segment is cold"
    );
}

#[test]
fn a_slice_outlives_the_deletion_of_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = log_with(dir.path(), &[3; 400], 40, 0);
    let end = log.log_end_offset();
    // The newest sealed segment: read as a slice.
    let sealed = *log.segments.keys().rev().nth(1).unwrap();
    let plan = log.plan_slice(sealed, end, 1 << 20).unwrap();
    let Some(Records::Slice(slice)) = plan.locate(true).unwrap() else {
        panic!("a sealed segment among the two newest is read as a slice");
    };
    let copied = log
        .plan_read(sealed, end)
        .unwrap()
        .read(1 << 20, true)
        .unwrap();
    // Retention (at most 0 bytes) deletes every segment but the active one.
    log.apply_retention(0, None).unwrap();
    assert!(
        !log.segments.contains_key(&sealed),
        "the segment was deleted"
    );
    assert_eq!(slice.read().unwrap(), copied);
}

#[test]
fn a_damaged_offset_index_leaves_the_read_to_the_copying_path() {
    let dir = tempfile::tempdir().unwrap();
    let (sealed, next) = closed_log_of_sealed_segments(dir.path());
    misplace_index_entries(dir.path(), sealed);
    let log = open_log(dir.path(), small_config()).unwrap();
    let mut left = 0;
    for offset in sealed..next {
        let (copied, sliced) = both(&log, offset, i64::MAX, 1, true);
        match sliced {
            Some(sliced) => assert_eq!(sliced, copied, "offset {offset}"),
            None => left += 1,
        }
    }
    assert!(left > 0, "the damaged entries were noticed");
}

/// A truncation after a slice was planned (a replica after a leader change) makes
/// the slice stale: a sender finds out before sending, and reading it is an error.
#[test]
fn a_slice_planned_before_a_truncation_is_no_longer_current() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = log_of(dir.path(), &[3; 400], 40);
    let end = log.log_end_offset();
    let plan = log.plan_slice(end - 30, end, 1 << 20).unwrap();
    let Some(Records::Slice(slice)) = plan.locate(true).unwrap() else {
        panic!("the newest segment is read as a slice");
    };
    assert!(slice.is_current());
    slice.read().unwrap();
    log.truncate_to(end - 15).unwrap();
    assert!(!slice.is_current());
    assert!(slice.read().is_err());
    // A slice planned after the cut is current.
    let plan = log.plan_slice(end - 30, end - 15, 1 << 20).unwrap();
    let Some(Records::Slice(slice)) = plan.locate(true).unwrap() else {
        panic!("the newest segment is read as a slice");
    };
    assert!(slice.is_current());
}
