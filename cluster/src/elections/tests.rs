use super::*;

const CLEAN: TopicRules = TopicRules {
    min_isr: 1,
    unclean: false,
};

#[test]
fn elections_pick_live_isr_members_in_replica_order() {
    let unclean = TopicRules {
        unclean: true,
        ..CLEAN
    };
    assert_eq!(elect(&state(1, &[1, 2, 3]), &live(&[1, 2, 3]), CLEAN), None);
    // A dead follower leaves the ISR; the leader and its epoch stay.
    let shrunk = elect(&state(1, &[1, 2, 3]), &live(&[1, 3]), CLEAN).unwrap();
    assert_eq!(
        (shrunk.leader, shrunk.leader_epoch, shrunk.isr),
        (1, 4, vec![1, 3])
    );
    let next = elect(&state(1, &[1, 3, 2]), &live(&[2, 3]), CLEAN).unwrap();
    assert_eq!(
        (next.leader, next.leader_epoch, next.isr.clone()),
        (2, 5, vec![2, 3])
    );
    // Only an out-of-sync replica alive: offline unless unclean election is on.
    let offline = elect(&state(1, &[1, 2]), &live(&[3]), CLEAN).unwrap();
    assert_eq!((offline.leader, offline.isr.clone()), (-1, vec![1, 2]));
    assert_eq!(elect(&offline, &live(&[3]), CLEAN), None);
    let forced = elect(&offline, &live(&[3]), unclean).unwrap();
    assert_eq!(
        (forced.leader, forced.leader_epoch, forced.isr),
        (3, 6, vec![3])
    );
    // An ISR member returning leads again.
    let back = elect(&offline, &live(&[2, 3]), CLEAN).unwrap();
    assert_eq!((back.leader, back.isr), (2, vec![2]));
}

/// Two failures within a lease (min.insync.replicas 2): follower 2 loses power,
/// then leader 1 pauses. The controller still sees 2 alive and elects it; 1 leaves
/// the ISR but stays eligible, since no acks=all record can commit without it. When
/// 2 restarts having lost its tail (and leaves the ISR, see `leave_isrs`), 1 is
/// elected on its return, not 2.
#[test]
fn a_member_that_died_below_min_isr_stays_eligible() {
    let two = TopicRules {
        min_isr: 2,
        unclean: false,
    };
    let mut s = state(1, &[1, 2]);
    s.replicas = vec![1, 2, 3];
    let after_pause = elect(&s, &live(&[2, 3]), two).unwrap();
    assert_eq!(
        (
            after_pause.leader,
            after_pause.isr.clone(),
            after_pause.elr.clone()
        ),
        (2, vec![2], vec![1])
    );
    // 2's lease runs out too: offline, ISR and ELR kept.
    let offline = elect(&after_pause, &live(&[3]), two).unwrap();
    assert_eq!(
        (offline.leader, offline.isr.clone(), offline.elr.clone()),
        (-1, vec![2], vec![1])
    );
    // 2 restarted uncleanly and left the ISR; 1 returns and leads.
    let left = PartitionState {
        isr: Vec::new(),
        ..offline
    };
    assert_eq!(elect(&left, &live(&[2, 3]), two), None, "2 is not eligible");
    let back = elect(&left, &live(&[1, 2, 3]), two).unwrap();
    assert_eq!(
        (back.leader, back.isr, back.elr),
        (1, vec![1], Vec::<i32>::new())
    );
    // Above min.insync.replicas nobody dead stays eligible.
    let wide = elect(&state(1, &[1, 2, 3]), &live(&[1, 3]), two).unwrap();
    assert_eq!((wide.isr, wide.elr), (vec![1, 3], Vec::<i32>::new()));
}

fn state(leader: i32, isr: &[i32]) -> PartitionState {
    PartitionState {
        topic_id: uuid::Uuid::nil(),
        partition: 0,
        replicas: vec![1, 2, 3],
        leader,
        leader_epoch: 4,
        isr: isr.to_vec(),
        elr: Vec::new(),
        recovering: Vec::new(),
        adding: Vec::new(),
        removing: Vec::new(),
        version: 9,
    }
}

fn live(ids: &[i32]) -> HashMap<i32, i64> {
    ids.iter().map(|&b| (b, 1)).collect()
}

/// An unclean election takes the live recovering replica with the most complete log
/// before the first live replica, and still elects when the best recovering replica
/// is dead (the case it exists for).
#[test]
fn an_unclean_election_prefers_the_most_complete_live_recovering_log() {
    use shale_metastore::Recovering;
    let unclean = TopicRules {
        unclean: true,
        ..CLEAN
    };
    let recovering = |broker, last_epoch, log_end| Recovering {
        broker,
        last_epoch,
        log_end,
    };
    let mut s = state(-1, &[]);
    s.recovering = vec![
        recovering(1, 3, 90),
        recovering(2, 3, 50),
        recovering(3, 2, 99),
    ];
    // The best one (1) is dead: a clean controller waits for it.
    assert_eq!(elect(&s, &live(&[2, 3]), CLEAN), None);
    let forced = elect(&s, &live(&[2, 3]), unclean).unwrap();
    assert_eq!((forced.leader, forced.isr), (2, vec![2]));
    // The ISR's only member is dead, a recovering replica lives.
    let mut s = state(-1, &[1]);
    s.recovering = vec![recovering(3, 3, 70)];
    let forced = elect(&s, &live(&[2, 3]), unclean).unwrap();
    assert_eq!(forced.leader, 3);
    // No recovering replica lives: the first live replica.
    let forced = elect(&s, &live(&[2]), unclean).unwrap();
    assert_eq!(forced.leader, 2);
}
