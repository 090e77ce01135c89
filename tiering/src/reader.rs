//! Reads of remote segments for fetches below the local log start.
//!
//! A read finds the byte position of the requested offset through the segment's offset
//! index (fetched once, kept parsed in memory), then reads fixed-size aligned chunks of
//! the `.log` object through a `foyer` hybrid cache (memory + local disk). A missing
//! chunk is one ranged GET; concurrent requests for the same chunk share it
//! (`get_or_fetch`). Each read schedules the next `read_ahead` chunks in the
//! background, so a sequential replay finds them cached. GETs have their own
//! concurrency limit so a replay cannot starve the rest of the broker. Every batch
//! returned is CRC-checked: a corrupt or truncated object yields an error naming the
//! object, never garbage bytes. The read path never LISTs the bucket.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{Bytes, BytesMut};
use foyer::{
    BlockEngineConfig, Cache, CacheBuilder, DeviceBuilder, FsDeviceBuilder, HybridCache,
    HybridCacheBuilder,
};
use shale_metastore::RemoteSegment;
use shale_records::batch::{BatchHeader, BatchIter, HEADER_LEN};
use shale_records::keyfilter::KeyFilter;
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::layout::{ObjectKind, SegmentIndexes, SegmentKey};
use crate::store::ObjectStoreRef;

#[derive(Debug, Clone)]
pub struct ReaderConfig {
    /// Size of a cached chunk of a `.log` object. Default: 8 MiB.
    pub chunk_bytes: u64,
    /// Memory tier of the chunk cache. Default: 256 MiB.
    pub cache_memory_bytes: usize,
    /// Disk tier of the chunk cache. Default: 1 GiB.
    pub cache_disk_bytes: usize,
    /// Directory of the disk tier.
    pub cache_dir: PathBuf,
    /// The disk tier bypasses the page cache (O_DIRECT): a replay filling it neither
    /// evicts the hot tail's pages nor makes the kernel throttle the log's writers
    /// for dirty pages. Default: true (buffered where the filesystem refuses it).
    pub direct_io: bool,
    /// Chunks fetched ahead of a read. Default: 2.
    pub read_ahead_chunks: u64,
    /// Ranged GETs in flight at once. Default: 16.
    pub max_concurrent_gets: usize,
    /// Where read-ahead fetches run (the node's tracker, which shutdown waits on).
    pub tasks: tokio_util::task::TaskTracker,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ReadError {
    #[error("remote object {object} is corrupt: {reason}")]
    Corrupt { object: String, reason: String },
    #[error("remote object {object} cannot be read: {reason}")]
    Unavailable { object: String, reason: String },
    /// The object is gone: either remote retention deleted its segment after the read
    /// found it (the caller looks again), or a finished segment lost its data.
    #[error("remote object {object} does not exist")]
    NotFound { object: String },
    #[error("the read cache cannot be opened: {0}")]
    Cache(String),
}

impl ReadError {
    /// Whether a later attempt may succeed (the store was down, not the data bad).
    pub fn is_retriable(&self) -> bool {
        matches!(self, ReadError::Unavailable { .. })
    }
}

/// Counters of what the reader asked of the object store.
#[derive(Debug, Default)]
pub struct ReaderStats {
    pub gets: AtomicU64,
    pub bytes_fetched: AtomicU64,
}

pub struct RemoteReader {
    store: ObjectStoreRef,
    chunks: HybridCache<String, Bytes>,
    indexes: Cache<Uuid, Arc<Vec<(u32, u32)>>>,
    /// Where the last reads of each segment ended: (segment, next offset) -> byte
    /// position, so a sequential reader continuing there needs no index lookup (and
    /// no index GET).
    cursors: Cache<(Uuid, i64), u64>,
    /// Decoded key filters (`None`: the segment has none).
    filters: Cache<Uuid, Option<Arc<KeyFilter>>>,
    gets: Arc<Semaphore>,
    config: ReaderConfig,
    pub stats: Arc<ReaderStats>,
}

impl RemoteReader {
    pub async fn open(store: ObjectStoreRef, config: ReaderConfig) -> Result<Arc<Self>, ReadError> {
        std::fs::create_dir_all(&config.cache_dir).map_err(|e| ReadError::Cache(e.to_string()))?;
        let chunks = match Self::open_cache(&config, config.direct_io).await {
            Ok(chunks) => chunks,
            // Some filesystems (tmpfs) refuse O_DIRECT: cache through the page cache.
            Err(e) if config.direct_io => {
                tracing::warn!(dir = %config.cache_dir.display(), error = %e,
                    "the read cache's directory refuses direct I/O; using buffered I/O");
                Self::open_cache(&config, false).await?
            }
            Err(e) => return Err(e),
        };
        // Parsed offset indexes: 8 bytes an entry.
        let indexes = CacheBuilder::new(64 << 20)
            .with_weighter(|_: &Uuid, v: &Arc<Vec<(u32, u32)>>| 8 * v.len() + 64)
            .build();
        Ok(Arc::new(Self {
            store,
            chunks,
            indexes,
            cursors: CacheBuilder::new(4096).build(),
            filters: CacheBuilder::new(64 << 20)
                .with_weighter(|_: &Uuid, v: &Option<Arc<KeyFilter>>| {
                    v.as_ref().map_or(0, |f| f.size_bytes()) + 64
                })
                .build(),
            gets: Arc::new(Semaphore::new(config.max_concurrent_gets.max(1))),
            config,
            stats: Arc::new(ReaderStats::default()),
        }))
    }

