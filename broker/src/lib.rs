//! The Shale broker's core: partition replicas (`partition`), the topic registry and
//! background work (`broker`, `registry`, `background`, `cleaner`), the cluster's I/O
//! (`cluster`, `controller`, `replication`; its rules are `shale-cluster`'s), tiering
//! orchestration (`tiering`), the glue to the group coordinator (`groups`; the state
//! machine is `shale-coordinator`'s), and [`service::Service`], the one seam every
//! front end calls. Authentication and ACLs are `shale-security`'s. It knows no wire
//! protocol: the gRPC, Kafka and HTTP front ends and the `shale-broker` binary are
//! crates of their own.

mod background;
pub mod broker;
mod cleaner;
mod clock;
mod cluster;
mod controller;
mod datadir;
mod delete_records;
pub mod error;
pub mod fetch;
mod fetchers;
pub mod find;
pub mod groups;
mod key_filters;
mod metrics;
mod partition;
pub mod produce;
mod quota;
mod read_limits;
pub mod reassignments;
mod reconcile;
mod registry;
mod remote_io;
pub mod replication;
pub mod service;
mod stats;
#[cfg(test)]
mod testing;
mod tier;
pub mod tiering;
mod topics;
mod transport;
