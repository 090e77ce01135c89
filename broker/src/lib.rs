//! The Shale broker: partition logs on local disk (`log/`), one partition's state
//! (`partition.rs`), the topic registry and background work (`broker.rs`), the
//! produce / fetch / admin domain (`produce.rs`, `fetch.rs`, `topics.rs`), and the
//! gRPC adapters (`api/`).

pub mod api;
pub mod background;
pub mod broker;
pub mod clock;
pub mod cluster;
pub mod config;
pub mod controller;
mod datadir;
pub mod error;
pub mod fetch;
pub mod groups;
pub mod metrics;
pub mod partition;
pub mod produce;
mod registry;
pub mod replication;
pub mod stats;
#[cfg(test)]
mod testing;
pub mod tiering;
pub mod topic_config;
pub mod topics;
