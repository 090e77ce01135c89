//! Replication and fail-over with real brokers: three `shale-broker` processes on
//! loopback ports sharing a real PostgreSQL metastore and a real S3 server (`s3s-fs`),
//! under a steady acks=all producer (replication factor 3, min.insync.replicas 2).
//! Brokers are killed with SIGKILL, paused with SIGSTOP, restarted one by one, and cut
//! off from PostgreSQL; afterwards a checker reads every partition from offset 0 and
//! compares it with what was acknowledged: nothing acknowledged may be lost, offsets
//! must be dense, and each partition must keep the order records were sent in.
//! Fail-over and catch-up times are printed, never asserted.

mod common;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Broker, PgDatabase, S3Server};
use shale_client::{Acks, Client, Consumer, Producer, ProducerRecord, StartFrom};
use shale_proto::v1::data_client::DataClient;
use shale_proto::v1::{PartitionProduceData, ProduceRequest};
use shale_records::ErrorCode;

const TOPIC: &str = "orders";
const PARTITIONS: i32 = 3;

/// Short leases so faults resolve in seconds.
const CLUSTER_TOML: &str = "[cluster]\nlease_ms = 3000\nheartbeat_interval_ms = 500\n\
    controller_interval_ms = 200\nreplica_lag_time_max_ms = 2000\nreplica_fetch_max_wait_ms = 200\n\
    [tiering]\nupload_interval_ms = 200\n\
    [log]\nmetadata_refresh_interval_ms = 500\nretention_check_interval_ms = 200\n\
    [groups]\nmin_session_timeout_ms = 500\ninitial_rebalance_delay_ms = 0\n";

struct Cluster {
    /// Broker id `i + 1` at index `i`.
    brokers: Vec<Broker>,
    /// Every broker's arguments but its id.
    args: Vec<String>,
    _cfg: tempfile::TempDir,
    _s3: S3Server,
    db: PgDatabase,
}

impl Cluster {
    /// Starts `n` brokers on a fresh database, reached through `via` if given.
    async fn start(n: i32, via: Option<&PgProxy>) -> Self {
        Self::start_with(n, via, "").await
    }

