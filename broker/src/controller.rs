//! The controller's glue (the controller itself is `shale_cluster::controller`): its
//! passes with this broker's view of the topics' rules, and Kafka's ElectLeaders by
//! topic name.

use std::collections::HashMap;
use std::sync::Mutex;

use shale_cluster::balancer::BalanceRules;
use shale_cluster::controller::{ControllerSettings, ElectionError};
use shale_cluster::elections::TopicRules;

use uuid::Uuid;

use crate::broker::Broker;
use crate::error::{Error, Result};

/// How much a partition's local size changes before its leader reports it again.
const SIZE_REPORT_STEP: u64 = 1 << 20;

/// Every this many passes a leader reports every size again (so that a report its
/// predecessor wrote late is not left standing).
const FULL_SIZE_REPORT_EVERY: u64 = 30;

/// What a broker last reported of its partitions' sizes.
#[derive(Debug, Default)]
pub(crate) struct SizeReports {
    last: HashMap<(Uuid, i32), u64>,
    passes: u64,
}

impl From<ElectionError> for Error {
    fn from(e: ElectionError) -> Self {
        match e {
            ElectionError::NotNeeded(b) => Error::ElectionNotNeeded(b),
            ElectionError::PreferredLeaderNotAvailable(b) => Error::PreferredLeaderNotAvailable(b),
            ElectionError::EligibleLeadersNotAvailable(r) => Error::EligibleLeadersNotAvailable(r),
            ElectionError::Metastore(e) => e.into(),
        }
    }
}

impl Broker {
    /// The balancer's rules, from `[cluster]`.
    pub(crate) fn balance_rules(&self) -> BalanceRules {
        let cluster = &self.config.cluster;
        BalanceRules {
            max_in_flight: cluster.auto_balance_max_moves,
            replace_dead_after_ms: (cluster.dead_broker_replace_after_ms > 0)
                .then_some(cluster.dead_broker_replace_after_ms as i64),
            balance: cluster.auto_balance_enable,
            disk_band_percent: cluster.auto_balance_disk_band_percent,
            disk_band_min_bytes: cluster.auto_balance_disk_band_min_bytes,
        }
    }

    /// Reports the local size of each partition this broker leads where it changed by
    /// [`SIZE_REPORT_STEP`] or more since the last report written, or leadership came
    /// here, and every size each [`FULL_SIZE_REPORT_EVERY`] passes: the controller's
    /// balancer keeps the brokers' local disk use within a band with them.
    pub(crate) async fn report_sizes(&self, reports: &Mutex<SizeReports>) -> Result<()> {
        let (last, full) = {
            let mut r = reports.lock().expect("not poisoned");
            r.passes += 1;
            (r.last.clone(), r.passes % FULL_SIZE_REPORT_EVERY == 1)
        };
        let mut now = HashMap::new();
        let mut changed = Vec::new();
        for p in self.all_partitions().iter().filter(|p| p.is_leader()) {
            let key = (p.topic_id, p.index);
            let size = p.size_bytes();
            match last.get(&key) {
                Some(&was) if !full && was.abs_diff(size) < SIZE_REPORT_STEP => {
                    now.insert(key, was);
                }
                _ => {
                    changed.push((p.topic_id, p.index, size as i64));
                    now.insert(key, size);
                }
            }
        }
        if !changed.is_empty() {
            self.metastore.report_partition_sizes(&changed).await?;
        }
        reports.lock().expect("not poisoned").last = now;
        Ok(())
    }

    /// One controller round (see `shale_cluster::controller`). Does nothing on brokers
    /// that are not the controller.
    pub(crate) async fn controller_pass(&self) -> Result<()> {
        let cluster = &self.config.cluster;
        let settings = ControllerSettings {
            lease_ms: cluster.lease_ms,
            auto_leader_rebalance: cluster.auto_leader_rebalance_enable,
            leader_imbalance_check_interval_ms: cluster.leader_imbalance_check_interval_ms,
            balance: self.balance_rules(),
            balance_interval_ms: cluster.auto_balance_interval_ms,
        };
        let rules = || {
            self.topics_snapshot()
                .iter()
                .map(|t| {
                    let rules = TopicRules {
                        min_isr: t.config.min_insync_replicas.max(1) as usize,
                        unclean: t.config.unclean_leader_election_enable,
                    };
                    (t.meta.id, rules)
                })
                .collect::<HashMap<uuid::Uuid, TopicRules>>()
        };
        let digest = || self.registry.states_digest();
        Ok(self.controller.pass(settings, digest, rules).await?)
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
        let snapshot = self.topics_snapshot();
        let min_isr = |id: &uuid::Uuid| {
            snapshot
                .iter()
                .find(|t| t.meta.id == *id)
                .map_or(1, |t| t.config.min_insync_replicas.max(1) as usize)
        };
        let mut out = Vec::new();
        for state in self.metastore.list_partition_states().await? {
            let Some(name) = topics.get(&state.topic_id) else {
                continue;
            };
            if partitions.is_some_and(|ps| !ps.contains(&state.partition)) {
                continue;
            }
            let min_isr = min_isr(&state.topic_id);
            let result =
                (self.controller.elect(&state, &live, unclean, min_isr).await).map_err(Error::from);
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
}
