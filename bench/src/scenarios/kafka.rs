//! The Kafka-client scenarios: produce, consume, end-to-end latency, partition count
//! and the cost of TLS and SASL (`kafka_tls`) through librdkafka (the `rdkafka` crate) against a Kafka-protocol listener:
//! a Shale broker started here, or any broker `--kafka-bootstrap` names, so peers can
//! be measured side by side on one machine with the same baselines.
//!
//! librdkafka runs its own threads; every blocking call here runs on a blocking task.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use hdrhistogram::Histogram;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::{FromClientConfig, FromClientConfigAndContext};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{Ctx, MIB, Sent, now_nanos};
use crate::baseline;
use crate::harness::{BrokerProcess, ProcessStats, free_port};
use crate::report::{CaseResult, Ratio, numbers, params};

/// A Kafka-protocol broker: one this run started, or `--kafka-bootstrap`.
pub(super) struct KafkaTarget {
    /// This run's own broker, stopped when the target is dropped.
    _broker: Option<BrokerProcess>,
    /// The broker's process, when it runs on this machine (its CPU time is read from
    /// `/proc`): this run's own, or the one listening on a given loopback port.
    pid: Option<u32>,
    pub(super) bootstrap: String,
    /// A second Kafka listener of this run's broker that copies record bytes
    /// (`sendfile = false`), to measure `sendfile(2)` against in the same run.
    copying: Option<String>,
    data_dir: std::path::PathBuf,
}

impl KafkaTarget {
    pub(super) async fn new(ctx: &Ctx) -> anyhow::Result<Self> {
        if let Some(bootstrap) = &ctx.kafka_bootstrap {
            return Ok(Self::external(bootstrap, ctx));
        }
        let kafka = format!("127.0.0.1:{}", free_port());
        let copying = format!("127.0.0.1:{}", free_port());
        let config = format!(
            "[listeners.copying]\nprotocol = \"kafka\"\nlisten = \"{copying}\"\nsendfile = false\n"
        );
        let args = ["--kafka-listen".to_string(), kafka.clone()];
        let b = BrokerProcess::start(&config, &args, &ctx.base).await?;
        Ok(Self {
            data_dir: b.data_dir(),
            pid: Some(b.pid()),
            _broker: Some(b),
            bootstrap: kafka,
            copying: Some(copying),
        })
    }

    /// Any Kafka-protocol broker at `bootstrap`; its process is found when it listens
    /// on this machine.
    pub(super) fn external(bootstrap: &str, ctx: &Ctx) -> Self {
        let pid = bootstrap
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .and_then(crate::harness::listening_pid);
        Self {
            _broker: None,
            pid,
            bootstrap: bootstrap.to_string(),
            copying: None,
            data_dir: ctx.base.clone(),
        }
    }

    /// The broker's CPU seconds so far (0 when its process is not known).
    pub(super) fn cpu_seconds(&self) -> f64 {
        self.stats().cpu_seconds
    }

    pub(super) fn stats(&self) -> ProcessStats {
        self.pid.map(ProcessStats::of).unwrap_or_default()
    }

    /// The broker's resident memory now (MiB), when its process is known.
    fn rss_mib(&self) -> Option<f64> {
        let pid = self.pid?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .split_whitespace()
            .next()?
            .parse()
            .ok()?;
        Some(kib / 1024.0)
    }

    pub(super) fn config(&self) -> ClientConfig {
        Self::config_for(&self.bootstrap)
    }

    pub(super) fn config_for(bootstrap: &str) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", bootstrap);
        c
    }

    pub(super) async fn create_topic(&self, name: &str, partitions: i32) -> anyhow::Result<()> {
        let admin: AdminClient<DefaultClientContext> = self.config().create()?;
        let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(60)));
        for result in admin.create_topics([&topic], &options).await? {
            if let Err((topic, code)) = result {
                bail!("creating {topic}: {code}");
            }
        }
        Ok(())
    }
}

