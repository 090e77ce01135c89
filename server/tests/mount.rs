//! Unmount and mount with real brokers, PostgreSQL and `s3s-fs`: a two-broker cluster
//! writes a tiered topic and a group commits; `shale topic unmount` takes every record
//! to the bucket and drops the topic, leaving its objects; a second cluster, on its
//! own database and the same bucket, refuses the topic while a `.log` is damaged,
//! then mounts it and takes writes after its end. Every record is read back at its
//! offset, the group resumes where it was, the first cluster can no longer mount the
//! topic the second one owns, and a third cluster restored from the bucket leaves it
//! out, unmounted as mounted.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{Broker, PgDatabase, S3Server};
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};
use shale_records::ErrorCode;

const TOPIC: &str = "archive";
const PARTITIONS: i32 = 2;
const BEFORE: i64 = 400;
const AFTER: i64 = 100;
const GROUP: &str = "replay";
const PREFIX: &str = "shared";

const TOML: &str = "[cluster]\nlease_ms = 3000\nheartbeat_interval_ms = 500\n\
    controller_interval_ms = 200\nreplica_lag_time_max_ms = 2000\nreplica_fetch_max_wait_ms = 200\n\
    auto_balance_enable = false\n\
    [tiering]\nupload_interval_ms = 200\nsnapshot_interval_ms = 200\n\
    [log]\nmetadata_refresh_interval_ms = 500\nretention_check_interval_ms = 200\n";

/// `count` brokers on one new database, on the test's bucket and prefix.
async fn cluster(s3: &S3Server, cfg: &Path, count: i32) -> (Vec<Broker>, PgDatabase) {
    let db = PgDatabase::create();
    let object_store = format!("s3://{}/{PREFIX}", s3.bucket);
    let brokers = common::start_brokers(cfg, &db.url(), &object_store, count).await;
    (brokers, db)
}

fn value(p: i32, i: i64) -> String {
    format!("m-{p}-{i:05}-{}", "z".repeat(70))
}

