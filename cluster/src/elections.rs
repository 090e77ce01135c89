//! The controller's decisions, apart from the code that reads and writes the
//! metastore: who leads a partition after deaths, and what the ISR and ELR become.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use shale_metastore::PartitionState;

/// Full controller passes run at least once in this many.
const FULL_PASS_EVERY: u32 = 10;

/// What the controller's last full pass saw and whether it decided everything.
#[derive(Debug, Default)]
struct ControllerView {
    settled: bool,
    live: HashMap<i32, i64>,
    digest: u64,
    skipped: u32,
}

/// What the controller remembers between its passes.
#[derive(Debug)]
pub struct ControllerState {
    /// The controller lease's epoch at the last pass this broker was the controller.
    epoch: AtomicI64,
    view: Mutex<ControllerView>,
    /// When leader balance was last checked.
    last_rebalance: Mutex<Option<Instant>>,
    /// When the balancer last planned.
    last_balance: Mutex<Option<Instant>>,
}

impl Default for ControllerState {
    fn default() -> Self {
        Self {
            epoch: AtomicI64::new(0),
            view: Mutex::new(ControllerView::default()),
            last_rebalance: Mutex::new(Some(Instant::now())),
            last_balance: Mutex::new(None),
        }
    }
}

impl ControllerState {
    /// Records the controller lease's epoch; whether it is a new one (this broker
    /// just became the controller).
    pub fn took_epoch(&self, epoch: i64) -> bool {
        self.epoch.swap(epoch, Ordering::Relaxed) != epoch
    }

    /// Whether a leader-balance check is due, `every` after the last; if so, the
    /// period starts again.
    pub fn rebalance_due(&self, every: Duration) -> bool {
        due(&self.last_rebalance, every)
    }

    /// Whether the balancer is due, `every` after it last planned; if so, the period
    /// starts again.
    pub fn balance_due(&self, every: Duration) -> bool {
        due(&self.last_balance, every)
    }

    /// Whether a pass may be skipped: neither the live brokers nor any partition
    /// state (`digest`) changed since a pass that decided everything, and no full
    /// pass is due (one runs every [`FULL_PASS_EVERY`] passes, should a change go
    /// unseen).
    pub fn may_skip(&self, live: &HashMap<i32, i64>, digest: u64) -> bool {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        view.skipped += 1;
        let unchanged = view.settled && view.live == *live && view.digest == digest;
        if unchanged && view.skipped < FULL_PASS_EVERY {
            return true;
        }
        view.skipped = 0;
        false
    }

    /// Remembers what a pass saw and whether it decided everything.
    pub fn passed(&self, settled: bool, live: HashMap<i32, i64>, digest: u64) {
        let mut view = self.view.lock().unwrap_or_else(|e| e.into_inner());
        view.settled = settled;
        view.live = live;
        view.digest = digest;
    }
}

/// Whether `every` has passed since `last`; if so, `last` becomes now.
fn due(last: &Mutex<Option<Instant>>, every: Duration) -> bool {
    let mut last = last.lock().unwrap_or_else(|e| e.into_inner());
    let due = last.is_none_or(|t| t.elapsed() >= every);
    if due {
        *last = Some(Instant::now());
    }
    due
}

/// How the controller sees one partition's topic.
#[derive(Debug, Clone, Copy)]
pub struct TopicRules {
    pub min_isr: usize,
    pub unclean: bool,
}

