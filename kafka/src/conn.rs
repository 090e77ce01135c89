//! One client connection: frames in, responses out in request order.
//!
//! Requests are read as they arrive, up to the listener's in-flight limit, and their
//! responses are written in the order the requests came (Kafka's rule), an acks=0
//! produce writing none. Every request but Fetch starts only when the one before it
//! (Fetch aside) has finished, as Kafka processes a connection's requests one at a
//! time: pipelined produces append in the order they were sent, and pipelined offset
//! commits apply in order. A Fetch, which may wait for data, runs beside them, so a
//! long poll does not hold up a commit or a heartbeat on the same connection. A frame larger than the limit, a
//! frame too short for a header, an unknown API key, an unsupported version or a body
//! that does not decode closes the connection, as Kafka does; only ApiVersions
//! answers an unsupported version (with a v0 body listing what is supported).
//!
//! # Cancellation
//!
//! The connection ends when the client closes it, on a protocol violation, or when
//! the node stops; requests in flight are dropped with it (a produce already handed
//! to the log completes there).
//!
//! On a plaintext listener, the record bytes of a Fetch response that come from the
//! newest local segments go from the page cache to the socket with `sendfile(2)`,
//! never entering the process; on a TLS listener they are read and encrypted.
//!
//! On a SASL listener, SaslHandshake and SaslAuthenticate (and v0's bare tokens) are
//! answered here, in order with the rest, before the next frame is read: the next
//! frame's meaning depends on them (see `sasl`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use kafka_protocol::messages::ApiKey;
use shale_log::{FileSlice, Records};
use shale_service::{RequestContext, Service};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

use crate::fetch_session::FetchSessions;
use crate::frame::{self, Frame};
use crate::handlers::{self, Reply};
use crate::limits::Limits;
use crate::sasl::Session;

/// The write side of a connection. A plain TCP socket takes slices of segment files
/// with `sendfile(2)`; others (TLS) get their bytes.
pub trait Sink: AsyncWrite + Unpin {
    /// The socket to `sendfile` to, if the bytes go to it as they are.
    fn socket(&self) -> Option<&TcpStream> {
        None
    }
}

impl Sink for tokio::net::tcp::OwnedWriteHalf {
    fn socket(&self) -> Option<&TcpStream> {
        Some(self.as_ref())
    }
}

impl<T: AsyncRead + AsyncWrite> Sink for tokio::io::WriteHalf<T> {}

/// Serves one connection until it closes. `session` says who the client is and
/// takes its SASL requests.
pub async fn serve<R, W>(
    service: Service,
    listener: Arc<str>,
    limits: Limits,
    mut rd: R,
    mut wr: W,
    peer: SocketAddr,
    mut session: Session,
) where
    R: AsyncRead + Unpin,
    W: Sink,
{
    let zero_copy = limits.sendfile && wr.socket().is_some();
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut pending = FuturesOrdered::new();
    let mut stopping = std::pin::pin!(service.stopping());
    let base = RequestContext::new(listener).with_peer(Some(peer));
    let sessions = Arc::new(FetchSessions::default());
    // Signalled when the last request of the serial chain finishes.
    let mut chain: Option<oneshot::Receiver<()>> = None;
    // A throttled client's connection is not read from until then (KIP-219).
    let mut muted_until: Option<tokio::time::Instant> = None;
    // A client that does not authenticate in time holds no connection.
    let authenticate_by = tokio::time::Instant::now() + crate::sasl::AUTHENTICATION_TIMEOUT;
    loop {
        // Start every complete request in the buffer, up to the in-flight limit.
        while muted_until.is_none() && pending.len() < limits.max_inflight_requests {
            let max = session.max_frame(limits.max_request_bytes);
            let bytes = match frame::split(&mut buf, max) {
                Ok(Some(bytes)) => bytes,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "closing a Kafka connection");
                    return flush(&mut wr, pending).await;
                }
            };
            if session.expects_raw_token() {
                let users = service.broker().security.users();
                for reply in session.raw_token(users, bytes).await {
                    pending.push_back(ready(reply));
                }
                continue;
            }
            match frame::parse(bytes) {
                Ok(Frame::Request(req)) if Session::is_sasl(req.api) => {
                    let users = service.broker().security.users();
                    for reply in session.handle(users, req).await {
                        pending.push_back(ready(reply));
                    }
                }
                Ok(Frame::Request(req)) => {
                    if let Some(why) = session.refuses(req.api) {
                        tracing::debug!(%peer, api = ?req.api, why, "closing a Kafka connection");
                        return flush(&mut wr, pending).await;
                    }
                    let mut ctx = base.clone().with_client_id(req.client_id.clone());
                    ctx.principal = session.principal().map(str::to_string);
                    let api = req.api;
                    let answer =
                        handlers::handle(service.clone(), ctx, req, sessions.clone(), zero_copy);
                    pending.push_back(in_order(answer, api, &mut chain));
                }
                Ok(Frame::Answer(bytes)) => pending.push_back(ready(Reply::Send(bytes))),
                Err(e) => {
                    tracing::debug!(%peer, error = %e, "closing a Kafka connection");
                    return flush(&mut wr, pending).await;
                }
            }
        }
        let room = pending.len() < limits.max_inflight_requests && muted_until.is_none();
        let unmute = muted_until.unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            _ = &mut stopping => return,
            Some(reply) = pending.next(), if !pending.is_empty() => {
                match write(&mut wr, reply).await {
                    Ok(mute) if !mute.is_zero() => {
                        muted_until = Some(tokio::time::Instant::now() + mute);
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "Kafka connection ended");
                        return;
                    }
                }
            }
            _ = tokio::time::sleep_until(unmute), if muted_until.is_some() => muted_until = None,
            _ = tokio::time::sleep_until(authenticate_by), if session.unauthenticated() => {
                tracing::warn!(target: "audit", %peer, "no authentication in time, closing");
                return;
            }
            read = rd.read_buf(&mut buf), if room => match read {
                Ok(0) | Err(_) => return flush(&mut wr, pending).await,
                Ok(_) => {}
            },
        }
    }
}

