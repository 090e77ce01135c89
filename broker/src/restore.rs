//! Restoring topics from the bucket alone (`shale cluster restore`): when the metastore
//! is lost, the segments' self-describing objects and the snapshots kept beside them
//! (`crate::snapshots`) bring back each topic with its id, name, configs and partition
//! count, each partition's remote log and leader-epoch lineage, its log start, and the
//! groups' committed offsets.
//!
//! Each partition's remote log is planned from its objects (`shale_tiering::bucket`),
//! then cut where the last leader's log, as its broker's snapshot recorded it, parts
//! from it (an unclean election whose new leader had not copied since). A damaged
//! bucket is refused before anything is written, naming the objects at fault; every
//! topic is then written in one metastore transaction. The restored partitions start
//! at leader epochs above every epoch their objects and snapshots name; their first
//! leaders hold nothing locally, so they take the remote log over and write on from
//! its end (a partition whose segments all expired goes on after the highest offset
//! the bucket or the snapshot names, so no offset is used twice). Records that only
//! local logs held are lost: the report says how many, per partition, from the
//! snapshots' high watermarks. Committed offsets past a restored log's end are brought
//! back to it, so the group reads the first record written after the restore.
//!
//! Snapshots of every cluster that wrote to the bucket are merged: each topic as the
//! newest snapshot that lists it, each group likewise. A topic no snapshot lists, none
//! of whose objects is newer than the newest snapshot of a cluster that wrote any of
//! the bucket's topics, was deleted before it and stays deleted unless named. A
//! restore run again after a failure skips the topics it restored already (same name
//! and id) and restores the groups' offsets.

mod mount;
mod plan;

pub use mount::{MountReport, MountRequest};

use std::collections::{BTreeMap, BTreeSet};

use shale_metastore::CommittedOffset;
use shale_tiering::bucket::{self, BucketError, Finding};
use shale_tiering::snapshot::{
    GroupSnapshot, RestoredMarker, SNAPSHOT_VERSION, TopicSnapshot, high_watermarks,
    restored_marker_path,
};
use uuid::Uuid;

use self::plan::Planned;

use crate::broker::Broker;
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
    /// Restore although another cluster's brokers wrote to the bucket lately (they
    /// may still run: two clusters would write one history).
    pub force: bool,
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
    /// Restored by an earlier run (only its groups' offsets were restored now).
    pub existed: bool,
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

/// The snapshots of every cluster, merged: each topic and each group as the newest
/// snapshot holding it has it.
struct Merged {
    /// Each topic with when the snapshot holding it was taken.
    topics: BTreeMap<Uuid, (TopicSnapshot, i64)>,
    groups: BTreeMap<String, GroupSnapshot>,
    /// When the newest snapshot of a cluster that wrote any topic of the bucket was
    /// taken (topics no snapshot lists and older than it were deleted before it).
    writers_newest: Option<i64>,
    /// When the newest snapshot was taken.
    newest: Option<i64>,
}

fn merge(clusters: &[shale_tiering::snapshot::ClusterSnapshot], ids: &BTreeSet<Uuid>) -> Merged {
    let mut merged = Merged {
        topics: BTreeMap::new(),
        groups: BTreeMap::new(),
        writers_newest: None,
        newest: clusters.first().map(|c| c.taken_at_ms),
    };
    // Newest first: the first to hold a topic or a group has it as it was last.
    for c in clusters {
        for t in &c.topics {
            (merged.topics.entry(t.id)).or_insert_with(|| (t.clone(), c.taken_at_ms));
        }
        for g in &c.groups {
            merged
                .groups
                .entry(g.group.clone())
                .or_insert_with(|| g.clone());
        }
        if merged.writers_newest.is_none() && c.topics.iter().any(|t| ids.contains(&t.id)) {
            merged.writers_newest = Some(c.taken_at_ms);
        }
    }
    merged
}

