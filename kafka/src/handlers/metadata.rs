//! Metadata and DescribeCluster.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::*;
use shale_records::ErrorCode;
use shale_service::{RequestContext, Service};

use super::{code, str};

pub async fn metadata(
    s: &Service,
    ctx: &RequestContext,
    r: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    // v0: an empty list means every topic; v1+: null means every topic, and an
    // empty list none. A topic named only by its id (v10+; consumers of the consumer
    // group protocol learn their topics by id) is looked up by it.
    let ids: Vec<uuid::Uuid> = r
        .topics
        .iter()
        .flatten()
        .filter(|t| t.name.is_none())
        .map(|t| t.topic_id)
        .collect();
    let names = s.topic_names(ids);
    let mut unknown_ids = Vec::new();
    let wanted: Option<Vec<String>> = match r.topics {
        Some(topics) if version == 0 && topics.is_empty() => None,
        Some(topics) => Some(
            topics
                .into_iter()
                .filter_map(|t| match (t.name, names.get(&t.topic_id)) {
                    (Some(n), _) => Some(n.0.to_string()),
                    (None, Some(n)) => Some(n.clone()),
                    (None, None) => {
                        unknown_ids.push(t.topic_id);
                        None
                    }
                })
                .collect(),
        ),
        None => None,
    };
    // v0–3 always create missing topics if the broker allows it (Kafka's rule).
    let auto_create = version < 4 || r.allow_auto_topic_creation;
    let m = s.metadata(ctx, wanted, auto_create).await;
    let mut resp = MetadataResponse::default();
    resp.brokers = m
        .brokers
        .iter()
        .map(|b| {
            let (host, port) = b.host_port();
            let mut out = MetadataResponseBroker::default();
            out.node_id = b.broker_id.into();
            out.host = str(host);
            out.port = i32::from(port);
            out.rack = b.rack.as_deref().map(str);
            out
        })
        .collect();
    resp.controller_id = m.controller_id.into();
    resp.cluster_id = Some(str(&m.cluster_id.to_string()));
    resp.topics = m
        .topics
        .into_iter()
        .map(|t| {
            let mut out = MetadataResponseTopic::default();
            out.error_code = code(&t.result);
            out.name = Some(str(&t.name).into());
            if let Ok((id, partitions)) = t.result {
                out.topic_id = id;
                out.partitions = partitions
                    .into_iter()
                    .map(|p| {
                        let mut mp = MetadataResponsePartition::default();
                        mp.error_code = if p.leader < 0 {
                            ErrorCode::LeaderNotAvailable as i16
                        } else {
                            0
                        };
                        mp.partition_index = p.partition;
                        mp.leader_id = p.leader.into();
                        mp.leader_epoch = p.leader_epoch;
                        mp.replica_nodes = p.replicas.into_iter().map(Into::into).collect();
                        mp.isr_nodes = p.isr.into_iter().map(Into::into).collect();
                        mp.offline_replicas =
                            p.offline_replicas.into_iter().map(Into::into).collect();
                        mp
                    })
                    .collect();
            }
            out
        })
        .collect();
    for id in unknown_ids {
        let mut out = MetadataResponseTopic::default();
        out.error_code = ErrorCode::UnknownTopicId as i16;
        out.topic_id = id;
        resp.topics.push(out);
    }
    resp
}

pub async fn describe_cluster(
    s: &Service,
    ctx: &RequestContext,
    _r: DescribeClusterRequest,
) -> DescribeClusterResponse {
    let m = s.metadata(ctx, Some(Vec::new()), false).await;
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = str(&m.cluster_id.to_string());
    resp.controller_id = m.controller_id.into();
    resp.brokers = m
        .brokers
        .iter()
        .map(|b| {
            let (host, port) = b.host_port();
            let mut out = DescribeClusterBroker::default();
            out.broker_id = b.broker_id.into();
            out.host = str(host);
            out.port = i32::from(port);
            out.rack = b.rack.as_deref().map(str);
            out
        })
        .collect();
    resp
}
