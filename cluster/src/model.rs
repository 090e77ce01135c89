//! An exhaustive model check of replication, elections and restarts, over the same
//! decision functions the broker runs ([`crate::elections::elect`] and the functions of
//! [`crate::rules`]).
//!
//! The world is one partition on a few brokers, with a metastore holding its state and
//! each broker's lease, and a remote tier. Every interleaving of these steps is explored
//! (depth first, each distinct world once):
//! - a produce with acks=1 or acks=all at a broker that leads with a valid lease, and
//!   the acknowledgement of an acks=all produce once the HW passed it;
//! - a follower's fetch from the broker it follows: the divergence check, truncation,
//!   copying, the leader's HW, and an ISR addition written to the metastore (the leader
//!   learns of it later);
//! - a leader dropping a lagging or dead follower from the ISR;
//! - a broker learning the metastore's state;
//! - the controller's pass (compare-and-set, guarded by the leases);
//! - a crash, and a restart that keeps the log, loses an unflushed tail (any suffix) or
//!   starts on an empty disk: a new incarnation, which leaves the ISRs before it renews
//!   its lease;
//! - a lease running out (a crash, or a pause or partition past the lease) and its
//!   renewal by a broker that runs;
//! - an upload of the leader's log below its HW, and local retention of what was
//!   uploaded; a leader whose log diverges from the bucket's (by epochs) cuts the
//!   remote log there first.
//!
//! Invariants, checked in every state (records that a restart lost from the only
//! member of the ISR and ELR holding them are given up with it: with
//! min.insync.replicas 1 a lone member may hold acknowledged records):
//! - every acks=all-acknowledged record is in the log (or the bucket, below the local
//!   log start) of every broker acting as leader, at its offset;
//! - no offset below a HW that was ever exposed changes value;
//! - at most one broker writes in each leader epoch;
//! - once every broker runs, has left the ISRs after its restart and holds its lease,
//!   the controller elects a leader: no partition stays offline while its replicas live.
//!
//! Each guard of [`Guards`] can be turned off, the old logic it replaced taking its
//! place; the tests show that each one is needed and that the logic before them loses
//! acknowledged records.

use std::collections::HashMap;

use smallvec::{SmallVec, smallvec};

use shale_metastore::{PartitionState, Recovering};

use crate::elections::{TopicRules, elect};
use log::{Log, remote_divergence_of, takeover_start_of};

mod invariants;
mod log;
mod search;
mod steps;
use crate::rules::{
    FetchCheck, after_restart, check_follower_fetch, elr_after_isr_change, high_watermark,
    last_batch_epoch, may_join_isr, state_known, still_recovering, truncation_point,
};

pub(super) use search::check;

/// The model's lists: a few entries each, kept inline (a world is cloned for every
/// step explored).
type Small<T> = SmallVec<[T; 4]>;

/// The protocol's guards against loss; each can be turned off to show it is needed.
#[derive(Debug, Clone, Copy)]
pub(super) struct Guards {
    /// The HW does not move while the ISR is below min.insync.replicas.
    pub(super) strict_min_isr: bool,
    /// A new incarnation is live only once it renewed its lease itself.
    pub(super) fresh_lease: bool,
    /// A restarting broker leaves the ISR and ELR with the log it came back with, and
    /// the most complete such log is elected once no member is left.
    pub(super) recovery: bool,
    /// The divergence check runs when a follower fetches at the leader's log start.
    pub(super) divergence_at_log_start: bool,
    /// The HW waits for followers whose ISR addition was written.
    pub(super) maximal_isr: bool,
    /// A leader counts a follower's fetch only once it knows the partition state the
    /// follower saw.
    pub(super) state_version: bool,
    /// A leader cuts the remote log where it stops matching its own log (by epochs),
    /// before it copies to it or trims its local log.
    pub(super) remote_lineage: bool,
}

impl Guards {
    pub(super) const ALL: Guards = Guards {
        strict_min_isr: true,
        fresh_lease: true,
        recovery: true,
        divergence_at_log_start: true,
        maximal_isr: true,
        state_version: true,
        remote_lineage: true,
    };
    pub(super) const NONE: Guards = Guards {
        strict_min_isr: false,
        fresh_lease: false,
        recovery: false,
        divergence_at_log_start: false,
        maximal_isr: false,
        state_version: false,
        remote_lineage: false,
    };
}

