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
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use shale_metastore::{BrokerLease, Metastore, PartitionState, Topic};
use shale_tiering::reader::{ReaderConfig, RemoteReader};
use shale_tiering::uploader::{Uploader, UploaderConfig};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::clock::now_ms;
use crate::config::BrokerConfig;
use crate::error::{Error, Result};
use crate::partition::{Partition, partition_dir, read_topic_id};
use crate::topic_config::TopicConfig;

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
    pub(crate) upload_permits: Arc<tokio::sync::Semaphore>,
    /// Bytes of all local partition logs: recomputed every flush check, raised by each
    /// append in between (for `log.local_disk_limit_bytes`).
    pub(crate) local_log_bytes: std::sync::atomic::AtomicU64,
    pub(crate) request_stats: crate::stats::RequestStats,
    topics: RwLock<HashMap<String, Arc<TopicState>>>,
    /// Registered brokers at the last refresh.
    brokers: RwLock<Vec<BrokerLease>>,
    /// Partitions this broker holds but could not open at the last refresh, by topic
    /// id and partition, with the reason.
    open_failures: std::sync::Mutex<HashMap<(uuid::Uuid, i32), String>>,
    reconcile_lock: tokio::sync::Mutex<()>,
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
    _data_dir_lock: std::fs::File,
    pub(crate) controller_epoch: std::sync::atomic::AtomicI64,
    /// A digest of every partition's state version at the last refresh: it changes
    /// when any partition's leader, ISR or ELR changed.
    pub(crate) states_digest: std::sync::atomic::AtomicU64,
    /// What the controller last acted on (see `Broker::controller_pass`).
    pub(crate) controller_view: std::sync::Mutex<crate::cluster::ControllerView>,
    /// When the controller last checked leader balance.
    pub(crate) last_rebalance: std::sync::Mutex<Option<std::time::Instant>>,
    /// Replica fetchers by leader broker id.
    pub(crate) fetchers: std::sync::Mutex<HashMap<i32, tokio::task::JoinHandle<()>>>,
    /// Consumer groups this broker coordinates.
    pub(crate) groups: crate::groups::Coordinator,
    /// Producer ids taken from the metastore and not yet handed out: [next, end).
    pub(crate) producer_ids: std::sync::Mutex<(i64, i64)>,
    pub(crate) cancel: CancellationToken,
}

