//! Records by key (`FindRecords`): every live broker searches the partitions it
//! leads, through the segments' key filters; the answers are merged.

use std::sync::Arc;

use bytes::Bytes;
use shale_proto::v1::admin_client::AdminClient;
use shale_proto::v1::{FindRecordsRequest, FindRecordsResponse};

use crate::{Client, ConsumedRecord, Result, check_result};

/// What a lookup found across the cluster, and what it cost.
#[derive(Debug, Default)]
pub struct FindAnswer {
    /// By partition, then offset.
    pub records: Vec<ConsumedRecord>,
    pub truncated: bool,
    pub segments_searched: i64,
    pub segments_skipped: i64,
    pub segments_matched: i64,
    pub segments_without_filter: i64,
    pub remote_gets: i64,
    pub bytes_read: i64,
    /// Partitions no live broker searched (no leader now).
    pub partitions_not_searched: Vec<i32>,
}

impl Client {
    /// Every record with `key` in `topic` with a timestamp in `[from_time, to_time]`
    /// (ms; `None`: unbounded), at most `limit` per broker.
    pub async fn find_records(
        &self,
        topic: &str,
        key: Bytes,
        from_time: Option<i64>,
        to_time: Option<i64>,
        limit: i32,
    ) -> Result<FindAnswer> {
        let req = FindRecordsRequest {
            topic: topic.to_string(),
            key,
            from_time,
            to_time,
            limit,
        };
        let brokers = self.cluster_status().await?.brokers;
        let mut answers: Vec<FindRecordsResponse> = Vec::new();
        for b in brokers.iter().filter(|b| b.alive) {
            let mut admin = AdminClient::new(self.channel(&b.address)?);
            let r = admin.find_records(req.clone()).await?.into_inner();
            check_result(r.error.clone())?;
            answers.push(r);
        }
        let topic: Arc<str> = topic.into();
        let mut out = FindAnswer::default();
        let mut not_led: Option<std::collections::BTreeSet<i32>> = None;
        for r in answers {
            out.truncated |= r.truncated;
            out.segments_searched += r.segments_searched;
            out.segments_skipped += r.segments_skipped;
            out.segments_matched += r.segments_matched;
            out.segments_without_filter += r.segments_without_filter;
            out.remote_gets += r.remote_gets;
            out.bytes_read += r.bytes_read;
            let mine: std::collections::BTreeSet<i32> = r.partitions_not_led.into_iter().collect();
            not_led = Some(match not_led {
                None => mine,
                Some(before) => before.intersection(&mine).copied().collect(),
            });
            out.records
                .extend(r.records.into_iter().map(|f| ConsumedRecord {
                    topic: topic.clone(),
                    partition: f.partition,
                    offset: f.offset,
                    timestamp: f.timestamp,
                    key: f.key,
                    value: f.value,
                    headers: f.headers.into_iter().map(|h| (h.key, h.value)).collect(),
                }));
        }
        out.records.sort_by_key(|r| (r.partition, r.offset));
        out.records.dedup_by_key(|r| (r.partition, r.offset));
        out.partitions_not_searched = not_led.unwrap_or_default().into_iter().collect();
        Ok(out)
    }
}
