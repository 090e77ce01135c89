use super::*;
use shale_records::ErrorCode;

fn coordinator(delay_ms: u64) -> Coordinator {
    Coordinator::new(GroupsSection {
        min_session_timeout_ms: 10,
        max_session_timeout_ms: 60_000,
        initial_rebalance_delay_ms: delay_ms,
        ..GroupsSection::default()
    })
}

fn join(
    c: &Coordinator,
    member: &str,
    session_ms: i64,
) -> oneshot::Receiver<Result<JoinResult, GroupError>> {
    c.join(JoinRequest {
        group: "g".into(),
        member_id: member.into(),
        client_id: "c".into(),
        client_host: "h".into(),
        session_timeout_ms: session_ms,
        rebalance_timeout_ms: session_ms,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        require_known_member_id: false,
        group_instance_id: None,
    })
    .unwrap()
}

#[tokio::test]
async fn join_sync_heartbeat_and_generations() {
    let c = coordinator(0);
    let a = join(&c, "", 1000).await.unwrap().unwrap();
    assert_eq!((a.generation, a.leader.as_str()), (1, a.member_id.as_str()));
    assert_eq!(a.members.len(), 1);
    let got = c
        .sync(
            "g",
            1,
            &a.member_id,
            vec![(a.member_id.clone(), Bytes::from_static(b"p0"))],
        )
        .unwrap()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got[..], b"p0");
    c.heartbeat("g", 1, &a.member_id).unwrap();
    // A second member starts a rebalance: the first learns it from its heartbeat.
    let b_join = join(&c, "", 1000);
    assert!(matches!(
        c.heartbeat("g", 1, &a.member_id),
        Err(GroupError::RebalanceInProgress(_))
    ));
    assert_eq!(
        c.authorize_commit("g", 1, &a.member_id),
        Ok(CommitAuthority::Member),
        "commits of the current generation are taken while preparing a rebalance"
    );
    let a2 = join(&c, &a.member_id, 1000).await.unwrap().unwrap();
    let b = b_join.await.unwrap().unwrap();
    assert_eq!((a2.generation, b.generation), (2, 2));
    assert_eq!(a2.leader, a.member_id, "the leader stays the leader");
    assert!(b.members.is_empty(), "only the leader gets the members");
    assert!(matches!(
        c.authorize_commit("g", 1, &a.member_id),
        Err(GroupError::IllegalGeneration {
            sent: 1,
            current: 2,
            ..
        })
    ));
    assert!(matches!(
        c.heartbeat("g", 2, "nobody"),
        Err(GroupError::UnknownMember { .. })
    ));
    assert!(matches!(
        c.authorize_commit("g", -1, ""),
        Err(GroupError::NonEmptyGroup(_))
    ));
    // The follower's sync waits for the leader's.
    let b_sync = c.sync("g", 2, &b.member_id, vec![]).unwrap();
    c.sync(
        "g",
        2,
        &a.member_id,
        vec![(b.member_id.clone(), Bytes::from_static(b"p1"))],
    )
    .unwrap();
    assert_eq!(&b_sync.await.unwrap().unwrap()[..], b"p1");
    // Leaving rebalances; the last one out empties the group.
    c.leave("g", &b.member_id).unwrap();
    let a3 = join(&c, &a.member_id, 1000).await.unwrap().unwrap();
    assert_eq!(a3.generation, 3);
    c.leave("g", &a.member_id).unwrap();
    assert_eq!(c.describe("g").unwrap().state, GroupState::Empty);
    assert_eq!(c.authorize_commit("g", -1, ""), Ok(CommitAuthority::Admin));
}

#[tokio::test]
async fn expired_sessions_leave_and_stragglers_are_dropped() {
    let c = coordinator(0);
    let a = join(&c, "", 50).await.unwrap().unwrap();
    c.sync("g", 1, &a.member_id, vec![]).unwrap();
    let b_join = join(&c, "", 5000);
    // `a` never joins again: after its rebalance timeout it is dropped.
    std::thread::sleep(Duration::from_millis(80));
    c.tick(|_| true);
    let b = b_join.await.unwrap().unwrap();
    assert_eq!(b.members.len(), 1);
    assert_eq!(b.leader, b.member_id);
    assert!(c.heartbeat("g", b.generation, &a.member_id).is_err());
    // A group this broker no longer coordinates is dropped.
    c.tick(|_| false);
    assert!(c.describe("g").is_none());
}

#[test]
fn bad_joins_are_refused() {
    let c = coordinator(0);
    let mut r = JoinRequest {
        group: String::new(),
        member_id: String::new(),
        client_id: "c".into(),
        client_host: "h".into(),
        session_timeout_ms: 1000,
        rebalance_timeout_ms: 1000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::new())],
        require_known_member_id: false,
        group_instance_id: None,
    };
    assert!(matches!(
        c.join_now(&mut r),
        Err(GroupError::InvalidGroupId(_))
    ));
    r.group = "g".into();
    r.session_timeout_ms = 1;
    assert!(matches!(
        c.join_now(&mut r),
        Err(GroupError::InvalidSessionTimeout { .. })
    ));
    r.session_timeout_ms = 1000;
    r.member_id = "ghost".into();
    assert!(matches!(
        c.join_now(&mut r),
        Err(GroupError::UnknownMember { .. })
    ));
}

