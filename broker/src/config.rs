//! Broker configuration: built-in defaults, overridden by a TOML file (`--config`),
//! overridden by `SHALE_*` environment variables and flags. Validated at start with
//! errors that name the key.
//!
//! ```toml
//! [broker]
//! broker_id = 0                       # Default: 0.
//! listen = "127.0.0.1:9093"           # Default: 127.0.0.1:9093.
//! metrics_listen = "127.0.0.1:9095"   # Prometheus /metrics. Default: off.
//! data_dir = "./shale-data"           # Default: ./shale-data.
//! metastore_url = "sqlite://./shale-data/metastore.db"    # Default: SQLite in data_dir.
//! object_store_url = "file://./shale-data/objects"        # Default: objects/ in data_dir.
//!
//! [log]
//! retention_check_interval_ms = 300000   # Default: 5 min.
//! flush_check_interval_ms = 100          # Default: 100 ms.
//! metadata_refresh_interval_ms = 2000    # Default: 2 s.
//! shutdown_timeout_ms = 10000            # Default: 10 s.
//!
//! [object_store]              # for s3:// URLs; unset keys come from AWS_* variables
//! endpoint = "http://127.0.0.1:9000"
//! region = "us-east-1"
//! path_style = true
//! allow_http = true
//!
//! [tiering]
//! upload_interval_ms = 1000               # Default: 1 s.
//! upload_concurrency = 2                  # Default: 2.
//!
//! [cluster]
//! advertised_address = "127.0.0.1:9093"  # Default: the listen address.
//! lease_ms = 6000                         # Default: 6 s.
//! heartbeat_interval_ms = 1000            # Default: 1 s.
//! controller_interval_ms = 500            # Default: 500 ms.
//! replica_lag_time_max_ms = 10000         # Default: 10 s.
//! replica_fetch_max_wait_ms = 500         # Default: 500 ms.
//! default_replication_factor = 1          # Default: 1.
//!
//! [groups]                    # consumer-group coordinator (Kafka's group.* settings)
//! min_session_timeout_ms = 6000           # Default: 6 s.
//! max_session_timeout_ms = 1800000        # Default: 30 min.
//! initial_rebalance_delay_ms = 3000       # Default: 3 s.
//!
//! [topic_defaults]            # broker-level defaults of topic configs, Kafka names
//! "retention.ms" = 86400000
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::topic_config::{ConfigError, TopicConfig};

/// Command line; every flag also reads a `SHALE_*` variable.
#[derive(Debug, Default, clap::Parser)]
#[command(
    name = "shale-broker",
    version,
    about = "Shale: a Kafka-style log broker with tiered storage"
)]
pub struct Args {
    /// TOML configuration file.
    #[arg(long, env = "SHALE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for partition logs (and the embedded metastore and object store).
    #[arg(long, env = "SHALE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// gRPC listen address.
    #[arg(long, env = "SHALE_LISTEN")]
    pub listen: Option<String>,
    /// postgres://… or sqlite://…
    #[arg(long, env = "SHALE_METASTORE_URL")]
    pub metastore_url: Option<String>,
    /// file://…, memory:// (s3:// with tiered storage).
    #[arg(long, env = "SHALE_OBJECT_STORE_URL")]
    pub object_store_url: Option<String>,
    /// This broker's id.
    #[arg(long, env = "SHALE_BROKER_ID")]
    pub broker_id: Option<i32>,
    /// Serve Prometheus metrics at http://ADDR/metrics (off when unset).
    #[arg(long, env = "SHALE_METRICS_LISTEN")]
    pub metrics_listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    broker: BrokerSection,
    #[serde(default)]
    log: LogSection,
    #[serde(default)]
    object_store: shale_tiering::S3Options,
    #[serde(default)]
    tiering: TieringSection,
    #[serde(default)]
    cluster: ClusterSection,
    #[serde(default)]
    groups: GroupsSection,
    #[serde(default)]
    topic_defaults: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BrokerSection {
    broker_id: Option<i32>,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    metastore_url: Option<String>,
    object_store_url: Option<String>,
    metrics_listen: Option<String>,
}

/// `[log]`: broker-wide log housekeeping.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LogSection {
    /// How often retention is checked. Default: 300000 ms.
    pub retention_check_interval_ms: u64,
    /// How often `flush.ms` deadlines are checked. Default: 100 ms.
    pub flush_check_interval_ms: u64,
    /// How often topic metadata is re-read from the metastore. Default: 2000 ms.
    pub metadata_refresh_interval_ms: u64,
    /// How long graceful shutdown waits for in-flight work. Default: 10000 ms.
    pub shutdown_timeout_ms: u64,
    /// Produce is refused with a retriable KAFKA_STORAGE_ERROR while the partition logs
    /// on this broker hold this many bytes or more (e.g. while the object store is down
    /// and nothing can be deleted). Default: 0 (no limit).
    pub local_disk_limit_bytes: u64,
    /// Segment files kept open at once, across all partitions; the least recently used
    /// is closed first (and reopened when needed). Default: 0 = half the open-files
    /// limit (`RLIMIT_NOFILE`, which the broker raises to its hard limit at start).
    pub max_open_segment_files: usize,
}

