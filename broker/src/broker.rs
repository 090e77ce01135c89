//! The broker's state: the topic registry (what the metastore says, plus this broker's
//! open partitions), and the background tasks that keep it current and the logs tidy.
//!
//! The registry is a snapshot map behind a `std::sync::RwLock`, held only to clone an
//! `Arc`. It changes only in [`Broker::reconcile`], which reads the metastore (the
//! truth) and opens, reconfigures or removes local partitions to match; a tokio mutex
//! serializes reconciles.
//!
//! # Cancellation
//! Background tasks stop when the broker's `CancellationToken` fires; [`Broker::shutdown`]
//! then fsyncs every partition.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use shale_metastore::{BrokerLease, Metastore, PartitionState, Topic};
use shale_tiering::reader::{ReaderConfig, RemoteReader};
use shale_tiering::uploader::{Uploader, UploaderConfig};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::config::BrokerConfig;
use crate::datadir::{
    check_data_dir_identity, lock_data_dir, remove_orphans, take_clean_shutdown_marker,
};
use crate::error::{Error, Result, StartError};
use crate::partition::Partition;
use crate::topic_config::TopicConfig;
use crate::transport::ReplicaConnector;

/// A topic as this broker knows it.
pub struct TopicState {
    pub meta: Topic,
    pub config: Arc<TopicConfig>,
    /// Leader, epoch, replicas and ISR of every partition, by partition (the
    /// metastore's view at the last refresh).
    pub states: Vec<PartitionState>,
    /// The partitions this broker holds a replica of, by partition.
    pub partitions: Vec<Option<Arc<Partition>>>,
}

impl TopicState {
    pub fn state(&self, partition: i32) -> Option<&PartitionState> {
        self.states.iter().find(|s| s.partition == partition)
    }
}

pub struct Broker {
    pub config: BrokerConfig,
    pub(crate) metastore: Arc<dyn Metastore>,
    pub(crate) uploader: Uploader,
    pub(crate) reader: Arc<RemoteReader>,
    /// Where remote reads run (see `remote_io`).
    pub(crate) remote_io: crate::remote_io::RemoteIo,
    /// Fetch byte-rate quotas per client (`[quotas]`).
    pub(crate) fetch_quotas: crate::quota::FetchQuotas,
    pub(crate) upload_permits: Arc<tokio::sync::Semaphore>,
    /// Bytes of all local partition logs: recomputed every flush check, raised by each
    /// append in between (for `log.local_disk_limit_bytes`).
    pub(crate) local_log_bytes: std::sync::atomic::AtomicU64,
    pub(crate) request_stats: crate::stats::RequestStats,
    pub(crate) cleaner_stats: crate::cleaner::CleanerStats,
    pub(crate) remote_compactions: crate::tiering::compact::RemoteCompactions,
    pub(crate) topics: RwLock<HashMap<String, Arc<TopicState>>>,
    /// Registered brokers at the last refresh.
    pub(crate) brokers: RwLock<Vec<BrokerLease>>,
    /// Partitions this broker holds but could not open at the last refresh, by topic
    /// id and partition, with the reason.
    pub(crate) open_failures: std::sync::Mutex<HashMap<(uuid::Uuid, i32), String>>,
    pub(crate) reconcile_lock: tokio::sync::Mutex<()>,
    /// Signalled when the metastore announces a change (or a broker finds its view
    /// stale): the metadata refresh runs at once.
    pub(crate) changes: Arc<tokio::sync::Notify>,
    /// What every partition replica shares: data directory, broker id, the append
    /// signal (wakes waiting replica fetches) and the open-file cache.
    pub(crate) shared: crate::partition::Shared,
    /// Until when this broker may act as leader (see `cluster.rs`).
    pub(crate) lease_deadline: std::sync::Mutex<Option<std::time::Instant>>,
    /// This process's incarnation, registered at start (see `cluster.rs`).
    pub(crate) broker_epoch: std::sync::atomic::AtomicI64,
    /// Set when another process registered with this broker id: this one stops.
    pub(crate) replaced: std::sync::atomic::AtomicBool,
    /// `{data_dir}/.lock`, locked for the broker's lifetime: one process per data
    /// directory.
    pub(crate) _data_dir_lock: std::fs::File,
    pub(crate) controller_epoch: std::sync::atomic::AtomicI64,
    /// A digest of every partition's state version at the last refresh: it changes
    /// when any partition's leader, ISR or ELR changed.
    pub(crate) states_digest: std::sync::atomic::AtomicU64,
    /// What the controller last acted on (see `Broker::controller_pass`).
    pub(crate) controller_view: std::sync::Mutex<crate::elections::ControllerView>,
    /// When the controller last checked leader balance.
    pub(crate) last_rebalance: std::sync::Mutex<Option<std::time::Instant>>,
    /// Replica fetchers by leader broker id.
    pub(crate) fetchers: std::sync::Mutex<HashMap<i32, tokio::task::JoinHandle<()>>>,
    /// Reaches the leaders this broker follows.
    pub(crate) replica_connector: Arc<dyn ReplicaConnector>,
    /// Every task the broker spawns (background passes, fetchers, uploads): shutdown
    /// waits for them.
    pub(crate) tasks: TaskTracker,
    pub cluster_id: uuid::Uuid,
    /// Consumer groups this broker coordinates.
    pub(crate) groups: crate::coordinator::Coordinator,
    /// Producer ids taken from the metastore and not yet handed out: [next, end).
    pub(crate) producer_ids: std::sync::Mutex<(i64, i64)>,
    /// The users' SCRAM credentials, refreshed with the metadata.
    pub users: crate::security::Users,
    /// The ACLs and `[authorization]`, refreshed with the metadata.
    pub authorizer: crate::security::Authorizer,
    pub(crate) cancel: CancellationToken,
}
fn create_data_dir(config: &BrokerConfig) -> Result<(), StartError> {
    std::fs::create_dir_all(&config.data_dir).map_err(|source| StartError::DataDir {
        what: "create",
        path: config.data_dir.clone(),
        source,
    })
}

