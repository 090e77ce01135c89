//! Topic-level configuration under Kafka's names. A topic's effective config is the
//! built-in default, overridden by the broker's `[topic_defaults]`, overridden by the
//! topic's own overrides (stored in the metastore as strings). Every value is parsed and
//! range-checked here, in one place, so an unknown key or bad value is refused with an
//! error naming the key before anything is stored.

use std::collections::BTreeMap;

use shale_log::LogConfig;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid value '{value}' for config '{key}': {reason}")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub reason: String,
}

/// Where a topic's config value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    /// The topic's own override.
    Topic,
    /// The broker's `[topic_defaults]`.
    Broker,
    /// Built in.
    Default,
}

impl ConfigSource {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Topic => "topic",
            Self::Broker => "broker",
            Self::Default => "default",
        }
    }
}

/// `compression.type`: keep each batch's codec as the producer sent it, or store
/// every batch in one codec (recompressing those that differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompressionType {
    Producer,
    Codec(shale_records::batch::Compression),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// `cleanup.policy`: what removes old records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CleanupPolicy {
    /// Retention by time and size.
    Delete,
    /// Compaction: the latest record of each key stays.
    Compact,
    /// Both: compaction, and retention of what it keeps.
    CompactDelete,
}

impl CleanupPolicy {
    pub fn compacts(self) -> bool {
        matches!(self, Self::Compact | Self::CompactDelete)
    }

    pub fn deletes(self) -> bool {
        matches!(self, Self::Delete | Self::CompactDelete)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Delete => "delete",
            Self::Compact => "compact",
            Self::CompactDelete => "compact,delete",
        }
    }
}

/// `min.cleanable.dirty.ratio`, a fraction in [0, 1] (compared by its bits, so the
/// config stays `Eq`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio(pub f64);

impl Eq for Ratio {}

/// Effective configuration of one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfig {
    pub cleanup_policy: CleanupPolicy,
    /// How long a tombstone stays once a cleaning has kept it.
    pub delete_retention_ms: i64,
    /// A partition is cleaned once dirty bytes make up this share of its log.
    pub min_cleanable_dirty_ratio: Ratio,
    /// Records newer than this are not compacted.
    pub min_compaction_lag_ms: i64,
    /// A record is compacted at the latest this long after it was written, whatever
    /// the dirty ratio.
    pub max_compaction_lag_ms: i64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    /// -2: same as `retention.ms`. Applies once segments are tiered. Default: one day
    /// (at most `retention.ms`), so that a tiered topic's history lives in the bucket.
    pub local_retention_ms: i64,
    /// -2: same as `retention.bytes`. Applies once segments are tiered.
    pub local_retention_bytes: i64,
    pub segment_bytes: i64,
    pub segment_ms: i64,
    pub index_interval_bytes: i64,
    pub max_message_bytes: i64,
    pub min_insync_replicas: i64,
    pub message_timestamp_type: TimestampType,
    pub remote_storage_enable: bool,
    pub unclean_leader_election_enable: bool,
    pub flush_messages: i64,
    pub flush_ms: i64,
    pub compression_type: CompressionType,
    /// Accepted for Kafka tools and ignored: batches are always RecordBatch v2.
    pub message_format_version: String,
    /// A read-replica topic's source: the bucket (`s3://bucket/prefix`, `file://…`)
    /// of the cluster that writes the topic, whose segments it serves read-only.
    /// Empty: a topic of this cluster. Set at creation only.
    pub read_replica_of: String,
    /// Produce is refused (`shale topic unmount` sets it while the topic's last
    /// records go to the bucket); tiered partitions seal and copy their active
    /// segments at once.
    pub read_only: bool,
    /// `iceberg.*`: the topic's Iceberg table.
    pub table: crate::iceberg::TableConfig,
}

