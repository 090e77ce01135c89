//! This process's standing in the cluster: the cluster it belongs to, its claim on the
//! data directory, the incarnation it registered at start (broker epoch), how long it
//! may still act on its lease, and whether another process took its broker id over.
//! The broker's lease loop renews and releases the lease; everything else only asks.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::{Duration, Instant};

use shale_metastore::Metastore;

/// A lease renewal the metastore accepted.
#[derive(Debug, Clone, Copy)]
#[must_use = "the lease counts only once trusted"]
pub struct Renewal {
    sent: Instant,
    lease_ms: u64,
    /// The lease had lapsed before this renewal: the controller may have moved
    /// leaderships meanwhile, so the metadata must be read again before the lease is
    /// trusted.
    pub lapsed: bool,
}

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
    fn trust_lease_until(&self, deadline: Instant) {
        *self.deadline() = Some(deadline);
    }

    /// Stops trusting the lease (given up, or taken by another process).
    fn drop_lease(&self) {
        *self.deadline() = None;
    }

    pub fn epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::Relaxed)
    }

    pub fn registered(&self, epoch: i64) {
        self.broker_epoch.store(epoch, Ordering::Relaxed);
    }

    /// Another process registered with this broker id.
    fn mark_replaced(&self) {
        self.replaced.store(true, Ordering::Relaxed);
    }

    pub fn replaced(&self) -> bool {
        self.replaced.load(Ordering::Relaxed)
    }

    /// Renews this broker's lease in the metastore. Whether the lease lapsed is judged
    /// when the answer arrives, not when the renewal was sent: a slow renewal can land
    /// after the lease ran out in the metastore. The renewed lease counts once
    /// [`Membership::trust`]ed: for 3/4 of `lease_ms` from when the renewal was sent,
    /// on this process's monotonic clock. Fenced (another process registered with this
    /// broker id): the lease is dropped and the process marked replaced.
    pub async fn renew(
        &self,
        metastore: &dyn Metastore,
        broker_id: i32,
        address: &str,
        lease_ms: u64,
    ) -> shale_metastore::Result<Renewal> {
        let sent = Instant::now();
        let renewed = metastore
            .renew_broker_lease(broker_id, self.epoch(), address, lease_ms as i64)
            .await;
        if let Err(shale_metastore::Error::BrokerEpochFenced { .. }) = &renewed {
            self.drop_lease();
            tracing::error!(
                broker = broker_id,
                "another process registered with this broker id: this one stops"
            );
            self.mark_replaced();
        }
        renewed?;
        Ok(Renewal {
            sent,
            lease_ms,
            lapsed: !self.lease_valid(),
        })
    }

    /// Trusts a renewed lease (after the metadata was read again, if it had lapsed).
    pub fn trust(&self, renewal: Renewal) {
        self.trust_lease_until(renewal.sent + Duration::from_millis(renewal.lease_ms * 3 / 4));
    }

    /// Gives up the lease (graceful shutdown), so leadership moves at once, and the
    /// controller lease if this broker holds it.
    pub async fn release(&self, metastore: &dyn Metastore, broker_id: i32, address: &str) {
        self.drop_lease();
        match metastore
            .renew_broker_lease(broker_id, self.epoch(), address, 0)
            .await
        {
            Ok(()) => {}
            Err(shale_metastore::Error::BrokerEpochFenced { .. }) => {
                // Another process registered with this id: this one's stop is not the
                // clean stop of the newest incarnation.
                self.mark_replaced();
            }
            Err(e) => tracing::warn!(error = %e, "cannot release the broker lease"),
        }
        if let Ok(Some(c)) = metastore.controller().await
            && c.broker_id == broker_id
            && let Err(e) = metastore.try_acquire_controller(broker_id, 0).await
        {
            tracing::warn!(error = %e, "cannot release the controller lease");
        }
    }
}
