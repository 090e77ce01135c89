//! Log compaction (`cleanup.policy=compact`) on real brokers: what a consumer reads
//! from a cleaned log, a crash at each step of a cleaning (failpoints abort the broker
//! for real) on SQLite and on PostgreSQL, and replicas that each clean their own log
//! through a fail-over.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Broker, PgDatabase, S3Server};
use shale_client::{Acks, Client, Producer, ProducerRecord};
use shale_records::ErrorCode;
use shale_records::batch::BatchIter;
use shale_records::record::{BatchBuilder, Record, decode_records};

/// A cleaner that looks every 200 ms.
const CLEANER_TOML: &str = "[log]\ncleaner_backoff_ms = 200\nmetadata_refresh_interval_ms = 500\n";

fn compacted(extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut c: BTreeMap<String, String> = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "8192"),
        ("min.cleanable.dirty.ratio", "0.01"),
        ("remote.storage.enable", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        c.insert(k.to_string(), v.to_string());
    }
    c
}

fn update(key: usize, seq: usize) -> ProducerRecord {
    ProducerRecord {
        key: Some(format!("key-{key:04}").into()),
        value: Some(format!("{seq:08}-{}", "v".repeat(40)).into()),
        partition: Some(0),
        ..Default::default()
    }
}

fn tombstone(key: usize) -> ProducerRecord {
    ProducerRecord {
        key: Some(format!("key-{key:04}").into()),
        value: None,
        partition: Some(0),
        ..Default::default()
    }
}

/// Sends `rounds` updates of each of `keys` keys, each batch again until it is
/// acknowledged (through a fail-over); returns the last value of each key.
async fn produce_updates(
    c: &Client,
    topic: &str,
    keys: usize,
    rounds: usize,
    first_seq: usize,
) -> HashMap<String, Option<Bytes>> {
    let mut p = Producer::new(c.clone(), topic, Acks::All)
        .await
        .unwrap()
        .with_batch_size(4096);
    let mut latest = HashMap::new();
    for round in 0..rounds {
        let records: Vec<_> = (0..keys).map(|k| update(k, first_seq + round)).collect();
        send_until_acked(&mut p, &records).await;
        for r in records {
            let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
            latest.insert(key, r.value);
        }
    }
    latest
}

