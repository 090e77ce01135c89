//! The transaction coordinator's decisions: pure functions from a transactional id's
//! record (as the metastore holds it) and a client's request to the record to write
//! next, or the error the client gets. The broker reads the record, calls one of
//! these, writes the result with a compare-and-set on its version, and writes the
//! markers of a prepared transaction to its partitions (see `shale_broker::txns`).
//!
//! States and moves (Kafka's):
//! ```text
//! Empty | CompleteCommit | CompleteAbort --add partitions / offsets--> Ongoing
//! Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
//! Ongoing --EndTxn(abort), timeout, InitProducerId--> PrepareAbort --markers--> CompleteAbort
//! ```
//! A timeout, or a new producer's InitProducerId, aborts with the producer epoch raised,
//! so the partitions fence the old producer when they take the markers. An id with no
//! transaction open or decided and no request for `transactional_id_expiration_ms` is
//! removed; it starts again under a new producer id.

use std::collections::HashMap;
use std::sync::Arc;

use shale_metastore::{TxnRecord, TxnState};
use shale_records::ErrorCode;
use uuid::Uuid;

/// Longest transactional id accepted (Kafka has no limit; a key of the metastore's
/// primary index gets one).
const MAX_TRANSACTIONAL_ID_BYTES: usize = 1024;

/// Longest transaction timeout a producer may ask for (Kafka's
/// `transaction.max.timeout.ms` default).
pub const MAX_TRANSACTION_TIMEOUT_MS: i32 = 900_000;

/// `[transactions]`: the transaction coordinator.
#[derive(Debug, Clone, serde::Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct TransactionsSection {
    /// How long a transactional id with no transaction open or being decided is kept
    /// without a request before its record is removed (Kafka's
    /// `transactional.id.expiration.ms`). A producer of that id that comes back starts
    /// again under a new producer id. Default: 604800000 ms (7 days).
    pub transactional_id_expiration_ms: i64,
}

impl Default for TransactionsSection {
    fn default() -> Self {
        Self {
            transactional_id_expiration_ms: 604_800_000,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    #[error("invalid transactional id: it must be 1 to {MAX_TRANSACTIONAL_ID_BYTES} bytes")]
    InvalidTransactionalId,
    #[error("transaction timeout {0} ms is outside [1, {MAX_TRANSACTION_TIMEOUT_MS}] ms")]
    InvalidTimeout(i32),
    #[error("transactional id '{0}' belongs to another producer id")]
    InvalidProducerIdMapping(String),
    #[error(
        "producer epoch {sent} of transactional id '{id}' is fenced: epoch {current} is current"
    )]
    ProducerFenced { id: String, sent: i16, current: i16 },
    #[error("transactional id '{id}' has a transaction ending ({state}): retry")]
    Concurrent { id: String, state: &'static str },
    #[error("transactional id '{id}' is {state}: {what} is not possible")]
    InvalidState {
        id: String,
        state: &'static str,
        what: &'static str,
    },
}

impl TxnError {
    pub fn code(&self) -> ErrorCode {
        match self {
            TxnError::InvalidTransactionalId => ErrorCode::InvalidRequest,
            TxnError::InvalidTimeout(_) => ErrorCode::InvalidTransactionTimeout,
            TxnError::InvalidProducerIdMapping(_) => ErrorCode::InvalidProducerIdMapping,
            TxnError::ProducerFenced { .. } => ErrorCode::ProducerFenced,
            TxnError::Concurrent { .. } => ErrorCode::ConcurrentTransactions,
            TxnError::InvalidState { .. } => ErrorCode::InvalidTxnState,
        }
    }
}

pub type Result<T, E = TxnError> = std::result::Result<T, E>;

pub fn validate_transactional_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_TRANSACTIONAL_ID_BYTES {
        return Err(TxnError::InvalidTransactionalId);
    }
    Ok(())
}

/// What InitProducerId does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Init {
    /// Write this record and hand its producer id and epoch out.
    Ready(TxnRecord),
    /// Write this record (the open transaction, aborting under a raised epoch),
    /// write its markers, and answer CONCURRENT_TRANSACTIONS: the producer retries.
    AbortFirst(TxnRecord),
}

/// Whether InitProducerId needs a new producer id: none yet, or its epoch is used up.
pub fn needs_producer_id(current: Option<&TxnRecord>) -> bool {
    current.is_none_or(|r| r.producer_epoch >= i16::MAX - 1)
}

