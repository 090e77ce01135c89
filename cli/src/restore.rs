//! What `shale cluster restore` and `shale topic mount` print: per topic and partition, the remote log the
//! bucket holds, where the log goes on, and the records lost since the last snapshot.

use serde_json::json;
use shale_proto::v1::{MountTopicResponse, RestoreClusterResponse, RestoredTopic};

use crate::out::{self, OutputFormat};

/// `-1` (unknown) as JSON null.
fn known(v: i64) -> serde_json::Value {
    if v < 0 { json!(null) } else { json!(v) }
}

fn topic_json(t: &RestoredTopic) -> serde_json::Value {
    json!({
        "topic": t.name,
        "topic_id": t.topic_id,
        "from_snapshot": t.from_snapshot,
        "existed": t.existed,
        "partitions": t.partitions.iter().map(|p| json!({
            "partition": p.partition,
            "segments": p.segments,
            "remote_start_offset": known(p.remote_start_offset),
            "remote_end_offset": known(p.remote_end_offset),
            "next_offset": p.next_offset,
            "leader_epoch": p.leader_epoch,
            "snapshot_high_watermark": known(p.snapshot_high_watermark),
            "lost_records": known(p.lost_records),
        })).collect::<Vec<_>>(),
    })
}

const HEADER: &str =
    "TOPIC\tPARTITION\tSEGMENTS\tREMOTE OFFSETS\tNEXT OFFSET\tLEADER EPOCH\tLOST\n";

/// One line per partition; `mark` names what the lost records were counted against.
fn partition_rows(t: &RestoredTopic, mark: &str, text: &mut String) {
    for p in &t.partitions {
        let remote = match p.remote_end_offset {
            -1 => "-".to_string(),
            end => format!("{}..={end}", p.remote_start_offset),
        };
        let lost = match p.lost_records {
            -1 => format!("unknown (no {mark} of it)"),
            n => format!("{n} ({mark} {})", p.snapshot_high_watermark),
        };
        text.push_str(&format!(
            "{}\t{}\t{}\t{remote}\t{}\t{}\t{lost}\n",
            t.name, p.partition, p.segments, p.next_offset, p.leader_epoch
        ));
    }
}

/// What `shale topic mount` prints.
pub(crate) fn print_mount(r: &MountTopicResponse, output: OutputFormat) -> anyhow::Result<()> {
    let Some(t) = &r.topic else {
        anyhow::bail!("the broker's answer names no topic");
    };
    if output == OutputFormat::Json {
        return out::json(&json!({"topic": topic_json(t), "ignored": r.ignored}));
    }
    let mut text = String::from(HEADER);
    partition_rows(t, "log end at unmount", &mut text);
    for i in &r.ignored {
        text.push_str(&format!("left out {i}\n"));
    }
    text.push_str(&format!("mounted topic {} ({})\n", t.name, t.topic_id));
    out::print(&text)
}

pub(crate) fn print(
    r: &RestoreClusterResponse,
    dry_run: bool,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let lost: i64 = (r.topics.iter().flat_map(|t| &t.partitions))
        .map(|p| p.lost_records.max(0))
        .sum();
    if output == OutputFormat::Json {
        return out::json(&json!({
            "dry_run": dry_run,
            "snapshot_taken_at_ms": known(r.snapshot_taken_at_ms),
            "lost_records": lost,
            "topics": r.topics.iter().map(topic_json).collect::<Vec<_>>(),
            "groups": r.groups.iter().map(|g| json!({
                "group": g.group,
                "offsets": g.offsets,
                "moved_back": g.moved_back,
            })).collect::<Vec<_>>(),
            "ignored": r.ignored,
        }));
    }
    let mut text = String::new();
    let verb = if dry_run { "would restore" } else { "restored" };
    text.push_str(&match r.snapshot_taken_at_ms {
        -1 => "no cluster snapshot in the bucket: topics come back from their segments alone, \
               with remote.storage.enable=true and no other config; no group offsets\n"
            .to_string(),
        at => format!("cluster snapshot taken at {at} ms (Unix time)\n"),
    });
    text.push_str(HEADER);
    for t in r.topics.iter().filter(|t| t.existed) {
        text.push_str(&format!(
            "{}: restored by an earlier run, left as it is\n",
            t.name
        ));
    }
    for t in r.topics.iter().filter(|t| !t.existed) {
        partition_rows(t, "snapshot high watermark", &mut text);
    }
    for g in &r.groups {
        text.push_str(&format!(
            "group {}: {verb} {} committed offsets ({} moved back to their log's end)\n",
            g.group, g.offsets, g.moved_back
        ));
    }
    for i in &r.ignored {
        text.push_str(&format!("left out {i}\n"));
    }
    text.push_str(&format!(
        "{verb} {} topic(s); {lost} record(s) the last snapshot counted were not in the bucket and are lost\n",
        r.topics.len()
    ));
    out::print(&text)
}
