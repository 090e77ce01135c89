//! The sender: a background task that closes batches when full, lingered or flushed,
//! ships them to the partition leaders (several requests in flight per partition), and
//! takes the answers: resolving batches, or queueing them again to retry.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::{BoxFuture, FutureExt};
use futures::stream::{FuturesUnordered, StreamExt};
use shale_proto::v1::{PartitionProduceData, ProduceRequest};
use shale_records::ErrorCode;

use super::accumulator::{Accumulator, Batch, PartitionQueue, SenderState, close_open};
use super::config::ProducerConfig;
use super::delivery::Outcome;
use super::idempotence::{stamp, wrap_seq};
use crate::{Client, Error, Result, check};

/// Largest produce request the sender builds (a batch larger than this goes alone).
const MAX_REQUEST_BYTES: usize = 8 << 20;

/// How retries are logged: the first retriable error at once, then, while retries go
/// on, a line every `RETRY_LOG_EVERY` with their count; a success after retries says
/// so. A producer that cannot succeed is never silent for long.
#[derive(Debug, Default)]
pub(super) struct RetryLog {
    unlogged: u64,
    last_logged: Option<Instant>,
}

const RETRY_LOG_EVERY: Duration = Duration::from_secs(5);

impl RetryLog {
    fn retry(&mut self, partition: usize, e: &Error) {
        self.unlogged += 1;
        match self.last_logged {
            None => {
                tracing::warn!(partition, error = %e, "produce failed, retrying");
                self.unlogged = 0;
                self.last_logged = Some(Instant::now());
            }
            Some(t) if t.elapsed() >= RETRY_LOG_EVERY => {
                tracing::warn!(partition, retries = self.unlogged, error = %e,
                    "still retrying");
                self.unlogged = 0;
                self.last_logged = Some(Instant::now());
            }
            Some(_) => {}
        }
    }

    fn success(&mut self) {
        if self.last_logged.take().is_some() {
            tracing::warn!("produce succeeded again after retries");
            self.unlogged = 0;
        }
    }
}

/// The outcome of one batch's attempt.
pub(super) struct Attempt {
    batch: Batch,
    result: Result<i64>,
}

pub(super) struct Sender {
    pub(super) client: Client,
    pub(super) topic: Arc<str>,
    pub(super) config: ProducerConfig,
    pub(super) idempotent: bool,
    pub(super) shared: Arc<SenderState>,
    pub(super) in_flight: FuturesUnordered<BoxFuture<'static, Vec<Attempt>>>,
}

impl Sender {
    pub(super) async fn run(mut self) {
        loop {
            let needs_id = self.idempotent && self.shared.state().producer.is_none();
            if needs_id && let Err(e) = self.init_producer_id().await {
                self.fail_everything(e);
                return;
            }
            let (ready, next_wake, done) = self.drain(Instant::now());
            if done {
                return;
            }
            self.dispatch(ready).await;
            let wake = self.shared.wake.notified();
            let sleep = tokio::time::sleep_until(next_wake.into());
            tokio::select! {
                _ = wake => {}
                _ = sleep => {}
                Some(attempts) = self.in_flight.next(), if !self.in_flight.is_empty() => {
                    for a in attempts {
                        self.complete(a);
                    }
                }
            }
        }
    }

    fn fail_everything(&self, e: Error) {
        let e = Arc::new(e);
        let mut acc = self.shared.state();
        acc.closed = true;
        for (p, q) in acc.partitions.iter_mut().enumerate() {
            close_open(q, p as i32);
            for b in q.queued.drain(..) {
                let _ = b.done.send(Err(e.clone()));
            }
        }
        acc.incomplete.clear();
        acc.buffered_bytes = 0;
        self.shared.lowest_incomplete.send_replace(u64::MAX);
        self.shared.space.notify_waiters();
    }

