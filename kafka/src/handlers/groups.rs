//! The consumer-group APIs, on the same coordinator as gRPC.

use std::collections::{BTreeMap, HashMap};

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use shale_broker::error::Error;
use shale_broker::groups::{GroupError, JoinRequest, OffsetCommit};
use shale_records::ErrorCode;
use shale_service::{CoordinatorType, Keyed, MemberRef, RequestContext, Service, SyncRequest};

use super::{code, message, str};

pub async fn find_coordinator(
    s: &Service,
    ctx: &RequestContext,
    r: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let kind = if r.key_type == 1 {
        CoordinatorType::Transaction
    } else {
        CoordinatorType::Group
    };
    let keys: Vec<StrBytes> = if version >= 4 {
        r.coordinator_keys
    } else {
        vec![r.key]
    };
    let mut resp = FindCoordinatorResponse::default();
    for key in keys {
        let found = s.find_coordinator(ctx, &key, kind).await;
        let mut c = Coordinator::default();
        c.key = key;
        c.error_code = code(&found);
        c.error_message = message(&found);
        match &found {
            Ok(b) => {
                let (host, port) = b.host_port();
                c.node_id = b.broker_id.into();
                c.host = str(host);
                c.port = i32::from(port);
            }
            Err(_) => {
                c.node_id = (-1).into();
                c.port = -1;
            }
        }
        resp.coordinators.push(c);
    }
    if version < 4 {
        // One key, in the top-level fields.
        let c = resp.coordinators.pop().unwrap_or_default();
        resp.error_code = c.error_code;
        resp.error_message = if version >= 1 { c.error_message } else { None };
        resp.node_id = c.node_id;
        resp.host = c.host;
        resp.port = c.port;
    }
    resp
}

pub async fn join(
    s: &Service,
    ctx: &RequestContext,
    r: JoinGroupRequest,
    version: i16,
) -> JoinGroupResponse {
    let session = i64::from(r.session_timeout_ms);
    let req = JoinRequest {
        group: r.group_id.0.to_string(),
        member_id: r.member_id.to_string(),
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: String::new(),
        session_timeout_ms: session,
        // v0 has no rebalance timeout: the session timeout stands for it.
        rebalance_timeout_ms: if version >= 1 {
            i64::from(r.rebalance_timeout_ms)
        } else {
            session
        },
        protocol_type: r.protocol_type.to_string(),
        protocols: r
            .protocols
            .into_iter()
            .map(|p| (p.name.to_string(), p.metadata))
            .collect(),
        // v4+: a new member first gets its id, and joins again with it.
        require_known_member_id: version >= 4,
        // v5+: a static member.
        group_instance_id: r.group_instance_id.map(|i| i.to_string()),
    };
    let protocol_type = req.protocol_type.clone();
    let joined = s.join_group(ctx, req).await;
    let mut resp = JoinGroupResponse::default();
    resp.error_code = code(&joined);
    match joined {
        Ok(j) => {
            resp.generation_id = j.generation;
            if version >= 7 {
                resp.protocol_type = Some(str(&protocol_type));
            }
            resp.protocol_name = Some(str(&j.protocol));
            resp.leader = str(&j.leader);
            resp.member_id = str(&j.member_id);
            resp.members = j
                .members
                .into_iter()
                .map(|(member_id, metadata)| {
                    let mut m = JoinGroupResponseMember::default();
                    m.member_id = str(&member_id);
                    m.metadata = metadata;
                    m
                })
                .collect();
        }
        Err(Error::Group(GroupError::MemberIdRequired(member_id))) => {
            resp.generation_id = -1;
            resp.member_id = str(&member_id);
            resp.protocol_name = (version < 7).then(StrBytes::default);
        }
        Err(_) => {
            resp.generation_id = -1;
            resp.protocol_name = (version < 7).then(StrBytes::default);
        }
    }
    resp
}

