//! The Shale broker's core: partition replicas (`partition`), the topic registry and
//! background work (`broker`, `registry`, `background`, `cleaner`), the cluster (`cluster`,
//! `controller`, `replication`), tiering glue (`tiering`), consumer groups (`groups`),
//! and [`service::Service`], the one seam every front end calls. It knows no wire
//! protocol: the gRPC and Kafka front ends and the `shale-broker` binary are crates of
//! their own.

pub mod background;
pub mod broker;
pub mod cleaner;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod coordinator;
mod datadir;
pub mod delete_records;
mod elections;
pub mod error;
pub mod fetch;
pub mod find;
pub mod groups;
mod membership;
pub mod metrics;
pub mod partition;
pub mod produce;
mod producer_ids;
pub mod quota;
mod registry;
pub mod remote_io;
pub mod replication;
mod rules;
pub mod security;
pub mod service;
pub mod stats;
#[cfg(test)]
mod testing;
pub mod tiering;
pub mod topic_config;
pub mod topics;
pub mod transport;
