//! Where replicas should move, as a pure function of the partitions' states, their
//! local sizes and the brokers: off decommissioned brokers, off brokers dead for longer
//! than the replacement timeout, and, with continuous balancing, in this order of
//! goals:
//! 1. onto as many racks as a partition has replicas (up to the racks there are);
//! 2. local disk use per broker within a band around the mean (a partition's size is
//!    its leader's last report, the same for each of its replicas);
//! 3. replica counts within one of each other;
//! 4. preferred leaders (first replicas) within one of each other.
//!
//! A step runs only when the ones before it plan nothing, and none undoes an earlier
//! goal: replica moves keep a partition's racks and the disk band. Brokers without a
//! rack count as one rack. The controller starts the moves as reassignments
//! ([`crate::reassignment`]), at most `max_in_flight` at a time.

use std::collections::{BTreeMap, HashMap, HashSet};

use shale_metastore::PartitionState;
use uuid::Uuid;

use crate::reassignment::target_replicas;

/// A broker as the balancer sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerView {
    pub id: i32,
    pub alive: bool,
    /// How long it has been dead (0 while alive).
    pub dead_for_ms: i64,
    pub decommissioned: bool,
    pub rack: Option<String>,
}

impl From<&shale_metastore::BrokerLease> for BrokerView {
    fn from(b: &shale_metastore::BrokerLease) -> Self {
        Self {
            id: b.broker_id,
            alive: b.is_alive(),
            dead_for_ms: b.dead_for_ms(),
            decommissioned: b.decommissioned,
            rack: b.rack.clone(),
        }
    }
}

/// What the balancer may do.
#[derive(Debug, Clone, Copy)]
pub struct BalanceRules {
    /// Reassignments in flight at once, those started by hand included.
    pub max_in_flight: usize,
    /// Replicas on a broker dead this long are re-created elsewhere (`None`: never).
    pub replace_dead_after_ms: Option<i64>,
    /// Balance racks, disk use, replica and preferred-leader counts over the live
    /// brokers.
    pub balance: bool,
    /// The disk band: a broker's local disk use may differ from the mean by this many
    /// percent of the mean (0: no disk goal)…
    pub disk_band_percent: u64,
    /// …or by this many bytes, whichever is wider (so that small, changing sizes do not
    /// cause moves).
    pub disk_band_min_bytes: u64,
}

/// Partitions' local log sizes in bytes, by (topic id, partition).
pub type Sizes = HashMap<(Uuid, i32), u64>;

/// One move: the partition's new replicas, preferred leader first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move {
    pub topic_id: Uuid,
    pub partition: i32,
    pub target: Vec<i32>,
    pub why: Why,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Decommissioned,
    Dead,
    RackSpread,
    DiskBalance,
    ReplicaBalance,
    LeaderBalance,
}

