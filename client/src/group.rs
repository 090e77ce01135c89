//! A consumer in a group (Kafka's classic protocol, eager rebalancing): it finds the
//! group's coordinator, joins, and — when it is the leader — computes the assignment;
//! a background task heartbeats; `poll` rejoins when the coordinator says the group is
//! rebalancing, resumes each assigned partition at the group's committed offset (else
//! per `auto_offset_reset`), and commits automatically every `auto_commit_interval`
//! (and before giving partitions up) unless manual commits are asked for.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use shale_proto::v1::groups_client::GroupsClient;
use shale_proto::v1::*;
use shale_records::ErrorCode;
use tonic::transport::Channel;

use crate::assignor::{Assignor, Subscription, TopicPartition};
use crate::consumer::{ConsumedRecord, Consumer};
use crate::{Client, Error, Result, check, check_result};

/// What to do in a partition the group has no committed offset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetReset {
    Earliest,
    Latest,
    /// Fail the poll.
    None,
}

impl std::str::FromStr for OffsetReset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "earliest" => Ok(OffsetReset::Earliest),
            "latest" => Ok(OffsetReset::Latest),
            "none" => Ok(OffsetReset::None),
            _ => Err(format!(
                "auto.offset.reset must be earliest, latest or none, not '{s}'"
            )),
        }
    }
}

