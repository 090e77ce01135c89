//! History outlives the cluster: a three-broker cluster on a real PostgreSQL and a
//! real S3 server (`s3s-fs`) writes a tiered topic and a group commits; the cluster is
//! killed and its metastore database dropped; a fresh cluster on a new database is
//! restored from the bucket alone with `shale cluster restore`, after refusing, and
//! writing nothing, while the bucket is damaged.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Broker, PgDatabase, S3Server};
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};
use shale_tiering::layout::{ObjectKind, SegmentMeta};
use shale_tiering::snapshot::{BrokerSnapshot, ClusterSnapshot, high_watermarks};

const TOPIC: &str = "history";
const PARTITIONS: i32 = 3;
const PER_PARTITION: i64 = 1000;
const GROUP: &str = "analytics";
const PREFIX: &str = "cluster";
/// A topic deleted before the last snapshot, whose objects were not all deleted.
const GONE: &str = "gone";

const CLUSTER_TOML: &str = "[cluster]\nlease_ms = 3000\nheartbeat_interval_ms = 500\n\
    controller_interval_ms = 200\nreplica_lag_time_max_ms = 2000\nreplica_fetch_max_wait_ms = 200\n\
    auto_balance_enable = false\n\
    [tiering]\nupload_interval_ms = 200\nsnapshot_interval_ms = 200\n\
    [log]\nmetadata_refresh_interval_ms = 500\nretention_check_interval_ms = 200\n";

/// Three brokers on one database and the test's bucket.
struct Cluster {
    brokers: Vec<Broker>,
    _db: PgDatabase,
}

impl Cluster {
    async fn start(s3: &S3Server, cfg: &Path) -> Self {
        let db = PgDatabase::create();
        let object_store = format!("s3://{}/{PREFIX}", s3.bucket);
        let brokers = common::start_brokers(cfg, &db.url(), &object_store, 3).await;
        Cluster { brokers, _db: db }
    }

    async fn client(&self) -> Client {
        let bootstrap: Vec<String> = self.brokers.iter().map(Broker::address).collect();
        Client::connect(&bootstrap.join(","))
            .await
            .unwrap()
            .with_request_timeout(Duration::from_secs(10))
    }

    /// Waits until every broker knows the topic with a leader for each partition.
    async fn wait_for_topic(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for b in &self.brokers {
            let c = Client::connect(&b.address()).await.unwrap();
            loop {
                let t = c.describe_topic(TOPIC).await;
                if t.as_ref().is_ok_and(|t| {
                    t.partitions.len() == PARTITIONS as usize
                        && t.partitions
                            .iter()
                            .all(|p| p.leader > 0 && p.isr.len() == 3)
                }) {
                    break;
                }
                assert!(Instant::now() < deadline, "{TOPIC} not ready: {t:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

fn value(p: i32, i: i64) -> String {
    format!("h-{p}-{i:05}-{}", "x".repeat(80))
}

/// Every `.meta` in the bucket, by partition and base offset.
fn metas(dir: &Path) -> BTreeMap<(i32, i64), SegmentMeta> {
    common::segment_objects_in(dir)
        .iter()
        .filter(|k| k.ends_with(".meta"))
        .map(|k| serde_json::from_slice::<SegmentMeta>(&std::fs::read(dir.join(k)).unwrap()))
        .map(Result::unwrap)
        .filter(|m| m.topic == TOPIC)
        .map(|m| ((m.partition, m.base_offset), m))
        .collect()
}

/// Every object outside `_shale/` with its size: what a refused restore must leave as
/// it was.
fn segment_files(dir: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "_shale") {
                    stack.push(path);
                }
            } else {
                let size = std::fs::metadata(&path).unwrap().len();
                out.insert(path.strip_prefix(dir).unwrap().to_path_buf(), size);
            }
        }
    }
    out
}

fn read_cluster(path: &Path) -> Option<ClusterSnapshot> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

fn read_broker(path: &Path) -> Option<BrokerSnapshot> {
    serde_json::from_slice(&std::fs::read(path).ok()?).ok()
}

/// Waits until the bucket's snapshots hold the group's offsets and every partition's
/// high watermark at `PER_PARTITION`.
async fn wait_for_snapshots(dir: &Path) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let clusters = std::fs::read_dir(dir.join("_shale/clusters"))
            .into_iter()
            .flatten();
        let cluster: Vec<ClusterSnapshot> = clusters
            .filter_map(|e| read_cluster(&e.ok()?.path()))
            .collect();
        let marks = high_watermarks(&broker_snapshots(dir));
        let grouped = cluster.iter().any(|c| {
            c.topics.iter().any(|t| t.name == TOPIC)
                && c.topics.iter().all(|t| t.name != GONE)
                && c.groups
                    .iter()
                    .any(|g| g.group == GROUP && g.offsets.len() == 3)
        });
        let hw: Vec<i64> = marks.values().map(|m| m.high_watermark).collect();
        if grouped && hw == vec![PER_PARTITION; PARTITIONS as usize] {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "snapshots incomplete: group {grouped}, high watermarks {hw:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn broker_snapshots(dir: &Path) -> Vec<BrokerSnapshot> {
    let mut out = Vec::new();
    for cluster in std::fs::read_dir(dir.join("_shale/brokers"))
        .into_iter()
        .flatten()
    {
        for b in std::fs::read_dir(cluster.unwrap().path())
            .into_iter()
            .flatten()
        {
            out.extend(read_broker(&b.unwrap().path()));
        }
    }
    out
}

/// Reads every partition from offset 0 up to `ends` (exclusive).
async fn read_all(client: Client, ends: &BTreeMap<i32, i64>) -> HashMap<(i32, i64), String> {
    let mut consumer = Consumer::new(client, TOPIC, None, StartFrom::Offset(0))
        .await
        .unwrap();
    let mut next: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let mut log = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while next.iter().any(|(p, o)| *o < ends[p]) {
        assert!(Instant::now() < deadline, "read to {next:?} of {ends:?}");
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            let expected = next.get_mut(&r.partition).unwrap();
            assert_eq!(
                r.offset, *expected,
                "offset gap in partition {}",
                r.partition
            );
            *expected += 1;
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            log.insert((r.partition, r.offset), v);
        }
    }
    log
}

