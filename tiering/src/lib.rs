//! The object-store tier: opening the store ([`store`]), where a segment's objects live
//! ([`layout`]), copying sealed segments there ([`uploader`]), reading them back
//! through a cache ([`reader`]), the cluster's snapshots kept beside them
//! ([`snapshot`]), and a bucket read back without the metastore ([`bucket`]).

pub mod bucket;
pub mod credentials;
#[cfg(test)]
mod fixture;
pub use shale_records::failpoint;
pub mod layout;
pub mod reader;
pub mod routes;
pub mod snapshot;
pub mod store;
pub mod uploader;

pub use store::{ObjectStoreRef, S3Options, StoreError, open};
