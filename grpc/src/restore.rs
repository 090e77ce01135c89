//! Restores and mounts as the `Admin` service answers them.

use shale_broker::error::Result;
use shale_broker::restore::{RestoreReport, RestoredTopicReport};
use shale_proto::v1::*;

use super::error_result;

pub(crate) fn restored_topic(t: RestoredTopicReport) -> RestoredTopic {
    RestoredTopic {
        name: t.name,
        topic_id: t.id.to_string(),
        from_snapshot: t.from_snapshot,
        existed: t.existed,
        partitions: (t.partitions.into_iter())
            .map(|p| RestoredPartition {
                partition: p.partition,
                segments: p.segments as i32,
                remote_start_offset: p.remote.map_or(-1, |r| r.0),
                remote_end_offset: p.remote.map_or(-1, |r| r.1),
                next_offset: p.next_offset,
                leader_epoch: p.leader_epoch,
                snapshot_high_watermark: p.snapshot_high_watermark.unwrap_or(-1),
                lost_records: p.lost_records.unwrap_or(-1),
            })
            .collect(),
    }
}

pub(crate) fn restore_response(result: Result<RestoreReport>) -> RestoreClusterResponse {
    let error = error_result(&result);
    let report = result.unwrap_or_default();
    RestoreClusterResponse {
        error,
        snapshot_taken_at_ms: report.snapshot_taken_at_ms.unwrap_or(-1),
        topics: report.topics.into_iter().map(restored_topic).collect(),
        groups: (report.groups.into_iter())
            .map(|g| RestoredGroup {
                group: g.group,
                offsets: g.offsets as i32,
                moved_back: g.moved_back as i32,
            })
            .collect(),
        ignored: report.ignored,
    }
}
