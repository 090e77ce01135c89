//! The end-to-end latency scenario: produce → consumer latency at fractions of the
//! maximum one-record send rate, against the loopback round trip.

use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};

use super::targets::single_broker;
use super::{Ctx, configs, now_nanos};
use crate::baseline;
use crate::report::{CaseResult, Ratio, numbers, params};

/// End-to-end latency (produce → consumer) at fixed fractions of the maximum rate.
pub(crate) async fn e2e(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    let topic = ctx.topic("e2e");
    client
        .create_topic(&topic, 1, 1, configs(&[("remote.storage.enable", "false")]))
        .await?;
    let run_for = Duration::from_millis(if ctx.quick { 700 } else { 5_000 });
    // The maximum rate of one-record acks=1 sends.
    let mut producer = Producer::new(client.clone(), &topic, Acks::Leader).await?;
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < run_for / 2 {
        producer.send_all(vec![stamped(100)]).await?;
        n += 1;
    }
    let max_rate = n as f64 / start.elapsed().as_secs_f64();
    let rtt = baseline::tcp_round_trips(if ctx.quick { 2_000 } else { 20_000 }).await?;
    let rtt_p99_ms = rtt.value_at_quantile(0.99) as f64 / 1000.0;
    let mut out = Vec::new();
    for load in [0.1, 0.5, 0.8] {
        super::running(
            "e2e",
            format!("at {:.0}% of the producer's peak rate", load * 100.0),
        );
        let hist = latency_at(client, &topic, max_rate * load, run_for).await?;
        let q = |x: f64| hist.value_at_quantile(x) as f64 / 1000.0;
        out.push(CaseResult {
            scenario: "e2e".into(),
            params: params(&[
                ("load", format!("{:.0}%", load * 100.0)),
                ("rate_per_sec", format!("{:.0}", max_rate * load)),
                ("acks", "1".into()),
            ]),
            metrics: numbers(&[
                ("p50_ms", q(0.5)),
                ("p99_ms", q(0.99)),
                ("p999_ms", q(0.999)),
                ("samples", hist.len() as f64),
            ]),
            baselines: numbers(&[
                ("loopback_rtt_p99_ms", rtt_p99_ms),
                ("max_rate_per_sec", max_rate),
            ]),
            ratio: Some(Ratio::new(
                "loopback_rtt_p99 / p99 (target: p99 within 20x the round trip)",
                rtt_p99_ms / q(0.99).max(1e-6),
                (load == 0.5).then_some(0.05),
            )),
            broker: target.stats(),
        });
    }
    Ok(out)
}

/// A record whose value starts with its send time.
fn stamped(size: usize) -> ProducerRecord {
    let mut v = now_nanos().to_be_bytes().to_vec();
    v.resize(size.max(8), b'x');
    ProducerRecord {
        value: Some(v.into()),
        ..Default::default()
    }
}

/// Sends one-record batches to partition 0 of `topic` at `rate` for `run_for` while a
/// consumer measures each record's latency (µs).
pub(super) async fn latency_at(
    client: &Client,
    topic: &str,
    rate: f64,
    run_for: Duration,
) -> anyhow::Result<Histogram<u64>> {
    let start_offset = client.list_offset(topic, 0, -1).await?.unwrap_or(0);
    let mut consumer = Consumer::new(
        client.clone(),
        topic,
        Some(vec![0]),
        StartFrom::Offset(start_offset),
    )
    .await?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut hist = Histogram::<u64>::new(3)?;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for r in consumer.poll(Duration::from_millis(100)).await? {
                    let sent = r.value.as_ref().map_or(0, |v| {
                        u64::from_be_bytes(v[..8].try_into().unwrap_or_default())
                    });
                    let _ = hist.record(now_nanos().saturating_sub(sent) / 1_000);
                }
            }
            anyhow::Ok(hist)
        })
    };
    let mut producer = Producer::new(client.clone(), topic, Acks::Leader).await?;
    let interval = Duration::from_secs_f64(1.0 / rate.max(1.0));
    let start = tokio::time::Instant::now();
    let mut next = start;
    while start.elapsed() < run_for {
        tokio::time::sleep_until(next).await;
        producer.send_all(vec![stamped(100)]).await?;
        next += interval;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reader.await?
}
