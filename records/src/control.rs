//! Transaction markers: the control batches a transaction coordinator has written to
//! every partition of a transaction when it ends. A marker batch holds one record whose
//! key is `version i16 (0) | type i16 (0 abort, 1 commit)` and whose value is
//! `version i16 (0) | coordinator epoch i32`; its header carries the transaction's
//! producer id and epoch, no sequence, and the control and transactional attribute bits.
//! Markers are never compressed.

use bytes::Bytes;

use crate::batch::{self, BatchError, BatchHeader, HEADER_LEN};
use crate::record::{BatchBuilder, Reader, Record};

/// How a transaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marker {
    Abort,
    Commit,
}

impl Marker {
    fn code(self) -> i16 {
        match self {
            Marker::Abort => 0,
            Marker::Commit => 1,
        }
    }
}

/// A marker batch of `producer_id`'s transaction at `producer_epoch`, with base offset
/// 0 (the log assigns it).
pub fn build_marker(
    producer_id: i64,
    producer_epoch: i16,
    marker: Marker,
    coordinator_epoch: i32,
    timestamp: i64,
) -> Bytes {
    let key = [0i16.to_be_bytes(), marker.code().to_be_bytes()].concat();
    let mut value = 0i16.to_be_bytes().to_vec();
    value.extend_from_slice(&coordinator_epoch.to_be_bytes());
    let mut b = BatchBuilder::new(timestamp);
    b.push(Record::new(Some(&key), Some(&value), timestamp));
    let mut out = b.build().to_vec();
    batch::set_attributes(&mut out, batch::CONTROL_BIT | batch::TRANSACTIONAL_BIT);
    batch::set_producer(&mut out, producer_id, producer_epoch, -1);
    Bytes::from(out)
}

/// The marker a control batch holds and the epoch of the coordinator that wrote it.
/// A control batch of another type (Kafka has others, none of them written here) is
/// an error.
pub fn parse_marker(batch: &[u8]) -> Result<(Marker, i32), BatchError> {
    let h = BatchHeader::parse(batch)?;
    if !h.is_control() || h.compression()? != batch::Compression::None {
        return Err(BatchError::Invalid("not an uncompressed control batch"));
    }
    let body = batch
        .get(HEADER_LEN..h.total_size())
        .ok_or(BatchError::Invalid("control batch is truncated"))?;
    let mut r = Reader { buf: body, pos: 0 };
    let _length = r.varlong()?;
    let _attributes = r.i8()?;
    let _timestamp_delta = r.varlong()?;
    let _offset_delta = r.varlong()?;
    let key = r
        .bytes()?
        .ok_or(BatchError::Invalid("control record without key"))?;
    let value = r.bytes()?;
    let key = &body[key];
    if key.len() < 4 || key[..2] != [0, 0] {
        return Err(BatchError::Invalid(
            "control record key of an unknown version",
        ));
    }
    let marker = match i16::from_be_bytes([key[2], key[3]]) {
        0 => Marker::Abort,
        1 => Marker::Commit,
        _ => return Err(BatchError::Invalid("control record of an unknown type")),
    };
    let coordinator_epoch = value
        .map(|v| &body[v])
        .filter(|v| v.len() >= 6)
        .map_or(0, |v| i32::from_be_bytes([v[2], v[3], v[4], v[5]]));
    Ok((marker, coordinator_epoch))
}

/// Drops the batches of aborted transactions from a `read_committed` read, as Kafka's
/// consumers do: a producer's transactional batches are dropped from the first offset
/// of each of its aborted transactions (as the fetch named them) up to its abort
/// marker. Batches go through [`AbortedFilter::keep`] in offset order.
#[derive(Debug, Default)]
pub struct AbortedFilter {
    /// (producer id, first offset), latest first (the next one is popped).
    pending: Vec<(i64, i64)>,
    aborting: std::collections::HashSet<i64>,
}

impl AbortedFilter {
    /// `aborted`: (producer id, first offset) of the aborted transactions of the read.
    pub fn new(mut aborted: Vec<(i64, i64)>) -> Self {
        aborted.sort_by_key(|&(_, first)| std::cmp::Reverse(first));
        Self {
            pending: aborted,
            aborting: Default::default(),
        }
    }

    /// Whether the records of this batch (`batch`: its bytes) are committed data to
    /// keep. Control batches are never kept.
    pub fn keep(&mut self, h: &BatchHeader, batch: &[u8]) -> bool {
        while let Some(&(producer_id, first)) = self.pending.last() {
            if first > h.last_offset() {
                break;
            }
            self.aborting.insert(producer_id);
            self.pending.pop();
        }
        if h.is_control() {
            if matches!(parse_marker(batch), Ok((Marker::Abort, _))) {
                self.aborting.remove(&h.producer_id);
            }
            return false;
        }
        !(h.is_transactional() && self.aborting.contains(&h.producer_id))
    }
}

