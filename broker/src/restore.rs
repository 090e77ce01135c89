//! Restoring topics from the bucket alone (`shale cluster restore`): when the metastore
//! is lost, the segments' self-describing objects and the snapshots kept beside them
//! (`crate::snapshots`) bring back each topic with its id, name, configs and partition
//! count, each partition's remote log and leader-epoch lineage, its log start, and the
//! groups' committed offsets.
//!
//! Each partition's remote log is planned from its objects (`shale_tiering::bucket`);
//! a damaged bucket is refused before anything is written, naming the objects at
//! fault. The restored partitions start at leader epochs above every epoch their
//! objects name; their first leaders hold nothing locally, so they take the remote log
//! over and write on from its end. Records that only local logs held are lost: the
//! report says how many, per partition, from the last snapshot's high watermarks.
//! Committed offsets past a restored log's end are brought back to it, so the group
//! reads the first record written after the restore.

use std::collections::{BTreeMap, BTreeSet};

use shale_metastore::{
    CommittedOffset, NewTopic, RemoteSegment, RemoteSegmentState, RestoredTopic,
};
use shale_tiering::bucket::{self, BucketError, Finding, FoundSegment, PartitionPlan};
use shale_tiering::snapshot::{TopicSnapshot, high_watermarks};
use uuid::Uuid;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};

/// What to restore.
#[derive(Debug, Clone, Default)]
pub struct RestoreRequest {
    /// The bucket to restore from (`s3://bucket/prefix`, `file://…`): it must be the
    /// one the brokers are configured with. `None`: that one.
    pub from: Option<String>,
    /// Only these topics (default: every topic the bucket holds).
    pub topics: Vec<String>,
    /// Plan and report, write nothing.
    pub dry_run: bool,
    /// Every restored topic's replication factor (default: each topic's own, from the
    /// snapshot): a smaller cluster, or one broker on a laptop, can restore a bigger
    /// one's history.
    pub replication_factor: Option<i32>,
}

