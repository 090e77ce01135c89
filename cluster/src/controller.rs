//! The controller: leader elections, ISR and ELR changes after deaths, preferred
//! leader elections and leader rebalancing, written to the metastore.
//!
//! One broker holds the controller lease (a compare-and-set row with an epoch). Each
//! `controller_interval_ms` it looks for partitions whose leader's lease expired (or
//! that have none) and elects the first live ISR member in replica order, bumping the
//! leader epoch and dropping dead brokers from the ISR; with no live ISR member it
//! elects a live out-of-sync replica only if `unclean.leader.election.enable`, and
//! otherwise leaves the partition offline (leader -1) until an ISR member returns.
//! A dead broker also leaves the ISR of partitions whose leader lives. Every change is
//! a compare-and-set on the partition's version. The decisions are [`elect`]'s. A
//! partition reassignment whose new replicas have all joined the ISR is finished here
//! too ([`finish`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use shale_metastore::{BrokerLease, Metastore, PartitionState, StateGuard};

use crate::balancer::{BalanceRules, BrokerView, Sizes, Why, plan};
use crate::elections::{ControllerState, TopicRules, elect};
use crate::reassignment::finish;

/// What the controller does on its own besides elections after deaths.
#[derive(Debug, Clone, Copy)]
pub struct ControllerSettings {
    /// The controller lease's length.
    pub lease_ms: u64,
    /// Kafka's `auto.leader.rebalance.enable`.
    pub auto_leader_rebalance: bool,
    /// Kafka's `leader.imbalance.check.interval.seconds`, in ms.
    pub leader_imbalance_check_interval_ms: u64,
    /// The balancer's rules, and how often it plans (see [`crate::balancer`]).
    pub balance: BalanceRules,
    pub balance_interval_ms: u64,
}

/// Why an election asked for did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// The preferred replica leads already; or, for an unclean election, the
    /// partition has a leader.
    #[error("broker {0} leads already")]
    NotNeeded(i32),
    #[error("the preferred replica, broker {0}, is not alive and in sync")]
    PreferredLeaderNotAvailable(i32),
    #[error("no replica of the partition is alive (replicas {0:?})")]
    EligibleLeadersNotAvailable(Vec<i32>),
    #[error(transparent)]
    Metastore(#[from] shale_metastore::Error),
}

/// The brokers whose lease has not expired, with their incarnations.
pub async fn live_incarnations(
    metastore: &dyn Metastore,
) -> shale_metastore::Result<HashMap<i32, i64>> {
    Ok(metastore
        .list_brokers()
        .await?
        .into_iter()
        .filter(BrokerLease::is_alive)
        .map(|b| (b.broker_id, b.broker_epoch))
        .collect())
}

/// Partitions' local sizes as their leaders last reported them.
pub async fn partition_sizes(metastore: &dyn Metastore) -> shale_metastore::Result<Sizes> {
    Ok((metastore.partition_sizes().await?.into_iter())
        .map(|(topic, partition, bytes)| ((topic, partition), bytes.max(0) as u64))
        .collect())
}

/// One broker's controller: it acts while it holds the controller lease.
pub struct Controller {
    metastore: Arc<dyn Metastore>,
    broker_id: i32,
    state: ControllerState,
}

impl Controller {
    pub fn new(metastore: Arc<dyn Metastore>, broker_id: i32) -> Self {
        Self {
            metastore,
            broker_id,
            state: ControllerState::default(),
        }
    }

