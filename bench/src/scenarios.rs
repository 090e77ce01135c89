//! The scenarios. Each starts what it needs, drives load through the real client
//! library, measures its physical baseline in the same run, and returns its cases.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use bytes::Bytes;
use hdrhistogram::Histogram;
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};
use shale_records::batch::Compression;

use crate::baseline;
use crate::harness::{BrokerProcess, ProcessStats, S3_BUCKET, S3_KEY, S3_SECRET, S3Process};
use crate::report::{CaseResult, Ratio, numbers, params};

/// What every scenario gets.
pub struct Ctx {
    pub quick: bool,
    /// Where brokers keep their data (the disk under test).
    pub base: PathBuf,
    /// PostgreSQL server for multi-broker cases (`postgres://user@host:port`).
    pub postgres: String,
    /// Use this broker instead of starting one (single-broker scenarios only).
    pub bootstrap: Option<String>,
}

impl Ctx {
    fn size(&self, full_mib: u64, quick_mib: u64) -> u64 {
        (if self.quick { quick_mib } else { full_mib }) << 20
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Records sent and the time taken.
struct Sent {
    records: u64,
    bytes: u64,
    secs: f64,
}

impl Sent {
    fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / MIB / self.secs.max(1e-9)
    }
    fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.secs.max(1e-9)
    }
}

/// 64 MiB of log-like text: words drawn at random from a 256-word vocabulary, so
/// codecs find what they find in real logs (LZ4 about 2:1, zstd about 3:1); record
/// values are slices of it at scattered offsets, so records do not repeat each other.
fn value_pool() -> Bytes {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let words: Vec<Vec<u8>> = (0..256)
        .map(|_| {
            let len = 3 + (next() % 8) as usize;
            (0..len).map(|_| b'a' + (next() % 26) as u8).collect()
        })
        .collect();
    let mut pool = Vec::with_capacity((64 << 20) + 16);
    while pool.len() < 64 << 20 {
        pool.extend_from_slice(&words[(next() % 256) as usize]);
        pool.push(if next() % 16 == 0 { b'\n' } else { b' ' });
    }
    pool.into()
}

fn sample_value(pool: &Bytes, i: u64, size: usize) -> Bytes {
    let span = (pool.len() - size) as u64;
    let at = (i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 11) % span;
    pool.slice(at as usize..at as usize + size)
}

/// Produces `bytes` of `record_size`-byte values, round-robin over `partitions` when
/// `spread`, else sticky (the producer's default for unkeyed records).
async fn produce_bytes(
    client: &Client,
    topic: &str,
    bytes: u64,
    record_size: usize,
    acks: Acks,
    spread: Option<i32>,
) -> anyhow::Result<Sent> {
    produce_compressed(
        client,
        topic,
        bytes,
        record_size,
        acks,
        spread,
        Compression::None,
    )
    .await
}

async fn produce_compressed(
    client: &Client,
    topic: &str,
    bytes: u64,
    record_size: usize,
    acks: Acks,
    spread: Option<i32>,
    compression: Compression,
) -> anyhow::Result<Sent> {
    let producer = Producer::new(client.clone(), topic, acks)
        .await?
        .with_compression(compression);
    let pool = value_pool();
    let total = (bytes / record_size as u64).max(1);
    let start = Instant::now();
    // Records are sent as fast as the producer takes them (it batches, lingers and
    // keeps requests in flight); every acknowledgement is checked at the end.
    let mut pending = Vec::with_capacity(total as usize);
    for i in 0..total {
        let record = ProducerRecord {
            value: Some(sample_value(&pool, i, record_size)),
            partition: spread.map(|p| (i % p as u64) as i32),
            ..Default::default()
        };
        pending.push(producer.send(record).await.context("produce failed")?);
    }
    producer.flush().await.context("produce failed")?;
    for f in pending {
        f.await.context("produce failed")?;
    }
    let sent = total;
    Ok(Sent {
        records: sent,
        bytes: sent * record_size as u64,
        secs: start.elapsed().as_secs_f64(),
    })
}

/// Consumes a topic from its start to its current end.
async fn consume_all(client: &Client, topic: &str) -> anyhow::Result<Sent> {
    let mut total = 0;
    for p in 0..client.partition_count(topic).await? {
        let start = client.list_offset(topic, p, -2).await?.unwrap_or(0);
        total += client.list_offset(topic, p, -1).await?.unwrap_or(0) - start;
    }
    let mut consumer = Consumer::new(client.clone(), topic, None, StartFrom::Earliest).await?;
    let start = Instant::now();
    let (mut n, mut bytes) = (0i64, 0u64);
    let deadline = start + Duration::from_secs(600);
    while n < total {
        if Instant::now() > deadline {
            bail!("consume of '{topic}' stalled at {n} of {total} records");
        }
        let records = consumer.poll(Duration::from_secs(1)).await?;
        n += records.len() as i64;
        bytes += records
            .iter()
            .map(|r| r.value.as_ref().map_or(0, Bytes::len) as u64)
            .sum::<u64>();
    }
    Ok(Sent {
        records: n as u64,
        bytes,
        secs: start.elapsed().as_secs_f64(),
    })
}

