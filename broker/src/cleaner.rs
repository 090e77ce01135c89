//! The log cleaner's schedule: every `log.cleaner_backoff_ms`, the partitions of
//! compacted topics whose dirty ratio reached `min.cleanable.dirty.ratio` (or whose
//! oldest dirty segment waited past `max.compaction.lag.ms`) are cleaned one at a
//! time, dirtiest first, on the blocking pool, with reads and writes held under
//! `log.cleaner_io_max_bytes_per_second`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use shale_log::CleanerSettings;

use crate::broker::Broker;
use crate::clock::now_ms;
use crate::error::{Error, Result};

/// Holds a stream of I/O under `rate` bytes a second (0: no limit) by sleeping.
pub(crate) struct Throttle {
    rate: u64,
    start: Instant,
    bytes: u64,
}

impl Throttle {
    pub(crate) fn new(rate: u64) -> Self {
        Self {
            rate,
            start: Instant::now(),
            bytes: 0,
        }
    }

    /// Accounts for `n` bytes, sleeping until the running rate is back under the limit.
    pub(crate) fn add(&mut self, n: u64) {
        let wait = self.wait(n, self.start.elapsed());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// How long to wait after `n` more bytes, `elapsed` after the start.
    fn wait(&mut self, n: u64, elapsed: Duration) -> Duration {
        if self.rate == 0 {
            return Duration::ZERO;
        }
        self.bytes = self.bytes.saturating_add(n);
        Duration::from_secs_f64(self.bytes as f64 / self.rate as f64).saturating_sub(elapsed)
    }
}

impl Broker {
    /// One pass of the cleaner (see the module doc).
    pub(crate) async fn cleaner_pass(&self) -> Result<()> {
        let now = now_ms();
        let mut due = Vec::new();
        for p in self.all_partitions() {
            let config = p.config();
            if !config.cleanup_policy.compacts() {
                continue;
            }
            let c = p.cleanable(now);
            if c.dirty_bytes == 0 {
                continue;
            }
            let overdue = config.max_compaction_lag_ms < i64::MAX
                && c.oldest_dirty_timestamp >= 0
                && now.saturating_sub(c.oldest_dirty_timestamp) > config.max_compaction_lag_ms;
            if c.dirty_ratio() >= config.min_cleanable_dirty_ratio.0 || overdue {
                due.push((c.dirty_ratio(), p));
            }
        }
        due.sort_by(|a, b| b.0.total_cmp(&a.0));
        for (_, p) in due {
            if self.cancel.is_cancelled() {
                break;
            }
            let config = p.config();
            let local = config.log_config();
            let settings = CleanerSettings {
                dedupe_buffer_bytes: self.config.log.cleaner_dedupe_buffer_size,
                delete_retention_ms: config.delete_retention_ms,
                min_compaction_lag_ms: config.min_compaction_lag_ms,
                // A tiered topic whose local log is trimmed serves older records of a
                // key from segments no cleaning touches: its tombstones stay.
                drop_tombstones: !(config.remote_storage_enable
                    && (local.retention_ms >= 0 || local.retention_bytes >= 0)),
                drop_txn_markers_below: match config.remote_storage_enable {
                    true => i64::MIN,
                    false => p.replicas_log_end(),
                },
            };
            let rate = self.config.log.cleaner_io_max_bytes_per_second;
            let part = p.clone();
            let staged = tokio::task::spawn_blocking(move || {
                let mut throttle = Throttle::new(rate);
                part.run_clean(&settings, now_ms(), &mut |n| throttle.add(n))
            })
            .await
            .map_err(Error::from)?;
            let staged = match staged {
                Ok(Some(staged)) => staged,
                Ok(None) => continue,
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cleaning failed");
                    continue;
                }
            };
            let stats = staged.stats;
            // No upload reads this partition's segments while they are swapped.
            let _tier = p.tier_lock.lock().await;
            let part = p.clone();
            match tokio::task::spawn_blocking(move || part.install_clean(staged, now_ms()))
                .await
                .map_err(Error::from)?
            {
                Ok(_) => self.stats.cleaner.add(&stats),
                Err(e) => {
                    tracing::warn!(topic = %p.topic, partition = p.index, error = %e, "cleaning failed");
                }
            }
        }
        self.stats
            .cleaner
            .last_pass_ms
            .store(now_ms(), Ordering::Relaxed);
        Ok(())
    }

    pub fn cleaner_stats(&self) -> &crate::stats::CleanerStats {
        &self.stats.cleaner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_throttle_waits_what_the_rate_asks() {
        let mut t = Throttle::new(10 << 20);
        // 1 MiB at 10 MiB/s is due at 100 ms; 4 MiB at 400 ms.
        assert_eq!(t.wait(1 << 20, Duration::ZERO), Duration::from_millis(100));
        t.wait(2 << 20, Duration::from_millis(100));
        assert_eq!(
            t.wait(1 << 20, Duration::from_millis(150)),
            Duration::from_millis(250)
        );
        assert_eq!(
            t.wait(0, Duration::from_secs(1)),
            Duration::ZERO,
            "behind: no wait"
        );
        assert_eq!(
            Throttle::new(0).wait(u64::MAX, Duration::ZERO),
            Duration::ZERO
        );
    }
}
