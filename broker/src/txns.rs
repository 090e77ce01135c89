//! The transaction coordinator on this broker. A transactional id's coordinator is
//! the broker its id hashes to among the live brokers (as for groups); its record
//! lives in the metastore, and every change is a compare-and-set on the record's
//! version, so a coordinator whose view is stale changes nothing. The decisions are
//! `shale_coordinator::txn`'s; this module reads, writes, and has the partitions'
//! leaders write the markers of a decided transaction (`txns/markers.rs`).
//!
//! A decided transaction (PrepareCommit, PrepareAbort) is finished by whoever
//! coordinates its id: at once after EndTxn, and by the periodic pass after a crash or
//! a move of the coordinator. The pass also aborts transactions past their timeout,
//! and removes the records of ids idle past `transactional_id_expiration_ms`. It reads
//! only the records it may act on (open, being decided, or idle that long).

use std::collections::BTreeMap;

use shale_coordinator::txn::{self as decide, End, Init, TxnError};
use shale_metastore::{TxnOffsets, TxnRecord, TxnState};
use uuid::Uuid;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::groups::{GroupError, OffsetCommit, coordinator_of};

mod markers;

pub use markers::MarkerOutcome;

/// A metastore that cannot answer now makes the coordinator unavailable: the client
/// finds it again and retries, as Kafka's coordinator answers when its log cannot be
/// written. A write whose answer was lost (it may have happened) is retried the same
/// way, and the retry finds the record as it is. Any other answer would be taken for
/// a failed transaction: librdkafka aborts after an EndTxn answered REQUEST_TIMED_OUT,
/// even when the commit had been decided.
fn unavailable(e: shale_metastore::Error) -> Error {
    match e.is_retriable() {
        true => GroupError::CoordinatorNotAvailable.into(),
        false => e.into(),
    }
}

/// A transaction as DescribeTransactions and ListTransactions show it.
#[derive(Debug, Clone)]
pub struct TxnDescription {
    pub transactional_id: String,
    pub state: TxnState,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    pub start_ms: i64,
    /// Its partitions, by topic name.
    pub topics: BTreeMap<String, Vec<i32>>,
}

impl Broker {
    /// Refuses a transactional id this broker does not coordinate.
    fn txn_coordinating(&self, id: &str) -> Result<()> {
        decide::validate_transactional_id(id)?;
        let live: Vec<i32> = (self.coordinator_candidates().iter())
            .map(|b| b.broker_id)
            .collect();
        let coordinator = coordinator_of(id, &live).ok_or(GroupError::CoordinatorNotAvailable)?;
        if coordinator != self.config.broker_id || !self.lease_valid() {
            return Err(GroupError::NotCoordinator {
                group: id.to_string(),
                coordinator,
            }
            .into());
        }
        Ok(())
    }

    /// The broker coordinating transactional id `id` and its inter-broker address.
    pub fn txn_coordinator_for(&self, id: &str) -> Result<(i32, String)> {
        decide::validate_transactional_id(id)?;
        let live = self.coordinator_candidates();
        let ids: Vec<i32> = live.iter().map(|b| b.broker_id).collect();
        let coordinator = coordinator_of(id, &ids).ok_or(GroupError::CoordinatorNotAvailable)?;
        let address = (live.into_iter())
            .find(|b| b.broker_id == coordinator)
            .map(|b| b.address)
            .unwrap_or_default();
        Ok((coordinator, address))
    }

    async fn load_txn(&self, id: &str) -> Result<TxnRecord> {
        (self.metastore.transaction(id).await)
            .map_err(unavailable)?
            .ok_or_else(|| Error::Txn(TxnError::InvalidProducerIdMapping(id.to_string())))
    }

    /// Writes `record` (a compare-and-set on its version); the record as stored.
    async fn store_txn(&self, mut record: TxnRecord, offsets: TxnOffsets) -> Result<TxnRecord> {
        match self.metastore.write_transaction(&record, offsets).await {
            Ok(version) => {
                record.version = version;
                Ok(record)
            }
            // Another coordinator changed it: the client retries (and finds the
            // coordinator again if it moved).
            Err(shale_metastore::Error::TxnConflict { .. }) => Err(TxnError::Concurrent {
                id: record.transactional_id.clone(),
                state: "changed by another coordinator",
            }
            .into()),
            Err(e) => Err(unavailable(e)),
        }
    }