impl Coordinator {
    fn join_now(&self, r: &mut JoinRequest) -> Result<(), GroupError> {
        self.join(JoinRequest {
            group: r.group.clone(),
            member_id: r.member_id.clone(),
            client_id: r.client_id.clone(),
            client_host: r.client_host.clone(),
            session_timeout_ms: r.session_timeout_ms,
            rebalance_timeout_ms: r.rebalance_timeout_ms,
            protocol_type: r.protocol_type.clone(),
            protocols: r.protocols.clone(),
            require_known_member_id: false,
            group_instance_id: None,
        })
        .map(drop)
    }
}

#[test]
fn coordinators_spread_and_move_little() {
    let live = [0, 1, 2];
    let mut count = [0; 3];
    let mut moved = 0;
    for i in 0..3000 {
        let g = format!("group-{i}");
        let c = coordinator_of(&g, &live).unwrap();
        count[c as usize] += 1;
        let without = coordinator_of(&g, &[0, 1]).unwrap();
        if c != 2 && without != c {
            moved += 1;
        }
    }
    assert!(count.iter().all(|&n| n > 800), "{count:?}");
    assert_eq!(moved, 0, "groups of surviving brokers stay put");
    assert_eq!(coordinator_of("g", &[]), None);
}

/// Kafka's JoinGroup v4+: a member without an id is handed one and joins again with
/// it; an id nobody handed out is unknown; a handed-out id not used in time expires.
#[tokio::test]
async fn a_new_member_joins_again_with_the_id_it_was_given() {
    let c = coordinator(0);
    let request = |member: &str| JoinRequest {
        group: "g".into(),
        member_id: member.into(),
        client_id: "rdkafka".into(),
        client_host: "h".into(),
        session_timeout_ms: 30,
        rebalance_timeout_ms: 30,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(b"m"))],
        require_known_member_id: true,
        group_instance_id: None,
    };
    let id = match c.join(request("")) {
        Err(GroupError::MemberIdRequired(id)) => id,
        other => panic!("expected MEMBER_ID_REQUIRED, got {:?}", other.map(|_| ())),
    };
    assert!(id.starts_with("rdkafka-"), "{id}");
    assert_eq!(
        GroupError::MemberIdRequired(id.clone()).code(),
        ErrorCode::MemberIdRequired
    );
    let joined = c.join(request(&id)).unwrap().await.unwrap().unwrap();
    assert_eq!(
        (joined.member_id.as_str(), joined.generation),
        (id.as_str(), 1)
    );
    assert!(matches!(
        c.join(request("never-handed-out")),
        Err(GroupError::UnknownMember { .. })
    ));
    // An id handed out and not used within the session timeout is forgotten.
    let late = match c.join(request("")) {
        Err(GroupError::MemberIdRequired(id)) => id,
        other => panic!("expected MEMBER_ID_REQUIRED, got {:?}", other.map(|_| ())),
    };
    tokio::time::sleep(Duration::from_millis(60)).await;
    c.tick(|_| true);
    assert!(matches!(
        c.join(request(&late)),
        Err(GroupError::UnknownMember { .. })
    ));
}

/// A follower that sends JoinGroup again with what it joined with (clients do, after
/// a timeout of their own) gets the current generation back: no new rebalance. The
/// leader joining again, or a member with new metadata, does start one.
#[tokio::test]
async fn joining_again_unchanged_keeps_the_generation() {
    let c = coordinator(0);
    let first = join(&c, "", 1000).await.unwrap().unwrap();
    let b = join(&c, "", 1000);
    let a = join(&c, &first.member_id, 1000);
    let (a, b) = (a.await.unwrap().unwrap(), b.await.unwrap().unwrap());
    assert_eq!((a.generation, b.generation), (2, 2));
    let (leader, follower) = if a.leader == a.member_id {
        (a, b)
    } else {
        (b, a)
    };
    let assignments = vec![
        (leader.member_id.clone(), Bytes::from_static(b"L")),
        (follower.member_id.clone(), Bytes::from_static(b"F")),
    ];
    let f_sync = c.sync("g", 2, &follower.member_id, Vec::new()).unwrap();
    // While the rebalance completes, the follower joining again is answered at once.
    let early = join(&c, &follower.member_id, 1000).await.unwrap().unwrap();
    assert_eq!(early.generation, 2);
    c.sync("g", 2, &leader.member_id, assignments)
        .unwrap()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&f_sync.await.unwrap().unwrap()[..], b"F");
    // The follower again, unchanged: same generation at once, group still stable.
    let again = join(&c, &follower.member_id, 1000).await.unwrap().unwrap();
    assert_eq!(
        (again.generation, again.leader.as_str()),
        (2, leader.member_id.as_str())
    );
    c.heartbeat("g", 2, &leader.member_id).unwrap();
    let synced = c.sync("g", 2, &follower.member_id, Vec::new()).unwrap();
    assert_eq!(&synced.await.unwrap().unwrap()[..], b"F");
    // The leader joining again starts a rebalance.
    let _rejoin = join(&c, &leader.member_id, 1000);
    assert!(matches!(
        c.heartbeat("g", 2, &follower.member_id),
        Err(GroupError::RebalanceInProgress(_))
    ));
}

