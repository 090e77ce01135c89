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

use shale_cluster::placement::{self, Candidate};
use shale_metastore::{BrokerLease, StateGuard};

use crate::broker::Broker;
use crate::error::{Error, Result};

/// A broker as `shale cluster status` shows it.
#[derive(Debug, Clone)]
pub struct BrokerStatus {
    pub lease: BrokerLease,
    pub alive: bool,
    pub leader_partitions: i32,
    pub replica_partitions: i32,
    /// Partitions with a reassignment in flight that adds or removes this broker.
    pub moving_partitions: i32,
}
impl Broker {
    /// Whether this broker may act as leader now (its lease is surely not expired).
    pub fn lease_valid(&self) -> bool {
        self.membership.lease_valid()
    }

    /// This broker's incarnation, registered at start.
    pub fn broker_epoch(&self) -> i64 {
        self.membership.epoch()
    }

    /// Renews this broker's lease (see `Membership::renew`); after a lapse the
    /// metadata is read again before the lease counts as valid.
    pub(crate) async fn renew_lease(&self) -> Result<()> {
        let renewal = self
            .membership
            .renew(
                self.metastore.as_ref(),
                self.config.broker_id,
                &self.config.advertised_address(),
                self.config.cluster.lease_ms,
            )
            .await;
        if self.membership.replaced() {
            self.cancel.cancel();
        }
        let renewal = renewal?;
        if renewal.lapsed {
            tracing::info!(
                broker = self.config.broker_id,
                "lease (re)acquired, reloading metadata"
            );
            self.reconcile().await?;
        }
        self.membership.trust(renewal);
        Ok(())
    }

    /// Gives up the lease (graceful shutdown), so leadership moves at once.
    pub(crate) async fn release_lease(&self) {
        let address = self.config.advertised_address();
        (self.membership)
            .release(self.metastore.as_ref(), self.config.broker_id, &address)
            .await;
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
            .register_broker(
                id,
                &self.config.advertised_address(),
                &self.config.endpoints(),
                self.config.rack.as_deref(),
            )
            .await?;
        self.membership.registered(epoch);
        if registered.is_none() {
            tracing::info!(
                broker = id,
                broker_epoch = epoch,
                "registered for the first time"
            );
        } else {
            tracing::info!(
                broker = id,
                broker_epoch = epoch,
                clean_shutdown = clean,
                "registered"
            );
        }
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
    ///   ISR and ELR before its lease makes it electable, recording the log it came
    ///   back with; each leader adds it back once it has caught up, and once every
    ///   member has left so, the one with the most complete log is elected (see
    ///   [`shale_cluster::rules::after_restart`]).
    async fn leave_isrs(&self, clean: bool, deadline: Instant) -> Result<()> {
        let id = self.config.broker_id;
        loop {
            let mut conflicts = 0;
            for state in self.metastore.list_partition_states().await? {
                // A replica this broker does not hold (its disk is new) has no log.
                let log = self
                    .partition_by_id(state.topic_id, state.partition)
                    .map_or((-1, 0), |p| p.log_position());
                let Some(next) = shale_cluster::rules::after_restart(&state, id, clean, log) else {
                    continue;
                };
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
                return Err(Error::StateContention {
                    partitions: conflicts,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Live brokers (lease not expired) and their incarnations.
    pub(crate) async fn live_incarnations(&self) -> Result<HashMap<i32, i64>> {
        Ok(shale_cluster::controller::live_incarnations(self.metastore.as_ref()).await?)
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
    /// round-robin over the live brokers, followers on the next ones, racks
    /// alternating ([`placement::assign`]).
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
        // Decommissioned brokers get no new partitions.
        let live: Vec<Candidate> = (self.metastore.list_brokers().await?)
            .into_iter()
            .filter(|b| b.is_alive() && !b.decommissioned)
            .map(|b| Candidate {
                id: b.broker_id,
                rack: b.rack,
            })
            .collect();
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
        Ok(placement::assign(
            &live,
            start,
            first,
            count,
            replication_factor as usize,
        ))
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
                moving_partitions: states
                    .iter()
                    .filter(|s| {
                        s.adding.contains(&lease.broker_id) || s.removing.contains(&lease.broker_id)
                    })
                    .count() as i32,
                lease,
            })
            .collect();
        Ok((controller, brokers))
    }
}

#[cfg(test)]
mod tests;