/// Group consumer settings (Kafka names in the docs).
#[derive(Debug, Clone)]
pub struct GroupConfig {
    pub group_id: String,
    /// `client.id`, the prefix of the member id. Default: "shale".
    pub client_id: String,
    /// `session.timeout.ms`: the coordinator drops a member it has not heard from for
    /// this long. Default: 10 s.
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms`. Default: 1 s.
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms`: a member that does not poll for this long leaves the
    /// group (its partitions go to others). Also the rebalance timeout. Default: 300 s.
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy`, preferred first. Default: range, then sticky
    /// and round-robin.
    pub assignors: Vec<Assignor>,
    /// `enable.auto.commit` + `auto.commit.interval.ms`. Default: every 5 s.
    pub auto_commit_interval: Option<Duration>,
    /// `auto.offset.reset`. Default: latest.
    pub auto_offset_reset: OffsetReset,
    /// `metadata.max.age.ms`: how often the subscribed topics' partition counts are
    /// checked; a change makes the member join again, so new partitions get assigned.
    /// Default: 5 s.
    pub metadata_max_age: Duration,
}

impl GroupConfig {
    pub fn new(group_id: &str) -> Self {
        Self {
            group_id: group_id.to_string(),
            client_id: "shale".into(),
            session_timeout: Duration::from_secs(10),
            heartbeat_interval: Duration::from_secs(1),
            max_poll_interval: Duration::from_secs(300),
            assignors: vec![Assignor::Range, Assignor::Sticky, Assignor::RoundRobin],
            auto_commit_interval: Some(Duration::from_secs(5)),
            auto_offset_reset: OffsetReset::Latest,
            metadata_max_age: Duration::from_secs(5),
        }
    }
}

/// Told when a member's partitions change (Kafka's `ConsumerRebalanceListener`).
/// Called from inside `poll`.
pub trait RebalanceListener: Send {
    /// Before the member gives up `partitions` (eager rebalancing: all it held).
    /// Returns offsets to commit now, e.g. the next offset after the last record it
    /// processed (with auto-commit on, positions were already committed).
    fn on_revoked(&mut self, partitions: &[TopicPartition]) -> BTreeMap<TopicPartition, i64> {
        let _ = partitions;
        BTreeMap::new()
    }

    /// After the new assignment, with the offset each partition starts at.
    fn on_assigned(&mut self, partitions: &[(TopicPartition, i64)]) {
        let _ = partitions;
    }
}

/// What the heartbeat task and `poll` share.
#[derive(Debug)]
struct Membership {
    member_id: String,
    generation: i32,
    /// Set when the coordinator says to join again (or cannot be reached).
    rejoin: bool,
    last_poll: Instant,
}

pub struct GroupConsumer {
    client: Client,
    topics: Vec<String>,
    config: GroupConfig,
    coordinator: Option<GroupsClient<Channel>>,
    membership: Arc<Mutex<Membership>>,
    heartbeat: Option<tokio::task::JoinHandle<()>>,
    /// Per topic: the fetching consumer of the assigned, unpaused partitions.
    fetchers: BTreeMap<String, Consumer>,
    /// Paused partitions and their positions.
    paused: BTreeMap<TopicPartition, i64>,
    /// Assigned in this generation.
    assignment: Vec<TopicPartition>,
    joined: bool,
    last_commit: Instant,
    /// Partition counts of the subscribed topics when the group last formed, and when
    /// they were last checked.
    partition_counts: BTreeMap<String, i32>,
    counts_checked: Instant,
    /// Time the last rebalance took (join to assignment), for tools and tests.
    pub last_rebalance: Option<Duration>,
    /// In a mutex only so that the consumer is `Sync` (it is called from `poll`).
    listener: Option<Mutex<Box<dyn RebalanceListener>>>,
}

impl GroupConsumer {
    pub fn new(client: Client, topics: &[&str], config: GroupConfig) -> Self {
        Self {
            client,
            topics: topics.iter().map(|t| t.to_string()).collect(),
            config,
            coordinator: None,
            membership: Arc::new(Mutex::new(Membership {
                member_id: String::new(),
                generation: -1,
                rejoin: true,
                last_poll: Instant::now(),
            })),
            heartbeat: None,
            fetchers: BTreeMap::new(),
            paused: BTreeMap::new(),
            assignment: Vec::new(),
            joined: false,
            last_commit: Instant::now(),
            last_rebalance: None,
            listener: None,
            partition_counts: BTreeMap::new(),
            counts_checked: Instant::now(),
        }
    }

    /// Calls `listener` on every rebalance.
    pub fn with_listener(mut self, listener: impl RebalanceListener + 'static) -> Self {
        self.listener = Some(Mutex::new(Box::new(listener)));
        self
    }

    fn membership(&self) -> std::sync::MutexGuard<'_, Membership> {
        self.membership.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn member_id(&self) -> String {
        self.membership().member_id.clone()
    }

    pub fn generation(&self) -> i32 {
        self.membership().generation
    }

    /// The partitions assigned in the current generation.
    pub fn assignment(&self) -> &[TopicPartition] {
        &self.assignment
    }

    /// Next offset to read in a partition (assigned or paused).
    pub fn position(&self, topic: &str, partition: i32) -> Option<i64> {
        self.fetchers
            .get(topic)
            .and_then(|c| c.positions().get(&partition).copied())
            .or_else(|| self.paused.get(&(topic.to_string(), partition)).copied())
    }

    /// Every assigned partition's position.
    pub fn positions(&self) -> BTreeMap<TopicPartition, i64> {
        let mut out = self.paused.clone();
        for (t, c) in &self.fetchers {
            for (&p, &o) in c.positions() {
                out.insert((t.clone(), p), o);
            }
        }
        out
    }

    async fn coordinator(&mut self) -> Result<GroupsClient<Channel>> {
        if let Some(c) = &self.coordinator {
            return Ok(c.clone());
        }
        let c = self.client.group_coordinator(&self.config.group_id).await?;
        self.coordinator = Some(c.clone());
        Ok(c)
    }

    /// Waits up to `max_wait` for records of the assigned partitions, taking part in
    /// rebalances as needed.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<ConsumedRecord>> {
        self.membership().last_poll = Instant::now();
        if self.joined && self.counts_checked.elapsed() >= self.config.metadata_max_age {
            self.counts_checked = Instant::now();
            match self.subscribed_counts().await {
                Ok(counts) if counts != self.partition_counts => {
                    tracing::info!(group = %self.config.group_id, "partition count changed; joining again");
                    self.membership().rejoin = true;
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::warn!(group = %self.config.group_id, error = %e, "cannot check partition counts")
                }
            }
        }
        if !self.joined || self.membership().rejoin {
            self.rebalance().await?;
        }
        if let Some(every) = self.config.auto_commit_interval
            && self.last_commit.elapsed() >= every
            && let Err(e) = self.commit_sync().await
        {
            tracing::warn!(group = %self.config.group_id, error = %e, "auto-commit failed");
        }
        if self.fetchers.values().all(|c| c.positions().is_empty()) {
            // Nothing assigned (or all paused): wait, but notice a rebalance soon.
            let until = Instant::now() + max_wait;
            while Instant::now() < until && !self.membership().rejoin {
                tokio::time::sleep(Duration::from_millis(50).min(max_wait)).await;
            }
            return Ok(Vec::new());
        }
        let polls = self
            .fetchers
            .values_mut()
            .filter(|c| !c.positions().is_empty())
            .map(|c| c.poll(max_wait));
        let mut out = Vec::new();
        for r in futures::future::join_all(polls).await {
            out.extend(r?);
        }
        Ok(out)
    }

    /// Gives up the partitions (committing them first with auto-commit), joins, and
    /// takes the new assignment.
    async fn rebalance(&mut self) -> Result<()> {
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
        let (member_id, generation) = {
            let m = self.membership();
            (m.member_id.clone(), m.generation)
        };
        let subscription = ConsumerSubscription {
            topics: self.topics.clone(),
            owned: to_topic_partitions(owned),
            generation_id: generation,
        }
        .encode_to_vec();
        let protocols = self
            .config
            .assignors
            .iter()
            .map(|a| GroupProtocol {
                name: a.name().into(),
                metadata: subscription.clone().into(),
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
        let a = ConsumerAssignment::decode(synced.assignment).map_err(|e| {
            Error::Invalid(format!("undecodable assignment from the group leader: {e}"))
        })?;
        Ok(a.partitions
            .into_iter()
            .flat_map(|tp| {
                tp.partitions
                    .into_iter()
                    .map(move |p| (tp.topic.clone(), p))
            })
            .collect())
    }

    /// Partition counts of the subscribed topics that exist.
    async fn subscribed_counts(&self) -> Result<BTreeMap<String, i32>> {
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
            let s = ConsumerSubscription::decode(m.metadata.clone()).map_err(|e| {
                Error::Invalid(format!("undecodable subscription of {}: {e}", m.member_id))
            })?;
            let owned = s
                .owned
                .into_iter()
                .flat_map(|tp| {
                    tp.partitions
                        .into_iter()
                        .map(move |p| (tp.topic.clone(), p))
                })
                .collect();
            members.insert(
                m.member_id.clone(),
                Subscription {
                    topics: s.topics,
                    owned,
                },
            );
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
                assignment: ConsumerAssignment {
                    partitions: to_topic_partitions(&parts),
                }
                .encode_to_vec()
                .into(),
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
                let c = Consumer::at_positions(self.client.clone(), &t, positions);
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

    /// Commits the current position of every assigned partition.
    pub async fn commit_sync(&mut self) -> Result<()> {
        let positions = self.positions();
        self.commit_offsets(positions).await
    }

    /// Commits the given offsets (the next offset to read, per partition).
    pub async fn commit_offsets(&mut self, offsets: BTreeMap<TopicPartition, i64>) -> Result<()> {
        if offsets.is_empty() {
            return Ok(());
        }
        let req = self.commit_request(offsets);
        let mut coordinator = self.coordinator().await?;
        let r = send_commit(&mut coordinator, req).await;
        if let Err(e) = &r {
            match e.code() {
                Some(ErrorCode::IllegalGeneration | ErrorCode::RebalanceInProgress) => {
                    self.membership().rejoin = true
                }
                Some(ErrorCode::UnknownMemberId) => {
                    let mut m = self.membership();
                    m.member_id.clear();
                    m.rejoin = true;
                }
                Some(ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable) => {
                    self.coordinator = None;
                    self.membership().rejoin = true;
                }
                _ => {}
            }
        } else {
            self.last_commit = Instant::now();
        }
        r
    }

    /// Commits every position without waiting; the task's result says how it went.
    pub async fn commit_async(&mut self) -> Result<tokio::task::JoinHandle<Result<()>>> {
        let req = self.commit_request(self.positions());
        let mut coordinator = self.coordinator().await?;
        self.last_commit = Instant::now();
        Ok(tokio::spawn(async move {
            send_commit(&mut coordinator, req).await
        }))
    }

    fn commit_request(&self, offsets: BTreeMap<TopicPartition, i64>) -> OffsetCommitRequest {
        let m = self.membership();
        OffsetCommitRequest {
            group_id: self.config.group_id.clone(),
            generation_id: m.generation,
            member_id: m.member_id.clone(),
            partitions: offsets
                .into_iter()
                .map(|((topic, partition), offset)| OffsetCommitPartition {
                    topic,
                    partition,
                    offset,
                    metadata: String::new(),
                })
                .collect(),
        }
    }

    /// Moves the position of an assigned partition.
    pub fn seek(&mut self, topic: &str, partition: i32, offset: i64) -> Result<()> {
        let key = (topic.to_string(), partition);
        if let Some(p) = self.paused.get_mut(&key) {
            *p = offset;
            return Ok(());
        }
        match self
            .fetchers
            .get_mut(topic)
            .and_then(|c| c.positions_mut().get_mut(&partition))
        {
            Some(p) => {
                *p = offset;
                Ok(())
            }
            None => Err(Error::Invalid(format!(
                "partition {partition} of '{topic}' is not assigned to this consumer"
            ))),
        }
    }

    /// Moves a partition's position to the first record at or after `timestamp_ms`
    /// (the end if there is none).
    pub async fn seek_to_timestamp(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp_ms: i64,
    ) -> Result<()> {
        let offset = match self
            .client
            .list_offset(topic, partition, timestamp_ms)
            .await?
        {
            Some(o) => o,
            None => self
                .client
                .list_offset(topic, partition, -1)
                .await?
                .unwrap_or(0),
        };
        self.seek(topic, partition, offset)
    }

    /// Stops fetching a partition (it stays assigned).
    pub fn pause(&mut self, topic: &str, partition: i32) {
        if let Some(pos) = self
            .fetchers
            .get_mut(topic)
            .and_then(|c| c.positions_mut().remove(&partition))
        {
            self.paused.insert((topic.to_string(), partition), pos);
        }
    }

    pub fn resume(&mut self, topic: &str, partition: i32) {
        if let Some(pos) = self.paused.remove(&(topic.to_string(), partition))
            && let Some(c) = self.fetchers.get_mut(topic)
        {
            c.positions_mut().insert(partition, pos);
        }
    }

    pub fn paused(&self) -> Vec<TopicPartition> {
        self.paused.keys().cloned().collect()
    }

    /// Commits (with auto-commit) and leaves the group, so its partitions move at once.
    pub async fn close(mut self) -> Result<()> {
        if self.joined && self.config.auto_commit_interval.is_some() {
            let _ = self.commit_sync().await;
        }
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
        let member_id = self.member_id();
        if !member_id.is_empty()
            && let Ok(mut c) = self.coordinator().await
        {
            let r = c
                .leave_group(LeaveGroupRequest {
                    group_id: self.config.group_id.clone(),
                    member_id,
                })
                .await?
                .into_inner();
            check_result(r.error)?;
        }
        Ok(())
    }
}

impl Drop for GroupConsumer {
    fn drop(&mut self) {
        if let Some(h) = self.heartbeat.take() {
            h.abort();
        }
    }
}

async fn send_commit(
    coordinator: &mut GroupsClient<Channel>,
    req: OffsetCommitRequest,
) -> Result<()> {
    let r = coordinator.offset_commit(req).await?.into_inner();
    check_result(r.error)?;
    for p in r.partitions {
        check(p.error_code, &p.error_message)?;
    }
    Ok(())
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

pub(crate) fn to_topic_partitions(parts: &[TopicPartition]) -> Vec<TopicPartitions> {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in parts {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic
        .into_iter()
        .map(|(topic, partitions)| TopicPartitions {
            topic: topic.to_string(),
            partitions,
        })
        .collect()
}
