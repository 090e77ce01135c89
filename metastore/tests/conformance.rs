//! One conformance suite for every `Metastore` implementation, run against a real
//! SQLite file and a real PostgreSQL server.
//!
//! PostgreSQL: `SHALE_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/postgres`)
//! must reach a server where the user may create databases; each test gets a fresh
//! database and drops it afterwards. Start one with `infra/test-services.sh`.

use std::collections::BTreeMap;
use std::sync::Arc;

use shale_metastore::{
    Error, Metastore, NewTopic, PartitionState, RemoteSegment, RemoteSegmentState, RestoredTopic,
    StateGuard,
};

/// A metastore under test plus whatever must be cleaned up after it.
struct Fixture {
    store: Arc<dyn Metastore>,
    cleanup: Option<(String, String)>, // (admin url, database name)
    _dir: Option<tempfile_dir::Dir>,
}

mod tempfile_dir {
    /// A scratch directory removed on drop (kept tiny to avoid a dev-dependency).
    pub(crate) struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn sqlite() -> Fixture {
    let dir = std::env::temp_dir().join(format!("shale-ms-{}", uuid_like()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}/meta.db", dir.display());
    let store = shale_metastore::open(&url).await.unwrap();
    Fixture {
        store,
        cleanup: None,
        _dir: Some(tempfile_dir::Dir(dir)),
    }
}

async fn postgres() -> Fixture {
    let admin = shale_testkit::postgres::admin_url();
    let db = format!("shale_test_{}", uuid_like());
    let pool = sqlx_admin(&admin).await;
    sqlx_exec(&pool, &format!("CREATE DATABASE {db}")).await;
    pool.close().await;
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    let store = shale_metastore::open(&format!("{base}/{db}"))
        .await
        .unwrap();
    Fixture {
        store,
        cleanup: Some((admin, db)),
        _dir: None,
    }
}

impl Fixture {
    async fn finish(self) {
        drop(self.store);
        if let Some((admin, db)) = self.cleanup {
            let pool = sqlx_admin(&admin).await;
            sqlx_exec(&pool, &format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)")).await;
        }
    }
}

async fn sqlx_admin(url: &str) -> sqlx::PgPool {
    sqlx::PgPool::connect(url).await.unwrap_or_else(|e| {
        panic!(
            "cannot reach PostgreSQL at {url} ({e}); start it with `infra/test-services.sh` \
             or point SHALE_TEST_POSTGRES_URL at a server where this user may create databases"
        )
    })
}

async fn sqlx_exec(pool: &sqlx::PgPool, sql: &str) {
    sqlx::query(sql)
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

fn uuid_like() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

fn new_topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic {
        name: name.to_string(),
        partitions,
        replication_factor: 1,
        configs: BTreeMap::from([("retention.ms".to_string(), "1000".to_string())]),
        assignments: vec![vec![0]; partitions.max(0) as usize],
    }
}

async fn create_get_list(m: &dyn Metastore) {
    let a = m.create_topic(new_topic("beta", 3)).await.unwrap();
    let b = m.create_topic(new_topic("alpha", 1)).await.unwrap();
    assert_ne!(a.id, b.id);
    let got = m.get_topic("beta").await.unwrap().unwrap();
    assert_eq!(got, a);
    assert_eq!(
        got.configs.get("retention.ms").map(String::as_str),
        Some("1000")
    );
    let names: Vec<_> = m
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert!(m.get_topic("gamma").await.unwrap().is_none());
}

async fn duplicate_name_is_refused_and_keeps_original(m: &dyn Metastore) {
    let first = m.create_topic(new_topic("dup", 2)).await.unwrap();
    let err = m.create_topic(new_topic("dup", 5)).await.unwrap_err();
    assert!(
        matches!(err, Error::TopicAlreadyExists(ref n) if n == "dup"),
        "{err:?}"
    );
    assert_eq!(m.get_topic("dup").await.unwrap().unwrap(), first);
}

async fn delete_removes_topic_and_configs(m: &dyn Metastore) {
    let t = m.create_topic(new_topic("gone", 1)).await.unwrap();
    assert_eq!(m.delete_topic("gone").await.unwrap().id, t.id);
    assert!(m.get_topic("gone").await.unwrap().is_none());
    assert!(matches!(
        m.delete_topic("gone").await,
        Err(Error::TopicNotFound(_))
    ));
    // A re-created topic gets a new id and none of the old configs.
    let mut fresh = new_topic("gone", 1);
    fresh.configs.clear();
    let again = m.create_topic(fresh).await.unwrap();
    assert_ne!(again.id, t.id);
    assert!(again.configs.is_empty());
    assert!(
        m.get_topic("gone")
            .await
            .unwrap()
            .unwrap()
            .configs
            .is_empty()
    );
}

async fn alter_configs_sets_and_deletes(m: &dyn Metastore) {
    m.create_topic(new_topic("cfg", 1)).await.unwrap();
    let set = BTreeMap::from([
        ("segment.bytes".to_string(), "1048576".to_string()),
        ("retention.ms".to_string(), "5000".to_string()),
    ]);
    let t = m.alter_topic_configs("cfg", &set, &[]).await.unwrap();
    assert_eq!(t.configs, set);
    let t = m
        .alter_topic_configs("cfg", &BTreeMap::new(), &["retention.ms".to_string()])
        .await
        .unwrap();
    assert_eq!(t.configs.len(), 1);
    assert_eq!(
        m.get_topic("cfg").await.unwrap().unwrap().configs,
        t.configs
    );
    let err = m.alter_topic_configs("nope", &set, &[]).await.unwrap_err();
    assert!(matches!(err, Error::TopicNotFound(_)));
}

async fn partitions_only_grow(m: &dyn Metastore) {
    m.create_topic(new_topic("grow", 2)).await.unwrap();
    assert_eq!(
        m.add_partitions("grow", 5, &[vec![0], vec![0], vec![0]])
            .await
            .unwrap()
            .partitions,
        5
    );
    let states = m.list_partition_states().await.unwrap();
    assert_eq!(states.len(), 5);
    assert!(states.iter().all(|s| s.leader == 0 && s.isr == vec![0]));
    for bad in [5, 3] {
        let err = m.add_partitions("grow", bad, &[]).await.unwrap_err();
        assert!(
            matches!(err, Error::PartitionCountNotIncreased { current: 5, requested, .. } if requested == bad),
            "{err:?}"
        );
    }
    assert_eq!(m.get_topic("grow").await.unwrap().unwrap().partitions, 5);
    assert!(matches!(
        m.add_partitions("nope", 9, &[vec![0]]).await,
        Err(Error::TopicNotFound(_))
    ));
}

async fn cluster_leases_and_partition_state(m: &dyn Metastore) {
    // The cluster id is created once and then stays.
    let id = m.cluster_id().await.unwrap();
    assert_eq!(m.cluster_id().await.unwrap(), id);

    // Broker leases: a registration is a new incarnation with an expired lease; only
    // the newest incarnation renews; times are the metastore's own clock.
    let e1 = m
        .register_broker(1, "127.0.0.1:1", &[], None)
        .await
        .unwrap();
    let endpoints = [
        ("grpc".to_string(), "127.0.0.1:2".to_string()),
        ("kafka".to_string(), "[::1]:9092".to_string()),
    ];
    let e2 = m
        .register_broker(2, "127.0.0.1:2", &endpoints, Some("rack-b"))
        .await
        .unwrap();
    let brokers = m.list_brokers().await.unwrap();
    assert_eq!(brokers.len(), 2);
    // Each listener's address comes back by name; a broker registered without any
    // has its address as `grpc`.
    assert_eq!(brokers[1].endpoints, endpoints);
    assert_eq!(brokers[1].endpoint("kafka"), Some("[::1]:9092"));
    assert_eq!(brokers[0].endpoint("grpc"), Some("127.0.0.1:1"));
    assert_eq!(brokers[0].endpoint("kafka"), None);
    assert_eq!(
        (brokers[0].rack.as_deref(), brokers[1].rack.as_deref()),
        (None, Some("rack-b"))
    );
    assert!(brokers.iter().all(|b| !b.is_alive()), "{brokers:?}");
    m.renew_broker_lease(1, e1, "127.0.0.1:11", 60_000)
        .await
        .unwrap();
    m.renew_broker_lease(2, e2, "127.0.0.1:2", 1).await.unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let brokers = m.list_brokers().await.unwrap();
    assert_eq!(
        (brokers[0].address.as_str(), brokers[0].broker_epoch),
        ("127.0.0.1:11", e1)
    );
    assert!(
        brokers[0].remaining_ms > 50_000 && brokers[0].remaining_ms <= 60_000,
        "{brokers:?}"
    );
    assert!(
        brokers[0].is_alive() && !brokers[1].is_alive(),
        "{brokers:?}"
    );
    // A restart registers a newer incarnation: the older one can no longer renew. The
    // lease keeps its expiry for the older one (a process that still runs trusts it),
    // but makes the new one live only once it renews it itself.
    let e1b = m
        .register_broker(1, "127.0.0.1:1", &[], None)
        .await
        .unwrap();
    assert_eq!(e1b, e1 + 1);
    assert!(!m.list_brokers().await.unwrap()[0].is_alive());
    let err = m
        .renew_broker_lease(1, e1, "127.0.0.1:1", 60_000)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::BrokerEpochFenced { broker_id: 1, .. }),
        "{err:?}"
    );
    m.renew_broker_lease(1, e1b, "127.0.0.1:1", 60_000)
        .await
        .unwrap();

