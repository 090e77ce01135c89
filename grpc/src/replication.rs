//! gRPC transport of replication: the leader's `Replication` service, and the
//! follower's connector (one bidirectional stream per leader).

use std::pin::Pin;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{Stream, StreamExt};
use shale_broker::replication::{self as domain, ReplicaConnector, ReplicaLink, TransportError};
use shale_proto::v1::replication_client::ReplicationClient;
use shale_proto::v1::replication_server::Replication;
use shale_proto::v1::*;
use shale_records::ErrorCode;
use shale_security::listener::InterBrokerClient;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};
use tonic::{Request, Response, Status, Streaming};

use super::security::{AUTHORIZATION, basic_credentials};
use super::{Front, MAX_MESSAGE_BYTES};

type AnswerStream = Pin<Box<dyn Stream<Item = Result<ReplicaFetchResponse, Status>> + Send>>;

#[tonic::async_trait]
impl Replication for Front {
    type ReplicaFetchStream = AnswerStream;

    async fn replica_fetch(
        &self,
        request: Request<Streaming<ReplicaFetchRequest>>,
    ) -> Result<Response<Self::ReplicaFetchStream>, Status> {
        let ctx = self.context(&request)?;
        // A request that does not decode ends the stream (the follower reconnects).
        let requests = tokio_stream::StreamExt::map_while(request.into_inner(), |r| r.ok())
            .map(decode_request);
        let answers = self
            .service
            .replica_fetch_stream(ctx, requests)
            .map(|a| Ok(encode_response(a)));
        Ok(Response::new(Box::pin(answers)))
    }

    async fn write_txn_markers(
        &self,
        request: Request<WriteTxnMarkersRequest>,
    ) -> Result<Response<WriteTxnMarkersResponse>, Status> {
        let ctx = self.context(&request)?;
        let markers = super::markers::decode_request(request.into_inner());
        let results = self.service.write_txn_markers(&ctx, markers).await;
        Ok(Response::new(super::markers::encode_response(results)))
    }
}

/// A topic id that does not parse becomes the nil id: no topic has it, so the
/// partition is answered `UNKNOWN_TOPIC_OR_PARTITION`.
pub(crate) fn topic_id(s: &str) -> uuid::Uuid {
    s.parse().unwrap_or_default()
}

fn decode_request(r: ReplicaFetchRequest) -> domain::ReplicaFetchRequest {
    domain::ReplicaFetchRequest {
        replica_id: r.replica_id,
        replica_epoch: r.replica_epoch,
        max_wait_ms: r.max_wait_ms,
        max_bytes: r.max_bytes,
        partitions: r
            .partitions
            .into_iter()
            .map(|p| domain::ReplicaFetchPartition {
                topic_id: topic_id(&p.topic_id),
                partition: p.partition,
                current_leader_epoch: p.current_leader_epoch,
                fetch_offset: p.fetch_offset,
                last_fetched_epoch: p.last_fetched_epoch,
                partition_max_bytes: p.partition_max_bytes,
                state_version: p.state_version,
                log_start_offset: p.log_start_offset,
            })
            .collect(),
    }
}

fn encode_request(r: domain::ReplicaFetchRequest) -> ReplicaFetchRequest {
    ReplicaFetchRequest {
        replica_id: r.replica_id,
        replica_epoch: r.replica_epoch,
        max_wait_ms: r.max_wait_ms,
        max_bytes: r.max_bytes,
        partitions: r
            .partitions
            .into_iter()
            .map(|p| ReplicaFetchPartition {
                topic_id: p.topic_id.to_string(),
                partition: p.partition,
                current_leader_epoch: p.current_leader_epoch,
                fetch_offset: p.fetch_offset,
                last_fetched_epoch: p.last_fetched_epoch,
                partition_max_bytes: p.partition_max_bytes,
                state_version: p.state_version,
                log_start_offset: p.log_start_offset,
            })
            .collect(),
    }
}

fn encode_response(a: domain::ReplicaFetchResponse) -> ReplicaFetchResponse {
    ReplicaFetchResponse {
        partitions: a
            .partitions
            .into_iter()
            .map(|p| ReplicaFetchPartitionResult {
                topic_id: p.topic_id.to_string(),
                partition: p.partition,
                error_code: p.error_code as i32,
                error_message: p.error_message,
                high_watermark: p.high_watermark,
                local_log_start_offset: p.local_log_start_offset,
                diverging_epoch: p.diverging.map_or(-1, |d| d.0),
                diverging_end_offset: p.diverging.map_or(-1, |d| d.1),
                records: p.records,
            })
            .collect(),
    }
}

