//! Producer: partitions records, gathers them per partition into RecordBatch v2
//! batches (`batch.size`, `linger.ms`, compression), and a background sender ships the
//! batches to the partition leaders, several requests in flight per partition, retrying
//! retriable errors until the delivery timeout.
//!
//! # Order and idempotence
//! With idempotence (the default with `acks=all`) the producer takes an id from the
//! broker and numbers each partition's records. The leader appends a batch only if its
//! sequence follows the last one, and answers a batch it already holds with the offsets
//! it first wrote it at, so a retry after a lost answer is never written twice and
//! up to `max.in.flight` requests per partition keep their order. When a batch fails,
//! the sender lets the partition's other requests finish and then resends in sequence
//! order, one at a time, until the failed batches are through. If the leader reports a
//! sequence gap the producer cannot close (the batch before it failed for good, or the
//! leader lost the producer's state), it waits for every request in flight, bumps its
//! epoch and renumbers what is still unsent from 0 (Kafka's KIP-360).
//!
//! Without idempotence, retries can duplicate, and with more than one request in
//! flight a retried batch can land after a later one (as in Kafka).

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures::future::{BoxFuture, FutureExt, Shared};
use futures::stream::{FuturesUnordered, StreamExt};
use shale_proto::v1::{InitProducerIdRequest, PartitionProduceData, ProduceRequest};
use shale_records::ErrorCode;
use shale_records::batch::{Compression, set_producer};
use shale_records::record::{BatchBuilder, Record};
use tokio::sync::{Notify, oneshot, watch};

use crate::partitioner::partition_for_key;
use crate::{Client, Error, Result, check};

/// Acknowledgement level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// Do not report offsets. The gRPC call still completes, which keeps the order of
    /// successive sends.
    None,
    /// Answered after the leader's append.
    Leader,
    /// Answered once the high watermark covers the records.
    All,
}

