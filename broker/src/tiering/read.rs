//! Reads from the object store below the local log start: fetches, and the first
//! offset at or after a time. A segment found missing was usually deleted by remote
//! retention meanwhile: the read looks again in the remote log as it stands.

use bytes::Bytes;
use shale_metastore::RemoteSegment;
use shale_tiering::reader::ReadError;

use crate::broker::Broker;
use crate::error::{Error, Result};
use crate::partition::{Partition, RemoteState};

impl Broker {
    /// Reads `offset` from the object store (the caller found it below the local log
    /// start); `None` when no remote segment holds it. A segment found missing in the
    /// store was usually deleted by remote retention after this read found it: the read
    /// looks again in the remote log as it stands (then the offset may be out of range);
    /// only a segment the metastore still lists as finished is reported corrupt.
    pub(crate) async fn read_remote(
        &self,
        p: &Partition,
        offset: i64,
        max_bytes: usize,
        whole_first: bool,
    ) -> Option<Result<Bytes>> {
        let mut state = p.remote_state();
        for _ in 0..3 {
            let seg = state.find(offset)?.clone();
            let (reader, s) = (self.tier.reader.clone(), seg.clone());
            let read = match self
                .tier
                .remote_io
                .run(async move { reader.read(&s, offset, max_bytes, whole_first).await })
                .await
            {
                Ok(read) => read,
                Err(e) => return Some(Err(e)),
            };
            let Err(ReadError::NotFound { object }) = read else {
                return Some(read.map_err(remote_read_error));
            };
            state = match self.after_missing(p, &seg, object).await {
                Ok(state) => state,
                Err(e) => return Some(Err(e)),
            };
        }
        Some(Err(changing(p, offset)))
    }

    /// The first offset at or after `ts` among remote segments below the local log,
    /// looking again (as [`Broker::read_remote`] does) when retention deleted the
    /// segment it chose.
    pub(crate) async fn remote_offset_for_timestamp(
        &self,
        p: &Partition,
        ts: i64,
    ) -> Result<Option<(i64, i64)>> {
        let local_start = p.offsets().local_log_start_offset;
        let mut state = p.remote_state();
        let mut after = i64::MIN;
        for _ in 0..3 {
            loop {
                let Some(seg) = state
                    .segments
                    .iter()
                    .find(|s| {
                        s.base_offset > after
                            && s.max_timestamp >= ts
                            && s.base_offset < local_start
                    })
                    .cloned()
                else {
                    return Ok(None);
                };
                let (reader, s) = (self.tier.reader.clone(), seg.clone());
                let found = self
                    .tier
                    .remote_io
                    .run(async move { reader.offset_for_timestamp(&s, ts).await })
                    .await?;
                match found {
                    // A segment cut short keeps the max timestamp of its whole object:
                    // the record may lie in the part cut away, so look further.
                    Ok(None) => after = seg.base_offset,
                    Err(ReadError::NotFound { object }) => {
                        state = self.after_missing(p, &seg, object).await?;
                        break;
                    }
                    other => return other.map_err(remote_read_error),
                }
            }
        }
        Err(changing(p, ts))
    }

    /// After a read found the object of `seg` missing: the remote log as it stands
    /// (this broker's index, or the metastore's when the index still lists `seg`, since
    /// this broker may lag the leader's retention), to look again in. A segment the
    /// metastore still lists as finished has lost its object: that is corruption.
    async fn after_missing(
        &self,
        p: &Partition,
        seg: &RemoteSegment,
        object: String,
    ) -> Result<RemoteState> {
        // A read replica learns of its source's deletions at its next poll, not from
        // the metastore: until then, retriable.
        if !p.config().read_replica_of.is_empty() {
            return Err(Error::RemoteLogNotReady(format!(
                "{object} was deleted from the read replica's source; it is read again at the next poll"
            )));
        }
        let listed = |state: &RemoteState| {
            state
                .segments
                .iter()
                .any(|s| s.segment_id == seg.segment_id)
        };
        let current = p.remote_state();
        let state = if listed(&current) {
            p.matching_remote(self.read_remote_log(p).await?)
        } else {
            current
        };
        if listed(&state) {
            return Err(Error::RemoteCorrupt(ReadError::Corrupt {
                object,
                reason: "the object of a finished remote segment is missing".into(),
            }));
        }
        tracing::debug!(topic = %p.topic, partition = p.index, segment = %seg.segment_id,
            "remote segment deleted while being read, looking again");
        Ok(state)
    }
}

/// A remote log whose segments keep going while a read looks for `at` in them.
fn changing(p: &Partition, at: i64) -> Error {
    Error::RemoteLogNotReady(format!(
        "the remote log of partition {} of '{}' keeps changing under reads of {at}",
        p.index, p.topic
    ))
}

pub(crate) fn remote_read_error(e: ReadError) -> Error {
    match e {
        ReadError::Corrupt { .. } | ReadError::NotFound { .. } => Error::RemoteCorrupt(e),
        other => Error::RemoteUnavailable(other),
    }
}
