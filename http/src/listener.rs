//! The sockets axum serves: plain TCP, or TLS connections whose handshakes are done
//! (by `security::tls::accept_loop`); both tell who is on the other end.

use std::net::SocketAddr;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use shale_security::tls::Accepted;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

use crate::auth::PeerInfo;

pub(crate) struct Plain(pub TcpListener);

impl Listener for Plain {
    type Io = TcpStream;
    type Addr = PeerInfo;

    async fn accept(&mut self) -> (TcpStream, PeerInfo) {
        let (io, addr) = Listener::accept(&mut self.0).await;
        let _ = io.set_nodelay(true);
        (
            io,
            PeerInfo {
                addr,
                principal: None,
            },
        )
    }

    fn local_addr(&self) -> std::io::Result<PeerInfo> {
        Ok(PeerInfo {
            addr: self.0.local_addr()?,
            principal: None,
        })
    }
}

pub(crate) struct Tls {
    pub accepted: mpsc::Receiver<Accepted>,
    pub local: Option<SocketAddr>,
}

impl Listener for Tls {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = PeerInfo;

    async fn accept(&mut self) -> (Self::Io, PeerInfo) {
        match self.accepted.recv().await {
            Some(a) => (
                a.stream,
                PeerInfo {
                    addr: a.peer,
                    principal: a.principal,
                },
            ),
            // The accept loop ended: nothing more will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<PeerInfo> {
        let addr = self
            .local
            .ok_or_else(|| std::io::Error::other("no local address"))?;
        Ok(PeerInfo {
            addr,
            principal: None,
        })
    }
}

impl Connected<IncomingStream<'_, Plain>> for PeerInfo {
    fn connect_info(stream: IncomingStream<'_, Plain>) -> Self {
        stream.remote_addr().clone()
    }
}

impl Connected<IncomingStream<'_, Tls>> for PeerInfo {
    fn connect_info(stream: IncomingStream<'_, Tls>) -> Self {
        stream.remote_addr().clone()
    }
}