/// Counts delivery failures.
#[derive(Default)]
struct Deliveries {
    failed: AtomicU64,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Sends `bytes` of `record`-byte values with acks=1: record by record round-robin
/// over `partitions`, or (`None`) keyless to librdkafka's default partitioner.
pub(super) fn produce(
    config: ClientConfig,
    topic: &str,
    partitions: Option<i32>,
    bytes: u64,
    record: usize,
) -> anyhow::Result<Sent> {
    let mut config = config;
    config
        .set("acks", "1")
        .set("linger.ms", "5")
        .set("batch.size", "1048576")
        .set("queue.buffering.max.kbytes", "262144");
    let producer: ThreadedProducer<Deliveries> =
        ThreadedProducer::from_config_and_context(&config, Deliveries::default())?;
    let value = vec![b'x'; record];
    let count = bytes / record as u64;
    let start = Instant::now();
    for i in 0..count {
        let mut rec = BaseRecord::<(), [u8]>::to(topic).payload(&value);
        if let Some(n) = partitions {
            rec = rec.partition((i % n as u64) as i32);
        }
        loop {
            match producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    rec = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
    }
    producer.flush(Duration::from_secs(120))?;
    let secs = start.elapsed().as_secs_f64();
    let failed = producer.context().failed.load(Ordering::Relaxed);
    if failed > 0 {
        bail!("{failed} of {count} records were not delivered");
    }
    Ok(Sent {
        records: count,
        bytes: count * record as u64,
        secs,
    })
}

/// Reads `count` records of `topic` from offset 0 (every partition).
pub(super) fn consume(
    config: ClientConfig,
    topic: &str,
    partitions: i32,
    count: u64,
) -> anyhow::Result<Sent> {
    let mut config = config;
    config
        .set("group.id", "shale-bench-kafka")
        .set("enable.auto.commit", "false")
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "10485760");
    let consumer: BaseConsumer = BaseConsumer::from_config(&config)?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let (mut records, mut bytes) = (0u64, 0u64);
    let start = Instant::now();
    while records < count {
        if start.elapsed() > Duration::from_secs(300) {
            bail!("consumed {records} of {count} records in 300 s");
        }
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            let m = m?;
            records += 1;
            bytes += m.payload_len() as u64;
        }
    }
    Ok(Sent {
        records,
        bytes,
        secs: start.elapsed().as_secs_f64(),
    })
}

