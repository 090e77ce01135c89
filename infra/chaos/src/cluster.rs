//! The system under test: four `shale-broker` processes (each in a network namespace
//! of its own when the machine allows it, else on loopback) holding a topic of
//! replication factor 3, with the controller's balancer on, a fresh PostgreSQL
//! database and an `s3s-fs` server, both reached through failing proxies.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use shale_testkit::broker::BrokerProcess;

use crate::netns::{Cut, Net};
use crate::proxy::Proxy;

pub const BUCKET: &str = "chaos";
const S3_KEY: &str = "shale-chaos";
const S3_SECRET: &str = "shale-chaos-secret";

/// Brokers in the cluster (ids 1 to `BROKERS`): one more than the topic's replicas,
/// so that replicas have somewhere to move.
pub const BROKERS: usize = 4;

/// Short leases and intervals, so faults resolve in seconds; the balancer plans every
/// second, so that its moves run among the faults.
const CLUSTER_TOML: &str = "[cluster]\nlease_ms = 3000\nheartbeat_interval_ms = 500\n\
    auto_balance_interval_ms = 1000\nauto_balance_max_moves = 2\n\
    controller_interval_ms = 200\nreplica_lag_time_max_ms = 2000\nreplica_fetch_max_wait_ms = 200\n\
    [tiering]\nupload_interval_ms = 300\n\
    [log]\nmetadata_refresh_interval_ms = 500\nretention_check_interval_ms = 500\n\
    [groups]\nmin_session_timeout_ms = 1000\ninitial_rebalance_delay_ms = 0\n";

/// A program of this workspace (see `shale_testkit::workspace_bin`).
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    shale_testkit::workspace_bin(name).map_err(anyhow::Error::msg)
}

/// A fresh PostgreSQL database on a server, dropped at the end.
pub struct Database(shale_testkit::postgres::Database);

impl Database {
    /// `server`: `postgres://user@host:port`.
    pub fn create(server: &str, tag: &str) -> anyhow::Result<Self> {
        shale_testkit::postgres::Database::create_named(server, &format!("shale_chaos_{tag}"))
            .map(Self)
            .map_err(anyhow::Error::msg)
    }

    pub fn query(&self, sql: &str) -> anyhow::Result<String> {
        let rows = self.0.query(sql).map_err(anyhow::Error::msg)?;
        Ok(rows.iter().map(|r| format!("{r}\n")).collect())
    }

    /// Host and port of the server.
    pub fn address(&self) -> anyhow::Result<std::net::SocketAddr> {
        self.0.address().map_err(anyhow::Error::msg)
    }

    /// A URL for the database reaching the server at `host:port` as the same user.
    pub fn url_via(&self, host: &str, port: u16) -> String {
        self.0.url_via(host, port)
    }
}

/// An `s3s-fs` server on loopback.
pub struct S3 {
    server: shale_testkit::s3::S3Server,
}

impl S3 {
    pub fn start(root: &Path) -> anyhow::Result<Self> {
        let server = shale_testkit::s3::S3Server::start(root, BUCKET, S3_KEY, S3_SECRET, None)
            .map_err(anyhow::Error::msg)?;
        Ok(Self { server })
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }

    pub fn root(&self) -> &Path {
        &self.server.root
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(shale_testkit::free_port())
}

/// One broker process.
pub struct Broker {
    pub id: i32,
    pub dir: PathBuf,
    /// `host:port` of its gRPC and Kafka listeners.
    pub grpc: String,
    pub kafka: String,
    command: Vec<String>,
    process: BrokerProcess,
}

impl Broker {
    pub fn data_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    pub fn is_running(&self) -> bool {
        self.process.is_running()
    }

    /// Starts the process and waits until this start logged that it is ready.
    pub async fn start(&mut self) -> anyhow::Result<()> {
        let mut command = Command::new(&self.command[0]);
        command.args(&self.command[1..]).env("RUST_LOG", "info");
        (self.process.spawn(command)).context("cannot start shale-broker")?;
        let deadline = Instant::now() + Duration::from_secs(120);
        while !self.process.logged_ready() {
            if let Some(status) = self.process.exited() {
                bail!(
                    "broker {} exited with {status}; see {}",
                    self.id,
                    self.process.log_path().display()
                );
            }
            if Instant::now() > deadline {
                bail!("broker {} did not become ready", self.id);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }

    pub fn kill(&mut self) {
        self.process.kill();
    }

    pub fn pause(&mut self) {
        self.process.pause();
    }

    pub fn resume(&mut self) {
        self.process.resume();
    }

    /// The active (newest) segment file of every partition directory.
    pub fn active_segments(&self) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let Ok(dirs) = std::fs::read_dir(self.data_dir()) else {
            return out;
        };
        for dir in dirs.flatten().map(|e| e.path()).filter(|p| p.is_dir()) {
            let mut logs: Vec<PathBuf> = std::fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "log"))
                .collect();
            logs.sort();
            if let Some(last) = logs.pop() {
                out.push(last);
            }
        }
        out
    }
}

