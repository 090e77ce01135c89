//! `shale partition reassign` and `shale partition reassignments`: partition
//! reassignment from a plan in the JSON format of Kafka's `kafka-reassign-partitions`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use serde_json::{Value, json};
use shale_client::Client;
use shale_proto::v1::PartitionReassignment;

use crate::admin::error_name;
use crate::out::{self, OutputFormat};

#[derive(Subcommand)]
pub(crate) enum PartitionCommand {
    /// Moves partitions to the replicas a plan names, in the JSON format of Kafka's
    /// kafka-reassign-partitions (`{"version":1,"partitions":[{"topic":"t",
    /// "partition":0,"replicas":[1,2,3]}]}`). The new replicas copy the leader's
    /// local log (a tiered partition's history stays in the bucket), join the ISR,
    /// and then the others leave and delete their copy.
    Reassign(ReassignArgs),
    /// The reassignments in flight: target replicas, adding and removing.
    Reassignments {
        /// Only this topic (default: every topic).
        topic: Option<String>,
    },
}

#[derive(Args)]
#[command(group(ArgGroup::new("mode").required(true).args(["execute", "verify", "cancel"])))]
pub(crate) struct ReassignArgs {
    /// The plan (Kafka's reassignment JSON).
    #[arg(long)]
    plan: PathBuf,
    /// Start the reassignments (printing the current replicas first, as a plan that
    /// moves them back).
    #[arg(long)]
    execute: bool,
    /// Say, per partition, whether its reassignment is complete, still in flight or
    /// not started; fails unless every one is complete.
    #[arg(long)]
    verify: bool,
    /// Cancel the plan's reassignments still in flight: their partitions go back to
    /// the replicas they had.
    #[arg(long)]
    cancel: bool,
}

/// One partition of a plan.
struct Move {
    topic: String,
    partition: i32,
    replicas: Vec<i32>,
}

/// Reads a plan in Kafka's reassignment JSON.
fn parse_plan(text: &str) -> anyhow::Result<Vec<Move>> {
    let doc: Value = serde_json::from_str(text).context("the plan is not JSON")?;
    if let Some(v) = doc.get("version")
        && v != 1
    {
        bail!("plan version {v} is not supported (expected 1)");
    }
    let partitions = (doc.get("partitions").and_then(Value::as_array))
        .context("the plan has no \"partitions\" list")?;
    let mut moves = Vec::with_capacity(partitions.len());
    for (i, p) in partitions.iter().enumerate() {
        let topic = (p.get("topic").and_then(Value::as_str))
            .with_context(|| format!("partition entry {i} has no \"topic\""))?;
        let partition = (p.get("partition").and_then(Value::as_i64))
            .and_then(|p| i32::try_from(p).ok())
            .with_context(|| format!("partition entry {i} has no valid \"partition\""))?;
        let replicas = (p.get("replicas").and_then(Value::as_array))
            .with_context(|| format!("{topic}-{partition} has no \"replicas\" list"))?
            .iter()
            .map(|b| b.as_i64().and_then(|b| i32::try_from(b).ok()))
            .collect::<Option<Vec<i32>>>()
            .with_context(|| format!("{topic}-{partition}: replicas must be broker ids"))?;
        if let Some(dirs) = p.get("log_dirs").and_then(Value::as_array)
            && dirs.iter().any(|d| d != "any")
        {
            bail!("{topic}-{partition}: log_dirs other than \"any\" are not supported");
        }
        if moves
            .iter()
            .any(|m: &Move| m.topic == topic && m.partition == partition)
        {
            bail!("{topic}-{partition} is listed twice in the plan");
        }
        moves.push(Move {
            topic: topic.to_string(),
            partition,
            replicas,
        });
    }
    Ok(moves)
}

/// The current replicas of every partition of `topics`.
async fn current_replicas(
    client: &Client,
    topics: impl Iterator<Item = &str>,
) -> anyhow::Result<BTreeMap<(String, i32), Vec<i32>>> {
    let mut out = BTreeMap::new();
    let mut seen = Vec::new();
    for topic in topics {
        if seen.contains(&topic) {
            continue;
        }
        seen.push(topic);
        let md = client.refresh_metadata(topic).await?;
        for t in md.topics {
            if t.error_code != 0 {
                bail!("topic '{topic}': {}", error_name(t.error_code));
            }
            for p in t.partitions {
                out.insert((t.name.clone(), p.partition), p.replicas);
            }
        }
    }
    Ok(out)
}

fn plan_json(moves: impl Iterator<Item = (String, i32, Vec<i32>)>) -> Value {
    json!({
        "version": 1,
        "partitions": moves
            .map(|(topic, partition, replicas)| json!({
                "topic": topic, "partition": partition, "replicas": replicas,
            }))
            .collect::<Vec<_>>(),
    })
}

pub(crate) async fn run(
    client: Client,
    cmd: PartitionCommand,
    output: OutputFormat,
) -> anyhow::Result<()> {
    match cmd {
        PartitionCommand::Reassign(args) => reassign(client, args, output).await,
        PartitionCommand::Reassignments { topic } => {
            let list = client
                .list_partition_reassignments(topic.as_deref().unwrap_or(""))
                .await?;
            match output {
                OutputFormat::Json => out::json(&json!(
                    list.iter()
                        .map(|r| json!({
                            "topic": r.topic,
                            "partition": r.partition,
                            "replicas": r.replicas,
                            "adding": r.adding,
                            "removing": r.removing,
                        }))
                        .collect::<Vec<_>>()
                )),
                OutputFormat::Text => {
                    let mut text = String::from("TOPIC\tPARTITION\tREPLICAS\tADDING\tREMOVING\n");
                    for r in &list {
                        text.push_str(&format!(
                            "{}\t{}\t{:?}\t{:?}\t{:?}\n",
                            r.topic, r.partition, r.replicas, r.adding, r.removing
                        ));
                    }
                    out::print(&text)
                }
            }
        }
    }
}

