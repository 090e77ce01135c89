//! What the uploader's and the reader's unit tests share: a real SQLite metastore
//! with one topic, a real local-file object store behind the test kit's
//! fault-injecting [`HookedStore`], and sealed segments written to disk.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use shale_metastore::{Metastore, NewTopic};
use shale_records::batch::set_base_offset;
use shale_records::record::{BatchBuilder, Record};
pub(crate) use shale_testkit::faults::{HookedStore, StoreOp};

use crate::uploader::{PartitionRef, SealedSegment, Uploader, UploaderConfig};

pub(crate) struct Fixture {
    pub dir: tempfile::TempDir,
    pub metastore: Arc<dyn Metastore>,
    pub store: Arc<HookedStore>,
    pub partition: PartitionRef,
}

impl Fixture {
    pub(crate) async fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}/metastore.db", dir.path().display());
        let metastore = shale_metastore::open(&url).await.unwrap();
        let topic = metastore
            .create_topic(NewTopic {
                name: "logs".into(),
                partitions: 1,
                replication_factor: 1,
                configs: BTreeMap::new(),
                assignments: vec![vec![0]],
            })
            .await
            .unwrap();
        let objects = dir.path().join("objects");
        let local = crate::open(
            &format!("file://{}", objects.display()),
            &Default::default(),
        )
        .await
        .unwrap();
        Self {
            metastore,
            store: HookedStore::new(local),
            partition: PartitionRef {
                topic: "logs".into(),
                topic_id: topic.id,
                partition: 0,
            },
            dir,
        }
    }

    pub(crate) fn uploader(&self, config: UploaderConfig) -> Uploader {
        Uploader::new(self.store.clone(), self.metastore.clone(), config)
    }

    /// A sealed segment of `batches` batches of 10 records each (values `v{offset}`,
    /// timestamps `1000 + offset`) from `base`, written under the fixture's directory
    /// with an empty offset index (readers then scan from the segment's start).
    pub(crate) fn segment(&self, base: i64, batches: i64) -> SealedSegment {
        let mut log = Vec::new();
        for b in 0..batches {
            let first = base + 10 * b;
            let mut builder = BatchBuilder::new(1000 + first);
            for o in first..first + 10 {
                let value = format!("v{o}");
                builder.push(Record::new(None, Some(value.as_bytes()), 1000 + o));
            }
            let mut batch = builder.build().to_vec();
            set_base_offset(&mut batch, first);
            log.extend_from_slice(&batch);
        }
        let dir = self.dir.path().join(format!("segment-{base}"));
        std::fs::create_dir_all(&dir).unwrap();
        let (log_path, index_path, time_index_path) =
            (dir.join("log"), dir.join("index"), dir.join("timeindex"));
        std::fs::write(&log_path, &log).unwrap();
        std::fs::write(&index_path, []).unwrap();
        std::fs::write(&time_index_path, []).unwrap();
        let end_offset = base + 10 * batches - 1;
        SealedSegment {
            base_offset: base,
            end_offset,
            max_timestamp: 1000 + end_offset,
            leader_epoch: 0,
            size_bytes: log.len() as u64,
            log_path,
            index_path,
            time_index_path,
            key_filter: None,
            epochs: vec![(0, base)],
            replaces: Vec::new(),
            aborted: Vec::new(),
            producer_snapshot: None,
        }
    }
}

/// The values of every record in `batches`.
pub(crate) fn values(batches: &Bytes) -> Vec<String> {
    let mut out = Vec::new();
    for item in shale_records::batch::BatchIter::new(batches) {
        let (_, range) = item.unwrap();
        for r in shale_records::record::decode_records(&batches.slice(range)).unwrap() {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    out
}
