//! A broker with many partitions: 20,000 of them on one broker started under an
//! open-files limit of 1,024, each produced to and read back; topic creation that
//! cannot complete leaves nothing behind; deleting the topic removes its directories
//! at once. Data lives on a tmpfs where there is one, so the test measures the broker,
//! not the disk's fsync latency.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::Broker;
use shale_client::{Acks, Producer, ProducerRecord};
use shale_records::ErrorCode;

const PARTITIONS: i32 = 20_000;
const FD_LIMIT: u64 = 1_024;

fn fast_tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap())
}

/// Open descriptors of a process (the harness starts a limited broker through
/// `bash -c exec`, which keeps the pid).
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Partition directories of `topic` in the broker's data directory.
fn partition_dirs(broker: &Broker, topic: &str) -> usize {
    std::fs::read_dir(broker.data_dir())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("{topic}-"))
        })
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_partitions_under_a_low_open_files_limit() {
    let cfg_dir = tempfile::tempdir().unwrap();
    // A first write to 20,000 partitions keeps the broker's two workers busy for
    // seconds: a longer lease, so this test measures the partitions, not the lease.
    let config = common::write_config(
        cfg_dir.path(),
        "[cluster]\nmax_partitions_per_broker = 25000\nlease_ms = 30000\nheartbeat_interval_ms = 2000\n",
    );
    let broker = Broker::start_limited(
        fast_tempdir(),
        &["--config", config.to_str().unwrap()],
        FD_LIMIT,
    )
    .await;
    let c = broker
        .client()
        .await
        .with_request_timeout(Duration::from_secs(120));
    let started = Instant::now();
    c.create_topic("wide", PARTITIONS, 1, BTreeMap::new())
        .await
        .unwrap();
    let created = started.elapsed();
    assert_eq!(partition_dirs(&broker, "wide"), PARTITIONS as usize);

    // One record to every partition.
    let started = Instant::now();
    let mut producer = Producer::new(c.clone(), "wide", Acks::Leader)
        .await
        .unwrap();
    let records = (0..PARTITIONS)
        .map(|p| ProducerRecord {
            partition: Some(p),
            value: Some(Bytes::from(format!("to-{p}"))),
            ..Default::default()
        })
        .collect();
    let acked = producer.send_all(records).await.unwrap();
    assert_eq!(acked.len(), PARTITIONS as usize);
    let produced = started.elapsed();
    let d = c.describe_topic("wide").await.unwrap();
    let short: Vec<i32> = d
        .partitions
        .iter()
        .filter(|p| p.high_watermark != 1)
        .map(|p| p.partition)
        .collect();
    assert!(
        short.is_empty(),
        "partitions without their record: {short:?}"
    );
    // Read a sample back (every partition's file may have been closed meanwhile).
    for p in (0..PARTITIONS).step_by(997) {
        let fetched = c.fetch_partition("wide", p, 0, 1 << 20, 0).await.unwrap();
        let values: Vec<_> = shale_records::record::decode_records(&fetched.records)
            .unwrap()
            .into_iter()
            .map(|r| r.value.unwrap())
            .collect();
        assert_eq!(
            values,
            vec![Bytes::from(format!("to-{p}"))],
            "partition {p}"
        );
    }
    let fds = open_fds(broker.pid());
    assert!(fds < FD_LIMIT as usize, "{fds} open files");

    // Over the per-broker limit: refused as a whole, nothing created.
    let err = c
        .create_topic("too-wide", 5_001, 1, BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::InvalidPartitions), "{err}");
    assert!(c.describe_topic("too-wide").await.is_err());
    assert_eq!(partition_dirs(&broker, "too-wide"), 0);

    // Deleting the topic removes its directories at once.
    let started = Instant::now();
    c.delete_topic("wide").await.unwrap();
    let deleted = started.elapsed();
    assert_eq!(partition_dirs(&broker, "wide"), 0);
    eprintln!(
        "[scale] {PARTITIONS} partitions under ulimit -n {FD_LIMIT}: created in {created:?}, \
         one record each in {produced:?}, deleted in {deleted:?}; {fds} files open"
    );
}

/// A partition that cannot be created (a file stands where its directory must go)
/// fails the whole topic creation with the reason; the topic is gone again, and so
/// are the partitions that were created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_whose_partitions_cannot_all_be_created_is_not_created() {
    let broker = Broker::start(&[]).await;
    let c = broker.client().await;
    std::fs::write(broker.data_dir().join("half-7"), b"in the way").unwrap();
    let err = c
        .create_topic("half", 10, 1, BTreeMap::new())
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(ErrorCode::KafkaStorageError), "{err}");
    assert!(err.to_string().contains("partition 7"), "{err}");
    assert!(
        c.list_topics()
            .await
            .unwrap()
            .iter()
            .all(|t| t.name != "half")
    );
    // Only the file that was in the way remains.
    assert_eq!(partition_dirs(&broker, "half"), 1);
    // With the obstacle gone the same topic can be created, and others meanwhile.
    std::fs::remove_file(broker.data_dir().join("half-7")).unwrap();
    c.create_topic("half", 10, 1, BTreeMap::new())
        .await
        .unwrap();
    c.describe_topic("half").await.unwrap();
}