    async fn open_cache(
        config: &ReaderConfig,
        direct: bool,
    ) -> Result<HybridCache<String, Bytes>, ReadError> {
        let device = FsDeviceBuilder::new(&config.cache_dir)
            .with_capacity(config.cache_disk_bytes)
            .with_direct(direct)
            .build()
            .map_err(|e| ReadError::Cache(e.to_string()))?;
        // Chunks evicted from memory go to disk through a write queue; one that finds
        // the queue full is dropped (and fetched again by the next reader). Sized for
        // eight chunks, a replay's evictions keep up; and a disk block holds several
        // chunks (foyer's defaults, 16 MiB, fit one 8 MiB chunk and waste the rest).
        let chunk = config.chunk_bytes as usize;
        let queue = (8 * chunk).max(16 << 20);
        // (A chunk larger than a block would never reach the disk.)
        let block = (8 * chunk)
            .min(config.cache_disk_bytes / 4)
            .max(2 * chunk)
            .max(16 << 20);
        let engine = BlockEngineConfig::new(device)
            .with_block_size(block)
            .with_buffer_pool_size(queue)
            .with_submit_queue_size_threshold(queue);
        let chunks = HybridCacheBuilder::new()
            .with_name("shale-remote-chunks")
            .memory(config.cache_memory_bytes)
            .with_weighter(|k: &String, v: &Bytes| k.len() + v.len())
            .storage()
            .with_engine_config(engine)
            .build()
            .await
            .map_err(|e| ReadError::Cache(e.to_string()))?;
        Ok(chunks)
    }

    /// Closes the read cache (at shutdown): its disk writes finish, and its I/O tasks
    /// end rather than being cut off.
    pub async fn close(&self) {
        if let Err(e) = self.chunks.close().await {
            tracing::warn!(error = %e, "closing the read cache failed");
        }
    }

    /// The segment's key filter (`None`: copied without one), fetched once and kept in
    /// the read cache (memory, and the disk tier as bytes).
    pub async fn key_filter(
        &self,
        seg: &RemoteSegment,
    ) -> Result<Option<Arc<KeyFilter>>, ReadError> {
        if let Some(e) = self.filters.get(&seg.segment_id) {
            return Ok(e.value().clone());
        }
        let (encoded, object) = match self.indexes_object(seg).await? {
            Some(all) => {
                let object = SegmentKey::of(seg).path(ObjectKind::Indexes).to_string();
                let keys = indexes_of(&all, &object)?.key_filter;
                (keys.map(|k| all.slice_ref(k)), object)
            }
            // Copied before `.indexes`: a `.keys` object, if any.
            None => {
                let path = SegmentKey::of(seg).path(ObjectKind::Keys);
                let key = format!("{}/keys", seg.segment_id);
                (
                    self.cached_whole(key, path.clone()).await?,
                    path.to_string(),
                )
            }
        };
        let filter = match encoded {
            Some(encoded) => {
                let f = KeyFilter::decode(&encoded).map_err(|e| ReadError::Corrupt {
                    object: object.clone(),
                    reason: e.to_string(),
                })?;
                if f.summary.log_bytes != seg.size_bytes as u64 {
                    return Err(ReadError::Corrupt {
                        object,
                        reason: format!(
                            "the filter describes {} bytes of log, the segment has {}",
                            f.summary.log_bytes, seg.size_bytes
                        ),
                    });
                }
                Some(Arc::new(f))
            }
            None => None,
        };
        self.filters.insert(seg.segment_id, filter.clone());
        Ok(filter)
    }

