//! A connection's authentication on a SASL listener: SaslHandshake (v0: the tokens
//! then travel as bare length-prefixed frames; v1: inside SaslAuthenticate), the
//! mechanism's exchange, and the session's lifetime (KIP-368).
//!
//! Until the client has authenticated, only ApiVersions, SaslHandshake and
//! SaslAuthenticate are served, and frames are limited to 512 KiB (Kafka's
//! `sasl.server.max.receive.size`); anything else closes the connection, as Kafka
//! does. A failed exchange is answered SASL_AUTHENTICATION_FAILED after a short delay
//! (Kafka's `connection.failed.authentication.delay.ms`), then the connection closes.
//! Once the session expires, the client must authenticate again (SaslHandshake v1 and
//! SaslAuthenticate on the same connection, as the same principal) before its next
//! request; any other request closes the connection.
//!
//! Every failed attempt is logged under the `audit` target with the client's address,
//! the mechanism and the user it claimed, never a password.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, RequestKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use shale_records::ErrorCode;
use shale_security::{SaslError, SaslExchange, SaslMechanism, SaslStep, Users};

use crate::frame::{self, Request};
use crate::handlers::Reply;

/// Largest frame an unauthenticated client may send.
pub const MAX_UNAUTHENTICATED_FRAME: usize = 512 * 1024;
/// How long a client on a SASL listener has to authenticate after connecting.
pub const AUTHENTICATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a failed authentication waits before its answer.
const FAILURE_DELAY: Duration = Duration::from_millis(100);

/// A listener's SASL settings.
#[derive(Debug, Clone)]
pub struct SaslConfig {
    pub mechanisms: Vec<SaslMechanism>,
    /// 0: a session lasts as long as its connection.
    pub max_reauth_ms: u64,
}

enum Stage {
    /// Waiting for a SaslHandshake (first, or to re-authenticate).
    Handshake,
    /// The handshake chose a mechanism; `raw`: v0, tokens come as bare frames.
    Exchange { exchange: SaslExchange, raw: bool },
    /// An exchange failed: the connection is closing.
    Failed,
}

/// One connection's authentication state.
pub struct Session {
    config: Option<SaslConfig>,
    stage: Stage,
    /// Who the client is: from SASL, else from its TLS certificate.
    principal: Option<String>,
    authenticated: bool,
    /// The mechanism the client authenticated with: re-authentication keeps it.
    mechanism: Option<SaslMechanism>,
    expires: Option<Instant>,
    peer: SocketAddr,
    listener: std::sync::Arc<str>,
}

impl Session {
    /// `config`: the listener's SASL settings (`None`: not a SASL listener);
    /// `principal`: the client certificate's, if any.
    pub fn new(
        config: Option<SaslConfig>,
        principal: Option<String>,
        peer: SocketAddr,
        listener: std::sync::Arc<str>,
    ) -> Self {
        Self {
            authenticated: config.is_none(),
            config,
            stage: Stage::Handshake,
            principal,
            mechanism: None,
            expires: None,
            peer,
            listener,
        }
    }

    /// Whether the client has yet to authenticate (it is then closed after
    /// [`AUTHENTICATION_TIMEOUT`]).
    pub fn unauthenticated(&self) -> bool {
        !self.authenticated
    }

    pub fn principal(&self) -> Option<&str> {
        self.principal.as_deref()
    }

    /// The largest frame the client may send now.
    pub fn max_frame(&self, limit: usize) -> usize {
        if self.authenticated {
            limit
        } else {
            limit.min(MAX_UNAUTHENTICATED_FRAME)
        }
    }

    /// Whether the next frame is a bare SASL token (after a v0 handshake).
    pub fn expects_raw_token(&self) -> bool {
        matches!(self.stage, Stage::Exchange { raw: true, .. })
    }

    /// Whether this request is part of authentication (handled by [`Self::handle`]).
    pub fn is_sasl(api: ApiKey) -> bool {
        matches!(api, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
    }

    /// Why a request may not be served now (the connection then closes).
    pub fn refuses(&self, api: ApiKey) -> Option<&'static str> {
        if api == ApiKey::ApiVersions {
            return None;
        }
        if matches!(self.stage, Stage::Failed) {
            return Some("authentication failed");
        }
        if !self.authenticated {
            return Some("the client has not authenticated");
        }
        if self.expires.is_some_and(|t| Instant::now() >= t) {
            return Some("the SASL session expired and the client did not re-authenticate");
        }
        None
    }

    /// Answers a SaslHandshake or SaslAuthenticate request; a reply of `Close`
    /// follows the answer when the connection must end.
    pub async fn handle(&mut self, users: &Users, req: Request) -> Vec<Reply> {
        let (api, version, id) = (req.api, req.version, req.correlation_id);
        match *req.body {
            RequestKind::SaslHandshake(r) => self.handshake(version, id, r.mechanism.as_str()),
            RequestKind::SaslAuthenticate(r) => {
                let (token, close) = self.token(users, &r.auth_bytes, api, version).await;
                let mut body = SaslAuthenticateResponse::default();
                match token {
                    Ok(bytes) => {
                        body.auth_bytes = Bytes::from(bytes);
                        if self.authenticated && !self.in_exchange() {
                            body.session_lifetime_ms = self.lifetime_ms();
                        }
                    }
                    Err((code, message)) => {
                        body.error_code = code as i16;
                        body.error_message = Some(StrBytes::from_string(message));
                    }
                }
                let mut out = vec![encoded(frame::encode(api, version, id, &body))];
                if close {
                    out.push(Reply::Close);
                }
                out
            }
            _ => vec![Reply::Close],
        }
    }

