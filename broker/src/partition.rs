//! One partition replica on this broker: its log, its role (leader or follower, epoch,
//! ISR), the leader's view of its followers, its effective config, and its high
//! watermark, published on a `watch` channel that long-polling fetches and acks=all
//! produces wait on.
//!
//! All methods that touch the disk are blocking; callers run them on the blocking pool.
//! Log and role sit together behind one `std::sync::Mutex` held only for in-memory work
//! and the append `write`, so an append checks leadership and stamps the epoch
//! atomically; fetches plan under the lock and read with `pread` after it.
//!
//! # High watermark
//! The leader's HW is the smallest log end offset over the maximal ISR (its own included,
//! and followers whose addition it has sent to the metastore), and never goes down
//! while it leads. While the ISR is below min.insync.replicas it does not move at all
//! (KIP-966's strict rule; see [`shale_cluster::rules::high_watermark`]). A follower's HW is
//! the leader's, capped by its own log end. Consumers read only below the HW.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::BytesMut;
use shale_metastore::PartitionState;
use shale_records::batch::{self, BatchHeader};
use tokio::sync::watch;
use uuid::Uuid;

use crate::error::{Error, Result};
pub(crate) use batches::validate_replicated_batches;
use batches::{recompress_batches, require_keys, validate_batches};
use shale_config::topic::{CompressionType, TimestampType, TopicConfig};
use shale_log::{FileCache, PartitionLog};

mod batches;
mod clean;
mod follower;
mod key_filters;
mod leader;
mod read;
mod remote;
mod segments;
mod txn;

pub(crate) use follower::FollowerPosition;
use leader::FollowerProgress;
pub(crate) use leader::{FollowerFetch, LeaderRead};
pub use read::PartitionOffsets;
pub(crate) use remote::RemoteState;
pub(crate) use txn::{batches_below, transactional_producer};

use shale_log::layout::PARTITION_METADATA as METADATA_FILE;
pub(crate) use shale_log::layout::partition_dir;

/// Reads the topic id a partition directory belongs to: `Ok(None)` if it has no
/// metadata file; an error if the file cannot be read (EMFILE, EIO, …) or names no id,
/// so that no caller takes a failed read for another topic's directory.
pub(crate) fn read_topic_id(dir: &Path) -> std::io::Result<Option<Uuid>> {
    let path = dir.join(METADATA_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("cannot read {}: {e}", path.display()),
            ));
        }
    };
    text.lines()
        .find_map(|l| l.strip_prefix("topic_id: "))
        .and_then(|id| id.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("{} names no topic id", path.display()),
            )
        })
}

/// Result of a successful append.
#[derive(Debug, Clone, Copy)]
pub struct Appended {
    pub base_offset: i64,
    pub last_offset: i64,
    /// -1 unless the topic stamps LogAppendTime.
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// Epoch the batches were stamped with.
    pub leader_epoch: i32,
    /// An idempotent producer's retry: nothing written, the offsets are the first ones.
    pub duplicate: bool,
}

/// This replica's role, as the metastore last said (`version` is the partition
/// state's compare-and-set version).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Role {
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
    /// Eligible leader replicas (see `PartitionState::elr`).
    pub elr: Vec<i32>,
    /// Replicas that left the ISR and ELR at an unclean restart (see
    /// `PartitionState::recovering`).
    pub recovering: Vec<shale_metastore::Recovering>,
    /// The reassignment in flight (see `PartitionState::adding`).
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
    pub version: i64,
}

/// Log and role: changed together under one lock.
struct Replica {
    log: PartitionLog,
    role: Role,
    followers: HashMap<i32, FollowerProgress>,
    /// Leader: followers whose addition to the ISR it sent to the metastore, for the
    /// role it holds (Kafka's maximal ISR): cleared when the role changes.
    pending_isr: Vec<i32>,
    /// Leader: whether the HW is held by the strict min-ISR rule (logged on change).
    hw_held: bool,
    /// Closed at shutdown: nothing is written after the final fsync, or a clean
    /// shutdown could leave an unflushed tail behind.
    closed: bool,
}

/// What every partition replica on a broker shares.
#[derive(Clone)]
pub struct Shared {
    pub data_dir: PathBuf,
    /// This broker's id.
    pub broker_id: i32,
    /// Bumped on every leader append: wakes replica fetches waiting for data.
    pub appended: Arc<watch::Sender<u64>>,
    /// The broker's open segment files.
    pub files: Arc<FileCache>,
}

