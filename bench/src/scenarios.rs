//! The scenarios. Each starts what it needs, drives load through the real client
//! library, measures its physical baseline in the same run, and returns its cases.
mod compaction;
mod isolation;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "kafka")]
mod kafka_tls;
mod latency;
mod load;
mod lookup;
#[cfg(feature = "kafka")]
mod peer;
mod rebalance;
mod recovery;
mod replay;
mod table;
mod targets;
mod throughput;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

#[cfg(not(feature = "kafka"))]
use crate::report;

pub(crate) use compaction::compaction;
pub(crate) use isolation::isolation;
#[cfg(feature = "kafka")]
pub(crate) use kafka::{kafka, kafka_isolation, replay_worker};
#[cfg(feature = "kafka")]
pub(crate) use kafka_tls::kafka_tls as kafka_security;
pub(crate) use latency::e2e;
pub(crate) use lookup::lookup_by_key;
#[cfg(feature = "kafka")]
pub(crate) use peer::peer;
pub(crate) use rebalance::rebalance;
pub(crate) use recovery::recovery;
pub(crate) use replay::replay;
pub(crate) use table::table;
pub(crate) use throughput::{consume, partitions, produce};

/// What every scenario gets.
pub(crate) struct Ctx {
    pub quick: bool,
    /// Where brokers keep their data (the disk under test).
    pub base: PathBuf,
    /// PostgreSQL server for multi-broker cases (`postgres://user@host:port`).
    pub postgres: String,
    /// Use this broker instead of starting one (single-broker scenarios only).
    pub bootstrap: Option<String>,
    /// The `kafka` scenario's broker (any Kafka-protocol broker) instead of a Shale
    /// broker started for it.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub kafka_bootstrap: Option<String>,
    /// The `peer` scenario's other brokers: name, bootstrap address.
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    pub peers: Vec<(String, String)>,
    /// Appended to every topic name when the broker is not this run's own
    /// (`--bootstrap`, `--kafka-bootstrap`), so runs against one broker never meet an
    /// earlier run's topics; empty otherwise.
    pub run_tag: String,
}

/// Says on stderr which scenario and case runs now (a full run takes a while).
pub(crate) fn running(scenario: &str, case: impl std::fmt::Display) {
    eprintln!("shale-bench: {scenario}: {case}");
}

/// Without the `kafka` feature there is no librdkafka to drive the Kafka scenarios.
#[cfg(not(feature = "kafka"))]
pub(crate) async fn kafka_isolation(ctx: &Ctx) -> anyhow::Result<Vec<report::CaseResult>> {
    kafka(ctx).await
}

#[cfg(not(feature = "kafka"))]
pub(crate) async fn peer(ctx: &Ctx) -> anyhow::Result<Vec<report::CaseResult>> {
    kafka(ctx).await
}

#[cfg(not(feature = "kafka"))]
pub(crate) async fn kafka_security(ctx: &Ctx) -> anyhow::Result<Vec<report::CaseResult>> {
    kafka(ctx).await
}

/// Without the `kafka` feature there is no librdkafka to drive the Kafka scenario.
#[cfg(not(feature = "kafka"))]
pub(crate) async fn kafka(_: &Ctx) -> anyhow::Result<Vec<report::CaseResult>> {
    anyhow::bail!(
        "shale-bench was built without the `kafka` feature: build it with \
         `cargo build --release -p shale-bench --features kafka` (builds librdkafka \
         from source: needs cmake and a C++ compiler, see bench/kafka.sh)"
    )
}

impl Ctx {
    fn size(&self, full_mib: u64, quick_mib: u64) -> u64 {
        (if self.quick { quick_mib } else { full_mib }) << 20
    }

    /// The name this run gives topic `base` (see `run_tag`).
    fn topic(&self, base: &str) -> String {
        format!("{base}{}", self.run_tag)
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

fn now_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
