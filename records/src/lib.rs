//! Kafka's formats that every part of Shale shares and none of them owns: RecordBatch
//! v2 (`batch`: the header the broker reads, `record`: the records clients build and
//! decode, `compression`: gzip, snappy, lz4 and zstd as Kafka's clients frame them,
//! `compact`: what the log cleaner does to one batch, `control`: transaction markers), Kafka's consumer protocol
//! (`consumer_protocol`: group members' subscriptions and assignments), and [`ErrorCode`], Kafka's
//! error codes with one answer to "may a retry help?". Also `failpoint`, the crash
//! tests' abort points, which every crate that writes durable state shares.
//! Nothing here knows a wire protocol or a transport.

pub mod batch;
pub mod compact;
pub mod compression;
pub mod consumer_protocol;
pub mod control;
mod error_code;
pub mod failpoint;
#[cfg(test)]
mod fuzz_tests;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod keyfilter;
pub mod legacy;
pub mod record;

pub use error_code::ErrorCode;
