//! The historical replay scenario: reading a mostly-remote topic from a real `s3s-fs`,
//! cold and warm, against ranged GETs of the same objects.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use shale_client::{Acks, Client};

use super::load::{consume_all, produce_bytes, produce_keyed};
use super::{Ctx, MIB, configs};
use crate::baseline;
use crate::harness::{BrokerProcess, ProcessStats, S3_BUCKET, S3_KEY, S3_SECRET, S3Process};
use crate::report::{CaseResult, Ratio, numbers, params};

/// A broker tiering to a fresh `s3s-fs` (uploads every 100 ms, local retention right
/// after them); `extra`: more config sections, before the object-store ones;
/// `extra_args`: more flags.
pub(super) async fn tiered_broker(
    ctx: &Ctx,
    extra: &str,
    extra_args: &[String],
) -> anyhow::Result<(S3Process, BrokerProcess)> {
    let s3 = S3Process::start(&ctx.base).await?;
    let config = format!(
        "{extra}{}[tiering]\nupload_interval_ms = 100\n[log]\nretention_check_interval_ms = 100\n",
        s3.broker_config()
    );
    let mut args = vec![
        "--object-store-url".to_string(),
        format!("s3://{S3_BUCKET}/replay"),
    ];
    args.extend_from_slice(extra_args);
    let broker = BrokerProcess::start(&config, &args, &ctx.base).await?;
    Ok((s3, broker))
}

/// Creates `topic` (4 partitions of `segment`-byte segments, one segment kept locally),
/// writes `bytes` of 1 KiB records and waits until every sealed segment is in the
/// store and gone locally; returns the bytes in the store.
pub(super) async fn mostly_remote_topic(
    client: &Client,
    topic: &str,
    bytes: u64,
    segment: u64,
) -> anyhow::Result<i64> {
    mostly_remote_keyed(client, topic, bytes, segment, |_| None).await
}

