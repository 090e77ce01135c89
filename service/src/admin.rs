//! Metadata, topics and their configs, cluster and tiering status, leader election.

use std::collections::BTreeMap;

use shale_metastore::{BrokerLease, ControllerLease, Topic};

use super::{Keyed, RequestContext, Service};
use shale_broker::broker::TopicState;
use shale_broker::cluster::BrokerStatus;
use shale_broker::error::{Error, Result};
use shale_broker::tiering::TieringStatus;
use shale_broker::topics::TopicDescription;
use shale_config::topic::ConfigSource;
use shale_security::acl::{CLUSTER_NAME, Operation, ResourceType};

/// A broker as a client of one listener reaches it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerEndpoint {
    pub broker_id: i32,
    /// `host:port` on the asking client's listener.
    pub address: String,
    /// Its `[broker] rack`.
    pub rack: Option<String>,
}

impl BrokerEndpoint {
    /// Host and port apart (Kafka's Metadata sends them so); port 0 if the address
    /// has none.
    pub fn host_port(&self) -> (&str, u16) {
        match self.address.rsplit_once(':') {
            Some((host, port)) => (
                host.trim_start_matches('[').trim_end_matches(']'),
                port.parse().unwrap_or(0),
            ),
            None => (&self.address, 0),
        }
    }
}

#[derive(Debug, Clone)]
pub struct PartitionMetadata {
    pub partition: i32,
    /// -1: no leader now.
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Replicas whose broker is not alive.
    pub offline_replicas: Vec<i32>,
}

#[derive(Debug)]
pub struct TopicMetadata {
    pub name: String,
    /// The topic's id and partitions, or why there are none (unknown topic).
    pub result: Result<(uuid::Uuid, Vec<PartitionMetadata>)>,
}

#[derive(Debug)]
pub struct Metadata {
    /// Live brokers, with their address on the asking listener.
    pub brokers: Vec<BrokerEndpoint>,
    /// The broker Kafka's admin clients send topic changes to. Every Shale broker
    /// takes them (the metastore orders them), so each names itself.
    pub controller_id: i32,
    pub cluster_id: uuid::Uuid,
    pub topics: Vec<TopicMetadata>,
}

/// A topic to create. `partitions` and `replication_factor` of -1 take the broker's
/// defaults.
pub struct NewTopicRequest {
    pub name: String,
    /// -1: the broker's `num.partitions` (or as many as `assignments` has).
    pub partitions: i32,
    /// -1: the broker's default (or as many replicas as `assignments` gives each).
    pub replication_factor: i32,
    /// Each partition's replicas, preferred leader first, when the caller chooses
    /// them (Kafka's manual replica assignment); partitions and replication factor
    /// must then be -1 or agree with it.
    pub assignments: Option<Vec<Vec<i32>>>,
    pub configs: BTreeMap<String, String>,
    pub validate_only: bool,
}

/// One topic config as DescribeConfigs shows it.
#[derive(Debug, Clone)]
pub struct ConfigEntry {
    pub name: String,
    pub value: String,
    pub source: ConfigSource,
}

/// The tiering state of each partition this broker leads, and the read cache's
/// traffic to the object store.
pub struct TieringReport {
    pub partitions: Vec<TieringStatus>,
    pub remote_get_requests: u64,
    pub remote_bytes_fetched: u64,
}

pub struct ClusterStatus {
    pub controller: Option<ControllerLease>,
    pub brokers: Vec<BrokerStatus>,
}