    /// One controller round: take or renew the controller lease, then elect leaders
    /// where needed. Does nothing on brokers that are not the controller. `digest`
    /// reads a value that changes whenever a partition's state did (read just before
    /// deciding whether the round may skip); `rules` gives each topic's election rules,
    /// asked for only when the round does not skip.
    pub async fn pass(
        &self,
        settings: ControllerSettings,
        digest: impl FnOnce() -> u64,
        rules: impl Fn() -> HashMap<uuid::Uuid, TopicRules>,
    ) -> shale_metastore::Result<()> {
        let id = self.broker_id;
        let lease_ms = settings.lease_ms as i64;
        let Some(lease) = self.metastore.try_acquire_controller(id, lease_ms).await? else {
            return Ok(());
        };
        if self.state.took_epoch(lease.epoch) {
            tracing::info!(broker = id, epoch = lease.epoch, "became the controller");
        }
        let live = live_incarnations(self.metastore.as_ref()).await?;
        if settings.auto_leader_rebalance
            && self.state.rebalance_due(Duration::from_millis(
                settings.leader_imbalance_check_interval_ms,
            ))
            && let Err(e) = self.rebalance_leaders().await
        {
            tracing::warn!(error = %e, "leader rebalance failed");
        }
        if self
            .state
            .balance_due(Duration::from_millis(settings.balance_interval_ms))
            && let Err(e) = self.balance(settings.balance, &live, &rules()).await
        {
            tracing::warn!(error = %e, "balancing failed");
        }
        // Elections follow deaths and partition changes: with neither since a pass
        // that decided everything, there is nothing to do (with many partitions, a
        // full pass is the costliest thing an idle broker does).
        let digest = digest();
        if self.state.may_skip(&live, digest) {
            return Ok(());
        }
        let rules = rules();
        let mut settled = true;
        for state in self.metastore.list_partition_states().await? {
            let topic_rules = rules.get(&state.topic_id).copied().unwrap_or(TopicRules {
                min_isr: 1,
                unclean: false,
            });
            let (next, guard) = if let Some(next) = elect(&state, &live, topic_rules) {
                // Taking the lead from a broker requires its lease to have expired, and
                // the new leader must still be the live incarnation this pass saw: one
                // that restarted since may have lost what made it eligible.
                let moved = next.leader != state.leader;
                let guard = StateGuard {
                    expired: (moved && state.leader >= 0).then_some(state.leader),
                    alive: (moved && next.leader >= 0).then(|| (next.leader, live[&next.leader])),
                };
                (next, guard)
            } else if let Some(next) =
                finish(&state, |b| live.contains_key(&b), topic_rules.min_isr)
            {
                // A reassignment whose new replicas are in sync. A leader that leaves
                // hands over as in a preferred election: it stays alive, and the new
                // one must be the incarnation this pass saw.
                let moved = next.leader != state.leader;
                let guard = StateGuard {
                    expired: None,
                    alive: moved.then(|| (next.leader, live[&next.leader])),
                };
                tracing::info!(topic_id = %state.topic_id, partition = state.partition,
                    replicas = ?next.replicas, removed = ?state.removing, "finishing the partition's reassignment");
                (next, guard)
            } else {
                // Nothing to do. (A reassignment waiting for its new replicas is looked
                // at again when they join the ISR: a change of the partition's state.)
                continue;
            };
            match self.metastore.update_partition_state(&next, guard).await {
                Ok(stored) => tracing::info!(
                    topic_id = %stored.topic_id, partition = stored.partition,
                    old_leader = state.leader, leader = stored.leader, epoch = stored.leader_epoch,
                    isr = ?stored.isr, elr = ?stored.elr, "controller changed the partition's leader or ISR"
                ),
                Err(e) => {
                    settled = false;
                    tracing::info!(topic_id = %state.topic_id, partition = state.partition,
                        error = %e, "leader change not written")
                }
            }
        }
        self.state.passed(settled, live, digest);
        Ok(())
    }

    /// Kafka's ElectLeaders for one partition, `live` being the live brokers'
    /// incarnations.
    ///
    /// The preferred election moves the partition's leadership to its first replica
    /// where that one is alive, in the ISR and not leading already. The old leader
    /// stops acknowledging acks=all writes as soon as the new one stops fetching from
    /// it; acks=1 writes it takes before it learns of the change are truncated (as in
    /// Kafka).
    ///
    /// The `unclean` election gives a partition without a leader one, as
    /// `unclean.leader.election.enable` would (with the topic's `min_isr`): a live
    /// member of the ISR or ELR if any, else the recovering replica with the most
    /// complete log, else the first live replica. Records that only the lost replicas
    /// held are lost, and the new leader cuts the remote log where its own log leaves
    /// it.
    pub async fn elect(
        &self,
        state: &PartitionState,
        live: &HashMap<i32, i64>,
        unclean: bool,
        min_isr: usize,
    ) -> Result<i32, ElectionError> {
        if unclean {
            self.elect_unclean(state, live, min_isr).await
        } else {
            self.elect_preferred(state, live).await
        }
    }

    async fn elect_preferred(
        &self,
        state: &PartitionState,
        live: &HashMap<i32, i64>,
    ) -> Result<i32, ElectionError> {
        let preferred = state.replicas.first().copied().unwrap_or(-1);
        if state.leader == preferred {
            return Err(ElectionError::NotNeeded(preferred));
        }
        let Some(&epoch) = live
            .get(&preferred)
            .filter(|_| state.isr.contains(&preferred))
        else {
            return Err(ElectionError::PreferredLeaderNotAvailable(preferred));
        };
        let next = PartitionState {
            leader: preferred,
            leader_epoch: state.leader_epoch + 1,
            ..state.clone()
        };
        let guard = StateGuard {
            expired: None,
            alive: Some((preferred, epoch)),
        };
        let stored = self.metastore.update_partition_state(&next, guard).await?;
        tracing::info!(topic_id = %stored.topic_id, partition = stored.partition,
            old_leader = state.leader, leader = stored.leader, epoch = stored.leader_epoch,
            "preferred leader elected");
        Ok(stored.leader)
    }