impl LogSection {
    /// `max_open_segment_files`, or half the process's open-files limit.
    pub fn open_files_limit(&self) -> usize {
        if self.max_open_segment_files > 0 {
            return self.max_open_segment_files;
        }
        let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(1 << 20);
        (limit / 2).clamp(32, 1 << 20) as usize
    }
}

impl Default for LogSection {
    fn default() -> Self {
        Self {
            retention_check_interval_ms: 300_000,
            flush_check_interval_ms: 100,
            metadata_refresh_interval_ms: 2_000,
            shutdown_timeout_ms: 10_000,
            local_disk_limit_bytes: 0,
            max_open_segment_files: 0,
        }
    }
}

/// `[cluster]`: membership, leases, controller and replication.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterSection {
    /// `host:port` other brokers and clients use to reach this broker. Default: the
    /// listen address.
    pub advertised_address: Option<String>,
    /// How long a broker's registration lasts without renewal. The controller moves
    /// leadership away from a broker whose lease expired; the broker itself stops
    /// acknowledging writes after 3/4 of it. Default: 6000 ms.
    pub lease_ms: u64,
    /// How often the lease is renewed. Default: 1000 ms.
    pub heartbeat_interval_ms: u64,
    /// How often the controller (and candidates for it) looks at leases and leaders.
    /// Default: 500 ms.
    pub controller_interval_ms: u64,
    /// A follower that has not caught up with the leader for this long leaves the ISR
    /// (Kafka's `replica.lag.time.max.ms`). Default: 10000 ms.
    pub replica_lag_time_max_ms: u64,
    /// How long a leader holds a replica fetch that finds no new data. Default: 500 ms.
    pub replica_fetch_max_wait_ms: u64,
    /// Replication factor of topics created without one. Default: 1.
    pub default_replication_factor: i32,
    /// Partition replicas one broker may hold; creating more is refused with
    /// INVALID_PARTITIONS. Default: 100000.
    pub max_partitions_per_broker: i32,
    /// The controller moves leaderships back to their preferred replicas (the first
    /// of each partition) when a broker leads fewer than 90 % of its own (Kafka's
    /// `auto.leader.rebalance.enable`). Default: true.
    pub auto_leader_rebalance_enable: bool,
    /// How often leader balance is checked (`leader.imbalance.check.interval.seconds`).
    /// Default: 300000 ms.
    pub leader_imbalance_check_interval_ms: u64,
}

impl Default for ClusterSection {
    fn default() -> Self {
        Self {
            advertised_address: None,
            lease_ms: 6_000,
            heartbeat_interval_ms: 1_000,
            controller_interval_ms: 500,
            replica_lag_time_max_ms: 10_000,
            replica_fetch_max_wait_ms: 500,
            default_replication_factor: 1,
            max_partitions_per_broker: 100_000,
            auto_leader_rebalance_enable: true,
            leader_imbalance_check_interval_ms: 300_000,
        }
    }
}

