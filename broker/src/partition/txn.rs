//! Transactions in one partition replica: the check that a transactional producer's
//! first batch here belongs to a transaction the coordinator knows (KIP-890), markers
//! the coordinator has the leader write, and the last stable offset.

use std::collections::BTreeMap;

use bytes::Bytes;
use shale_log::{AbortedTxn, PartitionLog};
use shale_metastore::{RemoteAbortedTxn, RemoteSegment};
use shale_records::batch::{BatchHeader, BatchIter};
use shale_records::control::Marker;

use super::Partition;
use crate::error::{Error, Result};

/// The producer (id, epoch) of the transactional batches of `records`, if they are
/// transactional: a transactional request holds one producer's batches, in one
/// transaction, or is refused.
pub(crate) fn transactional_producer(records: &[u8]) -> Result<Option<(i64, i16)>> {
    let mut producer = None;
    let mut plain = false;
    for item in BatchIter::new(records) {
        let (h, _) = item?;
        if !h.is_transactional() {
            plain = true;
            continue;
        }
        match producer {
            None => producer = Some((h.producer_id, h.producer_epoch)),
            Some(p) if p == (h.producer_id, h.producer_epoch) => {}
            Some(_) => {
                return Err(Error::InvalidRecord(
                    "transactional batches of one request must be one producer's, at one epoch"
                        .into(),
                ));
            }
        }
    }
    if producer.is_some() && plain {
        return Err(Error::InvalidRecord(
            "a request cannot mix transactional and other batches for one partition".into(),
        ));
    }
    Ok(producer)
}

/// Refuses transactional batches whose producer has no transaction open here (at
/// their epoch) unless the coordinator's record was checked (`verified`: the marker
/// epoch of the producer's last ended transaction, as the record said) and no marker
/// of a later transaction was written here since: a late retry of an ended
/// transaction's batch would otherwise open a transaction no marker ever ends.
pub(super) fn check_transactional(
    log: &PartitionLog,
    headers: &[BatchHeader],
    verified: Option<i32>,
) -> Result<()> {
    for h in headers.iter().filter(|h| h.is_transactional()) {
        if h.producer_id < 0 {
            return Err(Error::InvalidRecord(
                "a transactional batch must carry a producer id".into(),
            ));
        }
        match log.open_txn(h.producer_id) {
            Some((_, epoch)) if epoch == h.producer_epoch => continue,
            // A transaction of another epoch is open: a new instance of the
            // producer cannot write before its predecessor's transaction is ended.
            Some((_, epoch)) => {
                return Err(Error::InvalidTxnState(format!(
                    "producer {} has a transaction of epoch {epoch} open here",
                    h.producer_id
                )));
            }
            None => {}
        }
        match verified {
            Some(epoch) if log.last_marker_epoch(h.producer_id) <= epoch => {}
            Some(_) => {
                return Err(Error::InvalidTxnState(format!(
                    "producer {} ended the transaction this batch belongs to",
                    h.producer_id
                )));
            }
            None => {
                return Err(Error::InvalidTxnState(format!(
                    "producer {} has no transaction open in this partition: add the partition \
                     to the transaction first (AddPartitionsToTxn)",
                    h.producer_id
                )));
            }
        }
    }
    Ok(())
}

impl Partition {
    /// Whether `producer_id` has a transaction open here at `epoch` (then its
    /// batches need no check with the coordinator).
    pub fn has_open_txn(&self, producer_id: i64, epoch: i16) -> bool {
        (self.replica().log.open_txn(producer_id)).is_some_and(|(_, e)| e == epoch)
    }