/// The size of the world explored.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) brokers: usize,
    pub(super) min_isr: usize,
    /// Records produced in all.
    pub(super) records: u8,
    /// Crashes in all.
    pub(super) crashes: u8,
    /// Whether a restart may lose a tail or the whole disk (one replica at a time).
    pub(super) lose_data: bool,
    /// Whether the leader uploads and trims its local log.
    pub(super) tiering: bool,
    /// Leases that may run out while their broker runs (pauses), in all.
    pub(super) pauses: u8,
    /// ISR shrinks by a leader, in all (each is followed by as many additions: without
    /// a bound, shrinking and growing again would make the world infinite).
    pub(super) shrinks: u8,
}

/// The partition's state in the metastore.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Meta {
    leader: i32,
    epoch: i32,
    isr: Small<i32>,
    elr: Small<i32>,
    recovering: Small<Recovering>,
    version: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Node {
    up: bool,
    incarnation: i64,
    /// Restarted, and not yet out of the ISRs (its lease cannot be renewed yet).
    leaving: bool,
    log: Log,
    /// The partition state this broker applied last.
    role: Option<Meta>,
    hw: i64,
    /// Leader: each follower's log end and incarnation (-1: not heard from).
    progress: Small<(i64, i64)>,
    /// Leader: followers whose ISR addition it wrote.
    pending: Small<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    nodes: Small<Node>,
    meta: Meta,
    /// Per broker: whether its lease runs in the metastore, and which incarnation
    /// renewed it last.
    leases: Small<(bool, i64)>,
    remote: Small<(i32, u8)>,
    /// acks=all produces waiting for the HW: (broker, epoch, offset, value).
    waiting: Small<(i32, i32, i64, u8)>,
    acked: Small<(i64, u8)>,
    /// Values at every offset below the highest HW exposed so far.
    exposed: Small<u8>,
    /// Who wrote in each epoch.
    writers: Small<(i32, i32)>,
    produced: u8,
    crashes: u8,
    /// A restart lost data (once per run: one replica losing data is what replication
    /// covers; all of them losing it at once is docs/durability.md's power loss of all replicas).
    lost: bool,
    pauses: u8,
    shrinks: u8,
}

/// What the check found.
#[derive(Debug)]
pub(super) struct Outcome {
    pub(super) states: usize,
    /// The first invariant broken, with the steps that led there.
    pub(super) violation: Option<(String, Vec<String>)>,
}

struct Model {
    guards: Guards,
    bounds: Bounds,
    /// Whether steps are labelled (for a trace; the search itself needs no labels).
    labels: bool,
}

impl Model {
    /// A step's label, made only when labels are wanted.
    fn say(&self, label: impl FnOnce() -> String) -> String {
        if self.labels { label() } else { String::new() }
    }

    fn rules(&self) -> TopicRules {
        TopicRules {
            min_isr: self.bounds.min_isr,
            unclean: false,
        }
    }

    fn initial(&self) -> World {
        let ids: Small<i32> = (0..self.bounds.brokers as i32).collect();
        let meta = Meta {
            leader: 0,
            epoch: 0,
            isr: ids.clone(),
            elr: Small::new(),
            recovering: Small::new(),
            version: 0,
        };
        let node = Node {
            up: true,
            incarnation: 1,
            leaving: false,
            log: Log {
                start: 0,
                entries: Small::new(),
                epochs: Small::new(),
            },
            role: None,
            hw: 0,
            progress: smallvec![(-1, -1); self.bounds.brokers],
            pending: Small::new(),
        };
        let mut w = World {
            nodes: smallvec![node; self.bounds.brokers],
            meta,
            leases: smallvec![(true, 1); self.bounds.brokers],
            remote: Small::new(),
            waiting: Small::new(),
            acked: Small::new(),
            exposed: Small::new(),
            writers: Small::new(),
            produced: 0,
            crashes: 0,
            lost: false,
            pauses: 0,
            shrinks: 0,
        };
        for b in 0..self.bounds.brokers {
            self.apply_meta(&mut w, b);
        }
        w
    }

