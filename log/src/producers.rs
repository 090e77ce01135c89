//! Idempotent-producer state of one partition: per producer id, its epoch and the
//! sequence numbers and offsets of its last few batches, so that the leader can refuse
//! a gap (`OUT_OF_ORDER_SEQUENCE_NUMBER`), a fenced epoch (`INVALID_PRODUCER_EPOCH`),
//! and answer a retried batch with the offsets it was first written at; and, for
//! transactional producers, the first offset of the transaction they have open here
//! (what holds the last stable offset back) and the epoch of the coordinator that
//! wrote their last marker.
//!
//! The state is a function of the log: it is rebuilt from the batch headers (producer
//! id, epoch, base sequence) from a snapshot on. Snapshots (`{offset:020}.snapshot`, the
//! state of every batch below `offset`) are written when a segment is sealed and when
//! the log closes, so recovery reads at most the active segment's headers.

use std::collections::{HashMap, VecDeque};

use std::collections::BTreeSet;

use shale_records::batch::BatchHeader;
use shale_records::control::Marker;

use crate::txn::CompletedTxn;

/// Batches remembered per producer (Kafka keeps five: the most a producer has in
/// flight per partition).
pub const CACHED_BATCHES: usize = 5;

/// Producers idle this long are forgotten when a snapshot is written (Kafka's
/// `producer.id.expiration.ms` default).
pub const PRODUCER_EXPIRATION_MS: i64 = 24 * 3600 * 1000;

/// One batch a producer wrote: sequence range and offsets (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerBatch {
    pub first_seq: i32,
    pub last_seq: i32,
    pub base_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ProducerEntry {
    epoch: i16,
    /// Oldest first.
    batches: VecDeque<ProducerBatch>,
    last_timestamp: i64,
    /// The first offset of the transaction it has open in this partition.
    txn_first_offset: Option<i64>,
    /// The epoch of the coordinator that wrote its last marker (-1: none).
    coordinator_epoch: i32,
    /// That marker's offset (-1: none).
    last_marker_offset: i64,
}

impl ProducerEntry {
    fn new(epoch: i16) -> Self {
        Self {
            epoch,
            batches: VecDeque::new(),
            last_timestamp: -1,
            txn_first_offset: None,
            coordinator_epoch: -1,
            last_marker_offset: -1,
        }
    }
}

/// A producer as DescribeProducers shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: i64,
    pub epoch: i16,
    /// The last sequence it wrote (-1: none remembered).
    pub last_sequence: i32,
    pub last_timestamp: i64,
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction (-1: none).
    pub txn_start_offset: i64,
}

/// Why a producer's batch is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProducerError {
    #[error(
        "producer {producer_id} epoch {epoch}: sequence {found} does not follow {expected} (a batch is missing)"
    )]
    OutOfOrderSequence {
        producer_id: i64,
        epoch: i16,
        expected: i32,
        found: i32,
    },
    #[error("producer {producer_id} has epoch {current}; epoch {sent} is fenced")]
    InvalidEpoch {
        producer_id: i64,
        sent: i16,
        current: i16,
    },
    #[error(
        "producer {producer_id} is unknown to this partition and its first sequence is {found}, not 0"
    )]
    UnknownProducer { producer_id: i64, found: i32 },
    #[error(
        "marker of producer {producer_id} from coordinator epoch {sent}: coordinator epoch {current} wrote one since"
    )]
    CoordinatorFenced {
        producer_id: i64,
        sent: i32,
        current: i32,
    },
    #[error(
        "producer {producer_id}: batch with sequences {first_seq}..={last_seq} repeats an earlier one inside a request of several batches"
    )]
    DuplicateInRequest {
        producer_id: i64,
        first_seq: i32,
        last_seq: i32,
    },
}

/// What the leader should do with a transaction marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerCheck {
    Write,
    /// It repeats the last marker, written at `offset`.
    Repeat {
        offset: i64,
    },
}

/// What the leader should do with a producer's batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceCheck {
    /// Write them.
    Append,
    /// The first `count` batches were written before (a retry of a request that was
    /// written in part or whole): `base_offset` and `last_offset` are where they went.
    /// The batches after them follow them and are written.
    Written {
        count: usize,
        base_offset: i64,
        last_offset: i64,
    },
}

fn last_seq(h: &BatchHeader) -> i32 {
    // Sequences wrap at i32::MAX, as in Kafka. The span is the batch's offset span: a
    // cleaned batch keeps it while holding fewer records.
    let n = i64::from(h.base_sequence) + i64::from(h.last_offset_delta.max(0));
    (n % (i64::from(i32::MAX) + 1)) as i32
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX { 0 } else { seq + 1 }
}

