//! Connecting to a cluster: endpoints and gRPC clients per broker, the cached metadata
//! (brokers, partition leaders), and running data calls against a partition's leader.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shale_proto::v1::admin_client::AdminClient;
use shale_proto::v1::data_client::DataClient;
use shale_proto::v1::*;
use shale_records::ErrorCode;
use tonic::transport::Endpoint;

use crate::error::broker_error;
use crate::security::{Chan, ClientSecurity};
use crate::{Client, ClusterView, Error, Result};

/// Largest gRPC message the client sends or accepts.
const MAX_MESSAGE_BYTES: usize = 256 * 1024 * 1024;

/// How long data calls keep retrying retriable errors. Default: 60 s.
const DEFAULT_RETRY_TIMEOUT: Duration = Duration::from_secs(60);

fn endpoint(address: &str, security: &ClientSecurity) -> Result<Endpoint> {
    let url = if address.contains("://") {
        // A URL's scheme must agree with the TLS settings: credentials meant for a TLS
        // connection never go out in the clear.
        if !address.starts_with(&format!("{}://", security.scheme())) {
            return Err(Error::Invalid(format!(
                "broker address '{address}': use {}:// (TLS is {})",
                security.scheme(),
                if security.tls.is_some() {
                    "set"
                } else {
                    "not set"
                }
            )));
        }
        address.to_string()
    } else {
        // `host:port`, `[v6]:port`; a bare host would silently mean port 80.
        let has_port = address
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
        if !has_port {
            return Err(Error::Invalid(format!(
                "broker address '{address}' has no port: give host:port, e.g. {address}:9093"
            )));
        }
        format!("{}://{address}", security.scheme())
    };
    let endpoint = Endpoint::from_shared(url)
        .map_err(|source| Error::Connect {
            address: address.to_string(),
            source,
        })?
        .connect_timeout(Duration::from_secs(5))
        .tcp_nodelay(true)
        .initial_stream_window_size(8 * 1024 * 1024)
        .initial_connection_window_size(32 * 1024 * 1024);
    security.apply(endpoint)
}

