//! One partition on this broker: its log, its effective config, and its high
//! watermark, published on a `watch` channel that long-polling fetches wait on.
//!
//! All methods that touch the disk are blocking; callers run them on the blocking pool.
//! The log sits behind a `std::sync::Mutex` held only for in-memory work and the
//! append `write`; fetches plan under the lock and read with `pread` after it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::{Bytes, BytesMut};
use shale_metastore::RemoteSegment;
use shale_proto::batch::{self, BatchHeader};
use tokio::sync::watch;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::log::{PartitionLog, ReadPlan, RetentionOutcome, SealedSegmentInfo, TierBounds};
use crate::topic_config::{TimestampType, TopicConfig};

const METADATA_FILE: &str = "partition.metadata";

/// Where a partition's files live.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

/// Reads the topic id a partition directory belongs to (`None` if it has no metadata).
pub fn read_topic_id(dir: &Path) -> Option<Uuid> {
    let text = std::fs::read_to_string(dir.join(METADATA_FILE)).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|id| id.trim().parse().ok())
}

/// Offsets and sizes of a partition at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOffsets {
    /// First offset readable, locally or from the object store.
    pub log_start_offset: i64,
    /// First offset in the local log.
    pub local_log_start_offset: i64,
    pub high_watermark: i64,
    pub log_end_offset: i64,
    pub size_bytes: u64,
    pub segments: usize,
}

/// What this broker knows of the partition's remote segments: the in-memory index
/// the fetch path uses below the local log start (it never LISTs the bucket).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RemoteState {
    /// False until the finished segments are read from the metastore; until then no
    /// local segment of a tiered partition may be deleted.
    pub loaded: bool,
    /// Unfinished copies (after a start or a failed copy) must be cleaned up before
    /// the next upload.
    pub needs_cleanup: bool,
    /// Finished remote segments, by base offset, contiguous.
    pub segments: Arc<Vec<RemoteSegment>>,
    /// Every offset up to this one has been in the object store (-1: none yet).
    pub end_offset: i64,
    /// Offsets below this are past total retention: gone from the object store, and
    /// their local copies are deleted too. -1: no such bound.
    pub retained_from: i64,
}

impl RemoteState {
    pub fn unloaded() -> Self {
        Self {
            loaded: false,
            needs_cleanup: true,
            segments: Arc::default(),
            end_offset: -1,
            retained_from: -1,
        }
    }

    /// First offset in the object store, -1 if none.
    pub fn start_offset(&self) -> i64 {
        self.segments.first().map_or(-1, |s| s.base_offset)
    }

    pub fn bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.size_bytes as u64).sum()
    }

    /// The remote segment holding `offset`.
    pub fn find(&self, offset: i64) -> Option<&RemoteSegment> {
        let i = self.segments.partition_point(|s| s.end_offset < offset);
        self.segments.get(i).filter(|s| s.base_offset <= offset)
    }
}

/// Result of a successful append.
#[derive(Debug, Clone, Copy)]
pub struct Appended {
    pub base_offset: i64,
    pub last_offset: i64,
    /// -1 unless the topic stamps LogAppendTime.
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    pub topic_id: Uuid,
    log: Mutex<PartitionLog>,
    config: RwLock<Arc<TopicConfig>>,
    /// Leader epoch stamped into appended batches (0 until replication assigns epochs).
    leader_epoch: i32,
    high_watermark: watch::Sender<i64>,
    remote: Mutex<RemoteState>,
    /// Serializes the tier's work on this partition (copies, remote retention), which
    /// reads and writes `remote` across awaits.
    pub(crate) tier_lock: tokio::sync::Mutex<()>,
}

impl Partition {
    /// Opens (creating or recovering) the partition's log. A directory left by an older
    /// topic of the same name (different topic id) is removed first.
    pub fn open(
        data_dir: &Path,
        topic: &str,
        index: i32,
        topic_id: Uuid,
        config: Arc<TopicConfig>,
        now_ms: i64,
    ) -> Result<Self> {
        let dir = partition_dir(data_dir, topic, index);
        if dir.exists() && read_topic_id(&dir) != Some(topic_id) {
            tracing::warn!(dir = %dir.display(), "removing partition directory of a deleted topic");
            std::fs::remove_dir_all(&dir).map_err(Error::Storage)?;
        }
        if read_topic_id(&dir).is_none() {
            // Before any log file, so a directory with data always says whose it is.
            std::fs::create_dir_all(&dir).map_err(Error::Storage)?;
            write_metadata(&dir, topic_id).map_err(Error::Storage)?;
        }
        let log = PartitionLog::open(&dir, config.log_config(), now_ms)?;
        let leo = log.log_end_offset();
        Ok(Self {
            topic: topic.into(),
            index,
            topic_id,
            log: Mutex::new(log),
            config: RwLock::new(config),
            leader_epoch: 0,
            high_watermark: watch::Sender::new(leo),
            remote: Mutex::new(RemoteState::unloaded()),
            tier_lock: tokio::sync::Mutex::new(()),
        })
    }

