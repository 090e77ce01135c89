//! The consumer group protocol (KIP-848): members heartbeat with
//! ConsumerGroupHeartbeat, and the coordinator assigns partitions itself. A change
//! of membership, subscriptions or subscribed topics bumps the group epoch and
//! computes a new target assignment; each member then moves towards its target on
//! its own heartbeats, with no stop-the-world rebalance: it first gives up what it
//! must (it keeps its epoch until it reports them revoked), then takes its new epoch
//! and its target, less any partition another member has not released yet, which it
//! gets on a later heartbeat. A member that joins or leaves moves only the
//! partitions that must move (the `uniform` assignor keeps the rest in place).
//!
//! A group id is either classic or consumer: a consumer member cannot join a classic
//! group with members (GROUP_ID_NOT_FOUND) nor a classic member a consumer group with
//! members (INCONSISTENT_GROUP_PROTOCOL); an empty group of either kind converts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::assignor::{self, MemberSpec, Partitions};
use super::{Coordinator, GroupError, GroupState, unknown_member, validate_group_id};

/// A ConsumerGroupHeartbeat as the coordinator sees it. `None` fields are unchanged
/// since the member's last heartbeat.
pub struct ConsumerHeartbeat {
    pub group: String,
    /// Empty on a first heartbeat of v0 (the coordinator names the member).
    pub member_id: String,
    /// 0: join; -1: leave; -2: a static member leaves for now; otherwise the epoch.
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1: unchanged.
    pub rebalance_timeout_ms: i32,
    pub subscribed_topics: Option<Vec<String>>,
    /// A regular expression every topic name it matches whole is subscribed by (v1;
    /// empty: none).
    pub subscribed_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// The partitions the member owns now.
    pub owned: Option<Partitions>,
    pub client_id: String,
    pub client_host: String,
}

/// A heartbeat's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct ConsumerHeartbeatResult {
    pub member_id: String,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// The member's partitions, when they changed (or it may not know them).
    pub assignment: Option<Partitions>,
}

/// A member as ConsumerGroupDescribe shows it.
#[derive(Debug, Clone)]
pub struct ConsumerMemberDescription {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topics: Vec<String>,
    pub subscribed_regex: Option<String>,
    pub assignment: Partitions,
    pub target: Partitions,
}

#[derive(Debug, Clone)]
pub struct ConsumerGroupDescription {
    /// Empty, Reconciling or Stable.
    pub state: &'static str,
    pub epoch: i32,
    pub assignment_epoch: i32,
    pub assignor: String,
    pub members: Vec<ConsumerMemberDescription>,
}

pub(super) struct ConsumerMember {
    epoch: i32,
    previous_epoch: i32,
    instance: Option<String>,
    rack: Option<String>,
    client_id: String,
    client_host: String,
    subscribed: Vec<String>,
    /// A subscription by pattern, and the topics it matched at the last heartbeat.
    regex: Option<(String, regex::Regex)>,
    matched: Vec<String>,
    rebalance_timeout: Duration,
    last_heartbeat: Instant,
    /// What the member was told it owns.
    assigned: Partitions,
    /// What it must give up, and owns until it says it did.
    revoking: Partitions,
    revoke_by: Option<Instant>,
    /// The assignment last sent.
    sent: Option<Partitions>,
    /// The server assignor the member asks for, if any.
    assignor: Option<String>,
}

#[derive(Default)]
pub(super) struct ConsumerGroup {
    epoch: i32,
    assignment_epoch: i32,
    assignor: String,
    /// The subscribed topics (id, partitions) the target was computed from.
    topics: BTreeMap<String, (Uuid, i32)>,
    target: BTreeMap<String, Partitions>,
    members: BTreeMap<String, ConsumerMember>,
}

fn minus(a: &Partitions, b: &Partitions) -> Partitions {
    let mut out = Partitions::new();
    for (t, ps) in a {
        let left: BTreeSet<i32> = match b.get(t) {
            Some(bs) => ps.difference(bs).copied().collect(),
            None => ps.clone(),
        };
        if !left.is_empty() {
            out.insert(*t, left);
        }
    }
    out
}

fn union(a: &mut Partitions, b: &Partitions) {
    for (t, ps) in b {
        a.entry(*t).or_default().extend(ps);
    }
}

