//! Races of the tier that real processes cannot hit on purpose, driven in process
//! through the fault-injecting metastore and object store of `crate::testing`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use object_store::ObjectStore;
use shale_metastore::{PartitionState, RemoteSegmentState};
use shale_records::ErrorCode;

use crate::fetch::{FetchSpec, ReadFrom};
use crate::partition::{Partition, RemoteState};
use crate::produce::ProduceData;
use crate::testing::{StoreOp, TestBroker, batch};

const TOPIC: &str = "t";

/// A broker leading a one-partition tiered topic of small segments, with `batches`
/// batches produced (about 200 bytes each; a segment holds about five).
async fn tiered(
    dir: &std::path::Path,
    batches: usize,
    extra: &[(&str, &str)],
) -> (TestBroker, Arc<Partition>) {
    let t = TestBroker::start(dir, "").await;
    let mut configs = BTreeMap::from([("segment.bytes".to_string(), "1024".to_string())]);
    configs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    t.broker
        .create_topic(TOPIC, 1, 1, configs, false)
        .await
        .unwrap();
    for _ in 0..batches {
        let data = vec![ProduceData {
            topic: TOPIC.into(),
            partition: 0,
            records: batch(2, 60),
        }];
        let r = t
            .broker
            .produce(1, Duration::from_secs(5), None, data)
            .await;
        r.into_iter().next().unwrap().unwrap();
    }
    let p = t.broker.partition(TOPIC, 0).unwrap();
    (t, p)
}

async fn finished(t: &TestBroker, p: &Partition) -> Vec<(i64, i64)> {
    use shale_metastore::Metastore;
    t.metastore
        .list_remote_segments(p.topic_id, 0, &[RemoteSegmentState::CopyFinished])
        .await
        .unwrap()
        .into_iter()
        .map(|s| (s.base_offset, s.end_offset))
        .collect()
}

async fn fetch_code(t: &TestBroker, offset: i64) -> ErrorCode {
    let spec = FetchSpec {
        topic: TOPIC.into(),
        partition: 0,
        offset,
        max_bytes: 1 << 20,
        current_leader_epoch: -1,
    };
    let r = t
        .broker
        .fetch(
            vec![spec],
            Duration::ZERO,
            0,
            1 << 20,
            &ReadFrom::Leader,
            false,
            false,
        )
        .await
        .into_iter()
        .next()
        .unwrap();
    match r {
        Ok(f) => {
            assert!(!f.records.is_empty(), "nothing read at {offset}");
            ErrorCode::None
        }
        Err(e) => e.code(),
    }
}

/// Makes broker 7 the partition's leader at the next epoch: this broker follows.
fn depose(p: &Partition) {
    let role = p.role();
    let next = PartitionState {
        topic_id: p.topic_id,
        partition: 0,
        replicas: role.replicas.clone(),
        leader: 7,
        leader_epoch: role.leader_epoch + 1,
        isr: vec![7],
        elr: Vec::new(),
        recovering: Vec::new(),
        adding: Vec::new(),
        removing: Vec::new(),
        version: role.version + 1,
    };
    p.apply_state(&next, 0).unwrap();
}

/// Copies what is sealed, then drops the local copies (local retention of 1 byte).
async fn tier_and_drop_local(t: &TestBroker, p: &Arc<Partition>) {
    t.broker.upload_pass().await.unwrap();
    assert!(!finished(t, p).await.is_empty(), "nothing copied");
    let mut config = (*p.config()).clone();
    config.local_retention_bytes = 1;
    p.set_config(Arc::new(config));
    p.apply_retention(crate::clock::now_ms()).unwrap();
    assert!(
        p.offsets().local_log_start_offset > 0,
        "nothing dropped locally"
    );
}