/// `[groups]`: the consumer-group coordinator.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct GroupsSection {
    /// Shortest session timeout a member may ask for (Kafka's
    /// `group.min.session.timeout.ms`). Default: 6000 ms.
    pub min_session_timeout_ms: u64,
    /// Longest session timeout (`group.max.session.timeout.ms`). Default: 1800000 ms.
    pub max_session_timeout_ms: u64,
    /// How long the first rebalance of an empty group waits for more members
    /// (`group.initial.rebalance.delay.ms`). Default: 3000 ms.
    pub initial_rebalance_delay_ms: u64,
}

impl Default for GroupsSection {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
        }
    }
}

/// `[tiering]`: copying sealed segments to the object store.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TieringSection {
    /// How often each tiered partition is checked for segments to copy. Default: 1000 ms.
    pub upload_interval_ms: u64,
    /// Partitions copying at once. Default: 2.
    pub upload_concurrency: usize,
    /// Files above this size go up in parts. Default: 33554432 (32 MiB).
    pub multipart_threshold_bytes: u64,
    /// Part size of multipart uploads. Default: 16777216 (16 MiB).
    pub multipart_part_bytes: usize,
    /// Size of a cached chunk of a remote segment. Default: 4194304 (4 MiB).
    pub chunk_bytes: u64,
    /// Memory tier of the read cache. Default: 268435456 (256 MiB).
    pub cache_memory_bytes: usize,
    /// Disk tier of the read cache. Default: 1073741824 (1 GiB).
    pub cache_disk_bytes: usize,
    /// Directory of the disk tier. Default: `{data_dir}/remote-cache`.
    pub cache_dir: Option<PathBuf>,
    /// Chunks fetched ahead of a remote read. Default: 2.
    pub read_ahead_chunks: u64,
    /// Ranged GETs in flight at once (remote reads only). Default: 16.
    pub max_concurrent_gets: usize,
}

impl Default for TieringSection {
    fn default() -> Self {
        Self {
            upload_interval_ms: 1_000,
            upload_concurrency: 2,
            multipart_threshold_bytes: 32 << 20,
            multipart_part_bytes: 16 << 20,
            chunk_bytes: 4 << 20,
            cache_memory_bytes: 256 << 20,
            cache_disk_bytes: 1 << 30,
            cache_dir: None,
            read_ahead_chunks: 2,
            max_concurrent_gets: 16,
        }
    }
}

