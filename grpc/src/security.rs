//! The gRPC listener's security: TLS connections (with the principal of a client
//! certificate), and a user and password carried with every call
//! (`authorization: Basic base64(user:password)`), checked against the users' SCRAM
//! credentials. gRPC has no SASL exchange; a listener whose protocol is
//! `SASL_PLAINTEXT` or `SASL_SSL` requires the credentials on each call, and a
//! password verified once is remembered until the user's credential changes.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine;
use shale_security::tls::{TlsServer, accept_loop};
use shale_security::{ListenerSecurity, Users, user_principal};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_stream::wrappers::ReceiverStream;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::http;
use tonic::transport::server::Connected;

/// How long a refused call waits before its answer (as a failed Kafka
/// authentication does): guessing passwords stays slow.
const FAILURE_DELAY: Duration = Duration::from_millis(100);

/// The metadata key of the credentials, as HTTP's.
pub(crate) const AUTHORIZATION: &str = "authorization";

/// A listener's security, as the gRPC front end applies it.
#[derive(Clone, Default)]
pub struct Security {
    pub(crate) tls: Option<Arc<TlsServer>>,
    /// Calls must carry a user and password.
    pub(crate) credentials_required: bool,
}

impl Security {
    pub fn load(l: &ListenerSecurity) -> Result<Self, shale_security::tls::TlsError> {
        Ok(Self {
            tls: l.tls_server(&[b"h2"])?,
            credentials_required: l.protocol.uses_sasl(),
        })
    }
}

/// Who is on the other end of a TLS connection: its address, and the subject of its
/// certificate if it showed one.
#[derive(Debug, Clone)]
pub(crate) struct PeerInfo {
    pub addr: SocketAddr,
    pub principal: Option<String>,
}

/// An accepted TLS connection, as tonic serves it.
pub(crate) struct TlsConn {
    stream: tokio_rustls::server::TlsStream<TcpStream>,
    info: PeerInfo,
}

impl Connected for TlsConn {
    type ConnectInfo = PeerInfo;

    fn connect_info(&self) -> PeerInfo {
        self.info.clone()
    }
}

impl AsyncRead for TlsConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for TlsConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The connections of a TLS listener, handshakes done, as tonic takes them.
pub(crate) fn tls_incoming(
    listener: TcpListener,
    tls: Arc<TlsServer>,
    name: Arc<str>,
) -> impl futures::Stream<Item = std::io::Result<TlsConn>> {
    use futures::StreamExt;
    ReceiverStream::new(accept_loop(listener, tls, name)).map(|a| {
        Ok(TlsConn {
            stream: a.stream,
            info: PeerInfo {
                addr: a.peer,
                principal: a.principal,
            },
        })
    })
}

/// Who a call authenticated as, established by [`CheckCredentials`] before its
/// body was read.
#[derive(Debug, Clone)]
struct Authenticated(String);

/// The principal of a call: its credentials' user when the listener requires them
/// (checked by [`CheckCredentials`]), else its client certificate's subject, else
/// anonymous (`None`).
pub(crate) fn principal<T>(
    security: &Security,
    request: &tonic::Request<T>,
) -> Result<Option<String>, Status> {
    if security.credentials_required {
        return match request.extensions().get::<Authenticated>() {
            Some(a) => Ok(Some(a.0.clone())),
            None => Err(Status::unauthenticated("the call was not authenticated")),
        };
    }
    Ok(request
        .extensions()
        .get::<PeerInfo>()
        .and_then(|i| i.principal.clone()))
}

/// A tower service in front of every gRPC service of a listener that requires
/// credentials: it checks a call's `authorization` header before the call's body is
/// read, so a caller without a valid user cannot make the broker buffer a request of
/// up to `MAX_MESSAGE_BYTES`; a refused call is answered UNAUTHENTICATED at once.
#[derive(Clone)]
pub(crate) struct CheckCredentials<S> {
    inner: S,
    service: shale_service::Service,
    listener: Arc<str>,
    required: bool,
}

impl<S> CheckCredentials<S> {
    pub(crate) fn layer(
        service: shale_service::Service,
        listener: Arc<str>,
        required: bool,
    ) -> impl tower::Layer<S, Service = Self> + Clone {
        tower::layer::layer_fn(move |inner| Self {
            inner,
            service: service.clone(),
            listener: listener.clone(),
            required,
        })
    }
}

impl<S, ResBody> tower::Service<http::Request<Body>> for CheckCredentials<S>
where
    S: tower::Service<http::Request<Body>, Response = http::Response<ResBody>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    ResBody: Default + Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<Body>) -> Self::Future {
        // The clone that was made ready is the one to call.
        let ready = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, ready);
        if !self.required {
            return Box::pin(inner.call(req));
        }
        let (service, listener) = (self.service.clone(), self.listener.clone());
        Box::pin(async move {
            let peer = req.extensions().get::<PeerInfo>().map(|i| i.addr);
            let users = service.broker().security.users();
            match check(users, &listener, req.headers(), peer).await {
                Ok(principal) => {
                    req.extensions_mut().insert(Authenticated(principal));
                    inner.call(req).await
                }
                Err(status) => Ok(status.into_http()),
            }
        })
    }
}

/// The principal of a call's `authorization: Basic …` header, or UNAUTHENTICATED.
async fn check(
    users: &Users,
    listener: &str,
    headers: &http::HeaderMap,
    peer: Option<SocketAddr>,
) -> Result<String, Status> {
    let Some(value) = headers.get(AUTHORIZATION) else {
        tracing::warn!(target: "audit", listener, peer = ?peer, "call without credentials refused");
        return Err(Status::unauthenticated(
            "this listener requires a user and password (metadata `authorization: Basic …`)",
        ));
    };
    let Some((user, password)) = value.to_str().ok().and_then(parse_basic) else {
        tokio::time::sleep(FAILURE_DELAY).await;
        return Err(Status::unauthenticated(
            "malformed credentials: expected `Basic base64(user:password)`",
        ));
    };
    if users
        .verify_password_cached(&user, password.as_bytes())
        .await
    {
        return Ok(user_principal(&user));
    }
    tracing::warn!(target: "audit", listener, peer = ?peer, user, "authentication failed");
    tokio::time::sleep(FAILURE_DELAY).await;
    Err(Status::unauthenticated(
        "authentication failed: invalid user or password",
    ))
}

/// `Basic base64(user:password)` → (user, password).
fn parse_basic(value: &str) -> Option<(String, String)> {
    let encoded = value.strip_prefix("Basic ")?;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, password) = text.split_once(':')?;
    (!user.is_empty()).then(|| (user.to_string(), password.to_string()))
}

/// The metadata value a client sends: `Basic base64(user:password)`.
pub(crate) fn basic_credentials(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_round_trip_and_malformed_ones_are_refused() {
        let v = basic_credentials("alice", "p:w");
        assert_eq!(parse_basic(&v), Some(("alice".into(), "p:w".into())));
        for bad in ["", "Basic", "Basic !!!", "Bearer abc", "Basic OnB3"] {
            assert_eq!(parse_basic(bad), None, "{bad}");
        }
    }
}
