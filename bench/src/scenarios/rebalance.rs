//! The rebalance scenario: a broker joins a three-broker cluster holding a mostly
//! tiered topic, and the controller's balancer moves replicas onto it. What the new
//! broker copies is compared with what the moved partitions hold (a move copies only
//! the leader's local log), and produce latency during the moves with idle.

use std::time::{Duration, Instant};

use shale_client::Acks;

use super::latency::latency_at;
use super::load::produce_bytes;
use super::targets::cluster_with;
use super::{Ctx, configs};
use crate::harness::{BrokerProcess, ProcessStats};
use crate::report::{CaseResult, Ratio, numbers, params};

const PARTITIONS: i32 = 6;

/// Balancing that acts within a second, and tiering that keeps up.
const CONFIG: &str = "[cluster]\nauto_balance_interval_ms = 1000\n\
    [tiering]\nupload_interval_ms = 200\n\
    [log]\nretention_check_interval_ms = 500\n";

pub(crate) async fn rebalance(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let total = ctx.size(2048, 48);
    let segment: u64 = if ctx.quick { 1 << 20 } else { 16 << 20 };
    let local_retention = 2 * segment;
    let mut cluster = cluster_with(ctx, CONFIG).await?;
    let client = cluster.client.clone();
    let topic = ctx.topic("rebalance");
    let (seg, local) = (segment.to_string(), local_retention.to_string());
    client
        .create_topic(
            &topic,
            PARTITIONS,
            3,
            configs(&[("segment.bytes", &seg), ("local.retention.bytes", &local)]),
        )
        .await?;
    let probe = ctx.topic("rebalance-probe");
    client.create_topic(&probe, 1, 3, configs(&[])).await?;
    super::running("rebalance", format!("writing {} MiB", total >> 20));
    produce_bytes(&client, &topic, total, 1024, Acks::All, Some(PARTITIONS)).await?;
    // Everything sealed is in the bucket and the local logs are trimmed.
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let st = client.tiering_status(Some(&topic)).await?;
        let done = st.len() == PARTITIONS as usize
            && st
                .iter()
                .all(|s| s.upload_lag_segments == 0 && s.local_log_start_offset > 0);
        if done {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the topic was never tiered");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let run_for = Duration::from_millis(if ctx.quick { 1_000 } else { 5_000 });
    let rate = 500.0;
    let idle = latency_at(&client, &probe, rate, run_for).await?;
    let idle_p99 = idle.value_at_quantile(0.99) as f64 / 1000.0;

    super::running("rebalance", "a fourth broker joins");
    let http = crate::harness::free_port();
    let http_listen = ["--http-listen".to_string(), format!("127.0.0.1:{http}")];
    let four = cluster.add_broker(CONFIG, &http_listen).await?;
    let started = Instant::now();
    // Probed a second at a time until broker 4 holds its share and nothing moves.
    let mut during = hdrhistogram::Histogram::<u64>::new(3)?;
    let deadline = Instant::now() + Duration::from_secs(900);
    let moved: Vec<i32> = loop {
        let described = client.describe_topic(&topic).await?;
        let in_flight = client.list_partition_reassignments("").await?;
        let on_four: Vec<i32> = (described.partitions.iter())
            .filter(|p| p.replicas.contains(&four))
            .map(|p| p.partition)
            .collect();
        // 6 partitions x 3 replicas (and the probe's 3) over 4 brokers: 5 or 6 each.
        if in_flight.is_empty() && on_four.len() >= 4 {
            break on_four;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the balancer did not move replicas to the new broker"
        );
        during.add(latency_at(&client, &probe, rate, Duration::from_secs(1)).await?)?;
    };
    let took = started.elapsed().as_secs_f64();
    let during_p99 = during.value_at_quantile(0.99) as f64 / 1000.0;
    let copied = metric(http, "shale_replicated_bytes_total").await? as f64;
    let sizes = client.tiering_status(Some(&topic)).await?;
    let moved_bytes: f64 = (sizes.iter())
        .filter(|s| moved.contains(&s.partition))
        .map(|s| (s.remote_bytes + s.upload_lag_bytes) as f64)
        .sum();
    let bound = moved.len() as f64 * (local_retention + segment) as f64;
    let brokers = ProcessStats::sum(
        &cluster
            .brokers
            .iter()
            .map(BrokerProcess::stats)
            .collect::<Vec<_>>(),
    );
    Ok(vec![CaseResult {
        scenario: "rebalance".into(),
        params: params(&[
            ("topic_mib", (total >> 20).to_string()),
            ("partitions", PARTITIONS.to_string()),
            ("segment_bytes", seg),
            ("local_retention_bytes", local),
        ]),
        metrics: numbers(&[
            ("partitions_moved", moved.len() as f64),
            ("copied_mib", copied / (1 << 20) as f64),
            ("seconds_to_balance", took),
            ("e2e_p99_idle_ms", idle_p99),
            ("e2e_p99_during_moves_ms", during_p99),
            ("samples_during_moves", during.len() as f64),
        ]),
        baselines: numbers(&[
            ("moved_partitions_mib", moved_bytes / (1 << 20) as f64),
            ("copied_share_of_moved", copied / moved_bytes.max(1.0)),
            ("local_retention_plus_segment_mib", bound / (1 << 20) as f64),
        ]),
        ratio: Some(Ratio::new(
            "(local retention + one segment) per moved partition / copied (target: the copy within it)",
            bound / copied.max(1.0),
            Some(1.0),
        )),
        broker: brokers,
    }])
}

/// A counter from a broker's `/metrics`.
async fn metric(port: u16, name: &str) -> anyhow::Result<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no {name} on the new broker's /metrics"))
}
