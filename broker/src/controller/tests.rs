use super::*;

/// A renewal sent while the lease was valid but answered after it lapsed: the
/// controller may have moved leaderships meanwhile, so the broker must read the
/// metadata again before it trusts the renewed lease (it used to judge the lapse
/// when it sent the renewal, and kept acting as leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_answered_after_the_lease_lapsed_reloads_the_metadata() {
    use shale_metastore::Metastore;
    use std::sync::atomic::Ordering;
    let dir = tempfile::tempdir().unwrap();
    let t = crate::testing::TestBroker::start(dir.path(), "[cluster]\nlease_ms = 4000\n").await;
    let b = &t.broker;
    b.create_topic("t", 1, 1, Default::default(), false)
        .await
        .unwrap();
    assert!(b.leader_partition("t", 0).is_ok());
    b.renew_lease().await.unwrap(); // trusted for 3 s from now
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    // The next renewal takes 2 s: sent with 1.5 s of trust left, answered 0.5 s
    // after the trust ran out.
    t.metastore.renew_delay_ms.store(2_000, Ordering::SeqCst);
    let renewal = tokio::spawn({
        let b = b.clone();
        async move { b.renew_lease().await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Meanwhile the partition moves to another broker.
    let mut state = t.metastore.list_partition_states().await.unwrap()[0].clone();
    state.leader = 7;
    state.leader_epoch += 1;
    state.isr = vec![7];
    t.metastore
        .update_partition_state(&state, StateGuard::default())
        .await
        .unwrap();
    renewal.await.unwrap().unwrap();
    assert!(b.lease_valid());
    assert!(
        b.leader_partition("t", 0).is_err(),
        "acts as leader of a partition that moved while its lease had lapsed"
    );
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
        version: 9,
    }
}

fn live(ids: &[i32]) -> HashMap<i32, i64> {
    ids.iter().map(|&b| (b, 1)).collect()
}

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