/// InitProducerId for `id`. `expected` is the producer id and epoch a producer that
/// restarts its transactions sends (KIP-360; -1, -1 from a new producer);
/// `new_producer_id` is used when [`needs_producer_id`] says so.
pub fn init_producer(
    current: Option<&TxnRecord>,
    id: &str,
    timeout_ms: i32,
    expected: (i64, i16),
    new_producer_id: i64,
    now_ms: i64,
) -> Result<Init> {
    validate_transactional_id(id)?;
    if !(1..=MAX_TRANSACTION_TIMEOUT_MS).contains(&timeout_ms) {
        return Err(TxnError::InvalidTimeout(timeout_ms));
    }
    let Some(r) = current else {
        return Ok(Init::Ready(TxnRecord {
            transactional_id: id.to_string(),
            producer_id: new_producer_id,
            producer_epoch: 0,
            state: TxnState::Empty,
            timeout_ms,
            partitions: Vec::new(),
            groups: Vec::new(),
            start_ms: -1,
            update_ms: now_ms,
            marker_epoch: 0,
            version: 0,
        }));
    };
    // A producer that restarts its transactions (after an abortable error) names its
    // id and epoch: the current one, or the one before it when a timeout aborted its
    // transaction under a raised epoch. Any other is a zombie.
    let resumes = expected.0 == r.producer_id
        && (expected.1 == r.producer_epoch
            || (expected.1 == r.producer_epoch - 1 && r.state == TxnState::CompleteAbort));
    if expected.0 >= 0 && !resumes {
        return Err(TxnError::ProducerFenced {
            id: id.to_string(),
            sent: expected.1,
            current: r.producer_epoch,
        });
    }
    match r.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => Err(concurrent(r)),
        TxnState::Ongoing => Ok(Init::AbortFirst(prepare(r, false, true, now_ms))),
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            let mut next = r.clone();
            if needs_producer_id(Some(r)) {
                // A new producer id starts over: no partition knows it, so its marker
                // epochs start over too (they never wrap).
                next.producer_id = new_producer_id;
                next.producer_epoch = 0;
                next.marker_epoch = 0;
            } else {
                next.producer_epoch += 1;
            }
            next.state = TxnState::Empty;
            next.timeout_ms = timeout_ms;
            next.partitions.clear();
            next.groups.clear();
            next.start_ms = -1;
            next.update_ms = now_ms;
            Ok(Init::Ready(next))
        }
    }
}

fn concurrent(r: &TxnRecord) -> TxnError {
    TxnError::Concurrent {
        id: r.transactional_id.clone(),
        state: r.state.name(),
    }
}

/// The producer's id and epoch must be the record's.
fn check_producer(r: &TxnRecord, producer_id: i64, epoch: i16) -> Result<()> {
    if producer_id != r.producer_id {
        return Err(TxnError::InvalidProducerIdMapping(
            r.transactional_id.clone(),
        ));
    }
    if epoch != r.producer_epoch {
        return Err(TxnError::ProducerFenced {
            id: r.transactional_id.clone(),
            sent: epoch,
            current: r.producer_epoch,
        });
    }
    Ok(())
}

/// The record with a transaction open (or still open) and `add` applied; `None` when
/// nothing changes (everything was in it already).
fn open_with(
    r: &TxnRecord,
    producer_id: i64,
    epoch: i16,
    now_ms: i64,
    add: impl FnOnce(&mut TxnRecord) -> bool,
) -> Result<Option<TxnRecord>> {
    check_producer(r, producer_id, epoch)?;
    let mut next = r.clone();
    match r.state {
        TxnState::PrepareCommit | TxnState::PrepareAbort => return Err(concurrent(r)),
        TxnState::Ongoing => {}
        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort => {
            next.state = TxnState::Ongoing;
            next.partitions.clear();
            next.groups.clear();
            next.start_ms = now_ms;
        }
    }
    let added = add(&mut next);
    if !added && r.state == TxnState::Ongoing {
        return Ok(None);
    }
    next.update_ms = now_ms;
    Ok(Some(next))
}

/// AddPartitionsToTxn: the partitions join the transaction (which starts if none is
/// open).
pub fn add_partitions(
    r: &TxnRecord,
    producer_id: i64,
    epoch: i16,
    partitions: &[(Uuid, i32)],
    now_ms: i64,
) -> Result<Option<TxnRecord>> {
    open_with(r, producer_id, epoch, now_ms, |next| {
        let before = next.partitions.len();
        next.partitions.extend_from_slice(partitions);
        next.partitions.sort_unstable();
        next.partitions.dedup();
        next.partitions.len() != before
    })
}

/// AddOffsetsToTxn: the group's offsets will be committed with the transaction.
pub fn add_group(
    r: &TxnRecord,
    producer_id: i64,
    epoch: i16,
    group: &str,
    now_ms: i64,
) -> Result<Option<TxnRecord>> {
    open_with(r, producer_id, epoch, now_ms, |next| {
        if next.groups.iter().any(|g| g == group) {
            return false;
        }
        next.groups.push(group.to_string());
        next.groups.sort_unstable();
        true
    })
}

