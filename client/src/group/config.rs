//! Group consumer settings, what to do without a committed offset, and the listener
//! told of rebalances.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::assignor::{Assignor, TopicPartition};
pub use crate::consumer::OffsetReset;

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