/// The resolved, validated configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub broker_id: i32,
    pub listen: SocketAddr,
    /// Prometheus metrics endpoint. Default: off.
    pub metrics_listen: Option<SocketAddr>,
    pub data_dir: PathBuf,
    pub metastore_url: String,
    pub object_store_url: String,
    pub log: LogSection,
    /// `[object_store]`: settings of an `s3://` store.
    pub object_store: shale_tiering::S3Options,
    pub tiering: TieringSection,
    pub cluster: ClusterSection,
    pub groups: GroupsSection,
    /// Built-in topic defaults with `[topic_defaults]` applied.
    pub topic_defaults: TopicConfig,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigLoadError {
    #[error("cannot read config file {path}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path} is invalid: {source}")]
    Parse {
        path: PathBuf,
        source: Box<toml::de::Error>,
    },
    #[error("invalid value for '{key}': {reason}")]
    Invalid { key: &'static str, reason: String },
    #[error("[topic_defaults] {0}")]
    TopicDefault(#[from] ConfigError),
}

impl BrokerConfig {
    /// Whether the object store forgets everything at restart (`memory://`).
    pub fn volatile_object_store(&self) -> bool {
        self.object_store_url.starts_with("memory://")
    }

    /// Where other brokers and clients reach this one.
    pub fn advertised_address(&self) -> String {
        self.cluster
            .advertised_address
            .clone()
            .unwrap_or_else(|| self.listen.to_string())
    }

    pub fn load(args: Args) -> Result<Self, ConfigLoadError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let data_dir = args
            .data_dir
            .or(file.broker.data_dir)
            .unwrap_or_else(|| PathBuf::from("./shale-data"));
        let listen = args
            .listen
            .or(file.broker.listen)
            .unwrap_or_else(|| "127.0.0.1:9093".to_string());
        let listen = listen.parse().map_err(|e| ConfigLoadError::Invalid {
            key: "listen",
            reason: format!("'{listen}' is not a socket address ({e})"),
        })?;
        let metrics_listen = match args.metrics_listen.or(file.broker.metrics_listen) {
            Some(addr) => Some(addr.parse().map_err(|e| ConfigLoadError::Invalid {
                key: "metrics_listen",
                reason: format!("'{addr}' is not a socket address ({e})"),
            })?),
            None => None,
        };
        let metastore_url = args
            .metastore_url
            .or(file.broker.metastore_url)
            .unwrap_or_else(|| format!("sqlite://{}/metastore.db", data_dir.display()));
        let object_store_url = args
            .object_store_url
            .or(file.broker.object_store_url)
            .unwrap_or_else(|| format!("file://{}/objects", data_dir.display()));
        let mut topic_defaults = TopicConfig::default();
        if object_store_url.starts_with("memory://") {
            // A memory store keeps nothing across restarts: segments tiered to it (and
            // deleted locally) would be lost. Tiering is off unless asked for, and
            // refused if asked for (below).
            topic_defaults.remote_storage_enable = false;
        }
        for (key, value) in &file.topic_defaults {
            let value = match value {
                toml::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            topic_defaults.set(key, &value)?;
        }
        if object_store_url.starts_with("memory://") && topic_defaults.remote_storage_enable {
            return Err(ConfigLoadError::Invalid {
                key: "topic_defaults.remote.storage.enable",
                reason: "the memory:// object store keeps nothing across restarts, so tiering \
                         to it would lose data: use file:// or s3://, or leave tiering off"
                    .into(),
            });
        }
        let config = Self {
            broker_id: args.broker_id.or(file.broker.broker_id).unwrap_or(0),
            listen,
            metrics_listen,
            data_dir,
            metastore_url,
            object_store_url,
            log: file.log,
            object_store: file.object_store,
            tiering: file.tiering,
            cluster: file.cluster,
            groups: file.groups,
            topic_defaults,
        };
        config.validate()?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigLoadError> {
        let invalid = |key, reason: &str| {
            Err(ConfigLoadError::Invalid {
                key,
                reason: reason.to_string(),
            })
        };
        if self.broker_id < 0 {
            return invalid("broker_id", "must be >= 0");
        }
        if !(self.metastore_url.starts_with("sqlite:")
            || self.metastore_url.starts_with("postgres"))
        {
            return invalid("metastore_url", "must start with sqlite:// or postgres://");
        }
        if let Some(addr) = &self.cluster.advertised_address
            && addr
                .rsplit_once(':')
                .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        {
            return invalid("cluster.advertised_address", "must be host:port");
        }
        if self.cluster.heartbeat_interval_ms * 3 > self.cluster.lease_ms {
            return invalid(
                "cluster.heartbeat_interval_ms",
                "must be at most a third of cluster.lease_ms",
            );
        }
        if self.groups.min_session_timeout_ms > self.groups.max_session_timeout_ms {
            return invalid(
                "groups.min_session_timeout_ms",
                "must not exceed groups.max_session_timeout_ms",
            );
        }
        if self.cluster.default_replication_factor < 1 {
            return invalid("cluster.default_replication_factor", "must be >= 1");
        }
        if self.cluster.max_partitions_per_broker < 1 {
            return invalid("cluster.max_partitions_per_broker", "must be >= 1");
        }
        if self.tiering.chunk_bytes < 64 * 1024 {
            return invalid("tiering.chunk_bytes", "must be at least 65536");
        }
        // S3 wants parts of at least 5 MiB (but the last).
        if self.tiering.multipart_part_bytes < 5 << 20 {
            return invalid(
                "tiering.multipart_part_bytes",
                "must be at least 5242880 (5 MiB)",
            );
        }
        for (key, v) in [
            (
                "tiering.upload_concurrency",
                self.tiering.upload_concurrency as u64,
            ),
            (
                "tiering.max_concurrent_gets",
                self.tiering.max_concurrent_gets as u64,
            ),
            (
                "tiering.upload_interval_ms",
                self.tiering.upload_interval_ms,
            ),
            (
                "log.retention_check_interval_ms",
                self.log.retention_check_interval_ms,
            ),
            (
                "log.flush_check_interval_ms",
                self.log.flush_check_interval_ms,
            ),
            (
                "log.metadata_refresh_interval_ms",
                self.log.metadata_refresh_interval_ms,
            ),
            (
                "cluster.heartbeat_interval_ms",
                self.cluster.heartbeat_interval_ms,
            ),
            (
                "cluster.controller_interval_ms",
                self.cluster.controller_interval_ms,
            ),
            (
                "cluster.replica_lag_time_max_ms",
                self.cluster.replica_lag_time_max_ms,
            ),
        ] {
            if v == 0 {
                return invalid(key, "must be > 0");
            }
        }
        Ok(())
    }
}

fn read_file(path: &Path) -> Result<FileConfig, ConfigLoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigLoadError::Read {
        path: path.into(),
        source,
    })?;
    toml::from_str(&text).map_err(|source| ConfigLoadError::Parse {
        path: path.into(),
        source: Box::new(source),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_file(text: &str) -> Result<BrokerConfig, ConfigLoadError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("shale.toml");
        std::fs::write(&path, text).unwrap();
        BrokerConfig::load(Args {
            config: Some(path),
            ..Args::default()
        })
    }

    #[test]
    fn no_configuration_is_the_embedded_default() {
        let c = BrokerConfig::load(Args::default()).unwrap();
        assert_eq!(c.listen.to_string(), "127.0.0.1:9093");
        assert_eq!(c.data_dir, PathBuf::from("./shale-data"));
        assert_eq!(c.metastore_url, "sqlite://./shale-data/metastore.db");
        assert_eq!(c.object_store_url, "file://./shale-data/objects");
    }

    #[test]
    fn file_then_flags_override_defaults() {
        let c = with_file(
            "[broker]\nlisten = \"127.0.0.1:1\"\ndata_dir = \"/tmp/x\"\n[log]\nretention_check_interval_ms = 5\n\
             [topic_defaults]\n\"retention.ms\" = 1000\n\"message.timestamp.type\" = \"LogAppendTime\"\n",
        )
        .unwrap();
        assert_eq!(c.listen.port(), 1);
        assert_eq!(c.metastore_url, "sqlite:///tmp/x/metastore.db");
        assert_eq!(c.log.retention_check_interval_ms, 5);
        assert_eq!(c.topic_defaults.retention_ms, 1000);
        let args = Args {
            listen: Some("127.0.0.1:2".into()),
            ..Args::default()
        };
        assert_eq!(BrokerConfig::load(args).unwrap().listen.port(), 2);
    }

    #[test]
    fn errors_name_the_key() {
        for (text, key) in [
            ("[broker]\nlisten = \"nowhere\"\n", "listen"),
            ("[broker]\nbogus = 1\n", "bogus"),
            (
                "[log]\nflush_check_interval_ms = 0\n",
                "flush_check_interval_ms",
            ),
            (
                "[topic_defaults]\n\"retention.ms\" = \"soon\"\n",
                "retention.ms",
            ),
            ("[topic_defaults]\n\"no.such\" = 1\n", "no.such"),
        ] {
            let e = with_file(text).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
        }
    }
}