    /// [`Cluster::start`] with more `[cluster]` settings.
    async fn start_with(n: i32, via: Option<&PgProxy>, cluster_extra: &str) -> Self {
        let s3 = S3Server::start("shale-cluster");
        let cfg_dir = tempfile::tempdir().unwrap();
        // Replicas stay where the tests put them, unless a test balances.
        let balance = if cluster_extra.contains("auto_balance_enable") {
            ""
        } else {
            "auto_balance_enable = false\n"
        };
        let toml = CLUSTER_TOML.replace(
            "[cluster]\n",
            &format!("[cluster]\n{balance}{cluster_extra}"),
        );
        let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(&toml));
        let db = PgDatabase::create();
        let url = match via {
            Some(proxy) => db.url().replace(":5432/", &format!(":{}/", proxy.port)),
            None => db.url(),
        };
        let object_store = format!("s3://{}/cluster", s3.bucket);
        let args = [
            "--config",
            cfg.to_str().unwrap(),
            "--metastore-url",
            &url,
            "--object-store-url",
            &object_store,
        ];
        let mut cluster = Cluster {
            brokers: Vec::new(),
            args: args.iter().map(|a| a.to_string()).collect(),
            _cfg: cfg_dir,
            _s3: s3,
            db,
        };
        for _ in 0..n {
            cluster.add_broker(&[]).await;
        }
        cluster
    }

    /// Starts the next broker (id: one more than the last), with `extra` arguments.
    async fn add_broker(&mut self, extra: &[&str]) -> i32 {
        let id = self.brokers.len() as i32 + 1;
        let id_arg = id.to_string();
        let mut args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        args.extend(["--broker-id", &id_arg]);
        args.extend(extra);
        self.brokers.push(Broker::start(&args).await);
        id
    }

    fn broker(&mut self, id: i32) -> &mut Broker {
        &mut self.brokers[(id - 1) as usize]
    }

    fn bootstrap(&self) -> String {
        self.brokers
            .iter()
            .map(Broker::address)
            .collect::<Vec<_>>()
            .join(",")
    }

    async fn client(&self) -> Client {
        Client::connect(&self.bootstrap())
            .await
            .unwrap()
            .with_request_timeout(Duration::from_secs(5))
    }

    /// Leader, epoch and ISR of every partition, as broker `via` reports them.
    async fn partitions(&self, via: i32) -> Vec<(i32, i32, Vec<i32>)> {
        let c = Client::connect(&self.brokers[(via - 1) as usize].address())
            .await
            .unwrap();
        c.describe_topic(TOPIC)
            .await
            .unwrap()
            .partitions
            .into_iter()
            .map(|p| (p.leader, p.leader_epoch, p.isr))
            .collect()
    }

    /// Waits until the partitions (as `via` sees them) satisfy `cond`; returns how long.
    async fn wait_until(
        &self,
        via: i32,
        what: &str,
        cond: impl Fn(&[(i32, i32, Vec<i32>)]) -> bool,
    ) -> Duration {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(60);
        loop {
            let parts = self.partitions(via).await;
            if cond(&parts) {
                return start.elapsed();
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {parts:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn create_topic(&self) {
        self.create_topic_with(&[]).await
    }

    /// Waits until every broker knows `TOPIC` with a leader for each partition: a
    /// broker learns of a new topic at its next metadata refresh, and a client that
    /// asks it before then is told the topic does not exist.
    async fn wait_for_topic_everywhere(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        for broker in &self.brokers {
            let c = Client::connect(&broker.address()).await.unwrap();
            loop {
                let known = c.describe_topic(TOPIC).await;
                if known.as_ref().is_ok_and(|t| {
                    !t.partitions.is_empty() && t.partitions.iter().all(|p| p.leader > 0)
                }) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "timed out waiting for {} to know {TOPIC}: {known:?}",
                    broker.address()
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }

    async fn create_topic_with(&self, extra: &[(&str, &str)]) {
        let mut configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
        configs.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        self.client()
            .await
            .create_topic(TOPIC, PARTITIONS, 3, configs)
            .await
            .unwrap();
        self.wait_until(1, "every replica in the ISR", |ps| {
            ps.iter().all(|(l, _, isr)| *l > 0 && isr.len() == 3)
        })
        .await;
    }
}

/// One acknowledged record: partition, offset, sequence number (its value is `r-{seq}`).
type Ack = (i32, i64, u64);

/// A steady acks=all producer: batches of 30 records spread over the partitions,
/// recording what was acknowledged.
struct Load {
    acked: Arc<Mutex<Vec<Ack>>>,
    failed: Arc<Mutex<usize>>,
    stop: Arc<AtomicBool>,
    /// While set, no send starts; `idle` says none is in flight.
    paused: Arc<AtomicBool>,
    idle: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Load {
    async fn start(client: Client) -> Self {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let failed = Arc::new(Mutex::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut producer = Producer::new(client, TOPIC, Acks::All).await.unwrap();
        let paused = Arc::new(AtomicBool::new(false));
        let idle = Arc::new(AtomicBool::new(false));
        let (a, f, s) = (acked.clone(), failed.clone(), stop.clone());
        let (p, i) = (paused.clone(), idle.clone());
        let task = tokio::spawn(async move {
            let mut seq = 0u64;
            while !s.load(Ordering::Relaxed) {
                if p.load(Ordering::SeqCst) {
                    i.store(true, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
                i.store(false, Ordering::SeqCst);
                let records = (seq..seq + 30)
                    .map(|i| ProducerRecord {
                        partition: Some((i % PARTITIONS as u64) as i32),
                        value: Some(Bytes::from(format!("r-{i}"))),
                        ..Default::default()
                    })
                    .collect();
                match producer.send_all(records).await {
                    Ok(meta) => {
                        let mut acked = a.lock().unwrap();
                        for (i, m) in meta.iter().enumerate() {
                            acked.push((m.partition, m.offset, seq + i as u64));
                        }
                    }
                    Err(e) => {
                        eprintln!("send failed (not acknowledged): {e}");
                        *f.lock().unwrap() += 30;
                    }
                }
                seq += 30;
            }
        });
        Load {
            acked,
            failed,
            stop,
            paused,
            idle,
            task,
        }
    }

    /// Stops sending, once the send in flight is answered.
    async fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        while !self.idle.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    fn count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }

    /// Waits for `more` acknowledgements beyond the current count.
    async fn wait_more(&self, more: usize) {
        let target = self.count() + more;
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.count() < target {
            assert!(
                Instant::now() < deadline,
                "the producer made no progress: {} acked",
                self.count()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn finish(self) -> (Vec<Ack>, usize) {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap();
        let acked = self.acked.lock().unwrap().clone();
        let failed = *self.failed.lock().unwrap();
        (acked, failed)
    }
}

/// Reads every partition from offset 0 up to its high watermark and checks it against
/// the acknowledgements. Returns the number of records read.
async fn check(client: Client, acked: &[Ack]) -> usize {
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        ends.insert(p, client.list_offset(TOPIC, p, -1).await.unwrap().unwrap());
    }
    let mut consumer = Consumer::new(client, TOPIC, None, StartFrom::Offset(0))
        .await
        .unwrap()
        .with_offset_reset(shale_client::OffsetReset::Earliest);
    let mut log: HashMap<(i32, i64), String> = HashMap::new();
    let mut next: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while next.iter().any(|(p, o)| *o < ends[p]) {
        assert!(
            Instant::now() < deadline,
            "could not read back to {ends:?}, at {next:?}"
        );
        for r in consumer.poll(Duration::from_millis(500)).await.unwrap() {
            let expected = next.get_mut(&r.partition).unwrap();
            assert_eq!(
                r.offset, *expected,
                "offset gap in partition {}",
                r.partition
            );
            *expected += 1;
            let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            log.insert((r.partition, r.offset), value);
        }
    }
    for &(p, offset, seq) in acked {
        let want = format!("r-{seq}");
        assert_eq!(
            log.get(&(p, offset)),
            Some(&want),
            "acknowledged record {want} at {p}:{offset} is lost"
        );
    }
    // The producer is idempotent (acks=all): retries across failovers wrote nothing
    // twice, since followers rebuild the producers' sequences from what they copy.
    let mut values: Vec<&String> = log.values().collect();
    values.sort_unstable();
    let total = values.len();
    values.dedup();
    assert_eq!(
        values.len(),
        total,
        "{} records were written twice",
        total - values.len()
    );
    // Per-partition order: acknowledged records appear in the order they were sent.
    let mut by_partition: BTreeMap<i32, Vec<(i64, u64)>> = BTreeMap::new();
    for &(p, offset, seq) in acked {
        by_partition.entry(p).or_default().push((offset, seq));
    }
    for (p, mut v) in by_partition {
        v.sort_unstable();
        assert!(
            v.windows(2).all(|w| w[0].1 < w[1].1),
            "partition {p} reordered acknowledged records"
        );
    }
    log.len()
}

fn report(name: &str, acked: &[Ack], failed: usize, read: usize) {
    eprintln!(
        "[{name}] acknowledged {} records, {failed} sends failed after retries, {read} records read back, none lost",
        acked.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_of_the_leader_loses_no_acknowledged_record() {
    let mut cluster = Cluster::start(3, None).await;
    cluster.create_topic().await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(600).await;

    let victim = cluster.partitions(1).await[0].0;
    let other = if victim == 1 { 2 } else { 1 };
    let killed = Instant::now();
    cluster.broker(victim).kill();
    let failover = cluster
        .wait_until(other, "a new leader of partition 0", |ps| {
            ps[0].0 > 0 && ps[0].0 != victim
        })
        .await;
    load.wait_more(1).await;
    eprintln!(
        "[kill -9] leader {victim} killed: new leader after {:?}, first acknowledgement after {:?}",
        failover,
        killed.elapsed()
    );
    load.wait_more(600).await;
    cluster
        .wait_until(other, "the ISR to drop the dead broker", |ps| {
            ps.iter().all(|(_, _, isr)| !isr.contains(&victim))
        })
        .await;

    // `shale cluster status` shows the dead broker and a live controller.
    let out = common::run_cli(
        &cluster.broker(other).address(),
        &["cluster", "status"],
        None,
    );
    let status = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{status}");
    let alive: Vec<(String, String)> = status
        .lines()
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].to_string(), f[2].to_string())
        })
        .collect();
    assert_eq!(alive.len(), 3, "{status}");
    for (id, live) in alive {
        assert_eq!(live == "true", id != victim.to_string(), "{status}");
    }
    assert!(!status.starts_with("Controller: none"), "{status}");

    let restarted = Instant::now();
    cluster.broker(victim).start_again().await;
    let rejoin = cluster
        .wait_until(other, "the restarted broker back in every ISR", |ps| {
            ps.iter().all(|(_, _, isr)| isr.contains(&victim))
        })
        .await;
    eprintln!(
        "[kill -9] broker {victim} restarted, caught up and back in every ISR after {:?}",
        restarted.elapsed().max(rejoin)
    );
    load.wait_more(300).await;
    let (acked, failed) = load.finish().await;
    let read = check(cluster.client().await, &acked).await;
    report("kill -9", &acked, failed, read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_paused_leader_acknowledges_nothing_after_it_wakes() {
    let mut cluster = Cluster::start(3, None).await;
    cluster.create_topic().await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(300).await;

    let victim = cluster.partitions(1).await[0].0;
    let other = if victim == 1 { 2 } else { 1 };
    cluster.broker(victim).pause();
    let paused = Instant::now();
    let failover = cluster
        .wait_until(other, "a new leader of partition 0", |ps| {
            ps[0].0 > 0 && ps[0].0 != victim
        })
        .await;
    eprintln!("[SIGSTOP] leader {victim} paused: new leader after {failover:?}");
    load.wait_more(300).await;
    // Past the lease, then wake it up and ask it directly to take writes.
    tokio::time::sleep(Duration::from_millis(4_000).saturating_sub(paused.elapsed())).await;
    cluster.broker(victim).resume();
    let address = format!("http://{}", cluster.broker(victim).address());
    let mut direct = DataClient::connect(address).await.unwrap();
    for acks in [1, -1] {
        let request = ProduceRequest {
            acks,
            timeout_ms: 2_000,
            partitions: (0..PARTITIONS)
                .map(|partition| PartitionProduceData {
                    topic: TOPIC.into(),
                    partition,
                    records: one_record_batch(b"from-the-past"),
                })
                .collect(),
        };
        let answer = direct.produce(request).await.unwrap().into_inner();
        for p in answer.partitions {
            assert_ne!(
                p.error_code,
                ErrorCode::None as i32,
                "the woken broker acknowledged a write to partition {} (acks={acks})",
                p.partition
            );
        }
    }
    let rejoin = cluster
        .wait_until(other, "the woken broker back in every ISR", |ps| {
            ps.iter().all(|(_, _, isr)| isr.contains(&victim))
        })
        .await;
    eprintln!("[SIGSTOP] broker {victim} woke and rejoined every ISR after {rejoin:?}");
    load.wait_more(300).await;
    let (acked, failed) = load.finish().await;
    let read = check(cluster.client().await, &acked).await;
    assert!(read >= acked.len(), "fewer records than acknowledgements");
    report("SIGSTOP", &acked, failed, read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolling_restart_loses_no_acknowledged_record() {
    let mut cluster = Cluster::start(3, None).await;
    cluster.create_topic().await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(300).await;
    for id in 1..=3 {
        let other = if id == 1 { 2 } else { 1 };
        let started = Instant::now();
        cluster.broker(id).stop();
        cluster.broker(id).start_again().await;
        cluster
            .wait_until(other, "the restarted broker back in every ISR", |ps| {
                ps.iter().all(|(l, _, isr)| *l > 0 && isr.contains(&id))
            })
            .await;
        eprintln!(
            "[rolling restart] broker {id} back in every ISR after {:?}",
            started.elapsed()
        );
        load.wait_more(300).await;
    }
    let (acked, failed) = load.finish().await;
    let read = check(cluster.client().await, &acked).await;
    report("rolling restart", &acked, failed, read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_outages_cause_no_split_brain_and_the_cluster_recovers() {
    let proxy = PgProxy::start().await;
    let cluster = Cluster::start(3, Some(&proxy)).await;
    cluster.create_topic().await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(300).await;

    // Shorter than the fencing margin: leaders keep acknowledging.
    let before = load.count();
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let during_short = load.count() - before;
    proxy.restore();
    eprintln!("[postgres outage] 1.2 s outage: {during_short} records acknowledged meanwhile");
    load.wait_more(300).await;

    // Longer than the lease: every broker fences itself, then all recover.
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let fenced_at = load.count();
    tokio::time::sleep(Duration::from_millis(3_000)).await;
    let while_fenced = load.count() - fenced_at;
    let restored = Instant::now();
    proxy.restore();
    load.wait_more(1).await;
    eprintln!(
        "[postgres outage] 6 s outage: {while_fenced} acknowledged after the lease lapsed; \
         writes resumed {:?} after PostgreSQL returned",
        restored.elapsed()
    );
    load.wait_more(300).await;
    let (acked, failed) = load.finish().await;
    let read = check(cluster.client().await, &acked).await;
    report("postgres outage", &acked, failed, read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_remote_log_has_no_gap_or_overlap_across_failovers() {
    let mut cluster = Cluster::start(3, None).await;
    // Small segments, copied as they seal and then dropped locally: reads below the
    // local log go to the object store.
    cluster
        .create_topic_with(&[("segment.bytes", "4096"), ("local.retention.bytes", "8192")])
        .await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(900).await;
    for round in 0..2 {
        let victim = cluster.partitions(1).await[0].0;
        let other = if victim == 1 { 2 } else { 1 };
        cluster.broker(victim).kill();
        let failover = cluster
            .wait_until(other, "a new leader of partition 0", |ps| {
                ps[0].0 > 0 && ps[0].0 != victim
            })
            .await;
        eprintln!("[tiering] round {round}: leader {victim} killed, new leader after {failover:?}");
        load.wait_more(900).await;
        cluster.broker(victim).start_again().await;
        cluster
            .wait_until(other, "the restarted broker back in every ISR", |ps| {
                ps.iter().all(|(_, _, isr)| isr.contains(&victim))
            })
            .await;
    }
    let (acked, failed) = load.finish().await;
    // Let the leaders copy what sealed last.
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in 0..PARTITIONS {
        let rows = cluster.db.query(&format!(
            "SELECT base_offset, end_offset, leader_epoch FROM remote_segments \
             WHERE partition_id = {p} AND state = 'COPY_FINISHED' ORDER BY base_offset"
        ));
        let segs: Vec<(i64, i64, i32)> = rows
            .iter()
            .map(|r| {
                let f: Vec<&str> = r.split('|').collect();
                (
                    f[0].parse().unwrap(),
                    f[1].parse().unwrap(),
                    f[2].parse().unwrap(),
                )
            })
            .collect();
        assert!(!segs.is_empty(), "partition {p}: nothing copied");
        for w in segs.windows(2) {
            assert_eq!(
                w[0].1 + 1,
                w[1].0,
                "partition {p}: gap or overlap in {segs:?}"
            );
        }
        let epochs: std::collections::BTreeSet<i32> = segs.iter().map(|s| s.2).collect();
        eprintln!(
            "[tiering] partition {p}: {} remote segments, offsets {}..={}, copied under leader epochs {epochs:?}",
            segs.len(),
            segs[0].0,
            segs.last().unwrap().1
        );
    }
    let read = check(cluster.client().await, &acked).await;
    report("tiering across failovers", &acked, failed, read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_behind_the_leaders_local_log_restarts_there_and_catches_up() {
    let mut cluster = Cluster::start(3, None).await;
    cluster
        .create_topic_with(&[("segment.bytes", "4096"), ("local.retention.bytes", "8192")])
        .await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(300).await;
    // Broker 3 stops; the leaders tier and drop what it would need next.
    cluster.broker(3).stop();
    let c = cluster.client().await;
    let mut log_end = 0;
    for p in 0..PARTITIONS {
        log_end = log_end.max(c.list_offset(TOPIC, p, -1).await.unwrap().unwrap());
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = c.tiering_status(Some(TOPIC)).await.unwrap();
        if st.iter().all(|s| s.local_log_start_offset > log_end) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "local logs never moved past {log_end}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let restarted = Instant::now();
    cluster.broker(3).start_again().await;
    cluster
        .wait_until(1, "broker 3 back in every ISR", |ps| {
            ps.iter().all(|(_, _, isr)| isr.contains(&3))
        })
        .await;
    eprintln!(
        "[far behind] broker 3 restarted at the leaders' local log start and rejoined every ISR after {:?}",
        restarted.elapsed()
    );
    let (acked, failed) = load.finish().await;
    let read = check(cluster.client().await, &acked).await;
    report("far-behind follower", &acked, failed, read);
}

/// A TCP proxy in front of PostgreSQL that the test can cut (every connection
/// dropped, new ones closed at once) and restore.
struct PgProxy {
    port: u16,
    up: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl PgProxy {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let up = Arc::new(AtomicBool::new(true));
        let connections = Arc::new(Mutex::new(Vec::new()));
        let (u, conns) = (up.clone(), connections.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                if !u.load(Ordering::SeqCst) {
                    continue; // dropped: the client sees the connection closed
                }
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect("127.0.0.1:5432").await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        PgProxy {
            port,
            up,
            connections,
        }
    }

    fn cut(&self) {
        self.up.store(false, Ordering::SeqCst);
        for c in self.connections.lock().unwrap().drain(..) {
            c.abort();
        }
    }

    fn restore(&self) {
        self.up.store(true, Ordering::SeqCst);
    }
}

fn one_record_batch(value: &[u8]) -> Bytes {
    let mut b = shale_records::record::BatchBuilder::new(0);
    b.push(shale_records::record::Record::new(None, Some(value), 0));
    b.build()
}

/// The broker coordinating `group`, as broker `via` sees it.
async fn coordinator_of(cluster: &Cluster, via: i32, group: &str) -> i32 {
    let address = cluster.brokers[(via - 1) as usize].address();
    let mut g = shale_proto::v1::groups_client::GroupsClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    g.find_coordinator(shale_proto::v1::FindCoordinatorRequest {
        group_id: group.into(),
    })
    .await
    .unwrap()
    .into_inner()
    .broker_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_group_survives_the_kill_of_its_coordinator_with_its_offsets() {
    let mut cluster = Cluster::start(3, None).await;
    cluster.create_topic().await;
    let client = cluster.client().await;
    let load = Load::start(client.clone()).await;
    load.wait_more(300).await;
    let mut config = shale_client::GroupConfig::new("fo");
    config.session_timeout = std::time::Duration::from_secs(2);
    config.heartbeat_interval = Duration::from_millis(200);
    config.auto_commit_interval = None;
    config.auto_offset_reset = shale_client::OffsetReset::Earliest;
    let mut members: Vec<common::Member> = (0..2)
        .map(|_| common::Member::start(&client, TOPIC, config.clone()))
        .collect();
    common::settle(&members, |a| a.iter().all(|a| !a.is_empty())).await;
    let coordinator = coordinator_of(&cluster, 1, "fo").await;
    assert!(coordinator > 0);
    // Read for a while, then kill the coordinator.
    let mut read: Vec<(i32, i64)> = Vec::new();
    let drain = |members: &mut Vec<common::Member>, read: &mut Vec<(i32, i64)>| {
        for m in members.iter_mut() {
            while let Ok(r) = m.records.try_recv() {
                read.push((r.partition, r.offset));
            }
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while read.len() < 500 {
        drain(&mut members, &mut read);
        assert!(Instant::now() < deadline, "the group read nothing");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let committed_before: i64 = client.committed_offsets("fo").await.unwrap().values().sum();
    let killed = Instant::now();
    cluster.broker(coordinator).kill();
    let survivor = if coordinator == 1 { 2 } else { 1 };
    // A new coordinator is chosen among the live brokers; the members join it.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        drain(&mut members, &mut read);
        let now = coordinator_of(&cluster, survivor, "fo").await;
        let describe = Client::connect(&cluster.brokers[(survivor - 1) as usize].address())
            .await
            .unwrap()
            .describe_group("fo")
            .await;
        if now != coordinator && describe.is_ok_and(|d| d.state == "Stable" && d.members.len() == 2)
        {
            println!(
                "coordinator {coordinator} killed; broker {now} coordinates the group with both members {:?} later",
                killed.elapsed()
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the group never moved to a live coordinator"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (acked, _) = load.finish().await;
    // Everything acknowledged is read (at least once, no gap) and the commits moved on
    // from where they were: they live in the metastore, not on the dead coordinator.
    let ends: BTreeMap<i32, i64> = {
        let mut e = BTreeMap::new();
        for p in 0..PARTITIONS {
            e.insert(p, client.list_offset(TOPIC, p, -1).await.unwrap().unwrap());
        }
        e
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        drain(&mut members, &mut read);
        let distinct: std::collections::BTreeSet<(i32, i64)> = read.iter().copied().collect();
        let complete = ends
            .iter()
            .all(|(p, end)| distinct.iter().filter(|(q, _)| q == p).count() as i64 == *end);
        if complete {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "read {} distinct records, the log holds {}",
            distinct.len(),
            ends.values().sum::<i64>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let committed: i64 = client.committed_offsets("fo").await.unwrap().values().sum();
        if committed == ends.values().sum::<i64>() {
            assert!(committed > committed_before);
            break;
        }
        assert!(Instant::now() < deadline, "commits stopped at {committed}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "{} acknowledged, {} read ({} again after the coordinator moved)",
        acked.len(),
        read.len(),
        read.len() - ends.values().sum::<i64>() as usize
    );
    for m in members {
        m.stop().await;
    }
}

/// The replicas of partition 0 in assignment order, as broker `via` reports them.
async fn replicas_of_partition_0(cluster: &Cluster, via: i32) -> Vec<i32> {
    let c = Client::connect(&cluster.brokers[(via - 1) as usize].address())
        .await
        .unwrap();
    c.describe_topic(TOPIC).await.unwrap().partitions[0]
        .replicas
        .clone()
}

/// The active (last) segment file of partition 0 in a broker's data directory.
fn active_segment(broker: &Broker) -> std::path::PathBuf {
    let dir = broker.data_dir().join(format!("{TOPIC}-0"));
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.pop().expect("partition 0 has a segment")
}

/// A follower loses data while down (`wipe`: its whole disk; else the unflushed tail
/// of partition 0's active segment, as a power loss would), the leader is then paused
/// and the follower restarted at once, within its lease: the controller must elect the
/// replica that holds everything, not the one that lost it.
async fn a_follower_that_lost_data_is_not_elected(wipe: bool) {
    let name = if wipe { "empty disk" } else { "lost tail" };
    let mut cluster = Cluster::start(3, None).await;
    cluster.create_topic().await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(3_000).await;
    let (acked, failed) = load.finish().await;

    let replicas = replicas_of_partition_0(&cluster, 1).await;
    let leader = cluster.partitions(1).await[0].0;
    let pos = replicas.iter().position(|&b| b == leader).unwrap();
    let follower = replicas[(pos + 1) % replicas.len()];
    let third = replicas[(pos + 2) % replicas.len()];
    // A restart moves the follower's leaderships away: it now leads nothing (as in a
    // cluster with more brokers than partitions), so its start-up fence waits for none.
    cluster.broker(follower).stop();
    cluster.broker(follower).start_again().await;
    cluster
        .wait_until(third, "the follower back in every ISR", |ps| {
            ps.iter()
                .all(|(l, _, isr)| *l != follower && isr.contains(&follower))
        })
        .await;
    cluster.broker(follower).kill();
    if wipe {
        std::fs::remove_dir_all(cluster.broker(follower).data_dir()).unwrap();
    } else {
        let segment = active_segment(cluster.broker(follower));
        let len = std::fs::metadata(&segment).unwrap().len();
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&segment)
            .unwrap();
        file.set_len(len / 4).unwrap();
        eprintln!(
            "[{name}] cut {} from {len} to {} bytes",
            segment.display(),
            len / 4
        );
    }
    cluster.broker(leader).pause();
    cluster.broker(follower).start_again().await;
    eprintln!(
        "[{name}] after the restart: {:?}",
        cluster.partitions(third).await
    );
    let failover = cluster
        .wait_until(third, "a new leader of partition 0", |ps| {
            ps[0].0 > 0 && ps[0].0 != leader
        })
        .await;
    let elected = cluster.partitions(third).await[0].0;
    eprintln!(
        "[{name}] leader {leader} paused, follower {follower} restarted: broker {elected} elected after {failover:?}"
    );
    cluster.broker(leader).kill();
    // Every acknowledged record is still there, whoever leads now.
    let client = Client::connect(&format!(
        "{},{}",
        cluster.broker(follower).address(),
        cluster.broker(third).address()
    ))
    .await
    .unwrap()
    .with_request_timeout(Duration::from_secs(5));
    let read = check(client, &acked).await;
    assert_ne!(elected, follower, "the broker that lost data was elected");
    report(name, &acked, failed, read);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_that_lost_its_unflushed_tail_is_not_elected() {
    a_follower_that_lost_data_is_not_elected(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_back_with_an_empty_disk_is_not_elected() {
    a_follower_that_lost_data_is_not_elected(true).await;
}

/// A crash between a replicated append and the leader-epoch checkpoint write leaves a
/// checkpoint that lags the log. Imitated here by removing the checkpoint's newest
/// epoch from a killed follower: on restart it must rebuild that epoch from its
/// batches, not take the leader's answer as a divergence and cut committed records.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follower_whose_epoch_checkpoint_lags_its_log_truncates_nothing() {
    let mut cluster = Cluster::start(3, None).await;
    cluster.create_topic().await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(600).await;
    // A failover starts epoch 1 of partition 0; its records reach every replica.
    let first = cluster.partitions(1).await[0].0;
    let other = if first == 1 { 2 } else { 1 };
    cluster.broker(first).kill();
    cluster
        .wait_until(other, "a new leader of partition 0", |ps| {
            ps[0].0 > 0 && ps[0].0 != first
        })
        .await;
    load.wait_more(600).await;
    cluster.broker(first).start_again().await;
    cluster
        .wait_until(other, "every replica in the ISR", |ps| {
            ps.iter().all(|(_, _, isr)| isr.len() == 3)
        })
        .await;
    load.wait_more(600).await;
    let (acked, failed) = load.finish().await;
    let (leader, epoch, _) = cluster.partitions(other).await[0].clone();
    let follower = (1..=3).find(|&b| b != leader).unwrap();
    // Let the follower copy everything, then crash it and roll its checkpoint back.
    let deadline = Instant::now() + Duration::from_secs(30);
    let end = loop {
        let on = |b: i32| {
            let address = cluster.brokers[(b - 1) as usize].address();
            async move {
                let c = Client::connect(&address).await.unwrap();
                c.describe_topic(TOPIC).await.unwrap().partitions[0].log_end_offset
            }
        };
        let (l, f) = (on(leader).await, on(follower).await);
        if l == f {
            break f;
        }
        assert!(Instant::now() < deadline, "follower stuck at {f} of {l}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    cluster.broker(follower).kill();
    let checkpoint = cluster
        .broker(follower)
        .data_dir()
        .join(format!("{TOPIC}-0"))
        .join("leader-epoch-checkpoint");
    let text = std::fs::read_to_string(&checkpoint).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let entries = &lines[2..];
    assert!(entries.len() >= 2, "expected two epochs: {text}");
    assert!(
        entries.last().unwrap().starts_with(&format!("{epoch} ")),
        "{text}"
    );
    let lagging = format!(
        "0\n{}\n{}\n",
        entries.len() - 1,
        entries[..entries.len() - 1].join("\n")
    );
    std::fs::write(&checkpoint, lagging).unwrap();
    let log_before = cluster.broker(follower).log().len();
    cluster.broker(follower).start_again().await;
    // Its high watermark comes from the leader's answers: once it is the log end
    // again, the follower has fetched (and, had it diverged, truncated) since.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let c = cluster.broker(follower).client().await;
        let p = c.describe_topic(TOPIC).await.unwrap().partitions[0].clone();
        if p.high_watermark == end && p.log_end_offset == end {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower never caught up: {p:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let since_restart = cluster.broker(follower).log()[log_before..].to_string();
    let truncations: Vec<&str> = since_restart
        .lines()
        .filter(|l| l.contains("truncated log") || l.contains("log reset"))
        .collect();
    assert!(
        truncations.is_empty(),
        "the follower cut records of its log end {end} after restart: {truncations:?}"
    );
    let read = check(cluster.client().await, &acked).await;
    report("lagging epoch checkpoint", &acked, failed, read);
}

/// Partitions whose preferred replica (the first) is `broker`, and how many it leads.
async fn preferred_led(cluster: &Cluster, via: i32, broker: i32) -> (usize, usize) {
    let c = Client::connect(&cluster.brokers[(via - 1) as usize].address())
        .await
        .unwrap();
    let parts = c.describe_topic(TOPIC).await.unwrap().partitions;
    let mine: Vec<_> = parts.iter().filter(|p| p.replicas[0] == broker).collect();
    (
        mine.len(),
        mine.iter().filter(|p| p.leader == broker).count(),
    )
}

/// After a restart a broker leads nothing; `shale cluster elect-leaders` gives it back
/// the partitions it is the preferred replica of, once it is in sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preferred_leader_election_returns_leadership_to_a_restarted_broker() {
    let mut cluster = Cluster::start(3, None).await;
    cluster.create_topic().await;
    let (own, _) = preferred_led(&cluster, 2, 1).await;
    assert!(own > 0);
    cluster.broker(1).stop();
    cluster.broker(1).start_again().await;
    cluster
        .wait_until(2, "broker 1 back in every ISR", |ps| {
            ps.iter().all(|(_, _, isr)| isr.contains(&1))
        })
        .await;
    assert_eq!(preferred_led(&cluster, 2, 1).await, (own, 0));
    let out = common::run_cli(&cluster.bootstrap(), &["cluster", "elect-leaders"], None);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("\telected").count(), own, "{text}");
    assert_eq!(
        text.matches("ELECTION_NOT_NEEDED").count(),
        PARTITIONS as usize - own,
        "{text}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while preferred_led(&cluster, 2, 1).await != (own, own) {
        assert!(
            Instant::now() < deadline,
            "broker 1 did not lead its partitions"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// With `auto_leader_rebalance_enable` (the default) the controller does it by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_broker_takes_back_its_preferred_leaderships() {
    let mut cluster =
        Cluster::start_with(3, None, "leader_imbalance_check_interval_ms = 500\n").await;
    cluster.create_topic().await;
    let load = Load::start(cluster.client().await).await;
    load.wait_more(300).await;
    let (own, _) = preferred_led(&cluster, 2, 1).await;
    cluster.broker(1).stop();
    cluster
        .wait_until(2, "broker 1's leaderships moved", |ps| {
            ps.iter().all(|(l, _, _)| *l != 1 && *l > 0)
        })
        .await;
    cluster.broker(1).start_again().await;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    while preferred_led(&cluster, 2, 1).await != (own, own) {
        assert!(
            Instant::now() < deadline,
            "broker 1 never led its partitions again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "[rebalance] broker 1 led its {own} preferred partitions again {:?} after restarting",
        started.elapsed()
    );
    load.wait_more(300).await;
    let (acked, failed) = load.finish().await;
    let read = check(cluster.client().await, &acked).await;
    report("leader rebalance", &acked, failed, read);
}

/// DeleteRecords on a replicated partition: every replica starts its log at the new
/// offset, so a new leader after the old one is killed serves nothing below it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleted_records_stay_deleted_across_a_failover() {
    let mut cluster = Cluster::start(3, None).await;
    cluster
        .create_topic_with(&[("segment.bytes", "4096")])
        .await;
    let c = cluster.client().await;
    let mut p = Producer::new(c.clone(), TOPIC, Acks::All).await.unwrap();
    let records = (0..600)
        .map(|i| ProducerRecord {
            value: Some(format!("r-{i}-{}", "x".repeat(40)).into()),
            partition: Some(0),
            ..Default::default()
        })
        .collect();
    p.send_all(records).await.unwrap();
    assert_eq!(c.delete_records(TOPIC, 0, 250).await.unwrap(), 250);
    let leader = cluster.partitions(1).await[0].0;
    // Followers drop their whole segments below the cut too (they learn of it from
    // the metastore, not from the leader).
    let deadline = Instant::now() + Duration::from_secs(30);
    for follower in (1..=3).filter(|&b| b != leader) {
        let dir = cluster
            .broker(follower)
            .data_dir()
            .join(format!("{TOPIC}-0"));
        loop {
            let mut bases: Vec<i64> = std::fs::read_dir(&dir)
                .unwrap()
                .filter_map(|e| {
                    let name = e.unwrap().file_name().into_string().unwrap();
                    name.strip_suffix(".log")?.parse().ok()
                })
                .collect();
            bases.sort();
            // No segment ends below the cut: the second segment (if any) starts above it.
            if bases.get(1).is_none_or(|&b| b > 250) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "broker {follower} kept {bases:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    cluster.broker(leader).kill();
    let others: Vec<i32> = (1..=3).filter(|&b| b != leader).collect();
    cluster
        .wait_until(others[0], "a new leader of partition 0", |ps| {
            ps[0].0 > 0 && ps[0].0 != leader
        })
        .await;
    let client = Client::connect(&format!(
        "{},{}",
        cluster.broker(others[0]).address(),
        cluster.broker(others[1]).address()
    ))
    .await
    .unwrap()
    .with_request_timeout(Duration::from_secs(5));
    let deadline = Instant::now() + Duration::from_secs(30);
    let earliest = loop {
        match client.list_offset(TOPIC, 0, -2).await {
            Ok(o) => break o,
            Err(e) if e.is_retriable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("{e}"),
        }
    };
    assert_eq!(earliest, Some(250));
    let mut consumer = Consumer::new(client.clone(), TOPIC, Some(vec![0]), StartFrom::Earliest)
        .await
        .unwrap();
    let mut offsets = Vec::new();
    while offsets.len() < 350 {
        let got = consumer.poll(Duration::from_secs(2)).await.unwrap();
        assert!(!got.is_empty(), "read stalled at {} records", offsets.len());
        offsets.extend(got.iter().map(|r| r.offset));
    }
    assert_eq!(offsets.first(), Some(&250));
    assert_eq!(offsets, (250..600).collect::<Vec<_>>());
}

impl Cluster {
    /// The test topic on two brokers (replication factor 2, min.insync.replicas 2).
    async fn create_pair_topic(&self) {
        let configs = BTreeMap::from([("min.insync.replicas".to_string(), "2".to_string())]);
        self.client()
            .await
            .create_topic(TOPIC, PARTITIONS, 2, configs)
            .await
            .unwrap();
        self.wait_until(1, "both replicas in every ISR", |ps| {
            ps.iter().all(|(l, _, isr)| *l > 0 && isr.len() == 2)
        })
        .await;
    }

    /// Pauses the follower of partition 0 (of a topic on two brokers) until its leader
    /// has dropped it from the ISR; returns (leader, follower).
    async fn pause_the_follower_of_partition_0(&mut self) -> (i32, i32) {
        let leader = self.partitions(1).await[0].0;
        let follower = 3 - leader;
        self.broker(follower).pause();
        self.wait_until(leader, "the paused follower out of the ISR", |ps| {
            ps[0].2 == vec![leader]
        })
        .await;
        (leader, follower)
    }

    /// Sends `count` records to partition 0 (values `r-{first}`…), one batch each;
    /// returns the acknowledgements.
    async fn send(&self, acks: Acks, first: u64, count: u64) -> Vec<Ack> {
        self.send_with(self.client().await, acks, first, count)
            .await
    }

    /// [`Cluster::send`] through `client` (one that knows no paused broker: connecting
    /// to one hangs).
    async fn send_with(&self, client: Client, acks: Acks, first: u64, count: u64) -> Vec<Ack> {
        let mut producer = Producer::new(client, TOPIC, acks).await.unwrap();
        let mut acked = Vec::new();
        for seq in first..first + count {
            let record = ProducerRecord {
                partition: Some(0),
                value: Some(Bytes::from(format!("r-{seq}"))),
                ..Default::default()
            };
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                match producer.send_all(vec![record.clone()]).await {
                    Ok(meta) => {
                        acked.push((0, meta[0].offset, seq));
                        break;
                    }
                    Err(e) => {
                        assert!(Instant::now() < deadline, "r-{seq} not acknowledged: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        }
        acked
    }
}

/// Replication factor 2, min.insync.replicas 2: the follower is paused past its lease
/// (ISR {leader}, ELR {follower}) and acks=1 records are acknowledged meanwhile. The
/// strict min-ISR rule holds the high watermark, so they stay unreadable; the leader is
/// then killed and the follower, resumed, is elected from the ELR without them. The
/// old leader truncates them on its return, and the acks=all records written next at
/// the same offsets are all read back (they used to be shadowed by the acks=1 records
/// uploaded from the old leader).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_hw_holds_below_min_isr_and_an_eligible_replica_loses_no_acks_all_record() {
    let mut cluster = Cluster::start(2, None).await;
    cluster.create_pair_topic().await;
    let mut acked = cluster.send(Acks::All, 0, 20).await;
    let (leader, follower) = cluster.pause_the_follower_of_partition_0().await;
    let unsafe_acks = cluster.send(Acks::Leader, 20, 40).await;
    assert_eq!(unsafe_acks.last().unwrap().1, 59);
    let client = Client::connect(&cluster.broker(leader).address())
        .await
        .unwrap();
    let hw = client.list_offset(TOPIC, 0, -1).await.unwrap().unwrap();
    assert_eq!(
        hw, 20,
        "the HW moved with the ISR below min.insync.replicas"
    );
    assert!(
        cluster.broker(leader).log().contains("high watermark held"),
        "no log line says the HW is held"
    );
    cluster.broker(leader).kill();
    cluster.broker(follower).resume();
    cluster
        .wait_until(follower, "the eligible follower elected", |ps| {
            ps[0].0 == follower
        })
        .await;
    cluster.broker(leader).start_again().await;
    cluster
        .wait_until(follower, "the old leader back in the ISR", |ps| {
            ps[0].2.len() == 2
        })
        .await;
    let more = cluster.send(Acks::All, 60, 80).await;
    assert_eq!(more[0].1, 20, "acks=all records continue at the HW");
    acked.extend(more);
    let read = check(cluster.client().await, &acked).await;
    report("eligible replica elected", &acked, 0, read);
}

/// Replication factor 2, min.insync.replicas 2: the follower dies and stays down past
/// its lease, then the leader dies; the leader restarts, then the follower. Both hold
/// every record, so the partition must get a leader again on its own (it used to stay
/// offline with an empty ISR and ELR), and nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_partition_whose_replicas_all_restart_gets_a_leader_again() {
    let mut cluster = Cluster::start(2, None).await;
    cluster.create_pair_topic().await;
    let mut acked = cluster.send(Acks::All, 0, 20).await;
    let leader = cluster.partitions(1).await[0].0;
    let follower = 3 - leader;
    cluster.broker(follower).kill();
    cluster
        .wait_until(leader, "the dead follower out of the ISR", |ps| {
            ps[0].2 == vec![leader]
        })
        .await;
    cluster.broker(leader).kill();
    cluster.broker(leader).start_again().await;
    cluster.broker(follower).start_again().await;
    let recovered = cluster
        .wait_until(leader, "a leader for partition 0", |ps| ps[0].0 > 0)
        .await;
    eprintln!("partition 0 led again {recovered:?} after both restarts");
    acked.extend(cluster.send(Acks::All, 20, 20).await);
    let read = check(cluster.client().await, &acked).await;
    report("both replicas restarted", &acked, 0, read);
}

/// Both brokers are killed within a lease; one loses the unflushed tail of its active
/// segment (a power loss) and restarts at once, within its old lease. It must not be
/// elected for the records it lost: the other, whose disk is intact, leads on its
/// return, and every acknowledged record is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broker_restarted_within_its_lease_is_not_elected_with_a_lost_tail() {
    let mut cluster = Cluster::start(2, None).await;
    cluster.create_pair_topic().await;
    let acked = cluster.send(Acks::All, 0, 30).await;
    let leader = cluster.partitions(1).await[0].0;
    let follower = 3 - leader;
    cluster.broker(leader).kill();
    tokio::time::sleep(Duration::from_millis(800)).await;
    cluster.broker(follower).kill();
    let segment = active_segment(cluster.broker(follower));
    let len = std::fs::metadata(&segment).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .unwrap()
        .set_len(len * 2 / 3)
        .unwrap();
    cluster.broker(follower).start_again().await;
    cluster.broker(leader).start_again().await;
    // The high watermark starts again at the log start and, by the strict min-ISR
    // rule, moves once both replicas are in sync.
    cluster
        .wait_until(
            follower,
            "a leader for partition 0 with both in sync",
            |ps| ps[0].0 > 0 && ps[0].2.len() == 2,
        )
        .await;
    eprintln!(
        "after both restarts: {:?}",
        cluster.partitions(follower).await
    );
    let read = check(cluster.client().await, &acked).await;
    report("lost tail within the lease", &acked, 0, read);
}

/// The highest offset the remote log holds for partition 0 (-1: none).
fn remote_end_of_partition_0(cluster: &Cluster) -> i64 {
    let rows = cluster.db.query(
        "SELECT COALESCE(MAX(end_offset), -1) FROM remote_segments \
         WHERE partition_id = 0 AND state = 'COPY_FINISHED'",
    );
    rows[0].trim().parse().unwrap()
}

async fn wait_for_remote_end(cluster: &Cluster, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while remote_end_of_partition_0(cluster) < at_least {
        assert!(
            Instant::now() < deadline,
            "the remote log of partition 0 ends at {}, not yet {at_least}",
            remote_end_of_partition_0(cluster)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Replication factor 2, min.insync.replicas 1. The follower is paused past its
/// lease; the leader alone takes records 20–59 and copies them to the bucket. It is
/// killed, and the partition stays offline with the follower resumed (it is not in
/// sync) until an unclean ElectLeaders elects it, with a log ending at 20. The bucket
/// holds more than its log, all of it matching: the new leader reads the remote log
/// afresh as it takes the lead (its view is from before the copies, taken while it
/// was paused) and takes it over: its log restarts after it, and the bucket's
/// records stay readable. The 80 acks=all records it takes next are copied and read
/// back at their offsets after local retention dropped them (the bucket used to serve
/// the old records 20–59 in their place).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unclean_leader_behind_the_bucket_keeps_the_records_it_takes_next() {
    let mut cluster = Cluster::start(2, None).await;
    let configs = BTreeMap::from(
        [
            ("min.insync.replicas", "1"),
            ("segment.bytes", "1024"),
            ("local.retention.bytes", "1024"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    cluster
        .client()
        .await
        .create_topic(TOPIC, PARTITIONS, 2, configs)
        .await
        .unwrap();
    cluster
        .wait_until(1, "both replicas in every ISR", |ps| {
            ps.iter().all(|(l, _, isr)| *l > 0 && isr.len() == 2)
        })
        .await;
    let mut acked = cluster.send(Acks::All, 0, 20).await;
    let (leader, follower) = cluster.pause_the_follower_of_partition_0().await;
    let to_leader = Client::connect(&cluster.broker(leader).address())
        .await
        .unwrap()
        .with_request_timeout(Duration::from_secs(5));
    let given_up = cluster.send_with(to_leader, Acks::All, 20, 40).await;
    assert_eq!(given_up.last().unwrap().1, 59);
    wait_for_remote_end(&cluster, 40).await;
    cluster.broker(leader).kill();
    let old_end = remote_end_of_partition_0(&cluster);
    cluster.broker(follower).resume();
    cluster
        .wait_until(follower, "partition 0 offline", |ps| ps[0].0 < 0)
        .await;
    let client = Client::connect(&cluster.broker(follower).address())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client.elect_leaders(TOPIC, vec![0], true).await.unwrap();
        if r[0].leader == follower {
            break;
        }
        // Until the resumed follower has renewed its lease, no replica lives.
        assert_eq!(
            r[0].error_code,
            ErrorCode::EligibleLeadersNotAvailable as i32,
            "{r:?}"
        );
        assert!(Instant::now() < deadline, "no unclean election: {r:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let again = client.elect_leaders(TOPIC, vec![0], true).await.unwrap();
    assert_eq!(
        again[0].error_code,
        ErrorCode::ElectionNotNeeded as i32,
        "{again:?}"
    );
    cluster.broker(leader).start_again().await;
    let more = cluster.send(Acks::All, 60, 80).await;
    let log = cluster.broker(follower).log();
    assert!(
        log.contains("leading with less than the remote log holds"),
        "the new leader did not take the remote log over"
    );
    assert_eq!(
        more[0].1,
        old_end + 1,
        "the log restarts after the remote log"
    );
    // What the bucket held stays readable.
    acked.extend(given_up.iter().filter(|a| a.1 <= old_end));
    eprintln!("unclean leader behind the bucket (ending at {old_end}): took it over");
    let first_new = more[0].1;
    acked.extend(more);
    // Copied past where the old remote log ended, and dropped locally.
    wait_for_remote_end(&cluster, old_end.max(first_new + 50)).await;
    let rows = cluster.db.query(
        "SELECT base_offset, end_offset FROM remote_segments \
         WHERE partition_id = 0 AND state = 'COPY_FINISHED' ORDER BY base_offset",
    );
    let segs: Vec<(i64, i64)> = rows
        .iter()
        .map(|r| {
            let (b, e) = r.split_once('|').unwrap();
            (b.parse().unwrap(), e.parse().unwrap())
        })
        .collect();
    for w in segs.windows(2) {
        assert_eq!(w[0].1 + 1, w[1].0, "gap or overlap in {segs:?}");
    }
    // The new leader's own records 20.. are read from the bucket now.
    let dir = cluster
        .broker(follower)
        .data_dir()
        .join(format!("{TOPIC}-0"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let first: Option<i64> = std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".log")?.parse().ok()
            })
            .min();
        if first.is_some_and(|b| b > 40) {
            break;
        }
        assert!(Instant::now() < deadline, "local retention kept {first:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let read = check(cluster.client().await, &acked).await;
    report("unclean leader behind the bucket", &acked, 0, read);
}

/// Replicas in assignment order of every partition, as broker `via` reports them.
async fn replicas(cluster: &Cluster, via: i32) -> Vec<Vec<i32>> {
    let c = Client::connect(&cluster.brokers[(via - 1) as usize].address())
        .await
        .unwrap();
    let t = c.describe_topic(TOPIC).await.unwrap();
    t.partitions.into_iter().map(|p| p.replicas).collect()
}

/// Moves every partition's replica on broker `from` to broker `to` (same place in
/// the replica list) and waits until every reassignment finished: the target
/// replicas are the partition's, all in the ISR.
async fn move_replicas(cluster: &Cluster, from: i32, to: i32) -> Duration {
    let c = cluster.client().await;
    let before = replicas(cluster, 1).await;
    let targets: Vec<Vec<i32>> = before
        .iter()
        .map(|r| r.iter().map(|&b| if b == from { to } else { b }).collect())
        .collect();
    let plan = targets
        .iter()
        .enumerate()
        .map(|(p, r)| shale_proto::v1::PartitionReassignment {
            topic: TOPIC.into(),
            partition: p as i32,
            replicas: r.clone(),
            cancel: false,
        })
        .collect();
    let started = Instant::now();
    let results = c.alter_partition_reassignments(plan).await.unwrap();
    assert!(
        results.iter().all(|r| r.error_code == 0),
        "reassignments refused: {results:?}"
    );
    let deadline = started + Duration::from_secs(90);
    loop {
        let in_flight = c.list_partition_reassignments(TOPIC).await.unwrap();
        let now = replicas(cluster, 1).await;
        let parts = cluster.partitions(1).await;
        let in_sync = parts
            .iter()
            .zip(&targets)
            .all(|((leader, _, isr), t)| t.contains(leader) && t.iter().all(|b| isr.contains(b)));
        if in_flight.is_empty() && now == targets && in_sync {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "reassignment from {from} to {to} never finished: in flight {in_flight:?}, replicas {now:?}, partitions {parts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn metric(port: u16, name: &str) -> u64 {
    let text = common::http_get(port, "/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no metric {name} in\n{text}"))
}

/// Kafka's partition reassignment onto a broker that joins a running cluster. The
/// partitions are tiered with a small local retention; broker 4 joins, and every
/// replica on broker 1 moves to it (broker 1 leads some partitions: leadership moves
/// first). Broker 4 copies only the leaders' local logs: what it received stays
/// within the local retention plus one segment per partition, a fraction of what
/// the partitions hold. Broker 1 deletes its copies. Then, under an acks=all producer
/// and a consumer group, broker 2's replicas move to broker 1 (empty again). Nothing
/// acknowledged is lost or written twice, and the group reads everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reassigning_onto_a_new_broker_copies_only_the_tail_and_loses_nothing() {
    const SEGMENT: u64 = 4096;
    const LOCAL_RETENTION: u64 = 8192;
    let mut cluster = Cluster::start(3, None).await;
    cluster
        .create_topic_with(&[
            ("segment.bytes", &SEGMENT.to_string()),
            ("local.retention.bytes", &LOCAL_RETENTION.to_string()),
        ])
        .await;
    let c = cluster.client().await;
    let load = Load::start(c.clone()).await;
    load.wait_more(9000).await;
    load.pause().await;
    // The history is in the bucket, and the leaders keep only their local tails.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = c.tiering_status(Some(TOPIC)).await.unwrap();
        let local = |s: &&shale_proto::v1::PartitionTieringStatus| {
            s.local_log_start_offset > 0 && s.upload_lag_segments == 0
        };
        if st.len() == PARTITIONS as usize && st.iter().filter(local).count() == st.len() {
            break;
        }
        assert!(Instant::now() < deadline, "never tiered: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let st = c.tiering_status(Some(TOPIC)).await.unwrap();
    let total: u64 = st
        .iter()
        .map(|s| (s.remote_bytes + s.upload_lag_bytes) as u64)
        .sum();
    let http = common::free_port();
    let http_listen = format!("127.0.0.1:{http}");
    let four = cluster.add_broker(&["--http-listen", &http_listen]).await;
    let took = move_replicas(&cluster, 1, four).await;
    let copied = metric(http, "shale_replicated_bytes_total").await;
    let bound = PARTITIONS as u64 * (LOCAL_RETENTION + SEGMENT);
    eprintln!(
        "[reassignment] moved {PARTITIONS} partitions from broker 1 to new broker 4 in {took:?}: \
         it received {copied} bytes (bound {bound}); the bucket holds {total} bytes of them"
    );
    assert!(
        copied <= bound,
        "broker 4 received {copied} bytes, more than the local tails ({bound})"
    );
    assert!(copied > 0, "broker 4 received nothing");
    // Broker 1 no longer holds a replica, and deleted its copies.
    let deadline = Instant::now() + Duration::from_secs(30);
    let left = |b: &Broker| {
        std::fs::read_dir(b.data_dir())
            .unwrap()
            .filter(|e| {
                let name = e.as_ref().unwrap().file_name();
                name.to_string_lossy().starts_with(&format!("{TOPIC}-"))
            })
            .count()
    };
    while left(&cluster.brokers[0]) > 0 {
        assert!(
            Instant::now() < deadline,
            "broker 1 kept its partition directories"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Under load, with a group reading, broker 2's replicas move to broker 1.
    let mut group = shale_client::GroupConfig::new("reassign-readers");
    group.auto_commit_interval = None;
    group.auto_offset_reset = shale_client::OffsetReset::Earliest;
    let member = common::Member::start(&c, TOPIC, group);
    load.resume();
    load.wait_more(600).await;
    let took = move_replicas(&cluster, 2, 1).await;
    load.wait_more(600).await;
    let (acked, failed) = load.finish().await;
    eprintln!("[reassignment] moved broker 2's replicas to broker 1 under load in {took:?}");
    let read = check(c.clone(), &acked).await;
    report("reassignment", &acked, failed, read);
    // The group read every acknowledged record.
    let mut member = member;
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while acked.iter().any(|a| !seen.contains(&(a.0, a.1))) {
        if Instant::now() >= deadline {
            // Where the member stopped, per partition: (first unread offset, unread).
            let mut unread = std::collections::BTreeMap::new();
            for a in acked.iter().filter(|a| !seen.contains(&(a.0, a.1))) {
                let e = unread.entry(a.0).or_insert((i64::MAX, 0));
                *e = (e.0.min(a.1), e.1 + 1);
            }
            panic!(
                "the group did not read every acknowledged record: {} of {}; unread \
                 (partition: first offset, count) {unread:?}; assignment {:?}",
                seen.len(),
                acked.len(),
                member.assignment()
            );
        }
        if let Ok(Some(r)) =
            tokio::time::timeout(Duration::from_millis(200), member.records.recv()).await
        {
            seen.insert((r.partition, r.offset));
        }
    }
    member.stop().await;
}

/// Replicas per broker (ids 1..=n) over every partition, as broker `via` reports them.
async fn replica_counts(cluster: &Cluster, via: i32, n: i32) -> Vec<usize> {
    let all = replicas(cluster, via).await;
    (1..=n)
        .map(|b| all.iter().filter(|r| r.contains(&b)).count())
        .collect()
}

/// Waits until no reassignment is in flight and `cond` holds of the replica lists.
async fn wait_for_replicas(
    cluster: &Cluster,
    via: i32,
    what: &str,
    cond: impl Fn(&[Vec<i32>]) -> bool,
) {
    let c = Client::connect(&cluster.brokers[(via - 1) as usize].address())
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let now = replicas(cluster, via).await;
        let in_flight = c.list_partition_reassignments(TOPIC).await.unwrap();
        if in_flight.is_empty() && cond(&now) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: replicas {now:?}, in flight {in_flight:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The balancer's disk goal: two brokers hold two partitions each (counts balanced),
/// but both partitions with data are on one of them. Their leader reports their local
/// sizes, and the controller moves one of them so that local disk use is within the
/// band (1 MiB here), then a partition without data back so counts are even again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_balancer_evens_out_local_disk_use() {
    let cluster = Cluster::start_with(
        2,
        None,
        "auto_balance_enable = true\nauto_balance_interval_ms = 300\n\
         auto_balance_disk_band_min_bytes = 1048576\n",
    )
    .await;
    let c = cluster.client().await;
    c.create_topic(TOPIC, 4, 1, BTreeMap::new()).await.unwrap();
    cluster.wait_for_topic_everywhere().await;
    let before = replicas(&cluster, 1).await;
    let full = before[0][0];
    let big: Vec<i32> = (0..4).filter(|&p| before[p as usize] == [full]).collect();
    assert_eq!(big.len(), 2, "two partitions on each broker: {before:?}");
    let mut producer = Producer::new(c.clone(), TOPIC, Acks::All).await.unwrap();
    for &p in &big {
        // 4 MiB in each.
        for _ in 0..8 {
            let records = (0..32)
                .map(|_| ProducerRecord {
                    partition: Some(p),
                    value: Some(Bytes::from(vec![b'x'; 16 << 10])),
                    ..Default::default()
                })
                .collect();
            producer.send_all(records).await.unwrap();
        }
    }
    let started = Instant::now();
    wait_for_replicas(&cluster, 1, "the partitions with data apart", |all| {
        let on = |b: i32| all.iter().filter(|r| r.contains(&b)).count();
        all[big[0] as usize] != all[big[1] as usize] && on(1) == 2 && on(2) == 2
    })
    .await;
    eprintln!(
        "[balance] disk use evened out in {:?}: {before:?} -> {:?}",
        started.elapsed(),
        replicas(&cluster, 1).await
    );
    assert!(
        c.balance_plan().await.unwrap().is_empty(),
        "a balanced cluster plans no move"
    );
}

/// The controller's own moves, under an acks=all producer: a broker that joins gets its
/// share of replicas (counts within one) and the balancer then stays quiet; a broker
/// decommissioned with `shale cluster decommission` is emptied (the command waits and
/// says it can be stopped) and stopped; once recommissioned and back it is the only
/// broker with room, and when another is killed for good its replicas are re-created
/// there after the timeout, so every ISR is full again. Nothing acknowledged is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_controller_balances_drains_and_replaces_brokers_losing_nothing() {
    let mut cluster = Cluster::start_with(
        3,
        None,
        "auto_balance_enable = true\nauto_balance_interval_ms = 300\n\
         dead_broker_replace_after_ms = 4000\n",
    )
    .await;
    cluster.create_topic().await;
    let c = cluster.client().await;
    let load = Load::start(c.clone()).await;
    load.wait_more(300).await;

    // Broker 4 joins: the balancer gives it replicas until counts are within one.
    let four = cluster.add_broker(&[]).await;
    let started = Instant::now();
    // Settled: counts within one, and no move half done (a replica set of more than
    // the replication factor is a reassignment in flight).
    wait_for_replicas(&cluster, 1, "broker 4's share", |all| {
        let counts: Vec<usize> = (1..=4)
            .map(|b| all.iter().filter(|r| r.contains(&b)).count())
            .collect();
        all.iter().all(|r| r.len() == 3)
            && counts.iter().max().unwrap() - counts.iter().min().unwrap() <= 1
    })
    .await;
    let counts = replica_counts(&cluster, 1, 4).await;
    eprintln!(
        "[balance] broker {four} joined; replicas per broker {counts:?} after {:?}",
        started.elapsed()
    );
    assert!(counts[3] >= 2, "broker 4 holds {counts:?}");
    assert!(
        c.balance_plan().await.unwrap().is_empty(),
        "a balanced cluster plans no move"
    );
    let before = replicas(&cluster, 1).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        replicas(&cluster, 1).await,
        before,
        "the balancer moved a balanced cluster"
    );
    load.wait_more(300).await;

    // Broker 1 is decommissioned through the CLI, which waits until it is empty.
    let address = cluster.brokers[1].address();
    let started = Instant::now();
    let out = tokio::task::spawn_blocking(move || {
        common::run_cli(&address, &["cluster", "decommission", "1"], None)
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "decommission failed: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("broker 1 holds no replica: it can be stopped"),
        "{stdout}"
    );
    eprintln!("[balance] broker 1 drained in {:?}", started.elapsed());
    assert_eq!(replica_counts(&cluster, 2, 4).await[0], 0);
    cluster.broker(1).stop();
    load.wait_more(300).await;

    // Back, recommissioned: the balancer gives it work again; then broker 2 dies for
    // good and its replicas are re-created on the others.
    cluster.broker(1).start_again().await;
    c.decommission_broker(1, true).await.unwrap();
    load.wait_more(300).await;
    cluster.broker(2).kill();
    let killed = Instant::now();
    wait_for_replicas(&cluster, 3, "broker 2's replicas re-created", |all| {
        all.iter().all(|r| r.len() == 3 && !r.contains(&2))
    })
    .await;
    cluster
        .wait_until(3, "every ISR full again", |ps| {
            ps.iter().all(|(_, _, isr)| isr.len() == 3)
        })
        .await;
    eprintln!(
        "[balance] broker 2 killed; its replicas re-created elsewhere and every ISR full after {:?}",
        killed.elapsed()
    );
    load.wait_more(300).await;
    let (acked, failed) = load.finish().await;
    let read = check(cluster.client().await, &acked).await;
    report("balancer", &acked, failed, read);
}