    // Controller lease: first taker wins, others wait for expiry, holder renews.
    let c = m.try_acquire_controller(1, 60_000).await.unwrap().unwrap();
    assert_eq!((c.broker_id, c.epoch), (1, 1));
    assert!(c.remaining_ms > 50_000, "{c:?}");
    assert_eq!(m.try_acquire_controller(2, 60_000).await.unwrap(), None);
    let c = m.try_acquire_controller(1, 1).await.unwrap().unwrap();
    assert_eq!(c.epoch, 1);
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let c = m.try_acquire_controller(2, 60_000).await.unwrap().unwrap();
    assert_eq!((c.broker_id, c.epoch), (2, 2));
    let held = m.controller().await.unwrap().unwrap();
    assert_eq!((held.broker_id, held.epoch), (2, 2));
    assert!(held.remaining_ms > 0 && held.remaining_ms <= 60_000);

    // Partition state: created with the topic, changed by compare-and-set only.
    let mut t = new_topic("replicated", 2);
    t.replication_factor = 2;
    t.assignments = vec![vec![1, 2], vec![2, 1]];
    let topic = m.create_topic(t).await.unwrap();
    let states = m.list_partition_states().await.unwrap();
    assert_eq!(states.len(), 2);
    let p0 = states.iter().find(|s| s.partition == 0).unwrap().clone();
    assert_eq!((p0.topic_id, p0.leader, p0.leader_epoch), (topic.id, 1, 0));
    assert_eq!((p0.isr.clone(), p0.version), (vec![1, 2], 0));

    let mut next = p0.clone();
    next.leader = 2;
    next.leader_epoch = 1;
    next.isr = vec![2];
    next.elr = vec![1];
    next.recovering = vec![shale_metastore::Recovering {
        broker: 3,
        last_epoch: 0,
        log_end: 42,
    }];
    let expired = |b| StateGuard {
        expired: Some(b),
        ..StateGuard::default()
    };
    // Broker 1's lease runs: a fenced change is refused until it ends.
    let err = m
        .update_partition_state(&next, expired(1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BrokerStillAlive(1)), "{err:?}");
    m.renew_broker_lease(1, e1b, "127.0.0.1:1", 0)
        .await
        .unwrap();
    // The new leader must be alive, in the incarnation the controller saw.
    let elect = |epoch| StateGuard {
        expired: Some(1),
        alive: Some((2, epoch)),
    };
    let err = m
        .update_partition_state(&next, elect(e2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BrokerNotAlive(2)), "{err:?}");
    m.renew_broker_lease(2, e2, "127.0.0.1:2", 60_000)
        .await
        .unwrap();
    let err = m
        .update_partition_state(&next, elect(e2 + 1))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BrokerNotAlive(2)), "{err:?}");
    // Broker 2 restarts within its lease: the lease still fences leadership away from
    // the older incarnation, but makes the new one electable only once it renewed it.
    let e2b = m
        .register_broker(2, "127.0.0.1:2", &[], None)
        .await
        .unwrap();
    for guard in [elect(e2), elect(e2b)] {
        let err = m.update_partition_state(&next, guard).await.unwrap_err();
        assert!(matches!(err, Error::BrokerNotAlive(2)), "{err:?}");
    }
    let err = m
        .update_partition_state(&next, expired(2))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BrokerStillAlive(2)), "{err:?}");
    m.renew_broker_lease(2, e2b, "127.0.0.1:2", 60_000)
        .await
        .unwrap();
    let stored = m.update_partition_state(&next, elect(e2b)).await.unwrap();
    assert_eq!(stored.elr, vec![1]);
    assert_eq!(stored.recovering, next.recovering);
    assert_eq!(
        (stored.leader, stored.leader_epoch, stored.version),
        (2, 1, 1)
    );
    assert_eq!(stored.isr, vec![2]);
    // A writer that read version 0 loses.
    let err = m
        .update_partition_state(&p0, StateGuard::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::PartitionStateConflict {
                expected: 0,
                actual: 1,
                ..
            }
        ),
        "{err:?}"
    );
    // Assignments that do not fit are refused and nothing is created.
    let mut bad = new_topic("badly-assigned", 2);
    bad.assignments = vec![vec![0]];
    assert!(matches!(
        m.create_topic(bad).await,
        Err(Error::InvalidAssignment(_))
    ));
    assert!(m.get_topic("badly-assigned").await.unwrap().is_none());
    // Deleting the topic deletes its partition states.
    m.delete_topic("replicated").await.unwrap();
    assert!(m.list_partition_states().await.unwrap().is_empty());
}

async fn survives_reopen(url_of: &str, m: &dyn Metastore) {
    m.create_topic(new_topic("durable", 4)).await.unwrap();
    let reopened = shale_metastore::open(url_of).await.unwrap();
    assert_eq!(
        reopened
            .get_topic("durable")
            .await
            .unwrap()
            .unwrap()
            .partitions,
        4
    );
}

fn aborted(producer_id: i64, first: i64, last: i64, lso: i64) -> shale_metastore::RemoteAbortedTxn {
    shale_metastore::RemoteAbortedTxn {
        producer_id,
        first_offset: first,
        last_offset: last,
        last_stable_offset: lso,
    }
}