fn decode_response(a: ReplicaFetchResponse) -> domain::ReplicaFetchResponse {
    domain::ReplicaFetchResponse {
        partitions: a
            .partitions
            .into_iter()
            .map(|p| domain::ReplicaPartitionData {
                topic_id: topic_id(&p.topic_id),
                partition: p.partition,
                error_code: ErrorCode::try_from(p.error_code)
                    .unwrap_or(ErrorCode::UnknownServerError),
                error_message: p.error_message,
                high_watermark: p.high_watermark,
                local_log_start_offset: p.local_log_start_offset,
                diverging: (p.diverging_end_offset >= 0)
                    .then_some((p.diverging_epoch, p.diverging_end_offset)),
                records: p.records,
            })
            .collect(),
    }
}

/// Connects followers to leaders over gRPC, with the inter-broker listener's
/// security: TLS (the files are read at each connection, so renewed ones are used
/// without a restart) and the broker's credentials on every call.
#[derive(Default)]
pub struct GrpcReplicaConnector {
    settings: InterBrokerClient,
    /// Channels for unary calls (markers), by address: one connection per broker.
    channels: std::sync::Mutex<std::collections::HashMap<String, tonic::transport::Channel>>,
}

impl GrpcReplicaConnector {
    pub fn new(settings: InterBrokerClient) -> Self {
        Self {
            settings,
            channels: Default::default(),
        }
    }

    /// The call with the broker's credentials, if it has any.
    fn authorized<T>(&self, message: T) -> Result<Request<T>, TransportError> {
        let mut call = Request::new(message);
        if let Some((user, password)) = &self.settings.credentials {
            let value = basic_credentials(user, password.expose());
            call.metadata_mut().insert(
                AUTHORIZATION,
                value.parse().map_err(
                    |_| "the inter-broker user or password is not valid in gRPC metadata",
                )?,
            );
        }
        Ok(call)
    }

    fn endpoint(&self, address: &str) -> Result<Endpoint, TransportError> {
        let scheme = if self.settings.tls.is_some() {
            "https"
        } else {
            "http"
        };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .initial_stream_window_size(8 * 1024 * 1024)
            .initial_connection_window_size(32 * 1024 * 1024);
        if let Some(tls) = &self.settings.tls {
            let read = |p: &std::path::Path| {
                std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
            };
            let mut config =
                ClientTlsConfig::new().ca_certificate(Certificate::from_pem(read(&tls.ca)?));
            if let Some((cert, key)) = &tls.identity {
                config = config.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            endpoint = endpoint.tls_config(config)?;
        }
        Ok(endpoint)
    }
}

impl ReplicaConnector for GrpcReplicaConnector {
    fn connect<'a>(
        &'a self,
        address: &'a str,
    ) -> BoxFuture<'a, Result<Box<dyn ReplicaLink>, TransportError>> {
        Box::pin(async move {
            let channel = self.endpoint(address)?.connect().await?;
            let mut client = ReplicationClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES);
            let (requests, rx) = mpsc::channel(1);
            let call = self.authorized(ReceiverStream::new(rx))?;
            let answers = client.replica_fetch(call).await?.into_inner();
            Ok(Box::new(GrpcLink { requests, answers }) as Box<dyn ReplicaLink>)
        })
    }

    fn write_markers<'a>(
        &'a self,
        address: &'a str,
        markers: domain::TxnMarkers,
    ) -> BoxFuture<'a, Result<Vec<domain::MarkerResult>, TransportError>> {
        Box::pin(async move {
            let cached = self
                .channels
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(address)
                .cloned();
            let channel = match cached {
                Some(c) => c,
                None => {
                    let c = self.endpoint(address)?.connect().await?;
                    (self.channels.lock().unwrap_or_else(|e| e.into_inner()))
                        .insert(address.to_string(), c.clone());
                    c
                }
            };
            let mut client = ReplicationClient::new(channel);
            let call = self.authorized(super::markers::encode_request(markers))?;
            match client.write_txn_markers(call).await {
                Ok(r) => Ok(super::markers::decode_response(r.into_inner())),
                Err(e) => {
                    // A broken connection is made again at the next call.
                    self.channels
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .remove(address);
                    Err(e.into())
                }
            }
        })
    }
}

/// One open `ReplicaFetch` stream.
struct GrpcLink {
    requests: mpsc::Sender<ReplicaFetchRequest>,
    answers: Streaming<ReplicaFetchResponse>,
}

impl ReplicaLink for GrpcLink {
    fn fetch(
        &mut self,
        request: domain::ReplicaFetchRequest,
    ) -> BoxFuture<'_, Result<domain::ReplicaFetchResponse, TransportError>> {
        Box::pin(async move {
            self.requests
                .send(encode_request(request))
                .await
                .map_err(|_| "the replica fetch stream is closed")?;
            let answer = self
                .answers
                .message()
                .await?
                .ok_or("the leader closed the replica fetch stream")?;
            Ok(decode_response(answer))
        })
    }
}
