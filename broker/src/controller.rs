//! The controller: leader elections, ISR and ELR changes after deaths, preferred
//! leader elections and leader rebalancing.
//!
//! One broker holds the controller lease (a compare-and-set row with an epoch). Each
//! `controller_interval_ms` it looks for partitions whose leader's lease expired (or
//! that have none) and elects the first live ISR member in replica order, bumping the
//! leader epoch and dropping dead brokers from the ISR; with no live ISR member it
//! elects a live out-of-sync replica only if `unclean.leader.election.enable`, and
//! otherwise leaves the partition offline (leader -1) until an ISR member returns.
//! A dead broker also leaves the ISR of partitions whose leader lives. Every change is
//! a compare-and-set on the partition's version.
//!

use std::collections::HashMap;
use std::time::Duration;

use shale_metastore::{PartitionState, StateGuard};

use crate::broker::Broker;
use crate::error::{Error, Result};
use shale_cluster::elections::{TopicRules, elect};

impl Broker {
    /// One controller round: take or renew the controller lease, then elect leaders
    /// where needed. Does nothing on brokers that are not the controller.
    pub(crate) async fn controller_pass(&self) -> Result<()> {
        let id = self.config.broker_id;
        let lease_ms = self.config.cluster.lease_ms as i64;
        let Some(lease) = self.metastore.try_acquire_controller(id, lease_ms).await? else {
            return Ok(());
        };
        if self.controller.took_epoch(lease.epoch) {
            tracing::info!(broker = id, epoch = lease.epoch, "became the controller");
        }
        let live = self.live_incarnations().await?;
        let cluster = &self.config.cluster;
        if cluster.auto_leader_rebalance_enable
            && self.controller.rebalance_due(Duration::from_millis(
                cluster.leader_imbalance_check_interval_ms,
            ))
            && let Err(e) = self.rebalance_leaders().await
        {
            tracing::warn!(error = %e, "leader rebalance failed");
        }
        // Elections follow deaths and partition changes: with neither since a pass
        // that decided everything, there is nothing to do (with many partitions, a
        // full pass is the costliest thing an idle broker does).
        let digest = self.registry.states_digest();
        if self.controller.may_skip(&live, digest) {
            return Ok(());
        }
        let mut settled = true;
        let rules: HashMap<uuid::Uuid, TopicRules> = self
            .topics_snapshot()
            .iter()
            .map(|t| {
                let rules = TopicRules {
                    min_isr: t.config.min_insync_replicas.max(1) as usize,
                    unclean: t.config.unclean_leader_election_enable,
                };
                (t.meta.id, rules)
            })
            .collect();
        for state in self.metastore.list_partition_states().await? {
            let topic_rules = rules.get(&state.topic_id).copied().unwrap_or(TopicRules {
                min_isr: 1,
                unclean: false,
            });
            let Some(next) = elect(&state, &live, topic_rules) else {
                continue;
            };
            // Taking the lead from a broker requires its lease to have expired, and the
            // new leader must still be the live incarnation this pass saw: one that
            // restarted since may have lost what made it eligible.
            let moved = next.leader != state.leader;
            let guard = StateGuard {
                expired: (moved && state.leader >= 0).then_some(state.leader),
                alive: (moved && next.leader >= 0).then(|| (next.leader, live[&next.leader])),
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
        self.controller.passed(settled, live, digest);
        Ok(())
    }

    /// Kafka's ElectLeaders. `topic` `None` means every topic; `partitions` `None`
    /// every partition.
    ///
    /// The preferred election moves each partition's leadership to its first replica
    /// where that one is alive, in the ISR and not leading already. The old leader
    /// stops acknowledging acks=all writes as soon as the new one stops fetching from
    /// it; acks=1 writes it takes before it learns of the change are truncated (as in
    /// Kafka).
    ///
    /// The `unclean` election gives each partition without a leader one, as
    /// `unclean.leader.election.enable` would: a live member of the ISR or ELR if any,
    /// else the recovering replica with the most complete log, else the first live
    /// replica. Records that only the lost replicas held are lost, and the new leader
    /// cuts the remote log where its own log leaves it.
    pub async fn elect_leaders(
        &self,
        topic: Option<&str>,
        partitions: Option<&[i32]>,
        unclean: bool,
    ) -> Result<Vec<(String, i32, Result<i32>)>> {
        let topics: HashMap<uuid::Uuid, String> = match topic {
            Some(name) => {
                let t = self
                    .topic(name)
                    .or(Err(Error::UnknownTopic(name.to_string())))?;
                HashMap::from([(t.meta.id, t.meta.name.clone())])
            }
            None => self
                .topics_snapshot()
                .iter()
                .map(|t| (t.meta.id, t.meta.name.clone()))
                .collect(),
        };
        let live = self.live_incarnations().await?;
        let mut out = Vec::new();
        for state in self.metastore.list_partition_states().await? {
            let Some(name) = topics.get(&state.topic_id) else {
                continue;
            };
            if partitions.is_some_and(|ps| !ps.contains(&state.partition)) {
                continue;
            }
            let result = if unclean {
                self.elect_unclean(&state, &live).await
            } else {
                self.elect_preferred(&state, &live).await
            };
            out.push((name.clone(), state.partition, result));
        }
        if let (Some(name), Some(wanted)) = (topic, partitions) {
            for p in wanted {
                if !out.iter().any(|(_, q, _)| q == p) {
                    let err = Error::UnknownPartition {
                        topic: name.to_string(),
                        partition: *p,
                    };
                    out.push((name.to_string(), *p, Err(err)));
                }
            }
        }
        out.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
        Ok(out)
    }

    async fn elect_preferred(
        &self,
        state: &PartitionState,
        live: &HashMap<i32, i64>,
    ) -> Result<i32> {
        let preferred = state.replicas.first().copied().unwrap_or(-1);
        if state.leader == preferred {
            return Err(Error::ElectionNotNeeded(preferred));
        }
        let Some(&epoch) = live
            .get(&preferred)
            .filter(|_| state.isr.contains(&preferred))
        else {
            return Err(Error::PreferredLeaderNotAvailable(preferred));
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

    async fn elect_unclean(&self, state: &PartitionState, live: &HashMap<i32, i64>) -> Result<i32> {
        if state.leader >= 0 {
            return Err(Error::ElectionNotNeeded(state.leader));
        }
        let min_isr = self
            .topics_snapshot()
            .iter()
            .find(|t| t.meta.id == state.topic_id)
            .map_or(1, |t| t.config.min_insync_replicas.max(1) as usize);
        let rules = TopicRules {
            min_isr,
            unclean: true,
        };
        let next = elect(state, live, rules)
            .filter(|n| n.leader >= 0)
            .ok_or_else(|| Error::EligibleLeadersNotAvailable(state.replicas.clone()))?;
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

    /// `auto.leader.rebalance.enable`: every `leader_imbalance_check_interval_ms`, a
    /// broker leading fewer than 90 % of the partitions it is the preferred replica of
    /// gets them back where it is alive and in sync (Kafka's 10 % imbalance rule).
    async fn rebalance_leaders(&self) -> Result<()> {
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
        let live = self.live_incarnations().await?;
        for s in &states {
            let Some(p) = s.replicas.first() else {
                continue;
            };
            // Only from a live leader: a dead one's partitions are the elections' job.
            if imbalanced.contains(p) && s.leader != *p && live.contains_key(&s.leader) {
                match self.elect_preferred(s, &live).await {
                    Ok(_) | Err(Error::PreferredLeaderNotAvailable(_)) => {}
                    Err(e) => tracing::info!(topic_id = %s.topic_id, partition = s.partition,
                        error = %e, "preferred leader not elected"),
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