impl Default for TopicConfig {
    fn default() -> Self {
        Self {
            cleanup_policy: CleanupPolicy::Delete,
            delete_retention_ms: 86_400_000,
            min_cleanable_dirty_ratio: Ratio(0.5),
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
            retention_ms: 604_800_000,
            retention_bytes: -1,
            local_retention_ms: 86_400_000,
            local_retention_bytes: -2,
            segment_bytes: 1_073_741_824,
            segment_ms: 604_800_000,
            index_interval_bytes: 4096,
            max_message_bytes: 1_048_588,
            min_insync_replicas: 1,
            message_timestamp_type: TimestampType::CreateTime,
            // An object store is always configured (file:// in the embedded default).
            remote_storage_enable: true,
            unclean_leader_election_enable: false,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            compression_type: CompressionType::Producer,
            message_format_version: "3.0-IV1".to_string(),
            read_replica_of: String::new(),
            read_only: false,
            table: Default::default(),
        }
    }
}

/// Every supported key, for listings.
pub const KEYS: &[&str] = &[
    "cleanup.policy",
    "compression.type",
    "delete.retention.ms",
    "flush.messages",
    "flush.ms",
    crate::iceberg::KEYS[0],
    crate::iceberg::KEYS[1],
    crate::iceberg::KEYS[2],
    crate::iceberg::KEYS[3],
    crate::iceberg::KEYS[4],
    "index.interval.bytes",
    "local.retention.bytes",
    "local.retention.ms",
    "max.compaction.lag.ms",
    "max.message.bytes",
    "message.format.version",
    "message.timestamp.type",
    "min.cleanable.dirty.ratio",
    "min.compaction.lag.ms",
    "min.insync.replicas",
    "read.only",
    "read.replica.of",
    "remote.storage.enable",
    "retention.bytes",
    "retention.ms",
    "segment.bytes",
    "segment.ms",
    "unclean.leader.election.enable",
];

fn unknown_key(key: &str, value: &str) -> ConfigError {
    ConfigError {
        key: key.into(),
        value: value.into(),
        reason: format!("unknown config key; supported keys: {}", KEYS.join(", ")),
    }
}

pub(crate) fn long(key: &str, value: &str, min: i64, max: i64) -> Result<i64, ConfigError> {
    let err = |reason: String| ConfigError {
        key: key.to_string(),
        value: value.to_string(),
        reason,
    };
    let v: i64 = value
        .trim()
        .parse()
        .map_err(|_| err("not an integer".to_string()))?;
    if v < min || v > max {
        return Err(err(format!("must be between {min} and {max}")));
    }
    Ok(v)
}

fn boolean(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError {
            key: key.into(),
            value: value.into(),
            reason: "must be true or false".into(),
        }),
    }
}

