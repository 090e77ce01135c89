//! The server-side assignors of the consumer group protocol (KIP-848): `uniform`, the
//! default, which keeps partitions where they are as far as balance allows, and
//! `range`, which gives each member of a topic a contiguous range of its partitions.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

/// Partitions by topic id.
pub type Partitions = BTreeMap<Uuid, BTreeSet<i32>>;

/// What an assignor sees of a member.
pub(super) struct MemberSpec<'a> {
    pub(super) id: &'a str,
    /// Subscribed topics this broker knows: id and partition count.
    pub(super) topics: Vec<(Uuid, i32)>,
    /// The member's partitions in the current target assignment.
    pub(super) current: Option<&'a Partitions>,
}

pub(super) const UNIFORM: &str = "uniform";
pub(super) const RANGE: &str = "range";

/// Whether `name` is an assignor this broker runs.
pub(super) fn known(name: &str) -> bool {
    name == UNIFORM || name == RANGE
}

/// The target assignment of every member (members in any order; the result is the
/// same for the same input).
pub(super) fn assign(assignor: &str, members: &[MemberSpec<'_>]) -> BTreeMap<String, Partitions> {
    let mut members: Vec<&MemberSpec<'_>> = members.iter().collect();
    members.sort_by(|a, b| a.id.cmp(b.id));
    if assignor == RANGE {
        range(&members)
    } else {
        uniform(&members)
    }
}

fn range(members: &[&MemberSpec<'_>]) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = members
        .iter()
        .map(|m| (m.id.to_string(), Partitions::new()))
        .collect();
    let topics: BTreeMap<Uuid, i32> = members.iter().flat_map(|m| m.topics.clone()).collect();
    for (topic, count) in topics {
        let takers: Vec<&str> = members
            .iter()
            .filter(|m| m.topics.iter().any(|(t, _)| *t == topic))
            .map(|m| m.id)
            .collect();
        let n = takers.len() as i32;
        let (each, extra) = (count / n, count % n);
        let mut next = 0;
        for (i, id) in takers.iter().enumerate() {
            let take = each + i32::from((i as i32) < extra);
            let parts: BTreeSet<i32> = (next..next + take).collect();
            next += take;
            if !parts.is_empty() {
                out.get_mut(*id).expect("a member").insert(topic, parts);
            }
        }
    }
    out
}

fn uniform(members: &[&MemberSpec<'_>]) -> BTreeMap<String, Partitions> {
    let mut out: BTreeMap<String, Partitions> = BTreeMap::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut taken: BTreeSet<(Uuid, i32)> = BTreeSet::new();
    let all: BTreeMap<Uuid, i32> = members.iter().flat_map(|m| m.topics.clone()).collect();
    let total: usize = all.values().map(|&c| c.max(0) as usize).sum();
    let n = members.len().max(1);
    let (floor, mut at_ceiling) = (total / n, total % n);
    // Keep what each member had, as far as its subscription and its share allow:
    // `total % n` members may hold one more than the rest.
    for m in members {
        let subscribed: BTreeMap<Uuid, i32> = m.topics.iter().copied().collect();
        let mut kept: Vec<(Uuid, i32)> = m
            .current
            .into_iter()
            .flatten()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            .filter(|(t, p)| subscribed.get(t).is_some_and(|c| p < c))
            .filter(|tp| !taken.contains(tp))
            .collect();
        let share = if kept.len() > floor && at_ceiling > 0 {
            at_ceiling -= 1;
            floor + 1
        } else {
            floor
        };
        kept.truncate(share);
        for &(t, p) in &kept {
            taken.insert((t, p));
            out.entry(m.id.to_string())
                .or_default()
                .entry(t)
                .or_default()
                .insert(p);
        }
        counts.insert(m.id, kept.len());
    }
    // Then every partition nobody holds to the subscribed member holding fewest.
    for (&topic, &count) in &all {
        for p in 0..count {
            if taken.contains(&(topic, p)) {
                continue;
            }
            let taker = members
                .iter()
                .filter(|m| m.topics.iter().any(|(t, _)| *t == topic))
                .min_by_key(|m| (counts[m.id], m.id));
            if let Some(m) = taker {
                *counts.get_mut(m.id).expect("counted") += 1;
                out.entry(m.id.to_string())
                    .or_default()
                    .entry(topic)
                    .or_default()
                    .insert(p);
            }
        }
    }
    for m in members {
        out.entry(m.id.to_string()).or_default();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(a: &BTreeMap<String, Partitions>, id: &str) -> usize {
        a[id].values().map(BTreeSet::len).sum()
    }

    fn spec<'a>(
        id: &'a str,
        topics: &[(Uuid, i32)],
        current: Option<&'a Partitions>,
    ) -> MemberSpec<'a> {
        MemberSpec {
            id,
            topics: topics.to_vec(),
            current,
        }
    }

    #[test]
    fn uniform_balances_and_moves_only_what_must_move() {
        let t = Uuid::from_u128(1);
        let topics = [(t, 12)];
        let three = assign(
            UNIFORM,
            &[
                spec("a", &topics, None),
                spec("b", &topics, None),
                spec("c", &topics, None),
            ],
        );
        for id in ["a", "b", "c"] {
            assert_eq!(count(&three, id), 4, "{three:?}");
        }
        // A fourth member: three partitions move to it, one from each.
        let four = assign(
            UNIFORM,
            &[
                spec("a", &topics, Some(&three["a"])),
                spec("b", &topics, Some(&three["b"])),
                spec("c", &topics, Some(&three["c"])),
                spec("d", &topics, None),
            ],
        );
        let mut moved = 0;
        for id in ["a", "b", "c"] {
            assert_eq!(count(&four, id), 3);
            assert!(four[id][&t].is_subset(&three[id][&t]), "{id} kept its own");
            moved += 1;
        }
        assert_eq!((count(&four, "d"), moved), (3, 3));
        // Every partition exactly once.
        let all: BTreeSet<i32> = four.values().flat_map(|p| p[&t].iter().copied()).collect();
        assert_eq!(all.len(), 12);
    }

    #[test]
    fn range_gives_contiguous_ranges_and_unsubscribed_topics_nothing() {
        let (t1, t2) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let a = assign(
            RANGE,
            &[
                spec("b", &[(t1, 5)], None),
                spec("a", &[(t1, 5), (t2, 2)], None),
            ],
        );
        assert_eq!(a["a"][&t1], BTreeSet::from([0, 1, 2]));
        assert_eq!(a["b"][&t1], BTreeSet::from([3, 4]));
        assert_eq!(a["a"][&t2], BTreeSet::from([0, 1]));
        assert!(!a["b"].contains_key(&t2));
    }
}