/// Produce and consume MiB/s (acks=1, 1 KiB records, 8 partitions), end-to-end
/// latency at fixed rates, and produce MiB/s at 1 and 1,000 partitions.
pub(crate) async fn kafka(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let target = KafkaTarget::new(ctx).await?;
    let bytes = ctx.size(256, 16);
    let mut out = Vec::new();

    // Produce, then consume what was produced.
    let produce_topic = ctx.topic("kafka-produce");
    target.create_topic(&produce_topic, 8).await?;
    let config = target.config();
    let topic = produce_topic.clone();
    let cpu = target.cpu_seconds();
    let sent = tokio::task::spawn_blocking(move || produce(config, &topic, Some(8), bytes, 1024))
        .await??;
    let produce_cpu = target.cpu_seconds() - cpu;
    let disk_write = baseline::disk_write(&target.data_dir, bytes)?;
    let loopback = baseline::loopback_copy(bytes).await?;
    out.push(CaseResult {
        scenario: "kafka-produce".into(),
        params: client_params(&[("record_bytes", "1024"), ("partitions", "8")]),
        metrics: with_cpu(rates(&sent), produce_cpu, &sent),
        baselines: numbers(&[
            ("disk_write_mib_per_sec", disk_write),
            ("loopback_tcp_mib_per_sec", loopback),
        ]),
        ratio: Some(Ratio::new(
            "mib_per_sec / min(disk_write, loopback_tcp)",
            sent.mib_per_sec() / disk_write.min(loopback),
            Some(0.5),
        )),
        broker: target.stats(),
    });
    // Consume it, through the listener that sends record bytes with sendfile(2) and
    // (this run's broker) through one that copies them, alternating, twice each.
    let count = sent.records;
    let mut listeners = vec![("sendfile", target.bootstrap.clone())];
    listeners.extend(target.copying.clone().map(|c| ("copying", c)));
    let rounds = if ctx.quick { 1 } else { 2 };
    for round in 0..rounds {
        for (path, bootstrap) in &listeners {
            let config = KafkaTarget::config_for(bootstrap);
            let topic = produce_topic.clone();
            let cpu = target.cpu_seconds();
            let read =
                tokio::task::spawn_blocking(move || consume(config, &topic, 8, count)).await??;
            let cpu = target.cpu_seconds() - cpu;
            out.push(CaseResult {
                scenario: "kafka-consume".into(),
                params: client_params(&[
                    ("record_bytes", "1024"),
                    ("partitions", "8"),
                    ("records_path", path),
                    ("round", &(round + 1).to_string()),
                ]),
                metrics: with_cpu(rates(&read), cpu, &read),
                baselines: numbers(&[("loopback_tcp_mib_per_sec", loopback)]),
                ratio: Some(Ratio::new(
                    "mib_per_sec / loopback_tcp",
                    read.mib_per_sec() / loopback,
                    Some(0.5),
                )),
                broker: target.stats(),
            });
        }
    }

    // End-to-end latency at fixed offered rates.
    let e2e_topic = ctx.topic("kafka-e2e");
    target.create_topic(&e2e_topic, 1).await?;
    let rtt = baseline::tcp_round_trips(if ctx.quick { 2_000 } else { 20_000 }).await?;
    let rtt_p99_ms = rtt.value_at_quantile(0.99) as f64 / 1000.0;
    let run_for = Duration::from_millis(if ctx.quick { 1_000 } else { 5_000 });
    for rate in [1_000.0, 10_000.0] {
        let (config, topic) = (target.config(), e2e_topic.clone());
        let hist =
            tokio::task::spawn_blocking(move || latency(config, &topic, rate, run_for)).await??;
        let q = |x: f64| hist.value_at_quantile(x) as f64 / 1000.0;
        out.push(CaseResult {
            scenario: "kafka-e2e".into(),
            params: client_params(&[("rate_per_sec", &format!("{rate:.0}"))]),
            metrics: numbers(&[
                ("p50_ms", q(0.5)),
                ("p99_ms", q(0.99)),
                ("p999_ms", q(0.999)),
                ("samples", hist.len() as f64),
            ]),
            baselines: numbers(&[("loopback_rtt_p99_ms", rtt_p99_ms)]),
            ratio: Some(Ratio::new(
                "loopback_rtt_p99 / p99 (target: p99 within 20x the round trip)",
                rtt_p99_ms / q(0.99).max(1e-6),
                Some(0.05),
            )),
            broker: target.stats(),
        });
    }

    // Partition count: the same bytes over 1, 1,000 and 10,000 partitions, spread
    // record by record (every record to the next partition: the most batches) and by
    // librdkafka's default sticky partitioner (keyless records fill one partition's
    // batch, then move on), with the broker's resident memory per partition.
    let bytes = ctx.size(128, 16);
    let mut one = 0.0;
    let counts: &[i32] = if ctx.quick {
        &[1, 1_000]
    } else {
        &[1, 1_000, 10_000]
    };
    for &partitions in counts {
        let spreads: &[bool] = if partitions == 1 {
            &[true]
        } else {
            &[true, false]
        };
        let rss_before = target.rss_mib();
        let topic = ctx.topic(&format!("kafka-partitions-{partitions}"));
        target.create_topic(&topic, partitions).await?;
        let first = first_appends(&target, &topic, partitions).await?;
        for &per_record in spreads {
            let config = target.config();
            let t = topic.clone();
            let cpu = target.cpu_seconds();
            let sent = tokio::task::spawn_blocking(move || {
                produce(config, &t, per_record.then_some(partitions), bytes, 1024)
            })
            .await??;
            let cpu = target.cpu_seconds() - cpu;
            if partitions == 1 {
                one = sent.mib_per_sec();
            }
            let mut metrics = with_cpu(rates(&sent), cpu, &sent);
            if per_record {
                metrics.extend(first.clone());
            }
            if let (Some(before), Some(after)) = (rss_before, target.rss_mib()) {
                let per_partition_kib = (after - before).max(0.0) * 1024.0 / partitions as f64;
                metrics.extend(numbers(&[(
                    "broker_rss_kib_per_partition",
                    per_partition_kib,
                )]));
            }
            let spread = if per_record { "per-record" } else { "sticky" };
            out.push(CaseResult {
                scenario: "kafka-partitions".into(),
                params: client_params(&[
                    ("partitions", &partitions.to_string()),
                    ("spread", spread),
                ]),
                metrics,
                baselines: numbers(&[("one_partition_mib_per_sec", one)]),
                ratio: Some(Ratio::new(
                    "mib_per_sec / one partition's",
                    sent.mib_per_sec() / one.max(1e-9),
                    (partitions == 1_000).then_some(0.7),
                )),
                broker: target.stats(),
            });
        }
    }
    drop(target);
    // The security protocols' cost needs listeners of this run's own broker.
    if ctx.kafka_bootstrap.is_none() {
        out.extend(super::kafka_tls::kafka_tls(ctx).await?);
    }
    // Replay isolation needs a tiered broker of its own (not a --kafka-bootstrap one).
    if ctx.kafka_bootstrap.is_none() {
        out.extend(kafka_isolation(ctx).await?);
    }
    Ok(out)
}

