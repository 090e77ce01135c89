//! One topic of a restore: what its objects and the snapshots say, each partition's
//! remote log planned and cut where the last leader's log parts from it, and the
//! metastore rows that bring it back.

use std::collections::{BTreeMap, BTreeSet};

use shale_cluster::rules::{RemoteRange, remote_divergence};
use shale_metastore::{NewTopic, RemoteSegment, RemoteSegmentState, RestoredTopic};
use shale_tiering::ObjectStoreRef;
use shale_tiering::bucket::{self, Finding, FoundSegment, PartitionPlan};
use shale_tiering::snapshot::{PartitionMark, TopicSnapshot};
use uuid::Uuid;

use super::{RestoredPartitionReport, RestoredTopicReport};
use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::Result;

type Marks = BTreeMap<(Uuid, i32), PartitionMark>;

/// One topic as the bucket and the snapshots describe it.
pub(super) struct Planned {
    pub(super) id: Uuid,
    pub(super) name: String,
    /// The newest snapshot listing it, and when that was taken.
    pub(super) snapshot: Option<(TopicSnapshot, i64)>,
    pub(super) plans: BTreeMap<i32, PartitionPlan>,
    /// When the newest of its objects was written (0: it has none).
    pub(super) newest_object_ms: i64,
}

pub(super) enum Outcome {
    Planned(Planned),
    /// Not restored, and why (empty: not asked for).
    Skipped(Vec<String>),
    Damaged(Vec<Finding>),
}

/// Reads a topic's segments' descriptions and plans each partition's remote log.
pub(super) async fn plan_topic(
    store: &ObjectStoreRef,
    id: Uuid,
    mut partitions: BTreeMap<i32, Vec<FoundSegment>>,
    snapshot: Option<(TopicSnapshot, i64)>,
    wanted: &BTreeSet<&str>,
    writers_newest: Option<i64>,
) -> object_store::Result<Outcome> {
    let unwanted = |name: &str| !wanted.is_empty() && !wanted.contains(name);
    if snapshot.as_ref().is_some_and(|(t, _)| unwanted(&t.name)) {
        return Ok(Outcome::Skipped(Vec::new()));
    }
    for found in partitions.values_mut() {
        bucket::read_metas(store, found).await?;
    }
    let named = (partitions.values().flatten())
        .find_map(|f| f.meta.as_ref()?.as_ref().ok())
        .map(|m| m.topic.clone());
    let Some(name) = snapshot.as_ref().map(|(t, _)| t.name.clone()).or(named) else {
        return Ok(Outcome::Damaged(vec![Finding {
            object: format!("{id}/"),
            problem: "no segment of this topic has a readable .meta, and no snapshot names it"
                .into(),
        }]));
    };
    if unwanted(&name) {
        return Ok(Outcome::Skipped(Vec::new()));
    }
    let newest_object_ms = (partitions.values().flatten().map(|f| f.modified_ms)).max();
    // A topic no snapshot has, none of whose objects is newer than the last snapshot
    // of the clusters writing to the bucket, was deleted before it (its objects still
    // going): it stays deleted unless named.
    if let Some(taken) = writers_newest
        && snapshot.is_none()
        && wanted.is_empty()
        && newest_object_ms.is_some_and(|m| m < taken)
    {
        return Ok(Outcome::Skipped(vec![format!(
            "topic '{name}' ({id}): left out: no snapshot has it and none of its objects is \
             newer than the snapshot taken at {taken} ms, so it was deleted before; name it \
             with --topic to restore it"
        )]));
    }
    let mut plans = BTreeMap::new();
    let mut problems = Vec::new();
    for (p, found) in &partitions {
        match bucket::plan_partition(found) {
            Ok(plan) => {
                plans.insert(*p, plan);
            }
            Err(f) => problems.extend(f),
        }
    }
    if !problems.is_empty() {
        return Ok(Outcome::Damaged(problems));
    }
    Ok(Outcome::Planned(Planned {
        id,
        name,
        snapshot,
        plans,
        newest_object_ms: newest_object_ms.unwrap_or(0),
    }))
}

