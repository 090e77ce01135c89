//! gRPC `Groups` service: the consumer-group coordinator and committed offsets.

use shale_broker::groups::{JoinRequest, OffsetCommit};
use shale_proto::v1::groups_server::Groups;
use shale_proto::v1::*;
use shale_service::{CoordinatorType, MemberRef, SyncRequest};
use tonic::{Request, Response, Status};

use super::{Front, error_fields, error_result};

#[tonic::async_trait]
impl Groups for Front {
    async fn find_coordinator(
        &self,
        request: Request<FindCoordinatorRequest>,
    ) -> Result<Response<FindCoordinatorResponse>, Status> {
        let ctx = self.context(&request)?;
        let group = request.into_inner().group_id;
        let r = self
            .service
            .find_coordinator(&ctx, &group, CoordinatorType::Group)
            .await;
        let error = error_result(&r);
        let (broker_id, address) = r.map_or((-1, String::new()), |b| (b.broker_id, b.address));
        Ok(Response::new(FindCoordinatorResponse {
            error,
            broker_id,
            address,
        }))
    }

    async fn join_group(
        &self,
        request: Request<JoinGroupRequest>,
    ) -> Result<Response<JoinGroupResponse>, Status> {
        let ctx = self.context(&request)?;
        let req = request.into_inner();
        let join = JoinRequest {
            group: req.group_id,
            member_id: req.member_id,
            client_id: req.client_id,
            client_host: String::new(),
            session_timeout_ms: i64::from(req.session_timeout_ms),
            rebalance_timeout_ms: i64::from(req.rebalance_timeout_ms),
            protocol_type: req.protocol_type,
            protocols: req
                .protocols
                .into_iter()
                .map(|p| (p.name, p.metadata))
                .collect(),
            require_known_member_id: false,
            // gRPC members are dynamic.
            group_instance_id: None,
        };
        let joined = self.service.join_group(&ctx, join).await;
        let mut resp = JoinGroupResponse {
            error: error_result(&joined),
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
        let ctx = self.context(&request)?;
        let req = request.into_inner();
        let sync = SyncRequest {
            group: req.group_id,
            generation: req.generation_id,
            member_id: req.member_id,
            group_instance_id: None,
            assignments: req
                .assignments
                .into_iter()
                .map(|a| (a.member_id, a.assignment))
                .collect(),
        };
        let synced = self.service.sync_group(&ctx, sync).await;
        Ok(Response::new(SyncGroupResponse {
            error: error_result(&synced),
            assignment: synced.unwrap_or_default(),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<HeartbeatRequest>,
    ) -> Result<Response<HeartbeatResponse>, Status> {
        let ctx = self.context(&request)?;
        let req = request.into_inner();
        let r = self
            .service
            .heartbeat(
                &ctx,
                &req.group_id,
                req.generation_id,
                MemberRef::id(&req.member_id),
            )
            .await;
        Ok(Response::new(HeartbeatResponse {
            error: error_result(&r),
        }))
    }

    async fn leave_group(
        &self,
        request: Request<LeaveGroupRequest>,
    ) -> Result<Response<LeaveGroupResponse>, Status> {
        let ctx = self.context(&request)?;
        let req = request.into_inner();
        let r = self
            .service
            .leave_group(&ctx, &req.group_id, MemberRef::id(&req.member_id))
            .await;
        Ok(Response::new(LeaveGroupResponse {
            error: error_result(&r),
        }))
    }

    async fn offset_commit(
        &self,
        request: Request<OffsetCommitRequest>,
    ) -> Result<Response<OffsetCommitResponse>, Status> {
        let ctx = self.context(&request)?;
        let req = request.into_inner();
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
            .service
            .commit_offsets(
                &ctx,
                &req.group_id,
                req.generation_id,
                MemberRef::id(&req.member_id),
                offsets,
            )
            .await;
        let error = error_result(&r);
        let partitions = r
            .unwrap_or_default()
            .into_iter()
            .map(|k| {
                let (error_code, error_message) = error_fields(&k.result);
                OffsetCommitPartitionResult {
                    topic: k.topic,
                    partition: k.partition,
                    error_code,
                    error_message,
                }
            })
            .collect();
        Ok(Response::new(OffsetCommitResponse { error, partitions }))
    }

    async fn offset_fetch(
        &self,
        request: Request<OffsetFetchRequest>,
    ) -> Result<Response<OffsetFetchResponse>, Status> {
        let ctx = self.context(&request)?;
        let group = request.into_inner().group_id;
        let r = self.service.fetch_offsets(&ctx, &group).await;
        Ok(Response::new(OffsetFetchResponse {
            error: error_result(&r),
            offsets: r
                .unwrap_or_default()
                .into_iter()
                .map(|o| CommittedPartitionOffset {
                    topic: o.topic,
                    partition: o.partition,
                    offset: o.offset,
                    metadata: o.metadata,
                    commit_ms: o.commit_ms,
                })
                .collect(),
        }))
    }

    async fn list_groups(
        &self,
        request: Request<ListGroupsRequest>,
    ) -> Result<Response<ListGroupsResponse>, Status> {
        let ctx = self.context(&request)?;
        let r = self.service.list_groups(&ctx).await;
        Ok(Response::new(ListGroupsResponse {
            error: error_result(&r),
            groups: r
                .unwrap_or_default()
                .into_iter()
                .map(|g| GroupListing {
                    group_id: g.group,
                    state: g.state.into(),
                    members: g.members as i32,
                    coordinator: g.coordinator,
                })
                .collect(),
        }))
    }

    async fn describe_group(
        &self,
        request: Request<DescribeGroupRequest>,
    ) -> Result<Response<DescribeGroupResponse>, Status> {
        let ctx = self.context(&request)?;
        let group = request.into_inner().group_id;
        let r = self.service.describe_group(&ctx, &group).await;
        let error = error_result(&r);
        let Ok(d) = r else {
            return Ok(Response::new(DescribeGroupResponse {
                error,
                state: "Empty".into(),
                ..Default::default()
            }));
        };
        Ok(Response::new(DescribeGroupResponse {
            error,
            state: d.state.name().into(),
            protocol_type: d.protocol_type,
            protocol_name: d.protocol,
            generation_id: d.generation,
            leader: d.leader,
            members: d
                .members
                .into_iter()
                .map(|m| GroupMemberDescription {
                    member_id: m.member_id,
                    client_id: m.client_id,
                    client_host: m.client_host,
                    assignment: m.assignment,
                })
                .collect(),
        }))
    }

    async fn delete_group(
        &self,
        request: Request<DeleteGroupRequest>,
    ) -> Result<Response<DeleteGroupResponse>, Status> {
        let ctx = self.context(&request)?;
        let group = request.into_inner().group_id;
        let r = self.service.delete_group(&ctx, &group).await;
        Ok(Response::new(DeleteGroupResponse {
            error: error_result(&r),
        }))
    }
}
