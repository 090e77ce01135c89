//! Where load goes: one broker (started here or named by `--bootstrap`), or a local
//! three-broker cluster on a throwaway PostgreSQL database.

use std::path::PathBuf;

use anyhow::{Context, bail};
use shale_client::Client;

use super::{Ctx, now_nanos};
use crate::harness::{BrokerProcess, ProcessStats};

/// Where load goes: a broker this run started (embedded default: SQLite, file://
/// object store), or the one `--bootstrap` names.
pub(super) struct Target {
    pub(super) broker: Option<BrokerProcess>,
    pub(super) client: Client,
    /// The broker's data directory (the disk the baselines write to).
    pub(super) data_dir: PathBuf,
}

impl Target {
    pub(super) fn stats(&self) -> ProcessStats {
        self.broker
            .as_ref()
            .map(BrokerProcess::stats)
            .unwrap_or_default()
    }
}

pub(super) async fn single_broker(ctx: &Ctx, config: &str) -> anyhow::Result<Target> {
    if let Some(bootstrap) = &ctx.bootstrap {
        return Ok(Target {
            broker: None,
            client: Client::connect(bootstrap).await?,
            data_dir: ctx.base.clone(),
        });
    }
    let b = BrokerProcess::start(config, &[], &ctx.base).await?;
    Ok(Target {
        client: Client::connect(&b.address()).await?,
        data_dir: b.data_dir(),
        broker: Some(b),
    })
}

/// Three brokers on a fresh PostgreSQL database, sharing a file:// object store.
pub(super) struct Cluster {
    pub(super) brokers: Vec<BrokerProcess>,
    pub(super) client: Client,
    base: PathBuf,
    _db: PgDb,
    _objects: tempfile::TempDir,
}

pub(super) async fn cluster(ctx: &Ctx) -> anyhow::Result<Cluster> {
    cluster_with(ctx, "").await
}

/// [`cluster`] with a broker config (TOML).
pub(super) async fn cluster_with(ctx: &Ctx, config: &str) -> anyhow::Result<Cluster> {
    let db = PgDb::create(&ctx.postgres)?;
    let objects = tempfile::tempdir_in(&ctx.base)?;
    let mut brokers = Vec::new();
    for id in 1..=3 {
        brokers.push(start_broker(ctx.base.as_path(), &db, objects.path(), id, config, &[]).await?);
    }
    let bootstrap: Vec<String> = brokers.iter().map(BrokerProcess::address).collect();
    let client = Client::connect(&bootstrap.join(",")).await?;
    Ok(Cluster {
        brokers,
        client,
        base: ctx.base.clone(),
        _db: db,
        _objects: objects,
    })
}

/// Broker `id` of a cluster on `db` and the object store at `objects`.
async fn start_broker(
    base: &std::path::Path,
    db: &PgDb,
    objects: &std::path::Path,
    id: i32,
    config: &str,
    extra: &[String],
) -> anyhow::Result<BrokerProcess> {
    let mut args = vec![
        "--broker-id".to_string(),
        id.to_string(),
        "--metastore-url".to_string(),
        db.url(),
        "--object-store-url".to_string(),
        format!("file://{}", objects.display()),
    ];
    args.extend(extra.iter().cloned());
    BrokerProcess::start(config, &args, base).await
}

impl Cluster {
    /// Starts the next broker (ids from 1) with `config` and `extra` arguments; its id.
    pub(super) async fn add_broker(
        &mut self,
        config: &str,
        extra: &[String],
    ) -> anyhow::Result<i32> {
        let id = self.brokers.len() as i32 + 1;
        let b = start_broker(
            &self.base,
            &self._db,
            self._objects.path(),
            id,
            config,
            extra,
        );
        self.brokers.push(b.await?);
        Ok(id)
    }
}

/// A throwaway PostgreSQL database (through `psql`).
struct PgDb {
    server: String,
    name: String,
}

fn psql(url: &str, sql: &str) -> anyhow::Result<()> {
    let out = std::process::Command::new("psql")
        .args([url, "-Atqc", sql])
        .output()
        .context("psql is missing: run infra/test-services.sh (it installs PostgreSQL)")?;
    if !out.status.success() {
        bail!(
            "{sql} failed at {url} (start PostgreSQL with infra/test-services.sh): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl PgDb {
    fn create(server: &str) -> anyhow::Result<Self> {
        let name = format!(
            "shale_bench_{}_{}",
            std::process::id(),
            now_nanos() % 1_000_000
        );
        psql(
            &format!("{server}/postgres"),
            &format!("CREATE DATABASE {name}"),
        )?;
        Ok(PgDb {
            server: server.to_string(),
            name,
        })
    }

    fn url(&self) -> String {
        format!("{}/{}", self.server, self.name)
    }
}

impl Drop for PgDb {
    fn drop(&mut self) {
        let _ = psql(
            &format!("{}/postgres", self.server),
            &format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name),
        );
    }
}
