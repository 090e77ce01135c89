//! `shale topic …`

use clap::Subcommand;
use serde_json::json;
use shale_client::Client;
use shale_proto::v1::{DescribeTopicResponse, PartitionDescription};
use shale_records::ErrorCode;

use crate::out::{self, OutputFormat};

#[derive(Subcommand)]
pub(crate) enum TopicCommand {
    /// Create a topic; replicas are spread over the live brokers.
    Create {
        /// Topic name: 1–249 of `[a-zA-Z0-9._-]`, not `.` or `..`.
        name: String,
        /// Number of partitions (default: 1; a read replica: its source's).
        #[arg(long)]
        partitions: Option<i32>,
        /// Replicas per partition. Default: the broker's
        /// `cluster.default_replication_factor`.
        #[arg(long)]
        replication_factor: Option<i32>,
        /// Topic config override, `key=value` (repeatable).
        #[arg(long = "config", value_parser = crate::parse_kv)]
        configs: Vec<(String, String)>,
        /// Succeed, changing nothing, if the topic exists already.
        #[arg(long)]
        if_not_exists: bool,
        /// Serve, read-only, the topic of this name that another cluster writes, from
        /// that cluster's bucket (`s3://bucket/prefix`): replays run on this cluster
        /// and never reach the other's brokers (sets `read.replica.of`).
        #[arg(long, value_name = "BUCKET_URL")]
        read_replica_of: Option<String>,
    },
    /// List topic names.
    List,
    /// Describe topics: id, effective configs with their source (topic, broker,
    /// default), and per partition leader, epoch, replicas, ISR and offsets.
    Describe {
        /// The topic (default: every topic).
        name: Option<String>,
        /// Only partitions whose ISR is smaller than their replica set.
        #[arg(long)]
        under_replicated: bool,
        /// Only partitions whose ISR is smaller than `min.insync.replicas`.
        #[arg(long)]
        under_min_isr: bool,
        /// Only partitions without a leader.
        #[arg(long)]
        unavailable: bool,
    },
    /// Raise the partition count and/or change config overrides.
    Alter {
        /// The topic.
        name: String,
        /// New, larger partition count (partitions are never removed).
        #[arg(long)]
        partitions: Option<i32>,
        /// Set an override, `key=value` (repeatable).
        #[arg(long = "config", value_parser = crate::parse_kv)]
        configs: Vec<(String, String)>,
        /// Remove an override, returning the key to the broker default (repeatable).
        #[arg(long = "delete-config")]
        delete_configs: Vec<String>,
    },
    /// Delete a topic and its data, local and remote.
    Delete {
        /// The topic.
        name: String,
    },
    /// Unmount a tiered topic: it takes no more writes (`read.only`), its leaders copy
    /// every record to the bucket, its description goes there too, and it leaves the
    /// cluster; its objects stay, for `shale topic mount` here or on another cluster
    /// that uses the bucket.
    Unmount {
        /// The topic.
        name: String,
        /// How long to wait for the leaders to copy their logs (seconds).
        #[arg(long, default_value_t = 300)]
        timeout: u64,
    },
    /// Mount a topic unmounted into this cluster's bucket: it comes back with its id
    /// and offsets, and takes writes from where it ended.
    Mount {
        /// The topic.
        name: String,
        /// The bucket (`s3://bucket/prefix`); it must be the one the brokers use.
        #[arg(long, value_name = "BUCKET_URL")]
        from: Option<String>,
        /// Replicas per partition (default: the topic's own).
        #[arg(long)]
        replication_factor: Option<i32>,
        /// Mount although another cluster owns the topic (only once it is gone: two
        /// clusters must never write one topic).
        #[arg(long)]
        force: bool,
    },
    /// Delete the records below an offset (Kafka's DeleteRecords): the partition's log
    /// start moves there, locally and in the object store, for good.
    DeleteRecords {
        /// The topic.
        name: String,
        /// Records below this offset go; `end`: every committed record (below the high
        /// watermark).
        #[arg(long, value_parser = parse_delete_offset)]
        offset: i64,
        /// Only this partition (repeatable; default: every partition).
        #[arg(long = "partition")]
        partitions: Vec<i32>,
    },
}

fn parse_delete_offset(s: &str) -> Result<i64, String> {
    match s {
        "end" | "latest" => Ok(-1),
        n => match n.parse::<i64>() {
            Ok(o) if o >= 0 => Ok(o),
            _ => Err(format!("'{s}' is neither an offset (>= 0) nor 'end'")),
        },
    }
}