fn segment(topic_id: uuid::Uuid, base: i64, end: i64) -> RemoteSegment {
    // Distinct, increasing creation times, as real uploads have.
    static CLOCK: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(1);
    let created = CLOCK.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    RemoteSegment {
        segment_id: uuid::Uuid::new_v4(),
        topic_id,
        partition: 0,
        base_offset: base,
        end_offset: end,
        max_timestamp: 1_000 + end,
        leader_epoch: 0,
        size_bytes: 4096,
        state: RemoteSegmentState::CopyStarted,
        created_at_ms: created,
        updated_at_ms: created,
        epochs: vec![(0, base)],
        object_end_offset: end,
        aborted: Vec::new(),
    }
}

async fn remote_segments_follow_the_state_machine(m: &dyn Metastore) {
    use RemoteSegmentState::*;
    let topic = m.create_topic(new_topic("tiered", 1)).await.unwrap().id;
    let a = segment(topic, 0, 99);
    m.add_remote_segment(&a).await.unwrap();
    let listed = m
        .list_remote_segments(topic, 0, &[CopyStarted])
        .await
        .unwrap();
    assert_eq!(listed, vec![a.clone()]);
    assert!(
        m.list_remote_segments(topic, 0, &[CopyFinished])
            .await
            .unwrap()
            .is_empty(),
        "unfinished is invisible"
    );
    assert!(
        m.list_remote_segments(topic, 1, &[CopyStarted])
            .await
            .unwrap()
            .is_empty(),
        "other partition"
    );

    let finished = m
        .transition_remote_segment(a.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap();
    assert_eq!(finished.state, CopyFinished);
    // Compare-and-set: a second finisher loses.
    let err = m
        .transition_remote_segment(a.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::RemoteSegmentStateConflict {
                actual: CopyFinished,
                ..
            }
        ),
        "{err:?}"
    );
    for (from, to) in [
        (CopyFinished, CopyStarted),
        (CopyFinished, DeleteFinished),
        (DeleteFinished, CopyStarted),
    ] {
        let err = m
            .transition_remote_segment(a.segment_id, from, to)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::IllegalTransition { .. }),
            "{from:?} -> {to:?}: {err:?}"
        );
    }
    let missing = m
        .transition_remote_segment(uuid::Uuid::new_v4(), CopyStarted, CopyFinished)
        .await;
    assert!(matches!(missing, Err(Error::RemoteSegmentNotFound(_))));
    let mut not_started = segment(topic, 500, 599);
    not_started.state = CopyFinished;
    assert!(matches!(
        m.add_remote_segment(&not_started).await,
        Err(Error::IllegalTransition { .. })
    ));

    // Never two finished segments over one offset.
    let overlapping = segment(topic, 50, 149);
    m.add_remote_segment(&overlapping).await.unwrap();
    let err = m
        .transition_remote_segment(overlapping.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::RemoteSegmentOverlap { other, .. } if other == a.segment_id),
        "{err:?}"
    );
    let same_base = segment(topic, 0, 99);
    m.add_remote_segment(&same_base).await.unwrap();
    assert!(matches!(
        m.transition_remote_segment(same_base.segment_id, CopyStarted, CopyFinished)
            .await,
        Err(Error::RemoteSegmentOverlap { .. })
    ));
    // An aborted copy is cleaned up through DELETE_STARTED.
    m.transition_remote_segment(overlapping.segment_id, CopyStarted, DeleteStarted)
        .await
        .unwrap();
    let next = segment(topic, 100, 199);
    m.add_remote_segment(&next).await.unwrap();
    m.transition_remote_segment(next.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap();
    let readable: Vec<_> = m
        .list_remote_segments(topic, 0, &[CopyFinished])
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.base_offset, s.end_offset))
        .collect();
    assert_eq!(readable, [(0, 99), (100, 199)]);

    // Remote retention: finished -> delete started -> delete finished.
    m.transition_remote_segment(a.segment_id, CopyFinished, DeleteStarted)
        .await
        .unwrap();
    m.transition_remote_segment(a.segment_id, DeleteStarted, DeleteFinished)
        .await
        .unwrap();
    let states: Vec<_> = m
        .list_remote_segments(
            topic,
            0,
            &[CopyStarted, CopyFinished, DeleteStarted, DeleteFinished],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.base_offset, s.state))
        .collect();
    assert_eq!(
        states,
        [
            (0, DeleteFinished),
            (0, CopyStarted),
            (50, DeleteStarted),
            (100, CopyFinished)
        ],
        "ordered by base offset, then creation"
    );
    // A copy made under an older leader epoch than the partition's cannot finish.
    let mut state = m
        .list_partition_states()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.topic_id == topic && s.partition == 0)
        .unwrap();
    state.leader_epoch = 1;
    m.update_partition_state(&state, StateGuard::default())
        .await
        .unwrap();
    let late = segment(topic, 200, 299);
    m.add_remote_segment(&late).await.unwrap();
    let err = m
        .transition_remote_segment(late.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::StaleLeaderEpoch {
                copied: 0,
                current: 1,
                ..
            }
        ),
        "{err:?}"
    );
    m.transition_remote_segment(late.segment_id, CopyStarted, DeleteStarted)
        .await
        .unwrap();
    m.transition_remote_segment(late.segment_id, DeleteStarted, DeleteFinished)
        .await
        .unwrap();
    state.version += 1;
    state.leader_epoch = 0;
    m.update_partition_state(&state, StateGuard::default())
        .await
        .unwrap();

    // The remote log end counts every copy that finished, deleted since or not, and
    // no aborted copy (50..=149 never finished).
    assert_eq!(m.remote_log_end_offset(topic, 0).await.unwrap(), 199);
    assert_eq!(m.remote_log_end_offset(topic, 1).await.unwrap(), -1);
    let logs = m.remote_logs(topic).await.unwrap();
    assert_eq!(logs.keys().copied().collect::<Vec<_>>(), vec![0]);
    assert_eq!(logs[&0].copied_end, 199);
    assert!(
        logs[&0].unfinished,
        "the copy of 0..=99 that never finished"
    );
    let bases: Vec<i64> = logs[&0].finished.iter().map(|s| s.base_offset).collect();
    assert_eq!(bases, vec![100]);
    m.transition_remote_segment(next.segment_id, CopyFinished, DeleteStarted)
        .await
        .unwrap();
    assert_eq!(m.remote_log_end_offset(topic, 0).await.unwrap(), 199);
    let aborted = segment(topic, 200, 299);
    m.add_remote_segment(&aborted).await.unwrap();
    m.transition_remote_segment(aborted.segment_id, CopyStarted, DeleteStarted)
        .await
        .unwrap();
    assert_eq!(m.remote_log_end_offset(topic, 0).await.unwrap(), 199);
    m.transition_remote_segment(aborted.segment_id, DeleteStarted, DeleteFinished)
        .await
        .unwrap();
    m.transition_remote_segment(next.segment_id, DeleteStarted, DeleteFinished)
        .await
        .unwrap();
    // Copied again (as after a restore): readable once more.
    let again = segment(topic, 100, 199);
    m.add_remote_segment(&again).await.unwrap();
    m.transition_remote_segment(again.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap();
    // Rows outlive their topic; what is not DELETE_FINISHED can be found by topic.
    let ids = m.remote_segment_topic_ids().await.unwrap();
    assert_eq!(ids, vec![topic]);
    let undeleted: Vec<_> = m
        .undeleted_remote_segments(topic)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.state)
        .collect();
    assert_eq!(undeleted, [CopyStarted, DeleteStarted, CopyFinished]);
    m.delete_topic("tiered").await.unwrap();
    assert_eq!(m.undeleted_remote_segments(topic).await.unwrap().len(), 3);
    for s in m.undeleted_remote_segments(topic).await.unwrap() {
        if s.state != DeleteStarted {
            m.transition_remote_segment(s.segment_id, s.state, DeleteStarted)
                .await
                .unwrap();
        }
        m.transition_remote_segment(s.segment_id, DeleteStarted, DeleteFinished)
            .await
            .unwrap();
    }
    assert!(m.remote_segment_topic_ids().await.unwrap().is_empty());
}

