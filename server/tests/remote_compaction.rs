//! Remote compaction on a real broker, PostgreSQL and s3s-fs: a tiered compacted topic
//! of a million updates to 10,000 keys, mostly in the bucket, read from offset 0 by a
//! consumer that was half-way through when the compaction swapped the segments; and
//! a crash on each side of the swap.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Broker, PgDatabase, S3Server};
use shale_client::{Acks, Client, Producer, ProducerRecord};
use shale_proto::v1::PartitionTieringStatus;
use shale_records::batch::BatchIter;
use shale_records::record::decode_records;

const PREFIX: &str = "remote-compaction";

/// Uploads, retention checks, cleanings and remote compactions every second or less,
/// and a grace period of 3 s for the segments a compaction replaced.
const TOML: &str = "[log]\ncleaner_backoff_ms = 500\nretention_check_interval_ms = 500\n\
     metadata_refresh_interval_ms = 500\n\
     [tiering]\nupload_interval_ms = 200\nremote_compaction_interval_ms = 1000\n\
     remote_compaction_delete_delay_ms = 3000\n";

struct Setup {
    broker: Broker,
    s3: S3Server,
    http_port: u16,
    _db: PgDatabase,
    _cfg: tempfile::TempDir,
}

async fn start(envs: &[(&str, &str)]) -> Setup {
    let s3 = S3Server::start("shale");
    let db = PgDatabase::create();
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(TOML));
    let url = format!("s3://{}/{PREFIX}", s3.bucket);
    let http_port = common::free_port();
    let http = format!("127.0.0.1:{http_port}");
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--object-store-url",
        &url,
        "--metastore-url",
        &db.url(),
        "--http-listen",
        &http,
    ];
    let broker = Broker::start_with_env(&args, envs).await;
    Setup {
        broker,
        s3,
        http_port,
        _db: db,
        _cfg: cfg_dir,
    }
}

