//! Topics as Iceberg tables (`iceberg.mode=key_value`, and `value_schema` for a
//! backlog of JSON records), on the embedded default
//! (SQLite catalog, `file://` bucket), against the same broker build with tables off,
//! same run:
//! - produce throughput and broker CPU with the table written as records arrive
//!   (commit interval 1 s) against a topic without one;
//! - translation on its own: a backlog written to a topic without a table, which is
//!   then switched on:
//!   MiB of log per second into the table, broker CPU seconds per GiB, Parquet bytes
//!   per log byte, and produce → consume p99 of one-record sends meanwhile against the
//!   same with the broker idle; the same for a backlog of JSON records translated into
//!   typed columns (`value_schema`);
//! - the lag at steady state: records sent at a fixed rate, the table's lag (seconds,
//!   as `describe` reports it) sampled each half second, at a 5 s commit interval.

use std::time::{Duration, Instant};

use anyhow::bail;
use shale_client::{Acks, Client, Producer, ProducerRecord};

use super::latency::latency_at;
use super::load::produce_bytes;
use super::targets::single_broker;
use super::{Ctx, MIB, configs};
use crate::report::{CaseResult, Ratio, numbers, params};

const PARTITIONS: i32 = 4;
const RECORD: usize = 200;
/// One-record sends per second while latency is measured.
const RATE: f64 = 200.0;

pub(crate) async fn table(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    if ctx.bootstrap.is_some() {
        bail!("the table scenario starts its own brokers: run it without --bootstrap");
    }
    let bytes = ctx.size(1024, 64);
    super::running("table", "produce with the table written, and without");
    let (off, on) = (
        ingest(ctx, bytes, false).await?,
        ingest(ctx, bytes, true).await?,
    );
    super::running("table", "translation of a backlog");
    let backlog = translate_backlog(ctx, bytes, false).await?;
    super::running("table", "translation of a JSON backlog into columns");
    let json = translate_backlog(ctx, bytes, true).await?;
    super::running("table", "lag at a steady rate");
    let steady = steady_lag(ctx).await?;
    let size = params(&[
        ("log_mib", format!("{:.0}", bytes as f64 / MIB)),
        ("record_bytes", RECORD.to_string()),
        ("partitions", PARTITIONS.to_string()),
        ("catalog", "sqlite".into()),
        ("bucket", "file".into()),
    ]);
    Ok(vec![
        CaseResult {
            scenario: "table".into(),
            params: with(&size, &[("case", "produce, table written at 1 s commits")]),
            metrics: numbers(&[
                ("produce_mib_per_sec", on.mib_per_sec),
                ("broker_cpu_secs", on.cpu_secs),
                (
                    "extra_cpu_secs_per_gib",
                    (on.cpu_secs - off.cpu_secs) / (bytes as f64 / (1024.0 * MIB)),
                ),
            ]),
            baselines: numbers(&[
                ("off_produce_mib_per_sec", off.mib_per_sec),
                ("off_broker_cpu_secs", off.cpu_secs),
            ]),
            ratio: Some(Ratio::new(
                "produce MiB/s with the table / without",
                on.mib_per_sec / off.mib_per_sec.max(1e-9),
                None,
            )),
            broker: Default::default(),
        },
        backlog_case(&size, "translation of a backlog", &backlog),
        backlog_case(&size, "translation of a JSON backlog, value_schema", &json),
        CaseResult {
            scenario: "table".into(),
            params: with(
                &size,
                &[
                    ("case", "steady rate, 5 s commits"),
                    ("rate_mib_per_sec", &format!("{:.0}", steady.rate_mib)),
                ],
            ),
            metrics: numbers(&[
                ("lag_max_secs", steady.max_lag_secs),
                ("lag_mean_secs", steady.mean_lag_secs),
            ]),
            baselines: numbers(&[("commit_interval_secs", 5.0)]),
            ratio: None,
            broker: Default::default(),
        },
    ])
}

fn backlog_case(
    size: &std::collections::BTreeMap<String, String>,
    case: &str,
    backlog: &Backlog,
) -> CaseResult {
    CaseResult {
        scenario: "table".into(),
        params: with(size, &[("case", case)]),
        metrics: numbers(&[
            ("translate_mib_per_sec", backlog.mib_per_sec),
            ("cpu_secs_per_gib", backlog.cpu_secs_per_gib),
            ("parquet_bytes_per_log_byte", backlog.parquet_per_log),
            ("translating_p99_ms", backlog.busy_p99_ms),
        ]),
        baselines: numbers(&[("idle_p99_ms", backlog.idle_p99_ms)]),
        ratio: Some(Ratio::new(
            "idle p99 / p99 while translating",
            backlog.idle_p99_ms / backlog.busy_p99_ms.max(1e-6),
            None,
        )),
        broker: Default::default(),
    }
}

