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
            error: error_result(&result),
            topic_id: result.map(|t| t.id.to_string()).unwrap_or_default(),
        }))
    }

    async fn delete_topic(
        &self,
        request: Request<DeleteTopicRequest>,
    ) -> Result<Response<DeleteTopicResponse>, Status> {
        let result = self.broker.delete_topic(&request.into_inner().name).await;
        Ok(Response::new(DeleteTopicResponse {
            error: error_result(&result),
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
        let error = error_result(&result);
        let Ok(d) = result else {
            return Ok(Response::new(DescribeTopicResponse {
                error,
                ..Default::default()
            }));
        };
        let partitions = d
            .partitions
            .iter()
            .map(|p| PartitionDescription {
                partition: p.partition,
                leader: p.leader,
                leader_epoch: p.leader_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                log_start_offset: p.offsets.log_start_offset,
                local_log_start_offset: p.offsets.local_log_start_offset,
                high_watermark: p.offsets.high_watermark,
                log_end_offset: p.offsets.log_end_offset,
                size_bytes: p.offsets.size_bytes as i64,
                segments: p.offsets.segments as i32,
            })
            .collect();
        Ok(Response::new(DescribeTopicResponse {
            error,
            topic: Some(summary(&d.topic)),
            config_overrides: d.topic.configs.clone().into_iter().collect(),
            configs: d.config.to_map().into_iter().collect(),
            partitions,
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
            error: error_result(&result),
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
            error: error_result(&result),
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
        let error = error_result(&result);
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
        let broker_id = self.broker.config.broker_id;
        let states = self.broker.topics_snapshot();
        let topics = if wanted.is_empty() {
            states
                .iter()
                .map(|s| topic_metadata(&s.meta.name, Some(&s.meta), broker_id))
                .collect()
        } else {
            wanted
                .iter()
                .map(|name| {
                    let state = states.iter().find(|s| &s.meta.name == name);
                    topic_metadata(name, state.map(|s| &s.meta), broker_id)
                })
                .collect()
        };
        Ok(Response::new(MetadataResponse {
            brokers: vec![BrokerInfo {
                broker_id,
                address: self.broker.config.listen.to_string(),
            }],
            topics,
        }))
    }
}

fn topic_metadata(name: &str, meta: Option<&Topic>, broker_id: i32) -> TopicMetadata {
    match meta {
        Some(t) => TopicMetadata {
            name: name.to_string(),
            error_code: shale_proto::ErrorCode::None as i32,
            topic_id: t.id.to_string(),
            partitions: (0..t.partitions)
                .map(|partition| PartitionMetadata {
                    partition,
                    leader: broker_id,
                    leader_epoch: 0,
                })
                .collect(),
        },
        None => TopicMetadata {
            name: name.to_string(),
            error_code: shale_proto::ErrorCode::UnknownTopicOrPartition as i32,
            ..Default::default()
        },
    }
}
