//! `shale-chaos`: randomized, combined faults against a real four-broker cluster, in
//! the spirit of Jepsen. A seeded schedule applies SIGKILL, SIGSTOP, restarts that
//! lost their unflushed tail, network partitions (brokers in network namespaces of
//! their own), PostgreSQL and object-store outages, slow disks, reassignments and
//! decommissions (with the balancer moving replicas back) while idempotent
//! `acks=all` producers, a transactional producer (with the `kafka` feature) and a
//! consumer group run; then everything is healed and the
//! checker reads the whole log back (see `check`). A failure names the seed and the
//! fault history, so the run can be replayed.

pub mod check;
pub mod cluster;
pub mod faults;
#[cfg(feature = "kafka")]
mod kafka;
pub mod netns;
pub mod proxy;
pub mod tally;
#[cfg(feature = "kafka")]
pub mod txns;
pub mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use shale_client::Client;

use faults::{Fault, Rng, SlowDisk};

pub struct Options {
    /// The schedule's seed; with `script`, only names the run.
    pub seed: u64,
    /// A fixed schedule instead of a random one: (fault, broker, hold); broker 0 is
    /// whichever broker leads partition 0 when the fault starts.
    pub script: Option<Vec<(Fault, i32, Duration)>>,
    /// How long faults are applied (then healed and checked).
    pub duration: Duration,
    /// `postgres://user@host:port` of a server where databases may be created.
    pub postgres: String,
    pub work: PathBuf,
    /// The faults to draw from.
    pub faults: Vec<Fault>,
    /// Rust producers and the records each sends per second.
    pub producers: usize,
    pub rate: u64,
    /// Also produce through librdkafka (needs the `kafka` feature).
    pub kafka: bool,
}

/// What a run did and found.
pub struct Outcome {
    pub seed: u64,
    pub history: Vec<String>,
    pub counts: BTreeMap<Fault, usize>,
    pub report: check::Report,
    pub failed_sends: u64,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.report.violations.is_empty()
    }
}

/// Runs one seeded schedule and checks the result.
pub async fn run(opts: Options) -> anyhow::Result<Outcome> {
    let tag = format!("shc{}", opts.seed % 100_000);
    let used: Vec<Fault> = (opts.faults.iter().copied())
        .chain(opts.script.iter().flatten().map(|(f, _, _)| *f))
        .collect();
    let namespaces = used.iter().any(|f| f.needs_namespaces());
    let mut cluster = cluster::Cluster::start(&opts.work, &opts.postgres, &tag, namespaces).await?;
    let slow = if used.contains(&Fault::SlowDisk) {
        Some(SlowDisk::create(&tag, &opts.work)?)
    } else {
        None
    };
    let client = Client::connect(&cluster.grpc_bootstrap())
        .await?
        .with_request_timeout(Duration::from_secs(5));
    let kafka = opts.kafka.then(|| cluster.kafka_bootstrap());
    let mut load = workload::Workload::start(&client, opts.producers, opts.rate, kafka).await?;
    let mut history = Vec::new();
    let run = faults_then_check(
        &opts,
        &mut cluster,
        (&client, slow.as_ref()),
        &mut load,
        &mut history,
    )
    .await;
    if let Err(e) = &run {
        // Said now: stopping the producers below may take a while, and whatever
        // drops them after this must not hide why the run ended.
        eprintln!("shale-chaos: seed {}: {e:#}; faults:", opts.seed);
        history.iter().for_each(|line| eprintln!("  {line}"));
        let stop = tokio::time::timeout(Duration::from_secs(30), load.stop_producing());
        if stop.await.is_err() {
            eprintln!("shale-chaos: the producers did not stop within 30 s");
        }
    }
    run
}

