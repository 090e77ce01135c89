//! The faults, and a seeded schedule of them: one broker-level fault at a time
//! (SIGKILL, SIGSTOP, a restart that lost its unflushed tail, a network cut, a slow
//! disk, a partition's replica reassigned away and back, a broker decommissioned and
//! recommissioned), sometimes combined with an outage of PostgreSQL or the object
//! store, each held for a random while and then healed. The controller's balancer
//! runs throughout: it moves replicas back onto a recommissioned broker among the
//! later faults.

use std::fmt;
use std::time::Duration;

use anyhow::Context;

use shale_client::Client;
use shale_proto::v1::PartitionReassignment;

use crate::cluster::{BROKERS, Cluster};
use crate::netns::Cut;
use crate::tally::{PARTITIONS, TOPIC};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL, restart when healed.
    Kill,
    /// SIGSTOP, SIGCONT when healed.
    Pause,
    /// SIGKILL, then every partition's active segment cut short at a random point (a
    /// power loss of what was not fsynced), restart when healed.
    LoseTail,
    /// The broker cannot reach the others, nor they it.
    CutBrokers,
    /// The broker cannot reach PostgreSQL.
    CutPostgres,
    /// Clients cannot reach the broker (brokers and PostgreSQL still can).
    CutClients,
    /// PostgreSQL is down for every broker.
    PostgresOutage,
    /// The object store is down for every broker.
    ObjectStoreOutage,
    /// The broker's disk writes are throttled (cgroup blkio: 1 MiB/s, 20 IOPS).
    SlowDisk,
    /// A partition's replica on the broker is reassigned away (down to two replicas:
    /// it deletes its copy), and back when healed (it copies the leader's local log
    /// again and rejoins the ISR).
    Move,
    /// The broker is decommissioned (the controller moves its replicas to the broker
    /// of the four that lacks each partition), and recommissioned when healed (the
    /// balancer then moves replicas back onto it).
    Decommission,
}

impl Fault {
    pub const ALL: [Fault; 11] = [
        Fault::Kill,
        Fault::Pause,
        Fault::LoseTail,
        Fault::CutBrokers,
        Fault::CutPostgres,
        Fault::CutClients,
        Fault::PostgresOutage,
        Fault::ObjectStoreOutage,
        Fault::SlowDisk,
        Fault::Move,
        Fault::Decommission,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::Kill => "kill",
            Fault::Pause => "pause",
            Fault::LoseTail => "lose-tail",
            Fault::CutBrokers => "cut-brokers",
            Fault::CutPostgres => "cut-postgres",
            Fault::CutClients => "cut-clients",
            Fault::PostgresOutage => "postgres-outage",
            Fault::ObjectStoreOutage => "s3-outage",
            Fault::SlowDisk => "slow-disk",
            Fault::Move => "move",
            Fault::Decommission => "decommission",
        }
    }

    pub fn parse(s: &str) -> Option<Fault> {
        Fault::ALL.into_iter().find(|f| f.name() == s)
    }

    /// Whether it hits one broker (else the whole cluster).
    fn targets_a_broker(self) -> bool {
        !matches!(self, Fault::PostgresOutage | Fault::ObjectStoreOutage)
    }

    pub fn needs_namespaces(self) -> bool {
        matches!(
            self,
            Fault::CutBrokers | Fault::CutPostgres | Fault::CutClients
        )
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// xorshift64*: a seeded, reproducible sequence.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// In `[0, n)`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// In `[lo, hi)` seconds.
    pub fn seconds(&mut self, lo: f64, hi: f64) -> Duration {
        let f = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        Duration::from_secs_f64(lo + f * (hi - lo))
    }
}

/// One step of the schedule: a fault on a broker (or the cluster), perhaps with an
/// outage of PostgreSQL or the object store at the same time, held for `hold`.
#[derive(Debug, Clone)]
pub struct Step {
    pub fault: Fault,
    pub broker: i32,
    pub with: Option<Fault>,
    pub hold: Duration,
    pub quiet: Duration,
    /// For `LoseTail`: where each active segment is cut, as a fraction of its length.
    pub cut_at: f64,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.fault.targets_a_broker() {
            write!(f, "{} broker {}", self.fault, self.broker)?;
        } else {
            write!(f, "{}", self.fault)?;
        }
        if self.fault == Fault::LoseTail {
            write!(f, " (cut at {:.0}%)", self.cut_at * 100.0)?;
        }
        if self.fault == Fault::Move {
            write!(f, " (partition {})", moved_partition(self.cut_at))?;
        }
        if let Some(w) = self.with {
            write!(f, " + {w}")?;
        }
        write!(f, " for {:.1} s", self.hold.as_secs_f64())
    }
}

