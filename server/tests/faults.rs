//! Fault classes no other test covers, against real brokers:
//! - network partitions (three brokers in network namespaces of their own, through
//!   `shale-chaos`; needs root): the leader cut from the other brokers, from
//!   PostgreSQL, or from clients only;
//! - a full disk (a broker on a small tmpfs; needs root): retriable refusals, nothing
//!   corrupt, nothing acknowledged lost, recovery by itself once space returns;
//! - power loss after fsyncs: after SIGKILL the active segment is cut back to its last
//!   fsync (which the test knows from `flush.messages`), and what the README promises
//!   survives;
//! - corruption: a flipped bit in a sealed local segment is `CORRUPT_MESSAGE` naming
//!   the file and no bad byte reaches a consumer (the remote object's case is in
//!   `tiering.rs`, the damaged index in the log's unit tests).
//!
//! Each prints what it saw (fault histories, counts) and asserts no timing.

mod common;

use std::time::{Duration, Instant};

use common::Broker;
use shale_chaos::faults::Fault;
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};
use shale_records::ErrorCode;
use shale_records::batch::BatchIter;

fn postgres_server() -> String {
    shale_testkit::postgres::server()
}

fn require_root(what: &str) {
    assert!(
        rustix::process::geteuid().is_root(),
        "{what} needs root (network namespaces, tmpfs mounts): run the tests as root, as CI does"
    );
}

