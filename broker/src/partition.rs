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
//! The leader's HW is the smallest log end offset over the ISR (its own included), and
//! never goes down while it leads. A follower's HW is the leader's, capped by its own
//! log end. Consumers read only below the HW.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use bytes::{Bytes, BytesMut};
use shale_metastore::{PartitionState, RemoteSegment};
use shale_proto::batch::{self, BatchHeader};
use tokio::sync::watch;
use uuid::Uuid;

use crate::error::{Error, Result};
use crate::log::{
    FileCache, PartitionLog, ReadPlan, RetentionOutcome, SealedSegmentInfo, TierBounds,
};
use crate::replication::{FollowerFetch, LeaderRead};
use crate::topic_config::{TimestampType, TopicConfig};

const METADATA_FILE: &str = "partition.metadata";

/// Where a partition's files live.
pub fn partition_dir(data_dir: &Path, topic: &str, partition: i32) -> PathBuf {
    data_dir.join(format!("{topic}-{partition}"))
}

/// Reads the topic id a partition directory belongs to: `Ok(None)` if it has no
/// metadata file; an error if the file cannot be read (EMFILE, EIO, …) or names no id,
/// so that no caller takes a failed read for another topic's directory.
pub fn read_topic_id(dir: &Path) -> std::io::Result<Option<Uuid>> {
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
    pub version: i64,
}

/// A follower's log end, the epoch of its last batch, and whom it follows at which
/// epoch: what its next replica fetch says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerPosition {
    pub log_end_offset: i64,
    pub last_epoch: i32,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy)]
struct FollowerProgress {
    /// The follower's log end offset (its last fetch offset).
    leo: i64,
    /// Last time the follower had fetched up to the leader's log end of its previous
    /// fetch (Kafka's lastCaughtUpTime).
    caught_up_ms: i64,
    /// The leader's log end when it answered the follower's previous fetch.
    leader_leo_at_last_fetch: i64,
    /// The follower's incarnation that fetched last (-1: none yet).
    broker_epoch: i64,
}

