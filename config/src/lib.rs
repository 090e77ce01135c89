//! Shale's configuration. The broker's: built-in defaults, overridden by a TOML file,
//! overridden by the command line's values ([`Overrides`]: flags and `SHALE_*`
//! variables), validated at start with errors that name the key. And each topic's
//! (`topic`): Kafka's topic configs with their defaults and validation.
//!
//! Every key, its default and an example are in `docs/configuration.md`; a test
//! (`documented_tests`) keeps that page and the `Default` impls here in step.

#[cfg(test)]
mod documented_tests;
pub mod iceberg;
mod listeners;
mod sections;
#[cfg(test)]
mod tests;
pub mod topic;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

pub use sections::*;
pub use shale_coordinator::group::GroupsSection;
pub use shale_coordinator::txn::TransactionsSection;

use listeners::{resolve_inter_broker, resolve_listeners};

use crate::topic::{ConfigError, TopicConfig};
use shale_security::ListenerSecurity;
use shale_security::acl::AuthorizationSection;
use shale_security::listener::InterBrokerClient;

/// The listener `[broker] listen`, `--listen` and `[cluster] advertised_address` set.
pub const GRPC_LISTENER: &str = "grpc";
/// The listener `--kafka-listen` sets.
pub const KAFKA_LISTENER: &str = "kafka";
/// The listener `--http-listen` (and `metrics_listen`) sets.
pub const HTTP_LISTENER: &str = "http";

/// What the command line sets (each from a flag or a `SHALE_*` variable); `None`
/// leaves the file's value, or the default.
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub config: Option<PathBuf>,
    pub data_dir: Option<PathBuf>,
    /// The `grpc` listener's address.
    pub listen: Option<String>,
    /// The `kafka` listener's address.
    pub kafka_listen: Option<String>,
    /// What the `grpc` listener advertises (`[cluster] advertised_address`).
    pub advertised: Option<String>,
    /// What the `kafka` listener advertises.
    pub kafka_advertised: Option<String>,
    pub metastore_url: Option<String>,
    pub object_store_url: Option<String>,
    pub broker_id: Option<i32>,
    /// The `http` listener's address (the console, the API, `/metrics`).
    pub http_listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default)]
    broker: BrokerSection,
    #[serde(default)]
    listeners: BTreeMap<String, ListenerSection>,
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
    transactions: TransactionsSection,
    #[serde(default)]
    quotas: QuotasSection,
    #[serde(default)]
    authorization: AuthorizationSection,
    #[serde(default)]
    topic_defaults: BTreeMap<String, toml::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct BrokerSection {
    broker_id: Option<i32>,
    rack: Option<String>,
    listen: Option<String>,
    data_dir: Option<PathBuf>,
    metastore_url: Option<String>,
    /// A file holding the metastore URL (with its password), instead of the URL here.
    metastore_url_file: Option<PathBuf>,
    object_store_url: Option<String>,
    metrics_listen: Option<String>,
}

/// `[listeners.<name>]`.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListenerSection {
    /// `grpc`, `kafka` or `http`; defaults to the listener's name when that is one of
    /// them.
    protocol: Option<String>,
    listen: Option<String>,
    advertised: Option<String>,
    max_connections: Option<usize>,
    max_request_bytes: Option<usize>,
    max_inflight_requests: Option<usize>,
    sendfile: Option<bool>,
    security_protocol: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    tls_client_ca: Option<PathBuf>,
    sasl_mechanisms: Option<Vec<String>>,
    connections_max_reauth_ms: Option<u64>,
}

/// The wire protocol a listener speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// Shale's gRPC API (clients, the CLI, replication between brokers).
    Grpc,
    /// The Kafka wire protocol.
    Kafka,
    /// The console, the JSON API and Prometheus metrics.
    Http,
}

impl Protocol {
    fn parse(s: &str) -> Option<Self> {
        match s {
            "grpc" => Some(Self::Grpc),
            "kafka" => Some(Self::Kafka),
            "http" => Some(Self::Http),
            _ => None,
        }
    }
}

/// One listener: where it binds and what clients are told to connect to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerConfig {
    pub name: String,
    pub protocol: Protocol,
    pub listen: SocketAddr,
    /// `host:port` clients of this listener reach the broker at.
    pub advertised: String,
    /// Open connections at once (Kafka listeners). Default: 10000.
    pub max_connections: usize,
    /// Largest request (Kafka's `socket.request.max.bytes`). Default: 104857600.
    pub max_request_bytes: usize,
    /// Requests handled at once per connection (Kafka listeners); later ones wait.
    /// Default: 16.
    pub max_inflight_requests: usize,
    /// Records of the newest local segments go to the socket with `sendfile(2)`
    /// (plaintext Kafka listeners; TLS ones always copy). Default: true.
    pub sendfile: bool,
    /// TLS, SASL and sessions (see `security::listener`). Default: PLAINTEXT.
    pub security: ListenerSecurity,
}

