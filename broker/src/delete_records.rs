//! DeleteRecords: moving a partition's log start offset up, so that the records below
//! it are gone from both tiers.
//!
//! The leader checks the offset (at most the high watermark; -1 means the high
//! watermark), raises the partition's log start in the metastore (which only ever
//! raises it), and then applies it to its own log: reads below it are out of range at
//! once, and sealed segments holding only records below it are deleted at once. Every
//! other replica applies it when it next reads the metastore (the change is announced
//! like any other partition change), and so does every later leader, so the start
//! never moves back, not even across a failover. Remote segments holding only records
//! below it are deleted by the next remote retention pass, which is started at once.

use std::sync::Arc;

use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::partition::Partition;

impl Broker {
    /// Deletes the records of `topic`/`partition` below `offset` (-1: the high
    /// watermark); returns the partition's log start offset afterwards (Kafka's low
    /// watermark).
    pub async fn delete_records(
        self: &Arc<Self>,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64> {
        let p = self.leader_partition(topic, partition)?;
        if !p.config().read_replica_of.is_empty() {
            let of = p.config().read_replica_of.clone();
            let topic = topic.to_string();
            return Err(Error::ReadReplica { topic, of });
        }
        if !self.lease_valid() {
            return Err(Error::LeaseLapsed);
        }
        let offsets = p.offsets();
        let target = match offset {
            -1 => offsets.high_watermark,
            o if (0..=offsets.high_watermark).contains(&o) => o,
            o => {
                return Err(Error::OffsetOutOfRange {
                    offset: o,
                    log_start: offsets.log_start_offset,
                    log_end: offsets.high_watermark,
                });
            }
        };
        if target <= offsets.log_start_offset {
            return Ok(offsets.log_start_offset);
        }
        let stored = self
            .metastore
            .advance_log_start(p.topic_id, p.index, target)
            .await?;
        let log_start = apply_deleted_below(p.clone(), stored).await?;
        if p.config().remote_storage_enable {
            let broker = self.clone();
            self.tasks.spawn(async move {
                if let Err(e) = broker.remote_retention(&p, crate::clock::now_ms()).await {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e,
                        "remote deletion after DeleteRecords failed; the next retention pass retries");
                }
            });
        }
        Ok(log_start)
    }
}

/// Deletes `p`'s local records below `offset` (on the blocking pool: it removes
/// files); returns the partition's log start afterwards.
async fn apply_deleted_below(p: Arc<Partition>, offset: i64) -> Result<i64> {
    tokio::task::spawn_blocking(move || {
        p.delete_records_below(offset)?;
        Ok(p.offsets().log_start_offset)
    })
    .await?
}