    /// Under the lock: closes batches that are full, lingered or flushed; fails those
    /// past the delivery timeout; bumps the epoch when due; and takes the batches that
    /// may go now. Returns them, when to look again, and whether the sender is done.
    fn drain(&self, now: Instant) -> (Vec<Batch>, Instant, bool) {
        let mut acc = self.shared.state();
        let acc = &mut *acc;
        let mut next_wake = now + Duration::from_millis(100);
        let total_in_flight: usize = acc.partitions.iter().map(|q| q.in_flight).sum();
        // A batch that may already be written (its last attempt's answer was lost) is
        // resolved under its own epoch first: renumbered under a new one, it would be
        // written a second time.
        let unresolved = acc
            .partitions
            .iter()
            .any(|q| q.queued.iter().any(may_be_written));
        if acc.bump_epoch && total_in_flight == 0 && !unresolved {
            self.bump_epoch(acc);
        }
        let mut ready = Vec::new();
        let mut expired = Vec::new();
        for (p, q) in acc.partitions.iter_mut().enumerate() {
            if let Some(open) = &q.open {
                let due = open.created + self.config.linger;
                if now >= due || open.id < acc.flush_below || acc.closed {
                    close_open(q, p as i32);
                } else {
                    next_wake = next_wake.min(due);
                }
            }
            while let Some(b) = q.queued.front() {
                if now < b.created + self.config.delivery_timeout {
                    break;
                }
                expired.push(q.queued.pop_front().expect("front exists"));
            }
            // Nothing goes while an epoch bump waits (but the batches it waits for), or
            // while a new id is awaited.
            let resolving = q.queued.front().is_some_and(may_be_written);
            if (acc.bump_epoch && !resolving) || (self.idempotent && acc.producer.is_none()) {
                continue;
            }
            let limit = if q.retrying {
                1
            } else {
                self.config.max_in_flight
            };
            while q.in_flight < limit {
                let Some(b) = q.queued.front() else { break };
                if b.not_before > now {
                    next_wake = next_wake.min(b.not_before);
                    break;
                }
                let mut b = q.queued.pop_front().expect("front exists");
                if self.idempotent && b.seq.is_none() {
                    let (id, epoch) = acc.producer.expect("idempotent producers have an id");
                    stamp(&mut b, id, epoch, q.next_seq);
                    q.next_seq = wrap_seq(q.next_seq, b.records);
                }
                q.in_flight += 1;
                ready.push(b);
            }
        }
        for b in expired {
            let stamped = b.seq.is_some();
            let q = &acc.partitions[b.partition as usize];
            let error = b.last_error.clone().map(|e| explained(q, e)).unwrap_or_else(|| {
                Arc::new(Error::Timeout(format!(
                    "a batch of {} records for partition {} was not sent within the delivery timeout of {:?}",
                    b.records, b.partition, self.config.delivery_timeout
                )))
            });
            self.finish(acc, b, Err(error));
            // Its sequence may never reach the leader: renumber what follows.
            acc.bump_epoch |= stamped;
        }
        let done = acc.closed
            && acc.incomplete.is_empty()
            && acc.partitions.iter().all(|q| q.in_flight == 0);
        (ready, next_wake, done)
    }

    fn finish(&self, acc: &mut Accumulator, b: Batch, outcome: Outcome) {
        let _ = b.done.send(outcome);
        acc.incomplete.remove(&b.id);
        acc.buffered_bytes = acc.buffered_bytes.saturating_sub(b.buffered);
        let lowest = acc.incomplete.first().copied().unwrap_or(u64::MAX);
        self.shared.lowest_incomplete.send_if_modified(|l| {
            let changed = *l != lowest;
            *l = lowest;
            changed
        });
        self.shared.space.notify_waiters();
    }

    /// Groups batches by leader and sends one request per leader.
    async fn dispatch(&mut self, ready: Vec<Batch>) {
        let mut by_leader: std::collections::BTreeMap<i32, (_, Vec<Batch>)> = Default::default();
        let mut failed = Vec::new();
        for b in ready {
            match self.client.leader(&self.topic, b.partition).await {
                Ok((leader, data)) => by_leader
                    .entry(leader)
                    .or_insert_with(|| (data, Vec::new()))
                    .1
                    .push(b),
                Err(e) => failed.push(Attempt {
                    batch: b,
                    result: Err(e),
                }),
            }
        }
        for a in failed {
            self.complete(a);
        }
        for (_, (data, batches)) in by_leader {
            // Requests of at most MAX_REQUEST_BYTES (one batch per partition each).
            let mut request = Vec::new();
            let mut bytes = 0;
            for b in batches {
                if bytes > 0 && bytes + b.data.len() > MAX_REQUEST_BYTES {
                    let full = std::mem::take(&mut request);
                    self.in_flight
                        .push(self.request(data.clone(), full).boxed());
                    bytes = 0;
                }
                bytes += b.data.len();
                request.push(b);
            }
            self.in_flight.push(self.request(data, request).boxed());
        }
    }