impl Broker {
    /// Opens the metastore and object store, recovers every local partition, and
    /// removes partition directories of topics that no longer exist.
    pub async fn start(
        config: BrokerConfig,
        cancel: CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        use anyhow::Context;
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("cannot create data_dir {}", config.data_dir.display()))?;
        let metastore = shale_metastore::open(&config.metastore_url)
            .await
            .with_context(|| format!("cannot open metastore {}", config.metastore_url))?;
        let object_store = shale_tiering::open(&config.object_store_url, &config.object_store)
            .await
            .with_context(|| format!("cannot open object store {}", config.object_store_url))?;
        Self::start_with(config, metastore, object_store, cancel).await
    }

    /// [`Broker::start`] on a metastore and object store already open (tests wrap them
    /// to inject faults).
    pub async fn start_with(
        config: BrokerConfig,
        metastore: Arc<dyn Metastore>,
        object_store: shale_tiering::store::ObjectStoreRef,
        cancel: CancellationToken,
    ) -> anyhow::Result<Arc<Self>> {
        use anyhow::Context;
        std::fs::create_dir_all(&config.data_dir)
            .with_context(|| format!("cannot create data_dir {}", config.data_dir.display()))?;
        let data_dir_lock = lock_data_dir(&config.data_dir)?;
        let cluster_id = metastore
            .cluster_id()
            .await
            .context("cannot read the cluster id")?;
        check_data_dir_identity(&config.data_dir, cluster_id, config.broker_id)?;
        let t = &config.tiering;
        let reader = RemoteReader::open(
            object_store.clone(),
            ReaderConfig {
                chunk_bytes: t.chunk_bytes,
                cache_memory_bytes: t.cache_memory_bytes,
                cache_disk_bytes: t.cache_disk_bytes,
                cache_dir: t
                    .cache_dir
                    .clone()
                    .unwrap_or_else(|| config.data_dir.join("remote-cache")),
                read_ahead_chunks: t.read_ahead_chunks,
                max_concurrent_gets: t.max_concurrent_gets,
            },
        )
        .await
        .context("cannot open the remote read cache")?;
        let uploader = Uploader::new(
            object_store,
            metastore.clone(),
            UploaderConfig {
                multipart_threshold: config.tiering.multipart_threshold_bytes,
                part_size: config.tiering.multipart_part_bytes,
                ..UploaderConfig::default()
            },
        );
        let upload_permits = Arc::new(tokio::sync::Semaphore::new(
            config.tiering.upload_concurrency,
        ));
        let groups = crate::groups::Coordinator::new(config.groups.clone());
        let shared = crate::partition::Shared {
            data_dir: config.data_dir.clone(),
            broker_id: config.broker_id,
            appended: Arc::new(tokio::sync::watch::Sender::new(0)),
            files: shale_log::FileCache::new(config.log.open_files_limit()),
        };
        let broker = Arc::new(Self {
            config,
            metastore,
            uploader,
            reader,
            upload_permits,
            local_log_bytes: std::sync::atomic::AtomicU64::new(0),
            request_stats: crate::stats::RequestStats::default(),
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
            cancel,
        });
        let clean = take_clean_shutdown_marker(&broker.config.data_dir)
            .context("cannot read the clean-shutdown marker")?;
        broker.reconcile().await.context("cannot load topics")?;
        broker
            .step_down_after_restart(clean)
            .await
            .context("cannot hand over leadership held before this start")?;
        broker
            .renew_lease()
            .await
            .context("cannot register the broker")?;
        // Lead at once what this broker should lead, if it is the controller.
        broker
            .controller_pass()
            .await
            .context("controller pass failed")?;
        broker.reconcile().await.context("cannot load topics")?;
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
        .await??;
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
    pub(crate) fn partition_by_id(&self, topic_id: &str, partition: i32) -> Result<Arc<Partition>> {
        let id: uuid::Uuid = topic_id
            .parse()
            .map_err(|_| Error::InvalidRequest(format!("'{topic_id}' is not a topic id")))?;
        let topic = self
            .topics_snapshot()
            .into_iter()
            .find(|t| t.meta.id == id)
            .ok_or_else(|| Error::UnknownTopic(topic_id.to_string()))?;
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

    /// Brings local partitions in line with the metastore: first removes topics that
    /// are gone (or re-created under a new id), then opens the replicas this broker
    /// holds, reconfigures them, and applies each partition's leader, epoch and ISR.
    pub async fn reconcile(&self) -> Result<()> {
        let _guard = self.reconcile_lock.lock().await;
        let wanted = self.metastore.list_topics().await?;
        let all_states = self.metastore.list_partition_states().await?;
        let brokers = self.metastore.list_brokers().await?;
        *self.brokers.write().unwrap_or_else(|e| e.into_inner()) = brokers;
        let mut current = self
            .topics
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let ids: HashMap<&str, uuid::Uuid> =
            wanted.iter().map(|t| (t.name.as_str(), t.id)).collect();
        let removed: Vec<Arc<TopicState>> = current
            .extract_if(|name, s| ids.get(name.as_str()) != Some(&s.meta.id))
            .map(|(_, s)| s)
            .collect();
        if !removed.is_empty() {
            self.open_failures
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|(t, _), _| removed.iter().all(|r| r.meta.id != *t));
            // Unpublish first, then delete: a re-created topic of the same name opens
            // the same directories below, so the deletion must be over by then.
            *self.topics.write().unwrap_or_else(|e| e.into_inner()) = current.clone();
            self.delete_local(removed).await?;
        }
        let me = self.config.broker_id;
        let digest = all_states.iter().fold(all_states.len() as u64, |h, s| {
            h.wrapping_mul(31).wrapping_add(s.version as u64)
        });
        self.states_digest
            .store(digest, std::sync::atomic::Ordering::Relaxed);
        let mut states_of: HashMap<uuid::Uuid, Vec<PartitionState>> = HashMap::new();
        for s in all_states {
            states_of.entry(s.topic_id).or_default().push(s);
        }
        let mut next = HashMap::with_capacity(wanted.len());
        let mut to_apply = Vec::new();
        for meta in wanted {
            let config = Arc::new(self.resolve_config(&meta.configs).unwrap_or_else(|e| {
                tracing::error!(topic = %meta.name, error = %e, "stored topic config is invalid, using defaults");
                self.config.topic_defaults.clone()
            }));
            let states = states_of.remove(&meta.id).unwrap_or_default();
            let existing = current.get(&meta.name);
            let mut partitions = existing.map(|s| s.partitions.clone()).unwrap_or_default();
            if existing.is_some_and(|s| *s.config != *config) {
                partitions
                    .iter()
                    .flatten()
                    .for_each(|p| p.set_config(config.clone()));
            }
            partitions.resize(meta.partitions.max(0) as usize, None);
            let missing: Vec<i32> = states
                .iter()
                .filter(|s| s.replicas.contains(&me))
                .map(|s| s.partition)
                .filter(|&p| partitions.get(p as usize).is_some_and(Option::is_none))
                .collect();
            if !missing.is_empty() {
                let (shared, name, id, cfg) = (
                    self.shared.clone(),
                    meta.name.clone(),
                    meta.id,
                    config.clone(),
                );
                let opened = tokio::task::spawn_blocking(move || {
                    let opened = missing
                        .into_iter()
                        .map(|p| {
                            let open =
                                Partition::open(&shared, &name, p, id, cfg.clone(), now_ms());
                            (p, open.map(Arc::new))
                        })
                        .collect::<Vec<_>>();
                    // New partition directories survive a power loss from here on.
                    if let Err(e) = std::fs::File::open(&shared.data_dir).and_then(|d| d.sync_all())
                    {
                        tracing::error!(error = %e, "cannot fsync the data directory");
                    }
                    opened
                })
                .await
                .map_err(|e| Error::Internal(e.to_string()))?;
                let mut count = 0;
                let mut failures = self.open_failures.lock().unwrap_or_else(|e| e.into_inner());
                for (p, part) in opened {
                    match part {
                        Ok(part) => {
                            partitions[p as usize] = Some(part);
                            failures.remove(&(meta.id, p));
                            count += 1;
                        }
                        // Left unopened (this broker serves no replica of it); the next
                        // refresh tries again.
                        Err(e) => {
                            tracing::error!(topic = %meta.name, partition = p, error = %e,
                                "cannot open partition");
                            failures.insert((meta.id, p), e.to_string());
                        }
                    }
                }
                drop(failures);
                tracing::info!(topic = %meta.name, partitions = count, "opened partitions");
            }
            for s in &states {
                if let Some(Some(p)) = partitions.get(s.partition as usize) {
                    to_apply.push((p.clone(), s.clone()));
                }
            }
            next.insert(
                meta.name.clone(),
                Arc::new(TopicState {
                    meta,
                    config,
                    states,
                    partitions,
                }),
            );
        }
        tokio::task::spawn_blocking(move || {
            let now = now_ms();
            for (p, s) in to_apply {
                if let Err(e) = p.apply_state(&s, now) {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "cannot apply the partition's role");
                }
            }
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))?;
        *self.topics.write().unwrap_or_else(|e| e.into_inner()) = next;
        self.load_remote_indexes().await;
        Ok(())
    }

    /// Deletes the local directories of removed topics (only those still carrying the
    /// removed topic's id), whether or not this broker had opened them.
    async fn delete_local(&self, removed: Vec<Arc<TopicState>>) -> Result<()> {
        let data_dir = &self.config.data_dir;
        let dirs: Vec<(std::path::PathBuf, uuid::Uuid)> = removed
            .iter()
            .flat_map(|s| {
                (0..s.meta.partitions.max(0))
                    .map(|p| (partition_dir(data_dir, &s.meta.name, p), s.meta.id))
            })
            .collect();
        for s in &removed {
            tracing::info!(topic = %s.meta.name, id = %s.meta.id, "deleting local partitions of removed topic");
        }
        let files = self.shared.files.clone();
        tokio::task::spawn_blocking(move || {
            for (dir, id) in dirs {
                match read_topic_id(&dir) {
                    Ok(Some(found)) if found == id => {}
                    Ok(_) => continue,
                    Err(e) => {
                        tracing::warn!(error = %e, "not deleting a partition directory whose metadata cannot be read");
                        continue;
                    }
                }
                files.forget_dir(&dir);
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    tracing::warn!(dir = %dir.display(), error = %e, "cannot delete partition directory");
                }
            }
        })
        .await
        .map_err(|e| Error::Internal(e.to_string()))
    }

    /// Spawns retention, flush and metadata-refresh loops; they end on cancellation.
    pub fn spawn_background(self: &Arc<Self>, tasks: &mut JoinSet<()>) {
        let log = self.config.log.clone();
        self.spawn_every(
            tasks,
            log.retention_check_interval_ms,
            "retention",
            |b| async move {
                on_each_partition(b.all_partitions(), "retention", |p, now| {
                    p.apply_retention(now).map(drop)
                })
                .await?;
                b.remote_retention_pass().await?;
                b.sweep_deleted_topics().await
            },
        );
        // Appends raise the figure as they go; this corrects it (retention, truncation)
        // once a second.
        self.spawn_every(tasks, 1_000, "disk usage", |b| async move {
            let used = b.all_partitions().iter().map(|p| p.size_bytes()).sum();
            b.local_log_bytes
                .store(used, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        });
        self.spawn_every(
            tasks,
            self.config.tiering.upload_interval_ms,
            "segment upload",
            |b| async move { b.upload_pass().await },
        );
        self.spawn_every(
            tasks,
            log.flush_check_interval_ms,
            "flush",
            |b| async move {
                let parts: Vec<_> = b
                    .all_partitions()
                    .into_iter()
                    .filter(|p| p.config().flush_ms < i64::MAX)
                    .collect();
                on_each_partition(parts, "flush", |p, now| p.flush_if_due(now).map(drop)).await
            },
        );
        // Metadata: re-read on every announced change, and polled as the fallback.
        let broker = self.clone();
        tasks.spawn(async move {
            let every = Duration::from_millis(broker.config.log.metadata_refresh_interval_ms);
            loop {
                tokio::select! {
                    _ = broker.cancel.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                    _ = broker.changes.notified() => {}
                }
                if let Err(e) = broker.reconcile().await {
                    tracing::warn!(error = %e, "metadata refresh failed");
                }
                broker.ensure_fetchers();
            }
        });
        let broker = self.clone();
        tasks.spawn(async move {
            loop {
                let listening = broker.metastore.listen_for_changes(broker.changes.clone());
                tokio::select! {
                    _ = broker.cancel.cancelled() => break,
                    r = listening => match r {
                        Ok(()) => break, // no notifications here: polling only
                        Err(e) => tracing::warn!(error = %e, "metastore change feed lost, reconnecting"),
                    },
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
        let cluster = self.config.cluster.clone();
        self.spawn_every(
            tasks,
            cluster.heartbeat_interval_ms,
            "lease renewal",
            |b| async move { b.renew_lease().await },
        );
        self.spawn_every(
            tasks,
            cluster.controller_interval_ms,
            "controller",
            |b| async move { b.controller_pass().await },
        );
        self.spawn_every(
            tasks,
            (cluster.replica_lag_time_max_ms / 4).max(1),
            "ISR shrink",
            |b| async move { b.shrink_isrs().await },
        );
        self.spawn_every(tasks, 100, "group coordinator", |b| async move {
            b.groups_tick();
            Ok(())
        });
        // Fetchers start on every metadata refresh; this restarts ones that ended.
        self.spawn_every(tasks, 1_000, "replica fetchers", |b| async move {
            b.ensure_fetchers();
            Ok(())
        });
    }

    fn spawn_every<F, Fut>(
        self: &Arc<Self>,
        tasks: &mut JoinSet<()>,
        every_ms: u64,
        name: &'static str,
        f: F,
    ) where
        F: Fn(Arc<Self>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send,
    {
        let broker = self.clone();
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(every_ms));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = broker.cancel.cancelled() => break,
                    _ = tick.tick() => {}
                }
                // Cancellation drops an unfinished pass; every pass is safe to cut short.
                tokio::select! {
                    _ = broker.cancel.cancelled() => break,
                    r = f(broker.clone()) => if let Err(e) = r {
                        tracing::warn!(task = name, error = %e, "background task failed");
                    }
                }
            }
        });
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

    /// Gives up the lease and fsyncs every partition (after the server stopped taking
    /// requests). If every partition closed, leaves the clean-shutdown marker, so the
    /// next start knows no log lost an unflushed tail.
    pub async fn shutdown(&self) {
        self.release_lease().await;
        self.reader.close().await;
        let parts = self.all_partitions();
        let failed = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = failed.clone();
        let closed = on_each_partition(parts, "flush at shutdown", move |p, now| {
            p.close(now).inspect_err(|_| {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
        })
        .await;
        let failed = failed.load(std::sync::atomic::Ordering::Relaxed);
        if let Err(e) = &closed {
            tracing::error!(error = %e, "flush at shutdown failed");
        } else if failed > 0 || self.was_replaced() {
            tracing::warn!(partitions = failed, "not every partition closed cleanly");
        } else {
            let (dir, epoch) = (self.config.data_dir.clone(), self.broker_epoch());
            match tokio::task::spawn_blocking(move || write_clean_shutdown_marker(&dir, epoch))
                .await
            {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "cannot write the clean-shutdown marker")
                }
                Err(e) => tracing::warn!(error = %e, "cannot write the clean-shutdown marker"),
            }
        }
    }
}

/// Written at the end of a clean shutdown, after every partition was fsynced, naming
/// the incarnation (broker epoch) that stopped; removed at start. It counts only if that
/// incarnation is still the newest registered one: otherwise another process ran on
/// this broker id since (and may have left unflushed tails).
const CLEAN_SHUTDOWN_MARKER: &str = ".clean-shutdown";

fn write_clean_shutdown_marker(data_dir: &Path, broker_epoch: i64) -> std::io::Result<()> {
    let path = data_dir.join(CLEAN_SHUTDOWN_MARKER);
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, format!("{broker_epoch}\n"))?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, &path)?;
    std::fs::File::open(data_dir)?.sync_all()
}

