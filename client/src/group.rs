//! A consumer in a group (Kafka's classic protocol, eager rebalancing): it finds the
//! group's coordinator, joins, and — when it is the leader — computes the assignment;
//! a background task heartbeats; `poll` rejoins when the coordinator says the group is
//! rebalancing, resumes each assigned partition at the group's committed offset (else
//! per `auto_offset_reset`), and commits automatically every `auto_commit_interval`
//! (and before giving partitions up) unless manual commits are asked for.

mod commit;
mod config;
mod rebalance;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::security::Chan;
use shale_proto::v1::groups_client::GroupsClient;
use shale_proto::v1::*;

use crate::assignor::TopicPartition;
use crate::consumer::{ConsumedRecord, Consumer};
use crate::{Client, Error, Result, check_result};

pub use config::{GroupConfig, OffsetReset, RebalanceListener};

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
    coordinator: Option<GroupsClient<Chan>>,
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

    async fn coordinator(&mut self) -> Result<GroupsClient<Chan>> {
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
