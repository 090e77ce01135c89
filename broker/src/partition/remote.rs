//! What a replica knows of its partition's remote log: the in-memory index of finished
//! remote segments that reads below the local log start use (they never LIST the
//! bucket).

use std::sync::Arc;

use shale_metastore::RemoteSegment;

/// What this broker knows of the partition's remote segments: the in-memory index
/// the fetch path uses below the local log start (it never LISTs the bucket).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteState {
    /// False until the finished segments are read from the metastore; until then no
    /// local segment of a tiered partition may be deleted.
    pub loaded: bool,
    /// Unfinished copies (after a start or a failed copy) must be cleaned up before
    /// the next upload.
    pub needs_cleanup: bool,
    /// Finished remote segments, by base offset, contiguous.
    pub segments: Arc<Vec<RemoteSegment>>,
    /// Every offset up to this one has been in the object store (-1: none yet).
    pub end_offset: i64,
    /// Offsets below this are past total retention: gone from the object store, and
    /// their local copies are deleted too. -1: no such bound.
    pub retained_from: i64,
}

impl RemoteState {
    pub fn unloaded() -> Self {
        Self {
            loaded: false,
            needs_cleanup: true,
            segments: Arc::default(),
            end_offset: -1,
            retained_from: -1,
        }
    }

    /// First offset in the object store, -1 if none.
    pub fn start_offset(&self) -> i64 {
        self.segments.first().map_or(-1, |s| s.base_offset)
    }

    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes as u64).sum()
    }

    /// The remote segment holding `offset`.
    pub fn find(&self, offset: i64) -> Option<&RemoteSegment> {
        let i = self.segments.partition_point(|s| s.end_offset < offset);
        self.segments.get(i).filter(|s| s.base_offset <= offset)
    }
}