impl Service {
    /// Brokers, and the topics asked for (`None`: every topic). A topic this broker
    /// does not know yet is looked up in the metastore once before it is reported
    /// unknown (another broker may have just created it); with `auto_create` and
    /// `cluster.auto_create_topics_enable`, it is created with the broker's defaults
    /// (Kafka's auto-creation).
    pub async fn metadata(
        &self,
        ctx: &RequestContext,
        topics: Option<Vec<String>>,
        auto_create: bool,
    ) -> Metadata {
        self.call(ctx, "Metadata", async {
            let mut refused = std::collections::HashMap::new();
            // A topic named but not describable is refused, not looked up or created.
            for name in topics.iter().flatten() {
                if let Err(e) = self.authorize(ctx, Operation::Describe, ResourceType::Topic, name)
                {
                    refused.insert(name.clone(), std::sync::Arc::new(e));
                }
            }
            let mut states = self.broker.topics_snapshot();
            let missing = |states: &[std::sync::Arc<TopicState>]| -> Vec<String> {
                topics.as_ref().map_or_else(Vec::new, |wanted| {
                    wanted
                        .iter()
                        .filter(|name| !refused.contains_key(*name))
                        .filter(|name| !states.iter().any(|s| &s.meta.name == *name))
                        .cloned()
                        .collect()
                })
            };
            if !missing(&states).is_empty() && self.broker.reconcile().await.is_ok() {
                states = self.broker.topics_snapshot();
            }
            if auto_create && self.broker.config.cluster.auto_create_topics_enable {
                let absent = missing(&states);
                for name in &absent {
                    if let Err(e) = self.may_create(ctx, name) {
                        refused.insert(name.clone(), std::sync::Arc::new(e));
                        continue;
                    }
                    match self
                        .broker
                        .create_topic(name, -1, -1, BTreeMap::new(), false)
                        .await
                    {
                        Ok(t) => tracing::info!(topic = %t.name, "auto-created topic"),
                        Err(Error::TopicAlreadyExists(_)) => {}
                        Err(e) => {
                            refused.insert(name.clone(), std::sync::Arc::new(e));
                        }
                    }
                }
                if !absent.is_empty() {
                    states = self.broker.topics_snapshot();
                }
            }
            let live = self.live_brokers();
            // A name asked for twice gets the same answer twice (its refusal too).
            let topic = |name: &str| {
                if let Some(e) = refused.get(name) {
                    return TopicMetadata {
                        name: name.to_string(),
                        result: Err(Error::Shared(e.clone())),
                    };
                }
                let state = states.iter().find(|s| s.meta.name == name);
                topic_metadata(name, state.map(|s| &**s), &live)
            };
            let topics: Vec<TopicMetadata> = match &topics {
                // Only the topics the client may describe are listed.
                None => states
                    .iter()
                    .filter(|s| {
                        self.may(ctx, Operation::Describe, ResourceType::Topic, &s.meta.name)
                    })
                    .map(|s| topic(&s.meta.name))
                    .collect(),
                Some(wanted) => wanted.iter().map(|name| topic(name)).collect(),
            };
            for t in &topics {
                if let Err(e) = &t.result {
                    self.broker.stats().requests.errors.count(e.code());
                }
            }
            Metadata {
                brokers: self.endpoints(ctx, &live),
                controller_id: self.broker.config.broker_id,
                cluster_id: self.broker.cluster_id(),
                topics,
            }
        })
        .await
    }

    /// Creates a topic (or, with `validate_only`, checks that it could be created).
    pub async fn create_topic(&self, ctx: &RequestContext, req: NewTopicRequest) -> Result<Topic> {
        self.call(ctx, "CreateTopic", async {
            self.counted(self.may_create(ctx, &req.name))?;
            let r = match req.assignments {
                Some(assignments) => {
                    let (n, rf) = (
                        assignments.len() as i32,
                        assignments.first().map_or(0, |r| r.len() as i32),
                    );
                    if ![-1, n].contains(&req.partitions)
                        || ![-1, rf].contains(&req.replication_factor)
                    {
                        Err(Error::InvalidRequest(format!(
                            "{} partitions with replication factor {} do not match the \
                             replica assignment ({n} partitions of {rf} replicas): give -1",
                            req.partitions, req.replication_factor
                        )))
                    } else {
                        self.broker
                            .create_topic_with_assignments(
                                &req.name,
                                assignments,
                                req.configs,
                                req.validate_only,
                            )
                            .await
                    }
                }
                None => {
                    self.broker
                        .create_topic(
                            &req.name,
                            req.partitions,
                            req.replication_factor,
                            req.configs,
                            req.validate_only,
                        )
                        .await
                }
            };
            self.counted(r)
        })
        .await
    }

