//! The accumulator: per partition, the batch being filled and the closed batches queued
//! or in flight, with the byte count `buffer.memory` bounds; and the state the producer
//! and its sender share.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use bytes::Bytes;
use shale_records::record::BatchBuilder;
use tokio::sync::{Notify, oneshot, watch};

use super::delivery::{Outcome, OutcomeFuture};
use super::sender::RetryLog;
use crate::Error;

/// A batch being filled.
pub(super) struct OpenBatch {
    pub(super) id: u64,
    pub(super) builder: BatchBuilder,
    /// Bytes counted against `buffer_memory` for its records.
    pub(super) buffered: usize,
    pub(super) created: Instant,
    pub(super) done: oneshot::Sender<Outcome>,
    pub(super) outcome: OutcomeFuture,
}

/// A closed batch, queued or in flight.
pub(super) struct Batch {
    pub(super) id: u64,
    pub(super) partition: i32,
    pub(super) data: Bytes,
    pub(super) records: i32,
    /// Bytes counted against `buffer_memory` (released when the batch is answered).
    pub(super) buffered: usize,
    /// Sequence and epoch stamped into `data` (idempotence), once first sent.
    pub(super) seq: Option<(i32, i16)>,
    pub(super) created: Instant,
    pub(super) attempts: u32,
    pub(super) not_before: Instant,
    /// What the last attempt got (reported if the delivery timeout passes).
    pub(super) last_error: Option<Arc<Error>>,
    pub(super) done: oneshot::Sender<Outcome>,
}

#[derive(Default)]
pub(super) struct PartitionQueue {
    pub(super) open: Option<OpenBatch>,
    pub(super) queued: VecDeque<Batch>,
    pub(super) in_flight: usize,
    /// Sequence of the next batch stamped.
    pub(super) next_seq: i32,
    /// Sequence the leader expects next (after the last acknowledged batch).
    pub(super) acked_seq: i32,
    /// A batch failed: resend one at a time, in order, until the failed ones are through.
    pub(super) retrying: bool,
    /// The last error that was not a sequence gap: why a later batch, refused only
    /// because an earlier one is missing, did not land (reported in its place).
    pub(super) last_cause: Option<Arc<Error>>,
}

pub(super) struct Accumulator {
    pub(super) partitions: Vec<PartitionQueue>,
    pub(super) buffered_bytes: usize,
    pub(super) next_batch_id: u64,
    /// Batches with ids below this are closed at once (a flush).
    pub(super) flush_below: u64,
    /// Ids of batches not yet answered.
    pub(super) incomplete: BTreeSet<u64>,
    pub(super) sticky_partition: i32,
    pub(super) sticky_bytes: usize,
    pub(super) round_robin: i32,
    /// Producer id and epoch (idempotence), once the broker gave one.
    pub(super) producer: Option<(i64, i16)>,
    /// A sequence gap: bump the epoch once nothing is in flight.
    pub(super) bump_epoch: bool,
    pub(super) closed: bool,
    /// Retries not logged yet, and when retries were last logged (see `log_retry`).
    pub(super) retries: RetryLog,
}

/// What `send` and the sender task share: the accumulator and the signals between
/// them.
pub(super) struct SenderState {
    pub(super) state: Mutex<Accumulator>,
    /// Wakes the sender (a batch filled, a flush, close).
    pub(super) wake: Notify,
    /// Wakes senders waiting for buffer space.
    pub(super) space: Notify,
    /// Lowest incomplete batch id (u64::MAX: none), for flush.
    pub(super) lowest_incomplete: watch::Sender<u64>,
}

impl SenderState {
    pub(super) fn state(&self) -> MutexGuard<'_, Accumulator> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub(super) fn close_open(queue: &mut PartitionQueue, partition: i32) {
    if let Some(open) = queue.open.take() {
        let records = open.builder.len() as i32;
        queue.queued.push_back(Batch {
            id: open.id,
            partition,
            data: open.builder.build(),
            records,
            buffered: open.buffered,
            seq: None,
            created: open.created,
            attempts: 0,
            not_before: open.created,
            last_error: None,
            done: open.done,
        });
    }
}