/// [`mostly_remote_topic`] with record `i` keyed `key(i)`.
pub(super) async fn mostly_remote_keyed(
    client: &Client,
    topic: &str,
    bytes: u64,
    segment: u64,
    key: impl Fn(u64) -> Option<bytes::Bytes>,
) -> anyhow::Result<i64> {
    let seg = segment.to_string();
    client
        .create_topic(
            topic,
            4,
            1,
            configs(&[("segment.bytes", &seg), ("local.retention.bytes", &seg)]),
        )
        .await?;
    let none = shale_records::batch::Compression::None;
    produce_keyed(client, topic, bytes, 1024, Acks::Leader, None, none, key).await?;
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let st = client.tiering_status(Some(topic)).await?;
        if st
            .iter()
            .all(|p| p.upload_lag_segments == 0 && p.local_log_start_offset > 0)
        {
            return Ok(st.iter().map(|p| p.remote_bytes).sum());
        }
        if Instant::now() > deadline {
            bail!("segments were not uploaded: {st:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Restarts the broker with an empty read cache (a cold replay).
pub(super) async fn restart_cold(broker: &mut BrokerProcess) -> anyhow::Result<Client> {
    broker.kill();
    let _ = std::fs::remove_dir_all(broker.data_dir().join("remote-cache"));
    broker.spawn().await?;
    Ok(Client::connect(&broker.address()).await?)
}

/// MiB/s of ranged GETs (8 MiB, the read cache's chunk) of every `.log` object in the
/// store, 3 in flight (one
/// reader's read-ahead): what a replay could get from the store at most.
pub(super) async fn ranged_get_baseline(s3: &S3Process) -> anyhow::Result<f64> {
    let store: Arc<dyn object_store::ObjectStore> = Arc::new(
        object_store::aws::AmazonS3Builder::new()
            .with_endpoint(s3.endpoint())
            .with_bucket_name(S3_BUCKET)
            .with_region("us-east-1")
            .with_access_key_id(S3_KEY)
            .with_secret_access_key(S3_SECRET)
            .with_allow_http(true)
            .with_virtual_hosted_style_request(false)
            .build()?,
    );
    let objects: Vec<(object_store::path::Path, u64)> = baseline::segment_files(&s3.bucket_dir())
        .into_iter()
        .filter_map(|p| {
            let key = p.strip_prefix(s3.bucket_dir()).ok()?.to_str()?.to_string();
            Some((
                object_store::path::Path::from(key),
                std::fs::metadata(&p).ok()?.len(),
            ))
        })
        .collect();
    let (mib_per_sec, _) = baseline::ranged_gets(store, objects, 8 << 20, 3).await?;
    Ok(mib_per_sec)
}

/// Historical replay of a mostly-remote topic from a real `s3s-fs`.
pub(crate) async fn replay(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(512, 24);
    let segment = if ctx.quick { 1 << 20 } else { 16 << 20 };
    let (s3, mut broker) = tiered_broker(ctx, "", &[]).await?;
    let client = Client::connect(&broker.address()).await?;
    let before_upload = s3.requests()?;
    let remote = mostly_remote_topic(&client, "replay", bytes, segment).await?;
    let upload = s3.requests()? - before_upload;
    client
        .create_topic(
            "local",
            4,
            1,
            configs(&[("remote.storage.enable", "false")]),
        )
        .await?;
    produce_bytes(&client, "local", bytes, 1024, Acks::Leader, None).await?;
    let client = restart_cold(&mut broker).await?;
    let before = client.tiering_status_full(Some("replay")).await?;
    let served_before = s3.requests()?;
    let cold = consume_all(&client, "replay").await?;
    let after = client.tiering_status_full(Some("replay")).await?;
    let served_cold = s3.requests()? - served_before;
    // A second group replaying the same range while it is in the cache (once the
    // first replay's last read-ahead GETs have landed).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let warm_before = s3.requests()?;
    let warm = consume_all(&client, "replay").await?;
    let served_warm = s3.requests()? - warm_before;
    let local = consume_all(&client, "local").await?;
    let gets = (after.remote_get_requests - before.remote_get_requests) as f64;
    let fetched = (after.remote_bytes_fetched - before.remote_bytes_fetched) as f64 / MIB;
    let delivered = cold.bytes as f64 / MIB;
    let raw_gets = ranged_get_baseline(&s3).await?;
    let stats = ProcessStats::sum(&[broker.stats(), s3.stats()]);
    let metrics = |m: &[(&str, f64)]| numbers(m);
    Ok(vec![
        CaseResult {
            scenario: "replay".into(),
            params: params(&[
                ("cache", "cold".into()),
                (
                    "remote_share",
                    format!("{:.0}%", remote as f64 / bytes as f64 * 100.0),
                ),
            ]),
            metrics: metrics(&[
                ("mib_per_sec", cold.mib_per_sec()),
                ("get_requests", gets),
                ("gets_per_mib", gets / delivered.max(1e-9)),
                ("mib_fetched_per_mib", fetched / delivered.max(1e-9)),
            ]),
            baselines: numbers(&[("ranged_get_mib_per_sec", raw_gets)]),
            ratio: Some(Ratio::new(
                "mib_per_sec / ranged_get",
                cold.mib_per_sec() / raw_gets,
                Some(0.5),
            )),
            broker: stats,
        },
        CaseResult {
            scenario: "replay".into(),
            params: params(&[("cache", "warm".into())]),
            metrics: metrics(&[("mib_per_sec", warm.mib_per_sec())]),
            baselines: numbers(&[("local_consume_mib_per_sec", local.mib_per_sec())]),
            ratio: Some(Ratio::new(
                "mib_per_sec / local_consume",
                warm.mib_per_sec() / local.mib_per_sec(),
                Some(0.7),
            )),
            broker: stats,
        },
        CaseResult {
            scenario: "replay".into(),
            params: params(&[
                ("cache", "cold".into()),
                ("measure", "object-store economy".into()),
            ]),
            metrics: metrics(&[
                ("gets_per_mib", gets / delivered.max(1e-9)),
                // Counted by the server, every kind.
                (
                    "server_gets_per_mib",
                    served_cold.get as f64 / delivered.max(1e-9),
                ),
                ("fetch_path_lists", served_cold.list as f64),
                ("fetch_path_writes", served_cold.writes() as f64),
                ("second_group_gets", served_warm.get as f64),
                ("second_group_lists", served_warm.list as f64),
                (
                    "upload_requests_per_gib",
                    upload.writes() as f64 / (remote as f64 / (1u64 << 30) as f64).max(1e-9),
                ),
                ("upload_puts", upload.put as f64),
                ("upload_parts", upload.parts as f64),
                ("upload_multipart_calls", upload.multipart as f64),
                ("upload_lists", upload.list as f64),
            ]),
            baselines: numbers(&[("target_gets_per_mib", 0.125)]),
            ratio: Some(Ratio::new(
                "0.125 / gets_per_mib (≤ 1 GET per 8 MiB)",
                0.125 / (gets / delivered).max(1e-9),
                Some(1.0),
            )),
            broker: stats,
        },
    ])
}
