//! Compaction of one partition's local log (see `shale_log`'s `clean` module for
//! what a cleaning does): every replica cleans its own log, up to its own high
//! watermark.

use shale_log::{Cleanable, CleanerSettings, StagedClean};

use super::Partition;
use crate::error::Result;

impl Partition {
    /// What a cleaning could take now (compacted topics; any topic answers).
    pub fn cleanable(&self, now_ms: i64) -> Cleanable {
        let lag = self.config().min_compaction_lag_ms;
        let hw = self.high_watermark();
        self.replica().log.cleanable(hw, now_ms, lag)
    }

    /// Prepares a cleaning of the dirty sealed segments below the high watermark
    /// under the partition's lock and runs it without it (`throttle` is told of every
    /// chunk read or written); `None`: nothing to clean. Install the result with
    /// [`Partition::install_clean`].
    pub fn run_clean(
        &self,
        settings: &CleanerSettings,
        now_ms: i64,
        throttle: &mut dyn FnMut(u64),
    ) -> Result<Option<StagedClean>> {
        let hw = self.high_watermark();
        let Some(job) = self.replica().log.prepare_clean(hw, now_ms, settings)? else {
            return Ok(None);
        };
        Ok(Some(job.run(settings, now_ms, throttle)?))
    }

    /// Swaps a cleaning's result in under the partition's lock. The caller holds the
    /// partition's `tier_lock`, so no upload reads a segment being swapped. Returns
    /// the groups installed.
    pub fn install_clean(&self, staged: StagedClean, now_ms: i64) -> Result<usize> {
        let stats = staged.stats;
        let installed = self.replica().log.install_clean(staged, now_ms)?;
        if installed > 0 {
            tracing::info!(topic = %self.topic, partition = self.index,
                read = stats.bytes_read, written = stats.bytes_written,
                removed = stats.records_removed, segments = installed, "partition cleaned");
        }
        Ok(installed)
    }
}