fn with(
    base: &std::collections::BTreeMap<String, String>,
    more: &[(&str, &str)],
) -> std::collections::BTreeMap<String, String> {
    let mut p = base.clone();
    p.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    p
}

struct Ingest {
    mib_per_sec: f64,
    cpu_secs: f64,
}

fn table_configs(interval_ms: &str) -> std::collections::BTreeMap<String, String> {
    mode_configs("key_value", interval_ms)
}

fn mode_configs(mode: &str, interval_ms: &str) -> std::collections::BTreeMap<String, String> {
    configs(&[
        ("iceberg.mode", mode),
        ("iceberg.commit.interval.ms", interval_ms),
        ("remote.storage.enable", "false"),
    ])
}

/// Produces `bytes` at full speed to a fresh broker, then waits for the table to
/// catch up (when `table`): the produce rate, and the broker's CPU for all of it.
async fn ingest(ctx: &Ctx, bytes: u64, table: bool) -> anyhow::Result<Ingest> {
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    let topic = "table-ingest";
    let configs = if table {
        table_configs("1000")
    } else {
        configs(&[("remote.storage.enable", "false")])
    };
    client.create_topic(topic, PARTITIONS, 1, configs).await?;
    let cpu = target.stats().cpu_seconds;
    let sent = produce_bytes(client, topic, bytes, RECORD, Acks::Leader, Some(PARTITIONS)).await?;
    if table {
        caught_up(client, topic, Duration::from_secs(900)).await?;
    }
    Ok(Ingest {
        mib_per_sec: sent.mib_per_sec(),
        cpu_secs: target.stats().cpu_seconds - cpu,
    })
}