/// A new leader's cut of a diverged remote log: only under the current epoch; later
/// segments start their deletion, the one holding the cut ends before it, and the
/// remote log end falls back, so the leader's own copy from the cut can finish.
async fn a_diverged_remote_log_is_cut_under_the_current_epoch(m: &dyn Metastore) {
    use RemoteSegmentState::*;
    let topic = m.create_topic(new_topic("diverged", 1)).await.unwrap().id;
    let (a, mut b, c) = (
        segment(topic, 0, 99),
        segment(topic, 100, 199),
        segment(topic, 200, 299),
    );
    b.epochs = vec![(0, 100), (1, 150)];
    // Two aborted transactions end in it, one of them started in the segment before.
    b.aborted = vec![aborted(7, 90, 120, 90), aborted(8, 130, 160, 130)];
    for s in [&a, &b, &c] {
        m.add_remote_segment(s).await.unwrap();
        m.transition_remote_segment(s.segment_id, CopyStarted, CopyFinished)
            .await
            .unwrap();
    }
    let err = m.truncate_remote_log(topic, 0, 150, 5).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::StaleLeaderEpoch {
                copied: 5,
                current: 0,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        m.remote_logs(topic).await.unwrap()[&0].copied_end,
        299,
        "a refused cut changes nothing"
    );
    assert_eq!(m.truncate_remote_log(topic, 0, 150, 0).await.unwrap(), 2);
    let log = &m.remote_logs(topic).await.unwrap()[&0];
    let finished: Vec<_> = log
        .finished
        .iter()
        .map(|s| (s.base_offset, s.end_offset, s.epochs.clone()))
        .collect();
    assert_eq!(
        finished,
        [(0, 99, vec![(0, 0)]), (100, 149, vec![(0, 100), (1, 150)])]
    );
    assert_eq!(
        log.finished[1].aborted, b.aborted,
        "the aborted transactions are kept as written (readers skip those past the cut)"
    );
    assert_eq!(
        log.finished[1].object_end_offset, 199,
        "its objects keep their keys"
    );
    assert_eq!(log.copied_end, 149);
    assert!(
        log.unfinished,
        "200..=299 awaits the deletion of its objects"
    );
    let states: Vec<_> = m
        .list_remote_segments(topic, 0, &[DeleteStarted])
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.segment_id)
        .collect();
    assert_eq!(states, [c.segment_id]);
    let own = segment(topic, 150, 249);
    m.add_remote_segment(&own).await.unwrap();
    m.transition_remote_segment(own.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap();
    assert_eq!(m.remote_log_end_offset(topic, 0).await.unwrap(), 249);
}

/// Remote compaction's swap: all rows or none, same offsets only, then the grace
/// period's state and its deletion.
async fn remote_compaction_swaps_rows_in_one_transaction(m: &dyn Metastore) {
    use RemoteSegmentState::*;
    let topic = m.create_topic(new_topic("compacted", 1)).await.unwrap().id;
    let (a, b) = (segment(topic, 0, 99), segment(topic, 100, 199));
    for s in [&a, &b] {
        m.add_remote_segment(s).await.unwrap();
        m.transition_remote_segment(s.segment_id, CopyStarted, CopyFinished)
            .await
            .unwrap();
    }
    let merged = segment(topic, 0, 199);
    let short = segment(topic, 0, 150);
    m.add_remote_segment(&merged).await.unwrap();
    m.add_remote_segment(&short).await.unwrap();
    let ids = |s: &[&RemoteSegment]| s.iter().map(|s| s.segment_id).collect::<Vec<_>>();
    // A rewrite that does not cover the same offsets changes nothing.
    assert!(
        m.replace_remote_segments(&ids(&[&a, &b]), &ids(&[&short]))
            .await
            .is_err()
    );
    // Nor one of segments with a finished one between them.
    let c = segment(topic, 200, 299);
    m.add_remote_segment(&c).await.unwrap();
    m.transition_remote_segment(c.segment_id, CopyStarted, CopyFinished)
        .await
        .unwrap();
    let wide = segment(topic, 0, 299);
    m.add_remote_segment(&wide).await.unwrap();
    assert!(
        m.replace_remote_segments(&ids(&[&a, &c]), &ids(&[&wide]))
            .await
            .is_err()
    );
    // Nor does one whose replaced row is not finished.
    assert!(
        m.replace_remote_segments(&ids(&[&a, &merged]), &ids(&[&short]))
            .await
            .is_err()
    );
    let finished = m
        .list_remote_segments(topic, 0, &[CopyFinished])
        .await
        .unwrap();
    assert_eq!(
        ids(&finished.iter().collect::<Vec<_>>()),
        ids(&[&a, &b, &c])
    );

    m.replace_remote_segments(&ids(&[&a, &b]), &ids(&[&merged]))
        .await
        .unwrap();
    let finished = m
        .list_remote_segments(topic, 0, &[CopyFinished])
        .await
        .unwrap();
    assert_eq!(
        ids(&finished.iter().collect::<Vec<_>>()),
        ids(&[&merged, &c])
    );
    let compacted = m
        .list_remote_segments(topic, 0, &[Compacted])
        .await
        .unwrap();
    assert_eq!(ids(&compacted.iter().collect::<Vec<_>>()), ids(&[&a, &b]));
    let log = m.remote_logs(topic).await.unwrap().remove(&0).unwrap();
    assert_eq!(log.copied_end, 299);
    assert!(log.unfinished, "the short rewrite is still COPY_STARTED");
    // A second swap of the same rows fails: they are no longer finished.
    assert!(matches!(
        m.replace_remote_segments(&ids(&[&a, &b]), &ids(&[&short]))
            .await,
        Err(Error::RemoteSegmentStateConflict { .. })
    ));
    // A compacted row is deleted as any other; it cannot become readable again.
    assert!(
        m.transition_remote_segment(a.segment_id, Compacted, CopyFinished)
            .await
            .is_err()
    );
    m.transition_remote_segment(a.segment_id, Compacted, DeleteStarted)
        .await
        .unwrap();
    m.transition_remote_segment(a.segment_id, DeleteStarted, DeleteFinished)
        .await
        .unwrap();
    // A deposed leader's rewrite cannot be swapped in.
    let mut state = m
        .list_partition_states()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.topic_id == topic && s.partition == 0)
        .unwrap();
    state.leader_epoch = 1;
    m.update_partition_state(&state, StateGuard::default())
        .await
        .unwrap();
    let err = m
        .replace_remote_segments(&ids(&[&merged]), &ids(&[&short]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::CorruptRow(_)), "{err:?}");
    let whole = segment(topic, 0, 199);
    m.add_remote_segment(&whole).await.unwrap();
    let err = m
        .replace_remote_segments(&ids(&[&merged]), &ids(&[&whole]))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::StaleLeaderEpoch {
                copied: 0,
                current: 1,
                ..
            }
        ),
        "{err:?}"
    );
    let finished = m
        .list_remote_segments(topic, 0, &[CopyFinished])
        .await
        .unwrap();
    assert_eq!(
        ids(&finished.iter().collect::<Vec<_>>()),
        ids(&[&merged, &c])
    );
    m.delete_topic("compacted").await.unwrap();
}