    fn log(&self) -> MutexGuard<'_, PartitionLog> {
        // A panic while holding the lock leaves the log as consistent as a crash would;
        // keep serving rather than poison every later request.
        self.log.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn config(&self) -> Arc<TopicConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_config(&self, config: Arc<TopicConfig>) {
        self.log().set_config(config.log_config());
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// A receiver that wakes when the high watermark moves.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    pub fn offsets(&self) -> PartitionOffsets {
        self.offsets_of(&self.log())
    }

    fn offsets_of(&self, log: &PartitionLog) -> PartitionOffsets {
        let local = log.log_start_offset();
        let remote = self.remote_state().start_offset();
        PartitionOffsets {
            log_start_offset: if remote >= 0 {
                remote.min(local)
            } else {
                local
            },
            local_log_start_offset: local,
            high_watermark: self.high_watermark(),
            log_end_offset: log.log_end_offset(),
            size_bytes: log.size_bytes(),
            segments: log.segment_count(),
        }
    }

    /// Validates and appends the batches a producer sent. Nothing is written unless
    /// every batch is valid.
    pub fn append(&self, records: &[u8], now_ms: i64) -> Result<Appended> {
        let config = self.config();
        let mut headers = validate_batches(records, config.max_message_bytes)?;
        let mut buf = BytesMut::from(records);
        let log_append_time_ms = match config.message_timestamp_type {
            TimestampType::LogAppendTime => {
                let mut pos = 0;
                for h in headers.iter_mut() {
                    batch::stamp_log_append_time(&mut buf[pos..pos + h.total_size()], now_ms);
                    *h = BatchHeader::parse(&buf[pos..])?;
                    pos += h.total_size();
                }
                now_ms
            }
            TimestampType::CreateTime => -1,
        };
        let mut log = self.log();
        let info = log.append(&mut buf, &mut headers, self.leader_epoch, now_ms)?;
        let log_start_offset = log.log_start_offset();
        // One node: everything appended is committed.
        self.high_watermark.send_replace(info.last_offset + 1);
        Ok(Appended {
            base_offset: info.first_offset,
            last_offset: info.last_offset,
            log_append_time_ms,
            log_start_offset,
        })
    }

    /// Plans a read from `offset` bounded by the high watermark.
    pub fn plan_read(&self, offset: i64) -> Result<(ReadPlan, PartitionOffsets)> {
        let log = self.log();
        let hw = self.high_watermark();
        let plan = log.plan_read(offset, hw)?;
        Ok((plan, self.offsets_of(&log)))
    }

    /// Reads whole batches from `offset`; see [`ReadPlan::read`].
    pub fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        whole_first: bool,
    ) -> Result<(Bytes, PartitionOffsets)> {
        let (plan, offsets) = self.plan_read(offset)?;
        let bytes = plan.read(max_bytes, whole_first).map_err(Error::Storage)?;
        Ok((bytes, offsets))
    }

    /// Kafka ListOffsets on the local log: -1 latest (HW), -2 earliest (remote
    /// included), -4 earliest local, else the first local offset with timestamp >=
    /// `timestamp` (`None` when there is none). Remote timestamps: `Broker::list_offset`.
    pub fn list_offset(&self, timestamp: i64) -> Result<Option<(i64, i64)>> {
        let log = self.log();
        match timestamp {
            -1 => Ok(Some((self.high_watermark(), -1))),
            -2 => Ok(Some((self.offsets_of(&log).log_start_offset, -1))),
            -4 => Ok(Some((log.log_start_offset(), -1))),
            ts if ts >= 0 => Ok(log
                .offset_for_timestamp(ts)?
                .filter(|(offset, _)| *offset < self.high_watermark())),
            other => Err(Error::InvalidRequest(format!(
                "unsupported ListOffsets timestamp {other}"
            ))),
        }
    }

    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// Local retention. A tiered partition deletes only segments already in the object
    /// store, and nothing before the tier has loaded its state.
    pub fn apply_retention(&self, now_ms: i64) -> Result<RetentionOutcome> {
        let tier = self.config().remote_storage_enable.then(|| {
            let remote = self.remote_state();
            if remote.loaded {
                TierBounds {
                    uploaded_through: remote.end_offset,
                    retained_from: remote.retained_from,
                }
            } else {
                TierBounds {
                    uploaded_through: i64::MIN,
                    retained_from: -1,
                }
            }
        });
        Ok(self.log().apply_retention(now_ms, tier)?)
    }

    pub fn sealed_segments_after(&self, after: i64) -> Vec<SealedSegmentInfo> {
        self.log().sealed_segments_after(after)
    }

    /// Local bytes of the segments after `offset` (those not in the object store).
    pub fn bytes_after(&self, offset: i64) -> u64 {
        self.log().bytes_after(offset)
    }

    pub fn remote_state(&self) -> RemoteState {
        self.remote
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_remote_state(&self, state: RemoteState) {
        *self.remote.lock().unwrap_or_else(|e| e.into_inner()) = state;
    }

    pub fn flush_if_due(&self, now_ms: i64) -> Result<bool> {
        Ok(self.log().flush_if_due(now_ms)?)
    }

    /// Fsyncs the log (graceful shutdown).
    pub fn flush(&self, now_ms: i64) -> Result<()> {
        Ok(self.log().flush(now_ms)?)
    }

    pub fn dir(&self) -> PathBuf {
        self.log().dir().to_path_buf()
    }
}