/// Waits until every partition's lag in the table is 0; returns the table's bytes.
async fn caught_up(client: &Client, topic: &str, limit: Duration) -> anyhow::Result<u64> {
    let deadline = Instant::now() + limit;
    loop {
        let d = client.describe_topic(topic).await?;
        if let Some(t) = &d.table
            && t.error.is_empty()
            && !t.partitions.is_empty()
            && t.partitions.iter().all(|p| p.lag_offsets == 0)
            && d.partitions.iter().map(|p| p.high_watermark).sum::<i64>() == t.rows
        {
            return Ok(t.bytes as u64);
        }
        if Instant::now() > deadline {
            bail!("the table of '{topic}' did not catch up in {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Backlog {
    mib_per_sec: f64,
    cpu_secs_per_gib: f64,
    parquet_per_log: f64,
    busy_p99_ms: f64,
    idle_p99_ms: f64,
}

/// A backlog of `bytes` (of `RECORD`-byte values: JSON objects when `json`) written
/// without a table, then translated (`value_schema` when `json`).
async fn translate_backlog(ctx: &Ctx, bytes: u64, json: bool) -> anyhow::Result<Backlog> {
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    let topic = "table-backlog";
    // No table while the backlog is written: it is switched on below.
    client
        .create_topic(
            topic,
            PARTITIONS,
            1,
            configs(&[("remote.storage.enable", "false")]),
        )
        .await?;
    let e2e = "table-e2e";
    client
        .create_topic(e2e, 1, 1, configs(&[("remote.storage.enable", "false")]))
        .await?;
    if json {
        produce_json(client, topic, bytes).await?;
    } else {
        produce_bytes(client, topic, bytes, RECORD, Acks::Leader, Some(PARTITIONS)).await?;
    }
    tokio::task::spawn_blocking(|| std::process::Command::new("sync").status()).await??;
    let log_bytes: i64 = (client.describe_topic(topic).await?.partitions.iter())
        .map(|p| p.size_bytes)
        .sum();
    let run_for = Duration::from_millis(if ctx.quick { 1_500 } else { 8_000 });
    latency_at(client, e2e, RATE, Duration::from_millis(300)).await?;
    let idle = latency_at(client, e2e, RATE, run_for).await?;

    let cpu = target.stats().cpu_seconds;
    let started = Instant::now();
    let mode = if json { "value_schema" } else { "key_value" };
    client
        .alter_configs(topic, mode_configs(mode, "100"), Vec::new())
        .await?;
    let busy = {
        let client = client.clone();
        tokio::spawn(async move { latency_at(&client, e2e, RATE, run_for).await })
    };
    let table_bytes = caught_up(client, topic, Duration::from_secs(1800)).await?;
    let secs = started.elapsed().as_secs_f64();
    let cpu_secs = target.stats().cpu_seconds - cpu;
    let busy = busy.await??;
    let q = |h: &hdrhistogram::Histogram<u64>| h.value_at_quantile(0.99) as f64 / 1000.0;
    let gib = log_bytes as f64 / (1024.0 * MIB);
    Ok(Backlog {
        mib_per_sec: log_bytes as f64 / MIB / secs,
        cpu_secs_per_gib: cpu_secs / gib,
        parquet_per_log: table_bytes as f64 / log_bytes as f64,
        busy_p99_ms: q(&busy),
        idle_p99_ms: q(&idle),
    })
}

struct Steady {
    rate_mib: f64,
    max_lag_secs: f64,
    mean_lag_secs: f64,
}

async fn steady_lag(ctx: &Ctx) -> anyhow::Result<Steady> {
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    let topic = "table-steady";
    client
        .create_topic(topic, PARTITIONS, 1, table_configs("5000"))
        .await?;
    let rate_mib = 2.0;
    let run_for = Duration::from_secs(if ctx.quick { 12 } else { 40 });
    let sender = {
        let client = client.clone();
        tokio::spawn(async move { send_at(&client, topic, rate_mib, run_for).await })
    };
    let mut lags = Vec::new();
    let start = Instant::now();
    while start.elapsed() < run_for {
        tokio::time::sleep(Duration::from_millis(500)).await;
        // The first commit interval is not a steady state.
        if start.elapsed() < Duration::from_secs(6) {
            continue;
        }
        let d = client.describe_topic(topic).await?;
        if let Some(t) = d.table {
            let worst = t.partitions.iter().map(|p| p.lag_ms).max().unwrap_or(0);
            lags.push(worst as f64 / 1000.0);
        }
    }
    sender.await??;
    if lags.is_empty() {
        bail!("no lag sample of '{topic}'");
    }
    Ok(Steady {
        rate_mib,
        max_lag_secs: lags.iter().copied().fold(0.0, f64::max),
        mean_lag_secs: lags.iter().sum::<f64>() / lags.len() as f64,
    })
}

/// Sends `RECORD`-byte records at `rate_mib` MiB/s, in 100 ms batches, for `run_for`.
async fn send_at(
    client: &Client,
    topic: &str,
    rate_mib: f64,
    run_for: Duration,
) -> anyhow::Result<()> {
    let mut producer = Producer::new(client.clone(), topic, Acks::Leader).await?;
    let per_tick = ((rate_mib * MIB / 10.0) / RECORD as f64) as usize;
    let start = tokio::time::Instant::now();
    let mut next = start;
    let mut i = 0i32;
    while start.elapsed() < run_for {
        tokio::time::sleep_until(next).await;
        let records = (0..per_tick)
            .map(|_| {
                i = i.wrapping_add(1);
                ProducerRecord {
                    partition: Some(i.rem_euclid(PARTITIONS)),
                    value: Some(vec![b'v'; RECORD].into()),
                    ..Default::default()
                }
            })
            .collect();
        producer.send_all(records).await?;
        next += Duration::from_millis(100);
    }
    Ok(())
}

/// Produces about `bytes` of JSON log records of about `RECORD` bytes each (a level,
/// a host, a counter, a latency and a message), at full speed.
async fn produce_json(client: &Client, topic: &str, bytes: u64) -> anyhow::Result<()> {
    let mut producer = Producer::new(client.clone(), topic, Acks::Leader).await?;
    let mut sent = 0u64;
    let mut i = 0u64;
    while sent < bytes {
        let records: Vec<ProducerRecord> = (0..2000)
            .map(|_| {
                i += 1;
                let head = format!(
                    r#"{{"level":"{}","host":"web-{}","n":{i},"ms":{:.3},"msg":""#,
                    if i.is_multiple_of(10) { "warn" } else { "info" },
                    i % 16,
                    (i % 997) as f64 / 7.0,
                );
                let pad = RECORD.saturating_sub(head.len() + 2);
                let value = format!("{head}{}\"}}", "x".repeat(pad));
                sent += value.len() as u64;
                ProducerRecord {
                    partition: Some((i % PARTITIONS as u64) as i32),
                    value: Some(value.into_bytes().into()),
                    ..Default::default()
                }
            })
            .collect();
        producer.send_all(records).await?;
    }
    Ok(())
}