    async fn elect_unclean(
        &self,
        state: &PartitionState,
        live: &HashMap<i32, i64>,
        min_isr: usize,
    ) -> Result<i32, ElectionError> {
        if state.leader >= 0 {
            return Err(ElectionError::NotNeeded(state.leader));
        }
        let rules = TopicRules {
            min_isr,
            unclean: true,
        };
        let next = elect(state, live, rules)
            .filter(|n| n.leader >= 0)
            .ok_or_else(|| ElectionError::EligibleLeadersNotAvailable(state.replicas.clone()))?;
        let guard = StateGuard {
            expired: None,
            alive: Some((next.leader, live[&next.leader])),
        };
        let stored = self.metastore.update_partition_state(&next, guard).await?;
        tracing::warn!(topic_id = %stored.topic_id, partition = stored.partition,
            leader = stored.leader, epoch = stored.leader_epoch, isr = ?stored.isr,
            "unclean leader election asked for: records only the lost replicas held are lost");
        Ok(stored.leader)
    }

    /// Starts the balancer's moves as reassignments (see [`crate::balancer`]); a move
    /// that only reorders a partition's replicas (leader balance) takes effect at once
    /// and is followed by a preferred election.
    async fn balance(
        &self,
        rules: BalanceRules,
        live: &HashMap<i32, i64>,
        topics: &HashMap<uuid::Uuid, TopicRules>,
    ) -> shale_metastore::Result<()> {
        let brokers: Vec<BrokerView> = (self.metastore.list_brokers().await?)
            .iter()
            .map(BrokerView::from)
            .collect();
        let states = self.metastore.list_partition_states().await?;
        let sizes = if rules.disk_band_percent > 0 {
            partition_sizes(self.metastore.as_ref()).await?
        } else {
            Sizes::new()
        };
        for m in plan(&states, &brokers, &sizes, rules) {
            let Some(state) = states
                .iter()
                .find(|s| s.topic_id == m.topic_id && s.partition == m.partition)
            else {
                continue;
            };
            let min_isr = topics.get(&m.topic_id).map_or(1, |t| t.min_isr);
            let next = match crate::reassignment::start(state, &m.target, min_isr) {
                Ok(Some(next)) => next,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(topic_id = %m.topic_id, partition = m.partition, error = %e,
                        "the balancer planned a move that cannot start");
                    continue;
                }
            };
            let stored = match self
                .metastore
                .update_partition_state(&next, StateGuard::default())
                .await
            {
                Ok(stored) => stored,
                Err(e) => {
                    tracing::info!(topic_id = %m.topic_id, partition = m.partition, error = %e,
                        "the balancer's move was not written");
                    continue;
                }
            };
            tracing::info!(topic_id = %m.topic_id, partition = m.partition, why = ?m.why,
                from = ?state.replicas, to = ?m.target, "the balancer moves the partition");
            if m.why == Why::LeaderBalance && stored.leader != m.target[0] {
                match self.elect_preferred(&stored, live).await {
                    Ok(_) | Err(ElectionError::PreferredLeaderNotAvailable(_)) => {}
                    Err(e) => tracing::info!(topic_id = %m.topic_id, partition = m.partition,
                        error = %e, "preferred leader not elected"),
                }
            }
        }
        Ok(())
    }

    /// `auto.leader.rebalance.enable`: every `leader_imbalance_check_interval_ms`, a
    /// broker leading fewer than 90 % of the partitions it is the preferred replica of
    /// gets them back where it is alive and in sync (Kafka's 10 % imbalance rule).
    async fn rebalance_leaders(&self) -> shale_metastore::Result<()> {
        let states = self.metastore.list_partition_states().await?;
        let mut preferred: HashMap<i32, (usize, usize)> = HashMap::new();
        for s in &states {
            if let Some(&p) = s.replicas.first() {
                let entry = preferred.entry(p).or_default();
                entry.0 += 1;
                if s.leader != p {
                    entry.1 += 1;
                }
            }
        }
        let imbalanced: Vec<i32> = preferred
            .into_iter()
            .filter(|(_, (total, off))| *off * 10 > *total)
            .map(|(b, _)| b)
            .collect();
        if imbalanced.is_empty() {
            return Ok(());
        }
        let live = live_incarnations(self.metastore.as_ref()).await?;
        for s in &states {
            let Some(p) = s.replicas.first() else {
                continue;
            };
            // Only from a live leader: a dead one's partitions are the elections' job.
            if imbalanced.contains(p) && s.leader != *p && live.contains_key(&s.leader) {
                match self.elect_preferred(s, &live).await {
                    Ok(_) | Err(ElectionError::PreferredLeaderNotAvailable(_)) => {}
                    Err(e) => tracing::info!(topic_id = %s.topic_id, partition = s.partition,
                        error = %e, "preferred leader not elected"),
                }
            }
        }
        Ok(())
    }
}
