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

mod accumulator;
mod config;
mod delivery;
mod idempotence;
mod sender;

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use shale_records::batch::Compression;
use shale_records::record::{BatchBuilder, Record};
use tokio::sync::{Notify, watch};

use crate::partitioner::partition_for_key;
use crate::{Client, Error, Result};

use accumulator::{Accumulator, OpenBatch, PartitionQueue, SenderState, close_open};
pub use config::{Acks, Partitioner, Partitioning, ProducerConfig};
use delivery::outcome_pair;
pub use delivery::{DeliveryFuture, ProducerRecord, RecordMetadata};
use sender::{RetryLog, Sender};

pub struct Producer {
    client: Client,
    topic: Arc<str>,
    partitions: i32,
    config: ProducerConfig,
    shared: Arc<SenderState>,
    sender: Mutex<Option<tokio::task::JoinHandle<()>>>,
    started: std::sync::atomic::AtomicBool,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
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
            shared: Arc::new(SenderState {
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