impl Acks {
    fn wire(self) -> i32 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            _ => Err(format!("acks must be 0, 1 or all, not '{s}'")),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub partition: Option<i32>,
    /// Milliseconds since the epoch; now if unset.
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Where an acknowledged record went (`offset` -1 with `Acks::None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    pub partition: i32,
    pub offset: i64,
}

/// Chooses the partition of a record that names none.
pub trait Partitioner: Send + Sync {
    fn partition(&self, key: Option<&[u8]>, value: Option<&[u8]>, partitions: i32) -> i32;
}

/// How records without an explicit partition are spread.
#[derive(Clone, Default)]
pub enum Partitioning {
    /// Kafka's default: murmur2 of the key; unkeyed records stick to one partition
    /// until a batch's worth went there, then move on.
    #[default]
    Default,
    /// Every record to the next partition in turn, keyed or not (Kafka's
    /// `RoundRobinPartitioner`).
    RoundRobin,
    Custom(Arc<dyn Partitioner>),
}

/// Producer settings (Kafka names in the docs of each).
#[derive(Clone)]
pub struct ProducerConfig {
    pub acks: Acks,
    /// `batch.size`: a partition's batch is sent once it holds this many bytes.
    /// Default: 256 KiB.
    pub batch_size: usize,
    /// `linger.ms`: how long a batch that is not full waits for more records.
    /// Default: 5 ms.
    pub linger: Duration,
    /// `compression.type`. Default: none.
    pub compression: Compression,
    /// `max.in.flight.requests.per.connection`, here per partition. Default: 5 (the
    /// most idempotence allows).
    pub max_in_flight: usize,
    /// `delivery.timeout.ms`: how long a record may take from `send` to its answer,
    /// retries included. Default: the client's retry timeout.
    pub delivery_timeout: Duration,
    /// `retry.backoff.ms`, doubled per attempt up to 1 s. Default: 50 ms.
    pub retry_backoff: Duration,
    /// `buffer.memory`: `send` waits while this many bytes are unsent. Default: 64 MiB.
    pub buffer_memory: usize,
    /// `enable.idempotence`. `None`: on with `acks=all`, off otherwise.
    pub idempotence: Option<bool>,
    pub partitioning: Partitioning,
}

/// Largest produce request the sender builds (a batch larger than this goes alone).
const MAX_REQUEST_BYTES: usize = 8 << 20;

/// The answer of one batch: its base offset (-1 with acks=0) or why it failed.
type Outcome = Result<i64, Arc<Error>>;
type OutcomeFuture = Shared<BoxFuture<'static, Outcome>>;

/// Resolves to where a sent record went (a future; cheap to hold per record).
pub struct DeliveryFuture {
    outcome: OutcomeFuture,
    partition: i32,
    index: i64,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        std::pin::Pin::new(&mut this.outcome).poll(cx).map(|r| {
            let base = r.map_err(Error::Shared)?;
            Ok(RecordMetadata {
                partition: this.partition,
                offset: if base < 0 { -1 } else { base + this.index },
            })
        })
    }
}

/// A batch being filled.
struct OpenBatch {
    id: u64,
    builder: BatchBuilder,
    /// Bytes counted against `buffer_memory` for its records.
    buffered: usize,
    created: Instant,
    done: oneshot::Sender<Outcome>,
    outcome: OutcomeFuture,
}

/// A closed batch, queued or in flight.
struct Batch {
    id: u64,
    partition: i32,
    data: Bytes,
    records: i32,
    /// Bytes counted against `buffer_memory` (released when the batch is answered).
    buffered: usize,
    /// Sequence and epoch stamped into `data` (idempotence), once first sent.
    seq: Option<(i32, i16)>,
    created: Instant,
    attempts: u32,
    not_before: Instant,
    /// What the last attempt got (reported if the delivery timeout passes).
    last_error: Option<Arc<Error>>,
    done: oneshot::Sender<Outcome>,
}

#[derive(Default)]
struct PartitionQueue {
    open: Option<OpenBatch>,
    queued: VecDeque<Batch>,
    in_flight: usize,
    /// Sequence of the next batch stamped.
    next_seq: i32,
    /// Sequence the leader expects next (after the last acknowledged batch).
    acked_seq: i32,
    /// A batch failed: resend one at a time, in order, until the failed ones are through.
    retrying: bool,
}

struct Accumulator {
    partitions: Vec<PartitionQueue>,
    buffered_bytes: usize,
    next_batch_id: u64,
    /// Batches with ids below this are closed at once (a flush).
    flush_below: u64,
    /// Ids of batches not yet answered.
    incomplete: BTreeSet<u64>,
    sticky_partition: i32,
    sticky_bytes: usize,
    round_robin: i32,
    /// Producer id and epoch (idempotence), once the broker gave one.
    producer: Option<(i64, i16)>,
    /// A sequence gap: bump the epoch once nothing is in flight.
    bump_epoch: bool,
    closed: bool,
    /// Retries not logged yet, and when retries were last logged (see `log_retry`).
    retries: RetryLog,
}

/// How retries are logged: the first retriable error at once, then, while retries go
/// on, a line every `RETRY_LOG_EVERY` with their count; a success after retries says
/// so. A producer that cannot succeed is never silent for long.
#[derive(Debug, Default)]
struct RetryLog {
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

struct Shared_ {
    state: Mutex<Accumulator>,
    /// Wakes the sender (a batch filled, a flush, close).
    wake: Notify,
    /// Wakes senders waiting for buffer space.
    space: Notify,
    /// Lowest incomplete batch id (u64::MAX: none), for flush.
    lowest_incomplete: watch::Sender<u64>,
}

impl Shared_ {
    fn state(&self) -> MutexGuard<'_, Accumulator> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

pub struct Producer {
    client: Client,
    topic: Arc<str>,
    partitions: i32,
    config: ProducerConfig,
    shared: Arc<Shared_>,
    sender: Mutex<Option<tokio::task::JoinHandle<()>>>,
    started: std::sync::atomic::AtomicBool,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn outcome_pair() -> (oneshot::Sender<Outcome>, OutcomeFuture) {
    let (tx, rx) = oneshot::channel();
    let fut = async move {
        rx.await.unwrap_or_else(|_| {
            Err(Arc::new(Error::Invalid(
                "the producer stopped before the record was sent".into(),
            )))
        })
    }
    .boxed()
    .shared();
    (tx, fut)
}

impl Producer {
    pub async fn new(client: Client, topic: &str, acks: Acks) -> Result<Self> {
        let partitions = client.partition_count(topic).await?;
        let config = ProducerConfig {
            acks,
            batch_size: 256 * 1024,
            linger: Duration::from_millis(5),
            compression: Compression::None,
            max_in_flight: 5,
            delivery_timeout: client.retry_timeout(),
            retry_backoff: Duration::from_millis(50),
            buffer_memory: 64 << 20,
            idempotence: None,
            partitioning: Partitioning::Default,
        };
        let accumulator = Accumulator {
            partitions: (0..partitions).map(|_| PartitionQueue::default()).collect(),
            buffered_bytes: 0,
            next_batch_id: 0,
            flush_below: 0,
            incomplete: BTreeSet::new(),
            sticky_partition: (now_ms() % i64::from(partitions.max(1))) as i32,
            sticky_bytes: 0,
            round_robin: 0,
            producer: None,
            bump_epoch: false,
            closed: false,
            retries: RetryLog::default(),
        };
        Ok(Self {
            client,
            topic: topic.into(),
            partitions,
            config,
            shared: Arc::new(Shared_ {
                state: Mutex::new(accumulator),
                wake: Notify::new(),
                space: Notify::new(),
                lowest_incomplete: watch::Sender::new(u64::MAX),
            }),
            sender: Mutex::new(None),
            started: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Replaces every setting (before the first send).
    pub fn with_config(mut self, config: ProducerConfig) -> Self {
        self.config = config;
        self
    }

    pub fn config(&self) -> &ProducerConfig {
        &self.config
    }

    /// Codec of the batches sent (Kafka `compression.type`). Default: none. The broker
    /// stores compressed batches as they come; consumers decompress.
    pub fn with_compression(mut self, compression: Compression) -> Self {
        self.config.compression = compression;
        self
    }

    /// Largest batch, in bytes (Kafka `batch.size`). Default: 256 KiB.
    pub fn with_batch_size(mut self, bytes: usize) -> Self {
        self.config.batch_size = bytes.max(1);
        self
    }

    /// How long a batch waits for more records (Kafka `linger.ms`). Default: 5 ms.
    pub fn with_linger(mut self, linger: Duration) -> Self {
        self.config.linger = linger;
        self
    }

    pub fn with_idempotence(mut self, on: bool) -> Self {
        self.config.idempotence = Some(on);
        self
    }

    pub fn with_partitioning(mut self, partitioning: Partitioning) -> Self {
        self.config.partitioning = partitioning;
        self
    }

    pub fn with_max_in_flight(mut self, n: usize) -> Self {
        self.config.max_in_flight = n.max(1);
        self
    }

    /// Unsent bytes `send` lets wait before it waits itself (Kafka `buffer.memory`).
    pub fn with_buffer_memory(mut self, bytes: usize) -> Self {
        self.config.buffer_memory = bytes.max(1);
        self
    }

    pub fn with_delivery_timeout(mut self, timeout: Duration) -> Self {
        self.config.delivery_timeout = timeout;
        self
    }

    pub fn partitions(&self) -> i32 {
        self.partitions
    }

    /// The idempotent producer's id and current epoch (`None` before the first send or
    /// without idempotence).
    pub fn producer_id(&self) -> Option<(i64, i16)> {
        self.shared.state().producer
    }

    fn idempotent(&self) -> Result<bool> {
        match (self.config.idempotence, self.config.acks) {
            (Some(true), Acks::None | Acks::Leader) => Err(Error::Invalid(
                "idempotence needs acks=all (as in Kafka): a leader that fails before its \
                 followers copied a batch would lose it, and with it the sequence"
                    .into(),
            )),
            (Some(on), _) => Ok(on),
            (None, acks) => Ok(acks == Acks::All),
        }
    }

    fn start(&self) -> Result<()> {
        let idempotent = self.idempotent()?;
        let mut sender = self.sender.lock().unwrap_or_else(|e| e.into_inner());
        if sender.is_none() {
            let s = Sender {
                client: self.client.clone(),
                topic: self.topic.clone(),
                config: self.config.clone(),
                idempotent,
                shared: self.shared.clone(),
                in_flight: FuturesUnordered::new(),
            };
            *sender = Some(tokio::spawn(s.run()));
            self.started
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(())
    }

    fn check_partition(&self, p: i32) -> Result<i32> {
        if !(0..self.partitions).contains(&p) {
            return Err(Error::Invalid(format!(
                "partition {p} does not exist: topic '{}' has {} partitions",
                self.topic, self.partitions
            )));
        }
        Ok(p)
    }

    fn partition_of(&self, acc: &mut Accumulator, r: &ProducerRecord) -> Result<i32> {
        if let Some(p) = r.partition {
            return self.check_partition(p);
        }
        let n = self.partitions.max(1);
        match &self.config.partitioning {
            Partitioning::Custom(p) => {
                self.check_partition(p.partition(r.key.as_deref(), r.value.as_deref(), n))
            }
            Partitioning::RoundRobin => {
                acc.round_robin = (acc.round_robin + 1) % n;
                Ok(acc.round_robin)
            }
            Partitioning::Default => {
                if let Some(key) = &r.key {
                    return Ok(partition_for_key(key, n));
                }
                let size = r.value.as_ref().map_or(0, Bytes::len) + 16;
                if acc.sticky_bytes + size > self.config.batch_size && acc.sticky_bytes > 0 {
                    acc.sticky_partition = (acc.sticky_partition + 1) % n;
                    acc.sticky_bytes = 0;
                }
                acc.sticky_bytes += size;
                Ok(acc.sticky_partition)
            }
        }
    }

    /// Queues a record for its partition's next batch and returns a future of its
    /// offset. Waits while `buffer_memory` bytes are unsent. An error here (a
    /// partition that does not exist, a closed producer) means the record was not
    /// queued.
    pub async fn send(&self, record: ProducerRecord) -> Result<DeliveryFuture> {
        if !self.started.load(std::sync::atomic::Ordering::Relaxed) {
            self.start()?;
        }
        let size = record.key.as_ref().map_or(0, Bytes::len)
            + record.value.as_ref().map_or(0, Bytes::len)
            + 16;
        let fits = |acc: &Accumulator| {
            acc.buffered_bytes == 0 || acc.buffered_bytes + size <= self.config.buffer_memory
        };
        loop {
            {
                let mut acc = self.shared.state();
                if acc.closed {
                    return Err(Error::Invalid("the producer is closed".into()));
                }
                if fits(&acc) {
                    return self.append(&mut acc, record, size);
                }
            }
            // Full: wait for answers to free space (registered before looking again).
            let space = self.shared.space.notified();
            tokio::pin!(space);
            space.as_mut().enable();
            let again = {
                let acc = self.shared.state();
                acc.closed || fits(&acc)
            };
            if !again {
                space.await;
            }
        }
    }

    /// Adds a record to its partition's open batch (under the accumulator's lock).
    fn append(
        &self,
        acc: &mut Accumulator,
        record: ProducerRecord,
        size: usize,
    ) -> Result<DeliveryFuture> {
        let partition = self.partition_of(acc, &record)?;
        let ts = record.timestamp.unwrap_or_else(now_ms);
        acc.buffered_bytes += size;
        let id = acc.next_batch_id;
        let compression = self.config.compression;
        let queue = &mut acc.partitions[partition as usize];
        // A record that does not fit the open batch starts the next one.
        if queue.open.as_ref().is_some_and(|o| {
            !o.builder.is_empty() && o.builder.size_bytes() + size > self.config.batch_size
        }) {
            close_open(queue, partition);
            self.shared.wake.notify_one();
        }
        let open = queue.open.get_or_insert_with(|| {
            acc.next_batch_id += 1;
            acc.incomplete.insert(id);
            let (done, outcome) = outcome_pair();
            OpenBatch {
                id,
                builder: BatchBuilder::new(ts).with_compression(compression),
                buffered: 0,
                created: Instant::now(),
                done,
                outcome,
            }
        });
        let index = open.builder.len() as i64;
        open.buffered += size;
        open.builder.push(Record {
            offset: 0,
            timestamp: ts,
            key: record.key,
            value: record.value,
            headers: record.headers,
        });
        let future = DeliveryFuture {
            outcome: open.outcome.clone(),
            partition,
            index,
        };
        if open.builder.size_bytes() >= self.config.batch_size {
            close_open(queue, partition);
            self.shared.wake.notify_one();
        }
        if acc.incomplete.first() == Some(&id) {
            self.shared.lowest_incomplete.send_replace(id);
        }
        Ok(future)
    }

    /// Sends `callback` the outcome of the record once it is known.
    pub async fn send_with_callback(
        &self,
        record: ProducerRecord,
        callback: impl FnOnce(Result<RecordMetadata>) + Send + 'static,
    ) -> Result<()> {
        let fut = self.send(record).await?;
        tokio::spawn(async move { callback(fut.await) });
        Ok(())
    }

    /// Sends every batch now (ignoring `linger`) and waits until every record sent
    /// before the call has its answer (whatever it is: read the futures for that).
    pub async fn flush(&self) -> Result<()> {
        let target = {
            let mut acc = self.shared.state();
            acc.flush_below = acc.next_batch_id;
            acc.next_batch_id
        };
        self.shared.wake.notify_one();
        let mut lowest = self.shared.lowest_incomplete.subscribe();
        lowest
            .wait_for(|l| *l >= target)
            .await
            .map_err(|_| Error::Invalid("the producer's sender stopped".into()))?;
        Ok(())
    }

    /// Sends every record and waits for all of them; the offsets come in input order.
    /// Nothing is sent if any record names a partition that does not exist. The first
    /// failure is returned (records after it may still have been written).
    pub async fn send_all(&mut self, records: Vec<ProducerRecord>) -> Result<Vec<RecordMetadata>> {
        for r in &records {
            if let Some(p) = r.partition {
                self.check_partition(p)?;
            }
        }
        let mut futures = Vec::with_capacity(records.len());
        for r in records {
            futures.push(self.send(r).await?);
        }
        self.flush().await?;
        let mut out = Vec::with_capacity(futures.len());
        for f in futures {
            out.push(f.await?);
        }
        Ok(out)
    }

    /// Flushes, then stops the sender.
    pub async fn close(self) -> Result<()> {
        self.flush().await?;
        self.shared.state().closed = true;
        self.shared.wake.notify_one();
        let handle = self.sender.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            let _ = h.await;
        }
        Ok(())
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // The sender finishes what is queued, then stops.
        self.shared.state().closed = true;
        self.shared.wake.notify_one();
    }
}

fn close_open(queue: &mut PartitionQueue, partition: i32) {
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

/// The outcome of one batch's attempt.
struct Attempt {
    batch: Batch,
    result: Result<i64>,
}

struct Sender {
    client: Client,
    topic: Arc<str>,
    config: ProducerConfig,
    idempotent: bool,
    shared: Arc<Shared_>,
    in_flight: FuturesUnordered<BoxFuture<'static, Vec<Attempt>>>,
}

impl Sender {
    async fn run(mut self) {
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

    async fn init_producer_id(&mut self) -> Result<()> {
        let deadline = Instant::now() + self.config.delivery_timeout;
        let mut backoff = self.config.retry_backoff;
        loop {
            let r = async {
                let r = self
                    .client
                    .data_any()
                    .init_producer_id(InitProducerIdRequest {})
                    .await?
                    .into_inner();
                if let Some(e) = r.error {
                    check(e.error_code, &e.error_message)?;
                }
                Ok::<_, Error>((r.producer_id, r.producer_epoch as i16))
            }
            .await;
            match r {
                Ok(p) => {
                    tracing::debug!(producer_id = p.0, "idempotent producer id");
                    self.shared.state().producer = Some(p);
                    return Ok(());
                }
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
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
        if acc.bump_epoch && total_in_flight == 0 {
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
            // Nothing goes while an epoch bump waits, or while a new id is awaited.
            if acc.bump_epoch || (self.idempotent && acc.producer.is_none()) {
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
            let error = b.last_error.clone().unwrap_or_else(|| {
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

    /// Every batch of a partition in flight has ended: start a new epoch, numbering
    /// each partition's unsent batches from 0.
    fn bump_epoch(&self, acc: &mut Accumulator) {
        acc.bump_epoch = false;
        let Some((id, epoch)) = acc.producer else {
            return;
        };
        if epoch == i16::MAX {
            // A fresh id is needed; the sender asks for one before the next drain.
            acc.producer = None;
        } else {
            acc.producer = Some((id, epoch + 1));
        }
        tracing::info!(
            producer_id = id,
            epoch = epoch + 1,
            "bumping the producer epoch"
        );
        for q in &mut acc.partitions {
            q.next_seq = 0;
            q.acked_seq = 0;
            q.retrying = false;
            for b in &mut q.queued {
                b.seq = None;
            }
        }
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
        mut data: shale_proto::v1::data_client::DataClient<tonic::transport::Channel>,
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
                if gap && head {
                    // Nothing before it is missing on our side: the leader lost the
                    // sequence. Renumber under a new epoch.
                    tracing::warn!(partition = p, error = %e, "sequence gap at the leader; bumping the epoch");
                    acc.bump_epoch = true;
                    requeue(q, b, Instant::now());
                } else if (gap || e.is_retriable())
                    && Instant::now() < b.created + self.config.delivery_timeout
                {
                    if e.is_leadership() || matches!(e, Error::Rpc(_) | Error::Connect { .. }) {
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
                    b.last_error = Some(Arc::new(e));
                    requeue(q, b, Instant::now() + backoff);
                } else {
                    // A verdict (or out of time): this sequence never lands, so the
                    // batches after it need new numbers.
                    acc.bump_epoch |= b.seq.is_some();
                    self.finish(acc, b, Err(Arc::new(e)));
                }
            }
        }
        drop(guard);
        self.shared.wake.notify_one();
    }
}

/// Puts a batch back in its partition's queue, in sequence order.
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

fn wrap_seq(seq: i32, records: i32) -> i32 {
    ((i64::from(seq) + i64::from(records)) % (i64::from(i32::MAX) + 1)) as i32
}

fn stamp(b: &mut Batch, producer_id: i64, epoch: i16, seq: i32) {
    let data = std::mem::take(&mut b.data);
    let mut m = data
        .try_into_mut()
        .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
    set_producer(&mut m, producer_id, epoch, seq);
    b.data = m.freeze();
    b.seq = Some((seq, epoch));
}