/// Finding: remote retention deleting a segment while a read of it is in flight gave
/// the reader CORRUPT_MESSAGE (a fatal error for Kafka clients). The read looks again:
/// the offset is now below the log start, so it is out of range.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_deleted_by_retention_during_a_read_is_out_of_range_not_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = tiered(dir.path(), 40, &[]).await;
    tier_and_drop_local(&t, &p).await;
    let first = p.remote_state().segments[0].clone();
    // Retention takes the first segment while a read of it waits for its GET (as the
    // retention pass does: retire it from the read index, then delete its objects).
    let (store, part, fired) = (t.store.clone(), p.clone(), Arc::new(AtomicBool::new(false)));
    let key = first.segment_id.to_string();
    t.store.set_hook(move |op, path| {
        let (store, part, fired, key) = (store.clone(), part.clone(), fired.clone(), key.clone());
        async move {
            if op != StoreOp::Get
                || !path.as_ref().contains(&key)
                || fired.swap(true, Ordering::SeqCst)
            {
                return;
            }
            let state = part.remote_state();
            part.set_remote_state(RemoteState {
                retained_from: state.segments[1].base_offset,
                segments: Arc::new(state.segments[1..].to_vec()),
                ..state
            });
            let prefix = path.as_ref().rsplit_once('.').unwrap().0.to_string();
            for ext in ["log", "index", "timeindex", "meta"] {
                let _ = store.delete(&format!("{prefix}.{ext}").into()).await;
            }
        }
        .boxed()
    });
    // Nothing of the segment is cached yet: the read GETs it.
    let offset = first.base_offset + 1;
    assert_eq!(fetch_code(&t, offset).await, ErrorCode::OffsetOutOfRange);
    // The next segment still reads.
    t.store.clear_hook();
    assert_eq!(fetch_code(&t, first.end_offset + 1).await, ErrorCode::None);
}

/// Finding: a partition whose remote log could not be read from the metastore
/// answered a fetch below its local log with OFFSET_OUT_OF_RANGE, so a client reset to
/// latest and skipped records. It must answer retriably until the remote log loads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_log_not_loaded_yet_answers_retriably_not_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = tiered(dir.path(), 40, &[]).await;
    tier_and_drop_local(&t, &p).await;
    p.set_remote_state(RemoteState::unloaded());
    t.metastore.fail_remote_reads.store(true, Ordering::SeqCst);
    t.broker.load_remote_indexes().await;
    assert!(!p.remote_state().loaded);
    let code = fetch_code(&t, 0).await;
    assert_eq!(code, ErrorCode::KafkaStorageError);
    t.metastore.fail_remote_reads.store(false, Ordering::SeqCst);
    t.broker.load_remote_indexes().await;
    assert_eq!(fetch_code(&t, 0).await, ErrorCode::None);
}

/// Finding: a leader deposed while copying went on copying its remaining segments.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_stops_copying() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = tiered(dir.path(), 40, &[]).await;
    let pending = p.sealed_segments_after(-1).len();
    assert!(pending >= 4, "{pending} sealed segments");
    let (part, fired) = (p.clone(), Arc::new(AtomicBool::new(false)));
    t.store.set_hook(move |op, _path| {
        let (part, fired) = (part.clone(), fired.clone());
        async move {
            if op == StoreOp::Put && !fired.swap(true, Ordering::SeqCst) {
                depose(&part);
            }
        }
        .boxed()
    });
    t.broker.upload_pass().await.unwrap();
    let copied = finished(&t, &p).await.len();
    assert!(
        copied <= 1,
        "copied {copied} of {pending} segments after losing the lead"
    );
}

/// Finding: remote retention ran on followers too (only the leader may delete).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn followers_leave_remote_retention_to_the_leader() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = tiered(dir.path(), 40, &[]).await;
    t.broker.upload_pass().await.unwrap();
    let before = finished(&t, &p).await;
    assert!(!before.is_empty());
    let mut config = (*p.config()).clone();
    config.retention_ms = 1;
    p.set_config(Arc::new(config));
    depose(&p);
    tokio::time::sleep(Duration::from_millis(5)).await;
    t.broker.remote_retention_pass().await.unwrap();
    assert_eq!(
        finished(&t, &p).await,
        before,
        "a follower deleted remote segments"
    );
}

