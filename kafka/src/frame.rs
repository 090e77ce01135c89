//! Kafka framing: a 4-byte big-endian length, then the request header and body.
//! Responses are the header (v0 or v1 by API and version), the body, and the
//! length in front.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use shale_records::ErrorCode;

use crate::versions;

/// Why a connection is closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {0} bytes exceeds the limit of {1}")]
    TooLarge(i64, usize),
    #[error("frame of {0} bytes is too short for a request header")]
    TooShort(usize),
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    #[error("{api:?} version {version} is not supported")]
    UnsupportedVersion { api: ApiKey, version: i16 },
    #[error("malformed {api:?} v{version} request: {reason}")]
    Malformed {
        api: ApiKey,
        version: i16,
        reason: String,
    },
}

/// A decoded request.
pub struct Request {
    pub api: ApiKey,
    pub version: i16,
    pub correlation_id: i32,
    pub client_id: Option<String>,
    /// Read by the codec, or by hand for versions it no longer reads
    /// ([`crate::legacy`]).
    pub body: Box<RequestKind>,
}

/// What a frame asks for: a request to handle, or an answer ready at once.
pub enum Frame {
    Request(Request),
    Answer(Bytes),
}

/// Takes the next whole frame (without its length) off `buf`, if it has arrived.
pub fn split(buf: &mut BytesMut, max: usize) -> Result<Option<Bytes>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = i64::from((&buf[..4]).get_i32());
    if len < 0 || len as u64 > max as u64 {
        return Err(FrameError::TooLarge(len, max));
    }
    let len = len as usize;
    if buf.len() < 4 + len {
        buf.reserve(4 + len - buf.len());
        return Ok(None);
    }
    buf.advance(4);
    Ok(Some(buf.split_to(len).freeze()))
}

/// Decodes a frame's header and body.
pub fn parse(mut frame: Bytes) -> Result<Frame, FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::TooShort(frame.len()));
    }
    let key = (&frame[0..2]).get_i16();
    let version = (&frame[2..4]).get_i16();
    let correlation_id = (&frame[4..8]).get_i32();
    let api = ApiKey::try_from(key).map_err(|()| FrameError::UnknownApi(key))?;
    let Some((lo, hi)) = versions::range(api) else {
        return Err(FrameError::UnknownApi(key));
    };
    if !(lo..=hi).contains(&version) {
        if api == ApiKey::ApiVersions {
            // Don't read the body: answer v0 with the supported list (the client
            // retries with a version from it).
            let body = versions::api_versions(ErrorCode::UnsupportedVersion);
            return encode(api, 0, correlation_id, &body)
                .map(Frame::Answer)
                .map_err(|e| malformed(api, version, e));
        }
        return Err(FrameError::UnsupportedVersion { api, version });
    }
    let header = RequestHeader::decode(&mut frame, api.request_header_version(version))
        .map_err(|e| malformed(api, version, e))?;
    let client_id = header.client_id.map(|c| c.to_string());
    let kind = if crate::legacy::is_legacy(api, version) {
        crate::legacy::decode(api, version, frame)
    } else {
        RequestKind::decode(api, &mut frame, version)
    }
    .map_err(|e| malformed(api, version, e))?;
    let body = Box::new(kind);
    Ok(Frame::Request(Request {
        api,
        version,
        correlation_id,
        client_id,
        body,
    }))
}

fn malformed(api: ApiKey, version: i16, e: impl std::fmt::Display) -> FrameError {
    FrameError::Malformed {
        api,
        version,
        reason: e.to_string(),
    }
}

/// A whole response frame: length, header, body.
pub fn encode<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &M,
) -> anyhow::Result<Bytes> {
    let header_version = api.response_header_version(version);
    let mut header = ResponseHeader::default();
    header.correlation_id = correlation_id;
    let size = header.compute_size(header_version)? + body.compute_size(version)?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(size as i32);
    header.encode(&mut out, header_version)?;
    body.encode(&mut out, version)?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use bytes::{BufMut, Bytes, BytesMut};
    use proptest::prelude::*;

    use super::*;
    use crate::versions::SUPPORTED;

    fn frame(key: i16, version: i16, body: &[u8]) -> Bytes {
        let mut f = BytesMut::new();
        f.put_i16(key);
        f.put_i16(version);
        f.put_i32(7);
        f.put_slice(body);
        f.freeze()
    }

    /// A 14-byte Metadata v0 request claiming 2^31 - 1 topics is refused as
    /// malformed; the decoder's up-front allocation for them does not abort.
    #[test]
    fn an_array_count_far_beyond_the_frame_is_malformed() {
        let mut body = BytesMut::new();
        body.put_i16(-1); // no client id
        body.put_i32(i32::MAX);
        let f = frame(ApiKey::Metadata as i16, 0, &body);
        assert!(matches!(parse(f), Err(FrameError::Malformed { .. })));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(shale_records::fuzzing::cases(4_000)))]

        /// Any body after a well-formed header, for every served API and version,
        /// decodes or is refused; never a panic or an abort.
        #[test]
        fn arbitrary_bodies_decode_or_are_refused(
            api in 0..SUPPORTED.len(),
            pick in any::<u16>(),
            body in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let (key, lo, hi) = SUPPORTED[api];
            let version = lo + (pick % (hi - lo + 1) as u16) as i16;
            let _ = parse(frame(key as i16, version, &body));
        }

        /// Whole frames of arbitrary bytes are split and parsed without a panic.
        #[test]
        fn arbitrary_frames_are_split_and_parsed(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
        ) {
            let mut buf = BytesMut::from(&bytes[..]);
            while let Ok(Some(f)) = split(&mut buf, 1 << 20) {
                let _ = parse(f);
            }
        }
    }
}
