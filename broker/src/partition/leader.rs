//! The leader's side of replication for one partition: followers' progress, the high
//! watermark, ISR changes, and answering a follower's fetch.

use bytes::Bytes;

use super::{Partition, Replica, Role};
use crate::error::{Error, Result};
use shale_cluster::rules::{FetchCheck, check_follower_fetch, may_join_isr};

/// One partition of a follower's fetch, as the leader sees it.
#[derive(Debug, Clone, Copy)]
pub struct FollowerFetch {
    pub replica_id: i32,
    /// The follower's incarnation (broker epoch).
    pub replica_epoch: i64,
    pub current_leader_epoch: i32,
    pub fetch_offset: i64,
    pub last_fetched_epoch: i32,
    /// The version of the partition state the follower applied last (0: unknown).
    pub state_version: i64,
    /// The first offset it serves to consumers (`None`: not said).
    pub log_start_offset: Option<i64>,
    pub max_bytes: usize,
}

/// The leader's answer for one partition.
#[derive(Debug, Clone)]
pub struct LeaderRead {
    pub records: Bytes,
    pub high_watermark: i64,
    pub local_log_start_offset: i64,
    /// (epoch, end offset) when the follower's log diverged.
    pub diverging: Option<(i32, i64)>,
    /// The ISR to write, and the role it was computed from: with the follower once it
    /// has caught up, or without it once its log went backwards (it lost records).
    pub isr_change: Option<(Role, Vec<i32>)>,
}

/// What the leader knows of one follower.
#[derive(Debug, Clone, Copy)]
pub(super) struct FollowerProgress {
    /// The follower's log end offset (its last fetch offset).
    pub(super) leo: i64,
    /// Last time the follower had fetched up to the leader's log end of its previous
    /// fetch (Kafka's lastCaughtUpTime).
    pub(super) caught_up_ms: i64,
    /// The leader's log end when it answered the follower's previous fetch.
    pub(super) leader_leo_at_last_fetch: i64,
    /// The follower's incarnation that fetched last (-1: none yet).
    pub(super) broker_epoch: i64,
    /// The first offset it serves to consumers, as its last fetch said (`None`: not
    /// heard).
    pub(super) log_start: Option<i64>,
}

impl FollowerProgress {
    /// A follower not heard from yet, as of `now_ms` with the leader's log at `leo`.
    pub(super) fn unheard(now_ms: i64, leo: i64) -> Self {
        Self {
            leo: -1,
            caught_up_ms: now_ms,
            leader_leo_at_last_fetch: leo,
            broker_epoch: -1,
            log_start: None,
        }
    }
}

impl Partition {
    /// Leader: raises the HW to the smallest log end over the maximal ISR (the ISR and
    /// the members whose addition was sent to the metastore), unless the ISR is below
    /// min.insync.replicas (see [`shale_cluster::rules::high_watermark`]). Followers not heard
    /// from since this epoch began hold it where it is.
    pub(super) fn advance_hw(&self, r: &mut Replica) {
        if r.role.leader != self.broker_id {
            return;
        }
        let current = self.high_watermark();
        let min_isr = self.config().min_insync_replicas.max(1) as usize;
        let leo = r.log.log_end_offset();
        let members = r.role.isr.iter().chain(&r.pending_isr);
        let hw = shale_cluster::rules::high_watermark(
            current,
            leo,
            r.role.isr.len(),
            min_isr,
            members
                .filter(|&&b| b != self.broker_id)
                .map(|b| r.followers.get(b).map_or(-1, |f| f.leo)),
        );
        if hw > current {
            r.log.settle_transactions(hw);
            self.high_watermark.send_replace(hw);
        }
        // Held by the strict min-ISR rule: records above the HW are neither readable
        // nor uploaded, and the local log grows, until the ISR recovers.
        let held = r.role.isr.len() < min_isr && leo > hw;
        if held != r.hw_held {
            r.hw_held = held;
            if held {
                tracing::warn!(topic = %self.topic, partition = self.index, high_watermark = hw,
                    log_end_offset = leo, isr = ?r.role.isr, min_insync_replicas = min_isr,
                    "high watermark held: the ISR is below min.insync.replicas, so records above it \
                     stay unreadable and local until the ISR recovers");
            } else {
                tracing::info!(topic = %self.topic, partition = self.index, high_watermark = hw,
                    isr = ?r.role.isr, "high watermark no longer held by min.insync.replicas");
            }
        }
    }

    /// Leader: whether its HW is held by the strict min-ISR rule (records above it).
    pub fn hw_held(&self) -> bool {
        let r = self.replica();
        r.role.leader == self.broker_id && r.hw_held
    }

    /// Leader: an ISR change it proposed for the role at `version` was not sent;
    /// followers it would have added no longer count for the HW.
    pub fn isr_change_not_sent(&self, version: i64) {
        let mut r = self.replica();
        if r.role.version == version {
            r.pending_isr.clear();
        }
    }

