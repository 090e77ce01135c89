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
//! - [`housekeeping`]: expiring old snapshots, deleting the files nothing refers to.

pub mod append;
pub mod catalog;
pub mod housekeeping;
pub mod schema;
pub mod storage;
pub mod topic;
pub mod values;
