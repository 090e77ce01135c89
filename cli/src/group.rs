//! `shale group …`

use std::collections::{BTreeMap, BTreeSet};

use clap::Subcommand;
use serde_json::json;
use shale_client::Client;

use crate::out::{self, OutputFormat};

#[derive(Subcommand)]
pub(crate) enum GroupCommand {
    /// Every group, its state and member count.
    List,
    /// Members, assignment, and per partition the committed offset, log end and lag.
    Describe {
        /// The group id.
        group: String,
    },
    /// Set a group's committed offsets (the group must have no members). Prints the
    /// plan; writes it only with --execute.
    ResetOffsets {
        /// The group id.
        group: String,
        /// A topic, or `topic:0,2` for some of its partitions (repeatable).
        #[arg(long)]
        topic: Vec<String>,
        /// Every partition the group has committed offsets for.
        #[arg(long, conflicts_with = "topic")]
        all_topics: bool,
        /// The earliest offset (remote log included).
        #[arg(long, group = "to")]
        to_earliest: bool,
        /// The end of the log (the high watermark).
        #[arg(long, group = "to")]
        to_latest: bool,
        /// The committed offset, unchanged (commits it again).
        #[arg(long, group = "to")]
        to_current: bool,
        /// This offset.
        #[arg(long, group = "to")]
        to_offset: Option<i64>,
        /// The committed offset moved by N (negative: back).
        #[arg(long, group = "to", allow_hyphen_values = true)]
        shift_by: Option<i64>,
        /// The first offset at or after this RFC 3339 time (the end if none).
        #[arg(long, group = "to")]
        to_datetime: Option<String>,
        /// The first offset at or after this long ago, as an ISO 8601 duration
        /// `PnDTnHnMnS` (e.g. PT30M, P1DT2H).
        #[arg(long, group = "to")]
        by_duration: Option<String>,
        /// Bring offsets outside the log to its start or end (otherwise they are
        /// refused).
        #[arg(long)]
        clamp: bool,
        /// Write the new offsets (without it, only print them).
        #[arg(long)]
        execute: bool,
    },
    /// Delete a group without members and its committed offsets.
    Delete {
        /// The group id.
        group: String,
    },
}

/// Where `reset-offsets` moves each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Earliest,
    Latest,
    Current,
    Offset(i64),
    Shift(i64),
    Time(i64),
}