/// The moves to start now (see the module docs). A balanced cluster gets none.
pub fn plan(
    states: &[PartitionState],
    brokers: &[BrokerView],
    sizes: &Sizes,
    rules: BalanceRules,
) -> Vec<Move> {
    let in_flight = states.iter().filter(|s| s.reassigning()).count();
    let mut budget = rules.max_in_flight.saturating_sub(in_flight);
    if budget == 0 {
        return Vec::new();
    }
    // Destinations: live brokers not being decommissioned.
    let eligible: Vec<i32> = brokers
        .iter()
        .filter(|b| b.alive && !b.decommissioned)
        .map(|b| b.id)
        .collect();
    let leaving = |b: i32| {
        brokers.iter().any(|v| {
            v.id == b
                && (v.decommissioned
                    || rules
                        .replace_dead_after_ms
                        .is_some_and(|after| !v.alive && v.dead_for_ms >= after))
        })
    };
    let rack_by_id: HashMap<i32, Option<&str>> = (brokers.iter())
        .map(|v| (v.id, v.rack.as_deref()))
        .collect();
    let rack_of = |b: i32| rack_by_id.get(&b).copied().flatten();
    let racks = |ids: &[i32]| ids.iter().map(|&b| rack_of(b)).collect::<HashSet<_>>();
    // Whether `replicas` with `out` replaced by `into` are on as many racks.
    let keeps_racks = |replicas: &[i32], out: i32, into: i32| {
        let others = |rack| replicas.iter().any(|&x| x != out && rack_of(x) == rack);
        others(rack_of(out)) || !others(rack_of(into))
    };
    // Per eligible broker once the moves in flight finish.
    let mut load = Load {
        replicas: eligible.iter().map(|&b| (b, 0)).collect(),
        preferred: eligible.iter().map(|&b| (b, 0)).collect(),
        disk: Disk::new(states, &eligible, sizes, rules),
    };
    for s in states {
        let target = target_replicas(s);
        for b in &target {
            if let Some(n) = load.replicas.get_mut(b) {
                *n += 1;
            }
        }
        if let Some(n) = target.first().and_then(|b| load.preferred.get_mut(b)) {
            *n += 1;
        }
    }
    let size = |s: &PartitionState| sizes.get(&(s.topic_id, s.partition)).copied().unwrap_or(0);
    let mut moves = Vec::new();
    let mut moved: HashSet<(Uuid, i32)> = HashSet::new();
    // Partitions without a leader are left alone: a move could not finish, and would
    // hold one of the slots.
    let idle = states.iter().filter(|s| !s.reassigning() && s.leader >= 0);
    // 1. Off decommissioned brokers and brokers dead for good.
    for s in idle.clone() {
        if budget == 0 {
            return moves;
        }
        let gone: Vec<i32> = s.replicas.iter().copied().filter(|&b| leaving(b)).collect();
        if gone.is_empty() {
            continue;
        }
        let mut target = s.replicas.clone();
        for b in &gone {
            // Where it can, onto a rack the partition's other replicas are not on.
            let others: Vec<i32> = target.iter().copied().filter(|x| x != b).collect();
            let used = racks(&others);
            let dest = fewest(&load.replicas, |d| {
                !target.contains(&d) && !used.contains(&rack_of(d))
            })
            .or_else(|| fewest(&load.replicas, |d| !target.contains(&d)));
            let Some(dest) = dest else {
                break;
            };
            *load.replicas.get_mut(&dest).expect("eligible") += 1;
            let at = target.iter().position(|x| x == b).expect("a replica");
            target[at] = dest;
        }
        if target != s.replicas {
            let dead = gone.iter().any(|&b| {
                brokers
                    .iter()
                    .any(|v| v.id == b && !v.decommissioned && !v.alive)
            });
            moves.push(Move {
                topic_id: s.topic_id,
                partition: s.partition,
                target,
                why: if dead { Why::Dead } else { Why::Decommissioned },
            });
            moved.insert((s.topic_id, s.partition));
            budget -= 1;
        }
    }
    if !rules.balance || !moves.is_empty() || eligible.len() < 2 {
        return moves;
    }
    // 2. Rack spread: a partition on fewer racks than it could be gets a replica that
    // shares its rack (not the leader nor the preferred one, where it can) moved to a
    // rack it lacks.
    let rack_count = racks(&eligible).len();
    for s in idle.clone() {
        if budget == 0 {
            break;
        }
        let used = racks(&s.replicas);
        if used.len() >= s.replicas.len().min(rack_count) {
            continue;
        }
        let shares = |b: i32| {
            (s.replicas.iter())
                .filter(|&&x| rack_of(x) == rack_of(b))
                .count()
                > 1
        };
        let Some(from) = (s.replicas.iter().rev().copied())
            .filter(|&b| shares(b))
            .min_by_key(|&b| (b == s.leader, s.replicas.first() == Some(&b)))
        else {
            continue;
        };
        let Some(dest) = fewest(&load.replicas, |d| {
            !s.replicas.contains(&d) && !used.contains(&rack_of(d))
        }) else {
            continue;
        };
        let m = replacing(s, (from, dest), Why::RackSpread);
        load.shift((from, dest), size(s), &s.replicas, &m.target);
        moves.push(m);
        moved.insert((s.topic_id, s.partition));
        budget -= 1;
    }
    if !moves.is_empty() {
        return moves;
    }
    let mut on: HashMap<i32, Vec<&PartitionState>> = HashMap::new();
    for s in idle.clone() {
        for &b in &s.replicas {
            on.entry(b).or_default().push(s);
        }
    }
    // 3. Disk use within the band: from a broker outside it to the one furthest on the
    // other side, the partition (keeping its racks) whose size comes nearest to half
    // their difference, and always below it, so each move narrows the spread.
    while budget > 0 && !load.disk.balanced() {
        let mut by_most: Vec<i32> = eligible.clone();
        by_most.sort_by_key(|b| (std::cmp::Reverse(load.disk.used[b]), *b));
        let pairs = by_most
            .iter()
            .flat_map(|&most| by_most.iter().rev().map(move |&least| (most, least)));
        let found = pairs
            .filter(|&(most, least)| {
                load.disk.used[&most] > load.disk.used[&least]
                    && (load.disk.above(most) || load.disk.below(least))
            })
            .find_map(|(most, least)| {
                let gap = load.disk.used[&most] - load.disk.used[&least];
                let candidates = (on.get(&most).into_iter().flatten()).filter(|s| {
                    !moved.contains(&(s.topic_id, s.partition))
                        && !s.replicas.contains(&least)
                        && (1..gap).contains(&size(s))
                        && keeps_racks(&s.replicas, most, least)
                });
                (candidates.min_by_key(|s| (size(s).abs_diff(gap / 2), s.leader == most)))
                    .map(|s| (most, least, *s))
            });
        let Some((most, least, s)) = found else {
            break;
        };
        let m = replacing(s, (most, least), Why::DiskBalance);
        load.shift((most, least), size(s), &s.replicas, &m.target);
        moves.push(m);
        moved.insert((s.topic_id, s.partition));
        budget -= 1;
    }
    if !moves.is_empty() {
        return moves;
    }
    // 4. Replica counts within one of each other; a move takes a replica that does not
    // lead, where there is one, so leadership stays put, and keeps the partition on as
    // many racks and the disk band. The pair of brokers furthest apart that has such a
    // partition goes first (racks can leave the fullest broker nothing to give).
    while budget > 0 {
        let mut by_most: Vec<(i32, usize)> = load.replicas.iter().map(|(&b, &n)| (b, n)).collect();
        by_most.sort_by_key(|&(b, n)| (std::cmp::Reverse(n), b));
        let mut by_least = by_most.clone();
        by_least.sort_by_key(|&(b, n)| (n, b));
        let pairs = by_most.iter().flat_map(|&(most, m)| {
            (by_least.iter())
                .filter(move |&&(_, l)| m > l + 1)
                .map(move |&(least, _)| (most, least))
        });
        let found = pairs.into_iter().find_map(|(most, least)| {
            let candidates = (on.get(&most).into_iter().flatten()).filter(|s| {
                !moved.contains(&(s.topic_id, s.partition))
                    && !s.replicas.contains(&least)
                    && keeps_racks(&s.replicas, most, least)
                    && load.disk.allows(most, least, size(s))
            });
            (candidates.min_by_key(|s| s.leader == most)).map(|s| (most, least, *s))
        });
        let Some((most, least, s)) = found else {
            break;
        };
        let m = replacing(s, (most, least), Why::ReplicaBalance);
        load.shift((most, least), size(s), &s.replicas, &m.target);
        moves.push(m);
        moved.insert((s.topic_id, s.partition));
        budget -= 1;
    }
    if !moves.is_empty() {
        return moves;
    }
    // 5. Preferred leaders within one of each other: a replica list reordered so that
    // a replica of the broker preferred least comes first (no data moves).
    while budget > 0 {
        let (Some(most), Some(least)) = (most(&load.preferred), fewest(&load.preferred, |_| true))
        else {
            break;
        };
        if load.preferred[&most] <= load.preferred[&least] + 1 {
            break;
        }
        let candidates = idle.clone().filter(|s| {
            !moved.contains(&(s.topic_id, s.partition))
                && s.replicas.first() == Some(&most)
                && s.replicas.contains(&least)
        });
        // One where the new preferred leader is in sync can lead at once.
        let Some(s) = candidates.min_by_key(|s| !s.isr.contains(&least)) else {
            break;
        };
        let mut target = vec![least];
        target.extend(s.replicas.iter().copied().filter(|&b| b != least));
        *load.preferred.get_mut(&most).expect("eligible") -= 1;
        *load.preferred.get_mut(&least).expect("eligible") += 1;
        moves.push(Move {
            topic_id: s.topic_id,
            partition: s.partition,
            target,
            why: Why::LeaderBalance,
        });
        moved.insert((s.topic_id, s.partition));
        budget -= 1;
    }
    moves
}

