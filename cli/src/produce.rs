//! `shale produce`: every line of stdin goes to the producer as it is read; batching is
//! the producer's (`--linger-ms`, `--batch-size`), as with Kafka's console producer.
//! On SIGINT or SIGTERM it sends what it has read, reports, and exits.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::Args;
use shale_client::{Acks, Client, DeliveryFuture, Producer, ProducerRecord};
use shale_records::batch::Compression;
use tokio::sync::mpsc;

use crate::out;

#[derive(Args)]
pub(crate) struct ProduceArgs {
    /// The topic.
    topic: String,
    /// Split each line at the first SEP into key and value (kcat's -K).
    #[arg(short = 'K', long)]
    key_separator: Option<String>,
    /// Send every record to this partition (default: Kafka's partitioner: murmur2 of
    /// the key, or sticky batches of unkeyed records).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
    /// 0, 1 or all.
    #[arg(long, default_value = "1")]
    acks: Acks,
    /// Print `partition:offset` for each record once acknowledged, in input order
    /// (`-1:-1` for a record that was not written, so lines stay aligned).
    #[arg(long)]
    print_offsets: bool,
    /// Largest batch in bytes, before compression (batch.size).
    #[arg(long, default_value_t = 256 * 1024)]
    batch_size: usize,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: Compression,
    /// How long a batch waits for more records, in ms (linger.ms).
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Idempotent producer (default: on with --acks all).
    #[arg(long)]
    idempotence: Option<bool>,
    /// A header on every record, `key=value` (repeatable; kcat's -H).
    #[arg(short = 'H', long = "header", value_parser = crate::parse_kv)]
    headers: Vec<(String, String)>,
    /// A value equal to this is sent as null (a tombstone).
    #[arg(long)]
    null_value: Option<String>,
    /// Send empty values as null (kcat's -Z).
    #[arg(short = 'Z', long)]
    empty_as_null: bool,
}

impl ProduceArgs {
    fn record(&self, mut line: Vec<u8>) -> ProducerRecord {
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        let separator = self.key_separator.as_deref().map(str::as_bytes);
        let (key, value) = match separator.and_then(|s| split_once(&line, s)) {
            Some((k, v)) => (Some(Bytes::copy_from_slice(k)), Bytes::copy_from_slice(v)),
            None => (None, Bytes::from(line)),
        };
        let null = (self.empty_as_null && value.is_empty())
            || self
                .null_value
                .as_deref()
                .is_some_and(|n| n.as_bytes() == &value[..]);
        ProducerRecord {
            key,
            value: (!null).then_some(value),
            partition: self.partition,
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), Some(Bytes::from(v.clone()))))
                .collect(),
            ..Default::default()
        }
    }
}

/// A record on its way: its line number, size and the answer to come.
type Pending = (u64, u64, shale_client::Result<DeliveryFuture>);

pub(crate) async fn run(client: Client, args: ProduceArgs) -> anyhow::Result<ExitCode> {
    let producer = match Producer::new(client, &args.topic, args.acks).await {
        Err(e) if e.code() == Some(shale_records::ErrorCode::UnknownTopicOrPartition) => {
            anyhow::bail!(
                "{e}: create it with `shale topic create {}` (brokers do not create topics on produce)",
                args.topic
            )
        }
        r => r?,
    };
    let mut producer = producer
        .with_batch_size(args.batch_size)
        .with_compression(args.compression)
        .with_linger(Duration::from_millis(args.linger_ms));
    if let Some(on) = args.idempotence {
        producer = producer.with_idempotence(on);
    }
    if !args.idempotence.unwrap_or(matches!(args.acks, Acks::All)) {
        // Without sequence numbers, a retried batch could land after a later one:
        // one request in flight per partition keeps the lines in input order.
        producer = producer.with_max_in_flight(1);
    }
    // Lines come from a thread blocking on stdin, one at a time.
    let (lines_tx, mut lines) = mpsc::channel::<std::io::Result<Vec<u8>>>(1024);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().split(b'\n') {
            if lines_tx.blocking_send(line).is_err() {
                return;
            }
        }
    });
    // Answers are reported in input order by a task of their own. Unbounded, yet
    // bounded in effect: `send` waits while the producer's buffer memory is full.
    let (pending_tx, pending) = mpsc::unbounded_channel::<Pending>();
    let reporter = tokio::spawn(report(pending, args.print_offsets));
    let mut stop = Signals::new()?;
    let mut line_no = 0u64;
    loop {
        let line = tokio::select! {
            line = lines.recv() => match line {
                Some(line) => line?,
                None => break,
            },
            _ = stop.recv() => {
                tracing::warn!("interrupted: sending what was read, then exiting");
                break;
            }
        };
        line_no += 1;
        let size = line.len() as u64;
        let sent = producer.send(args.record(line)).await;
        if pending_tx.send((line_no, size, sent)).is_err() {
            break; // the reporter stopped: stdout is gone
        }
    }
    drop(pending_tx);
    // Every record's answer arrives through its future; flush only hurries them.
    let _ = producer.flush().await;
    let (written, failed) = reporter.await??;
    if failed > 0 {
        eprintln!(
            "shale: {failed} of {} records were not written",
            written + failed
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

/// Awaits each record's answer in input order: prints `partition:offset` of written
/// ones (with `print_offsets`, and `-1:-1` for failed ones) and reports failed ones on
/// stderr with their line. Returns how many were written and how many failed.
async fn report(
    mut pending: mpsc::UnboundedReceiver<Pending>,
    print_offsets: bool,
) -> anyhow::Result<(u64, u64)> {
    let (mut written, mut failed) = (0u64, 0u64);
    let mut progress = crate::progress::Progress::new("produced");
    while let Some((line, size, sent)) = pending.recv().await {
        let answer = match sent {
            Ok(future) => future.await,
            Err(e) => Err(e),
        };
        match answer {
            Ok(meta) => {
                written += 1;
                progress.add(1, size);
                if print_offsets {
                    out::print(&format!("{}:{}\n", meta.partition, meta.offset))?;
                }
            }
            Err(e) => {
                failed += 1;
                if print_offsets {
                    out::print("-1:-1\n")?;
                }
                eprintln!("shale: line {line}: {e}");
            }
        }
    }
    progress.finish();
    Ok((written, failed))
}

/// SIGINT or SIGTERM.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn new() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
        })
    }

    pub(crate) async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
        }
    }
}

fn split_once<'a>(line: &'a [u8], sep: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    if sep.is_empty() {
        return None;
    }
    line.windows(sep.len())
        .position(|w| w == sep)
        .map(|i| (&line[..i], &line[i + sep.len()..]))
}
