//! Types of the remote-segment registry: which segments of a partition are in the
//! object store, and where each stands in its copy/delete state machine.

use uuid::Uuid;

/// State of a remote segment. Transitions only go forward:
/// `CopyStarted → CopyFinished → DeleteStarted → DeleteFinished`; a copy that never
/// finished may also go `CopyStarted → DeleteStarted` (cleanup of an aborted upload).
/// Remote compaction adds `CopyFinished → Compacted → DeleteStarted`: a segment
/// replaced by its compacted rewrite (in the same transaction as the rewrite's rows
/// become `CopyFinished`) is no longer readable for new reads, but its objects stay
/// for a grace period, so a read already in it can finish.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RemoteSegmentState {
    CopyStarted,
    CopyFinished,
    Compacted,
    DeleteStarted,
    DeleteFinished,
}

impl RemoteSegmentState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CopyStarted => "COPY_STARTED",
            Self::CopyFinished => "COPY_FINISHED",
            Self::Compacted => "COMPACTED",
            Self::DeleteStarted => "DELETE_STARTED",
            Self::DeleteFinished => "DELETE_FINISHED",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "COPY_STARTED" => Self::CopyStarted,
            "COPY_FINISHED" => Self::CopyFinished,
            "COMPACTED" => Self::Compacted,
            "DELETE_STARTED" => Self::DeleteStarted,
            "DELETE_FINISHED" => Self::DeleteFinished,
            _ => return None,
        })
    }

    /// Whether the state machine allows going from `self` to `next`.
    pub fn can_become(self, next: Self) -> bool {
        use RemoteSegmentState::*;
        matches!(
            (self, next),
            (CopyStarted, CopyFinished)
                | (CopyStarted, DeleteStarted)
                | (CopyFinished, DeleteStarted)
                | (CopyFinished, Compacted)
                | (Compacted, DeleteStarted)
                | (DeleteStarted, DeleteFinished)
        )
    }
}

/// One segment in the object store (offsets inclusive).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteSegment {
    pub segment_id: Uuid,
    pub topic_id: Uuid,
    pub partition: i32,
    pub base_offset: i64,
    pub end_offset: i64,
    pub max_timestamp: i64,
    /// The leader epoch the copy was made under.
    pub leader_epoch: i32,
    pub size_bytes: i64,
    pub state: RemoteSegmentState,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    /// The leader epochs of the segment's batches, with the offset each starts at,
    /// oldest first (empty: not recorded, for segments copied before they were).
    pub epochs: Vec<(i32, i64)>,
    /// The end offset the segment's objects were written with (their keys name it):
    /// `end_offset` unless a new leader cut the segment where its log diverged (the
    /// objects keep the bytes past `end_offset`, which readers skip).
    pub object_end_offset: i64,
    /// The aborted transactions whose abort markers the segment holds (Kafka's
    /// `.txnindex` entries), by marker offset; empty for most segments.
    pub aborted: Vec<RemoteAbortedTxn>,
}

impl RemoteSegment {
    /// The aborted transactions whose markers are in the segment's offsets (a row cut
    /// where a log diverged keeps those past its end, which no reader may use).
    pub fn live_aborted(&self) -> impl Iterator<Item = RemoteAbortedTxn> + '_ {
        (self.aborted.iter())
            .filter(|a| a.last_offset <= self.end_offset)
            .copied()
    }
}

/// An aborted transaction as a remote segment records it: a `read_committed` read of
/// the segment's offsets, or of any offset below, drops its records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RemoteAbortedTxn {
    pub producer_id: i64,
    /// The transaction's first offset in the partition.
    pub first_offset: i64,
    /// Its abort marker's offset.
    pub last_offset: i64,
    /// The last stable offset when it ended: every transaction ending later starts at
    /// or above it.
    pub last_stable_offset: i64,
}

/// `aborted` as stored: "producer_id:first:last:last_stable", comma-separated.
pub(crate) fn encode_aborted(aborted: &[RemoteAbortedTxn]) -> String {
    aborted
        .iter()
        .map(|a| {
            format!(
                "{}:{}:{}:{}",
                a.producer_id, a.first_offset, a.last_offset, a.last_stable_offset
            )
        })
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn decode_aborted(text: &str) -> crate::Result<Vec<RemoteAbortedTxn>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let corrupt = || crate::Error::CorruptRow(format!("remote segment aborted '{text}'"));
    text.split(',')
        .map(|item| {
            let v: Vec<i64> = item
                .split(':')
                .map(|n| n.parse().map_err(|_| corrupt()))
                .collect::<crate::Result<_>>()?;
            let [producer_id, first_offset, last_offset, last_stable_offset] = v[..] else {
                return Err(corrupt());
            };
            Ok(RemoteAbortedTxn {
                producer_id,
                first_offset,
                last_offset,
                last_stable_offset,
            })
        })
        .collect()
}

/// `epochs` as stored: "epoch:start_offset", comma-separated.
pub(crate) fn encode_epochs(epochs: &[(i32, i64)]) -> String {
    epochs
        .iter()
        .map(|(e, s)| format!("{e}:{s}"))
        .collect::<Vec<_>>()
        .join(",")
}

pub(crate) fn decode_epochs(text: &str) -> crate::Result<Vec<(i32, i64)>> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let corrupt = || crate::Error::CorruptRow(format!("remote segment epochs '{text}'"));
    text.split(',')
        .map(|item| {
            let (e, s) = item.split_once(':').ok_or_else(corrupt)?;
            Ok((
                e.parse().map_err(|_| corrupt())?,
                s.parse().map_err(|_| corrupt())?,
            ))
        })
        .collect()
}

/// A partition's remote log as the metastore records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteLog {
    /// Readable (`COPY_FINISHED`) segments, by base offset.
    pub finished: Vec<RemoteSegment>,
    /// The highest offset ever copied by a copy that finished, deleted since or not;
    /// -1 if none.
    pub copied_end: i64,
    /// Some copy or deletion never finished (`COPY_STARTED` or `DELETE_STARTED` rows):
    /// their objects must be cleaned up before the next copy.
    pub unfinished: bool,
}

impl Default for RemoteLog {
    fn default() -> Self {
        Self {
            finished: Vec::new(),
            copied_end: -1,
            unfinished: false,
        }
    }
}