async fn producer_ids_and_group_offsets(m: &dyn Metastore) {
    let a = m.allocate_producer_ids(1000).await.unwrap();
    let b = m.allocate_producer_ids(1000).await.unwrap();
    assert_eq!((a, b), (0, 1000), "blocks do not overlap");

    let t = m.create_topic(new_topic("events", 3)).await.unwrap();
    let commit = |partition, offset| shale_metastore::CommittedOffset {
        topic_id: t.id,
        partition,
        offset,
        metadata: format!("m{offset}"),
        commit_ms: 7,
    };
    m.commit_offsets("g1", &[commit(0, 10), commit(1, 20)], None)
        .await
        .unwrap();
    m.commit_offsets("g1", &[commit(1, 25)], None)
        .await
        .unwrap();
    m.commit_offsets("g2", &[commit(2, 5)], None).await.unwrap();
    let g1: Vec<_> = m
        .committed_offsets("g1")
        .await
        .unwrap()
        .into_iter()
        .map(|o| (o.partition, o.offset, o.metadata))
        .collect();
    assert_eq!(g1, [(0, 10, "m10".into()), (1, 25, "m25".into())]);
    assert_eq!(m.offset_groups().await.unwrap(), ["g1", "g2"]);
    // A commit naming a topic that does not exist writes nothing.
    let mut bad = commit(0, 99);
    bad.topic_id = uuid::Uuid::new_v4();
    let err = m
        .commit_offsets("g1", &[commit(2, 1), bad], None)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::UnknownTopicId(_)), "{err:?}");
    assert_eq!(m.committed_offsets("g1").await.unwrap().len(), 2);
    // A commit fenced by the live brokers is written only while exactly those hold
    // running leases.
    let epoch = m
        .register_broker(5, "127.0.0.1:5", &[], None)
        .await
        .unwrap();
    let err = m
        .commit_offsets("g1", &[commit(2, 1)], Some(&[5]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::LiveBrokersChanged { now, .. } if now.is_empty()),
        "a registered broker is not live before it renews its lease: {err:?}"
    );
    m.renew_broker_lease(5, epoch, "127.0.0.1:5", 60_000)
        .await
        .unwrap();
    for stale in [&[][..], &[5, 6], &[6]] {
        let err = m
            .commit_offsets("g1", &[commit(2, 1)], Some(stale))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::LiveBrokersChanged { now, .. } if now == &[5]),
            "{stale:?}: {err:?}"
        );
    }
    assert_eq!(m.committed_offsets("g1").await.unwrap().len(), 2);
    m.commit_offsets("g1", &[commit(2, 1)], Some(&[5]))
        .await
        .unwrap();
    assert_eq!(m.committed_offsets("g1").await.unwrap().len(), 3);
    m.delete_committed_offsets("g1", &[(t.id, 2)])
        .await
        .unwrap();
    // Deleting some partitions' offsets leaves the others (and other groups').
    m.delete_committed_offsets("g1", &[(t.id, 0), (t.id, 2)])
        .await
        .unwrap();
    let left: Vec<_> = m
        .committed_offsets("g1")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.partition)
        .collect();
    assert_eq!(left, [1]);
    assert_eq!(m.committed_offsets("g2").await.unwrap().len(), 1);
    m.commit_offsets("g1", &[commit(0, 10)], None)
        .await
        .unwrap();
    assert_eq!(m.delete_group_offsets("g1").await.unwrap(), 2);
    assert!(m.committed_offsets("g1").await.unwrap().is_empty());
    // Deleting the topic drops its offsets.
    m.delete_topic("events").await.unwrap();
    assert!(m.committed_offsets("g2").await.unwrap().is_empty());
    assert!(m.offset_groups().await.unwrap().is_empty());
}

/// Transactions that read and then write, from many tasks at once, all succeed (SQLite
/// refuses a deferred transaction's upgrade to a writer at once, whatever its busy
/// timeout, when another connection wrote meanwhile).
async fn concurrent_writers_all_succeed(m: &dyn Metastore) {
    let t = m.create_topic(new_topic("busy", 4)).await.unwrap();
    let tasks = (0..16).map(|i: i64| async move {
        for round in 0..10 {
            let set = BTreeMap::from([("retention.ms".to_string(), format!("{}", 1000 + round))]);
            m.alter_topic_configs("busy", &set, &[]).await?;
            let commit = shale_metastore::CommittedOffset {
                topic_id: t.id,
                partition: (i % 4) as i32,
                offset: round,
                metadata: String::new(),
                commit_ms: 1,
            };
            m.commit_offsets(&format!("g{i}"), &[commit], None).await?;
        }
        Ok::<_, Error>(())
    });
    for result in futures::future::join_all(tasks).await {
        result.unwrap();
    }
    assert_eq!(m.offset_groups().await.unwrap().len(), 16);
}

async fn log_start_offsets_only_move_up(m: &dyn Metastore) {
    let t = m.create_topic(new_topic("trimmed", 2)).await.unwrap();
    assert!(m.log_start_offsets().await.unwrap().is_empty());
    assert_eq!(m.advance_log_start(t.id, 1, 40).await.unwrap(), 40);
    // Never lowered: the stored value is answered.
    assert_eq!(m.advance_log_start(t.id, 1, 10).await.unwrap(), 40);
    assert_eq!(m.advance_log_start(t.id, 1, 41).await.unwrap(), 41);
    assert_eq!(m.log_start_offsets().await.unwrap(), vec![(t.id, 1, 41)]);
    // A partition-state change leaves it alone.
    let state = m
        .list_partition_states()
        .await
        .unwrap()
        .into_iter()
        .find(|s| s.topic_id == t.id && s.partition == 1)
        .unwrap();
    let next = PartitionState {
        leader_epoch: state.leader_epoch + 1,
        ..state
    };
    m.update_partition_state(&next, Default::default())
        .await
        .unwrap();
    assert_eq!(m.log_start_offsets().await.unwrap(), vec![(t.id, 1, 41)]);
    assert!(matches!(
        m.advance_log_start(t.id, 2, 5).await,
        Err(Error::PartitionStateNotFound { partition: 2, .. })
    ));
    // Gone with the topic.
    m.delete_topic("trimmed").await.unwrap();
    assert!(m.log_start_offsets().await.unwrap().is_empty());
}

async fn partition_sizes_are_replaced_and_go_with_the_topic(m: &dyn Metastore) {
    let t = m.create_topic(new_topic("sized", 2)).await.unwrap();
    let other = m.create_topic(new_topic("other", 1)).await.unwrap();
    assert!(m.partition_sizes().await.unwrap().is_empty());
    m.report_partition_sizes(&[(t.id, 0, 100), (t.id, 1, 7), (other.id, 0, 3)])
        .await
        .unwrap();
    // A later report replaces a size; one of a partition that does not exist (a topic
    // deleted meanwhile, a partition beyond its count) is dropped, not an error.
    m.report_partition_sizes(&[(t.id, 0, 250), (t.id, 9, 1), (uuid::Uuid::new_v4(), 0, 1)])
        .await
        .unwrap();
    let mut want = vec![(t.id, 0, 250), (t.id, 1, 7), (other.id, 0, 3)];
    want.sort();
    assert_eq!(m.partition_sizes().await.unwrap(), want);
    m.delete_topic("sized").await.unwrap();
    assert_eq!(m.partition_sizes().await.unwrap(), vec![(other.id, 0, 3)]);
    // A broker's first report holds every partition it leads: more than one statement.
    let many = m.create_topic(new_topic("many", 1200)).await.unwrap();
    let sizes: Vec<(uuid::Uuid, i32, i64)> =
        (0..1200).rev().map(|p| (many.id, p, p as i64)).collect();
    m.report_partition_sizes(&sizes).await.unwrap();
    let stored = m.partition_sizes().await.unwrap();
    assert_eq!(stored.iter().filter(|s| s.0 == many.id).count(), 1200);
    assert!(stored.contains(&(many.id, 1199, 1199)) && stored.contains(&(many.id, 0, 0)));
}

