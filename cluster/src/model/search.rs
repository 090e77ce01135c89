//! The exhaustive search: breadth first over distinct worlds.
//!
//! Worlds already seen are kept as 128-bit fingerprints, not whole (hash compaction):
//! two distinct worlds sharing one is a chance of about n²/2¹²⁹ over n states (below
//! 10⁻²⁴ for a hundred million), and each world costs some 60 bytes instead of about
//! 1.6 KB. The steps of a trace are found again from the fingerprints along its path.

use std::collections::{HashMap, VecDeque};
use std::hash::{DefaultHasher, Hash, Hasher};

use super::{Bounds, Guards, Model, Outcome, World};

/// Explores every world reachable within `bounds`, breadth first, up to `max_states`
/// (a check that reaches it fails: the bounds are too large to be exhaustive).
pub(crate) fn check(guards: Guards, bounds: Bounds, max_states: usize) -> Outcome {
    let model = Model { guards, bounds };
    let start = model.initial();
    // Each world's index by fingerprint; each index's fingerprint and parent.
    let mut seen: HashMap<u128, u32> = HashMap::new();
    let mut fingerprints = vec![fingerprint(&start)];
    let mut parents: Vec<u32> = vec![0];
    let mut queue = VecDeque::new();
    seen.insert(fingerprints[0], 0);
    queue.push_back((start, 0u32));
    while let Some((w, at)) = queue.pop_front() {
        if let Some(broken) = model.check(&w) {
            return Outcome {
                states: seen.len(),
                violation: Some((broken, trace(&model, &fingerprints, &parents, at))),
            };
        }
        for (_, mut next) in model.successors(&w) {
            canonical(&mut next);
            let f = fingerprint(&next);
            if seen.contains_key(&f) {
                continue;
            }
            let i = fingerprints.len() as u32;
            seen.insert(f, i);
            fingerprints.push(f);
            parents.push(at);
            assert!(
                seen.len() <= max_states,
                "more than {max_states} states: the bounds are too large"
            );
            queue.push_back((next, i));
        }
    }
    Outcome {
        states: seen.len(),
        violation: None,
    }
}

/// Renumbers the partition state versions a world holds (the metastore's and each
/// broker's last applied) by rank. The protocol only compares versions (the
/// metastore's is the highest, and a write makes it one more), so worlds that differ
/// only in their numbers behave alike; without this, an ISR that a lapsed broker's
/// fetches keep changing would make the world infinite.
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
    for n in &mut w.nodes {
        if let Some(r) = &mut n.role {
            r.version = rank(r.version);
        }
    }
}

/// Two SipHash sums of the world, the second salted.
fn fingerprint(w: &World) -> u128 {
    let mut a = DefaultHasher::new();
    w.hash(&mut a);
    let mut b = DefaultHasher::new();
    b.write_u64(0x9e37_79b9_7f4a_7c15);
    w.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// The steps from the first world to world `at`: replayed from the start, at each
/// step taking the successor with the next fingerprint on the path.
fn trace(model: &Model, fingerprints: &[u128], parents: &[u32], at: u32) -> Vec<String> {
    let mut path = vec![at];
    while let Some(&i) = path.last()
        && i != 0
    {
        path.push(parents[i as usize]);
    }
    path.reverse();
    let mut w = model.initial();
    let mut steps = Vec::new();
    for &i in &path[1..] {
        let (label, next) = model
            .successors(&w)
            .into_iter()
            .map(|(label, mut next)| {
                canonical(&mut next);
                (label, next)
            })
            .find(|(_, next)| fingerprint(next) == fingerprints[i as usize])
            .expect("a world on the path follows the one before it");
        steps.push(label);
        w = next;
    }
    steps
}
