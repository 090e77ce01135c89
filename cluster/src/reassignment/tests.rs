use super::*;

fn state(replicas: &[i32], leader: i32, isr: &[i32]) -> PartitionState {
    PartitionState {
        isr: isr.to_vec(),
        leader,
        leader_epoch: 5,
        version: 11,
        ..PartitionState::initial(uuid::Uuid::nil(), 0, replicas.to_vec())
    }
}

fn all_live(_: i32) -> bool {
    true
}

#[test]
fn a_move_adds_first_and_removes_once_the_new_replica_is_in_sync() {
    let s = state(&[1, 2, 3], 1, &[1, 2, 3]);
    let moving = start(&s, &[2, 3, 4], 1).unwrap().unwrap();
    assert_eq!(moving.replicas, vec![2, 3, 4, 1]);
    assert_eq!(
        (moving.adding.clone(), moving.removing.clone()),
        (vec![4], vec![1])
    );
    assert_eq!(
        (moving.leader, moving.leader_epoch),
        (1, 5),
        "nothing moves yet"
    );
    assert_eq!(moving.isr, vec![1, 2, 3]);
    assert_eq!(original_replicas(&moving), vec![2, 3, 1]);
    assert_eq!(target_replicas(&moving), vec![2, 3, 4]);
    // Broker 4 has not caught up: the controller waits.
    assert_eq!(finish(&moving, all_live, 1), None);
    let caught_up = PartitionState {
        isr: vec![1, 2, 3, 4],
        ..moving
    };
    let done = finish(&caught_up, all_live, 1).unwrap();
    assert_eq!(done.replicas, vec![2, 3, 4]);
    assert_eq!(done.isr, vec![2, 3, 4]);
    assert!(!done.reassigning());
    // The leader left: the first target replica in sync leads, at a new epoch.
    assert_eq!((done.leader, done.leader_epoch), (2, 6));
    assert_eq!(finish(&done, all_live, 1), None, "nothing left to do");
}

#[test]
fn a_leader_that_stays_keeps_its_epoch_and_a_new_leader_must_be_live() {
    let s = state(&[1, 2], 2, &[1, 2]);
    let moving = PartitionState {
        isr: vec![1, 2, 3],
        ..start(&s, &[2, 3], 1).unwrap().unwrap()
    };
    let done = finish(&moving, all_live, 1).unwrap();
    assert_eq!(
        (done.leader, done.leader_epoch, done.isr),
        (2, 5, vec![2, 3])
    );

    let s = state(&[1, 2], 1, &[1, 2]);
    let moving = PartitionState {
        isr: vec![1, 2, 3],
        ..start(&s, &[3, 2], 1).unwrap().unwrap()
    };
    // 3 is the first target replica, but it is down: 2 leads.
    let done = finish(&moving, |b| b != 3, 1).unwrap();
    assert_eq!((done.leader, done.leader_epoch), (2, 6));
    // No live target replica in sync: wait.
    assert_eq!(finish(&moving, |b| b == 1, 1), None);
}

#[test]
fn a_reorder_or_a_shrink_needs_no_catching_up() {
    let s = state(&[1, 2, 3], 1, &[1, 2, 3]);
    let reordered = start(&s, &[3, 1, 2], 1).unwrap().unwrap();
    assert!(!reordered.reassigning());
    assert_eq!(reordered.replicas, vec![3, 1, 2]);
    assert_eq!(start(&s, &[1, 2, 3], 1).unwrap(), None, "the same replicas");

    let shrinking = start(&s, &[2, 3], 1).unwrap().unwrap();
    let done = finish(&shrinking, all_live, 1).unwrap();
    assert_eq!(
        (done.replicas.clone(), done.isr.clone()),
        (vec![2, 3], vec![2, 3])
    );
    assert_eq!(done.leader, 2);
}

