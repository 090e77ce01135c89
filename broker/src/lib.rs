//! The Shale broker's core: partition replicas (`partition`), the topic registry and
//! background work (`broker`, `registry`, `background`, `cleaner`), the cluster's I/O
//! (`cluster`, `controller`, `replication`; its rules are `shale-cluster`'s), tiering
//! orchestration (`tiering`), the glue to the group coordinator (`groups`; the state
//! machine is `shale-coordinator`'s), and [`service::Service`], the one seam every
//! front end calls. Authentication and ACLs are `shale-security`'s. It knows no wire
//! protocol: the gRPC, Kafka and HTTP front ends and the `shale-broker` binary are
//! crates of their own.

pub mod background;
pub mod broker;
pub mod cleaner;
pub mod clock;
pub mod cluster;
pub mod controller;
mod datadir;
pub mod delete_records;
pub mod error;
pub mod fetch;
mod fetchers;
pub mod find;
pub mod groups;
mod key_filters;
pub mod metrics;
pub mod partition;
pub mod produce;
pub mod quota;
mod reconcile;
mod registry;
pub mod remote_io;
pub mod replication;
pub mod service;
pub mod stats;
#[cfg(test)]
mod testing;
mod tier;
pub mod tiering;
pub mod topics;
pub mod transport;
