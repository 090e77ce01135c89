//! gRPC `Admin` service: topics, configs, partitions, metadata.

use std::collections::BTreeMap;
use std::sync::Arc;

use shale_metastore::Topic;
use shale_proto::v1::admin_server::Admin;
use shale_proto::v1::*;
use tonic::{Request, Response, Status};

use super::error_result;
use crate::broker::Broker;

pub struct AdminService {
    broker: Arc<Broker>,
}

impl AdminService {
    pub fn new(broker: Arc<Broker>) -> Self {
        Self { broker }
    }
}

fn summary(t: &Topic) -> TopicSummary {
    TopicSummary {
        name: t.name.clone(),
        topic_id: t.id.to_string(),
        partitions: t.partitions,
        replication_factor: t.replication_factor,
    }
}

#[tonic::async_trait]
impl Admin for AdminService {
    async fn create_topic(
        &self,
        request: Request<CreateTopicRequest>,
    ) -> Result<Response<CreateTopicResponse>, Status> {
        let r = request.into_inner();
        let configs: BTreeMap<_, _> = r.configs.into_iter().collect();
        let result = self
            .broker
            .create_topic(
                &r.name,
                r.partitions,
                r.replication_factor,
                configs,
                r.validate_only,
            )
            .await;
        Ok(Response::new(CreateTopicResponse {
            error: error_result(&self.broker.request_stats.errors, &result),
            topic_id: result.map(|t| t.id.to_string()).unwrap_or_default(),
        }))
    }

    async fn delete_topic(
        &self,
        request: Request<DeleteTopicRequest>,
    ) -> Result<Response<DeleteTopicResponse>, Status> {
        let result = self.broker.delete_topic(&request.into_inner().name).await;
        Ok(Response::new(DeleteTopicResponse {
            error: error_result(&self.broker.request_stats.errors, &result),
        }))
    }

