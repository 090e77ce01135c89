//! The Shale broker: partition logs on local disk, the metastore for truth about
//! topics, and gRPC adapters in `api/`.

pub mod log;