    fn request(
        &self,
        mut data: shale_proto::v1::data_client::DataClient<crate::security::Chan>,
        batches: Vec<Batch>,
    ) -> impl Future<Output = Vec<Attempt>> + Send + 'static {
        let timeout = self.client.request_timeout();
        let topic = self.topic.to_string();
        let acks = self.config.acks.wire();
        async move {
            let mut req = tonic::Request::new(ProduceRequest {
                acks,
                timeout_ms: timeout.as_millis().min(u128::from(u32::MAX)) as u32,
                partitions: batches
                    .iter()
                    .map(|b| PartitionProduceData {
                        topic: topic.clone(),
                        partition: b.partition,
                        records: b.data.clone(),
                    })
                    .collect(),
            });
            // The broker answers acks=all within `timeout`; give the network a little more.
            req.set_timeout(timeout + Duration::from_secs(2));
            match data.produce(req).await {
                Ok(resp) => {
                    // One answer per entry of the request, in its order (a partition
                    // may appear more than once).
                    let mut results = resp.into_inner().partitions.into_iter();
                    batches
                        .into_iter()
                        .map(|batch| {
                            let result = match results.next() {
                                Some(p) if p.partition == batch.partition => {
                                    check(p.error_code, &p.error_message)
                                        .map(|()| if acks == 0 { -1 } else { p.base_offset })
                                }
                                _ => Err(Error::Invalid(
                                    "the produce response does not match the request".into(),
                                )),
                            };
                            Attempt { batch, result }
                        })
                        .collect()
                }
                Err(status) => batches
                    .into_iter()
                    .map(|batch| Attempt {
                        batch,
                        result: Err(Error::Rpc(status.clone())),
                    })
                    .collect(),
            }
        }
    }

    /// Takes an attempt's answer: resolves the batch, or queues it again.
    fn complete(&self, a: Attempt) {
        let mut guard = self.shared.state();
        let acc = &mut *guard;
        let p = a.batch.partition as usize;
        let mut b = a.batch;
        // Every attempt was counted in flight when `drain` handed it out.
        acc.partitions[p].in_flight -= 1;
        b.attempts += 1;
        match a.result {
            Ok(base) => {
                let q = &mut acc.partitions[p];
                if let Some((seq, _)) = b.seq {
                    q.acked_seq = wrap_seq(seq, b.records);
                }
                if q.retrying && q.queued.iter().all(|x| x.attempts == 0) {
                    q.retrying = false;
                    q.last_cause = None;
                }
                if b.attempts > 1 {
                    acc.retries.success();
                }
                self.finish(acc, b, Ok(base));
            }
            Err(e) => {
                let code = e.code();
                let gap = matches!(
                    code,
                    Some(ErrorCode::OutOfOrderSequenceNumber | ErrorCode::UnknownProducerId)
                );
                let q = &mut acc.partitions[p];
                let head = b.seq.is_some_and(|(seq, _)| seq == q.acked_seq);
                let e = Arc::new(e);
                if !gap {
                    q.last_cause = Some(e.clone());
                }
                if gap && head {
                    // Nothing before it is missing on our side: the leader lost the
                    // sequence. Renumber under a new epoch.
                    tracing::warn!(partition = p, error = %e, "sequence gap at the leader; bumping the epoch");
                    acc.bump_epoch = true;
                    b.last_error = Some(e);
                    requeue(q, b, Instant::now());
                } else if (gap || e.is_retriable())
                    && Instant::now() < b.created + self.config.delivery_timeout
                {
                    if e.is_leadership() || matches!(*e, Error::Rpc(_) | Error::Connect { .. }) {
                        self.client.invalidate(&self.topic);
                    }
                    tracing::debug!(partition = p, error = %e, attempts = b.attempts, "retrying batch");
                    acc.retries.retry(p, &e);
                    let backoff = self
                        .config
                        .retry_backoff
                        .saturating_mul(1 << b.attempts.min(5))
                        .min(Duration::from_secs(1));
                    q.retrying = true;
                    b.last_error = Some(e);
                    requeue(q, b, Instant::now() + backoff);
                } else {
                    // A verdict (or out of time): this sequence never lands, so the
                    // batches after it need new numbers.
                    acc.bump_epoch |= b.seq.is_some();
                    let e = explained(q, e);
                    self.finish(acc, b, Err(e));
                }
            }
        }
        drop(guard);
        self.shared.wake.notify_one();
    }
}

/// What a failed batch reports. A sequence gap is usually only the consequence of an
/// earlier batch of the partition failing first (the leader refused this one because
/// that one is missing): the earlier failure is the cause, and is reported instead.
fn explained(q: &PartitionQueue, e: Arc<Error>) -> Arc<Error> {
    let gap = matches!(
        e.code(),
        Some(ErrorCode::OutOfOrderSequenceNumber | ErrorCode::UnknownProducerId)
    );
    match &q.last_cause {
        Some(cause) if gap => cause.clone(),
        _ => e,
    }
}

/// Puts a batch back in its partition's queue, in sequence order.
/// Whether a queued batch may already be in the log: it was sent under its sequence
/// and its last attempt did not end in a refusal for a sequence gap (which means it
/// was not written).
fn may_be_written(b: &Batch) -> bool {
    b.seq.is_some()
        && b.attempts > 0
        && !b.last_error.as_ref().is_some_and(|e| {
            matches!(
                e.code(),
                Some(ErrorCode::OutOfOrderSequenceNumber | ErrorCode::UnknownProducerId)
            )
        })
}

fn requeue(q: &mut PartitionQueue, mut b: Batch, not_before: Instant) {
    b.not_before = not_before;
    let pos = match b.seq {
        Some((seq, _)) => q
            .queued
            .iter()
            .position(|x| x.seq.is_none_or(|(s, _)| s > seq))
            .unwrap_or(q.queued.len()),
        None => 0,
    };
    q.queued.insert(pos, b);
}
