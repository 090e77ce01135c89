use std::sync::Arc;

use object_store::memory::InMemory;
use object_store::path::Path;
use object_store::{ObjectStore, PutPayload};

use super::*;
use crate::snapshot::{
    ClusterSnapshot, RestoredMarker, SNAPSHOT_VERSION, cluster_snapshot_path, restored_marker_path,
};

const T: Uuid = Uuid::from_u128(7);

/// A complete segment copied under the last epoch of its batches, with its objects'
/// sizes as its `.meta` gives them.
fn seg(base: i64, end: i64, epochs: &[(i32, i64)]) -> FoundSegment {
    copied(base, end, epochs, epochs.last().map_or(0, |e| e.0))
}

/// A complete segment copied under leader epoch `copy`.
fn copied(base: i64, end: i64, epochs: &[(i32, i64)], copy: i32) -> FoundSegment {
    let key = SegmentKey {
        topic_id: T,
        partition: 0,
        base_offset: base,
        end_offset: end,
        segment_id: Uuid::new_v4(),
    };
    let indexes = key.path(ObjectKind::Indexes);
    let meta = SegmentMeta {
        topic: "t".into(),
        topic_id: T,
        partition: 0,
        segment_id: key.segment_id,
        base_offset: base,
        end_offset: end,
        max_timestamp: 0,
        leader_epoch: copy,
        log_bytes: 1000,
        index_bytes: 8,
        time_index_bytes: 12,
        log_crc32c: 0,
        index_crc32c: 0,
        time_index_crc32c: 0,
        key_filter: None,
        epochs: epochs.to_vec(),
        indexes: Some(indexes.filename().unwrap().to_string()),
        replaces: Some(Vec::new()),
        producer_snapshot_bytes: None,
        aborted: Vec::new(),
    };
    FoundSegment {
        key,
        objects: BTreeMap::from([("log", 1000), ("indexes", 36), ("meta", 400)]),
        modified_ms: 0,
        meta: Some(Ok(meta)),
    }
}

fn meta_mut(f: &mut FoundSegment) -> &mut SegmentMeta {
    match &mut f.meta {
        Some(Ok(m)) => m,
        _ => unreachable!(),
    }
}

/// As written before `.meta` said whether a segment is a rewrite.
fn legacy(mut f: FoundSegment) -> FoundSegment {
    meta_mut(&mut f).replaces = None;
    f
}

/// A compacted rewrite of `replaced`.
fn rewrite(mut f: FoundSegment, replaced: &[&FoundSegment]) -> FoundSegment {
    meta_mut(&mut f).replaces = Some(replaced.iter().map(|r| r.key.segment_id).collect());
    f
}

fn taken(plan: &PartitionPlan) -> Vec<(i64, i64, i64)> {
    let segments = plan.segments.iter();
    segments
        .map(|(m, end)| (m.base_offset, m.end_offset, *end))
        .collect()
}

fn only_problem(r: Result<PartitionPlan, Vec<Finding>>) -> Finding {
    let problems = r.expect_err("refused");
    assert_eq!(problems.len(), 1, "{problems:?}");
    problems.into_iter().next().unwrap()
}

#[test]
fn contiguous_segments_are_taken_whole() {
    let found = [
        seg(200, 299, &[(1, 200)]),
        seg(0, 99, &[(0, 0)]),
        seg(100, 199, &[(0, 100), (1, 150)]),
    ];
    let plan = plan_partition(&found).unwrap();
    assert_eq!(
        taken(&plan),
        [(0, 99, 99), (100, 199, 199), (200, 299, 299)]
    );
    assert_eq!(plan.range(), Some((0, 299)));
    assert_eq!((plan.max_epoch, plan.highest_named), (1, 299));
    assert!(plan.ignored.is_empty());
}

