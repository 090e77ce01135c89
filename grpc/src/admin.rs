//! gRPC `Admin` service: topics, configs, partitions, metadata, cluster and tiering
//! status, leader election, partition reassignment, users, ACLs.

use shale_metastore::Topic;
use shale_proto::v1::admin_server::Admin;
use shale_proto::v1::*;
use shale_service::{NewTopicRequest, ReassignRequest};
use tonic::{Request, Response, Status};

use super::{Front, error_fields, error_result};

fn summary(t: &Topic) -> TopicSummary {
    TopicSummary {
        name: t.name.clone(),
        topic_id: t.id.to_string(),
        partitions: t.partitions,
        replication_factor: t.replication_factor,
    }
}

/// An empty string or list in a request means "all".
fn named(s: &str) -> Option<&str> {
    (!s.is_empty()).then_some(s)
}

#[tonic::async_trait]
impl Admin for Front {
    async fn create_topic(
        &self,
        request: Request<CreateTopicRequest>,
    ) -> Result<Response<CreateTopicResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let req = NewTopicRequest {
            name: r.name,
            partitions: r.partitions,
            replication_factor: r.replication_factor,
            assignments: None,
            configs: r.configs.into_iter().collect(),
            validate_only: r.validate_only,
        };
        let result = self.service.create_topic(&ctx, req).await;
        Ok(Response::new(CreateTopicResponse {
            error: error_result(&result),
            topic_id: result.map(|t| t.id.to_string()).unwrap_or_default(),
        }))
    }

    async fn delete_topic(
        &self,
        request: Request<DeleteTopicRequest>,
    ) -> Result<Response<DeleteTopicResponse>, Status> {
        let ctx = self.context(&request)?;
        let result = self
            .service
            .delete_topic(&ctx, &request.into_inner().name)
            .await;
        Ok(Response::new(DeleteTopicResponse {
            error: error_result(&result),
        }))
    }

    async fn list_topics(
        &self,
        request: Request<ListTopicsRequest>,
    ) -> Result<Response<ListTopicsResponse>, Status> {
        let ctx = self.context(&request)?;
        let result = self.service.list_topics(&ctx).await;
        Ok(Response::new(ListTopicsResponse {
            error: error_result(&result),
            topics: result.unwrap_or_default().iter().map(summary).collect(),
        }))
    }

    async fn describe_topic(
        &self,
        request: Request<DescribeTopicRequest>,
    ) -> Result<Response<DescribeTopicResponse>, Status> {
        let ctx = self.context(&request)?;
        let result = self
            .service
            .describe_topic(&ctx, &request.into_inner().name)
            .await;
        let error = error_result(&result);
        let Ok(d) = result else {
            return Ok(Response::new(DescribeTopicResponse {
                error,
                ..Default::default()
            }));
        };
        let partitions: Vec<PartitionDescription> = d
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
                    cleanable_ratio: p.cleaner.map_or(0.0, |c| c.dirty_ratio()),
                    dirty_bytes: p.cleaner.map_or(-1, |c| c.dirty_bytes as i64),
                    last_cleaned_ms: p.cleaner.map_or(-1, |c| c.last_clean_ms),
                }
            })
            .collect();
        let table = (self.service.table_report(&d).await).map(crate::tables::table_status);
        let config_entries = self
            .service
            .config_entries(&d)
            .into_iter()
            .map(|e| ConfigEntry {
                name: e.name,
                value: e.value,
                source: e.source.as_str().into(),
            })
            .collect();
        Ok(Response::new(DescribeTopicResponse {
            error,
            topic: Some(summary(&d.topic)),
            config_overrides: d.topic.configs.clone().into_iter().collect(),
            configs: d.config.to_map().into_iter().collect(),
            partitions,
            config_entries,
            table,
        }))
    }

    async fn alter_configs(
        &self,
        request: Request<AlterConfigsRequest>,
    ) -> Result<Response<AlterConfigsResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let set = r.set.into_iter().collect();
        let result = self
            .service
            .alter_configs(&ctx, &r.name, set, r.delete, r.validate_only)
            .await;
        Ok(Response::new(AlterConfigsResponse {
            error: error_result(&result),
        }))
    }

    async fn create_partitions(
        &self,
        request: Request<CreatePartitionsRequest>,
    ) -> Result<Response<CreatePartitionsResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let result = self
            .service
            .create_partitions(&ctx, &r.name, r.total_count, None, r.validate_only)
            .await;
        Ok(Response::new(CreatePartitionsResponse {
            error: error_result(&result),
        }))
    }

    async fn tiering_status(
        &self,
        request: Request<TieringStatusRequest>,
    ) -> Result<Response<TieringStatusResponse>, Status> {
        let ctx = self.context(&request)?;
        let topic = request.into_inner().topic;
        let result = self.service.tiering_status(&ctx, named(&topic)).await;
        let error = error_result(&result);
        let Ok(report) = result else {
            return Ok(Response::new(TieringStatusResponse {
                error,
                ..Default::default()
            }));
        };
        let partitions = report
            .partitions
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
                cleanable_ratio: t.cleaner.map_or(0.0, |c| c.dirty_ratio()),
                dirty_bytes: t.cleaner.map_or(-1, |c| c.dirty_bytes as i64),
                last_cleaned_ms: t.cleaner.map_or(-1, |c| c.last_clean_ms),
                leader: t.leader,
                high_watermark: t.high_watermark,
                log_end_offset: t.log_end_offset,
                read_only: t.read_only,
                tier_busy: t.busy,
            })
            .collect();
        Ok(Response::new(TieringStatusResponse {
            error,
            partitions,
            remote_get_requests: report.remote_get_requests as i64,
            remote_bytes_fetched: report.remote_bytes_fetched as i64,
        }))
    }

    async fn find_records(
        &self,
        request: Request<FindRecordsRequest>,
    ) -> Result<Response<FindRecordsResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let q = shale_broker::find::FindQuery {
            topic: r.topic,
            key: r.key,
            from_time: r.from_time,
            to_time: r.to_time,
            limit: if r.limit <= 0 {
                100
            } else {
                (r.limit as usize).min(shale_service::MAX_RECORDS_PER_READ)
            },
        };
        let result = self.service.find_records(&ctx, q).await;
        let error = error_result(&result);
        let Ok(f) = result else {
            return Ok(Response::new(FindRecordsResponse {
                error,
                ..Default::default()
            }));
        };
        let records = f
            .records
            .into_iter()
            .map(|found| FoundRecord {
                partition: found.partition,
                offset: found.record.offset,
                timestamp: found.record.timestamp,
                key: found.record.key,
                value: found.record.value,
                headers: found
                    .record
                    .headers
                    .into_iter()
                    .map(|(key, value)| FoundHeader { key, value })
                    .collect(),
            })
            .collect();
        Ok(Response::new(FindRecordsResponse {
            error,
            records,
            truncated: f.truncated,
            segments_searched: f.segments_searched as i64,
            segments_skipped: f.segments_skipped as i64,
            segments_matched: f.segments_matched as i64,
            segments_without_filter: f.segments_without_filter as i64,
            remote_gets: f.remote_gets as i64,
            bytes_read: f.bytes_read as i64,
            partitions_not_led: f.partitions_not_led,
        }))
    }

    async fn metadata(
        &self,
        request: Request<MetadataRequest>,
    ) -> Result<Response<MetadataResponse>, Status> {
        let ctx = self.context(&request)?;
        let wanted = request.into_inner().topics;
        let m = self
            .service
            .metadata(&ctx, (!wanted.is_empty()).then_some(wanted), false)
            .await;
        let brokers = m
            .brokers
            .into_iter()
            .map(|b| BrokerInfo {
                broker_id: b.broker_id,
                address: b.address,
            })
            .collect();
        let topics = m
            .topics
            .into_iter()
            .map(|t| {
                let (error_code, _) = error_fields(&t.result);
                let (id, partitions) = t.result.unwrap_or_default();
                TopicMetadata {
                    name: t.name,
                    error_code,
                    topic_id: if id.is_nil() {
                        String::new()
                    } else {
                        id.to_string()
                    },
                    partitions: partitions
                        .into_iter()
                        .map(|p| PartitionMetadata {
                            partition: p.partition,
                            leader: p.leader,
                            leader_epoch: p.leader_epoch,
                            replicas: p.replicas,
                            isr: p.isr,
                            offline_replicas: p.offline_replicas,
                        })
                        .collect(),
                }
            })
            .collect();
        Ok(Response::new(MetadataResponse {
            brokers,
            topics,
            controller_id: m.controller_id,
            cluster_id: m.cluster_id.to_string(),
        }))
    }

    async fn alter_partition_reassignments(
        &self,
        request: Request<AlterPartitionReassignmentsRequest>,
    ) -> Result<Response<AlterPartitionReassignmentsResponse>, Status> {
        let ctx = self.context(&request)?;
        let requests = (request.into_inner().partitions.into_iter())
            .map(|p| ReassignRequest {
                topic: p.topic,
                partition: p.partition,
                target: (!p.cancel).then_some(p.replicas),
            })
            .collect();
        let result = self.service.alter_reassignments(&ctx, requests).await;
        let error = error_result(&result);
        let results = (result.unwrap_or_default().into_iter())
            .map(|k| {
                let (error_code, error_message) = error_fields(&k.result);
                ReassignmentResult {
                    topic: k.topic,
                    partition: k.partition,
                    error_code,
                    error_message,
                }
            })
            .collect();
        Ok(Response::new(AlterPartitionReassignmentsResponse {
            error,
            results,
        }))
    }

    async fn list_partition_reassignments(
        &self,
        request: Request<ListPartitionReassignmentsRequest>,
    ) -> Result<Response<ListPartitionReassignmentsResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let result = self.service.list_reassignments(&ctx, None).await;
        let error = error_result(&result);
        let reassignments = (result.unwrap_or_default().into_iter())
            .filter(|o| r.topic.is_empty() || o.topic == r.topic)
            .map(|o| OngoingReassignment {
                topic: o.topic,
                partition: o.partition,
                replicas: o.replicas,
                adding: o.adding,
                removing: o.removing,
            })
            .collect();
        Ok(Response::new(ListPartitionReassignmentsResponse {
            error,
            reassignments,
        }))
    }

    async fn decommission_broker(
        &self,
        request: Request<DecommissionBrokerRequest>,
    ) -> Result<Response<DecommissionBrokerResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let result = (self.service)
            .decommission_broker(&ctx, r.broker_id, !r.recommission)
            .await;
        Ok(Response::new(DecommissionBrokerResponse {
            error: error_result(&result),
        }))
    }

    async fn restore_cluster(
        &self,
        request: Request<RestoreClusterRequest>,
    ) -> Result<Response<RestoreClusterResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let req = shale_service::RestoreRequest {
            from: Some(r.from).filter(|f| !f.is_empty()),
            topics: r.topics,
            dry_run: r.dry_run,
            replication_factor: Some(r.replication_factor).filter(|f| *f > 0),
            force: r.force,
        };
        let result = self.service.restore_cluster(&ctx, req).await;
        Ok(Response::new(crate::restore::restore_response(result)))
    }

    async fn unmount_topic(
        &self,
        request: Request<UnmountTopicRequest>,
    ) -> Result<Response<UnmountTopicResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let detach = r.step() == unmount_topic_request::Step::Detach;
        let ends = detach.then_some(r.ends);
        let result = self.service.unmount_topic(&ctx, &r.name, ends).await;
        let error = error_result(&result);
        let (id, description) = result.map_or((String::new(), None), |(id, d)| (id.to_string(), d));
        Ok(Response::new(UnmountTopicResponse {
            error,
            topic_id: id,
            description: description.unwrap_or_default(),
        }))
    }

    async fn mount_topic(
        &self,
        request: Request<MountTopicRequest>,
    ) -> Result<Response<MountTopicResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let req = shale_service::MountRequest {
            name: r.name,
            from: Some(r.from).filter(|f| !f.is_empty()),
            replication_factor: Some(r.replication_factor).filter(|f| *f > 0),
            force: r.force,
        };
        let result = self.service.mount_topic(&ctx, req).await;
        let error = error_result(&result);
        Ok(Response::new(match result {
            Ok(report) => MountTopicResponse {
                error,
                topic: Some(crate::restore::restored_topic(report.topic)),
                ignored: report.ignored,
            },
            Err(_) => MountTopicResponse {
                error,
                ..Default::default()
            },
        }))
    }

    async fn balance_plan(
        &self,
        request: Request<BalancePlanRequest>,
    ) -> Result<Response<BalancePlanResponse>, Status> {
        let ctx = self.context(&request)?;
        let result = self.service.balance_plan(&ctx).await;
        let error = error_result(&result);
        let moves = (result.unwrap_or_default().into_iter())
            .map(|m| PlannedMove {
                topic: m.topic,
                partition: m.partition,
                replicas: m.replicas,
                target: m.target,
                reason: m.reason.to_string(),
            })
            .collect();
        Ok(Response::new(BalancePlanResponse { error, moves }))
    }

    async fn elect_leaders(
        &self,
        request: Request<ElectLeadersRequest>,
    ) -> Result<Response<ElectLeadersResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = request.into_inner();
        let partitions = (!r.partitions.is_empty()).then_some(&r.partitions[..]);
        let result = self
            .service
            .elect_leaders(&ctx, named(&r.topic), partitions, r.unclean)
            .await;
        let error = error_result(&result);
        let results = result
            .unwrap_or_default()
            .into_iter()
            .map(|k| {
                let (error_code, error_message) = error_fields(&k.result);
                ElectLeadersResult {
                    topic: k.topic,
                    partition: k.partition,
                    leader: k.result.unwrap_or(-1),
                    error_code,
                    error_message,
                }
            })
            .collect();
        Ok(Response::new(ElectLeadersResponse { error, results }))
    }

    async fn describe_user_scram_credentials(
        &self,
        request: Request<DescribeUserScramCredentialsRequest>,
    ) -> Result<Response<DescribeUserScramCredentialsResponse>, Status> {
        let ctx = self.context(&request)?;
        let answer = super::users::describe(&self.service, &ctx, request.into_inner()).await;
        Ok(Response::new(answer))
    }

    async fn alter_user_scram_credentials(
        &self,
        request: Request<AlterUserScramCredentialsRequest>,
    ) -> Result<Response<AlterUserScramCredentialsResponse>, Status> {
        let ctx = self.context(&request)?;
        let answer = super::users::alter(&self.service, &ctx, request.into_inner()).await;
        Ok(Response::new(answer))
    }

    async fn create_acls(
        &self,
        request: Request<CreateAclsRequest>,
    ) -> Result<Response<CreateAclsResponse>, Status> {
        let ctx = self.context(&request)?;
        let answer = super::acls::create(&self.service, &ctx, request.into_inner()).await;
        Ok(Response::new(answer))
    }

    async fn describe_acls(
        &self,
        request: Request<DescribeAclsRequest>,
    ) -> Result<Response<DescribeAclsResponse>, Status> {
        let ctx = self.context(&request)?;
        let answer = super::acls::describe(&self.service, &ctx, request.into_inner()).await;
        Ok(Response::new(answer))
    }

    async fn delete_acls(
        &self,
        request: Request<DeleteAclsRequest>,
    ) -> Result<Response<DeleteAclsResponse>, Status> {
        let ctx = self.context(&request)?;
        let answer = super::acls::delete(&self.service, &ctx, request.into_inner()).await;
        Ok(Response::new(answer))
    }

    async fn cluster_status(
        &self,
        request: Request<ClusterStatusRequest>,
    ) -> Result<Response<ClusterStatusResponse>, Status> {
        let ctx = self.context(&request)?;
        let result = self.service.cluster_status(&ctx).await;
        let error = error_result(&result);
        let Ok(status) = result else {
            return Ok(Response::new(ClusterStatusResponse {
                error,
                controller_id: -1,
                controller_epoch: -1,
                ..Default::default()
            }));
        };
        let controller = status.controller;
        Ok(Response::new(ClusterStatusResponse {
            error,
            controller_id: controller.map_or(-1, |c| c.broker_id),
            controller_epoch: controller.map_or(-1, |c| c.epoch),
            brokers: status
                .brokers
                .into_iter()
                .map(|b| BrokerStatus {
                    broker_id: b.lease.broker_id,
                    alive: b.alive,
                    lease_expires_ms: b.lease.lease_expires_ms,
                    lease_remaining_ms: b.lease.remaining_now_ms(),
                    broker_epoch: b.lease.broker_epoch,
                    leader_partitions: b.leader_partitions,
                    replica_partitions: b.replica_partitions,
                    decommissioned: b.lease.decommissioned,
                    moving_partitions: b.moving_partitions,
                    rack: b.lease.rack.unwrap_or_default(),
                    address: b.lease.address,
                })
                .collect(),
        }))
    }
}