/// Local disk use per eligible broker once the moves in flight finish, and its band.
struct Disk {
    used: BTreeMap<i32, u64>,
    mean: u64,
    /// How far from the mean a broker may be; `None`: no disk goal.
    band: Option<u64>,
}

impl Disk {
    /// Without a size for every partition that has a leader (one created since the
    /// last reports, brokers not reporting yet), or while a replica is on a broker that
    /// is down or leaving, the figures would mislead: no disk goal then.
    fn new(
        states: &[PartitionState],
        eligible: &[i32],
        sizes: &Sizes,
        rules: BalanceRules,
    ) -> Self {
        let mut used: BTreeMap<i32, u64> = eligible.iter().map(|&b| (b, 0)).collect();
        let mut known = true;
        for s in states {
            let size = sizes.get(&(s.topic_id, s.partition)).copied();
            known &= size.is_some() || s.leader < 0;
            for b in target_replicas(s) {
                match used.get_mut(&b) {
                    Some(n) => *n += size.unwrap_or(0),
                    None => known = false,
                }
            }
        }
        let mean = used.values().sum::<u64>() / (used.len() as u64).max(1);
        let band = (known && rules.disk_band_percent > 0)
            .then(|| (mean / 100 * rules.disk_band_percent).max(rules.disk_band_min_bytes));
        Self { used, mean, band }
    }