#[test]
fn a_compacted_rewrite_is_taken_over_the_segments_it_replaced_and_no_further() {
    // The rewrite, made under a later epoch, covers the first two segments only: the
    // third, copied under the earlier epoch, stays.
    let (o1, o2) = (
        copied(0, 99, &[(1, 0)], 1),
        copied(100, 199, &[(1, 100)], 1),
    );
    let o3 = copied(200, 299, &[(1, 200)], 1);
    let r = rewrite(copied(0, 199, &[], 2), &[&o1, &o2]);
    let next = copied(300, 399, &[(2, 300)], 2);
    let plan =
        plan_partition(&[o1.clone(), o2.clone(), o3.clone(), r.clone(), next.clone()]).unwrap();
    assert_eq!(
        taken(&plan),
        [(0, 199, 199), (200, 299, 299), (300, 399, 399)]
    );
    assert_eq!(plan.ignored.len(), 2, "{:?}", plan.ignored);
    // Objects written before `.meta` named what a rewrite replaces: a copy that other
    // segments tile exactly is taken for their rewrite.
    let [o1, o2, o3, r, next] = [o1, o2, o3, r, next].map(legacy);
    let plan = plan_partition(&[o1, o2, o3, r, next]).unwrap();
    assert_eq!(
        taken(&plan),
        [(0, 199, 199), (200, 299, 299), (300, 399, 399)]
    );
    // A legacy rewrite whose replaced segments are gone already: segments copied
    // under an earlier epoch go on from its end, which no leader's copy would have.
    let r = legacy(copied(0, 199, &[], 5));
    let o3 = legacy(copied(200, 999, &[(3, 200)], 3));
    let next = legacy(copied(1000, 1099, &[(5, 1000)], 5));
    let plan = plan_partition(&[r, o3, next]).unwrap();
    assert_eq!(
        taken(&plan),
        [(0, 199, 199), (200, 999, 999), (1000, 1099, 1099)]
    );
    // Two legacy copies of the same offsets under one epoch: one stands.
    let plan =
        plan_partition(&[legacy(seg(0, 99, &[(0, 0)])), legacy(seg(0, 99, &[(0, 0)]))]).unwrap();
    assert_eq!(taken(&plan), [(0, 99, 99)]);
}

#[test]
fn a_later_leaders_copies_cut_what_earlier_leaders_copied_from_where_they_start() {
    // L (epoch 5) copied A with its own records from 100; F, elected at 6, cut the
    // remote log at 100 and copied its own log from there (its batches from 100 are
    // of epoch 4, lower than A's there: the copy epoch decides, not the batches').
    let a = copied(0, 249, &[(3, 0), (5, 100)], 5);
    let t1 = copied(100, 199, &[(4, 100), (6, 150)], 6);
    let t2 = copied(200, 260, &[(6, 200)], 6);
    let plan = plan_partition(&[a, t1, t2]).unwrap();
    assert_eq!(
        taken(&plan),
        [(0, 249, 99), (100, 199, 199), (200, 260, 260)]
    );
    assert_eq!(plan.max_epoch, 6);
    // A deposed leader's copy that landed after the new leader cleaned up (complete,
    // never finished) is superseded from the new leader's first copy on.
    let first = copied(0, 199, &[(5, 0)], 5);
    let late = copied(200, 299, &[(5, 200)], 5);
    let t1 = copied(200, 249, &[(5, 200)], 6);
    let t2 = copied(250, 300, &[(6, 250)], 6);
    let plan = plan_partition(&[first, late.clone(), t1, t2]).unwrap();
    assert_eq!(
        taken(&plan),
        [(0, 199, 199), (200, 249, 249), (250, 300, 300)]
    );
    let late_log = late.key.path(ObjectKind::Log).to_string();
    assert!(
        plan.ignored.iter().any(|f| f.object == late_log),
        "{:?}",
        plan.ignored
    );
    // What is left out is listed for deletion, so no later restore meets it.
    assert_eq!(plan.leftovers, [late.key]);
    // Segments past a cut, still being deleted, go with it.
    let found = [
        copied(100, 199, &[(3, 100)], 3),
        copied(200, 299, &[(3, 200)], 3),
        copied(150, 260, &[(5, 150)], 5),
    ];
    let plan = plan_partition(&found).unwrap();
    assert_eq!(taken(&plan), [(100, 199, 149), (150, 260, 260)]);
}