/// The resolved, validated configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub broker_id: i32,
    /// `[broker] rack` (Kafka's `broker.rack`): the rack or zone the broker runs in.
    /// Replicas of a partition are spread over racks, and a consumer that names its
    /// rack (`client.rack`) reads from a replica there.
    pub rack: Option<String>,
    /// Every listener, by name.
    pub listeners: Vec<ListenerConfig>,
    pub data_dir: PathBuf,
    pub metastore_url: String,
    pub object_store_url: String,
    pub log: LogSection,
    /// `[object_store]`: settings of an `s3://` store.
    pub object_store: shale_tiering::S3Options,
    pub tiering: TieringSection,
    pub cluster: ClusterSection,
    pub groups: GroupsSection,
    pub transactions: TransactionsSection,
    pub quotas: QuotasSection,
    /// `[authorization]`: ACL checks (see `security::acl`).
    pub authorization: AuthorizationSection,
    /// Built-in topic defaults with `[topic_defaults]` applied.
    pub topic_defaults: TopicConfig,
    /// How this broker connects to leaders, from `cluster.inter_broker_*` and the
    /// inter-broker listener's security.
    pub inter_broker: InterBrokerClient,
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
    Invalid { key: String, reason: String },
    #[error("[topic_defaults] {0}")]
    TopicDefault(#[from] ConfigError),
}

fn invalid(key: impl Into<String>, reason: impl Into<String>) -> ConfigLoadError {
    ConfigLoadError::Invalid {
        key: key.into(),
        reason: reason.into(),
    }
}

fn socket_addr(key: &str, addr: &str) -> Result<SocketAddr, ConfigLoadError> {
    addr.parse()
        .map_err(|e| invalid(key, format!("'{addr}' is not a socket address ({e})")))
}

impl BrokerConfig {
    /// Whether the object store forgets everything at restart (`memory://`).
    pub fn volatile_object_store(&self) -> bool {
        self.object_store_url.starts_with("memory://")
    }

    pub fn listener(&self, name: &str) -> Option<&ListenerConfig> {
        self.listeners.iter().find(|l| l.name == name)
    }

    /// Where other brokers reach this one (the inter-broker listener's advertised
    /// address).
    pub fn advertised_address(&self) -> String {
        self.listener(&self.cluster.inter_broker_listener)
            .map(|l| l.advertised.clone())
            .unwrap_or_default()
    }

    /// Every listener's advertised address, by name (what the broker's lease
    /// carries).
    pub fn endpoints(&self) -> Vec<(String, String)> {
        self.listeners
            .iter()
            .map(|l| (l.name.clone(), l.advertised.clone()))
            .collect()
    }

