//! Where replicas go and which one a consumer reads from, with racks (`[broker] rack`,
//! Kafka's `broker.rack`): new partitions' replicas are spread over racks, and a
//! consumer that names its rack (`client.rack`, KIP-392) is sent to an in-sync replica
//! there. Brokers without a rack count as one rack of their own; a cluster where none
//! has one places replicas as if racks did not exist.

use std::collections::BTreeMap;

/// A broker new replicas may go to, and its rack.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: i32,
    pub rack: Option<String>,
}

/// Replicas for `count` partitions numbered from `first`, `replication_factor` each:
/// leaders round-robin from `start`, followers on the next brokers of a list that
/// alternates racks (the first broker of each rack, then the second of each, …), so a
/// partition's replicas land on as many racks as there are, up to its replication
/// factor, when racks hold similar numbers of brokers. `brokers` must hold at least
/// `replication_factor` entries.
pub fn assign(
    brokers: &[Candidate],
    start: usize,
    first: i32,
    count: i32,
    replication_factor: usize,
) -> Vec<Vec<i32>> {
    let order = rack_alternated(brokers);
    let n = order.len();
    (first..first + count)
        .map(|p| {
            (0..replication_factor)
                .map(|j| order[(start + p as usize + j) % n])
                .collect()
        })
        .collect()
}

/// Broker ids in rack-alternating order: racks by name (no rack first), brokers of a
/// rack by id.
fn rack_alternated(brokers: &[Candidate]) -> Vec<i32> {
    let mut racks: BTreeMap<Option<&str>, Vec<i32>> = BTreeMap::new();
    for b in brokers {
        racks.entry(b.rack.as_deref()).or_default().push(b.id);
    }
    for ids in racks.values_mut() {
        ids.sort_unstable();
    }
    let deepest = racks.values().map(Vec::len).max().unwrap_or(0);
    (0..deepest)
        .flat_map(|i| racks.values().filter_map(move |ids| ids.get(i).copied()))
        .collect()
}

/// KIP-392: the replica a consumer in `client_rack` should fetch from instead of the
/// leader, if any. `followers`: those that may serve the consumer's offset (in the
/// ISR and holding it, so that none answers it "out of range", which would send it
/// back to the leader and here again). `None` when the leader is in that rack or none
/// of them is; otherwise one of them there (by `spread`, so a consumer's partitions
/// spread over them). `rack_of` gives the rack of a broker the consumer can reach
/// (`None` for a broker without a rack, dead, or unreachable).
pub fn preferred_read_replica<'a>(
    client_rack: &str,
    leader: i32,
    followers: &[i32],
    rack_of: impl Fn(i32) -> Option<&'a str>,
    spread: usize,
) -> Option<i32> {
    if rack_of(leader) == Some(client_rack) {
        return None;
    }
    let mut there: Vec<i32> = followers
        .iter()
        .copied()
        .filter(|&b| b != leader && rack_of(b) == Some(client_rack))
        .collect();
    there.sort_unstable();
    (!there.is_empty()).then(|| there[spread % there.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(racks: &[(i32, Option<&str>)]) -> Vec<Candidate> {
        racks
            .iter()
            .map(|&(id, rack)| Candidate {
                id,
                rack: rack.map(str::to_string),
            })
            .collect()
    }

    #[test]
    fn without_racks_replicas_go_round_robin_by_id() {
        let b = brokers(&[(2, None), (0, None), (1, None)]);
        assert_eq!(
            assign(&b, 1, 0, 3, 2),
            vec![vec![1, 2], vec![2, 0], vec![0, 1]]
        );
    }

    #[test]
    fn replicas_of_a_partition_land_on_different_racks() {
        // Ids ordered so that plain round-robin would put 0 and 1 (rack a) together.
        let b = brokers(&[
            (0, Some("a")),
            (1, Some("a")),
            (2, Some("b")),
            (3, Some("b")),
            (4, Some("c")),
            (5, Some("c")),
        ]);
        for start in 0..6 {
            let assigned = assign(&b, start, 0, 12, 3);
            for replicas in &assigned {
                let mut racks: Vec<_> = replicas
                    .iter()
                    .map(|id| b.iter().find(|c| c.id == *id).unwrap().rack.clone())
                    .collect();
                racks.sort();
                racks.dedup();
                assert_eq!(racks.len(), 3, "{replicas:?} at start {start}");
            }
            // Leaders spread evenly: each broker leads 2 of the 12.
            for id in 0..6 {
                let led = assigned.iter().filter(|r| r[0] == id).count();
                assert_eq!(led, 2, "broker {id} at start {start}: {assigned:?}");
            }
        }
    }

    #[test]
    fn a_consumer_reads_from_an_in_sync_follower_in_its_rack() {
        let racks = |b: i32| match b {
            0 => Some("a"),
            1 | 3 => Some("b"),
            2 => Some("c"),
            _ => None,
        };
        // The leader is in the consumer's rack: it answers.
        assert_eq!(preferred_read_replica("a", 0, &[0, 1, 2], racks, 0), None);
        // A follower there that is in sync.
        assert_eq!(
            preferred_read_replica("c", 0, &[0, 1, 2], racks, 0),
            Some(2)
        );
        // Not one that cannot serve the offset (out of the ISR, or not holding it).
        assert_eq!(preferred_read_replica("c", 0, &[0, 1], racks, 0), None);
        // No replica in that rack (or a rack nobody has).
        assert_eq!(preferred_read_replica("d", 0, &[0, 1, 2], racks, 0), None);
        // Two there: partitions spread over them.
        assert_eq!(
            preferred_read_replica("b", 0, &[0, 3, 1], racks, 0),
            Some(1)
        );
        assert_eq!(
            preferred_read_replica("b", 0, &[0, 3, 1], racks, 1),
            Some(3)
        );
        // A dead broker has no rack as far as this goes.
        assert_eq!(preferred_read_replica("c", 0, &[0, 2], |_| None, 0), None);
    }
}