    /// The producer state as of the offset after the segment, as its copy kept it
    /// (`None`: copied without one).
    pub async fn producer_snapshot(&self, seg: &RemoteSegment) -> Result<Option<Bytes>, ReadError> {
        let Some(all) = self.indexes_object(seg).await? else {
            return Ok(None);
        };
        let object = SegmentKey::of(seg).path(ObjectKind::Indexes).to_string();
        let snapshot = indexes_of(&all, &object)?.producer_snapshot;
        Ok(snapshot.map(|s| all.slice_ref(s)))
    }

    /// The segment's `.indexes` object (offset index, time index and key filter),
    /// fetched whole with one GET and kept in the read cache; `None` for a segment
    /// copied before it existed.
    async fn indexes_object(&self, seg: &RemoteSegment) -> Result<Option<Bytes>, ReadError> {
        let key = format!("{}/indexes", seg.segment_id);
        let path = SegmentKey::of(seg).path(ObjectKind::Indexes);
        self.cached_whole(key, path).await
    }

    /// A whole object through the read cache under `key` (`None`: no such object).
    async fn cached_whole(
        &self,
        key: String,
        path: object_store::path::Path,
    ) -> Result<Option<Bytes>, ReadError> {
        let object = path.to_string();
        let (store, gets, stats) = (self.store.clone(), self.gets.clone(), self.stats.clone());
        let fetched = self
            .chunks
            .get_or_fetch(&key, move || async move {
                get_whole(&store, &gets, &stats, &path)
                    .await
                    .map_err(anyhow::Error::from)
            })
            .await;
        match fetched {
            Ok(entry) => Ok(Some(entry.value().clone())),
            Err(e) => match e.downcast_ref::<ReadError>() {
                Some(ReadError::NotFound { .. }) => Ok(None),
                Some(inner) => Err(inner.clone()),
                None => Err(ReadError::Unavailable {
                    object,
                    reason: e.to_string(),
                }),
            },
        }
    }

    /// Keeps a just-copied segment's decoded key filter in memory, so lookups need no
    /// GET for it while it stays there (64 MiB of filters; an evicted one comes back
    /// with the segment's `.indexes` object, one GET, then cached).
    pub fn remember_key_filter(&self, segment_id: Uuid, encoded: Bytes) {
        if let Ok(f) = KeyFilter::decode(&encoded) {
            self.filters.insert(segment_id, Some(Arc::new(f)));
        }
    }

    /// The segment's offset index, fetched once.
    async fn index(&self, seg: &RemoteSegment) -> Result<Arc<Vec<(u32, u32)>>, ReadError> {
        if let Some(e) = self.indexes.get(&seg.segment_id) {
            return Ok(e.value().clone());
        }
        let (raw, object) = match self.indexes_object(seg).await? {
            Some(all) => {
                let object = SegmentKey::of(seg).path(ObjectKind::Indexes).to_string();
                let index = indexes_of(&all, &object)?.offset_index;
                (all.slice_ref(index), object)
            }
            // Copied before `.indexes`: an `.index` object.
            None => {
                let path = SegmentKey::of(seg).path(ObjectKind::Index);
                let raw = get_whole(&self.store, &self.gets, &self.stats, &path).await?;
                (raw, path.to_string())
            }
        };
        if raw.len() % 8 != 0 {
            return Err(ReadError::Corrupt {
                object,
                reason: "index size is not a multiple of 8".into(),
            });
        }
        let entries: Vec<(u32, u32)> = raw
            .chunks_exact(8)
            .map(|c| {
                (
                    u32::from_be_bytes([c[0], c[1], c[2], c[3]]),
                    u32::from_be_bytes([c[4], c[5], c[6], c[7]]),
                )
            })
            .collect();
        let entries = Arc::new(entries);
        self.indexes.insert(seg.segment_id, entries.clone());
        Ok(entries)
    }

    /// The cache key of chunk `k`: it names the chunk size, so chunks cached under
    /// another `chunk_bytes` (the cache outlives a restart) are never taken for these.
    fn chunk_key(&self, seg: &RemoteSegment, k: u64) -> String {
        format!("{}/{}/{k}", seg.segment_id, self.config.chunk_bytes)
    }