fn join_static(
    c: &Coordinator,
    instance: &str,
    member: &str,
    metadata: &'static [u8],
) -> Result<oneshot::Receiver<Result<JoinResult, GroupError>>, GroupError> {
    c.join(JoinRequest {
        group: "g".into(),
        member_id: member.into(),
        client_id: "rdkafka".into(),
        client_host: "h".into(),
        session_timeout_ms: 1000,
        rebalance_timeout_ms: 1000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), Bytes::from_static(metadata))],
        // Static members are exempt from MEMBER_ID_REQUIRED.
        require_known_member_id: true,
        group_instance_id: Some(instance.into()),
    })
}

/// Static membership (KIP-345): a restarted member with the same group.instance.id
/// takes its old place, assignment and leadership without a rebalance; the replaced
/// member id is fenced (FENCED_INSTANCE_ID) wherever it shows up; a changed
/// subscription still rebalances; a static member may leave by instance id alone.
#[tokio::test]
async fn a_restarted_static_member_takes_its_place_without_a_rebalance() {
    let c = coordinator(0);
    let first = join_static(&c, "a", "", b"m")
        .unwrap()
        .await
        .unwrap()
        .unwrap();
    let b_join = join_static(&c, "b", "", b"m").unwrap();
    let a_join = join_static(&c, "a", &first.member_id, b"m").unwrap();
    let (a, b) = (
        a_join.await.unwrap().unwrap(),
        b_join.await.unwrap().unwrap(),
    );
    let generation = a.generation;
    assert_eq!((generation, b.generation), (2, 2));
    let leader = if a.leader == a.member_id { &a } else { &b };
    let assignments = vec![
        (a.member_id.clone(), Bytes::from_static(b"pa")),
        (b.member_id.clone(), Bytes::from_static(b"pb")),
    ];
    let other = if leader.member_id == a.member_id {
        &b
    } else {
        &a
    };
    let other_sync = c
        .sync("g", generation, &other.member_id, Vec::new())
        .unwrap();
    c.sync("g", generation, &leader.member_id, assignments)
        .unwrap()
        .await
        .unwrap()
        .unwrap();
    other_sync.await.unwrap().unwrap();

    // The leader restarts (no LeaveGroup, as static members do) and joins again.
    let instance = if leader.member_id == a.member_id {
        "a"
    } else {
        "b"
    };
    let again = join_static(&c, instance, "", b"m")
        .unwrap()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.generation, generation, "no rebalance");
    assert_ne!(again.member_id, leader.member_id);
    assert_eq!(again.leader, again.member_id, "it leads in its old place");
    let d = c.describe("g").unwrap();
    assert_eq!(d.state, GroupState::Stable);
    assert_eq!(d.members.len(), 2);
    let mine = c
        .sync("g", generation, &again.member_id, Vec::new())
        .unwrap()
        .await
        .unwrap()
        .unwrap();
    let expected: &[u8] = if instance == "a" { b"pa" } else { b"pb" };
    assert_eq!(&mine[..], expected, "its old assignment");
    c.heartbeat("g", generation, &other.member_id).unwrap();

    // The replaced id is fenced: a heartbeat, a join or a commit naming the instance.
    let old = leader.member_id.as_str();
    let fenced = |r: Result<(), GroupError>| {
        assert_eq!(r.map_err(|e| e.code()), Err(ErrorCode::FencedInstanceId));
    };
    fenced(c.check_instance("g", old, Some(instance)));
    fenced(join_static(&c, instance, old, b"m").map(drop));
    c.check_instance("g", &again.member_id, Some(instance))
        .unwrap();
    c.check_instance("g", old, None).unwrap();

    // A changed subscription rebalances, static or not.
    let other_instance = if instance == "a" { "b" } else { "a" };
    let changed = join_static(&c, other_instance, "", b"m2").unwrap();
    assert_eq!(
        c.describe("g").unwrap().state,
        GroupState::PreparingRebalance
    );
    let stay = join_static(&c, instance, &again.member_id, b"m").unwrap();
    let changed = changed.await.unwrap().unwrap();
    assert_eq!(changed.generation, generation + 1);
    stay.await.unwrap().unwrap();

    // Leaving by instance id alone.
    let holder = c.member_of_instance("g", other_instance).unwrap();
    assert_eq!(holder, changed.member_id);
    c.leave("g", &holder).unwrap();
    assert_eq!(c.member_of_instance("g", other_instance), None);
    let d = c.describe("g").unwrap();
    assert_eq!(d.members.len(), 1);
    assert_eq!(d.members[0].group_instance_id.as_deref(), Some(instance));
}
