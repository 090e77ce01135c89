//! The group coordinator's state machine: Kafka's classic group protocol (join, sync,
//! heartbeat, leave; generations; session and rebalance timeouts) over members held in
//! memory. It owns no I/O: the broker's group driver ticks it for
//! expiries and answering the waiters it hands out.
//!
//! Protocol metadata and assignments are opaque bytes: the group leader's client
//! computes the assignment (range, round-robin, sticky).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

mod assignor;
mod consumer;
mod error;
mod members;

pub use assignor::Partitions;
use consumer::ConsumerGroup;
pub use consumer::*;
pub use error::*;
use members::{Group, Member};
use serde::Deserialize;

/// `[groups]`: the consumer-group coordinator.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct GroupsSection {
    /// Shortest session timeout a member may ask for (Kafka's
    /// `group.min.session.timeout.ms`). Default: 6000 ms.
    pub min_session_timeout_ms: u64,
    /// Longest session timeout (`group.max.session.timeout.ms`). Default: 1800000 ms.
    pub max_session_timeout_ms: u64,
    /// How long the first rebalance of an empty group waits for more members
    /// (`group.initial.rebalance.delay.ms`). Default: 3000 ms.
    pub initial_rebalance_delay_ms: u64,
    /// How often members of consumer-protocol groups (KIP-848) heartbeat
    /// (`group.consumer.heartbeat.interval.ms`). Default: 5000 ms.
    pub consumer_heartbeat_interval_ms: u64,
    /// How long such a member may go without a heartbeat before it is removed
    /// (`group.consumer.session.timeout.ms`). Default: 45000 ms.
    pub consumer_session_timeout_ms: u64,
}

impl Default for GroupsSection {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            consumer_heartbeat_interval_ms: 5_000,
            consumer_session_timeout_ms: 45_000,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    /// A consumer-protocol group whose members are moving to their target.
    Reconciling,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Reconciling => "Reconciling",
        }
    }
}

/// A JoinGroup as the coordinator sees it.
pub struct JoinRequest {
    pub group: String,
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i64,
    pub rebalance_timeout_ms: i64,
    pub protocol_type: String,
    pub protocols: Vec<(String, Bytes)>,
    /// A member without an id gets one and must join again with it
    /// (`MEMBER_ID_REQUIRED`), as Kafka's JoinGroup v4+ asks (static members excepted).
    pub require_known_member_id: bool,
    /// `group.instance.id`: a static member (KIP-345), which a restart with the same
    /// instance id replaces without a rebalance.
    pub group_instance_id: Option<String>,
}

/// What every member learns when a rebalance completes.
#[derive(Debug, Clone)]
pub struct JoinResult {
    pub generation: i32,
    pub protocol: String,
    pub leader: String,
    pub member_id: String,
    /// The leader's copy only: every member and its metadata for the chosen protocol.
    pub members: Vec<(String, Bytes)>,
}

/// A member as `describe` shows it.
#[derive(Debug, Clone)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The member's metadata for the group's protocol (its subscription).
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// A group as the coordinator lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    pub group: String,
    pub state: GroupState,
    pub members: usize,
    pub protocol_type: String,
}

#[derive(Debug, Clone)]
pub struct GroupDescription {
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol: String,
    pub generation: i32,
    pub leader: String,
    pub members: Vec<MemberDescription>,
}

/// Where an OffsetCommit may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitAuthority {
    /// A member at the current generation.
    Member,
    /// An admin commit (generation -1, no member id) on a group without members.
    Admin,
}

pub struct Coordinator {
    config: GroupsSection,
    /// Classic groups. Lock order: these, then consumer groups.
    groups: Mutex<HashMap<String, Group>>,
    /// Consumer-protocol groups (KIP-848).
    consumer: Mutex<HashMap<String, ConsumerGroup>>,
}