#[test]
fn gaps_and_overlaps_under_one_epoch_are_refused() {
    let p = only_problem(plan_partition(&[
        seg(0, 99, &[(0, 0)]),
        seg(150, 199, &[(0, 150)]),
    ]));
    assert!(p.to_string().contains("offsets 100..=149"), "{p}");
    let p = only_problem(plan_partition(&[
        seg(0, 99, &[(0, 0)]),
        seg(50, 149, &[(0, 50)]),
    ]));
    assert!(p.problem.contains("overlap"), "{p}");
    assert!(
        p.object.contains("00000000000000000050-") && p.object.ends_with(".log"),
        "{p}"
    );
}

#[test]
fn a_cut_not_yet_copied_after_comes_from_outside() {
    let mut plan = plan_partition(&[seg(0, 99, &[(0, 0)]), seg(100, 199, &[(0, 100)])]).unwrap();
    plan.cut(150);
    assert_eq!(taken(&plan), [(0, 99, 99), (100, 199, 149)]);
    plan.cut(100);
    assert_eq!(taken(&plan), [(0, 99, 99)]);
    assert_eq!(plan.ignored.len(), 1);
}

#[test]
fn a_missing_meta_inside_the_log_is_refused_and_past_its_end_is_a_leftover() {
    let mut middle = seg(100, 199, &[(0, 100)]);
    middle.objects.remove("meta");
    middle.meta = None;
    let meta_path = middle.key.path(ObjectKind::Meta).to_string();
    let found = [
        seg(0, 99, &[(0, 0)]),
        middle.clone(),
        seg(200, 299, &[(0, 200)]),
    ];
    let p = only_problem(plan_partition(&found));
    assert_eq!(p.object, meta_path);
    assert!(p.problem.contains("100..=199"), "{p}");
    // Below the start: the offsets would be lost too.
    let p = only_problem(plan_partition(&[
        middle.clone(),
        seg(200, 299, &[(0, 200)]),
    ]));
    assert_eq!(p.object, meta_path);
    // Past the end: a copy that never finished.
    let plan = plan_partition(&[seg(0, 99, &[(0, 0)]), middle]).unwrap();
    assert_eq!(taken(&plan), [(0, 99, 99)]);
    assert_eq!(plan.ignored[0].object, meta_path);
}

#[test]
fn a_deletion_under_way_is_left_out() {
    let mut deleting = seg(0, 99, &[(0, 0)]);
    deleting.objects.remove("log");
    deleting.objects.remove("indexes");
    let plan = plan_partition(&[deleting, seg(100, 199, &[(0, 100)])]).unwrap();
    assert_eq!(taken(&plan), [(100, 199, 199)]);
    assert!(plan.ignored[0].problem.contains("deletion"));
}

#[test]
fn damaged_objects_are_refused_by_name() {
    let mut truncated = seg(100, 199, &[(0, 100)]);
    truncated.objects.insert("log", 999);
    let p = only_problem(plan_partition(&[seg(0, 99, &[(0, 0)]), truncated.clone()]));
    assert_eq!(p.object, truncated.key.path(ObjectKind::Log).to_string());
    assert!(p.problem.contains("999 bytes where .meta says 1000"), "{p}");

    let mut other = seg(100, 199, &[(0, 100)]);
    if let Some(Ok(m)) = &mut other.meta {
        m.segment_id = Uuid::new_v4();
    }
    let p = only_problem(plan_partition(&[other.clone()]));
    assert_eq!(p.object, other.key.path(ObjectKind::Meta).to_string());

    let mut no_indexes = seg(0, 99, &[(0, 0)]);
    no_indexes.objects.remove("indexes");
    let p = only_problem(plan_partition(&[no_indexes]));
    assert!(p.object.ends_with(".indexes"), "{p}");

    // A copy with the producer state: `.indexes` has a longer header and the snapshot.
    let mut with_snapshot = seg(0, 99, &[(0, 0)]);
    meta_mut(&mut with_snapshot).producer_snapshot_bytes = Some(10);
    let p = only_problem(plan_partition(&[with_snapshot.clone()]));
    assert!(p.problem.contains("36 bytes where .meta says 50"), "{p}");
    with_snapshot.objects.insert("indexes", 50);
    assert_eq!(
        taken(&plan_partition(&[with_snapshot]).unwrap()),
        [(0, 99, 99)]
    );

    let mut unreadable = seg(0, 99, &[(0, 0)]);
    unreadable.meta = Some(Err("not a segment description".into()));
    assert!(plan_partition(&[unreadable]).is_err());

    for epochs in [&[(3, 0), (2, 50)][..], &[(1, 10)], &[(1, 0), (2, 150)]] {
        let p = only_problem(plan_partition(&[seg(0, 99, epochs)]));
        assert!(p.problem.contains("epoch lineage"), "{p}");
    }
}

