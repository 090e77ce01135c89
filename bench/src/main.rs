//! `shale-bench`: load generator against a running broker (`--bootstrap`).
//! For now two scenarios, `produce` and `consume`, each printing one JSON result line.
//! The full scenario suite with same-run physical baselines is tracked separately.

use std::time::Instant;

use anyhow::Context;
use bytes::Bytes;
use clap::{Parser, Subcommand};
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};

#[derive(Parser)]
#[command(name = "shale-bench", about = "Shale load generator")]
struct Cli {
    #[arg(long, env = "SHALE_BOOTSTRAP", default_value = "127.0.0.1:9093")]
    bootstrap: String,
    #[command(subcommand)]
    scenario: Scenario,
}

#[derive(Subcommand)]
enum Scenario {
    /// Produce `records` records of `record_size` bytes to a new topic.
    Produce {
        #[arg(long, default_value = "bench")]
        topic: String,
        #[arg(long, default_value_t = 1_000_000)]
        records: u64,
        #[arg(long, default_value_t = 1024)]
        record_size: usize,
        #[arg(long, default_value_t = 8)]
        partitions: i32,
        #[arg(long, default_value = "1")]
        acks: Acks,
        /// Replication factor of a new topic (-1: the broker's default).
        #[arg(long, default_value_t = -1)]
        replication_factor: i32,
        /// Records handed to the producer per call.
        #[arg(long, default_value_t = 20_000)]
        chunk: usize,
    },
    /// Consume a topic from the beginning to its current end.
    Consume {
        #[arg(long, default_value = "bench")]
        topic: String,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let client = Client::connect(&cli.bootstrap).await?;
    match cli.scenario {
        Scenario::Produce {
            topic,
            records,
            record_size,
            partitions,
            acks,
            replication_factor,
            chunk,
        } => {
            if client.partition_count(&topic).await.is_err() {
                client
                    .create_topic(&topic, partitions, replication_factor, Default::default())
                    .await?;
            }
            let mut producer = Producer::new(client, &topic, acks).await?;
            let value = Bytes::from(vec![b'x'; record_size]);
            let start = Instant::now();
            let mut sent = 0u64;
            while sent < records {
                let n = chunk.min((records - sent) as usize);
                let batch = (0..n)
                    .map(|_| ProducerRecord {
                        value: Some(value.clone()),
                        ..Default::default()
                    })
                    .collect();
                producer.send_all(batch).await.context("produce failed")?;
                sent += n as u64;
            }
            report(
                "produce",
                sent,
                sent * record_size as u64,
                start.elapsed().as_secs_f64(),
            );
        }
        Scenario::Consume { topic } => {
            let mut ends = Vec::new();
            for p in 0..client.partition_count(&topic).await? {
                ends.push(client.list_offset(&topic, p, -1).await?.unwrap_or(0));
            }
            let total: i64 = ends.iter().sum();
            let mut consumer = Consumer::new(client, &topic, None, StartFrom::Earliest).await?;
            let start = Instant::now();
            let (mut n, mut bytes) = (0i64, 0u64);
            while n < total {
                let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
                n += records.len() as i64;
                bytes += records
                    .iter()
                    .map(|r| r.value.as_ref().map_or(0, Bytes::len) as u64)
                    .sum::<u64>();
            }
            report("consume", n as u64, bytes, start.elapsed().as_secs_f64());
        }
    }
    Ok(())
}

fn report(scenario: &str, records: u64, bytes: u64, secs: f64) {
    println!(
        "{{\"scenario\":\"{scenario}\",\"records\":{records},\"bytes\":{bytes},\"seconds\":{secs:.3},\
         \"records_per_sec\":{:.0},\"mib_per_sec\":{:.1}}}",
        records as f64 / secs,
        bytes as f64 / secs / (1024.0 * 1024.0)
    );
}
