//! The exhaustive search: depth first over distinct worlds.
//!
//! Worlds already seen are kept as 128-bit fingerprints, not whole (hash compaction):
//! two distinct worlds sharing one is a chance of about n²/2¹²⁹ over n states (below
//! 10⁻²⁴ for a hundred million), and each world costs about 35 bytes instead of about
//! 1.6 KB. The search is depth first, so the only whole worlds it holds are those on
//! the path it is exploring and their unexplored siblings: memory grows with the
//! number of states, not with the widest level of the search, and a violation's trace
//! is the path itself (not the shortest one).
//!
//! Before a world is fingerprinted it is made canonical: what no step reads any more is
//! reset, and what the protocol only compares is renumbered, so that worlds which
//! behave alike are seen once.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hash, Hasher};

use super::{Bounds, Guards, Model, Outcome, World};

/// Explores every world reachable within `bounds`, depth first, up to `max_states`
/// (a check that reaches it fails: the bounds are too large to be exhaustive).
pub(crate) fn check(guards: Guards, bounds: Bounds, max_states: usize) -> Outcome {
    let model = Model {
        guards,
        bounds,
        labels: false,
    };
    let mut start = model.initial();
    canonical(&mut start);
    let mut seen = Seen::default();
    seen.insert(fingerprint(&start));
    if let Some(broken) = model.check(&start) {
        return Outcome {
            states: 1,
            violation: Some((broken, Vec::new())),
        };
    }
    // The path: each world on it with its successors still to explore (each world is
    // marked seen as it is found, so it is on no other path).
    let first = model.unseen_successors(&start, &mut seen, max_states);
    let mut path: Vec<(World, Vec<World>)> = vec![(start, first)];
    while let Some((_, pending)) = path.last_mut() {
        let Some(next) = pending.pop() else {
            path.pop();
            continue;
        };
        if let Some(broken) = model.check(&next) {
            let mut worlds: Vec<World> = path.into_iter().map(|(w, _)| w).collect();
            worlds.push(next);
            return Outcome {
                states: seen.len(),
                violation: Some((broken, trace(guards, bounds, &worlds))),
            };
        }
        let successors = model.unseen_successors(&next, &mut seen, max_states);
        path.push((next, successors));
    }
    Outcome {
        states: seen.len(),
        violation: None,
    }
}

/// The fingerprints of the worlds found so far.
type Seen = HashSet<u128, BuildHasherDefault<LowHalf>>;

impl Model {
    /// The canonical successors of `w` not seen before, now marked seen.
    fn unseen_successors(&self, w: &World, seen: &mut Seen, max_states: usize) -> Vec<World> {
        let found = self
            .successors(w)
            .into_iter()
            .filter_map(|(_, mut next)| {
                canonical(&mut next);
                seen.insert(fingerprint(&next)).then_some(next)
            })
            .collect();
        assert!(
            seen.len() <= max_states,
            "more than {max_states} states: the bounds are too large"
        );
        found
    }
}

/// Makes `w` canonical:
/// - the partition state versions it holds (the metastore's and each broker's last
///   applied) are renumbered by rank. The protocol only compares versions (the
///   metastore's is the highest, and a write makes it one more), so worlds that differ
///   only in their numbers behave alike; without this, an ISR that a lapsed broker's
///   fetches keep changing would make the world infinite;
/// - a broker that is down keeps only its log, incarnation and whether it is leaving:
///   its restart sets everything else afresh;
/// - a broker that does not lead keeps no follower progress: becoming leader in a new
///   epoch resets it, and nothing else reads it;
/// - the lists that are sets (acknowledged records, produces waiting, writers per
///   epoch, pending ISR additions) are sorted.
fn canonical(w: &mut World) {
    let mut versions: Vec<i64> = w
        .nodes
        .iter()
        .filter_map(|n| n.role.as_ref().map(|r| r.version))
        .chain([w.meta.version])
        .collect();
    versions.sort_unstable();
    versions.dedup();
    let rank = |v: i64| versions.binary_search(&v).expect("collected above") as i64;
    w.meta.version = rank(w.meta.version);
    for (b, n) in w.nodes.iter_mut().enumerate() {
        if let Some(r) = &mut n.role {
            r.version = rank(r.version);
        }
        if !n.up {
            n.role = None;
            n.hw = 0;
        }
        if n.role.as_ref().is_none_or(|r| r.leader != b as i32) {
            n.progress.iter_mut().for_each(|p| *p = (-1, -1));
            n.pending.clear();
        }
        n.pending.sort_unstable();
    }
    w.acked.sort_unstable();
    w.waiting.sort_unstable();
    w.writers.sort_unstable();
}

/// The world's 128-bit XXH3 hash, over the bytes its `Hash` writes.
fn fingerprint(w: &World) -> u128 {
    thread_local! {
        static BYTES: std::cell::RefCell<Bytes> = const { std::cell::RefCell::new(Bytes(Vec::new())) };
    }
    BYTES.with_borrow_mut(|bytes| {
        bytes.0.clear();
        w.hash(bytes);
        twox_hash::XxHash3_128::oneshot(&bytes.0)
    })
}

/// A `Hasher` that keeps the bytes written to it, for one hash over them all.
struct Bytes(Vec<u8>);

impl Hasher for Bytes {
    fn write(&mut self, bytes: &[u8]) {
        self.0.extend_from_slice(bytes);
    }

    fn finish(&self) -> u64 {
        unreachable!("the bytes are hashed whole")
    }
}

/// Hashes a fingerprint for the set of those seen by taking its low half: it is a
/// hash already.
#[derive(Default)]
struct LowHalf(u64);

impl Hasher for LowHalf {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u128(&mut self, v: u128) {
        self.0 = v as u64;
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// The steps along `worlds`, a path of the search: between each world and the next,
/// the label of the labelled successor that is the next one.
fn trace(guards: Guards, bounds: Bounds, worlds: &[World]) -> Vec<String> {
    let model = Model {
        guards,
        bounds,
        labels: true,
    };
    worlds
        .windows(2)
        .map(|pair| {
            model
                .successors(&pair[0])
                .into_iter()
                .find_map(|(label, mut next)| {
                    canonical(&mut next);
                    (next == pair[1]).then_some(label)
                })
                .expect("a world on the path follows the one before it")
        })
        .collect()
}
