//! The consumer-group coordinator: Kafka's classic group protocol (join, sync,
//! heartbeat, leave; generations; session and rebalance timeouts), run by one broker
//! per group. The coordinator of a group is chosen by rendezvous hashing of the group
//! id over the live brokers, so a broker joining or leaving moves only its share of
//! the groups. Membership lives in the coordinator's memory; committed offsets live in
//! the metastore, so a new coordinator (after a failure) has the offsets at once and
//! the members simply join again.
//!
//! The coordinator treats protocol metadata and assignments as opaque bytes: the
//! group leader's client computes the assignment (range, round-robin, sticky).

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use shale_proto::ErrorCode;
use tokio::sync::oneshot;

use crate::broker::{Broker, now_ms};
use crate::config::GroupsSection;
use crate::error::{Error, Result};

/// Longest group id accepted.
const MAX_GROUP_ID_BYTES: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GroupError {
    #[error("this broker is not the coordinator of group '{group}' (broker {coordinator} is)")]
    NotCoordinator { group: String, coordinator: i32 },
    #[error("no live broker can coordinate groups right now")]
    CoordinatorNotAvailable,
    #[error("invalid group id '{0}': it must be 1 to 255 bytes")]
    InvalidGroupId(String),
    #[error("member '{member}' is not in group '{group}'{hint}")]
    UnknownMember {
        group: String,
        member: String,
        hint: &'static str,
    },
    #[error("generation {sent} of group '{group}' is not current (the group is at {current})")]
    IllegalGeneration {
        group: String,
        sent: i32,
        current: i32,
    },
    #[error("group '{0}' is rebalancing: join again")]
    RebalanceInProgress(String),
    #[error("{0}")]
    InconsistentProtocol(String),
    #[error("session timeout {sent} ms is outside the broker's [{min}, {max}] ms")]
    InvalidSessionTimeout { sent: i64, min: u64, max: u64 },
    #[error("group '{0}' has active members; stop its consumers first")]
    NonEmptyGroup(String),
    #[error("group '{0}' does not exist")]
    GroupNotFound(String),
    #[error("offset metadata of {0} bytes is larger than 4096")]
    MetadataTooLarge(usize),
}

impl GroupError {
    pub fn code(&self) -> ErrorCode {
        use GroupError::*;
        match self {
            NotCoordinator { .. } => ErrorCode::NotCoordinator,
            CoordinatorNotAvailable => ErrorCode::CoordinatorNotAvailable,
            InvalidGroupId(_) => ErrorCode::InvalidGroupId,
            UnknownMember { .. } => ErrorCode::UnknownMemberId,
            IllegalGeneration { .. } => ErrorCode::IllegalGeneration,
            RebalanceInProgress(_) => ErrorCode::RebalanceInProgress,
            InconsistentProtocol(_) => ErrorCode::InconsistentGroupProtocol,
            InvalidSessionTimeout { .. } => ErrorCode::InvalidSessionTimeout,
            NonEmptyGroup(_) => ErrorCode::NonEmptyGroup,
            GroupNotFound(_) => ErrorCode::GroupIdNotFound,
            MetadataTooLarge(_) => ErrorCode::OffsetMetadataTooLarge,
        }
    }
}

pub fn validate_group_id(group: &str) -> Result<(), GroupError> {
    if group.is_empty() || group.len() > MAX_GROUP_ID_BYTES {
        return Err(GroupError::InvalidGroupId(group.to_string()));
    }
    Ok(())
}

/// The live broker that coordinates `group`: the one with the highest hash of
/// (group, broker id) — rendezvous hashing.
pub fn coordinator_of(group: &str, live: &[i32]) -> Option<i32> {
    live.iter()
        .copied()
        .max_by_key(|b| hash64(group.as_bytes(), *b))
}