/// An answer that is ready now.
fn ready(reply: Reply) -> handlers::Answer {
    Box::pin(async move { reply })
}

/// Chains every request but Fetch behind the one before it: it starts when that one
/// has finished (or was dropped).
fn in_order(
    answer: handlers::Answer,
    api: ApiKey,
    chain: &mut Option<oneshot::Receiver<()>>,
) -> handlers::Answer {
    if api == ApiKey::Fetch {
        return answer;
    }
    let before = chain.take();
    let (done, next) = oneshot::channel();
    *chain = Some(next);
    Box::pin(async move {
        if let Some(before) = before {
            let _ = before.await;
        }
        let reply = answer.await;
        let _ = done.send(());
        reply
    })
}

/// Writes the answers of requests already taken before the connection closes.
async fn flush<W: Sink>(wr: &mut W, mut pending: FuturesOrdered<handlers::Answer>) {
    while let Some(reply) = pending.next().await {
        if write(wr, reply).await.is_err() {
            return;
        }
    }
}

/// Writes one reply; returns how long the connection is then muted. An error ends the
/// connection (`Reply::Close` included).
async fn write<W: Sink>(wr: &mut W, reply: Reply) -> std::io::Result<std::time::Duration> {
    match reply {
        Reply::Send(bytes) => wr.write_all(&bytes).await.map(|()| Default::default()),
        Reply::Chunks { chunks, mute } => write_chunks(wr, chunks).await.map(|()| mute),
        Reply::Nothing => Ok(Default::default()),
        Reply::Close => Err(std::io::Error::other("closing the connection")),
    }
}

/// Writes every chunk: bytes with vectored writes (up to 64 chunks a call), file
/// slices with `sendfile(2)` to a plain socket (else read, CRC-checked, and written).
async fn write_chunks<W: Sink>(wr: &mut W, chunks: Vec<Records>) -> std::io::Result<()> {
    let mut chunks: std::collections::VecDeque<Records> = chunks.into();
    while let Some(front) = chunks.pop_front() {
        let slice = match front {
            Records::Slice(slice) => slice,
            Records::Bytes(bytes) => {
                chunks.push_front(Records::Bytes(bytes));
                write_bytes(wr, &mut chunks).await?;
                continue;
            }
        };
        // The bytes before go first.
        wr.flush().await?;
        match wr.socket() {
            Some(socket) => send_file(socket, &slice).await?,
            None => wr.write_all(&slice.read()?).await?,
        }
    }
    wr.flush().await
}

/// Writes the leading in-memory chunks with vectored writes.
async fn write_bytes<W: Sink>(
    wr: &mut W,
    chunks: &mut std::collections::VecDeque<Records>,
) -> std::io::Result<()> {
    loop {
        let slices: Vec<std::io::IoSlice<'_>> = chunks
            .iter()
            .take(64)
            .map_while(|c| match c {
                Records::Bytes(b) => Some(std::io::IoSlice::new(b)),
                Records::Slice(_) => None,
            })
            .collect();
        if slices.is_empty() {
            return Ok(());
        }
        let mut written = wr.write_vectored(&slices).await?;
        drop(slices);
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let Some(Records::Bytes(front)) = chunks.front_mut() else {
                unreachable!("written bytes came from a chunk in memory")
            };
            if written >= front.len() {
                written -= front.len();
                chunks.pop_front();
            } else {
                bytes::Buf::advance(front, written);
                written = 0;
            }
        }
    }
}

/// Sends a file slice to a plain socket, from the page cache, without copying it into
/// the process. A log cut since the slice was planned (a truncation after a leader
/// change, rare), found before or after sending, or a file shorter than the slice,
/// ends the connection: the frame's length is already written, and the bytes may no
/// longer be the batches planned. The client reconnects and fetches again.
async fn send_file(socket: &TcpStream, slice: &FileSlice) -> std::io::Result<()> {
    let cut = || std::io::Error::other("the log was cut under a fetch response");
    if !slice.is_current() {
        return Err(cut());
    }
    let mut position = slice.position;
    let end = slice.position + slice.len as u64;
    while position < end {
        let count = (end - position) as usize;
        let sent = socket
            .async_io(Interest::WRITABLE, || {
                rustix::fs::sendfile(socket, &*slice.file, Some(&mut position), count)
                    .map_err(std::io::Error::from)
            })
            .await?;
        if sent == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "a segment file ended inside a fetch response",
            ));
        }
    }
    if !slice.is_current() {
        return Err(cut());
    }
    Ok(())
}
