//! A gRPC listener's limits, as every listener takes them: the largest request message
//! its client services decode (`max_request_bytes`; a larger one is refused with
//! `OUT_OF_RANGE`), and its open connections (`max_connections`; more are closed as
//! they are accepted).

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::{Stream, StreamExt};
use shale_config::ListenerConfig;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::Connected;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_request_bytes: usize,
    pub max_connections: usize,
}

impl From<&ListenerConfig> for Limits {
    fn from(l: &ListenerConfig) -> Self {
        Self {
            max_request_bytes: l.max_request_bytes,
            max_connections: l.max_connections,
        }
    }
}

/// A connection that holds one of its listener's connection permits until it closes.
pub(crate) struct Limited<IO> {
    io: IO,
    _permit: OwnedSemaphorePermit,
}

/// The accepted connections of `incoming`, at most `max` open at once: one beyond is
/// closed at once (dropped), with a warning.
pub(crate) fn limit_connections<S, IO>(
    incoming: S,
    max: usize,
    listener: Arc<str>,
) -> impl Stream<Item = std::io::Result<Limited<IO>>>
where
    S: Stream<Item = std::io::Result<IO>>,
{
    let permits = Arc::new(Semaphore::new(max));
    incoming.filter_map(move |accepted| {
        let (permits, listener) = (permits.clone(), listener.clone());
        async move {
            let io = match accepted {
                Ok(io) => io,
                Err(e) => return Some(Err(e)),
            };
            match permits.try_acquire_owned() {
                Ok(permit) => Some(Ok(Limited {
                    io,
                    _permit: permit,
                })),
                Err(_) => {
                    tracing::warn!(listener = %listener, max,
                        "too many gRPC connections, closing the new one");
                    None
                }
            }
        }
    })
}

impl<IO: Connected> Connected for Limited<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Limited<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Limited<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
