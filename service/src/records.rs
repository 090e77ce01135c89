//! Reading records for people (the console, `shale find`): a few records from an
//! offset or a time, and records by key.

use bytes::Bytes;
use shale_records::batch::BatchIter;
use shale_records::record::{Record, decode_records};

use super::{RequestContext, Service};
use shale_broker::PartitionOffsets;
use shale_broker::error::{Error, Result};
use shale_broker::find::{FindQuery, FindReport};
use shale_broker::read_limits::{MAX_BYTES_PER_READ, MAX_RECORDS_PER_READ, record_bytes};
use shale_security::acl::{Operation, ResourceType};

/// Where a read of records starts.
#[derive(Debug, Clone, Copy)]
pub enum ReadFrom {
    Offset(i64),
    /// The first record with a timestamp at or after this one (ms).
    Timestamp(i64),
}

/// Records read from one partition, with its offsets at the time.
#[derive(Debug)]
pub struct RecordsRead {
    pub records: Vec<Record>,
    pub offsets: PartitionOffsets,
    /// Where the next read would start.
    pub next_offset: i64,
}

impl Service {
    /// Up to `count` records of a partition from an offset or a time, local or remote.
    pub async fn read_records(
        &self,
        ctx: &RequestContext,
        topic: &str,
        partition: i32,
        from: ReadFrom,
        count: usize,
    ) -> Result<RecordsRead> {
        self.call(ctx, "ReadRecords", async {
            self.counted(self.authorize(ctx, Operation::Read, ResourceType::Topic, topic))?;
            let r = self.read_records_inner(topic, partition, from, count).await;
            self.counted(r)
        })
        .await
    }

    async fn read_records_inner(
        &self,
        topic: &str,
        partition: i32,
        from: ReadFrom,
        count: usize,
    ) -> Result<RecordsRead> {
        let count = count.min(MAX_RECORDS_PER_READ);
        let p = self.broker.leader_partition(topic, partition)?;
        let offsets = p.offsets();
        let start = match from {
            ReadFrom::Offset(o) => o,
            ReadFrom::Timestamp(ts) => match self.broker.list_offset(topic, partition, ts).await? {
                Some((offset, _)) => offset,
                None => offsets.high_watermark,
            },
        };
        if start < offsets.log_start_offset || start > offsets.high_watermark {
            return Err(Error::OffsetOutOfRange {
                offset: start,
                log_start: offsets.log_start_offset,
                log_end: offsets.high_watermark,
            });
        }
        let mut out = Vec::new();
        let mut offset = start;
        let mut bytes_out = 0;
        while out.len() < count && bytes_out < MAX_BYTES_PER_READ && offset < offsets.high_watermark
        {
            let fetched = self
                .broker
                .read_one(&p, offset, 1 << 20, true, Default::default())
                .await?;
            if fetched.records.is_empty() {
                break;
            }
            let bytes: Bytes = fetched.records.into_bytes().map_err(Error::Storage)?;
            'batches: for item in BatchIter::new(&bytes) {
                let (h, range) = item.map_err(Error::from)?;
                let next = h.last_offset() + 1;
                if !h.is_control() {
                    for r in decode_records(&bytes.slice(range)).map_err(Error::from)? {
                        if r.offset < offset {
                            continue;
                        }
                        if out.len() == count || bytes_out >= MAX_BYTES_PER_READ {
                            offset = r.offset;
                            break 'batches;
                        }
                        bytes_out += record_bytes(&r);
                        out.push(r);
                    }
                }
                offset = offset.max(next);
            }
        }
        Ok(RecordsRead {
            records: out,
            offsets,
            next_offset: offset,
        })
    }

    /// Every record with the key in a topic within a time range (see
    /// [`shale_broker::find`]): the partitions this broker leads.
    pub async fn find_records(&self, ctx: &RequestContext, q: FindQuery) -> Result<FindReport> {
        self.call(ctx, "FindRecords", async {
            self.counted(self.authorize(ctx, Operation::Read, ResourceType::Topic, &q.topic))?;
            let r = self.broker.find_records(&q).await;
            self.counted(r)
        })
        .await
    }
}
