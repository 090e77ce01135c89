//! A raw Kafka connection, plain or TLS: frames as a client writes them, answers read
//! one by one, and whether the broker closed the connection.

use std::pin::Pin;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

pub(crate) trait Stream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Stream for T {}

pub(crate) struct Conn {
    stream: Pin<Box<dyn Stream>>,
    next_id: i32,
}

impl Conn {
    pub(crate) async fn connect(addr: &str) -> Self {
        Self::over(TcpStream::connect(addr).await.unwrap())
    }

    pub(crate) fn over(s: impl Stream + 'static) -> Self {
        Self {
            stream: Box::pin(s),
            next_id: 1,
        }
    }

    /// Sends a request; returns its correlation id.
    pub(crate) async fn send<M: Encodable>(&mut self, api: ApiKey, version: i16, body: &M) -> i32 {
        let id = self.next_id;
        self.next_id += 1;
        let mut header = RequestHeader::default();
        header.request_api_key = api as i16;
        header.request_api_version = version;
        header.correlation_id = id;
        header.client_id = Some(StrBytes::from_static_str("shale-test"));
        let mut buf = BytesMut::new();
        header
            .encode(&mut buf, api.request_header_version(version))
            .unwrap();
        body.encode(&mut buf, version).unwrap();
        self.send_raw(&buf).await;
        id
    }

    /// Sends one frame. A connection the broker closed shows on the next read.
    pub(crate) async fn send_raw(&mut self, frame: &[u8]) {
        let mut out = BytesMut::new();
        out.put_i32(frame.len() as i32);
        out.put_slice(frame);
        let _ = self.stream.write_all(&out).await;
    }

    /// Sends bytes as they are (no length in front).
    pub(crate) async fn send_bytes(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// The next response frame (without its length), or `None` once the broker
    /// closed the connection.
    pub(crate) async fn recv(&mut self) -> Option<Bytes> {
        let read = async {
            let mut len = [0u8; 4];
            self.stream.read_exact(&mut len).await.ok()?;
            let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
            self.stream.read_exact(&mut frame).await.ok()?;
            Some(Bytes::from(frame))
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("no answer and no close within 30 s")
    }

    /// A response's correlation id and body, decoded in `version`.
    pub(crate) async fn response<M: Decodable>(&mut self, api: ApiKey, version: i16) -> (i32, M) {
        self.try_response(api, version)
            .await
            .expect("connection closed")
    }

    async fn try_response<M: Decodable>(&mut self, api: ApiKey, version: i16) -> Option<(i32, M)> {
        let mut frame = self.recv().await?;
        let header =
            ResponseHeader::decode(&mut frame, api.response_header_version(version)).unwrap();
        Some((
            header.correlation_id,
            M::decode(&mut frame, version).unwrap(),
        ))
    }

    /// Sends a request and reads its answer, or `None` if the broker closed the
    /// connection instead.
    pub(crate) async fn try_call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &Req,
    ) -> Option<Resp> {
        let id = self.send(api, version, body).await;
        let (got, resp) = self.try_response(api, version).await?;
        assert_eq!(got, id, "answers come in request order");
        Some(resp)
    }

    pub(crate) async fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        api: ApiKey,
        version: i16,
        body: &Req,
    ) -> Resp {
        self.try_call(api, version, body)
            .await
            .expect("connection closed")
    }

    /// Whether the broker closed the connection (rather than answer).
    pub(crate) async fn closed(&mut self) -> bool {
        self.recv().await.is_none()
    }
}

// Requests and answers written and read by hand (the versions the codec no longer
// speaks).

/// A request frame (without its length) in request header v1, as every version read
/// by hand uses.
pub(crate) fn legacy_frame(api: ApiKey, version: i16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&(api as i16).to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&9i32.to_be_bytes());
    f.extend_from_slice(&6i16.to_be_bytes());
    f.extend_from_slice(b"legacy");
    f.extend_from_slice(body);
    f
}

/// Sends a hand-written request and returns its answer's body (after the
/// correlation id).
pub(crate) async fn legacy_call(c: &mut Conn, api: ApiKey, version: i16, body: &[u8]) -> Bytes {
    c.send_raw(&legacy_frame(api, version, body)).await;
    let mut answer = c
        .recv()
        .await
        .unwrap_or_else(|| panic!("{api:?} v{version}: the connection was closed"));
    assert_eq!(answer.get_i32(), 9, "{api:?} v{version}: correlation id");
    answer
}

/// A body being written by hand.
#[derive(Default)]
pub(crate) struct W(pub(crate) BytesMut);

impl W {
    pub(crate) fn i8(mut self, v: i8) -> Self {
        self.0.put_i8(v);
        self
    }
    pub(crate) fn i16(mut self, v: i16) -> Self {
        self.0.put_i16(v);
        self
    }
    pub(crate) fn i32(mut self, v: i32) -> Self {
        self.0.put_i32(v);
        self
    }
    pub(crate) fn i64(mut self, v: i64) -> Self {
        self.0.put_i64(v);
        self
    }
    pub(crate) fn str(mut self, s: &str) -> Self {
        self.0.put_i16(s.len() as i16);
        self.0.put_slice(s.as_bytes());
        self
    }
    pub(crate) fn bytes(mut self, b: &[u8]) -> Self {
        self.0.put_i32(b.len() as i32);
        self.0.put_slice(b);
        self
    }
}

/// An answer's start: one topic, `topic`, with one partition.
pub(crate) fn one_topic_one_partition(a: &mut Bytes, topic: &str) {
    assert_eq!(a.get_i32(), 1, "one topic");
    assert_eq!(string(a), topic);
    assert_eq!(a.get_i32(), 1, "one partition");
}

pub(crate) fn string(b: &mut Bytes) -> String {
    let n = b.get_i16();
    if n < 0 {
        return String::new();
    }
    String::from_utf8(b.split_to(n as usize).to_vec()).unwrap()
}
