//! Records for people: `GET .../partitions/{p}/records` reads a few records from an
//! offset or a time (local or remote), `GET .../find` finds a key's records through
//! the segments' key filters. Keys, values and header values are shown as asked:
//! `utf8`, `json` or `hex`; bytes that are not valid UTF-8 (or JSON) are shown as hex,
//! never refused.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query};
use serde_json::{Value, json};
use shale_broker::find::FindQuery;
use shale_records::record::Record;
use shale_service::{MAX_RECORDS_PER_READ, ReadFrom};

use crate::auth::Call;
use crate::{ApiError, ApiResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    Utf8,
    Json,
    Hex,
}

impl Format {
    fn parse(q: &BTreeMap<String, String>) -> ApiResult<Self> {
        match q.get("format").map(String::as_str) {
            None | Some("utf8") => Ok(Self::Utf8),
            Some("json") => Ok(Self::Json),
            Some("hex") => Ok(Self::Hex),
            Some(other) => Err(ApiError::param(
                "format",
                format!("'{other}' is not one of utf8, json, hex"),
            )),
        }
    }
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Bytes as asked, falling back to hex: `{"encoding": .., "data": ..}` (null for null).
pub(crate) fn render(b: Option<&[u8]>, format: Format) -> Value {
    let Some(b) = b else { return Value::Null };
    let as_hex = || json!({ "encoding": "hex", "data": hex(b) });
    match format {
        Format::Hex => as_hex(),
        Format::Json => match serde_json::from_slice::<Value>(b) {
            Ok(v) => json!({ "encoding": "json", "data": v }),
            Err(_) => match std::str::from_utf8(b) {
                Ok(s) => json!({ "encoding": "utf8", "data": s }),
                Err(_) => as_hex(),
            },
        },
        Format::Utf8 => match std::str::from_utf8(b) {
            Ok(s) => json!({ "encoding": "utf8", "data": s }),
            Err(_) => as_hex(),
        },
    }
}

fn record_json(r: &Record, partition: i32, format: Format) -> Value {
    json!({
        "partition": partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": render(r.key.as_deref(), format),
        "value": render(r.value.as_deref(), format),
        "headers": r.headers.iter().map(|(k, v)| json!({ "key": k, "value": render(v.as_deref(), format) })).collect::<Vec<_>>(),
    })
}

fn int_param(q: &BTreeMap<String, String>, name: &str) -> ApiResult<Option<i64>> {
    q.get(name)
        .map(|v| {
            v.parse::<i64>()
                .map_err(|_| ApiError::param(name, format!("'{v}' is not an integer")))
        })
        .transpose()
}

fn count_param(q: &BTreeMap<String, String>, name: &str, default: usize) -> ApiResult<usize> {
    match int_param(q, name)? {
        None => Ok(default),
        Some(n) if n >= 1 && n as usize <= MAX_RECORDS_PER_READ => Ok(n as usize),
        Some(n) => Err(ApiError::param(
            name,
            format!("{n} is not between 1 and {MAX_RECORDS_PER_READ}"),
        )),
    }
}

/// `?offset=N` or `?timestamp=MS` (neither: the log start), `count` (default 20),
/// `format`.
pub(crate) async fn read(
    s: Call,
    Path((topic, partition)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let partition: i32 = partition.parse().map_err(|_| {
        ApiError::param(
            "partition",
            format!("'{partition}' is not a partition number"),
        )
    })?;
    let format = Format::parse(&q)?;
    let count = count_param(&q, "count", 20)?;
    let from = match (int_param(&q, "offset")?, int_param(&q, "timestamp")?) {
        (Some(_), Some(_)) => {
            return Err(ApiError::param(
                "timestamp",
                "give offset or timestamp, not both",
            ));
        }
        (Some(o), None) if o < 0 => {
            return Err(ApiError::param("offset", "must be >= 0"));
        }
        (Some(o), None) => ReadFrom::Offset(o),
        (None, Some(t)) if t < 0 => {
            return Err(ApiError::param(
                "timestamp",
                "must be >= 0 (ms since the Unix epoch)",
            ));
        }
        (None, Some(t)) => ReadFrom::Timestamp(t),
        (None, None) => ReadFrom::Offset(-1),
    };
    let from = match from {
        ReadFrom::Offset(-1) => {
            let d = s.service.describe_topic(&s.ctx(), &topic).await?;
            let start = d
                .partitions
                .iter()
                .find(|p| p.partition == partition)
                .and_then(|p| p.offsets)
                .map_or(0, |o| o.log_start_offset);
            ReadFrom::Offset(start)
        }
        other => other,
    };
    let r = s
        .service
        .read_records(&s.ctx(), &topic, partition, from, count)
        .await?;
    Ok(Json(json!({
        "topic": topic,
        "partition": partition,
        "log_start_offset": r.offsets.log_start_offset,
        "local_log_start_offset": r.offsets.local_log_start_offset,
        "high_watermark": r.offsets.high_watermark,
        "next_offset": r.next_offset,
        "records": r.records.iter().map(|rec| record_json(rec, partition, format)).collect::<Vec<_>>(),
    })))
}

/// `?key=K` (`key_encoding=utf8|hex`), `from_time`, `to_time` (ms), `limit`
/// (default 100), `format`.
pub(crate) async fn find(
    s: Call,
    Path(topic): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> ApiResult<Json<Value>> {
    let format = Format::parse(&q)?;
    let raw = q
        .get("key")
        .ok_or_else(|| ApiError::param("key", "is required"))?;
    let key = match q.get("key_encoding").map(String::as_str) {
        None | Some("utf8") => raw.as_bytes().to_vec(),
        Some("hex") => unhex(raw).ok_or_else(|| ApiError::param("key", "is not hex"))?,
        Some(other) => {
            return Err(ApiError::param(
                "key_encoding",
                format!("'{other}' is not one of utf8, hex"),
            ));
        }
    };
    let (from_time, to_time) = (int_param(&q, "from_time")?, int_param(&q, "to_time")?);
    if let (Some(f), Some(t)) = (from_time, to_time)
        && f > t
    {
        return Err(ApiError::param("to_time", "is before from_time"));
    }
    let limit = count_param(&q, "limit", 100)?;
    let r = s
        .service
        .find_records(
            &s.ctx(),
            FindQuery {
                topic: topic.clone(),
                key: key.into(),
                from_time,
                to_time,
                limit,
            },
        )
        .await?;
    Ok(Json(json!({
        "topic": topic,
        "records": r.records.iter().map(|f| record_json(&f.record, f.partition, format)).collect::<Vec<_>>(),
        "truncated": r.truncated,
        "segments_searched": r.segments_searched,
        "segments_skipped": r.segments_skipped,
        "segments_matched": r.segments_matched,
        "segments_without_filter": r.segments_without_filter,
        "remote_gets": r.remote_gets,
        "bytes_read": r.bytes_read,
        "partitions_not_led": r.partitions_not_led,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_render_as_asked_and_fall_back_to_hex() {
        assert_eq!(
            render(Some(b"hi"), Format::Utf8),
            json!({"encoding": "utf8", "data": "hi"})
        );
        assert_eq!(
            render(Some(&[0xff, 0]), Format::Utf8),
            json!({"encoding": "hex", "data": "ff00"})
        );
        assert_eq!(
            render(Some(br#"{"a":1}"#), Format::Json),
            json!({"encoding": "json", "data": {"a": 1}})
        );
        assert_eq!(
            render(Some(b"{no"), Format::Json),
            json!({"encoding": "utf8", "data": "{no"})
        );
        assert_eq!(
            render(Some(&[0xc3]), Format::Json),
            json!({"encoding": "hex", "data": "c3"})
        );
        assert_eq!(
            render(Some(b"hi"), Format::Hex),
            json!({"encoding": "hex", "data": "6869"})
        );
        assert_eq!(render(None, Format::Hex), Value::Null);
        assert_eq!(unhex("6869"), Some(b"hi".to_vec()));
        assert_eq!(unhex("686"), None);
        assert_eq!(unhex("zz"), None);
    }
}