pub(crate) fn admin_client(channel: Chan) -> AdminClient<Chan> {
    AdminClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

pub(crate) fn data_client(channel: Chan) -> DataClient<Chan> {
    DataClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

impl Client {
    /// Connects to the first reachable broker of `bootstrap` (`host:port` or an
    /// `http://` URL, or several separated by commas).
    pub async fn connect(bootstrap: &str) -> Result<Self> {
        Self::connect_with(bootstrap, ClientSecurity::default()).await
    }

    /// Like [`Client::connect`], to listeners that use TLS or require credentials.
    pub async fn connect_with(bootstrap: &str, security: ClientSecurity) -> Result<Self> {
        let credentials = security.interceptor()?;
        let addresses: Vec<String> = bootstrap
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(String::from)
            .collect();
        let mut last = None;
        for address in &addresses {
            match endpoint(address, &security)?.connect().await {
                Ok(channel) => {
                    let channel = Chan::new(channel, credentials.clone());
                    let mut view = ClusterView::default();
                    view.channels.insert(address.clone(), channel.clone());
                    return Ok(Self {
                        admin: admin_client(channel.clone()),
                        bootstrap_channel: channel,
                        bootstrap: addresses.clone(),
                        view: Arc::new(Mutex::new(view)),
                        request_timeout: Duration::from_secs(30),
                        retry_timeout: DEFAULT_RETRY_TIMEOUT,
                        security: Arc::new(security.clone()),
                    });
                }
                Err(source) => {
                    last = Some(Error::Connect {
                        address: address.clone(),
                        source,
                    })
                }
            }
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no bootstrap address given".into())))
    }

    /// How long one data call may take before it counts as failed (and is retried).
    /// Default: 30 s.
    pub fn with_request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// How long data calls keep retrying retriable errors. Default: 60 s.
    pub fn with_retry_timeout(mut self, timeout: Duration) -> Self {
        self.retry_timeout = timeout;
        self
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    pub(crate) fn retry_timeout(&self) -> Duration {
        self.retry_timeout
    }

    /// A data client of the bootstrap broker (calls any broker can answer).
    pub(crate) fn data_any(&self) -> DataClient<Chan> {
        data_client(self.bootstrap_channel.clone())
    }

    pub(crate) fn retry_deadline(&self) -> Instant {
        Instant::now() + self.retry_timeout
    }

    pub(crate) fn view(&self) -> std::sync::MutexGuard<'_, ClusterView> {
        self.view.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A channel to `address` (connected lazily, reused).
    pub(crate) fn channel(&self, address: &str) -> Result<Chan> {
        if let Some(c) = self.view().channels.get(address) {
            return Ok(c.clone());
        }
        let channel = Chan::new(
            endpoint(address, &self.security)?.connect_lazy(),
            self.security.interceptor()?,
        );
        self.view()
            .channels
            .insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    /// Reads the metadata of `topic` (and the live brokers) from the first broker that
    /// answers: the bootstrap broker, else any known or bootstrap address.
    pub async fn refresh_metadata(&self, topic: &str) -> Result<MetadataResponse> {
        let req = MetadataRequest {
            topics: vec![topic.into()],
        };
        let mut candidates: Vec<Option<String>> = vec![None];
        candidates.extend(self.view().brokers.values().cloned().map(Some));
        candidates.extend(self.bootstrap.iter().cloned().map(Some));
        let mut last = None;
        for address in candidates {
            let mut admin = match &address {
                None => self.admin.clone(),
                Some(a) => admin_client(self.channel(a)?),
            };
            let mut request = tonic::Request::new(req.clone());
            request.set_timeout(Duration::from_secs(5));
            match admin.metadata(request).await {
                Ok(r) => {
                    let r = r.into_inner();
                    let mut view = self.view();
                    view.brokers = r
                        .brokers
                        .iter()
                        .map(|b| (b.broker_id, b.address.clone()))
                        .collect();
                    for t in &r.topics {
                        if t.error_code == ErrorCode::None as i32 {
                            view.partition_counts
                                .insert(t.name.clone(), t.partitions.len() as i32);
                            for p in &t.partitions {
                                view.leaders.insert((t.name.clone(), p.partition), p.leader);
                            }
                        }
                    }
                    return Ok(r);
                }
                Err(e) => last = Some(Error::Rpc(e)),
            }
        }
        Err(last.unwrap_or_else(|| Error::Invalid("no broker to ask for metadata".into())))
    }

    /// Forgets the cached leaders of `topic` (after a leader refused or vanished).
    pub(crate) fn invalidate(&self, topic: &str) {
        self.view().leaders.retain(|(t, _), _| t != topic);
    }

    /// The leader of a partition and a data client for it.
    pub(crate) async fn leader(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<(i32, DataClient<Chan>)> {
        let key = (topic.to_string(), partition);
        let cached = self.view().leaders.get(&key).copied();
        let leader = match cached {
            Some(l) => l,
            None => {
                self.refresh_metadata(topic).await?;
                let found = self.view().leaders.get(&key).copied();
                let count = self.view().partition_counts.get(topic).copied();
                match (found, count) {
                    (Some(l), _) => l,
                    (None, None) => {
                        return Err(broker_error(
                            ErrorCode::UnknownTopicOrPartition,
                            format!("topic '{topic}' does not exist"),
                        ));
                    }
                    // Another call dropped the topic's leaders between the refresh and
                    // here (after a failure of its own): retriable, as no leader is.
                    (None, Some(n)) if partition >= 0 && partition < n => {
                        return Err(broker_error(
                            ErrorCode::LeaderNotAvailable,
                            format!(
                                "partition {partition} of '{topic}' has no known leader right now"
                            ),
                        ));
                    }
                    (None, Some(n)) => {
                        return Err(broker_error(
                            ErrorCode::UnknownTopicOrPartition,
                            format!(
                                "partition {partition} of topic '{topic}' does not exist (it has {n})"
                            ),
                        ));
                    }
                }
            }
        };
        let address = self.view().brokers.get(&leader).cloned();
        let Some(address) = address.filter(|_| leader >= 0) else {
            self.invalidate(topic);
            return Err(broker_error(
                ErrorCode::LeaderNotAvailable,
                format!("partition {partition} of '{topic}' has no live leader right now"),
            ));
        };
        Ok((leader, data_client(self.channel(&address)?)))
    }

    /// Runs `call` against the partition's leader, refreshing metadata and retrying
    /// with backoff on retriable errors until the retry deadline.
    pub(crate) async fn with_leader<T, F, Fut>(
        &self,
        topic: &str,
        partition: i32,
        mut call: F,
    ) -> Result<T>
    where
        F: FnMut(DataClient<Chan>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let deadline = self.retry_deadline();
        let mut backoff = Duration::from_millis(50);
        loop {
            let r = match self.leader(topic, partition).await {
                Ok((_, data)) => call(data).await,
                Err(e) => Err(e),
            };
            match r {
                Err(e) if e.is_retriable() && Instant::now() + backoff < deadline => {
                    tracing::debug!(topic, partition, error = %e, "retrying");
                    self.invalidate(topic);
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(1));
                }
                other => return other,
            }
        }
    }
}
