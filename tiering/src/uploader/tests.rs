//! The uploader against a real SQLite metastore and a real local-file store that
//! fails on request: an interrupted copy leaves a row that clean-up finishes off, and
//! the copy that follows is whole.

use object_store::ObjectStore;
use shale_metastore::RemoteSegmentState::{CopyFinished, CopyStarted, DeleteFinished};

use super::*;
use crate::fixture::{Fixture, StoreOp};
use crate::layout::{ObjectKind, SegmentKey};

/// The objects the store holds, by name.
async fn objects(f: &Fixture) -> Vec<String> {
    use futures::TryStreamExt;
    let mut names: Vec<String> = f
        .store
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .unwrap();
    names.sort();
    names
}

async fn rows(f: &Fixture, state: RemoteSegmentState) -> Vec<RemoteSegment> {
    f.metastore
        .list_remote_segments(f.partition.topic_id, 0, &[state])
        .await
        .unwrap()
}

#[tokio::test]
async fn a_copy_cut_before_its_meta_is_cleaned_up_and_copied_again() {
    let f = Fixture::new().await;
    let uploader = f.uploader(UploaderConfig::default());
    let seg = f.segment(0, 3);
    // .log and .indexes go up; the .meta put fails.
    f.store.fail(StoreOp::Put, 2, 1);
    let err = uploader.upload(&f.partition, &seg).await.unwrap_err();
    assert!(matches!(err, UploadError::Store(_)), "{err}");
    let unfinished = rows(&f, CopyStarted).await;
    assert_eq!(unfinished.len(), 1);
    assert_eq!(objects(&f).await.len(), 2, "{:?}", objects(&f).await);
    assert!(
        uploader
            .finished_segments(&f.partition)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        uploader.remote_log_end_offset(&f.partition).await.unwrap(),
        -1
    );

    assert_eq!(uploader.clean_unfinished(&f.partition).await.unwrap(), 1);
    assert!(objects(&f).await.is_empty(), "{:?}", objects(&f).await);
    assert_eq!(rows(&f, DeleteFinished).await.len(), 1);
    assert!(rows(&f, CopyStarted).await.is_empty());

    let row = uploader.upload(&f.partition, &seg).await.unwrap();
    assert_eq!(
        (row.state, row.base_offset, row.end_offset),
        (CopyFinished, 0, 29)
    );
    assert_eq!(objects(&f).await.len(), 3, "{:?}", objects(&f).await);
    let finished = uploader.finished_segments(&f.partition).await.unwrap();
    assert_eq!(finished.len(), 1);
    assert_eq!(
        uploader.remote_log_end_offset(&f.partition).await.unwrap(),
        29
    );
    let stored = f
        .store
        .get(&SegmentKey::of(&row).path(ObjectKind::Log))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(stored, std::fs::read(&seg.log_path).unwrap());
}

#[tokio::test]
async fn a_multipart_copy_whose_parts_fail_leaves_no_log_object() {
    let f = Fixture::new().await;
    let uploader = f.uploader(UploaderConfig {
        multipart_threshold: 1024,
        part_size: 1024,
        part_concurrency: 2,
        local_root: None,
    });
    let seg = f.segment(100, 40);
    assert!(seg.size_bytes > 4 * 1024, "{} bytes", seg.size_bytes);
    // The upload starts and two parts go up; then every put fails.
    f.store.fail(StoreOp::Put, 3, u64::MAX);
    let err = uploader.upload(&f.partition, &seg).await.unwrap_err();
    assert!(matches!(err, UploadError::Store(_)), "{err}");
    assert!(
        !objects(&f).await.iter().any(|o| o.ends_with(".log")),
        "an aborted upload left its object: {:?}",
        objects(&f).await
    );
    assert_eq!(rows(&f, CopyStarted).await.len(), 1);

    f.store.fail(StoreOp::Put, 0, 0);
    uploader.clean_unfinished(&f.partition).await.unwrap();
    let puts = f.store.requests(StoreOp::Put);
    let row = uploader.upload(&f.partition, &seg).await.unwrap();
    assert!(
        f.store.requests(StoreOp::Put) - puts > 4,
        "the log went up in parts"
    );
    let stored = f
        .store
        .get(&SegmentKey::of(&row).path(ObjectKind::Log))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    assert_eq!(stored, std::fs::read(&seg.log_path).unwrap());
}
