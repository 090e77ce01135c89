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

/// A move the balancer would start, by topic name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedMove {
    pub topic: String,
    pub partition: i32,
    pub replicas: Vec<i32>,
    pub target: Vec<i32>,
    pub reason: &'static str,
}

impl Broker {
    /// Marks a registered broker as decommissioned, or no longer.
    pub async fn decommission(&self, broker_id: i32, decommission: bool) -> Result<()> {
        match self
            .metastore
            .set_decommissioned(broker_id, decommission)
            .await
        {
            Ok(()) => {
                tracing::info!(
                    broker = broker_id,
                    decommission,
                    "broker decommissioning changed"
                );
                Ok(())
            }
            Err(shale_metastore::Error::BrokerNotFound(b)) => Err(Error::InvalidRequest(format!(
                "broker {b} has never registered"
            ))),
            Err(e) => Err(e.into()),
        }
    }

    /// The moves the controller's balancer would start now, with this broker's rules.
    pub async fn balance_plan(&self) -> Result<Vec<PlannedMove>> {
        let rules = self.balance_rules();
        let brokers: Vec<shale_cluster::balancer::BrokerView> =
            (self.metastore.list_brokers().await?)
                .iter()
                .map(Into::into)
                .collect();
        let states = self.metastore.list_partition_states().await?;
        let sizes = shale_cluster::controller::partition_sizes(self.metastore.as_ref()).await?;
        let names: HashMap<uuid::Uuid, String> = (self.metastore.list_topics().await?)
            .into_iter()
            .map(|t| (t.id, t.name))
            .collect();
        use shale_cluster::balancer::Why;
        Ok(
            shale_cluster::balancer::plan(&states, &brokers, &sizes, rules)
                .into_iter()
                .filter_map(|m| {
                    let s = states
                        .iter()
                        .find(|s| s.topic_id == m.topic_id && s.partition == m.partition)?;
                    Some(PlannedMove {
                        topic: names.get(&m.topic_id)?.clone(),
                        partition: m.partition,
                        replicas: s.replicas.clone(),
                        target: m.target,
                        reason: match m.why {
                            Why::Decommissioned => "decommissioned",
                            Why::Dead => "dead",
                            Why::RackSpread => "rack spread",
                            Why::DiskBalance => "disk balance",
                            Why::ReplicaBalance => "replica balance",
                            Why::LeaderBalance => "leader balance",
                        },
                    })
                })
                .collect(),
        )
    }

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
        let mut states = self.metastore.list_partition_states().await?;
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            out.push(self.alter_one(r, &registered, &mut states).await);
        }
        Ok(out)
    }

    /// One partition's change, from `states` (read again after a conflict, and
    /// updated with what is written).
    async fn alter_one(
        &self,
        r: &ReassignRequest,
        registered: &[i32],
        states: &mut [PartitionState],
    ) -> Result<()> {
        let topic = self.topic(&r.topic)?;
        if let Some(b) = (r.target.iter().flatten()).find(|b| !registered.contains(b)) {
            return Err(Error::InvalidReplicaAssignment(format!(
                "broker {b} is not registered"
            )));
        }
        let min_isr = topic.config.min_insync_replicas.max(1) as usize;
        let Some(at) =
            (states.iter()).position(|s| s.topic_id == topic.meta.id && s.partition == r.partition)
        else {
            return Err(Error::UnknownPartition {
                topic: r.topic.clone(),
                partition: r.partition,
            });
        };
        for attempt in 1..=ATTEMPTS {
            let state = &states[at];
            let next = match &r.target {
                Some(target) => match reassignment::start(state, target, min_isr)? {
                    Some(next) => next,
                    None => return Ok(()),
                },
                None => reassignment::cancel(state, min_isr)?,
            };
            match (self.metastore)
                .update_partition_state(&next, StateGuard::default())
                .await
            {
                Ok(stored) => {
                    tracing::info!(topic = %r.topic, partition = r.partition,
                        replicas = ?stored.replicas, adding = ?stored.adding, removing = ?stored.removing,
                        "partition reassignment {}", if r.target.is_some() { "started" } else { "cancelled" });
                    states[at] = stored;
                    self.registry.stale();
                    return Ok(());
                }
                Err(shale_metastore::Error::PartitionStateConflict { .. })
                    if attempt < ATTEMPTS =>
                {
                    let fresh = self.metastore.list_partition_states().await?;
                    match fresh
                        .into_iter()
                        .find(|s| s.topic_id == topic.meta.id && s.partition == r.partition)
                    {
                        Some(s) => states[at] = s,
                        None => {
                            return Err(Error::UnknownPartition {
                                topic: r.topic.clone(),
                                partition: r.partition,
                            });
                        }
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        unreachable!("the last attempt returns")
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
