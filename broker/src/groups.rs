//! Consumer groups on this broker: which broker coordinates a group (rendezvous
//! hashing of the group id over the live brokers, so a broker joining or leaving moves
//! only its share), committed offsets (in the metastore, so a new coordinator has them
//! at once and members simply join again), and producer ids. The protocol's state
//! machine is [`coordinator`].

use std::collections::{BTreeMap, HashMap};

pub use shale_coordinator::group::*;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};

/// One partition's lag in one group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupPartitionLag {
    pub group: String,
    pub topic: String,
    pub partition: i32,
    pub lag: i64,
}

/// How far a group's committed offset is behind the high watermark (never negative).
pub fn lag(committed: i64, high_watermark: i64) -> i64 {
    (high_watermark - committed).max(0)
}

/// One partition's offset in an OffsetCommit.
#[derive(Debug, Clone)]
pub struct OffsetCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// A group as ListGroups shows it.
#[derive(Debug, Clone)]
pub struct GroupListing {
    pub group: String,
    pub state: &'static str,
    pub members: usize,
    /// The coordinator's broker id (-1: a group known only by its committed offsets).
    pub coordinator: i32,
    /// `consumer` for consumer groups (empty for a group known only by its offsets).
    pub protocol_type: String,
}

/// A committed offset with its topic's name.
pub struct Committed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
    pub commit_ms: i64,
}

impl Broker {
    /// The broker coordinating `group` and its inter-broker address.
    pub fn coordinator_for(&self, group: &str) -> Result<(i32, String)> {
        self.coordinator_among(group, &self.coordinator_candidates())
    }

    /// The brokers that may coordinate groups now: this one alone without replication,
    /// else every broker whose lease is valid.
    pub fn coordinator_candidates(&self) -> Vec<shale_metastore::BrokerLease> {
        if !self.metastore.supports_replication() {
            return vec![shale_metastore::BrokerLease {
                broker_id: self.config.broker_id,
                address: self.config.advertised_address(),
                endpoints: self.config.endpoints(),
                broker_epoch: self.broker_epoch(),
                lease_expires_ms: i64::MAX,
                registered_at_ms: 0,
                remaining_ms: i64::MAX,
                read_at: std::time::Instant::now(),
                decommissioned: false,
                expired_for_ms: 0,
                rack: self.config.rack.clone(),
            }];
        }
        self.brokers()
            .into_iter()
            .filter(shale_metastore::BrokerLease::is_alive)
            .collect()
    }

    fn coordinator_among(
        &self,
        group: &str,
        live: &[shale_metastore::BrokerLease],
    ) -> Result<(i32, String)> {
        validate_group_id(group)?;
        let ids: Vec<i32> = live.iter().map(|b| b.broker_id).collect();
        let id = coordinator_of(group, &ids).ok_or(GroupError::CoordinatorNotAvailable)?;
        let address = live
            .iter()
            .find(|b| b.broker_id == id)
            .map(|b| b.address.clone())
            .unwrap_or_default();
        Ok((id, address))
    }

    /// Refuses a group call unless this broker coordinates the group (and holds its
    /// lease, without which another broker may already have taken over).
    pub fn ensure_coordinator(&self, group: &str) -> Result<()> {
        self.coordinating(group).map(|_| ())
    }

    /// [`Broker::ensure_coordinator`], returning the brokers this one found itself the
    /// coordinator among (`None` without replication, where it is the only one).
    fn coordinating(&self, group: &str) -> Result<Option<Vec<i32>>> {
        let live = self.coordinator_candidates();
        let (id, _) = self.coordinator_among(group, &live)?;
        if id != self.config.broker_id || !self.lease_valid() {
            return Err(GroupError::NotCoordinator {
                group: group.to_string(),
                coordinator: id,
            }
            .into());
        }
        Ok(self
            .metastore
            .supports_replication()
            .then(|| live.iter().map(|b| b.broker_id).collect()))
    }

    /// Periodic coordinator work (see [`Coordinator::tick`]).
    pub(crate) fn groups_tick(&self) {
        let me = self.config.broker_id;
        let lease = self.lease_valid();
        let live = self.coordinator_candidates();
        self.coordinators.groups().tick(|g| {
            lease
                && self
                    .coordinator_among(g, &live)
                    .is_ok_and(|(id, _)| id == me)
        });
    }

    /// Writes a group's offsets: each partition gets its own answer; the valid ones
    /// are written together.
    pub async fn commit_offsets(
        &self,
        group: &str,
        generation: i32,
        member: &str,
        offsets: Vec<OffsetCommit>,
    ) -> Result<Vec<Result<()>>> {
        let live = self.coordinating(group)?;
        self.coordinators
            .groups()
            .authorize_commit(group, generation, member)?;
        let (rows, results) = self.offset_rows(offsets, now_ms());
        if !rows.is_empty() {
            // Fenced by the live brokers: a broker whose view of them is stale (one came
            // back that it still counts as gone) may no longer coordinate the group.
            match self
                .metastore
                .commit_offsets(group, &rows, live.as_deref())
                .await
            {
                Err(shale_metastore::Error::LiveBrokersChanged { now, .. }) => {
                    // A failed re-read leaves it to the next metadata refresh.
                    if let Ok(brokers) = self.metastore.list_brokers().await {
                        self.set_brokers(brokers);
                    }
                    return Err(GroupError::NotCoordinator {
                        group: group.to_string(),
                        coordinator: coordinator_of(group, &now).unwrap_or(-1),
                    }
                    .into());
                }
                r => r?,
            }
        }
        Ok(results)
    }