#[tokio::test]
async fn listing_groups_objects_by_segment_and_names_foreign_ones() {
    let store: crate::ObjectStoreRef = Arc::new(InMemory::new());
    let a = seg(0, 99, &[(0, 0)]);
    for kind in ObjectKind::WRITTEN {
        let body = match kind {
            ObjectKind::Meta => {
                let Some(Ok(meta)) = &a.meta else {
                    unreachable!()
                };
                serde_json::to_vec(meta).unwrap()
            }
            _ => vec![0; a.size(kind).unwrap() as usize],
        };
        store
            .put(&a.key.path(kind), PutPayload::from(body))
            .await
            .unwrap();
    }
    let put = |path: &str| {
        let store = store.clone();
        let path = Path::from(path);
        async move {
            store
                .put(&path, PutPayload::from_static(b"{}"))
                .await
                .unwrap()
        }
    };
    put("notes.txt").await;
    put(&format!("{T}/0/readme")).await;
    let mut listing = list_bucket(&store, None).await.unwrap();
    assert_eq!(
        listing.foreign,
        [format!("{T}/0/readme"), "notes.txt".to_string()]
    );
    let found = listing.segments.get_mut(&T).unwrap().get_mut(&0).unwrap();
    assert_eq!(found.len(), 1);
    read_metas(&store, found).await.unwrap();
    let plan = plan_partition(found).unwrap();
    assert_eq!(taken(&plan), [(0, 99, 99)]);
    // Every other cluster's snapshot is read, newest first, never the restoring one's.
    let (own, older, newer) = (Uuid::new_v4(), Uuid::new_v4(), Uuid::new_v4());
    for (id, at) in [(own, 30), (older, 10), (newer, 20)] {
        let snapshot = ClusterSnapshot {
            version: SNAPSHOT_VERSION,
            cluster_id: id,
            taken_at_ms: at,
            topics: Vec::new(),
            groups: Vec::new(),
        };
        let body = PutPayload::from(serde_json::to_vec(&snapshot).unwrap());
        store.put(&cluster_snapshot_path(id), body).await.unwrap();
    }
    let read = read_snapshots(&store, own).await.unwrap();
    let ids: Vec<Uuid> = read.clusters.iter().map(|c| c.cluster_id).collect();
    assert_eq!(ids, [newer, older]);
    // A cluster restored from another replaces its snapshot.
    let marker = RestoredMarker {
        version: SNAPSHOT_VERSION,
        cluster_id: newer,
        restored_at_ms: 15,
        supersedes: vec![older],
    };
    let body = PutPayload::from(serde_json::to_vec(&marker).unwrap());
    store.put(&restored_marker_path(newer), body).await.unwrap();
    let read = read_snapshots(&store, own).await.unwrap();
    let ids: Vec<Uuid> = read.clusters.iter().map(|c| c.cluster_id).collect();
    assert_eq!(ids, [newer]);
    // One that is not a snapshot is refused by name.
    put(&format!("_shale/clusters/{}.json", Uuid::nil())).await;
    match read_snapshots(&store, own).await {
        Err(BucketError::Damaged(f)) => assert!(f.object.contains(&Uuid::nil().to_string())),
        other => panic!("{other:?}"),
    }
}
