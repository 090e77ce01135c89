//! The log cleaner beside ingest: produce → consume latency of one-record sends at a
//! fixed rate, first with the broker idle, then while its cleaner compacts a topic of
//! keyed updates, once without an I/O limit and once under
//! `cleaner_io_max_bytes_per_second`. Also the cleaner's own speed: bytes of dirty log
//! it took per second.

use std::time::{Duration, Instant};

use shale_client::{Acks, Client, Producer, ProducerRecord};

use super::isolation::RATE;
use super::latency::latency_at;
use super::targets::single_broker;
use super::{Ctx, MIB, configs};
use crate::report::{CaseResult, Ratio, numbers, params};

pub(crate) async fn compaction(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    if ctx.bootstrap.is_some() {
        anyhow::bail!(
            "the compaction scenario configures its own broker's cleaner: run it without --bootstrap"
        );
    }
    let mut out = Vec::new();
    for limit_mib in [0u64, 16] {
        super::running(
            "compaction",
            if limit_mib == 0 {
                "cleaner without an I/O limit".to_string()
            } else {
                format!("cleaner under {limit_mib} MiB/s")
            },
        );
        out.push(case(ctx, limit_mib).await?);
    }
    Ok(out)
}

async fn case(ctx: &Ctx, limit_mib: u64) -> anyhow::Result<CaseResult> {
    let config = format!(
        "[log]\ncleaner_backoff_ms = 200\ncleaner_io_max_bytes_per_second = {}\n",
        limit_mib << 20
    );
    let target = single_broker(ctx, &config).await?;
    let client = &target.client;
    let bytes = ctx.size(512, 32);
    let table = "compaction-table";
    // Held dirty (min.compaction.lag.ms) until the measurement starts.
    client
        .create_topic(
            table,
            1,
            1,
            configs(&[
                ("cleanup.policy", "compact"),
                (
                    "segment.bytes",
                    if ctx.quick { "1048576" } else { "16777216" },
                ),
                ("min.compaction.lag.ms", "86400000"),
                ("remote.storage.enable", "false"),
            ]),
        )
        .await?;
    let keys = 10_000u64;
    fill(client, table, bytes, keys).await?;
    // The fill's dirty pages reach the disk before anything is measured.
    tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await??;
    let e2e = "compaction-e2e";
    client
        .create_topic(e2e, 1, 1, configs(&[("remote.storage.enable", "false")]))
        .await?;
    let run_for = Duration::from_millis(if ctx.quick { 1_500 } else { 10_000 });
    latency_at(client, e2e, RATE, Duration::from_millis(300)).await?;
    let idle = latency_at(client, e2e, RATE, run_for).await?;

    let started = Instant::now();
    client
        .alter_configs(
            table,
            configs(&[("min.compaction.lag.ms", "0")]),
            Vec::new(),
        )
        .await?;
    let done = {
        let client = client.clone();
        tokio::spawn(async move { wait_cleaned(&client, table, started).await })
    };
    let busy = latency_at(client, e2e, RATE, run_for).await?;
    let cleaning_secs = done.await??;
    let size_after = client.describe_topic(table).await?.partitions[0].size_bytes;

    let q = |h: &hdrhistogram::Histogram<u64>, x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    let overlap = (run_for.as_secs_f64() / cleaning_secs).min(1.0);
    Ok(CaseResult {
        scenario: "compaction".into(),
        params: params(&[
            (
                "cleaner_io_limit",
                if limit_mib == 0 {
                    "none".into()
                } else {
                    format!("{limit_mib} MiB/s")
                },
            ),
            ("rate_per_sec", format!("{RATE:.0}")),
            ("acks", "1".into()),
            ("table_mib", format!("{:.0}", bytes as f64 / MIB)),
            ("keys", keys.to_string()),
        ]),
        metrics: numbers(&[
            ("cleaning_p50_ms", q(&busy, 0.5)),
            ("cleaning_p99_ms", q(&busy, 0.99)),
            ("cleaning_p999_ms", q(&busy, 0.999)),
            ("cleaner_mib_per_sec", bytes as f64 / MIB / cleaning_secs),
            ("cleaning_secs", cleaning_secs),
            ("size_after_mib", size_after as f64 / MIB),
            ("samples", busy.len() as f64),
        ]),
        baselines: numbers(&[
            ("idle_p50_ms", q(&idle, 0.5)),
            ("idle_p99_ms", q(&idle, 0.99)),
            ("cleaning_overlap", overlap),
        ]),
        ratio: Some(Ratio::new(
            "idle p99 / p99 while the cleaner runs",
            q(&idle, 0.99) / q(&busy, 0.99).max(1e-6),
            None,
        )),
        broker: target.stats(),
    })
}

/// `bytes` of updates to `keys` keys, 100-byte values.
async fn fill(client: &Client, topic: &str, bytes: u64, keys: u64) -> anyhow::Result<()> {
    let mut p = Producer::new(client.clone(), topic, Acks::Leader)
        .await?
        .with_batch_size(256 * 1024);
    let per_record = 120u64;
    let mut sent = 0u64;
    let mut i = 0u64;
    while sent < bytes {
        let records: Vec<_> = (0..1_000)
            .map(|j| {
                let n = i + j;
                ProducerRecord {
                    key: Some(format!("key-{:06}", n % keys).into()),
                    value: Some(vec![b'v'; 100].into()),
                    partition: Some(0),
                    ..Default::default()
                }
            })
            .collect();
        p.send_all(records).await?;
        i += 1_000;
        sent += 1_000 * per_record;
    }
    Ok(())
}

/// Waits for the first cleaning of partition 0 to leave nothing dirty; returns when
/// that was, in seconds since `start`.
async fn wait_cleaned(client: &Client, topic: &str, start: Instant) -> anyhow::Result<f64> {
    loop {
        let p = client.describe_topic(topic).await?.partitions[0].clone();
        if p.last_cleaned_ms >= 0 && p.dirty_bytes == 0 {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > Duration::from_secs(600) {
            anyhow::bail!("the cleaner did not finish {topic} in 10 minutes: {p:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
