//! Membership and control: this broker's lease, the controller, replica assignment.
//!
//! # Leases and fencing
//! Every broker renews a lease row in the metastore every `heartbeat_interval_ms`; the
//! metastore sets its expiry to `lease_ms` after it runs the renewal, by its own clock
//! (PostgreSQL's `clock_timestamp()`), and judges expiry by that clock alone, so no two
//! brokers' clocks are compared. A broker trusts its own lease only until 3/4 of
//! `lease_ms` after *sending* its last successful renewal, on its monotonic clock; past
//! that it refuses produce and acknowledges nothing (see [`Broker::lease_valid`]). The
//! controller moves leadership only once the full lease has expired, and does so in a
//! transaction that locks the old leader's lease row. So the old leader has stopped
//! acknowledging before a new one can start, and a broker whose lease lapsed (paused,
//! cut off, or a renewal that took too long) re-reads the metadata after renewing
//! before it acknowledges again. What remains assumed: the metastore's clock does not
//! run more than a quarter faster than the brokers' monotonic clocks over a lease, nor
//! jump forward by more than `lease_ms / 4`.
//!
//! # Controller
//! One broker holds the controller lease (a compare-and-set row with an epoch). Each
//! `controller_interval_ms` it looks for partitions whose leader's lease expired (or
//! that have none) and elects the first live ISR member in replica order, bumping the
//! leader epoch and dropping dead brokers from the ISR; with no live ISR member it
//! elects a live out-of-sync replica only if `unclean.leader.election.enable`, and
//! otherwise leaves the partition offline (leader -1) until an ISR member returns.
//! A dead broker also leaves the ISR of partitions whose leader lives. Every change is
//! a compare-and-set on the partition's version.
//!
//! # Restarts
//! A starting broker registers a new incarnation (broker epoch), which ends its lease,
//! and waits until the controller has moved every partition it led elsewhere (or
//! offline), so it never resumes leading at an epoch whose log it may have lost (power
//! loss). Unless its last stop was clean (every log fsynced), it then also leaves every
//! ISR that has another member, before its lease makes it eligible for election: a
//! follower that lost its unflushed tail or its disk is never elected for records it
//! no longer holds. Leaders refuse replica fetches from an older incarnation and add a
//! follower back to the ISR only once it has caught up (see `replication.rs`).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use shale_metastore::{BrokerLease, PartitionState, StateGuard};

use crate::broker::Broker;
use crate::error::{Error, Result};

/// A broker as `shale cluster status` shows it.
#[derive(Debug, Clone)]
pub struct BrokerStatus {
    pub lease: BrokerLease,
    pub alive: bool,
    pub leader_partitions: i32,
    pub replica_partitions: i32,
}