impl Broker {
    /// Records that this cluster replaces the clusters it restored from (see
    /// `RestoredMarker`), with those an earlier run recorded.
    async fn mark_restored(
        &self,
        store: &shale_tiering::ObjectStoreRef,
        mut supersedes: BTreeSet<Uuid>,
    ) -> Result<()> {
        let path = restored_marker_path(self.cluster_id());
        if let Ok(got) = store.get(&path).await
            && let Ok(bytes) = got.bytes().await
            && let Ok(earlier) = serde_json::from_slice::<RestoredMarker>(&bytes)
        {
            supersedes.extend(earlier.supersedes);
        }
        let marker = RestoredMarker {
            version: SNAPSHOT_VERSION,
            cluster_id: self.cluster_id(),
            restored_at_ms: crate::clock::now_ms(),
            supersedes: supersedes.into_iter().collect(),
        };
        self.put_json(&path, &marker).await
    }

    /// Restores topics from the bucket (see the module's description). Refuses, and
    /// writes nothing, when the bucket is damaged, a topic named exists with another
    /// id, or `from` is not this cluster's bucket.
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
        let alive = (snapshots.brokers.iter())
            .filter(|b| b.cluster_id != self.cluster_id())
            .filter(|b| crate::clock::now_ms() - b.taken_at_ms < crate::snapshots::ALIVE_MS)
            .max_by_key(|b| b.taken_at_ms);
        if let Some(b) = alive
            && !req.force
        {
            return Err(Error::InvalidRequest(format!(
                "broker {} of cluster {} wrote to the bucket {} s ago: that cluster may still be \
                 running, and two clusters would write one history; stop its brokers (or wait \
                 {} min after they stopped), or restore with --force",
                b.broker_id,
                b.cluster_id,
                (crate::clock::now_ms() - b.taken_at_ms) / 1000,
                crate::snapshots::ALIVE_MS / 60_000
            )));
        }
        let mut listing = bucket::list_bucket(&store, None)
            .await
            .map_err(store_error)?;
        let foreign: Vec<Finding> = (listing.foreign.iter())
            .map(|o| Finding {
                object: o.clone(),
                problem: "not an object of this layout (a segment's, or a snapshot)".into(),
            })
            .collect();
        if !foreign.is_empty() {
            return Err(refused(&foreign));
        }
        let in_bucket: BTreeSet<Uuid> = listing.segments.keys().copied().collect();
        let merged = merge(&snapshots.clusters, &in_bucket);
        let wanted: BTreeSet<&str> = req.topics.iter().map(String::as_str).collect();
        let mut report = RestoreReport {
            snapshot_taken_at_ms: merged.newest,
            ..Default::default()
        };
        let mut planned: Vec<Planned> = Vec::new();
        let mut problems = Vec::new();
        let ids: BTreeSet<Uuid> = in_bucket
            .iter()
            .chain(merged.topics.keys())
            .copied()
            .collect();
        for id in ids {
            let partitions = listing.segments.remove(&id).unwrap_or_default();
            let snapshot = merged.topics.get(&id).cloned();
            match plan::plan_topic(
                &store,
                id,
                partitions,
                snapshot,
                &wanted,
                merged.writers_newest,
            )
            .await
            .map_err(store_error)?
            {
                plan::Outcome::Planned(t) => planned.push(t),
                plan::Outcome::Skipped(why) => report.ignored.extend(why),
                plan::Outcome::Damaged(f) => problems.extend(f),
            }
        }
        if !problems.is_empty() {
            return Err(refused(&problems));
        }
        report.ignored.extend(plan::one_per_name(&mut planned));
        for name in &wanted {
            if !planned.iter().any(|t| t.name == *name) {
                return Err(Error::InvalidRequest(format!(
                    "topic '{name}' is in neither the bucket's snapshots nor its segments"
                )));
            }
        }
        // A topic mounted by a cluster that still runs is that cluster's.
        let alive: BTreeSet<Uuid> = (snapshots.brokers.iter())
            .filter(|b| b.cluster_id != self.cluster_id())
            .filter(|b| crate::clock::now_ms() - b.taken_at_ms < crate::snapshots::ALIVE_MS)
            .map(|b| b.cluster_id)
            .collect();
        let unmounted = mount::unmounted_at(&store).await?;
        let mut owned = Vec::new();
        for t in planned.drain(..) {
            let named = wanted.contains(t.name.as_str());
            // Unmounted after the snapshot that has it: it is for a mount to bring back.
            let snapshot_at = t.snapshot.as_ref().map_or(0, |s| s.1);
            if let Some(at) = unmounted
                .get(&t.id)
                .filter(|at| **at > snapshot_at && !named)
            {
                report.ignored.push(format!(
                    "topic '{}' ({}): left out: unmounted at {at} ms; mount it with shale topic \
                     mount {}, or name it with --topic to restore it",
                    t.name, t.id, t.name
                ));
                continue;
            }
            let marker = mount::owner(&store, t.id).await.unwrap_or_else(|e| {
                tracing::warn!(topic = %t.name, error = %e, "passing over an unreadable ownership marker");
                None
            });
            match marker {
                Some(o) if alive.contains(&o.cluster_id) && !named => {
                    report.ignored.push(format!(
                        "topic '{}' ({}): left out: mounted by cluster {}, which is running; \
                         name it with --topic to restore it",
                        t.name, t.id, o.cluster_id
                    ));
                }
                o => owned.push((t, o.is_some_and(|o| o.cluster_id != self.cluster_id()))),
            }
        }
        // Every check and every placement before the first write.
        let marks = high_watermarks(&snapshots.brokers);
        let mut restored = Vec::new();
        let mut next_offsets: BTreeMap<(Uuid, i32), i64> = BTreeMap::new();
        let mut take_over = Vec::new();
        for (mut t, owned_elsewhere) in owned {
            let existed = match self.metastore.get_topic(&t.name).await? {
                Some(have) if have.id == t.id => true,
                Some(_) => return Err(Error::TopicAlreadyExists(t.name.clone())),
                None => false,
            };
            t.cut_where_the_last_leader_parts(&marks);
            let topic = self
                .restored_topic(&t, req.replication_factor, &marks)
                .await?;
            for (p, next) in topic.copied_ends.iter().enumerate() {
                next_offsets.insert((t.id, p as i32), next + 1);
            }
            report.ignored.extend(t.ignored());
            report.topics.push(t.report(&topic, &marks, existed));
            if owned_elsewhere {
                take_over.push(t.id);
            }
            if !existed {
                restored.push(topic);
            }
        }
        if !req.dry_run && !restored.is_empty() {
            self.metastore.restore_topics(&restored).await?;
            for t in &restored {
                tracing::warn!(topic = %t.topic.name, id = %t.id, "restored topic from the bucket");
            }
        }
        // The topics a lost cluster had mounted are this one's now, and those restored
        // although unmounted are no longer for a mount.
        for id in take_over.iter().filter(|_| !req.dry_run) {
            self.take_ownership(&store, *id, true).await?;
        }
        for t in (restored.iter()).filter(|t| !req.dry_run && unmounted.contains_key(&t.id)) {
            let path = shale_tiering::snapshot::unmounted_path(t.id);
            if let Err(e) = store.delete(&path).await {
                tracing::warn!(topic = %t.topic.name, error = %e, "cannot delete the restored topic's description");
            }
        }
        for group in merged.groups.values() {
            // A partition the group committed in since (after an earlier run) keeps it.
            let since: BTreeSet<(Uuid, i32)> = (self.metastore.committed_offsets(&group.group))
                .await?
                .into_iter()
                .map(|c| (c.topic_id, c.partition))
                .collect();
            let mut moved_back = 0;
            let offsets: Vec<CommittedOffset> = (group.offsets.iter())
                .filter(|o| !since.contains(&(o.topic_id, o.partition)))
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
                (self.metastore)
                    .commit_offsets(&group.group, &offsets, None)
                    .await?;
            }
            report.groups.push(RestoredGroupReport {
                group: group.group.clone(),
                offsets: offsets.len(),
                moved_back,
            });
        }
        if !req.dry_run && req.topics.is_empty() && !snapshots.clusters.is_empty() {
            let replaced = snapshots.clusters.iter().map(|c| c.cluster_id).collect();
            if let Err(e) = self.mark_restored(&store, replaced).await {
                tracing::warn!(error = %e, "cannot record in the bucket which clusters this one was restored from");
            }
        }
        if !req.dry_run {
            self.reconcile().await?;
        }
        Ok(report)
    }
}
