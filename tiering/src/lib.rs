//! The object-store tier: opening the store ([`store`]), where a segment's objects live
//! ([`layout`]), copying sealed segments there ([`uploader`]), and reading them back
//! through a cache ([`reader`]).

pub mod credentials;
#[cfg(test)]
mod fixture;
pub use shale_records::failpoint;
pub mod layout;
pub mod reader;
pub mod store;
pub mod uploader;

pub use store::{ObjectStoreRef, S3Options, StoreError, open};