    /// A bare token after a v0 handshake: its answer as a bare frame (empty after
    /// PLAIN), or the end of the connection on failure (v0 carries no error).
    pub async fn raw_token(&mut self, users: &Users, token: Bytes) -> Vec<Reply> {
        match self.token(users, &token, ApiKey::SaslHandshake, 0).await {
            (Ok(bytes), false) => {
                let mut out = BytesMut::with_capacity(4 + bytes.len());
                out.put_i32(bytes.len() as i32);
                out.put_slice(&bytes);
                vec![Reply::Send(out.freeze())]
            }
            _ => vec![Reply::Close],
        }
    }

    fn in_exchange(&self) -> bool {
        matches!(self.stage, Stage::Exchange { .. })
    }

    fn lifetime_ms(&self) -> i64 {
        self.expires.map_or(0, |t| {
            t.saturating_duration_since(Instant::now()).as_millis() as i64
        })
    }

    fn handshake(&mut self, version: i16, id: i32, mechanism: &str) -> Vec<Reply> {
        let mut body = SaslHandshakeResponse::default();
        let mut close = false;
        match &self.config {
            None => body.error_code = ErrorCode::IllegalSaslState as i16,
            Some(config) => {
                body.mechanisms = config
                    .mechanisms
                    .iter()
                    .map(|m| StrBytes::from_static_str(m.name()))
                    .collect();
                let chosen =
                    SaslMechanism::from_name(mechanism).filter(|m| config.mechanisms.contains(m));
                // Re-authentication goes through SaslAuthenticate (v1 handshakes), with
                // the mechanism first used, as Kafka requires.
                let reauth_v0 = self.authenticated && version == 0;
                let other_mechanism =
                    chosen.is_some() && self.mechanism.is_some() && chosen != self.mechanism;
                if !matches!(self.stage, Stage::Handshake) || reauth_v0 {
                    body.error_code = ErrorCode::IllegalSaslState as i16;
                    self.stage = Stage::Failed;
                    close = true;
                } else if other_mechanism {
                    body.error_code = ErrorCode::UnsupportedSaslMechanism as i16;
                    audit_failure(
                        &self.listener,
                        self.peer,
                        mechanism,
                        None,
                        "re-authentication changed mechanism",
                    );
                    self.stage = Stage::Failed;
                    close = true;
                } else if let Some(m) = chosen {
                    self.stage = Stage::Exchange {
                        exchange: SaslExchange::new(m),
                        raw: version == 0,
                    };
                } else {
                    body.error_code = ErrorCode::UnsupportedSaslMechanism as i16;
                    audit_failure(
                        &self.listener,
                        self.peer,
                        mechanism,
                        None,
                        "mechanism not enabled",
                    );
                    self.stage = Stage::Failed;
                    close = true;
                }
            }
        }
        let mut out = vec![encoded(frame::encode(
            ApiKey::SaslHandshake,
            version,
            id,
            &body,
        ))];
        if close {
            out.push(Reply::Close);
        }
        out
    }

    /// One token of the exchange: the answer's bytes or (code, message), and whether
    /// the connection must close.
    async fn token(
        &mut self,
        users: &Users,
        token: &[u8],
        api: ApiKey,
        version: i16,
    ) -> (Result<Vec<u8>, (ErrorCode, String)>, bool) {
        let Stage::Exchange { exchange, .. } = &mut self.stage else {
            self.stage = Stage::Failed;
            let message = format!("{api:?} v{version} before a SaslHandshake");
            return (Err((ErrorCode::IllegalSaslState, message)), true);
        };
        let mechanism = exchange.mechanism().name();
        match exchange.step(users, token).await {
            Ok(SaslStep::Continue(challenge)) => (Ok(challenge), false),
            Ok(SaslStep::Done { principal, token }) => {
                if self.authenticated
                    && self.config.is_some()
                    && self.principal.as_deref().is_some_and(|p| p != principal)
                {
                    audit_failure(
                        &self.listener,
                        self.peer,
                        mechanism,
                        Some(&principal),
                        "re-authenticated as another principal",
                    );
                    self.stage = Stage::Failed;
                    tokio::time::sleep(FAILURE_DELAY).await;
                    let message = "re-authentication must keep the principal".to_string();
                    return (Err((ErrorCode::SaslAuthenticationFailed, message)), true);
                }
                tracing::debug!(target: "audit", listener = %self.listener, peer = %self.peer,
                    mechanism, principal = %principal, "authenticated");
                self.principal = Some(principal);
                self.mechanism = Some(exchange.mechanism());
                self.authenticated = true;
                self.stage = Stage::Handshake;
                let max = self.config.as_ref().map_or(0, |c| c.max_reauth_ms);
                self.expires = (max > 0)
                    .then(|| Instant::now().checked_add(Duration::from_millis(max)))
                    .flatten();
                (Ok(token), false)
            }
            Err(e) => {
                if let SaslError::Failed { user, reason, .. } = &e {
                    audit_failure(
                        &self.listener,
                        self.peer,
                        mechanism,
                        user.as_deref(),
                        reason,
                    );
                }
                self.stage = Stage::Failed;
                tokio::time::sleep(FAILURE_DELAY).await;
                (
                    Err((ErrorCode::SaslAuthenticationFailed, e.to_string())),
                    true,
                )
            }
        }
    }
}

fn audit_failure(
    listener: &str,
    peer: SocketAddr,
    mechanism: &str,
    user: Option<&str>,
    reason: &str,
) {
    tracing::warn!(target: "audit", listener, %peer, mechanism, user = user.unwrap_or(""),
        reason, "authentication failed");
}

fn encoded(r: anyhow::Result<Bytes>) -> Reply {
    match r {
        Ok(bytes) => Reply::Send(bytes),
        Err(_) => Reply::Close,
    }
}
