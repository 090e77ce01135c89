//! The replication protocol's decisions, as pure functions of their inputs: how far a
//! leader's high watermark may move, when a follower joins the ISR, what the eligible
//! replicas become when the ISR changes, whether a follower's fetch diverged, where it
//! truncates, and what a restarting broker gives up. (The controller's election is
//! [`crate::elections::elect`].) The production code calls these, and so does the
//! model check in `model.rs`, which explores every interleaving of a small
//! cluster against the durability invariants: a rule changed here is a rule checked.

use shale_metastore::{PartitionState, Recovering};

/// The leader's high watermark: the smallest log end offset over the ISR, raised only.
///
/// - `isr_size` is the ISR the metastore holds (the committed one). While it is
///   smaller than `min_isr` the HW stays where it is (KIP-966's strict rule): an
///   eligible replica that left the ISR below min.insync.replicas may be elected with
///   none of what was written since, so none of it may count as committed.
/// - `follower_leos` are the log ends of the other members of the *maximal* ISR (the
///   committed one plus members whose addition was sent to the metastore but not yet
///   seen back): a follower that the metastore may already list is electable, so the
///   HW must not pass it. -1 is a follower not heard from since this epoch began; it
///   holds the HW where it is.
pub fn high_watermark(
    current: i64,
    leader_leo: i64,
    isr_size: usize,
    min_isr: usize,
    follower_leos: impl IntoIterator<Item = i64>,
) -> i64 {
    if isr_size < min_isr {
        return current;
    }
    let hw = follower_leos
        .into_iter()
        .map(|leo| if leo < 0 { current } else { leo })
        .fold(leader_leo, i64::min);
    hw.max(current)
}

/// Whether a leader that applied partition state `leader_version` may count a
/// follower's fetch made after it applied `follower_version` (0: a follower that does
/// not say). A follower that saw a newer state may have left the ISR meanwhile (a
/// restarted broker leaves before it fetches), so the leader must not count it as a
/// member for its HW before it knows.
pub fn state_known(leader_version: i64, follower_version: i64) -> bool {
    follower_version <= leader_version
}

/// Whether a follower whose log ends at `follower_leo` may join the ISR: it has every
/// committed record (`hw`) and reached the start of the leader's epoch, since a new
/// leader's HW may lag what the last one acknowledged (KAFKA-7128).
pub fn may_join_isr(follower_leo: i64, hw: i64, epoch_start: i64) -> bool {
    follower_leo >= hw && follower_leo >= epoch_start
}

/// The eligible leader replicas after the leader changes the ISR from `before` to
/// `isr` (KIP-966). Once the ISR is at min.insync.replicas records can commit without
/// the others, so none stays eligible. Below it, members back in the ISR are plain
/// members again, and members removed because they fell behind become eligible: the HW
/// did not pass their log end while they were in the ISR, and it does not move again
/// until the ISR is back at min.insync.replicas, so they hold every committed record. A
/// member removed because it lost records (`lost`) is not eligible.
pub fn elr_after_isr_change(
    elr: &[i32],
    before: &[i32],
    isr: &[i32],
    lost: Option<i32>,
    min_isr: usize,
) -> Vec<i32> {
    if isr.len() >= min_isr {
        return Vec::new();
    }
    let mut next: Vec<i32> = elr
        .iter()
        .copied()
        .filter(|b| !isr.contains(b) && Some(*b) != lost)
        .collect();
    for b in before {
        if !isr.contains(b) && !next.contains(b) && Some(*b) != lost {
            next.push(*b);
        }
    }
    next
}

/// The leader's check of a follower's fetch position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchCheck {
    /// Serve from `fetch_offset`.
    Serve,
    /// The follower's log diverged: its `last_fetched_epoch` ends at this (epoch, end
    /// offset) here.
    Diverging(i32, i64),
    /// Outside the local log, or older than every epoch this log knows at its start:
    /// the follower restarts empty at the leader's local log start.
    OutOfRange,
}