/// The fault schedule, then healing, settling and the checks.
async fn faults_then_check(
    opts: &Options,
    cluster: &mut cluster::Cluster,
    (client, slow): (&Client, Option<&SlowDisk>),
    load: &mut workload::Workload,
    history: &mut Vec<String>,
) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    let mut rng = Rng::new(opts.seed);
    let mut counts = BTreeMap::new();
    let mut script = opts.script.clone().map(|s| s.into_iter());
    loop {
        let step = match &mut script {
            Some(steps) => {
                let Some((fault, broker, hold)) = steps.next() else {
                    break;
                };
                let broker = match broker {
                    0 => leader_of_partition_0(client).await.unwrap_or(1),
                    b => b,
                };
                faults::Step {
                    fault,
                    broker,
                    with: None,
                    hold,
                    quiet: Duration::from_secs(2),
                    cut_at: 0.5,
                }
            }
            None if started.elapsed() < opts.duration => {
                let leader = some_leader(client).await;
                faults::next_step(&mut rng, &opts.faults, leader)
            }
            None => break,
        };
        let at = started.elapsed().as_secs_f64();
        history.push(format!("{at:7.1} s  {step}"));
        *counts.entry(step.fault).or_insert(0) += 1;
        let c = client;
        faults::apply(cluster, c, slow, step.fault, step.broker, step.cut_at).await?;
        if let Some(w) = step.with {
            *counts.entry(w).or_insert(0) += 1;
            faults::apply(cluster, c, slow, w, step.broker, 0.0).await?;
        }
        tokio::time::sleep(step.hold).await;
        if let Some(w) = step.with {
            faults::heal(cluster, c, slow, w, step.broker, 0.0).await?;
        }
        faults::heal(cluster, c, slow, step.fault, step.broker, step.cut_at).await?;
        tokio::time::sleep(step.quiet).await;
    }
    history.push(format!(
        "{:7.1} s  healed; waiting for every replica",
        started.elapsed().as_secs_f64()
    ));
    settle(client).await?;
    load.stop_producing().await;
    wait_group_caught_up(client, &load.tally).await;
    load.stop_consuming().await;
    #[allow(unused_mut)]
    let mut report = check::check(client, &load.tally, &cluster.db).await?;
    #[cfg(feature = "kafka")]
    if let Some(tally) = load.txns.clone() {
        let bootstrap = cluster.kafka_bootstrap();
        let txns = tokio::task::spawn_blocking(move || txns::check(&bootstrap, &tally)).await??;
        report.violations.extend(txns.violations.iter().cloned());
        report.txns = Some(txns);
    }
    let failed_sends = load.tally.failed.load(std::sync::atomic::Ordering::Relaxed);
    Ok(Outcome {
        seed: opts.seed,
        history: std::mem::take(history),
        counts,
        report,
        failed_sends,
    })
}

/// The broker leading partition 0, if the metadata can be read now.
async fn leader_of_partition_0(client: &Client) -> Option<i32> {
    let d = tokio::time::timeout(Duration::from_secs(5), client.describe_topic(tally::TOPIC))
        .await
        .ok()?
        .ok()?;
    d.partitions.first().map(|p| p.leader).filter(|l| *l > 0)
}

/// A broker leading some partition, if the metadata can be read now.
async fn some_leader(client: &Client) -> Option<i32> {
    let d = tokio::time::timeout(Duration::from_secs(2), client.describe_topic(tally::TOPIC))
        .await
        .ok()?
        .ok()?;
    d.partitions.iter().map(|p| p.leader).find(|l| *l > 0)
}

/// Waits until every partition has a leader and its three replicas in sync, with no
/// move in flight (the balancer's last moves finish).
async fn settle(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let d = client.describe_topic(tally::TOPIC).await;
        if let Ok(d) = &d
            && d.partitions
                .iter()
                .all(|p| p.leader > 0 && p.replicas.len() == 3 && p.isr.len() == 3)
        {
            return Ok(());
        }
        let seen = d.map(|d| {
            (d.partitions.iter())
                .map(|p| {
                    format!(
                        "{}: leader {} replicas {:?} isr {:?}",
                        p.partition, p.leader, p.replicas, p.isr
                    )
                })
                .collect::<Vec<_>>()
        });
        anyhow::ensure!(
            Instant::now() < deadline,
            "the cluster did not recover within 120 s of the last fault: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits (up to a minute) until the group has committed every partition's end.
async fn wait_group_caught_up(client: &Client, tally: &tally::Tally) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        let mut done = true;
        for p in 0..tally::PARTITIONS {
            let end = client
                .list_offset(tally::TOPIC, p, -1)
                .await
                .ok()
                .flatten()
                .unwrap_or(i64::MAX);
            let committed = tally
                .committed
                .lock()
                .unwrap()
                .get(&p)
                .copied()
                .unwrap_or(0);
            done &= committed >= end;
        }
        if done {
            return;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
