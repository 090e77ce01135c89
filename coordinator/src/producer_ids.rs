//! Ids for idempotent producers (InitProducerId): unique in the cluster, taken from the
//! metastore a block at a time and handed out from memory.

use std::sync::{Arc, Mutex};

use shale_metastore::Metastore;

/// Producer ids a broker takes from the metastore at a time.
const BLOCK: i64 = 1000;

pub struct ProducerIds {
    metastore: Arc<dyn Metastore>,
    /// Taken and not yet handed out: [next, end).
    block: Mutex<(i64, i64)>,
}

impl std::fmt::Debug for ProducerIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerIds")
            .field("block", &self.block)
            .finish_non_exhaustive()
    }
}

impl ProducerIds {
    pub fn new(metastore: Arc<dyn Metastore>) -> Self {
        Self {
            metastore,
            block: Mutex::new((0, 0)),
        }
    }

    fn take(&self) -> std::sync::MutexGuard<'_, (i64, i64)> {
        self.block.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new idempotent producer's id and epoch 0.
    pub async fn init_producer_id(&self) -> shale_metastore::Result<(i64, i16)> {
        loop {
            {
                let mut ids = self.take();
                if ids.0 < ids.1 {
                    ids.0 += 1;
                    return Ok((ids.0 - 1, 0));
                }
            }
            let first = self.metastore.allocate_producer_ids(BLOCK).await?;
            let mut ids = self.take();
            if ids.0 >= ids.1 {
                *ids = (first, first + BLOCK);
            }
        }
    }
}