pub async fn sync(s: &Service, ctx: &RequestContext, r: SyncGroupRequest) -> SyncGroupResponse {
    let req = SyncRequest {
        group: r.group_id.0.to_string(),
        generation: r.generation_id,
        member_id: r.member_id.to_string(),
        group_instance_id: r.group_instance_id.map(|i| i.to_string()),
        assignments: r
            .assignments
            .into_iter()
            .map(|a| (a.member_id.to_string(), a.assignment))
            .collect(),
    };
    let synced = s.sync_group(ctx, req).await;
    let mut resp = SyncGroupResponse::default();
    resp.error_code = code(&synced);
    resp.protocol_type = r.protocol_type;
    resp.protocol_name = r.protocol_name;
    resp.assignment = synced.unwrap_or_default();
    resp
}

pub async fn heartbeat(
    s: &Service,
    ctx: &RequestContext,
    r: HeartbeatRequest,
) -> HeartbeatResponse {
    let member = MemberRef {
        id: &r.member_id,
        instance: r.group_instance_id.as_deref(),
    };
    let beat = s
        .heartbeat(ctx, &r.group_id.0, r.generation_id, member)
        .await;
    let mut resp = HeartbeatResponse::default();
    resp.error_code = code(&beat);
    resp
}

pub async fn leave(
    s: &Service,
    ctx: &RequestContext,
    r: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let group = r.group_id.0.to_string();
    let mut resp = LeaveGroupResponse::default();
    if version < 3 {
        let left = s
            .leave_group(ctx, &group, MemberRef::id(&r.member_id))
            .await;
        resp.error_code = code(&left);
        return resp;
    }
    // v3+: a batch of members, static ones possibly by instance id alone; each gets
    // its own answer.
    for m in r.members {
        let member = MemberRef {
            id: &m.member_id,
            instance: m.group_instance_id.as_deref(),
        };
        let left = s.leave_group(ctx, &group, member).await;
        let mut out = MemberResponse::default();
        out.member_id = m.member_id;
        out.group_instance_id = m.group_instance_id;
        out.error_code = code(&left);
        resp.members.push(out);
    }
    resp
}

pub async fn offset_commit(
    s: &Service,
    ctx: &RequestContext,
    r: OffsetCommitRequest,
) -> OffsetCommitResponse {
    let offsets: Vec<OffsetCommit> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| OffsetCommit {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.committed_offset,
                metadata: p
                    .committed_metadata
                    .as_ref()
                    .map_or_else(String::new, |m| m.to_string()),
            })
        })
        .collect();
    let keys: Vec<(String, i32)> = offsets
        .iter()
        .map(|o| (o.topic.clone(), o.partition))
        .collect();
    let committed = s
        .commit_offsets(
            ctx,
            &r.group_id.0,
            r.generation_id_or_member_epoch,
            MemberRef {
                id: &r.member_id,
                instance: r.group_instance_id.as_deref(),
            },
            offsets,
        )
        .await;
    // A refusal of the whole commit is each partition's answer (Kafka has no other
    // place for it).
    let answers: Vec<(String, i32, i16)> = match committed {
        Ok(answers) => answers
            .into_iter()
            .map(|k| (k.topic, k.partition, code(&k.result)))
            .collect(),
        Err(e) => keys
            .into_iter()
            .map(|(t, p)| (t, p, e.code() as i16))
            .collect(),
    };
    let mut resp = OffsetCommitResponse::default();
    for (topic, partition, error_code) in answers {
        if resp
            .topics
            .last()
            .is_none_or(|t| t.name.0.as_str() != topic)
        {
            let mut t = OffsetCommitResponseTopic::default();
            t.name = str(&topic).into();
            resp.topics.push(t);
        }
        let mut p = OffsetCommitResponsePartition::default();
        p.partition_index = partition;
        p.error_code = error_code;
        if let Some(t) = resp.topics.last_mut() {
            t.partitions.push(p);
        }
    }
    resp
}

/// Requested partitions by topic (`None`: every committed one).
type Wanted = Option<Vec<(String, Vec<i32>)>>;

