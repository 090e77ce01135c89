//! Replay isolation: produce → consume latency of one-record sends at a fixed offered
//! rate, first with the broker idle, then while a separate consumer process replays a
//! mostly-remote topic from offset 0 at full speed with a cold read cache. The replay's
//! own speed is reported against raw ranged GETs of the same objects: isolation bought
//! by slowing the replay down does not count.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hdrhistogram::Histogram;
use shale_client::Client;

use super::latency::latency_at;
use super::replay::{mostly_remote_topic, ranged_get_baseline, restart_cold, tiered_broker};
use super::{Ctx, MIB, configs};
use crate::harness::ProcessStats;
use crate::report::{CaseResult, Ratio, numbers, params};

/// One-record sends per second in both phases (a fixed offered load, not a fraction of
/// a maximum measured again in each phase).
pub(super) const RATE: f64 = 1_000.0;

/// The client the produce latency and the replay go through.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Driver {
    /// The Rust client (gRPC); the replay is `shale consume`.
    Grpc,
    /// librdkafka against the Kafka listener; the replay is a `shale-bench
    /// kafka-replay-worker` process.
    #[cfg(feature = "kafka")]
    Kafka,
}

impl Driver {
    fn name(self) -> &'static str {
        match self {
            Driver::Grpc => "grpc",
            #[cfg(feature = "kafka")]
            Driver::Kafka => "librdkafka",
        }
    }
}

/// Where the replay's client and the object store run against the broker's cores.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Placement {
    /// All on the same cores at the same priority: the replay client and the object
    /// store compete with the broker and the producer on equal terms.
    Shared,
    /// The replay client and the object store at nice 19, standing in for the other
    /// machines they run on in production: they get only what the broker, the
    /// producer and the latency consumer leave.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    Apart,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::Shared => "shared",
            Placement::Apart => "apart (replay client and object store at nice 19)",
        }
    }
}

pub(crate) async fn isolation(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    isolation_with(ctx, Driver::Grpc, Placement::Shared).await
}

