//! The cluster's decisions. As pure functions: the replication protocol's (`rules`:
//! high watermark, ISR and ELR changes, divergence, truncation, what a restarting
//! broker gives up) and the controller's election (`elections`); the broker calls
//! them, and so does the exhaustive model check in `model.rs`, so a rule changed here
//! is a rule checked. Over the metastore: the controller, which writes the elections'
//! decisions (`controller`). And this process's standing in the cluster
//! (`membership`: data-directory claim, incarnation, lease). Partition reassignment
//! (`reassignment`), whose finishing step the controller takes, the balancer's
//! plan of moves (`balancer`), and racks: where new replicas go and which replica a
//! consumer reads from (`placement`).

pub mod balancer;
pub mod controller;
pub mod elections;
pub mod membership;
#[cfg(test)]
mod model;
pub mod placement;
pub mod reassignment;
pub mod rules;
