//! The cluster's rules, apart from the code that reads and writes the metastore:
//! the replication protocol's decisions (`rules`: high watermark, ISR and ELR changes,
//! divergence, truncation, what a restarting broker gives up), the controller's
//! election and what it remembers between passes (`elections`), and this process's
//! standing in the cluster (`membership`: data-directory claim, incarnation, lease).
//! The broker calls these functions, and so does the exhaustive model check in
//! `model.rs`: a rule changed here is a rule checked. Reassignment and balancing
//! will decide here too.

pub mod elections;
pub mod membership;
#[cfg(test)]
mod model;
pub mod rules;