    /// Leader: writes a transaction marker; the marker's offset and the leader epoch,
    /// to wait for its replication (a marker that repeats the last one is not
    /// written again: its first offset is the answer, to wait on the same way).
    pub fn append_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        marker: Marker,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> Result<(i64, i32)> {
        let mut r = self.replica();
        if r.closed {
            return Err(Error::ShuttingDown);
        }
        self.ensure_leader(&r.role)?;
        let epoch = r.role.leader_epoch;
        let (offset, written) = r.log.append_marker(
            producer_id,
            producer_epoch,
            marker,
            coordinator_epoch,
            epoch,
            now_ms,
        )?;
        self.advance_hw(&mut r);
        drop(r);
        if written {
            self.appended.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok((offset, epoch))
    }

    /// The last stable offset: the high watermark, or the first offset of an
    /// undecided transaction below it.
    pub fn last_stable_offset(&self) -> i64 {
        let hw = self.high_watermark();
        self.replica().log.last_stable_offset(hw)
    }

    /// Leader: the producers this partition knows (DescribeProducers).
    pub fn active_producers(&self) -> Result<Vec<shale_log::producers::ActiveProducer>> {
        let r = self.replica();
        self.ensure_leader(&r.role)?;
        Ok(r.log.active_producers())
    }

    /// The aborted transactions with records in the local log's `[from, upper)`.
    pub fn aborted_between(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        self.replica().log.aborted_between(from, upper)
    }

    /// The aborted transactions with records in `[from, upper)` wherever their
    /// markers are: in remote segments (as each lists them) or in the local log. An
    /// entry both tiers know is returned once.
    pub fn aborted_in_both_tiers(&self, from: i64, upper: i64) -> Vec<AbortedTxn> {
        // The local index first: a copy registers a segment's entries before local
        // retention forgets them, so an entry leaving the local index between the two
        // reads is in the remote state read second.
        let local = self.aborted_between(from, upper);
        let remote = self.remote_state();
        aborted_in(&remote.segments, move || local, from, upper)
    }

    /// The producer snapshot file as of `offset` (a segment's base), for the copy of
    /// the segment before it.
    pub async fn producer_snapshot_at(&self, offset: i64) -> Option<Bytes> {
        // Read off the async workers and without the replica's lock.
        let path = self.replica().log.producer_snapshot_path(offset);
        let read = move || shale_log::producers::read_producer_snapshot(&path);
        match tokio::task::spawn_blocking(read).await {
            Ok(bytes) => bytes.map(Bytes::from),
            Err(e) => {
                tracing::warn!(topic = %self.topic, partition = self.index, offset, error = %e,
                    "cannot read the producer snapshot: the copy goes without it");
                None
            }
        }
    }

    /// Follower: a log just restarted empty at `offset` takes the producer state
    /// copied with the remote segment ending before it (see
    /// `PartitionLog::install_producer_snapshot`).
    pub fn install_producer_snapshot(&self, offset: i64, snapshot: &[u8]) -> Result<bool> {
        let mut r = self.replica();
        if r.closed || r.role.leader == self.broker_id {
            return Ok(false);
        }
        (r.log.install_producer_snapshot(offset, snapshot)).map_err(Error::Storage)
    }

    /// The aborted transactions whose markers lie in `[base, last]` of the local log,
    /// for a copy of that segment to the object store.
    pub fn aborted_markers_in(&self, base: i64, last: i64) -> Vec<RemoteAbortedTxn> {
        let log = &self.replica().log;
        (log.aborted_markers_in(base, last).into_iter())
            .map(|a| RemoteAbortedTxn {
                producer_id: a.producer_id,
                first_offset: a.first_offset,
                last_offset: a.last_offset,
                last_stable_offset: a.last_stable_offset,
            })
            .collect()
    }
}

/// [`Partition::aborted_in_both_tiers`], given the remote segments (by base offset)
/// and the local log's answer, asked for only when the remote lists leave the
/// question open.
fn aborted_in(
    segments: &[RemoteSegment],
    local: impl FnOnce() -> Vec<AbortedTxn>,
    from: i64,
    upper: i64,
) -> Vec<AbortedTxn> {
    let start = segments.partition_point(|s| s.end_offset < from);
    let mut found = BTreeMap::new();
    for seg in &segments[start..] {
        let mut complete = false;
        for a in seg.live_aborted().filter(|a| a.last_offset >= from) {
            if a.first_offset < upper {
                found.insert(a.last_offset, local_aborted(a));
            }
            // Every transaction ending later starts at or above its stable offset.
            complete |= a.last_stable_offset >= upper;
        }
        if complete {
            return found.into_values().collect();
        }
    }
    for a in local() {
        found.entry(a.last_offset).or_insert(a);
    }
    found.into_values().collect()
}

fn local_aborted(a: RemoteAbortedTxn) -> AbortedTxn {
    AbortedTxn {
        producer_id: a.producer_id,
        first_offset: a.first_offset,
        last_offset: a.last_offset,
        last_stable_offset: a.last_stable_offset,
    }
}

/// The whole batches of `records` that start below `upper` (a `read_committed` read
/// stops at the last stable offset), and the offset after the last of them (`None`:
/// no batch).
pub(crate) fn batches_below(records: Bytes, upper: i64) -> (Bytes, Option<i64>) {
    let (mut end, mut next) = (0, None);
    for item in BatchIter::new(&records) {
        match item {
            Ok((h, range)) if h.base_offset < upper => {
                end = range.end;
                next = Some(h.last_offset() + 1);
            }
            _ => break,
        }
    }
    (records.slice(..end), next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(producer_id: i64, first: i64, last: i64, lso: i64) -> RemoteAbortedTxn {
        RemoteAbortedTxn {
            producer_id,
            first_offset: first,
            last_offset: last,
            last_stable_offset: lso,
        }
    }

    fn segment(base: i64, end: i64, aborted: Vec<RemoteAbortedTxn>) -> RemoteSegment {
        RemoteSegment {
            aborted,
            ..crate::partition::remote::tests::segment(base, end, &[])
        }
    }

    #[test]
    fn aborted_transactions_come_from_later_segments_and_the_local_log_once() {
        // Producer 1's transaction runs from 10 to its marker at 150, in the second
        // segment; producer 2's from 120 to 180; producer 3's from 205 to 260, whose
        // marker only the local log has; producer 4's starts at 300.
        let segments = [
            segment(0, 99, vec![]),
            segment(100, 199, vec![txn(1, 10, 150, 10), txn(2, 120, 180, 120)]),
            segment(200, 249, vec![]),
        ];
        // The local log's answer, as `PartitionLog::aborted_between` gives it.
        let local_log = |entries: Vec<RemoteAbortedTxn>, from: i64, upper: i64| {
            move || {
                (entries.into_iter())
                    .filter(|a| a.last_offset >= from && a.first_offset < upper)
                    .map(local_aborted)
                    .collect::<Vec<_>>()
            }
        };
        let local = |from, upper| {
            let entries = vec![txn(3, 205, 260, 205), txn(4, 300, 310, 300)];
            aborted_in(&segments, local_log(entries, from, upper), from, upper)
        };
        let pids = |v: Vec<AbortedTxn>| v.iter().map(|a| a.producer_id).collect::<Vec<_>>();
        // A read of the first segment needs producer 1's entry, from the next one.
        assert_eq!(pids(local(0, 100)), [1]);
        assert_eq!(pids(local(50, 130)), [1, 2]);
        // 2's stable offset (120) is below 260: the search goes on to the local log.
        assert_eq!(pids(local(100, 270)), [1, 2, 3]);
        assert_eq!(pids(local(151, 400)), [2, 3, 4]);
        // Both tiers knowing an entry (the local log not deleted yet): once.
        let both = local_log(vec![txn(2, 120, 180, 120), txn(3, 205, 260, 205)], 100, 270);
        assert_eq!(pids(aborted_in(&segments, both, 100, 270)), [1, 2, 3]);
        // Entries a cut row keeps past its end are not used.
        let cut = [segment(
            100,
            160,
            vec![txn(1, 10, 150, 10), txn(2, 120, 180, 120)],
        )];
        assert_eq!(pids(aborted_in(&cut, Vec::new, 100, 200)), [1]);
        // An entry whose stable offset passes the read's end ends the search: the
        // local log is not asked.
        let ended = [segment(0, 99, vec![txn(5, 0, 50, 60)])];
        let never = || -> Vec<AbortedTxn> { panic!("the local log was asked") };
        assert_eq!(pids(aborted_in(&ended, never, 0, 40)), [5]);
    }

    #[test]
    fn a_committed_read_keeps_whole_batches_below_the_stable_offset() {
        let mut records = Vec::new();
        for (base, count) in [(10, 5), (15, 5), (20, 5)] {
            let mut batch = crate::testing::batch(count, 10).to_vec();
            shale_records::batch::set_base_offset(&mut batch, base);
            records.extend_from_slice(&batch);
        }
        let records = Bytes::from(records);
        let (kept, next) = batches_below(records.clone(), 17);
        let bases: Vec<i64> = BatchIter::new(&kept)
            .map(|b| b.unwrap().0.base_offset)
            .collect();
        assert_eq!((bases, next), (vec![10, 15], Some(20)));
        assert_eq!(batches_below(records.clone(), 100).0, records);
        let (none, next) = batches_below(records, 10);
        assert!(none.is_empty() && next.is_none());
    }
}
