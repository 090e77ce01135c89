use super::*;

fn part(p: i32, replicas: &[i32]) -> PartitionState {
    PartitionState::initial(Uuid::nil(), p, replicas.to_vec())
}

fn live(ids: &[i32]) -> Vec<BrokerView> {
    ids.iter()
        .map(|&id| BrokerView {
            id,
            alive: true,
            dead_for_ms: 0,
            decommissioned: false,
            rack: None,
        })
        .collect()
}

/// Live brokers with racks.
fn racked(brokers: &[(i32, &str)]) -> Vec<BrokerView> {
    brokers
        .iter()
        .map(|&(id, rack)| BrokerView {
            rack: Some(rack.to_string()),
            ..live(&[id]).remove(0)
        })
        .collect()
}

fn racks_of(replicas: &[i32], brokers: &[BrokerView]) -> usize {
    let racks: HashSet<_> = replicas
        .iter()
        .map(|b| &brokers.iter().find(|v| v.id == *b).unwrap().rack)
        .collect();
    racks.len()
}

#[test]
fn partitions_spread_over_racks_and_stay_spread_while_counts_balance() {
    // Racks a (0, 1), b (2, 3), c (4): partitions placed without regard to racks.
    let brokers = racked(&[(0, "a"), (1, "a"), (2, "b"), (3, "b"), (4, "c")]);
    let mut states: Vec<PartitionState> = (0..10)
        .map(|p| match p % 3 {
            0 => part(p, &[0, 1, 2]),
            1 => part(p, &[2, 3, 0]),
            _ => part(p, &[1, 0, 3]),
        })
        .collect();
    converge(&mut states, &brokers, &Sizes::new(), RULES);
    for s in &states {
        assert_eq!(racks_of(&s.replicas, &brokers), 3, "{s:?}");
    }
    // Rack c's one broker holds every partition: the others' counts balance around it.
    let (replicas, leaders) = counts(&states, &[0, 1, 2, 3, 4]);
    assert_eq!(replicas[4], 10, "{replicas:?}");
    assert!(within_one(&replicas[..4]), "{replicas:?}");
    assert!(within_one(&leaders), "{leaders:?}");
    assert!(plan(&states, &brokers, &Sizes::new(), RULES).is_empty());
}

#[test]
fn a_dead_brokers_replica_is_replaced_in_a_rack_the_partition_lacks() {
    let mut brokers = racked(&[(0, "a"), (1, "a"), (2, "b"), (3, "c")]);
    brokers[3].alive = false;
    brokers[3].dead_for_ms = 120_000;
    let states = vec![part(0, &[0, 2, 3])];
    let moves = plan(&states, &brokers, &Sizes::new(), RULES);
    assert_eq!(moves.len(), 1, "{moves:?}");
    // 1 is in rack a with 0, but it is the only broker left: better than nowhere.
    assert_eq!(moves[0].target, vec![0, 2, 1]);
    let brokers = racked(&[(0, "a"), (1, "b"), (2, "b"), (3, "c"), (4, "c")]);
    let mut brokers = brokers;
    brokers[3].alive = false;
    brokers[3].dead_for_ms = 120_000;
    let states = vec![part(0, &[0, 1, 3])];
    // 4 (rack c) over 2 (rack b, which 1 is on), though both hold nothing.
    assert_eq!(
        plan(&states, &brokers, &Sizes::new(), RULES)[0].target,
        vec![0, 1, 4]
    );
}

const RULES: BalanceRules = BalanceRules {
    max_in_flight: 100,
    replace_dead_after_ms: Some(60_000),
    balance: true,
    disk_band_percent: 10,
    disk_band_min_bytes: 0,
};

/// Applies the moves (as if each reassignment finished) and plans again, until the
/// plan is empty; the number of rounds.
fn converge(
    states: &mut [PartitionState],
    brokers: &[BrokerView],
    sizes: &Sizes,
    rules: BalanceRules,
) -> usize {
    for round in 0..50 {
        let moves = plan(states, brokers, sizes, rules);
        if moves.is_empty() {
            return round;
        }
        for m in moves {
            let s = states
                .iter_mut()
                .find(|s| s.partition == m.partition)
                .unwrap();
            s.replicas = m.target.clone();
            s.isr = m.target.clone();
            s.leader = m.target[0];
        }
    }
    panic!("no convergence: {states:?}");
}

fn counts(states: &[PartitionState], brokers: &[i32]) -> (Vec<usize>, Vec<usize>) {
    let replicas = brokers
        .iter()
        .map(|b| states.iter().filter(|s| s.replicas.contains(b)).count())
        .collect();
    let leaders = brokers
        .iter()
        .map(|b| states.iter().filter(|s| s.replicas[0] == *b).count())
        .collect();
    (replicas, leaders)
}

fn within_one(v: &[usize]) -> bool {
    v.iter().max().unwrap() - v.iter().min().unwrap() <= 1
}