pub struct Partition {
    pub topic: Arc<str>,
    pub index: i32,
    pub topic_id: Uuid,
    /// This broker's id.
    broker_id: i32,
    replica: Mutex<Replica>,
    config: RwLock<Arc<TopicConfig>>,
    high_watermark: watch::Sender<i64>,
    /// Bumped on every leader append: wakes replica fetches waiting for data.
    appended: Arc<watch::Sender<u64>>,
    /// The remote log as far as it matches this replica's log (what reads, local
    /// retention and copies use).
    remote: Mutex<RemoteState>,
    /// The remote log as last read, whole (matched again after a truncation, and
    /// taken over by a leader that holds less than it: see `adopt_remote_log`).
    remote_full: Mutex<RemoteState>,
    /// Serializes the tier's work on this partition (copies, remote retention), which
    /// reads and writes `remote` across awaits.
    pub(crate) tier_lock: tokio::sync::Mutex<()>,
    /// Every sealed segment up to this offset has its key filter (or cannot have one),
    /// as of the log's truncation count `key_filters_generation`.
    pub(crate) key_filters_through: std::sync::atomic::AtomicI64,
    pub(crate) key_filters_generation: std::sync::atomic::AtomicU64,
}
impl Partition {
    /// Opens (creating or recovering) the partition's log. A directory left by an older
    /// topic of the same name (different topic id) is removed first. The caller
    /// fsyncs the data directory once after opening new partitions.
    /// It serves nothing (leads nothing) until [`Partition::apply_state`] gives it a role.
    pub fn open(
        shared: &Shared,
        topic: &str,
        index: i32,
        topic_id: Uuid,
        config: Arc<TopicConfig>,
        now_ms: i64,
    ) -> Result<Self> {
        let dir = partition_dir(&shared.data_dir, topic, index);
        // Only a directory that says it belongs to another topic id is removed; one
        // whose metadata cannot be read is left alone and the partition fails to open.
        match read_topic_id(&dir).map_err(Error::Storage)? {
            Some(id) if id == topic_id => {}
            found => {
                if let Some(other) = found {
                    tracing::warn!(dir = %dir.display(), topic_id = %other,
                        "removing partition directory of a deleted topic");
                    shared.files.forget_dir(&dir);
                    std::fs::remove_dir_all(&dir).map_err(Error::Storage)?;
                }
                // Before any log file, so a directory with data always says whose it is.
                std::fs::create_dir_all(&dir).map_err(Error::Storage)?;
                write_metadata(&dir, topic_id).map_err(Error::Storage)?;
            }
        }
        let log = PartitionLog::open(&dir, config.log_config(), now_ms, shared.files.clone())?;
        // Until the leader says more (or, leading alone, the whole log is committed).
        let hw = log.log_start_offset();
        Ok(Self {
            topic: topic.into(),
            index,
            topic_id,
            broker_id: shared.broker_id,
            replica: Mutex::new(Replica {
                log,
                role: Role {
                    leader: -1,
                    leader_epoch: -1,
                    replicas: Vec::new(),
                    isr: Vec::new(),
                    elr: Vec::new(),
                    recovering: Vec::new(),
                    adding: Vec::new(),
                    removing: Vec::new(),
                    version: -1,
                },
                followers: HashMap::new(),
                pending_isr: Vec::new(),
                hw_held: false,
                closed: false,
            }),
            config: RwLock::new(config),
            high_watermark: watch::Sender::new(hw),
            appended: shared.appended.clone(),
            remote: Mutex::new(RemoteState::unloaded()),
            remote_full: Mutex::new(RemoteState::unloaded()),
            tier_lock: tokio::sync::Mutex::new(()),
            key_filters_through: std::sync::atomic::AtomicI64::new(-1),
            key_filters_generation: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn replica(&self) -> MutexGuard<'_, Replica> {
        // A panic while holding the lock leaves the log as consistent as a crash would;
        // keep serving rather than poison every later request.
        self.replica.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn role(&self) -> Role {
        self.replica().role.clone()
    }

    pub fn is_leader(&self) -> bool {
        self.replica().role.leader == self.broker_id
    }

    fn not_leader(&self, role: &Role) -> Error {
        Error::NotLeader {
            topic: self.topic.to_string(),
            partition: self.index,
            leader: role.leader,
        }
    }

    fn ensure_leader(&self, role: &Role) -> Result<()> {
        if role.leader == self.broker_id {
            Ok(())
        } else {
            Err(self.not_leader(role))
        }
    }

    /// Adopts the metastore's view of this partition if it is newer than the one held.
    /// Taking the lead starts a new epoch in the log at its end; the follower states
    /// start afresh.
    pub fn apply_state(&self, state: &PartitionState, now_ms: i64) -> Result<()> {
        let mut r = self.replica();
        if state.version <= r.role.version {
            return Ok(());
        }
        let was_leading_epoch = (r.role.leader == self.broker_id).then_some(r.role.leader_epoch);
        r.pending_isr.clear();
        r.role = Role {
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            replicas: state.replicas.clone(),
            isr: state.isr.clone(),
            elr: state.elr.clone(),
            recovering: state.recovering.clone(),
            adding: state.adding.clone(),
            removing: state.removing.clone(),
            version: state.version,
        };
        if state.leader == self.broker_id && was_leading_epoch != Some(state.leader_epoch) {
            self.adopt_remote_log(&mut r)?;
            r.log.start_epoch(state.leader_epoch)?;
            let leo = r.log.log_end_offset();
            r.followers = state
                .replicas
                .iter()
                .filter(|&&b| b != self.broker_id)
                .map(|&b| (b, FollowerProgress::unheard(now_ms, leo)))
                .collect();
            // Re-read the remote log before copying to it: the last leader moved it on.
            self.remote
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .needs_cleanup = true;
            // A new partition's first leader is routine (a topic of 20,000 partitions
            // would log 20,000 lines); every other change of leader is news.
            if state.leader_epoch == 0 && leo == 0 {
                tracing::debug!(topic = %self.topic, partition = self.index, "leading new partition");
            } else {
                tracing::info!(topic = %self.topic, partition = self.index, epoch = state.leader_epoch,
                    log_end_offset = leo, isr = ?state.isr, "leading partition");
            }
        } else if state.leader == self.broker_id {
            // Leading on at the same epoch: a reassignment may have added replicas
            // (they start unheard from, outside the ISR) or removed some. A follower
            // outside the ISR starts unheard from too: it may have been removed and
            // added back since this leader last looked, its copy deleted meanwhile in
            // the same incarnation, so what it fetched before vouches for nothing.
            let (me, leo) = (self.broker_id, r.log.log_end_offset());
            r.followers.retain(|b, _| state.replicas.contains(b));
            for &b in state.replicas.iter().filter(|&&b| b != me) {
                if !state.isr.contains(&b) {
                    r.followers.remove(&b);
                }
                (r.followers.entry(b)).or_insert(FollowerProgress::unheard(now_ms, leo));
            }
        } else if state.leader != self.broker_id && was_leading_epoch.is_some() {
            r.followers.clear();
            tracing::info!(topic = %self.topic, partition = self.index, leader = state.leader,
                epoch = state.leader_epoch, "no longer leading partition");
        }
        self.advance_hw(&mut r);
        Ok(())
    }

    /// Records an ISR (and ELR) this broker (as leader) wrote to the metastore.
    pub fn set_isr(&self, stored: PartitionState) {
        let mut r = self.replica();
        if stored.version > r.role.version {
            r.role.isr = stored.isr;
            r.role.elr = stored.elr;
            r.role.recovering = stored.recovering;
            r.role.version = stored.version;
            r.pending_isr.clear();
        }
        self.advance_hw(&mut r);
    }

    pub fn config(&self) -> Arc<TopicConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_config(&self, config: Arc<TopicConfig>) {
        // Both under the replica lock (see `append`'s `read.only` check).
        let mut r = self.replica();
        r.log.set_config(config.log_config());
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
        drop(r);
    }

    pub fn high_watermark(&self) -> i64 {
        *self.high_watermark.borrow()
    }

    /// A receiver that wakes when the high watermark moves.
    pub fn subscribe(&self) -> watch::Receiver<i64> {
        self.high_watermark.subscribe()
    }

    /// Validates and appends the batches a producer sent, if this broker leads the
    /// partition (and, with `min_isr`, the ISR has that many members). Nothing is
    /// written unless every batch is valid.
    pub fn append(&self, records: &[u8], min_isr: Option<usize>, now_ms: i64) -> Result<Appended> {
        self.append_verified(records, min_isr, None, now_ms)
    }

    /// [`Partition::append`] of a transactional producer's batches whose transaction
    /// the coordinator's record confirmed (`verified`: see `txn::check_transactional`).
    pub fn append_verified(
        &self,
        records: &[u8],
        min_isr: Option<usize>,
        verified: Option<i32>,
        now_ms: i64,
    ) -> Result<Appended> {
        // One producer's batches at one epoch, if transactional (each is checked
        // against its open transaction under the lock).
        txn::transactional_producer(records)?;
        let config = self.config();
        let mut headers = validate_batches(records, config.max_message_bytes)?;
        if config.cleanup_policy.compacts() {
            require_keys(records, &headers)?;
        }
        let mut buf = match config.compression_type {
            CompressionType::Codec(codec)
                if headers.iter().any(|h| h.compression().ok() != Some(codec)) =>
            {
                let recompressed = recompress_batches(records, &headers, codec)?;
                headers = validate_batches(&recompressed, config.max_message_bytes)?;
                BytesMut::from(&recompressed[..])
            }
            _ => BytesMut::from(records),
        };
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
            TimestampType::CreateTime => {
                // A header max timestamp of -1 with records that carry times (older
                // clients send it so): computed from the records, as Kafka does, so
                // that lookups by time and retention see the records' times.
                let mut pos = 0;
                for h in headers.iter_mut() {
                    let size = h.total_size();
                    if h.max_timestamp < 0 && h.record_count > 0 {
                        let one = bytes::Bytes::copy_from_slice(&buf[pos..pos + size]);
                        let max = shale_records::record::max_record_timestamp(&one)?;
                        if max >= 0 {
                            batch::set_max_timestamp(&mut buf[pos..pos + size], max);
                            *h = BatchHeader::parse(&buf[pos..])?;
                        }
                    }
                    pos += size;
                }
                -1
            }
        };
        let mut r = self.replica();
        if r.closed {
            return Err(Error::ShuttingDown);
        }
        self.ensure_leader(&r.role)?;
        // Checked under the replica lock, which `set_config` holds: once a topic is
        // read-only (an unmount), no append that began earlier lands afterwards.
        if self.config().read_only {
            return Err(Error::ReadOnly(self.topic.to_string()));
        }
        if let Some(min) = min_isr
            && r.role.isr.len() < min
        {
            return Err(Error::NotEnoughReplicas {
                isr: r.role.isr.len(),
                min,
            });
        }
        txn::check_transactional(&r.log, &headers, verified)?;
        let epoch = r.role.leader_epoch;
        let info = r.log.append(&mut buf, &mut headers, epoch, now_ms)?;
        let log_start_offset = r.log.log_start_offset();
        self.advance_hw(&mut r);
        drop(r);
        if !info.duplicate {
            self.appended.send_modify(|n| *n = n.wrapping_add(1));
        }
        Ok(Appended {
            base_offset: info.first_offset,
            last_offset: info.last_offset,
            log_append_time_ms,
            log_start_offset,
            leader_epoch: epoch,
            duplicate: info.duplicate,
        })
    }

    /// Waits until the HW passes `last_offset` while this broker still leads at
    /// `epoch` (acks=all), then checks the ISR still has `min_isr` members.
    pub async fn wait_committed(
        &self,
        last_offset: i64,
        epoch: i32,
        min_isr: usize,
        timeout: std::time::Duration,
    ) -> Result<()> {
        let mut hw = self.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            {
                let r = self.replica();
                if r.role.leader != self.broker_id || r.role.leader_epoch != epoch {
                    return Err(self.not_leader(&r.role));
                }
                if *hw.borrow_and_update() > last_offset {
                    if r.role.isr.len() < min_isr {
                        return Err(Error::NotEnoughReplicasAfterAppend {
                            isr: r.role.isr.len(),
                            min: min_isr,
                        });
                    }
                    return Ok(());
                }
            }
            // Role changes do not touch the HW: look again at least every 100 ms.
            let wake =
                (tokio::time::Instant::now() + std::time::Duration::from_millis(100)).min(deadline);
            let _ = tokio::time::timeout_at(wake, hw.changed()).await;
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::ReplicationTimeout { last_offset });
            }
        }
    }

    /// The epoch of its last batch and its log end: what an unclean restart records
    /// of it (see `rules::after_restart`).
    pub fn log_position(&self) -> (i32, i64) {
        let r = self.replica();
        let end = r.log.log_end_offset();
        let epochs: Vec<(i32, i64)> = r
            .log
            .epochs()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect();
        (shale_cluster::rules::last_batch_epoch(&epochs, end), end)
    }

    pub fn leader_epoch(&self) -> i32 {
        self.replica().role.leader_epoch
    }

    /// Fsyncs the log and saves its producer state (graceful shutdown); writes after
    /// this are refused.
    pub fn close(&self, now_ms: i64) -> Result<()> {
        let mut r = self.replica();
        r.closed = true;
        Ok(r.log.close(now_ms)?)
    }

    pub fn dir(&self) -> PathBuf {
        self.replica().log.dir().to_path_buf()
    }
}
fn write_metadata(dir: &Path, topic_id: Uuid) -> std::io::Result<()> {
    let tmp = dir.join(format!("{METADATA_FILE}.tmp"));
    std::fs::write(&tmp, format!("version: 0\ntopic_id: {topic_id}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(METADATA_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod txn_tests;