    /// Chunk `k` of the segment's `.log` object, through the cache.
    async fn chunk(&self, seg: &RemoteSegment, k: u64) -> Result<Bytes, ReadError> {
        let size = seg.size_bytes as u64;
        let start = k * self.config.chunk_bytes;
        let end = (start + self.config.chunk_bytes).min(size);
        let key = self.chunk_key(seg, k);
        let (store, gets, stats) = (self.store.clone(), self.gets.clone(), self.stats.clone());
        let path = SegmentKey::of(seg).path(ObjectKind::Log);
        let object = path.to_string();
        let entry = self
            .chunks
            .get_or_fetch(&key, move || async move {
                get_range(&store, &gets, &stats, &path, start..end)
                    .await
                    .map_err(anyhow::Error::from)
            })
            .await
            .map_err(|e| match e.downcast_ref::<ReadError>() {
                // Keep the verdict of the fetch itself (a missing object is data loss).
                Some(inner) => inner.clone(),
                None => ReadError::Unavailable {
                    object: object.clone(),
                    reason: e.to_string(),
                },
            })?;
        let bytes = entry.value().clone();
        if bytes.len() as u64 != end - start {
            return Err(ReadError::Corrupt {
                object,
                reason: format!(
                    "chunk {k} has {} bytes, expected {}",
                    bytes.len(),
                    end - start
                ),
            });
        }
        Ok(bytes)
    }

    /// Bytes `[pos, pos + len)` of the segment's `.log` object.
    async fn read_range(
        &self,
        seg: &RemoteSegment,
        pos: u64,
        len: u64,
    ) -> Result<Bytes, ReadError> {
        let c = self.config.chunk_bytes;
        let (first, last) = (pos / c, (pos + len.max(1) - 1) / c);
        if first == last {
            let chunk = self.chunk(seg, first).await?;
            let at = (pos - first * c) as usize;
            return Ok(chunk.slice(at..at + len as usize));
        }
        // The chunks are fetched at once (a miss each is one GET), then joined.
        let chunks =
            futures::future::try_join_all((first..=last).map(|k| self.chunk(seg, k))).await?;
        let mut out = BytesMut::with_capacity(len as usize);
        for (k, chunk) in (first..=last).zip(chunks) {
            let from = if k == first {
                (pos - k * c) as usize
            } else {
                0
            };
            let to = if k == last {
                (pos + len - k * c) as usize
            } else {
                chunk.len()
            };
            out.extend_from_slice(&chunk[from..to]);
        }
        Ok(out.freeze())
    }

    /// Starts fetching the chunks after `last_chunk` into the cache.
    fn read_ahead(self: &Arc<Self>, seg: &RemoteSegment, last_chunk: u64) {
        let chunks = (seg.size_bytes as u64).div_ceil(self.config.chunk_bytes);
        for k in last_chunk + 1..(last_chunk + 1 + self.config.read_ahead_chunks).min(chunks) {
            if self.chunks.contains(&self.chunk_key(seg, k)) {
                continue;
            }
            let (reader, seg) = (self.clone(), seg.clone());
            self.config.tasks.spawn(async move {
                if let Err(e) = reader.chunk(&seg, k).await {
                    tracing::debug!(segment = %seg.segment_id, chunk = k, error = %e, "read-ahead failed");
                }
            });
        }
    }

