//! `/api/v1/groups`: consumer groups, their members and assignments, lag per
//! partition, and resetting a group's offsets (only while it has no members, as
//! Kafka's tool requires).

use std::collections::{BTreeMap, BTreeSet};

use axum::Json;
use axum::body::Bytes;
use axum::extract::Path;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use shale_broker::groups::OffsetCommit;
use shale_broker::service::{MemberRef, OffsetQuery};
use shale_records::ErrorCode;
use shale_records::consumer_protocol;

use crate::auth::Call;
use crate::{ApiError, ApiResult};

pub(crate) async fn list(s: Call) -> ApiResult<Json<Value>> {
    let groups = s.service.list_groups(&s.ctx()).await?;
    Ok(Json(json!({
        "groups": groups.iter().map(|g| json!({
            "group": g.group,
            "state": g.state,
            "members": g.members,
            "coordinator": g.coordinator,
            "protocol_type": g.protocol_type,
        })).collect::<Vec<_>>()
    })))
}

/// A member's assignment by topic, in the order the leader gave it; nothing for bytes
/// that are not a consumer-protocol assignment (a member of another protocol type).
fn assignment_by_topic(bytes: &[u8]) -> Vec<(String, Vec<i32>)> {
    let parts =
        consumer_protocol::decode_assignment(Bytes::copy_from_slice(bytes)).unwrap_or_default();
    let mut out: Vec<(String, Vec<i32>)> = Vec::new();
    for (topic, p) in parts {
        match out.iter_mut().find(|(t, _)| *t == topic) {
            Some((_, ps)) => ps.push(p),
            None => out.push((topic, vec![p])),
        }
    }
    out
}

async fn high_watermarks(s: &Call, topics: &BTreeSet<String>) -> BTreeMap<(String, i32), i64> {
    let mut out = BTreeMap::new();
    for t in topics {
        if let Ok(d) = s.service.describe_topic(&s.ctx(), t).await {
            for p in d.partitions {
                if let Some(o) = p.offsets {
                    out.insert((t.clone(), p.partition), o.high_watermark);
                }
            }
        }
    }
    out
}