    async fn list_topics(
        &self,
        _: Request<ListTopicsRequest>,
    ) -> Result<Response<ListTopicsResponse>, Status> {
        let topics = self
            .broker
            .list_topics()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(ListTopicsResponse {
            topics: topics.iter().map(summary).collect(),
        }))
    }

    async fn describe_topic(
        &self,
        request: Request<DescribeTopicRequest>,
    ) -> Result<Response<DescribeTopicResponse>, Status> {
        let result = self.broker.describe_topic(&request.into_inner().name).await;
        let error = error_result(&self.broker.request_stats.errors, &result);
        let Ok(d) = result else {
            return Ok(Response::new(DescribeTopicResponse {
                error,
                ..Default::default()
            }));
        };
        let partitions = d
            .partitions
            .iter()
            .map(|p| {
                let o = p.offsets;
                PartitionDescription {
                    partition: p.partition,
                    leader: p.leader,
                    leader_epoch: p.leader_epoch,
                    replicas: p.replicas.clone(),
                    isr: p.isr.clone(),
                    log_start_offset: o.map_or(-1, |o| o.log_start_offset),
                    local_log_start_offset: o.map_or(-1, |o| o.local_log_start_offset),
                    high_watermark: o.map_or(-1, |o| o.high_watermark),
                    log_end_offset: o.map_or(-1, |o| o.log_end_offset),
                    size_bytes: o.map_or(-1, |o| o.size_bytes as i64),
                    segments: o.map_or(-1, |o| o.segments as i32),
                }
            })
            .collect();
        let config_entries = d
            .config
            .entries(&d.topic.configs, &self.broker.config.topic_defaults)
            .into_iter()
            .map(|(name, value, source)| ConfigEntry {
                name,
                value,
                source: source.as_str().into(),
            })
            .collect();
        Ok(Response::new(DescribeTopicResponse {
            error,
            topic: Some(summary(&d.topic)),
            config_overrides: d.topic.configs.clone().into_iter().collect(),
            configs: d.config.to_map().into_iter().collect(),
            partitions,
            config_entries,
        }))
    }

    async fn alter_configs(
        &self,
        request: Request<AlterConfigsRequest>,
    ) -> Result<Response<AlterConfigsResponse>, Status> {
        let r = request.into_inner();
        let result = self
            .broker
            .alter_configs(
                &r.name,
                r.set.into_iter().collect(),
                r.delete,
                r.validate_only,
            )
            .await;
        Ok(Response::new(AlterConfigsResponse {
            error: error_result(&self.broker.request_stats.errors, &result),
        }))
    }

    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        let r = request.into_inner();
        let result = self
            .broker
            .create_partitions(&r.name, r.total_count, r.validate_only)
            .await;
        Ok(Response::new(CreatePartitionsResponse {
            error: error_result(&self.broker.request_stats.errors, &result),
        }))
    }

    async fn tiering_status(
        &self,
        request: Request<TieringStatusRequest>,
    ) -> Result<Response<TieringStatusResponse>, Status> {
        let topic = request.into_inner().topic;
        let result = self
            .broker
            .tiering_status((!topic.is_empty()).then_some(topic.as_str()));
        let error = error_result(&self.broker.request_stats.errors, &result);
        let partitions = result
            .unwrap_or_default()
            .into_iter()
            .map(|t| PartitionTieringStatus {
                topic: t.topic,
                partition: t.partition,
                remote_storage_enabled: t.enabled,
                log_start_offset: t.log_start_offset,
                local_log_start_offset: t.local_log_start_offset,
                remote_log_start_offset: t.remote_log_start_offset,
                highest_uploaded_offset: t.highest_uploaded_offset,
                upload_lag_segments: t.upload_lag_segments as i64,
                upload_lag_bytes: t.upload_lag_bytes as i64,
                remote_segments: t.remote_segments as i64,
                remote_bytes: t.remote_bytes as i64,
            })
            .collect();
        let stats = self.broker.remote_read_stats();
        Ok(Response::new(TieringStatusResponse {
            error,
            partitions,
            remote_get_requests: stats.0 as i64,
            remote_bytes_fetched: stats.1 as i64,
        }))
    }

    async fn metadata(
        &self,
        request: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        let wanted = request.into_inner().topics;
        let mut states = self.broker.topics_snapshot();
        if wanted
            .iter()
            .any(|name| !states.iter().any(|s| &s.meta.name == name))
        {
            // Created elsewhere since the last refresh: catch up once.
            if self.broker.reconcile().await.is_ok() {
                states = self.broker.topics_snapshot();
            }
        }
        let topics = if wanted.is_empty() {
            states
                .iter()
                .map(|s| topic_metadata(&s.meta.name, Some(s)))
                .collect()
        } else {
            wanted
                .iter()
                .map(|name| {
                    let state = states.iter().find(|s| &s.meta.name == name);
                    topic_metadata(name, state.map(|s| &**s))
                })
                .collect()
        };
        let brokers = self
            .broker
            .brokers()
            .into_iter()
            .filter(shale_metastore::BrokerLease::is_alive)
            .map(|b| BrokerInfo {
                broker_id: b.broker_id,
                address: b.address,
            })
            .collect();
        Ok(Response::new(MetadataResponse { brokers, topics }))
    }

    async fn elect_leaders(
        &self,
        request: Request<ElectLeadersRequest>,
    ) -> Result<Response<ElectLeadersResponse>, Status> {
        let r = request.into_inner();
        let topic = (!r.topic.is_empty()).then_some(r.topic.as_str());
        let partitions = (!r.partitions.is_empty()).then_some(&r.partitions[..]);
        let result = self.broker.elect_preferred_leaders(topic, partitions).await;
        let error = error_result(&self.broker.request_stats.errors, &result);
        let results = result
            .unwrap_or_default()
            .into_iter()
            .map(|(topic, partition, r)| {
                let (error_code, error_message) =
                    super::error_fields(&self.broker.request_stats.errors, r.as_ref().err());
                ElectLeadersResult {
                    topic,
                    partition,
                    leader: r.unwrap_or(-1),
                    error_code,
                    error_message,
                }
            })
            .collect();
        Ok(Response::new(ElectLeadersResponse { error, results }))
    }

    async fn cluster_status(
        &self,
        _request: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusResponse>, Status> {
        let (controller, brokers) = self
            .broker
            .cluster_status()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(ClusterStatusResponse {
            controller_id: controller.map_or(-1, |c| c.broker_id),
            controller_epoch: controller.map_or(-1, |c| c.epoch),
            brokers: brokers
                .into_iter()
                .map(|b| BrokerStatus {
                    broker_id: b.lease.broker_id,
                    alive: b.alive,
                    lease_expires_ms: b.lease.lease_expires_ms,
                    lease_remaining_ms: b.lease.remaining_now_ms(),
                    broker_epoch: b.lease.broker_epoch,
                    leader_partitions: b.leader_partitions,
                    replica_partitions: b.replica_partitions,
                    address: b.lease.address,
                })
                .collect(),
        }))
    }
}

fn topic_metadata(name: &str, topic: Option<&crate::broker::TopicState>) -> TopicMetadata {
    match topic {
        Some(t) => TopicMetadata {
            name: name.to_string(),
            error_code: shale_records::ErrorCode::None as i32,
            topic_id: t.meta.id.to_string(),
            partitions: (0..t.meta.partitions)
                .map(|partition| match t.state(partition) {
                    Some(s) => PartitionMetadata {
                        partition,
                        leader: s.leader,
                        leader_epoch: s.leader_epoch,
                        replicas: s.replicas.clone(),
                        isr: s.isr.clone(),
                    },
                    None => PartitionMetadata {
                        partition,
                        leader: -1,
                        leader_epoch: -1,
                        ..Default::default()
                    },
                })
                .collect(),
        },
        None => TopicMetadata {
            name: name.to_string(),
            error_code: shale_records::ErrorCode::UnknownTopicOrPartition as i32,
            ..Default::default()
        },
    }
}
