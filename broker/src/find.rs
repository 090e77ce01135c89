//! Records by key: every record with a given key in a topic, within a time range,
//! without reading the whole log. Each sealed segment has a key filter (local:
//! `.keys` beside it; remote: in the `.indexes` object, fetched once and cached); a segment
//! whose filter rules the key out, or whose time range misses the query's, is skipped
//! unread. Only the segments that may hold the key are read (remote ones through the
//! read cache, chunk by chunk), and the active segment, which has no filter yet.
//! Segments sealed or copied before filters existed have none and are read too.

use std::sync::Arc;

use bytes::Bytes;
use shale_records::batch::BatchIter;
use shale_records::keyfilter::KeyFilter;
use shale_records::record::{Record, decode_records};

use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::partition::Partition;

/// Bytes read at a time while a segment is read.
const READ_BYTES: usize = 4 << 20;
/// Remote key filters fetched at once (within the reader's own GET limit).
const FILTER_FETCHES: usize = 16;

#[derive(Debug, Clone)]
pub struct FindQuery {
    pub topic: String,
    pub key: Bytes,
    /// Records with timestamps in `[from_time, to_time]` (ms; `None`: unbounded).
    pub from_time: Option<i64>,
    pub to_time: Option<i64>,
    /// At most this many records are returned, in partition then offset order (the
    /// lookup stops at the limit).
    pub limit: usize,
}

#[derive(Debug, Clone)]
pub struct FoundRecord {
    pub partition: i32,
    pub record: Record,
}

/// What a lookup found, and what it cost.
#[derive(Debug, Clone, Default)]
pub struct FindReport {
    pub records: Vec<FoundRecord>,
    /// Segments in the searched partitions (local, remote and active).
    pub segments_searched: u64,
    /// Skipped unread: their filter or time range rules the key out.
    pub segments_skipped: u64,
    /// Read because they have no filter (the active segment, older segments).
    pub segments_without_filter: u64,
    /// Read because their filter matched (a match or a false positive).
    pub segments_matched: u64,
    /// Requests this broker made to the object store during the lookup (all of its
    /// remote reads in that time, this lookup's and any other's).
    pub remote_gets: u64,
    pub bytes_read: u64,
    /// More records matched than `limit` (or than a page of bytes holds).
    pub truncated: bool,
    /// Bytes of the records returned (keys, values, headers).
    pub record_bytes: usize,
    /// Partitions this broker does not lead, so did not search.
    pub partitions_not_led: Vec<i32>,
}

/// One piece of a partition's log the lookup considers.
struct Piece {
    /// First and last offset to read.
    from: i64,
    to: i64,
    max_timestamp: i64,
    filter: Filter,
}

enum Filter {
    None,
    Local(shale_log::SealedSegmentInfo),
    Remote(shale_metastore::RemoteSegment),
}

impl Broker {
    pub async fn find_records(&self, q: &FindQuery) -> Result<FindReport> {
        let state = self
            .topics_snapshot()
            .into_iter()
            .find(|t| t.meta.name == q.topic)
            .ok_or_else(|| Error::UnknownTopic(q.topic.clone()))?;
        let gets_before = self.remote_read_stats().0;
        let mut report = FindReport::default();
        for partition in 0..state.meta.partitions {
            let p = match self.leader_partition(&q.topic, partition) {
                Ok(p) => p,
                Err(_) => {
                    report.partitions_not_led.push(partition);
                    continue;
                }
            };
            self.find_in_partition(&p, q, &mut report).await?;
            if report.truncated {
                break;
            }
        }
        report.remote_gets = self.remote_read_stats().0 - gets_before;
        Ok(report)
    }

