//! Micro-benchmarks of the hot paths the broker runs per batch or per read:
//! `cargo bench -p shale-bench --bench micro`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use object_store::ObjectStore;
use shale_log::{FileCache, LogConfig, PartitionLog};
use shale_records::batch::{BatchHeader, BatchIter};
use shale_records::record::{BatchBuilder, Record};

fn batch(records: usize, value: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new(1_000);
    let v = vec![b'x'; value];
    for _ in 0..records {
        b.push(Record::new(None, Some(&v), 1_000));
    }
    b.build().to_vec()
}

/// Header parse + CRC-32C check of a 64 KiB batch: what produce does per batch.
fn header_and_crc(c: &mut Criterion) {
    let bytes = batch(64, 1000);
    let mut g = c.benchmark_group("batch");
    g.throughput(Throughput::Bytes(bytes.len() as u64));
    g.bench_function("parse_and_crc_64KiB", |b| {
        b.iter(|| {
            let h = BatchHeader::parse(black_box(&bytes)).unwrap();
            h.validate(&bytes).unwrap();
            h.last_offset()
        })
    });
    g.finish();
}

/// Appends of 16 KiB batches to a segment (page cache, no fsync).
fn segment_append(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut log =
        PartitionLog::open(dir.path(), LogConfig::default(), 0, FileCache::new(64)).unwrap();
    let template = batch(16, 1000);
    let mut g = c.benchmark_group("log");
    g.throughput(Throughput::Bytes(template.len() as u64));
    g.bench_function("append_16KiB", |b| {
        b.iter(|| {
            let mut bytes = template.clone();
            let mut headers: Vec<_> = BatchIter::new(&bytes).map(|r| r.unwrap().0).collect();
            log.append(&mut bytes, &mut headers, 0, 0).unwrap()
        })
    });
    g.finish();
}

/// Offset-index lookup and read plan in a 64 MiB log (what every fetch does first).
fn index_lookup(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let mut log =
        PartitionLog::open(dir.path(), LogConfig::default(), 0, FileCache::new(64)).unwrap();
    let template = batch(16, 4000);
    for _ in 0..1000 {
        let mut bytes = template.clone();
        let mut headers: Vec<_> = BatchIter::new(&bytes).map(|r| r.unwrap().0).collect();
        log.append(&mut bytes, &mut headers, 0, 0).unwrap();
    }
    let end = log.log_end_offset();
    let mut i = 0i64;
    c.bench_function("log/plan_read_random_offset", |b| {
        b.iter(|| {
            i = (i + 7919) % end;
            log.plan_read(black_box(i), end).unwrap()
        })
    });
}

/// A remote read served from the read cache's memory tier.
fn cache_hit(c: &mut Criterion) {
    use shale_metastore::{RemoteSegment, RemoteSegmentState};
    use shale_tiering::layout::{ObjectKind, SegmentKey};
    use shale_tiering::reader::{ReaderConfig, RemoteReader};
    let rt = tokio::runtime::Runtime::new().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    for _ in 0..64 {
        log.extend_from_slice(&batch(16, 4000));
    }
    let seg = RemoteSegment {
        segment_id: uuid::Uuid::new_v4(),
        topic_id: uuid::Uuid::new_v4(),
        partition: 0,
        base_offset: 0,
        end_offset: 64 * 16 - 1,
        max_timestamp: 1_000,
        leader_epoch: 0,
        size_bytes: log.len() as i64,
        state: RemoteSegmentState::CopyFinished,
        created_at_ms: 0,
        updated_at_ms: 0,
        epochs: Vec::new(),
        object_end_offset: 64 * 16 - 1,
        aborted: Vec::new(),
    };
    let reader = rt.block_on(async {
        let store = shale_tiering::open("memory://", &Default::default())
            .await
            .unwrap();
        let key = SegmentKey::of(&seg);
        store
            .put(&key.path(ObjectKind::Log), log.into())
            .await
            .unwrap();
        // No index entries: reads scan from the segment start.
        store
            .put(&key.path(ObjectKind::Index), Vec::new().into())
            .await
            .unwrap();
        RemoteReader::open(
            store,
            ReaderConfig {
                chunk_bytes: 1 << 20,
                cache_memory_bytes: 64 << 20,
                cache_disk_bytes: 64 << 20,
                cache_dir: dir.path().join("cache"),
                direct_io: false,
                read_ahead_chunks: 0,
                max_concurrent_gets: 4,
                tasks: Default::default(),
            },
        )
        .await
        .unwrap()
    });
    let read = |reader: &Arc<RemoteReader>| {
        rt.block_on(reader.read(&seg, 0, 1 << 20, true))
            .unwrap()
            .len()
    };
    assert!(read(&reader) > 0);
    let mut g = c.benchmark_group("cache");
    g.throughput(Throughput::Bytes(1 << 20));
    g.bench_function("hit_1MiB", |b| b.iter(|| read(&reader)));
    g.finish();
}

criterion_group!(
    micro,
    header_and_crc,
    segment_append,
    index_lookup,
    cache_hit
);
criterion_main!(micro);
