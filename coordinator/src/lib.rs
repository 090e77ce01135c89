//! Shale's coordinators: the state a broker keeps for clients beyond their partitions.
//! The group coordinator (`group`) runs Kafka's classic consumer-group protocol in
//! memory; `producer_ids` hands out the ids of idempotent producers; `txn` decides the
//! transaction coordinator's moves. None does I/O of its own beyond the metastore:
//! the broker drives them and persists what they decide.

pub mod group;
pub mod producer_ids;
pub mod txn;

pub use group::Coordinator;
pub use producer_ids::ProducerIds;

/// The coordinators one broker runs.
pub struct Coordinators {
    groups: Coordinator,
    producer_ids: ProducerIds,
    txn_locks: txn::TxnLocks,
}

impl Coordinators {
    pub fn new(groups: Coordinator, producer_ids: ProducerIds) -> Self {
        Self {
            groups,
            producer_ids,
            txn_locks: Default::default(),
        }
    }

    /// The consumer groups this broker coordinates.
    pub fn groups(&self) -> &Coordinator {
        &self.groups
    }

    /// Ids for idempotent producers.
    pub fn producer_ids(&self) -> &ProducerIds {
        &self.producer_ids
    }

    /// The transaction coordinator's lock per transactional id.
    pub fn txn_locks(&self) -> &txn::TxnLocks {
        &self.txn_locks
    }
}