    async fn find_in_partition(
        &self,
        p: &Arc<Partition>,
        q: &FindQuery,
        report: &mut FindReport,
    ) -> Result<()> {
        let (remote, offsets, sealed) = p.lookup_view();
        if p.config().has_remote_log() && !remote.loaded {
            // Its history may be in the object store: not knowing it yet, say so
            // rather than answer from the local log alone.
            return Err(Error::RemoteLogNotReady(format!(
                "the remote log of partition {} of '{}' is not loaded yet",
                p.index, p.topic
            )));
        }
        let mut pieces = Vec::new();
        let start = offsets.log_start_offset;
        for seg in remote.segments.iter() {
            if seg.end_offset >= start && seg.base_offset < offsets.local_log_start_offset {
                pieces.push(Piece {
                    from: seg.base_offset.max(start),
                    to: seg.end_offset.min(offsets.local_log_start_offset - 1),
                    max_timestamp: seg.max_timestamp,
                    filter: Filter::Remote(seg.clone()),
                });
            }
        }
        let mut next = offsets.local_log_start_offset.max(start);
        for seg in sealed {
            pieces.push(Piece {
                from: next.max(seg.base_offset),
                to: seg.end_offset,
                max_timestamp: seg.max_timestamp,
                filter: Filter::Local(seg.clone()),
            });
            next = seg.end_offset + 1;
        }
        if next < offsets.high_watermark {
            pieces.push(Piece {
                from: next,
                to: offsets.high_watermark - 1,
                max_timestamp: i64::MAX,
                filter: Filter::None,
            });
        }
        // Remote filters not cached yet are fetched at once (their GETs overlap), then
        // read from the cache below.
        let wanted: Vec<shale_metastore::RemoteSegment> = pieces
            .iter()
            .filter(|piece| q.from_time.is_none_or(|from| piece.max_timestamp >= from))
            .filter_map(|piece| match &piece.filter {
                Filter::Remote(seg) => Some(seg.clone()),
                _ => None,
            })
            .collect();
        {
            use futures::StreamExt;
            let reader = self.tier.reader.clone();
            futures::stream::iter(wanted)
                .map(move |seg| {
                    let reader = reader.clone();
                    async move {
                        // Errors are met again, and handled, below.
                        let _ = reader.key_filter(&seg).await;
                    }
                })
                .buffer_unordered(FILTER_FETCHES)
                .for_each(|()| async {})
                .await;
        }
        for piece in pieces {
            report.segments_searched += 1;
            if q.from_time.is_some_and(|from| piece.max_timestamp < from) {
                report.segments_skipped += 1;
                continue;
            }
            let filter = match &piece.filter {
                Filter::None => None,
                Filter::Local(seg) => {
                    let seg = seg.clone();
                    tokio::task::spawn_blocking(move || shale_log::read_key_filter(&seg))
                        .await?
                        .map(Arc::new)
                }
                Filter::Remote(seg) => match self.tier.reader.key_filter(seg).await {
                    Ok(f) => f,
                    Err(e) if e.is_retriable() => return Err(crate::tiering::remote_read_error(e)),
                    // A damaged filter rules nothing out: the segment is read.
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, segment = %seg.segment_id,
                            error = %e, "unusable key filter; reading the segment");
                        None
                    }
                },
            };
            match filter {
                Some(f) if !may_hold(&f, q) => {
                    report.segments_skipped += 1;
                    continue;
                }
                Some(_) => report.segments_matched += 1,
                None => report.segments_without_filter += 1,
            }
            self.read_piece(p, &piece, q, report).await?;
            if report.truncated {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Reads one piece of the log, keeping the records with the key.
    async fn read_piece(
        &self,
        p: &Arc<Partition>,
        piece: &Piece,
        q: &FindQuery,
        report: &mut FindReport,
    ) -> Result<()> {
        let mut offset = piece.from;
        while offset <= piece.to {
            let fetched = match self
                .read_one(p, offset, READ_BYTES, true, Default::default())
                .await
            {
                Ok(f) => f,
                // Retention deleted it meanwhile: nothing left to find there.
                Err(Error::OffsetOutOfRange { log_start, .. }) if log_start > offset => {
                    return Ok(());
                }
                Err(e) => return Err(e),
            };
            if fetched.records.is_empty() {
                break;
            }
            report.bytes_read += fetched.records.len() as u64;
            let bytes = fetched.records.into_bytes().map_err(Error::Storage)?;
            for item in BatchIter::new(&bytes) {
                let (h, range) = item.map_err(Error::from)?;
                offset = offset.max(h.last_offset() + 1);
                if h.is_control() {
                    continue;
                }
                for r in decode_records(&bytes.slice(range)).map_err(Error::from)? {
                    let in_time = q.from_time.is_none_or(|t| r.timestamp >= t)
                        && q.to_time.is_none_or(|t| r.timestamp <= t);
                    let wanted = r.offset >= piece.from && r.offset <= piece.to;
                    if wanted && in_time && r.key.as_deref() == Some(&q.key[..]) {
                        if report.records.len() >= q.limit
                            || report.record_bytes >= crate::read_limits::MAX_BYTES_PER_READ
                        {
                            report.truncated = true;
                            return Ok(());
                        }
                        report.record_bytes += crate::read_limits::record_bytes(&r);
                        report.records.push(FoundRecord {
                            partition: p.index,
                            record: r,
                        });
                    }
                }
            }
        }
        Ok(())
    }
}

/// Whether a segment with this filter may hold records the query wants.
fn may_hold(f: &KeyFilter, q: &FindQuery) -> bool {
    let s = &f.summary;
    if s.records == 0 {
        return false;
    }
    if q.from_time.is_some_and(|t| s.max_timestamp < t)
        || q.to_time.is_some_and(|t| s.min_timestamp > t)
    {
        return false;
    }
    f.may_contain(&q.key)
}
