//! The broker: the handles every part shares (config, metastore, tasks, cancellation,
//! users, authorizer), the parts that keep the rest of its state, each behind its own
//! small API (`registry`, `membership`, `controller`, `followers`, `tier`, `stats`,
//! producer ids, the group coordinator), and its start-up.
//!
//! The topic registry (`registry.rs`) is a snapshot map behind a `std::sync::RwLock`,
//! held only to clone an `Arc`. It changes only in [`Broker::reconcile`], which reads
//! the metastore (the truth) and opens, reconfigures or removes local partitions to
//! match; a tokio mutex serializes reconciles.
//!
//! # Cancellation
//! Background tasks stop when the broker's `CancellationToken` fires; [`Broker::shutdown`]
//! then fsyncs every partition.

use std::collections::HashMap;
use std::sync::Arc;

use shale_metastore::{BrokerLease, Metastore};
use shale_tiering::reader::{ReaderConfig, RemoteReader};
use shale_tiering::uploader::{Uploader, UploaderConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::datadir::{
    check_data_dir_identity, lock_data_dir, remove_orphans, take_clean_shutdown_marker,
};
use crate::error::{Error, Result, StartError};
use crate::partition::Partition;
pub use crate::registry::TopicState;
use crate::transport::ReplicaConnector;
use shale_config::BrokerConfig;
use shale_config::topic::TopicConfig;

pub struct Broker {
    pub config: BrokerConfig,
    pub(crate) metastore: Arc<dyn Metastore>,
    /// Uploads, remote reads and remote compaction.
    pub(crate) tier: crate::tier::Tier,
    /// The topics' Iceberg tables.
    pub(crate) tables: crate::tables::Tables,
    /// What it counts (metrics, the local disk limit).
    pub(crate) stats: crate::stats::Stats,
    /// Topics, partitions and brokers as the last refresh read them.
    pub(crate) registry: crate::registry::Registry,
    /// Its incarnation and lease (see `cluster.rs`).
    pub(crate) membership: shale_cluster::membership::Membership,
    /// What the controller remembers between passes.
    pub(crate) controller: shale_cluster::controller::Controller,
    /// Its replica fetchers, and how they reach the leaders.
    pub(crate) followers: crate::fetchers::Followers,
    /// Every task the broker spawns (background passes, fetchers, uploads): shutdown
    /// waits for them.
    pub(crate) tasks: TaskTracker,
    /// The group coordinator and producer ids.
    pub(crate) coordinators: shale_coordinator::Coordinators,
    /// The users' SCRAM credentials and the ACLs, refreshed with the metadata.
    pub security: shale_security::Security,
    pub(crate) cancel: CancellationToken,
}
/// Creates the data directory and checks that this process can write there, so that
/// an unwritable one is reported as such (not as the metastore failing to open).
fn create_data_dir(config: &BrokerConfig) -> Result<(), StartError> {
    let dir = &config.data_dir;
    std::fs::create_dir_all(dir).map_err(|source| StartError::DataDir {
        what: "create the data directory",
        path: dir.clone(),
        source,
    })?;
    let probe = dir.join(shale_log::layout::WRITE_PROBE);
    std::fs::write(&probe, b"")
        .and_then(|()| std::fs::remove_file(&probe))
        .map_err(|source| StartError::DataDir {
            what: "write to the data directory",
            path: dir.clone(),
            source,
        })
}

impl Broker {
    /// Where topics, partition states, remote segments, offsets and credentials live.
    pub fn metastore(&self) -> &Arc<dyn Metastore> {
        &self.metastore
    }

    /// The group coordinator and producer ids.
    pub fn coordinators(&self) -> &shale_coordinator::Coordinators {
        &self.coordinators
    }

    /// What the broker counts, for metrics.
    pub fn stats(&self) -> &crate::stats::Stats {
        &self.stats
    }

    /// The tracker of every task the broker spawns (shutdown waits for them).
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Completes when the broker starts shutting down.
    pub fn stopping(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.cancel.clone().cancelled_owned()
    }

    /// The id of the cluster this broker belongs to.
    pub fn cluster_id(&self) -> uuid::Uuid {
        self.membership.cluster_id()
    }

    /// Opens the metastore and object store, recovers every local partition, and
    /// removes partition directories of topics that no longer exist. `connector`
    /// reaches the leaders this broker follows.
    pub async fn start(
        config: BrokerConfig,
        connector: Arc<dyn ReplicaConnector>,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>, StartError> {
        create_data_dir(&config)?;
        let metastore = shale_metastore::open(&config.metastore_url)
            .await
            .map_err(|source| StartError::Metastore {
                url: shale_security::secrets::redact_url(&config.metastore_url),
                source,
            })?;
        let open_store = async || {
            shale_tiering::open(&config.object_store_url, &config.object_store)
                .await
                .map_err(|source| StartError::ObjectStore {
                    url: config.object_store_url.clone(),
                    source,
                })
        };
        // Remote reads get a client of their own: its connections are driven on the
        // remote-I/O runtime, never on the one serving produce.
        let object_store = open_store().await?;
        let read_store = open_store().await?;
        Self::start_with(
            config,
            metastore,
            object_store,
            read_store,
            connector,
            cancel,
        )
        .await
    }

    /// [`Broker::start`] on a metastore and object stores already open (tests wrap them
    /// to inject faults): `object_store` for uploads and deletes, `read_store` (the same
    /// store, through its own client) for remote reads.
    pub async fn start_with(
        config: BrokerConfig,
        metastore: Arc<dyn Metastore>,
        object_store: shale_tiering::store::ObjectStoreRef,
        read_store: shale_tiering::store::ObjectStoreRef,
        replica_connector: Arc<dyn ReplicaConnector>,
        cancel: CancellationToken,
    ) -> Result<Arc<Self>, StartError> {
        create_data_dir(&config)?;
        let data_dir_lock = lock_data_dir(&config.data_dir)?;
        let cluster_id = metastore
            .cluster_id()
            .await
            .map_err(|e| StartError::step("cannot read the cluster id")(e.into()))?;
        check_data_dir_identity(&config.data_dir, cluster_id, config.broker_id)?;
        let tasks = TaskTracker::new();
        let t = &config.tiering;
        let remote_io = crate::remote_io::RemoteIo::new(t.remote_io_threads, t.remote_io_nice)
            .map_err(|e| {
                StartError::ReadCache(shale_tiering::reader::ReadError::Cache(e.to_string()))
            })?;
        let reader_config = ReaderConfig {
            chunk_bytes: t.chunk_bytes,
            cache_memory_bytes: t.cache_memory_bytes,
            cache_disk_bytes: t.cache_disk_bytes,
            cache_dir: t
                .cache_dir
                .clone()
                .unwrap_or_else(|| config.data_dir.join(shale_log::layout::REMOTE_CACHE_DIR)),
            direct_io: t.cache_direct_io,
            read_ahead_chunks: t.read_ahead_chunks,
            max_concurrent_gets: t.max_concurrent_gets,
            tasks: tasks.clone(),
        };
        // Opened on the remote-I/O runtime: the cache's own tasks run there.
        let routes = Arc::new(shale_tiering::routes::RoutingStore::new(read_store));
        let reader = remote_io
            .run(RemoteReader::open(routes.clone(), reader_config))
            .await
            .map_err(|e| {
                StartError::ReadCache(shale_tiering::reader::ReadError::Cache(e.to_string()))
            })?
            .map_err(StartError::ReadCache)?;
        let uploader = Uploader::new(
            object_store,
            metastore.clone(),
            UploaderConfig {
                multipart_threshold: config.tiering.multipart_threshold_bytes,
                part_size: config.tiering.multipart_part_bytes,
                local_root: shale_tiering::store::local_root(&config.object_store_url),
                ..UploaderConfig::default()
            },
        );
        let upload_permits = Arc::new(tokio::sync::Semaphore::new(
            config.tiering.upload_concurrency,
        ));
        let shared = crate::partition::Shared {
            data_dir: config.data_dir.clone(),
            broker_id: config.broker_id,
            appended: Arc::new(tokio::sync::watch::Sender::new(0)),
            files: shale_log::FileCache::new(config.log.open_files_limit()),
        };
        let security = shale_security::Security::new(config.authorization.clone());
        let coordinators = shale_coordinator::Coordinators::new(
            shale_coordinator::Coordinator::new(config.groups.clone()),
            shale_coordinator::ProducerIds::new(metastore.clone()),
        );
        let controller =
            shale_cluster::controller::Controller::new(metastore.clone(), config.broker_id);
        let tables = crate::tables::Tables::new(&config.object_store_url, uploader.store().clone());
        let broker = Arc::new(Self {
            config,
            tables,
            metastore,
            tier: crate::tier::Tier {
                uploader,
                reader,
                remote_io,
                upload_permits,
                remote_compactions: Default::default(),
                read_replicas: crate::read_replicas::ReadReplicas::new(routes),
            },
            stats: crate::stats::Stats::default(),
            registry: crate::registry::Registry::new(shared),
            membership: shale_cluster::membership::Membership::new(data_dir_lock, cluster_id),
            controller,
            followers: crate::fetchers::Followers::new(replica_connector),
            coordinators,
            security,
            tasks,
            cancel,
        });
        let clean = take_clean_shutdown_marker(&broker.config.data_dir).map_err(|source| {
            StartError::DataDir {
                what: "read the clean-shutdown marker in",
                path: broker.config.data_dir.clone(),
                source,
            }
        })?;
        broker
            .create_inter_broker_user()
            .await
            .map_err(StartError::step("cannot create the inter-broker user"))?;
        broker
            .reconcile()
            .await
            .map_err(StartError::step("cannot load topics"))?;
        broker
            .step_down_after_restart(clean)
            .await
            .map_err(StartError::step(
                "cannot hand over leadership held before this start",
            ))?;
        broker
            .renew_lease()
            .await
            .map_err(StartError::step("cannot register the broker"))?;
        // Lead at once what this broker should lead, if it is the controller.
        broker
            .controller_pass()
            .await
            .map_err(StartError::step("controller pass failed"))?;
        broker
            .reconcile()
            .await
            .map_err(StartError::step("cannot load topics"))?;
        // The replicas assigned to this broker, by topic name and id (`None`: a topic
        // without partition states, whose directories are all kept).
        let me = broker.config.broker_id;
        let known: HashMap<String, (uuid::Uuid, Option<Vec<i32>>)> = broker
            .topics_snapshot()
            .into_iter()
            .map(|t| {
                let held = t.states.iter().filter(|s| s.replicas.contains(&me));
                let held = held.map(|s| s.partition).collect();
                (
                    t.meta.name.clone(),
                    (t.meta.id, (!t.states.is_empty()).then_some(held)),
                )
            })
            .collect();
        let data_dir = broker.config.data_dir.clone();
        tokio::task::spawn_blocking(move || {
            // Segment tails a copy left behind when the broker stopped.
            let _ = std::fs::remove_dir_all(data_dir.join(shale_log::layout::TIER_TMP_DIR));
            remove_orphans(&data_dir, &known)
        })
        .await
        .map_err(|e| StartError::step("cannot remove orphaned partitions")(e.into()))?
        .map_err(|source| StartError::DataDir {
            what: "remove orphaned partitions from",
            path: broker.config.data_dir.clone(),
            source,
        })?;
        Ok(broker)
    }

    pub fn topics_snapshot(&self) -> Vec<Arc<TopicState>> {
        self.registry.topics()
    }

    pub fn topic(&self, name: &str) -> Result<Arc<TopicState>> {
        self.registry
            .topic(name)
            .ok_or_else(|| Error::UnknownTopic(name.to_string()))
    }

    /// This broker's replica of a partition; `NotLeader` (naming the leader) if it
    /// holds none.
    pub fn partition(&self, topic: &str, partition: i32) -> Result<Arc<Partition>> {
        let state = self.topic(topic)?;
        let slot = usize::try_from(partition)
            .ok()
            .and_then(|p| state.partitions.get(p))
            .ok_or_else(|| Error::UnknownPartition {
                topic: topic.to_string(),
                partition,
            })?;
        slot.clone().ok_or_else(|| Error::NotLeader {
            topic: topic.to_string(),
            partition,
            leader: state.state(partition).map_or(-1, |s| s.leader),
        })
    }

    /// A partition this broker leads (what clients produce to and read from).
    pub fn leader_partition(&self, topic: &str, partition: i32) -> Result<Arc<Partition>> {
        let p = self.partition(topic, partition)?;
        let role = p.role();
        if role.leader != self.config.broker_id {
            return Err(Error::NotLeader {
                topic: topic.to_string(),
                partition,
                leader: role.leader,
            });
        }
        Ok(p)
    }

    /// This broker's replica of a partition, by topic id (replication).
    pub(crate) fn partition_by_id(&self, id: uuid::Uuid, partition: i32) -> Result<Arc<Partition>> {
        let topic = self
            .topics_snapshot()
            .into_iter()
            .find(|t| t.meta.id == id)
            .ok_or_else(|| Error::UnknownTopic(id.to_string()))?;
        self.partition(&topic.meta.name, partition)
    }

    pub(crate) fn all_partitions(&self) -> Vec<Arc<Partition>> {
        self.topics_snapshot()
            .iter()
            .flat_map(|t| t.partitions.iter().flatten().cloned())
            .collect()
    }

    /// An error if a partition of the topic that this broker holds failed to open at
    /// the last refresh.
    pub(crate) fn open_failure(&self, topic_id: uuid::Uuid) -> Result<()> {
        match self.registry.open_failure(Some(topic_id)) {
            None => Ok(()),
            Some(f) => Err(Error::Storage(std::io::Error::other(format!(
                "{} partition(s) cannot be created on broker {}; partition {}: {}",
                f.count, self.config.broker_id, f.partition, f.reason
            )))),
        }
    }

    /// Registered brokers at the last metadata refresh.
    pub fn brokers(&self) -> Vec<BrokerLease> {
        self.registry.brokers()
    }

    /// Replaces the registered brokers (read from the metastore).
    pub(crate) fn set_brokers(&self, brokers: Vec<BrokerLease>) {
        self.registry.set_brokers(brokers);
    }

    pub(crate) fn broker_address(&self, id: i32) -> Option<String> {
        self.brokers()
            .into_iter()
            .find(|b| b.broker_id == id)
            .map(|b| b.address)
    }

    /// The effective config of a topic with these overrides.
    pub fn resolve_config(
        &self,
        overrides: &std::collections::BTreeMap<String, String>,
    ) -> Result<TopicConfig> {
        Ok(self.config.topic_defaults.with_overrides(overrides)?)
    }

    /// Readiness (`GET /health`): started, holding a valid lease, and every partition
    /// it holds open; otherwise why not.
    pub fn health(&self) -> std::result::Result<(), String> {
        if !self.lease_valid() {
            return Err(
                "not ready: no valid lease (starting, or cut off from the metastore)".into(),
            );
        }
        if let Some(f) = self.registry.open_failure(None) {
            return Err(format!(
                "not ready: {} partition(s) cannot be opened; topic {} partition {}: {}",
                f.count, f.topic_id, f.partition, f.reason
            ));
        }
        Ok(())
    }

    /// Whether another process registered with this broker id (this one stopped).
    pub fn was_replaced(&self) -> bool {
        self.membership.replaced()
    }
}
