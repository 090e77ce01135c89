use super::*;
use crate::group::{CommitAuthority, GroupsSection, JoinRequest};

const TOPIC: Uuid = Uuid::from_u128(7);

fn coordinator() -> Coordinator {
    Coordinator::new(GroupsSection {
        consumer_session_timeout_ms: 100,
        ..GroupsSection::default()
    })
}

/// A client of the consumer protocol that applies every assignment at once.
struct Client {
    id: String,
    epoch: i32,
    owned: Partitions,
}

fn topics() -> BTreeMap<String, (Uuid, i32)> {
    BTreeMap::from([("t".to_string(), (TOPIC, 12))])
}

fn join(c: &Coordinator, client_id: &str) -> Client {
    let r = c.consumer_heartbeat(request("", 0, Some(vec!["t".into()]), None), &topics());
    let r = r.unwrap();
    assert!(
        !r.member_id.is_empty(),
        "{client_id}: the coordinator names the member"
    );
    let mut client = Client {
        id: r.member_id.clone(),
        epoch: r.member_epoch,
        owned: Partitions::new(),
    };
    apply(&mut client, r);
    client
}

fn request(
    id: &str,
    epoch: i32,
    subscribed: Option<Vec<String>>,
    owned: Option<Partitions>,
) -> ConsumerHeartbeat {
    ConsumerHeartbeat {
        group: "g".into(),
        member_id: id.into(),
        member_epoch: epoch,
        instance_id: None,
        rack_id: None,
        rebalance_timeout_ms: 60_000,
        subscribed_topics: subscribed,
        subscribed_regex: None,
        server_assignor: None,
        owned,
        client_id: "test".into(),
        client_host: "127.0.0.1".into(),
    }
}

fn apply(client: &mut Client, r: ConsumerHeartbeatResult) {
    client.epoch = r.member_epoch;
    if let Some(a) = r.assignment {
        client.owned = a;
    }
}

fn heartbeat(c: &Coordinator, client: &mut Client) {
    let r = c
        .consumer_heartbeat(
            request(&client.id, client.epoch, None, Some(client.owned.clone())),
            &topics(),
        )
        .unwrap();
    apply(client, r);
}

fn count(p: &Partitions) -> usize {
    p.values().map(BTreeSet::len).sum()
}

/// Heartbeats every client in turn until nothing changes, checking after each
/// heartbeat that no partition is owned by two clients.
fn settle(c: &Coordinator, clients: &mut [Client]) {
    for _ in 0..10 {
        for i in 0..clients.len() {
            heartbeat(c, &mut clients[i]);
            let mut seen = BTreeSet::new();
            for cl in clients.iter() {
                for p in cl.owned.get(&TOPIC).into_iter().flatten() {
                    assert!(seen.insert(*p), "partition {p} owned twice");
                }
            }
        }
    }
    assert_eq!(
        c.describe_consumer_group("g").unwrap().state,
        "Stable",
        "the group settles"
    );
}

#[test]
fn a_member_joining_or_leaving_moves_only_what_must_move() {
    let c = coordinator();
    let mut clients: Vec<Client> = (0..3).map(|i| join(&c, &format!("c{i}"))).collect();
    settle(&c, &mut clients);
    assert!(clients.iter().all(|cl| count(&cl.owned) == 4));
    let before: Vec<Partitions> = clients.iter().map(|cl| cl.owned.clone()).collect();

    clients.push(join(&c, "c3"));
    settle(&c, &mut clients);
    for (cl, had) in clients.iter().zip(&before) {
        assert_eq!(count(&cl.owned), 3);
        assert!(
            cl.owned[&TOPIC].is_subset(&had[&TOPIC]),
            "kept its own partitions"
        );
    }
    assert_eq!(count(&clients[3].owned), 3);

    // One leaves: its three partitions go to the others, nothing else moves.
    let gone = clients.remove(0);
    let left = c.consumer_heartbeat(request(&gone.id, -1, None, None), &topics());
    assert_eq!(left.unwrap().member_epoch, -1);
    let before: Vec<Partitions> = clients.iter().map(|cl| cl.owned.clone()).collect();
    settle(&c, &mut clients);
    for (cl, had) in clients.iter().zip(&before) {
        assert_eq!(count(&cl.owned), 4);
        assert!(had[&TOPIC].is_subset(&cl.owned[&TOPIC]));
    }
}

