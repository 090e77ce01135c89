//! The Shale broker's core: partition replicas (`partition`), the topic registry and
//! background work (`broker`, `registry`, `background`, `cleaner`), the cluster's I/O
//! (`cluster`, `controller`, `replication`; its rules are `shale-cluster`'s), tiering
//! orchestration (`tiering`) and the glue to the group coordinator (`groups`; the state
//! machine is `shale-coordinator`'s). Front ends call it through `shale-service`;
//! authentication and ACLs are `shale-security`'s. It knows no wire protocol: the gRPC,
//! Kafka and HTTP front ends and the `shale-broker` binary are crates of their own.

mod background;
pub mod broker;
mod cleaner;
pub mod clock;
pub mod cluster;
mod controller;
mod datadir;
mod delete_records;
pub mod error;
pub mod fetch;
mod fetchers;
pub mod find;
pub mod groups;
mod key_filters;
pub mod metrics;
mod partition;
pub mod produce;
pub mod read_limits;
mod read_replicas;
pub mod reassignments;
mod reconcile;
mod registry;
mod remote_io;
pub mod replication;
pub mod restore;
mod snapshots;
pub mod stats;
mod tables;
#[cfg(test)]
mod testing;
mod tier;
pub mod tiering;
pub mod topics;
mod transport;
pub mod txns;

pub use partition::{Appended, PartitionOffsets};