/// Finding: once remote retention had deleted every remote segment, reloading the
/// remote log gave an end of -1, and local copies of what retention deleted were
/// copied (and served) again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_deleted_by_remote_retention_are_not_copied_again() {
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = tiered(dir.path(), 40, &[]).await;
    t.broker.upload_pass().await.unwrap();
    let copied_end = p.remote_state().end_offset;
    assert!(copied_end > 0);
    let mut config = (*p.config()).clone();
    config.retention_ms = 1;
    p.set_config(Arc::new(config));
    tokio::time::sleep(Duration::from_millis(5)).await;
    t.broker.remote_retention_pass().await.unwrap();
    assert!(
        finished(&t, &p).await.is_empty(),
        "retention deleted nothing"
    );
    // The broker reads the remote log afresh (as after a restart), local copies still
    // on disk.
    p.set_remote_state(RemoteState::unloaded());
    t.broker.load_remote_indexes().await;
    let state = p.remote_state();
    assert_eq!(state.end_offset, copied_end);
    assert_eq!(state.retained_from, copied_end + 1);
    t.broker.upload_pass().await.unwrap();
    let again: Vec<(i64, i64)> = finished(&t, &p)
        .await
        .into_iter()
        .filter(|s| s.0 <= copied_end)
        .collect();
    assert!(again.is_empty(), "copied again: {again:?}");
    // Local retention drops the local copies of what the remote tier retired.
    p.apply_retention(crate::clock::now_ms()).unwrap();
    assert!(p.offsets().local_log_start_offset > copied_end);
}

/// Finding: a replica taking the lead decided whether to take the bucket over from its
/// own view of the remote log, which a follower refreshes only now and then. With a
/// view older than the last copies it saw a remote log ending below its log end, kept
/// its log and took produce there; its first copy then cut the remote log at its log
/// end, deleting records the bucket held (committed under the old leader). The remote
/// log is now read afresh as the replica takes the lead, and a replica whose tier is
/// busy waits for the next refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_leader_with_a_stale_remote_view_takes_the_whole_bucket_over() {
    use shale_metastore::{Metastore, StateGuard};
    let dir = tempfile::tempdir().unwrap();
    let (t, p) = tiered(dir.path(), 40, &[]).await;
    t.broker.upload_pass().await.unwrap();
    let copied = finished(&t, &p).await;
    let (first_end, remote_end) = (copied[0].1, copied.last().unwrap().1);
    assert!(remote_end > first_end + 10, "{copied:?}");
    // Another broker leads; this one, following, loses its log above first_end + 1
    // (as a follower truncating to an unclean leader would) and keeps a view of the
    // remote log from before the later copies.
    depose(&p);
    let role = p.role();
    let at = crate::partition::FollowerPosition {
        log_end_offset: p.offsets().log_end_offset,
        last_epoch: 0,
        leader: role.leader,
        leader_epoch: role.leader_epoch,
        state_version: role.version,
        moving: false,
        log_start_offset: 0,
    };
    assert!(p.truncate_diverged(&at, 0, first_end + 2).unwrap());
    let stale = RemoteState {
        segments: Arc::new(p.remote_state().segments[..1].to_vec()),
        end_offset: first_end,
        ..p.remote_state()
    };
    p.set_remote_state(stale);
    // The metastore makes it leader again, at a newer epoch and version than it holds.
    let stored = t.metastore.list_partition_states().await.unwrap();
    let mut s = stored
        .into_iter()
        .find(|s| s.topic_id == p.topic_id)
        .unwrap();
    for (leader, epoch) in [(7, 1), (0, 2)] {
        s.leader = leader;
        s.leader_epoch = epoch;
        s.isr = vec![leader];
        s = t
            .metastore
            .update_partition_state(&s, StateGuard::default())
            .await
            .unwrap();
    }
    assert!(s.version > role.version);
    // A busy tier (a copy of its own under an older epoch) holds the lead back, and
    // only this partition's, for a moment: the next refresh takes it.
    {
        let _busy = p.tier_lock.lock().await;
        t.broker.reconcile().await.unwrap();
        assert!(
            !p.is_leader(),
            "took the lead without reading the remote log"
        );
    }
    t.broker.reconcile().await.unwrap();
    assert!(p.is_leader());
    assert_eq!(
        p.offsets().log_end_offset,
        remote_end + 1,
        "the new leader did not take the whole remote log over"
    );
    t.broker.upload_pass().await.unwrap();
    assert_eq!(finished(&t, &p).await, copied, "the remote log changed");
}