#[test]
fn a_new_target_replaces_the_one_in_flight() {
    let s = state(&[1, 2, 3], 1, &[1, 2, 3]);
    let first = PartitionState {
        isr: vec![1, 2, 3, 4],
        ..start(&s, &[4, 2, 3], 1).unwrap().unwrap()
    };
    let second = start(&first, &[5, 2, 3], 1).unwrap().unwrap();
    assert_eq!(second.replicas, vec![5, 2, 3, 1]);
    assert_eq!(
        (second.adding.clone(), second.removing.clone()),
        (vec![5], vec![1])
    );
    assert_eq!(second.isr, vec![1, 2, 3], "4 is no longer a replica");
}

#[test]
fn cancelling_goes_back_to_the_original_replicas() {
    let s = state(&[1, 2, 3], 1, &[1, 2, 3]);
    assert_eq!(cancel(&s, 1), Err(ReassignError::NoneInFlight));
    let moving = PartitionState {
        isr: vec![1, 2, 3, 4],
        ..start(&s, &[4, 5, 6], 1).unwrap().unwrap()
    };
    let back = cancel(&moving, 1).unwrap();
    assert_eq!(back.replicas, vec![1, 2, 3]);
    assert_eq!(back.isr, vec![1, 2, 3]);
    assert!(!back.reassigning());
    assert_eq!((back.leader, back.leader_epoch), (1, 5));

    // Broker 4 was elected while the move ran: cancelling takes the lead from it.
    let led_by_new = PartitionState {
        leader: 4,
        isr: vec![2, 4],
        ..moving.clone()
    };
    let back = cancel(&led_by_new, 1).unwrap();
    assert_eq!((back.leader, back.leader_epoch, back.isr), (-1, 6, vec![2]));
    // Only new replicas in sync: the original ones would lose records.
    let only_new = PartitionState {
        leader: 4,
        isr: vec![4],
        ..moving.clone()
    };
    assert!(matches!(
        cancel(&only_new, 1),
        Err(ReassignError::WouldLoseCopies {
            left: 0,
            need: 1,
            ..
        })
    ));
    // Offline, with the new replica the only member: it may hold what nobody else does.
    let offline = PartitionState {
        leader: -1,
        isr: vec![4],
        ..moving.clone()
    };
    assert!(matches!(
        cancel(&offline, 1),
        Err(ReassignError::WouldLoseCopies { .. })
    ));
    // Below min.insync.replicas once the new replica leaves: refused too.
    let two = PartitionState {
        isr: vec![1, 4],
        ..moving
    };
    assert!(matches!(
        cancel(&two, 2),
        Err(ReassignError::WouldLoseCopies {
            left: 1,
            need: 2,
            ..
        })
    ));
    assert_eq!(cancel(&two, 1).unwrap().isr, vec![1]);
}

#[test]
fn a_move_finishes_only_with_enough_target_replicas_in_sync_and_a_leader() {
    // Down to two replicas with min.insync.replicas 2: broker 2 is out of the ISR, so
    // finishing would leave the records on broker 1 alone.
    let s = state(&[1, 2, 3], 1, &[1, 3]);
    let shrinking = start(&s, &[1, 2], 2).unwrap().unwrap();
    assert_eq!(finish(&shrinking, all_live, 2), None);
    let in_sync = PartitionState {
        isr: vec![1, 2, 3],
        ..shrinking.clone()
    };
    assert_eq!(finish(&in_sync, all_live, 2).unwrap().isr, vec![1, 2]);
    // No leader: nothing finishes (the leaving replicas may be the ones to elect).
    let offline = PartitionState {
        leader: -1,
        ..in_sync
    };
    assert_eq!(finish(&offline, all_live, 1), None);
}

#[test]
fn bad_targets_are_refused() {
    let s = state(&[1, 2], 1, &[1, 2]);
    assert_eq!(start(&s, &[], 1), Err(ReassignError::Empty));
    assert_eq!(start(&s, &[2, 3, 2], 1), Err(ReassignError::Duplicate(2)));
}