/// The next step from `faults`; `leader`: a broker that leads some partition now,
/// which is hit more often (its faults make failovers).
pub fn next_step(rng: &mut Rng, faults: &[Fault], leader: Option<i32>) -> Step {
    let fault = faults[rng.below(faults.len() as u64) as usize];
    let broker = match leader {
        Some(l) if rng.below(10) < 6 => l,
        _ => 1 + rng.below(BROKERS as u64) as i32,
    };
    let outages: Vec<Fault> = faults
        .iter()
        .copied()
        .filter(|f| !f.targets_a_broker() && *f != fault)
        .collect();
    let with = (fault.targets_a_broker() && !outages.is_empty() && rng.below(10) < 3)
        .then(|| outages[rng.below(outages.len() as u64) as usize]);
    Step {
        fault,
        broker,
        with,
        // Around the cluster's 3 s lease: pauses end within it or past it, and a
        // broker that lost its tail restarts within its old lease or after it.
        hold: rng.seconds(1.0, 6.0),
        quiet: rng.seconds(1.0, 3.0),
        cut_at: (rng.below(100) as f64) / 100.0,
    }
}

/// The blkio cgroup of slow-disk faults (cgroup v1), if the machine has one.
pub struct SlowDisk {
    dir: std::path::PathBuf,
}

impl SlowDisk {
    pub fn create(tag: &str, data_dir: &std::path::Path) -> anyhow::Result<Self> {
        let root = std::path::Path::new("/sys/fs/cgroup/blkio");
        anyhow::ensure!(
            root.join("cgroup.procs").exists(),
            "no cgroup v1 blkio controller at {}",
            root.display()
        );
        let dir = root.join(format!("shale-chaos-{tag}"));
        let _ = std::fs::create_dir(&dir);
        let st = rustix::fs::stat(data_dir)?;
        let (major, minor) = (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev));
        // Throttles apply to whole disks: the partition's disk is minor 0 of its major.
        let device = format!("{major}:{}", if minor < 16 { 0 } else { minor });
        std::fs::write(
            dir.join("blkio.throttle.write_bps_device"),
            format!("{device} 1048576"),
        )
        .with_context(|| format!("cannot throttle device {device}"))?;
        std::fs::write(
            dir.join("blkio.throttle.write_iops_device"),
            format!("{device} 20"),
        )?;
        Ok(Self { dir })
    }

    pub fn slow(&self, pid: u32) -> anyhow::Result<()> {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())?;
        Ok(())
    }

    pub fn restore(&self, pid: u32) -> anyhow::Result<()> {
        std::fs::write("/sys/fs/cgroup/blkio/cgroup.procs", pid.to_string())?;
        Ok(())
    }
}