impl Coordinator {
    pub fn new(config: GroupsSection) -> Self {
        Self {
            config,
            groups: Mutex::new(HashMap::new()),
            consumer: Mutex::new(HashMap::new()),
        }
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn consumer_groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, ConsumerGroup>> {
        self.consumer.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn initial_delay(&self) -> Duration {
        Duration::from_millis(self.config.initial_rebalance_delay_ms)
    }

    /// Adds or re-joins a member; the answer comes when the rebalance completes.
    pub fn join(
        &self,
        req: JoinRequest,
    ) -> Result<oneshot::Receiver<Result<JoinResult, GroupError>>, GroupError> {
        validate_group_id(&req.group)?;
        let (min, max) = (
            self.config.min_session_timeout_ms,
            self.config.max_session_timeout_ms,
        );
        if req.session_timeout_ms < min as i64 || req.session_timeout_ms > max as i64 {
            return Err(GroupError::InvalidSessionTimeout {
                sent: req.session_timeout_ms,
                min,
                max,
            });
        }
        if req.protocols.is_empty() || req.protocol_type.is_empty() {
            return Err(GroupError::InconsistentProtocol(
                "a join must name a protocol type and at least one protocol".into(),
            ));
        }
        let now = Instant::now();
        let mut groups = self.groups();
        {
            let mut consumer = self.consumer_groups();
            if let Some(g) = consumer.get(&req.group) {
                if !g.is_empty() {
                    return Err(GroupError::InconsistentProtocol(format!(
                        "group '{}' is a consumer-protocol group with members",
                        req.group
                    )));
                }
                consumer.remove(&req.group);
            }
        }
        let group = groups
            .entry(req.group.clone())
            .or_insert_with(|| Group::new(now));
        if !group.members.is_empty() {
            if group.protocol_type != req.protocol_type {
                return Err(GroupError::InconsistentProtocol(format!(
                    "group '{}' uses protocol type '{}', not '{}'",
                    req.group, group.protocol_type, req.protocol_type
                )));
            }
            let shared = group.members.values().all(|m| {
                m.protocols
                    .iter()
                    .any(|(n, _)| req.protocols.iter().any(|(o, _)| o == n))
            });
            if !shared {
                return Err(GroupError::InconsistentProtocol(format!(
                    "no assignor of {:?} is supported by every member of group '{}'",
                    req.protocols.iter().map(|(n, _)| n).collect::<Vec<_>>(),
                    req.group
                )));
            }
        }
        let instance = req.group_instance_id.clone();
        if !req.member_id.is_empty() {
            group.check_instance(&req.group, &req.member_id, instance.as_deref())?;
        }
        let mut replaced = false;
        let member_id = if let (true, Some(instance)) = (req.member_id.is_empty(), &instance) {
            // A static member joins with its instance id and no member id (at its
            // first start and every restart); it takes over whatever member held it.
            let id = format!("{instance}-{}", uuid::Uuid::new_v4());
            replaced = group.replace_static(&req.group, instance, &id);
            id
        } else if req.member_id.is_empty() {
            let id = format!("{}-{}", req.client_id, uuid::Uuid::new_v4());
            if req.require_known_member_id {
                let session = Duration::from_millis(req.session_timeout_ms as u64);
                group.pending.insert(id.clone(), now + session);
                return Err(GroupError::MemberIdRequired(id));
            }
            id
        } else if group.pending.remove(&req.member_id).is_some() {
            req.member_id.clone()
        } else {
            group.member(&req.group, &req.member_id)?;
            req.member_id.clone()
        };
        group.protocol_type = req.protocol_type;
        let (tx, rx) = oneshot::channel();
        // A member joining again with what it joined with: while the group completes
        // its rebalance, or is stable and the member follows, it gets the current
        // generation again instead of a new rebalance (as Kafka does; clients resend
        // JoinGroup after a timeout of their own).
        let unchanged = group
            .members
            .get(&member_id)
            .is_some_and(|m| m.protocols == req.protocols);
        // (A replaced static leader is no leader asking for a new assignment.)
        let settled = match group.state {
            GroupState::CompletingRebalance => true,
            GroupState::Stable => replaced || group.leader != member_id,
            _ => false,
        };
        if unchanged && settled {
            if let Some(m) = group.members.get_mut(&member_id) {
                m.last_heartbeat = now;
            }
            let _ = tx.send(Ok(group.current_join(&member_id)));
            return Ok(rx);
        }
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
                instance: instance.clone(),
                client_id: req.client_id.clone(),
                client_host: req.client_host.clone(),
                session_timeout: Duration::ZERO,
                rebalance_timeout: Duration::ZERO,
                protocols: Vec::new(),
                assignment: Bytes::new(),
                last_heartbeat: now,
                join_waiter: None,
                sync_waiter: None,
            });
        member.session_timeout = Duration::from_millis(req.session_timeout_ms as u64);
        member.rebalance_timeout =
            Duration::from_millis(req.rebalance_timeout_ms.max(req.session_timeout_ms) as u64);
        member.protocols = req.protocols;
        member.last_heartbeat = now;
        member.join_waiter = Some(tx);
        if let Some(instance) = instance {
            group.instances.insert(instance, member_id.clone());
        }
        group.prepare_rebalance(&req.group, now, self.initial_delay());
        group.maybe_complete_join(&req.group, now);
        Ok(rx)
    }

