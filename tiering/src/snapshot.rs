//! What the bucket keeps of the cluster besides segments, so that a cluster whose
//! metastore is lost can be rebuilt from the bucket alone: every
//! `tiering.snapshot_interval_ms` the controller writes
//! `_shale/clusters/{cluster_id}.json` (topics, their configs and partitions' leader
//! epochs and log starts, and every group's committed offsets) and each broker writes
//! `_shale/brokers/{cluster_id}/{broker_id}.json` (the high watermark of each partition
//! it leads). A few objects a snapshot, each replaced whole (a PUT is atomic), and only
//! when its content changed. Each cluster writes under its own id, so a new cluster
//! started on the bucket of a lost one never overwrites what the restore needs.

use std::collections::BTreeMap;

use object_store::path::Path;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The first part of every key that is not a segment's.
pub const SNAPSHOT_DIR: &str = "_shale";

/// The version of the documents this code writes.
pub const SNAPSHOT_VERSION: u32 = 1;

pub fn cluster_snapshot_path(cluster_id: Uuid) -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/clusters/{cluster_id}.json"))
}

/// Where the clusters' snapshots are.
pub fn cluster_snapshots_dir() -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/clusters"))
}

pub fn broker_snapshot_path(cluster_id: Uuid, broker_id: i32) -> Path {
    Path::from(format!(
        "{SNAPSHOT_DIR}/brokers/{cluster_id}/{broker_id}.json"
    ))
}

/// Where the brokers' snapshots are, of every cluster.
pub fn broker_snapshots_dir() -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/brokers"))
}

/// Where a cluster that restored itself from the bucket says which clusters' snapshots
/// it replaces.
pub fn restored_marker_path(cluster_id: Uuid) -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/restored/{cluster_id}.json"))
}

pub fn restored_markers_dir() -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/restored"))
}

/// Where an unmounted topic's description is (`shale topic unmount`).
pub fn unmounted_path(topic_id: Uuid) -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/unmounted/{topic_id}.json"))
}

pub fn unmounted_dir() -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/unmounted"))
}

/// Which cluster a mounted topic belongs to (`shale topic mount` takes it, `shale
/// topic unmount` gives it up).
pub fn owner_path(topic_id: Uuid) -> Path {
    Path::from(format!("{SNAPSHOT_DIR}/owners/{topic_id}.json"))
}

/// `_shale/unmounted/{topic_id}.json`: a topic unmounted from a cluster, as a mount
/// brings it back. Its records are all in its segments' objects, up to `ends`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnmountedTopic {
    pub version: u32,
    /// The cluster it was unmounted from.
    pub cluster_id: Uuid,
    pub unmounted_at_ms: i64,
    pub topic: TopicSnapshot,
    /// Each partition's log end when it was unmounted (the offset its next record
    /// gets), by partition.
    pub ends: Vec<i64>,
    /// The groups' committed offsets in the topic.
    #[serde(default)]
    pub groups: Vec<GroupSnapshot>,
}

/// `_shale/owners/{topic_id}.json`: the cluster that mounted the topic and writes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerMarker {
    pub version: u32,
    pub cluster_id: Uuid,
    pub since_ms: i64,
}

/// `_shale/restored/{cluster_id}.json`: written by a whole restore once it is done.
/// The clusters it restored from speak no more: a topic or group the restored cluster
/// deleted since is not brought back from their older snapshots by a later restore.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RestoredMarker {
    pub version: u32,
    pub cluster_id: Uuid,
    pub restored_at_ms: i64,
    pub supersedes: Vec<Uuid>,
}

/// `_shale/clusters/{cluster_id}.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterSnapshot {
    pub version: u32,
    pub cluster_id: Uuid,
    pub taken_at_ms: i64,
    pub topics: Vec<TopicSnapshot>,
    pub groups: Vec<GroupSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicSnapshot {
    pub id: Uuid,
    pub name: String,
    pub partitions: i32,
    pub replication_factor: i32,
    /// Config overrides only (Kafka names).
    pub configs: BTreeMap<String, String>,
    pub created_at_ms: i64,
    /// Each partition's leader epoch, by partition.
    pub leader_epochs: Vec<i32>,
    /// Partitions whose records were deleted below an offset (DeleteRecords):
    /// partition → offset.
    #[serde(default)]
    pub log_starts: BTreeMap<i32, i64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSnapshot {
    pub group: String,
    pub offsets: Vec<GroupOffset>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupOffset {
    pub topic_id: Uuid,
    pub partition: i32,
    pub offset: i64,
    #[serde(default)]
    pub metadata: String,
    pub commit_ms: i64,
}

/// `_shale/brokers/{cluster_id}/{broker_id}.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerSnapshot {
    pub version: u32,
    pub cluster_id: Uuid,
    pub broker_id: i32,
    pub taken_at_ms: i64,
    /// The partitions the broker led when it wrote this.
    pub partitions: Vec<PartitionMark>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionMark {
    pub topic_id: Uuid,
    pub partition: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    /// The leader's log's epochs with the offset each starts at, oldest first: where
    /// it parts from the bucket's copies of an earlier leader (an unclean election
    /// whose new leader has not copied since) shows against them.
    #[serde(default)]
    pub epochs: Vec<(i32, i64)>,
}

/// The newest high watermark of each partition among brokers' snapshots (of any
/// cluster): the one written under the highest leader epoch (a broker that led
/// earlier may have left its snapshot behind), the higher mark within one epoch.
pub fn high_watermarks(brokers: &[BrokerSnapshot]) -> BTreeMap<(Uuid, i32), PartitionMark> {
    let mut out: BTreeMap<(Uuid, i32), PartitionMark> = BTreeMap::new();
    for mark in brokers.iter().flat_map(|b| &b.partitions) {
        let newer = |old: &PartitionMark| {
            (mark.leader_epoch, mark.high_watermark) > (old.leader_epoch, old.high_watermark)
        };
        match out.get(&(mark.topic_id, mark.partition)) {
            Some(old) if !newer(old) => {}
            _ => {
                out.insert((mark.topic_id, mark.partition), mark.clone());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_newest_epochs_mark_wins() {
        let t = Uuid::new_v4();
        let mark = |leader_epoch, high_watermark| PartitionMark {
            topic_id: t,
            partition: 0,
            leader_epoch,
            high_watermark,
            epochs: vec![(leader_epoch, 0)],
        };
        let broker = |id, partitions| BrokerSnapshot {
            version: SNAPSHOT_VERSION,
            cluster_id: Uuid::nil(),
            broker_id: id,
            taken_at_ms: 0,
            partitions,
        };
        // Broker 1 led at epoch 3 and left a higher mark than broker 2's at epoch 4
        // (records the later leader truncated); epoch 4 decides.
        let marks = high_watermarks(&[
            broker(1, vec![mark(3, 900)]),
            broker(2, vec![mark(4, 700)]),
            broker(3, vec![mark(4, 650)]),
        ]);
        assert_eq!(marks[&(t, 0)].high_watermark, 700);
        assert_eq!(marks.len(), 1);
    }
}
