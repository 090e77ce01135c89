//! `shale produce`: every line of stdin goes to the producer as it is read; batching is
//! the producer's (`--linger-ms`, `--batch-size`), as with Kafka's console producer.
//! What it holds is bounded (the producer's buffer memory, and at most
//! [`PENDING_MAX`] records awaiting their answer): past that it stops reading its input.
//! On SIGINT or SIGTERM it stops reading, waits at most [`GRACE`] for the records read
//! so far, reports the others as not written, and exits.

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

/// Records read and not yet answered, at most: past that, input waits.
const PENDING_MAX: usize = 100_000;

/// How long an interrupted producer waits for the records it has read.
pub(crate) const GRACE: Duration = Duration::from_secs(10);

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
    // Answers are reported in input order by a task of their own; `send` waits while
    // the producer's buffer memory is full, and the queue to the reporter is bounded.
    let (pending_tx, pending) = mpsc::channel::<Pending>(PENDING_MAX);
    let (deadline_tx, deadline) = tokio::sync::watch::channel(None);
    let reporter = tokio::spawn(report(pending, deadline, args.print_offsets));
    let mut stop = Signals::new()?;
    let mut line_no = 0u64;
    // Lines read but never handed to the producer (an interruption while it waited).
    let mut unsent = 0u64;
    let interrupted = |unsent: &mut u64, read: bool| {
        tracing::warn!(
            "interrupted: waiting at most {} s for what was read, then exiting",
            GRACE.as_secs()
        );
        *unsent += u64::from(read);
        let _ = deadline_tx.send(Some(tokio::time::Instant::now() + GRACE));
    };
    loop {
        let line = tokio::select! {
            line = lines.recv() => match line {
                Some(line) => line?,
                None => break,
            },
            _ = stop.recv() => {
                interrupted(&mut unsent, false);
                break;
            }
        };
        line_no += 1;
        let size = line.len() as u64;
        let sent = tokio::select! {
            sent = producer.send(args.record(line)) => sent,
            _ = stop.recv() => {
                interrupted(&mut unsent, true);
                break;
            }
        };
        let queued = tokio::select! {
            queued = pending_tx.send((line_no, size, sent)) => queued,
            _ = stop.recv() => {
                // Handed to the producer: its answer is still awaited, within the grace.
                interrupted(&mut unsent, false);
                break;
            }
        };
        if queued.is_err() {
            break; // the reporter stopped: stdout is gone
        }
    }
    drop(pending_tx);
    // Every record's answer arrives through its future; flush only hurries them (and
    // is left at the deadline after an interruption).
    let until = *deadline_tx.borrow();
    match until {
        Some(at) => {
            let _ = tokio::time::timeout_at(at, producer.flush()).await;
        }
        None => {
            let _ = producer.flush().await;
        }
    }
    let (written, mut failed) = reporter.await??;
    if unsent > 0 {
        eprintln!("shale: line {line_no}: not sent (interrupted)");
        failed += unsent;
    }
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
///
/// Once `deadline` is set (an interruption), answers not in by then count as failed.
async fn report(
    mut pending: mpsc::Receiver<Pending>,
    mut deadline: tokio::sync::watch::Receiver<Option<tokio::time::Instant>>,
    print_offsets: bool,
) -> anyhow::Result<(u64, u64)> {
    let (mut written, mut failed) = (0u64, 0u64);
    let mut progress = crate::progress::Progress::new("produced");
    while let Some((line, size, sent)) = pending.recv().await {
        let answer = match sent {
            Ok(future) => {
                tokio::pin!(future);
                loop {
                    let at = *deadline.borrow_and_update();
                    if let Some(at) = at {
                        break tokio::time::timeout_at(at, &mut future)
                            .await
                            .map_err(|_| None)
                            .and_then(|r| r.map_err(Some));
                    }
                    tokio::select! {
                        r = &mut future => break r.map_err(Some),
                        changed = deadline.changed() => if changed.is_err() {
                            break (&mut future).await.map_err(Some);
                        },
                    }
                }
            }
            Err(e) => Err(Some(e)),
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
                match e {
                    Some(e) => eprintln!("shale: line {line}: {e}"),
                    None => eprintln!("shale: line {line}: not written (interrupted)"),
                }
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
