//! Shale's wire formats: the gRPC messages and services generated from
//! `proto/shale.proto`, and the Kafka RecordBatch v2 codec that broker and client share.

pub mod batch;
pub mod compression;
pub mod record;

/// Generated gRPC types of package `shale.v1`.
pub mod v1 {
    tonic::include_proto!("shale.v1");
}

pub use v1::ErrorCode;