/// Where load goes: a broker this run started (embedded default: SQLite, file://
/// object store), or the one `--bootstrap` names.
struct Target {
    broker: Option<BrokerProcess>,
    client: Client,
    /// The broker's data directory (the disk the baselines write to).
    data_dir: PathBuf,
}

impl Target {
    fn stats(&self) -> ProcessStats {
        self.broker
            .as_ref()
            .map(BrokerProcess::stats)
            .unwrap_or_default()
    }
}

async fn single_broker(ctx: &Ctx, config: &str) -> anyhow::Result<Target> {
    if let Some(bootstrap) = &ctx.bootstrap {
        return Ok(Target {
            broker: None,
            client: Client::connect(bootstrap).await?,
            data_dir: ctx.base.clone(),
        });
    }
    let b = BrokerProcess::start(config, &[], &ctx.base).await?;
    Ok(Target {
        client: Client::connect(&b.address()).await?,
        data_dir: b.data_dir(),
        broker: Some(b),
    })
}

/// Three brokers on a fresh PostgreSQL database, sharing a file:// object store.
struct Cluster {
    brokers: Vec<BrokerProcess>,
    client: Client,
    _db: PgDb,
    _objects: tempfile::TempDir,
}

async fn cluster(ctx: &Ctx) -> anyhow::Result<Cluster> {
    let db = PgDb::create(&ctx.postgres)?;
    let objects = tempfile::tempdir_in(&ctx.base)?;
    let mut brokers = Vec::new();
    for id in 1..=3 {
        let args = [
            "--broker-id".to_string(),
            id.to_string(),
            "--metastore-url".to_string(),
            db.url(),
            "--object-store-url".to_string(),
            format!("file://{}", objects.path().display()),
        ];
        brokers.push(BrokerProcess::start("", &args, &ctx.base).await?);
    }
    let bootstrap: Vec<String> = brokers.iter().map(BrokerProcess::address).collect();
    let client = Client::connect(&bootstrap.join(",")).await?;
    Ok(Cluster {
        brokers,
        client,
        _db: db,
        _objects: objects,
    })
}

/// A throwaway PostgreSQL database (through `psql`).
struct PgDb {
    server: String,
    name: String,
}

