//! Key filters of sealed local segments (the `.keys` file beside each, which key
//! lookups consult to skip segments): a background pass builds those that are missing.

use crate::broker::Broker;
use crate::error::Result;

impl Broker {
    /// Builds the key filters of sealed segments that have none yet (at most `budget`
    /// segments a pass, so a broker with many old segments catches up gradually).
    pub(crate) async fn key_filter_pass(&self, mut budget: usize) -> Result<()> {
        use std::sync::atomic::Ordering;
        for p in self.all_partitions() {
            let through = p.key_filters_through.load(Ordering::Relaxed);
            if !p.has_sealed_after(through) {
                continue;
            }
            let mut segs = p.sealed_segments_after(through);
            let generation = segs.first().map_or(0, |s| s.generation);
            if generation != p.key_filters_generation.swap(generation, Ordering::Relaxed) {
                // The log was truncated since: segments below `through` may be new.
                segs = p.sealed_segments_after(-1);
            }
            for seg in segs {
                if budget == 0 || self.cancel.is_cancelled() {
                    return Ok(());
                }
                let end = seg.end_offset;
                let part = p.clone();
                let built = tokio::task::spawn_blocking(move || {
                    if shale_log::has_key_filter(&seg) {
                        return Ok(false);
                    }
                    part.key_filter(&seg).map(|_| true)
                })
                .await?;
                match built {
                    Ok(true) => budget -= 1,
                    Ok(false) => {}
                    // Deleted by retention meanwhile, or unreadable: nothing to filter.
                    Err(e) => tracing::debug!(topic = %p.topic, partition = p.index,
                        error = %e, "cannot build a key filter"),
                }
                p.key_filters_through.store(end, Ordering::Relaxed);
            }
        }
        Ok(())
    }
}
