//! Load generation shared by the scenarios: log-like record values, producing a number
//! of bytes, and consuming a topic to its end.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};
use shale_records::batch::Compression;

use super::Sent;

/// 64 MiB of log-like text: words drawn at random from a 256-word vocabulary, so
/// codecs find what they find in real logs (LZ4 about 2:1, zstd about 3:1); record
/// values are slices of it at scattered offsets, so records do not repeat each other.
fn value_pool() -> Bytes {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words: Vec<Vec<u8>> = (0..256)
        .map(|_| {
            let len = 3 + (next() % 8) as usize;
            (0..len).map(|_| b'a' + (next() % 26) as u8).collect()
        })
        .collect();
    let mut pool = Vec::with_capacity((64 << 20) + 16);
    while pool.len() < 64 << 20 {
        pool.extend_from_slice(&words[(next() % 256) as usize]);
        pool.push(if next() % 16 == 0 { b'\n' } else { b' ' });
    }
    pool.into()
}

fn sample_value(pool: &Bytes, i: u64, size: usize) -> Bytes {
    let span = (pool.len() - size) as u64;
    let at = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11) % span;
    pool.slice(at as usize..at as usize + size)
}

/// Produces `bytes` of `record_size`-byte values, round-robin over `partitions` when
/// `spread`, else sticky (the producer's default for unkeyed records).
pub(super) async fn produce_bytes(
    client: &Client,
    topic: &str,
    bytes: u64,
    record_size: usize,
    acks: Acks,
    spread: Option<i32>,
) -> anyhow::Result<Sent> {
    produce_compressed(
        client,
        topic,
        bytes,
        record_size,
        acks,
        spread,
        Compression::None,
    )
    .await
}

pub(super) async fn produce_compressed(
    client: &Client,
    topic: &str,
    bytes: u64,
    record_size: usize,
    acks: Acks,
    spread: Option<i32>,
    compression: Compression,
) -> anyhow::Result<Sent> {
    produce_keyed(
        client,
        topic,
        bytes,
        record_size,
        acks,
        spread,
        compression,
        |_| None,
    )
    .await
}

/// [`produce_compressed`], record `i` with key `key(i)`.
#[allow(clippy::too_many_arguments)]
pub(super) async fn produce_keyed(
    client: &Client,
    topic: &str,
    bytes: u64,
    record_size: usize,
    acks: Acks,
    spread: Option<i32>,
    compression: Compression,
    key: impl Fn(u64) -> Option<Bytes>,
) -> anyhow::Result<Sent> {
    let producer = Producer::new(client.clone(), topic, acks)
        .await?
        .with_compression(compression);
    let pool = value_pool();
    let total = (bytes / record_size as u64).max(1);
    let start = Instant::now();
    // Records are sent as fast as the producer takes them (it batches, lingers and
    // keeps requests in flight); every acknowledgement is checked at the end.
    let mut pending = Vec::with_capacity(total as usize);
    for i in 0..total {
        let record = ProducerRecord {
            key: key(i),
            value: Some(sample_value(&pool, i, record_size)),
            partition: spread.map(|p| (i % p as u64) as i32),
            ..Default::default()
        };
        pending.push(producer.send(record).await.context("produce failed")?);
    }
    producer.flush().await.context("produce failed")?;
    for f in pending {
        f.await.context("produce failed")?;
    }
    let sent = total;
    Ok(Sent {
        records: sent,
        bytes: sent * record_size as u64,
        secs: start.elapsed().as_secs_f64(),
    })
}

/// Consumes a topic from its start to its current end.
pub(super) async fn consume_all(client: &Client, topic: &str) -> anyhow::Result<Sent> {
    let mut total = 0;
    for p in 0..client.partition_count(topic).await? {
        let start = client.list_offset(topic, p, -2).await?.unwrap_or(0);
        total += client.list_offset(topic, p, -1).await?.unwrap_or(0) - start;
    }
    let mut consumer = Consumer::new(client.clone(), topic, None, StartFrom::Earliest)
        .await?
        .with_offset_reset(shale_client::OffsetReset::Earliest);
    let start = Instant::now();
    let (mut n, mut bytes) = (0i64, 0u64);
    let deadline = start + Duration::from_secs(600);
    while n < total {
        if Instant::now() > deadline {
            bail!("consume of '{topic}' stalled at {n} of {total} records");
        }
        let records = consumer.poll(Duration::from_secs(1)).await?;
        n += records.len() as i64;
        bytes += records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Bytes::len) as u64)
            .sum::<u64>();
    }
    Ok(Sent {
        records: n as u64,
        bytes,
        secs: start.elapsed().as_secs_f64(),
    })
}
