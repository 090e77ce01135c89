//! Tier status of a broker's partitions (`shale tiering status`, metrics).

use super::Broker;
use crate::error::Result;

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
    /// How long the oldest record not in the object store has been held only on local
    /// disk (0 when every record is uploaded, or the topic is not tiered).
    pub local_only_age_ms: i64,
    /// Where the cleaner stands (compacted topics).
    pub cleaner: Option<shale_log::Cleanable>,
    /// Whether this broker leads the partition, with its replica's high watermark and
    /// log end, and whether it takes writes (`read.only`): an unmount waits on the
    /// leaders until everything they hold is in the bucket.
    pub leader: bool,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub read_only: bool,
    /// Whether tier work (a copy, a remote compaction's upload and swap, retention)
    /// holds the partition's tier lock right now.
    pub busy: bool,
}

impl Broker {
    /// Tier status of every partition of `topic` (all topics if `None`).
    pub fn tiering_status(&self, topic: Option<&str>) -> Result<Vec<TieringStatus>> {
        let topics = match topic {
            Some(name) => vec![self.topic(name)?],
            None => self.topics_snapshot(),
        };
        let mut out = Vec::new();
        let now = crate::clock::now_ms();
        for t in topics {
            for p in t.partitions.iter().flatten() {
                let remote = p.remote_state();
                let offsets = p.offsets();
                let pending = p.sealed_segments_after(remote.end_offset);
                out.push(TieringStatus {
                    topic: t.meta.name.clone(),
                    partition: p.index,
                    enabled: t.config.remote_storage_enable,
                    log_start_offset: offsets.log_start_offset,
                    local_log_start_offset: offsets.local_log_start_offset,
                    remote_log_start_offset: remote.start_offset(),
                    highest_uploaded_offset: remote.end_offset,
                    upload_lag_segments: pending.len() as u64,
                    upload_lag_bytes: pending.iter().map(|s| s.size_bytes).sum(),
                    remote_segments: remote.segments.len() as u64,
                    remote_bytes: remote.bytes(),
                    local_only_age_ms: t
                        .config
                        .remote_storage_enable
                        .then(|| p.first_append_after(remote.end_offset))
                        .flatten()
                        .map_or(0, |first| (now - first).max(0)),
                    cleaner: t.config.cleanup_policy.compacts().then(|| p.cleanable(now)),
                    leader: p.is_leader(),
                    high_watermark: offsets.high_watermark,
                    log_end_offset: offsets.log_end_offset,
                    read_only: p.config().read_only,
                    busy: p.tier_lock.try_lock().is_err(),
                });
            }
        }
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }
}
