//! The transaction coordinator's records: per transactional id, its producer, the
//! state of its current transaction, the partitions and groups in it, and the group
//! offsets it committed, which become the groups' offsets only if it commits.

use uuid::Uuid;

/// Where a transactional id's transaction stands (Kafka's coordinator states).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction since the producer started.
    Empty,
    /// Partitions or groups were added; neither commit nor abort was asked.
    Ongoing,
    /// Commit decided: markers are being written.
    PrepareCommit,
    /// Abort decided: markers are being written.
    PrepareAbort,
    /// Every marker of the last transaction, a commit, is written.
    CompleteCommit,
    /// Every marker of the last transaction, an abort, is written.
    CompleteAbort,
}

impl TxnState {
    pub const ALL: [TxnState; 6] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ];

    /// Kafka's name (DescribeTransactions, ListTransactions).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// A decision is made and its markers are not all written.
    pub fn is_prepared(self) -> bool {
        matches!(self, TxnState::PrepareCommit | TxnState::PrepareAbort)
    }
}

/// One transactional id's record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: TxnState,
    pub timeout_ms: i32,
    /// The partitions of the current (or last) transaction, sorted.
    pub partitions: Vec<(Uuid, i32)>,
    /// The groups whose offsets it commits, sorted.
    pub groups: Vec<String>,
    /// When the current transaction started (-1: none open).
    pub start_ms: i64,
    pub update_ms: i64,
    /// The coordinator epoch its markers carry: raised for every transaction that
    /// ends, so a partition tells a repeated marker from a new one.
    pub marker_epoch: i32,
    /// Compare-and-set version (0: not stored yet).
    pub version: i64,
}

/// What a transaction record's write does to the offsets committed in its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOffsets {
    /// They stay pending.
    Keep,
    /// They become the groups' committed offsets.
    Commit,
    /// They are dropped.
    Discard,
}

pub(crate) fn encode_partitions(partitions: &[(Uuid, i32)]) -> String {
    serde_json::to_string(partitions).expect("uuids and ints serialize")
}

pub(crate) fn decode_partitions(text: &str) -> crate::Result<Vec<(Uuid, i32)>> {
    serde_json::from_str(text)
        .map_err(|e| crate::Error::CorruptRow(format!("transaction partitions: {e}")))
}

pub(crate) fn encode_groups(groups: &[String]) -> String {
    serde_json::to_string(groups).expect("strings serialize")
}

pub(crate) fn decode_groups(text: &str) -> crate::Result<Vec<String>> {
    serde_json::from_str(text)
        .map_err(|e| crate::Error::CorruptRow(format!("transaction groups: {e}")))
}
