//! Partition assignors, run by the group leader's client: range, round-robin and
//! sticky, as in Kafka's Java client.

use std::collections::{BTreeMap, BTreeSet};

pub use shale_records::consumer_protocol::{Subscription, TopicPartition};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    /// Per topic, contiguous ranges of partitions to members in member-id order; the
    /// first members get one more when it does not divide.
    Range,
    /// All partitions of all topics, dealt in turn to the members subscribed to each.
    RoundRobin,
    /// Balanced like round-robin, but keeping each member's previous partitions where
    /// the balance allows, so a rebalance moves as few partitions as it can.
    Sticky,
}

impl Assignor {
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Range => "range",
            Assignor::RoundRobin => "roundrobin",
            Assignor::Sticky => "sticky",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name {
            "range" => Some(Assignor::Range),
            "roundrobin" => Some(Assignor::RoundRobin),
            "sticky" => Some(Assignor::Sticky),
            _ => None,
        }
    }

    /// Assigns the partitions of the subscribed topics (`partitions`: topic →
    /// partition count) to `members`. Every member appears in the result, idle ones
    /// with nothing.
    pub fn assign(
        self,
        members: &BTreeMap<String, Subscription>,
        partitions: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, Vec<TopicPartition>> {
        let mut out: BTreeMap<String, Vec<TopicPartition>> =
            members.keys().map(|m| (m.clone(), Vec::new())).collect();
        let subscribers = |topic: &str| -> Vec<&String> {
            members
                .iter()
                .filter(|(_, s)| s.topics.iter().any(|t| t == topic))
                .map(|(m, _)| m)
                .collect()
        };
        match self {
            Assignor::Range => {
                for (topic, &count) in partitions {
                    let subs = subscribers(topic);
                    if subs.is_empty() {
                        continue;
                    }
                    let (per, extra) = (count as usize / subs.len(), count as usize % subs.len());
                    let mut next = 0;
                    for (i, m) in subs.iter().enumerate() {
                        let n = per + usize::from(i < extra);
                        for p in next..next + n {
                            out.get_mut(*m)
                                .expect("member")
                                .push((topic.clone(), p as i32));
                        }
                        next += n;
                    }
                }
            }
            Assignor::RoundRobin => {
                let ids: Vec<&String> = members.keys().collect();
                let mut turn = 0;
                for (topic, &count) in partitions {
                    for p in 0..count {
                        // The next member in turn that subscribes to the topic.
                        for _ in 0..ids.len() {
                            let m = ids[turn % ids.len()];
                            turn += 1;
                            if members[m].topics.iter().any(|t| t == topic) {
                                out.get_mut(m).expect("member").push((topic.clone(), p));
                                break;
                            }
                        }
                    }
                }
            }
            Assignor::Sticky => {
                let all: BTreeSet<TopicPartition> = partitions
                    .iter()
                    .flat_map(|(t, &n)| (0..n).map(move |p| (t.clone(), p)))
                    .collect();
                let eligible: usize = members.len().max(1);
                let quota = all.len() / eligible;
                let mut extra = all.len() % eligible;
                let mut taken = BTreeSet::new();
                // Keep previous partitions up to the quota; the members that owned the
                // most keep an extra one first.
                let mut by_owned: Vec<(&String, &Subscription)> = members.iter().collect();
                by_owned.sort_by_key(|(m, s)| (std::cmp::Reverse(s.owned.len()), (*m).clone()));
                for (m, s) in by_owned {
                    let mut keep = Vec::new();
                    for tp in &s.owned {
                        if all.contains(tp)
                            && s.topics.contains(&tp.0)
                            && !taken.contains(tp)
                            && keep.len() < quota
                        {
                            keep.push(tp.clone());
                        }
                    }
                    if extra > 0
                        && let Some(tp) = s.owned.iter().find(|tp| {
                            all.contains(*tp)
                                && s.topics.contains(&tp.0)
                                && !taken.contains(*tp)
                                && !keep.contains(*tp)
                        })
                    {
                        keep.push(tp.clone());
                        extra -= 1;
                    }
                    taken.extend(keep.iter().cloned());
                    out.insert(m.clone(), keep);
                }
                // The rest go, one by one, to the subscribed member holding fewest.
                for tp in all.difference(&taken.clone()) {
                    let target = out
                        .iter()
                        .filter(|(m, _)| members[*m].topics.contains(&tp.0))
                        .min_by_key(|(m, held)| (held.len(), (*m).clone()))
                        .map(|(m, _)| m.clone());
                    if let Some(m) = target {
                        out.get_mut(&m).expect("member").push(tp.clone());
                    }
                }
                for held in out.values_mut() {
                    held.sort();
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize, topics: &[&str]) -> BTreeMap<String, Subscription> {
        (0..n)
            .map(|i| {
                (
                    format!("m{i}"),
                    Subscription {
                        topics: topics.iter().map(|t| t.to_string()).collect(),
                        owned: Vec::new(),
                    },
                )
            })
            .collect()
    }

    fn counts(a: &BTreeMap<String, Vec<TopicPartition>>) -> Vec<usize> {
        a.values().map(Vec::len).collect()
    }

    fn every_partition_once(a: &BTreeMap<String, Vec<TopicPartition>>, total: usize) {
        let all: Vec<_> = a.values().flatten().collect();
        let unique: BTreeSet<_> = all.iter().collect();
        assert_eq!((all.len(), unique.len()), (total, total), "{a:?}");
    }

    #[test]
    fn range_gives_contiguous_ranges_extra_to_the_first() {
        let parts = BTreeMap::from([("t".to_string(), 7)]);
        let a = Assignor::Range.assign(&members(3, &["t"]), &parts);
        assert_eq!(a["m0"], [("t".into(), 0), ("t".into(), 1), ("t".into(), 2)]);
        assert_eq!(counts(&a), [3, 2, 2]);
        every_partition_once(&a, 7);
        // More members than partitions: the last ones idle.
        let a =
            Assignor::Range.assign(&members(5, &["t"]), &BTreeMap::from([("t".to_string(), 3)]));
        assert_eq!(counts(&a), [1, 1, 1, 0, 0]);
    }

    #[test]
    fn round_robin_deals_in_turn_and_skips_non_subscribers() {
        let parts = BTreeMap::from([("a".to_string(), 3), ("b".to_string(), 3)]);
        let mut m = members(2, &["a"]);
        m.get_mut("m1").unwrap().topics.push("b".into());
        let a = Assignor::RoundRobin.assign(&m, &parts);
        every_partition_once(&a, 6);
        assert!(a["m0"].iter().all(|(t, _)| t == "a"));
        assert_eq!(a["m1"].iter().filter(|(t, _)| t == "b").count(), 3);
    }

    #[test]
    fn sticky_balances_and_keeps_previous_owners() {
        let parts = BTreeMap::from([("t".to_string(), 6)]);
        let first = Assignor::Sticky.assign(&members(3, &["t"]), &parts);
        assert_eq!(counts(&first), [2, 2, 2]);
        every_partition_once(&first, 6);
        // m2 leaves: m0 and m1 keep theirs and split m2's.
        let mut two = members(2, &["t"]);
        for (id, s) in two.iter_mut() {
            s.owned = first[id].clone();
        }
        let second = Assignor::Sticky.assign(&two, &parts);
        assert_eq!(counts(&second), [3, 3]);
        every_partition_once(&second, 6);
        for id in ["m0", "m1"] {
            assert!(
                first[id].iter().all(|tp| second[id].contains(tp)),
                "{id} lost a partition"
            );
        }
        // A fourth member joins: it takes one from each, the others keep the rest.
        let mut four = members(4, &["t"]);
        for (id, s) in four.iter_mut() {
            s.owned = second.get(id).cloned().unwrap_or_default();
        }
        let third = Assignor::Sticky.assign(&four, &parts);
        let mut c = counts(&third);
        c.sort();
        assert_eq!(c, [1, 1, 2, 2]);
        every_partition_once(&third, 6);
        for id in ["m0", "m1"] {
            assert!(third[id].iter().all(|tp| second[id].contains(tp)));
        }
    }
}