    /// SyncGroup: the leader hands in the assignment; every member gets its own.
    pub fn sync(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
        assignments: Vec<(String, Bytes)>,
    ) -> Result<oneshot::Receiver<Result<Bytes, GroupError>>, GroupError> {
        let mut groups = self.groups();
        let group = groups
            .get_mut(group_id)
            .ok_or_else(|| unknown_member(group_id, member_id))?;
        group.member(group_id, member_id)?;
        group.check_generation(group_id, generation)?;
        let (tx, rx) = oneshot::channel();
        match group.state {
            // (A classic group is never Reconciling.)
            GroupState::Empty | GroupState::Reconciling => {
                return Err(unknown_member(group_id, member_id));
            }
            GroupState::PreparingRebalance => {
                return Err(GroupError::RebalanceInProgress(group_id.to_string()));
            }
            GroupState::Stable => {
                let m = group.member(group_id, member_id)?;
                let _ = tx.send(Ok(m.assignment.clone()));
            }
            GroupState::CompletingRebalance => {
                group.member(group_id, member_id)?.sync_waiter = Some(tx);
                if member_id == group.leader {
                    let mut given: HashMap<String, Bytes> = assignments.into_iter().collect();
                    for (id, m) in group.members.iter_mut() {
                        m.assignment = given.remove(id).unwrap_or_default();
                        if let Some(w) = m.sync_waiter.take() {
                            let _ = w.send(Ok(m.assignment.clone()));
                        }
                    }
                    group.state = GroupState::Stable;
                    tracing::info!(
                        group = group_id,
                        generation,
                        "rebalance complete: group stable"
                    );
                }
            }
        }
        Ok(rx)
    }

    /// Refuses a request from `member_id` naming `instance` if a newer member holds
    /// that `group.instance.id` (FENCED_INSTANCE_ID).
    pub fn check_instance(
        &self,
        group_id: &str,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), GroupError> {
        match self.groups().get(group_id) {
            Some(g) => g.check_instance(group_id, member_id, instance),
            None => Ok(()),
        }
    }

    /// The member id that holds `instance` in the group now.
    pub fn member_of_instance(&self, group_id: &str, instance: &str) -> Option<String> {
        self.groups()
            .get(group_id)?
            .instances
            .get(instance)
            .cloned()
    }

    pub fn heartbeat(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
    ) -> Result<(), GroupError> {
        let mut groups = self.groups();
        let group = groups
            .get_mut(group_id)
            .ok_or_else(|| unknown_member(group_id, member_id))?;
        group.member(group_id, member_id)?.last_heartbeat = Instant::now();
        if group.state == GroupState::PreparingRebalance {
            return Err(GroupError::RebalanceInProgress(group_id.to_string()));
        }
        group.check_generation(group_id, generation)
    }

    pub fn leave(&self, group_id: &str, member_id: &str) -> Result<(), GroupError> {
        let mut groups = self.groups();
        let group = groups
            .get_mut(group_id)
            .ok_or_else(|| unknown_member(group_id, member_id))?;
        group.member(group_id, member_id)?;
        tracing::info!(group = group_id, member = member_id, "member left");
        group.remove_member(group_id, member_id, Instant::now(), self.initial_delay());
        Ok(())
    }

    /// Checks that an OffsetCommit may be written now.
    pub fn authorize_commit(
        &self,
        group_id: &str,
        generation: i32,
        member_id: &str,
    ) -> Result<CommitAuthority, GroupError> {
        validate_group_id(group_id)?;
        if let Some(authority) = self.authorize_consumer_commit(group_id, generation, member_id) {
            return authority;
        }
        let mut groups = self.groups();
        let group = groups.get_mut(group_id);
        if generation < 0 && member_id.is_empty() {
            return match group {
                Some(g) if !g.members.is_empty() => {
                    Err(GroupError::NonEmptyGroup(group_id.to_string()))
                }
                _ => Ok(CommitAuthority::Admin),
            };
        }
        let group = group.ok_or_else(|| unknown_member(group_id, member_id))?;
        group.member(group_id, member_id)?.last_heartbeat = Instant::now();
        group.check_generation(group_id, generation)?;
        if group.state == GroupState::CompletingRebalance {
            return Err(GroupError::RebalanceInProgress(group_id.to_string()));
        }
        Ok(CommitAuthority::Member)
    }