impl ConsumerGroup {
    pub(super) fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// The assignor most members ask for (ties: by name), `uniform` if none asks.
    fn chosen_assignor(&self) -> String {
        let mut votes: BTreeMap<&str, usize> = BTreeMap::new();
        for a in self.members.values().filter_map(|m| m.assignor.as_deref()) {
            *votes.entry(a).or_default() += 1;
        }
        let best = votes.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)));
        best.map_or(assignor::UNIFORM, |(a, _)| a).to_string()
    }

    /// What members other than `id` still own.
    fn owned_by_others(&self, id: &str) -> Partitions {
        let mut out = Partitions::new();
        for (other, m) in &self.members {
            if other != id {
                union(&mut out, &m.assigned);
                union(&mut out, &m.revoking);
            }
        }
        out
    }

    /// Recomputes the target assignment if the group epoch moved past it.
    fn compute_target(&mut self) {
        if self.epoch <= self.assignment_epoch {
            return;
        }
        let specs: Vec<MemberSpec<'_>> = self
            .members
            .iter()
            .map(|(id, m)| MemberSpec {
                id,
                topics: m
                    .subscribed
                    .iter()
                    .chain(&m.matched)
                    .filter_map(|t| self.topics.get(t).copied())
                    .collect(),
                current: self.target.get(id),
            })
            .collect();
        self.target = assignor::assign(&self.assignor, &specs);
        self.assignment_epoch = self.epoch;
    }

    /// Moves a member towards its target (see the module's doc).
    fn reconcile(&mut self, id: &str, now: Instant) {
        let target = self.target.get(id).cloned().unwrap_or_default();
        let others = self.owned_by_others(id);
        let epoch = self.assignment_epoch;
        let Some(m) = self.members.get_mut(id) else {
            return;
        };
        if m.epoch != epoch {
            let revoke = minus(&m.assigned, &target);
            if !revoke.is_empty() {
                m.assigned = minus(&m.assigned, &revoke);
                union(&mut m.revoking, &revoke);
                m.revoke_by = Some(now + m.rebalance_timeout);
                return;
            }
            if !m.revoking.is_empty() {
                return;
            }
            m.previous_epoch = m.epoch;
            m.epoch = epoch;
        }
        // At the target epoch: everything of the target nobody else holds.
        let free = minus(&minus(&target, &m.assigned), &others);
        union(&mut m.assigned, &free);
    }

    fn state(&self) -> &'static str {
        if self.members.is_empty() {
            "Empty"
        } else if self
            .members
            .values()
            .all(|m| m.epoch == self.assignment_epoch && m.revoking.is_empty())
            && self
                .members
                .iter()
                .all(|(id, m)| self.target.get(id).is_none_or(|t| *t == m.assigned))
        {
            "Stable"
        } else {
            "Reconciling"
        }
    }
}