/// What a cleaning decides for transactions as it reads a log's batches in offset
/// order from the log's start (as Kafka's cleaner does): the records of an aborted
/// transaction go, and a marker may go once no batch of its transaction is left
/// before it.
#[derive(Debug, Default)]
pub struct TxnCleaner {
    aborted: AbortedFilter,
    /// Producers whose current transaction has a batch in what was read.
    with_batches: std::collections::HashSet<i64>,
}

/// What [`TxnCleaner::visit`] says of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnBatch {
    /// Records outside any transaction, or of a committed (or still open) one.
    Data,
    /// Records of an aborted transaction: they all go.
    Aborted,
    /// A marker; `alone`: no batch of its transaction was read before it.
    Marker { alone: bool },
}

impl TxnCleaner {
    /// `aborted`: (producer id, first offset) of the aborted transactions with records
    /// in what the cleaning reads.
    pub fn new(aborted: Vec<(i64, i64)>) -> Self {
        Self {
            aborted: AbortedFilter::new(aborted),
            with_batches: Default::default(),
        }
    }

    /// Takes the next batch in offset order (`batch`: its bytes).
    pub fn visit(&mut self, h: &BatchHeader, batch: &[u8]) -> TxnBatch {
        let committed = self.aborted.keep(h, batch);
        if h.is_control() {
            TxnBatch::Marker {
                alone: !self.with_batches.remove(&h.producer_id),
            }
        } else if !h.is_transactional() {
            TxnBatch::Data
        } else {
            self.with_batches.insert(h.producer_id);
            if committed {
                TxnBatch::Data
            } else {
                TxnBatch::Aborted
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aborted_batches_are_dropped_up_to_their_marker() {
        let data = |pid: i64, base: i64| {
            let mut b = BatchBuilder::new(0);
            b.push(Record::new(None, Some(b"v"), 0));
            let mut v = b.build().to_vec();
            batch::set_attributes(&mut v, batch::TRANSACTIONAL_BIT);
            batch::set_producer(&mut v, pid, 0, 0);
            batch::set_base_offset(&mut v, base);
            v
        };
        let marker = |pid: i64, m: Marker, base: i64| {
            let mut v = build_marker(pid, 0, m, 1, 0).to_vec();
            batch::set_base_offset(&mut v, base);
            v
        };
        // Producer 1 aborts [0, 3], producer 2 commits [1, 4], producer 1 then
        // commits [5, 6].
        let log = [
            data(1, 0),
            data(2, 1),
            marker(1, Marker::Abort, 3),
            marker(2, Marker::Commit, 4),
            data(1, 5),
            marker(1, Marker::Commit, 6),
        ];
        let mut f = AbortedFilter::new(vec![(1, 0)]);
        let kept: Vec<bool> = (log.iter())
            .map(|b| f.keep(&BatchHeader::parse(b).unwrap(), b))
            .collect();
        assert_eq!(kept, [false, true, false, false, true, false]);

        // A cleaning of the same log: producer 1's aborted batch goes, and each marker
        // stays while a batch of its transaction is before it.
        let mut c = TxnCleaner::new(vec![(1, 0)]);
        let seen: Vec<TxnBatch> = (log.iter())
            .map(|b| c.visit(&BatchHeader::parse(b).unwrap(), b))
            .collect();
        let marker = |alone| TxnBatch::Marker { alone };
        assert_eq!(
            seen,
            [
                TxnBatch::Aborted,
                TxnBatch::Data,
                marker(false),
                marker(false),
                TxnBatch::Data,
                marker(false)
            ]
        );
        // Once the aborted batch and producer 2's batch are gone, their markers are
        // alone; producer 1's commit is not.
        let mut c = TxnCleaner::new(vec![(1, 0)]);
        let seen: Vec<TxnBatch> = [&log[2], &log[3], &log[4], &log[5]]
            .iter()
            .map(|b| c.visit(&BatchHeader::parse(b).unwrap(), b))
            .collect();
        assert_eq!(
            seen,
            [marker(true), marker(true), TxnBatch::Data, marker(false)]
        );
    }

    #[test]
    fn markers_round_trip() {
        for (m, e) in [(Marker::Commit, 7), (Marker::Abort, 0)] {
            let b = build_marker(42, 3, m, e, 1_000);
            let h = BatchHeader::parse(&b).unwrap();
            h.validate(&b).unwrap();
            assert!(h.is_control() && h.is_transactional());
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (42, 3, -1)
            );
            assert_eq!((h.record_count, h.last_offset_delta), (1, 0));
            assert_eq!(parse_marker(&b).unwrap(), (m, e));
        }
        let data = BatchBuilder::new(0).build();
        assert!(parse_marker(&data).is_err());
    }
}
