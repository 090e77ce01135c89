//! The names of everything on a broker's local disk, in one place: the data
//! directory's own files, partition directories, and each partition's files.
//!
//! ```text
//! {data_dir}/.lock                      one process per data directory
//! {data_dir}/.clean-shutdown            the incarnation that last stopped cleanly
//! {data_dir}/meta.properties            the cluster and broker the directory belongs to
//! {data_dir}/remote-cache/              the remote read cache (unless configured elsewhere)
//! {data_dir}/tier-tmp/                  segment tails being copied (emptied at start)
//! {data_dir}/{topic}-{partition}/       one partition
//!     partition.metadata                the topic id it belongs to
//!     leader-epoch-checkpoint           the leader epochs and their start offsets
//!     cleaner.checkpoint                how far compaction got
//!     {base:020}.log                    a segment's batches
//!     {base:020}.index, .timeindex      its offset and time indexes
//!     {base:020}.keys                   its key filter (sealed segments)
//!     {base:020}.snapshot               producer state as of that offset
//!     {base:020}.*.cleaned, .swap       a cleaning's files before and during its swap
//! ```

use std::path::{Path, PathBuf};

/// Locked for the process's lifetime.
pub const DATA_DIR_LOCK: &str = ".lock";
/// Written and removed at start, to check that the data directory is writable.
pub const WRITE_PROBE: &str = ".write-probe";
/// Written at the end of a clean shutdown, removed at start.
pub const CLEAN_SHUTDOWN_MARKER: &str = ".clean-shutdown";
/// The cluster id and broker id the data directory belongs to.
pub const META_PROPERTIES: &str = "meta.properties";
/// The remote read cache's directory, unless `tiering.cache_dir` names another.
pub const REMOTE_CACHE_DIR: &str = "remote-cache";
/// Segment tails cut out for a copy to the object store, removed at start.
pub const TIER_TMP_DIR: &str = "tier-tmp";
/// In a partition directory: the topic id it belongs to.
pub const PARTITION_METADATA: &str = "partition.metadata";
/// In a partition directory: the leader epoch checkpoint.
pub const EPOCH_CHECKPOINT: &str = "leader-epoch-checkpoint";
/// In a partition directory: the cleaner's checkpoint.
pub const CLEANER_CHECKPOINT: &str = "cleaner.checkpoint";

pub const LOG_SUFFIX: &str = "log";
pub const INDEX_SUFFIX: &str = "index";
pub const TIME_INDEX_SUFFIX: &str = "timeindex";
pub const KEYS_SUFFIX: &str = "keys";
pub const SNAPSHOT_SUFFIX: &str = "snapshot";
/// The files a cleaning writes before its swap.
pub const STAGED_SUFFIX: &str = "cleaned";
/// The files a cleaning is swapping in.
pub const SWAP_SUFFIX: &str = "swap";

/// Where a partition's files live.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

/// A segment's file with the given suffix (`LOG_SUFFIX`, `INDEX_SUFFIX`, …).
pub fn segment_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{suffix}"))
}