fn is_idempotent(h: &BatchHeader) -> bool {
    h.producer_id >= 0 && !h.is_control()
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// The open transactions: (first offset, producer id).
    ongoing: BTreeSet<(i64, i64)>,
}

impl ProducerStates {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// The last offset of every batch the state remembers (what a cleaning keeps, so
    /// that the state reads the same from a cleaned log).
    pub fn batch_last_offsets(&self) -> std::collections::HashSet<i64> {
        self.producers
            .values()
            .flat_map(|e| e.batches.iter().map(|b| b.last_offset))
            .collect()
    }

    /// Checks a producer's batches (as sent, in order) against the state. Nothing
    /// changes; [`ProducerStates::record`] does that once they are written. Batches
    /// that repeat written ones are answered with their offsets when they lead the
    /// request (a retry of a request written in part, as a failed roll leaves it, or
    /// whole); a repeat after a new batch is refused.
    pub fn check(&self, headers: &[BatchHeader]) -> Result<SequenceCheck, ProducerError> {
        let mut pending: HashMap<i64, ProducerEntry> = HashMap::new();
        let mut written: Option<(usize, i64, i64)> = None;
        for (i, h) in headers.iter().enumerate() {
            if !is_idempotent(h) {
                continue;
            }
            let entry = pending
                .get(&h.producer_id)
                .or_else(|| self.producers.get(&h.producer_id));
            let (first, last) = (h.base_sequence, last_seq(h));
            match entry {
                None if first != 0 => {
                    return Err(ProducerError::UnknownProducer {
                        producer_id: h.producer_id,
                        found: first,
                    });
                }
                None => {}
                Some(e) if h.producer_epoch < e.epoch => {
                    return Err(ProducerError::InvalidEpoch {
                        producer_id: h.producer_id,
                        sent: h.producer_epoch,
                        current: e.epoch,
                    });
                }
                Some(e) if h.producer_epoch > e.epoch && first != 0 => {
                    return Err(ProducerError::OutOfOrderSequence {
                        producer_id: h.producer_id,
                        epoch: h.producer_epoch,
                        expected: 0,
                        found: first,
                    });
                }
                Some(e) if h.producer_epoch > e.epoch => {}
                Some(e) => {
                    if let Some(b) = e
                        .batches
                        .iter()
                        .find(|b| b.first_seq == first && b.last_seq == last)
                    {
                        // Leading repeats, back to back in the log as they were
                        // sent, are a retry.
                        let leading = written.map_or(0, |(n, _, _)| n);
                        let follows = written.is_none_or(|(_, _, end)| b.base_offset == end + 1);
                        if i == leading && pending.is_empty() && follows {
                            let base = written.map_or(b.base_offset, |(_, base, _)| base);
                            written = Some((i + 1, base, b.last_offset));
                            continue;
                        }
                        return Err(ProducerError::DuplicateInRequest {
                            producer_id: h.producer_id,
                            first_seq: first,
                            last_seq: last,
                        });
                    }
                    let expected = e.batches.back().map_or(0, |b| next_seq(b.last_seq));
                    if first != expected {
                        return Err(ProducerError::OutOfOrderSequence {
                            producer_id: h.producer_id,
                            epoch: h.producer_epoch,
                            expected,
                            found: first,
                        });
                    }
                }
            }
            let mut next = entry
                .cloned()
                .unwrap_or_else(|| ProducerEntry::new(h.producer_epoch));
            Self::apply(&mut next, h);
            pending.insert(h.producer_id, next);
        }
        Ok(match written {
            None => SequenceCheck::Append,
            Some((count, base_offset, last_offset)) => SequenceCheck::Written {
                count,
                base_offset,
                last_offset,
            },
        })
    }

    /// Takes written batches (with their final offsets) into the state.
    /// A transactional batch starts its producer's transaction here unless one is
    /// open. Markers are taken by [`ProducerStates::end_txn`], not here.
    pub fn record(&mut self, headers: &[BatchHeader]) {
        for h in headers.iter().filter(|h| is_idempotent(h)) {
            let entry = self
                .producers
                .entry(h.producer_id)
                .or_insert_with(|| ProducerEntry::new(h.producer_epoch));
            Self::apply(entry, h);
            if h.is_transactional() && entry.txn_first_offset.is_none() {
                entry.txn_first_offset = Some(h.base_offset);
                self.ongoing.insert((h.base_offset, h.producer_id));
            }
        }
    }