/// Checks a follower's fetch (`fetch_offset`, `last_fetched_epoch`; -1: its log is
/// empty) against the leader's local log [`local_start`, `leo`), where
/// `epoch_end` is the leader's largest epoch <= `last_fetched_epoch` and where it
/// ends. The divergence check runs at the local log start too: a follower that
/// fetches exactly there may hold different records below it.
pub fn check_follower_fetch(
    fetch_offset: i64,
    last_fetched_epoch: i32,
    local_start: i64,
    leo: i64,
    epoch_end: Option<(i32, i64)>,
) -> FetchCheck {
    if fetch_offset >= local_start && last_fetched_epoch >= 0 {
        match epoch_end {
            Some((epoch, end)) if epoch == last_fetched_epoch && end >= fetch_offset => {}
            Some((epoch, end)) => return FetchCheck::Diverging(epoch, end),
            // The leader knows no epoch that old: nothing to compare at the start, so
            // the follower starts over there; above it, it first cuts back to it.
            None if fetch_offset > local_start => {
                return FetchCheck::Diverging(-1, local_start);
            }
            None => return FetchCheck::OutOfRange,
        }
    }
    if fetch_offset < local_start || fetch_offset > leo {
        return FetchCheck::OutOfRange;
    }
    FetchCheck::Serve
}

/// Where a follower truncates when the leader says its `epoch` ends at `end_offset`:
/// there, or where that epoch ends in the follower's own log (`own_epoch_end`) if
/// sooner.
pub fn truncation_point(end_offset: i64, own_epoch_end: Option<(i32, i64)>) -> i64 {
    own_epoch_end.map_or(end_offset, |(_, end)| end.min(end_offset))
}

/// What a broker starting a new incarnation writes for one partition (`None`:
/// nothing changes). It gives up a leadership it held before (the partition goes
/// offline at a new epoch until the controller elects again). Unless its last stop
/// was `clean` (every log fsynced), its log may have lost its unflushed tail (power
/// loss) or everything (a new disk), so it leaves the ISR and the ELR, before its lease
/// makes it electable, and joins the recovering replicas with the log it came back with
/// (`log`: its last epoch and log end). A member that lost records is then never
/// elected while one that may hold them is a member; once none is left, the controller
/// elects the recovering replica with the most complete log
/// ([`crate::elections::elect`]).
pub fn after_restart(
    state: &PartitionState,
    broker: i32,
    clean: bool,
    log: (i32, i64),
) -> Option<PartitionState> {
    let mut next = state.clone();
    if state.leader == broker {
        next.leader = -1;
        next.leader_epoch += 1;
    }
    let member = state.isr.contains(&broker) || state.elr.contains(&broker);
    let recovering = state.recovering.iter().any(|r| r.broker == broker);
    if !clean && (member || recovering) {
        next.isr.retain(|b| *b != broker);
        next.elr.retain(|b| *b != broker);
        next.recovering.retain(|r| r.broker != broker);
        next.recovering.push(Recovering {
            broker,
            last_epoch: log.0,
            log_end: log.1,
        });
    }
    (next != *state).then_some(next)
}

/// The recovering replicas once the ISR is `isr`: those back in it are members again.
/// The others keep the log they restarted with until then, whoever leads meanwhile.
pub fn still_recovering(recovering: &[Recovering], isr: &[i32]) -> Vec<Recovering> {
    recovering
        .iter()
        .filter(|r| !isr.contains(&r.broker))
        .copied()
        .collect()
}

/// The epoch of a log's last batch, from its epochs (epoch, start offset), oldest
/// first: the latest that starts below its end. An epoch noted at the end (a leader
/// that wrote nothing in it, or batches lost with an unflushed tail) holds no batch.
pub fn last_batch_epoch(epochs: &[(i32, i64)], log_end: i64) -> i32 {
    epochs
        .iter()
        .rev()
        .find(|e| e.1 < log_end)
        .map_or(-1, |e| e.0)
}

