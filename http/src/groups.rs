//! `/api/v1/groups`: consumer groups, their members and assignments, lag per
//! partition, and resetting a group's offsets (only while it has no members, as
//! Kafka's tool requires).

use axum::Json;
use axum::body::Bytes;
use axum::extract::Path;
use axum::extract::rejection::BytesRejection;
use serde::Deserialize;
use serde_json::{Value, json};
use shale_records::consumer_protocol;
use shale_service::{ResetScope, ResetTo};

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

pub(crate) async fn describe(s: Call, Path(group): Path<String>) -> ApiResult<Json<Value>> {
    let lag = s.service.group_lag(&s.ctx(), &group).await?;
    let d = &lag.group;
    let members: Vec<Value> = d
        .members
        .iter()
        .map(|m| {
            let assignment = assignment_by_topic(&m.assignment);
            json!({
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "assignment": assignment.iter().map(|(t, p)| json!({"topic": t, "partitions": p})).collect::<Vec<_>>(),
            })
        })
        .collect();
    let partitions: Vec<Value> = lag
        .partitions
        .iter()
        .map(|p| {
            json!({
                "topic": p.topic, "partition": p.partition, "committed_offset": p.committed_offset,
                "high_watermark": p.high_watermark, "lag": p.lag, "member_id": p.member_id,
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
        "total_lag": lag.total_lag,
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

/// Resets a group's offsets; offsets outside the log are moved to its nearest end.
pub(crate) async fn reset_offsets(
    s: Call,
    Path(group): Path<String>,
    raw: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<Value>> {
    let req: Reset = crate::body(raw)?;
    let to = match (req.to.as_str(), req.offset, req.timestamp) {
        ("earliest", _, _) => ResetTo::Earliest,
        ("latest", _, _) => ResetTo::Latest,
        ("timestamp", _, Some(ts)) if ts >= 0 => ResetTo::Time(ts),
        ("timestamp", _, _) => {
            return Err(ApiError::param(
                "timestamp",
                "a time in ms >= 0 is required",
            ));
        }
        ("offset", Some(o), _) if o >= 0 => ResetTo::Offset(o),
        ("offset", _, _) => return Err(ApiError::param("offset", "an offset >= 0 is required")),
        (other, _, _) => {
            return Err(ApiError::param(
                "to",
                format!("'{other}' is not one of earliest, latest, offset, timestamp"),
            ));
        }
    };
    let scope = match req.topic {
        Some(t) => ResetScope::Topics(vec![t]),
        None => ResetScope::Committed,
    };
    let plan = s
        .service
        .reset_offsets(&s.ctx(), &group, scope, to, true, true)
        .await?;
    let shown: Vec<Value> = plan
        .iter()
        .map(|c| json!({"topic": c.topic, "partition": c.partition, "offset": c.offset}))
        .collect();
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
