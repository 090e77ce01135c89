//! The broker's background work: retention, compaction (`cleaner`), flushes, disk usage, uploads, metadata
//! refresh and the change feed, lease renewal, the controller, ISR shrinking, the
//! group coordinator's ticks and replica fetchers; and shutdown.
//!
//! # Cancellation
//! Every loop ends when the broker's `CancellationToken` fires; a pass in progress is
//! dropped, and every pass is safe to cut short. [`Broker::shutdown`] then gives up the
//! lease and fsyncs every partition.

use std::sync::Arc;
use std::time::Duration;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::datadir::write_clean_shutdown_marker;
use crate::error::{Error, Result};
use crate::partition::Partition;

impl Broker {
    /// Spawns retention, flush and metadata-refresh loops on the broker's task
    /// tracker; they end on cancellation.
    pub fn spawn_background(self: &Arc<Self>) {
        let log = self.config.log.clone();
        self.spawn_every(
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
        self.spawn_every(1_000, "disk usage", |b| async move {
            let used = b.all_partitions().iter().map(|p| p.size_bytes()).sum();
            b.stats
                .local_log_bytes
                .store(used, std::sync::atomic::Ordering::Relaxed);
            Ok(())
        });
        self.spawn_every(
            self.config.tiering.upload_interval_ms,
            "segment upload",
            |b| async move { b.upload_pass().await },
        );
        self.spawn_every(
            1_000,
            "iceberg tables",
            |b| async move { b.table_pass().await },
        );
        self.spawn_every(
            self.config.tiering.remote_compaction_interval_ms,
            "remote compaction",
            |b| async move { b.remote_compaction_pass().await },
        );
        if self.config.tiering.snapshot_interval_ms > 0 {
            let last = Arc::new(std::sync::Mutex::new(Default::default()));
            self.spawn_every(
                self.config.tiering.snapshot_interval_ms,
                "bucket snapshot",
                move |b| {
                    let last = last.clone();
                    async move { b.snapshot_pass(&last).await }
                },
            );
        }
        // Read replicas serve nothing until they have read their source: once at
        // start, then every poll interval.
        let broker = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = broker.read_replica_pass().await {
                tracing::warn!(error = %e, "read replicas: first pass failed");
            }
        });
        self.spawn_every(
            self.config.tiering.read_replica_poll_interval_ms.max(1),
            "read replicas",
            |b| async move { b.read_replica_pass().await },
        );
        // Key filters of newly sealed segments (and, after a start, of older ones).
        self.spawn_every(
            self.config.tiering.upload_interval_ms,
            "key filters",
            |b| async move { b.key_filter_pass(8).await },
        );
        if log.cleaner_enable {
            self.spawn_every(log.cleaner_backoff_ms, "log cleaner", |b| async move {
                b.cleaner_pass().await
            });
        }
        self.spawn_every(log.flush_check_interval_ms, "flush", |b| async move {
            let parts: Vec<_> = b
                .all_partitions()
                .into_iter()
                .filter(|p| p.config().flush_ms < i64::MAX)
                .collect();
            on_each_partition(parts, "flush", |p, now| p.flush_if_due(now).map(drop)).await
        });
        // Metadata: re-read on every announced change, and polled as the fallback.
        let broker = self.clone();
        self.tasks.spawn(async move {
            let every = Duration::from_millis(broker.config.log.metadata_refresh_interval_ms);
            loop {
                tokio::select! {
                    _ = broker.cancel.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                    _ = broker.registry.changes().notified() => {}
                }
                if let Err(e) = broker.reconcile().await {
                    tracing::warn!(error = %e, "metadata refresh failed");
                }
                broker.ensure_fetchers();
            }
        });
        let broker = self.clone();
        self.tasks.spawn(async move {
            loop {
                let listening = broker.metastore.listen_for_changes(broker.registry.changes().clone());
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
            cluster.heartbeat_interval_ms,
            "lease renewal",
            |b| async move { b.renew_lease().await },
        );
        self.spawn_every(
            cluster.controller_interval_ms,
            "controller",
            |b| async move { b.controller_pass().await },
        );
        // Leaders' local sizes, for the balancer's disk goal.
        if cluster.auto_balance_enable && cluster.auto_balance_disk_band_percent > 0 {
            let reports = Arc::new(std::sync::Mutex::new(Default::default()));
            self.spawn_every(cluster.auto_balance_interval_ms, "size reports", move |b| {
                let reports = reports.clone();
                async move { b.report_sizes(&reports).await }
            });
        }
        self.spawn_every(
            (cluster.replica_lag_time_max_ms / 4).max(1),
            "ISR shrink",
            |b| async move { b.shrink_isrs().await },
        );
        self.spawn_every(100, "group coordinator", |b| async move {
            b.groups_tick();
            Ok(())
        });
        // Decided transactions left unfinished (a coordinator that crashed or moved)
        // and transactions past their timeout.
        self.spawn_every(1_000, "transaction coordinator", |b| async move {
            b.txns_tick().await;
            Ok(())
        });
        // Fetchers start on every metadata refresh; this restarts ones that ended.
        self.spawn_every(1_000, "replica fetchers", |b| async move {
            b.ensure_fetchers();
            Ok(())
        });
    }

    fn spawn_every<F, Fut>(self: &Arc<Self>, every_ms: u64, name: &'static str, f: F)
    where
        F: Fn(Arc<Self>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<()>> + Send,
    {
        let broker = self.clone();
        self.tasks.spawn(async move {
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

    /// Stops the broker (after the front ends stopped taking requests): cancels and
    /// waits up to `timeout` for every task it spawned, gives up the lease and fsyncs
    /// every partition. If every partition closed, leaves the clean-shutdown marker,
    /// so the next start knows no log lost an unflushed tail.
    pub async fn shutdown(&self, timeout: Duration) {
        self.cancel.cancel();
        self.tasks.close();
        if tokio::time::timeout(timeout, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                tasks = self.tasks.len(),
                "background tasks did not stop in time; closing the partitions under them"
            );
        }
        self.release_lease().await;
        let reader = self.tier.reader.clone();
        if let Err(e) = self
            .tier
            .remote_io
            .run(async move { reader.close().await })
            .await
        {
            tracing::warn!(error = %e, "closing the read cache failed");
        }
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
    .map_err(Error::from)
}