pub(crate) async fn run(
    client: Client,
    cmd: GroupCommand,
    output: OutputFormat,
) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::List => {
            let groups = client.list_groups().await?;
            match output {
                OutputFormat::Json => out::json(&json!(
                    groups
                        .iter()
                        .map(|g| json!({
                            "group": g.group_id,
                            "state": g.state,
                            "members": g.members,
                            "coordinator": g.coordinator,
                        }))
                        .collect::<Vec<_>>()
                ))?,
                OutputFormat::Text => {
                    let mut text = String::from("GROUP\tSTATE\tMEMBERS\tCOORDINATOR\n");
                    for g in groups {
                        text.push_str(&format!(
                            "{}\t{}\t{}\t{}\n",
                            g.group_id, g.state, g.members, g.coordinator
                        ));
                    }
                    out::print(&text)?;
                }
            }
        }
        GroupCommand::Describe { group } => describe(&client, &group, output).await?,
        GroupCommand::ResetOffsets {
            group,
            topic,
            all_topics,
            to_earliest,
            to_latest,
            to_current,
            to_offset,
            shift_by,
            to_datetime,
            by_duration,
            clamp,
            execute,
        } => {
            let target = if to_earliest {
                Target::Earliest
            } else if to_latest {
                Target::Latest
            } else if to_current {
                Target::Current
            } else if let Some(o) = to_offset {
                Target::Offset(o)
            } else if let Some(n) = shift_by {
                Target::Shift(n)
            } else if let Some(t) = to_datetime {
                Target::Time(crate::parse_rfc3339(&t)?)
            } else if let Some(d) = by_duration {
                let ago = parse_duration_ms(&d)?;
                Target::Time(chrono::Utc::now().timestamp_millis() - ago)
            } else {
                anyhow::bail!(
                    "say where to: --to-earliest, --to-latest, --to-current, --to-offset N, \
                     --shift-by N, --to-datetime T or --by-duration D"
                );
            };
            reset_offsets(
                &client, &group, &topic, all_topics, target, clamp, execute, output,
            )
            .await?;
        }
        GroupCommand::Delete { group } => {
            client.delete_group(&group).await?;
            eprintln!("group '{group}' deleted");
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)] // one per command-line option
async fn reset_offsets(
    client: &Client,
    group: &str,
    topics: &[String],
    all_topics: bool,
    target: Target,
    clamp: bool,
    execute: bool,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let d = client.describe_group(group).await?;
    if !d.members.is_empty() {
        anyhow::bail!(
            "group '{group}' is active ({} members, state {}): stop its consumers before resetting its offsets",
            d.members.len(),
            d.state
        );
    }
    let committed = client.committed_offsets(group).await?;
    // Which partitions: `topic`, `topic:0,2`, or every committed topic.
    let mut partitions: BTreeSet<(String, i32)> = BTreeSet::new();
    if all_topics {
        // As Kafka's tool: every partition the group has an offset for.
        partitions.extend(committed.keys().cloned());
    } else if topics.is_empty() {
        anyhow::bail!("say which: --topic T (or T:0,2), or --all-topics");
    }
    for spec in topics {
        let (t, list) = match spec.split_once(':') {
            Some((t, list)) => (t, Some(list)),
            None => (spec.as_str(), None),
        };
        let count = client.partition_count(t).await?;
        let chosen: Vec<i32> = match list {
            None => (0..count).collect(),
            Some(list) => list
                .split(',')
                .map(|p| {
                    let p: i32 = p
                        .trim()
                        .parse()
                        .map_err(|_| anyhow::anyhow!("'{spec}': partitions are numbers"))?;
                    anyhow::ensure!(
                        (0..count).contains(&p),
                        "'{spec}': topic '{t}' has {count} partitions"
                    );
                    Ok(p)
                })
                .collect::<anyhow::Result<_>>()?,
        };
        partitions.extend(chosen.into_iter().map(|p| (t.to_string(), p)));
    }
    let mut plan = BTreeMap::new();
    for (t, p) in partitions {
        let earliest = client.list_offset(&t, p, -2).await?.unwrap_or(0);
        let latest = client.list_offset(&t, p, -1).await?.unwrap_or(0);
        let current = committed.get(&(t.clone(), p)).copied();
        let need_current = || {
            current.ok_or_else(|| anyhow::anyhow!("{t}:{p} has no committed offset to start from"))
        };
        let offset = match target {
            Target::Earliest => earliest,
            Target::Latest => latest,
            Target::Current => need_current()?,
            Target::Offset(o) => o,
            Target::Shift(n) => need_current()? + n,
            Target::Time(ts) => client.list_offset(&t, p, ts).await?.unwrap_or(latest),
        };
        let offset = if (earliest..=latest).contains(&offset) {
            offset
        } else if clamp {
            offset.clamp(earliest, latest)
        } else {
            anyhow::bail!(
                "{t}:{p}: offset {offset} is outside the log [{earliest}, {latest}]; \
                 add --clamp to move it to the nearest end"
            );
        };
        plan.insert((t, p), offset);
    }
    match output {
        OutputFormat::Json => out::json(&json!(plan
            .iter()
            .map(|((t, p), o)| json!({"group": group, "topic": t, "partition": p, "new_offset": o}))
            .collect::<Vec<_>>()))?,
        OutputFormat::Text => {
            let mut text = String::from("GROUP\tTOPIC\tPARTITION\tNEW-OFFSET\n");
            for ((t, p), o) in &plan {
                text.push_str(&format!("{group}\t{t}\t{p}\t{o}\n"));
            }
            out::print(&text)?;
        }
    }
    if execute {
        client.commit_group_offsets(group, &plan).await?;
        eprintln!("offsets of group '{group}' reset");
    } else {
        eprintln!("dry run: nothing changed; add --execute to apply");
    }
    Ok(())
}