/// Log and role: changed together under one lock.
struct Replica {
    log: PartitionLog,
    role: Role,
    followers: HashMap<i32, FollowerProgress>,
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
    remote: Mutex<RemoteState>,
    /// Serializes the tier's work on this partition (copies, remote retention), which
    /// reads and writes `remote` across awaits.
    pub(crate) tier_lock: tokio::sync::Mutex<()>,
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
                    version: -1,
                },
                followers: HashMap::new(),
                closed: false,
            }),
            config: RwLock::new(config),
            high_watermark: watch::Sender::new(hw),
            appended: shared.appended.clone(),
            remote: Mutex::new(RemoteState::unloaded()),
            tier_lock: tokio::sync::Mutex::new(()),
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
        r.role = Role {
            leader: state.leader,
            leader_epoch: state.leader_epoch,
            replicas: state.replicas.clone(),
            isr: state.isr.clone(),
            elr: state.elr.clone(),
            version: state.version,
        };
        if state.leader == self.broker_id && was_leading_epoch != Some(state.leader_epoch) {
            r.log.start_epoch(state.leader_epoch)?;
            let leo = r.log.log_end_offset();
            r.followers = state
                .replicas
                .iter()
                .filter(|&&b| b != self.broker_id)
                .map(|&b| {
                    let p = FollowerProgress {
                        leo: -1,
                        caught_up_ms: now_ms,
                        leader_leo_at_last_fetch: leo,
                        broker_epoch: -1,
                    };
                    (b, p)
                })
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
        } else if state.leader != self.broker_id && was_leading_epoch.is_some() {
            r.followers.clear();
            tracing::info!(topic = %self.topic, partition = self.index, leader = state.leader,
                epoch = state.leader_epoch, "no longer leading partition");
        }
        self.advance_hw(&r);
        Ok(())
    }

    /// Records an ISR (and ELR) this broker (as leader) wrote to the metastore.
    pub fn set_isr(&self, isr: Vec<i32>, elr: Vec<i32>, version: i64) {
        let mut r = self.replica();
        if version > r.role.version {
            r.role.isr = isr;
            r.role.elr = elr;
            r.role.version = version;
        }
        self.advance_hw(&r);
    }

    /// Leader: raises the HW to the smallest log end over the ISR (followers not heard
    /// from since this epoch began hold it where it is).
    fn advance_hw(&self, r: &Replica) {
        if r.role.leader != self.broker_id {
            return;
        }
        let current = self.high_watermark();
        let hw = r
            .role
            .isr
            .iter()
            .filter(|&&b| b != self.broker_id)
            .map(|b| r.followers.get(b).map_or(-1, |f| f.leo))
            .map(|leo| if leo < 0 { current } else { leo })
            .fold(r.log.log_end_offset(), i64::min);
        if hw > current {
            self.high_watermark.send_replace(hw);
        }
    }

    /// Leader: followers in the ISR that have not caught up within `lag_ms`; the ISR
    /// without them, if any.
    pub fn isr_to_shrink(&self, now_ms: i64, lag_ms: i64) -> Option<(Role, Vec<i32>)> {
        let r = self.replica();
        if r.role.leader != self.broker_id {
            return None;
        }
        let isr: Vec<i32> = r
            .role
            .isr
            .iter()
            .copied()
            .filter(|b| {
                *b == self.broker_id
                    || r.followers
                        .get(b)
                        .is_some_and(|f| now_ms - f.caught_up_ms <= lag_ms)
            })
            .collect();
        (isr.len() < r.role.isr.len()).then(|| (r.role.clone(), isr))
    }

    /// Leader: answers one partition of a follower's replica fetch: checks the
    /// follower's epoch and divergence, records its progress, reads from its offset.
    pub fn serve_replica(&self, f: &FollowerFetch, now_ms: i64) -> Result<LeaderRead> {
        let (plan, out) = {
            let mut r = self.replica();
            self.ensure_leader(&r.role)?;
            if f.current_leader_epoch < r.role.leader_epoch {
                return Err(Error::FencedLeaderEpoch {
                    sent: f.current_leader_epoch,
                    current: r.role.leader_epoch,
                });
            }
            if f.current_leader_epoch > r.role.leader_epoch {
                // This broker has not heard of the new epoch yet.
                return Err(self.not_leader(&r.role));
            }
            let leo = r.log.log_end_offset();
            let local_start = r.log.log_start_offset();
            let mut out = LeaderRead {
                records: Bytes::new(),
                high_watermark: self.high_watermark(),
                local_log_start_offset: local_start,
                diverging: None,
                isr_change: None,
            };
            if f.fetch_offset > local_start && f.last_fetched_epoch >= 0 {
                match r.log.epoch_end_offset(f.last_fetched_epoch) {
                    Some((epoch, end))
                        if epoch == f.last_fetched_epoch && end >= f.fetch_offset => {}
                    Some((epoch, end)) => {
                        out.diverging = Some((epoch, end));
                        return Ok(out);
                    }
                    None => {
                        out.diverging = Some((-1, local_start));
                        return Ok(out);
                    }
                }
            }
            if f.fetch_offset < local_start || f.fetch_offset > leo {
                return Err(Error::OffsetOutOfRange {
                    offset: f.fetch_offset,
                    log_start: local_start,
                    log_end: leo,
                });
            }
            // A follower joins the ISR only at the HW and at the start of this epoch: a
            // new leader's HW may lag what the last leader acknowledged (KAFKA-7128).
            let epoch_start = r.log.epoch_start_offset(r.role.leader_epoch).unwrap_or(leo);
            let hw = self.high_watermark();
            let (caught_up, went_back) = match r.followers.get_mut(&f.replica_id) {
                Some(p) => {
                    // Within one incarnation a follower's log only grows here (a lower
                    // offset is a stale request, still being answered after its stream
                    // broke). A new incarnation fetching below what the old one had
                    // lost records (power loss, new disk) it had vouched for.
                    let same = p.broker_epoch == f.replica_epoch;
                    let went_back = !same && p.leo >= 0 && f.fetch_offset < p.leo;
                    if f.fetch_offset >= p.leader_leo_at_last_fetch {
                        p.caught_up_ms = now_ms;
                    }
                    p.leo = if same {
                        p.leo.max(f.fetch_offset)
                    } else {
                        f.fetch_offset
                    };
                    p.leader_leo_at_last_fetch = leo;
                    p.broker_epoch = f.replica_epoch;
                    (p.leo >= hw && p.leo >= epoch_start, went_back)
                }
                None => return Err(Error::NotReplica(f.replica_id)),
            };
            self.advance_hw(&r);
            out.high_watermark = self.high_watermark();
            let in_isr = r.role.isr.contains(&f.replica_id);
            if went_back && in_isr {
                let isr = r
                    .role
                    .isr
                    .iter()
                    .copied()
                    .filter(|b| *b != f.replica_id)
                    .collect();
                out.isr_change = Some((r.role.clone(), isr));
            } else if caught_up && !in_isr {
                let mut isr = r.role.isr.clone();
                isr.push(f.replica_id);
                isr.sort_unstable();
                out.isr_change = Some((r.role.clone(), isr));
            }
            (r.log.plan_read(f.fetch_offset, leo)?, out)
        };
        let records = plan.read(f.max_bytes, true).map_err(Error::Storage)?;
        Ok(LeaderRead { records, ..out })
    }

    /// Every batch of the local log (tests compare replicas with it).
    #[cfg(test)]
    fn read_replica_bytes(&self) -> (Bytes, i64) {
        let r = self.replica();
        let leo = r.log.log_end_offset();
        let plan = r.log.plan_read(r.log.log_start_offset(), leo).unwrap();
        (plan.read(usize::MAX, true).unwrap(), leo)
    }

    /// Follower: where its log stands, for the next replica fetch (`None` while this
    /// broker leads or the partition has no leader).
    pub fn follower_position(&self) -> Option<FollowerPosition> {
        let r = self.replica();
        if r.role.leader == self.broker_id || r.role.leader < 0 {
            return None;
        }
        Some(FollowerPosition {
            log_end_offset: r.log.log_end_offset(),
            last_epoch: r.log.latest_epoch(),
            leader: r.role.leader,
            leader_epoch: r.role.leader_epoch,
        })
    }

    /// Follower: appends batches from the leader (checked like a produce, but kept
    /// with their offsets and epochs) and takes the leader's HW, capped by its own end.
    /// Like the two below, it does nothing (false) if the answer is stale: this
    /// replica no longer follows that leader at that epoch, or its log moved since
    /// the request (`from`) was made.
    pub fn append_from_leader(
        &self,
        from: &FollowerPosition,
        records: &[u8],
        leader_hw: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let headers = if records.is_empty() {
            Vec::new()
        } else {
            validate_batches(records, i64::MAX)?
        };
        let mut r = self.replica();
        if !self.still_at(&r, from) {
            return Ok(false);
        }
        if !headers.is_empty() {
            r.log.append_replicated(records, &headers, now_ms)?;
        }
        let hw = leader_hw.min(r.log.log_end_offset());
        self.high_watermark.send_if_modified(|cur| {
            let changed = *cur != hw;
            *cur = hw;
            changed
        });
        Ok(true)
    }

    /// Follower: cuts the divergent tail the leader pointed at (its `epoch` ended at
    /// `end_offset` there).
    pub fn truncate_diverged(
        &self,
        from: &FollowerPosition,
        epoch: i32,
        end_offset: i64,
    ) -> Result<bool> {
        let mut r = self.replica();
        if !self.still_at(&r, from) {
            return Ok(false);
        }
        let own_end = r
            .log
            .epoch_end_offset(epoch)
            .map_or(end_offset, |(_, end)| end);
        let target = end_offset.min(own_end);
        tracing::info!(topic = %self.topic, partition = self.index, epoch, leader_end_offset = end_offset,
            log_end_offset = r.log.log_end_offset(), truncate_to = target, "follower log diverged from the leader");
        r.log.truncate_to(target)?;
        let leo = r.log.log_end_offset();
        self.high_watermark.send_if_modified(|cur| {
            let changed = *cur > leo;
            *cur = (*cur).min(leo);
            changed
        });
        Ok(true)
    }

    /// Follower: restarts the log empty at `offset` (the leader's local log start, when
    /// this log ends before it).
    pub fn reset_to(&self, from: &FollowerPosition, offset: i64) -> Result<bool> {
        let mut r = self.replica();
        if !self.still_at(&r, from) {
            return Ok(false);
        }
        r.log.reset_to(offset)?;
        self.high_watermark.send_replace(offset);
        Ok(true)
    }

    /// Whether this replica still follows as it did at `from`, with the same log end
    /// (and is not closed).
    fn still_at(&self, r: &Replica, from: &FollowerPosition) -> bool {
        !r.closed
            && r.role.leader != self.broker_id
            && r.role.leader == from.leader
            && r.role.leader_epoch == from.leader_epoch
            && r.log.log_end_offset() == from.log_end_offset
    }

    pub fn config(&self) -> Arc<TopicConfig> {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn set_config(&self, config: Arc<TopicConfig>) {
        self.replica().log.set_config(config.log_config());
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
        self.offsets_of(&self.replica().log)
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

    /// Validates and appends the batches a producer sent, if this broker leads the
    /// partition (and, with `min_isr`, the ISR has that many members). Nothing is
    /// written unless every batch is valid.
    pub fn append(&self, records: &[u8], min_isr: Option<usize>, now_ms: i64) -> Result<Appended> {
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
        let mut r = self.replica();
        if r.closed {
            return Err(Error::ShuttingDown);
        }
        self.ensure_leader(&r.role)?;
        if let Some(min) = min_isr
            && r.role.isr.len() < min
        {
            return Err(Error::NotEnoughReplicas {
                isr: r.role.isr.len(),
                min,
            });
        }
        let epoch = r.role.leader_epoch;
        let info = r.log.append(&mut buf, &mut headers, epoch, now_ms)?;
        let log_start_offset = r.log.log_start_offset();
        self.advance_hw(&r);
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

    /// Where a fetch at `offset` reads: the local log (a planned read, bounded by the
    /// high watermark) or, below the local log start, the object store. Decided under
    /// the partition's lock, so local retention cannot move the local log start between
    /// the decision and the plan.
    pub fn plan_fetch(&self, offset: i64) -> Result<(Option<ReadPlan>, PartitionOffsets)> {
        let r = self.replica();
        self.ensure_leader(&r.role)?;
        let offsets = self.offsets_of(&r.log);
        if offset < r.log.log_start_offset() {
            return Ok((None, offsets));
        }
        let plan = r.log.plan_read(offset, self.high_watermark())?;
        Ok((Some(plan), offsets))
    }

    /// Plans a read from `offset` bounded by the high watermark.
    pub fn plan_read(&self, offset: i64) -> Result<(ReadPlan, PartitionOffsets)> {
        let r = self.replica();
        self.ensure_leader(&r.role)?;
        let hw = self.high_watermark();
        let plan = r.log.plan_read(offset, hw)?;
        Ok((plan, self.offsets_of(&r.log)))
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
        let r = self.replica();
        self.ensure_leader(&r.role)?;
        let log = &r.log;
        match timestamp {
            -1 => Ok(Some((self.high_watermark(), -1))),
            -2 => Ok(Some((self.offsets_of(log).log_start_offset, -1))),
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
        self.replica().role.leader_epoch
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
        Ok(self.replica().log.apply_retention(now_ms, tier)?)
    }

    pub fn sealed_segments_after(&self, after: i64) -> Vec<SealedSegmentInfo> {
        self.replica().log.sealed_segments_after(after)
    }

    /// Whether a sealed segment holds offsets above `after` (cheap).
    pub fn has_sealed_after(&self, after: i64) -> bool {
        self.replica().log.has_sealed_after(after)
    }

    /// Bytes of the local log.
    pub fn size_bytes(&self) -> u64 {
        self.replica().log.size_bytes()
    }

    /// Local bytes of the segments after `offset` (those not in the object store).
    pub fn bytes_after(&self, offset: i64) -> u64 {
        self.replica().log.bytes_after(offset)
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
        Ok(self.replica().log.flush_if_due(now_ms)?)
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

    fn shared(dir: &Path, broker: i32) -> Shared {
        Shared {
            data_dir: dir.to_path_buf(),
            broker_id: broker,
            appended: Arc::new(watch::Sender::new(0)),
            files: FileCache::new(16),
        }
    }

    fn open_replica(dir: &Path, id: Uuid, config: TopicConfig, broker: i32) -> Partition {
        Partition::open(&shared(dir, broker), "t", 0, id, Arc::new(config), 0).unwrap()
    }

    /// A partition this broker (1) leads alone.
    fn open(dir: &Path, id: Uuid, config: TopicConfig) -> Partition {
        let p = open_replica(dir, id, config, 1);
        p.apply_state(&PartitionState::initial(id, 0, vec![1]), 0)
            .unwrap();
        p
    }

    fn fetch(replica_id: i32, epoch: i32, at: (i64, i32)) -> FollowerFetch {
        FollowerFetch {
            replica_id,
            replica_epoch: 1,
            current_leader_epoch: epoch,
            fetch_offset: at.0,
            last_fetched_epoch: at.1,
            max_bytes: 1 << 20,
        }
    }

    /// One round of the follower's fetch loop against `leader`.
    fn replicate_once(leader: &Partition, follower: &Partition, follower_id: i32) {
        let pos = follower.follower_position().unwrap();
        let at = (pos.log_end_offset, pos.last_epoch);
        let read = leader
            .serve_replica(&fetch(follower_id, pos.leader_epoch, at), 0)
            .unwrap();
        let applied = match read.diverging {
            Some((e, end)) => follower.truncate_diverged(&pos, e, end).unwrap(),
            None => follower
                .append_from_leader(&pos, &read.records, read.high_watermark, 0)
                .unwrap(),
        };
        assert!(applied);
    }

    fn state(id: Uuid, leader: i32, epoch: i32, isr: Vec<i32>, version: i64) -> PartitionState {
        PartitionState {
            topic_id: id,
            partition: 0,
            replicas: vec![1, 2],
            leader,
            leader_epoch: epoch,
            isr,
            elr: Vec::new(),
            version,
        }
    }

    /// Replicas on brokers 1 (leading, epoch 0) and 2, both in the ISR.
    fn two_replicas(d1: &Path, d2: &Path, id: Uuid) -> (Partition, Partition) {
        let a = open_replica(d1, id, TopicConfig::default(), 1);
        let b = open_replica(d2, id, TopicConfig::default(), 2);
        let s0 = state(id, 1, 0, vec![1, 2], 0);
        a.apply_state(&s0, 0).unwrap();
        b.apply_state(&s0, 0).unwrap();
        (a, b)
    }

    #[test]
    fn followers_copy_the_leader_and_the_hw_follows_the_isr() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
        // Only the leader takes produce; a follower answers NOT_LEADER_OR_FOLLOWER.
        let err = b.append(&batch(1, 1), None, 0).unwrap_err();
        assert_eq!(err.code(), shale_proto::ErrorCode::NotLeaderOrFollower);
        let err = a.append(&batch(1, 1), Some(3), 0).unwrap_err();
        assert_eq!(err.code(), shale_proto::ErrorCode::NotEnoughReplicas);
        assert_eq!(a.offsets().log_end_offset, 0, "refused before writing");
        a.append(&batch(3, 10), Some(2), 0).unwrap();
        a.append(&batch(2, 10), Some(2), 0).unwrap();
        assert_eq!(a.high_watermark(), 0, "the follower has nothing yet");
        replicate_once(&a, &b, 2);
        assert_eq!(b.offsets().log_end_offset, 5);
        assert_eq!(a.high_watermark(), 0, "the leader learns on the next fetch");
        replicate_once(&a, &b, 2);
        assert_eq!((a.high_watermark(), b.high_watermark()), (5, 5));
        // A fetch with an old epoch is fenced.
        let err = a.serve_replica(&fetch(2, -1, (5, 0)), 0).unwrap_err();
        assert_eq!(err.code(), shale_proto::ErrorCode::FencedLeaderEpoch);
    }

    #[test]
    fn a_deposed_leader_truncates_its_divergent_tail() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let id = Uuid::new_v4();
        let (a, b) = two_replicas(d1.path(), d2.path(), id);
        a.append(&batch(4, 10), None, 0).unwrap();
        replicate_once(&a, &b, 2);
        // Broker 1 writes a tail nobody copies, then loses the lead to broker 2.
        a.append(&batch(3, 99), None, 0).unwrap();
        let s1 = state(id, 2, 1, vec![2], 1);
        a.apply_state(&s1, 0).unwrap();
        b.apply_state(&s1, 0).unwrap();
        b.append(&batch(2, 20), None, 0).unwrap();
        assert_eq!(a.offsets().log_end_offset, 7);
        // First round: diverged at the end of epoch 0 on broker 2 (offset 4).
        replicate_once(&b, &a, 1);
        assert_eq!(a.offsets().log_end_offset, 4);
        replicate_once(&b, &a, 1);
        assert_eq!(a.offsets().log_end_offset, 6);
        let (left, _) = a.read_replica_bytes();
        let (right, _) = b.read_replica_bytes();
        assert_eq!(left, right, "the logs are identical after truncation");
        // The checkpoint survives a restart.
        drop(a);
        let a = open_replica(d1.path(), id, TopicConfig::default(), 1);
        a.apply_state(&s1, 0).unwrap();
        let pos = a.follower_position().unwrap();
        assert_eq!((pos.log_end_offset, pos.last_epoch, pos.leader), (6, 1, 2));
    }

    /// A new leader's HW can lag what the old leader acknowledged: a follower at that
    /// HW but short of the new epoch's start must not join the ISR, or electing it next
    /// would lose acknowledged records (KAFKA-7128).
    #[test]
    fn a_follower_joins_the_isr_only_at_the_start_of_the_leaders_epoch() {
        let id = Uuid::new_v4();
        let dirs: Vec<_> = (0..2).map(|_| tempfile::tempdir().unwrap()).collect();
        let three = |leader, epoch, isr: Vec<i32>, version| PartitionState {
            replicas: vec![1, 2, 3],
            ..state(id, leader, epoch, isr, version)
        };
        // Broker 2 led epoch 0 and wrote 10 records; broker 1 copied them but learned
        // a high watermark of only 4 before broker 2 died.
        let b1 = open_replica(dirs[0].path(), id, TopicConfig::default(), 1);
        let b3 = open_replica(dirs[1].path(), id, TopicConfig::default(), 3);
        let s0 = three(2, 0, vec![1, 2], 0);
        b1.apply_state(&s0, 0).unwrap();
        let mut records = Vec::new();
        for i in 0..10 {
            let mut b = BytesMut::from(&batch(1, 5)[..]);
            batch::set_base_offset(&mut b, i);
            batch::set_partition_leader_epoch(&mut b, 0);
            records.extend_from_slice(&b);
        }
        let pos = b1.follower_position().unwrap();
        assert!(b1.append_from_leader(&pos, &records, 4, 0).unwrap());
        // Broker 3 holds the first 4 only.
        b3.apply_state(&s0, 0).unwrap();
        let pos = b3.follower_position().unwrap();
        let first4: usize = {
            let mut n = 0;
            for _ in 0..4 {
                n += BatchHeader::parse(&records[n..]).unwrap().total_size();
            }
            n
        };
        assert!(
            b3.append_from_leader(&pos, &records[..first4], 4, 0)
                .unwrap()
        );
        // Broker 1 leads epoch 1 with HW 4 (broker 2, still in the ISR, has not fetched
        // yet); broker 3 asks from offset 4.
        let s1 = three(1, 1, vec![1, 2], 1);
        b1.apply_state(&s1, 0).unwrap();
        assert_eq!(b1.high_watermark(), 4);
        let read = b1.serve_replica(&fetch(3, 1, (4, 0)), 0).unwrap();
        assert!(read.isr_change.is_none(), "joined short of the epoch start");
        let read = b1.serve_replica(&fetch(3, 1, (10, 0)), 0).unwrap();
        let (_, isr) = read.isr_change.expect("caught up at the epoch start");
        assert_eq!(isr, vec![1, 2, 3]);
    }

    /// A replica that led an epoch without writing in it, then follows a leader that
    /// never heard of that epoch: it forgets the empty epoch and catches up (it used
    /// to be told "diverged" forever, truncating nothing).
    #[test]
    fn an_empty_epoch_led_by_a_follower_does_not_stall_it() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let id = Uuid::new_v4();
        let (a, b) = two_replicas(d1.path(), d2.path(), id);
        a.append(&batch(3, 10), None, 0).unwrap();
        replicate_once(&a, &b, 2);
        // b leads epoch 1 and writes nothing; then a leads epoch 2 and writes.
        let s1 = state(id, 2, 1, vec![1, 2], 1);
        a.apply_state(&s1, 0).unwrap();
        b.apply_state(&s1, 0).unwrap();
        let s2 = state(id, 1, 2, vec![1, 2], 2);
        a.apply_state(&s2, 0).unwrap();
        b.apply_state(&s2, 0).unwrap();
        a.append(&batch(2, 10), None, 0).unwrap();
        for _ in 0..3 {
            replicate_once(&a, &b, 2);
        }
        assert_eq!(
            b.offsets().log_end_offset,
            5,
            "the follower never caught up"
        );
    }

    /// An ISR member whose new incarnation fetches below what the old one had lost
    /// records: the leader takes it out of the ISR at once. A stale request of the same
    /// incarnation changes nothing.
    #[test]
    fn a_follower_whose_log_went_backwards_leaves_the_isr() {
        let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (a, b) = two_replicas(d1.path(), d2.path(), Uuid::new_v4());
        a.append(&batch(5, 10), None, 0).unwrap();
        replicate_once(&a, &b, 2);
        let read = a.serve_replica(&fetch(2, 0, (5, 0)), 0).unwrap();
        assert!(read.isr_change.is_none());
        let read = a.serve_replica(&fetch(2, 0, (2, 0)), 0).unwrap();
        assert!(
            read.isr_change.is_none(),
            "a stale request of the same incarnation"
        );
        let restarted = FollowerFetch {
            replica_epoch: 2,
            ..fetch(2, 0, (2, 0))
        };
        let read = a.serve_replica(&restarted, 0).unwrap();
        let (_, isr) = read.isr_change.expect("removed from the ISR");
        assert_eq!(isr, vec![1]);
    }

    /// A directory whose metadata cannot be read is kept (the partition does not open),
    /// never taken for another topic's and deleted.
    #[test]
    fn unreadable_partition_metadata_deletes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let id = Uuid::new_v4();
        let p = open(dir.path(), id, TopicConfig::default());
        p.append(&batch(5, 5), None, 0).unwrap();
        let pdir = p.dir();
        drop(p);
        let meta = pdir.join(METADATA_FILE);
        std::fs::remove_file(&meta).unwrap();
        std::fs::create_dir(&meta).unwrap(); // reading it fails with EISDIR
        let opened = Partition::open(
            &shared(dir.path(), 1),
            "t",
            0,
            id,
            Arc::new(TopicConfig::default()),
            0,
        );
        assert!(
            opened.is_err(),
            "opened a partition with unreadable metadata"
        );
        let logs = std::fs::read_dir(&pdir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .path()
                    .extension()
                    .is_some_and(|x| x == "log")
            })
            .count();
        assert_eq!(logs, 1, "the partition's data is gone");
        // Readable again: it opens with its data.
        std::fs::remove_dir(&meta).unwrap();
        write_metadata(&pdir, id).unwrap();
        let p = open(dir.path(), id, TopicConfig::default());
        assert_eq!(p.offsets().log_end_offset, 5);
    }

    #[test]
    fn bad_batches_are_refused_and_leave_the_log_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let config = TopicConfig {
            max_message_bytes: 500,
            ..TopicConfig::default()
        };
        let p = open(dir.path(), Uuid::new_v4(), config);
        p.append(&batch(2, 10), None, 0).unwrap();
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
            let err = p.append(&bytes, None, 0).unwrap_err();
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
        let a = p.append(&batch(3, 5), None, 77_000).unwrap();
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
        old.append(&batch(5, 5), None, 0).unwrap();
        drop(old);
        let new = open(dir.path(), Uuid::new_v4(), TopicConfig::default());
        assert_eq!(new.offsets().log_end_offset, 0);
    }
}
