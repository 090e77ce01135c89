//! A group's offsets for people and tools: its lag per partition, and moving its
//! committed offsets as Kafka's `kafka-consumer-groups --reset-offsets` does (only
//! while the group has no members). Every front end shows the same lag and plans
//! resets the same way; the partitions' offsets are this broker's, so a reset moves
//! the partitions it leads and refuses the others with `NOT_LEADER_OR_FOLLOWER`.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use shale_records::consumer_protocol;

use super::{MemberRef, OffsetQuery, RequestContext, Service};
use shale_broker::error::{Error, Result};
use shale_broker::groups::{GroupDescription, GroupError, OffsetCommit, lag};
use shale_security::acl::{Operation, ResourceType};

/// One partition of a group: where it is committed, the end of its log, and who
/// consumes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub committed_offset: Option<i64>,
    /// `None`: this broker holds no replica of the partition (or may not describe it).
    pub high_watermark: Option<i64>,
    /// The high watermark less the committed offset (never negative), when both are
    /// known.
    pub lag: Option<i64>,
    /// The member the partition is assigned to, if any.
    pub member_id: Option<String>,
}

/// A group, and every partition it commits to or has assigned, with its lag.
#[derive(Debug, Clone)]
pub struct GroupLag {
    /// The group's state and members, as the lag was computed with.
    pub group: GroupDescription,
    /// By topic and partition.
    pub partitions: Vec<PartitionLag>,
    /// The sum of the known lags.
    pub total_lag: i64,
}

/// Where a reset moves each partition's committed offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetTo {
    /// The log start (remote log included).
    Earliest,
    /// The high watermark.
    Latest,
    /// The committed offset, unchanged (committed again).
    Current,
    Offset(i64),
    /// The committed offset moved by this many (negative: back).
    Shift(i64),
    /// The first offset at or after this time (ms); the end of the log if none.
    Time(i64),
}

/// Which partitions a reset moves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResetScope {
    /// Every partition the group has committed an offset for (Kafka's
    /// `--all-topics`).
    Committed,
    /// Every partition of these topics.
    Topics(Vec<String>),
}

/// The offset `to` moves a partition to, given its log's bounds, its committed offset
/// and, for a time, the first offset at or after it. Outside the log it is refused,
/// unless `clamp` moves it to the nearest end.
pub fn reset_offset(
    to: ResetTo,
    (earliest, latest): (i64, i64),
    current: Option<i64>,
    at_time: Option<i64>,
    clamp: bool,
) -> std::result::Result<i64, String> {
    // Retention can move the start past an end read a moment earlier.
    let latest = latest.max(earliest);
    let current = || current.ok_or_else(|| "no committed offset to start from".to_string());
    let offset = match to {
        ResetTo::Earliest => earliest,
        ResetTo::Latest => latest,
        ResetTo::Current => current()?,
        ResetTo::Offset(o) => o,
        ResetTo::Shift(n) => current()?.saturating_add(n),
        ResetTo::Time(_) => at_time.unwrap_or(latest),
    };
    if (earliest..=latest).contains(&offset) {
        Ok(offset)
    } else if clamp {
        Ok(offset.clamp(earliest, latest))
    } else {
        Err(format!(
            "offset {offset} is outside the log [{earliest}, {latest}]"
        ))
    }
}

/// A member's assignment, as (topic, partition); nothing for bytes that are not a
/// consumer-protocol assignment (a member of another protocol type).
fn assigned(bytes: &Bytes) -> Vec<(String, i32)> {
    consumer_protocol::decode_assignment(bytes.clone()).unwrap_or_default()
}

impl Service {
    /// A group's state and members, and its lag per partition: the partitions it has
    /// committed offsets for and those assigned to its members. `GROUP_ID_NOT_FOUND`
    /// for a group with neither members nor offsets.
    pub async fn group_lag(&self, ctx: &RequestContext, group: &str) -> Result<GroupLag> {
        let d = self.describe_group(ctx, group).await?;
        let committed = self.fetch_offsets(ctx, group).await?;
        if d.members.is_empty() && committed.is_empty() {
            return Err(GroupError::GroupNotFound(group.to_string()).into());
        }
        let mut owner: BTreeMap<(String, i32), &str> = BTreeMap::new();
        for m in &d.members {
            for key in assigned(&m.assignment) {
                owner.insert(key, &m.member_id);
            }
        }
        let offsets: BTreeMap<(String, i32), i64> = committed
            .into_iter()
            .map(|c| ((c.topic, c.partition), c.offset))
            .collect();
        let keys: BTreeSet<&(String, i32)> = owner.keys().chain(offsets.keys()).collect();
        let mut partitions = Vec::with_capacity(keys.len());
        let mut total_lag = 0;
        for (topic, partition) in keys {
            let key = (topic.clone(), *partition);
            let high_watermark = self
                .may(ctx, Operation::Describe, ResourceType::Topic, topic)
                .then(|| self.broker.local_high_watermark(topic, *partition))
                .flatten();
            let committed_offset = offsets.get(&key).copied();
            let lag = match (committed_offset, high_watermark) {
                (Some(c), Some(e)) => Some(lag(c, e)),
                _ => None,
            };
            total_lag += lag.unwrap_or(0);
            partitions.push(PartitionLag {
                member_id: owner.get(&key).map(|m| m.to_string()),
                topic: key.0,
                partition: key.1,
                committed_offset,
                high_watermark,
                lag,
            });
        }
        Ok(GroupLag {
            partitions,
            total_lag,
            group: d,
        })
    }

