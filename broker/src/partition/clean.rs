//! Compaction of one partition's local log (see `shale_log`'s `clean` module for
//! what a cleaning does): every replica cleans its own log, up to its own high
//! watermark.

use shale_log::{CleanStats, Cleanable, CleanerSettings};

use super::Partition;
use crate::error::Result;

impl Partition {
    /// What a cleaning could take now (compacted topics; any topic answers).
    pub fn cleanable(&self, now_ms: i64) -> Cleanable {
        let lag = self.config().min_compaction_lag_ms;
        let hw = self.high_watermark();
        self.replica().log.cleanable(hw, now_ms, lag)
    }

    /// Cleans the dirty sealed segments below the high watermark, if any: prepares
    /// under the partition's lock, rewrites without it (`throttle` is told of every
    /// chunk read or written), and swaps the result in under the lock again. The
    /// caller holds the partition's `tier_lock`, so no upload reads a segment being
    /// swapped. `None`: nothing to clean.
    pub fn clean(
        &self,
        settings: &CleanerSettings,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<Option<(CleanStats, usize)>> {
        let hw = self.high_watermark();
        let Some(job) = self.replica().log.prepare_clean(hw, now_ms, settings)? else {
            return Ok(None);
        };
        let staged = job.run(settings, now_ms, throttle)?;
        let stats = staged.stats;
        let installed = self.replica().log.install_clean(staged, now_ms)?;
        if installed > 0 {
            tracing::info!(topic = %self.topic, partition = self.index,
                read = stats.bytes_read, written = stats.bytes_written,
                removed = stats.records_removed, segments = installed, "partition cleaned");
        }
        Ok(Some((stats, installed)))
    }
}
