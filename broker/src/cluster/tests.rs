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
