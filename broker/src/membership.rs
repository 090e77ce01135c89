//! This process's standing in the cluster: its claim on the data directory, the
//! incarnation it registered at start (broker epoch), how long it may still act on its
//! lease, and whether another process took its broker id over. `cluster.rs` renews and releases the lease; everything
//! else only asks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Instant;

#[derive(Debug)]
pub(crate) struct Membership {
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
    pub(crate) fn new(data_dir_lock: std::fs::File) -> Self {
        Self {
            lease_deadline: Mutex::new(None),
            broker_epoch: AtomicI64::new(-1),
            replaced: AtomicBool::new(false),
            _data_dir_lock: data_dir_lock,
        }
    }

    fn deadline(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.lease_deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the lease surely has not expired.
    pub(crate) fn lease_valid(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() < d)
    }

    /// Trusts the lease until `deadline`.
    pub(crate) fn trust_lease_until(&self, deadline: Instant) {
        *self.deadline() = Some(deadline);
    }

    /// Stops trusting the lease (given up, or taken by another process).
    pub(crate) fn drop_lease(&self) {
        *self.deadline() = None;
    }

    pub(crate) fn epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Relaxed)
    }

    pub(crate) fn registered(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::Relaxed);
    }

    /// Another process registered with this broker id.
    pub(crate) fn mark_replaced(&self) {
        self.replaced.store(true, Ordering::Relaxed);
    }

    pub(crate) fn replaced(&self) -> bool {
        self.replaced.load(Ordering::Relaxed)
    }
}