    /// Plans moving a group's committed offsets (see [`reset_offset`]) and, with
    /// `execute`, commits the plan. Refused while the group has members
    /// (`NON_EMPTY_GROUP`), and for a group without committed offsets unless topics
    /// are named (`GROUP_ID_NOT_FOUND`). Returns the plan, by topic and partition.
    pub async fn reset_offsets(
        &self,
        ctx: &RequestContext,
        group: &str,
        scope: ResetScope,
        to: ResetTo,
        clamp: bool,
        execute: bool,
    ) -> Result<Vec<OffsetCommit>> {
        let d = self.describe_group(ctx, group).await?;
        if !d.members.is_empty() {
            return Err(GroupError::NonEmptyGroup(group.to_string()).into());
        }
        let committed: BTreeMap<(String, i32), i64> = self
            .fetch_offsets(ctx, group)
            .await?
            .into_iter()
            .map(|c| ((c.topic, c.partition), c.offset))
            .collect();
        let partitions: BTreeSet<(String, i32)> = match scope {
            ResetScope::Committed => committed.keys().cloned().collect(),
            ResetScope::Topics(topics) => {
                let mut out = BTreeSet::new();
                for t in topics {
                    let d = self.describe_topic(ctx, &t).await?;
                    out.extend((0..d.topic.partitions).map(|p| (t.clone(), p)));
                }
                out
            }
        };
        if partitions.is_empty() {
            // No offsets and no members: to Kafka, no such group.
            return Err(GroupError::GroupNotFound(group.to_string()).into());
        }
        let mut plan = Vec::with_capacity(partitions.len());
        for (topic, partition) in partitions {
            let at = |timestamp| OffsetQuery {
                topic: topic.clone(),
                partition,
                timestamp,
                read_committed: false,
            };
            let mut queries = vec![at(-2), at(-1)];
            if let ResetTo::Time(ts) = to {
                queries.push(at(ts));
            }
            let mut found = self.list_offsets(ctx, queries).await.into_iter();
            let mut next = || -> Result<Option<i64>> {
                match found.next() {
                    Some(k) => Ok(k.result?.map(|o| o.offset)),
                    None => Ok(None),
                }
            };
            let bounds = (next()?.unwrap_or(0), next()?.unwrap_or(0));
            let at_time = next()?;
            let current = committed.get(&(topic.clone(), partition)).copied();
            let offset = reset_offset(to, bounds, current, at_time, clamp)
                .map_err(|e| Error::InvalidRequest(format!("{topic}:{partition}: {e}")))?;
            plan.push(OffsetCommit {
                topic,
                partition,
                offset,
                metadata: String::new(),
            });
        }
        if execute {
            let results = self
                .commit_offsets(ctx, group, -1, MemberRef::id(""), plan.clone())
                .await?;
            for r in results {
                r.result?;
            }
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_land_in_the_log_or_are_refused() {
        let log = (10, 100);
        let plan = |to, current, at_time, clamp| reset_offset(to, log, current, at_time, clamp);
        assert_eq!(plan(ResetTo::Earliest, None, None, false), Ok(10));
        assert_eq!(plan(ResetTo::Latest, None, None, false), Ok(100));
        assert_eq!(plan(ResetTo::Current, Some(50), None, false), Ok(50));
        assert!(plan(ResetTo::Current, None, None, true).is_err());
        assert_eq!(plan(ResetTo::Shift(-5), Some(50), None, false), Ok(45));
        assert!(plan(ResetTo::Shift(-45), Some(50), None, false).is_err());
        assert_eq!(plan(ResetTo::Shift(-45), Some(50), None, true), Ok(10));
        assert_eq!(
            plan(ResetTo::Shift(i64::MAX), Some(50), None, true),
            Ok(100)
        );
        assert_eq!(plan(ResetTo::Offset(7), None, None, true), Ok(10));
        assert!(plan(ResetTo::Offset(101), None, None, false).is_err());
        assert_eq!(plan(ResetTo::Time(5), None, Some(42), false), Ok(42));
        // No record at or after the time: the end of the log.
        assert_eq!(plan(ResetTo::Time(5), None, None, false), Ok(100));
    }
}