impl Broker {
    /// Whether this broker may act as leader now (its lease is surely not expired).
    pub fn lease_valid(&self) -> bool {
        self.lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|d| Instant::now() < d)
    }

    /// This broker's incarnation, registered at start.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Renews this broker's lease. Whether the lease lapsed is judged when the answer
    /// arrives, not when the renewal was sent: a slow renewal can land after the lease
    /// ran out in the metastore and the controller moved leaderships. After a lapse the
    /// metadata is read again before the lease counts as valid.
    pub(crate) async fn renew_lease(&self) -> Result<()> {
        let lease_ms = self.config.cluster.lease_ms;
        let sent = Instant::now();
        let renewed = self
            .metastore
            .renew_broker_lease(
                self.config.broker_id,
                self.broker_epoch(),
                &self.config.advertised_address(),
                lease_ms as i64,
            )
            .await;
        if let Err(shale_metastore::Error::BrokerEpochFenced { broker_id, .. }) = &renewed {
            *self
                .lease_deadline
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
            tracing::error!(
                broker = broker_id,
                "another process registered with this broker id: this one stops"
            );
            self.replaced
                .store(true, std::sync::atomic::Ordering::Relaxed);
            self.cancel.cancel();
        }
        renewed?;
        if !self.lease_valid() {
            tracing::info!(
                broker = self.config.broker_id,
                "lease (re)acquired, reloading metadata"
            );
            self.reconcile().await?;
        }
        *self
            .lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) =
            Some(sent + Duration::from_millis(lease_ms * 3 / 4));
        Ok(())
    }

    /// Gives up the lease (graceful shutdown), so leadership moves at once.
    pub(crate) async fn release_lease(&self) {
        *self
            .lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = None;
        let id = self.config.broker_id;
        match self
            .metastore
            .renew_broker_lease(
                id,
                self.broker_epoch(),
                &self.config.advertised_address(),
                0,
            )
            .await
        {
            Ok(()) => {}
            Err(shale_metastore::Error::BrokerEpochFenced { .. }) => {
                // Another process registered with this id: this one's stop is not the
                // clean stop of the newest incarnation.
                self.replaced
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Err(e) => tracing::warn!(error = %e, "cannot release the broker lease"),
        }
        if let Ok(Some(c)) = self.metastore.controller().await
            && c.broker_id == id
            && let Err(e) = self.metastore.try_acquire_controller(id, 0).await
        {
            tracing::warn!(error = %e, "cannot release the controller lease");
        }
    }

    /// Start-up fence (see the module docs): registers a new incarnation (its lease
    /// expired), waits, acting as controller if nobody else does, until no partition
    /// names this broker as leader (or `2 × lease_ms`), and, unless the last stop was
    /// clean, leaves the ISRs.
    pub(crate) async fn step_down_after_restart(&self, clean_marker: Option<i64>) -> Result<()> {
        let id = self.config.broker_id;
        // The marker counts only for the incarnation registered last.
        let registered = self
            .metastore
            .list_brokers()
            .await?
            .into_iter()
            .find(|b| b.broker_id == id)
            .map(|b| b.broker_epoch);
        let clean = clean_marker.is_some() && clean_marker == registered;
        let epoch = self
            .metastore
            .register_broker(id, &self.config.advertised_address())
            .await?;
        self.broker_epoch
            .store(epoch, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            broker = id,
            broker_epoch = epoch,
            clean_shutdown = clean,
            "registered"
        );
        let deadline = Instant::now() + Duration::from_millis(2 * self.config.cluster.lease_ms);
        loop {
            let led = self
                .metastore
                .list_partition_states()
                .await?
                .iter()
                .filter(|s| s.leader == id)
                .count();
            if led == 0 {
                break;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    partitions = led,
                    "no controller moved this broker's leadership away; continuing"
                );
                break;
            }
            self.controller_pass().await?;
            tokio::time::sleep(Duration::from_millis(
                self.config.cluster.controller_interval_ms,
            ))
            .await;
        }
        self.leave_isrs(clean, deadline).await
    }

    /// Makes sure this incarnation is elected for nothing its logs may have lost.
    /// - A partition that still names it as leader (the controller did not move it in
    ///   time, or elected it from a view older than its restart) goes offline at a new
    ///   epoch: the controller elects again, this broker too if it is the only choice.
    /// - After a start that did not follow a clean shutdown, its logs may have lost
    ///   their unflushed tails (power loss) or everything (a new disk): it leaves every
    ///   ELR, and every ISR that names another member or has an eligible replica, before
    ///   its lease makes it electable; each leader adds it back once it has caught up.
    ///   As the only member of both it stays: nothing could then be elected without an
    ///   unclean election.
    async fn leave_isrs(&self, clean: bool, deadline: Instant) -> Result<()> {
        let id = self.config.broker_id;
        loop {
            let mut conflicts = 0;
            for state in self.metastore.list_partition_states().await? {
                let mut next = state.clone();
                if state.leader == id {
                    next.leader = -1;
                    next.leader_epoch += 1;
                }
                if !clean {
                    next.elr.retain(|b| *b != id);
                    let others = next.isr.iter().chain(&next.elr).any(|b| *b != id);
                    if others {
                        next.isr.retain(|b| *b != id);
                    }
                }
                if next == state {
                    continue;
                }
                match self
                    .metastore
                    .update_partition_state(&next, StateGuard::default())
                    .await
                {
                    Ok(stored) => tracing::info!(topic_id = %stored.topic_id,
                        partition = stored.partition, leader = stored.leader,
                        isr = ?stored.isr, elr = ?stored.elr,
                        "gave up leadership and eligibility held before this start"),
                    Err(shale_metastore::Error::PartitionStateConflict { .. }) => conflicts += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            if conflicts == 0 {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Internal(format!(
                    "cannot leave the ISR of {conflicts} partition(s): their state keeps changing"
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Live brokers (lease not expired) and their incarnations.
    async fn live_incarnations(&self) -> Result<HashMap<i32, i64>> {
        Ok(self
            .metastore
            .list_brokers()
            .await?
            .into_iter()
            .filter(BrokerLease::is_alive)
            .map(|b| (b.broker_id, b.broker_epoch))
            .collect())
    }

    /// Live brokers (lease not expired), by id.
    pub(crate) async fn live_brokers(&self) -> Result<Vec<i32>> {
        Ok(self
            .metastore
            .list_brokers()
            .await?
            .into_iter()
            .filter(BrokerLease::is_alive)
            .map(|b| b.broker_id)
            .collect())
    }

    /// Replicas for `count` new partitions starting at `first`: leaders spread
    /// round-robin over the live brokers, followers on the next ones.
    pub(crate) async fn assign_replicas(
        &self,
        topic: &str,
        first: i32,
        count: i32,
        replication_factor: i32,
    ) -> Result<Vec<Vec<i32>>> {
        if replication_factor > 1 && !self.metastore.supports_replication() {
            return Err(Error::InvalidReplicationFactor(format!(
                "replication factor {replication_factor} needs a cluster: with the SQLite \
                 metastore Shale runs one broker, so it must be 1 (use a postgres:// metastore)"
            )));
        }
        let live = self.live_brokers().await?;
        if replication_factor < 1 || replication_factor as usize > live.len() {
            return Err(Error::InvalidReplicationFactor(format!(
                "replication factor {replication_factor} is invalid: it must be between 1 and the \
                 {} live broker(s)",
                live.len()
            )));
        }
        // A per-topic start spreads the leaders of many small topics too.
        let start = topic
            .bytes()
            .fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(b as usize));
        let n = live.len();
        Ok((first..first + count)
            .map(|p| {
                (0..replication_factor as usize)
                    .map(|j| live[(start + p as usize + j) % n])
                    .collect()
            })
            .collect())
    }

    /// One controller round: take or renew the controller lease, then elect leaders
    /// where needed. Does nothing on brokers that are not the controller.
    pub(crate) async fn controller_pass(&self) -> Result<()> {
        let id = self.config.broker_id;
        let lease_ms = self.config.cluster.lease_ms as i64;
        let Some(lease) = self.metastore.try_acquire_controller(id, lease_ms).await? else {
            return Ok(());
        };
        let was = self
            .controller_epoch
            .swap(lease.epoch, std::sync::atomic::Ordering::Relaxed);
        if was != lease.epoch {
            tracing::info!(broker = id, epoch = lease.epoch, "became the controller");
        }
        let live = self.live_incarnations().await?;
        if self.config.cluster.auto_leader_rebalance_enable {
            let due = {
                let mut last = self
                    .last_rebalance
                    .lock()
                    .unwrap_or_else(|e| e.into_inner());
                let every =
                    Duration::from_millis(self.config.cluster.leader_imbalance_check_interval_ms);
                let due = last.is_none_or(|t| t.elapsed() >= every);
                if due {
                    *last = Some(Instant::now());
                }
                due
            };
            if due && let Err(e) = self.rebalance_leaders().await {
                tracing::warn!(error = %e, "leader rebalance failed");
            }
        }
        // Elections follow deaths and partition changes: with neither since a pass
        // that decided everything, there is nothing to do (with many partitions, a
        // full pass is the costliest thing an idle broker does). A full pass still
        // runs every `FULL_PASS_EVERY` passes, should a change go unseen.
        let digest = self
            .states_digest
            .load(std::sync::atomic::Ordering::Relaxed);
        {
            let mut view = self
                .controller_view
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            view.skipped += 1;
            let unchanged = view.settled && view.live == live && view.digest == digest;
            if unchanged && view.skipped < FULL_PASS_EVERY {
                return Ok(());
            }
            view.skipped = 0;
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
        let mut view = self
            .controller_view
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        view.settled = settled;
        view.live = live;
        view.digest = digest;
        Ok(())
    }

    /// Preferred leader election: moves each partition's leadership to its first
    /// replica where that one is alive, in the ISR and not leading already. `topic`
    /// `None` means every topic; `partitions` `None` every partition. The old leader
    /// stops acknowledging acks=all writes as soon as the new one stops fetching from
    /// it; acks=1 writes it takes before it learns of the change are truncated (as in
    /// Kafka).
    pub async fn elect_preferred_leaders(
        &self,
        topic: Option<&str>,
        partitions: Option<&[i32]>,
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
            let result = self.elect_preferred(&state, &live).await;
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

    pub async fn cluster_status(
        &self,
    ) -> Result<(Option<shale_metastore::ControllerLease>, Vec<BrokerStatus>)> {
        let controller = self
            .metastore
            .controller()
            .await?
            .filter(|c| c.remaining_ms > 0);
        let states = self.metastore.list_partition_states().await?;
        let brokers = self
            .metastore
            .list_brokers()
            .await?
            .into_iter()
            .map(|lease| BrokerStatus {
                alive: lease.is_alive(),
                leader_partitions: states
                    .iter()
                    .filter(|s| s.leader == lease.broker_id)
                    .count() as i32,
                replica_partitions: states
                    .iter()
                    .filter(|s| s.replicas.contains(&lease.broker_id))
                    .count() as i32,
                lease,
            })
            .collect();
        Ok((controller, brokers))
    }
}

/// Full controller passes run at least once in this many.
const FULL_PASS_EVERY: u32 = 10;

/// What the controller's last full pass saw and whether it decided everything.
#[derive(Debug, Default)]
pub(crate) struct ControllerView {
    settled: bool,
    live: HashMap<i32, i64>,
    digest: u64,
    skipped: u32,
}

/// How the controller sees one partition's topic.
#[derive(Debug, Clone, Copy)]
struct TopicRules {
    min_isr: usize,
    unclean: bool,
}

/// The controller's decision for one partition: `None` if nothing changes (its leader
/// and ISR are alive, or it stays offline). `live` maps each live broker to its
/// incarnation.
///
/// A live leader keeps its epoch; dead brokers leave its ISR at once (as KRaft fences
/// them) instead of after the leader's `replica_lag_time_max_ms`, so acks=all stalls at
/// most a lease on a dead follower. A broker that leaves the ISR because it died while
/// the ISR is below `min.insync.replicas` becomes an eligible leader replica (ELR,
/// KIP-966): no acks=all record can be committed without it from then on, so when no
/// ISR member is alive it may lead without losing any. A dead leader is replaced by the
/// first live ISR member in replica order, else the first live ELR member, else (with
/// `unclean.leader.election.enable`) any live replica; otherwise the partition goes
/// offline, keeping its ISR and ELR so a member can lead again when it returns.
fn elect(
    state: &PartitionState,
    live: &HashMap<i32, i64>,
    rules: TopicRules,
) -> Option<PartitionState> {
    let is_live = |b: &i32| live.contains_key(b);
    let dead: Vec<i32> = state.isr.iter().copied().filter(|b| !is_live(b)).collect();
    // The ISR without its dead members; those become eligible while it is too small.
    let shrink = |isr: Vec<i32>, elr: &mut Vec<i32>| {
        if isr.len() < rules.min_isr {
            for b in &dead {
                if !elr.contains(b) {
                    elr.push(*b);
                }
            }
        }
        elr.retain(|b| !isr.contains(b));
        isr
    };
    if state.leader >= 0 && is_live(&state.leader) {
        if dead.is_empty() {
            return None;
        }
        let mut elr = state.elr.clone();
        let isr = shrink(
            state.isr.iter().copied().filter(is_live).collect(),
            &mut elr,
        );
        return Some(PartitionState {
            isr,
            elr,
            ..state.clone()
        });
    }
    let in_order = |set: &[i32]| -> Vec<i32> {
        state
            .replicas
            .iter()
            .copied()
            .filter(|b| set.contains(b) && is_live(b))
            .collect()
    };
    let live_isr = in_order(&state.isr);
    let live_elr = in_order(&state.elr);
    let mut elr = state.elr.clone();
    let (leader, isr) = if let Some(&leader) = live_isr.first() {
        (leader, shrink(live_isr, &mut elr))
    } else if let Some(&leader) = live_elr.first() {
        tracing::info!(topic_id = %state.topic_id, partition = state.partition, leader,
            "no ISR member is alive: electing an eligible leader replica");
        (leader, shrink(vec![leader], &mut elr))
    } else if let Some(&leader) = state.replicas.iter().find(|b| rules.unclean && is_live(b)) {
        tracing::warn!(topic_id = %state.topic_id, partition = state.partition, leader,
            "unclean leader election: records acknowledged by the old ISR may be lost");
        elr.clear();
        (leader, vec![leader])
    } else if state.leader >= 0 {
        // Offline until an ISR or ELR member returns.
        (-1, state.isr.clone())
    } else {
        return None;
    };
    Some(PartitionState {
        leader,
        leader_epoch: state.leader_epoch + 1,
        isr,
        elr,
        ..state.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A renewal sent while the lease was valid but answered after it lapsed: the
    /// controller may have moved leaderships meanwhile, so the broker must read the
    /// metadata again before it trusts the renewed lease (it used to judge the lapse
    /// when it sent the renewal, and kept acting as leader).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_renewal_answered_after_the_lease_lapsed_reloads_the_metadata() {
        use shale_metastore::Metastore;
        use std::sync::atomic::Ordering;
        let dir = tempfile::tempdir().unwrap();
        let t = crate::testing::TestBroker::start(dir.path(), "[cluster]\nlease_ms = 4000\n").await;
        let b = &t.broker;
        b.create_topic("t", 1, 1, Default::default(), false)
            .await
            .unwrap();
        assert!(b.leader_partition("t", 0).is_ok());
        b.renew_lease().await.unwrap(); // trusted for 3 s from now
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        // The next renewal takes 2 s: sent with 1.5 s of trust left, answered 0.5 s
        // after the trust ran out.
        t.metastore.renew_delay_ms.store(2_000, Ordering::SeqCst);
        let renewal = tokio::spawn({
            let b = b.clone();
            async move { b.renew_lease().await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        // Meanwhile the partition moves to another broker.
        let mut state = t.metastore.list_partition_states().await.unwrap()[0].clone();
        state.leader = 7;
        state.leader_epoch += 1;
        state.isr = vec![7];
        t.metastore
            .update_partition_state(&state, StateGuard::default())
            .await
            .unwrap();
        renewal.await.unwrap().unwrap();
        assert!(b.lease_valid());
        assert!(
            b.leader_partition("t", 0).is_err(),
            "acts as leader of a partition that moved while its lease had lapsed"
        );
    }

    fn state(leader: i32, isr: &[i32]) -> PartitionState {
        PartitionState {
            topic_id: uuid::Uuid::nil(),
            partition: 0,
            replicas: vec![1, 2, 3],
            leader,
            leader_epoch: 4,
            isr: isr.to_vec(),
            elr: Vec::new(),
            version: 9,
        }
    }

    fn live(ids: &[i32]) -> HashMap<i32, i64> {
        ids.iter().map(|&b| (b, 1)).collect()
    }

    const CLEAN: TopicRules = TopicRules {
        min_isr: 1,
        unclean: false,
    };

    #[test]
    fn elections_pick_live_isr_members_in_replica_order() {
        let unclean = TopicRules {
            unclean: true,
            ..CLEAN
        };
        assert_eq!(elect(&state(1, &[1, 2, 3]), &live(&[1, 2, 3]), CLEAN), None);
        // A dead follower leaves the ISR; the leader and its epoch stay.
        let shrunk = elect(&state(1, &[1, 2, 3]), &live(&[1, 3]), CLEAN).unwrap();
        assert_eq!(
            (shrunk.leader, shrunk.leader_epoch, shrunk.isr),
            (1, 4, vec![1, 3])
        );
        let next = elect(&state(1, &[1, 3, 2]), &live(&[2, 3]), CLEAN).unwrap();
        assert_eq!(
            (next.leader, next.leader_epoch, next.isr.clone()),
            (2, 5, vec![2, 3])
        );
        // Only an out-of-sync replica alive: offline unless unclean election is on.
        let offline = elect(&state(1, &[1, 2]), &live(&[3]), CLEAN).unwrap();
        assert_eq!((offline.leader, offline.isr.clone()), (-1, vec![1, 2]));
        assert_eq!(elect(&offline, &live(&[3]), CLEAN), None);
        let forced = elect(&offline, &live(&[3]), unclean).unwrap();
        assert_eq!(
            (forced.leader, forced.leader_epoch, forced.isr),
            (3, 6, vec![3])
        );
        // An ISR member returning leads again.
        let back = elect(&offline, &live(&[2, 3]), CLEAN).unwrap();
        assert_eq!((back.leader, back.isr), (2, vec![2]));
    }

    /// Two failures within a lease (min.insync.replicas 2): follower 2 loses power,
    /// then leader 1 pauses. The controller still sees 2 alive and elects it; 1 leaves
    /// the ISR but stays eligible, since no acks=all record can commit without it. When
    /// 2 restarts having lost its tail (and leaves the ISR, see `leave_isrs`), 1 is
    /// elected on its return, not 2.
    #[test]
    fn a_member_that_died_below_min_isr_stays_eligible() {
        let two = TopicRules {
            min_isr: 2,
            unclean: false,
        };
        let mut s = state(1, &[1, 2]);
        s.replicas = vec![1, 2, 3];
        let after_pause = elect(&s, &live(&[2, 3]), two).unwrap();
        assert_eq!(
            (
                after_pause.leader,
                after_pause.isr.clone(),
                after_pause.elr.clone()
            ),
            (2, vec![2], vec![1])
        );
        // 2's lease runs out too: offline, ISR and ELR kept.
        let offline = elect(&after_pause, &live(&[3]), two).unwrap();
        assert_eq!(
            (offline.leader, offline.isr.clone(), offline.elr.clone()),
            (-1, vec![2], vec![1])
        );
        // 2 restarted uncleanly and left the ISR; 1 returns and leads.
        let left = PartitionState {
            isr: Vec::new(),
            ..offline
        };
        assert_eq!(elect(&left, &live(&[2, 3]), two), None, "2 is not eligible");
        let back = elect(&left, &live(&[1, 2, 3]), two).unwrap();
        assert_eq!(
            (back.leader, back.isr, back.elr),
            (1, vec![1], Vec::<i32>::new())
        );
        // Above min.insync.replicas nobody dead stays eligible.
        let wide = elect(&state(1, &[1, 2, 3]), &live(&[1, 3]), two).unwrap();
        assert_eq!((wide.isr, wide.elr), (vec![1, 3], Vec::<i32>::new()));
    }
}
