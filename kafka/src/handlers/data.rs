//! Produce, ListOffsets, OffsetForLeaderEpoch, InitProducerId.

use std::time::Duration;

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::*;
use shale_broker::produce::ProduceData;
use shale_service::{DeleteRecordsQuery, EpochQuery, Keyed, OffsetQuery, RequestContext, Service};

use super::{code, message};

/// Groups per-partition answers back under their topics, in request order.
fn by_topic<T>(answers: Vec<Keyed<T>>) -> Vec<(String, Vec<Keyed<T>>)> {
    let mut out: Vec<(String, Vec<Keyed<T>>)> = Vec::new();
    for k in answers {
        match out.last_mut() {
            Some((topic, parts)) if *topic == k.topic => parts.push(k),
            _ => out.push((k.topic.clone(), vec![k])),
        }
    }
    out
}

pub async fn produce(
    s: &Service,
    ctx: &RequestContext,
    r: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let acks = i32::from(r.acks);
    let partitions: Vec<ProduceData> = r
        .topic_data
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.to_string();
            t.partition_data.into_iter().map(move |p| ProduceData {
                topic: topic.clone(),
                partition: p.index,
                records: p.records.unwrap_or_default(),
            })
        })
        .collect();
    let req = shale_service::ProduceRequest {
        acks,
        timeout: (r.timeout_ms > 0).then(|| Duration::from_millis(r.timeout_ms as u64)),
        transactional_id: r
            .transactional_id
            .map(|t| t.0.to_string())
            .filter(|t| !t.is_empty()),
        partitions,
    };
    let answers = s.produce(ctx, req).await;
    if acks == 0 {
        return None;
    }
    let mut resp = ProduceResponse::default();
    for (topic, parts) in by_topic(answers) {
        let mut t = TopicProduceResponse::default();
        t.name = super::str(&topic).into();
        for k in parts {
            let mut p = PartitionProduceResponse::default();
            p.index = k.partition;
            p.error_code = code(&k.result);
            if version >= 8 {
                p.error_message = message(&k.result);
            }
            match &k.result {
                Ok(a) => {
                    p.base_offset = a.base_offset;
                    p.log_append_time_ms = a.log_append_time_ms;
                    p.log_start_offset = a.log_start_offset;
                }
                Err(_) => {
                    p.base_offset = -1;
                    p.log_append_time_ms = -1;
                    p.log_start_offset = -1;
                }
            }
            t.partition_responses.push(p);
        }
        resp.responses.push(t);
    }
    Some(resp)
}

pub async fn list_offsets(
    s: &Service,
    ctx: &RequestContext,
    r: ListOffsetsRequest,
) -> ListOffsetsResponse {
    let queries = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| OffsetQuery {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                timestamp: p.timestamp,
                // isolation_level 1 (v2+): read_committed.
                read_committed: r.isolation_level == 1,
            })
        })
        .collect();
    let answers = s.list_offsets(ctx, queries).await;
    let mut resp = ListOffsetsResponse::default();
    for (topic, parts) in by_topic(answers) {
        let mut t = ListOffsetsTopicResponse::default();
        t.name = super::str(&topic).into();
        for k in parts {
            let mut p = ListOffsetsPartitionResponse::default();
            p.partition_index = k.partition;
            p.error_code = code(&k.result);
            let found = k.result.ok().flatten();
            p.offset = found.map_or(-1, |f| f.offset);
            p.timestamp = found.map_or(-1, |f| f.timestamp);
            p.leader_epoch = -1;
            t.partitions.push(p);
        }
        resp.topics.push(t);
    }
    resp
}

pub async fn offset_for_leader_epoch(
    s: &Service,
    ctx: &RequestContext,
    r: OffsetForLeaderEpochRequest,
) -> OffsetForLeaderEpochResponse {
    let queries = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| EpochQuery {
                topic: t.topic.0.to_string(),
                partition: p.partition,
                current_leader_epoch: p.current_leader_epoch,
                leader_epoch: p.leader_epoch,
            })
        })
        .collect();
    let answers = s.offsets_for_leader_epochs(ctx, queries).await;
    let mut resp = OffsetForLeaderEpochResponse::default();
    for (topic, parts) in by_topic(answers) {
        let mut t = OffsetForLeaderTopicResult::default();
        t.topic = super::str(&topic).into();
        for k in parts {
            let mut p = EpochEndOffset::default();
            p.partition = k.partition;
            p.error_code = code(&k.result);
            let (epoch, end) = k.result.unwrap_or((-1, -1));
            p.leader_epoch = epoch;
            p.end_offset = end;
            t.partitions.push(p);
        }
        resp.topics.push(t);
    }
    resp
}

pub async fn delete_records(
    s: &Service,
    ctx: &RequestContext,
    r: DeleteRecordsRequest,
) -> DeleteRecordsResponse {
    let queries = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| DeleteRecordsQuery {
                topic: t.name.0.to_string(),
                partition: p.partition_index,
                offset: p.offset,
            })
        })
        .collect();
    let answers = s.delete_records(ctx, queries).await;
    let mut resp = DeleteRecordsResponse::default();
    for (topic, parts) in by_topic(answers) {
        let mut t = DeleteRecordsTopicResult::default();
        t.name = super::str(&topic).into();
        for k in parts {
            let mut p = DeleteRecordsPartitionResult::default();
            p.partition_index = k.partition;
            p.error_code = code(&k.result);
            p.low_watermark = k.result.unwrap_or(-1);
            t.partitions.push(p);
        }
        resp.topics.push(t);
    }
    resp
}

pub async fn init_producer_id(
    s: &Service,
    ctx: &RequestContext,
    r: InitProducerIdRequest,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    // An empty id is no transaction (as a null one).
    let transactional_id = r
        .transactional_id
        .map(|t| t.0.to_string())
        .filter(|t| !t.is_empty());
    let expected = (r.producer_id.0, r.producer_epoch);
    let result =
        (s.init_producer_id(ctx, transactional_id, r.transaction_timeout_ms, expected)).await;
    resp.error_code = code(&result);
    let (id, epoch) = result.unwrap_or((-1, -1));
    resp.producer_id = id.into();
    resp.producer_epoch = epoch;
    resp
}
