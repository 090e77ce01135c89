//! Partition reassignment, as Kafka does it (KIP-455), as pure functions of a
//! partition's state: starting one, cancelling it, and the controller's step that
//! finishes it.
//!
//! While a reassignment runs, `replicas` is the target replicas followed by the
//! original ones that leave, `adding` the target replicas that are new and `removing`
//! the original ones that are not in the target. The adding replicas open the
//! partition, fetch from the leader like any follower (a tiered partition's new replica
//! starts at the leader's local log start, so only the local tail crosses the network)
//! and join the ISR once caught up. Then the controller finishes it: `replicas` becomes
//! the target, the removing replicas leave the ISR and the ELR, and, if the leader is
//! one of them, the first live target replica in the ISR leads at a new epoch (as a
//! preferred election does: the old leader cannot acknowledge acks=all records without
//! the new one, which stops fetching from it). Replicas that are no longer assigned
//! delete their copy.

use shale_metastore::PartitionState;

/// Why a reassignment cannot start or be cancelled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReassignError {
    #[error("the target replica list is empty")]
    Empty,
    #[error("broker {0} is listed twice in the target replicas")]
    Duplicate(i32),
    #[error("no reassignment is in flight for this partition")]
    NoneInFlight,
    #[error(
        "replicas {dropped:?} would leave while they hold records the others may lack \
         (ISR {isr:?}, eligible {elr:?}): the ISR would keep {left} of the {need} in-sync \
         copies it needs"
    )]
    WouldLoseCopies {
        dropped: Vec<i32>,
        isr: Vec<i32>,
        elr: Vec<i32>,
        left: usize,
        need: usize,
    },
}

/// The replicas the partition had before the reassignment in flight (its replicas
/// when none is), in their order in `replicas`.
pub fn original_replicas(state: &PartitionState) -> Vec<i32> {
    state
        .replicas
        .iter()
        .copied()
        .filter(|b| !state.adding.contains(b))
        .collect()
}

/// The replicas the partition will have once the reassignment in flight finishes
/// (its replicas when none is).
pub fn target_replicas(state: &PartitionState) -> Vec<i32> {
    state
        .replicas
        .iter()
        .copied()
        .filter(|b| !state.removing.contains(b))
        .collect()
}

/// The in-sync copies a partition keeps when replicas leave it: `min_isr`, or all of
/// the `replicas` it keeps if fewer, and at least one.
fn copies_needed(min_isr: usize, replicas: usize) -> usize {
    min_isr.min(replicas).max(1)
}

/// The state that starts a reassignment of the partition to `target` (preferred
/// leader first), replacing one in flight as Kafka does: the original replicas stay
/// those from before the first. `None` if it changes nothing. A target that only
/// reorders the original replicas (or is them) takes effect at once.
///
/// Replacing one in flight (or cancelling it) drops the adding replicas that are not
/// in the new target. One that is in the ISR or the ELR, or is recovering, may hold
/// records the others lack, so it may leave only while the ISR keeps
/// `min.insync.replicas` members (`min_isr`; all the replicas kept if fewer) and the
/// partition has a leader.
pub fn start(
    state: &PartitionState,
    target: &[i32],
    min_isr: usize,
) -> Result<Option<PartitionState>, ReassignError> {
    if target.is_empty() {
        return Err(ReassignError::Empty);
    }
    for (i, b) in target.iter().enumerate() {
        if target[..i].contains(b) {
            return Err(ReassignError::Duplicate(*b));
        }
    }
    let original = original_replicas(state);
    let adding: Vec<i32> = target
        .iter()
        .copied()
        .filter(|b| !original.contains(b))
        .collect();
    let removing: Vec<i32> = original
        .iter()
        .copied()
        .filter(|b| !target.contains(b))
        .collect();
    let mut replicas = target.to_vec();
    replicas.extend(&removing);
    let mut next = PartitionState {
        replicas,
        adding,
        removing,
        ..state.clone()
    };
    // Replicas being dropped from an earlier target leave the sets they had joined.
    let kept = |b: &i32| next.replicas.contains(b);
    next.isr.retain(kept);
    next.elr.retain(kept);
    next.recovering.retain(|r| kept(&r.broker));
    let dropped: Vec<i32> = state
        .replicas
        .iter()
        .copied()
        .filter(|b| !kept(b))
        .collect();
    let holds = |b: &i32| {
        state.isr.contains(b)
            || state.elr.contains(b)
            || state.recovering.iter().any(|r| r.broker == *b)
    };
    let need = copies_needed(min_isr, next.replicas.len());
    if dropped.iter().any(holds) && (next.isr.len() < need || state.leader < 0) {
        return Err(ReassignError::WouldLoseCopies {
            dropped,
            isr: state.isr.clone(),
            elr: state.elr.clone(),
            left: next.isr.len(),
            need,
        });
    }
    if !next.isr.contains(&next.leader) && next.leader >= 0 {
        // The leader was an adding replica of the earlier target: the partition goes
        // offline at a new epoch, and the controller elects among the ISR.
        next.leader = -1;
        next.leader_epoch += 1;
    }
    Ok((next != *state).then_some(next))
}

/// The state that cancels the reassignment in flight: the partition goes back to its
/// original replicas (in the order they have in the replica list, as Kafka's
/// controller does), and the adding replicas leave the ISR (and delete their copies),
/// under [`start`]'s rule for replicas that may hold records.
pub fn cancel(state: &PartitionState, min_isr: usize) -> Result<PartitionState, ReassignError> {
    if !state.reassigning() {
        return Err(ReassignError::NoneInFlight);
    }
    let original = original_replicas(state);
    Ok(start(state, &original, min_isr)?.unwrap_or_else(|| state.clone()))
}

/// The controller's step for a reassignment in flight, `None` while it must wait:
/// once the partition has a leader, every adding replica is in the ISR, and the ISR
/// keeps `min.insync.replicas` target replicas (`min_isr`; all of them if fewer), the
/// partition keeps only its target replicas. A leader that leaves hands over to the
/// first target replica in the ISR that `is_live` (waiting while none is), at a new
/// epoch. The replicas that leave delete their copies, so a finish that left fewer
/// in-sync copies than that would leave acknowledged records on too few brokers.
pub fn finish(
    state: &PartitionState,
    is_live: impl Fn(i32) -> bool,
    min_isr: usize,
) -> Option<PartitionState> {
    if !state.reassigning()
        || state.leader < 0
        || !state.adding.iter().all(|b| state.isr.contains(b))
    {
        return None;
    }
    let target = target_replicas(state);
    let stays = |b: &i32| target.contains(b);
    let isr: Vec<i32> = state.isr.iter().copied().filter(stays).collect();
    if isr.len() < copies_needed(min_isr, target.len()) {
        return None;
    }
    let (leader, leader_epoch) = if state.leader >= 0 && !stays(&state.leader) {
        let next = target
            .iter()
            .copied()
            .find(|b| isr.contains(b) && is_live(*b))?;
        (next, state.leader_epoch + 1)
    } else {
        (state.leader, state.leader_epoch)
    };
    Some(PartitionState {
        replicas: target.clone(),
        leader,
        leader_epoch,
        isr,
        elr: state.elr.iter().copied().filter(stays).collect(),
        recovering: state
            .recovering
            .iter()
            .copied()
            .filter(|r| stays(&r.broker))
            .collect(),
        adding: Vec::new(),
        removing: Vec::new(),
        ..state.clone()
    })
}

#[cfg(test)]
mod tests;