    /// Leader: followers in the ISR that have not caught up within `lag_ms`; the ISR
    /// without them, if any.
    pub fn isr_to_shrink(&self, now_ms: i64, lag_ms: i64) -> Option<(Role, Vec<i32>)> {
        // A read replica's followers fetch nothing: each follows the source's bucket.
        if !self.config().read_replica_of.is_empty() {
            return None;
        }
        let mut r = self.replica();
        if r.role.leader != self.broker_id {
            return None;
        }
        // A proposed member that fell behind since: its addition failed (the metadata
        // reloaded after the failure would have shown it otherwise), so it no longer
        // holds the HW.
        let Replica {
            pending_isr,
            followers,
            ..
        } = &mut *r;
        pending_isr.retain(|b| {
            followers
                .get(b)
                .is_some_and(|f| now_ms - f.caught_up_ms <= lag_ms)
        });
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

    /// Leader: the largest epoch <= `leader_epoch` and where it ends in this log (the
    /// log end for the current epoch; (-1, -1) below the first known epoch), after
    /// checking the client's `current_leader_epoch` (-1: unchecked).
    pub fn epoch_end_offset(
        &self,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64)> {
        let r = self.replica();
        self.ensure_leader(&r.role)?;
        let current = r.role.leader_epoch;
        if current_leader_epoch >= 0 && current_leader_epoch < current {
            return Err(Error::FencedLeaderEpoch {
                sent: current_leader_epoch,
                current,
            });
        }
        if current_leader_epoch > current {
            return Err(Error::UnknownLeaderEpoch {
                sent: current_leader_epoch,
                current,
            });
        }
        if !self.config().read_replica_of.is_empty() {
            let remote = self.remote_state();
            return Ok(remote.epoch_end_offset(leader_epoch).unwrap_or((-1, -1)));
        }
        Ok(r.log.epoch_end_offset(leader_epoch).unwrap_or((-1, -1)))
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
            if f.current_leader_epoch > r.role.leader_epoch
                || !shale_cluster::rules::state_known(r.role.version, f.state_version)
            {
                // This broker has not heard of the new epoch yet, or of a change the
                // follower has seen (it may have left the ISR at its restart): it
                // reloads the metadata before it counts the follower (see
                // `answer_replica_fetch`).
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
            let epoch_end = (f.last_fetched_epoch >= 0)
                .then(|| r.log.epoch_end_offset(f.last_fetched_epoch))
                .flatten();
            match check_follower_fetch(
                f.fetch_offset,
                f.last_fetched_epoch,
                local_start,
                leo,
                epoch_end,
            ) {
                FetchCheck::Serve => {}
                FetchCheck::Diverging(epoch, end) => {
                    out.diverging = Some((epoch, end));
                    return Ok(out);
                }
                FetchCheck::OutOfRange => {
                    return Err(Error::OffsetOutOfRange {
                        offset: f.fetch_offset,
                        log_start: local_start,
                        log_end: leo,
                    });
                }
            }
            // A follower joins the ISR only at the HW and at the start of this epoch: a
            // new leader's HW may lag what the last leader acknowledged (KAFKA-7128).
            let epoch_start = r.log.epoch_start_offset(r.role.leader_epoch).unwrap_or(leo);
            let hw = self.high_watermark();
            // Only an ISR member's log is known to have only grown: a follower outside
            // it may have deleted its copy (a reassignment that removed and re-added
            // it), so its position is what it says now.
            let member =
                r.role.isr.contains(&f.replica_id) || r.pending_isr.contains(&f.replica_id);
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
                    p.leo = if same && member {
                        p.leo.max(f.fetch_offset)
                    } else {
                        f.fetch_offset
                    };
                    p.leader_leo_at_last_fetch = leo;
                    p.broker_epoch = f.replica_epoch;
                    p.log_start = f.log_start_offset;
                    (may_join_isr(p.leo, hw, epoch_start), went_back)
                }
                None => return Err(Error::NotReplica(f.replica_id)),
            };
            self.advance_hw(&mut r);
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
                // Electable once the metastore has it: the HW waits for it from now.
                if !r.pending_isr.contains(&f.replica_id) {
                    r.pending_isr.push(f.replica_id);
                }
            }
            (r.log.plan_read(f.fetch_offset, leo)?, out)
        };
        let records = plan.read(f.max_bytes, true)?;
        Ok(LeaderRead { records, ..out })
    }

    /// Every batch of the local log (tests compare replicas with it).
    #[cfg(test)]
    pub(super) fn read_replica_bytes(&self) -> (Bytes, i64) {
        let r = self.replica();
        let leo = r.log.log_end_offset();
        let plan = r.log.plan_read(r.log.log_start_offset(), leo).unwrap();
        (plan.read(usize::MAX, true).unwrap(), leo)
    }
}