pub(crate) async fn run(
    client: Client,
    cmd: TopicCommand,
    output: OutputFormat,
) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
            if_not_exists,
            read_replica_of,
        } => {
            let mut configs: std::collections::BTreeMap<String, String> =
                configs.into_iter().collect();
            let partitions = match &read_replica_of {
                Some(url) => {
                    configs.insert("read.replica.of".into(), url.clone());
                    partitions.unwrap_or(-1)
                }
                None => partitions.unwrap_or(1),
            };
            let created = client
                .create_topic(&name, partitions, replication_factor.unwrap_or(-1), configs)
                .await;
            match created {
                Ok(id) => out::print(&format!("created topic {name} ({id})\n"))?,
                Err(e) if if_not_exists && e.code() == Some(ErrorCode::TopicAlreadyExists) => {
                    out::print(&format!("topic {name} exists already\n"))?
                }
                Err(e) => return Err(e.into()),
            }
        }
        TopicCommand::List => {
            let topics = client.list_topics().await?;
            match output {
                OutputFormat::Json => out::json(&json!(
                    topics
                        .iter()
                        .map(|t| json!({
                            "name": t.name,
                            "topic_id": t.topic_id,
                            "partitions": t.partitions,
                            "replication_factor": t.replication_factor,
                        }))
                        .collect::<Vec<_>>()
                ))?,
                OutputFormat::Text => {
                    let text: String = topics.iter().map(|t| format!("{}\n", t.name)).collect();
                    out::print(&text)?
                }
            }
        }
        TopicCommand::Describe {
            name,
            under_replicated,
            under_min_isr,
            unavailable,
        } => {
            let names = match name {
                Some(n) => vec![n],
                None => client
                    .list_topics()
                    .await?
                    .into_iter()
                    .map(|t| t.name)
                    .collect(),
            };
            let filter = Filter {
                under_replicated,
                under_min_isr,
                unavailable,
            };
            let mut described = Vec::new();
            for n in names {
                described.push(client.describe_topic(&n).await?);
            }
            match output {
                OutputFormat::Json => out::json(&json!(
                    described
                        .iter()
                        .filter_map(|d| describe_json(d, &filter))
                        .collect::<Vec<_>>()
                ))?,
                OutputFormat::Text => {
                    let text: String = described
                        .iter()
                        .filter_map(|d| describe_text(d, &filter))
                        .collect();
                    out::print(&text)?
                }
            }
        }
        TopicCommand::Alter {
            name,
            partitions,
            configs,
            delete_configs,
        } => {
            if partitions.is_none() && configs.is_empty() && delete_configs.is_empty() {
                anyhow::bail!("nothing to alter: give --partitions, --config or --delete-config");
            }
            if !configs.is_empty() || !delete_configs.is_empty() {
                client
                    .alter_configs(&name, configs.into_iter().collect(), delete_configs)
                    .await?;
            }
            if let Some(n) = partitions {
                client.create_partitions(&name, n).await?;
            }
            out::print(&format!("altered topic {name}\n"))?;
        }
        TopicCommand::Delete { name } => {
            client.delete_topic(&name).await?;
            out::print(&format!("deleted topic {name}\n"))?;
        }
        TopicCommand::Unmount { name, timeout } => {
            let r = (client.unmount_topic(&name, std::time::Duration::from_secs(timeout))).await?;
            match output {
                OutputFormat::Json => out::json(&json!({
                    "topic": name, "topic_id": r.topic_id, "description": r.description,
                }))?,
                OutputFormat::Text => out::print(&format!(
                    "unmounted topic {name} ({}): every record is in the bucket, described by {}\n",
                    r.topic_id, r.description
                ))?,
            }
        }
        TopicCommand::Mount {
            name,
            from,
            replication_factor,
            force,
        } => {
            let r = (client.mount_topic(&name, from.as_deref(), replication_factor, force)).await?;
            crate::restore::print_mount(&r, output)?;
        }
        TopicCommand::DeleteRecords {
            name,
            offset,
            partitions,
        } => {
            let partitions = if partitions.is_empty() {
                (0..client.partition_count(&name).await?).collect()
            } else {
                partitions
            };
            let mut rows = Vec::new();
            for p in partitions {
                rows.push((p, client.delete_records(&name, p, offset).await?));
            }
            match output {
                OutputFormat::Json => out::json(&json!(
                    rows.iter()
                        .map(|(p, low)| json!({"topic": name, "partition": p, "log_start_offset": low}))
                        .collect::<Vec<_>>()
                ))?,
                OutputFormat::Text => {
                    let mut text = String::from("TOPIC\tPARTITION\tLOG-START-OFFSET\n");
                    for (p, low) in rows {
                        text.push_str(&format!("{name}\t{p}\t{low}\n"));
                    }
                    out::print(&text)?;
                }
            }
        }
    }
    Ok(())
}

/// Which partitions `describe` shows (all when no filter is set).
struct Filter {
    under_replicated: bool,
    under_min_isr: bool,
    unavailable: bool,
}

impl Filter {
    fn any(&self) -> bool {
        self.under_replicated || self.under_min_isr || self.unavailable
    }

    fn keeps(&self, p: &PartitionDescription, min_isr: usize) -> bool {
        !self.any()
            || (self.under_replicated && p.isr.len() < p.replicas.len())
            || (self.under_min_isr && p.isr.len() < min_isr)
            || (self.unavailable && p.leader < 0)
    }
}