impl Drop for SlowDisk {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// The partition a `Move` step with this `cut_at` moves.
fn moved_partition(cut_at: f64) -> i32 {
    ((cut_at * PARTITIONS as f64) as i32).clamp(0, PARTITIONS - 1)
}

/// `partition`'s replicas once the move in flight, if any, finishes, and whether one
/// is in flight, as the metastore holds them. Not a broker's answer: its metadata can be
/// a refresh behind (through a PostgreSQL outage, for seconds), and a move that had
/// finished then looked as if it had never started.
fn assignment(c: &Cluster, partition: i32) -> anyhow::Result<Option<(Vec<i32>, bool)>> {
    let rows = c.db.query(&format!(
        "SELECT s.replicas, s.adding_replicas, s.removing_replicas \
             FROM partition_state s JOIN topics t ON t.id = s.topic_id \
             WHERE t.name = '{TOPIC}' AND s.partition_id = {partition}"
    ))?;
    let Some(row) = rows.lines().next() else {
        return Ok(None);
    };
    let ids = |field: &str| -> anyhow::Result<Vec<i32>> {
        (field.split(',').filter(|f| !f.is_empty()))
            .map(|f| f.trim().parse::<i32>().context("a broker id"))
            .collect()
    };
    let fields: Vec<&str> = row.split('|').collect();
    anyhow::ensure!(fields.len() == 3, "unexpected partition_state row {row:?}");
    let (replicas, adding, removing) = (ids(fields[0])?, ids(fields[1])?, ids(fields[2])?);
    let in_flight = !adding.is_empty() || !removing.is_empty();
    let current = (replicas.into_iter())
        .filter(|b| !removing.contains(b))
        .collect();
    Ok(Some((current, in_flight)))
}

/// Reassigns `partition`'s replica on `broker` away, down to two replicas, when it has
/// three and no move in flight (`back`: up to three again, with `broker` if the
/// partition lacks it, waiting for any move in flight, the balancer's included). A
/// refusal (an outage) leaves the partition as it is: moving is not the fault under
/// test, what it does to the log is. Whether the partition has its three replicas and
/// no move in flight.
async fn reassign(
    c: &Cluster,
    client: &Client,
    partition: i32,
    broker: i32,
    back: bool,
) -> anyhow::Result<bool> {
    let Some((current, in_flight)) = assignment(c, partition)? else {
        return Ok(false);
    };
    let target: Vec<i32> = match back {
        false if !in_flight && current.len() == 3 && current.contains(&broker) => {
            current.into_iter().filter(|b| *b != broker).collect()
        }
        true if current.len() < 3 => {
            // The broker it left (cancelling that move if still in flight), or another.
            let add = (std::iter::once(broker).chain(1..=BROKERS as i32))
                .find(|b| !current.contains(b))
                .expect("a broker without a replica");
            current.into_iter().chain([add]).collect()
        }
        _ => return Ok(!in_flight && current.len() == 3),
    };
    let results = client
        .alter_partition_reassignments(vec![PartitionReassignment {
            topic: TOPIC.into(),
            partition,
            replicas: target,
            cancel: false,
        }])
        .await?;
    if let Some(r) = results.iter().find(|r| r.error_code != 0) {
        eprintln!("move of partition {partition} refused: {}", r.error_message);
    }
    Ok(false)
}

/// Applies `fault` to `broker` (or the cluster).
pub async fn apply(
    c: &mut Cluster,
    client: &Client,
    slow: Option<&SlowDisk>,
    fault: Fault,
    broker: i32,
    cut_at: f64,
) -> anyhow::Result<()> {
    match fault {
        Fault::Move => {
            if let Err(e) = reassign(c, client, moved_partition(cut_at), broker, false).await {
                eprintln!("move not started: {e}");
            }
        }
        Fault::Decommission => {
            if let Err(e) = client.decommission_broker(broker, false).await {
                eprintln!("decommission of broker {broker} refused: {e}");
            }
        }
        Fault::Kill => c.broker(broker).kill(),
        Fault::Pause => c.broker(broker).pause(),
        Fault::LoseTail => {
            let b = c.broker(broker);
            b.kill();
            for seg in b.active_segments() {
                let len = std::fs::metadata(&seg)?.len();
                let f = std::fs::OpenOptions::new().write(true).open(&seg)?;
                f.set_len((len as f64 * cut_at) as u64)?;
            }
        }
        Fault::CutBrokers => c.cut(broker, Cut::Brokers)?,
        Fault::CutPostgres => c.cut(broker, Cut::Postgres)?,
        Fault::CutClients => c.cut(broker, Cut::Clients)?,
        Fault::PostgresOutage => c.postgres.fail(),
        Fault::ObjectStoreOutage => c.s3_proxy.fail(),
        Fault::SlowDisk => {
            if let (Some(s), Some(pid)) = (slow, c.broker(broker).pid()) {
                s.slow(pid)?;
            }
        }
    }
    Ok(())
}

/// Undoes [`apply`].
pub async fn heal(
    c: &mut Cluster,
    client: &Client,
    slow: Option<&SlowDisk>,
    fault: Fault,
    broker: i32,
    cut_at: f64,
) -> anyhow::Result<()> {
    match fault {
        Fault::Move => {
            // Back to three replicas, whatever it takes (the checks need them all).
            let partition = moved_partition(cut_at);
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                let done = reassign(c, client, partition, broker, true).await;
                if matches!(done, Ok(true)) {
                    break;
                }
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "partition {partition} did not get its third replica back: {done:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Fault::Decommission => {
            // Recommissioned, whatever it takes (an outage may refuse it for a while).
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            while let Err(e) = client.decommission_broker(broker, true).await {
                anyhow::ensure!(
                    std::time::Instant::now() < deadline,
                    "broker {broker} could not be recommissioned: {e}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
        Fault::Kill | Fault::LoseTail => {
            if !c.broker(broker).is_running() {
                c.broker(broker).start().await?;
            }
        }
        Fault::Pause => c.broker(broker).resume(),
        Fault::CutBrokers => c.heal(broker, Cut::Brokers)?,
        Fault::CutPostgres => c.heal(broker, Cut::Postgres)?,
        Fault::CutClients => c.heal(broker, Cut::Clients)?,
        Fault::PostgresOutage => c.postgres.restore(),
        Fault::ObjectStoreOutage => c.s3_proxy.restore(),
        Fault::SlowDisk => {
            if let (Some(s), Some(pid)) = (slow, c.broker(broker).pid()) {
                s.restore(pid)?;
            }
        }
    }
    Ok(())
}