/// An ISO 8601 duration `PnDTnHnMnS` (fractional seconds allowed), in ms.
fn parse_duration_ms(s: &str) -> anyhow::Result<i64> {
    let bad = || anyhow::anyhow!("'{s}' is not a duration like P1DT2H30M or PT45S");
    let rest = s.strip_prefix('P').ok_or_else(bad)?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut ms = 0f64;
    let mut any = false;
    for (part, units) in [
        (days, &[('D', 86_400_000f64)][..]),
        (
            time,
            &[('H', 3_600_000f64), ('M', 60_000f64), ('S', 1_000f64)][..],
        ),
    ] {
        let mut number = String::new();
        let mut next_unit = 0;
        for c in part.chars() {
            if c.is_ascii_digit() || c == '.' {
                number.push(c);
                continue;
            }
            let i = units[next_unit..]
                .iter()
                .position(|(u, _)| *u == c)
                .ok_or_else(bad)?
                + next_unit;
            let n: f64 = number.parse().map_err(|_| bad())?;
            ms += n * units[i].1;
            number.clear();
            next_unit = i + 1;
            any = true;
        }
        if !number.is_empty() {
            return Err(bad());
        }
    }
    if !any {
        return Err(bad());
    }
    Ok(ms as i64)
}

async fn describe(client: &Client, group: &str, output: OutputFormat) -> anyhow::Result<()> {
    let d = client.describe_group(group).await?;
    let committed = client.committed_offsets(group).await?;
    if d.members.is_empty() && committed.is_empty() {
        anyhow::bail!(
            "GROUP_ID_NOT_FOUND: group '{group}' has no members and no committed offsets"
        );
    }
    // Who holds each partition.
    let mut owner: BTreeMap<(String, i32), (String, String, String)> = BTreeMap::new();
    for m in &d.members {
        let parts = shale_records::consumer_protocol::decode_assignment(m.assignment.clone())
            .unwrap_or_default();
        for (topic, p) in parts {
            let holder = (
                m.member_id.clone(),
                m.client_id.clone(),
                m.client_host.clone(),
            );
            owner.insert((topic, p), holder);
        }
    }
    let mut keys: BTreeSet<(String, i32)> = committed.keys().cloned().collect();
    keys.extend(owner.keys().cloned());
    let mut rows = Vec::new();
    let mut total_lag = 0i64;
    for (t, p) in keys {
        let end = client.list_offset(&t, p, -1).await?.unwrap_or(0);
        let current = committed.get(&(t.clone(), p)).copied();
        let lag = current.map(|c| (end - c).max(0));
        total_lag += lag.unwrap_or(0);
        let holder = owner.get(&(t.clone(), p)).cloned();
        rows.push((t, p, current, end, lag, holder));
    }
    let protocol = if d.protocol_name.is_empty() {
        "-"
    } else {
        &d.protocol_name
    };
    match output {
        OutputFormat::Json => out::json(&json!({
            "group": group,
            "state": d.state,
            "generation": d.generation_id,
            "protocol": d.protocol_name,
            "members": d.members.iter().map(|m| json!({
                "member_id": m.member_id, "client_id": m.client_id, "host": m.client_host,
            })).collect::<Vec<_>>(),
            "partitions": rows.iter().map(|(t, p, current, end, lag, holder)| json!({
                "topic": t,
                "partition": p,
                "current_offset": current,
                "log_end_offset": end,
                "lag": lag,
                "member_id": holder.as_ref().map(|h| &h.0),
            })).collect::<Vec<_>>(),
            "total_lag": total_lag,
        })),
        OutputFormat::Text => {
            let mut text = format!(
                "Group '{group}': state {}, generation {}, protocol {protocol}, {} members\n\
                 TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tMEMBER-ID\tCLIENT-ID\tHOST\n",
                d.state,
                d.generation_id,
                d.members.len()
            );
            for (t, p, current, end, lag, holder) in rows {
                let (m, c, h) = holder.unwrap_or_else(|| ("-".into(), "-".into(), "-".into()));
                text.push_str(&format!(
                    "{t}\t{p}\t{}\t{end}\t{}\t{m}\t{c}\t{h}\n",
                    current.map_or("-".to_string(), |c| c.to_string()),
                    lag.map_or("-".to_string(), |l| l.to_string()),
                ));
            }
            text.push_str(&format!("TOTAL-LAG\t{total_lag}\n"));
            out::print(&text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_iso_8601() {
        assert_eq!(parse_duration_ms("PT30M").unwrap(), 30 * 60_000);
        assert_eq!(parse_duration_ms("P1DT2H").unwrap(), 26 * 3_600_000);
        assert_eq!(parse_duration_ms("PT1.5S").unwrap(), 1_500);
        assert_eq!(parse_duration_ms("P2D").unwrap(), 2 * 86_400_000);
        for bad in ["", "P", "PT", "30M", "PT5X", "PT1S2M", "P1H"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }
}