    /// Position of the first batch whose last offset is >= `offset` (None: past the end).
    async fn seek(
        &self,
        seg: &RemoteSegment,
        offset: i64,
    ) -> Result<Option<(u64, BatchHeader)>, ReadError> {
        // A reader entering a segment at its start, or continuing where a read ended
        // (a sequential replay), needs no index: that saves one GET per segment.
        let mut pos = if offset <= seg.base_offset {
            0
        } else if let Some(pos) = self.cursors.get(&(seg.segment_id, offset)) {
            *pos.value()
        } else {
            let index = self.index(seg).await?;
            let rel = (offset - seg.base_offset).clamp(0, i64::from(u32::MAX)) as u32;
            let n = index.partition_point(|e| e.0 <= rel);
            if n == 0 { 0 } else { u64::from(index[n - 1].1) }
        };
        let size = seg.size_bytes as u64;
        let object = || SegmentKey::of(seg).path(ObjectKind::Log).to_string();
        while pos < size {
            let head = self
                .read_range(seg, pos, (HEADER_LEN as u64).min(size - pos))
                .await?;
            let h = BatchHeader::parse(&head).map_err(|e| ReadError::Corrupt {
                object: object(),
                reason: format!("at byte {pos}: {e}"),
            })?;
            // A segment cut where a new leader's log diverged ends at its row's end
            // offset: the bytes after it are not part of the log.
            if h.base_offset > seg.end_offset {
                return Ok(None);
            }
            if h.last_offset() >= offset {
                return Ok(Some((pos, h)));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }

    /// Whole batches from the one holding `offset`, up to `max_bytes` (the first batch
    /// whole if `whole_first`), each CRC-checked.
    pub async fn read(
        self: &Arc<Self>,
        seg: &RemoteSegment,
        offset: i64,
        max_bytes: usize,
        whole_first: bool,
    ) -> Result<Bytes, ReadError> {
        let Some((pos, first)) = self.seek(seg, offset).await? else {
            return Ok(Bytes::new());
        };
        if !whole_first && first.total_size() > max_bytes {
            return Ok(Bytes::new());
        }
        let size = seg.size_bytes as u64;
        let len = (size - pos).min(max_bytes.max(first.total_size()) as u64);
        let buf = self.read_range(seg, pos, len).await?;
        let mut keep = 0;
        let mut next_offset = offset;
        for item in BatchIter::new(&buf) {
            let (h, range) = item.map_err(|e| ReadError::Corrupt {
                object: SegmentKey::of(seg).path(ObjectKind::Log).to_string(),
                reason: e.to_string(),
            })?;
            if h.base_offset > seg.end_offset {
                break;
            }
            h.validate_stored(&buf[range.clone()]).map_err(|e| {
                let object = SegmentKey::of(seg).path(ObjectKind::Log).to_string();
                tracing::error!(object = %object, offset = h.base_offset, error = %e, "corrupt batch in remote segment");
                ReadError::Corrupt { object, reason: format!("batch at offset {}: {e}", h.base_offset) }
            })?;
            keep = range.end;
            next_offset = h.last_offset() + 1;
        }
        if keep > 0 && next_offset <= seg.end_offset {
            self.cursors
                .insert((seg.segment_id, next_offset), pos + keep as u64);
        }
        self.read_ahead(seg, (pos + len.max(1) - 1) / self.config.chunk_bytes);
        Ok(buf.slice(..keep))
    }

    /// The first offset at or after `ts` in the segment, with its timestamp.
    pub async fn offset_for_timestamp(
        &self,
        seg: &RemoteSegment,
        ts: i64,
    ) -> Result<Option<(i64, i64)>, ReadError> {
        let size = seg.size_bytes as u64;
        let mut pos = 0;
        while pos < size {
            let head = self
                .read_range(seg, pos, (HEADER_LEN as u64).min(size - pos))
                .await?;
            let h = BatchHeader::parse(&head).map_err(|e| ReadError::Corrupt {
                object: SegmentKey::of(seg).path(ObjectKind::Log).to_string(),
                reason: e.to_string(),
            })?;
            if h.base_offset > seg.end_offset {
                return Ok(None);
            }
            if h.max_timestamp >= ts {
                let batch = self.read_range(seg, pos, h.total_size() as u64).await?;
                return Ok(shale_records::record::first_at_or_after(&batch, ts));
            }
            pos += h.total_size() as u64;
        }
        Ok(None)
    }
}

/// The parts of a `.indexes` object; damage is an error naming it.
fn indexes_of<'a>(all: &'a Bytes, object: &str) -> Result<SegmentIndexes<'a>, ReadError> {
    SegmentIndexes::decode(all).map_err(|reason| ReadError::Corrupt {
        object: object.to_string(),
        reason,
    })
}

async fn get_range(
    store: &ObjectStoreRef,
    gets: &Semaphore,
    stats: &ReaderStats,
    path: &object_store::path::Path,
    range: std::ops::Range<u64>,
) -> Result<Bytes, ReadError> {
    let _permit = gets
        .acquire()
        .await
        .map_err(|e| ReadError::Cache(e.to_string()))?;
    let bytes = store
        .get_range(path, range)
        .await
        .map_err(|e| classify(path, e))?;
    stats.gets.fetch_add(1, Ordering::Relaxed);
    stats
        .bytes_fetched
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(bytes)
}

async fn get_whole(
    store: &ObjectStoreRef,
    gets: &Semaphore,
    stats: &ReaderStats,
    path: &object_store::path::Path,
) -> Result<Bytes, ReadError> {
    let _permit = gets
        .acquire()
        .await
        .map_err(|e| ReadError::Cache(e.to_string()))?;
    let result = store.get(path).await.map_err(|e| classify(path, e))?;
    let bytes = result.bytes().await.map_err(|e| classify(path, e))?;
    stats.gets.fetch_add(1, Ordering::Relaxed);
    stats
        .bytes_fetched
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    Ok(bytes)
}

fn classify(path: &object_store::path::Path, e: object_store::Error) -> ReadError {
    match e {
        object_store::Error::NotFound { .. } => ReadError::NotFound {
            object: path.to_string(),
        },
        other => ReadError::Unavailable {
            object: path.to_string(),
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;