pub(super) async fn isolation_with(
    ctx: &Ctx,
    driver: Driver,
    placement: Placement,
) -> anyhow::Result<Vec<CaseResult>> {
    let bytes = ctx.size(1024, 48);
    let segment = if ctx.quick { 1 << 20 } else { 16 << 20 };
    let metrics_port = crate::harness::free_port();
    let kafka = format!("127.0.0.1:{}", crate::harness::free_port());
    let (s3, mut broker) = tiered_broker(
        ctx,
        &format!("[broker]\nmetrics_listen = \"127.0.0.1:{metrics_port}\"\n"),
        &["--kafka-listen".to_string(), kafka.clone()],
    )
    .await?;
    let client = Client::connect(&broker.address()).await?;
    let replay_topic = "isolation-replay";
    let remote = mostly_remote_topic(&client, replay_topic, bytes, segment).await?;
    let client = restart_cold(&mut broker).await?;
    let e2e = "isolation-e2e";
    client
        .create_topic(e2e, 1, 1, configs(&[("remote.storage.enable", "false")]))
        .await?;
    let run_for = Duration::from_millis(if ctx.quick { 1_000 } else { 5_000 });
    let measure = async |run_for: Duration| -> anyhow::Result<Histogram<u64>> {
        match driver {
            Driver::Grpc => latency_at(&client, e2e, RATE, run_for).await,
            #[cfg(feature = "kafka")]
            Driver::Kafka => super::kafka::latency_of(&kafka, e2e, RATE, run_for).await,
        }
    };
    // Warm the produce path (connections, metadata, the partition's pages) first.
    measure(Duration::from_millis(300)).await?;
    let before_idle = produce_latency_buckets(metrics_port).await?;
    let idle = measure(run_for).await?;
    let before_busy = produce_latency_buckets(metrics_port).await?;

    let nice = placement == Placement::Apart;
    if nice {
        renice_all_threads(s3.pid())?;
    }
    let replay = match driver {
        Driver::Grpc => Replay::start(&broker.address(), replay_topic, nice)?,
        #[cfg(feature = "kafka")]
        Driver::Kafka => Replay::start_kafka(&kafka, replay_topic, bytes / 1024, nice)?,
    };
    // Who uses the two cores while the latency is measured during the replay.
    let pids = [
        ("broker", broker.pid()),
        ("object_store", s3.pid()),
        ("replay_client", replay.child.id()),
        ("bench", std::process::id()),
    ];
    let cpu_before = pids.map(|(_, pid)| ProcessStats::of(pid).cpu_seconds);
    let busy_started = Instant::now();
    let busy = measure(run_for).await?;
    let busy_secs = busy_started.elapsed().as_secs_f64();
    let cores: Vec<(String, f64)> = pids
        .iter()
        .zip(cpu_before)
        .map(|((name, pid), before)| {
            let used = ProcessStats::of(*pid).cpu_seconds - before;
            (
                format!("replay_cores_{name}"),
                (used / busy_secs * 100.0).round() / 100.0,
            )
        })
        .collect();
    let after_busy = produce_latency_buckets(metrics_port).await?;
    let measured_during = replay.started.elapsed();
    let replay_secs = replay.wait()?;
    let replay_mib_per_sec = bytes as f64 / MIB / replay_secs;
    let stats = ProcessStats::sum(&[broker.stats(), s3.stats()]);
    let raw_gets = ranged_get_baseline(&s3).await?;

    let q = |h: &Histogram<u64>, x: f64| h.value_at_quantile(x) as f64 / 1000.0;
    let phase = |name: &str, h: &Histogram<u64>| {
        numbers(&[
            ("p50_ms", q(h, 0.5)),
            ("p99_ms", q(h, 0.99)),
            ("p999_ms", q(h, 0.999)),
            ("samples", h.len() as f64),
        ])
        .into_iter()
        .map(|(k, v)| (format!("{name}_{k}"), v))
        .collect::<std::collections::BTreeMap<_, _>>()
    };
    let mut latency = phase("idle", &idle);
    latency.extend(phase("replay", &busy));
    // The broker's own view: the share of produce requests it took over 1 ms to answer.
    let slow = |from: &[(f64, f64)], to: &[(f64, f64)]| {
        let count =
            |b: &[(f64, f64)], le: f64| b.iter().find(|(l, _)| *l >= le).map_or(0.0, |x| x.1);
        let total = count(to, f64::INFINITY) - count(from, f64::INFINITY);
        let fast = count(to, 0.001) - count(from, 0.001);
        if total > 0.0 {
            (total - fast) / total
        } else {
            0.0
        }
    };
    latency.extend(cores);
    let share = |x: f64| (x * 10_000.0).round() / 10_000.0;
    latency.insert(
        "idle_broker_produce_over_1ms_share".into(),
        share(slow(&before_idle, &before_busy)),
    );
    latency.insert(
        "replay_broker_produce_over_1ms_share".into(),
        share(slow(&before_busy, &after_busy)),
    );
    let common = [
        ("client", driver.name().to_string()),
        ("rate_per_sec", format!("{RATE:.0}")),
        ("acks", "1".into()),
        ("placement", placement.name().into()),
        ("replay_mib", format!("{:.0}", bytes as f64 / MIB)),
        (
            "remote_share",
            format!("{:.0}%", remote as f64 / bytes as f64 * 100.0),
        ),
    ];
    // Whether the replay lasted the whole second measurement.
    let overlap = (replay_secs / measured_during.as_secs_f64()).min(1.0);
    Ok(vec![
        CaseResult {
            scenario: "isolation".into(),
            params: params(&[&common[..], &[("measure", "produce latency".into())]].concat()),
            metrics: latency,
            baselines: numbers(&[("idle_p99_ms", q(&idle, 0.99)), ("replay_overlap", overlap)]),
            ratio: Some(Ratio::new(
                "idle p99 / p99 during the replay (target: at most 2x worse)",
                q(&idle, 0.99) / q(&busy, 0.99).max(1e-6),
                Some(0.5),
            )),
            broker: stats,
        },
        CaseResult {
            scenario: "isolation".into(),
            params: params(&[&common[..], &[("measure", "replay speed".into())]].concat()),
            metrics: numbers(&[("replay_mib_per_sec", replay_mib_per_sec)]),
            baselines: numbers(&[("ranged_get_mib_per_sec", raw_gets)]),
            ratio: Some(Ratio::new(
                "replay_mib_per_sec / ranged_get (while produce runs)",
                replay_mib_per_sec / raw_gets.max(1e-9),
                Some(0.5),
            )),
            broker: stats,
        },
    ])
}