/// Whether a transaction may commit offsets for `group` (TxnOffsetCommit): it is open
/// and the group was added to it.
pub fn check_offsets(r: &TxnRecord, producer_id: i64, epoch: i16, group: &str) -> Result<()> {
    check_producer(r, producer_id, epoch)?;
    if r.state != TxnState::Ongoing || !r.groups.iter().any(|g| g == group) {
        return Err(TxnError::InvalidState {
            id: r.transactional_id.clone(),
            state: r.state.name(),
            what: "committing offsets of a group not added to the transaction",
        });
    }
    Ok(())
}

/// What EndTxn does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Write this prepared record, then its markers.
    Prepare(TxnRecord),
    /// The same end was asked before and is complete (a retry): answer success.
    Done,
    /// The same end was asked before and its markers are being written: answer
    /// success once they are.
    Pending,
}

/// EndTxn: commit or abort the open transaction.
pub fn end_txn(
    r: &TxnRecord,
    producer_id: i64,
    epoch: i16,
    commit: bool,
    now_ms: i64,
) -> Result<End> {
    check_producer(r, producer_id, epoch)?;
    let invalid = |what| TxnError::InvalidState {
        id: r.transactional_id.clone(),
        state: r.state.name(),
        what,
    };
    match (r.state, commit) {
        (TxnState::Ongoing, _) => Ok(End::Prepare(prepare(r, commit, false, now_ms))),
        (TxnState::CompleteCommit, true) | (TxnState::CompleteAbort, false) => Ok(End::Done),
        (TxnState::PrepareCommit, true) | (TxnState::PrepareAbort, false) => Ok(End::Pending),
        (TxnState::PrepareCommit | TxnState::PrepareAbort, _) => Err(concurrent(r)),
        // An abort with nothing open (the producer aborts after an error before it
        // added a partition) has nothing to do.
        (TxnState::Empty, false) => Ok(End::Done),
        (TxnState::Empty, true) => Err(invalid("a commit with no transaction open")),
        (TxnState::CompleteAbort, true) => Err(invalid("a commit after an abort")),
        // The last transaction committed (a client that lost the answer and aborts
        // must not believe it aborted).
        (TxnState::CompleteCommit, false) => Err(invalid("an abort after a commit")),
    }
}

/// The record of an open transaction whose end is decided. `fence` raises the
/// producer epoch (a timeout, a new producer): the markers then fence the old one.
fn prepare(r: &TxnRecord, commit: bool, fence: bool, now_ms: i64) -> TxnRecord {
    let mut next = r.clone();
    next.state = if commit {
        TxnState::PrepareCommit
    } else {
        TxnState::PrepareAbort
    };
    if fence {
        next.producer_epoch = next.producer_epoch.saturating_add(1);
    }
    // i32::MAX ended transactions of one producer id: the producer id changes first
    // (its epochs, raised at every InitProducerId, run out long before in practice).
    next.marker_epoch = next.marker_epoch.saturating_add(1);
    next.update_ms = now_ms;
    next
}

/// The record once every marker of a prepared transaction is written.
pub fn complete(r: &TxnRecord, now_ms: i64) -> Option<TxnRecord> {
    let state = match r.state {
        TxnState::PrepareCommit => TxnState::CompleteCommit,
        TxnState::PrepareAbort => TxnState::CompleteAbort,
        _ => return None,
    };
    let mut next = r.clone();
    next.state = state;
    next.start_ms = -1;
    next.update_ms = now_ms;
    Some(next)
}

/// The record aborting an open transaction past its timeout (epoch raised), if it is.
pub fn expire(r: &TxnRecord, now_ms: i64) -> Option<TxnRecord> {
    (r.state == TxnState::Ongoing && now_ms - r.start_ms > i64::from(r.timeout_ms))
        .then(|| prepare(r, false, true, now_ms))
}

/// Whether a transactional id's record may be removed: no transaction is open or being
/// decided, and its last request is more than `expiration_ms` old.
pub fn id_expired(r: &TxnRecord, now_ms: i64, expiration_ms: i64) -> bool {
    use TxnState::*;
    matches!(r.state, Empty | CompleteCommit | CompleteAbort)
        && now_ms.saturating_sub(r.update_ms) > expiration_ms
}

/// One lock per transactional id: its coordinator handles one request of an id at a
/// time (the metastore's compare-and-set keeps two coordinators apart; this keeps one
/// coordinator's own requests from racing each other into conflicts).
#[derive(Debug, Default)]
pub struct TxnLocks(std::sync::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>);

impl TxnLocks {
    pub async fn lock(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if locks.len() > 1024 {
                // Ids nobody holds or waits for.
                locks.retain(|_, l| Arc::strong_count(l) > 1);
            }
            locks.entry(id.to_string()).or_default().clone()
        };
        lock.lock_owned().await
    }
}

#[cfg(test)]
mod tests;
