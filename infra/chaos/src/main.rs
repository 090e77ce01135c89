//! `shale-chaos`: see the library's documentation and docs/testing.md ("Fault harness").

use std::time::Duration;

use clap::Parser;
use shale_chaos::faults::Fault;

#[derive(Parser)]
#[command(
    name = "shale-chaos",
    about = "Randomized combined faults against a Shale cluster"
)]
struct Cli {
    /// The schedule's seed (default: from the clock). A failed run prints it.
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds of faults (then everything is healed and checked).
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Faults to draw from, comma-separated (default: all). Network cuts need root.
    #[arg(long, value_delimiter = ',')]
    faults: Vec<String>,
    /// PostgreSQL server where a database is created for the run.
    #[arg(
        long,
        env = "SHALE_CHAOS_POSTGRES",
        default_value = "postgres://postgres@127.0.0.1:5432"
    )]
    postgres: String,
    /// Where brokers and s3s-fs keep their data (default: a temporary directory,
    /// kept after a failed run).
    #[arg(long)]
    work: Option<std::path::PathBuf>,
    /// Rust producers, and records each sends per second.
    #[arg(long, default_value_t = 2)]
    producers: usize,
    #[arg(long, default_value_t = 200)]
    rate: u64,
    /// Also produce through librdkafka on the Kafka listener (`kafka` feature).
    #[arg(long)]
    kafka: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    let seed = cli.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    });
    let faults = if cli.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        cli.faults
            .iter()
            .map(|f| {
                Fault::parse(f).ok_or_else(|| {
                    anyhow::anyhow!(
                        "unknown fault '{f}'; known: {}",
                        Fault::ALL.map(|f| f.name()).join(", ")
                    )
                })
            })
            .collect::<anyhow::Result<_>>()?
    };
    if cli.kafka && !cfg!(feature = "kafka") {
        anyhow::bail!("--kafka needs shale-chaos built with the `kafka` feature");
    }
    let tmp = tempfile::Builder::new().prefix("shale-chaos-").tempdir()?;
    let work = cli.work.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    eprintln!(
        "shale-chaos: seed {seed}, {} s of {:?}, data in {}",
        cli.seconds,
        faults.iter().map(|f| f.name()).collect::<Vec<_>>(),
        work.display()
    );
    let run = shale_chaos::run(shale_chaos::Options {
        seed,
        script: None,
        duration: Duration::from_secs(cli.seconds),
        postgres: cli.postgres,
        work: work.clone(),
        faults,
        producers: cli.producers,
        rate: cli.rate,
        kafka: cli.kafka,
    });
    // A signal drops the run, whose parts stop their processes and remove their
    // namespaces, cgroups and database as they go.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let outcome = tokio::select! {
        outcome = run => match outcome {
            Ok(outcome) => outcome,
            Err(e) => {
                // The brokers' logs and data say why: keep them.
                eprintln!(
                    "replay with: shale-chaos --seed {seed} --seconds {}; data kept in {}",
                    cli.seconds,
                    tmp.keep().display()
                );
                return Err(e);
            }
        },
        _ = tokio::signal::ctrl_c() => {
            eprintln!("shale-chaos: interrupted; cleaned up");
            return Ok(std::process::ExitCode::from(130));
        }
        _ = term.recv() => {
            eprintln!("shale-chaos: terminated; cleaned up");
            return Ok(std::process::ExitCode::from(143));
        }
    };
    println!("seed {seed}: faults");
    for line in &outcome.history {
        println!("  {line}");
    }
    let r = &outcome.report;
    println!(
        "seed {seed}: {} acknowledged (and {} with acks=1, timestamp -1; {} acks=1 records \
         stored twice), {} sends failed, \
         {} stored, {} seen by the group, {} remote segments, {} librdkafka records sent again \
         after an epoch bump; faults: {}",
        r.acked,
        r.acked_by_leader,
        r.acks1_repeated,
        outcome.failed_sends,
        r.stored,
        r.consumed,
        r.remote_segments,
        r.resent_after_epoch_bump,
        outcome
            .counts
            .iter()
            .map(|(f, n)| format!("{f} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    #[cfg(feature = "kafka")]
    if let Some(t) = &r.txns {
        println!(
            "seed {seed}: transactions: {} committed, {} aborted, {} of unknown outcome; \
             {} records read with read_committed",
            t.committed, t.aborted, t.in_doubt, t.read
        );
    }
    if outcome.ok() {
        println!("seed {seed}: every check passed");
        return Ok(std::process::ExitCode::SUCCESS);
    }
    println!("seed {seed}: VIOLATIONS");
    for v in &r.violations {
        println!("  {v}");
    }
    let kept = tmp.keep();
    println!(
        "replay with: shale-chaos --seed {seed} --seconds {}; data kept in {}",
        cli.seconds,
        kept.display()
    );
    Ok(std::process::ExitCode::FAILURE)
}
