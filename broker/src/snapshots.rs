//! The snapshots a cluster keeps in its bucket beside the segments (see
//! `shale_tiering::snapshot`), so that the bucket alone can bring the cluster back:
//! every broker writes the high watermarks of the partitions it leads, and the
//! controller writes the topics, their configs, leader epochs and log starts, and
//! every group's committed offsets, each under the cluster's id. Each goes up when its
//! content changed; a broker's also at least every 5 minutes, as a sign of life.

use std::sync::Mutex;

use object_store::PutPayload;
use shale_tiering::snapshot::{
    BrokerSnapshot, ClusterSnapshot, GroupOffset, GroupSnapshot, PartitionMark, SNAPSHOT_VERSION,
    TopicSnapshot, broker_snapshot_path, cluster_snapshot_path,
};

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};

/// A broker whose snapshot is younger than this may still run: each writes its own
/// at least every half of it.
pub(crate) const ALIVE_MS: i64 = 600_000;

/// What this broker last wrote (with `taken_at_ms` 0, to compare contents), and when
/// it last wrote its own.
#[derive(Debug, Default)]
pub(crate) struct LastSnapshots {
    broker: Option<BrokerSnapshot>,
    broker_at_ms: i64,
    cluster: Option<ClusterSnapshot>,
}

impl Broker {
    /// One snapshot pass: this broker's high watermarks, and the cluster's metadata and
    /// group offsets if this broker is the controller.
    pub(crate) async fn snapshot_pass(&self, last: &Mutex<LastSnapshots>) -> Result<()> {
        if self.config.volatile_object_store() {
            return Ok(());
        }
        let mut partitions: Vec<PartitionMark> = (self.all_partitions().iter())
            .filter(|p| p.is_leader())
            .map(|p| PartitionMark {
                topic_id: p.topic_id,
                partition: p.index,
                leader_epoch: p.leader_epoch(),
                high_watermark: p.high_watermark(),
                epochs: p.epoch_lineage(),
            })
            .collect();
        partitions.sort_by_key(|m| (m.topic_id, m.partition));
        let broker = BrokerSnapshot {
            version: SNAPSHOT_VERSION,
            cluster_id: self.cluster_id(),
            broker_id: self.config.broker_id,
            taken_at_ms: 0,
            partitions,
        };
        let (previous, at) = {
            let last = last.lock().expect("not poisoned");
            (last.broker.clone(), last.broker_at_ms)
        };
        // Written again, unchanged, as a sign of life: a restore refuses to take over
        // a bucket whose brokers wrote to it lately.
        let now = now_ms();
        if previous.as_ref() != Some(&broker) || now - at >= ALIVE_MS / 2 {
            let path = broker_snapshot_path(self.cluster_id(), self.config.broker_id);
            let stamped = BrokerSnapshot {
                taken_at_ms: now,
                ..broker.clone()
            };
            self.put_json(&path, &stamped).await?;
            let mut last = last.lock().expect("not poisoned");
            (last.broker, last.broker_at_ms) = (Some(broker), now);
        }
        let controller = self.metastore.controller().await?;
        if !controller.is_some_and(|c| c.broker_id == self.config.broker_id && c.remaining_ms > 0) {
            return Ok(());
        }
        // Stamped with when the metastore was read: what changed after (an unmount)
        // is newer than the snapshot.
        let taken = now_ms();
        let cluster = self.cluster_snapshot().await?;
        let previous = last.lock().expect("not poisoned").cluster.clone();
        if previous.as_ref() != Some(&cluster) {
            let stamped = ClusterSnapshot {
                taken_at_ms: taken,
                ..cluster.clone()
            };
            self.put_json(&cluster_snapshot_path(self.cluster_id()), &stamped)
                .await?;
            last.lock().expect("not poisoned").cluster = Some(cluster);
        }
        Ok(())
    }

    pub(crate) async fn put_json<T: serde::Serialize>(
        &self,
        path: &object_store::path::Path,
        doc: &T,
    ) -> Result<()> {
        let json = serde_json::to_vec_pretty(doc).expect("snapshots serialize");
        let store = self.tier.uploader.store();
        store
            .put(path, PutPayload::from(json))
            .await
            .map_err(|e| Error::Tiering(e.into()))?;
        Ok(())
    }

    /// The topics, their partitions' epochs and log starts, and the groups' offsets,
    /// as the metastore has them now (`taken_at_ms` 0).
    pub(crate) async fn cluster_snapshot(&self) -> Result<ClusterSnapshot> {
        let m = &self.metastore;
        let topics = m.list_topics().await?;
        let states = m.list_partition_states().await?;
        let starts = m.log_start_offsets().await?;
        let topics = topics
            .into_iter()
            .map(|t| {
                let mut leader_epochs = vec![0; t.partitions.max(0) as usize];
                for s in states.iter().filter(|s| s.topic_id == t.id) {
                    if let Some(e) = leader_epochs.get_mut(s.partition as usize) {
                        *e = s.leader_epoch;
                    }
                }
                let log_starts = (starts.iter())
                    .filter(|(id, _, offset)| *id == t.id && *offset > 0)
                    .map(|(_, p, offset)| (*p, *offset))
                    .collect();
                TopicSnapshot {
                    id: t.id,
                    name: t.name,
                    partitions: t.partitions,
                    replication_factor: t.replication_factor,
                    configs: t.configs,
                    created_at_ms: t.created_at_ms,
                    leader_epochs,
                    log_starts,
                }
            })
            .collect();
        let mut groups = Vec::new();
        for group in m.offset_groups().await? {
            let offsets = (m.committed_offsets(&group).await?.into_iter())
                .map(|c| GroupOffset {
                    topic_id: c.topic_id,
                    partition: c.partition,
                    offset: c.offset,
                    metadata: c.metadata,
                    commit_ms: c.commit_ms,
                })
                .collect();
            groups.push(GroupSnapshot { group, offsets });
        }
        Ok(ClusterSnapshot {
            version: SNAPSHOT_VERSION,
            cluster_id: self.cluster_id(),
            taken_at_ms: 0,
            topics,
            groups,
        })
    }
}