impl Broker {
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
                url: crate::security::secrets::redact_url(&config.metastore_url),
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
                .unwrap_or_else(|| config.data_dir.join("remote-cache")),
            direct_io: t.cache_direct_io,
            read_ahead_chunks: t.read_ahead_chunks,
            max_concurrent_gets: t.max_concurrent_gets,
            tasks: tasks.clone(),
        };
        // Opened on the remote-I/O runtime: the cache's own tasks run there.
        let reader = remote_io
            .run(RemoteReader::open(read_store, reader_config))
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
        let groups = crate::coordinator::Coordinator::new(config.groups.clone());
        let shared = crate::partition::Shared {
            data_dir: config.data_dir.clone(),
            broker_id: config.broker_id,
            appended: Arc::new(tokio::sync::watch::Sender::new(0)),
            files: shale_log::FileCache::new(config.log.open_files_limit()),
        };
        let fetch_quotas = crate::quota::FetchQuotas::new(config.quotas.consumer_byte_rate);
        let authorizer = crate::security::Authorizer::new(config.authorization.clone());
        let broker = Arc::new(Self {
            config,
            metastore,
            uploader,
            reader,
            remote_io,
            fetch_quotas,
            upload_permits,
            local_log_bytes: std::sync::atomic::AtomicU64::new(0),
            request_stats: crate::stats::RequestStats::default(),
            cleaner_stats: crate::cleaner::CleanerStats {
                last_pass_ms: std::sync::atomic::AtomicI64::new(-1),
                ..Default::default()
            },
            remote_compactions: Default::default(),
            topics: RwLock::new(HashMap::new()),
            brokers: RwLock::new(Vec::new()),
            open_failures: std::sync::Mutex::new(HashMap::new()),
            reconcile_lock: tokio::sync::Mutex::new(()),
            changes: Arc::new(tokio::sync::Notify::new()),
            shared,
            lease_deadline: std::sync::Mutex::new(None),
            broker_epoch: std::sync::atomic::AtomicI64::new(-1),
            replaced: std::sync::atomic::AtomicBool::new(false),
            _data_dir_lock: data_dir_lock,
            controller_epoch: std::sync::atomic::AtomicI64::new(0),
            states_digest: std::sync::atomic::AtomicU64::new(0),
            controller_view: std::sync::Mutex::new(Default::default()),
            last_rebalance: std::sync::Mutex::new(Some(std::time::Instant::now())),
            fetchers: std::sync::Mutex::new(HashMap::new()),
            groups,
            producer_ids: std::sync::Mutex::new((0, 0)),
            users: Default::default(),
            authorizer,
            cluster_id,
            replica_connector,
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
        let known: HashMap<String, uuid::Uuid> = broker
            .topics_snapshot()
            .into_iter()
            .map(|t| (t.meta.name.clone(), t.meta.id))
            .collect();
        let data_dir = broker.config.data_dir.clone();
        tokio::task::spawn_blocking(move || {
            // Segment tails a copy left behind when the broker stopped.
            let _ = std::fs::remove_dir_all(data_dir.join("tier-tmp"));
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
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn topic(&self, name: &str) -> Result<Arc<TopicState>> {
        self.topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
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
        let failures = self.open_failures.lock().unwrap_or_else(|e| e.into_inner());
        let mine: Vec<_> = failures
            .iter()
            .filter(|((t, _), _)| *t == topic_id)
            .collect();
        match mine.first() {
            None => Ok(()),
            Some(((_, p), reason)) => Err(Error::Storage(std::io::Error::other(format!(
                "{} partition(s) cannot be created on broker {}; partition {p}: {reason}",
                mine.len(),
                self.config.broker_id
            )))),
        }
    }

    /// Registered brokers at the last metadata refresh.
    pub fn brokers(&self) -> Vec<BrokerLease> {
        self.brokers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replaces the registered brokers (read from the metastore).
    pub(crate) fn set_brokers(&self, brokers: Vec<BrokerLease>) {
        *self.brokers.write().unwrap_or_else(|e| e.into_inner()) = brokers;
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
        let failures = self.open_failures.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(((topic, p), reason)) = failures.iter().next() {
            return Err(format!(
                "not ready: {} partition(s) cannot be opened; topic {topic} partition {p}: {reason}",
                failures.len()
            ));
        }
        Ok(())
    }

    /// Whether another process registered with this broker id (this one stopped).
    pub fn was_replaced(&self) -> bool {
        self.replaced.load(std::sync::atomic::Ordering::Relaxed)
    }
}