/// A group's committed offsets for the partitions asked for: a partition without a
/// commit answers offset -1 and empty (non-null) metadata.
async fn group_offsets(
    s: &Service,
    ctx: &RequestContext,
    group: &str,
    wanted: Wanted,
) -> Result<Vec<(String, Vec<(i32, i64, String)>)>, Error> {
    let committed = s.fetch_offsets(ctx, group).await?;
    let mut by_topic: BTreeMap<String, HashMap<i32, (i64, String)>> = BTreeMap::new();
    for c in committed {
        by_topic
            .entry(c.topic)
            .or_default()
            .insert(c.partition, (c.offset, c.metadata));
    }
    Ok(match wanted {
        None => by_topic
            .into_iter()
            .map(|(topic, parts)| {
                let mut parts: Vec<_> = parts.into_iter().map(|(p, (o, m))| (p, o, m)).collect();
                parts.sort_by_key(|(p, _, _)| *p);
                (topic, parts)
            })
            .collect(),
        Some(topics) => topics
            .into_iter()
            .map(|(topic, partitions)| {
                let known = by_topic.get(&topic);
                let parts = partitions
                    .into_iter()
                    .map(|p| {
                        let (o, m) = known
                            .and_then(|k| k.get(&p))
                            .cloned()
                            .unwrap_or((-1, String::new()));
                        (p, o, m)
                    })
                    .collect();
                (topic, parts)
            })
            .collect(),
    })
}

pub async fn offset_fetch(
    s: &Service,
    ctx: &RequestContext,
    r: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    let mut resp = OffsetFetchResponse::default();
    if version >= 8 {
        for g in r.groups {
            let wanted = g.topics.map(|ts| {
                ts.into_iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes))
                    .collect()
            });
            let found = group_offsets(s, ctx, &g.group_id.0, wanted).await;
            let unstable = unstable(s, ctx, &g.group_id.0, r.require_stable).await;
            let mut out = OffsetFetchResponseGroup::default();
            out.group_id = g.group_id;
            out.error_code = code(&found);
            for (topic, parts) in found.unwrap_or_default() {
                let mut t = OffsetFetchResponseTopics::default();
                t.name = str(&topic).into();
                for (partition, offset, metadata) in parts {
                    let mut p = OffsetFetchResponsePartitions::default();
                    p.partition_index = partition;
                    p.committed_offset = offset;
                    p.committed_leader_epoch = -1;
                    p.metadata = Some(str(&metadata));
                    if unstable.contains(&(topic.clone(), partition)) {
                        p.error_code = ErrorCode::UnstableOffsetCommit as i16;
                        p.committed_offset = -1;
                    }
                    t.partitions.push(p);
                }
                out.topics.push(t);
            }
            resp.groups.push(out);
        }
        return resp;
    }
    let wanted = r.topics.map(|ts| {
        ts.into_iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes))
            .collect()
    });
    let found = group_offsets(s, ctx, &r.group_id.0, wanted).await;
    // require_stable: v7+.
    let unstable = unstable(s, ctx, &r.group_id.0, r.require_stable).await;
    resp.error_code = code(&found);
    for (topic, parts) in found.unwrap_or_default() {
        let mut t = OffsetFetchResponseTopic::default();
        t.name = str(&topic).into();
        for (partition, offset, metadata) in parts {
            let mut p = OffsetFetchResponsePartition::default();
            p.partition_index = partition;
            p.committed_offset = offset;
            p.committed_leader_epoch = -1;
            p.metadata = Some(str(&metadata));
            if unstable.contains(&(topic.clone(), partition)) {
                p.error_code = ErrorCode::UnstableOffsetCommit as i16;
                p.committed_offset = -1;
            }
            t.partitions.push(p);
        }
        resp.topics.push(t);
    }
    resp
}

