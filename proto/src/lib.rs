//! Shale's gRPC protocol: the messages and services generated from
//! `proto/shale.proto`. Error codes in messages are Kafka's numbers
//! ([`shale_records::ErrorCode`]); record batches are Kafka RecordBatch v2 bytes
//! ([`shale_records::batch`]).

/// Generated gRPC types of package `shale.v1`.
pub mod v1 {
    tonic::include_proto!("shale.v1");
}
