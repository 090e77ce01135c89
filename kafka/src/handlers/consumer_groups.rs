//! The consumer group protocol (KIP-848): ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe. Partitions go by topic id both ways.

use kafka_protocol::messages::consumer_group_describe_response::{
    Assignment as DescribedAssignment, DescribedGroup, Member,
    TopicPartitions as DescribedPartitions,
};
use kafka_protocol::messages::consumer_group_heartbeat_response::{Assignment, TopicPartitions};
use kafka_protocol::messages::*;
use shale_broker::groups::{ConsumerHeartbeat, Partitions};
use shale_service::{RequestContext, Service};

use super::{code, message, str};

pub async fn heartbeat(
    s: &Service,
    ctx: &RequestContext,
    r: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let owned = r.topic_partitions.map(|tps| {
        let mut owned = Partitions::new();
        for tp in tps {
            owned.entry(tp.topic_id).or_default().extend(tp.partitions);
        }
        owned.retain(|_, ps| !ps.is_empty());
        owned
    });
    let req = ConsumerHeartbeat {
        group: r.group_id.0.to_string(),
        member_id: r.member_id.to_string(),
        member_epoch: r.member_epoch,
        instance_id: r.instance_id.map(|i| i.to_string()),
        rack_id: r.rack_id.map(|i| i.to_string()),
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        subscribed_topics: r
            .subscribed_topic_names
            .map(|ts| ts.into_iter().map(|t| t.0.to_string()).collect()),
        subscribed_regex: r.subscribed_topic_regex.map(|p| p.to_string()),
        server_assignor: r.server_assignor.map(|a| a.to_string()),
        owned,
        client_id: ctx.client_id.clone().unwrap_or_default(),
        client_host: String::new(),
    };
    let beat = s.consumer_group_heartbeat(ctx, req).await;
    let mut resp = ConsumerGroupHeartbeatResponse::default();
    resp.error_code = code(&beat);
    resp.error_message = message(&beat);
    match beat {
        Ok(b) => {
            resp.member_id = Some(str(&b.member_id));
            resp.member_epoch = b.member_epoch;
            resp.heartbeat_interval_ms = b.heartbeat_interval_ms;
            resp.assignment = b.assignment.map(|a| {
                let mut out = Assignment::default();
                out.topic_partitions = a
                    .into_iter()
                    .map(|(topic, ps)| {
                        let mut tp = TopicPartitions::default();
                        tp.topic_id = topic;
                        tp.partitions = ps.into_iter().collect();
                        tp
                    })
                    .collect();
                out
            });
        }
        Err(_) => resp.member_epoch = -1,
    }
    resp
}

pub async fn describe(
    s: &Service,
    ctx: &RequestContext,
    r: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    let mut resp = ConsumerGroupDescribeResponse::default();
    for group in r.group_ids {
        let d = s.describe_consumer_group(ctx, &group.0).await;
        let mut out = DescribedGroup::default();
        out.group_id = group;
        out.error_code = code(&d);
        out.error_message = message(&d);
        if let Ok(d) = d {
            let ids: Vec<uuid::Uuid> = d
                .members
                .iter()
                .flat_map(|m| m.assignment.keys().chain(m.target.keys()).copied())
                .collect();
            let names = s.topic_names(ids);
            let assignment = |a: &Partitions| {
                let mut out = DescribedAssignment::default();
                out.topic_partitions = a
                    .iter()
                    .map(|(id, ps)| {
                        let mut tp = DescribedPartitions::default();
                        tp.topic_id = *id;
                        let name = names.get(id).map(String::as_str).unwrap_or_default();
                        tp.topic_name = str(name).into();
                        tp.partitions = ps.iter().copied().collect();
                        tp
                    })
                    .collect();
                out
            };
            out.group_state = str(d.state);
            out.group_epoch = d.epoch;
            out.assignment_epoch = d.assignment_epoch;
            out.assignor_name = str(&d.assignor);
            out.members = d
                .members
                .iter()
                .map(|m| {
                    let mut dm = Member::default();
                    dm.member_id = str(&m.member_id);
                    dm.instance_id = m.instance_id.as_deref().map(str);
                    dm.rack_id = m.rack_id.as_deref().map(str);
                    dm.member_epoch = m.member_epoch;
                    dm.client_id = str(&m.client_id);
                    dm.client_host = str(&m.client_host);
                    dm.subscribed_topic_names =
                        m.subscribed_topics.iter().map(|t| str(t).into()).collect();
                    dm.subscribed_topic_regex = m.subscribed_regex.as_deref().map(str);
                    dm.assignment = assignment(&m.assignment);
                    dm.target_assignment = assignment(&m.target);
                    dm
                })
                .collect();
        }
        resp.groups.push(out);
    }
    resp
}
