//! Prometheus metrics over HTTP (`GET /metrics`, text format 0.0.4). Off unless
//! `metrics_listen` is set. Partition and tier gauges are read from live state at
//! scrape time; request counters are plain atomics bumped on the data path.
//!
//! The HTTP side is deliberately tiny: one request per connection, `GET /metrics` or
//! 404, bounded request size and time, so a stray client cannot hold resources.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;

/// Counters of the data path.
#[derive(Debug, Default)]
pub struct RequestStats {
    pub produce_requests: AtomicU64,
    pub produced_bytes: AtomicU64,
    pub fetch_requests: AtomicU64,
    pub fetched_bytes: AtomicU64,
    /// Batch bytes this broker copied from leaders as a follower.
    pub replicated_bytes: AtomicU64,
    /// Idempotent batches that repeated one already written (answered with its offsets).
    pub duplicate_batches: AtomicU64,
}

impl RequestStats {
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// Serves `/metrics` until cancelled.
pub async fn serve(broker: Arc<Broker>, listener: TcpListener, cancel: CancellationToken) {
    loop {
        let stream = tokio::select! {
            _ = cancel.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "metrics accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let broker = broker.clone();
        tokio::spawn(async move {
            if let Err(e) =
                tokio::time::timeout(Duration::from_secs(5), answer(&broker, stream)).await
            {
                tracing::debug!(error = %e, "metrics request timed out");
            }
        });
    }
}

async fn answer(broker: &Broker, mut stream: TcpStream) {
    let mut request = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 8192 {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let response = if request.starts_with(b"GET /metrics ") || request.starts_with(b"GET /metrics?")
    {
        let body = render(broker);
        format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    } else {
        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
    };
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

fn escape(label: &str) -> String {
    label.replace('\\', "\\\\").replace('"', "\\\"")
}

/// A per-partition gauge: name, help, and how to read it from a row.
type Gauge<T> = (&'static str, &'static str, fn(&T) -> i64);

fn gauge_families<T>(out: &mut String, gauges: &[Gauge<T>], rows: &[(&str, i32, &T)]) {
    for (name, help, get) in gauges {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        for (topic, partition, row) in rows {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\",partition=\"{partition}\"}} {}",
                escape(topic),
                get(row)
            );
        }
    }
}

/// The metrics page.
pub fn render(broker: &Broker) -> String {
    let mut out = String::new();
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let s = &broker.request_stats;
    let (gets, fetched_remote) = broker.remote_read_stats();
    for (name, help, value) in [
        (
            "shale_produce_requests_total",
            "Produce requests received.",
            load(&s.produce_requests),
        ),
        (
            "shale_produced_bytes_total",
            "Record-batch bytes appended.",
            load(&s.produced_bytes),
        ),
        (
            "shale_producer_duplicate_batches_total",
            "Retried idempotent batches answered with their first offsets, not written again.",
            load(&s.duplicate_batches),
        ),
        (
            "shale_fetch_requests_total",
            "Fetch requests answered.",
            load(&s.fetch_requests),
        ),
        (
            "shale_fetched_bytes_total",
            "Record-batch bytes returned by fetches.",
            load(&s.fetched_bytes),
        ),
        (
            "shale_replicated_bytes_total",
            "Record-batch bytes copied from leaders (as a follower).",
            load(&s.replicated_bytes),
        ),
        (
            "shale_remote_get_requests_total",
            "Ranged GETs of remote reads.",
            gets,
        ),
        (
            "shale_remote_fetched_bytes_total",
            "Bytes fetched from the object store by reads.",
            fetched_remote,
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {value}"
        );
    }
    // Replication health, as Kafka's LeaderCount / UnderReplicatedPartitions /
    // UnderMinIsrPartitionCount.
    let (mut leading, mut under_replicated, mut under_min_isr) = (0, 0, 0);
    for p in broker.all_partitions() {
        let role = p.role();
        if role.leader == broker.config.broker_id {
            leading += 1;
            under_replicated += i32::from(role.isr.len() < role.replicas.len());
            under_min_isr += i32::from((role.isr.len() as i64) < p.config().min_insync_replicas);
        }
    }
    for (name, help, value) in [
        (
            "shale_leader_partitions",
            "Partitions this broker leads.",
            leading,
        ),
        (
            "shale_under_replicated_partitions",
            "Partitions led here whose ISR is smaller than their replica set.",
            under_replicated,
        ),
        (
            "shale_under_min_isr_partitions",
            "Partitions led here whose ISR is below min.insync.replicas (acks=all refused).",
            under_min_isr,
        ),
        (
            "shale_lease_valid",
            "1 while this broker's lease lets it act as leader.",
            i32::from(broker.lease_valid()),
        ),
    ] {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    }
    let statuses = broker.tiering_status(None).unwrap_or_default();
    let tier_rows: Vec<_> = statuses
        .iter()
        .map(|t| (t.topic.as_str(), t.partition, t))
        .collect();
    let tier_gauges: [Gauge<crate::tiering::TieringStatus>; 8] = [
        (
            "shale_partition_log_start_offset",
            "First offset readable (remote included).",
            |t| t.log_start_offset,
        ),
        (
            "shale_partition_local_log_start_offset",
            "First offset on local disk.",
            |t| t.local_log_start_offset,
        ),
        (
            "shale_partition_remote_log_start_offset",
            "First offset in the object store (-1: none).",
            |t| t.remote_log_start_offset,
        ),
        (
            "shale_partition_highest_uploaded_offset",
            "Last offset in the object store (-1: none).",
            |t| t.highest_uploaded_offset,
        ),
        (
            "shale_partition_upload_lag_segments",
            "Sealed segments not yet uploaded.",
            |t| t.upload_lag_segments as i64,
        ),
        (
            "shale_partition_upload_lag_bytes",
            "Bytes of sealed segments not yet uploaded.",
            |t| t.upload_lag_bytes as i64,
        ),
        (
            "shale_partition_remote_segments",
            "Finished remote segments.",
            |t| t.remote_segments as i64,
        ),
        (
            "shale_partition_remote_bytes",
            "Bytes of finished remote segments.",
            |t| t.remote_bytes as i64,
        ),
    ];
    gauge_families(&mut out, &tier_gauges, &tier_rows);
    let offsets: Vec<_> = broker
        .topics_snapshot()
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .flatten()
                .map(|p| (p.topic.clone(), p.index, p.offsets()))
                .collect::<Vec<_>>()
        })
        .collect();
    let offset_rows: Vec<_> = offsets.iter().map(|(t, p, o)| (&**t, *p, o)).collect();
    let offset_gauges: [Gauge<crate::partition::PartitionOffsets>; 4] = [
        ("shale_partition_high_watermark", "High watermark.", |o| {
            o.high_watermark
        }),
        ("shale_partition_log_end_offset", "Log end offset.", |o| {
            o.log_end_offset
        }),
        (
            "shale_partition_local_bytes",
            "Bytes of local segments.",
            |o| o.size_bytes as i64,
        ),
        ("shale_partition_local_segments", "Local segments.", |o| {
            o.segments as i64
        }),
    ];
    gauge_families(&mut out, &offset_gauges, &offset_rows);
    out
}