async fn produce(c: &Client, from: i64, to: i64) -> Vec<i64> {
    let mut producer =
        (Producer::new(c.clone(), TOPIC, Acks::All).await.unwrap()).with_batch_size(1024);
    let mut offsets = Vec::new();
    for p in 0..PARTITIONS {
        let records: Vec<ProducerRecord> = (from..to)
            .map(|i| ProducerRecord {
                partition: Some(p),
                value: Some(value(p, i).into()),
                ..Default::default()
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match producer.send_all(records.clone()).await {
                Ok(meta) => {
                    offsets.extend(meta.iter().map(|m| m.offset));
                    break;
                }
                Err(e) => {
                    assert!(Instant::now() < deadline, "produce: {e}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }
    offsets
}

/// Reads every partition from offset 0 up to `end` (exclusive).
async fn read_all(client: Client, end: i64) -> HashMap<(i32, i64), String> {
    let mut consumer = Consumer::new(client, TOPIC, None, StartFrom::Offset(0))
        .await
        .unwrap();
    let mut next: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let mut log = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while next.values().any(|o| *o < end) {
        assert!(Instant::now() < deadline, "read to {next:?} of {end}");
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            let expected = next.get_mut(&r.partition).unwrap();
            assert_eq!(r.offset, *expected, "gap in partition {}", r.partition);
            *expected += 1;
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            log.insert((r.partition, r.offset), v);
        }
    }
    log
}

/// The `.log` objects of the topic in the bucket.
fn logs(dir: &Path, id: &str) -> Vec<String> {
    let mut out: Vec<String> = common::segment_objects_in(&dir.join(id))
        .into_iter()
        .filter(|o| o.ends_with(".log"))
        .collect();
    out.sort();
    out
}

fn cli(broker: &Broker, args: &[&str]) -> Result<String, String> {
    let out = broker.cli(args, None);
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    if out.status.success() {
        Ok(text(&out.stdout))
    } else {
        Err(text(&out.stderr))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unmounted_topic_is_mounted_on_another_cluster_at_its_offsets_and_takes_writes() {
    let s3 = S3Server::start("shale-mount");
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(TOML));
    let dir = s3.objects_dir(PREFIX);

    let (first, _first_db) = cluster(&s3, &cfg, 2).await;
    let client = first[0].client().await;
    let configs = [
        ("remote.storage.enable", "true"),
        ("segment.bytes", "4096"),
        ("retention.ms", "-1"),
    ];
    let configs = (configs.iter()).map(|(k, v)| (k.to_string(), v.to_string()));
    client
        .create_topic(TOPIC, PARTITIONS, 2, configs.collect())
        .await
        .unwrap();
    produce(&client, 0, BEFORE).await;
    let committed = BTreeMap::from([
        ((TOPIC.to_string(), 0), 100),
        ((TOPIC.to_string(), 1), BEFORE),
    ]);
    client
        .commit_group_offsets(GROUP, &committed)
        .await
        .unwrap();
    let id = (client.describe_topic(TOPIC).await.unwrap().topic.unwrap()).topic_id;

    // A read-only topic takes no writes.
    let read_only = BTreeMap::from([("read.only".to_string(), "true".to_string())]);
    (client.alter_configs(TOPIC, read_only, Vec::new()))
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut producer = Producer::new(client.clone(), TOPIC, Acks::All)
        .await
        .unwrap();
    let refused = loop {
        let record = ProducerRecord {
            partition: Some(0),
            value: Some("late".into()),
            ..Default::default()
        };
        match producer.send_all(vec![record]).await {
            Err(e) => break e,
            Ok(_) => {
                // Accepted before the leader saw the config: it is unmounted with the rest.
                assert!(
                    Instant::now() < deadline,
                    "a read-only topic kept taking writes"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(
        refused.code(),
        Some(ErrorCode::InvalidTopicException),
        "{refused}"
    );
    assert!(refused.to_string().contains("read-only"), "{refused}");
    let ends: Vec<i64> = {
        let mut ends = Vec::new();
        for p in 0..PARTITIONS {
            ends.push(client.list_offset(TOPIC, p, -1).await.unwrap().unwrap());
        }
        ends
    };
    assert_eq!(ends[1], BEFORE);

    // Unmount: everything reaches the bucket, the topic leaves the first cluster.
    let out = cli(
        &first[1],
        &["-o", "json", "topic", "unmount", TOPIC, "--timeout", "60"],
    )
    .expect("unmount");
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(out["topic_id"], id.as_str());
    assert!(dir.join(format!("_shale/unmounted/{id}.json")).exists());
    assert!(
        client
            .list_topics()
            .await
            .unwrap()
            .iter()
            .all(|t| t.name != TOPIC)
    );
    let objects = logs(&dir, &id);
    assert!(!objects.is_empty());
    tokio::time::sleep(Duration::from_secs(1)).await; // retention passes: nothing goes
    assert_eq!(
        logs(&dir, &id),
        objects,
        "the unmounted topic's objects stay"
    );
    let again = cli(&first[0], &["topic", "unmount", TOPIC]).expect_err("unmounted");
    assert!(again.contains("was unmounted already"), "{again}");

    // A cluster restored from the bucket leaves the unmounted topic to a mount.
    let (third, _third_db) = cluster(&s3, &cfg, 1).await;
    let restore = ["-o", "json", "cluster", "restore", "--force"];
    let out = cli(&third[0], &restore).expect("restore");
    assert!(out.contains("left out: unmounted at"), "{out}");
    let c3 = third[0].client().await;
    assert!(c3.list_topics().await.unwrap().is_empty());

    // A second cluster on the same bucket: a damaged prefix is refused, naming the object.
    let (second, _second_db) = cluster(&s3, &cfg, 1).await;
    let damaged = dir.join(&id).join(&objects[0]);
    let whole = std::fs::read(&damaged).unwrap();
    std::fs::write(&damaged, &whole[..whole.len() / 2]).unwrap();
    let err = cli(&second[0], &["topic", "mount", TOPIC]).expect_err("a truncated .log");
    let name = Path::new(&objects[0])
        .file_name()
        .unwrap()
        .to_str()
        .unwrap();
    assert!(err.contains(name), "the refusal names {name}: {err}");
    let c2 = second[0].client().await;
    assert!(c2.list_topics().await.unwrap().is_empty());
    assert_eq!(
        std::fs::read(&damaged).unwrap().len(),
        whole.len() / 2,
        "nothing written"
    );
    let owner = dir.join(format!("_shale/owners/{id}.json"));
    assert!(!owner.exists(), "a refused mount takes no ownership");
    std::fs::write(&damaged, &whole).unwrap();
    let description = dir.join(format!("_shale/unmounted/{id}.json"));
    let described = std::fs::read(&description).unwrap();

    let out = cli(
        &second[0],
        &[
            "-o",
            "json",
            "topic",
            "mount",
            TOPIC,
            "--replication-factor",
            "1",
        ],
    )
    .expect("mount");
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    let partitions = out["topic"]["partitions"].as_array().unwrap();
    for (p, end) in ends.iter().enumerate() {
        assert_eq!(partitions[p]["next_offset"], *end, "{out}");
        assert_eq!(partitions[p]["lost_records"], 0, "{out}");
    }
    assert!(owner.exists());
    let mounted = c2.describe_topic(TOPIC).await.unwrap().topic.unwrap();
    assert_eq!(mounted.topic_id, id, "the topic keeps its id");

    assert!(
        !description.exists(),
        "a mounted topic's description is used up"
    );

    // The first cluster cannot take it back while the second one has it, even from a
    // description left behind.
    let err = cli(&first[0], &["topic", "mount", TOPIC]).expect_err("nothing to mount");
    assert!(err.contains("no topic 'archive' was unmounted"), "{err}");
    std::fs::write(&description, &described).unwrap();
    let err = cli(&first[0], &["topic", "mount", TOPIC]).expect_err("owned by the second");
    assert!(err.contains("is mounted by cluster"), "{err}");
    assert!(client.list_topics().await.unwrap().is_empty());

    // Writes go on after the end; every record is at its offset.
    let offsets = produce(&c2, BEFORE, BEFORE + AFTER).await;
    assert_eq!(offsets[0], ends[0], "partition 0 goes on from its end");
    let log = read_all(c2.clone(), ends[1] + AFTER).await;
    for p in 0..PARTITIONS {
        let base = ends[p as usize] - BEFORE;
        for i in 0..BEFORE + AFTER {
            let at = if i < BEFORE { i } else { base + i };
            assert_eq!(
                log.get(&(p, at)),
                Some(&value(p, i)),
                "partition {p} offset {at}"
            );
        }
    }
    assert_eq!(c2.committed_offsets(GROUP).await.unwrap(), committed);

    // Nor does it take the topic a running cluster mounted.
    let out = cli(&third[0], &restore).expect("restore");
    assert!(out.contains("mounted by cluster"), "{out}");
    assert!(c3.list_topics().await.unwrap().is_empty());
}
