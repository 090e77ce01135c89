//! The object-store tier: opening the store ([`store`]), where a segment's objects live
//! ([`layout`]), and copying sealed segments there ([`uploader`]).

pub mod failpoint;
pub mod layout;
pub mod store;
pub mod uploader;

pub use store::{ObjectStoreRef, S3Options, StoreError, open};