#[test]
fn a_balanced_cluster_makes_no_moves() {
    let states: Vec<_> = (0..6)
        .map(|p| part(p, &[p % 3 + 1, (p + 1) % 3 + 1]))
        .collect();
    assert_eq!(
        plan(&states, &live(&[1, 2, 3]), &Sizes::new(), RULES),
        Vec::new()
    );
}

#[test]
fn a_new_broker_gets_its_share_of_replicas_and_leaders() {
    // Nine RF-2 partitions over brokers 1-3; broker 4 joins.
    let mut states: Vec<_> = (0..9)
        .map(|p| part(p, &[p % 3 + 1, (p + 1) % 3 + 1]))
        .collect();
    let brokers = live(&[1, 2, 3, 4]);
    let rounds = converge(&mut states, &brokers, &Sizes::new(), RULES);
    assert!(rounds >= 1);
    let (replicas, leaders) = counts(&states, &[1, 2, 3, 4]);
    assert!(within_one(&replicas), "replicas {replicas:?}");
    assert!(within_one(&leaders), "leaders {leaders:?}");
    assert!(replicas[3] >= 4, "broker 4 holds {}", replicas[3]);
    for s in &states {
        let mut r = s.replicas.clone();
        r.dedup();
        assert_eq!(r.len(), 2, "a partition lost a replica: {s:?}");
    }
    assert_eq!(
        plan(&states, &brokers, &Sizes::new(), RULES),
        Vec::new(),
        "stays quiet"
    );
}

#[test]
fn decommissioned_and_long_dead_brokers_are_emptied_first() {
    let states: Vec<_> = (0..4).map(|p| part(p, &[1, 2, 3])).collect();
    let mut brokers = live(&[1, 2, 3, 4, 5]);
    brokers[0].decommissioned = true;
    brokers[1].alive = false;
    brokers[1].dead_for_ms = 120_000;
    let moves = plan(&states, &brokers, &Sizes::new(), RULES);
    assert_eq!(moves.len(), 4);
    for m in &moves {
        assert_eq!(m.why, Why::Dead);
        assert_eq!(m.target[2], 3, "the kept replica stays in place: {m:?}");
        assert!(!m.target.contains(&1) && !m.target.contains(&2), "{m:?}");
    }
    // Spread over 4 and 5.
    let on4 = moves.iter().filter(|m| m.target.contains(&4)).count();
    assert_eq!(
        on4, 4,
        "both new replicas go to 4 and 5 for every partition"
    );
    // A broker dead for less than the timeout keeps its replicas; without a timeout,
    // nobody is replaced.
    brokers[0].decommissioned = false;
    brokers[1].dead_for_ms = 1_000;
    let quiet = BalanceRules {
        balance: false,
        ..RULES
    };
    assert_eq!(plan(&states, &brokers, &Sizes::new(), quiet), Vec::new());
    brokers[1].dead_for_ms = 120_000;
    let never = BalanceRules {
        replace_dead_after_ms: None,
        ..quiet
    };
    assert_eq!(plan(&states, &brokers, &Sizes::new(), never), Vec::new());
}

#[test]
fn moves_wait_for_those_in_flight() {
    let mut states: Vec<_> = (0..6).map(|p| part(p, &[1, 2])).collect();
    let brokers = live(&[1, 2, 3, 4]);
    let two = BalanceRules {
        max_in_flight: 2,
        ..RULES
    };
    let moves = plan(&states, &brokers, &Sizes::new(), two);
    assert_eq!(moves.len(), 2);
    // One in flight: one more may start, and it counts the first one's target.
    states[0] = PartitionState {
        replicas: vec![3, 2, 1],
        adding: vec![3],
        removing: vec![1],
        ..states[0].clone()
    };
    let next = plan(&states, &brokers, &Sizes::new(), two);
    assert_eq!(next.len(), 1);
    assert_ne!(next[0].partition, 0);
}

#[test]
fn a_decommissioned_broker_with_nowhere_to_go_keeps_its_replicas() {
    let states = vec![part(0, &[1, 2])];
    let mut brokers = live(&[1, 2]);
    brokers[0].decommissioned = true;
    assert_eq!(plan(&states, &brokers, &Sizes::new(), RULES), Vec::new());
}

#[test]
fn a_rack_spread_move_keeps_the_leader_preferred() {
    // 0 and 1 share rack a; 1 leads, 0 is the preferred leader (first).
    let brokers = racked(&[(0, "a"), (1, "a"), (2, "b"), (3, "c")]);
    let mut s = part(0, &[0, 1, 2]);
    s.leader = 1;
    let moves = plan(&[s], &brokers, &Sizes::new(), RULES);
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0].why, Why::RackSpread);
    // 0 (not the leader) goes to rack c; the leader, not the newcomer, heads the list.
    assert_eq!(moves[0].target, vec![1, 3, 2]);
}

/// Each partition's size by its index (the test partitions share one topic id).
fn sized(sizes: &[(i32, u64)]) -> Sizes {
    sizes.iter().map(|&(p, n)| ((Uuid::nil(), p), n)).collect()
}