/// What a restore did (or, dry, would do).
#[derive(Debug, Clone, Default)]
pub struct RestoreReport {
    /// When the cluster snapshot used was taken (`None`: the bucket had none, and
    /// topics come back from their segments alone, with default configs).
    pub snapshot_taken_at_ms: Option<i64>,
    pub topics: Vec<RestoredTopicReport>,
    pub groups: Vec<RestoredGroupReport>,
    /// Objects left out, and why.
    pub ignored: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct RestoredTopicReport {
    pub name: String,
    pub id: Uuid,
    /// Whether its configs and partition count came from the snapshot.
    pub from_snapshot: bool,
    pub partitions: Vec<RestoredPartitionReport>,
}

#[derive(Debug, Clone)]
pub struct RestoredPartitionReport {
    pub partition: i32,
    pub segments: usize,
    /// The remote log's first and last offsets (`None`: no segment).
    pub remote: Option<(i64, i64)>,
    /// Where the partition's log goes on (the offset of its next record).
    pub next_offset: i64,
    /// The leader epoch it starts at.
    pub leader_epoch: i32,
    /// The high watermark the last snapshot recorded (`None`: none did).
    pub snapshot_high_watermark: Option<i64>,
    /// Records below that high watermark that are not in the bucket.
    pub lost_records: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct RestoredGroupReport {
    pub group: String,
    pub offsets: usize,
    /// Offsets past their restored log's end, brought back to it.
    pub moved_back: usize,
}

/// One topic as the bucket and the snapshot describe it.
struct Planned {
    id: Uuid,
    name: String,
    snapshot: Option<TopicSnapshot>,
    plans: BTreeMap<i32, PartitionPlan>,
}

fn refused(findings: &[Finding]) -> Error {
    let mut text = format!(
        "the bucket cannot be restored from: {} problem(s): ",
        findings.len()
    );
    let shown: Vec<String> = findings.iter().take(10).map(Finding::to_string).collect();
    text.push_str(&shown.join("; "));
    if findings.len() > 10 {
        text.push_str("; …");
    }
    Error::InvalidRequest(text)
}

fn store_error(e: object_store::Error) -> Error {
    Error::Tiering(e.into())
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

impl Broker {
    /// Restores topics from the bucket (see the module's description). Refuses, and
    /// writes nothing, when the bucket is damaged, a topic named exists, or `from` is
    /// not this cluster's bucket.
    pub async fn restore_from_bucket(&self, req: RestoreRequest) -> Result<RestoreReport> {
        let own = &self.config.object_store_url;
        if self.config.volatile_object_store() {
            return Err(Error::InvalidRequest(format!(
                "the object store {own} keeps nothing across restarts: there is nothing to restore"
            )));
        }
        if let Some(from) = &req.from
            && !same_url(from, own)
        {
            return Err(Error::InvalidRequest(format!(
                "restore reads the bucket the brokers are configured with ({own}), not {from}: \
                 start them with object_store_url = \"{from}\" to restore from it"
            )));
        }
        let store = self.tier.uploader.store().clone();
        let snapshots = match bucket::read_snapshots(&store, self.cluster_id()).await {
            Ok(s) => s,
            Err(BucketError::Damaged(f)) => return Err(refused(&[f])),
            Err(BucketError::Store(e)) => return Err(store_error(e)),
        };
        let mut listing = bucket::list_bucket(&store).await.map_err(store_error)?;
        let foreign: Vec<Finding> = (listing.foreign.iter())
            .map(|o| Finding {
                object: o.clone(),
                problem: "not an object of this layout (a segment's, or a snapshot)".into(),
            })
            .collect();
        if !foreign.is_empty() {
            return Err(refused(&foreign));
        }
        let snapshot_topics: BTreeMap<Uuid, TopicSnapshot> = (snapshots.cluster.iter())
            .flat_map(|c| c.topics.iter().map(|t| (t.id, t.clone())))
            .collect();
        let ids: BTreeSet<Uuid> = (listing.segments.keys().copied())
            .chain(snapshot_topics.keys().copied())
            .collect();
        let wanted: BTreeSet<&str> = req.topics.iter().map(String::as_str).collect();
        let mut planned: Vec<Planned> = Vec::new();
        let mut problems = Vec::new();
        let mut ignored = Vec::new();
        for id in ids {
            let mut partitions = listing.segments.remove(&id).unwrap_or_default();
            let snapshot = snapshot_topics.get(&id).cloned();
            // The name: from the snapshot, else from the segments' descriptions.
            let known = snapshot.as_ref().map(|t| t.name.clone());
            if known
                .as_deref()
                .is_some_and(|n| !wanted.is_empty() && !wanted.contains(n))
            {
                continue;
            }
            for found in partitions.values_mut() {
                bucket::read_metas(&store, found)
                    .await
                    .map_err(store_error)?;
            }
            let Some(name) = known.or_else(|| name_in(&partitions)) else {
                problems.push(Finding {
                    object: format!("{id}/"),
                    problem:
                        "no segment of this topic has a readable .meta, and no snapshot names it"
                            .into(),
                });
                continue;
            };
            if !wanted.is_empty() && !wanted.contains(name.as_str()) {
                continue;
            }
            // A topic the snapshot does not know, none of whose objects is newer than
            // the snapshot, was deleted before it (its objects still going): it stays
            // deleted unless named.
            let newest = (partitions.values().flatten().map(|f| f.modified_ms)).max();
            if let Some(c) = &snapshots.cluster
                && snapshot.is_none()
                && wanted.is_empty()
                && newest.is_some_and(|m| m < c.taken_at_ms)
            {
                ignored.push(format!(
                    "topic '{name}' ({id}): left out: the snapshot taken at {} ms does not \
                     have it and none of its objects is newer, so it was deleted before; \
                     name it with --topic to restore it",
                    c.taken_at_ms
                ));
                continue;
            }
            let mut plans = BTreeMap::new();
            for (p, found) in &partitions {
                match bucket::plan_partition(found) {
                    Ok(plan) => {
                        plans.insert(*p, plan);
                    }
                    Err(f) => problems.extend(f),
                }
            }
            if let Some(other) = planned.iter().find(|t| t.name == name) {
                problems.push(Finding {
                    object: format!("{id}/"),
                    problem: format!(
                        "a second topic '{name}' (the other is {}/), and no snapshot says \
                         which is current: remove the objects of the one not to restore",
                        other.id
                    ),
                });
                continue;
            }
            planned.push(Planned {
                id,
                name,
                snapshot,
                plans,
            });
        }
        if !problems.is_empty() {
            return Err(refused(&problems));
        }
        for name in &wanted {
            if !planned.iter().any(|t| t.name == *name) {
                return Err(Error::InvalidRequest(format!(
                    "topic '{name}' is in neither the bucket's snapshot nor its segments"
                )));
            }
        }
        for t in &planned {
            if self.metastore.get_topic(&t.name).await?.is_some() {
                return Err(Error::TopicAlreadyExists(t.name.clone()));
            }
        }
        let marks = high_watermarks(&snapshots.brokers);
        let mut report = RestoreReport {
            snapshot_taken_at_ms: snapshots.cluster.as_ref().map(|c| c.taken_at_ms),
            ignored,
            ..Default::default()
        };
        // Where each restored partition goes on, for the groups' offsets.
        let mut next_offsets: BTreeMap<(Uuid, i32), i64> = BTreeMap::new();
        for t in planned {
            let restored = self.restored_topic(&t, req.replication_factor).await?;
            let mut partitions = Vec::new();
            for (p, epoch) in restored.leader_epochs.iter().enumerate() {
                let p = p as i32;
                let plan = t.plans.get(&p);
                let remote = plan.and_then(PartitionPlan::range);
                let next_offset = remote.map_or(0, |(_, end)| end + 1);
                let mark = marks.get(&(t.id, p)).map(|m| m.high_watermark);
                next_offsets.insert((t.id, p), next_offset);
                report
                    .ignored
                    .extend((plan.iter().flat_map(|p| &p.ignored)).map(Finding::to_string));
                partitions.push(RestoredPartitionReport {
                    partition: p,
                    segments: plan.map_or(0, |p| p.segments.len()),
                    remote,
                    next_offset,
                    leader_epoch: *epoch,
                    snapshot_high_watermark: mark,
                    lost_records: mark.map(|hw| (hw - next_offset).max(0)),
                });
            }
            if !req.dry_run {
                self.metastore.restore_topic(restored).await?;
                tracing::warn!(topic = %t.name, id = %t.id, "restored topic from the bucket");
            }
            report.topics.push(RestoredTopicReport {
                name: t.name,
                id: t.id,
                from_snapshot: t.snapshot.is_some(),
                partitions,
            });
        }
        for group in snapshots.cluster.iter().flat_map(|c| &c.groups) {
            let mut moved_back = 0;
            let offsets: Vec<CommittedOffset> = (group.offsets.iter())
                .filter_map(|o| {
                    let next = *next_offsets.get(&(o.topic_id, o.partition))?;
                    moved_back += usize::from(o.offset > next);
                    Some(CommittedOffset {
                        topic_id: o.topic_id,
                        partition: o.partition,
                        offset: o.offset.min(next),
                        metadata: o.metadata.clone(),
                        commit_ms: o.commit_ms,
                    })
                })
                .collect();
            if offsets.is_empty() {
                continue;
            }
            if !req.dry_run {
                self.metastore
                    .commit_offsets(&group.group, &offsets, None)
                    .await?;
            }
            report.groups.push(RestoredGroupReport {
                group: group.group.clone(),
                offsets: offsets.len(),
                moved_back,
            });
        }
        if !req.dry_run {
            self.reconcile().await?;
        }
        Ok(report)
    }

    /// The metastore's description of a planned topic: the snapshot's name, configs,
    /// partition count and replication factor (else the segments' topic name,
    /// `remote.storage.enable=true`, as many partitions as the bucket shows and the
    /// default replication factor; `replication_factor` if given), replicas placed as
    /// for a new topic, leader epochs
    /// above the bucket's and the snapshot's.
    async fn restored_topic(
        &self,
        t: &Planned,
        replication_factor: Option<i32>,
    ) -> Result<RestoredTopic> {
        let in_bucket = t.plans.keys().max().map_or(0, |p| p + 1);
        let (partitions, replication_factor_was, configs, created_at_ms) = match &t.snapshot {
            Some(s) => (
                s.partitions.max(in_bucket),
                s.replication_factor,
                s.configs.clone(),
                s.created_at_ms,
            ),
            None => (
                in_bucket.max(1),
                self.config.cluster.default_replication_factor,
                BTreeMap::from([("remote.storage.enable".to_string(), "true".to_string())]),
                now_ms(),
            ),
        };
        let replication_factor = replication_factor.unwrap_or(replication_factor_was);
        let assignments =
            (self.assign_replicas(&t.name, 0, partitions, replication_factor)).await?;
        let mut leader_epochs = Vec::new();
        let mut log_starts = Vec::new();
        let mut segments = Vec::new();
        for p in 0..partitions {
            let plan = t.plans.get(&p);
            let snapshot_epoch = (t.snapshot.as_ref())
                .and_then(|s| s.leader_epochs.get(p as usize).copied())
                .unwrap_or(0);
            let bucket_epoch = plan.map_or(-1, |p| p.max_epoch);
            leader_epochs.push(snapshot_epoch.max(bucket_epoch) + 1);
            let next = plan
                .and_then(PartitionPlan::range)
                .map_or(0, |(_, end)| end + 1);
            let deleted_below = (t.snapshot.as_ref())
                .and_then(|s| s.log_starts.get(&p).copied())
                .unwrap_or(0);
            log_starts.push(deleted_below.min(next));
            let now = now_ms();
            for (meta, end) in plan.iter().flat_map(|p| &p.segments) {
                segments.push(RemoteSegment {
                    segment_id: meta.segment_id,
                    topic_id: t.id,
                    partition: p,
                    base_offset: meta.base_offset,
                    end_offset: *end,
                    max_timestamp: meta.max_timestamp,
                    leader_epoch: meta.leader_epoch,
                    size_bytes: meta.log_bytes as i64,
                    state: RemoteSegmentState::CopyFinished,
                    created_at_ms: now,
                    updated_at_ms: now,
                    epochs: meta
                        .epochs
                        .iter()
                        .copied()
                        .filter(|e| e.1 <= *end)
                        .collect(),
                    object_end_offset: meta.end_offset,
                });
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
        })
    }
}

/// The topic name the segments' descriptions give.
fn name_in(partitions: &BTreeMap<i32, Vec<FoundSegment>>) -> Option<String> {
    (partitions.values().flatten())
        .find_map(|f| f.meta.as_ref()?.as_ref().ok())
        .map(|m| m.topic.clone())
}