    fn above(&self, b: i32) -> bool {
        self.band
            .is_some_and(|band| self.used[&b] > self.mean.saturating_add(band))
    }

    fn below(&self, b: i32) -> bool {
        self.band
            .is_some_and(|band| self.used[&b] < self.mean.saturating_sub(band))
    }

    fn balanced(&self) -> bool {
        !self.used.keys().any(|&b| self.above(b) || self.below(b))
    }

    /// Whether moving `size` bytes from `from` to `to` (for another goal) keeps both
    /// within half the band, or no further out than the other was: the margin keeps
    /// brokers off the band's edge, where a little uneven growth would bring the disk
    /// step back.
    fn allows(&self, from: i32, to: i32, size: u64) -> bool {
        let Some(band) = self.band else {
            return true;
        };
        let (f, t) = (self.used[&from], self.used[&to]);
        t + size <= (self.mean + band / 2).max(f)
            && f.saturating_sub(size) >= self.mean.saturating_sub(band / 2).min(t)
    }

    fn shift(&mut self, from: i32, to: i32, size: u64) {
        if let Some(n) = self.used.get_mut(&from) {
            *n = n.saturating_sub(size);
        }
        if let Some(n) = self.used.get_mut(&to) {
            *n += size;
        }
    }
}

/// The move of `s`'s replica on `from` to `to`, in its place in the replica list; the
/// new replica does not become the preferred leader: the leader does, where it stays
/// (so no election follows).
fn replacing(s: &PartitionState, (from, to): (i32, i32), why: Why) -> Move {
    let mut target: Vec<i32> = (s.replicas.iter())
        .map(|&b| if b == from { to } else { b })
        .collect();
    if target[0] == to
        && let Some(at) = target.iter().position(|&b| b == s.leader)
    {
        target.swap(0, at);
    }
    Move {
        topic_id: s.topic_id,
        partition: s.partition,
        target,
        why,
    }
}

/// Replicas, preferred leaderships and local disk use per eligible broker, once the
/// moves in flight and those planned finish.
struct Load {
    replicas: BTreeMap<i32, usize>,
    preferred: BTreeMap<i32, usize>,
    disk: Disk,
}

impl Load {
    /// Counts a move from replicas `old` to `target`: one replica of `size` bytes from
    /// `from` to `to`, and the preferred leadership from the old head to the new when
    /// they differ.
    fn shift(&mut self, (from, to): (i32, i32), size: u64, old: &[i32], target: &[i32]) {
        let one = |counts: &mut BTreeMap<i32, usize>, from: i32, to: i32| {
            if let Some(n) = counts.get_mut(&from) {
                *n = n.saturating_sub(1);
            }
            *counts.entry(to).or_default() += 1;
        };
        one(&mut self.replicas, from, to);
        if let (Some(&was), Some(&now)) = (old.first(), target.first())
            && was != now
        {
            one(&mut self.preferred, was, now);
        }
        self.disk.shift(from, to, size);
    }
}

/// The broker with the fewest (replicas, preferred leaderships, …) among those
/// `allowed`, the lowest id among equals.
fn fewest(counts: &BTreeMap<i32, usize>, allowed: impl Fn(i32) -> bool) -> Option<i32> {
    counts
        .iter()
        .filter(|(b, _)| allowed(**b))
        .min_by_key(|(b, n)| (**n, **b))
        .map(|(b, _)| *b)
}

/// The broker with the most, the lowest id among equals.
fn most(counts: &BTreeMap<i32, usize>) -> Option<i32> {
    counts
        .iter()
        .max_by_key(|(b, n)| (**n, -**b))
        .map(|(b, _)| *b)
}

#[cfg(test)]
mod tests;