/// The controller's decision for one partition: `None` if nothing changes (its leader
/// and ISR are alive, or it stays offline). `live` maps each live broker to its
/// incarnation.
///
/// A live leader keeps its epoch; dead brokers leave its ISR at once (as KRaft fences
/// them) instead of after the leader's `replica_lag_time_max_ms`, so acks=all stalls at
/// most a lease on a dead follower. A broker that leaves the ISR because it died while
/// the ISR is below `min.insync.replicas` becomes an eligible leader replica (ELR,
/// KIP-966): no acks=all record can be committed without it from then on, so when no
/// ISR member is alive it may lead without losing any. A dead leader is replaced by the
/// first live ISR member in replica order, else the first live ELR member, else, when
/// every member left at an unclean restart, the recovering replica with the most
/// complete log once it is live, else (with `unclean.leader.election.enable`) any live
/// replica; otherwise the partition goes offline, keeping its ISR and ELR so a member
/// can lead again when it returns.
pub fn elect(
    state: &PartitionState,
    live: &HashMap<i32, i64>,
    rules: TopicRules,
) -> Option<PartitionState> {
    let is_live = |b: &i32| live.contains_key(b);
    let dead: Vec<i32> = state.isr.iter().copied().filter(|b| !is_live(b)).collect();
    // The ISR without its dead members; those become eligible while it is too small.
    let shrink = |isr: Vec<i32>, elr: &mut Vec<i32>| {
        if isr.len() < rules.min_isr {
            for b in &dead {
                if !elr.contains(b) {
                    elr.push(*b);
                }
            }
        }
        elr.retain(|b| !isr.contains(b));
        isr
    };
    if state.leader >= 0 && is_live(&state.leader) {
        if dead.is_empty() {
            return None;
        }
        let mut elr = state.elr.clone();
        let isr = shrink(
            state.isr.iter().copied().filter(is_live).collect(),
            &mut elr,
        );
        return Some(PartitionState {
            isr,
            elr,
            ..state.clone()
        });
    }
    let in_order = |set: &[i32]| -> Vec<i32> {
        state
            .replicas
            .iter()
            .copied()
            .filter(|b| set.contains(b) && is_live(b))
            .collect()
    };
    let no_member = state.isr.is_empty() && state.elr.is_empty();
    let live_isr = in_order(&state.isr);
    let live_elr = in_order(&state.elr);
    let mut elr = state.elr.clone();
    let (leader, isr) = if let Some(&leader) = live_isr.first() {
        (leader, shrink(live_isr, &mut elr))
    } else if let Some(&leader) = live_elr.first() {
        tracing::info!(topic_id = %state.topic_id, partition = state.partition, leader,
            "no ISR member is alive: electing an eligible leader replica");
        (leader, shrink(vec![leader], &mut elr))
    } else if let Some(leader) = no_member
        .then(|| crate::rules::best_recovering(state, |b| is_live(&b)))
        .flatten()
    {
        // Every member left at an unclean restart: the one with the most complete log
        // leads once it is live.
        tracing::warn!(topic_id = %state.topic_id, partition = state.partition, leader,
            recovering = ?state.recovering,
            "every replica restarted uncleanly: electing the one with the most complete log");
        elr.clear();
        (leader, vec![leader])
    } else if let Some(leader) = rules
        .unclean
        .then(|| unclean_choice(state, &is_live))
        .flatten()
    {
        tracing::warn!(topic_id = %state.topic_id, partition = state.partition, leader,
            "unclean leader election: records acknowledged by the old ISR may be lost");
        elr.clear();
        (leader, vec![leader])
    } else if no_member && !state.recovering.is_empty() {
        // Waiting for the recovering replica with the most complete log.
        if state.leader < 0 {
            return None;
        }
        (-1, Vec::new())
    } else if state.leader >= 0 {
        // Offline until an ISR or ELR member returns.
        (-1, state.isr.clone())
    } else {
        return None;
    };
    let recovering = crate::rules::still_recovering(&state.recovering, &isr);
    Some(PartitionState {
        leader,
        leader_epoch: state.leader_epoch + 1,
        isr,
        elr,
        recovering,
        ..state.clone()
    })
}

/// An unclean election's leader: the live recovering replica with the most complete
/// log, else the first live replica.
fn unclean_choice(state: &PartitionState, is_live: &impl Fn(&i32) -> bool) -> Option<i32> {
    let live_recovering = PartitionState {
        recovering: state
            .recovering
            .iter()
            .filter(|r| is_live(&r.broker))
            .copied()
            .collect(),
        ..state.clone()
    };
    crate::rules::best_recovering(&live_recovering, |b| is_live(&b))
        .or_else(|| state.replicas.iter().copied().find(|b| is_live(b)))
}

#[cfg(test)]
mod tests;