    pub fn describe(&self, group_id: &str) -> Option<GroupDescription> {
        if let Some(c) = self.describe_consumer_group(group_id) {
            let (state, _, epoch, _) = self.consumer_summary(group_id)?;
            return Some(GroupDescription {
                state,
                protocol_type: "consumer".into(),
                protocol: c.assignor,
                generation: epoch,
                leader: String::new(),
                members: c
                    .members
                    .into_iter()
                    .map(|m| MemberDescription {
                        member_id: m.member_id,
                        group_instance_id: m.instance_id,
                        client_id: m.client_id,
                        client_host: m.client_host,
                        metadata: Bytes::new(),
                        assignment: Bytes::new(),
                    })
                    .collect(),
            });
        }
        let groups = self.groups();
        let g = groups.get(group_id)?;
        Some(GroupDescription {
            state: g.state,
            protocol_type: g.protocol_type.clone(),
            protocol: g.protocol.clone(),
            generation: g.generation,
            leader: g.leader.clone(),
            members: g
                .members
                .iter()
                .map(|(id, m)| MemberDescription {
                    member_id: id.clone(),
                    group_instance_id: m.instance.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: m
                        .protocols
                        .iter()
                        .find(|(name, _)| *name == g.protocol)
                        .map(|(_, metadata)| metadata.clone())
                        .unwrap_or_default(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// The groups held in memory, by id.
    pub fn list(&self) -> Vec<GroupSummary> {
        let mut out: Vec<_> = self
            .groups()
            .iter()
            .map(|(id, g)| GroupSummary {
                group: id.clone(),
                state: g.state,
                members: g.members.len(),
                protocol_type: g.protocol_type.clone(),
            })
            .collect();
        for id in self.consumer_group_ids() {
            if let Some((state, members, _, _)) = self.consumer_summary(&id) {
                out.push(GroupSummary {
                    group: id,
                    state,
                    members,
                    protocol_type: "consumer".into(),
                });
            }
        }
        out.sort_by(|a, b| a.group.cmp(&b.group));
        out
    }

    /// Forgets an empty group; refuses one with members.
    pub fn remove_if_empty(&self, group_id: &str) -> Result<bool, GroupError> {
        {
            let mut consumer = self.consumer_groups();
            if let Some(g) = consumer.get(group_id) {
                if !g.is_empty() {
                    return Err(GroupError::NonEmptyGroup(group_id.to_string()));
                }
                consumer.remove(group_id);
                return Ok(true);
            }
        }
        let mut groups = self.groups();
        match groups.get(group_id) {
            Some(g) if !g.members.is_empty() => {
                Err(GroupError::NonEmptyGroup(group_id.to_string()))
            }
            Some(_) => {
                groups.remove(group_id);
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Periodic work: expires members whose session lapsed, completes rebalances whose
    /// deadline passed, and drops groups this broker no longer coordinates (their
    /// members find the new coordinator and join there).
    pub fn tick(&self, still_mine: impl Fn(&str) -> bool) {
        let now = Instant::now();
        self.tick_consumer_groups(now, &still_mine);
        let delay = self.initial_delay();
        let mut groups = self.groups();
        groups.retain(|id, g| {
            let mine = still_mine(id);
            if !mine && !g.members.is_empty() {
                tracing::info!(group = %id, "no longer the coordinator of the group; dropping it");
            }
            g.pending.retain(|_, until| now < *until);
            mine && !(g.members.is_empty() && g.pending.is_empty())
        });
        for (id, g) in groups.iter_mut() {
            let expired: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| {
                    m.join_waiter.is_none()
                        && now.duration_since(m.last_heartbeat) > m.session_timeout
                })
                .map(|(id, _)| id.clone())
                .collect();
            for member in expired {
                tracing::info!(group = %id, %member, "member session expired");
                g.remove_member(id, &member, now, delay);
            }
            g.maybe_complete_join(id, now);
        }
    }
}

#[cfg(test)]
mod tests;
