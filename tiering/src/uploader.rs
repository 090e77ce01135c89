//! Copies sealed segments to the object store and keeps their metadata rows in step.
//!
//! One copy: insert the row `COPY_STARTED` → put `.log` (multipart above a threshold),
//! `.indexes` (the offset index, the time index and the key filter, if the segment has
//! one), then `.meta` → move the row to `COPY_FINISHED`. Readers see
//! only finished rows. Every attempt uses a fresh segment id, so object keys of two
//! attempts never collide. Remote compaction puts its rewrites the same way but leaves
//! their rows `COPY_STARTED` until it swaps them in (`Metastore::replace_remote_segments`);
//! the rows they replace become `COMPACTED` and are deleted after a grace period
//! ([`Uploader::delete_compacted`]).
//!
//! # Crash consistency
//! A crash or an object-store outage at any point leaves at worst a `COPY_STARTED` row
//! with some of its objects. [`Uploader::clean_unfinished`] (run before a partition's
//! uploads resume) deletes those objects and marks the row `DELETE_FINISHED`; the segment
//! is then copied again. Deletion goes `DELETE_STARTED` → delete objects (a missing
//! object counts as deleted) → `DELETE_FINISHED`, so it too can be resumed at any point.
//! Only one uploader may work on a partition at a time: the partition's leader.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use object_store::{PutPayload, WriteMultipart};
use shale_metastore::{Metastore, RemoteSegment, RemoteSegmentState};
use tokio::io::AsyncReadExt;
use uuid::Uuid;

use crate::layout::{KeyFilterObject, ObjectKind, SegmentIndexes, SegmentKey, SegmentMeta};
use crate::store::ObjectStoreRef;

/// A local segment that will never change again, ready to copy.
#[derive(Debug, Clone)]
pub struct SealedSegment {
    pub base_offset: i64,
    /// Inclusive.
    pub end_offset: i64,
    pub max_timestamp: i64,
    pub leader_epoch: i32,
    pub size_bytes: u64,
    pub log_path: PathBuf,
    pub index_path: PathBuf,
    pub time_index_path: PathBuf,
    /// The segment's key filter, encoded (`None`: copied without one).
    pub key_filter: Option<Bytes>,
    /// The leader epochs of its batches with the offset each starts at, oldest first.
    pub epochs: Vec<(i32, i64)>,
    /// The segments it replaces (a compacted rewrite's); empty for a copy of the log.
    pub replaces: Vec<Uuid>,
    /// The aborted transactions whose abort markers it holds.
    pub aborted: Vec<shale_metastore::RemoteAbortedTxn>,
    /// The producer state as of the offset after it (`None`: copied without).
    pub producer_snapshot: Option<Bytes>,
}