async fn send_until_acked(p: &mut Producer, records: &[ProducerRecord]) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while let Err(e) = p.send_all(records.to_vec()).await {
        assert!(Instant::now() < deadline, "never acknowledged: {e}");
        eprintln!("send failed (not acknowledged), again: {e}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Every record of partition 0 from offset 0, as a consumer reads it: (offset, key,
/// value). Checks that offsets only grow and that a fetch always moves on.
async fn read_all(c: &Client, topic: &str) -> Vec<(i64, String, Option<Bytes>)> {
    let end = c.list_offset(topic, 0, -1).await.unwrap().unwrap();
    let mut out: Vec<(i64, String, Option<Bytes>)> = Vec::new();
    let mut offset = 0;
    while offset < end {
        let part = c
            .fetch_partition(topic, 0, offset, 1 << 20, 0)
            .await
            .unwrap();
        assert_eq!(
            part.error_code, 0,
            "fetch at {offset}: {}",
            part.error_message
        );
        assert!(
            !part.records.is_empty(),
            "a fetch at {offset} returned nothing"
        );
        for item in BatchIter::new(&part.records) {
            let (h, range) = item.unwrap();
            for r in decode_records(&part.records.slice(range)).unwrap() {
                if r.offset >= offset {
                    if let Some(last) = out.last() {
                        assert!(r.offset > last.0, "offsets went back at {}", r.offset);
                    }
                    let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                    out.push((r.offset, key, r.value));
                }
            }
            offset = offset.max(h.last_offset() + 1);
        }
    }
    out
}

/// The last value read for each key (`None`: a tombstone).
fn latest_of(records: &[(i64, String, Option<Bytes>)]) -> HashMap<String, Option<Bytes>> {
    records
        .iter()
        .map(|(_, k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Waits until this broker's replica of partition 0 was cleaned after `after_ms`, with
/// no sealed segment left dirty.
async fn wait_cleaned(b: &Broker, topic: &str, after_ms: i64) -> i64 {
    let c = Client::connect(&b.address()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = c.describe_topic(topic).await.unwrap();
        let p = &d.partitions[0];
        // A cleaning during the writes may leave later segments dirty: wait for one
        // that left none.
        if p.last_cleaned_ms > after_ms && p.dirty_bytes == 0 {
            return p.last_cleaned_ms;
        }
        assert!(
            Instant::now() < deadline,
            "broker {} never cleaned {topic}: {p:?}\n{}",
            b.address(),
            b.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn no_leftovers(data_dir: &Path) {
    for entry in walk(data_dir) {
        let name = entry.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            !name.ends_with(".cleaned") && !name.ends_with(".swap"),
            "a cleaning left {name} behind"
        );
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compacted_topic_keeps_the_latest_value_of_each_key() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), CLEANER_TOML);
    let http_port = common::free_port();
    let http = format!("127.0.0.1:{http_port}");
    let mut broker =
        Broker::start(&["--config", cfg.to_str().unwrap(), "--http-listen", &http]).await;
    let c = broker.client().await;
    c.create_topic("cdc", 1, 1, compacted(&[("delete.retention.ms", "2000")]))
        .await
        .unwrap();

    // A record without a key is refused, and nothing is written.
    let mut b = BatchBuilder::new(1_000);
    b.push(Record::new(Some(b"k"), Some(b"v"), 1_000));
    b.push(Record::new(None, Some(b"no key"), 1_000));
    let r = c.produce_raw("cdc", 0, -1, b.build()).await.unwrap();
    assert_eq!(r.error_code, ErrorCode::InvalidRecord as i32, "{r:?}");
    assert!(r.error_message.contains("key"), "{}", r.error_message);
    assert_eq!(c.list_offset("cdc", 0, -1).await.unwrap(), Some(0));
    // So is a batch claiming a delete horizon (only the cleaner sets one).
    let mut b = BatchBuilder::new(1_000);
    b.push(Record::new(Some(b"k"), None, 1_000));
    let mut raw = b.build().to_vec();
    raw[22] |= 0x40;
    let crc = crc32c::crc32c(&raw[21..]);
    raw[17..21].copy_from_slice(&crc.to_be_bytes());
    let r = c.produce_raw("cdc", 0, -1, raw.into()).await.unwrap();
    assert_eq!(r.error_code, ErrorCode::InvalidRecord as i32, "{r:?}");
    assert_eq!(c.list_offset("cdc", 0, -1).await.unwrap(), Some(0));

    let mut model = produce_updates(&c, "cdc", 200, 20, 0).await;
    // Tombstones for the first 20 keys, then updates of one more key, so that the
    // segments holding them are sealed and cleaned.
    let mut p = Producer::new(c.clone(), "cdc", Acks::All).await.unwrap();
    send_until_acked(&mut p, &(0..20).map(tombstone).collect::<Vec<_>>()).await;
    for k in 0..20 {
        model.insert(format!("key-{k:04}"), None);
    }
    model.extend(produce_updates(&c, "cdc", 1, 200, 1_000).await);

    let first_clean = wait_cleaned(&broker, "cdc", 0).await;
    let produced = c.list_offset("cdc", 0, -1).await.unwrap().unwrap();
    let records = read_all(&c, "cdc").await;
    assert!(
        (records.len() as i64) < produced / 3,
        "{} records left of {produced}",
        records.len()
    );
    assert_eq!(latest_of(&records), model, "the latest value of each key");

    // A fetch at an offset compaction removed answers the next batch that stayed.
    let gone = (0..produced)
        .find(|o| !records.iter().any(|r| r.0 == *o))
        .expect("compaction removed an offset");
    let part = c.fetch_partition("cdc", 0, gone, 1 << 20, 0).await.unwrap();
    let (h, _) = BatchIter::new(&part.records).next().unwrap().unwrap();
    assert!(h.last_offset() >= gone, "{gone}: {h:?}");
    // ListOffsets: earliest, latest, and a timestamp lookup land on offsets that exist.
    assert_eq!(c.list_offset("cdc", 0, -2).await.unwrap(), Some(0));
    assert_eq!(c.list_offset("cdc", 0, -1).await.unwrap(), Some(produced));
    let ts = c.list_offset("cdc", 0, 0).await.unwrap().unwrap();
    assert!(ts < produced);

    // describe and tiering status show where the cleaner stands.
    let d = broker.cli_ok(&["topic", "describe", "cdc"], None);
    assert!(d.contains("CleanableRatio: "), "{d}");
    let t = broker.cli_ok(&["tiering", "status", "--output", "json"], None);
    let t: serde_json::Value = serde_json::from_str(&t).unwrap();
    let cdc = t["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["topic"] == "cdc")
        .unwrap();
    assert!(
        cdc["last_cleaned_ms"].as_i64().unwrap() >= first_clean,
        "{cdc}"
    );
    let metrics = common::http_get(http_port, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("shale_cleaner_written_bytes_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );

    // Past delete.retention.ms, the next cleaning drops the tombstones: their keys
    // are gone for good.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    model.extend(produce_updates(&c, "cdc", 1, 200, 2_000).await);
    let mut cleaned = first_clean;
    let records = loop {
        cleaned = wait_cleaned(&broker, "cdc", cleaned).await;
        let records = read_all(&c, "cdc").await;
        if records.iter().all(|r| r.2.is_some()) {
            break records;
        }
    };
    model.retain(|_, v| v.is_some());
    assert_eq!(latest_of(&records), model);

    // A restart reads the same log.
    broker.restart().await;
    let c = broker.client().await;
    assert_eq!(read_all(&c, "cdc").await, records);
    no_leftovers(&broker.data_dir());

    // The policy can be changed back with alter config.
    c.alter_configs(
        "cdc",
        [("cleanup.policy".into(), "delete".into())].into(),
        vec![],
    )
    .await
    .unwrap();
    let r = c
        .produce_raw("cdc", 0, -1, {
            let mut b = BatchBuilder::new(1_000);
            b.push(Record::new(None, Some(b"no key, fine now"), 1_000));
            b.build()
        })
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "{r:?}");
}

/// One crash scenario: a broker that aborts at `failpoint` during its first cleaning,
/// then starts again without it.
async fn crash_at(failpoint: &str, metastore: Option<&PgDatabase>) {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), CLEANER_TOML);
    let url = metastore.map(PgDatabase::url);
    let mut args = vec!["--config", cfg.to_str().unwrap()];
    if let Some(url) = &url {
        args.extend(["--metastore-url", url]);
    }
    // The cleaner stays off while the data goes in.
    let mut broker = Broker::start(&args).await;
    let c = broker.client().await;
    c.create_topic(
        "changes",
        1,
        1,
        compacted(&[("min.compaction.lag.ms", "3600000")]),
    )
    .await
    .unwrap();
    let model = produce_updates(&c, "changes", 150, 12, 0).await;
    let before = read_all(&c, "changes").await;
    broker.stop();
    broker.set_envs(&[("SHALE_FAILPOINTS", failpoint)]);
    broker.start_again().await;
    let c = broker.client().await;
    c.alter_configs(
        "changes",
        [("min.compaction.lag.ms".into(), "0".into())].into(),
        vec![],
    )
    .await
    .unwrap();
    let status = broker.wait_exit(Duration::from_secs(60));
    assert!(
        !status.success(),
        "{failpoint}: the failpoint aborts the broker"
    );
    assert!(broker.log().contains(&format!("failpoint {failpoint} hit")));

    broker.set_envs(&[]);
    broker.start_again().await;
    let c = broker.client().await;
    let after = read_all(&c, "changes").await;
    assert_eq!(
        latest_of(&after),
        model,
        "{failpoint}: a key lost or changed"
    );
    assert!(after.len() <= before.len());
    for r in &after {
        assert!(before.contains(r), "{failpoint}: {r:?} was never written");
    }
    // The log is whole: the next cleaning runs to the end.
    wait_cleaned(&broker, "changes", 0).await;
    let cleaned = read_all(&c, "changes").await;
    assert_eq!(
        latest_of(&cleaned),
        model,
        "{failpoint}: after the next cleaning"
    );
    assert!(cleaned.len() < before.len() / 2, "{failpoint}: compacted");
    no_leftovers(&broker.data_dir());
}

const FAILPOINTS: [&str; 4] = [
    "clean-before-swap",
    "clean-after-swap",
    "clean-after-delete",
    "clean-after-rename",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_cleaning_step_keeps_every_key_on_sqlite() {
    for fp in FAILPOINTS {
        crash_at(fp, None).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_at_each_cleaning_step_keeps_every_key_on_postgres() {
    for fp in FAILPOINTS {
        let db = PgDatabase::create();
        crash_at(fp, Some(&db)).await;
    }
}

/// Three brokers, replication factor 3: every replica cleans its own log, and a
/// fail-over while cleanings run loses no key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_clean_their_own_logs_and_a_failover_loses_nothing() {
    let s3 = S3Server::start("shale-compaction");
    let cfg_dir = tempfile::tempdir().unwrap();
    let toml = format!(
        "{CLEANER_TOML}[cluster]\nlease_ms = 3000\nheartbeat_interval_ms = 500\n\
         controller_interval_ms = 200\nreplica_lag_time_max_ms = 2000\nreplica_fetch_max_wait_ms = 200\n"
    );
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(&toml));
    let db = PgDatabase::create();
    let object_store = format!("s3://{}/compaction", s3.bucket);
    let mut brokers = Vec::new();
    for id in 1..=3 {
        let id = id.to_string();
        let args = [
            "--config",
            cfg.to_str().unwrap(),
            "--broker-id",
            &id,
            "--metastore-url",
            &db.url(),
            "--object-store-url",
            &object_store,
        ];
        brokers.push(Broker::start(&args).await);
    }
    let bootstrap = brokers
        .iter()
        .map(Broker::address)
        .collect::<Vec<_>>()
        .join(",");
    let c = Client::connect(&bootstrap)
        .await
        .unwrap()
        .with_request_timeout(Duration::from_secs(5));
    c.create_topic("table", 1, 3, compacted(&[("min.insync.replicas", "2")]))
        .await
        .unwrap();
    let mut model = produce_updates(&c, "table", 300, 10, 0).await;
    for b in &brokers {
        wait_cleaned(b, "table", 0).await;
    }
    // Kill the leader while updates keep coming and the others clean.
    let leader = c.describe_topic("table").await.unwrap().partitions[0].leader;
    let writer = {
        let c = c.clone();
        tokio::spawn(async move { produce_updates(&c, "table", 300, 10, 100).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    brokers[(leader - 1) as usize].kill();
    model.extend(writer.await.unwrap());
    brokers[(leader - 1) as usize].start_again().await;
    model.extend(produce_updates(&c, "table", 300, 2, 200).await);

    // Every replica catches up, cleans, and holds the latest value of every key.
    let end = c.list_offset("table", 0, -1).await.unwrap().unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let d = c.describe_topic("table").await.unwrap();
        if d.partitions[0].isr.len() == 3 {
            break;
        }
        if Instant::now() > deadline {
            for b in &brokers {
                let log = b.log();
                let bad: Vec<&str> = log
                    .lines()
                    .filter(|l| l.contains("WARN") || l.contains("ERROR"))
                    .collect();
                eprintln!(
                    "broker {}: {}",
                    b.address(),
                    bad[bad.len().saturating_sub(30)..].join("\n")
                );
            }
            panic!("the ISR never filled again: {:?}", d.partitions);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for b in &brokers {
        wait_cleaned(b, "table", 0).await;
    }
    let read = read_all(&c, "table").await;
    assert_eq!(latest_of(&read), model, "the latest value of each key");
    assert!((read.len() as i64) < end / 2, "{} of {end}", read.len());
    // Each broker, leading in turn, serves the same latest values.
    for (i, b) in brokers.iter_mut().enumerate() {
        b.stop();
        let survivors = Client::connect(&bootstrap)
            .await
            .unwrap()
            .with_request_timeout(Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(60);
        let read = loop {
            let d = survivors.describe_topic("table").await;
            if let Ok(d) = d
                && d.partitions[0].leader != (i + 1) as i32
                && d.partitions[0].leader > 0
            {
                break read_all(&survivors, "table").await;
            }
            assert!(Instant::now() < deadline, "no new leader");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert_eq!(latest_of(&read), model, "with broker {} down", i + 1);
        b.start_again().await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while survivors.describe_topic("table").await.unwrap().partitions[0]
            .isr
            .len()
            < 3
        {
            assert!(Instant::now() < deadline, "broker {} never rejoined", i + 1);
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