fn min_isr(d: &DescribeTopicResponse) -> usize {
    d.configs
        .get("min.insync.replicas")
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

/// A topic's text description; `None` when a filter leaves none of its partitions.
fn describe_text(d: &DescribeTopicResponse, filter: &Filter) -> Option<String> {
    let min_isr = min_isr(d);
    let parts: Vec<&PartitionDescription> = d
        .partitions
        .iter()
        .filter(|p| filter.keeps(p, min_isr))
        .collect();
    if filter.any() && parts.is_empty() {
        return None;
    }
    let t = d.topic.clone().unwrap_or_default();
    let mut text = format!(
        "Topic: {}\tTopicId: {}\tPartitions: {}\tReplicationFactor: {}\n",
        t.name, t.topic_id, t.partitions, t.replication_factor
    );
    if !filter.any() {
        for c in &d.config_entries {
            text.push_str(&format!(
                "\tConfig: {}={} ({})\n",
                c.name, c.value, c.source
            ));
        }
    }
    for p in parts {
        text.push_str(&format!(
            "\tPartition: {}\tLeader: {}\tLeaderEpoch: {}\tReplicas: {}\tIsr: {}\tLogStartOffset: {}\tLocalLogStartOffset: {}\tHighWatermark: {}\tLogEndOffset: {}\tSizeBytes: {}\tSegments: {}\n",
            p.partition,
            p.leader,
            p.leader_epoch,
            out::ids(&p.replicas),
            out::ids(&p.isr),
            p.log_start_offset,
            p.local_log_start_offset,
            p.high_watermark,
            p.log_end_offset,
            p.size_bytes,
            p.segments
        ));
        if let Some(c) = out::cleaner(p.cleanable_ratio, p.dirty_bytes, p.last_cleaned_ms) {
            text.pop();
            text.push_str(&format!("\tCleanableRatio: {c}\n"));
        }
    }
    if let Some(t) = &d.table
        && !filter.any()
    {
        text.push_str(&table_text(t));
    }
    Some(text)
}

fn describe_json(d: &DescribeTopicResponse, filter: &Filter) -> Option<serde_json::Value> {
    let min_isr = min_isr(d);
    let parts: Vec<serde_json::Value> = d
        .partitions
        .iter()
        .filter(|p| filter.keeps(p, min_isr))
        .map(|p| {
            json!({
                "partition": p.partition,
                "leader": p.leader,
                "leader_epoch": p.leader_epoch,
                "replicas": p.replicas,
                "isr": p.isr,
                "log_start_offset": p.log_start_offset,
                "local_log_start_offset": p.local_log_start_offset,
                "high_watermark": p.high_watermark,
                "log_end_offset": p.log_end_offset,
                "size_bytes": p.size_bytes,
                "segments": p.segments,
                "cleanable_ratio": (p.dirty_bytes >= 0).then_some(p.cleanable_ratio),
                "dirty_bytes": (p.dirty_bytes >= 0).then_some(p.dirty_bytes),
                "last_cleaned_ms": (p.dirty_bytes >= 0).then_some(p.last_cleaned_ms),
            })
        })
        .collect();
    if filter.any() && parts.is_empty() {
        return None;
    }
    let t = d.topic.clone().unwrap_or_default();
    let configs: serde_json::Map<String, serde_json::Value> = d
        .config_entries
        .iter()
        .map(|c| {
            (
                c.name.clone(),
                json!({"value": c.value, "source": c.source}),
            )
        })
        .collect();
    Some(json!({
        "name": t.name,
        "topic_id": t.topic_id,
        "partition_count": t.partitions,
        "replication_factor": t.replication_factor,
        "configs": configs,
        "partitions": parts,
        "table": d.table.as_ref().map(table_json),
    }))
}

fn table_json(t: &shale_proto::v1::TableStatus) -> serde_json::Value {
    json!({
        "location": t.location,
        "data_files": t.data_files,
        "bytes": t.bytes,
        "rows": t.rows,
        "last_commit_ms": t.last_commit_ms,
        "error": (!t.error.is_empty()).then_some(&t.error),
        "partitions": t.partitions.iter().map(|p| json!({
            "partition": p.partition,
            "next_offset": p.next_offset,
            "lag_offsets": p.lag_offsets,
            "lag_ms": p.lag_ms,
        })).collect::<Vec<_>>(),
    })
}

/// The Iceberg table's lines of `describe`.
fn table_text(t: &shale_proto::v1::TableStatus) -> String {
    if !t.error.is_empty() {
        return format!("\tTable: status unavailable: {}\n", t.error);
    }
    let mut text = format!(
        "\tTable: {}\tDataFiles: {}\tBytes: {}\tRows: {}\tLastCommit: {}\n",
        t.location,
        t.data_files,
        t.bytes,
        t.rows,
        if t.last_commit_ms < 0 {
            "never".to_string()
        } else {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64);
            out::relative_ms(t.last_commit_ms - now)
        }
    );
    for p in &t.partitions {
        text.push_str(&format!(
            "\tTablePartition: {}\tNextOffset: {}\tLagOffsets: {}\tLagSeconds: {:.1}\n",
            p.partition,
            p.next_offset,
            p.lag_offsets,
            p.lag_ms as f64 / 1000.0
        ));
    }
    text
}