/// Which partition a segment belongs to.
#[derive(Debug, Clone)]
pub struct PartitionRef {
    pub topic: String,
    pub topic_id: Uuid,
    pub partition: i32,
}

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("cannot read {path}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("object store request failed: {0}")]
    Store(#[from] object_store::Error),
    #[error("metastore request failed: {0}")]
    Metastore(#[from] shale_metastore::Error),
}

/// Sizes of multipart uploads.
#[derive(Debug, Clone)]
pub struct UploaderConfig {
    /// Files larger than this go up in parts. Default: 32 MiB.
    pub multipart_threshold: u64,
    /// Size of one part. Default: 16 MiB.
    pub part_size: usize,
    /// Parts in flight at once for one file. Default: 4.
    pub part_concurrency: usize,
    /// The directory of a `file://` store: a segment's objects are fsynced there (files
    /// and directories) before its copy can finish. `None` for other stores.
    pub local_root: Option<PathBuf>,
}

impl Default for UploaderConfig {
    fn default() -> Self {
        Self {
            multipart_threshold: 32 << 20,
            part_size: 16 << 20,
            part_concurrency: 4,
            local_root: None,
        }
    }
}

pub struct Uploader {
    store: ObjectStoreRef,
    metastore: Arc<dyn Metastore>,
    config: UploaderConfig,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Uploader {
    pub fn new(
        store: ObjectStoreRef,
        metastore: Arc<dyn Metastore>,
        config: UploaderConfig,
    ) -> Self {
        Self {
            store,
            metastore,
            config,
        }
    }

    /// The store it writes to.
    pub fn store(&self) -> &ObjectStoreRef {
        &self.store
    }

    /// Copies one sealed segment. On error the attempt's row stays `COPY_STARTED`
    /// until [`Uploader::clean_unfinished`].
    pub async fn upload(
        &self,
        p: &PartitionRef,
        seg: &SealedSegment,
    ) -> Result<RemoteSegment, UploadError> {
        let row = self.put_segment(p, seg).await?;
        crate::failpoint::hit("upload-before-copy-finished");
        let done = self
            .metastore
            .transition_remote_segment(
                row.segment_id,
                RemoteSegmentState::CopyStarted,
                RemoteSegmentState::CopyFinished,
            )
            .await;
        let done = match done {
            // A new leader cleaned up this copy's row while its objects were on their
            // way: they would outlive every row that could name them.
            Err(shale_metastore::Error::RemoteSegmentStateConflict { actual, .. })
                if actual >= RemoteSegmentState::DeleteStarted =>
            {
                tracing::info!(topic = %p.topic, partition = p.partition, segment = %row.segment_id,
                    "a copy was cleaned up by another leader while under way: deleting its objects");
                if let Err(e) = self.delete_objects(&row).await {
                    tracing::warn!(segment = %row.segment_id, error = %e, "cannot delete the objects of a cleaned-up copy");
                }
                return Err(shale_metastore::Error::RemoteSegmentStateConflict {
                    segment_id: row.segment_id,
                    expected: RemoteSegmentState::CopyStarted,
                    actual,
                }
                .into());
            }
            other => other?,
        };
        tracing::info!(topic = %p.topic, partition = p.partition, base_offset = seg.base_offset,
            end_offset = seg.end_offset, bytes = seg.size_bytes, "segment copied to object store");
        Ok(done)
    }

    /// Registers a `COPY_STARTED` row and puts the segment's objects; the row is left
    /// unfinished (for [`Uploader::upload`] to finish, or remote compaction to swap in).
    pub async fn put_segment(
        &self,
        p: &PartitionRef,
        seg: &SealedSegment,
    ) -> Result<RemoteSegment, UploadError> {
        let now = now_ms();
        let row = RemoteSegment {
            segment_id: Uuid::new_v4(),
            topic_id: p.topic_id,
            partition: p.partition,
            base_offset: seg.base_offset,
            end_offset: seg.end_offset,
            max_timestamp: seg.max_timestamp,
            leader_epoch: seg.leader_epoch,
            size_bytes: seg.size_bytes as i64,
            state: RemoteSegmentState::CopyStarted,
            created_at_ms: now,
            updated_at_ms: now,
            epochs: seg.epochs.clone(),
            object_end_offset: seg.end_offset,
            aborted: seg.aborted.clone(),
        };
        self.metastore.add_remote_segment(&row).await?;
        let key = SegmentKey::of(&row);
        let (log_bytes, log_crc32c) = self.put_file(&seg.log_path, &key, ObjectKind::Log).await?;
        // The indexes and the key filter are small: one object for the three.
        let read = |path: &Path| {
            let path = path.to_path_buf();
            async move {
                (tokio::fs::read(&path).await).map_err(|source| UploadError::Io { path, source })
            }
        };
        let index = read(&seg.index_path).await?;
        let time_index = read(&seg.time_index_path).await?;
        let indexes = SegmentIndexes {
            offset_index: &index,
            time_index: &time_index,
            key_filter: seg.key_filter.as_deref(),
            producer_snapshot: seg.producer_snapshot.as_deref(),
        };
        let indexes_path = key.path(ObjectKind::Indexes);
        let indexes_name = indexes_path.filename().unwrap_or_default().to_string();
        let encoded = indexes.encode();
        self.store
            .put(&indexes_path, PutPayload::from(encoded))
            .await?;
        let key_filter = seg.key_filter.as_ref().map(|bytes| KeyFilterObject {
            object: indexes_name.clone(),
            bytes: bytes.len() as u64,
            crc32c: crc32c::crc32c(bytes),
        });
        let meta = SegmentMeta {
            topic: p.topic.clone(),
            topic_id: p.topic_id,
            partition: p.partition,
            segment_id: row.segment_id,
            base_offset: seg.base_offset,
            end_offset: seg.end_offset,
            max_timestamp: seg.max_timestamp,
            leader_epoch: seg.leader_epoch,
            log_bytes,
            index_bytes: index.len() as u64,
            time_index_bytes: time_index.len() as u64,
            log_crc32c,
            index_crc32c: crc32c::crc32c(&index),
            time_index_crc32c: crc32c::crc32c(&time_index),
            key_filter,
            epochs: seg.epochs.clone(),
            indexes: Some(indexes_name),
            replaces: Some(seg.replaces.clone()),
            producer_snapshot_bytes: seg.producer_snapshot.as_ref().map(|s| s.len() as u64),
            aborted: seg.aborted.clone(),
        };
        let json = serde_json::to_vec_pretty(&meta).expect("segment meta serializes");
        self.store
            .put(&key.path(ObjectKind::Meta), PutPayload::from(json))
            .await?;
        if let Some(root) = self.config.local_root.clone() {
            let meta_path = root.join(key.path(ObjectKind::Meta).as_ref());
            let io = |source| UploadError::Io {
                path: meta_path.clone(),
                source,
            };
            tokio::task::spawn_blocking(move || sync_local_objects(&root, &key))
                .await
                .map_err(|e| io(std::io::Error::other(e)))?
                .map_err(io)?;
        }
        Ok(row)
    }

    /// Uploads a file, in parts when large; returns its size and CRC-32C.
    async fn put_file(
        &self,
        path: &Path,
        key: &SegmentKey,
        kind: ObjectKind,
    ) -> Result<(u64, u32), UploadError> {
        let io = |source| UploadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut file = tokio::fs::File::open(path).await.map_err(io)?;
        let size = file.metadata().await.map_err(io)?.len();
        let dest = key.path(kind);
        if size <= self.config.multipart_threshold {
            let mut buf = Vec::with_capacity(size as usize);
            file.read_to_end(&mut buf).await.map_err(io)?;
            let crc = crc32c::crc32c(&buf);
            self.store
                .put(&dest, PutPayload::from(Bytes::from(buf)))
                .await?;
            return Ok((size, crc));
        }
        let upload = self.store.put_multipart(&dest).await?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, self.config.part_size);
        let mut crc = 0u32;
        let mut total = 0u64;
        let mut chunk = vec![0u8; self.config.part_size];
        let result: Result<(), UploadError> = async {
            loop {
                let n = read_full(&mut file, &mut chunk).await.map_err(io)?;
                if n == 0 {
                    return Ok(());
                }
                crc = crc32c::crc32c_append(crc, &chunk[..n]);
                total += n as u64;
                writer
                    .wait_for_capacity(self.config.part_concurrency)
                    .await?;
                writer.write(&chunk[..n]);
            }
        }
        .await;
        match result {
            Ok(()) => {
                writer.finish().await?;
                Ok((total, crc))
            }
            Err(e) => {
                if let Err(abort) = writer.abort().await {
                    tracing::warn!(object = %dest, error = %abort, "cannot abort multipart upload");
                }
                Err(e)
            }
        }
    }

    /// Removes what unfinished copies (and interrupted deletions) of a partition left
    /// behind. Returns how many rows it finished off.
    pub async fn clean_unfinished(&self, p: &PartitionRef) -> Result<usize, UploadError> {
        use RemoteSegmentState::*;
        let rows = self
            .metastore
            .list_remote_segments(p.topic_id, p.partition, &[CopyStarted, DeleteStarted])
            .await?;
        for row in &rows {
            if row.state == CopyStarted {
                self.metastore
                    .transition_remote_segment(row.segment_id, CopyStarted, DeleteStarted)
                    .await?;
            }
            self.delete_objects(row).await?;
            self.metastore
                .transition_remote_segment(row.segment_id, DeleteStarted, DeleteFinished)
                .await?;
            tracing::info!(topic = %p.topic, partition = p.partition, base_offset = row.base_offset,
                segment = %row.segment_id, "removed objects of an unfinished remote segment");
        }
        Ok(rows.len())
    }

    /// Deletes a finished remote segment (remote retention).
    pub async fn delete(&self, seg: &RemoteSegment) -> Result<(), UploadError> {
        use RemoteSegmentState::*;
        self.metastore
            .transition_remote_segment(seg.segment_id, CopyFinished, DeleteStarted)
            .await?;
        self.delete_objects(seg).await?;
        self.metastore
            .transition_remote_segment(seg.segment_id, DeleteStarted, DeleteFinished)
            .await?;
        Ok(())
    }

    /// Deletes the segments remote compaction replaced (`COMPACTED`) more than
    /// `grace_ms` ago: reads that were in them have had that long to finish. Returns
    /// how many it deleted.
    pub async fn delete_compacted(
        &self,
        p: &PartitionRef,
        now_ms: i64,
        grace_ms: i64,
    ) -> Result<usize, UploadError> {
        use RemoteSegmentState::*;
        let rows = self
            .metastore
            .list_remote_segments(p.topic_id, p.partition, &[Compacted])
            .await?;
        let mut deleted = 0;
        for row in rows.iter().filter(|r| r.updated_at_ms <= now_ms - grace_ms) {
            self.metastore
                .transition_remote_segment(row.segment_id, Compacted, DeleteStarted)
                .await?;
            self.delete_objects(row).await?;
            self.metastore
                .transition_remote_segment(row.segment_id, DeleteStarted, DeleteFinished)
                .await?;
            deleted += 1;
        }
        Ok(deleted)
    }

    /// Deletes the objects of every remote segment of a topic that no longer exists,
    /// whatever state each row is in, and marks them `DELETE_FINISHED`.
    pub async fn purge_topic(&self, topic_id: Uuid) -> Result<usize, UploadError> {
        use RemoteSegmentState::*;
        let rows = self.metastore.undeleted_remote_segments(topic_id).await?;
        for row in &rows {
            if row.state != DeleteStarted {
                self.metastore
                    .transition_remote_segment(row.segment_id, row.state, DeleteStarted)
                    .await?;
            }
            self.delete_objects(row).await?;
            self.metastore
                .transition_remote_segment(row.segment_id, DeleteStarted, DeleteFinished)
                .await?;
        }
        Ok(rows.len())
    }

    async fn delete_objects(&self, seg: &RemoteSegment) -> Result<(), UploadError> {
        let key = SegmentKey::of(seg);
        for kind in ObjectKind::ALL {
            match self.store.delete(&key.path(kind)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// The highest offset ever copied for the partition (-1: none), even if remote
    /// retention has deleted every segment since.
    pub async fn remote_log_end_offset(&self, p: &PartitionRef) -> Result<i64, UploadError> {
        Ok(self
            .metastore
            .remote_log_end_offset(p.topic_id, p.partition)
            .await?)
    }

    /// The partition's readable remote segments, by base offset.
    pub async fn finished_segments(
        &self,
        p: &PartitionRef,
    ) -> Result<Vec<RemoteSegment>, UploadError> {
        Ok(self
            .metastore
            .list_remote_segments(p.topic_id, p.partition, &[RemoteSegmentState::CopyFinished])
            .await?)
    }
}

/// Reads until `buf` is full or the file ends.
async fn read_full(file: &mut tokio::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]).await? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Fsyncs the objects of one segment in a `file://` store rooted at `root`, then the
/// directories that name them: a copy whose row says it finished survives a power loss.
fn sync_local_objects(root: &Path, key: &SegmentKey) -> std::io::Result<()> {
    for kind in ObjectKind::WRITTEN {
        std::fs::File::open(root.join(key.path(kind).as_ref()))?.sync_all()?;
    }
    let partition_dir = root
        .join(key.topic_id.to_string())
        .join(key.partition.to_string());
    for dir in [
        partition_dir.as_path(),
        &root.join(key.topic_id.to_string()),
        root,
    ] {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