/// The partitions whose offsets a transaction has pending, when the client asks for
/// stable offsets only (KIP-447); a failed lookup holds nothing back.
async fn unstable(
    s: &Service,
    ctx: &RequestContext,
    group: &str,
    require_stable: bool,
) -> Vec<(String, i32)> {
    if !require_stable {
        return Vec::new();
    }
    s.pending_txn_offsets(ctx, group).await.unwrap_or_default()
}

pub async fn offset_delete(
    s: &Service,
    ctx: &RequestContext,
    r: OffsetDeleteRequest,
) -> OffsetDeleteResponse {
    let partitions: Vec<(String, i32)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.0.to_string(), p.partition_index))
        })
        .collect();
    let deleted = s.delete_offsets(ctx, &r.group_id.0, partitions).await;
    let mut resp = OffsetDeleteResponse::default();
    resp.error_code = code(&deleted);
    let answers: Vec<Keyed<()>> = deleted.unwrap_or_default();
    for k in answers {
        if resp
            .topics
            .last()
            .is_none_or(|t| t.name.0.as_str() != k.topic)
        {
            let mut t = OffsetDeleteResponseTopic::default();
            t.name = str(&k.topic).into();
            resp.topics.push(t);
        }
        let mut p = OffsetDeleteResponsePartition::default();
        p.partition_index = k.partition;
        p.error_code = code(&k.result);
        if let Some(t) = resp.topics.last_mut() {
            t.partitions.push(p);
        }
    }
    resp
}

pub async fn list(s: &Service, ctx: &RequestContext, r: ListGroupsRequest) -> ListGroupsResponse {
    let listed = s.list_groups(ctx).await;
    let mut resp = ListGroupsResponse::default();
    resp.error_code = code(&listed);
    let states: Vec<String> = r.states_filter.iter().map(|s| s.to_lowercase()).collect();
    for g in listed.unwrap_or_default() {
        if !states.is_empty() && !states.contains(&g.state.to_lowercase()) {
            continue;
        }
        if !r.types_filter.is_empty() && !r.types_filter.iter().any(|t| t.as_str() == "classic") {
            continue;
        }
        let mut out = ListedGroup::default();
        out.group_id = str(&g.group).into();
        out.protocol_type = str(&g.protocol_type);
        out.group_state = str(g.state);
        out.group_type = str("classic");
        resp.groups.push(out);
    }
    resp
}

pub async fn describe(
    s: &Service,
    ctx: &RequestContext,
    r: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let mut resp = DescribeGroupsResponse::default();
    for group in r.groups {
        let d = s.describe_group(ctx, &group.0).await;
        let mut out = DescribedGroup::default();
        out.group_id = group;
        out.error_code = code(&d);
        match d {
            Ok(d) => {
                out.group_state = str(d.state.name());
                out.protocol_type = str(&d.protocol_type);
                out.protocol_data = str(&d.protocol);
                out.members = d
                    .members
                    .into_iter()
                    .map(|m| {
                        let mut dm = DescribedGroupMember::default();
                        dm.member_id = str(&m.member_id);
                        // v4+ carries it; older versions must leave it null.
                        if version >= 4 {
                            dm.group_instance_id = m.group_instance_id.as_deref().map(str);
                        }
                        dm.client_id = str(&m.client_id);
                        dm.client_host = str(&m.client_host);
                        dm.member_metadata = m.metadata;
                        dm.member_assignment = m.assignment;
                        dm
                    })
                    .collect();
            }
            Err(_) => out.group_state = str("Dead"),
        }
        resp.groups.push(out);
    }
    resp
}

pub async fn delete(
    s: &Service,
    ctx: &RequestContext,
    r: DeleteGroupsRequest,
) -> DeleteGroupsResponse {
    let mut resp = DeleteGroupsResponse::default();
    for group in r.groups_names {
        let deleted = s.delete_group(ctx, &group.0).await;
        let mut out = DeletableGroupResult::default();
        out.group_id = group;
        out.error_code = code(&deleted);
        resp.results.push(out);
    }
    resp
}