    /// The rows of an offset commit's valid partitions, and each partition's answer.
    pub(crate) fn offset_rows(
        &self,
        offsets: Vec<OffsetCommit>,
        now: i64,
    ) -> (Vec<shale_metastore::CommittedOffset>, Vec<Result<()>>) {
        let mut rows = Vec::new();
        let results = offsets
            .into_iter()
            .map(|o| {
                let t = self.topic(&o.topic)?;
                if !(0..t.meta.partitions).contains(&o.partition) {
                    return Err(Error::UnknownPartition {
                        topic: o.topic,
                        partition: o.partition,
                    });
                }
                if o.offset < 0 {
                    return Err(Error::InvalidRequest(format!(
                        "cannot commit offset {} for partition {} of '{}'",
                        o.offset, o.partition, o.topic
                    )));
                }
                if o.metadata.len() > 4096 {
                    return Err(GroupError::MetadataTooLarge(o.metadata.len()).into());
                }
                rows.push(shale_metastore::CommittedOffset {
                    topic_id: t.meta.id,
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata,
                    commit_ms: now,
                });
                Ok(())
            })
            .collect();
        (rows, results)
    }

    /// Per group this broker coordinates: the lag of each partition it holds a replica
    /// of (see [`lag`]).
    pub async fn group_lags(&self) -> Vec<GroupPartitionLag> {
        let mut out = Vec::new();
        for GroupSummary { group, .. } in self.coordinators.groups().list() {
            let Ok(committed) = self.committed_offsets(&group).await else {
                continue;
            };
            out.extend(committed.into_iter().filter_map(|c| {
                let hw = self.local_high_watermark(&c.topic, c.partition)?;
                Some(GroupPartitionLag {
                    group: group.clone(),
                    lag: lag(c.offset, hw),
                    topic: c.topic,
                    partition: c.partition,
                })
            }));
        }
        out
    }

    /// A partition's high watermark as this broker's replica knows it, if it holds one.
    pub fn local_high_watermark(&self, topic: &str, partition: i32) -> Option<i64> {
        let p = self.partition(topic, partition).ok()?;
        Some(p.high_watermark())
    }

    /// A group's committed offsets (of topics that still exist), from the metastore.
    pub async fn committed_offsets(&self, group: &str) -> Result<Vec<Committed>> {
        validate_group_id(group)?;
        let names: HashMap<uuid::Uuid, String> = self
            .topics_snapshot()
            .iter()
            .map(|t| (t.meta.id, t.meta.name.clone()))
            .collect();
        let mut out: Vec<Committed> = self
            .metastore
            .committed_offsets(group)
            .await?
            .into_iter()
            .filter_map(|o| {
                Some(Committed {
                    topic: names.get(&o.topic_id)?.clone(),
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata,
                    commit_ms: o.commit_ms,
                })
            })
            .collect();
        out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok(out)
    }

    /// Groups this broker coordinates, and groups known by their committed offsets.
    pub async fn list_groups(&self) -> Result<Vec<GroupListing>> {
        let mut out: BTreeMap<String, GroupListing> = BTreeMap::new();
        for group in self.metastore.offset_groups().await? {
            let listing = GroupListing {
                group: group.clone(),
                state: GroupState::Empty.name(),
                members: 0,
                coordinator: -1,
                protocol_type: String::new(),
            };
            out.insert(group, listing);
        }
        for g in self.coordinators.groups().list() {
            let listing = GroupListing {
                group: g.group.clone(),
                state: g.state.name(),
                members: g.members,
                coordinator: self.config.broker_id,
                protocol_type: g.protocol_type,
            };
            out.insert(g.group, listing);
        }
        Ok(out.into_values().collect())
    }

    /// Deletes the committed offsets of some partitions of a group without members
    /// (Kafka's OffsetDelete); each partition gets its own answer.
    pub async fn delete_offsets(
        &self,
        group: &str,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<Result<()>>> {
        self.ensure_coordinator(group)?;
        if self
            .coordinators
            .groups()
            .describe(group)
            .is_some_and(|d| !d.members.is_empty())
        {
            return Err(GroupError::NonEmptyGroup(group.to_string()).into());
        }
        let mut rows = Vec::new();
        let results = partitions
            .into_iter()
            .map(|(topic, partition)| {
                let t = self.topic(&topic)?;
                if !(0..t.meta.partitions).contains(&partition) {
                    return Err(Error::UnknownPartition { topic, partition });
                }
                rows.push((t.meta.id, partition));
                Ok(())
            })
            .collect();
        if !rows.is_empty() {
            self.metastore
                .delete_committed_offsets(group, &rows)
                .await?;
        }
        Ok(results)
    }

    /// Deletes a group without members and its committed offsets.
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        self.ensure_coordinator(group)?;
        let held = self.coordinators.groups().remove_if_empty(group)?;
        let deleted = self.metastore.delete_group_offsets(group).await?;
        if !held && deleted == 0 {
            return Err(GroupError::GroupNotFound(group.to_string()).into());
        }
        Ok(())
    }
}
