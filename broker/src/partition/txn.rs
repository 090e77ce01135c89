//! Transactions in one partition replica: the check that a transactional producer's
//! first batch here belongs to a transaction the coordinator knows (KIP-890), markers
//! the coordinator has the leader write, and the last stable offset.

use shale_log::PartitionLog;
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
    pub fn aborted_between(&self, from: i64, upper: i64) -> Vec<shale_log::AbortedTxn> {
        self.replica().log.aborted_between(from, upper)
    }
}