/// Checks every batch a producer sent: framing, size limit, CRC, format. Returns the
/// headers in order.
fn validate_batches(records: &[u8], max_message_bytes: i64) -> Result<Vec<BatchHeader>> {
    if records.is_empty() {
        return Err(Error::InvalidRecord(
            "the request holds no record batch".into(),
        ));
    }
    let mut headers = Vec::new();
    let mut pos = 0;
    while pos < records.len() {
        let rest = &records[pos..];
        let h = BatchHeader::parse(rest)?;
        if h.total_size() > rest.len() {
            return Err(Error::CorruptMessage(batch::BatchError::Truncated {
                needed: h.total_size(),
                available: rest.len(),
            }));
        }
        if h.total_size() as i64 > max_message_bytes {
            return Err(Error::MessageTooLarge {
                size: h.total_size(),
                max: max_message_bytes,
            });
        }
        h.validate(&rest[..h.total_size()])?;
        if h.is_control() {
            return Err(Error::InvalidRecord(
                "control batches cannot be produced".into(),
            ));
        }
        headers.push(h);
        pos += h.total_size();
    }
    Ok(headers)
}

fn write_metadata(dir: &Path, topic_id: Uuid) -> std::io::Result<()> {
    let tmp = dir.join(format!("{METADATA_FILE}.tmp"));
    std::fs::write(&tmp, format!("version: 0\ntopic_id: {topic_id}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(METADATA_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shale_proto::record::{BatchBuilder, Record};

    fn batch(n: usize, value_len: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(1_000);
        for _ in 0..n {
            b.push(Record::new(None, Some(&vec![b'a'; value_len]), 1_000));
        }
        b.build().to_vec()
    }

    fn open(dir: &Path, id: Uuid, config: TopicConfig) -> Partition {
        Partition::open(dir, "t", 0, id, Arc::new(config), 0).unwrap()
    }

    #[test]
    fn bad_batches_are_refused_and_leave_the_log_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let config = TopicConfig {
            max_message_bytes: 500,
            ..TopicConfig::default()
        };
        let p = open(dir.path(), Uuid::new_v4(), config);
        p.append(&batch(2, 10), 0).unwrap();
        let before = p.offsets();

        let good = batch(1, 10);
        let mut crc = good.clone();
        *crc.last_mut().unwrap() ^= 1;
        let mut magic = good.clone();
        magic[16] = 1;
        let mut two = good.clone();
        two.extend_from_slice(&crc); // one good batch then a bad one: all or nothing
        let cases: Vec<(Vec<u8>, shale_proto::ErrorCode)> = vec![
            (Vec::new(), shale_proto::ErrorCode::InvalidRecord),
            (good[..30].to_vec(), shale_proto::ErrorCode::CorruptMessage),
            (
                good[..good.len() - 1].to_vec(),
                shale_proto::ErrorCode::CorruptMessage,
            ),
            (crc, shale_proto::ErrorCode::CorruptMessage),
            (magic, shale_proto::ErrorCode::UnsupportedForMessageFormat),
            (two, shale_proto::ErrorCode::CorruptMessage),
            (batch(1, 600), shale_proto::ErrorCode::MessageTooLarge),
        ];
        for (bytes, code) in cases {
            let err = p.append(&bytes, 0).unwrap_err();
            assert_eq!(err.code(), code, "{err}");
        }
        assert_eq!(p.offsets(), before);
    }

    #[test]
    fn log_append_time_stamps_batches_and_keeps_crc_valid() {
        let dir = tempfile::tempdir().unwrap();
        let config = TopicConfig {
            message_timestamp_type: TimestampType::LogAppendTime,
            ..TopicConfig::default()
        };
        let p = open(dir.path(), Uuid::new_v4(), config);
        let a = p.append(&batch(3, 5), 77_000).unwrap();
        assert_eq!(a.log_append_time_ms, 77_000);
        let (bytes, _) = p.read(0, 1 << 20, true).unwrap();
        let h = BatchHeader::parse(&bytes).unwrap();
        h.validate(&bytes).unwrap();
        assert!(h.is_log_append_time());
        let recs = shale_proto::record::decode_records(&bytes).unwrap();
        assert!(recs.iter().all(|r| r.timestamp == 77_000));
    }

    #[test]
    fn directory_of_an_older_topic_with_the_same_name_is_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let old = open(dir.path(), Uuid::new_v4(), TopicConfig::default());
        old.append(&batch(5, 5), 0).unwrap();
        drop(old);
        let new = open(dir.path(), Uuid::new_v4(), TopicConfig::default());
        assert_eq!(new.offsets().log_end_offset, 0);
    }
}
