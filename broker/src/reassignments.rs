//! Kafka's partition reassignment (AlterPartitionReassignments and
//! ListPartitionReassignments) by topic name: the decisions are
//! `shale_cluster::reassignment`'s, written to the metastore by compare-and-set; the
//! controller finishes each once its new replicas are in sync.

use std::collections::HashMap;

use shale_cluster::reassignment::{self, ReassignError};
use shale_metastore::{PartitionState, StateGuard};

use crate::broker::Broker;
use crate::error::{Error, Result};

/// Compare-and-set attempts per partition before giving up (the leader's ISR changes
/// race with a reassignment's start).
const ATTEMPTS: usize = 5;

/// A reassignment in flight, as ListPartitionReassignments shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reassignment {
    pub topic: String,
    pub partition: i32,
    /// The target replicas followed by the original ones that leave.
    pub replicas: Vec<i32>,
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

/// One partition's wanted change: a target (preferred leader first), or `None` to
/// cancel the reassignment in flight.
#[derive(Debug, Clone)]
pub struct ReassignRequest {
    pub topic: String,
    pub partition: i32,
    pub target: Option<Vec<i32>>,
}

impl From<ReassignError> for Error {
    fn from(e: ReassignError) -> Self {
        match e {
            ReassignError::NoneInFlight => Error::NoReassignmentInProgress,
            e => Error::InvalidReplicaAssignment(e.to_string()),
        }
    }
}

impl Broker {
    /// Starts, replaces or cancels reassignments; one result per request, in order.
    /// Every target broker must be registered.
    pub async fn alter_reassignments(
        &self,
        requests: &[ReassignRequest],
    ) -> Result<Vec<Result<()>>> {
        let registered: Vec<i32> = (self.metastore.list_brokers().await?)
            .iter()
            .map(|b| b.broker_id)
            .collect();
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            out.push(self.alter_one(r, &registered).await);
        }
        Ok(out)
    }

    async fn alter_one(&self, r: &ReassignRequest, registered: &[i32]) -> Result<()> {
        let topic = self.topic(&r.topic)?;
        if let Some(b) = (r.target.iter().flatten()).find(|b| !registered.contains(b)) {
            return Err(Error::InvalidReplicaAssignment(format!(
                "broker {b} is not registered"
            )));
        }
        for attempt in 1..=ATTEMPTS {
            let state = self
                .partition_state(topic.meta.id, &r.topic, r.partition)
                .await?;
            let next = match &r.target {
                Some(target) => match reassignment::start(&state, target)? {
                    Some(next) => next,
                    None => return Ok(()),
                },
                None => reassignment::cancel(&state)?,
            };
            match (self.metastore)
                .update_partition_state(&next, StateGuard::default())
                .await
            {
                Ok(stored) => {
                    tracing::info!(topic = %r.topic, partition = r.partition,
                        replicas = ?stored.replicas, adding = ?stored.adding, removing = ?stored.removing,
                        "partition reassignment {}", if r.target.is_some() { "started" } else { "cancelled" });
                    self.registry.stale();
                    return Ok(());
                }
                Err(shale_metastore::Error::PartitionStateConflict { .. })
                    if attempt < ATTEMPTS => {}
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the last attempt returns")
    }

    /// The metastore's current state of one partition.
    async fn partition_state(
        &self,
        topic_id: uuid::Uuid,
        topic: &str,
        partition: i32,
    ) -> Result<PartitionState> {
        (self.metastore.list_partition_states().await?)
            .into_iter()
            .find(|s| s.topic_id == topic_id && s.partition == partition)
            .ok_or_else(|| Error::UnknownPartition {
                topic: topic.to_string(),
                partition,
            })
    }

    /// The reassignments in flight, by topic and partition (`topics` `None`: of every
    /// topic; else of the listed partitions of the named topics).
    pub async fn list_reassignments(
        &self,
        topics: Option<&[(String, Vec<i32>)]>,
    ) -> Result<Vec<Reassignment>> {
        let names: HashMap<uuid::Uuid, String> = (self.metastore.list_topics().await?)
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect();
        let mut out: Vec<Reassignment> = (self.metastore.list_partition_states().await?)
            .into_iter()
            .filter(PartitionState::reassigning)
            .filter_map(|s| {
                let topic = names.get(&s.topic_id)?.clone();
                let wanted = topics.is_none_or(|ts| {
                    ts.iter()
                        .any(|(t, ps)| *t == topic && ps.contains(&s.partition))
                });
                wanted.then_some(Reassignment {
                    topic,
                    partition: s.partition,
                    replicas: s.replicas,
                    adding: s.adding,
                    removing: s.removing,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }
}
