//! The tier on this broker: for every partition with `remote.storage.enable`, copy
//! sealed segments to the object store (see `shale_tiering::uploader` for the state
//! machine), apply retention to the remote segments, serve reads below the local log
//! start from the object store (`shale_tiering::reader`), and report status.
//!
//! A partition's [`RemoteState`] (its remote read index) is loaded from the metastore
//! when the partition is opened, before the broker serves it; until then local
//! retention deletes nothing of that partition. Before its first upload, and after any
//! failed copy, the upload pass cleans up what unfinished copies left behind. Local
//! segments are deleted only once uploaded, so an outage of the object store never
//! loses data. All tier work on one partition is serialized by its `tier_lock`.
//!
//! # Leadership
//! Only the leader copies, and only segments wholly below the high watermark (so the
//! object store never holds a record a failover could take back). Followers re-read
//! the finished segments every pass, for their read index and local retention. A new
//! leader cleans up and re-reads before its first copy, then continues from the
//! highest finished offset; where that lies inside one of its local segments (replicas
//! roll segments at different offsets) it copies the rest of that segment as a
//! segment of its own, so the remote log has neither a gap nor an overlap.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use shale_metastore::RemoteSegment;
use shale_tiering::uploader::{PartitionRef, SealedSegment};
use tokio::task::JoinSet;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::partition::{Partition, RemoteState};

fn partition_ref(p: &Partition) -> PartitionRef {
    PartitionRef {
        topic: p.topic.to_string(),
        topic_id: p.topic_id,
        partition: p.index,
    }
}

/// The remote log as the metastore has it: its finished segments, and the highest
/// offset ever copied (which outlives the segments: once remote retention has deleted
/// them all, the local copies of what they held must be neither uploaded again nor
/// served).
pub(crate) fn remote_state_of(finished: Vec<RemoteSegment>, copied_end: i64) -> RemoteState {
    let end_offset = finished
        .iter()
        .map(|s| s.end_offset)
        .max()
        .unwrap_or(-1)
        .max(copied_end);
    let retained_from = match finished.first() {
        Some(s) => s.base_offset,
        None if end_offset >= 0 => end_offset + 1,
        None => -1,
    };
    RemoteState {
        loaded: true,
        needs_cleanup: false,
        end_offset,
        retained_from,
        segments: Arc::new(finished),
    }
}

/// How long a refresh waits for a partition's tier (a copy in progress) before leaving
/// the partition to the next refresh: a replica about to lead, before its fresh read
/// of the remote log, and a replica no longer assigned here, before it is deleted.
pub(crate) const TIER_WAIT: Duration = Duration::from_millis(500);

fn tiered_partitions(b: &Broker) -> Vec<Arc<Partition>> {
    b.all_partitions()
        .into_iter()
        .filter(|p| p.config().remote_storage_enable)
        .collect()
}

