//! gRPC `Groups` service: the consumer-group coordinator and committed offsets.

use std::sync::Arc;

use shale_proto::v1::groups_server::Groups;
use shale_proto::v1::*;
use tonic::{Request, Response, Status};

use super::{error_fields, error_result};
use crate::broker::Broker;
use crate::error::Error;
use crate::groups::{GroupError, JoinRequest, OffsetCommit};
use crate::stats::ErrorCounts;

pub struct GroupsService {
    broker: Arc<Broker>,
}

impl GroupsService {
    pub fn new(broker: Arc<Broker>) -> Self {
        Self { broker }
    }
}

fn error_only<T>(errors: &ErrorCounts, r: Result<T, Error>) -> Option<ErrorResult> {
    error_result(errors, &r)
}

/// A waiter the coordinator dropped (the group moved or the broker stopped).
fn dropped() -> Error {
    GroupError::CoordinatorNotAvailable.into()
}

#[tonic::async_trait]
impl Groups for GroupsService {
    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let r = self.broker.coordinator_for(&request.into_inner().group_id);
        let (broker_id, address) = r.as_ref().cloned().unwrap_or((-1, String::new()));
        Ok(Response::new(FindCoordinatorResponse {
            error: error_result(&self.broker.request_stats.errors, &r),
            broker_id,
            address,
        }))
    }

    async fn join_group(
        &self,
        request: Request<JoinGroupRequest>,
    ) -> Result<Response<JoinGroupResponse>, Status> {
        let client_host = request
            .remote_addr()
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        let req = request.into_inner();
        let joined = async {
            self.broker.ensure_coordinator(&req.group_id)?;
            let rx = self.broker.groups.join(JoinRequest {
                group: req.group_id.clone(),
                member_id: req.member_id,
                client_id: req.client_id,
                client_host,
                session_timeout_ms: i64::from(req.session_timeout_ms),
                rebalance_timeout_ms: i64::from(req.rebalance_timeout_ms),
                protocol_type: req.protocol_type,
                protocols: req
                    .protocols
                    .into_iter()
                    .map(|p| (p.name, p.metadata))
                    .collect(),
            })?;
            Ok::<_, Error>(rx.await.map_err(|_| dropped())??)
        }
        .await;
        let mut resp = JoinGroupResponse {
            error: error_result(&self.broker.request_stats.errors, &joined),
            ..Default::default()
        };
        if let Ok(j) = joined {
            resp.generation_id = j.generation;
            resp.protocol_name = j.protocol;
            resp.leader = j.leader;
            resp.member_id = j.member_id;
            resp.members = j
                .members
                .into_iter()
                .map(|(member_id, metadata)| JoinGroupMember {
                    member_id,
                    metadata,
                })
                .collect();
        }
        Ok(Response::new(resp))
    }

    async fn sync_group(
        &self,
        request: Request<SyncGroupRequest>,
    ) -> Result<Response<SyncGroupResponse>, Status> {
        let req = request.into_inner();
        let synced = async {
            self.broker.ensure_coordinator(&req.group_id)?;
            let rx = self.broker.groups.sync(
                &req.group_id,
                req.generation_id,
                &req.member_id,
                req.assignments
                    .into_iter()
                    .map(|a| (a.member_id, a.assignment))
                    .collect(),
            )?;
            Ok::<_, Error>(rx.await.map_err(|_| dropped())??)
        }
        .await;
        Ok(Response::new(SyncGroupResponse {
            error: error_result(&self.broker.request_stats.errors, &synced),
            assignment: synced.unwrap_or_default(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        let req = request.into_inner();
        let r = self
            .broker
            .ensure_coordinator(&req.group_id)
            .and_then(|()| {
                Ok(self.broker.groups.heartbeat(
                    &req.group_id,
                    req.generation_id,
                    &req.member_id,
                )?)
            });
        Ok(Response::new(HeartbeatResponse {
            error: error_only(&self.broker.request_stats.errors, r),
        }))
    }

    async fn leave_group(
        &self,
        request: Request<LeaveGroupRequest>,
    ) -> Result<Response<LeaveGroupResponse>, Status> {
        let req = request.into_inner();
        let r = self
            .broker
            .ensure_coordinator(&req.group_id)
            .and_then(|()| Ok(self.broker.groups.leave(&req.group_id, &req.member_id)?));
        Ok(Response::new(LeaveGroupResponse {
            error: error_only(&self.broker.request_stats.errors, r),
        }))
    }

    async fn offset_commit(
        &self,
        request: Request<OffsetCommitRequest>,
    ) -> Result<Response<OffsetCommitResponse>, Status> {
        let req = request.into_inner();
        let keys: Vec<(String, i32)> = req
            .partitions
            .iter()
            .map(|p| (p.topic.clone(), p.partition))
            .collect();
        let offsets = req
            .partitions
            .into_iter()
            .map(|p| OffsetCommit {
                topic: p.topic,
                partition: p.partition,
                offset: p.offset,
                metadata: p.metadata,
            })
            .collect();
        let r = self
            .broker
            .commit_offsets(&req.group_id, req.generation_id, &req.member_id, offsets)
            .await;
        let mut resp = OffsetCommitResponse {
            error: error_result(&self.broker.request_stats.errors, &r),
            partitions: Vec::new(),
        };
        if let Ok(results) = r {
            resp.partitions = keys
                .into_iter()
                .zip(results)
                .map(|((topic, partition), r)| {
                    let (error_code, error_message) =
                        error_fields(&self.broker.request_stats.errors, r.as_ref().err());
                    OffsetCommitPartitionResult {
                        topic,
                        partition,
                        error_code,
                        error_message,
                    }
                })
                .collect();
        }
        Ok(Response::new(resp))
    }

    async fn offset_fetch(
        &self,
        request: Request<OffsetFetchRequest>,
    ) -> Result<Response<OffsetFetchResponse>, Status> {
        let r = self
            .broker
            .committed_offsets(&request.into_inner().group_id)
            .await;
        let mut resp = OffsetFetchResponse {
            error: error_result(&self.broker.request_stats.errors, &r),
            offsets: Vec::new(),
        };
        if let Ok(offsets) = r {
            resp.offsets = offsets
                .into_iter()
                .map(|o| CommittedPartitionOffset {
                    topic: o.topic,
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata,
                    commit_ms: o.commit_ms,
                })
                .collect();
        }
        Ok(Response::new(resp))
    }

    async fn list_groups(
        &self,
        _request: Request<ListGroupsRequest>,
    ) -> Result<Response<ListGroupsResponse>, Status> {
        let groups = self
            .broker
            .list_groups()
            .await
            .map_err(|e| Status::unavailable(e.to_string()))?;
        Ok(Response::new(ListGroupsResponse {
            groups: groups
                .into_iter()
                .map(|(group_id, state, members, coordinator)| GroupListing {
                    group_id,
                    state: state.into(),
                    members: members as i32,
                    coordinator,
                })
                .collect(),
        }))
    }

    async fn describe_group(
        &self,
        request: Request<DescribeGroupRequest>,
    ) -> Result<Response<DescribeGroupResponse>, Status> {
        let group = request.into_inner().group_id;
        let r = self.broker.ensure_coordinator(&group);
        let mut resp = DescribeGroupResponse {
            error: error_result(&self.broker.request_stats.errors, &r),
            state: "Empty".into(),
            ..Default::default()
        };
        if r.is_ok()
            && let Some(d) = self.broker.groups.describe(&group)
        {
            resp.state = d.state.name().into();
            resp.protocol_type = d.protocol_type;
            resp.protocol_name = d.protocol;
            resp.generation_id = d.generation;
            resp.leader = d.leader;
            resp.members = d
                .members
                .into_iter()
                .map(|m| GroupMemberDescription {
                    member_id: m.member_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    assignment: m.assignment,
                })
                .collect();
        }
        Ok(Response::new(resp))
    }

    async fn delete_group(
        &self,
        request: Request<DeleteGroupRequest>,
    ) -> Result<Response<DeleteGroupResponse>, Status> {
        let r = self
            .broker
            .delete_group(&request.into_inner().group_id)
            .await;
        Ok(Response::new(DeleteGroupResponse {
            error: error_only(&self.broker.request_stats.errors, r),
        }))
    }
}