/// Where the brokers run.
pub enum Hosts {
    /// A namespace each: network partitions are possible.
    Namespaces(Net),
    /// All on 127.0.0.1.
    Loopback,
}

pub struct Cluster {
    pub brokers: Vec<Broker>,
    pub hosts: Hosts,
    pub db: Database,
    pub postgres: Proxy,
    pub s3_proxy: Proxy,
    pub s3: S3,
    pub work: PathBuf,
}

impl Cluster {
    /// Starts everything; `namespaces`: put each broker in a network namespace.
    pub async fn start(
        work: &Path,
        postgres_server: &str,
        tag: &str,
        namespaces: bool,
    ) -> anyhow::Result<Self> {
        std::fs::create_dir_all(work)?;
        let db = Database::create(postgres_server, tag)?;
        let postgres = Proxy::start(db.address()?).await?;
        let s3 = S3::start(&work.join("s3"))?;
        let s3_proxy = Proxy::start(([127, 0, 0, 1], s3.port()).into()).await?;
        let hosts = if namespaces {
            // A network of the run's own (10.{180..239}.x.x), so runs can overlap.
            let net = 180
                + (tag
                    .bytes()
                    .fold(0u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)))
                    % 60) as u8;
            Hosts::Namespaces(Net::create(tag, net, BROKERS)?)
        } else {
            Hosts::Loopback
        };
        let bin = workspace_bin("shale-broker")?;
        let mut brokers = Vec::new();
        for i in 0..BROKERS {
            let id = i as i32 + 1;
            let dir = work.join(format!("broker{id}"));
            std::fs::create_dir_all(&dir)?;
            let (ip, pg_ip, s3_ip, prefix, grpc_port, kafka_port) = match &hosts {
                Hosts::Namespaces(net) => (
                    net.broker_ip(i),
                    net.postgres_ip(i),
                    net.object_store_ip(i),
                    net.exec_prefix(i),
                    9093,
                    9092,
                ),
                Hosts::Loopback => (
                    "127.0.0.1".to_string(),
                    "127.0.0.1".to_string(),
                    "127.0.0.1".to_string(),
                    Vec::new(),
                    free_port()?,
                    free_port()?,
                ),
            };
            let grpc = format!("{ip}:{grpc_port}");
            let kafka = format!("{ip}:{kafka_port}");
            let config = format!(
                "[listeners.grpc]\nlisten = \"{grpc}\"\n[listeners.kafka]\nlisten = \"{kafka}\"\n\
                 [object_store]\nendpoint = \"http://{s3_ip}:{}\"\nregion = \"us-east-1\"\n\
                 path_style = true\nallow_http = true\naccess_key_id = \"{S3_KEY}\"\n\
                 secret_access_key = \"{S3_SECRET}\"\nrequest_timeout_ms = 5000\n{CLUSTER_TOML}",
                s3_proxy.port
            );
            let cfg = dir.join("shale.toml");
            std::fs::write(&cfg, config)?;
            let mut command = prefix;
            command.extend([
                bin.display().to_string(),
                "--config".into(),
                cfg.display().to_string(),
                "--data-dir".into(),
                dir.join("data").display().to_string(),
                "--broker-id".into(),
                id.to_string(),
                "--metastore-url".into(),
                db.url_via(&pg_ip, postgres.port),
                "--object-store-url".into(),
                format!("s3://{BUCKET}/cluster"),
            ]);
            let log_path = dir.join("broker.log");
            let mut b = Broker {
                id,
                dir,
                grpc,
                kafka,
                command,
                process: BrokerProcess::new(log_path),
            };
            b.start().await?;
            brokers.push(b);
        }
        Ok(Self {
            brokers,
            hosts,
            db,
            postgres,
            s3_proxy,
            s3,
            work: work.to_path_buf(),
        })
    }

    pub fn grpc_bootstrap(&self) -> String {
        self.brokers
            .iter()
            .map(|b| b.grpc.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn kafka_bootstrap(&self) -> String {
        self.brokers
            .iter()
            .map(|b| b.kafka.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    pub fn broker(&mut self, id: i32) -> &mut Broker {
        &mut self.brokers[(id - 1) as usize]
    }

    pub fn net(&self) -> Option<&Net> {
        match &self.hosts {
            Hosts::Namespaces(n) => Some(n),
            Hosts::Loopback => None,
        }
    }

    pub fn cut(&self, id: i32, cut: Cut) -> anyhow::Result<()> {
        let net = self.net().context("network cuts need namespaces")?;
        net.cut((id - 1) as usize, cut)
    }

    pub fn heal(&self, id: i32, cut: Cut) -> anyhow::Result<()> {
        match self.net() {
            Some(net) => net.heal((id - 1) as usize, cut),
            None => Ok(()),
        }
    }
}