async fn scram_credentials_are_kept_per_user_and_mechanism(m: &dyn Metastore) {
    let cred = |user: &str, mechanism: &str, iterations| shale_metastore::ScramCredential {
        user: user.into(),
        mechanism: mechanism.into(),
        salt: vec![1, 2, 3],
        stored_key: vec![4; 32],
        server_key: vec![5; 32],
        iterations,
    };
    assert!(m.list_scram_credentials().await.unwrap().is_empty());
    m.upsert_scram_credential(&cred("bob", "SCRAM-SHA-512", 4096))
        .await
        .unwrap();
    m.upsert_scram_credential(&cred("alice", "SCRAM-SHA-256", 4096))
        .await
        .unwrap();
    m.upsert_scram_credential(&cred("alice", "SCRAM-SHA-512", 8192))
        .await
        .unwrap();
    // A second upsert replaces the credential.
    let mut again = cred("alice", "SCRAM-SHA-256", 10000);
    again.salt = vec![9; 16];
    m.upsert_scram_credential(&again).await.unwrap();
    let all = m.list_scram_credentials().await.unwrap();
    assert_eq!(
        all,
        [
            again.clone(),
            cred("alice", "SCRAM-SHA-512", 8192),
            cred("bob", "SCRAM-SHA-512", 4096)
        ]
    );
    // An unknown mechanism is refused by the schema.
    assert!(
        m.upsert_scram_credential(&cred("carol", "SCRAM-MD5", 4096))
            .await
            .is_err()
    );
    assert!(
        m.delete_scram_credential("alice", "SCRAM-SHA-512")
            .await
            .unwrap()
    );
    assert!(
        !m.delete_scram_credential("alice", "SCRAM-SHA-512")
            .await
            .unwrap()
    );
    assert!(
        !m.delete_scram_credential("nobody", "SCRAM-SHA-256")
            .await
            .unwrap()
    );
    let users: Vec<_> = m
        .list_scram_credentials()
        .await
        .unwrap()
        .into_iter()
        .map(|c| (c.user, c.mechanism))
        .collect();
    assert_eq!(
        users,
        [
            ("alice".to_string(), "SCRAM-SHA-256".to_string()),
            ("bob".to_string(), "SCRAM-SHA-512".to_string())
        ]
    );
}

async fn acls_are_kept_once_and_deleted_exactly(m: &dyn Metastore) {
    let acl = |name: &str, principal: &str, op: &str| shale_metastore::AclBinding {
        resource_type: "TOPIC".into(),
        resource_name: name.into(),
        pattern_type: "PREFIXED".into(),
        principal: principal.into(),
        host: "*".into(),
        operation: op.into(),
        permission: "ALLOW".into(),
    };
    let (a, b, c) = (
        acl("logs.", "User:alice", "READ"),
        acl("logs.", "User:bob", "READ"),
        acl("billing", "User:alice", "WRITE"),
    );
    m.create_acls(&[a.clone(), b.clone()]).await.unwrap();
    // Creating one again keeps it once.
    m.create_acls(&[a.clone(), c.clone()]).await.unwrap();
    let mut want = vec![a.clone(), b.clone(), c.clone()];
    want.sort();
    assert_eq!(m.list_acls().await.unwrap(), want);
    // An unknown resource type is refused by the schema, and nothing of its
    // transaction stays.
    let mut bad = acl("x", "User:eve", "READ");
    bad.resource_type = "BROKER".into();
    let d = acl("y", "User:eve", "READ");
    assert!(m.create_acls(&[d.clone(), bad]).await.is_err());
    assert!(!m.list_acls().await.unwrap().contains(&d));
    assert_eq!(m.delete_acls(&[a.clone(), d]).await.unwrap(), 1);
    assert_eq!(m.list_acls().await.unwrap(), [c, b]);
}

/// A reassignment's replica lists are stored with the partition's state, by the same
/// compare-and-set, and survive a read back.
async fn reassignments_are_kept_with_the_partition_state(m: &dyn Metastore) {
    let mut t = new_topic("moving", 1);
    t.replication_factor = 2;
    t.assignments = vec![vec![1, 2]];
    let t = m.create_topic(t).await.unwrap();
    let p0 = m.list_partition_states().await.unwrap().remove(0);
    assert!(!p0.reassigning());
    let moving = PartitionState {
        replicas: vec![2, 3, 1],
        adding: vec![3],
        removing: vec![1],
        ..p0.clone()
    };
    let stored = m
        .update_partition_state(&moving, StateGuard::default())
        .await
        .unwrap();
    assert_eq!(
        (
            stored.replicas.clone(),
            stored.adding.clone(),
            stored.removing.clone()
        ),
        (vec![2, 3, 1], vec![3], vec![1])
    );
    assert!(stored.reassigning());
    let listed = m.list_partition_states().await.unwrap().remove(0);
    assert_eq!(listed, stored);
    // A writer that read the state before the reassignment cannot undo it.
    assert!(matches!(
        m.update_partition_state(&p0, StateGuard::default()).await,
        Err(Error::PartitionStateConflict { .. })
    ));
    let done = PartitionState {
        replicas: vec![2, 3],
        adding: Vec::new(),
        removing: Vec::new(),
        isr: vec![2, 3],
        ..stored
    };
    let stored = m
        .update_partition_state(&done, StateGuard::default())
        .await
        .unwrap();
    assert!(!stored.reassigning());
    assert_eq!((stored.replicas, stored.isr), (vec![2, 3], vec![2, 3]));
    assert_eq!(t.partitions, 1);
}

/// A broker's decommissioning is a flag on its row, kept across restarts of it; a
/// lease ended at shutdown counts as expired from then on.
async fn decommissioning_is_kept_per_broker(m: &dyn Metastore) {
    let e = m
        .register_broker(4, "127.0.0.1:4", &[], None)
        .await
        .unwrap();
    m.renew_broker_lease(4, e, "127.0.0.1:4", 60_000)
        .await
        .unwrap();
    let b = |list: Vec<shale_metastore::BrokerLease>| list.into_iter().find(|b| b.broker_id == 4);
    let fresh = b(m.list_brokers().await.unwrap()).unwrap();
    assert!(!fresh.decommissioned && fresh.is_alive());
    assert_eq!(fresh.dead_for_ms(), 0);
    m.set_decommissioned(4, true).await.unwrap();
    assert!(b(m.list_brokers().await.unwrap()).unwrap().decommissioned);
    let again = m
        .register_broker(4, "127.0.0.1:4", &[], None)
        .await
        .unwrap();
    assert!(b(m.list_brokers().await.unwrap()).unwrap().decommissioned);
    m.set_decommissioned(4, false).await.unwrap();
    assert!(!b(m.list_brokers().await.unwrap()).unwrap().decommissioned);
    assert!(matches!(
        m.set_decommissioned(77, true).await,
        Err(Error::BrokerNotFound(77))
    ));
    // A graceful shutdown ends the lease now: the broker is dead from then on.
    m.renew_broker_lease(4, again, "127.0.0.1:4", 0)
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    let stopped = b(m.list_brokers().await.unwrap()).unwrap();
    assert!(!stopped.is_alive());
    let dead_for = stopped.dead_for_ms();
    assert!((1..60_000).contains(&dead_for), "dead for {dead_for} ms");
}

