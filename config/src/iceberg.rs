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
    /// The value, a JSON object, as typed columns (`iceberg.value.schema`, or the
    /// fields the records bring); records that do not fit go to `<topic>~dlq`.
    ValueSchema,
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
    /// `value_schema`: the value's columns, as an Iceberg schema (JSON); empty: the
    /// columns come from the records.
    pub value_schema: String,
    /// How long the table keeps rows (by their timestamp, in whole hours); -1: for
    /// ever. Independent of the topic's `retention.ms`.
    pub retention_ms: i64,
}

impl Default for TableConfig {
    fn default() -> Self {
        Self {
            mode: IcebergMode::Disabled,
            commit_interval_ms: 60_000,
            target_file_size_bytes: 128 << 20,
            value_schema: String::new(),
            retention_ms: -1,
        }
    }
}

pub(crate) const KEYS: [&str; 5] = [
    "iceberg.commit.interval.ms",
    "iceberg.mode",
    "iceberg.retention.ms",
    "iceberg.target.file.size.bytes",
    "iceberg.value.schema",
];

impl TableConfig {
    pub(crate) fn set(&mut self, key: &str, value: &str) -> Result<bool, ConfigError> {
        match key {
            "iceberg.mode" => {
                self.mode = match value.trim() {
                    "disabled" => IcebergMode::Disabled,
                    "key_value" => IcebergMode::KeyValue,
                    "value_schema" => IcebergMode::ValueSchema,
                    _ => {
                        return Err(ConfigError {
                            key: key.into(),
                            value: value.into(),
                            reason: "must be disabled, key_value or value_schema".into(),
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
            "iceberg.retention.ms" => {
                let ms = long(key, value, -1, i64::MAX)?;
                if ms == 0 {
                    return Err(ConfigError {
                        key: key.into(),
                        value: value.into(),
                        reason: "must be -1 (keep rows for ever) or a positive number of ms".into(),
                    });
                }
                self.retention_ms = ms;
            }
            "iceberg.value.schema" => {
                if let Err(reason) = check_schema(value) {
                    return Err(ConfigError {
                        key: key.into(),
                        value: value.into(),
                        reason,
                    });
                }
                self.value_schema = value.trim().to_string();
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
                IcebergMode::ValueSchema => "value_schema".into(),
            },
            "iceberg.value.schema" => self.value_schema.clone(),
            "iceberg.retention.ms" => self.retention_ms.to_string(),
            "iceberg.commit.interval.ms" => self.commit_interval_ms.to_string(),
            "iceberg.target.file.size.bytes" => self.target_file_size_bytes.to_string(),
            _ => return None,
        })
    }
}

/// The types a value column may have: those JSON values fill.
const TYPES: [&str; 9] = [
    "boolean",
    "int",
    "long",
    "float",
    "double",
    "string",
    "date",
    "timestamp",
    "timestamptz",
];

/// The record's own columns of a `value_schema` table, and its partition field: no
/// top-level value field may be named so.
const OWN: [&str; 6] = [
    "shale_partition",
    "shale_offset",
    "shale_timestamp",
    "shale_key",
    "shale_headers",
    "shale_hour",
];

/// `iceberg.value.schema`: empty, or an Iceberg schema (JSON) of a struct whose
/// fields each have a distinct id, a name without `.`, `required` and a type among
/// [`TYPES`], a struct or a list (with `element-id`, `element-required` and
/// `element`), and whose top-level names are not in [`OWN`].
fn check_schema(value: &str) -> Result<(), String> {
    use serde_json::Value;
    if value.trim().is_empty() {
        return Ok(());
    }
    let schema: Value = serde_json::from_str(value).map_err(|e| format!("not JSON: {e}"))?;
    fn id(v: Option<&Value>, ids: &mut std::collections::HashSet<i64>) -> Result<(), String> {
        match v.and_then(Value::as_i64) {
            Some(id) if (1..=i64::from(i32::MAX)).contains(&id) && ids.insert(id) => Ok(()),
            Some(id) => Err(format!("id {id} is used twice, or out of range")),
            None => Err("an id must be a positive integer".into()),
        }
    }
    fn check_type(
        t: &Value,
        name: &str,
        ids: &mut std::collections::HashSet<i64>,
    ) -> Result<(), String> {
        match t {
            Value::String(p) if TYPES.contains(&p.as_str()) => Ok(()),
            Value::Object(o) if o.get("type") == Some(&Value::from("struct")) => {
                check_fields(o.get("fields"), &format!("{name}."), ids)
            }
            Value::Object(o) if o.get("type") == Some(&Value::from("list")) => {
                id(o.get("element-id"), ids).map_err(|e| format!("list {name}: element-{e}"))?;
                let Some(Value::Bool(_)) = o.get("element-required") else {
                    return Err(format!("list {name} has no element-required"));
                };
                check_type(o.get("element").unwrap_or(&Value::Null), name, ids)
            }
            _ => Err(format!(
                "field {name}: type {t} is not one JSON fills ({}, struct, list)",
                TYPES.join(", ")
            )),
        }
    }
    fn check_fields(
        fields: Option<&Value>,
        path: &str,
        ids: &mut std::collections::HashSet<i64>,
    ) -> Result<(), String> {
        let Some(Value::Array(fields)) = fields else {
            return Err(format!("struct {path} has no fields array"));
        };
        for f in fields {
            let (Some(Value::String(name)), Some(Value::Bool(_))) =
                (f.get("name"), f.get("required"))
            else {
                return Err(format!("field {f} needs an id, a name and required"));
            };
            id(f.get("id"), ids).map_err(|e| format!("field {path}{name}: {e}"))?;
            if name.is_empty() || name.contains('.') {
                return Err(format!(
                    "field {path}{name}: a name must be non-empty, without '.'"
                ));
            }
            if path.is_empty() && OWN.contains(&name.as_str()) {
                return Err(format!(
                    "field {name} is one of the record's own columns, or the table's partitioning"
                ));
            }
            check_type(
                f.get("type").unwrap_or(&Value::Null),
                &format!("{path}{name}"),
                ids,
            )?;
        }
        Ok(())
    }
    if schema.get("type") != Some(&Value::from("struct")) {
        return Err("must be an Iceberg schema: {\"type\": \"struct\", \"fields\": [...]}".into());
    }
    check_fields(schema.get("fields"), "", &mut Default::default())
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
        c.set("iceberg.mode", "value_schema").unwrap();
        assert_eq!(c.table.mode, super::IcebergMode::ValueSchema);
        let schema = r#"{"type":"struct","fields":[{"id":1,"name":"n","required":false,"type":"long"},
            {"id":2,"name":"tags","required":false,"type":{"type":"list","element-id":3,"element":"string","element-required":false}}]}"#;
        c.set("iceberg.value.schema", schema).unwrap();
        assert_eq!(c.get("iceberg.value.schema").as_deref(), Some(schema));
        for (bad, why) in [
            ("{", "not JSON"),
            ("[]", "must be an Iceberg schema"),
            (
                r#"{"type":"struct","fields":[{"id":1,"name":"b","required":false,"type":"binary"}]}"#,
                "not one JSON fills",
            ),
            (
                r#"{"type":"struct","fields":[{"id":1,"name":"shale_offset","required":false,"type":"long"}]}"#,
                "the record's own columns",
            ),
            (
                r#"{"type":"struct","fields":[{"name":"n","type":"long"}]}"#,
                "needs an id",
            ),
            (
                r#"{"type":"struct","fields":[{"id":1,"name":"a","required":false,"type":"long"},{"id":1,"name":"b","required":false,"type":"long"}]}"#,
                "used twice",
            ),
            (
                r#"{"type":"struct","fields":[{"id":1,"name":"a.b","required":false,"type":"long"}]}"#,
                "without '.'",
            ),
            (
                r#"{"type":"struct","fields":[{"id":1,"name":"shale_hour","required":false,"type":"long"}]}"#,
                "partitioning",
            ),
            (
                r#"{"type":"struct","fields":[{"id":1,"name":"l","required":false,"type":{"type":"list","element-id":2,"element":"long"}}]}"#,
                "element-required",
            ),
        ] {
            let err = c.set("iceberg.value.schema", bad).unwrap_err();
            assert!(err.reason.contains(why), "{bad}: {err}");
        }
        assert_eq!(
            c.get("iceberg.value.schema").as_deref(),
            Some(schema),
            "unchanged"
        );
        assert!(c.set("iceberg.mode", "parquet").is_err());
        assert!(c.set("iceberg.commit.interval.ms", "5").is_err());
        assert_eq!(c.get("iceberg.retention.ms").as_deref(), Some("-1"));
        c.set("iceberg.retention.ms", "2592000000").unwrap();
        assert_eq!(c.table.retention_ms, 2_592_000_000);
        assert!(c.set("iceberg.retention.ms", "0").is_err());
        assert!(c.set("iceberg.retention.ms", "-2").is_err());
        assert!(c.set("iceberg.target.file.size.bytes", "10").is_err());
        assert!(c.set("iceberg.nope", "1").is_err());
        assert!(TopicConfig::check_key("iceberg.target.file.size.bytes").is_ok());
    }
}
