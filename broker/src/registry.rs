//! The topic registry: what the metastore says (topics, configs, partition states,
//! brokers), plus this broker's open partitions. It changes only in the broker's
//! `reconcile` (`reconcile.rs`), which reads the metastore (the truth) and opens,
//! reconfigures or removes local partitions to match; a tokio mutex serializes
//! reconciles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use shale_metastore::{BrokerLease, PartitionState};

use shale_config::topic::TopicConfig;
use shale_metastore::Topic;

use crate::partition::{Partition, Shared};

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

/// What the last refresh read, as the rest of the broker sees it.
pub(crate) struct Registry {
    topics: RwLock<HashMap<String, Arc<TopicState>>>,
    /// Registered brokers at the last refresh.
    brokers: RwLock<Vec<BrokerLease>>,
    /// Partitions this broker holds but could not open at the last refresh, by topic
    /// id and partition, with the reason.
    open_failures: Mutex<HashMap<(uuid::Uuid, i32), String>>,
    /// Serializes refreshes.
    reconcile_lock: tokio::sync::Mutex<()>,
    /// A digest of every partition's state version at the last refresh: it changes
    /// when any partition's leader, ISR or ELR changed.
    states_digest: AtomicU64,
    /// Signalled when the metastore announces a change (or a broker finds its view
    /// stale): the metadata refresh runs at once.
    changes: Arc<tokio::sync::Notify>,
    /// What every local partition replica shares: data directory, broker id, the
    /// append signal (wakes waiting replica fetches) and the open-file cache.
    shared: Shared,
}

/// A partition that could not be opened: how many did not, and the first of them.
pub(crate) struct OpenFailure {
    pub(crate) count: usize,
    pub(crate) topic_id: uuid::Uuid,
    pub(crate) partition: i32,
    pub(crate) reason: String,
}

impl Registry {
    pub(crate) fn new(shared: Shared) -> Self {
        Self {
            topics: RwLock::new(HashMap::new()),
            brokers: RwLock::new(Vec::new()),
            open_failures: Mutex::new(HashMap::new()),
            reconcile_lock: tokio::sync::Mutex::new(()),
            states_digest: AtomicU64::new(0),
            changes: Arc::new(tokio::sync::Notify::new()),
            shared,
        }
    }

    /// What the local partition replicas share.
    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Asks for a refresh now (this broker's view is stale).
    pub(crate) fn stale(&self) {
        self.changes.notify_one();
    }

    /// What wakes the refresh: notified by [`Registry::stale`] and by the metastore.
    pub(crate) fn changes(&self) -> &Arc<tokio::sync::Notify> {
        &self.changes
    }

    /// Held for the whole of a refresh: refreshes run one at a time.
    pub(crate) async fn lock_refresh(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.reconcile_lock.lock().await
    }

    /// Every topic by name, to edit and [`Registry::publish`] (under
    /// [`Registry::lock_refresh`]).
    pub(crate) fn snapshot(&self) -> HashMap<String, Arc<TopicState>> {
        self.read().clone()
    }

    pub(crate) fn set_states_digest(&self, digest: u64) {
        self.states_digest.store(digest, Ordering::Relaxed);
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<TopicState>>> {
        self.topics.read().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn topics(&self) -> Vec<Arc<TopicState>> {
        self.read().values().cloned().collect()
    }

    pub(crate) fn topic(&self, name: &str) -> Option<Arc<TopicState>> {
        self.read().get(name).cloned()
    }

    pub(crate) fn publish(&self, topics: HashMap<String, Arc<TopicState>>) {
        *self.topics.write().unwrap_or_else(|e| e.into_inner()) = topics;
    }

    pub(crate) fn brokers(&self) -> Vec<BrokerLease> {
        self.brokers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub(crate) fn set_brokers(&self, brokers: Vec<BrokerLease>) {
        *self.brokers.write().unwrap_or_else(|e| e.into_inner()) = brokers;
    }

    /// See [`Registry::states_digest`]'s field.
    pub(crate) fn states_digest(&self) -> u64 {
        self.states_digest.load(Ordering::Relaxed)
    }

    /// The partitions that failed to open, by topic id and partition, with the reason.
    pub(crate) fn failures(&self) -> std::sync::MutexGuard<'_, HashMap<(uuid::Uuid, i32), String>> {
        self.open_failures.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The partitions that failed to open, of one topic or of all.
    pub(crate) fn open_failure(&self, topic_id: Option<uuid::Uuid>) -> Option<OpenFailure> {
        let failures = self.failures();
        let mut mine = failures
            .iter()
            .filter(|((t, _), _)| topic_id.is_none_or(|id| id == *t));
        let ((topic_id, partition), reason) = mine.next()?;
        Some(OpenFailure {
            count: 1 + mine.count(),
            topic_id: *topic_id,
            partition: *partition,
            reason: reason.clone(),
        })
    }
}