impl Coordinator {
    /// A ConsumerGroupHeartbeat. `all_topics`: every topic's id and partition count,
    /// by name.
    pub fn consumer_heartbeat(
        &self,
        req: ConsumerHeartbeat,
        all_topics: &BTreeMap<String, (Uuid, i32)>,
    ) -> Result<ConsumerHeartbeatResult, GroupError> {
        validate_group_id(&req.group)?;
        if let Some(a) = req.server_assignor.as_ref().filter(|a| !assignor::known(a)) {
            return Err(GroupError::UnsupportedAssignor(a.clone()));
        }
        if req.member_epoch == 0
            && ((req.subscribed_topics.is_none() && req.subscribed_regex.is_none())
                || req.rebalance_timeout_ms < 0)
        {
            return Err(GroupError::InvalidRequest(
                "a joining member must name its subscription and rebalance timeout".into(),
            ));
        }
        // Kafka matches a subscription pattern against whole topic names.
        let regex = match req.subscribed_regex.as_deref() {
            None => None,
            Some("") => Some(None),
            Some(p) => Some(Some((
                p.to_string(),
                regex::Regex::new(&format!("^(?:{p})$"))
                    .map_err(|_| GroupError::InvalidRegex(p.to_string()))?,
            ))),
        };
        let now = Instant::now();
        let interval = self.config.consumer_heartbeat_interval_ms as i32;
        let mut classic = self.groups();
        if let Some(g) = classic.get(&req.group) {
            if !g.members.is_empty() {
                return Err(GroupError::NotConsumerGroup(req.group.clone()));
            }
            if req.member_epoch == 0 {
                classic.remove(&req.group);
            }
        }
        let mut groups = self.consumer_groups();
        if req.member_epoch != 0 && !groups.contains_key(&req.group) {
            return Err(unknown_member(&req.group, &req.member_id));
        }
        let group = groups.entry(req.group.clone()).or_default();
        let member_id = match req.member_epoch {
            -1 | -2 => {
                if group.members.remove(&req.member_id).is_none() {
                    return Err(unknown_member(&req.group, &req.member_id));
                }
                tracing::info!(group = %req.group, member = %req.member_id, "member left");
                group.epoch += 1;
                group.target.remove(&req.member_id);
                return Ok(ConsumerHeartbeatResult {
                    member_id: req.member_id,
                    member_epoch: req.member_epoch,
                    heartbeat_interval_ms: interval,
                    assignment: None,
                });
            }
            0 => {
                let subscribed = req.subscribed_topics.clone().unwrap_or_default();
                let id = if req.member_id.is_empty() {
                    Uuid::new_v4().to_string()
                } else {
                    req.member_id.clone()
                };
                // A static member that starts again replaces the member that held its
                // instance id, whose partitions are released at once.
                if let Some(instance) = &req.instance_id {
                    let old: Vec<String> = group
                        .members
                        .iter()
                        .filter(|(m, o)| **m != id && o.instance.as_ref() == Some(instance))
                        .map(|(m, _)| m.clone())
                        .collect();
                    for m in old {
                        tracing::info!(group = %req.group, member = %m, %instance, "static member replaced");
                        group.members.remove(&m);
                        group.target.remove(&m);
                    }
                }
                // A member that joins again starts afresh.
                group.members.insert(
                    id.clone(),
                    ConsumerMember {
                        epoch: 0,
                        previous_epoch: 0,
                        instance: req.instance_id.clone(),
                        rack: req.rack_id.clone(),
                        client_id: req.client_id.clone(),
                        client_host: req.client_host.clone(),
                        subscribed,
                        regex: None,
                        matched: Vec::new(),
                        rebalance_timeout: Duration::from_millis(
                            req.rebalance_timeout_ms.max(0) as u64
                        ),
                        last_heartbeat: now,
                        assigned: Partitions::new(),
                        revoking: Partitions::new(),
                        revoke_by: None,
                        sent: None,
                        assignor: None,
                    },
                );
                tracing::info!(group = %req.group, member = %id, "member joined");
                group.epoch += 1;
                id
            }
            epoch => {
                let m = group
                    .members
                    .get_mut(&req.member_id)
                    .ok_or_else(|| unknown_member(&req.group, &req.member_id))?;
                if epoch != m.epoch && epoch != m.previous_epoch {
                    return Err(GroupError::FencedMemberEpoch {
                        group: req.group.clone(),
                        member: req.member_id.clone(),
                        sent: epoch,
                        current: m.epoch,
                    });
                }
                if epoch != m.epoch {
                    // The last answer was lost: send the assignment again.
                    m.sent = None;
                }
                if let Some(s) = req
                    .subscribed_topics
                    .as_ref()
                    .filter(|s| **s != m.subscribed)
                {
                    m.subscribed = s.clone();
                    group.epoch += 1;
                }
                if req.rebalance_timeout_ms >= 0 {
                    m.rebalance_timeout = Duration::from_millis(req.rebalance_timeout_ms as u64);
                }
                req.member_id.clone()
            }
        };
        let m = group.members.get_mut(&member_id).expect("the member");
        let pattern = |r: &Option<(String, regex::Regex)>| r.as_ref().map(|r| r.0.clone());
        if let Some(regex) = regex.filter(|r| pattern(r) != pattern(&m.regex)) {
            m.regex = regex;
            group.epoch += 1;
        }
        let m = group.members.get_mut(&member_id).expect("the member");
        if req.server_assignor.is_some() {
            m.assignor = req.server_assignor.clone();
        }
        // The group's assignor is the one most of its members ask for.
        let chosen = group.chosen_assignor();
        if chosen != group.assignor {
            group.assignor = chosen;
            group.epoch += 1;
        }
        let m = group.members.get_mut(&member_id).expect("the member");
        m.last_heartbeat = now;
        if let Some(owned) = &req.owned {
            // Revocations are done once the member owns none of them.
            if minus(&m.revoking, owned) == m.revoking {
                m.revoking.clear();
                m.revoke_by = None;
            }
            if *owned != m.assigned {
                m.sent = None;
            }
        }
        // The subscribed topics as they are now: a new or deleted topic, one that a
        // pattern matches, or more partitions, change the target.
        for m in group.members.values_mut() {
            let matched: Vec<String> = match &m.regex {
                Some((_, r)) => all_topics
                    .keys()
                    .filter(|t| r.is_match(t))
                    .cloned()
                    .collect(),
                None => Vec::new(),
            };
            if matched != m.matched {
                m.matched = matched;
                group.epoch += 1;
            }
        }
        let wanted: BTreeSet<&String> = group
            .members
            .values()
            .flat_map(|m| m.subscribed.iter().chain(&m.matched))
            .collect();
        let topics: BTreeMap<String, (Uuid, i32)> = wanted
            .into_iter()
            .filter_map(|t| all_topics.get(t).map(|found| (t.clone(), *found)))
            .collect();
        if topics != group.topics {
            group.topics = topics;
            group.epoch += 1;
        }
        group.compute_target();
        group.reconcile(&member_id, now);
        let m = group.members.get_mut(&member_id).expect("the member");
        let assignment = (m.sent.as_ref() != Some(&m.assigned)).then(|| m.assigned.clone());
        m.sent = Some(m.assigned.clone());
        Ok(ConsumerHeartbeatResult {
            member_id,
            member_epoch: m.epoch,
            heartbeat_interval_ms: interval,
            assignment,
        })
    }

