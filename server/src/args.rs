//! The command line: every flag also reads a `SHALE_*` variable, and overrides the
//! configuration file.

use std::path::PathBuf;

use shale_config::Overrides;

#[derive(Debug, Default, clap::Parser)]
#[command(
    name = "shale-broker",
    version,
    about = "Shale: a Kafka-style log broker with tiered storage"
)]
pub struct Args {
    /// TOML configuration file.
    #[arg(long, env = "SHALE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Directory for partition logs (and the embedded metastore and object store).
    #[arg(long, env = "SHALE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Listen address of the gRPC listener (`[listeners.grpc] listen`).
    #[arg(long, env = "SHALE_LISTEN")]
    pub listen: Option<String>,
    /// Listen address of the Kafka listener (`[listeners.kafka] listen`).
    #[arg(long, env = "SHALE_KAFKA_LISTEN")]
    pub kafka_listen: Option<String>,
    /// What the gRPC listener tells clients and other brokers to connect to
    /// (`[cluster] advertised_address`). Default: its listen address.
    #[arg(long, env = "SHALE_ADVERTISED")]
    pub advertised: Option<String>,
    /// What the Kafka listener tells clients to connect to (`[listeners.kafka]
    /// advertised`). Default: its listen address.
    #[arg(long, env = "SHALE_KAFKA_ADVERTISED")]
    pub kafka_advertised: Option<String>,
    /// postgres://… or sqlite://…
    #[arg(long, env = "SHALE_METASTORE_URL")]
    pub metastore_url: Option<String>,
    /// file://…, memory:// (s3:// with tiered storage).
    #[arg(long, env = "SHALE_OBJECT_STORE_URL")]
    pub object_store_url: Option<String>,
    /// This broker's id.
    #[arg(long, env = "SHALE_BROKER_ID")]
    pub broker_id: Option<i32>,
    /// Serve the console, the HTTP API and Prometheus metrics (/metrics) at ADDR
    /// (the `http` listener; on 127.0.0.1:9644 by default when no listener is
    /// configured).
    #[arg(long, env = "SHALE_HTTP_LISTEN", alias = "metrics-listen")]
    pub http_listen: Option<String>,
}

impl From<Args> for Overrides {
    fn from(a: Args) -> Self {
        Overrides {
            config: a.config,
            data_dir: a.data_dir,
            listen: a.listen,
            kafka_listen: a.kafka_listen,
            advertised: a.advertised,
            kafka_advertised: a.kafka_advertised,
            metastore_url: a.metastore_url,
            object_store_url: a.object_store_url,
            broker_id: a.broker_id,
            http_listen: a.http_listen,
        }
    }
}