/// One scripted fault on the cluster of `shale-chaos` under its producers and group,
/// then the checker: nothing acknowledged lost, no duplicate, dense offsets, order,
/// the group's coverage, a contiguous remote log.
async fn scripted(name: &str, fault: Fault, hold: Duration) {
    require_root(name);
    let work = tempfile::tempdir().unwrap();
    let outcome = shale_chaos::run(shale_chaos::Options {
        seed: std::process::id() as u64,
        script: Some(vec![(fault, 0, hold)]),
        duration: Duration::ZERO,
        postgres: postgres_server(),
        work: work.path().to_path_buf(),
        faults: Vec::new(),
        producers: 2,
        rate: 200,
        kafka: false,
    })
    .await
    .unwrap_or_else(|e| panic!("[{name}] the run failed: {e:#}"));
    let r = &outcome.report;
    eprintln!(
        "[{name}] {:?}: {} acknowledged, {} sends failed, {} stored, {} seen by the group",
        outcome.history, r.acked, outcome.failed_sends, r.stored, r.consumed
    );
    assert!(r.acked > 0, "[{name}] nothing was acknowledged");
    assert!(
        outcome.ok(),
        "[{name}] violations:\n{}",
        r.violations.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_from_the_other_brokers_loses_nothing() {
    scripted(
        "cut from brokers",
        Fault::CutBrokers,
        Duration::from_secs(8),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_from_postgres_loses_nothing() {
    scripted(
        "cut from PostgreSQL",
        Fault::CutPostgres,
        Duration::from_secs(8),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_from_clients_loses_nothing() {
    scripted(
        "cut from clients",
        Fault::CutClients,
        Duration::from_secs(8),
    )
    .await;
}

/// A tmpfs mounted for the test's life.
struct Tmpfs(std::path::PathBuf);

impl Tmpfs {
    fn mount(at: &std::path::Path, size_mib: u64) -> Self {
        std::fs::create_dir_all(at).unwrap();
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size_mib}m"), "tmpfs"])
            .arg(at)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cannot mount a tmpfs: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Self(at.to_path_buf())
    }

    fn free_bytes(&self) -> u64 {
        let s = rustix::fs::statvfs(&self.0).unwrap();
        s.f_bavail * s.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .output();
    }
}

/// Sends up to `n` records of `size` bytes, one request at a time, stopping after
/// `give_up` refusals; the acknowledged ones (offset, value) and the error codes of
/// the others.
async fn send_each(
    client: &Client,
    topic: &str,
    from: usize,
    n: usize,
    size: usize,
    give_up: usize,
) -> (Vec<(i64, String)>, Vec<Option<ErrorCode>>) {
    let producer = Producer::new(client.clone(), topic, Acks::All)
        .await
        .unwrap()
        .with_delivery_timeout(Duration::from_secs(2));
    let (mut acked, mut failed) = (Vec::new(), Vec::new());
    for i in from..from + n {
        let value = format!("{i:08}-{}", "f".repeat(size));
        let record = ProducerRecord {
            value: Some(value.clone().into()),
            partition: Some(0),
            ..Default::default()
        };
        match producer.send(record).await.unwrap().await {
            Ok(m) => acked.push((m.offset, value)),
            Err(e) => failed.push(e.code()),
        }
        if failed.len() >= give_up {
            break;
        }
    }
    (acked, failed)
}

/// Every record of partition 0 from offset 0, as (offset, value).
async fn read_partition(client: &Client, topic: &str) -> Vec<(i64, String)> {
    let end = client.list_offset(topic, 0, -1).await.unwrap().unwrap_or(0);
    let mut c = Consumer::new(client.clone(), topic, Some(vec![0]), StartFrom::Offset(0))
        .await
        .unwrap()
        .with_offset_reset(shale_client::OffsetReset::Earliest);
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while out.last().is_none_or(|(o, _)| o + 1 < end) && end > 0 {
        assert!(Instant::now() < deadline, "read stalled at {out:?}");
        for r in c.poll(Duration::from_secs(1)).await.unwrap() {
            out.push((
                r.offset,
                String::from_utf8(r.value.unwrap().to_vec()).unwrap(),
            ));
        }
    }
    out
}

fn assert_holds(log: &[(i64, String)], acked: &[(i64, String)]) {
    for (i, (offset, _)) in log.iter().enumerate() {
        assert_eq!(*offset, i as i64, "offsets are dense from 0");
    }
    for (offset, value) in acked {
        assert_eq!(
            log.get(*offset as usize).map(|(_, v)| v),
            Some(value),
            "acknowledged record at {offset}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_retriably_loses_nothing_and_recovers_by_itself() {
    require_root("the full-disk test");
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let fs = Tmpfs::mount(&dir.path().join("data"), 24);
    let metastore = format!("sqlite://{}/metastore.db", outside.path().display());
    let objects = format!("file://{}/objects", outside.path().display());
    let mut broker = Broker::start_limited(
        dir,
        &[
            "--metastore-url",
            &metastore,
            "--object-store-url",
            &objects,
        ],
        4096,
    )
    .await;
    let c = broker.client().await;
    let configs = [
        ("segment.bytes", "1048576"),
        ("remote.storage.enable", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    c.create_topic("full", 1, 1, configs).await.unwrap();
    // Leave about 3 MiB free.
    let filler = fs.0.join("filler");
    let free = fs.free_bytes();
    std::fs::write(&filler, vec![0u8; (free - (3 << 20)) as usize]).unwrap();
    let (acked, failed) = send_each(&c, "full", 0, 600, 10_000, 8).await;
    eprintln!(
        "[full disk] {} acknowledged, {} refused: {:?}",
        acked.len(),
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    );
    assert!(
        !acked.is_empty() && !failed.is_empty(),
        "the disk never filled"
    );
    assert!(
        failed
            .iter()
            .all(|code| *code == Some(ErrorCode::KafkaStorageError)),
        "refusals are the retriable KAFKA_STORAGE_ERROR: {failed:?}"
    );
    assert_holds(&read_partition(&c, "full").await, &acked);

    // Space returns: produce works again without a restart.
    std::fs::remove_file(&filler).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut more = Vec::new();
    while more.len() < 20 {
        assert!(Instant::now() < deadline, "produce did not resume");
        let (a, _) = send_each(&c, "full", 1000 + more.len(), 5, 10_000, 1).await;
        more.extend(a);
    }
    // A SIGKILL and restart recover a log with nothing corrupt and nothing lost.
    broker.kill();
    broker.start_again().await;
    let c = broker.client().await;
    let log = read_partition(&c, "full").await;
    assert_holds(&log, &acked);
    assert_holds(&log, &more);
    drop(fs);
}

/// The byte position where the batch holding `offset` ends in a segment file.
fn end_of_batch(segment: &std::path::Path, offset: i64) -> u64 {
    let bytes = std::fs::read(segment).unwrap();
    for item in BatchIter::new(&bytes) {
        let (h, range) = item.unwrap();
        if h.last_offset() >= offset {
            return range.end as u64;
        }
    }
    panic!("offset {offset} is not in {}", segment.display());
}

fn active_segment(broker: &Broker, topic: &str) -> std::path::PathBuf {
    let dir = broker.data_dir().join(format!("{topic}-0"));
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().unwrap()
}

/// Power loss imitated after SIGKILL: the active segment is cut back to its last
/// fsync. With `flush.messages=1` every acknowledged record was fsynced before its
/// answer and survives; with `flush.messages=10`, records are fsynced in tens (each
/// record here is its own append), and everything up to the last ten survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_power_loss_keeps_what_was_fsynced() {
    for every in [1usize, 10] {
        let mut broker = Broker::start(&[]).await;
        let c = broker.client().await;
        let topic = format!("fsync{every}");
        let configs = [
            ("flush.messages", every.to_string()),
            ("remote.storage.enable", "false".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        c.create_topic(&topic, 1, 1, configs).await.unwrap();
        let (acked, failed) = send_each(&c, &topic, 0, 95, 100, 1).await;
        assert!(failed.is_empty(), "{failed:?}");
        broker.kill();
        // The last fsync came after the append that made the unflushed count reach
        // `every`: after offset (95 / every) * every - 1.
        let synced = (acked.len() / every * every) as i64;
        let segment = active_segment(&broker, &topic);
        let cut = end_of_batch(&segment, synced - 1);
        std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .unwrap()
            .set_len(cut)
            .unwrap();
        broker.start_again().await;
        let c = broker.client().await;
        let log = read_partition(&c, &topic).await;
        eprintln!(
            "[flush.messages={every}] {} acknowledged, {} fsynced, {} after the power loss",
            acked.len(),
            synced,
            log.len()
        );
        assert_eq!(log.len() as i64, synced);
        assert_holds(&log, &acked[..synced as usize]);
        if every == 1 {
            assert_eq!(log.len(), acked.len(), "flush.messages=1 keeps every ack");
        }
    }
}

/// A flipped bit in a sealed local segment: the fetch that reaches it is
/// CORRUPT_MESSAGE naming the file, the consumer gets no byte of it, the records
/// around it still read, and the broker keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_local_segment_is_refused_by_name_and_nothing_bad_is_served() {
    let mut broker = Broker::start(&[]).await;
    let c = broker.client().await;
    let configs = [
        ("segment.bytes", "4096"),
        ("remote.storage.enable", "false"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    c.create_topic("rot", 1, 1, configs).await.unwrap();
    let (acked, _) = send_each(&c, "rot", 0, 200, 100, 1).await;
    broker.stop();
    // The second sealed segment: flip a bit in its first batch's records.
    let dir = broker.data_dir().join("rot-0");
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let damaged = &logs[1];
    let base: i64 = damaged
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let mut bytes = std::fs::read(damaged).unwrap();
    bytes[70] ^= 0x04;
    std::fs::write(damaged, &bytes).unwrap();
    broker.start_again().await;
    let c = broker.client().await;
    let r = c.fetch_partition("rot", 0, base, 1 << 20, 0).await.unwrap();
    assert_eq!(
        r.error_code,
        ErrorCode::CorruptMessage as i32,
        "{}",
        r.error_message
    );
    assert!(r.records.is_empty());
    assert!(
        r.error_message
            .contains(damaged.file_name().unwrap().to_str().unwrap()),
        "{}",
        r.error_message
    );
    // Before it, the records up to the damage; after it, the rest; the broker lives.
    let r = c.fetch_partition("rot", 0, 0, 1 << 20, 0).await.unwrap();
    assert_eq!(r.error_code, 0, "{}", r.error_message);
    for item in BatchIter::new(&r.records) {
        let (h, range) = item.unwrap();
        h.validate(&r.records[range]).unwrap();
        assert!(h.last_offset() < base);
    }
    let next = logs[2]
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse::<i64>()
        .unwrap();
    let r = c.fetch_partition("rot", 0, next, 1 << 20, 0).await.unwrap();
    assert_eq!(r.error_code, 0, "{}", r.error_message);
    assert!(!r.records.is_empty());
    assert!(broker.is_alive());
    assert!(acked.len() == 200);
}