    /// InitProducerId with a transactional id: the producer's id and its new epoch,
    /// which fences every earlier producer of the id. An open transaction is aborted
    /// first (the answer is then CONCURRENT_TRANSACTIONS, and the producer retries).
    pub async fn init_transactional_producer(
        &self,
        id: &str,
        timeout_ms: i32,
        expected: (i64, i16),
    ) -> Result<(i64, i16)> {
        self.txn_coordinating(id)?;
        let _lock = self.coordinators.txn_locks().lock(id).await;
        let current = self.metastore.transaction(id).await?;
        let new_id = if decide::needs_producer_id(current.as_ref()) {
            self.coordinators.producer_ids().init_producer_id().await?.0
        } else {
            -1
        };
        match decide::init_producer(current.as_ref(), id, timeout_ms, expected, new_id, now_ms())? {
            Init::Ready(record) => {
                let r = self.store_txn(record, TxnOffsets::Keep).await?;
                Ok((r.producer_id, r.producer_epoch))
            }
            Init::AbortFirst(record) => {
                let prepared = self.store_txn(record, TxnOffsets::Discard).await?;
                let state = prepared.state.name();
                // Bounded: a partition without a leader must not hold the id's lock;
                // the periodic pass finishes what is left, and the producer retries.
                let finish = tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    self.finish_txn(prepared),
                );
                if let Ok(Err(e)) = finish.await {
                    tracing::debug!(transactional_id = id, error = %e,
                        "the open transaction's abort is finished in the background");
                }
                Err(TxnError::Concurrent {
                    id: id.to_string(),
                    state,
                }
                .into())
            }
        }
    }

    /// AddPartitionsToTxn: one answer per partition (all the same when the request
    /// as a whole is refused; none is added unless every partition exists). With
    /// `verify_only` (v4, KIP-890) nothing is added: each answer says whether the
    /// partition is in the open transaction.
    pub async fn add_partitions_to_txn(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(String, i32)],
        verify_only: bool,
    ) -> Vec<Result<()>> {
        let mut found = Vec::new();
        let mut unknown = Vec::new();
        for (i, (topic, partition)) in partitions.iter().enumerate() {
            match self.topic(topic) {
                Ok(t) if (0..t.meta.partitions).contains(partition) => {
                    found.push((t.meta.id, *partition))
                }
                Ok(_) => unknown.push((
                    i,
                    Error::UnknownPartition {
                        topic: topic.clone(),
                        partition: *partition,
                    },
                )),
                Err(e) => unknown.push((i, e)),
            }
        }
        if !unknown.is_empty() {
            // Kafka's answer: the unknown ones say why, the others that they were
            // not tried.
            let mut out: Vec<Result<()>> = (0..partitions.len())
                .map(|_| Err(Error::OperationNotAttempted))
                .collect();
            for (i, e) in unknown {
                out[i] = Err(e);
            }
            return out;
        }
        if verify_only {
            return self.verify_partitions(id, producer_id, epoch, &found).await;
        }
        let r = self.add_to_txn(id, |r, now| {
            decide::add_partitions(r, producer_id, epoch, &found, now)
        });
        let shared = match r.await {
            Ok(()) => return partitions.iter().map(|_| Ok(())).collect(),
            Err(e) => std::sync::Arc::new(e),
        };
        partitions
            .iter()
            .map(|_| Err(Error::Shared(shared.clone())))
            .collect()
    }

    async fn verify_partitions(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        partitions: &[(Uuid, i32)],
    ) -> Vec<Result<()>> {
        let record = match self.load_txn(id).await {
            Ok(r) => r,
            Err(e) => {
                let e = std::sync::Arc::new(e);
                return partitions
                    .iter()
                    .map(|_| Err(Error::Shared(e.clone())))
                    .collect();
            }
        };
        partitions
            .iter()
            .map(|p| {
                let open = record.producer_id == producer_id
                    && record.producer_epoch == epoch
                    && record.state == TxnState::Ongoing
                    && record.partitions.contains(p);
                match open {
                    true => Ok(()),
                    false => Err(Error::InvalidTxnState(format!(
                        "partition {} is not in an open transaction of '{id}'",
                        p.1
                    ))),
                }
            })
            .collect()
    }

    /// AddOffsetsToTxn: the group's offsets commit (or not) with the transaction.
    pub async fn add_offsets_to_txn(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        group: &str,
    ) -> Result<()> {
        crate::groups::validate_group_id(group)?;
        self.add_to_txn(id, |r, now| {
            decide::add_group(r, producer_id, epoch, group, now)
        })
        .await
    }

    async fn add_to_txn(
        &self,
        id: &str,
        add: impl FnOnce(&TxnRecord, i64) -> decide::Result<Option<TxnRecord>>,
    ) -> Result<()> {
        self.txn_coordinating(id)?;
        let _lock = self.coordinators.txn_locks().lock(id).await;
        let current = self.load_txn(id).await?;
        if let Some(next) = add(&current, now_ms())? {
            // A transaction that starts here leaves the last one's offsets behind
            // (there are none: its end committed or dropped them).
            self.store_txn(next, TxnOffsets::Keep).await?;
        }
        Ok(())
    }

    /// EndTxn: decides the transaction, has its markers written, and answers once they
    /// are (or, if that takes longer than the request may wait, once the decision is
    /// stored: the coordinator finishes it in the background).
    pub async fn end_txn(
        &self,
        id: &str,
        producer_id: i64,
        epoch: i16,
        commit: bool,
    ) -> Result<()> {
        self.txn_coordinating(id)?;
        let _lock = self.coordinators.txn_locks().lock(id).await;
        let current = self.load_txn(id).await?;
        let prepared = match decide::end_txn(&current, producer_id, epoch, commit, now_ms())? {
            End::Done => return Ok(()),
            End::Pending => current,
            End::Prepare(next) => {
                let offsets = if commit {
                    TxnOffsets::Commit
                } else {
                    TxnOffsets::Discard
                };
                self.store_txn(next, offsets).await?
            }
        };
        // The decision is stored: the answer is success whatever happens to the
        // markers now (an error would tell the client to abort a transaction that
        // commits); the periodic pass finishes what this cannot.
        match tokio::time::timeout(
            std::time::Duration::from_secs(20),
            self.finish_txn(prepared),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(error)) => tracing::warn!(transactional_id = id, %error,
                "cannot finish a decided transaction now: finished in the background"),
            Err(_) => tracing::warn!(
                transactional_id = id,
                "markers not all written within 20 s: finished in the background"
            ),
        }
        Ok(())
    }

    /// TxnOffsetCommit: offsets stored with the transaction, the group's only if it
    /// commits. One answer per partition. `member`: the consumer's generation, member
    /// id and instance id (KIP-447, v3+), checked as an OffsetCommit's are, so a
    /// consumer fenced by a rebalance cannot commit through its producer.
    pub async fn txn_offset_commit(
        &self,
        id: &str,
        group: &str,
        producer_id: i64,
        epoch: i16,
        member: Option<(i32, &str, Option<&str>)>,
        offsets: Vec<OffsetCommit>,
    ) -> Result<Vec<Result<()>>> {
        self.ensure_coordinator(group)?;
        if let Some((generation, member, instance)) = member {
            let groups = self.coordinators.groups();
            groups.check_instance(group, member, instance)?;
            groups.authorize_commit(group, generation, member)?;
        }
        let record = self.load_txn(id).await?;
        decide::check_offsets(&record, producer_id, epoch, group)?;
        let (rows, results) = self.offset_rows(offsets, now_ms());
        if !rows.is_empty() {
            match (self.metastore)
                .put_txn_offsets(id, record.version, group, &rows)
                .await
            {
                Err(shale_metastore::Error::TxnConflict { .. }) => {
                    return Err(TxnError::Concurrent {
                        id: id.to_string(),
                        state: "changed while its offsets were written",
                    }
                    .into());
                }
                r => r.map_err(unavailable)?,
            }
        }
        Ok(results)
    }

    /// KIP-890: a transactional producer's first batch in a partition must belong to
    /// the transaction its coordinator's record shows open there. Returns the marker
    /// epoch of the producer's last ended transaction, which the partition checks
    /// again under its lock (see `partition::txn`); `None` when there is nothing to
    /// verify (no transactional batch, or its transaction is open here already).
    pub(crate) async fn verify_txn(
        &self,
        transactional_id: Option<&str>,
        p: &crate::partition::Partition,
        records: &[u8],
    ) -> Result<Option<i32>> {
        let Some((producer_id, epoch)) = crate::partition::transactional_producer(records)? else {
            return Ok(None);
        };
        if p.has_open_txn(producer_id, epoch) {
            return Ok(None);
        }
        let Some(id) = transactional_id else {
            return Err(Error::InvalidTxnState(
                "a transactional batch needs the producer's transactional id".into(),
            ));
        };
        let record = self.load_txn(id).await?;
        if record.producer_id != producer_id {
            return Err(TxnError::InvalidProducerIdMapping(id.to_string()).into());
        }
        if record.producer_epoch != epoch {
            return Err(Error::Producer(
                shale_log::producers::ProducerError::InvalidEpoch {
                    producer_id,
                    sent: epoch,
                    current: record.producer_epoch,
                },
            ));
        }
        let key = (p.topic_id, p.index);
        if record.state != TxnState::Ongoing || !record.partitions.contains(&key) {
            return Err(Error::InvalidTxnState(format!(
                "partition {} of '{}' is not in an open transaction of '{id}'",
                p.index, p.topic
            )));
        }
        Ok(Some(record.marker_epoch))
    }

    /// The partitions (topic name, partition) of `group` with offsets pending in an
    /// open transaction: an OffsetFetch that requires stable offsets (KIP-447) is
    /// answered UNSTABLE_OFFSET_COMMIT for them, and retries.
    pub async fn pending_txn_offsets(&self, group: &str) -> Result<Vec<(String, i32)>> {
        let pending = self.metastore.pending_txn_offsets(group).await?;
        let names: BTreeMap<Uuid, String> = (self.topics_snapshot().iter())
            .map(|t| (t.meta.id, t.meta.name.clone()))
            .collect();
        Ok(pending
            .into_iter()
            .filter_map(|(id, p)| Some((names.get(&id)?.clone(), p)))
            .collect())
    }

    /// The transactions of these ids (those this broker coordinates), for
    /// DescribeTransactions: one answer per id.
    pub async fn describe_transactions(&self, ids: &[String]) -> Vec<Result<TxnDescription>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let r = async {
                self.txn_coordinating(id)?;
                match self.metastore.transaction(id).await? {
                    Some(r) => Ok(self.describe(r)),
                    None => Err(Error::TransactionalIdNotFound(id.clone())),
                }
            };
            out.push(r.await);
        }
        out
    }

    /// The transactions this broker coordinates, filtered by state and producer id
    /// (empty filters: all), for ListTransactions.
    pub async fn list_transactions(
        &self,
        states: &[String],
        producer_ids: &[i64],
    ) -> Result<Vec<TxnDescription>> {
        let records = self.metastore.transactions().await?;
        Ok(records
            .into_iter()
            .filter(|r| self.txn_coordinating(&r.transactional_id).is_ok())
            .filter(|r| states.is_empty() || states.iter().any(|s| s == r.state.name()))
            .filter(|r| producer_ids.is_empty() || producer_ids.contains(&r.producer_id))
            .map(|r| self.describe(r))
            .collect())
    }

    fn describe(&self, r: TxnRecord) -> TxnDescription {
        let names: BTreeMap<Uuid, String> = (self.topics_snapshot().iter())
            .map(|t| (t.meta.id, t.meta.name.clone()))
            .collect();
        let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for (topic_id, partition) in &r.partitions {
            if let Some(name) = names.get(topic_id) {
                topics.entry(name.clone()).or_default().push(*partition);
            }
        }
        TxnDescription {
            transactional_id: r.transactional_id,
            state: r.state,
            producer_id: r.producer_id,
            producer_epoch: r.producer_epoch,
            timeout_ms: r.timeout_ms,
            start_ms: r.start_ms,
            topics,
        }
    }

    /// The periodic pass: finishes the decided transactions of the ids this broker
    /// coordinates, aborts those open past their timeout, and removes the ids idle
    /// past their expiration.
    pub(crate) async fn txns_tick(&self) {
        let expiration = self.config.transactions.transactional_id_expiration_ms;
        let now = now_ms();
        let records = match (self.metastore)
            .transactions_to_check(now.saturating_sub(expiration))
            .await
        {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the transactions");
                return;
            }
        };
        for r in records {
            let due = r.state.is_prepared()
                || decide::expire(&r, now).is_some()
                || decide::id_expired(&r, now, expiration);
            if !due || self.txn_coordinating(&r.transactional_id).is_err() {
                continue;
            }
            let id = r.transactional_id.clone();
            // One stuck transaction (a partition without a leader) holds up no other.
            let pass = tokio::time::timeout(std::time::Duration::from_secs(5), self.tick_one(&id));
            match pass.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!(transactional_id = %id, error = %e,
                    "cannot finish or expire a transaction"),
                Err(_) => tracing::debug!(transactional_id = %id,
                    "transaction not finished yet: its markers are retried"),
            }
        }
    }

    async fn tick_one(&self, id: &str) -> Result<()> {
        let _lock = self.coordinators.txn_locks().lock(id).await;
        let Some(r) = self.metastore.transaction(id).await? else {
            return Ok(());
        };
        let expiration = self.config.transactions.transactional_id_expiration_ms;
        if decide::id_expired(&r, now_ms(), expiration) {
            // A request that changed the record since it was read keeps it.
            if self.metastore.delete_transaction(id, r.version).await? {
                tracing::info!(
                    transactional_id = id,
                    producer_id = r.producer_id,
                    idle_ms = now_ms() - r.update_ms,
                    "transactional id expired: its record is removed"
                );
            }
            return Ok(());
        }
        let prepared = match decide::expire(&r, now_ms()) {
            Some(abort) => {
                tracing::info!(
                    transactional_id = id,
                    producer_id = r.producer_id,
                    timeout_ms = r.timeout_ms,
                    "transaction timed out: aborting it"
                );
                self.store_txn(abort, TxnOffsets::Discard).await?
            }
            None if r.state.is_prepared() => r,
            None => return Ok(()),
        };
        self.finish_txn(prepared).await.map(|_| ())
    }
}
