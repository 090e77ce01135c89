//! Joining the group: giving partitions up, JoinGroup and SyncGroup (computing the
//! assignment as the leader), starting each assigned partition at its committed offset,
//! and the heartbeat task that keeps the membership alive.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use shale_proto::v1::*;
use shale_records::ErrorCode;

use super::{GroupConsumer, OffsetReset};
use crate::assignor::{Assignor, Subscription, TopicPartition};
use crate::consumer::Consumer;
use crate::{Error, Result, check_result};
use shale_records::consumer_protocol;

impl GroupConsumer {
    /// Gives up the partitions (committing them first with auto-commit), joins, and
    /// takes the new assignment.
    pub(super) async fn rebalance(&mut self) -> Result<()> {
        let started = Instant::now();
        if self.joined
            && self.config.auto_commit_interval.is_some()
            && let Err(e) = self.commit_sync().await
        {
            tracing::warn!(group = %self.config.group_id, error = %e, "commit before rebalance failed");
        }
        if self.joined
            && let Some(listener) = &self.listener
        {
            let offsets = listener
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .on_revoked(&self.assignment);
            if let Err(e) = self.commit_offsets(offsets).await {
                tracing::warn!(group = %self.config.group_id, error = %e, "commit on revoke failed");
            }
        }
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        let owned = std::mem::take(&mut self.assignment);
        self.fetchers.clear();
        self.paused.clear();
        self.joined = false;
        let deadline = Instant::now() + self.config.max_poll_interval + self.config.session_timeout;
        let mut backoff = Duration::from_millis(50);
        let assignment = loop {
            match self.join_and_sync(&owned).await {
                Ok(a) => break a,
                Err(e) if retriable_group_error(&e) && Instant::now() < deadline => {
                    tracing::debug!(group = %self.config.group_id, error = %e, "joining again");
                    match e.code() {
                        Some(ErrorCode::UnknownMemberId) => {
                            self.membership().member_id.clear();
                        }
                        Some(ErrorCode::RebalanceInProgress | ErrorCode::IllegalGeneration) => {}
                        _ => {
                            self.coordinator = None;
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_secs(1));
                        }
                    }
                }
                Err(e) => return Err(e),
            }
        };
        self.partition_counts = self.subscribed_counts().await?;
        self.counts_checked = Instant::now();
        self.assign(assignment).await?;
        if let Some(listener) = &self.listener {
            let mut assigned = Vec::new();
            for (t, c) in &self.fetchers {
                assigned.extend(c.positions().iter().map(|(&p, &o)| ((t.clone(), p), o)));
            }
            listener
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .on_assigned(&assigned);
        }
        self.joined = true;
        self.last_commit = Instant::now();
        self.last_rebalance = Some(started.elapsed());
        let m = self.membership();
        tracing::info!(group = %self.config.group_id, generation = m.generation, member = %m.member_id,
            partitions = ?self.assignment, took_ms = started.elapsed().as_millis() as u64, "joined group");
        drop(m);
        self.start_heartbeat();
        Ok(())
    }

    async fn join_and_sync(&mut self, owned: &[TopicPartition]) -> Result<Vec<TopicPartition>> {
        let mut coordinator = self.coordinator().await?;
        let member_id = self.membership().member_id.clone();
        let subscription = consumer_protocol::encode_subscription(&Subscription {
            topics: self.topics.clone(),
            owned: owned.to_vec(),
        });
        let protocols = self
            .config
            .assignors
            .iter()
            .map(|a| GroupProtocol {
                name: a.name().into(),
                metadata: subscription.clone(),
            })
            .collect();
        let mut req = tonic::Request::new(JoinGroupRequest {
            group_id: self.config.group_id.clone(),
            member_id,
            client_id: self.config.client_id.clone(),
            session_timeout_ms: self.config.session_timeout.as_millis() as i32,
            rebalance_timeout_ms: self.config.max_poll_interval.as_millis() as i32,
            protocol_type: "consumer".into(),
            protocols,
        });
        req.set_timeout(self.config.max_poll_interval + Duration::from_secs(5));
        let joined = coordinator.join_group(req).await?.into_inner();
        if let Some(ErrorCode::UnknownMemberId) = joined
            .error
            .as_ref()
            .and_then(|e| ErrorCode::try_from(e.error_code).ok())
        {
            self.membership().member_id.clear();
        }
        check_result(joined.error.clone())?;
        {
            let mut m = self.membership();
            m.member_id = joined.member_id.clone();
            m.generation = joined.generation_id;
            m.rejoin = false;
        }
        let assignments = if joined.leader == joined.member_id {
            self.compute_assignment(&joined).await?
        } else {
            Vec::new()
        };
        let mut req = tonic::Request::new(SyncGroupRequest {
            group_id: self.config.group_id.clone(),
            generation_id: joined.generation_id,
            member_id: joined.member_id.clone(),
            assignments,
        });
        req.set_timeout(self.config.max_poll_interval + Duration::from_secs(5));
        let synced = coordinator.sync_group(req).await?.into_inner();
        check_result(synced.error)?;
        consumer_protocol::decode_assignment(synced.assignment).map_err(|e| {
            Error::Invalid(format!("undecodable assignment from the group leader: {e}"))
        })
    }

    /// Partition counts of the subscribed topics that exist.
    pub(super) async fn subscribed_counts(&self) -> Result<BTreeMap<String, i32>> {
        let mut out = BTreeMap::new();
        for t in &self.topics {
            match self.client.partition_count(t).await {
                Ok(n) => {
                    out.insert(t.clone(), n);
                }
                Err(e) if e.code() == Some(ErrorCode::UnknownTopicOrPartition) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    /// As the group leader: every member's partitions under the chosen assignor.
    async fn compute_assignment(
        &self,
        joined: &JoinGroupResponse,
    ) -> Result<Vec<SyncGroupAssignment>> {
        let assignor = Assignor::from_name(&joined.protocol_name).ok_or_else(|| {
            Error::Invalid(format!("unknown assignor '{}'", joined.protocol_name))
        })?;
        let mut members = BTreeMap::new();
        for m in &joined.members {
            let s = consumer_protocol::decode_subscription(m.metadata.clone()).map_err(|e| {
                Error::Invalid(format!("undecodable subscription of {}: {e}", m.member_id))
            })?;
            members.insert(m.member_id.clone(), s);
        }
        let mut counts = BTreeMap::new();
        for t in members.values().flat_map(|s| s.topics.iter()) {
            if !counts.contains_key(t) {
                match self.client.partition_count(t).await {
                    Ok(n) => {
                        counts.insert(t.clone(), n);
                    }
                    Err(e) if e.code() == Some(ErrorCode::UnknownTopicOrPartition) => {
                        tracing::warn!(topic = %t, "subscribed topic does not exist");
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(assignor
            .assign(&members, &counts)
            .into_iter()
            .map(|(member_id, parts)| SyncGroupAssignment {
                member_id,
                assignment: consumer_protocol::encode_assignment(&parts),
            })
            .collect())
    }

    /// Starts each assigned partition at the group's committed offset, else per
    /// `auto_offset_reset`.
    async fn assign(&mut self, assignment: Vec<TopicPartition>) -> Result<()> {
        let committed = self.client.committed_offsets(&self.config.group_id).await?;
        let mut by_topic: BTreeMap<String, BTreeMap<i32, i64>> = BTreeMap::new();
        for (topic, p) in &assignment {
            let start = match committed.get(&(topic.clone(), *p)) {
                Some(&o) => o,
                None => match self.config.auto_offset_reset {
                    OffsetReset::Earliest => {
                        self.client.list_offset(topic, *p, -2).await?.unwrap_or(0)
                    }
                    OffsetReset::Latest => {
                        self.client.list_offset(topic, *p, -1).await?.unwrap_or(0)
                    }
                    OffsetReset::None => {
                        return Err(Error::Invalid(format!(
                            "group '{}' has no committed offset for partition {p} of '{topic}' and auto.offset.reset is none",
                            self.config.group_id
                        )));
                    }
                },
            };
            by_topic.entry(topic.clone()).or_default().insert(*p, start);
        }
        self.fetchers = by_topic
            .into_iter()
            .map(|(t, positions)| {
                let c = Consumer::at_positions(self.client.clone(), &t, positions)
                    .with_offset_reset(self.config.auto_offset_reset);
                (t, c)
            })
            .collect();
        self.assignment = assignment;
        Ok(())
    }

    fn start_heartbeat(&mut self) {
        let Some(mut coordinator) = self.coordinator.clone() else {
            return;
        };
        let membership = self.membership.clone();
        let group = self.config.group_id.clone();
        let every = self.config.heartbeat_interval;
        let session = self.config.session_timeout;
        let max_poll = self.config.max_poll_interval;
        self.heartbeat = Some(tokio::spawn(async move {
            let mut last_ok = Instant::now();
            loop {
                tokio::time::sleep(every).await;
                let (member_id, generation, last_poll) = {
                    let m = membership.lock().unwrap_or_else(|e| e.into_inner());
                    (m.member_id.clone(), m.generation, m.last_poll)
                };
                if last_poll.elapsed() > max_poll {
                    tracing::warn!(group, "no poll within max.poll.interval; leaving the group");
                    let _ = coordinator
                        .leave_group(LeaveGroupRequest {
                            group_id: group.clone(),
                            member_id,
                        })
                        .await;
                    let mut m = membership.lock().unwrap_or_else(|e| e.into_inner());
                    m.member_id.clear();
                    m.rejoin = true;
                    return;
                }
                let mut req = tonic::Request::new(HeartbeatRequest {
                    group_id: group.clone(),
                    generation_id: generation,
                    member_id,
                });
                req.set_timeout(every.max(Duration::from_secs(1)));
                let r = match coordinator.heartbeat(req).await {
                    Ok(r) => check_result(r.into_inner().error),
                    Err(s) => Err(Error::Rpc(s)),
                };
                match r {
                    Ok(()) => last_ok = Instant::now(),
                    Err(e) if matches!(e, Error::Rpc(_)) && last_ok.elapsed() < session => {}
                    Err(e) => {
                        tracing::info!(group, error = %e, "heartbeat: joining the group again");
                        let mut m = membership.lock().unwrap_or_else(|e| e.into_inner());
                        if e.code() == Some(ErrorCode::UnknownMemberId) {
                            m.member_id.clear();
                        }
                        m.rejoin = true;
                        return;
                    }
                }
            }
        }));
    }
}

/// Errors after which joining again may succeed.
fn retriable_group_error(e: &Error) -> bool {
    matches!(
        e.code(),
        Some(
            ErrorCode::UnknownMemberId
                | ErrorCode::RebalanceInProgress
                | ErrorCode::IllegalGeneration
                | ErrorCode::NotCoordinator
                | ErrorCode::CoordinatorNotAvailable
        )
    ) || e.is_retriable()
}