    pub fn describe_consumer_group(&self, group_id: &str) -> Option<ConsumerGroupDescription> {
        let groups = self.consumer_groups();
        let g = groups.get(group_id)?;
        Some(ConsumerGroupDescription {
            state: g.state(),
            epoch: g.epoch,
            assignment_epoch: g.assignment_epoch,
            assignor: if g.assignor.is_empty() {
                assignor::UNIFORM.to_string()
            } else {
                g.assignor.clone()
            },
            members: g
                .members
                .iter()
                .map(|(id, m)| ConsumerMemberDescription {
                    member_id: id.clone(),
                    instance_id: m.instance.clone(),
                    rack_id: m.rack.clone(),
                    member_epoch: m.epoch,
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    subscribed_topics: m.subscribed.clone(),
                    subscribed_regex: m.regex.as_ref().map(|r| r.0.clone()),
                    assignment: m.assigned.clone(),
                    target: g.target.get(id).cloned().unwrap_or_default(),
                })
                .collect(),
        })
    }

    /// A commit to a consumer group: from a member at its epoch, or an admin commit
    /// (epoch -1, no member) to a group without members. `None`: not a consumer group.
    pub(super) fn authorize_consumer_commit(
        &self,
        group_id: &str,
        epoch: i32,
        member_id: &str,
    ) -> Option<Result<super::CommitAuthority, GroupError>> {
        let groups = self.consumer_groups();
        let g = groups.get(group_id)?;
        if epoch < 0 && member_id.is_empty() {
            return Some(if g.members.is_empty() {
                Ok(super::CommitAuthority::Admin)
            } else {
                Err(GroupError::NonEmptyGroup(group_id.to_string()))
            });
        }
        let Some(m) = g.members.get(member_id) else {
            return Some(Err(unknown_member(group_id, member_id)));
        };
        if epoch != m.epoch {
            return Some(Err(GroupError::StaleMemberEpoch {
                group: group_id.to_string(),
                member: member_id.to_string(),
                sent: epoch,
                current: m.epoch,
            }));
        }
        Some(Ok(super::CommitAuthority::Member))
    }

    /// Consumer groups as classic calls see them (list, describe, delete).
    pub(super) fn consumer_summary(
        &self,
        group_id: &str,
    ) -> Option<(GroupState, usize, i32, String)> {
        let groups = self.consumer_groups();
        let g = groups.get(group_id)?;
        let state = match g.state() {
            "Empty" => GroupState::Empty,
            "Stable" => GroupState::Stable,
            _ => GroupState::Reconciling,
        };
        Some((state, g.members.len(), g.epoch, g.assignor.clone()))
    }

    pub(super) fn consumer_group_ids(&self) -> Vec<String> {
        self.consumer_groups().keys().cloned().collect()
    }

    /// Expires members whose session lapsed or who did not revoke in time, and drops
    /// empty groups and those this broker no longer coordinates.
    pub(super) fn tick_consumer_groups(&self, now: Instant, still_mine: &impl Fn(&str) -> bool) {
        let session = Duration::from_millis(self.config.consumer_session_timeout_ms);
        let mut groups = self.consumer_groups();
        for (id, g) in groups.iter_mut() {
            let gone: Vec<String> = g
                .members
                .iter()
                .filter(|(_, m)| {
                    now.duration_since(m.last_heartbeat) > session
                        || m.revoke_by.is_some_and(|by| now > by)
                })
                .map(|(id, _)| id.clone())
                .collect();
            for member in gone {
                tracing::info!(group = %id, %member, "member expired (session or revocation timeout)");
                g.members.remove(&member);
                g.target.remove(&member);
                g.epoch += 1;
            }
        }
        groups.retain(|id, g| still_mine(id) && !g.members.is_empty());
    }
}

#[cfg(test)]
mod tests;
