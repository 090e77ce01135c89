//! The remote reader against a real local-file store that fails on request: an outage
//! is a retriable error and nothing is cached from it, what was read once is served
//! from the cache, and a damaged or missing object is told apart from an outage.

use super::*;
use crate::fixture::{Fixture, StoreOp, values};
use crate::uploader::UploaderConfig;

async fn reader(f: &Fixture, name: &str) -> Arc<RemoteReader> {
    RemoteReader::open(
        f.store.clone(),
        ReaderConfig {
            chunk_bytes: 4096,
            cache_memory_bytes: 1 << 20,
            cache_disk_bytes: 16 << 20,
            cache_dir: f.dir.path().join(name),
            direct_io: false,
            read_ahead_chunks: 0,
            max_concurrent_gets: 4,
            tasks: tokio_util::task::TaskTracker::new(),
        },
    )
    .await
    .unwrap()
}

/// A copied segment of offsets 0..=49, and the path of its `.log` object on disk.
async fn copied(f: &Fixture) -> (RemoteSegment, std::path::PathBuf) {
    let seg = f.segment(0, 5);
    let row = f
        .uploader(UploaderConfig::default())
        .upload(&f.partition, &seg)
        .await
        .unwrap();
    let object = SegmentKey::of(&row).path(ObjectKind::Log);
    let file = f.dir.path().join("objects").join(object.as_ref());
    assert!(file.exists(), "{}", file.display());
    (row, file)
}

fn expected(from: i64, to: i64) -> Vec<String> {
    (from..=to).map(|o| format!("v{o}")).collect()
}

#[tokio::test]
async fn an_outage_is_retriable_and_a_read_once_is_served_from_the_cache() {
    let f = Fixture::new().await;
    let (row, _) = copied(&f).await;
    let reader = reader(&f, "cache").await;

    f.store.fail(StoreOp::Get, 0, 1);
    let err = reader.read(&row, 0, 1 << 20, true).await.unwrap_err();
    assert!(matches!(err, ReadError::Unavailable { .. }), "{err}");
    assert!(err.is_retriable());

    let read = reader.read(&row, 0, 1 << 20, true).await.unwrap();
    assert_eq!(values(&read), expected(0, 49));
    // From the middle of a batch: the batch holding the offset, and those after.
    let read = reader.read(&row, 25, 1 << 20, true).await.unwrap();
    assert_eq!(values(&read), expected(20, 49));

    let gets = f.store.requests(StoreOp::Get);
    f.store.fail(StoreOp::Get, 0, u64::MAX);
    let again = reader.read(&row, 0, 1 << 20, true).await.unwrap();
    assert_eq!(values(&again), expected(0, 49));
    assert_eq!(
        f.store.requests(StoreOp::Get),
        gets,
        "read again from the store"
    );
    let found = reader.offset_for_timestamp(&row, 1033).await.unwrap();
    assert_eq!(found, Some((33, 1033)));
    // Past the segment's end: nothing, not an error.
    assert!(
        reader
            .read(&row, 50, 1 << 20, true)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_damaged_object_is_corrupt_and_a_missing_one_not_found() {
    let f = Fixture::new().await;
    let (row, file) = copied(&f).await;
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes).unwrap();
    let err = reader(&f, "a")
        .await
        .read(&row, 0, 1 << 20, true)
        .await
        .unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { .. }), "{err}");
    assert!(!err.is_retriable());

    std::fs::remove_file(&file).unwrap();
    let err = reader(&f, "b")
        .await
        .read(&row, 0, 1 << 20, true)
        .await
        .unwrap_err();
    assert!(matches!(err, ReadError::NotFound { .. }), "{err}");
    assert!(!err.is_retriable());
}

/// A segment's offset index comes from its `.indexes` object (one GET, cached); one
/// copied before that object existed is read through its own `.index` object; a
/// damaged `.indexes` is corrupt, naming it.
#[tokio::test]
async fn indexes_come_from_one_object_or_an_older_segments_own() {
    let f = Fixture::new().await;
    let (row, log) = copied(&f).await;
    let key = SegmentKey::of(&row);
    let on_disk = |kind: ObjectKind| log.with_file_name(key.path(kind).filename().unwrap());
    let indexes = std::fs::read(on_disk(ObjectKind::Indexes)).unwrap();

    // From the middle of the segment: the index is needed, fetched once.
    let r = reader(&f, "new").await;
    let read = r.read(&row, 25, 1 << 20, true).await.unwrap();
    assert_eq!(values(&read), expected(20, 49));
    let gets = f.store.requests(StoreOp::Get);
    let read = r.read(&row, 35, 1 << 20, true).await.unwrap();
    assert_eq!(values(&read), expected(30, 49));
    assert_eq!(f.store.requests(StoreOp::Get), gets, "no GET once cached");

    // As an older version copied it: `.index` and `.timeindex`, no `.indexes`.
    let parts = SegmentIndexes::decode(&indexes).unwrap();
    std::fs::write(on_disk(ObjectKind::Index), parts.offset_index).unwrap();
    std::fs::write(on_disk(ObjectKind::TimeIndex), parts.time_index).unwrap();
    std::fs::remove_file(on_disk(ObjectKind::Indexes)).unwrap();
    let read = reader(&f, "old").await.read(&row, 25, 1 << 20, true).await;
    assert_eq!(values(&read.unwrap()), expected(20, 49));

    // A damaged `.indexes` is not passed over for the older objects.
    std::fs::write(on_disk(ObjectKind::Indexes), &indexes[..indexes.len() - 1]).unwrap();
    let err = reader(&f, "damaged")
        .await
        .read(&row, 25, 1 << 20, true)
        .await
        .unwrap_err();
    assert!(matches!(err, ReadError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains(".indexes"), "{err}");
}
