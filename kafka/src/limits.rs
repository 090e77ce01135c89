//! A Kafka listener's limits.

use shale_config::ListenerConfig;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Largest request frame (Kafka's `socket.request.max.bytes`); a larger one
    /// closes the connection.
    pub max_request_bytes: usize,
    /// Requests handled at once on one connection; more wait in the socket.
    pub max_inflight_requests: usize,
    /// Open connections on the listener; more are closed at once.
    pub max_connections: usize,
    /// Records from local segment files go to plaintext sockets with `sendfile(2)`.
    pub sendfile: bool,
}

impl From<&ListenerConfig> for Limits {
    fn from(l: &ListenerConfig) -> Self {
        Self {
            max_request_bytes: l.max_request_bytes,
            max_inflight_requests: l.max_inflight_requests,
            max_connections: l.max_connections,
            sendfile: l.sendfile,
        }
    }
}
