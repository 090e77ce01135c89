//! The `peer` scenario: the same Kafka-client cases against this run's Shale broker
//! and against other Kafka-protocol brokers named with `--peer NAME=HOST:PORT`,
//! interleaved round by round (the order reversed every other round), so every broker
//! meets the same machine, disk and moment. A peer listening on this machine has its
//! CPU time read from `/proc`, found by its listening port.

use std::time::Duration;

use super::kafka::{
    KafkaTarget, client_params, consume, first_appends, latency, produce, rates, with_cpu,
};
use super::{Ctx, running};
use crate::report::{CaseResult, Ratio, numbers};

/// Produce (1 KiB records, acks=1, 8 partitions), consume of the same records from
/// offset 0, e2e latency at 1,000 records/s, and produce spread record by record over
/// 1,000 partitions (after one record to each, see [`first_appends`]), against Shale
/// and each peer, in rounds.
pub(crate) async fn peer(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    if ctx.peers.is_empty() {
        anyhow::bail!("the peer scenario needs at least one --peer NAME=HOST:PORT");
    }
    let mut targets = vec![("shale".to_string(), KafkaTarget::new(ctx).await?)];
    for (name, bootstrap) in &ctx.peers {
        targets.push((name.clone(), KafkaTarget::external(bootstrap, ctx)));
    }
    // Peers keep their topics between runs: every name this run makes is its own.
    let tag = format!("-{}", chrono::Utc::now().format("%Y%m%d%H%M%S"));
    let rounds = if ctx.quick { 1 } else { 2 };
    let mut out = Vec::new();
    for round in 1..=rounds {
        let mut order: Vec<usize> = (0..targets.len()).collect();
        if round % 2 == 0 {
            order.reverse();
        }
        for &i in &order {
            let (name, target) = &targets[i];
            running("peer", format!("round {round}: {name}"));
            let cases = one_round(ctx, target, &format!("-r{round}{tag}"))
                .await
                .map_err(|e| anyhow::anyhow!("{name}: {e:#}"))?;
            out.extend(cases.into_iter().map(|mut case| {
                case.params.insert("broker".into(), name.clone());
                case.params.insert("round".into(), round.to_string());
                case
            }));
        }
    }
    Ok(out)
}

/// One broker's cases (topics named with `suffix`).
async fn one_round(
    ctx: &Ctx,
    target: &KafkaTarget,
    suffix: &str,
) -> anyhow::Result<Vec<CaseResult>> {
    let mut out = Vec::new();
    let bytes = ctx.size(256, 16);
    let topic = format!("peer-produce{suffix}");
    target.create_topic(&topic, 8).await?;

    let (config, t) = (target.config(), topic.clone());
    let cpu = target.cpu_seconds();
    let sent =
        tokio::task::spawn_blocking(move || produce(config, &t, Some(8), bytes, 1024)).await??;
    let cpu = target.cpu_seconds() - cpu;
    out.push(case(
        "peer-produce",
        &[("record_bytes", "1024"), ("partitions", "8")],
        with_cpu(rates(&sent), cpu, &sent),
        target,
    ));

    let (config, t, count) = (target.config(), topic.clone(), sent.records);
    let cpu = target.cpu_seconds();
    let read = tokio::task::spawn_blocking(move || consume(config, &t, 8, count)).await??;
    let cpu = target.cpu_seconds() - cpu;
    out.push(case(
        "peer-consume",
        &[("record_bytes", "1024"), ("partitions", "8")],
        with_cpu(rates(&read), cpu, &read),
        target,
    ));

    let e2e = format!("peer-e2e{suffix}");
    target.create_topic(&e2e, 1).await?;
    let run_for = Duration::from_millis(if ctx.quick { 1_000 } else { 5_000 });
    let (config, t) = (target.config(), e2e.clone());
    let hist = tokio::task::spawn_blocking(move || latency(config, &t, 1_000.0, run_for)).await??;
    let q = |x: f64| hist.value_at_quantile(x) as f64 / 1000.0;
    out.push(case(
        "peer-e2e",
        &[("rate_per_sec", "1000")],
        numbers(&[
            ("p50_ms", q(0.5)),
            ("p99_ms", q(0.99)),
            ("p999_ms", q(0.999)),
            ("samples", hist.len() as f64),
        ]),
        target,
    ));

    let spread = format!("peer-partitions{suffix}");
    let partitions = if ctx.quick { 100 } else { 1_000 };
    target.create_topic(&spread, partitions).await?;
    let first = first_appends(target, &spread, partitions).await?;
    let bytes = ctx.size(64, 8);
    let (config, t) = (target.config(), spread.clone());
    let cpu = target.cpu_seconds();
    let sent =
        tokio::task::spawn_blocking(move || produce(config, &t, Some(partitions), bytes, 1024))
            .await??;
    let cpu = target.cpu_seconds() - cpu;
    let mut metrics = with_cpu(rates(&sent), cpu, &sent);
    metrics.extend(first);
    out.push(case(
        "peer-partitions",
        &[
            ("record_bytes", "1024"),
            ("partitions", &partitions.to_string()),
            ("spread", "per-record"),
        ],
        metrics,
        target,
    ));
    Ok(out)
}

/// A case of this scenario. The comparison is between brokers (rows of one run), so
/// no ratio of its own.
fn case(
    scenario: &str,
    params: &[(&str, &str)],
    metrics: std::collections::BTreeMap<String, f64>,
    target: &KafkaTarget,
) -> CaseResult {
    CaseResult {
        scenario: scenario.into(),
        params: client_params(params),
        metrics,
        baselines: numbers(&[]),
        ratio: None::<Ratio>,
        broker: target.stats(),
    }
}
