//! A topic's Iceberg table (`iceberg.*` topic configs): whether the leaders translate
//! the topic's records into a table, and how often and how big its files are.

use crate::topic::{ConfigError, long};

/// What the table holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IcebergMode {
    /// No table.
    #[default]
    Disabled,
    /// One row per record: partition, offset, timestamp, key and value (binary),
    /// headers.
    KeyValue,
}

/// The `iceberg.*` configs of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableConfig {
    pub mode: IcebergMode,
    /// How often a partition's leader commits what was added since its last commit:
    /// about how far the table lags the log.
    pub commit_interval_ms: i64,
    /// Data files are rolled at about this size.
    pub target_file_size_bytes: i64,
}

impl Default for TableConfig {
    fn default() -> Self {
        Self {
            mode: IcebergMode::Disabled,
            commit_interval_ms: 60_000,
            target_file_size_bytes: 128 << 20,
        }
    }
}

pub(crate) const KEYS: [&str; 3] = [
    "iceberg.commit.interval.ms",
    "iceberg.mode",
    "iceberg.target.file.size.bytes",
];

impl TableConfig {
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<bool, ConfigError> {
        match key {
            "iceberg.mode" => {
                self.mode = match value.trim() {
                    "disabled" => IcebergMode::Disabled,
                    "key_value" => IcebergMode::KeyValue,
                    "value_schema" => {
                        return Err(ConfigError {
                            key: key.into(),
                            value: value.into(),
                            reason: "value_schema is not supported yet; use key_value".into(),
                        });
                    }
                    _ => {
                        return Err(ConfigError {
                            key: key.into(),
                            value: value.into(),
                            reason: "must be disabled or key_value".into(),
                        });
                    }
                }
            }
            "iceberg.commit.interval.ms" => {
                self.commit_interval_ms = long(key, value, 100, 86_400_000)?
            }
            "iceberg.target.file.size.bytes" => {
                self.target_file_size_bytes = long(key, value, 1 << 20, 1 << 34)?
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    pub(crate) fn get(&self, key: &str) -> Option<String> {
        Some(match key {
            "iceberg.mode" => match self.mode {
                IcebergMode::Disabled => "disabled".into(),
                IcebergMode::KeyValue => "key_value".into(),
            },
            "iceberg.commit.interval.ms" => self.commit_interval_ms.to_string(),
            "iceberg.target.file.size.bytes" => self.target_file_size_bytes.to_string(),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::topic::TopicConfig;

    #[test]
    fn iceberg_keys_parse_and_print_back() {
        let mut c = TopicConfig::default();
        assert_eq!(c.get("iceberg.mode").as_deref(), Some("disabled"));
        c.set("iceberg.mode", "key_value").unwrap();
        c.set("iceberg.commit.interval.ms", "1000").unwrap();
        assert_eq!(c.get("iceberg.mode").as_deref(), Some("key_value"));
        assert_eq!(c.table.commit_interval_ms, 1000);
        let err = c.set("iceberg.mode", "value_schema").unwrap_err();
        assert!(err.reason.contains("not supported yet"), "{err}");
        assert!(c.set("iceberg.mode", "parquet").is_err());
        assert!(c.set("iceberg.commit.interval.ms", "5").is_err());
        assert!(c.set("iceberg.target.file.size.bytes", "10").is_err());
        assert!(c.set("iceberg.nope", "1").is_err());
        assert!(TopicConfig::check_key("iceberg.target.file.size.bytes").is_ok());
    }
}