/// A tiered topic whose local log keeps about two segments; `delete` until the test
/// turns compaction on.
fn topic_configs(policy: &str) -> BTreeMap<String, String> {
    [
        ("cleanup.policy", policy),
        ("remote.storage.enable", "true"),
        ("segment.bytes", "1048576"),
        ("local.retention.bytes", "2097152"),
        ("retention.ms", "-1"),
        ("delete.retention.ms", "10000"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn record(key: usize, value: Option<String>) -> ProducerRecord {
    ProducerRecord {
        key: Some(format!("key-{key:05}").into()),
        value: value.map(Bytes::from),
        partition: Some(0),
        ..Default::default()
    }
}

/// How many updates to write: `rounds` of every key, then tombstones for keys
/// `0..deleted`, then `after` rounds of keys `untouched..` (keys `deleted..untouched`
/// keep their value from the first rounds, so it lives in the bucket only).
#[derive(Clone, Copy)]
struct Plan {
    keys: usize,
    rounds: usize,
    deleted: usize,
    untouched: usize,
    after: usize,
}

impl Plan {
    /// At least `updates` updates, half before the tombstones.
    fn of(updates: usize, keys: usize) -> Self {
        let (deleted, untouched) = (keys / 20, keys / 10);
        let rounds = (updates / keys / 2).max(1);
        let after = (updates - (rounds * keys).min(updates)).div_ceil(keys - untouched);
        Plan {
            keys,
            rounds,
            deleted,
            untouched,
            after,
        }
    }
}

/// Writes `plan`; returns the latest value of each key (`None`: deleted).
async fn produce(c: &Client, topic: &str, plan: Plan) -> HashMap<String, Option<Bytes>> {
    let mut p = Producer::new(c.clone(), topic, Acks::All)
        .await
        .unwrap()
        .with_batch_size(64 << 10);
    let mut latest = HashMap::new();
    let mut send = async |records: Vec<ProducerRecord>, latest: &mut HashMap<_, _>| {
        for r in &records {
            let key = String::from_utf8(r.key.clone().unwrap().to_vec()).unwrap();
            latest.insert(key, r.value.clone());
        }
        p.send_all(records).await.unwrap();
    };
    for round in 0..plan.rounds + plan.after {
        let from = if round < plan.rounds {
            0
        } else {
            plan.untouched
        };
        let records = (from..plan.keys)
            .map(|k| record(k, Some(format!("{round:04}-{k:05}-value"))))
            .collect();
        send(records, &mut latest).await;
        if round + 1 == plan.rounds {
            let tombstones = (0..plan.deleted).map(|k| record(k, None)).collect();
            send(tombstones, &mut latest).await;
        }
    }
    latest
}

/// A consumer of partition 0: reads forward from where it is, checking that offsets
/// only grow and that every fetch moves on.
struct Consumer {
    offset: i64,
    last: i64,
    /// (offset, key, value) of every record read.
    records: Vec<(i64, String, Option<Bytes>)>,
}

impl Consumer {
    fn new() -> Self {
        Self {
            offset: 0,
            last: -1,
            records: Vec::new(),
        }
    }

    /// Reads until the next offset is at least `until`.
    async fn read_until(&mut self, c: &Client, topic: &str, until: i64) {
        while self.offset < until {
            let part = c
                .fetch_partition(topic, 0, self.offset, 256 << 10, 0)
                .await
                .unwrap();
            assert_eq!(
                part.error_code, 0,
                "fetch at {}: {}",
                self.offset, part.error_message
            );
            assert!(
                !part.records.is_empty(),
                "a fetch at {} returned nothing",
                self.offset
            );
            for item in BatchIter::new(&part.records) {
                let (h, range) = item.unwrap();
                for r in decode_records(&part.records.slice(range)).unwrap() {
                    if r.offset < self.offset {
                        continue;
                    }
                    assert!(r.offset > self.last, "offsets went back at {}", r.offset);
                    self.last = r.offset;
                    let key = String::from_utf8(r.key.unwrap().to_vec()).unwrap();
                    self.records.push((r.offset, key, r.value));
                }
                self.offset = self.offset.max(h.last_offset() + 1);
            }
        }
    }

    /// The last value read for each key; tombstones dropped (a deleted key reads as
    /// absent whether or not its tombstone is still there).
    fn live(&self) -> HashMap<String, Bytes> {
        let mut out = HashMap::new();
        for (_, k, v) in &self.records {
            match v {
                Some(v) => out.insert(k.clone(), v.clone()),
                None => out.remove(k),
            };
        }
        out
    }
}

fn live(model: &HashMap<String, Option<Bytes>>) -> HashMap<String, Bytes> {
    model
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect()
}

async fn metric(port: u16, name: &str) -> u64 {
    let text = common::http_get(port, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

/// Waits until `cond` holds of partition 0's tier status.
async fn wait_status(
    c: &Client,
    topic: &str,
    b: &Broker,
    what: &str,
    cond: impl Fn(&PartitionTieringStatus) -> bool,
) -> PartitionTieringStatus {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let s = c.tiering_status(Some(topic)).await.unwrap().remove(0);
        if cond(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "{what}: {s:?}\n{}", b.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `.log` objects of partition 0 in the bucket.
fn log_objects(s3: &S3Server) -> usize {
    s3.segment_objects(PREFIX)
        .iter()
        .filter(|k| k.ends_with(".log"))
        .count()
}

/// Creates the topic (policy `delete`), writes `plan` and waits until the bucket
/// holds all but the local log's last two segments or so; returns the model, the log
/// end offset and the tier status then.
async fn fill(
    s: &Setup,
    c: &Client,
    plan: Plan,
) -> (HashMap<String, Option<Bytes>>, i64, PartitionTieringStatus) {
    c.create_topic("changelog", 1, 1, topic_configs("delete"))
        .await
        .unwrap();
    let started = Instant::now();
    let model = produce(c, "changelog", plan).await;
    let end = c.list_offset("changelog", 0, -1).await.unwrap().unwrap();
    eprintln!("{end} records produced in {:?}", started.elapsed());
    let before = wait_status(
        c,
        "changelog",
        &s.broker,
        "uploads and local retention",
        |t| t.upload_lag_segments == 0 && t.local_log_start_offset > end / 2,
    )
    .await;
    (model, end, before)
}

async fn compact_on(c: &Client) {
    let set = [("cleanup.policy".to_string(), "compact".to_string())].into();
    c.alter_configs("changelog", set, vec![]).await.unwrap();
}

/// A consumer from offset 0 sees the latest value of each live key, and below the
/// local log each key at most once, at its latest offset (a key updated in the local
/// log has no copy left in the bucket), and no tombstone if `expired` (the
/// tombstones' delete.retention.ms passed). Returns it.
async fn check_from_zero(
    c: &Client,
    model: &HashMap<String, Option<Bytes>>,
    end: i64,
    expired: bool,
) -> Consumer {
    let mut fresh = Consumer::new();
    fresh.read_until(c, "changelog", end).await;
    assert_eq!(fresh.live(), live(model), "a consumer from offset 0");
    let local_start = c.list_offset("changelog", 0, -4).await.unwrap().unwrap();
    let mut latest_offset = HashMap::new();
    for (o, k, _) in &fresh.records {
        latest_offset.insert(k.clone(), *o);
    }
    for (o, k, v) in fresh.records.iter().filter(|r| r.0 < local_start) {
        assert_eq!(latest_offset[k], *o, "{k} at {o} is not its latest copy");
        assert!(
            v.is_some() || !expired,
            "tombstone of {k} at {o} still in the bucket"
        );
    }
    fresh.offset = local_start;
    fresh
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tiered_compacted_topic_of_a_million_updates_keeps_each_keys_latest_value() {
    let updates: usize = std::env::var("SHALE_REMOTE_COMPACTION_UPDATES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let plan = Plan::of(updates, 10_000);
    let s = start(&[]).await;
    let c = s.broker.client().await;
    let (model, end, before) = fill(&s, &c, plan).await;
    assert_eq!(log_objects(&s.s3), before.remote_segments as usize);

    // A consumer reads half of the remote part, before any compaction.
    let mut mid = Consumer::new();
    mid.read_until(&c, "changelog", before.highest_uploaded_offset / 2)
        .await;
    let (gets, fetched) = (
        metric(s.http_port, "shale_remote_get_requests_total").await,
        metric(s.http_port, "shale_remote_fetched_bytes_total").await,
    );

    // Compaction on: the remote segments are rewritten and swapped.
    compact_on(&c).await;
    let compacting = Instant::now();
    let after = wait_status(&c, "changelog", &s.broker, "remote compaction", |t| {
        t.remote_bytes < before.remote_bytes / 10
    })
    .await;
    // The replaced segments stay for their grace period.
    let kept = log_objects(&s.s3);
    assert!(
        kept > after.remote_segments as usize,
        "{kept} objects, {} segments",
        after.remote_segments
    );
    let n = |name| metric(s.http_port, name);
    let deadline = Instant::now() + Duration::from_secs(60);
    while n("shale_remote_compaction_runs_total").await == 0 {
        assert!(Instant::now() < deadline, "{}", s.broker.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = compacting.elapsed();

    // Cost of the compaction, from the broker's counters (the consumer was idle).
    let (read, written, segs, removed) = (
        n("shale_remote_compaction_read_bytes_total").await,
        n("shale_remote_compaction_written_bytes_total").await,
        n("shale_remote_compaction_written_segments_total").await,
        n("shale_remote_compaction_removed_records_total").await,
    );
    let gib = before.remote_bytes as f64 / f64::from(1 << 30);
    let (gets, fetched) = (
        n("shale_remote_get_requests_total").await - gets,
        n("shale_remote_fetched_bytes_total").await - fetched,
    );
    eprintln!(
        "remote compaction of {} bytes in {} segments ({took:?}, including up to 1 s of \
         waiting for the pass): {gets} GETs ({:.0}/GiB) fetching {fetched} bytes, {} PUTs \
         ({:.0}/GiB) of {written} bytes; {read} bytes read through the cache; {removed} \
         records removed",
        before.remote_bytes,
        before.remote_segments,
        gets as f64 / gib,
        segs * 5,
        (segs * 5) as f64 / gib,
    );
    assert!(segs > 0 && written < before.remote_bytes as u64 / 10);

    // The consumer half-way through a replaced segment goes on: it sees the latest
    // value of every key, tombstones included (within delete.retention.ms).
    assert!(mid.offset < before.highest_uploaded_offset);
    mid.read_until(&c, "changelog", end).await;
    assert_eq!(mid.live(), live(&model), "the consumer that was mid-read");

    // After the grace period the replaced objects go; once the tombstones' horizon
    // passes, a later compaction removes them from the bucket.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = c.tiering_status(Some("changelog")).await.unwrap().remove(0);
        let now_removed = n("shale_remote_compaction_removed_records_total").await;
        if log_objects(&s.s3) == t.remote_segments as usize
            && now_removed >= removed + plan.deleted as u64
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} objects, {t:?}, {now_removed} removed\n{}",
            log_objects(&s.s3),
            s.broker.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let fresh = check_from_zero(&c, &model, end, true).await;
    let remote: Vec<_> = fresh
        .records
        .iter()
        .filter(|r| r.0 < fresh.offset)
        .collect();
    eprintln!(
        "{} records from offset 0 ({} of them remote) of {end} produced",
        fresh.records.len(),
        remote.len()
    );
    // What stays in the bucket: the keys last written before the tombstones and
    // never since, once each.
    let mut in_bucket: Vec<_> = remote.iter().map(|r| r.1.clone()).collect();
    in_bucket.sort();
    let expected: Vec<_> = (plan.deleted..plan.untouched)
        .map(|k| format!("key-{k:05}"))
        .collect();
    assert_eq!(in_bucket, expected);
}

/// A crash just before and just after the metastore swap (the failpoint aborts the
/// broker), then a restart: no key is lost, the unfinished rewrite or the replaced
/// segments leave nothing behind, and the next compaction completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_on_either_side_of_the_swap_loses_nothing() {
    for failpoint in [
        "remote-compaction-before-swap",
        "remote-compaction-after-swap",
    ] {
        let mut s = start(&[]).await;
        let c = s.broker.client().await;
        let (model, end, before) = fill(&s, &c, Plan::of(200_000, 1_000)).await;
        s.broker.stop();
        s.broker.set_envs(&[("SHALE_FAILPOINTS", failpoint)]);
        s.broker.start_again().await;
        compact_on(&s.broker.client().await).await;
        let status = s.broker.wait_exit(Duration::from_secs(60));
        assert!(
            !status.success(),
            "{failpoint}: the failpoint aborts the broker"
        );
        assert!(
            s.broker
                .log()
                .contains(&format!("failpoint {failpoint} hit"))
        );

        s.broker.set_envs(&[]);
        s.broker.start_again().await;
        let c = s.broker.client().await;
        // Whatever the crash left is cleaned up or finished, and the remote log is
        // compacted by a later run.
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let open = s._db.query(
                "SELECT count(*) FROM remote_segments WHERE state NOT IN ('COPY_FINISHED', 'DELETE_FINISHED')",
            );
            let t = c.tiering_status(Some("changelog")).await.unwrap().remove(0);
            if open == ["0"]
                && t.remote_bytes < before.remote_bytes / 5
                && log_objects(&s.s3) == t.remote_segments as usize
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{failpoint}: {open:?} unfinished rows, {t:?}, {} objects\n{}",
                log_objects(&s.s3),
                s.broker.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        check_from_zero(&c, &model, end, false).await;
    }
}
