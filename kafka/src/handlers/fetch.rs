//! Fetch: topics by name (v4–12) or by id (v13–17, KIP-516), whole or in an
//! incremental fetch session (v7+, KIP-227).

use std::time::Duration;

use kafka_protocol::messages::FetchRequest;
use shale_broker::fetch::{FetchSpec, ReadFrom};
use shale_records::ErrorCode;
use shale_service::{RequestContext, Service};

use super::code;
use crate::fetch_response::{FetchAnswer, PartitionAnswer, TopicAnswer};
use crate::fetch_session::{self, FetchSessions, Key, Outcome, Plan, Wanted};

pub async fn fetch(
    s: &Service,
    ctx: &RequestContext,
    r: FetchRequest,
    version: i16,
    sessions: &FetchSessions,
    zero_copy: bool,
) -> FetchAnswer {
    // v13+ name topics by id: a session keeps ids, and their names are looked up
    // at every request (so a topic this broker learns of later is read once it knows
    // it, and a topic re-created under the same name is not read under the old id).
    let by_id = version >= 13;
    let key = |name: &str, id: uuid::Uuid, partition: i32| -> Key {
        if by_id {
            (id, String::new(), partition)
        } else {
            (uuid::Uuid::nil(), name.to_string(), partition)
        }
    };
    let partitions: Vec<(Key, Wanted)> = r
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(|p| {
                let wanted = Wanted {
                    offset: p.fetch_offset,
                    max_bytes: p.partition_max_bytes,
                    current_leader_epoch: p.current_leader_epoch,
                };
                (key(&t.topic.0, t.topic_id, p.partition), wanted)
            })
        })
        .collect();
    let plan = if version >= 7 {
        let forgotten = r
            .forgotten_topics_data
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| key(&t.topic.0, t.topic_id, p)))
            .collect();
        sessions.plan(fetch_session::Request {
            session_id: r.session_id,
            epoch: r.session_epoch,
            partitions,
            forgotten,
        })
    } else {
        Plan::Full {
            session_id: 0,
            partitions,
        }
    };
    let (session_id, partitions, incremental) = match plan {
        Plan::Refuse(error) => {
            return FetchAnswer {
                error_code: error as i16,
                ..FetchAnswer::default()
            };
        }
        Plan::Full {
            session_id,
            partitions,
        } => (session_id, partitions, false),
        Plan::Incremental {
            session_id,
            partitions,
        } => (session_id, partitions, true),
    };
    let names = if by_id {
        s.topic_names(partitions.iter().map(|((id, _, _), _)| *id))
    } else {
        Default::default()
    };
    // An id this broker does not know is answered UNKNOWN_TOPIC_ID, unread.
    let name_of = |(id, name, _): &Key| -> Option<String> {
        if by_id {
            names.get(id).cloned()
        } else {
            Some(name.clone())
        }
    };
    let specs = partitions
        .iter()
        .filter_map(|(k, w)| Some((name_of(k)?, k.2, w)))
        .map(|(name, partition, w)| FetchSpec {
            topic: name,
            partition,
            offset: w.offset,
            max_bytes: w.max_bytes,
            current_leader_epoch: w.current_leader_epoch,
        })
        .collect();
    let req = shale_service::FetchRequest {
        partitions: specs,
        client_honors_throttle: version >= 8,
        max_wait: Duration::from_millis(r.max_wait_ms.max(0) as u64),
        min_bytes: r.min_bytes,
        max_bytes: if version >= 3 { r.max_bytes } else { i32::MAX },
        // KIP-392: from v11 a consumer naming its rack reads from the replica nearest
        // it (others, and older versions, from leaders).
        read_from: match (version >= 11, r.rack_id.as_str()) {
            (true, rack) if !rack.is_empty() => ReadFrom::Nearest {
                rack: rack.to_string(),
                listener: ctx.listener.to_string(),
            },
            _ => ReadFrom::Leader,
        },
        zero_copy,
        // isolation_level 1 (v4+): read_committed.
        read_committed: r.isolation_level == 1,
    };
    let answer = s.fetch(ctx, req).await;
    let mut read = answer.partitions.into_iter();
    let mut out = FetchAnswer {
        session_id,
        throttle: answer.throttle,
        ..FetchAnswer::default()
    };
    for (key, _) in partitions {
        let name = name_of(&key);
        let p = if name.is_none() {
            unanswered(key.2, ErrorCode::UnknownTopicId)
        } else {
            match read.next() {
                Some(k) => answer_of(k.partition, k.result),
                // The service answers every partition it is given.
                None => unanswered(key.2, ErrorCode::UnknownServerError),
            }
        };
        let outcome = Outcome {
            error_code: p.error_code,
            has_records: !p.records.is_empty(),
            high_watermark: p.high_watermark,
            last_stable_offset: p.last_stable_offset,
            log_start_offset: p.log_start_offset,
            preferred_read_replica: p.preferred_read_replica,
        };
        let news = session_id == 0 || sessions.news(session_id, &key, &outcome);
        if incremental && !news {
            continue;
        }
        let name = name.unwrap_or_default();
        match out.topics.last_mut() {
            Some(t) if t.id == key.0 && t.name == name => t.partitions.push(p),
            _ => out.topics.push(TopicAnswer {
                name,
                id: key.0,
                partitions: vec![p],
            }),
        }
    }
    out
}

fn answer_of(
    partition: i32,
    result: shale_broker::error::Result<shale_broker::fetch::Fetched>,
) -> PartitionAnswer {
    let error_code = code(&result);
    match result {
        Ok(f) => PartitionAnswer {
            index: partition,
            error_code,
            high_watermark: f.offsets.high_watermark,
            last_stable_offset: f.offsets.last_stable_offset,
            log_start_offset: f.offsets.log_start_offset,
            preferred_read_replica: f.preferred_read_replica.unwrap_or(-1),
            aborted: (f.aborted.iter())
                .map(|a| (a.producer_id, a.first_offset))
                .collect(),
            records: f.records,
        },
        Err(_) => PartitionAnswer {
            index: partition,
            error_code,
            ..unanswered(partition, ErrorCode::None)
        },
    }
}

fn unanswered(partition: i32, error: ErrorCode) -> PartitionAnswer {
    PartitionAnswer {
        index: partition,
        error_code: error as i16,
        high_watermark: -1,
        last_stable_offset: -1,
        log_start_offset: -1,
        preferred_read_replica: -1,
        aborted: Vec::new(),
        records: Default::default(),
    }
}
