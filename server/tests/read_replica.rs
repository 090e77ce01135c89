//! Read-replica topics with real brokers, PostgreSQL and `s3s-fs`: a producing cluster
//! writes a tiered topic to its bucket; a second cluster, on its own database and its
//! own prefix, serves the topic read-only from the first one's bucket. It follows new
//! segments within its poll interval and a segment roll, serves a full replay while
//! the producing broker is paused (so the replay asks nothing of it), and refuses
//! writes.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Broker, PgDatabase, S3Server};
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};
use shale_records::ErrorCode;

const TOPIC: &str = "clicks";
const PARTITIONS: i32 = 2;

/// One broker on its own database and prefix of the test's bucket.
async fn broker(
    s3: &S3Server,
    prefix: &str,
    toml: &str,
) -> (Broker, PgDatabase, tempfile::TempDir) {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(toml));
    let db = PgDatabase::create();
    let url = format!("s3://{}/{prefix}", s3.bucket);
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--metastore-url",
        &db.url(),
        "--object-store-url",
        &url,
    ];
    (Broker::start(&args).await, db, cfg_dir)
}

fn value(p: i32, i: i64) -> String {
    format!("c-{p}-{i:05}-{}", "y".repeat(60))
}

async fn produce(c: &Client, from: i64, to: i64) {
    let mut producer =
        (Producer::new(c.clone(), TOPIC, Acks::All).await.unwrap()).with_batch_size(1024);
    for p in 0..PARTITIONS {
        let records = (from..to)
            .map(|i| ProducerRecord {
                partition: Some(p),
                value: Some(value(p, i).into()),
                ..Default::default()
            })
            .collect();
        producer.send_all(records).await.unwrap();
    }
}

/// Each partition's latest offset as `c` answers.
async fn ends(c: &Client) -> Vec<i64> {
    let mut out = Vec::new();
    for p in 0..PARTITIONS {
        out.push(c.list_offset(TOPIC, p, -1).await.unwrap().unwrap_or(-1));
    }
    out
}

