//! Topic administration: create, delete, alter configs, add partitions, describe.
//! Every request is checked in full (name, counts, every config key and value)
//! before the metastore is touched, and local partitions follow through
//! [`Broker::reconcile`].

use std::collections::BTreeMap;

use shale_metastore::{NewTopic, Topic};

use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::partition::PartitionOffsets;
use shale_config::topic::TopicConfig;

/// Largest partition count one request may ask for.
pub(crate) const MAX_PARTITIONS: i32 = 100_000;

/// Kafka's rule: 1–249 characters of `[a-zA-Z0-9._-]`, and not `.` or `..`.
pub(crate) fn validate_topic_name(name: &str) -> Result<()> {
    let invalid = |reason| {
        Err(Error::InvalidTopic {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return invalid("the name is empty");
    }
    if name.len() > 249 {
        return invalid("the name is longer than 249 characters");
    }
    if name == "." || name == ".." {
        return invalid("'.' and '..' are not allowed");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    {
        return invalid("only ASCII letters, digits, '.', '_' and '-' are allowed");
    }
    Ok(())
}

/// A partition as `describe` shows it.
#[derive(Debug, Clone)]
pub struct PartitionDescription {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// This broker's replica's offsets; `None` if it holds no replica.
    pub offsets: Option<PartitionOffsets>,
    /// Where this broker's replica's cleaner stands (compacted topics).
    pub cleaner: Option<shale_log::Cleanable>,
}

#[derive(Debug, Clone)]
pub struct TopicDescription {
    pub topic: Topic,
    pub config: TopicConfig,
    pub partitions: Vec<PartitionDescription>,
}

impl Broker {
    fn check_partitions(count: i32) -> Result<()> {
        if !(1..=MAX_PARTITIONS).contains(&count) {
            return Err(Error::InvalidPartitions(format!(
                "partition count must be between 1 and {MAX_PARTITIONS}, not {count}"
            )));
        }
        Ok(())
    }

    pub async fn create_topic(
        &self,
        name: &str,
        partitions: i32,
        replication_factor: i32,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Topic> {
        validate_topic_name(name)?;
        if let Some(url) = configs.get("read.replica.of").filter(|u| !u.is_empty()) {
            let url = url.clone();
            let replication_factor = match replication_factor {
                -1 => self.config.cluster.default_replication_factor,
                n => n,
            };
            return (self.create_read_replica(
                name,
                &url,
                partitions,
                replication_factor,
                configs,
                validate_only,
            ))
            .await;
        }
        // -1: the broker's defaults, as in Kafka's CreateTopics.
        let partitions = if partitions == -1 {
            self.config.cluster.num_partitions
        } else {
            partitions
        };
        Self::check_partitions(partitions)?;
        let replication_factor = if replication_factor == -1 {
            self.config.cluster.default_replication_factor
        } else {
            replication_factor
        };
        let assignments = self
            .assign_replicas(name, 0, partitions, replication_factor)
            .await?;
        self.create_assigned_topic(name, assignments, configs, validate_only)
            .await
    }

    /// Creates a topic whose replicas the caller chose: `assignments` lists each
    /// partition's replicas, preferred leader first (Kafka's manual replica
    /// assignment). Every partition needs the same number of distinct live brokers.
    pub async fn create_topic_with_assignments(
        &self,
        name: &str,
        assignments: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Topic> {
        validate_topic_name(name)?;
        if configs
            .get("read.replica.of")
            .is_some_and(|u| !u.is_empty())
        {
            return Err(Error::InvalidReplicaAssignment(
                "a read replica's replicas are placed by the brokers: create it without an assignment".into(),
            ));
        }
        Self::check_partitions(assignments.len() as i32)?;
        self.check_assignments(&assignments, None).await?;
        self.create_assigned_topic(name, assignments, configs, validate_only)
            .await
    }

    async fn create_assigned_topic(
        &self,
        name: &str,
        assignments: Vec<Vec<i32>>,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<Topic> {
        let partitions = assignments.len() as i32;
        let replication_factor = assignments.first().map_or(0, |r| r.len() as i32);
        self.check_broker_capacity(&assignments).await?;
        self.check_topic_config(
            &self.resolve_config(&configs)?,
            &configs,
            replication_factor,
        )?;
        let new = NewTopic {
            name: name.to_string(),
            partitions,
            replication_factor,
            configs,
            assignments,
        };
        if validate_only {
            if self.metastore.get_topic(name).await?.is_some() {
                return Err(Error::TopicAlreadyExists(name.to_string()));
            }
            return Ok(Topic {
                id: uuid::Uuid::nil(),
                name: new.name,
                partitions,
                replication_factor,
                configs: new.configs,
                created_at_ms: 0,
            });
        }
        let topic = self.metastore.create_topic(new).await?;
        tracing::info!(topic = %topic.name, id = %topic.id, partitions, "created topic");
        // All or nothing: if a partition this broker holds cannot be created here (a
        // full disk, say), the topic goes again and the caller hears why.
        let opened = self
            .reconcile()
            .await
            .and_then(|()| self.open_failure(topic.id));
        if let Err(e) = opened {
            tracing::error!(topic = %topic.name, error = %e, "cannot create the topic's partitions, deleting it");
            if let Err(undo) = self.delete_topic(&topic.name).await {
                tracing::error!(topic = %topic.name, error = %undo, "cannot delete the half-created topic");
            }
            return Err(e);
        }
        Ok(topic)
    }

    /// Checks replica assignments a caller chose: each partition has the same number
    /// (`replication_factor`, if given) of distinct brokers, all of them live.
    async fn check_assignments(
        &self,
        assignments: &[Vec<i32>],
        replication_factor: Option<i32>,
    ) -> Result<()> {
        let bad = |reason: String| Err(Error::InvalidReplicaAssignment(reason));
        let rf =
            replication_factor.unwrap_or_else(|| assignments.first().map_or(0, |r| r.len() as i32));
        if rf < 1 {
            return bad("a partition needs at least one replica".into());
        }
        if rf > 1 && !self.metastore.supports_replication() {
            return Err(Error::InvalidReplicationFactor(
                "replicas on several brokers need a cluster (a postgres:// metastore)".into(),
            ));
        }
        let live = self.live_brokers().await?;
        for (p, replicas) in assignments.iter().enumerate() {
            if replicas.len() as i32 != rf {
                return bad(format!(
                    "partition {p} has {} replicas, the others {rf}",
                    replicas.len()
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            for b in replicas {
                if !seen.insert(b) {
                    return bad(format!("partition {p} names broker {b} twice"));
                }
                if !live.contains(b) {
                    return bad(format!("broker {b} of partition {p} is not a live broker"));
                }
            }
        }
        Ok(())
    }

    /// Refuses replica assignments that would leave a broker with more partition
    /// replicas than `cluster.max_partitions_per_broker`.
    async fn check_broker_capacity(&self, assignments: &[Vec<i32>]) -> Result<()> {
        let limit = self.config.cluster.max_partitions_per_broker as usize;
        let mut held: BTreeMap<i32, usize> = BTreeMap::new();
        for s in self.metastore.list_partition_states().await? {
            for b in s.replicas {
                *held.entry(b).or_default() += 1;
            }
        }
        for b in assignments.iter().flatten() {
            *held.entry(*b).or_default() += 1;
        }
        if let Some((b, n)) = held.into_iter().find(|(_, n)| *n > limit) {
            return Err(Error::InvalidPartitions(format!(
                "broker {b} would hold {n} partition replicas, more than \
                 cluster.max_partitions_per_broker = {limit}"
            )));
        }
        Ok(())
    }

    /// Checks a topic's effective config against its replication factor and the
    /// broker (as Kafka does at create and alter time). A local retention the topic sets
    /// itself must not exceed its total retention; a default one is capped by it.
    pub(crate) fn check_topic_config(
        &self,
        config: &TopicConfig,
        own: &BTreeMap<String, String>,
        replication_factor: i32,
    ) -> Result<()> {
        let invalid = |key: &str, value: String, reason: String| {
            Err(shale_config::topic::ConfigError {
                key: key.into(),
                value,
                reason,
            }
            .into())
        };
        if config.min_insync_replicas > i64::from(replication_factor) {
            return invalid(
                "min.insync.replicas",
                config.min_insync_replicas.to_string(),
                format!(
                    "must not exceed the replication factor {replication_factor}, or acks=all \
                     could never succeed"
                ),
            );
        }
        if config.retention_bytes >= 0
            && own.contains_key("local.retention.bytes")
            && config.local_retention_bytes >= 0
            && config.local_retention_bytes > config.retention_bytes
        {
            return invalid(
                "local.retention.bytes",
                config.local_retention_bytes.to_string(),
                format!(
                    "must not exceed retention.bytes ({})",
                    config.retention_bytes
                ),
            );
        }
        if config.retention_ms >= 0
            && own.contains_key("local.retention.ms")
            && config.local_retention_ms >= 0
            && config.local_retention_ms > config.retention_ms
        {
            return invalid(
                "local.retention.ms",
                config.local_retention_ms.to_string(),
                format!("must not exceed retention.ms ({})", config.retention_ms),
            );
        }
        if config.remote_storage_enable && self.config.volatile_object_store() {
            return invalid(
                "remote.storage.enable",
                "true".into(),
                "the memory:// object store keeps nothing across restarts: tiering to it \
                 would lose data"
                    .into(),
            );
        }
        Ok(())
    }

    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        let topic = self.metastore.delete_topic(name).await?;
        tracing::info!(topic = %topic.name, id = %topic.id, "deleted topic");
        // A tiered topic's description (an unmount that stopped) and ownership marker go
        // first: no cluster mounts it from its objects, which are deleted next.
        let tiered = self
            .resolve_config(&topic.configs)
            .is_ok_and(|c| c.remote_storage_enable);
        if tiered && !self.config.volatile_object_store() {
            self.forget_in_bucket(topic.id).await;
        }
        self.reconcile().await?;
        // Remote data goes too; if the object store is down, the retention pass retries.
        if let Err(e) = self.sweep_deleted_topics().await {
            tracing::warn!(topic = %topic.name, error = %e, "remote data of the deleted topic not removed yet");
        }
        Ok(())
    }

    pub async fn list_topics(&self) -> Result<Vec<Topic>> {
        Ok(self.metastore.list_topics().await?)
    }

    pub async fn alter_configs(
        &self,
        name: &str,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
        validate_only: bool,
    ) -> Result<()> {
        let topic = self
            .metastore
            .get_topic(name)
            .await?
            .ok_or_else(|| Error::UnknownTopic(name.to_string()))?;
        let mut overrides = topic.configs.clone();
        for key in &delete {
            TopicConfig::check_key(key)?;
            overrides.remove(key);
        }
        overrides.extend(set.clone());
        let before = self.resolve_config(&topic.configs)?;
        let after = self.resolve_config(&overrides)?;
        self.check_topic_config(&after, &overrides, topic.replication_factor)?;
        if before.read_replica_of != after.read_replica_of
            || (!before.read_replica_of.is_empty() && after.remote_storage_enable)
        {
            return Err(shale_config::topic::ConfigError {
                key: "read.replica.of".into(),
                value: after.read_replica_of.clone(),
                reason: "a topic is a read replica, or not, from its creation on".into(),
            }
            .into());
        }
        if before.remote_storage_enable && !after.remote_storage_enable {
            // As in Kafka: the remote log would be orphaned.
            return Err(shale_config::topic::ConfigError {
                key: "remote.storage.enable".into(),
                value: "false".into(),
                reason: "tiered storage cannot be turned off for a topic once on".into(),
            }
            .into());
        }
        if validate_only {
            return Ok(());
        }
        self.metastore
            .alter_topic_configs(name, &set, &delete)
            .await?;
        tracing::info!(topic = name, ?set, ?delete, "altered topic configs");
        self.reconcile().await
    }

    /// Raises `name`'s partition count to `total`; `assignments` (the replicas of each
    /// new partition, preferred leader first) or spread over the live brokers.
    pub async fn create_partitions(
        &self,
        name: &str,
        total: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<()> {
        Self::check_partitions(total)?;
        let topic = self
            .metastore
            .get_topic(name)
            .await?
            .ok_or_else(|| Error::UnknownTopic(name.to_string()))?;
        if !self
            .resolve_config(&topic.configs)?
            .read_replica_of
            .is_empty()
        {
            return Err(Error::InvalidPartitions(format!(
                "'{name}' is a read replica: it has its source's partitions"
            )));
        }
        if total <= topic.partitions {
            return Err(Error::InvalidPartitions(format!(
                "topic '{name}' has {} partitions; the new count {total} must be larger (partitions are never removed)",
                topic.partitions
            )));
        }
        let assignments = match assignments {
            Some(given) => {
                if given.len() as i32 != total - topic.partitions {
                    return Err(Error::InvalidReplicaAssignment(format!(
                        "{} assignments for {} new partitions",
                        given.len(),
                        total - topic.partitions
                    )));
                }
                self.check_assignments(&given, Some(topic.replication_factor))
                    .await?;
                given
            }
            None => {
                self.assign_replicas(
                    name,
                    topic.partitions,
                    total - topic.partitions,
                    topic.replication_factor,
                )
                .await?
            }
        };
        if validate_only {
            return Ok(());
        }
        self.check_broker_capacity(&assignments).await?;
        self.metastore
            .add_partitions(name, total, &assignments)
            .await?;
        tracing::info!(topic = name, total, "added partitions");
        self.reconcile().await?;
        self.open_failure(topic.id)
    }

    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let state = match self.topic(name) {
            Ok(state) => state,
            // Created elsewhere since the last refresh: catch up once.
            Err(_) => {
                self.reconcile().await?;
                self.topic(name)?
            }
        };
        let partitions = state
            .states
            .iter()
            .map(|s| PartitionDescription {
                partition: s.partition,
                leader: s.leader,
                leader_epoch: s.leader_epoch,
                replicas: s.replicas.clone(),
                isr: s.isr.clone(),
                offsets: state
                    .partitions
                    .get(s.partition as usize)
                    .and_then(|p| p.as_ref().map(|p| p.offsets())),
                cleaner: state
                    .partitions
                    .get(s.partition as usize)
                    .and_then(|p| p.as_ref())
                    .filter(|_| state.config.cleanup_policy.compacts())
                    .map(|p| p.cleanable(crate::clock::now_ms())),
            })
            .collect();
        Ok(TopicDescription {
            topic: state.meta.clone(),
            config: (*state.config).clone(),
            partitions,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_names_follow_kafka_rules() {
        for ok in ["a", "A.b_c-9", &"x".repeat(249), "..."] {
            validate_topic_name(ok).unwrap();
        }
        for bad in ["", ".", "..", "a b", "a/b", "é", &"x".repeat(250), "a:b"] {
            let e = validate_topic_name(bad).unwrap_err();
            assert_eq!(
                e.code(),
                shale_records::ErrorCode::InvalidTopicException,
                "{bad}"
            );
        }
    }
}
