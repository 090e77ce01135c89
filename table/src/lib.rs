//! Topics as Iceberg tables: the leader of each partition of a topic with
//! `iceberg.mode` set turns its committed records into Parquet data files in the
//! bucket and commits them to the topic's table, in Iceberg's SQL catalog in the
//! metastore's database. Analytics engines then read the table straight from the
//! bucket, with no broker in the read path.
//!
//! - [`storage`]: Iceberg's file access over the broker's object store.
//! - [`catalog`]: the SQL catalog, the tables, each partition's progress and fencing.
//! - [`schema`]: the tables' schemas, hourly partitioning, records as rows.
//! - [`values`]: `value_schema` tables: JSON values as typed columns, new fields as new
//!   columns, and why a record does not fit.
//! - [`topic`]: a topic's tables (and its dead letters) as one commit sees them.
//! - [`append`]: one commit of some partitions' records; orphaned files.
//! - [`housekeeping`]: expiring old snapshots, `iceberg.retention.ms`, deleting the
//!   files nothing refers to.
//! - [`compaction`]: an hour's small files rewritten into larger ones.
//! - [`rewrite`]: removing data files from a table (which iceberg-rust has no action
//!   for), committed with the SQL catalog's compare-and-swap.

pub mod append;
pub mod catalog;
pub mod compaction;
pub mod housekeeping;
pub mod rewrite;
pub mod schema;
pub mod storage;
pub mod topic;
pub mod values;

#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use crate::storage::BucketStorage;

    /// A catalog in SQLite and a bucket in local files, both under `dir`.
    pub(crate) async fn local_catalog(
        dir: &std::path::Path,
    ) -> (crate::catalog::TableCatalog, BucketStorage) {
        std::fs::create_dir_all(dir.join("bucket")).unwrap();
        let store: shale_tiering::store::ObjectStoreRef = Arc::new(
            object_store::local::LocalFileSystem::new_with_prefix(dir.join("bucket")).unwrap(),
        );
        let storage = BucketStorage::new("file:///bucket", store);
        let db = format!("sqlite:{}?mode=rwc", dir.join("meta.db").display());
        let catalog = crate::catalog::open(&db, storage.clone()).await.unwrap();
        (catalog, storage)
    }
}