/// Keeps one topic of each name: the one the snapshots have, unless one they do not
/// have was written after them (the name was deleted and created again since; among
/// several, the newest objects); returns why the others are left out.
pub(super) fn one_per_name(planned: &mut Vec<Planned>) -> Vec<String> {
    let mut by_name: BTreeMap<String, Vec<Planned>> = BTreeMap::new();
    for t in planned.drain(..) {
        by_name.entry(t.name.clone()).or_default().push(t);
    }
    let mut ignored = Vec::new();
    for (name, mut same) in by_name {
        // Newer than every snapshot that has one of them: created since.
        let snapshot_at = (same.iter().filter_map(|t| t.snapshot.as_ref().map(|s| s.1))).max();
        same.sort_by_key(|t| {
            let recreated =
                t.snapshot.is_none() && snapshot_at.is_none_or(|at| t.newest_object_ms > at);
            std::cmp::Reverse((recreated, t.snapshot.is_some(), t.newest_object_ms))
        });
        let mut same = same.into_iter();
        let kept = same.next().expect("grouped by name");
        for other in same {
            ignored.push(format!(
                "topic '{name}' ({}): left out: an older topic of the name of {} (deleted, \
                 its objects still going)",
                other.id, kept.id
            ));
        }
        planned.push(kept);
    }
    ignored
}

impl Planned {
    /// Cuts each partition's remote log where the log of its last leader, as its
    /// broker's snapshot recorded it, parts from it: a leader elected uncleanly cuts
    /// the remote log in the metastore only, and the bucket shows the cut only once it
    /// copies after it. Only a snapshot at least as new as the bucket's copies (its
    /// epoch no lower than theirs) speaks for them, and only below its high watermark.
    pub(super) fn cut_where_the_last_leader_parts(&mut self, marks: &Marks) {
        for (p, plan) in &mut self.plans {
            let Some(mark) = marks.get(&(self.id, *p)) else {
                continue;
            };
            let Some((_, end)) = plan.range() else {
                continue;
            };
            let copied_under = plan.segments.iter().map(|(m, _)| m.leader_epoch).max();
            if mark.epochs.is_empty() || copied_under > Some(mark.leader_epoch) {
                continue;
            }
            let ranges: Vec<RemoteRange<'_>> = (plan.segments.iter())
                .map(|(m, end)| RemoteRange {
                    base: m.base_offset,
                    end: *end,
                    epochs: &m.epochs,
                })
                .collect();
            let from = remote_divergence(&ranges, end, &mark.epochs, mark.high_watermark);
            if let Some(from) = from.filter(|f| *f < mark.high_watermark && *f <= end) {
                tracing::warn!(topic = %self.name, partition = p, from,
                    "the last leader's log parts from the bucket's copies: cutting them there");
                plan.cut(from);
            }
        }
    }

    /// Where partition `p`'s log went on from before its snapshot's high watermark is
    /// considered: after its remote log, or, with none left, after the highest offset
    /// its objects' keys or its log start name.
    fn bucket_next(&self, p: i32) -> i64 {
        let plan = self.plans.get(&p);
        let log_start = (self.snapshot.as_ref())
            .and_then(|(s, _)| s.log_starts.get(&p).copied())
            .unwrap_or(0);
        match plan.and_then(PartitionPlan::range) {
            Some((_, end)) => end + 1,
            None => plan.map_or(0, |p| p.highest_named + 1).max(log_start),
        }
    }

    pub(super) fn ignored(&self) -> Vec<String> {
        (self.plans.values().flat_map(|p| &p.ignored))
            .map(Finding::to_string)
            .collect()
    }

