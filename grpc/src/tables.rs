//! A topic's Iceberg table in `describe`'s answer.

use shale_proto::v1::{TablePartition, TableStatus};

/// The status of a topic's Iceberg table as `describe` answers it (the reason, when
/// it could not be read).
pub(crate) fn table_status(
    report: shale_broker::error::Result<shale_service::TableReport>,
) -> TableStatus {
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            return TableStatus {
                error: e.to_string(),
                ..Default::default()
            };
        }
    };
    let s = report.status;
    TableStatus {
        location: s.location,
        data_files: s.data_files as i64,
        bytes: s.bytes as i64,
        rows: s.rows as i64,
        last_commit_ms: s.last_commit_ms,
        partitions: (report.partitions.iter())
            .map(|p| TablePartition {
                partition: p.partition,
                next_offset: p.next_offset,
                lag_offsets: p.lag_offsets,
                lag_ms: p.lag_ms,
            })
            .collect(),
        error: String::new(),
    }
}