    fn state_of(&self, m: &Meta) -> PartitionState {
        PartitionState {
            topic_id: uuid::Uuid::nil(),
            partition: 0,
            replicas: (0..self.bounds.brokers as i32).collect(),
            leader: m.leader,
            leader_epoch: m.epoch,
            isr: m.isr.to_vec(),
            elr: m.elr.to_vec(),
            recovering: m.recovering.to_vec(),
            adding: Vec::new(),
            removing: Vec::new(),
            version: m.version,
        }
    }

    fn meta_of(s: &PartitionState) -> Meta {
        Meta {
            leader: s.leader,
            epoch: s.leader_epoch,
            isr: Small::from_slice(&s.isr),
            elr: Small::from_slice(&s.elr),
            recovering: Small::from_slice(&s.recovering),
            version: s.version,
        }
    }

    /// Live as the controller sees it: a running lease, renewed by the registered
    /// incarnation (or, without the guard, by any).
    fn live(&self, w: &World) -> HashMap<i32, i64> {
        (0..self.bounds.brokers)
            .filter(|&b| {
                let (running, holder) = w.leases[b];
                running && (holder == w.nodes[b].incarnation || !self.guards.fresh_lease)
            })
            .map(|b| (b as i32, w.nodes[b].incarnation))
            .collect()
    }

    /// Whether broker `b` may act as leader now: it runs and trusts its own lease.
    fn acting_leader(&self, w: &World, b: usize) -> bool {
        let n = &w.nodes[b];
        n.up && w.leases[b] == (true, n.incarnation)
            && n.role.as_ref().is_some_and(|r| r.leader == b as i32)
    }

    fn advance_hw(&self, w: &mut World, b: usize) {
        let n = &w.nodes[b];
        let Some(role) = &n.role else { return };
        if role.leader != b as i32 {
            return;
        }
        let min_isr = if self.guards.strict_min_isr {
            self.bounds.min_isr
        } else {
            0
        };
        let mut members: Small<i32> = role.isr.clone();
        if self.guards.maximal_isr {
            members.extend(n.pending.iter().copied());
        }
        let hw = high_watermark(
            n.hw,
            n.log.leo(),
            role.isr.len(),
            min_isr,
            members
                .iter()
                .filter(|&&f| f != b as i32)
                .map(|&f| n.progress[f as usize].0),
        );
        w.nodes[b].hw = hw;
    }

    /// Broker `b` adopts the metastore's state if newer (as `Partition::apply_state`).
    fn apply_meta(&self, w: &mut World, b: usize) {
        let meta = w.meta.clone();
        let n = &mut w.nodes[b];
        if n.role.as_ref().is_some_and(|r| r.version >= meta.version) {
            return;
        }
        let was_leading = n
            .role
            .as_ref()
            .filter(|r| r.leader == b as i32)
            .map(|r| r.epoch);
        n.pending.clear();
        if meta.leader == b as i32 && was_leading != Some(meta.epoch) {
            // Less than the bucket holds, all of it matching: take the bucket over.
            let takeover = if self.guards.remote_lineage {
                takeover_start_of(&w.remote, &n.log)
            } else {
                None
            };
            if let Some(start) = takeover {
                n.log.reset_to(start);
                n.hw = n.hw.max(start);
            }
            n.log.start_epoch(meta.epoch);
            n.progress = smallvec![(-1, -1); self.bounds.brokers];
        }
        n.role = Some(meta);
        self.advance_hw(w, b);
    }

    /// A compare-and-set of the partition state on `version`.
    fn write_meta(w: &mut World, next: Meta, version: i64) -> bool {
        if w.meta.version != version {
            return false;
        }
        w.meta = Meta {
            version: version + 1,
            ..next
        };
        true
    }

    /// Records what acting leader `b` exposes below its HW.
    fn expose(w: &mut World, b: usize) {
        for o in w.exposed.len() as i64..w.nodes[b].hw {
            match Self::read(w, b, o) {
                Some(v) => w.exposed.push(v),
                None => break,
            }
        }
    }
}