/// The recovering replica with the most complete log (the latest last epoch, then the
/// longest log), which may lead once the ISR and ELR are empty: among equals the first
/// live one in replica order; `None` while none of them is live (the partition waits
/// for it rather than elect a replica that may hold less).
pub fn best_recovering(state: &PartitionState, is_live: impl Fn(i32) -> bool) -> Option<i32> {
    let best = state
        .recovering
        .iter()
        .map(|r| (r.last_epoch, r.log_end))
        .max()?;
    let candidates: Vec<i32> = state
        .recovering
        .iter()
        .filter(|r| (r.last_epoch, r.log_end) == best)
        .map(|r| r.broker)
        .collect();
    state
        .replicas
        .iter()
        .copied()
        .find(|b| candidates.contains(b) && is_live(*b))
}

/// A remote segment as the divergence check sees it: its first and last offsets and
/// the leader epochs of its batches (epoch, start offset), oldest first; no epochs for
/// a segment copied before they were recorded.
pub struct RemoteRange<'a> {
    pub base: i64,
    pub end: i64,
    pub epochs: &'a [(i32, i64)],
}

/// The first offset where a remote log (`segments`, by base offset, and `remote_end`,
/// the highest offset ever copied, deleted since or not) stops matching a replica's
/// log (its `epochs` and `log_end`); `None` if it matches to its end.
///
/// An offset matches where both hold a batch of the same leader epoch there: as in a
/// follower's divergence check, one epoch at one offset means one log up to there, so
/// the search walks back from the end and stops at the first match. Nothing past the
/// replica's log end matches: a leader elected without records the bucket holds (an
/// unclean election) does not hold them, and writes its own there. Offsets below the
/// oldest epoch start the replica knows are taken as matching: it no longer holds them
/// (its log restarted above them, or it deleted them once they were in the remote
/// log). So are segments without epochs.
pub fn remote_divergence(
    segments: &[RemoteRange<'_>],
    remote_end: i64,
    epochs: &[(i32, i64)],
    log_end: i64,
) -> Option<i64> {
    let mut from = (remote_end >= log_end).then_some(log_end);
    for seg in segments.iter().rev() {
        let matched = matched_end(seg, epochs, log_end);
        if matched >= seg.end {
            break;
        }
        from = Some(from.map_or(matched + 1, |f| f.min(matched + 1)));
        if matched >= seg.base {
            break;
        }
    }
    from
}

/// Where a replica about to lead restarts its log to take the remote log over as its
/// own: after the remote log's end, when that lies past the replica's log end and the
/// remote log matches all of the replica's log (an unclean election of a replica that
/// lost what the bucket kept). `None`: it leads with its log as it is, and cuts the
/// remote log where they part.
pub fn takeover_start(
    segments: &[RemoteRange<'_>],
    remote_end: i64,
    epochs: &[(i32, i64)],
    log_end: i64,
) -> Option<i64> {
    (remote_end >= log_end
        && remote_divergence(segments, remote_end, epochs, log_end) == Some(log_end))
    .then_some(remote_end + 1)
}

/// The last offset of `seg` that matches the replica's log (`seg.base - 1`: none).
fn matched_end(seg: &RemoteRange<'_>, epochs: &[(i32, i64)], log_end: i64) -> i64 {
    if seg.epochs.is_empty() {
        return seg.end;
    }
    let known_from = epochs.first().map_or(log_end, |e| e.1);
    let ranges = seg
        .epochs
        .iter()
        .enumerate()
        .filter_map(|(i, &(epoch, start))| {
            let next = seg.epochs.get(i + 1).map_or(seg.end + 1, |n| n.1);
            let (lo, hi) = (start.max(seg.base), next.min(seg.end + 1) - 1);
            (lo <= hi).then_some((epoch, lo, hi))
        });
    for (epoch, lo, hi) in ranges.collect::<Vec<_>>().into_iter().rev() {
        if hi < known_from {
            return hi;
        }
        if let Some(j) = epochs.iter().position(|e| e.0 == epoch) {
            // Where the epoch ends decides, as in a follower's divergence check: where
            // it starts may differ (a follower that fetched the epoch after the
            // leader's cleaner removed its first batches notes it later).
            let ours_to = epochs.get(j + 1).map_or(log_end, |n| n.1).min(log_end) - 1;
            let to = hi.min(ours_to);
            if to >= lo {
                return to;
            }
        }
        if lo < known_from {
            return known_from - 1;
        }
    }
    seg.base - 1
}

#[cfg(test)]
mod tests;
