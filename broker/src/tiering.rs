//! The tier on this broker: for every partition with `remote.storage.enable`, copy
//! sealed segments to the object store (see `shale_tiering::uploader` for the state
//! machine), apply total retention to the remote segments, and report status.
//!
//! A partition's [`RemoteState`] starts unloaded; the first pass cleans up what an
//! interrupted copy left behind and loads the finished segments from the metastore.
//! Until then, and again after any failed copy, local retention deletes nothing of
//! that partition, so an outage of the object store never loses data.
//!
//! Reading below the local log start from the object store is not built yet, so
//! `local.retention.*` are not enforced: local segments follow total retention.

use std::sync::Arc;

use shale_metastore::RemoteSegment;
use shale_tiering::uploader::{PartitionRef, SealedSegment};
use tokio::task::JoinSet;

use crate::broker::{Broker, now_ms};
use crate::error::{Error, Result};
use crate::partition::{Partition, RemoteState};

/// Tier status of one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TieringStatus {
    pub topic: String,
    pub partition: i32,
    pub enabled: bool,
    pub log_start_offset: i64,
    pub local_log_start_offset: i64,
    pub remote_log_start_offset: i64,
    /// -1 while nothing is uploaded.
    pub highest_uploaded_offset: i64,
    pub upload_lag_segments: u64,
    pub upload_lag_bytes: u64,
    pub remote_segments: u64,
    pub remote_bytes: u64,
}

fn partition_ref(p: &Partition) -> PartitionRef {
    PartitionRef {
        topic: p.topic.to_string(),
        topic_id: p.topic_id,
        partition: p.index,
    }
}

fn remote_state_of(finished: &[RemoteSegment]) -> RemoteState {
    RemoteState {
        loaded: true,
        start_offset: finished.first().map_or(-1, |s| s.base_offset),
        end_offset: finished.iter().map(|s| s.end_offset).max().unwrap_or(-1),
        segments: finished.len() as u64,
        bytes: finished.iter().map(|s| s.size_bytes as u64).sum(),
        retained_from: finished.first().map_or(-1, |s| s.base_offset),
    }
}

fn tiered_partitions(b: &Broker) -> Vec<Arc<Partition>> {
    b.all_partitions()
        .into_iter()
        .filter(|p| p.config().remote_storage_enable)
        .collect()
}