    pub(super) fn report(
        &self,
        topic: &RestoredTopic,
        marks: &Marks,
        existed: bool,
    ) -> RestoredTopicReport {
        let partitions = (0..topic.topic.partitions)
            .map(|p| {
                let plan = self.plans.get(&p);
                let hw = marks.get(&(self.id, p)).map(|m| m.high_watermark);
                RestoredPartitionReport {
                    partition: p,
                    segments: plan.map_or(0, |p| p.segments.len()),
                    remote: plan.and_then(PartitionPlan::range),
                    next_offset: topic.copied_ends[p as usize] + 1,
                    leader_epoch: topic.leader_epochs[p as usize],
                    snapshot_high_watermark: hw,
                    lost_records: hw.map(|hw| (hw - self.bucket_next(p)).max(0)),
                }
            })
            .collect();
        RestoredTopicReport {
            name: self.name.clone(),
            id: self.id,
            existed,
            from_snapshot: self.snapshot.is_some(),
            partitions,
        }
    }
}

impl Broker {
    /// The metastore's description of a planned topic: the snapshot's name, configs,
    /// partition count and replication factor (else the segments' topic name, as many
    /// partitions as the bucket shows and the default replication factor;
    /// `replication_factor` if given); `remote.storage.enable=true` where it has
    /// segments; replicas placed as for a new topic; leader epochs above the bucket's
    /// and the snapshots'; each partition going on after its remote log, or, with none
    /// left, after the highest offset written before (no offset is used twice).
    pub(super) async fn restored_topic(
        &self,
        t: &Planned,
        replication_factor: Option<i32>,
        marks: &Marks,
    ) -> Result<RestoredTopic> {
        let in_bucket = t.plans.keys().max().map_or(0, |p| p + 1);
        let snapshot = t.snapshot.as_ref().map(|(s, _)| s);
        let (partitions, replication_factor_was, mut configs, created_at_ms) = match snapshot {
            Some(s) => (
                s.partitions.max(in_bucket),
                s.replication_factor,
                s.configs.clone(),
                s.created_at_ms,
            ),
            None => (
                in_bucket.max(1),
                self.config.cluster.default_replication_factor,
                BTreeMap::new(),
                now_ms(),
            ),
        };
        // A topic whose history is (or was) in the bucket stays tiered whatever the
        // brokers' default; one that was not tiered restarts at offset 0.
        let tiered = configs
            .get("remote.storage.enable")
            .is_none_or(|v| v == "true");
        if tiered {
            configs.insert("remote.storage.enable".into(), "true".into());
        }
        let replication_factor = replication_factor.unwrap_or(replication_factor_was);
        let assignments =
            (self.assign_replicas(&t.name, 0, partitions, replication_factor)).await?;
        let mut leader_epochs = Vec::new();
        let mut log_starts = Vec::new();
        let mut copied_ends = Vec::new();
        let mut segments = Vec::new();
        let mut leftovers: Vec<RemoteSegment> = Vec::new();
        for p in 0..partitions {
            let plan = t.plans.get(&p);
            let mark = marks.get(&(t.id, p));
            let epoch = [
                snapshot.and_then(|s| s.leader_epochs.get(p as usize).copied()),
                plan.map(|p| p.max_epoch),
                mark.map(|m| m.leader_epoch),
            ];
            leader_epochs.push(epoch.into_iter().flatten().max().unwrap_or(0) + 1);
            let mut next = t.bucket_next(p);
            if plan.and_then(PartitionPlan::range).is_none() {
                next = next.max(mark.map_or(0, |m| m.high_watermark));
            }
            if !tiered {
                next = 0;
            }
            copied_ends.push(next - 1);
            let deleted_below = snapshot
                .and_then(|s| s.log_starts.get(&p).copied())
                .unwrap_or(0);
            log_starts.push(deleted_below.min(next));
            let now = now_ms();
            for key in plan.iter().flat_map(|p| &p.leftovers) {
                if leftovers.iter().any(|l| l.segment_id == key.segment_id) {
                    continue;
                }
                leftovers.push(RemoteSegment {
                    segment_id: key.segment_id,
                    topic_id: t.id,
                    partition: p,
                    base_offset: key.base_offset,
                    end_offset: key.end_offset,
                    max_timestamp: -1,
                    leader_epoch: 0,
                    size_bytes: 0,
                    state: RemoteSegmentState::DeleteStarted,
                    created_at_ms: now,
                    updated_at_ms: now,
                    epochs: Vec::new(),
                    object_end_offset: key.end_offset,
                    aborted: Vec::new(),
                });
            }
            for mut row in plan.iter().flat_map(|plan| plan.rows(now)) {
                (row.topic_id, row.partition) = (t.id, p);
                segments.push(row);
            }
        }
        Ok(RestoredTopic {
            id: t.id,
            topic: NewTopic {
                name: t.name.clone(),
                partitions,
                replication_factor,
                configs,
                assignments,
            },
            created_at_ms,
            leader_epochs,
            log_starts,
            segments,
            copied_ends,
            leftovers,
        })
    }
}