fn disk_use(states: &[PartitionState], sizes: &Sizes, broker: i32) -> u64 {
    (states.iter())
        .filter(|s| s.replicas.contains(&broker))
        .map(|s| sizes[&(s.topic_id, s.partition)])
        .sum()
}

#[test]
fn disk_use_ends_within_the_band_and_then_stays_put() {
    // Twelve partitions of 10 to 120 bytes, all on broker 0.
    let mut states: Vec<PartitionState> = (0..12).map(|p| part(p, &[0])).collect();
    let sizes = sized(
        &(0..12)
            .map(|p| (p, 10 * (p as u64 + 1)))
            .collect::<Vec<_>>(),
    );
    let brokers = live(&[0, 1, 2]);
    let first = plan(&states, &brokers, &sizes, RULES);
    assert!(first.iter().all(|m| m.why == Why::DiskBalance), "{first:?}");
    converge(&mut states, &brokers, &sizes, RULES);
    // 780 bytes: a mean of 260, and a band of 10 % (26) either side.
    for b in 0..3 {
        let used = disk_use(&states, &sizes, b);
        assert!((234..=286).contains(&used), "broker {b}: {used} {states:?}");
    }
    assert_eq!(plan(&states, &brokers, &sizes, RULES), Vec::new());
}

#[test]
fn replica_counts_do_not_balance_at_the_disk_bands_expense() {
    // Broker 0: four partitions of 110; broker 1: one of 460. Both within 10 % of 450.
    let states: Vec<PartitionState> = (0..5)
        .map(|p| part(p, if p < 4 { &[0] } else { &[1] }))
        .collect();
    let sizes = sized(&[(0, 110), (1, 110), (2, 110), (3, 110), (4, 460)]);
    let brokers = live(&[0, 1]);
    assert_eq!(plan(&states, &brokers, &sizes, RULES), Vec::new());
    // Without the disk goal, the counts (4 and 1) are balanced.
    let counts_only = BalanceRules {
        disk_band_percent: 0,
        ..RULES
    };
    let moves = plan(&states, &brokers, &sizes, counts_only);
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(
        (moves[0].target.clone(), moves[0].why),
        (vec![1], Why::ReplicaBalance)
    );
    // A band too wide to matter (its floor) leaves the counts to balance too.
    let wide = BalanceRules {
        disk_band_min_bytes: 1 << 30,
        ..RULES
    };
    assert_eq!(plan(&states, &brokers, &sizes, wide), moves);
}

#[test]
fn a_disk_move_keeps_the_partitions_racks() {
    // Racks a (0, 1) and b (2): partition 0 on 0 and 2 is big; moving its replica on
    // 0 to 1 balances disk and keeps it on two racks, moving the one on 2 would not.
    let brokers = racked(&[(0, "a"), (1, "a"), (2, "b")]);
    let states = vec![part(0, &[0, 2]), part(1, &[2, 0]), part(2, &[1, 2])];
    let sizes = sized(&[(0, 400), (1, 100), (2, 10)]);
    let moves = plan(&states, &brokers, &sizes, RULES);
    assert!(!moves.is_empty());
    for m in &moves {
        assert_eq!(m.why, Why::DiskBalance);
        assert_eq!(racks_of(&m.target, &brokers), 2, "{m:?}");
    }
}

#[test]
fn the_disk_goal_waits_for_every_size_and_every_broker() {
    // Broker 0 holds all the data: a disk move is due.
    let states: Vec<PartitionState> = (0..4)
        .map(|p| part(p, if p < 2 { &[0] } else { &[1] }))
        .collect();
    let sizes = sized(&[(0, 400), (1, 400), (2, 0), (3, 0)]);
    let brokers = live(&[0, 1]);
    let moves = plan(&states, &brokers, &sizes, RULES);
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0].why, Why::DiskBalance);
    // A partition not reported yet: its size is unknown, not 0.
    let partial = sized(&[(0, 400), (1, 400), (2, 0)]);
    assert_eq!(plan(&states, &brokers, &partial, RULES), Vec::new());
    // A broker holding replicas is down (not yet replaced): the mean would be wrong.
    let mut three = live(&[0, 1, 2]);
    three[2].alive = false;
    let mut with_dead = states.clone();
    with_dead[3].replicas = vec![1, 2];
    assert_eq!(plan(&with_dead, &three, &sizes, RULES), Vec::new());
    // Once it is back, the move is planned.
    three[2].alive = true;
    assert!((plan(&with_dead, &three, &sizes, RULES).iter()).any(|m| m.why == Why::DiskBalance));
}

#[test]
fn a_partition_without_a_leader_is_not_moved() {
    // Its move could not finish (nobody to copy from) and would hold a slot.
    let mut brokers = live(&[0, 1, 2]);
    brokers[0].decommissioned = true;
    let mut offline = part(0, &[0, 1]);
    offline.leader = -1;
    offline.isr = vec![];
    let moves = plan(&[offline, part(1, &[0, 2])], &brokers, &Sizes::new(), RULES);
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0].partition, 1);
}
