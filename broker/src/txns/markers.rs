//! Markers of a decided transaction: the coordinator has each partition's leader
//! write one (here, or over the inter-broker transport), retrying until every
//! partition has it replicated, and only then marks the transaction complete. On the
//! leader's side a marker is written like an acks=all produce.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use shale_metastore::{TxnOffsets, TxnRecord, TxnState};
use shale_records::ErrorCode;
use shale_records::control::Marker;
use uuid::Uuid;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};
use crate::transport::{MarkerResult, TxnMarkers};

/// How long a leader waits for a marker's replication before answering.
const REPLICATION_WAIT: Duration = Duration::from_secs(10);

/// What became of one partition's marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// Written and replicated (or written before).
    Written,
    /// Not needed: the topic is gone (in the coordinator's metadata), or the
    /// partition saw a later transaction's marker or a newer producer epoch (this
    /// transaction's end is behind it).
    Moot,
    /// Try again (no leader, a leader change, replication not done yet).
    Retry,
}

/// A leader's answer. An unknown topic is retried (the leader's view may lag, as
/// after its restart): a topic is moot only when the coordinator's own metadata no
/// longer has it (see `send_markers`).
fn outcome(code: ErrorCode) -> MarkerOutcome {
    match code {
        ErrorCode::None => MarkerOutcome::Written,
        ErrorCode::TransactionCoordinatorFenced | ErrorCode::InvalidProducerEpoch => {
            MarkerOutcome::Moot
        }
        _ => MarkerOutcome::Retry,
    }
}

impl Broker {
    /// Writes every marker of a prepared transaction and completes it; the record as
    /// stored. Gives up (an error) only when the broker stops or no longer
    /// coordinates the id; the periodic pass takes over then.
    pub(crate) async fn finish_txn(&self, record: TxnRecord) -> Result<TxnRecord> {
        let marker = TxnMarkers {
            producer_id: record.producer_id,
            producer_epoch: record.producer_epoch,
            commit: record.state == TxnState::PrepareCommit,
            coordinator_epoch: record.marker_epoch,
            partitions: Vec::new(),
        };
        let mut left: HashSet<(Uuid, i32)> = record.partitions.iter().copied().collect();
        let mut pause = Duration::from_millis(20);
        while !left.is_empty() {
            if self.cancel.is_cancelled() {
                return Err(Error::ShuttingDown);
            }
            self.txn_coordinating(&record.transactional_id)?;
            for (topic_id, partition, outcome) in self.send_markers(&marker, &left).await {
                if outcome != MarkerOutcome::Retry {
                    left.remove(&(topic_id, partition));
                }
            }
            if !left.is_empty() {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
        let done = shale_coordinator::txn::complete(&record, now_ms())
            .expect("only prepared transactions are finished");
        self.store_txn(done, TxnOffsets::Keep).await
    }

    /// One round: each partition's marker sent to its leader as this broker knows it.
    async fn send_markers(
        &self,
        marker: &TxnMarkers,
        partitions: &HashSet<(Uuid, i32)>,
    ) -> Vec<(Uuid, i32, MarkerOutcome)> {
        let topics = self.topics_snapshot();
        let mut by_leader: BTreeMap<i32, Vec<(Uuid, i32)>> = BTreeMap::new();
        let mut out = Vec::new();
        for &(topic_id, partition) in partitions {
            let Some(t) = topics.iter().find(|t| t.meta.id == topic_id) else {
                out.push((topic_id, partition, MarkerOutcome::Moot));
                continue;
            };
            match t.state(partition) {
                Some(s) if s.leader >= 0 => by_leader
                    .entry(s.leader)
                    .or_default()
                    .push((topic_id, partition)),
                _ => out.push((topic_id, partition, MarkerOutcome::Retry)),
            }
        }
        let sends = by_leader.into_iter().map(|(leader, partitions)| {
            let markers = TxnMarkers {
                partitions,
                ..marker.clone()
            };
            async move {
                let keys = markers.partitions.clone();
                let answers = if leader == self.config.broker_id {
                    Ok(self.write_txn_markers(markers).await)
                } else {
                    match self.broker_address(leader) {
                        Some(address) => {
                            let connector = self.followers.connector();
                            tokio::time::timeout(
                                REPLICATION_WAIT + Duration::from_secs(5),
                                connector.write_markers(&address, markers),
                            )
                            .await
                            .map_err(|_| "no answer in time".into())
                            .and_then(|r| r)
                        }
                        None => Err("the leader has no known address".into()),
                    }
                };
                match answers {
                    Ok(answers) => answers
                        .into_iter()
                        .map(|a| (a.topic_id, a.partition, outcome(a.error_code)))
                        .collect(),
                    Err(e) => {
                        tracing::debug!(leader, error = %e, "cannot send transaction markers");
                        (keys.into_iter())
                            .map(|(t, p)| (t, p, MarkerOutcome::Retry))
                            .collect::<Vec<_>>()
                    }
                }
            }
        });
        for answers in futures::future::join_all(sends).await {
            out.extend(answers);
        }
        out
    }

    /// Leader: writes one marker per partition and waits for its replication (as an
    /// acks=all produce does); one answer per partition.
    pub async fn write_txn_markers(&self, markers: TxnMarkers) -> Vec<MarkerResult> {
        let marker = if markers.commit {
            Marker::Commit
        } else {
            Marker::Abort
        };
        let writes = markers.partitions.iter().map(|&(topic_id, partition)| {
            let markers = &markers;
            async move {
                let r: Result<()> = async {
                    if !self.lease_valid() {
                        return Err(Error::LeaseLapsed);
                    }
                    let p = self.partition_by_id(topic_id, partition)?;
                    let min_isr = p.config().min_insync_replicas.max(1) as usize;
                    let (pid, epoch, ce) = (
                        markers.producer_id,
                        markers.producer_epoch,
                        markers.coordinator_epoch,
                    );
                    let p2 = p.clone();
                    let (offset, leader_epoch) = tokio::task::spawn_blocking(move || {
                        p2.append_marker(pid, epoch, marker, ce, now_ms())
                    })
                    .await??;
                    // A repeated marker too: the first one may not be replicated yet.
                    p.wait_committed(offset, leader_epoch, min_isr, REPLICATION_WAIT)
                        .await
                }
                .await;
                let (error_code, error_message) = match &r {
                    Ok(()) => (ErrorCode::None, String::new()),
                    Err(e) => (e.code(), e.to_string()),
                };
                MarkerResult {
                    topic_id,
                    partition,
                    error_code,
                    error_message,
                }
            }
        });
        futures::future::join_all(writes).await
    }
}