    pub fn load(args: Overrides) -> Result<Self, ConfigLoadError> {
        let file = match &args.config {
            Some(path) => read_file(path)?,
            None => FileConfig::default(),
        };
        let data_dir = args
            .data_dir
            .or(file.broker.data_dir)
            .unwrap_or_else(|| PathBuf::from("./shale-data"));
        let listeners = resolve_listeners(
            file.listeners,
            args.listen.or(file.broker.listen),
            (args.kafka_listen, args.kafka_advertised),
            args.http_listen.or(file.broker.metrics_listen),
            args.advertised.or(file.cluster.advertised_address.clone()),
        )?;
        let from_file = |key: &str, path: &Path| {
            shale_security::secrets::read_secret(path)
                .map_err(|e| invalid(key, format!("cannot read {}: {e}", path.display())))
        };
        let metastore_url = match (
            args.metastore_url.or(file.broker.metastore_url),
            &file.broker.metastore_url_file,
        ) {
            (Some(url), _) => url,
            (None, Some(path)) => from_file("broker.metastore_url_file", path)?,
            (None, None) => format!("sqlite://{}/metastore.db", data_dir.display()),
        };
        let mut object_store = file.object_store;
        if let Some(path) = object_store.secret_access_key_file.take() {
            if object_store.secret_access_key.is_some() {
                return Err(invalid(
                    "object_store.secret_access_key_file",
                    "give the secret or its file, not both",
                ));
            }
            object_store.secret_access_key =
                Some(from_file("object_store.secret_access_key_file", &path)?);
        }
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
            return Err(invalid(
                "topic_defaults.remote.storage.enable",
                "the memory:// object store keeps nothing across restarts, so tiering \
                 to it would lose data: use file:// or s3://, or leave tiering off",
            ));
        }
        let mut config = Self {
            broker_id: args.broker_id.or(file.broker.broker_id).unwrap_or(0),
            rack: file.broker.rack,
            listeners,
            data_dir,
            metastore_url,
            object_store_url,
            log: file.log,
            object_store,
            tiering: file.tiering,
            cluster: file.cluster,
            groups: file.groups,
            transactions: file.transactions,
            quotas: file.quotas,
            authorization: file.authorization,
            topic_defaults,
            inter_broker: InterBrokerClient::default(),
        };
        config.validate()?;
        let password = std::env::var("SHALE_INTER_BROKER_PASSWORD").ok();
        config.inter_broker = resolve_inter_broker(&config, password, from_file)?;
        Ok(config)
    }

    fn validate(&self) -> Result<(), ConfigLoadError> {
        let fail = |key: &str, reason: &str| Err(invalid(key, reason));
        if self.broker_id < 0 {
            return fail("broker_id", "must be >= 0");
        }
        if let Some(rack) = &self.rack
            && (rack.is_empty() || rack.len() > 255 || rack.chars().any(char::is_control))
        {
            return fail(
                "broker.rack",
                "must be 1 to 255 characters, without control characters",
            );
        }
        if !(self.metastore_url.starts_with("sqlite:")
            || self.metastore_url.starts_with("postgres"))
        {
            return fail("metastore_url", "must start with sqlite:// or postgres://");
        }
        let inter = &self.cluster.inter_broker_listener;
        if self
            .listener(inter)
            .is_none_or(|l| l.protocol != Protocol::Grpc)
        {
            return fail(
                "cluster.inter_broker_listener",
                &format!("'{inter}' must name a grpc listener"),
            );
        }
        if self.cluster.heartbeat_interval_ms * 3 > self.cluster.lease_ms {
            return fail(
                "cluster.heartbeat_interval_ms",
                "must be at most a third of cluster.lease_ms",
            );
        }
        if self.groups.min_session_timeout_ms > self.groups.max_session_timeout_ms {
            return fail(
                "groups.min_session_timeout_ms",
                "must not exceed groups.max_session_timeout_ms",
            );
        }
        let g = &self.groups;
        if g.consumer_heartbeat_interval_ms == 0
            || g.consumer_heartbeat_interval_ms >= g.consumer_session_timeout_ms
        {
            return fail(
                "groups.consumer_heartbeat_interval_ms",
                "must be above 0 and below groups.consumer_session_timeout_ms",
            );
        }
        if self.transactions.transactional_id_expiration_ms < 1 {
            return fail(
                "transactions.transactional_id_expiration_ms",
                "must be >= 1",
            );
        }
        if self.cluster.default_replication_factor < 1 {
            return fail("cluster.default_replication_factor", "must be >= 1");
        }
        if self.cluster.max_partitions_per_broker < 1 {
            return fail("cluster.max_partitions_per_broker", "must be >= 1");
        }
        if self.tiering.chunk_bytes < 64 * 1024 {
            return fail("tiering.chunk_bytes", "must be at least 65536");
        }
        // S3 wants parts of at least 5 MiB (but the last).
        if self.tiering.multipart_part_bytes < 5 << 20 {
            return fail(
                "tiering.multipart_part_bytes",
                "must be at least 5242880 (5 MiB)",
            );
        }
        if !(0..=19).contains(&self.tiering.remote_io_nice) {
            return fail("tiering.remote_io_nice", "must be between 0 and 19");
        }
        let t = &self.tiering;
        let (log, cluster) = (&self.log, &self.cluster);
        for (key, v) in [
            ("tiering.upload_concurrency", t.upload_concurrency as u64),
            ("tiering.max_concurrent_gets", t.max_concurrent_gets as u64),
            ("tiering.remote_io_threads", t.remote_io_threads as u64),
            ("tiering.upload_interval_ms", t.upload_interval_ms),
            ("tiering.max_local_only_ms", t.max_local_only_ms),
            (
                "tiering.remote_compaction_interval_ms",
                t.remote_compaction_interval_ms,
            ),
            (
                "tiering.remote_compaction_concurrency",
                t.remote_compaction_concurrency as u64,
            ),
            (
                "log.retention_check_interval_ms",
                log.retention_check_interval_ms,
            ),
            ("log.flush_check_interval_ms", log.flush_check_interval_ms),
            ("log.cleaner_backoff_ms", log.cleaner_backoff_ms),
            (
                "log.cleaner_dedupe_buffer_size",
                log.cleaner_dedupe_buffer_size / shale_log::MAP_ENTRY_BYTES,
            ),
            (
                "log.metadata_refresh_interval_ms",
                log.metadata_refresh_interval_ms,
            ),
            (
                "cluster.heartbeat_interval_ms",
                cluster.heartbeat_interval_ms,
            ),
            (
                "cluster.controller_interval_ms",
                cluster.controller_interval_ms,
            ),
            (
                "cluster.replica_lag_time_max_ms",
                cluster.replica_lag_time_max_ms,
            ),
        ] {
            if v == 0 {
                return fail(key, "must be > 0");
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