#[cfg(test)]
mod tests {
    use shale_tiering::layout::SegmentMeta;

    use super::*;

    fn meta(base: i64, end: i64, epochs: &[(i32, i64)], copy: i32) -> SegmentMeta {
        SegmentMeta {
            topic: "t".into(),
            topic_id: Uuid::nil(),
            partition: 0,
            segment_id: Uuid::new_v4(),
            base_offset: base,
            end_offset: end,
            max_timestamp: 0,
            leader_epoch: copy,
            log_bytes: 0,
            index_bytes: 0,
            time_index_bytes: 0,
            log_crc32c: 0,
            index_crc32c: 0,
            time_index_crc32c: 0,
            key_filter: None,
            epochs: epochs.to_vec(),
            indexes: None,
            replaces: Some(Vec::new()),
            producer_snapshot_bytes: None,
            aborted: Vec::new(),
        }
    }

    fn planned() -> Planned {
        let plan = PartitionPlan {
            segments: vec![
                (meta(0, 99, &[(3, 0)], 3), 99),
                (meta(100, 199, &[(3, 100)], 3), 199),
            ],
            ..Default::default()
        };
        Planned {
            id: Uuid::nil(),
            name: "t".into(),
            snapshot: None,
            plans: BTreeMap::from([(0, plan)]),
            newest_object_ms: 0,
        }
    }

    fn marks(leader_epoch: i32, high_watermark: i64, epochs: &[(i32, i64)]) -> Marks {
        let mark = PartitionMark {
            topic_id: Uuid::nil(),
            partition: 0,
            leader_epoch,
            high_watermark,
            epochs: epochs.to_vec(),
        };
        BTreeMap::from([((Uuid::nil(), 0), mark)])
    }

    fn ends(t: &Planned) -> Vec<i64> {
        t.plans[&0].segments.iter().map(|(_, end)| *end).collect()
    }

    #[test]
    fn the_last_leaders_log_cuts_the_copies_it_does_not_share() {
        // Elected uncleanly at epoch 4 with a log that held epoch 3 only to 149: the
        // bucket's records from 150 are not its own.
        let mut t = planned();
        t.cut_where_the_last_leader_parts(&marks(4, 180, &[(3, 0), (4, 150)]));
        assert_eq!(ends(&t), [99, 149]);
        // A log that shares every copy cuts nothing, whatever came after.
        let mut t = planned();
        t.cut_where_the_last_leader_parts(&marks(4, 250, &[(3, 0), (4, 200)]));
        assert_eq!(ends(&t), [99, 199]);
        // Copies made after the snapshot (it knew only up to 150) are not cut by it.
        let mut t = planned();
        t.cut_where_the_last_leader_parts(&marks(3, 150, &[(3, 0)]));
        assert_eq!(ends(&t), [99, 199]);
        // A snapshot older than the bucket's copies does not speak for them.
        let mut t = planned();
        t.cut_where_the_last_leader_parts(&marks(2, 180, &[(2, 0)]));
        assert_eq!(ends(&t), [99, 199]);
    }
}
