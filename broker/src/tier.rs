//! What the tier keeps on this broker, apart from the work it does (`tiering`): the
//! uploader, the remote reader and the runtime its reads run on, upload permits, and
//! what remote compaction did so far.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// What the tier keeps on this broker: the uploader, the remote reader and the runtime
/// its reads run on, upload permits, and remote compaction's progress.
pub(crate) struct Tier {
    pub(crate) uploader: shale_tiering::uploader::Uploader,
    pub(crate) reader: Arc<shale_tiering::reader::RemoteReader>,
    /// Where remote reads run (see `remote_io`).
    pub(crate) remote_io: crate::remote_io::RemoteIo,
    /// Partitions copying at once (`tiering.upload_concurrency`).
    pub(crate) upload_permits: Arc<tokio::sync::Semaphore>,
    pub(crate) remote_compactions: RemoteCompactions,
    /// Read-replica topics' sources, and the store remote reads go through.
    pub(crate) read_replicas: crate::read_replicas::ReadReplicas,
}

/// What remote compaction did since the broker started (metrics), and where each
/// partition's last run left off.
#[derive(Debug, Default)]
pub(crate) struct RemoteCompactions {
    pub runs: AtomicU64,
    /// Bytes of remote segments read (both passes, cache hits included).
    pub bytes_read: AtomicU64,
    /// Bytes of rewritten segments uploaded.
    pub bytes_written: AtomicU64,
    pub records_removed: AtomicU64,
    pub segments_replaced: AtomicU64,
    /// Rewrites uploaded (each one segment's objects: `.log`, `.indexes`, `.meta`).
    pub segments_written: AtomicU64,
    /// Per partition: where its last complete run got to.
    last: std::sync::Mutex<HashMap<(uuid::Uuid, i32), Progress>>,
}

/// Where a partition's last complete remote compaction got to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Progress {
    /// The leader epoch it ran in (a later leader starts from the beginning).
    pub(crate) epoch: i32,
    /// Remote offsets below this were compacted against every key above them (as far
    /// as the local log's high watermark then): the next run maps only from here.
    pub(crate) first_dirty: i64,
    pub(crate) at_ms: i64,
}

/// One run's figures.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteCompactionStats {
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub records_removed: u64,
    pub segments_replaced: u64,
    pub segments_written: u64,
}

impl RemoteCompactions {
    pub(crate) fn last(&self, id: (uuid::Uuid, i32)) -> Option<Progress> {
        self.last.lock().expect("poisoned").get(&id).copied()
    }

    pub(crate) fn record(
        &self,
        id: (uuid::Uuid, i32),
        progress: Progress,
        s: &RemoteCompactionStats,
    ) {
        self.last.lock().expect("poisoned").insert(id, progress);
        let add = |c: &AtomicU64, n: u64| c.fetch_add(n, Ordering::Relaxed);
        add(&self.runs, 1);
        add(&self.bytes_read, s.bytes_read);
        add(&self.bytes_written, s.bytes_written);
        add(&self.records_removed, s.records_removed);
        add(&self.segments_replaced, s.segments_replaced);
        add(&self.segments_written, s.segments_written);
    }
}