/// Sends `records`, retrying while the brokers learn of a new topic.
async fn send(producer: &mut Producer, records: Vec<ProducerRecord>) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match producer.send_all(records.clone()).await {
            Ok(meta) => return meta.iter().map(|m| m.offset).collect(),
            Err(e) => {
                assert!(Instant::now() < deadline, "produce: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

fn cp(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

/// Creates topic `GONE`, lets segments of it reach the bucket, deletes it, and puts
/// its objects back, with their times, but for one `.log`: what a deletion cut off
/// halfway leaves. Returns its id.
async fn half_purged_topic(client: &Client, dir: &Path, scratch: &Path) -> String {
    let configs = [("remote.storage.enable", "true"), ("segment.bytes", "4096")];
    let configs = (configs.iter()).map(|(k, v)| (k.to_string(), v.to_string()));
    client
        .create_topic(GONE, 1, 3, configs.collect())
        .await
        .unwrap();
    let mut producer = (Producer::new(client.clone(), GONE, Acks::All)
        .await
        .unwrap())
    .with_batch_size(1024);
    let records = (0..200)
        .map(|i| ProducerRecord {
            partition: Some(0),
            value: Some(value(0, i).into()),
            ..Default::default()
        })
        .collect();
    send(&mut producer, records).await;
    let id = client
        .describe_topic(GONE)
        .await
        .unwrap()
        .topic
        .unwrap()
        .topic_id;
    let objects = dir.join(&id);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !common::segment_objects_in(&objects)
        .iter()
        .any(|o| o.ends_with(".meta"))
    {
        assert!(Instant::now() < deadline, "{GONE} never reached the bucket");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let aside = scratch.join(GONE);
    cp(&objects, &aside);
    client.delete_topic(GONE).await.unwrap();
    while !common::segment_objects_in(&objects).is_empty() {
        assert!(
            Instant::now() < deadline,
            "{GONE}'s objects were not deleted"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    std::fs::remove_dir_all(&objects).unwrap();
    cp(&aside, &objects);
    let mut logs = common::segment_objects_in(&objects);
    logs.retain(|o| o.ends_with(".log"));
    logs.sort();
    std::fs::remove_file(objects.join(&logs[0])).unwrap();
    id
}

/// Runs `shale cluster restore` through `broker`; its stdout, or its stderr on failure.
fn restore(broker: &Broker, extra: &[&str]) -> Result<String, String> {
    let mut args = vec!["-o", "json", "cluster", "restore"];
    args.extend(extra);
    let out = broker.cli(&args, None);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

/// The restore is refused naming `object`, and the new cluster and the bucket are as
/// they were.
async fn assert_refused(cluster: &Cluster, dir: &Path, object: &str, what: &str) {
    let before = segment_files(dir);
    let err = restore(&cluster.brokers[0], &["--force"]).expect_err(what);
    assert!(
        err.contains(object),
        "{what}: the refusal names {object}: {err}"
    );
    assert!(
        cluster
            .client()
            .await
            .list_topics()
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        segment_files(dir),
        before,
        "{what}: the bucket was written to"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_restored_from_the_bucket_alone_serves_every_uploaded_record_and_resumes_its_group()
 {
    let s3 = S3Server::start("shale-restore");
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(CLUSTER_TOML));
    let dir = s3.objects_dir(PREFIX);

    // The first cluster: a tiered topic, records in the bucket and in local tails, and
    // a group's committed offsets.
    let first = Cluster::start(&s3, &cfg).await;
    let client = first.client().await;
    let configs = [
        ("remote.storage.enable", "true"),
        ("segment.bytes", "4096"),
        ("min.insync.replicas", "2"),
        ("retention.ms", "-1"),
    ];
    let configs = configs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    client
        .create_topic(TOPIC, PARTITIONS, 3, configs)
        .await
        .unwrap();
    first.wait_for_topic().await;
    // Small batches, so that segments of 4 KiB seal as the records come.
    let mut producer = (Producer::new(client.clone(), TOPIC, Acks::All)
        .await
        .unwrap())
    .with_batch_size(1024);
    for p in 0..PARTITIONS {
        let records = (0..PER_PARTITION)
            .map(|i| ProducerRecord {
                partition: Some(p),
                value: Some(value(p, i).into()),
                ..Default::default()
            })
            .collect();
        producer.send_all(records).await.unwrap();
    }
    let gone = half_purged_topic(&client, &dir, cfg_dir.path()).await;
    let committed = BTreeMap::from([
        ((TOPIC.to_string(), 0), 100),
        ((TOPIC.to_string(), 1), PER_PARTITION),
        ((TOPIC.to_string(), 2), 500),
    ]);
    client
        .commit_group_offsets(GROUP, &committed)
        .await
        .unwrap();
    // Most of each partition reaches the bucket; the active segments stay local.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let ends: Vec<i64> = (0..PARTITIONS)
            .map(|p| {
                metas(&dir)
                    .values()
                    .filter(|m| m.partition == p)
                    .map(|m| m.end_offset)
                    .max()
                    .unwrap_or(-1)
            })
            .collect();
        if ends.iter().all(|e| *e >= PER_PARTITION / 2) {
            break;
        }
        if Instant::now() > deadline {
            let log = first.brokers[0].log();
            let tail = &log[log.len().saturating_sub(4000)..];
            panic!("uploads: {ends:?}; broker 1's log ends:\n{tail}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    wait_for_snapshots(&dir).await;
    let topic_id = client
        .describe_topic(TOPIC)
        .await
        .unwrap()
        .topic
        .unwrap()
        .topic_id;
    drop(client);
    drop(producer);
    drop(first); // killed, and its database dropped

    // What the bucket holds now is what comes back.
    let uploaded = metas(&dir);
    let remote_end: BTreeMap<i32, i64> = (0..PARTITIONS)
        .map(|p| {
            let mut ms: Vec<&SegmentMeta> =
                uploaded.values().filter(|m| m.partition == p).collect();
            ms.sort_by_key(|m| m.base_offset);
            assert_eq!(ms[0].base_offset, 0);
            assert!(
                ms.windows(2)
                    .all(|w| w[0].end_offset + 1 == w[1].base_offset)
            );
            (p, ms.last().unwrap().end_offset)
        })
        .collect();

    // A fresh cluster on a new database, the same bucket.
    let second = Cluster::start(&s3, &cfg).await;
    // Damaged buckets are refused, naming the object, and nothing is written.
    let middle = uploaded
        .values()
        .filter(|m| m.partition == 0)
        .nth(3)
        .unwrap();
    let key = middle.key();
    let log = dir.join(key.path(ObjectKind::Log).as_ref());
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 7]).unwrap();
    assert_refused(
        &second,
        &dir,
        key.path(ObjectKind::Log).as_ref(),
        "a truncated .log",
    )
    .await;
    std::fs::write(&log, &bytes).unwrap();
    let meta = dir.join(key.path(ObjectKind::Meta).as_ref());
    let aside = cfg_dir.path().join("aside.meta");
    std::fs::rename(&meta, &aside).unwrap();
    assert_refused(
        &second,
        &dir,
        key.path(ObjectKind::Meta).as_ref(),
        "a missing .meta",
    )
    .await;
    std::fs::rename(&aside, &meta).unwrap();
    let foreign = dir.join(format!("{topic_id}/0/notes.txt"));
    std::fs::write(&foreign, b"not a segment").unwrap();
    assert_refused(
        &second,
        &dir,
        &format!("{topic_id}/0/notes.txt"),
        "a foreign object",
    )
    .await;
    std::fs::remove_file(&foreign).unwrap();
    // Another bucket than the cluster's is refused too.
    let err = restore(&second.brokers[0], &["--from", "s3://elsewhere/x"]).unwrap_err();
    assert!(err.contains("s3://elsewhere/x"), "{err}");
    // The first cluster's brokers wrote to the bucket moments ago: without --force the
    // restore takes them for running still.
    let err = restore(&second.brokers[0], &[]).unwrap_err();
    assert!(err.contains("may still be running"), "{err}");

    // The restore: what it says it brought back, and lost.
    let from = format!("s3://{}/{PREFIX}", s3.bucket);
    let dry: serde_json::Value = serde_json::from_str(
        &restore(
            &second.brokers[1],
            &["--from", &from, "--dry-run", "--force"],
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(dry["dry_run"], true);
    assert!(
        second
            .client()
            .await
            .list_topics()
            .await
            .unwrap()
            .is_empty()
    );
    let report: serde_json::Value =
        serde_json::from_str(&restore(&second.brokers[1], &["--from", &from, "--force"]).unwrap())
            .unwrap();
    println!("restore report: {report:#}");
    let topic = &report["topics"][0];
    assert_eq!(topic["topic"], TOPIC);
    assert_eq!(topic["topic_id"], topic_id);
    assert_eq!(topic["from_snapshot"], true);
    assert_eq!(topic["existed"], false);
    let mut lost = 0;
    for p in 0..PARTITIONS {
        let part = &topic["partitions"][p as usize];
        let end = remote_end[&p];
        assert_eq!(part["remote_start_offset"], 0);
        assert_eq!(part["remote_end_offset"], end);
        assert_eq!(part["next_offset"], end + 1);
        assert_eq!(part["snapshot_high_watermark"], PER_PARTITION);
        assert_eq!(
            part["lost_records"],
            PER_PARTITION - end - 1,
            "partition {p}"
        );
        lost += PER_PARTITION - end - 1;
    }
    assert_eq!(report["lost_records"], lost);
    // The deleted topic stays deleted: it is not in the snapshot and none of its
    // objects is newer.
    assert_eq!(report["topics"].as_array().unwrap().len(), 1);
    let ignored = report["ignored"].as_array().unwrap();
    assert!(
        ignored
            .iter()
            .any(|i| i.as_str().unwrap().contains(&format!("'{GONE}' ({gone})"))),
        "{ignored:?}"
    );
    assert_eq!(report["groups"][0]["group"], GROUP);
    assert_eq!(report["groups"][0]["moved_back"], 1);
    // Run again (after a failure, say), it leaves the topic it restored as it is.
    let again: serde_json::Value =
        serde_json::from_str(&restore(&second.brokers[0], &["--topic", TOPIC, "--force"]).unwrap())
            .unwrap();
    assert_eq!(again["topics"][0]["existed"], true);

    // Every uploaded record, at its offset, from the new cluster.
    second.wait_for_topic().await;
    let client = second.client().await;
    let ends: BTreeMap<i32, i64> = remote_end.iter().map(|(p, e)| (*p, e + 1)).collect();
    let log = read_all(client.clone(), &ends).await;
    for (p, end) in &ends {
        for i in 0..*end {
            assert_eq!(log.get(&(*p, i)), Some(&value(*p, i)), "{p}:{i}");
        }
    }
    // The group resumes where it was, or, past what survived, at the log's new end.
    let offsets = client.committed_offsets(GROUP).await.unwrap();
    assert_eq!(offsets[&(TOPIC.to_string(), 0)], 100);
    assert_eq!(offsets[&(TOPIC.to_string(), 1)], ends[&1]);
    assert_eq!(offsets[&(TOPIC.to_string(), 2)], 500);
    // The topic takes writes from the remote log's end.
    let mut producer = Producer::new(client.clone(), TOPIC, Acks::All)
        .await
        .unwrap();
    for p in 0..PARTITIONS {
        let record = ProducerRecord {
            partition: Some(p),
            value: Some("after".into()),
            ..Default::default()
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let meta = loop {
            match producer.send_all(vec![record.clone()]).await {
                Ok(m) => break m,
                Err(e) => {
                    assert!(Instant::now() < deadline, "produce after restore: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        };
        assert_eq!(meta[0].offset, ends[&p], "partition {p}");
    }
}
