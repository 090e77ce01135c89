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
//! On a SASL listener, SaslHandshake and SaslAuthenticate (and v0's bare tokens) are
//! answered here, in order with the rest, before the next frame is read: the next
//! frame's meaning depends on them (see `sasl`).

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use futures::StreamExt;
use futures::stream::FuturesOrdered;
use kafka_protocol::messages::ApiKey;
use shale_service::{RequestContext, Service};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::oneshot;

use crate::fetch_session::FetchSessions;
use crate::frame::{self, Frame};
use crate::handlers::{self, Reply};
use crate::limits::Limits;
use crate::sasl::Session;

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
    W: AsyncWrite + Unpin,
{
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
                    let answer = handlers::handle(service.clone(), ctx, req, sessions.clone());
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
async fn flush<W: AsyncWrite + Unpin>(wr: &mut W, mut pending: FuturesOrdered<handlers::Answer>) {
    while let Some(reply) = pending.next().await {
        if write(wr, reply).await.is_err() {
            return;
        }
    }
}

/// Writes one reply; returns how long the connection is then muted. An error ends the
/// connection (`Reply::Close` included).
async fn write<W: AsyncWrite + Unpin>(
    wr: &mut W,
    reply: Reply,
) -> std::io::Result<std::time::Duration> {
    match reply {
        Reply::Send(bytes) => wr.write_all(&bytes).await.map(|()| Default::default()),
        Reply::Chunks { chunks, mute } => write_chunks(wr, chunks).await.map(|()| mute),
        Reply::Nothing => Ok(Default::default()),
        Reply::Close => Err(std::io::Error::other("closing the connection")),
    }
}

/// Writes every chunk with vectored writes (up to 64 chunks a call).
async fn write_chunks<W: AsyncWrite + Unpin>(
    wr: &mut W,
    chunks: Vec<bytes::Bytes>,
) -> std::io::Result<()> {
    let mut chunks: std::collections::VecDeque<bytes::Bytes> = chunks.into();
    while !chunks.is_empty() {
        let slices: Vec<std::io::IoSlice<'_>> = chunks
            .iter()
            .take(64)
            .map(|c| std::io::IoSlice::new(c))
            .collect();
        let mut written = wr.write_vectored(&slices).await?;
        drop(slices);
        if written == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while written > 0 {
            let front = chunks.front_mut().expect("written bytes came from a chunk");
            if written >= front.len() {
                written -= front.len();
                chunks.pop_front();
            } else {
                bytes::Buf::advance(front, written);
                written = 0;
            }
        }
    }
    Ok(())
}
