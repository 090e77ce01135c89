//! One group's members and the transitions of its state (join, complete a join,
//! remove a member), under the coordinator's lock.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tokio::sync::oneshot;

use super::{GroupError, GroupState, JoinResult};

pub(super) type JoinReply = oneshot::Sender<Result<JoinResult, GroupError>>;
pub(super) type SyncReply = oneshot::Sender<Result<Bytes, GroupError>>;

pub(super) struct Member {
    /// `group.instance.id` of a static member (KIP-345).
    pub(super) instance: Option<String>,
    pub(super) client_id: String,
    pub(super) client_host: String,
    pub(super) session_timeout: Duration,
    pub(super) rebalance_timeout: Duration,
    pub(super) protocols: Vec<(String, Bytes)>,
    pub(super) assignment: Bytes,
    pub(super) last_heartbeat: Instant,
    pub(super) join_waiter: Option<JoinReply>,
    pub(super) sync_waiter: Option<SyncReply>,
}

pub(super) struct Group {
    pub(super) state: GroupState,
    pub(super) generation: i32,
    pub(super) protocol_type: String,
    pub(super) protocol: String,
    pub(super) leader: String,
    pub(super) members: BTreeMap<String, Member>,
    /// Member ids handed out by a first join that must be repeated with them, and
    /// until when they stay valid.
    pub(super) pending: HashMap<String, Instant>,
    /// Static members: `group.instance.id` -> the member id that holds it now.
    pub(super) instances: HashMap<String, String>,
    /// A rebalance completes once every member joined (not before `not_before`), or at
    /// `deadline` without those that did not.
    pub(super) not_before: Instant,
    pub(super) deadline: Instant,
}

impl Group {
    pub(super) fn new(now: Instant) -> Self {
        Self {
            state: GroupState::Empty,
            generation: 0,
            protocol_type: String::new(),
            protocol: String::new(),
            leader: String::new(),
            members: BTreeMap::new(),
            pending: HashMap::new(),
            instances: HashMap::new(),
            not_before: now,
            deadline: now,
        }
    }

    pub(super) fn member(&mut self, group: &str, id: &str) -> Result<&mut Member, GroupError> {
        self.members
            .get_mut(id)
            .ok_or_else(|| GroupError::UnknownMember {
                group: group.to_string(),
                member: id.to_string(),
                hint: "; join again",
            })
    }

    /// A request from `member` that names `instance`: refused if a newer member holds
    /// that instance id now (the sender was replaced and is fenced, KIP-345).
    pub(super) fn check_instance(
        &self,
        group: &str,
        member: &str,
        instance: Option<&str>,
    ) -> Result<(), GroupError> {
        let Some(instance) = instance else {
            return Ok(());
        };
        match self.instances.get(instance) {
            Some(holder) if holder != member => Err(GroupError::FencedInstance {
                group: group.to_string(),
                member: member.to_string(),
                instance: instance.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// A static member rejoining under a new member id (a restarted consumer with
    /// the same `group.instance.id`): it takes over the old member's place, its
    /// assignment and, if it led, the leadership, without a rebalance. The old id is
    /// fenced: its waiters are answered FENCED_INSTANCE_ID. False if no member holds
    /// the instance id.
    pub(super) fn replace_static(&mut self, group: &str, instance: &str, new_id: &str) -> bool {
        let Some(old_id) = self.instances.get(instance).cloned() else {
            return false;
        };
        let Some(mut m) = self.members.remove(&old_id) else {
            self.instances.remove(instance);
            return false;
        };
        let fenced = || GroupError::FencedInstance {
            group: group.to_string(),
            member: old_id.clone(),
            instance: instance.to_string(),
        };
        if let Some(w) = m.join_waiter.take() {
            let _ = w.send(Err(fenced()));
        }
        if let Some(w) = m.sync_waiter.take() {
            let _ = w.send(Err(fenced()));
        }
        if self.leader == old_id {
            self.leader = new_id.to_string();
        }
        self.members.insert(new_id.to_string(), m);
        self.instances
            .insert(instance.to_string(), new_id.to_string());
        tracing::info!(group, instance, old = %old_id, new = new_id, "static member replaced");
        true
    }

    /// Forgets instance ids whose member is gone.
    fn forget_departed_instances(&mut self) {
        let members = &self.members;
        self.instances.retain(|_, id| members.contains_key(id));
    }

    pub(super) fn check_generation(&self, group: &str, generation: i32) -> Result<(), GroupError> {
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
    pub(super) fn prepare_rebalance(&mut self, group: &str, now: Instant, initial_delay: Duration) {
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
    pub(super) fn maybe_complete_join(&mut self, group: &str, now: Instant) {
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
        self.forget_departed_instances();
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
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let answer = self.current_join(&id);
            if let Some(m) = self.members.get_mut(&id) {
                m.assignment = Bytes::new();
                m.last_heartbeat = now;
                if let Some(w) = m.join_waiter.take() {
                    let _ = w.send(Ok(answer));
                }
            }
        }
        tracing::info!(group, generation = self.generation, protocol = %self.protocol,
            leader = %self.leader, members = self.members.len(), "rebalance: members joined");
    }

    /// The current generation as a JoinGroup answers it to `member_id` (the leader
    /// also gets every member's metadata).
    pub(super) fn current_join(&self, member_id: &str) -> JoinResult {
        JoinResult {
            generation: self.generation,
            protocol: self.protocol.clone(),
            leader: self.leader.clone(),
            member_id: member_id.to_string(),
            members: if member_id == self.leader {
                self.members
                    .iter()
                    .map(|(id, m)| (id.clone(), metadata_for(m, &self.protocol)))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The first protocol of the leader's (or first member's) list that every member
    /// supports.
    pub(super) fn common_protocol(&self) -> Option<String> {
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

    pub(super) fn remove_member(&mut self, group: &str, id: &str, now: Instant, delay: Duration) {
        if let Some(m) = self.members.remove(id) {
            self.forget_departed_instances();
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