/// The broker's Produce latency histogram from `/metrics`: (upper bound in seconds,
/// cumulative count) per bucket, summed over listeners.
async fn produce_latency_buckets(port: u16) -> anyhow::Result<Vec<(f64, f64)>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    let mut buckets: std::collections::BTreeMap<String, f64> = Default::default();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("shale_request_duration_seconds_bucket{") else {
            continue;
        };
        if !rest.contains("api=\"Produce\"") {
            continue;
        }
        let le = rest.split("le=\"").nth(1).and_then(|x| x.split('"').next());
        let value = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
        if let (Some(le), Some(v)) = (le, value) {
            *buckets.entry(le.to_string()).or_default() += v;
        }
    }
    let mut out: Vec<(f64, f64)> = buckets
        .into_iter()
        .map(|(le, v)| {
            (
                if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().unwrap_or(f64::INFINITY)
                },
                v,
            )
        })
        .collect();
    out.sort_by(|a, b| a.0.total_cmp(&b.0));
    Ok(out)
}

/// A consumer process reading a topic from its start to its end.
struct Replay {
    child: std::process::Child,
    started: Instant,
}

/// `program`, under `nice -n 19` when `nice`.
fn command(program: &std::path::Path, nice: bool) -> Command {
    if nice {
        let mut c = Command::new("nice");
        c.args(["-n", "19"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

/// Every thread of process `pid` to nice 19 (nice is per thread on Linux; threads
/// started later inherit it from the thread that starts them).
fn renice_all_threads(pid: u32) -> anyhow::Result<()> {
    let tids: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/task"))?
        .flatten()
        .map(|t| t.file_name().to_string_lossy().into_owned())
        .collect();
    let status = Command::new("renice")
        .args(["-n", "19", "-p"])
        .args(&tids)
        .stdout(Stdio::null())
        .status()?;
    if !status.success() {
        bail!("renice of process {pid}'s threads failed: {status}");
    }
    Ok(())
}

impl Replay {
    fn start(bootstrap: &str, topic: &str, nice: bool) -> anyhow::Result<Self> {
        let cli = std::env::current_exe()?.with_file_name("shale");
        let child = command(&cli, nice)
            .args([
                "--bootstrap",
                bootstrap,
                "consume",
                topic,
                "--from-beginning",
            ])
            .args(["--exit", "--format", ""])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", cli.display()))?;
        Ok(Self {
            child,
            started: Instant::now(),
        })
    }

    /// A `shale-bench kafka-replay-worker` process: librdkafka reading `records`.
    #[cfg(feature = "kafka")]
    fn start_kafka(bootstrap: &str, topic: &str, records: u64, nice: bool) -> anyhow::Result<Self> {
        let me = std::env::current_exe()?;
        let child = command(&me, nice)
            .args(["kafka-replay-worker", "--kafka-bootstrap", bootstrap])
            .env("SHALE_BENCH_REPLAY_TOPIC", topic)
            .env("SHALE_BENCH_REPLAY_RECORDS", records.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", me.display()))?;
        Ok(Self {
            child,
            started: Instant::now(),
        })
    }

    /// Waits for the replay to end; returns how long it read: what the process
    /// reports (`replay_secs N` on its stdout: its reading alone), else its whole run.
    fn wait(self) -> anyhow::Result<f64> {
        let out = self.child.wait_with_output()?;
        let ran = self.started.elapsed().as_secs_f64();
        if !out.status.success() {
            bail!(
                "the replay consumer failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let reported = String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.strip_prefix("replay_secs ")?.trim().parse::<f64>().ok());
        Ok(reported.unwrap_or(ran))
    }
}