    pub async fn delete_topic(&self, ctx: &RequestContext, name: &str) -> Result<()> {
        self.call(ctx, "DeleteTopic", async {
            self.counted(self.authorize(ctx, Operation::Delete, ResourceType::Topic, name))?;
            self.counted(self.broker.delete_topic(name).await)
        })
        .await
    }

    pub async fn list_topics(&self, ctx: &RequestContext) -> Result<Vec<Topic>> {
        self.call(ctx, "ListTopics", async {
            let topics = self.counted(self.broker.list_topics().await)?;
            Ok(topics
                .into_iter()
                .filter(|t| self.may(ctx, Operation::Describe, ResourceType::Topic, &t.name))
                .collect())
        })
        .await
    }

    /// The names of the topics with these ids that this broker knows (Kafka's Fetch
    /// v13+ names topics by id only). Access is checked where the names are used.
    pub fn topic_names(
        &self,
        ids: impl IntoIterator<Item = uuid::Uuid>,
    ) -> std::collections::HashMap<uuid::Uuid, String> {
        let ids: std::collections::HashSet<uuid::Uuid> = ids.into_iter().collect();
        if ids.is_empty() {
            return Default::default();
        }
        self.broker
            .topics_snapshot()
            .iter()
            .filter(|t| ids.contains(&t.meta.id))
            .map(|t| (t.meta.id, t.meta.name.clone()))
            .collect()
    }

    /// A topic's partitions (with this broker's offsets of each) and configs.
    pub async fn describe_topic(
        &self,
        ctx: &RequestContext,
        name: &str,
    ) -> Result<TopicDescription> {
        self.call(ctx, "DescribeTopic", async {
            self.counted(self.authorize(ctx, Operation::Describe, ResourceType::Topic, name))?;
            self.counted(self.broker.describe_topic(name).await)
        })
        .await
    }

    /// Every config of a topic with its effective value and its source.
    pub async fn describe_configs(
        &self,
        ctx: &RequestContext,
        topic: &str,
    ) -> Result<Vec<ConfigEntry>> {
        self.call(ctx, "DescribeConfigs", async {
            self.counted(self.authorize(
                ctx,
                Operation::DescribeConfigs,
                ResourceType::Topic,
                topic,
            ))?;
            let d = self.broker.describe_topic(topic).await;
            let entries = d.map(|d| self.config_entries(&d));
            self.counted(entries)
        })
        .await
    }

    /// The effective configs of a described topic, with their sources.
    pub fn config_entries(&self, d: &TopicDescription) -> Vec<ConfigEntry> {
        d.config
            .entries(&d.topic.configs, &self.broker.config.topic_defaults)
            .into_iter()
            .map(|(name, value, source)| ConfigEntry {
                name,
                value,
                source,
            })
            .collect()
    }

    /// Sets and deletes a topic's config overrides (all checked before any is
    /// written).
    pub async fn alter_configs(
        &self,
        ctx: &RequestContext,
        topic: &str,
        set: BTreeMap<String, String>,
        delete: Vec<String>,
        validate_only: bool,
    ) -> Result<()> {
        self.call(ctx, "AlterConfigs", async {
            self.counted(self.authorize(ctx, Operation::AlterConfigs, ResourceType::Topic, topic))?;
            let r = self
                .broker
                .alter_configs(topic, set, delete, validate_only)
                .await;
            self.counted(r)
        })
        .await
    }

