//! Tiered storage against a real S3-protocol server (`s3s-fs`): sealed segments are
//! copied with self-describing objects, an outage of the store loses nothing and
//! uploads resume, and a crash between the object PUTs and `COPY_FINISHED` converges.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Broker, S3Server};
use shale_client::{Acks, Client, Producer, ProducerRecord};
use shale_metastore::RemoteSegmentState;
use shale_proto::v1::PartitionTieringStatus;
use shale_tiering::layout::{ObjectKind, SegmentIndexes, SegmentMeta};

const PREFIX: &str = "cluster-a";

/// What a tiered broker needs kept alive: its config file and its metastore database.
struct Tiered {
    _cfg: tempfile::TempDir,
    db: common::PgDatabase,
}

/// A broker on a real PostgreSQL metastore (a fresh database) and a real S3 server.
async fn start_tiered(s3: &S3Server, extra_toml: &str) -> (Broker, Tiered) {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(extra_toml));
    let url = format!("s3://{}/{PREFIX}", s3.bucket);
    let db = common::PgDatabase::create();
    let args = [
        "--config",
        cfg.to_str().unwrap(),
        "--object-store-url",
        &url,
        "--metastore-url",
        &db.url(),
    ];
    let broker = Broker::start(&args).await;
    (broker, Tiered { _cfg: cfg_dir, db })
}

fn topic_configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn produce(c: &Client, topic: &str, partitions: i32, n: usize) {
    let mut p = Producer::new(c.clone(), topic, Acks::All)
        .await
        .unwrap()
        .with_batch_size(1024);
    let records = (0..n)
        .map(|i| ProducerRecord {
            value: Some(format!("{topic}-{i:06}-{}", "v".repeat(80)).into()),
            partition: Some(i as i32 % partitions),
            ..Default::default()
        })
        .collect();
    p.send_all(records).await.unwrap();
}