impl Broker {
    /// One pass: every tiered partition here seals an active segment whose first
    /// record is older than `segment.ms` or `tiering.max_local_only_ms` (an idle
    /// partition too: on the leader so that it is copied, on followers so that local
    /// retention can drop it once it is); every one this broker leads copies its
    /// pending sealed segments, at most `upload_concurrency` partitions at a time;
    /// followers with sealed segments not known to be copied yet re-read their remote
    /// logs (one read per topic), for local retention.
    pub(crate) async fn upload_pass(self: &Arc<Self>) -> Result<()> {
        let tiered = tiered_partitions(self);
        let max_local_only = self.config.tiering.max_local_only_ms as i64;
        let rolled = tiered.clone();
        tokio::task::spawn_blocking(move || {
            let now = now_ms();
            for p in rolled {
                // A read-only topic's last records go to the bucket at once (unmount).
                // (Any age: a batch's time may lie in the future.)
                let max_age = if p.config().read_only {
                    i64::MIN
                } else {
                    p.config().segment_ms.min(max_local_only)
                };
                match p.roll_if_older(max_age, now) {
                    Ok(true) => tracing::debug!(topic = %p.topic, partition = p.index, max_age,
                        "sealed an old active segment for upload"),
                    Ok(false) => {}
                    Err(e) => tracing::warn!(topic = %p.topic, partition = p.index, error = %e,
                        "cannot seal the active segment"),
                }
            }
        })
        .await?;
        let (leaders, followers): (Vec<_>, Vec<_>) =
            tiered.into_iter().partition(|p| p.is_leader());
        let waiting: Vec<Arc<Partition>> = followers
            .into_iter()
            .filter(|p| {
                let state = p.remote_state();
                state.loaded && p.has_sealed_after(state.end_offset)
            })
            .collect();
        self.read_remote_logs(waiting, true).await;
        let mut running = JoinSet::new();
        // Only partitions with something to do: a remote log to load or clean up, or a
        // sealed segment beyond it (most partitions of a broker with many have none).
        let busy = leaders.into_iter().filter(|p| {
            let state = p.remote_state();
            !state.loaded || state.needs_cleanup || p.has_sealed_after(state.end_offset)
        });
        for p in busy {
            let permit = self
                .tier
                .upload_permits
                .clone()
                .acquire_owned()
                .await
                .map_err(|_closed| Error::ShuttingDown)?;
            let broker = self.clone();
            running.spawn(self.tasks.track_future(async move {
                let _permit = permit;
                if let Err(e) = broker.tier_partition(&p).await {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "segment copy failed, will retry");
                }
            }));
        }
        while running.join_next().await.is_some() {}
        Ok(())
    }

    /// Loads the remote log of every tiered partition not loaded yet (at start, and
    /// for partitions opened since): one metastore read per topic. A failure is logged
    /// and retried by the next refresh.
    pub(crate) async fn load_remote_indexes(&self) {
        let unloaded = tiered_partitions(self)
            .into_iter()
            .filter(|p| !p.remote_state().loaded)
            .collect();
        self.read_remote_logs(unloaded, false).await;
    }

    /// Re-reads the remote logs of tiered partitions that this broker is about to lead
    /// at a new epoch, so that whether it takes the bucket over (see
    /// `Partition::apply_state`) is decided on the whole remote log: once the new
    /// epoch is in the metastore no copy made under an older one can finish, so this
    /// read holds every segment the bucket will keep from before. Returns the
    /// partitions whose remote log could not be read: they must not take the lead yet.
    /// A partition whose tier is busy (a copy this broker began under an older epoch,
    /// which can no longer finish) is left to the next refresh after
    /// [`TIER_WAIT`], so that it does not hold up the others.
    pub(crate) async fn read_remote_logs_before_leading(
        &self,
        parts: Vec<Arc<Partition>>,
    ) -> HashSet<(uuid::Uuid, i32)> {
        let tiered = parts
            .into_iter()
            .filter(|p| p.config().remote_storage_enable)
            .collect();
        self.read_remote_logs_waiting(tiered, true, Some(TIER_WAIT))
            .await
    }

    /// Reads the remote logs of `parts` from the metastore, one read per topic, and
    /// installs them (`refresh`: also over loaded ones). Returns the partitions whose
    /// read failed (logged; the next refresh tries again).
    pub(crate) async fn read_remote_logs(
        &self,
        parts: Vec<Arc<Partition>>,
        refresh: bool,
    ) -> HashSet<(uuid::Uuid, i32)> {
        self.read_remote_logs_waiting(parts, refresh, None).await
    }

    /// [`Broker::read_remote_logs`], waiting at most `tier_wait` (if given) for each
    /// partition's tier lock; a partition not locked in time counts as failed.
    async fn read_remote_logs_waiting(
        &self,
        parts: Vec<Arc<Partition>>,
        refresh: bool,
        tier_wait: Option<Duration>,
    ) -> HashSet<(uuid::Uuid, i32)> {
        let mut failed = HashSet::new();
        let mut by_topic: std::collections::BTreeMap<uuid::Uuid, Vec<Arc<Partition>>> =
            Default::default();
        for p in parts {
            by_topic.entry(p.topic_id).or_default().push(p);
        }
        for (topic_id, parts) in by_topic {
            let mut logs = match self.metastore.remote_logs(topic_id).await {
                Ok(logs) => logs,
                Err(e) => {
                    tracing::warn!(topic = %parts[0].topic, error = %e, "cannot read remote segments");
                    failed.extend(parts.iter().map(|p| (p.topic_id, p.index)));
                    continue;
                }
            };
            for p in parts {
                let _tier = match tier_wait {
                    None => p.tier_lock.lock().await,
                    Some(wait) => match tokio::time::timeout(wait, p.tier_lock.lock()).await {
                        Ok(guard) => guard,
                        Err(_elapsed) => {
                            tracing::info!(topic = %p.topic, partition = p.index,
                                "the tier is busy (a copy under an older epoch): reading the remote log at the next refresh");
                            failed.insert((p.topic_id, p.index));
                            continue;
                        }
                    },
                };
                let before = p.remote_state();
                if !refresh && before.loaded {
                    continue;
                }
                let log = logs.remove(&p.index).unwrap_or_default();
                // A cleanup already due stays due: a new leader's, or one after a
                // failure, may be newer than this metastore read.
                let state = RemoteState {
                    needs_cleanup: log.unfinished || (before.loaded && before.needs_cleanup),
                    ..remote_state_of(log.finished, log.copied_end)
                };
                p.set_remote_state(state);
                // A follower drops what the leader has copied as soon as it learns of it.
                let grew = refresh && p.remote_state().end_offset > before.end_offset;
                drop(_tier);
                if grew {
                    apply_local_retention(p.clone()).await;
                }
            }
        }
        failed
    }

    async fn load_remote_index_locked(&self, p: &Partition) -> Result<RemoteState> {
        let state = p.remote_state();
        if state.loaded {
            return Ok(state);
        }
        let state = RemoteState {
            needs_cleanup: true,
            ..self.read_remote_log(p).await?
        };
        p.set_remote_state(state);
        Ok(p.remote_state())
    }

    /// A leader whose log stops matching the remote log at `from` cuts the remote log
    /// there. An unclean election gave it less than the bucket holds, or other records
    /// at the same offsets: what lies above `from` was given up with that election, and
    /// left in place it would be served for this leader's own records at those offsets,
    /// taken for copies of them by local retention, and block this leader's copies.
    async fn cut_remote_log(&self, p: &Partition, from: i64) -> Result<()> {
        let epoch = p.leader_epoch();
        if !p.is_leader() {
            return Ok(());
        }
        let changed = self
            .metastore
            .truncate_remote_log(p.topic_id, p.index, from, epoch)
            .await?;
        tracing::warn!(topic = %p.topic, partition = p.index, from, epoch, rows = changed,
            "the remote log diverges from this leader's log (an unclean election): cutting it there");
        self.tier
            .uploader
            .clean_unfinished(&partition_ref(p))
            .await
            .map_err(Error::Tiering)?;
        p.set_remote_state(self.read_remote_log(p).await?);
        Ok(())
    }

    /// The partition's remote log, read from the metastore.
    async fn read_remote_log(&self, p: &Partition) -> Result<RemoteState> {
        let pref = partition_ref(p);
        let finished = self
            .tier
            .uploader
            .finished_segments(&pref)
            .await
            .map_err(Error::Tiering)?;
        let copied_end = self
            .tier
            .uploader
            .remote_log_end_offset(&pref)
            .await
            .map_err(Error::Tiering)?;
        Ok(remote_state_of(finished, copied_end))
    }

    async fn tier_partition(&self, p: &Arc<Partition>) -> Result<()> {
        let copied = self.copy_sealed_segments(p).await;
        // What was just copied may leave the local disk now (`local.retention.*`),
        // not at the next retention check.
        if copied.as_ref().is_ok_and(|n| *n > 0) {
            apply_local_retention(p.clone()).await;
        }
        copied.map(drop)
    }

    /// Copies the partition's pending sealed segments; returns how many.
    async fn copy_sealed_segments(&self, p: &Arc<Partition>) -> Result<usize> {
        let _tier = p.tier_lock.lock().await;
        let mut state = self.load_remote_index_locked(p).await?;
        let pref = partition_ref(p);
        if state.needs_cleanup {
            self.tier
                .uploader
                .clean_unfinished(&pref)
                .await
                .map_err(Error::Tiering)?;
            // Another leader may have finished copies since this broker last looked.
            if let Some(from) = p.set_remote_state(self.read_remote_log(p).await?)
                && let Err(e) = self.cut_remote_log(p, from).await
            {
                // The next pass re-reads and cuts again.
                p.set_remote_state(RemoteState {
                    needs_cleanup: true,
                    ..p.remote_state()
                });
                return Err(e);
            }
            state = p.remote_state();
        }
        // Only stable offsets are copied: a remote segment never holds records of a
        // transaction still undecided.
        let committed = p.last_stable_offset();
        let epoch = p.leader_epoch();
        let mut copied = 0;
        for seg in p.sealed_segments_after(state.end_offset) {
            if self.cancel.is_cancelled() || seg.end_offset >= committed {
                break;
            }
            // A deposed leader stops: the next leader copies from where the remote log
            // ends (an unfinished copy of ours is cleaned up by it).
            if !p.is_leader() || p.leader_epoch() != epoch {
                tracing::info!(topic = %p.topic, partition = p.index,
                    "no longer leading at the epoch the copies began in, stopping them");
                break;
            }
            // The remote log ends inside this segment: copy the rest of it.
            let tail_dir;
            let is_tail = seg.base_offset <= state.end_offset;
            let seg = if is_tail {
                tail_dir = tempfile_dir(&self.config.data_dir)?;
                let (seg, from, dir) = (seg, state.end_offset + 1, tail_dir.clone());
                let interval = p.config().index_interval_bytes.max(0) as u64;
                tokio::task::spawn_blocking(move || {
                    shale_log::export_segment_tail(&seg, from, &dir, interval)
                })
                .await
                .map_err(Error::from)??
            } else {
                tail_dir = std::path::PathBuf::new();
                seg
            };
            let _cleanup = RemoveOnDrop(tail_dir);
            let key_filter = {
                let (s, part) = (seg.clone(), p.clone());
                match tokio::task::spawn_blocking(move || {
                    if is_tail {
                        shale_log::ensure_key_filter(&s)
                    } else {
                        part.key_filter(&s).map(|(f, _)| f)
                    }
                })
                .await
                .map_err(Error::from)?
                {
                    Ok(f) => Some(bytes::Bytes::from(f.encode())),
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, base_offset = seg.base_offset,
                            error = %e, "cannot build the segment's key filter; copying it without one");
                        None
                    }
                }
            };
            let sealed = SealedSegment {
                base_offset: seg.base_offset,
                end_offset: seg.end_offset,
                max_timestamp: seg.max_timestamp,
                leader_epoch: epoch,
                size_bytes: seg.size_bytes,
                log_path: seg.log_path,
                index_path: seg.index_path,
                time_index_path: seg.time_index_path,
                key_filter,
                epochs: p.epochs_between(seg.base_offset, seg.end_offset),
                replaces: Vec::new(),
                aborted: p.aborted_markers_in(seg.base_offset, seg.end_offset),
                producer_snapshot: p.producer_snapshot_at(seg.end_offset + 1).await,
            };
            match self.tier.uploader.upload(&pref, &sealed).await {
                Ok(row) => {
                    if let Some(f) = sealed.key_filter {
                        self.tier.reader.remember_key_filter(row.segment_id, f);
                    }
                    state.end_offset = row.end_offset;
                    Arc::make_mut(&mut state.segments).push(row);
                    p.set_remote_state(state.clone());
                    state = p.remote_state();
                    copied += 1;
                }
                Err(e) => {
                    // Clean up this attempt before the next try.
                    p.set_remote_state(RemoteState {
                        needs_cleanup: true,
                        ..state
                    });
                    return Err(Error::Tiering(e));
                }
            }
        }
        Ok(copied)
    }

    /// Ranged GETs of remote reads since start, and the bytes they fetched.
    pub fn remote_read_stats(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (
            self.tier.reader.stats.gets.load(Relaxed),
            self.tier.reader.stats.bytes_fetched.load(Relaxed),
        )
    }
}

/// Local retention of one partition, on the blocking pool; a failure is logged (the
/// next retention check tries again).
async fn apply_local_retention(p: Arc<Partition>) {
    let result = tokio::task::spawn_blocking(move || {
        let r = p.apply_retention(now_ms());
        (p, r)
    })
    .await;
    if let Ok((p, Err(e))) = result {
        tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "local retention failed");
    }
}

/// A fresh directory under `{data_dir}/tier-tmp` for a segment tail being copied.
fn tempfile_dir(data_dir: &std::path::Path) -> Result<std::path::PathBuf> {
    let dir = data_dir
        .join(shale_log::layout::TIER_TMP_DIR)
        .join(uuid::Uuid::new_v4().simple().to_string());
    std::fs::create_dir_all(&dir).map_err(Error::Storage)?;
    Ok(dir)
}

/// Removes a temporary directory when dropped (nothing for an empty path).
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        if !self.0.as_os_str().is_empty() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

mod read;
mod retention;
pub(crate) use read::remote_read_error;

pub mod compact;
mod status;
pub use status::TieringStatus;
#[cfg(test)]
mod tests;