    /// Replaces a topic's config overrides with `configs` (Kafka's AlterConfigs:
    /// a key left out goes back to its default).
    pub async fn replace_configs(
        &self,
        ctx: &RequestContext,
        topic: &str,
        configs: BTreeMap<String, String>,
        validate_only: bool,
    ) -> Result<()> {
        self.call(ctx, "AlterConfigs", async {
            self.counted(self.authorize(ctx, Operation::AlterConfigs, ResourceType::Topic, topic))?;
            let r = async {
                let current = self.broker.describe_topic(topic).await?;
                let delete = current
                    .topic
                    .configs
                    .keys()
                    .filter(|k| !configs.contains_key(*k))
                    .cloned()
                    .collect();
                self.broker
                    .alter_configs(topic, configs, delete, validate_only)
                    .await
            }
            .await;
            self.counted(r)
        })
        .await
    }

    /// This broker's settings, under Kafka's broker config names (`name`: this
    /// broker's id, or empty).
    pub fn describe_broker_configs(
        &self,
        ctx: &RequestContext,
        name: &str,
    ) -> Result<Vec<ConfigEntry>> {
        self.counted(self.authorize_cluster(ctx, Operation::DescribeConfigs))?;
        let c = &self.broker.config;
        if !name.is_empty() && name != c.broker_id.to_string() {
            return self.counted(Err(Error::InvalidRequest(format!(
                "this is broker {}: ask broker {name} for its own configs",
                c.broker_id
            ))));
        }
        let fixed = [
            ("broker.id", c.broker_id.to_string()),
            ("num.partitions", c.cluster.num_partitions.to_string()),
            (
                "default.replication.factor",
                c.cluster.default_replication_factor.to_string(),
            ),
            (
                "auto.create.topics.enable",
                c.cluster.auto_create_topics_enable.to_string(),
            ),
        ];
        let mut out: Vec<ConfigEntry> = fixed
            .into_iter()
            .map(|(name, value)| ConfigEntry {
                name: name.to_string(),
                value,
                source: ConfigSource::Broker,
            })
            .collect();
        // Topic defaults, under the broker-level names Kafka gives them.
        let defaults = &c.topic_defaults;
        for (key, value, source) in defaults.entries(&BTreeMap::new(), defaults) {
            let name = match key.as_str() {
                "retention.ms" => "log.retention.ms".to_string(),
                "retention.bytes" => "log.retention.bytes".to_string(),
                "segment.bytes" => "log.segment.bytes".to_string(),
                "segment.ms" => "log.roll.ms".to_string(),
                "max.message.bytes" => "message.max.bytes".to_string(),
                "cleanup.policy" => "log.cleanup.policy".to_string(),
                "index.interval.bytes" => "log.index.interval.bytes".to_string(),
                "flush.ms" => "log.flush.interval.ms".to_string(),
                "flush.messages" => "log.flush.interval.messages".to_string(),
                "message.timestamp.type" => "log.message.timestamp.type".to_string(),
                _ => key,
            };
            out.push(ConfigEntry {
                name,
                value,
                source,
            });
        }
        Ok(out)
    }

