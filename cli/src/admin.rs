//! `shale offsets`, `shale cluster …` and `shale tiering …`.

use clap::{Args, Subcommand};
use serde_json::json;
use shale_client::Client;
use shale_records::ErrorCode;

use crate::out::{self, OutputFormat};

#[derive(Args)]
pub(crate) struct OffsetsArgs {
    /// The topic.
    topic: String,
    /// `latest`/`-1` (the high watermark), `earliest`/`-2`, milliseconds since the
    /// epoch, or an RFC 3339 time: the first offset at or after it (-1 if none).
    #[arg(long, default_value = "latest", allow_hyphen_values = true)]
    time: String,
    /// Only this partition (default: all).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
}

#[derive(Subcommand)]
pub(crate) enum ClusterCommand {
    /// The controller, and per broker: address, incarnation, alive or not, when its
    /// lease expires, partitions led and held.
    Status,
    /// Preferred leader election: moves leadership to each partition's first replica
    /// where it is alive and in sync. With --unclean: gives each partition without a
    /// leader one, even a replica that is not in sync (records only the lost
    /// replicas held are lost).
    ElectLeaders {
        /// Only this topic (default: every topic).
        #[arg(long)]
        topic: Option<String>,
        /// Only these partitions of the topic (repeatable).
        #[arg(long, requires = "topic")]
        partition: Vec<i32>,
        /// Kafka's unclean election: accept the loss of what no live replica holds.
        #[arg(long)]
        unclean: bool,
    },
    /// Moves every replica off a broker (the controller reassigns them to the others,
    /// copying only local tails) and shows the progress until it holds none and can
    /// be stopped. New partitions are not placed on it.
    Decommission {
        broker_id: i32,
        /// Return at once instead of waiting until the broker holds no replica.
        #[arg(long)]
        no_wait: bool,
    },
    /// Undoes a decommission: the broker takes partitions again (the balancer gives
    /// it its share).
    Recommission { broker_id: i32 },
    /// Brings topics back from the bucket alone, after the metastore was lost: ids,
    /// configs, partitions, remote logs and the groups' committed offsets, from the
    /// segments' objects and the snapshots kept beside them. Prints, per partition,
    /// what the bucket holds and how many records since the last snapshot were only
    /// on local disks (lost). A damaged bucket is refused, naming the objects.
    Restore {
        /// The bucket, `s3://bucket/prefix`: the brokers must be configured with it
        /// (default: theirs).
        #[arg(long)]
        from: Option<String>,
        /// Only this topic (repeatable; default: every topic in the bucket).
        #[arg(long)]
        topic: Vec<String>,
        /// Print what would be restored, and write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Every topic's replication factor (default: each topic's own, from the
        /// snapshot), to restore onto fewer brokers.
        #[arg(long)]
        replication_factor: Option<i32>,
        /// Restore although another cluster's brokers wrote to the bucket in the last
        /// 10 minutes (refused otherwise: that cluster may still be running).
        #[arg(long)]
        force: bool,
    },
    /// The moves the balancer would start now (decommissions, dead brokers'
    /// replacements, replica and leader balance).
    Balance {
        /// Print the plan only (the controller runs it on its own).
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(Subcommand)]
pub(crate) enum TieringCommand {
    /// Per partition: log start, local log start, remote start, highest uploaded
    /// offset, upload lag (segments, bytes), remote segments and bytes.
    Status {
        /// Only this topic (default: every topic).
        topic: Option<String>,
    },
}

pub(crate) async fn offsets(
    client: Client,
    args: OffsetsArgs,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let ts = crate::parse_list_time(&args.time)?;
    let partitions = match args.partition {
        Some(p) => vec![p],
        None => (0..client.partition_count(&args.topic).await?).collect(),
    };
    let mut rows = Vec::new();
    for p in partitions {
        rows.push((
            p,
            client.list_offset(&args.topic, p, ts).await?.unwrap_or(-1),
        ));
    }
    match output {
        OutputFormat::Json => out::json(&json!(
            rows.iter()
                .map(|(p, o)| json!({"topic": args.topic, "partition": p, "offset": o}))
                .collect::<Vec<_>>()
        )),
        OutputFormat::Text => out::print(
            &rows
                .iter()
                .map(|(p, o)| format!("{}:{p}:{o}\n", args.topic))
                .collect::<String>(),
        ),
    }
}

pub(crate) async fn cluster(
    client: Client,
    cmd: ClusterCommand,
    output: OutputFormat,
) -> anyhow::Result<()> {
    match cmd {
        ClusterCommand::Status => {
            let s = client.cluster_status().await?;
            match output {
                OutputFormat::Json => out::json(&json!({
                    "controller_id": s.controller_id,
                    "controller_epoch": s.controller_epoch,
                    "brokers": s.brokers.iter().map(|b| json!({
                        "broker_id": b.broker_id,
                        "address": b.address,
                        "broker_epoch": b.broker_epoch,
                        "alive": b.alive,
                        "lease_expires_ms": b.lease_expires_ms,
                        "lease_remaining_ms": b.lease_remaining_ms,
                        "leader_partitions": b.leader_partitions,
                        "replica_partitions": b.replica_partitions,
                        "moving_partitions": b.moving_partitions,
                        "decommissioned": b.decommissioned,
                        "rack": Some(&b.rack).filter(|r| !r.is_empty()),
                    })).collect::<Vec<_>>(),
                })),
                OutputFormat::Text => {
                    let controller = match s.controller_id {
                        -1 => "none".to_string(),
                        id => format!("{id} (epoch {})", s.controller_epoch),
                    };
                    let mut text = format!(
                        "Controller: {controller}\nBROKER\tADDRESS\tALIVE\tLEASE_EXPIRES\tLEADER_PARTITIONS\tREPLICA_PARTITIONS\tBROKER_EPOCH\tMOVING\tDECOMMISSIONED\tRACK\n"
                    );
                    for b in s.brokers {
                        text.push_str(&format!(
                            "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                            b.broker_id,
                            b.address,
                            b.alive,
                            out::relative_ms(b.lease_remaining_ms),
                            b.leader_partitions,
                            b.replica_partitions,
                            b.broker_epoch,
                            b.moving_partitions,
                            b.decommissioned,
                            if b.rack.is_empty() { "-" } else { &b.rack }
                        ));
                    }
                    out::print(&text)
                }
            }
        }
        ClusterCommand::Decommission { broker_id, no_wait } => {
            decommission(&client, broker_id, no_wait).await
        }
        ClusterCommand::Restore {
            from,
            topic,
            dry_run,
            replication_factor,
            force,
        } => {
            let report = client
                .restore_cluster(from.as_deref(), &topic, dry_run, replication_factor, force)
                .await?;
            crate::restore::print(&report, dry_run, output)
        }
        ClusterCommand::Recommission { broker_id } => {
            client.decommission_broker(broker_id, true).await?;
            out::print(&format!("broker {broker_id} is no longer decommissioned\n"))
        }
        ClusterCommand::Balance { dry_run } => {
            if !dry_run {
                anyhow::bail!(
                    "the controller balances on its own ([cluster] auto_balance_enable); \
                     --dry-run prints what it would move now"
                );
            }
            let moves = client.balance_plan().await?;
            match output {
                OutputFormat::Json => out::json(&json!(
                    moves
                        .iter()
                        .map(|m| json!({
                            "topic": m.topic,
                            "partition": m.partition,
                            "replicas": m.replicas,
                            "target": m.target,
                            "reason": m.reason,
                        }))
                        .collect::<Vec<_>>()
                )),
                OutputFormat::Text if moves.is_empty() => {
                    out::print("the cluster is balanced: no move to make\n")
                }
                OutputFormat::Text => {
                    let mut text = String::from("TOPIC\tPARTITION\tREPLICAS\tTARGET\tREASON\n");
                    for m in &moves {
                        text.push_str(&format!(
                            "{}\t{}\t{:?}\t{:?}\t{}\n",
                            m.topic, m.partition, m.replicas, m.target, m.reason
                        ));
                    }
                    out::print(&text)
                }
            }
        }
        ClusterCommand::ElectLeaders {
            topic,
            partition,
            unclean,
        } => {
            let results = client
                .elect_leaders(topic.as_deref().unwrap_or(""), partition, unclean)
                .await?;
            let failed = results.iter().any(|r| {
                !matches!(
                    ErrorCode::try_from(r.error_code),
                    Ok(ErrorCode::None | ErrorCode::ElectionNotNeeded)
                )
            });
            match output {
                OutputFormat::Json => out::json(&json!(
                    results
                        .iter()
                        .map(|r| json!({
                            "topic": r.topic,
                            "partition": r.partition,
                            "leader": r.leader,
                            "error": error_name(r.error_code),
                            "message": r.error_message,
                        }))
                        .collect::<Vec<_>>()
                ))?,
                OutputFormat::Text => {
                    let mut text = String::from("TOPIC\tPARTITION\tLEADER\tRESULT\n");
                    for r in &results {
                        let outcome = match ErrorCode::try_from(r.error_code) {
                            Ok(ErrorCode::None) => "elected".to_string(),
                            _ => format!("{}: {}", error_name(r.error_code), r.error_message),
                        };
                        text.push_str(&format!(
                            "{}\t{}\t{}\t{outcome}\n",
                            r.topic, r.partition, r.leader
                        ));
                    }
                    out::print(&text)?
                }
            }
            if failed {
                anyhow::bail!("some preferred leaders could not be elected");
            }
            Ok(())
        }
    }
}

/// Decommissions a broker and, unless `no_wait`, reports its replicas left every two
/// seconds until none is.
async fn decommission(client: &Client, broker_id: i32, no_wait: bool) -> anyhow::Result<()> {
    client.decommission_broker(broker_id, false).await?;
    out::print(&format!(
        "broker {broker_id} is decommissioned: its replicas move to the other brokers\n"
    ))?;
    if no_wait {
        return Ok(());
    }
    let mut last = None;
    loop {
        let status = client.cluster_status().await?;
        let Some(b) = status.brokers.iter().find(|b| b.broker_id == broker_id) else {
            anyhow::bail!("broker {broker_id} is not registered");
        };
        if b.replica_partitions == 0 {
            out::print(&format!(
                "broker {broker_id} holds no replica: it can be stopped\n"
            ))?;
            return Ok(());
        }
        let now = (b.replica_partitions, b.moving_partitions);
        if last != Some(now) {
            out::print(&format!(
                "broker {broker_id}: {} replica(s) left, {} moving\n",
                now.0, now.1
            ))?;
            last = Some(now);
        }
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}

/// An error code's Kafka name (the number if it has none).
pub(crate) fn error_name(code: i32) -> String {
    ErrorCode::try_from(code).map_or_else(|_| code.to_string(), |c| c.as_str_name().to_string())
}

pub(crate) async fn tiering(
    client: Client,
    cmd: TieringCommand,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let TieringCommand::Status { topic } = cmd;
    let status = client.tiering_status_full(topic.as_deref()).await?;
    match output {
        OutputFormat::Json => out::json(&json!({
            "partitions": status.partitions.iter().map(|r| json!({
                "topic": r.topic,
                "partition": r.partition,
                "tiered": r.remote_storage_enabled,
                "log_start_offset": r.log_start_offset,
                "local_log_start_offset": r.local_log_start_offset,
                "remote_log_start_offset": r.remote_log_start_offset,
                "highest_uploaded_offset": r.highest_uploaded_offset,
                "upload_lag_segments": r.upload_lag_segments,
                "upload_lag_bytes": r.upload_lag_bytes,
                "remote_segments": r.remote_segments,
                "remote_bytes": r.remote_bytes,
                "cleanable_ratio": (r.dirty_bytes >= 0).then_some(r.cleanable_ratio),
                "dirty_bytes": (r.dirty_bytes >= 0).then_some(r.dirty_bytes),
                "last_cleaned_ms": (r.dirty_bytes >= 0).then_some(r.last_cleaned_ms),
                "leader": r.leader,
                "high_watermark": r.high_watermark,
                "log_end_offset": r.log_end_offset,
                "read_only": r.read_only,
                "tier_busy": r.tier_busy,
            })).collect::<Vec<_>>(),
            "remote_get_requests": status.remote_get_requests,
            "remote_bytes_fetched": status.remote_bytes_fetched,
        })),
        OutputFormat::Text => {
            let mut text = String::from(
                "TOPIC\tPARTITION\tTIERED\tLOG_START\tLOCAL_LOG_START\tREMOTE_START\tUPLOADED_TO\tLAG_SEGMENTS\tLAG_BYTES\tREMOTE_SEGMENTS\tREMOTE_BYTES\tCLEANABLE_RATIO\n",
            );
            for r in status.partitions {
                let cleaner = out::cleaner(r.cleanable_ratio, r.dirty_bytes, r.last_cleaned_ms)
                    .unwrap_or_else(|| "-".into());
                text.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{cleaner}\n",
                    r.topic,
                    r.partition,
                    r.remote_storage_enabled,
                    r.log_start_offset,
                    r.local_log_start_offset,
                    r.remote_log_start_offset,
                    r.highest_uploaded_offset,
                    r.upload_lag_segments,
                    r.upload_lag_bytes,
                    r.remote_segments,
                    r.remote_bytes
                ));
            }
            text.push_str(&format!(
                "remote reads since start: {} GET requests, {} bytes\n",
                status.remote_get_requests, status.remote_bytes_fetched
            ));
            out::print(&text)
        }
    }
}