async fn a_restored_topic_keeps_its_id_epochs_and_remote_log(m: &dyn Metastore) {
    let id = uuid::Uuid::new_v4();
    let name = format!("restored-{}", uuid_like());
    let mut first = segment(id, 0, 99);
    first.state = RemoteSegmentState::CopyFinished;
    first.epochs = vec![(3, 0), (4, 50)];
    first.aborted = vec![aborted(1, 10, 20, 10)];
    let mut cut = segment(id, 100, 149);
    cut.state = RemoteSegmentState::CopyFinished;
    cut.object_end_offset = 199;
    cut.epochs = vec![(4, 100)];
    let restored = RestoredTopic {
        id,
        topic: NewTopic {
            partitions: 2,
            ..new_topic(&name, 2)
        },
        created_at_ms: 42,
        leader_epochs: vec![5, 1],
        log_starts: vec![20, 0],
        segments: vec![first.clone(), cut.clone()],
        // Partition 1's segments expired: its log goes on after 999.
        copied_ends: vec![149, 999],
        // Objects a restore left out, for the next leader to delete.
        leftovers: vec![RemoteSegment {
            state: RemoteSegmentState::DeleteStarted,
            ..segment(id, 150, 199)
        }],
    };
    let topic = m
        .restore_topics(std::slice::from_ref(&restored))
        .await
        .unwrap()
        .remove(0);
    assert_eq!((topic.id, topic.created_at_ms), (id, 42));
    assert_eq!(m.get_topic(&name).await.unwrap().unwrap(), topic);
    let states: Vec<_> = (m.list_partition_states().await.unwrap().into_iter())
        .filter(|s| s.topic_id == id)
        .collect();
    assert_eq!(
        states.iter().map(|s| s.leader_epoch).collect::<Vec<_>>(),
        [5, 1]
    );
    assert!(states.iter().all(|s| s.leader == 0 && s.isr == [0]));
    let starts = m.log_start_offsets().await.unwrap();
    assert!(starts.contains(&(id, 0, 20)), "{starts:?}");
    let logs = m.remote_logs(id).await.unwrap();
    let log = &logs[&0];
    assert_eq!(log.copied_end, 149);
    assert!(
        log.unfinished,
        "the leftover is cleaned up before the next copy"
    );
    let leftovers = (m.list_remote_segments(id, 0, &[RemoteSegmentState::DeleteStarted]))
        .await
        .unwrap();
    assert_eq!(leftovers.len(), 1);
    assert_eq!(log.finished.len(), 2);
    assert_eq!(log.finished[0].epochs, first.epochs);
    assert_eq!(log.finished[0].aborted, first.aborted);
    assert_eq!(
        (
            log.finished[1].end_offset,
            log.finished[1].object_end_offset
        ),
        (149, 199)
    );
    assert_eq!((logs[&1].copied_end, logs[&1].finished.len()), (999, 0));
    assert!(!logs[&1].unfinished);
    // Neither the name nor the id can be restored twice.
    assert!(matches!(
        m.restore_topics(std::slice::from_ref(&restored)).await,
        Err(Error::TopicAlreadyExists(_))
    ));
    let renamed = RestoredTopic {
        topic: new_topic(&format!("other-{}", uuid_like()), 2),
        ..restored.clone()
    };
    assert!(matches!(
        m.restore_topics(&[renamed]).await,
        Err(Error::TopicAlreadyExists(_))
    ));
    // All or nothing: a topic that cannot be restored undoes the others.
    let good = RestoredTopic {
        id: uuid::Uuid::new_v4(),
        topic: new_topic(&format!("good-{}", uuid_like()), 2),
        segments: Vec::new(),
        leftovers: Vec::new(),
        ..restored.clone()
    };
    let mut bad = RestoredTopic {
        id: uuid::Uuid::new_v4(),
        topic: new_topic(&format!("bad-{}", uuid_like()), 2),
        ..restored
    };
    bad.segments = vec![segment(bad.id, 0, 9)];
    bad.leftovers = Vec::new();
    assert!(
        m.restore_topics(&[good.clone(), bad.clone()])
            .await
            .is_err()
    );
    assert!(m.get_topic(&good.topic.name).await.unwrap().is_none());
    assert!(m.get_topic(&bad.topic.name).await.unwrap().is_none());
}

/// An unmount: the topic goes with its remote segments' rows (its objects stay, and
/// nothing is left for the sweeper to delete), and it can be mounted again, id and all.
async fn a_detached_topic_leaves_no_remote_rows_and_comes_back(m: &dyn Metastore) {
    let id = uuid::Uuid::new_v4();
    let name = format!("detached-{}", uuid_like());
    let mut seg = segment(id, 0, 99);
    seg.state = RemoteSegmentState::CopyFinished;
    let restored = RestoredTopic {
        id,
        topic: new_topic(&name, 1),
        created_at_ms: 7,
        leader_epochs: vec![3],
        log_starts: vec![0],
        segments: vec![seg],
        copied_ends: vec![99],
        leftovers: Vec::new(),
    };
    m.restore_topics(std::slice::from_ref(&restored))
        .await
        .unwrap();
    assert!(m.remote_segment_topic_ids().await.unwrap().contains(&id));
    assert_eq!(m.detach_topic(&name).await.unwrap().id, id);
    assert!(m.get_topic(&name).await.unwrap().is_none());
    assert!(!m.remote_segment_topic_ids().await.unwrap().contains(&id));
    assert!(m.remote_logs(id).await.unwrap().is_empty());
    assert!(matches!(
        m.detach_topic(&name).await,
        Err(Error::TopicNotFound(_))
    ));
    let back = m.restore_topics(&[restored]).await.unwrap().remove(0);
    assert_eq!(back.id, id);
    assert_eq!(m.remote_logs(id).await.unwrap()[&0].copied_end, 99);
}