    /// Checks a marker the coordinator wants written: its producer epoch must not be
    /// older than the producer's, nor its coordinator epoch (which the coordinator
    /// raises for every transaction it ends) older than the last marker's. A marker of
    /// the last marker's coordinator epoch repeats it (a retry, or one delayed past
    /// the producer's next transaction): it is not written again, and the answer is
    /// the offset the first one was written at (to wait for its replication).
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<MarkerCheck, ProducerError> {
        let Some(e) = self.producers.get(&producer_id) else {
            return Ok(MarkerCheck::Write);
        };
        if producer_epoch < e.epoch {
            return Err(ProducerError::InvalidEpoch {
                producer_id,
                sent: producer_epoch,
                current: e.epoch,
            });
        }
        if coordinator_epoch < e.coordinator_epoch {
            return Err(ProducerError::CoordinatorFenced {
                producer_id,
                sent: coordinator_epoch,
                current: e.coordinator_epoch,
            });
        }
        Ok(if coordinator_epoch > e.coordinator_epoch {
            MarkerCheck::Write
        } else {
            MarkerCheck::Repeat {
                offset: e.last_marker_offset,
            }
        })
    }

    /// Takes a written marker (control batch `h`): its producer's open transaction,
    /// if any, ends. A marker of a newer producer epoch (the coordinator fenced the
    /// producer) moves the producer to it.
    pub fn end_txn(
        &mut self,
        h: &BatchHeader,
        marker: Marker,
        coordinator_epoch: i32,
    ) -> Option<CompletedTxn> {
        let entry = self
            .producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry::new(h.producer_epoch));
        if h.producer_epoch > entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if coordinator_epoch >= entry.coordinator_epoch {
            entry.coordinator_epoch = coordinator_epoch;
            entry.last_marker_offset = h.base_offset;
        }
        entry.last_timestamp = entry.last_timestamp.max(h.max_timestamp);
        let first_offset = entry.txn_first_offset.take()?;
        self.ongoing.remove(&(first_offset, h.producer_id));
        Some(CompletedTxn {
            producer_id: h.producer_id,
            first_offset,
            last_offset: h.base_offset,
            aborted: marker == Marker::Abort,
        })
    }

    /// The first offset of the oldest open transaction.
    pub fn first_open_txn_offset(&self) -> Option<i64> {
        self.ongoing.first().map(|(o, _)| *o)
    }

    /// The producer's open transaction here: its first offset, and the producer's
    /// epoch.
    pub fn open_txn(&self, producer_id: i64) -> Option<(i64, i16)> {
        let e = self.producers.get(&producer_id)?;
        Some((e.txn_first_offset?, e.epoch))
    }

    /// The coordinator epoch of the producer's last marker here (-1: none).
    pub fn last_marker_epoch(&self, producer_id: i64) -> i32 {
        self.producers
            .get(&producer_id)
            .map_or(-1, |e| e.coordinator_epoch)
    }

    /// Every producer the state knows, by id.
    pub fn active(&self) -> Vec<ActiveProducer> {
        let mut out: Vec<ActiveProducer> = (self.producers.iter())
            .map(|(id, e)| ActiveProducer {
                producer_id: *id,
                epoch: e.epoch,
                last_sequence: e.batches.back().map_or(-1, |b| b.last_seq),
                last_timestamp: e.last_timestamp,
                coordinator_epoch: e.coordinator_epoch,
                txn_start_offset: e.txn_first_offset.unwrap_or(-1),
            })
            .collect();
        out.sort_by_key(|p| p.producer_id);
        out
    }

    /// The open transactions: (producer id, epoch, first offset, last timestamp).
    pub fn open_txns(&self) -> Vec<(i64, i16, i64, i64)> {
        self.ongoing
            .iter()
            .filter_map(|(first, pid)| {
                let e = self.producers.get(pid)?;
                Some((*pid, e.epoch, *first, e.last_timestamp))
            })
            .collect()
    }

    fn apply(entry: &mut ProducerEntry, h: &BatchHeader) {
        if h.producer_epoch != entry.epoch {
            entry.epoch = h.producer_epoch;
            entry.batches.clear();
        }
        if entry.batches.len() == CACHED_BATCHES {
            entry.batches.pop_front();
        }
        entry.batches.push_back(ProducerBatch {
            first_seq: h.base_sequence,
            last_seq: last_seq(h),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
        entry.last_timestamp = entry.last_timestamp.max(h.max_timestamp);
    }

    /// Forgets producers whose last batch is older than the expiration, unless they
    /// have a transaction open.
    pub fn expire(&mut self, now_ms: i64) {
        self.producers.retain(|_, e| {
            e.last_timestamp < 0
                || e.last_timestamp >= now_ms - PRODUCER_EXPIRATION_MS
                || e.txn_first_offset.is_some()
        });
    }
}

mod snapshot;
pub use snapshot::read_producer_snapshot;
#[cfg(test)]
mod tests;