/// Waits until every partition of `topic` has uploaded all its sealed segments.
async fn wait_uploaded(c: &Client, topic: &str, broker: &Broker) -> Vec<PartitionTieringStatus> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = c.tiering_status(Some(topic)).await.unwrap();
        if status
            .iter()
            .all(|s| s.upload_lag_segments == 0 && s.highest_uploaded_offset >= 0)
        {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "uploads did not finish: {status:?}\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `.meta` documents in the bucket for one partition, by base offset.
fn metas(s3: &S3Server, partition: i32) -> Vec<SegmentMeta> {
    metas_in(&s3.objects_dir(PREFIX), partition)
}

/// `.meta` documents stored below `dir` for one partition, by base offset.
fn metas_in(dir: &std::path::Path, partition: i32) -> Vec<SegmentMeta> {
    let mut out: Vec<SegmentMeta> = common::segment_objects_in(dir)
        .iter()
        .filter(|k| k.ends_with(".meta"))
        // Retention may delete an object between the listing and the read: skip it.
        .filter_map(|k| std::fs::read(dir.join(k)).ok())
        .map(|raw| serde_json::from_slice::<SegmentMeta>(&raw).unwrap())
        .filter(|m| m.partition == partition)
        .collect();
    out.sort_by_key(|m| m.base_offset);
    out
}

fn assert_contiguous(metas: &[SegmentMeta], from: i64, to: i64) {
    assert!(!metas.is_empty());
    assert_eq!(metas[0].base_offset, from, "remote log starts at {from}");
    for w in metas.windows(2) {
        assert_eq!(
            w[0].end_offset + 1,
            w[1].base_offset,
            "no gap, no overlap: {:?} {:?}",
            w[0],
            w[1]
        );
    }
    assert_eq!(metas.last().unwrap().end_offset, to);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_segments_are_copied_as_self_describing_objects() {
    let s3 = S3Server::start("shale");
    let (mut broker, _cfg) = start_tiered(&s3, "[tiering]\nupload_interval_ms = 100\n").await;
    let c = broker.client().await;
    c.create_topic("t", 2, 1, topic_configs(&[("segment.bytes", "4096")]))
        .await
        .unwrap();
    produce(&c, "t", 2, 3000).await;
    let status = wait_uploaded(&c, "t", &broker).await;

    let mut objects = s3.segment_objects(PREFIX);
    for st in &status {
        let metas = metas(&s3, st.partition);
        assert_eq!(metas.len() as i64, st.remote_segments, "{st:?}");
        assert_contiguous(&metas, 0, st.highest_uploaded_offset);
        let remote_bytes: u64 = metas.iter().map(|m| m.log_bytes).sum();
        assert_eq!(remote_bytes as i64, st.remote_bytes);
        let dir = broker.data_dir().join(format!("t-{}", st.partition));
        for m in &metas {
            let key = m.key();
            // The objects are the local files byte for byte, with the CRCs .meta states.
            let log = s3.read_object(PREFIX, key.path(ObjectKind::Log).as_ref());
            assert_eq!(
                log,
                std::fs::read(dir.join(format!("{:020}.log", m.base_offset))).unwrap()
            );
            assert_eq!(crc32c::crc32c(&log), m.log_crc32c);
            assert_eq!(log.len() as u64, m.log_bytes);
            // The offset index, the time index and the key filter ride in one
            // `.indexes` object, named in .meta, each the local file byte for byte.
            let indexes_path = key.path(ObjectKind::Indexes);
            let all = s3.read_object(PREFIX, indexes_path.as_ref());
            assert_eq!(m.indexes.as_deref(), indexes_path.filename());
            let parts = SegmentIndexes::decode(&all).unwrap();
            let index = parts.offset_index;
            assert_eq!(
                index,
                std::fs::read(dir.join(format!("{:020}.index", m.base_offset))).unwrap()
            );
            assert_eq!(crc32c::crc32c(index), m.index_crc32c);
            assert_eq!(crc32c::crc32c(parts.time_index), m.time_index_crc32c);
            let kf = m.key_filter.as_ref().expect(".meta names a key filter");
            let keys = parts.key_filter.expect("the key filter is in .indexes");
            assert_eq!(indexes_path.filename(), Some(kf.object.as_str()));
            assert_eq!(
                (crc32c::crc32c(keys), keys.len() as u64),
                (kf.crc32c, kf.bytes)
            );
            assert_eq!(
                keys,
                std::fs::read(dir.join(format!("{:020}.keys", m.base_offset))).unwrap()
            );
            let filter = shale_records::keyfilter::KeyFilter::decode(keys).unwrap();
            assert_eq!(filter.summary.log_bytes, m.log_bytes);
            assert_eq!(filter.summary.last_offset, m.end_offset);
            assert_eq!(m.topic, "t");
        }
    }
    let total_segments: i64 = status.iter().map(|s| s.remote_segments).sum();
    assert_eq!(
        objects.len() as i64,
        3 * total_segments,
        "three objects per segment, nothing else"
    );

    // A restart neither re-uploads nor loses track of what is there.
    broker.restart().await;
    let c = broker.client().await;
    let after = wait_uploaded(&c, "t", &broker).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(after, status);
    objects.sort();
    assert_eq!(s3.segment_objects(PREFIX), objects);
    let tiering = broker.cli_ok(&["tiering", "status", "t"], None);
    assert!(
        tiering.lines().count() == 4 && tiering.contains("\ttrue\t"),
        "{tiering}"
    );
    assert!(
        tiering.contains("remote reads since start: 0 GET requests"),
        "{tiering}"
    );

    // Deleting the topic deletes its remote data too.
    broker.cli_ok(&["topic", "delete", "t"], None);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !s3.segment_objects(PREFIX).is_empty() {
        assert!(
            Instant::now() < deadline,
            "remote objects of the deleted topic remain\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_outage_deletes_nothing_local_and_uploads_resume() {
    let mut s3 = S3Server::start("shale");
    let extra = "[tiering]\nupload_interval_ms = 100\n[log]\nretention_check_interval_ms = 100\n";
    let (broker, _cfg) = start_tiered(&s3, extra).await;
    let c = broker.client().await;
    c.create_topic("all", 1, 1, topic_configs(&[("segment.bytes", "4096")]))
        .await
        .unwrap();
    // Local retention wants almost everything of this one gone, but only uploaded data may go.
    let small = topic_configs(&[("segment.bytes", "4096"), ("retention.bytes", "8192")]);
    c.create_topic("small", 1, 1, small).await.unwrap();

    s3.kill();
    produce(&c, "all", 1, 600).await;
    produce(&c, "small", 1, 600).await;
    tokio::time::sleep(Duration::from_secs(3)).await; // many upload and retention passes
    for topic in ["all", "small"] {
        let st = &c.tiering_status(Some(topic)).await.unwrap()[0];
        assert_eq!(st.highest_uploaded_offset, -1, "{st:?}");
        assert!(st.upload_lag_segments >= 10, "{st:?}");
        assert_eq!(
            st.local_log_start_offset, 0,
            "nothing local deleted while the store is down: {st:?}"
        );
    }

    s3.start_again();
    let all = wait_uploaded(&c, "all", &broker).await;
    assert_contiguous(
        &metas(&s3, 0)
            .into_iter()
            .filter(|m| m.topic == "all")
            .collect::<Vec<_>>(),
        0,
        all[0].highest_uploaded_offset,
    );
    // Now retention may act on "small": locally and remotely, leaving no gap between them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = c.tiering_status(Some("small")).await.unwrap().remove(0);
        if st.local_log_start_offset > 0
            && st.upload_lag_segments == 0
            && st.remote_log_start_offset > 0
        {
            assert!(
                st.remote_log_start_offset <= st.local_log_start_offset,
                "{st:?}"
            );
            assert!(
                st.highest_uploaded_offset + 1 >= st.local_log_start_offset,
                "no gap: {st:?}"
            );
            let remote: Vec<_> = metas(&s3, 0)
                .into_iter()
                .filter(|m| m.topic == "small")
                .collect();
            // A segment leaves the read index before its objects are deleted: wait for
            // the bucket to catch up with the index, then check it.
            let settled = remote.first().map(|m| m.base_offset) == Some(st.remote_log_start_offset)
                && remote.last().map(|m| m.end_offset) == Some(st.highest_uploaded_offset);
            if settled {
                assert_contiguous(
                    &remote,
                    st.remote_log_start_offset,
                    st.highest_uploaded_offset,
                );
                break;
            }
        }
        assert!(
            Instant::now() < deadline,
            "retention did not resume: {st:?}\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let d = c.describe_topic("all").await.unwrap();
    assert_eq!(d.partitions[0].log_end_offset, 600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_between_object_puts_and_copy_finished_converges_after_restart() {
    let s3 = S3Server::start("shale");
    let (mut broker, tiered) = start_tiered(&s3, "[tiering]\nupload_interval_ms = 300\n").await;
    let c = broker.client().await;
    c.create_topic("crash", 1, 1, topic_configs(&[("segment.bytes", "4096")]))
        .await
        .unwrap();
    let topic_id: uuid::Uuid = c
        .describe_topic("crash")
        .await
        .unwrap()
        .topic
        .unwrap()
        .topic_id
        .parse()
        .unwrap();
    broker.stop();

    // Next start dies at the failpoint: all three objects written, row still COPY_STARTED.
    broker.set_envs(&[("SHALE_FAILPOINTS", "upload-before-copy-finished")]);
    broker.start_again().await;
    let c = broker.client().await;
    produce(&c, "crash", 1, 200).await;
    let status = broker.wait_exit(Duration::from_secs(30));
    assert!(!status.success(), "the failpoint aborts the broker");
    let orphans = s3.segment_objects(PREFIX);
    assert_eq!(
        orphans.len(),
        3,
        "objects of the interrupted copy: {orphans:?}"
    );
    let metastore = shale_metastore::open(&tiered.db.url()).await.unwrap();
    use RemoteSegmentState::*;
    let all_states = [CopyStarted, CopyFinished, DeleteStarted, DeleteFinished];
    let rows = metastore
        .list_remote_segments(topic_id, 0, &all_states)
        .await
        .unwrap();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].state, CopyStarted);
    let orphan_id = rows[0].segment_id;

    broker.set_envs(&[]);
    broker.start_again().await;
    let c = broker.client().await;
    let st = wait_uploaded(&c, "crash", &broker).await.remove(0);
    let metas = metas(&s3, 0);
    assert_contiguous(&metas, 0, st.highest_uploaded_offset);
    assert!(
        metas.iter().all(|m| m.segment_id != orphan_id),
        "the interrupted copy's objects are gone"
    );
    assert_eq!(
        s3.segment_objects(PREFIX).len(),
        3 * metas.len(),
        "no orphaned object is left"
    );
    let rows = metastore
        .list_remote_segments(topic_id, 0, &all_states)
        .await
        .unwrap();
    let orphan = rows.iter().find(|r| r.segment_id == orphan_id).unwrap();
    assert_eq!(orphan.state, DeleteFinished);
    let finished: Vec<_> = rows.iter().filter(|r| r.state == CopyFinished).collect();
    assert_eq!(finished.len(), metas.len());
    // Every produced record is still there.
    let out = broker.cli_ok(
        &[
            "consume",
            "crash",
            "--from-beginning",
            "--idle-timeout-ms",
            "1000",
        ],
        None,
    );
    assert_eq!(out.lines().count(), 200);
}

#[test]
fn missing_bucket_or_unreachable_store_stops_start_up_with_a_clear_error() {
    let s3 = S3Server::start("shale");
    for (url, endpoint, expect) in [
        (
            "s3://no-such-bucket/x",
            s3.endpoint(),
            "s3://no-such-bucket/x",
        ),
        (
            "s3://shale/x",
            format!("http://127.0.0.1:{}", common::free_port()),
            "s3://shale/x",
        ),
        ("s3:///x", s3.endpoint(), "bucket name is missing"),
    ] {
        let cfg_dir = tempfile::tempdir().unwrap();
        let text = s3.broker_config("").replace(&s3.endpoint(), &endpoint);
        let cfg = common::write_config(cfg_dir.path(), &text);
        let data = tempfile::tempdir().unwrap();
        let out = std::process::Command::new(common::broker_bin())
            .args(["--data-dir", data.path().to_str().unwrap(), "--listen"])
            .arg(format!("127.0.0.1:{}", common::free_port()))
            .args(["--config", cfg.to_str().unwrap(), "--object-store-url", url])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: started");
        assert!(stderr.contains(expect), "{url}: {stderr}");
    }
}

fn assert_same_lines(got: &[String], want: &[String]) {
    let first_diff = got.iter().zip(want).position(|(g, w)| g != w);
    assert!(
        got.len() == want.len() && first_diff.is_none(),
        "{} lines, {} expected; first difference at line {first_diff:?}: {:?} vs {:?}",
        got.len(),
        want.len(),
        first_diff.map(|i| &got[i]),
        first_diff.map(|i| &want[i]),
    );
}

/// `offset timestamp value` lines of a CLI consume from the beginning.
fn consume_all(broker: &Broker, topic: &str) -> Vec<String> {
    let out = broker.cli_ok(
        &[
            "consume",
            topic,
            "--from-beginning",
            "--idle-timeout-ms",
            "2000",
            "--format",
            "%o %T %s\\n",
        ],
        None,
    );
    out.lines().map(str::to_string).collect()
}

const REPLAY_TOML: &str = "[tiering]\nupload_interval_ms = 100\nchunk_bytes = 65536\ncache_memory_bytes = 1048576\n\
                           cache_disk_bytes = 67108864\n[log]\nretention_check_interval_ms = 100\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumers_read_a_mostly_remote_log_transparently() {
    let mut s3 = S3Server::start("shale");
    let (mut broker, _tiered) = start_tiered(&s3, REPLAY_TOML).await;
    replay_mostly_remote(&mut broker, &s3.objects_dir(PREFIX)).await;
    // The object store goes away: an uncached remote read fails retriably, in bounded time.
    broker.stop();
    std::fs::remove_dir_all(broker.data_dir().join("remote-cache")).unwrap();
    broker.start_again().await;
    s3.kill();
    let c = broker.client().await;
    let third = metas_in(&s3.objects_dir(PREFIX), 0)[3].base_offset;
    let r = c
        .fetch_partition("replay", 0, third, 1 << 20, 0)
        .await
        .unwrap();
    assert_eq!(
        r.error_code,
        shale_records::ErrorCode::KafkaStorageError as i32,
        "{}",
        r.error_message
    );
    assert!(r.records.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_default_reads_a_mostly_remote_log_transparently() {
    // SQLite metastore and a file:// object store, as with no configuration at all.
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), REPLAY_TOML);
    let mut broker = Broker::start(&["--config", cfg.to_str().unwrap()]).await;
    let objects = broker.data_dir().join("objects");
    replay_mostly_remote(&mut broker, &objects).await;
}

/// Produces a log that ends up mostly in the object store (objects stored as files
/// under `objects`), then reads it back every way a consumer can, and damages it.
async fn replay_mostly_remote(broker: &mut Broker, objects: &std::path::Path) {
    let c = broker.client().await;
    let configs = topic_configs(&[
        ("segment.bytes", "16384"),
        ("local.retention.bytes", "20000"),
    ]);
    c.create_topic("replay", 1, 1, configs).await.unwrap();
    let base_ts = chrono::Utc::now().timestamp_millis() - 3_600_000; // within retention.ms
    let mut p = Producer::new(c.clone(), "replay", Acks::All)
        .await
        .unwrap()
        .with_batch_size(2048);
    let records = (0..3000)
        .map(|i| ProducerRecord {
            value: Some(format!("rec-{i:05}-{}", "r".repeat(60)).into()),
            timestamp: Some(base_ts + i),
            ..Default::default()
        })
        .collect();
    p.send_all(records).await.unwrap();
    let expected: Vec<String> = (0..3000)
        .map(|i| format!("{i} {} rec-{i:05}-{}", base_ts + i, "r".repeat(60)))
        .collect();

    // Wait until most of the log lives only in the object store.
    let deadline = Instant::now() + Duration::from_secs(60);
    let st = loop {
        let st = c.tiering_status(Some("replay")).await.unwrap().remove(0);
        if st.upload_lag_segments == 0 && st.local_log_start_offset > 2000 {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "log did not move to the object store: {st:?}\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(
        (st.log_start_offset, st.remote_log_start_offset),
        (0, 0),
        "{st:?}"
    );
    let local_logs = std::fs::read_dir(broker.data_dir().join("replay-0"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "log")
        })
        .count();
    assert!(local_logs <= 3, "{local_logs} local segments remain");
    assert_eq!(
        c.list_offset("replay", 0, -2).await.unwrap(),
        Some(0),
        "earliest includes the remote log"
    );
    assert_eq!(
        c.list_offset("replay", 0, -4).await.unwrap(),
        Some(st.local_log_start_offset)
    );

    // Offsets, by position and by time, read through the object store.
    assert_same_lines(&consume_all(broker, "replay"), &expected);
    assert_eq!(
        c.list_offset("replay", 0, base_ts + 1234).await.unwrap(),
        Some(1234)
    );
    let time = chrono::DateTime::from_timestamp_millis(base_ts + 777)
        .unwrap()
        .to_rfc3339();
    let from_time = broker.cli_ok(
        &[
            "consume",
            "replay",
            "--from-time",
            &time,
            "--max-messages",
            "2",
            "--format",
            "%o\\n",
        ],
        None,
    );
    assert_eq!(from_time, "777\n778\n");

    // One GET per chunk (plus one per offset index), never a LIST: the reader's counters.
    let stats = c.tiering_status_full(Some("replay")).await.unwrap();
    let remote_bytes: i64 = stats.partitions.iter().map(|s| s.remote_bytes).sum();
    // Segments also still local are read locally; nothing is fetched twice.
    assert!(
        stats.remote_bytes_fetched > 0 && stats.remote_bytes_fetched <= remote_bytes + 64 * 1024,
        "{stats:?}"
    );
    assert!(
        stats.remote_get_requests as usize <= 2 * metas_in(objects, 0).len() + 2,
        "{stats:?}"
    );
    // A restart with an empty cache reads it all again from the object store.
    broker.stop();
    std::fs::remove_dir_all(broker.data_dir().join("remote-cache")).unwrap();
    broker.start_again().await;
    assert_same_lines(&consume_all(broker, "replay"), &expected);

    // Damage: a flipped byte in one remote object, and a missing object in another.
    let metas = metas_in(objects, 0);
    let object_file = |m: &SegmentMeta| objects.join(m.key().path(ObjectKind::Log).as_ref());
    let mut raw = std::fs::read(object_file(&metas[0])).unwrap();
    let at = raw.len() - 10;
    raw[at] ^= 0xff;
    std::fs::write(object_file(&metas[0]), raw).unwrap();
    std::fs::remove_file(object_file(&metas[1])).unwrap();
    broker.stop();
    std::fs::remove_dir_all(broker.data_dir().join("remote-cache")).unwrap();
    broker.start_again().await;
    let c = broker.client().await;
    let last_batch_of_first = metas[0].end_offset;
    let r = c
        .fetch_partition("replay", 0, last_batch_of_first, 1 << 20, 0)
        .await
        .unwrap();
    assert_eq!(
        r.error_code,
        shale_records::ErrorCode::CorruptMessage as i32,
        "{}",
        r.error_message
    );
    assert!(
        r.records.is_empty() && r.error_message.contains(&metas[0].segment_id.to_string()),
        "{}",
        r.error_message
    );
    let r = c
        .fetch_partition("replay", 0, metas[1].base_offset, 1 << 20, 0)
        .await
        .unwrap();
    assert_eq!(
        r.error_code,
        shale_records::ErrorCode::CorruptMessage as i32,
        "{}",
        r.error_message
    );
    assert!(r.error_message.contains("missing"), "{}", r.error_message);
    // The rest of the log still reads.
    let r = c
        .fetch_partition("replay", 0, metas[2].base_offset, 1 << 20, 0)
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "{}", r.error_message);
    assert!(!r.records.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_disk_limit_refuses_produce_retriably_while_the_store_is_down() {
    let mut s3 = S3Server::start("shale");
    let extra = "[tiering]\nupload_interval_ms = 100\n\
                 [log]\nretention_check_interval_ms = 100\nflush_check_interval_ms = 50\nlocal_disk_limit_bytes = 60000\n";
    let (broker, _cfg) = start_tiered(&s3, extra).await;
    let c = broker.client().await;
    let configs = topic_configs(&[("segment.bytes", "4096"), ("local.retention.bytes", "4096")]);
    c.create_topic("capped", 1, 1, configs).await.unwrap();
    s3.kill();

    // The refusal is retriable: a producer retries it until its deadline (short here).
    // One request in flight: a later batch sent while a refused one is retried would
    // be answered OUT_OF_ORDER_SEQUENCE_NUMBER, and under load that answer could come
    // first and fail the whole run of batches with it.
    let short_retry = c.clone().with_retry_timeout(Duration::from_millis(300));
    let p = Producer::new(short_retry, "capped", Acks::All)
        .await
        .unwrap()
        .with_batch_size(1024)
        .with_max_in_flight(1);
    let mut acked = 0usize;
    let mut sent = 0usize;
    // Sends 50 records; counts those acknowledged (a refusal fails only some batches)
    // and returns the first error.
    let send = async |sent: &mut usize, acked: &mut usize| {
        let mut futures = Vec::new();
        for _ in 0..50 {
            let value = format!("{:06}-{}", *sent, "d".repeat(90));
            *sent += 1;
            let record = ProducerRecord {
                value: Some(value.into()),
                ..Default::default()
            };
            futures.push(p.send(record).await.unwrap());
        }
        p.flush().await.unwrap();
        let mut first_error = None;
        for f in futures {
            match f.await {
                Ok(_) => *acked += 1,
                Err(e) => first_error = first_error.or(Some(e)),
            }
        }
        first_error
    };
    let refusal = loop {
        if let Some(e) = send(&mut sent, &mut acked).await {
            break e;
        }
        assert!(acked < 5000, "the limit never applied");
        tokio::time::sleep(Duration::from_millis(60)).await;
    };
    assert_eq!(
        refusal.code(),
        Some(shale_records::ErrorCode::KafkaStorageError),
        "{refusal}"
    );
    assert!(
        refusal.to_string().contains("local disk limit"),
        "{refusal}"
    );
    let st = c.tiering_status(Some("capped")).await.unwrap().remove(0);
    assert_eq!(
        st.local_log_start_offset, 0,
        "nothing deleted while the store is down: {st:?}"
    );

    // The store returns: uploads drain, local retention frees space, produce resumes.
    s3.start_again();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match send(&mut sent, &mut acked).await {
            None => break,
            Some(e) => assert_eq!(
                e.code(),
                Some(shale_records::ErrorCode::KafkaStorageError),
                "{e}"
            ),
        }
        assert!(
            Instant::now() < deadline,
            "produce never resumed\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let lines = broker.cli_ok(
        &[
            "consume",
            "capped",
            "--from-beginning",
            "--idle-timeout-ms",
            "2000",
            "--format",
            "%o %s\\n",
        ],
        None,
    );
    let lines: Vec<&str> = lines.lines().collect();
    assert_eq!(
        lines.len(),
        acked,
        "every acknowledged record is readable, remote or local"
    );
    // Dense offsets, and the values in the order sent (refused records are missing).
    let mut last = -1i64;
    for (i, l) in lines.iter().enumerate() {
        let (offset, value) = l.split_once(' ').unwrap();
        assert_eq!(offset, i.to_string(), "line {i}: {l}");
        let n: i64 = value[..6].parse().unwrap();
        assert!(n > last, "line {i}: {l} after {last}");
        last = n;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_come_from_an_aws_profile_when_not_configured() {
    let s3 = S3Server::start("shale");
    let dir = tempfile::tempdir().unwrap();
    let creds = dir.path().join("credentials");
    let write_profile = |key: &str, secret: &str| {
        std::fs::write(
            &creds,
            format!("[shale-test]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n"),
        )
        .unwrap();
    };
    let config = dir.path().join("config");
    std::fs::write(&config, "[profile shale-test]\nregion = us-east-1\n").unwrap();
    // No keys in the broker's config: only the profile (and never instance metadata).
    let toml = format!(
        "[object_store]\nendpoint = \"{}\"\npath_style = true\nallow_http = true\nmax_retries = 1\n\
         [tiering]\nupload_interval_ms = 100\n",
        s3.endpoint()
    );
    let cfg = common::write_config(dir.path(), &toml);
    let url = format!("s3://{}/{PREFIX}", s3.bucket);
    let envs = [
        ("AWS_SHARED_CREDENTIALS_FILE", creds.to_str().unwrap()),
        ("AWS_CONFIG_FILE", config.to_str().unwrap()),
        ("AWS_PROFILE", "shale-test"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ];

    write_profile("wrong-key", "wrong-secret");
    let out = std::process::Command::new(common::broker_bin())
        .args([
            "--data-dir",
            dir.path().join("refused").to_str().unwrap(),
            "--listen",
        ])
        .arg(format!("127.0.0.1:{}", common::free_port()))
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--object-store-url",
            &url,
        ])
        .envs(envs)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("access denied") && err.contains("check the credentials"),
        "{out:?}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(lines.len(), 1, "one line, nothing else above INFO: {err}");

    write_profile(&s3.access_key, &s3.secret_key);
    let broker = Broker::start_with_env(
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--object-store-url",
            &url,
        ],
        &envs,
    )
    .await;
    let c = broker.client().await;
    c.create_topic("p", 1, 1, topic_configs(&[("segment.bytes", "4096")]))
        .await
        .unwrap();
    produce(&c, "p", 1, 200).await;
    let st = wait_uploaded(&c, "p", &broker).await.remove(0);
    assert!(st.remote_segments > 0, "{st:?}");
}

/// Start-up errors say which problem it is, in one line: a missing bucket, an
/// endpoint that does not answer, an unreachable PostgreSQL, a missing config file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn start_up_errors_name_the_problem() {
    let mut s3 = S3Server::start("present");
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(dir.path(), &s3.broker_config(""));
    let run = |args: &[&str]| {
        let out = std::process::Command::new(common::broker_bin())
            .args(["--listen", &format!("127.0.0.1:{}", common::free_port())])
            .args(["--data-dir", dir.path().join("d").to_str().unwrap()])
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        let last = err.trim().lines().last().unwrap_or_default().to_string();
        assert!(!last.contains("<?xml"), "{err}");
        last
    };
    let config = cfg.to_str().unwrap();
    let err = run(&["--config", config, "--object-store-url", "s3://absent"]);
    assert!(err.contains("bucket 'absent' does not exist"), "{err}");
    s3.kill();
    let err = run(&["--config", config, "--object-store-url", "s3://present"]);
    assert!(
        err.contains("unreachable") && err.contains("Connection refused"),
        "{err}"
    );
    let port = common::free_port();
    let err = run(&[
        "--metastore-url",
        &format!("postgres://postgres@127.0.0.1:{port}/x"),
    ]);
    assert!(
        err.contains(&format!("cannot reach PostgreSQL at 127.0.0.1:{port}")),
        "{err}"
    );
    assert!(err.contains("Connection refused"), "{err}");
    let err = run(&["--config", "/nonexistent/shale.toml"]);
    assert!(err.contains("No such file or directory"), "{err}");
}

/// Local retention of a tiered partition runs as soon as an upload completes, not at
/// the next retention check (here five minutes away, Kafka's default).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_retention_follows_each_upload() {
    let s3 = S3Server::start("shale");
    let (broker, _t) = start_tiered(&s3, "[tiering]\nupload_interval_ms = 200\n").await;
    let c = broker.client().await;
    c.create_topic(
        "quick",
        1,
        1,
        topic_configs(&[("segment.bytes", "4096"), ("local.retention.bytes", "4096")]),
    )
    .await
    .unwrap();
    produce(&c, "quick", 1, 400).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = &c.tiering_status(Some("quick")).await.unwrap()[0];
        if s.local_log_start_offset > 0 && s.local_log_start_offset <= s.highest_uploaded_offset + 1
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "local log never shrank: {s:?}\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A partition that goes quiet still gets its last records into the bucket: its
/// leader seals the active segment once its first record is `max_local_only_ms` old,
/// with no further append (a 1 GiB, 7-day segment would otherwise stay local).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_partitions_last_records_reach_the_bucket_within_the_local_only_bound() {
    let s3 = S3Server::start("shale");
    let (broker, _t) = start_tiered(
        &s3,
        "[tiering]\nupload_interval_ms = 200\nmax_local_only_ms = 1500\n",
    )
    .await;
    let c = broker.client().await;
    c.create_topic("quiet", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    produce(&c, "quiet", 1, 50).await;
    let produced = Instant::now();
    let deadline = produced + Duration::from_secs(30);
    loop {
        let s = &c.tiering_status(Some("quiet")).await.unwrap()[0];
        if s.highest_uploaded_offset == 49 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the idle tail never reached the bucket: {s:?}\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        produced.elapsed() >= Duration::from_millis(1500),
        "sealed before the bound: not by age"
    );
    assert_contiguous(&metas(&s3, 0), 0, 49);
    // The default local retention of a tiered topic is bounded (a day).
    let described = c.describe_topic("quiet").await.unwrap();
    assert_eq!(
        described
            .configs
            .get("local.retention.ms")
            .map(String::as_str),
        Some("86400000")
    );
}

/// DeleteRecords on a mostly-remote log: the log start moves inside a remote segment,
/// the records below it are gone for every reader, remote segments holding only
/// them are deleted from the store, and the start holds across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_records_moves_the_log_start_in_both_tiers_for_good() {
    let s3 = S3Server::start("shale");
    let (mut broker, _cfg) = start_tiered(&s3, REPLAY_TOML).await;
    let c = broker.client().await;
    let configs = topic_configs(&[
        ("segment.bytes", "16384"),
        ("local.retention.bytes", "20000"),
    ]);
    c.create_topic("trim", 1, 1, configs).await.unwrap();
    produce(&c, "trim", 1, 3000).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = c.tiering_status(Some("trim")).await.unwrap().remove(0);
        if st.upload_lag_segments == 0 && st.local_log_start_offset > 2000 {
            break;
        }
        assert!(Instant::now() < deadline, "not tiered: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let before = metas(&s3, 0);
    // Inside the third remote segment: the first two hold only deleted records.
    let cut = before[2].base_offset + 5;
    assert!(cut < before[2].end_offset);

    let out = broker.cli_ok(
        &[
            "topic",
            "delete-records",
            "trim",
            "--offset",
            &cut.to_string(),
        ],
        None,
    );
    assert!(out.contains(&format!("trim\t0\t{cut}")), "{out}");
    assert_eq!(c.list_offset("trim", 0, -2).await.unwrap(), Some(cut));
    // Below the new start: out of range (a consumer resets, never reads them).
    let r = c
        .fetch_partition("trim", 0, cut - 1, 1 << 20, 0)
        .await
        .unwrap();
    assert_eq!(
        r.error_code,
        shale_records::ErrorCode::OffsetOutOfRange as i32,
        "{}",
        r.error_message
    );
    // A read from the beginning starts exactly at the cut (the rest of its batch is
    // skipped by the consumer) and sees everything after it.
    let lines = consume_all(&broker, "trim");
    assert_eq!(lines.len() as i64, 3000 - cut);
    assert!(lines[0].starts_with(&format!("{cut} ")), "{}", lines[0]);
    // A time lookup before the cut answers the cut.
    assert_eq!(c.list_offset("trim", 0, 0).await.unwrap(), Some(cut));
    // The remote segments below the cut leave the store; the one holding it stays.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = metas(&s3, 0);
        if now
            .first()
            .is_some_and(|m| m.base_offset == before[2].base_offset)
        {
            assert_eq!(now.len(), before.len() - 2);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "remote segments not deleted: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let st = c.tiering_status(Some("trim")).await.unwrap().remove(0);
    assert_eq!(st.log_start_offset, cut, "{st:?}");

    // Bad offsets: past the high watermark, or negative other than -1.
    let r = c.delete_records("trim", 0, 3001).await.unwrap_err();
    assert_eq!(
        r.code(),
        Some(shale_records::ErrorCode::OffsetOutOfRange),
        "{r}"
    );
    let raw = broker.cli(&["topic", "delete-records", "trim", "--offset", "-5"], None);
    assert!(!raw.status.success());
    let r = c.delete_records("nope", 0, 1).await.unwrap_err();
    assert_eq!(
        r.code(),
        Some(shale_records::ErrorCode::UnknownTopicOrPartition),
        "{r}"
    );
    // Lower than the start: nothing changes, the start is answered.
    assert_eq!(c.delete_records("trim", 0, 10).await.unwrap(), cut);

    // After a SIGKILL and restart the start is where it was.
    broker.kill();
    broker.start_again().await;
    let c = broker.client().await;
    assert_eq!(c.list_offset("trim", 0, -2).await.unwrap(), Some(cut));
    assert_eq!(consume_all(&broker, "trim").len() as i64, 3000 - cut);

    // Everything: the log is empty, and appends go on at its end.
    let out = broker.cli_ok(
        &["topic", "delete-records", "trim", "--offset", "end"],
        None,
    );
    assert!(out.contains("trim\t0\t3000"), "{out}");
    assert!(consume_all(&broker, "trim").is_empty());
    produce(&c, "trim", 1, 10).await;
    let lines = consume_all(&broker, "trim");
    assert_eq!(lines.len(), 10);
    assert!(lines[0].starts_with("3000 "), "{}", lines[0]);
}