fn psql(url: &str, sql: &str) -> anyhow::Result<()> {
    let out = std::process::Command::new("psql")
        .args([url, "-Atqc", sql])
        .output()
        .context("psql is missing: run infra/test-services.sh (it installs PostgreSQL)")?;
    if !out.status.success() {
        bail!(
            "{sql} failed at {url} (start PostgreSQL with infra/test-services.sh): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl PgDb {
    fn create(server: &str) -> anyhow::Result<Self> {
        let name = format!(
            "shale_bench_{}_{}",
            std::process::id(),
            now_nanos() % 1_000_000
        );
        psql(
            &format!("{server}/postgres"),
            &format!("CREATE DATABASE {name}"),
        )?;
        Ok(PgDb {
            server: server.to_string(),
            name,
        })
    }

    fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let _ = psql(
            &format!("{}/postgres", self.server),
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}

// ---------------------------------------------------------------------------------------

/// Produce throughput by record size, partition count and acks.
pub async fn produce(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
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
        let topic = format!("produce-{i}");
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
pub async fn consume(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(512, 16);
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    client
        .create_topic(
            "consume",
            8,
            1,
            configs(&[("remote.storage.enable", "false")]),
        )
        .await?;
    produce_bytes(client, "consume", bytes, 1024, Acks::Leader, None).await?;
    let got = consume_all(client, "consume").await?;
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

/// End-to-end latency (produce → consumer) at fixed fractions of the maximum rate.
pub async fn e2e(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let target = single_broker(ctx, "").await?;
    let client = &target.client;
    client
        .create_topic("e2e", 1, 1, configs(&[("remote.storage.enable", "false")]))
        .await?;
    let run_for = Duration::from_millis(if ctx.quick { 700 } else { 5_000 });
    // The maximum rate of one-record acks=1 sends.
    let mut producer = Producer::new(client.clone(), "e2e", Acks::Leader).await?;
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
        let hist = latency_at(client, max_rate * load, run_for).await?;
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

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
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

/// Sends at `rate` for `run_for` while a consumer measures each record's latency (µs).
async fn latency_at(
    client: &Client,
    rate: f64,
    run_for: Duration,
) -> anyhow::Result<Histogram<u64>> {
    let start_offset = client.list_offset("e2e", 0, -1).await?.unwrap_or(0);
    let mut consumer =
        Consumer::new(client.clone(), "e2e", None, StartFrom::Offset(start_offset)).await?;
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
    let mut producer = Producer::new(client.clone(), "e2e", Acks::Leader).await?;
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

/// Historical replay of a mostly-remote topic from a real `s3s-fs`.
pub async fn replay(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(512, 24);
    let segment = if ctx.quick { 1 << 20 } else { 16 << 20 };
    let s3 = S3Process::start(&ctx.base).await?;
    let config = format!(
        "{}[tiering]\nupload_interval_ms = 100\n[log]\nretention_check_interval_ms = 100\n",
        s3.broker_config()
    );
    let args = [
        "--object-store-url".to_string(),
        format!("s3://{S3_BUCKET}/replay"),
    ];
    let mut broker = BrokerProcess::start(&config, &args, &ctx.base).await?;
    let client = Client::connect(&broker.address()).await?;
    let seg = segment.to_string();
    client
        .create_topic(
            "replay",
            4,
            1,
            configs(&[("segment.bytes", &seg), ("local.retention.bytes", &seg)]),
        )
        .await?;
    client
        .create_topic(
            "local",
            4,
            1,
            configs(&[("remote.storage.enable", "false")]),
        )
        .await?;
    produce_bytes(&client, "replay", bytes, 1024, Acks::Leader, None).await?;
    produce_bytes(&client, "local", bytes, 1024, Acks::Leader, None).await?;
    // Wait until what sealed is uploaded and dropped locally.
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let st = client.tiering_status(Some("replay")).await?;
        if st
            .iter()
            .all(|p| p.upload_lag_segments == 0 && p.local_log_start_offset > 0)
        {
            break;
        }
        if Instant::now() > deadline {
            bail!("segments were not uploaded: {st:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let st = client.tiering_status(Some("replay")).await?;
    let remote: i64 = st.iter().map(|p| p.remote_bytes).sum();
    // Cold: a restarted broker with an empty read cache.
    broker.kill();
    let _ = std::fs::remove_dir_all(broker.data_dir().join("remote-cache"));
    broker.spawn().await?;
    let client = Client::connect(&broker.address()).await?;
    let before = client.tiering_status_full(Some("replay")).await?;
    let cold = consume_all(&client, "replay").await?;
    let after = client.tiering_status_full(Some("replay")).await?;
    let warm = consume_all(&client, "replay").await?;
    let local = consume_all(&client, "local").await?;
    let gets = (after.remote_get_requests - before.remote_get_requests) as f64;
    let fetched = (after.remote_bytes_fetched - before.remote_bytes_fetched) as f64 / MIB;
    let delivered = cold.bytes as f64 / MIB;
    // Baseline: ranged GETs of the same objects, as many in flight as one reader uses.
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
    let objects: Vec<(object_store::path::Path, u64)> =
        baseline::segment_files(&s3.root.path().join(S3_BUCKET))
            .into_iter()
            .filter_map(|p| {
                let key = p
                    .strip_prefix(s3.root.path().join(S3_BUCKET))
                    .ok()?
                    .to_str()?
                    .to_string();
                Some((
                    object_store::path::Path::from(key),
                    std::fs::metadata(&p).ok()?.len(),
                ))
            })
            .collect();
    let (raw_gets, _) = baseline::ranged_gets(store, objects, 4 << 20, 3).await?;
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
            metrics: metrics(&[("gets_per_mib", gets / delivered.max(1e-9))]),
            baselines: numbers(&[("target_gets_per_mib", 0.25)]),
            ratio: Some(Ratio::new(
                "0.25 / gets_per_mib (≤ 1 GET per 4 MiB)",
                0.25 / (gets / delivered).max(1e-9),
                Some(1.0),
            )),
            broker: stats,
        },
    ])
}

/// Produce throughput as the partition count grows (records spread round-robin).
pub async fn partitions(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
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
        let topic = format!("partitions-{n}");
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

/// Restart time after SIGKILL with a small and a ten times larger local log.
pub async fn recovery(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let small = ctx.size(1024, 32);
    let segment = if ctx.quick { 4 << 20 } else { 128 << 20 };
    let mut out = Vec::new();
    let mut first = 0.0;
    for (i, bytes) in [small, small * 10].into_iter().enumerate() {
        let mut broker = BrokerProcess::start("", &[], &ctx.base).await?;
        let client = Client::connect(&broker.address()).await?;
        let seg = segment.to_string();
        client
            .create_topic(
                "recovery",
                4,
                1,
                configs(&[("segment.bytes", &seg), ("remote.storage.enable", "false")]),
            )
            .await?;
        produce_bytes(&client, "recovery", bytes, 1024, Acks::Leader, None).await?;
        broker.kill();
        let restart = broker.spawn().await?.as_secs_f64();
        if i == 0 {
            first = restart;
        }
        out.push(CaseResult {
            scenario: "recovery".into(),
            params: params(&[("local_log_mib", (bytes >> 20).to_string()), ("segment_bytes", seg.clone())]),
            metrics: numbers(&[("restart_seconds", restart)]),
            baselines: numbers(&[("restart_seconds_at_smallest_log", first)]),
            ratio: Some(Ratio::new(
                "restart_seconds_at_smallest_log / restart_seconds (target: 10x the log within 1.5x the time)",
                first / restart.max(1e-9),
                (i == 1).then_some(1.0 / 1.5),
            )),
            broker: broker.stats(),
        });
    }
    Ok(out)
}