pub(crate) async fn describe(s: Call, Path(group): Path<String>) -> ApiResult<Json<Value>> {
    let d = s.service.describe_group(&s.ctx(), &group).await?;
    let committed = s.service.fetch_offsets(&s.ctx(), &group).await?;
    if d.members.is_empty() && committed.is_empty() {
        return Err(ApiError::not_found(
            ErrorCode::GroupIdNotFound,
            format!("group '{group}' has no members and no committed offsets"),
        ));
    }
    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    let members: Vec<Value> = d
        .members
        .iter()
        .map(|m| {
            let assignment = assignment_by_topic(&m.assignment);
            for (t, parts) in &assignment {
                for p in parts {
                    owner.insert((t.clone(), *p), m.member_id.clone());
                }
            }
            json!({
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "assignment": assignment.iter().map(|(t, p)| json!({"topic": t, "partitions": p})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut keys: BTreeSet<(String, i32)> = owner.keys().cloned().collect();
    let offsets: BTreeMap<(String, i32), i64> = committed
        .iter()
        .map(|c| ((c.topic.clone(), c.partition), c.offset))
        .collect();
    keys.extend(offsets.keys().cloned());
    let topics: BTreeSet<String> = keys.iter().map(|(t, _)| t.clone()).collect();
    let hws = high_watermarks(&s, &topics).await;
    let mut total = 0i64;
    let partitions: Vec<Value> = keys
        .iter()
        .map(|k| {
            let (committed, end) = (offsets.get(k).copied(), hws.get(k).copied());
            let lag = match (committed, end) {
                (Some(c), Some(e)) => Some((e - c).max(0)),
                _ => None,
            };
            total += lag.unwrap_or(0);
            json!({
                "topic": k.0, "partition": k.1, "committed_offset": committed,
                "high_watermark": end, "lag": lag, "member_id": owner.get(k),
            })
        })
        .collect();
    Ok(Json(json!({
        "group": group,
        "state": d.state.name(),
        "protocol_type": d.protocol_type,
        "protocol": d.protocol,
        "generation": d.generation,
        "leader": d.leader,
        "members": members,
        "partitions": partitions,
        "total_lag": total,
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Reset {
    /// `earliest`, `latest`, `offset` or `timestamp`.
    to: String,
    offset: Option<i64>,
    timestamp: Option<i64>,
    /// Only this topic's partitions (default: every partition the group has an
    /// offset for; with a topic, all of its partitions).
    topic: Option<String>,
}

pub(crate) async fn reset_offsets(
    s: Call,
    Path(group): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let req: Reset = crate::body(raw)?;
    let query = match (req.to.as_str(), req.offset, req.timestamp) {
        ("earliest", _, _) => -2,
        ("latest", _, _) => -1,
        ("timestamp", _, Some(ts)) if ts >= 0 => ts,
        ("timestamp", _, _) => {
            return Err(ApiError::param(
                "timestamp",
                "a time in ms >= 0 is required",
            ));
        }
        ("offset", Some(o), _) if o >= 0 => -100,
        ("offset", _, _) => return Err(ApiError::param("offset", "an offset >= 0 is required")),
        (other, _, _) => {
            return Err(ApiError::param(
                "to",
                format!("'{other}' is not one of earliest, latest, offset, timestamp"),
            ));
        }
    };
    let d = s.service.describe_group(&s.ctx(), &group).await?;
    if !d.members.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            ErrorCode::NonEmptyGroup.to_string(),
            format!(
                "group '{group}' has {} members (state {}): stop its consumers before resetting its offsets",
                d.members.len(),
                d.state.name()
            ),
        ));
    }
    let committed = s.service.fetch_offsets(&s.ctx(), &group).await?;
    let mut partitions: BTreeSet<(String, i32)> = match &req.topic {
        Some(t) => {
            let d = s.service.describe_topic(&s.ctx(), t).await?;
            (0..d.topic.partitions).map(|p| (t.clone(), p)).collect()
        }
        None => committed
            .iter()
            .map(|c| (c.topic.clone(), c.partition))
            .collect(),
    };
    if partitions.is_empty() {
        return Err(ApiError::not_found(
            ErrorCode::GroupIdNotFound,
            format!("group '{group}' has no committed offsets: name a topic"),
        ));
    }
    let mut plan = Vec::new();
    for (t, p) in std::mem::take(&mut partitions) {
        let at = |ts: i64| OffsetQuery {
            topic: t.clone(),
            partition: p,
            timestamp: ts,
        };
        let mut found = s
            .service
            .list_offsets(&s.ctx(), vec![at(-2), at(-1), at(query.max(-2))])
            .await
            .into_iter()
            .map(|k| k.result.map(|o| o.map(|o| o.offset)));
        let earliest = found.next().expect("three answers")?.unwrap_or(0);
        let latest = found.next().expect("three answers")?.unwrap_or(0);
        let chosen = found.next().expect("three answers")?;
        let offset = match req.to.as_str() {
            "offset" => req.offset.unwrap_or(0).clamp(earliest, latest),
            "timestamp" => chosen.unwrap_or(latest),
            "earliest" => earliest,
            _ => latest,
        };
        plan.push(OffsetCommit {
            topic: t,
            partition: p,
            offset,
            metadata: String::new(),
        });
    }
    let shown: Vec<Value> = plan
        .iter()
        .map(|c| json!({"topic": c.topic, "partition": c.partition, "offset": c.offset}))
        .collect();
    let results = s
        .service
        .commit_offsets(&s.ctx(), &group, -1, MemberRef::id(""), plan)
        .await?;
    for r in results {
        r.result?;
    }
    Ok(Json(json!({ "group": group, "offsets": shown })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assignments_group_by_topic_and_garbage_gives_nothing() {
        let mut b = vec![0, 1, 0, 0, 0, 1, 0, 4];
        b.extend_from_slice(b"logs");
        b.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0]);
        assert_eq!(
            assignment_by_topic(&b),
            vec![("logs".to_string(), vec![0, 3])]
        );
        assert!(assignment_by_topic(&b[..9]).is_empty());
        assert!(assignment_by_topic(&[]).is_empty());
        assert!(assignment_by_topic(&[0, 0, 0x7f, 0xff, 0xff, 0xff]).is_empty());
    }
}
