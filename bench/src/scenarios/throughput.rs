//! Throughput scenarios: produce (by record size, partitions, acks, compression and
//! replication), consume from local segments, and produce as partitions grow.

use shale_client::Acks;
use shale_records::batch::Compression;

use super::load::{consume_all, produce_bytes, produce_compressed};
use super::targets::{Cluster, cluster, single_broker};
use super::{Ctx, Sent, configs};
use crate::baseline;
use crate::harness::{BrokerProcess, ProcessStats};
use crate::report::{CaseResult, Ratio, numbers, params};

/// Produce throughput by record size, partition count and acks.
pub(crate) async fn produce(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(256, 16);
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    let none = Compression::None;
    let mut cases: Vec<(usize, i32, &str, Compression)> = if ctx.quick {
        vec![
            (1024, 8, "1", none),
            (100, 1, "0", none),
            (1024, 8, "1", Compression::Lz4),
        ]
    } else {
        vec![
            (100, 8, "1", none),
            (1024, 8, "1", none),
            (10240, 8, "1", none),
            (1024, 1, "1", none),
            (1024, 64, "1", none),
            (1024, 8, "0", none),
            (1024, 8, "all", none),
            (1024, 8, "1", Compression::Lz4),
            (1024, 8, "1", Compression::Zstd),
        ]
    };
    let mut out = Vec::new();
    for (i, (record, partitions, acks, codec)) in cases.drain(..).enumerate() {
        super::running(
            "produce",
            format!("{record} B records, {partitions} partitions, acks={acks}, {codec:?}"),
        );
        let topic = ctx.topic(&format!("produce-{i}"));
        client
            .create_topic(
                &topic,
                partitions,
                1,
                configs(&[("remote.storage.enable", "false")]),
            )
            .await?;
        let acks_level = acks.parse().map_err(anyhow::Error::msg)?;
        let sent =
            produce_compressed(client, &topic, bytes, record, acks_level, None, codec).await?;
        let mut case = produce_case(
            record,
            partitions,
            acks,
            1,
            &sent,
            &target.data_dir,
            bytes,
            target.stats(),
        )
        .await?;
        case.params
            .insert("compression".into(), format!("{codec:?}").to_lowercase());
        let stored: u64 = (0..partitions)
            .flat_map(|p| baseline::segment_files(&target.data_dir.join(format!("{topic}-{p}"))))
            .filter_map(|f| std::fs::metadata(f).ok())
            .map(|m| m.len())
            .sum();
        if target.broker.is_some() && stored > 0 {
            // Bytes on disk per byte of record values.
            let ratio = stored as f64 / sent.bytes as f64;
            case.metrics
                .extend(numbers(&[("stored_bytes_per_value_byte", ratio)]));
        }
        out.push(case);
    }
    drop(target);
    if ctx.bootstrap.is_some() {
        return Ok(out);
    }
    // acks=all with replication factor 3 on a local three-broker cluster.
    let Cluster {
        brokers, client, ..
    } = &cluster(ctx).await?;
    client
        .create_topic(
            "produce-rf3",
            8,
            3,
            configs(&[
                ("min.insync.replicas", "2"),
                ("remote.storage.enable", "false"),
            ]),
        )
        .await?;
    let sent = produce_bytes(client, "produce-rf3", bytes, 1024, Acks::All, None).await?;
    let stats = ProcessStats::sum(&brokers.iter().map(BrokerProcess::stats).collect::<Vec<_>>());
    out.push(
        produce_case(
            1024,
            8,
            "all",
            3,
            &sent,
            &brokers[0].data_dir(),
            bytes,
            stats,
        )
        .await?,
    );
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
async fn produce_case(
    record: usize,
    partitions: i32,
    acks: &str,
    replication_factor: i32,
    sent: &Sent,
    disk: &std::path::Path,
    bytes: u64,
    broker: ProcessStats,
) -> anyhow::Result<CaseResult> {
    let disk_write = baseline::disk_write(disk, bytes)?;
    let loopback = baseline::loopback_copy(bytes).await?;
    let bound = disk_write.min(loopback);
    // The target applies to acks=1, 1 KiB records, 8 partitions.
    let target = (record == 1024 && partitions == 8 && acks == "1").then_some(0.5);
    Ok(CaseResult {
        scenario: "produce".into(),
        params: params(&[
            ("record_bytes", record.to_string()),
            ("partitions", partitions.to_string()),
            ("acks", acks.to_string()),
            ("replication_factor", replication_factor.to_string()),
            ("compression", "none".into()),
        ]),
        metrics: numbers(&[
            ("records_per_sec", sent.records_per_sec()),
            ("mib_per_sec", sent.mib_per_sec()),
        ]),
        baselines: numbers(&[
            ("disk_write_mib_per_sec", disk_write),
            ("loopback_tcp_mib_per_sec", loopback),
        ]),
        ratio: Some(Ratio::new(
            "mib_per_sec / min(disk_write, loopback_tcp)",
            sent.mib_per_sec() / bound,
            target,
        )),
        broker,
    })
}

/// Consume throughput from local segments with a warm page cache.
pub(crate) async fn consume(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(512, 16);
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    let topic = ctx.topic("consume");
    client
        .create_topic(&topic, 8, 1, configs(&[("remote.storage.enable", "false")]))
        .await?;
    produce_bytes(client, &topic, bytes, 1024, Acks::Leader, None).await?;
    let got = consume_all(client, &topic).await?;
    let loopback = baseline::loopback_copy(bytes).await?;
    let files = baseline::segment_files(&target.data_dir);
    let mut baselines = vec![("loopback_tcp_mib_per_sec", loopback)];
    // A broker started elsewhere (--bootstrap) keeps its files out of reach.
    if !files.is_empty() {
        baselines.push((
            "segment_file_read_mib_per_sec",
            baseline::file_read(&files)?,
        ));
    }
    Ok(vec![CaseResult {
        scenario: "consume".into(),
        params: params(&[("record_bytes", "1024".into()), ("partitions", "8".into())]),
        metrics: numbers(&[
            ("records_per_sec", got.records_per_sec()),
            ("mib_per_sec", got.mib_per_sec()),
        ]),
        baselines: numbers(&baselines),
        ratio: Some(Ratio::new(
            "mib_per_sec / loopback_tcp",
            got.mib_per_sec() / loopback,
            Some(0.5),
        )),
        broker: target.stats(),
    }])
}

/// Produce throughput as the partition count grows (records spread round-robin).
pub(crate) async fn partitions(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(128, 8);
    let counts: &[i32] = if ctx.quick {
        &[1, 10, 100]
    } else {
        &[1, 10, 100, 1000]
    };
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    let mut out = Vec::new();
    let mut one = 0.0;
    for &n in counts {
        super::running("partitions", format!("{n} partitions"));
        let topic = ctx.topic(&format!("partitions-{n}"));
        client
            .create_topic(&topic, n, 1, configs(&[("remote.storage.enable", "false")]))
            .await?;
        let sent = produce_bytes(client, &topic, bytes, 1024, Acks::Leader, Some(n)).await?;
        if n == 1 {
            one = sent.mib_per_sec();
        }
        out.push(CaseResult {
            scenario: "partitions".into(),
            params: params(&[
                ("partitions", n.to_string()),
                ("record_bytes", "1024".into()),
            ]),
            metrics: numbers(&[
                ("mib_per_sec", sent.mib_per_sec()),
                ("records_per_sec", sent.records_per_sec()),
            ]),
            baselines: numbers(&[("one_partition_mib_per_sec", one)]),
            ratio: Some(Ratio::new(
                "mib_per_sec / one_partition",
                sent.mib_per_sec() / one,
                (n == 1000).then_some(0.7),
            )),
            broker: target.stats(),
        });
    }
    Ok(out)
}