#[test]
fn stale_epochs_unknown_members_and_the_other_protocol_are_refused() {
    let c = coordinator();
    let mut a = join(&c, "a");
    settle(&c, std::slice::from_mut(&mut a));
    let wrong = c.consumer_heartbeat(request(&a.id, a.epoch + 5, None, None), &topics());
    assert!(
        matches!(wrong, Err(GroupError::FencedMemberEpoch { .. })),
        "{wrong:?}"
    );
    let unknown = c.consumer_heartbeat(request("nobody", 3, None, None), &topics());
    assert!(matches!(unknown, Err(GroupError::UnknownMember { .. })));
    // Commits: at the member's epoch only; no admin commit while it has members.
    assert_eq!(
        c.authorize_commit("g", a.epoch, &a.id),
        Ok(CommitAuthority::Member)
    );
    assert!(matches!(
        c.authorize_commit("g", a.epoch - 1, &a.id),
        Err(GroupError::StaleMemberEpoch { .. })
    ));
    assert!(matches!(
        c.authorize_commit("g", -1, ""),
        Err(GroupError::NonEmptyGroup(_))
    ));
    // A classic member cannot join it, nor a consumer member a classic group.
    let classic = JoinRequest {
        group: "g".into(),
        member_id: String::new(),
        client_id: "old".into(),
        client_host: "h".into(),
        session_timeout_ms: 10_000,
        rebalance_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), bytes::Bytes::new())],
        require_known_member_id: false,
        group_instance_id: None,
    };
    assert!(matches!(
        c.join(classic),
        Err(GroupError::InconsistentProtocol(_))
    ));
    let unsupported = ConsumerHeartbeat {
        server_assignor: Some("sticky".into()),
        ..request("", 0, Some(vec!["t".into()]), None)
    };
    assert!(matches!(
        c.consumer_heartbeat(unsupported, &topics()),
        Err(GroupError::UnsupportedAssignor(_))
    ));
    // A member whose session lapses is removed: the group is empty again.
    std::thread::sleep(Duration::from_millis(150));
    c.tick(|_| true);
    assert!(c.describe_consumer_group("g").is_none());
    assert_eq!(c.authorize_commit("g", -1, ""), Ok(CommitAuthority::Admin));
}

#[test]
fn a_lost_answer_is_sent_again_at_the_previous_epoch() {
    let c = coordinator();
    let mut a = join(&c, "a");
    settle(&c, std::slice::from_mut(&mut a));
    let mut b = join(&c, "b");
    // a's answer to its next heartbeat (revoking half) is lost: it asks again with
    // what it owned, at its epoch, and gets the same revocation.
    let first = c
        .consumer_heartbeat(
            request(&a.id, a.epoch, None, Some(a.owned.clone())),
            &topics(),
        )
        .unwrap();
    let again = c
        .consumer_heartbeat(
            request(&a.id, a.epoch, None, Some(a.owned.clone())),
            &topics(),
        )
        .unwrap();
    assert_eq!(first.assignment, again.assignment);
    assert_eq!(count(&first.assignment.clone().unwrap()), 6);
    apply(&mut a, again);
    let mut both = [a, b];
    settle(&c, &mut both);
    b = both.into_iter().nth(1).unwrap();
    assert_eq!(count(&b.owned), 6);
}

#[test]
fn a_restarted_static_member_replaces_its_old_self_and_most_members_pick_the_assignor() {
    let c = coordinator();
    let join_as = |instance: &str, assignor: Option<&str>| {
        let mut r = request("", 0, Some(vec!["t".into()]), None);
        r.instance_id = Some(instance.into());
        r.server_assignor = assignor.map(str::to_string);
        c.consumer_heartbeat(r, &topics()).unwrap()
    };
    let first = join_as("i1", Some("range"));
    join_as("i2", Some("range"));
    join_as("i3", None);
    assert_eq!(c.describe_consumer_group("g").unwrap().assignor, "range");
    // i1 starts again under a new member id: the old one is gone at once.
    let again = join_as("i1", Some("uniform"));
    let d = c.describe_consumer_group("g").unwrap();
    assert_eq!(d.members.len(), 3);
    assert!(d.members.iter().all(|m| m.member_id != first.member_id));
    assert!(d.members.iter().any(|m| m.member_id == again.member_id));
    // One member asks for range, one for uniform: the tie goes by name.
    assert_eq!(d.assignor, "range");
}

#[test]
fn a_pattern_subscribes_every_topic_it_matches_whole_and_new_ones_later() {
    let c = coordinator();
    let mut all = BTreeMap::from([
        ("logs-a".to_string(), (Uuid::from_u128(1), 2)),
        ("logs-b".to_string(), (Uuid::from_u128(2), 2)),
        ("xlogs-c".to_string(), (Uuid::from_u128(3), 2)),
    ]);
    let join = ConsumerHeartbeat {
        subscribed_regex: Some("logs-.*".into()),
        ..request("", 0, None, None)
    };
    let r = c.consumer_heartbeat(join, &all).unwrap();
    let got: Vec<Uuid> = r.assignment.clone().unwrap().into_keys().collect();
    assert_eq!(
        got,
        [Uuid::from_u128(1), Uuid::from_u128(2)],
        "whole names only"
    );
    // A topic created later that matches joins the subscription.
    all.insert("logs-d".into(), (Uuid::from_u128(4), 1));
    let r = c
        .consumer_heartbeat(request(&r.member_id, r.member_epoch, None, None), &all)
        .unwrap();
    assert_eq!(r.assignment.unwrap().len(), 3);
    let bad = ConsumerHeartbeat {
        subscribed_regex: Some("(".into()),
        ..request("", 0, None, None)
    };
    assert!(matches!(
        c.consumer_heartbeat(bad, &all),
        Err(GroupError::InvalidRegex(_))
    ));
}
