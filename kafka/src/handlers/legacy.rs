//! The answers to request versions the codec no longer reads (see `crate::legacy`):
//! the usual handler serves the request, and its answer is written here in the old
//! layout. Produce's message sets are converted up to RecordBatch v2 before they are
//! written, and Fetch's records down to the message format the version reads (0–1:
//! magic 0, 2–3: magic 1), as Kafka 3.x does; they count their records in
//! `shale_produce_message_conversions_total` and
//! `shale_fetch_message_conversions_total`.

use std::collections::HashMap;
use std::sync::Arc;

use kafka_protocol::messages::*;
use shale_broker::stats::RequestStats;
use shale_records::ErrorCode;
use shale_records::batch::BatchError;
use shale_service::{RequestContext, Service};

use super::Reply;
use crate::fetch_session::FetchSessions;
use crate::legacy::Writer;

/// Serves a legacy request (already read into the codec's message).
pub async fn handle(
    s: &Service,
    ctx: &RequestContext,
    kind: RequestKind,
    v: i16,
    id: i32,
    sessions: &Arc<FetchSessions>,
) -> Reply {
    let mut w = Writer::default();
    match kind {
        RequestKind::Produce(r) => return produce(s, ctx, r, v, id).await,
        RequestKind::Fetch(r) => {
            // Records below the offset asked for (the rest of its batch) are left out.
            let from: HashMap<(String, i32), i64> = r
                .topics
                .iter()
                .flat_map(|t| {
                    let name = t.topic.0.to_string();
                    t.partitions
                        .iter()
                        .map(move |p| ((name.clone(), p.partition), p.fetch_offset))
                })
                .collect();
            let answer = super::fetch::fetch(s, ctx, r, v, sessions, false).await;
            if v >= 1 {
                w.i32(answer.throttle.as_millis().min(i32::MAX as u128) as i32);
            }
            let magic = if v >= 2 { 1 } else { 0 };
            let mut converted = 0;
            w.count(answer.topics.len());
            for t in &answer.topics {
                w.string(&t.name).count(t.partitions.len());
                for p in &t.partitions {
                    let from = from.get(&(t.name.clone(), p.index)).copied().unwrap_or(0);
                    // Not a zero-copy fetch: the records are in memory.
                    let records = p.records.clone().into_bytes().unwrap_or_default();
                    let (set, n) = shale_records::legacy::to_message_set(records, magic, from);
                    converted += n as u64;
                    w.i32(p.index)
                        .i16(p.error_code)
                        .i64(p.high_watermark)
                        .bytes(&set);
                }
            }
            let stats = &s.broker().stats().requests;
            RequestStats::add(&stats.fetch_message_conversions, converted);
        }
        RequestKind::ListOffsets(r) => {
            let resp = super::data::list_offsets(s, ctx, r).await;
            w.count(resp.topics.len());
            for t in &resp.topics {
                w.string(&t.name.0).count(t.partitions.len());
                for p in &t.partitions {
                    w.i32(p.partition_index).i16(p.error_code);
                    // One offset, as Kafka answers v0 (none where there is none).
                    let one = p.error_code == 0 && p.offset >= 0;
                    w.count(usize::from(one));
                    if one {
                        w.i64(p.offset);
                    }
                }
            }
        }
        RequestKind::OffsetCommit(r) => {
            let resp = super::groups::offset_commit(s, ctx, r).await;
            w.count(resp.topics.len());
            for t in &resp.topics {
                w.string(&t.name.0).count(t.partitions.len());
                for p in &t.partitions {
                    w.i32(p.partition_index).i16(p.error_code);
                }
            }
        }
        RequestKind::OffsetFetch(r) => {
            // v0's answer is v1's.
            let resp = super::groups::offset_fetch(s, ctx, r, 1).await;
            return super::reply(crate::frame::encode(ApiKey::OffsetFetch, 1, id, &resp));
        }
        RequestKind::DeleteTopics(r) => {
            let resp = super::admin::delete_topics(s, ctx, r).await;
            w.count(resp.responses.len());
            for t in &resp.responses {
                let name = t.name.as_ref().map(|n| n.0.as_str()).unwrap_or_default();
                w.string(name).i16(t.error_code);
            }
        }
        RequestKind::CreateTopics(r) => {
            let resp = super::admin::create_topics(s, ctx, r, 2).await;
            w.count(resp.topics.len());
            for t in &resp.topics {
                w.string(&t.name.0).i16(t.error_code);
                if v >= 1 {
                    w.nullable_string(t.error_message.as_deref());
                }
            }
        }
        RequestKind::DescribeConfigs(r) => {
            let resp = super::admin::describe_configs(s, ctx, r).await;
            w.i32(resp.throttle_time_ms).count(resp.results.len());
            for r in &resp.results {
                w.i16(r.error_code)
                    .nullable_string(r.error_message.as_deref())
                    .i8(r.resource_type)
                    .string(&r.resource_name)
                    .count(r.configs.len());
                for c in &r.configs {
                    // v0 says whether a value is the default (source DEFAULT_CONFIG).
                    w.string(&c.name)
                        .nullable_string(c.value.as_deref())
                        .bool(c.read_only)
                        .bool(c.config_source == 5)
                        .bool(c.is_sensitive);
                }
            }
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            let resp = super::data::offset_for_leader_epoch(s, ctx, r).await;
            w.count(resp.topics.len());
            for t in &resp.topics {
                w.string(&t.topic.0).count(t.partitions.len());
                for p in &t.partitions {
                    w.i16(p.error_code).i32(p.partition);
                    if v >= 1 {
                        w.i32(p.leader_epoch);
                    }
                    w.i64(p.end_offset);
                }
            }
        }
        RequestKind::CreateAcls(r) => {
            // v0's answer is v1's.
            let resp = super::acls::create(s, ctx, r).await;
            return super::reply(crate::frame::encode(ApiKey::CreateAcls, 1, id, &resp));
        }
        RequestKind::DescribeAcls(r) => {
            let resp = super::acls::describe(s, ctx, r).await;
            w.i32(resp.throttle_time_ms)
                .i16(resp.error_code)
                .nullable_string(resp.error_message.as_deref())
                .count(resp.resources.len());
            for res in &resp.resources {
                w.i8(res.resource_type)
                    .string(&res.resource_name)
                    .count(res.acls.len());
                for a in &res.acls {
                    w.string(&a.principal)
                        .string(&a.host)
                        .i8(a.operation)
                        .i8(a.permission_type);
                }
            }
        }
        RequestKind::DeleteAcls(r) => {
            let resp = super::acls::delete(s, ctx, r).await;
            w.i32(resp.throttle_time_ms)
                .count(resp.filter_results.len());
            for f in &resp.filter_results {
                w.i16(f.error_code)
                    .nullable_string(f.error_message.as_deref())
                    .count(f.matching_acls.len());
                for a in &f.matching_acls {
                    w.i16(a.error_code)
                        .nullable_string(a.error_message.as_deref())
                        .i8(a.resource_type)
                        .string(&a.resource_name)
                        .string(&a.principal)
                        .string(&a.host)
                        .i8(a.operation)
                        .i8(a.permission_type);
                }
            }
        }
        _ => return Reply::Close,
    }
    Reply::Send(w.frame(id))
}

