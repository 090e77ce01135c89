//! Remote retention: the leader deletes a tiered partition's oldest remote segments
//! past its total retention, and every broker sweeps the remote data of deleted
//! topics.

use super::*;

impl Broker {
    /// Total retention of the remote segments of every tiered partition: delete the
    /// oldest while they are past `retention.ms`, or while the whole log (remote plus
    /// local segments not yet uploaded) stays at or above `retention.bytes` without them.
    pub(crate) async fn remote_retention_pass(&self) -> Result<()> {
        let now = now_ms();
        // Only the leader deletes (as only it copies); followers learn of deletions
        // when they next read the remote log.
        for p in tiered_partitions(self)
            .into_iter()
            .filter(|p| p.is_leader())
        {
            if let Err(e) = self.remote_retention(&p, now).await {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "remote retention failed");
            }
            // The grace period of segments remote compaction replaced.
            let grace = self.config.tiering.remote_compaction_delete_delay_ms as i64;
            match self
                .tier
                .uploader
                .delete_compacted(&partition_ref(&p), now, grace)
                .await
            {
                Ok(0) => {}
                Ok(n) => tracing::info!(topic = %p.topic, partition = p.index, segments = n,
                    "deleted remote segments replaced by remote compaction"),
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e,
                        "cannot delete remote segments replaced by remote compaction");
                    // A deletion left half done is finished by the upload pass's cleanup.
                    p.set_remote_state(RemoteState {
                        needs_cleanup: true,
                        ..p.remote_state()
                    });
                }
            }
        }
        Ok(())
    }

    /// Remote retention of one partition (the leader's): by time, by size, and every
    /// segment holding only records below the offset records were deleted below.
    pub(crate) async fn remote_retention(&self, p: &Partition, now: i64) -> Result<()> {
        let _tier = p.tier_lock.lock().await;
        let (retention_ms, retention_bytes) = p.config().total_retention();
        let state = p.remote_state();
        let deleted_below = p.deleted_below();
        // After a change of leader the index may name segments the last leader
        // replaced: the upload pass re-reads it first.
        if !state.loaded
            || state.needs_cleanup
            || state.segments.is_empty()
            || (retention_ms < 0 && retention_bytes < 0 && deleted_below == 0)
        {
            return Ok(());
        }
        let mut total = state.bytes() + p.bytes_after(state.end_offset);
        for (i, seg) in state.segments.iter().enumerate() {
            // Records without timestamps (-1, Kafka's NO_TIMESTAMP) age from their
            // upload instead, which is no earlier than their append.
            let time = if seg.max_timestamp >= 0 {
                seg.max_timestamp
            } else {
                seg.created_at_ms
            };
            let by_time = retention_ms >= 0 && time < now - retention_ms;
            let by_size = retention_bytes >= 0
                && total.saturating_sub(seg.size_bytes as u64) >= retention_bytes as u64;
            let deleted = seg.end_offset < deleted_below;
            if !(by_time || by_size || deleted) {
                break;
            }
            // Retire it from the read index first, so no fetch starts on it while it goes.
            let rest = state.segments[i + 1..].to_vec();
            p.set_remote_state(RemoteState {
                retained_from: rest.first().map_or(state.end_offset + 1, |s| s.base_offset),
                segments: Arc::new(rest),
                ..state.clone()
            });
            if let Err(e) = self.tier.uploader.delete(seg).await {
                // Perhaps no longer the segment the metastore has there: re-read it.
                p.set_remote_state(RemoteState {
                    needs_cleanup: true,
                    ..p.remote_state()
                });
                return Err(Error::Tiering(e));
            }
            total = total.saturating_sub(seg.size_bytes as u64);
            tracing::info!(topic = %p.topic, partition = p.index, base_offset = seg.base_offset,
                end_offset = seg.end_offset, "remote retention deleted segment");
        }
        Ok(())
    }

    /// Deletes the remote data of topics the metastore no longer has (deleted topics;
    /// also what an interrupted earlier sweep left). Runs after every topic deletion
    /// and with every retention pass.
    pub(crate) async fn sweep_deleted_topics(&self) -> Result<()> {
        let with_remote = self.metastore.remote_segment_topic_ids().await?;
        if with_remote.is_empty() {
            return Ok(());
        }
        // The metastore, not this broker's registry, says which topics exist.
        let live: std::collections::HashSet<uuid::Uuid> = self
            .metastore
            .list_topics()
            .await?
            .into_iter()
            .map(|t| t.id)
            .collect();
        for id in with_remote.into_iter().filter(|id| !live.contains(id)) {
            let n = self
                .tier
                .uploader
                .purge_topic(id)
                .await
                .map_err(Error::Tiering)?;
            tracing::info!(topic_id = %id, segments = n, "deleted remote segments of a deleted topic");
        }
        Ok(())
    }
}