/// The incarnation whose clean shutdown the marker records, if any; removes the marker
/// (durably) so that a crash from here on counts as unclean.
fn take_clean_shutdown_marker(data_dir: &Path) -> std::io::Result<Option<i64>> {
    let path = data_dir.join(CLEAN_SHUTDOWN_MARKER);
    let epoch = match std::fs::read_to_string(&path) {
        Ok(text) => text.trim().parse().ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    std::fs::remove_file(&path)?;
    std::fs::File::open(data_dir)?.sync_all()?;
    Ok(epoch)
}

/// Locks `{data_dir}/.lock` for this process (released when it exits, however it
/// exits): two brokers writing one data directory would corrupt it.
fn lock_data_dir(data_dir: &Path) -> anyhow::Result<std::fs::File> {
    use anyhow::Context;
    use rustix::fs::{FlockOperation, flock};
    let path = data_dir.join(".lock");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    flock(&file, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
        anyhow::anyhow!(
            "data directory {} is in use by another shale-broker process ({e})",
            data_dir.display()
        )
    })?;
    Ok(file)
}

/// The data directory's identity (`meta.properties`): the cluster and broker it belongs
/// to. A directory of another cluster (a metastore that is not its own would make the
/// broker delete every partition it does not know) or of another broker id is refused;
/// a new directory is stamped.
fn check_data_dir_identity(
    data_dir: &Path,
    cluster_id: uuid::Uuid,
    broker_id: i32,
) -> anyhow::Result<()> {
    use anyhow::Context;
    let path = data_dir.join("meta.properties");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let field = |key: &str| {
                text.lines()
                    .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
                    .map(str::trim)
            };
            let found_cluster = field("cluster.id").unwrap_or("");
            if found_cluster != cluster_id.to_string() {
                anyhow::bail!(
                    "data directory {} belongs to cluster {found_cluster}, but the metastore is \
                     cluster {cluster_id}: refusing to start (check --metastore-url and --data-dir)",
                    data_dir.display()
                );
            }
            let found_broker = field("broker.id").unwrap_or("");
            if found_broker != broker_id.to_string() {
                anyhow::bail!(
                    "data directory {} belongs to broker {found_broker}, not broker {broker_id}: \
                     refusing to start (check --broker-id and --data-dir)",
                    data_dir.display()
                );
            }
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let tmp = path.with_extension("tmp");
            std::fs::write(
                &tmp,
                format!("version=1\ncluster.id={cluster_id}\nbroker.id={broker_id}\n"),
            )
            .and_then(|()| std::fs::File::open(&tmp)?.sync_all())
            .and_then(|()| std::fs::rename(&tmp, &path))
            .and_then(|()| std::fs::File::open(data_dir)?.sync_all())
            .with_context(|| format!("cannot write {}", path.display()))
        }
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Runs `f` on every partition, on the blocking pool; a failing partition is logged
/// and does not stop the others.
async fn on_each_partition(
    parts: Vec<Arc<Partition>>,
    task: &'static str,
    f: impl Fn(&Partition, i64) -> Result<()> + Send + 'static,
) -> Result<()> {
    if parts.is_empty() {
        return Ok(());
    }
    tokio::task::spawn_blocking(move || {
        let now = now_ms();
        for p in parts {
            if let Err(e) = f(&p, now) {
                tracing::warn!(task, topic = %p.topic, partition = p.index, error = %e, "partition task failed");
            }
        }
    })
    .await
    .map_err(|e| Error::Internal(e.to_string()))
}

/// Removes partition directories whose topic (by name and id) no longer exists, e.g.
/// a topic deleted while this broker was down.
fn remove_orphans(data_dir: &Path, known: &HashMap<String, uuid::Uuid>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(data_dir)? {
        let path = entry?.path();
        if !path.is_dir() {
            continue;
        }
        let id = match read_topic_id(&path) {
            Ok(Some(id)) => id,
            Ok(None) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "keeping a directory whose partition metadata cannot be read");
                continue;
            }
        };
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let belongs = name.rsplit_once('-').is_some_and(|(topic, p)| {
            known.get(topic) == Some(&id)
                && p.parse::<i32>()
                    .is_ok_and(|p| partition_dir(data_dir, topic, p) == path)
        });
        if !belongs {
            tracing::info!(dir = %path.display(), "removing partition directory of a deleted topic");
            std::fs::remove_dir_all(&path)?;
        }
    }
    Ok(())
}