impl Broker {
    /// One pass: every tiered partition copies its pending sealed segments, at most
    /// `upload_concurrency` partitions at a time.
    pub(crate) async fn upload_pass(self: &Arc<Self>) -> Result<()> {
        let mut running = JoinSet::new();
        for p in tiered_partitions(self) {
            let permit = self
                .upload_permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|e| Error::Internal(e.to_string()))?;
            let broker = self.clone();
            running.spawn(async move {
                let _permit = permit;
                if let Err(e) = broker.tier_partition(&p).await {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "segment copy failed, will retry");
                }
            });
        }
        while running.join_next().await.is_some() {}
        Ok(())
    }

    async fn load_remote_state(&self, p: &Partition) -> Result<RemoteState> {
        let pref = partition_ref(p);
        self.uploader
            .clean_unfinished(&pref)
            .await
            .map_err(tier_error)?;
        let state = remote_state_of(
            &self
                .uploader
                .finished_segments(&pref)
                .await
                .map_err(tier_error)?,
        );
        p.set_remote_state(state);
        Ok(state)
    }

    async fn tier_partition(&self, p: &Partition) -> Result<()> {
        let _tier = p.tier_lock.lock().await;
        let mut state = p.remote_state();
        if !state.loaded {
            state = self.load_remote_state(p).await?;
        }
        let pref = partition_ref(p);
        for seg in p.sealed_segments_after(state.end_offset) {
            if self.cancel.is_cancelled() {
                break;
            }
            let sealed = SealedSegment {
                base_offset: seg.base_offset,
                end_offset: seg.end_offset,
                max_timestamp: seg.max_timestamp,
                leader_epoch: p.leader_epoch(),
                size_bytes: seg.size_bytes,
                log_path: seg.log_path,
                index_path: seg.index_path,
                time_index_path: seg.time_index_path,
            };
            match self.uploader.upload(&pref, &sealed).await {
                Ok(row) => {
                    if state.start_offset < 0 {
                        state.start_offset = row.base_offset;
                    }
                    state.end_offset = row.end_offset;
                    state.segments += 1;
                    state.bytes += row.size_bytes as u64;
                    p.set_remote_state(state);
                }
                Err(e) => {
                    // Reload (and clean up this attempt) before the next try.
                    p.set_remote_state(RemoteState {
                        loaded: false,
                        ..state
                    });
                    return Err(tier_error(e));
                }
            }
        }
        Ok(())
    }

    /// Total retention of the remote segments of every tiered partition: delete the
    /// oldest while they are past `retention.ms`, or while the whole log (remote plus
    /// local segments not yet uploaded) stays at or above `retention.bytes` without them.
    pub(crate) async fn remote_retention_pass(&self) -> Result<()> {
        let now = now_ms();
        for p in tiered_partitions(self) {
            if let Err(e) = self.remote_retention(&p, now).await {
                tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "remote retention failed");
            }
        }
        Ok(())
    }

    async fn remote_retention(&self, p: &Partition, now: i64) -> Result<()> {
        let _tier = p.tier_lock.lock().await;
        let config = p.config();
        let state = p.remote_state();
        if !state.loaded
            || state.segments == 0
            || (config.retention_ms < 0 && config.retention_bytes < 0)
        {
            return Ok(());
        }
        let pref = partition_ref(p);
        let finished = self
            .uploader
            .finished_segments(&pref)
            .await
            .map_err(tier_error)?;
        let local_only: u64 = p.bytes_after(state.end_offset);
        let mut total = state.bytes + local_only;
        let mut deleted = 0;
        for seg in &finished {
            let by_time = config.retention_ms >= 0 && seg.max_timestamp < now - config.retention_ms;
            let by_size = config.retention_bytes >= 0
                && total.saturating_sub(seg.size_bytes as u64) >= config.retention_bytes as u64;
            if !(by_time || by_size) {
                break;
            }
            self.uploader.delete(seg).await.map_err(tier_error)?;
            total = total.saturating_sub(seg.size_bytes as u64);
            deleted += 1;
            tracing::info!(topic = %p.topic, partition = p.index, base_offset = seg.base_offset,
                end_offset = seg.end_offset, "remote retention deleted segment");
        }
        if deleted > 0 {
            let mut next = remote_state_of(&finished[deleted..]);
            // Everything up to the old end stays uploaded, even if none of it is left;
            // everything before what is left is past retention, locally too.
            next.end_offset = next.end_offset.max(state.end_offset);
            next.retained_from = finished
                .get(deleted)
                .map_or(state.end_offset + 1, |s| s.base_offset);
            p.set_remote_state(next);
        }
        Ok(())
    }

    /// Tier status of every partition of `topic` (all topics if `None`).
    pub fn tiering_status(&self, topic: Option<&str>) -> Result<Vec<TieringStatus>> {
        let topics = match topic {
            Some(name) => vec![self.topic(name)?],
            None => self.topics_snapshot(),
        };
        let mut out = Vec::new();
        for t in topics {
            for p in &t.partitions {
                let remote = p.remote_state();
                let offsets = p.offsets();
                let pending = p.sealed_segments_after(remote.end_offset);
                out.push(TieringStatus {
                    topic: t.meta.name.clone(),
                    partition: p.index,
                    enabled: t.config.remote_storage_enable,
                    log_start_offset: offsets.log_start_offset,
                    local_log_start_offset: offsets.log_start_offset,
                    remote_log_start_offset: remote.start_offset,
                    highest_uploaded_offset: remote.end_offset,
                    upload_lag_segments: pending.len() as u64,
                    upload_lag_bytes: pending.iter().map(|s| s.size_bytes).sum(),
                    remote_segments: remote.segments,
                    remote_bytes: remote.bytes,
                });
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }
}

fn tier_error(e: shale_tiering::uploader::UploadError) -> Error {
    Error::Tiering(e)
}