impl TopicConfig {
    /// Applies one key's value, checking it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        const MAX: i64 = i64::MAX;
        match key {
            "cleanup.policy" => {
                let mut parts: Vec<&str> = value
                    .trim()
                    .trim_matches(['[', ']'])
                    .split(',')
                    .map(str::trim)
                    .collect();
                parts.sort_unstable();
                parts.dedup();
                self.cleanup_policy = match parts[..] {
                    ["delete"] => CleanupPolicy::Delete,
                    ["compact"] => CleanupPolicy::Compact,
                    ["compact", "delete"] => CleanupPolicy::CompactDelete,
                    _ => {
                        return Err(ConfigError {
                            key: key.into(),
                            value: value.into(),
                            reason: "must be delete, compact or compact,delete".into(),
                        });
                    }
                };
            }
            "delete.retention.ms" => self.delete_retention_ms = long(key, value, 0, MAX)?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = long(key, value, 0, MAX)?,
            "max.compaction.lag.ms" => self.max_compaction_lag_ms = long(key, value, 1, MAX)?,
            "min.cleanable.dirty.ratio" => {
                let ratio = value
                    .trim()
                    .parse::<f64>()
                    .ok()
                    .filter(|r| (0.0..=1.0).contains(r));
                self.min_cleanable_dirty_ratio = Ratio(ratio.ok_or_else(|| ConfigError {
                    key: key.into(),
                    value: value.into(),
                    reason: "must be a number between 0 and 1".into(),
                })?);
            }
            "retention.ms" => self.retention_ms = long(key, value, -1, MAX)?,
            "retention.bytes" => self.retention_bytes = long(key, value, -1, MAX)?,
            "local.retention.ms" => self.local_retention_ms = long(key, value, -2, MAX)?,
            "local.retention.bytes" => self.local_retention_bytes = long(key, value, -2, MAX)?,
            // Positions in the offset index are u32, and a segment must hold a batch header.
            "segment.bytes" => self.segment_bytes = long(key, value, 1024, i64::from(i32::MAX))?,
            "segment.ms" => self.segment_ms = long(key, value, 1, MAX)?,
            "index.interval.bytes" => {
                self.index_interval_bytes = long(key, value, 0, i64::from(i32::MAX))?
            }
            "max.message.bytes" => {
                self.max_message_bytes = long(key, value, 0, i64::from(i32::MAX))?
            }
            "min.insync.replicas" => {
                self.min_insync_replicas = long(key, value, 1, i64::from(i32::MAX))?
            }
            "message.timestamp.type" => {
                self.message_timestamp_type = match value.trim() {
                    "CreateTime" => TimestampType::CreateTime,
                    "LogAppendTime" => TimestampType::LogAppendTime,
                    _ => {
                        return Err(ConfigError {
                            key: key.into(),
                            value: value.into(),
                            reason: "must be CreateTime or LogAppendTime".into(),
                        });
                    }
                }
            }
            "remote.storage.enable" => self.remote_storage_enable = boolean(key, value)?,
            "read.only" => self.read_only = boolean(key, value)?,
            "read.replica.of" => {
                let url = value.trim();
                if !(url.is_empty() || url.starts_with("s3://") || url.starts_with("file://")) {
                    return Err(ConfigError {
                        key: key.into(),
                        value: value.into(),
                        reason:
                            "must be the source cluster's bucket, s3://bucket/prefix or file://path"
                                .into(),
                    });
                }
                self.read_replica_of = url.to_string();
            }
            "unclean.leader.election.enable" => {
                self.unclean_leader_election_enable = boolean(key, value)?
            }
            "flush.messages" => self.flush_messages = long(key, value, 1, MAX)?,
            "flush.ms" => self.flush_ms = long(key, value, 0, MAX)?,
            "compression.type" => {
                use shale_records::batch::Compression;
                self.compression_type = match value.trim() {
                    "producer" => CompressionType::Producer,
                    "uncompressed" => CompressionType::Codec(Compression::None),
                    "gzip" => CompressionType::Codec(Compression::Gzip),
                    "snappy" => CompressionType::Codec(Compression::Snappy),
                    "lz4" => CompressionType::Codec(Compression::Lz4),
                    "zstd" => CompressionType::Codec(Compression::Zstd),
                    _ => {
                        return Err(ConfigError {
                            key: key.into(),
                            value: value.into(),
                            reason: "must be producer, uncompressed, gzip, snappy, lz4 or zstd"
                                .into(),
                        });
                    }
                }
            }
            "message.format.version" => {
                // Kafka's versions: 0.8.0 … 3.0-IV1 and later; any is accepted.
                let v = value.trim();
                let valid = v.split(['.', '-']).next().is_some_and(|major| {
                    !major.is_empty() && major.chars().all(|c| c.is_ascii_digit())
                }) && v.contains('.');
                if !valid {
                    return Err(ConfigError {
                        key: key.into(),
                        value: value.into(),
                        reason: "must be a Kafka version such as 3.0-IV1 (it is ignored: \
                                 batches are always RecordBatch v2)"
                            .into(),
                    });
                }
                self.message_format_version = v.to_string();
            }
            _ => {
                if !self.table.set(key, value)? {
                    return Err(unknown_key(key, value));
                }
            }
        }
        Ok(())
    }

    /// Fails for a key that is not a supported topic config.
    pub fn check_key(key: &str) -> Result<(), ConfigError> {
        if KEYS.contains(&key) {
            Ok(())
        } else {
            Err(unknown_key(key, ""))
        }
    }

    /// `base` with `overrides` applied, each checked.
    pub fn with_overrides(
        &self,
        overrides: &BTreeMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = self.clone();
        for (k, v) in overrides {
            cfg.set(k, v)?;
        }
        Ok(cfg)
    }

    /// The value of a key as a string (for describe).
    pub fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            "cleanup.policy" => self.cleanup_policy.as_str().into(),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "max.compaction.lag.ms" => self.max_compaction_lag_ms.to_string(),
            "min.cleanable.dirty.ratio" => self.min_cleanable_dirty_ratio.0.to_string(),
            "retention.ms" => self.retention_ms.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "local.retention.ms" => self.local_retention_ms.to_string(),
            "local.retention.bytes" => self.local_retention_bytes.to_string(),
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "index.interval.bytes" => self.index_interval_bytes.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "min.insync.replicas" => self.min_insync_replicas.to_string(),
            "message.timestamp.type" => match self.message_timestamp_type {
                TimestampType::CreateTime => "CreateTime".into(),
                TimestampType::LogAppendTime => "LogAppendTime".into(),
            },
            "remote.storage.enable" => self.remote_storage_enable.to_string(),
            "read.replica.of" => self.read_replica_of.clone(),
            "read.only" => self.read_only.to_string(),
            "unclean.leader.election.enable" => self.unclean_leader_election_enable.to_string(),
            "flush.messages" => self.flush_messages.to_string(),
            "flush.ms" => self.flush_ms.to_string(),
            "compression.type" => match self.compression_type {
                CompressionType::Producer => "producer".into(),
                CompressionType::Codec(c) => match c {
                    shale_records::batch::Compression::None => "uncompressed".into(),
                    other => format!("{other:?}").to_lowercase(),
                },
            },
            "message.format.version" => self.message_format_version.clone(),
            _ => return self.table.get(key),
        })
    }

    /// Every key with its effective value and where the value comes from: the topic's
    /// own overrides, the broker's `[topic_defaults]` (`broker`, differing from the
    /// built-in default) or the built-in default.
    pub fn entries(
        &self,
        overrides: &BTreeMap<String, String>,
        broker: &TopicConfig,
    ) -> Vec<(String, String, ConfigSource)> {
        let builtin = TopicConfig::default();
        KEYS.iter()
            .filter_map(|k| {
                let value = self.get(k)?;
                let source = if overrides.contains_key(*k) {
                    ConfigSource::Topic
                } else if broker.get(k) != builtin.get(k) {
                    ConfigSource::Broker
                } else {
                    ConfigSource::Default
                };
                Some((k.to_string(), value, source))
            })
            .collect()
    }

    /// Every key with its effective value.
    pub fn to_map(&self) -> BTreeMap<String, String> {
        KEYS.iter()
            .filter_map(|k| Some((k.to_string(), self.get(k)?)))
            .collect()
    }

    /// Whether the topic's history may be in an object store: tiered, or a read
    /// replica of another cluster's bucket.
    pub fn has_remote_log(&self) -> bool {
        self.remote_storage_enable || !self.read_replica_of.is_empty()
    }

    /// Total retention by time and by size: none under `cleanup.policy=compact`
    /// (compaction alone decides what goes).
    pub fn total_retention(&self) -> (i64, i64) {
        if self.cleanup_policy.deletes() {
            (self.retention_ms, self.retention_bytes)
        } else {
            (-1, -1)
        }
    }

    /// What the partition log obeys. A tiered topic's local log keeps
    /// `local.retention.*` (-2: the same as the total; never more than the total), the
    /// object store the rest.
    pub fn log_config(&self) -> LogConfig {
        let (retention_ms, retention_bytes) = self.total_retention();
        let local = |local: i64, total: i64| {
            let within = |l: i64| l >= 0 && (total < 0 || l <= total);
            if self.remote_storage_enable && local != -2 && (total < 0 || within(local)) {
                local
            } else {
                total
            }
        };
        LogConfig {
            segment_bytes: self.segment_bytes as u64,
            segment_ms: self.segment_ms,
            index_interval_bytes: self.index_interval_bytes as u64,
            retention_ms: local(self.local_retention_ms, retention_ms),
            retention_bytes: local(self.local_retention_bytes, retention_bytes),
            flush_messages: self.flush_messages as u64,
            flush_ms: self.flush_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_round_trips_through_get_and_set() {
        let defaults = TopicConfig::default();
        for key in KEYS {
            let mut c = TopicConfig::default();
            c.set(key, &defaults.get(key).unwrap()).unwrap();
            assert_eq!(c, defaults, "{key}");
        }
        assert_eq!(defaults.to_map().len(), KEYS.len());
    }

    #[test]
    fn bad_values_and_keys_name_the_key() {
        let mut c = TopicConfig::default();
        for (k, v) in [
            ("retention.ms", "abc"),
            ("retention.ms", "-5"),
            ("segment.bytes", "10"),
            ("message.timestamp.type", "Now"),
            ("cleanup.policy", "compact,nothing"),
            ("min.cleanable.dirty.ratio", "1.5"),
            ("delete.retention.ms", "-1"),
            ("remote.storage.enable", "yes"),
            ("compression.type", "brotli"),
            ("message.format.version", "latest"),
            ("no.such.key", "1"),
        ] {
            let e = c.set(k, v).unwrap_err();
            assert_eq!(e.key, k);
            assert!(e.to_string().contains(k));
        }
        assert_eq!(c, TopicConfig::default(), "failed sets change nothing");
    }

    #[test]
    fn cleanup_policies_parse_in_any_order_and_compact_alone_turns_off_retention() {
        let mut c = TopicConfig::default();
        for (v, want) in [
            ("compact", CleanupPolicy::Compact),
            ("delete, compact", CleanupPolicy::CompactDelete),
            ("[compact,delete]", CleanupPolicy::CompactDelete),
            ("delete", CleanupPolicy::Delete),
        ] {
            c.set("cleanup.policy", v).unwrap();
            assert_eq!(c.cleanup_policy, want, "{v}");
        }
        c.set("cleanup.policy", "compact").unwrap();
        c.set("retention.ms", "1000").unwrap();
        c.remote_storage_enable = false;
        assert_eq!(c.log_config().retention_ms, -1);
        c.set("cleanup.policy", "compact,delete").unwrap();
        assert_eq!(c.log_config().retention_ms, 1000);
        c.set("min.cleanable.dirty.ratio", "0.25").unwrap();
        assert_eq!(c.get("min.cleanable.dirty.ratio").unwrap(), "0.25");
    }

    #[test]
    fn tiered_topics_keep_a_day_locally_by_default_and_never_more_than_the_total() {
        let mut c = TopicConfig::default();
        assert_eq!(c.log_config().retention_ms, 86_400_000);
        c.set("retention.ms", "3600000").unwrap();
        assert_eq!(
            c.log_config().retention_ms,
            3_600_000,
            "capped by the total"
        );
        c.set("retention.ms", "-1").unwrap();
        assert_eq!(c.log_config().retention_ms, 86_400_000);
        c.set("local.retention.ms", "-2").unwrap();
        assert_eq!(c.log_config().retention_ms, -1, "-2: as the total");
        c.set("local.retention.ms", "1000").unwrap();
        c.remote_storage_enable = false;
        assert_eq!(c.log_config().retention_ms, -1, "untiered: the total");
    }

    #[test]
    fn overrides_layer_on_defaults() {
        let base = TopicConfig::default()
            .with_overrides(&BTreeMap::from([("retention.ms".into(), "100".into())]))
            .unwrap();
        let t = base
            .with_overrides(&BTreeMap::from([("segment.bytes".into(), "2048".into())]))
            .unwrap();
        assert_eq!((t.retention_ms, t.segment_bytes), (100, 2048));
        assert_eq!(t.log_config().segment_bytes, 2048);
    }
}
