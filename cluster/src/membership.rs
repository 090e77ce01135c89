//! This process's standing in the cluster: the cluster it belongs to, its claim on the
//! data directory, the incarnation it registered at start (broker epoch), how long it
//! may still act on its lease, and whether another process took its broker id over.
//! The broker's lease loop renews and releases the lease; everything else only asks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Instant;

#[derive(Debug)]
pub struct Membership {
    /// The cluster's id, from the metastore.
    cluster_id: uuid::Uuid,
    /// Until when this broker may act as leader; `None` while it holds no lease.
    lease_deadline: Mutex<Option<Instant>>,
    /// The incarnation registered at start; -1 before.
    broker_epoch: AtomicI64,
    /// Set when another process registered with this broker id: this one stops.
    replaced: AtomicBool,
    /// `{data_dir}/.lock`, locked for the process's lifetime: one process per data
    /// directory.
    _data_dir_lock: std::fs::File,
}

impl Membership {
    pub fn new(data_dir_lock: std::fs::File, cluster_id: uuid::Uuid) -> Self {
        Self {
            cluster_id,
            lease_deadline: Mutex::new(None),
            broker_epoch: AtomicI64::new(-1),
            replaced: AtomicBool::new(false),
            _data_dir_lock: data_dir_lock,
        }
    }

    pub fn cluster_id(&self) -> uuid::Uuid {
        self.cluster_id
    }

    fn deadline(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the lease surely has not expired.
    pub fn lease_valid(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() < d)
    }

    /// Trusts the lease until `deadline`.
    pub fn trust_lease_until(&self, deadline: Instant) {
        *self.deadline() = Some(deadline);
    }

    /// Stops trusting the lease (given up, or taken by another process).
    pub fn drop_lease(&self) {
        *self.deadline() = None;
    }

    pub fn epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Relaxed)
    }

    pub fn registered(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::Relaxed);
    }

    /// Another process registered with this broker id.
    pub fn mark_replaced(&self) {
        self.replaced.store(true, Ordering::Relaxed);
    }

    pub fn replaced(&self) -> bool {
        self.replaced.load(Ordering::Relaxed)
    }
}