    /// Raises a topic's partition count to `total` (`assignments`: the new partitions'
    /// replicas, else spread over the live brokers).
    pub async fn create_partitions(
        &self,
        ctx: &RequestContext,
        topic: &str,
        total: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<()> {
        self.call(ctx, "CreatePartitions", async {
            self.counted(self.authorize(ctx, Operation::Alter, ResourceType::Topic, topic))?;
            let r = self
                .broker
                .create_partitions(topic, total, assignments, validate_only)
                .await;
            self.counted(r)
        })
        .await
    }

    /// Tiering of the partitions this broker leads (`topic` `None`: of every topic).
    pub async fn tiering_status(
        &self,
        ctx: &RequestContext,
        topic: Option<&str>,
    ) -> Result<TieringReport> {
        self.call(ctx, "TieringStatus", async {
            self.counted(self.authorize_cluster(ctx, Operation::Describe))?;
            let partitions = self.counted(self.broker.tiering_status(topic))?;
            let (remote_get_requests, remote_bytes_fetched) = self.broker.remote_read_stats();
            Ok(TieringReport {
                partitions,
                remote_get_requests,
                remote_bytes_fetched,
            })
        })
        .await
    }

    /// The controller and every registered broker, from the metastore.
    pub async fn cluster_status(&self, ctx: &RequestContext) -> Result<ClusterStatus> {
        self.call(ctx, "ClusterStatus", async {
            self.counted(self.authorize_cluster(ctx, Operation::Describe))?;
            let r = self.broker.cluster_status().await;
            self.counted(r).map(|(controller, brokers)| ClusterStatus {
                controller,
                brokers,
            })
        })
        .await
    }

    /// Preferred or (`unclean`) unclean leader election (`topic` `None`: every topic;
    /// `partitions` `None`: every partition of it). Each partition answers with its
    /// new leader.
    pub async fn elect_leaders(
        &self,
        ctx: &RequestContext,
        topic: Option<&str>,
        partitions: Option<&[i32]>,
        unclean: bool,
    ) -> Result<Vec<Keyed<i32>>> {
        self.call(ctx, "ElectLeaders", async {
            self.counted(self.authorize_cluster(ctx, Operation::Alter))?;
            let r = self.broker.elect_leaders(topic, partitions, unclean).await;
            let results = self.counted(r)?;
            let (keys, results) = results.into_iter().map(|(t, p, r)| ((t, p), r)).unzip();
            Ok(self.keyed(keys, results))
        })
        .await
    }

    /// Creating a topic takes CREATE on the cluster or on the topic.
    fn may_create(&self, ctx: &RequestContext, topic: &str) -> Result<()> {
        if self.may(ctx, Operation::Create, ResourceType::Cluster, CLUSTER_NAME) {
            return Ok(());
        }
        self.authorize(ctx, Operation::Create, ResourceType::Topic, topic)
    }

    /// Live brokers (this one alone without replication).
    pub(super) fn live_brokers(&self) -> Vec<BrokerLease> {
        self.broker.coordinator_candidates()
    }

    /// Each broker's address on the asking client's listener (brokers without that
    /// listener are left out: a client could not reach them).
    pub(super) fn endpoints(
        &self,
        ctx: &RequestContext,
        live: &[BrokerLease],
    ) -> Vec<BrokerEndpoint> {
        live.iter().filter_map(|b| self.endpoint(ctx, b)).collect()
    }

    pub(super) fn endpoint(&self, ctx: &RequestContext, b: &BrokerLease) -> Option<BrokerEndpoint> {
        Some(BrokerEndpoint {
            broker_id: b.broker_id,
            address: b.endpoint(&ctx.listener)?.to_string(),
            rack: b.rack.clone(),
        })
    }
}

fn topic_metadata(name: &str, topic: Option<&TopicState>, live: &[BrokerLease]) -> TopicMetadata {
    let Some(t) = topic else {
        return TopicMetadata {
            name: name.to_string(),
            result: Err(Error::UnknownTopic(name.to_string())),
        };
    };
    let partitions = (0..t.meta.partitions)
        .map(|partition| match t.state(partition) {
            Some(s) => PartitionMetadata {
                partition,
                leader: s.leader,
                leader_epoch: s.leader_epoch,
                replicas: s.replicas.clone(),
                isr: s.isr.clone(),
                offline_replicas: s
                    .replicas
                    .iter()
                    .copied()
                    .filter(|r| !live.iter().any(|b| b.broker_id == *r))
                    .collect(),
            },
            None => PartitionMetadata {
                partition,
                leader: -1,
                leader_epoch: -1,
                replicas: Vec::new(),
                isr: Vec::new(),
                offline_replicas: Vec::new(),
            },
        })
        .collect();
    TopicMetadata {
        name: name.to_string(),
        result: Ok((t.meta.id, partitions)),
    }
}