/// Sends one record to each partition of a new topic (untimed in the cases after it):
/// a partition's first append starts its leader epoch, which the broker may record
/// durably (Shale writes and fsyncs the partition's epoch checkpoint), a one-time
/// cost per partition and leadership, kept apart from the steady state measured
/// after. Returns its seconds and the broker's CPU seconds, as metrics.
pub(super) async fn first_appends(
    target: &KafkaTarget,
    topic: &str,
    partitions: i32,
) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    if partitions <= 1 {
        return Ok(Default::default());
    }
    let (config, t) = (target.config(), topic.to_string());
    let cpu = target.cpu_seconds();
    let sent = tokio::task::spawn_blocking(move || {
        produce(config, &t, Some(partitions), partitions as u64 * 1024, 1024)
    })
    .await??;
    let cpu = target.cpu_seconds() - cpu;
    Ok(numbers(&[
        ("first_appends_secs", sent.secs),
        ("first_appends_broker_cpu_s", cpu),
    ]))
}

/// The produce → consume latency histogram (µs) at `rate` through librdkafka against
/// the Kafka listener at `bootstrap` (see [`latency`]).
pub(super) async fn latency_of(
    bootstrap: &str,
    topic: &str,
    rate: f64,
    run_for: Duration,
) -> anyhow::Result<Histogram<u64>> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    let topic = topic.to_string();
    tokio::task::spawn_blocking(move || latency(config, &topic, rate, run_for)).await?
}

/// Replay isolation through librdkafka (the `isolation` scenario's Kafka variant),
/// with the replay's client and the object store sharing the cores on equal terms,
/// then standing in for other machines (niced).
pub(crate) async fn kafka_isolation(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    use super::isolation::{Driver, Placement, isolation_with};
    let mut out = isolation_with(ctx, Driver::Kafka, Placement::Shared).await?;
    out.extend(isolation_with(ctx, Driver::Kafka, Placement::Apart).await?);
    Ok(out)
}

/// The replay process of the Kafka variant: reads `SHALE_BENCH_REPLAY_RECORDS` records
/// of `SHALE_BENCH_REPLAY_TOPIC` (4 partitions) from offset 0 through librdkafka.
pub(crate) fn replay_worker(bootstrap: &str) -> anyhow::Result<()> {
    let topic = std::env::var("SHALE_BENCH_REPLAY_TOPIC")?;
    let records: u64 = std::env::var("SHALE_BENCH_REPLAY_RECORDS")?.parse()?;
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    let read = consume(config, &topic, 4, records)?;
    // The reading time, without the client's start and close (the parent's figure).
    println!("replay_secs {}", read.secs);
    Ok(())
}