async fn reassign(client: Client, args: ReassignArgs, output: OutputFormat) -> anyhow::Result<()> {
    let text = std::fs::read_to_string(&args.plan)
        .with_context(|| format!("cannot read the plan {}", args.plan.display()))?;
    let moves = parse_plan(&text)?;
    if args.verify {
        return verify(&client, &moves, output).await;
    }
    if args.execute {
        let current = current_replicas(&client, moves.iter().map(|m| m.topic.as_str())).await?;
        let rollback = moves.iter().filter_map(|m| {
            let key = (m.topic.clone(), m.partition);
            current
                .get(&key)
                .map(|r| (m.topic.clone(), m.partition, r.clone()))
        });
        if output == OutputFormat::Text {
            out::print(&format!(
                "Current partition replica assignment (save it to move them back):\n{}\n\n",
                plan_json(rollback)
            ))?;
        }
    }
    let requests = moves
        .iter()
        .map(|m| PartitionReassignment {
            topic: m.topic.clone(),
            partition: m.partition,
            replicas: if args.cancel {
                Vec::new()
            } else {
                m.replicas.clone()
            },
            cancel: args.cancel,
        })
        .collect();
    let results = client.alter_partition_reassignments(requests).await?;
    let failed = results.iter().filter(|r| r.error_code != 0).count();
    match output {
        OutputFormat::Json => out::json(&json!(
            results
                .iter()
                .map(|r| json!({
                    "topic": r.topic,
                    "partition": r.partition,
                    "error": error_name(r.error_code),
                    "message": r.error_message,
                }))
                .collect::<Vec<_>>()
        ))?,
        OutputFormat::Text => {
            let done = if args.cancel { "cancelled" } else { "started" };
            let mut text = String::from("TOPIC\tPARTITION\tRESULT\n");
            for r in &results {
                let outcome = match r.error_code {
                    0 => done.to_string(),
                    code => format!("{}: {}", error_name(code), r.error_message),
                };
                text.push_str(&format!("{}\t{}\t{outcome}\n", r.topic, r.partition));
            }
            out::print(&text)?
        }
    }
    if failed > 0 {
        bail!("{failed} of {} partition(s) failed", results.len());
    }
    Ok(())
}

/// Whether each of the plan's partitions has its replicas.
async fn verify(client: &Client, moves: &[Move], output: OutputFormat) -> anyhow::Result<()> {
    let in_flight = client.list_partition_reassignments("").await?;
    let current = current_replicas(client, moves.iter().map(|m| m.topic.as_str())).await?;
    let mut rows = Vec::with_capacity(moves.len());
    for m in moves {
        let key = (m.topic.clone(), m.partition);
        let running = in_flight
            .iter()
            .any(|r| r.topic == m.topic && r.partition == m.partition);
        let status = match current.get(&key) {
            None => "unknown partition",
            Some(_) if running => "in progress",
            Some(r) if *r == m.replicas => "complete",
            Some(_) => "not started (its replicas differ from the plan)",
        };
        rows.push((m, status, current.get(&key).cloned().unwrap_or_default()));
    }
    let incomplete = rows.iter().filter(|r| r.1 != "complete").count();
    match output {
        OutputFormat::Json => out::json(&json!(
            rows.iter()
                .map(|(m, status, replicas)| json!({
                    "topic": m.topic,
                    "partition": m.partition,
                    "status": status,
                    "replicas": replicas,
                    "target": m.replicas,
                }))
                .collect::<Vec<_>>()
        ))?,
        OutputFormat::Text => {
            let mut text = String::from("TOPIC\tPARTITION\tSTATUS\tREPLICAS\n");
            for (m, status, replicas) in &rows {
                text.push_str(&format!(
                    "{}\t{}\t{status}\t{replicas:?}\n",
                    m.topic, m.partition
                ));
            }
            out::print(&text)?
        }
    }
    if incomplete > 0 {
        bail!(
            "{incomplete} of {} reassignment(s) not complete",
            rows.len()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::parse_plan;

    #[test]
    fn kafka_plans_are_read_and_bad_ones_refused() {
        let plan = r#"{"version":1,"partitions":[
            {"topic":"logs","partition":0,"replicas":[2,3],"log_dirs":["any","any"]},
            {"topic":"logs","partition":1,"replicas":[3,1]}]}"#;
        let moves = parse_plan(plan).unwrap();
        assert_eq!(moves.len(), 2);
        assert_eq!(
            (moves[1].partition, moves[1].replicas.clone()),
            (1, vec![3, 1])
        );
        for (bad, says) in [
            ("[]", "no \"partitions\""),
            (r#"{"version":2,"partitions":[]}"#, "version 2"),
            (
                r#"{"partitions":[{"topic":"t","replicas":[1]}]}"#,
                "\"partition\"",
            ),
            (
                r#"{"partitions":[{"topic":"t","partition":0,"replicas":["a"]}]}"#,
                "broker ids",
            ),
            (
                r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/d"]}]}"#,
                "log_dirs",
            ),
            (
                r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#,
                "twice",
            ),
        ] {
            let e = parse_plan(bad).err().unwrap().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