fn hash64(bytes: &[u8], salt: i32) -> u64 {
    // FNV-1a over the group id, then the broker id, then a final mix.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes.iter().chain(salt.to_be_bytes().iter()) {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl GroupState {
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
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

type JoinReply = oneshot::Sender<Result<JoinResult, GroupError>>;
type SyncReply = oneshot::Sender<Result<Bytes, GroupError>>;

struct Member {
    client_id: String,
    client_host: String,
    session_timeout: Duration,
    rebalance_timeout: Duration,
    protocols: Vec<(String, Bytes)>,
    assignment: Bytes,
    last_heartbeat: Instant,
    join_waiter: Option<JoinReply>,
    sync_waiter: Option<SyncReply>,
}

struct Group {
    state: GroupState,
    generation: i32,
    protocol_type: String,
    protocol: String,
    leader: String,
    members: BTreeMap<String, Member>,
    /// A rebalance completes once every member joined (not before `not_before`), or at
    /// `deadline` without those that did not.
    not_before: Instant,
    deadline: Instant,
}

impl Group {
    fn new(now: Instant) -> Self {
        Self {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            not_before: now,
            deadline: now,
        }
    }

    fn member(&mut self, group: &str, id: &str) -> Result<&mut Member, GroupError> {
        self.members
            .get_mut(id)
            .ok_or_else(|| GroupError::UnknownMember {
                group: group.to_string(),
                member: id.to_string(),
                hint: "; join again",
            })
    }

    fn check_generation(&self, group: &str, generation: i32) -> Result<(), GroupError> {
        if generation != self.generation {
            return Err(GroupError::IllegalGeneration {
                group: group.to_string(),
                sent: generation,
                current: self.generation,
            });
        }
        Ok(())
    }

    /// Starts a rebalance: every member must join again.
    fn prepare_rebalance(&mut self, group: &str, now: Instant, initial_delay: Duration) {
        if self.state == GroupState::PreparingRebalance {
            return;
        }
        let was_empty = self.state == GroupState::Empty;
        for m in self.members.values_mut() {
            if let Some(w) = m.sync_waiter.take() {
                let _ = w.send(Err(GroupError::RebalanceInProgress(group.to_string())));
            }
        }
        let longest = self
            .members
            .values()
            .map(|m| m.rebalance_timeout)
            .max()
            .unwrap_or_default();
        self.state = GroupState::PreparingRebalance;
        self.not_before = if was_empty { now + initial_delay } else { now };
        self.deadline = now + longest.max(initial_delay);
        tracing::info!(
            group,
            generation = self.generation,
            members = self.members.len(),
            "rebalance started"
        );
    }

    /// Completes the join phase if it can: every member joined (and the initial delay
    /// passed), or the deadline passed (members that did not join are dropped).
    fn maybe_complete_join(&mut self, group: &str, now: Instant) {
        if self.state != GroupState::PreparingRebalance {
            return;
        }
        let all_joined = self.members.values().all(|m| m.join_waiter.is_some());
        if !(all_joined && now >= self.not_before || now >= self.deadline) {
            return;
        }
        self.members.retain(|id, m| {
            let keep = m.join_waiter.is_some();
            if !keep {
                tracing::info!(group, member = %id, "member did not join in time; removed");
            }
            keep
        });
        self.generation += 1;
        if self.members.is_empty() {
            self.state = GroupState::Empty;
            self.protocol.clear();
            self.leader.clear();
            return;
        }
        self.protocol = self.common_protocol().unwrap_or_default();
        if !self.members.contains_key(&self.leader) {
            self.leader = self.members.keys().next().cloned().unwrap_or_default();
        }
        self.state = GroupState::CompletingRebalance;
        let members: Vec<(String, Bytes)> = self
            .members
            .iter()
            .map(|(id, m)| (id.clone(), metadata_for(m, &self.protocol)))
            .collect();
        for (id, m) in self.members.iter_mut() {
            m.assignment = Bytes::new();
            m.last_heartbeat = now;
            if let Some(w) = m.join_waiter.take() {
                let _ = w.send(Ok(JoinResult {
                    generation: self.generation,
                    protocol: self.protocol.clone(),
                    leader: self.leader.clone(),
                    member_id: id.clone(),
                    members: if *id == self.leader {
                        members.clone()
                    } else {
                        Vec::new()
                    },
                }));
            }
        }
        tracing::info!(group, generation = self.generation, protocol = %self.protocol,
            leader = %self.leader, members = self.members.len(), "rebalance: members joined");
    }

    /// The first protocol of the leader's (or first member's) list that every member
    /// supports.
    fn common_protocol(&self) -> Option<String> {
        let first = self
            .members
            .get(&self.leader)
            .or_else(|| self.members.values().next())?;
        first
            .protocols
            .iter()
            .map(|(n, _)| n)
            .find(|n| {
                self.members
                    .values()
                    .all(|m| m.protocols.iter().any(|(o, _)| o == *n))
            })
            .cloned()
    }

    fn remove_member(&mut self, group: &str, id: &str, now: Instant, delay: Duration) {
        if let Some(m) = self.members.remove(id) {
            if let Some(w) = m.join_waiter {
                let _ = w.send(Err(GroupError::UnknownMember {
                    group: group.to_string(),
                    member: id.to_string(),
                    hint: " any more",
                }));
            }
            if self.members.is_empty() && self.state != GroupState::PreparingRebalance {
                self.state = GroupState::Empty;
                self.generation += 1;
                self.leader.clear();
                return;
            }
            self.prepare_rebalance(group, now, delay);
            self.maybe_complete_join(group, now);
        }
    }
}

fn metadata_for(m: &Member, protocol: &str) -> Bytes {
    m.protocols
        .iter()
        .find(|(n, _)| n == protocol)
        .map(|(_, b)| b.clone())
        .unwrap_or_default()
}

/// A member as `describe` shows it.
#[derive(Debug, Clone)]
pub struct MemberDescription {
    pub member_id: String,
    pub client_id: String,
    pub client_host: String,
    pub assignment: Bytes,
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
    groups: Mutex<HashMap<String, Group>>,
}

impl Coordinator {
    pub fn new(config: GroupsSection) -> Self {
        Self {
            config,
            groups: Mutex::new(HashMap::new()),
        }
    }

    fn groups(&self) -> std::sync::MutexGuard<'_, HashMap<String, Group>> {
        self.groups.lock().unwrap_or_else(|e| e.into_inner())
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
        let member_id = if req.member_id.is_empty() {
            format!("{}-{}", req.client_id, uuid::Uuid::new_v4())
        } else {
            group.member(&req.group, &req.member_id)?;
            req.member_id.clone()
        };
        group.protocol_type = req.protocol_type;
        let (tx, rx) = oneshot::channel();
        let member = group
            .members
            .entry(member_id.clone())
            .or_insert_with(|| Member {
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
            GroupState::Empty => return Err(unknown_member(group_id, member_id)),
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
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    assignment: m.assignment.clone(),
                })
                .collect(),
        })
    }

    /// Groups held in memory: id, state, member count.
    pub fn list(&self) -> Vec<(String, GroupState, usize)> {
        let mut out: Vec<_> = self
            .groups()
            .iter()
            .map(|(id, g)| (id.clone(), g.state, g.members.len()))
            .collect();
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out
    }

    /// Forgets an empty group; refuses one with members.
    pub fn remove_if_empty(&self, group_id: &str) -> Result<bool, GroupError> {
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
        let delay = self.initial_delay();
        let mut groups = self.groups();
        groups.retain(|id, g| {
            let mine = still_mine(id);
            if !mine && !g.members.is_empty() {
                tracing::info!(group = %id, "no longer the coordinator of the group; dropping it");
            }
            mine && !g.members.is_empty()
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

/// One partition's offset in an OffsetCommit.
pub struct OffsetCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
}

/// A committed offset with its topic's name.
pub struct Committed {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub metadata: String,
    pub commit_ms: i64,
}

/// Producer ids a broker takes from the metastore at a time.
const PRODUCER_ID_BLOCK: i64 = 1000;

impl Broker {
    /// The broker coordinating `group` and its address.
    pub fn coordinator_for(&self, group: &str) -> Result<(i32, String)> {
        self.coordinator_among(group, &self.coordinator_candidates())
    }

    /// The brokers that may coordinate groups now: this one alone without replication,
    /// else every broker whose lease is valid.
    fn coordinator_candidates(&self) -> Vec<shale_metastore::BrokerLease> {
        if !self.metastore.supports_replication() {
            return vec![shale_metastore::BrokerLease {
                broker_id: self.config.broker_id,
                address: self.config.advertised_address(),
                broker_epoch: self.broker_epoch(),
                lease_expires_ms: i64::MAX,
                registered_at_ms: 0,
                remaining_ms: i64::MAX,
                read_at: std::time::Instant::now(),
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
        let (id, _) = self.coordinator_for(group)?;
        if id != self.config.broker_id || !self.lease_valid() {
            return Err(GroupError::NotCoordinator {
                group: group.to_string(),
                coordinator: id,
            }
            .into());
        }
        Ok(())
    }

    /// Periodic coordinator work (see [`Coordinator::tick`]).
    pub(crate) fn groups_tick(&self) {
        let me = self.config.broker_id;
        let lease = self.lease_valid();
        let live = self.coordinator_candidates();
        self.groups.tick(|g| {
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
        self.ensure_coordinator(group)?;
        self.groups.authorize_commit(group, generation, member)?;
        let now = now_ms();
        let mut rows = Vec::new();
        let results: Vec<Result<()>> = offsets
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
        if !rows.is_empty() {
            self.metastore.commit_offsets(group, &rows).await?;
        }
        Ok(results)
    }

    /// A group's committed offsets (of topics that still exist), from the metastore.
    /// Per group this broker coordinates: the lag of each partition it holds a replica
    /// of (high watermark less committed offset).
    pub async fn group_lags(&self) -> Vec<(String, Vec<(String, i32, i64)>)> {
        let mut out = Vec::new();
        for (group, _, _) in self.groups.list() {
            let Ok(committed) = self.committed_offsets(&group).await else {
                continue;
            };
            let lags = committed
                .into_iter()
                .filter_map(|c| {
                    let p = self.partition(&c.topic, c.partition).ok()?;
                    Some((c.topic, c.partition, (p.high_watermark() - c.offset).max(0)))
                })
                .collect();
            out.push((group, lags));
        }
        out
    }

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
    pub async fn list_groups(&self) -> Result<Vec<(String, &'static str, usize, i32)>> {
        let mut out: BTreeMap<String, (&'static str, usize, i32)> = BTreeMap::new();
        for g in self.metastore.offset_groups().await? {
            out.insert(g, (GroupState::Empty.name(), 0, -1));
        }
        for (g, state, members) in self.groups.list() {
            out.insert(g, (state.name(), members, self.config.broker_id));
        }
        Ok(out.into_iter().map(|(g, (s, m, c))| (g, s, m, c)).collect())
    }

    /// Deletes a group without members and its committed offsets.
    pub async fn delete_group(&self, group: &str) -> Result<()> {
        self.ensure_coordinator(group)?;
        let held = self.groups.remove_if_empty(group)?;
        let deleted = self.metastore.delete_group_offsets(group).await?;
        if !held && deleted == 0 {
            return Err(GroupError::GroupNotFound(group.to_string()).into());
        }
        Ok(())
    }

    /// A new idempotent producer's id (unique in the cluster) and epoch 0.
    pub async fn init_producer_id(&self) -> Result<(i64, i16)> {
        loop {
            {
                let mut ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
                if ids.0 < ids.1 {
                    ids.0 += 1;
                    return Ok((ids.0 - 1, 0));
                }
            }
            let first = self
                .metastore
                .allocate_producer_ids(PRODUCER_ID_BLOCK)
                .await?;
            let mut ids = self.producer_ids.lock().unwrap_or_else(|e| e.into_inner());
            if ids.0 >= ids.1 {
                *ids = (first, first + PRODUCER_ID_BLOCK);
            }
        }
    }
}

fn unknown_member(group: &str, member: &str) -> GroupError {
    GroupError::UnknownMember {
        group: group.to_string(),
        member: member.to_string(),
        hint: "; join again",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn coordinator(delay_ms: u64) -> Coordinator {
        Coordinator::new(GroupsSection {
            min_session_timeout_ms: 10,
            max_session_timeout_ms: 60_000,
            initial_rebalance_delay_ms: delay_ms,
        })
    }

    fn join(
        c: &Coordinator,
        member: &str,
        session_ms: i64,
    ) -> oneshot::Receiver<Result<JoinResult, GroupError>> {
        c.join(JoinRequest {
            group: "g".into(),
            member_id: member.into(),
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: session_ms,
            rebalance_timeout_ms: session_ms,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        })
        .unwrap()
    }

    #[tokio::test]
    async fn join_sync_heartbeat_and_generations() {
        let c = coordinator(0);
        let a = join(&c, "", 1000).await.unwrap().unwrap();
        assert_eq!((a.generation, a.leader.as_str()), (1, a.member_id.as_str()));
        assert_eq!(a.members.len(), 1);
        let got = c
            .sync(
                "g",
                1,
                &a.member_id,
                vec![(a.member_id.clone(), Bytes::from_static(b"p0"))],
            )
            .unwrap()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&got[..], b"p0");
        c.heartbeat("g", 1, &a.member_id).unwrap();
        // A second member starts a rebalance: the first learns it from its heartbeat.
        let b_join = join(&c, "", 1000);
        assert!(matches!(
            c.heartbeat("g", 1, &a.member_id),
            Err(GroupError::RebalanceInProgress(_))
        ));
        assert_eq!(
            c.authorize_commit("g", 1, &a.member_id),
            Ok(CommitAuthority::Member),
            "commits of the current generation are taken while preparing a rebalance"
        );
        let a2 = join(&c, &a.member_id, 1000).await.unwrap().unwrap();
        let b = b_join.await.unwrap().unwrap();
        assert_eq!((a2.generation, b.generation), (2, 2));
        assert_eq!(a2.leader, a.member_id, "the leader stays the leader");
        assert!(b.members.is_empty(), "only the leader gets the members");
        assert!(matches!(
            c.authorize_commit("g", 1, &a.member_id),
            Err(GroupError::IllegalGeneration {
                sent: 1,
                current: 2,
                ..
            })
        ));
        assert!(matches!(
            c.heartbeat("g", 2, "nobody"),
            Err(GroupError::UnknownMember { .. })
        ));
        assert!(matches!(
            c.authorize_commit("g", -1, ""),
            Err(GroupError::NonEmptyGroup(_))
        ));
        // The follower's sync waits for the leader's.
        let b_sync = c.sync("g", 2, &b.member_id, vec![]).unwrap();
        c.sync(
            "g",
            2,
            &a.member_id,
            vec![(b.member_id.clone(), Bytes::from_static(b"p1"))],
        )
        .unwrap();
        assert_eq!(&b_sync.await.unwrap().unwrap()[..], b"p1");
        // Leaving rebalances; the last one out empties the group.
        c.leave("g", &b.member_id).unwrap();
        let a3 = join(&c, &a.member_id, 1000).await.unwrap().unwrap();
        assert_eq!(a3.generation, 3);
        c.leave("g", &a.member_id).unwrap();
        assert_eq!(c.describe("g").unwrap().state, GroupState::Empty);
        assert_eq!(c.authorize_commit("g", -1, ""), Ok(CommitAuthority::Admin));
    }

    #[tokio::test]
    async fn expired_sessions_leave_and_stragglers_are_dropped() {
        let c = coordinator(0);
        let a = join(&c, "", 50).await.unwrap().unwrap();
        c.sync("g", 1, &a.member_id, vec![]).unwrap();
        let b_join = join(&c, "", 5000);
        // `a` never joins again: after its rebalance timeout it is dropped.
        std::thread::sleep(Duration::from_millis(80));
        c.tick(|_| true);
        let b = b_join.await.unwrap().unwrap();
        assert_eq!(b.members.len(), 1);
        assert_eq!(b.leader, b.member_id);
        assert!(c.heartbeat("g", b.generation, &a.member_id).is_err());
        // A group this broker no longer coordinates is dropped.
        c.tick(|_| false);
        assert!(c.describe("g").is_none());
    }

    #[test]
    fn bad_joins_are_refused() {
        let c = coordinator(0);
        let mut r = JoinRequest {
            group: String::new(),
            member_id: String::new(),
            client_id: "c".into(),
            client_host: "h".into(),
            session_timeout_ms: 1000,
            rebalance_timeout_ms: 1000,
            protocol_type: "consumer".into(),
            protocols: vec![("range".into(), Bytes::new())],
        };
        assert!(matches!(
            c.join_now(&mut r),
            Err(GroupError::InvalidGroupId(_))
        ));
        r.group = "g".into();
        r.session_timeout_ms = 1;
        assert!(matches!(
            c.join_now(&mut r),
            Err(GroupError::InvalidSessionTimeout { .. })
        ));
        r.session_timeout_ms = 1000;
        r.member_id = "ghost".into();
        assert!(matches!(
            c.join_now(&mut r),
            Err(GroupError::UnknownMember { .. })
        ));
    }

    impl Coordinator {
        fn join_now(&self, r: &mut JoinRequest) -> Result<(), GroupError> {
            self.join(JoinRequest {
                group: r.group.clone(),
                member_id: r.member_id.clone(),
                client_id: r.client_id.clone(),
                client_host: r.client_host.clone(),
                session_timeout_ms: r.session_timeout_ms,
                rebalance_timeout_ms: r.rebalance_timeout_ms,
                protocol_type: r.protocol_type.clone(),
                protocols: r.protocols.clone(),
            })
            .map(drop)
        }
    }

    #[test]
    fn coordinators_spread_and_move_little() {
        let live = [0, 1, 2];
        let mut count = [0; 3];
        let mut moved = 0;
        for i in 0..3000 {
            let g = format!("group-{i}");
            let c = coordinator_of(&g, &live).unwrap();
            count[c as usize] += 1;
            let without = coordinator_of(&g, &[0, 1]).unwrap();
            if c != 2 && without != c {
                moved += 1;
            }
        }
        assert!(count.iter().all(|&n| n > 800), "{count:?}");
        assert_eq!(moved, 0, "groups of surviving brokers stay put");
        assert_eq!(coordinator_of("g", &[]), None);
    }
}