pub(super) fn client_params(pairs: &[(&str, &str)]) -> std::collections::BTreeMap<String, String> {
    let mut all: Vec<(&str, String)> = vec![("client", "librdkafka".into()), ("acks", "1".into())];
    all.extend(pairs.iter().map(|(k, v)| (*k, v.to_string())));
    params(&all)
}

/// `metrics` with the broker's CPU seconds per GiB moved (none for a broker this
/// run did not start: its CPU is not known).
pub(super) fn with_cpu(
    mut metrics: std::collections::BTreeMap<String, f64>,
    cpu_seconds: f64,
    sent: &Sent,
) -> std::collections::BTreeMap<String, f64> {
    if cpu_seconds > 0.0 && sent.bytes > 0 {
        let gib = sent.bytes as f64 / (1024.0 * MIB);
        metrics.extend(numbers(&[("broker_cpu_s_per_gib", cpu_seconds / gib)]));
    }
    metrics
}

pub(super) fn rates(sent: &Sent) -> std::collections::BTreeMap<String, f64> {
    numbers(&[
        ("records_per_sec", sent.records_per_sec()),
        ("mib_per_sec", sent.mib_per_sec()),
        ("mib", sent.bytes as f64 / MIB),
    ])
}

/// Sends 100-byte records stamped with their send time at `rate` for `run_for`
/// (acks=1, no linger) while a consumer records each one's latency (µs).
pub(super) fn latency(
    config: ClientConfig,
    topic: &str,
    rate: f64,
    run_for: Duration,
) -> anyhow::Result<Histogram<u64>> {
    let mut consumer_config = config.clone();
    consumer_config
        .set("group.id", "shale-bench-kafka-e2e")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "100");
    let consumer: BaseConsumer = BaseConsumer::from_config(&consumer_config)?;
    // Start at the partition's current end, asked for explicitly: a logical "end"
    // position stays unresolved until a record arrives, so there is nothing to wait on.
    let (_, end) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(30))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(end))?;
    consumer.assign(&tpl)?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let received = Arc::new(AtomicU64::new(0));
    let reader = {
        let (stop, received) = (stop.clone(), received.clone());
        std::thread::spawn(move || -> anyhow::Result<Histogram<u64>> {
            let mut hist = Histogram::<u64>::new(3)?;
            while !stop.load(Ordering::Relaxed) {
                if let Some(m) = consumer.poll(Duration::from_millis(50)) {
                    let m = m?;
                    let sent = m.payload().map_or(0, |v| {
                        u64::from_be_bytes(v[..8].try_into().unwrap_or_default())
                    });
                    let _ = hist.record(now_nanos().saturating_sub(sent) / 1_000);
                    received.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(hist)
        })
    };
    let mut config = config;
    config.set("acks", "1").set("linger.ms", "0");
    let producer: ThreadedProducer<Deliveries> =
        ThreadedProducer::from_config_and_context(&config, Deliveries::default())?;
    let interval = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let mut next = start;
    let mut sent = 0u64;
    while start.elapsed() < run_for {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        let mut value = now_nanos().to_be_bytes().to_vec();
        value.resize(100, b'x');
        producer
            .send(
                BaseRecord::<(), [u8]>::to(topic)
                    .payload(&value)
                    .partition(0),
            )
            .map_err(|(e, _)| e)?;
        sent += 1;
        next += interval;
    }
    producer.flush(Duration::from_secs(30))?;
    // Until every record has arrived (a slow broker's last ones count too), for at
    // most 10 s.
    let waited = Instant::now();
    while received.load(Ordering::Relaxed) < sent && waited.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let hist = reader
        .join()
        .map_err(|_| anyhow::anyhow!("the latency reader panicked"))??;
    if hist.is_empty() {
        bail!("kafka-e2e: no record reached the consumer");
    }
    Ok(hist)
}
