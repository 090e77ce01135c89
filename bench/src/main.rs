//! `shale-bench`: Shale's benchmark suite. Each scenario starts the brokers it needs
//! (or uses `--bootstrap`), drives load through the real client library, measures its
//! physical baseline in the same run, and reports the ratio. Results go to
//! `{out}/latest.json` (stable layout, see `bench/README.md`) and `{out}/latest.md`.

mod baseline;
mod harness;
mod report;
mod scenarios;

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

use report::{CaseResult, Run};
use scenarios::Ctx;

#[derive(Parser)]
#[command(name = "shale-bench", about = "Shale benchmark suite")]
struct Cli {
    scenario: Scenario,
    /// Small sizes and short runs: every scenario in well under two minutes.
    #[arg(long)]
    quick: bool,
    /// Where `latest.json` and `latest.md` go.
    #[arg(long, default_value = "bench/results")]
    out: PathBuf,
    /// Where brokers keep their data (the disk measured by the baselines).
    /// Default: a temporary directory.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// PostgreSQL server for the replicated cases.
    #[arg(
        long,
        env = "SHALE_BENCH_POSTGRES",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    postgres: String,
    /// Run single-broker scenarios against this broker instead of starting one
    /// (no broker RSS/CPU then).
    #[arg(long, env = "SHALE_BOOTSTRAP")]
    bootstrap: Option<String>,
    /// The `kafka` scenario's broker: any Kafka-protocol broker (Shale's Kafka
    /// listener, or a peer's) instead of a Shale broker started for it.
    #[arg(long)]
    kafka_bootstrap: Option<String>,
    /// The `peer` scenario's other brokers, `NAME=HOST:PORT` (any Kafka-protocol
    /// broker; repeat for several), measured in turn with this run's Shale broker.
    #[arg(long, value_parser = parse_peer)]
    peer: Vec<(String, String)>,
}

fn parse_peer(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, bootstrap)) if !name.is_empty() && bootstrap.contains(':') => {
            Ok((name.to_string(), bootstrap.to_string()))
        }
        _ => Err(format!("expected NAME=HOST:PORT, got {s:?}")),
    }
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Produce,
    Consume,
    E2e,
    Replay,
    /// Lookup of records by key on a mostly-remote topic (2 GiB), against a full scan.
    Lookup,
    Partitions,
    Recovery,
    /// Produce latency idle and during a cold replay of a mostly-remote topic.
    Isolation,
    /// Produce latency idle and while the log cleaner compacts a topic, with and
    /// without its I/O limit.
    Compaction,
    /// A broker joins a 3-broker cluster holding a mostly tiered topic: what the
    /// balancer's moves copy to it against the moved partitions' size, the time to
    /// balance, and e2e latency during the moves against idle (needs PostgreSQL).
    Rebalance,
    /// Topics as Iceberg tables: produce with and without the table, translation of a
    /// backlog (MiB/s, CPU per GiB, Parquet per log byte, p99 meanwhile), steady lag.
    Table,
    /// Produce, consume, e2e, partition count and replay isolation through librdkafka
    /// (needs the `kafka` feature); not part of `all`.
    Kafka,
    /// Produce, consume, e2e and 1,000 partitions through librdkafka against this
    /// run's Shale broker and every `--peer`, interleaved (`kafka` feature).
    Peer,
    /// Only the `kafka` scenario's replay isolation case (`kafka` feature).
    KafkaIsolation,
    /// Only the `kafka` scenario's security cases: produce and consume through
    /// PLAINTEXT, SSL and SASL_SSL listeners of one broker (`kafka` feature).
    KafkaSecurity,
    /// The Kafka isolation case's replay process (started by it).
    #[value(hide = true)]
    KafkaReplayWorker,
    All,
}

#[cfg(feature = "kafka")]
fn replay_worker(bootstrap: Option<&str>) -> anyhow::Result<()> {
    scenarios::replay_worker(
        bootstrap.ok_or_else(|| anyhow::anyhow!("--kafka-bootstrap is needed"))?,
    )
}

#[cfg(not(feature = "kafka"))]
fn replay_worker(_: Option<&str>) -> anyhow::Result<()> {
    anyhow::bail!("shale-bench was built without the `kafka` feature")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    if cli.scenario == Scenario::KafkaReplayWorker {
        return replay_worker(cli.kafka_bootstrap.as_deref());
    }
    let tmp = tempfile::tempdir()?;
    let base = cli
        .data_dir
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&base)?;
    let ctx = Ctx {
        quick: cli.quick,
        base,
        postgres: cli.postgres.clone(),
        bootstrap: cli.bootstrap.clone(),
        kafka_bootstrap: cli.kafka_bootstrap.clone(),
        peers: cli.peer.clone(),
        run_tag: if cli.bootstrap.is_some() || cli.kafka_bootstrap.is_some() {
            format!("-{}", chrono::Utc::now().format("%Y%m%d%H%M%S%3f"))
        } else {
            String::new()
        },
    };
    let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut results: Vec<CaseResult> = Vec::new();
    let all = cli.scenario == Scenario::All;
    if all || cli.scenario == Scenario::Produce {
        scenarios::running("produce", "starting");
        results.extend(scenarios::produce(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Consume {
        scenarios::running("consume", "starting");
        results.extend(scenarios::consume(&ctx).await?);
    }
    if all || cli.scenario == Scenario::E2e {
        scenarios::running("e2e", "starting");
        results.extend(scenarios::e2e(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Replay {
        scenarios::running("replay", "starting");
        results.extend(scenarios::replay(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Lookup {
        scenarios::running("lookup", "starting");
        results.extend(scenarios::lookup_by_key(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Partitions {
        scenarios::running("partitions", "starting");
        results.extend(scenarios::partitions(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Recovery {
        scenarios::running("recovery", "starting");
        results.extend(scenarios::recovery(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Isolation {
        scenarios::running("isolation", "starting");
        results.extend(scenarios::isolation(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Compaction {
        scenarios::running("compaction", "starting");
        results.extend(scenarios::compaction(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Rebalance {
        scenarios::running("rebalance", "starting");
        results.extend(scenarios::rebalance(&ctx).await?);
    }
    if all || cli.scenario == Scenario::Table {
        scenarios::running("table", "starting");
        results.extend(scenarios::table(&ctx).await?);
    }
    if cli.scenario == Scenario::Kafka {
        scenarios::running("kafka", "starting");
        results.extend(scenarios::kafka(&ctx).await?);
    }
    if cli.scenario == Scenario::Peer {
        results.extend(scenarios::peer(&ctx).await?);
    }
    if cli.scenario == Scenario::KafkaIsolation {
        results.extend(scenarios::kafka_isolation(&ctx).await?);
    }
    if cli.scenario == Scenario::KafkaSecurity {
        results.extend(scenarios::kafka_security(&ctx).await?);
    }
    let run = Run {
        schema: report::SCHEMA,
        commit: report::commit(),
        started_at,
        quick: cli.quick,
        machine: report::machine(),
        results,
    };
    std::fs::create_dir_all(&cli.out)?;
    std::fs::write(
        cli.out.join("latest.json"),
        serde_json::to_string_pretty(&run)?,
    )?;
    let table = report::markdown(&run);
    std::fs::write(cli.out.join("latest.md"), &table)?;
    println!("{table}");
    Ok(())
}