/// Waits until the replica's ends reach `want`; returns how long it took.
async fn wait_for_ends(c: &Client, want: i64, what: &str) -> Duration {
    let start = Instant::now();
    loop {
        let now = ends(c).await;
        if now.iter().all(|e| *e >= want) {
            return start.elapsed();
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "{what}: the replica is at {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Reads every partition from offset 0 to `to`, each record checked.
async fn replay(c: Client, to: i64) {
    let mut consumer = Consumer::new(c, TOPIC, None, StartFrom::Earliest)
        .await
        .unwrap();
    let mut next: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while next.values().any(|o| *o < to) {
        assert!(Instant::now() < deadline, "replay stuck at {next:?}");
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            let expected = next.get_mut(&r.partition).unwrap();
            assert_eq!(r.offset, *expected, "partition {}", r.partition);
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            assert_eq!(v, value(r.partition, r.offset));
            *expected += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_replica_follows_the_source_bucket_serves_replays_alone_and_refuses_writes() {
    let s3 = S3Server::start("shale-replica");
    // The producing cluster seals a quiet partition's segment after 2 s, so the tail
    // reaches the bucket soon.
    let (source, _db, _cfg) = broker(
        &s3,
        "source",
        "[tiering]\nupload_interval_ms = 200\nmax_local_only_ms = 2000\nsnapshot_interval_ms = 200\n",
    )
    .await;
    let (mut replica, _db2, _cfg2) = broker(
        &s3,
        "replay",
        "[tiering]\nread_replica_poll_interval_ms = 500\n",
    )
    .await;
    let src = source.client().await;
    let configs = [("remote.storage.enable", "true"), ("segment.bytes", "4096")];
    let configs = configs.iter().map(|(k, v)| (k.to_string(), v.to_string()));
    src.create_topic(TOPIC, PARTITIONS, 1, configs.collect())
        .await
        .unwrap();
    produce(&src, 0, 1000).await;

    // The replica: created by name from the source's bucket, with its id and
    // partition count, once the source's snapshot has the topic.
    let from = format!("s3://{}/source", s3.bucket);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = replica.cli(
            &["topic", "create", TOPIC, "--read-replica-of", &from],
            None,
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if out.status.success() {
            assert!(stdout.contains("created topic"), "{stdout}");
            break;
        }
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(stderr.contains("no snapshot"), "{stderr}");
        assert!(Instant::now() < deadline, "{stderr}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let rep = replica.client().await;
    let described = rep.describe_topic(TOPIC).await.unwrap();
    let source_topic = src.describe_topic(TOPIC).await.unwrap();
    assert_eq!(
        described.topic.as_ref().unwrap().topic_id,
        source_topic.topic.unwrap().topic_id
    );
    assert_eq!(described.partitions.len(), PARTITIONS as usize);
    assert_eq!(described.configs["read.replica.of"], from);
    let took = wait_for_ends(&rep, 1000, "every record reaches the replica").await;
    eprintln!("[read replica] 1000 records a partition followed in {took:?}");
    // Its leaders' epochs stay above the source's batches' (clients remember those).
    let source_epochs = (src.describe_topic(TOPIC).await.unwrap().partitions.iter())
        .map(|p| p.leader_epoch)
        .max()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let partitions = rep.describe_topic(TOPIC).await.unwrap().partitions;
        if partitions.iter().all(|p| p.leader_epoch > source_epochs) {
            break;
        }
        assert!(Instant::now() < deadline, "replica epochs {partitions:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Writes are refused, with a clear error, and change nothing.
    let mut producer = Producer::new(rep.clone(), TOPIC, Acks::All).await.unwrap();
    let refused = producer
        .send_all(vec![ProducerRecord {
            partition: Some(0),
            value: Some("nope".into()),
            ..Default::default()
        }])
        .await
        .unwrap_err();
    assert_eq!(
        refused.code(),
        Some(ErrorCode::InvalidTopicException),
        "{refused}"
    );
    assert!(refused.to_string().contains("read replica"), "{refused}");
    assert!(rep.delete_records(TOPIC, 0, 10).await.is_err());
    assert_eq!(ends(&rep).await, vec![1000; PARTITIONS as usize]);

    // A full replay from offset 0 while the producing broker is paused: the replay
    // cannot ask it anything.
    source.pause();
    replay(rep.clone(), 1000).await;
    // Restarted, the replica serves nothing before it has read its source again (a
    // consumer starting at the earliest offset must not be sent past the history).
    replica.restart().await;
    replay(replica.client().await, 1000).await;
    source.resume();

    // New records follow: within the poll interval and a segment roll.
    produce(&src, 1000, 1100).await;
    let took = wait_for_ends(&rep, 1100, "new records reach the replica").await;
    eprintln!("[read replica] new records followed in {took:?}");

    // A partition the source adds is followed once its segments reach the bucket.
    src.create_partitions(TOPIC, PARTITIONS + 1).await.unwrap();
    let added = (0..50)
        .map(|i| ProducerRecord {
            partition: Some(PARTITIONS),
            value: Some(value(PARTITIONS, i).into()),
            ..Default::default()
        })
        .collect::<Vec<_>>();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sent = async {
            let mut p = Producer::new(src.clone(), TOPIC, Acks::All).await?;
            p.send_all(added.clone()).await
        };
        match sent.await {
            Ok(_) => break,
            Err(e) => assert!(
                Instant::now() < deadline,
                "produce to the new partition: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let start = Instant::now();
    loop {
        let at = rep.list_offset(TOPIC, PARTITIONS, -1).await.ok().flatten();
        if at == Some(50) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the new partition is at {at:?} on the replica"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!(
        "[read replica] a new partition followed in {:?}",
        start.elapsed()
    );
    let mut consumer = Consumer::new(
        rep.clone(),
        TOPIC,
        Some(vec![PARTITIONS]),
        StartFrom::Earliest,
    )
    .await
    .unwrap();
    let mut read = Vec::new();
    while read.len() < 50 {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "read {} of 50",
            read.len()
        );
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            read.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    let want: Vec<String> = (0..50).map(|i| value(PARTITIONS, i)).collect();
    assert_eq!(read, want);
    drop(source);
}