async fn transactions_move_offsets_only_on_commit(m: &dyn Metastore) {
    use shale_metastore::{TxnOffsets, TxnRecord, TxnState};
    let t = m.create_topic(new_topic("txn-out", 2)).await.unwrap();
    let mut r = TxnRecord {
        transactional_id: "app-1".into(),
        producer_id: 4000,
        producer_epoch: 0,
        state: TxnState::Empty,
        timeout_ms: 60_000,
        partitions: Vec::new(),
        groups: Vec::new(),
        start_ms: -1,
        update_ms: 1,
        marker_epoch: 0,
        version: 0,
    };
    r.version = m.write_transaction(&r, TxnOffsets::Keep).await.unwrap();
    assert_eq!(r.version, 1);
    // A second creation of the same id loses.
    let mut twin = r.clone();
    twin.version = 0;
    assert!(matches!(
        m.write_transaction(&twin, TxnOffsets::Keep).await,
        Err(Error::TxnConflict { .. })
    ));
    r.state = TxnState::Ongoing;
    r.partitions = vec![(t.id, 0), (t.id, 1)];
    r.groups = vec!["g".into()];
    r.start_ms = 5;
    r.version = m.write_transaction(&r, TxnOffsets::Keep).await.unwrap();
    assert_eq!(m.transaction("app-1").await.unwrap().as_ref(), Some(&r));
    let offset = |partition, offset| shale_metastore::CommittedOffset {
        topic_id: t.id,
        partition,
        offset,
        metadata: String::new(),
        commit_ms: 9,
    };
    m.put_txn_offsets("app-1", r.version, "g", &[offset(0, 10), offset(1, 3)])
        .await
        .unwrap();
    assert!(matches!(
        m.put_txn_offsets("app-1", r.version - 1, "g", &[offset(0, 11)])
            .await,
        Err(Error::TxnConflict { .. })
    ));
    assert_eq!(
        m.pending_txn_offsets("g").await.unwrap(),
        [(t.id, 0), (t.id, 1)]
    );
    assert!(m.committed_offsets("g").await.unwrap().is_empty());
    // A stale write changes nothing.
    let mut stale = r.clone();
    stale.version -= 1;
    stale.state = TxnState::PrepareAbort;
    assert!(
        m.write_transaction(&stale, TxnOffsets::Discard)
            .await
            .is_err()
    );
    assert_eq!(m.pending_txn_offsets("g").await.unwrap().len(), 2);
    // Commit: the offsets become the group's.
    r.state = TxnState::PrepareCommit;
    r.version = m.write_transaction(&r, TxnOffsets::Commit).await.unwrap();
    assert!(m.pending_txn_offsets("g").await.unwrap().is_empty());
    let g: Vec<_> = (m.committed_offsets("g").await.unwrap().into_iter())
        .map(|o| (o.partition, o.offset))
        .collect();
    assert_eq!(g, [(0, 10), (1, 3)]);
    // Abort: they are dropped.
    r.state = TxnState::Ongoing;
    r.version = m.write_transaction(&r, TxnOffsets::Keep).await.unwrap();
    m.put_txn_offsets("app-1", r.version, "g", &[offset(0, 99)])
        .await
        .unwrap();
    r.state = TxnState::PrepareAbort;
    r.version = m.write_transaction(&r, TxnOffsets::Discard).await.unwrap();
    assert!(m.pending_txn_offsets("g").await.unwrap().is_empty());
    assert_eq!(m.committed_offsets("g").await.unwrap()[0].offset, 10);
    assert_eq!(m.transactions().await.unwrap(), [r.clone()]);
    // The periodic pass sees a record being decided, and an ended one once idle.
    let due = |idle_before| async move {
        let rows = m.transactions_to_check(idle_before).await.unwrap();
        rows.into_iter()
            .map(|r| r.transactional_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(due(0).await, ["app-1"]);
    r.state = TxnState::CompleteAbort;
    r.version = m.write_transaction(&r, TxnOffsets::Keep).await.unwrap();
    assert!(due(r.update_ms).await.is_empty());
    assert_eq!(due(r.update_ms + 1).await, ["app-1"]);
    assert!(!m.delete_transaction("app-1", r.version - 1).await.unwrap());
    assert!(m.delete_transaction("app-1", r.version).await.unwrap());
    assert!(m.transaction("app-1").await.unwrap().is_none());
}

macro_rules! metastore_suite {
    ($backend:ident) => {
        mod $backend {
            macro_rules! case {
                ($name:ident) => {
                    #[tokio::test]
                    async fn $name() {
                        let f = super::$backend().await;
                        super::$name(f.store.as_ref()).await;
                        f.finish().await;
                    }
                };
            }

            case!(create_get_list);
            case!(duplicate_name_is_refused_and_keeps_original);
            case!(delete_removes_topic_and_configs);
            case!(alter_configs_sets_and_deletes);
            case!(partitions_only_grow);
            case!(remote_segments_follow_the_state_machine);
            case!(remote_compaction_swaps_rows_in_one_transaction);
            case!(a_diverged_remote_log_is_cut_under_the_current_epoch);
            case!(cluster_leases_and_partition_state);
            case!(producer_ids_and_group_offsets);
            case!(concurrent_writers_all_succeed);
            case!(log_start_offsets_only_move_up);
            case!(partition_sizes_are_replaced_and_go_with_the_topic);
            case!(scram_credentials_are_kept_per_user_and_mechanism);
            case!(acls_are_kept_once_and_deleted_exactly);
            case!(reassignments_are_kept_with_the_partition_state);
            case!(decommissioning_is_kept_per_broker);
            case!(a_restored_topic_keeps_its_id_epochs_and_remote_log);
            case!(a_detached_topic_leaves_no_remote_rows_and_comes_back);
            case!(transactions_move_offsets_only_on_commit);
        }
    };
}

metastore_suite!(sqlite);
metastore_suite!(postgres);

#[tokio::test]
async fn sqlite_survives_reopen() {
    let f = sqlite().await;
    let dir = f._dir.as_ref().unwrap().0.clone();
    survives_reopen(
        &format!("sqlite://{}/meta.db", dir.display()),
        f.store.as_ref(),
    )
    .await;
    f.finish().await;
}

#[tokio::test]
async fn concurrent_creates_of_one_name_yield_exactly_one_topic_postgres() {
    let f = postgres().await;
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let m = f.store.clone();
            tokio::spawn(async move { m.create_topic(new_topic("race", 1)).await })
        })
        .collect();
    let mut ok = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => ok += 1,
            Err(Error::TopicAlreadyExists(_)) => {}
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    assert_eq!(ok, 1);
    f.finish().await;
}

#[tokio::test]
async fn concurrent_finishes_of_one_segment_start_yield_one_readable_copy_postgres() {
    let f = postgres().await;
    let topic = f.store.create_topic(new_topic("race", 1)).await.unwrap().id;
    let copies: Vec<_> = (0..6).map(|_| segment(topic, 0, 99)).collect();
    for c in &copies {
        f.store.add_remote_segment(c).await.unwrap();
    }
    let tasks: Vec<_> = copies
        .iter()
        .map(|c| {
            let (m, id) = (f.store.clone(), c.segment_id);
            tokio::spawn(async move {
                m.transition_remote_segment(
                    id,
                    RemoteSegmentState::CopyStarted,
                    RemoteSegmentState::CopyFinished,
                )
                .await
            })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(Error::RemoteSegmentOverlap { .. }) => {}
            Err(e) => panic!("unexpected error {e:?}"),
        }
    }
    assert_eq!(won, 1);
    let finished = f
        .store
        .list_remote_segments(topic, 0, &[RemoteSegmentState::CopyFinished])
        .await
        .unwrap();
    assert_eq!(finished.len(), 1);
    f.finish().await;
}

#[tokio::test]
async fn unsupported_url_is_a_clear_error() {
    let err = shale_metastore::open("mysql://x").await.err().unwrap();
    assert!(matches!(err, Error::UnsupportedUrl(_)));
}

#[tokio::test]
async fn changes_are_announced_to_listeners_postgres() {
    let f = postgres().await;
    let notify = std::sync::Arc::new(tokio::sync::Notify::new());
    let listener = {
        let (m, n) = (f.store.clone(), notify.clone());
        tokio::spawn(async move { m.listen_for_changes(n).await })
    };
    // The listener announces itself once when it starts listening.
    tokio::time::timeout(std::time::Duration::from_secs(10), notify.notified())
        .await
        .expect("the listener never started");
    f.store
        .create_topic(new_topic("announced", 1))
        .await
        .unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(10), notify.notified())
        .await
        .expect("creating a topic was not announced");
    listener.abort();
    f.finish().await;
}

#[tokio::test]
async fn sqlite_cannot_replicate() {
    let f = sqlite().await;
    assert!(!f.store.supports_replication());
    f.finish().await;
}