/// Produce v0–2: each partition's message set is converted to one RecordBatch v2
/// and written as usual; a set that does not convert (bad CRC, truncated, an unknown
/// codec) is answered CORRUPT_MESSAGE and nothing of it is written.
async fn produce(
    s: &Service,
    ctx: &RequestContext,
    mut r: ProduceRequest,
    v: i16,
    id: i32,
) -> Reply {
    let now = shale_broker::clock::now_ms();
    let mut refused: HashMap<(String, i32), ErrorCode> = HashMap::new();
    let mut converted = 0u64;
    let order: Vec<(String, Vec<i32>)> = r
        .topic_data
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.partition_data.iter().map(|p| p.index).collect(),
            )
        })
        .collect();
    for t in &mut r.topic_data {
        t.partition_data.retain_mut(|p| {
            let set = p.records.take().unwrap_or_default();
            match shale_records::legacy::to_batch(&set, now) {
                Ok((batch, n)) => {
                    converted += n as u64;
                    p.records = Some(batch);
                    true
                }
                Err(e) => {
                    tracing::debug!(error = %e, "an old-format message set does not convert");
                    let code = match e {
                        BatchError::UnsupportedCompression(_) => {
                            ErrorCode::UnsupportedCompressionType
                        }
                        // RecordBatch v2 needs Produce v3+ (Kafka's rule).
                        BatchError::UnsupportedMagic(_) => ErrorCode::InvalidRecord,
                        _ => ErrorCode::CorruptMessage,
                    };
                    refused.insert((t.name.0.to_string(), p.index), code);
                    false
                }
            }
        });
    }
    RequestStats::add(
        &s.broker().stats().requests.produce_message_conversions,
        converted,
    );
    let acks = r.acks;
    let resp = super::data::produce(s, ctx, r, v).await;
    if acks == 0 {
        return Reply::Nothing;
    }
    let mut answers: HashMap<(String, i32), (i16, i64, i64)> = HashMap::new();
    for t in resp.iter().flat_map(|r| &r.responses) {
        for p in &t.partition_responses {
            let key = (t.name.0.to_string(), p.index);
            answers.insert(key, (p.error_code, p.base_offset, p.log_append_time_ms));
        }
    }
    let mut w = Writer::default();
    w.count(order.len());
    for (topic, partitions) in order {
        w.string(&topic).count(partitions.len());
        for index in partitions {
            let key = (topic.clone(), index);
            let (error, base, append) = match refused.get(&key) {
                Some(code) => (*code as i16, -1, -1),
                None => answers.get(&key).copied().unwrap_or((
                    ErrorCode::UnknownServerError as i16,
                    -1,
                    -1,
                )),
            };
            w.i32(index).i16(error).i64(base);
            if v >= 2 {
                w.i64(append);
            }
        }
    }
    if v >= 1 {
        w.i32(0); // throttle time
    }
    Reply::Send(w.frame(id))
}
