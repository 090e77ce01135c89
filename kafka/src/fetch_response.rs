//! The Fetch response (v4–17), encoded by hand so that record bytes are never copied:
//! the frame is a list of chunks, the fields around the records in small buffers and
//! each partition's records as the log (or the read cache) handed them out: bytes, or
//! a slice of a segment file that the connection sends with `sendfile(2)`. The layout is Kafka's; the tests
//! check it byte for byte against the `kafka-protocol` codec for every version.

use bytes::{BufMut, BytesMut};
use shale_log::Records;

/// One partition's answer.
#[derive(Debug, Clone, Default)]
pub struct PartitionAnswer {
    pub index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// The replica to fetch from instead (v11+, KIP-392); -1: none.
    pub preferred_read_replica: i32,
    /// Aborted transactions with records in the answer (read_committed): (producer
    /// id, first offset).
    pub aborted: Vec<(i64, i64)>,
    pub records: Records,
}

/// One topic's answers.
#[derive(Debug, Clone, Default)]
pub struct TopicAnswer {
    /// Written up to v12.
    pub name: String,
    /// Written from v13 (KIP-516: topics by id).
    pub id: uuid::Uuid,
    pub partitions: Vec<PartitionAnswer>,
}

/// A whole Fetch response.
#[derive(Debug, Clone, Default)]
pub struct FetchAnswer {
    /// A top-level error (v7+: a fetch session's), with no topics.
    pub error_code: i16,
    /// The fetch session this answer belongs to (v7+, KIP-227); 0: none.
    pub session_id: i32,
    pub topics: Vec<TopicAnswer>,
    /// How long the client is throttled for exceeding its fetch quota.
    pub throttle: std::time::Duration,
}

/// Lowest and highest version this encoder writes.
pub const VERSIONS: (i16, i16) = (4, 17);

/// The whole response frame (length, header, body) as chunks; record bytes are not
/// copied. `version` must be in [`VERSIONS`].
pub fn encode(version: i16, correlation_id: i32, answer: &FetchAnswer) -> Vec<Records> {
    debug_assert!((VERSIONS.0..=VERSIONS.1).contains(&version));
    let flexible = version >= 12;
    let mut chunks = Vec::with_capacity(1 + 2 * answer.topics.len());
    let mut buf = BytesMut::with_capacity(256);
    buf.put_i32(0); // frame length, set below
    buf.put_i32(correlation_id);
    if flexible {
        buf.put_u8(0); // response header v1: no tagged fields
    }
    buf.put_i32(answer.throttle.as_millis().min(i32::MAX as u128) as i32);
    if version >= 7 {
        buf.put_i16(answer.error_code);
        buf.put_i32(answer.session_id);
    }
    array_len(&mut buf, flexible, answer.topics.len());
    for t in &answer.topics {
        if version >= 13 {
            buf.put_slice(t.id.as_bytes());
        } else {
            string(&mut buf, flexible, &t.name);
        }
        array_len(&mut buf, flexible, t.partitions.len());
        for p in &t.partitions {
            buf.put_i32(p.index);
            buf.put_i16(p.error_code);
            buf.put_i64(p.high_watermark);
            buf.put_i64(p.last_stable_offset);
            if version >= 5 {
                buf.put_i64(p.log_start_offset);
            }
            array_len(&mut buf, flexible, p.aborted.len());
            for (producer_id, first_offset) in &p.aborted {
                buf.put_i64(*producer_id);
                buf.put_i64(*first_offset);
                if flexible {
                    buf.put_u8(0); // aborted transaction: no tagged fields
                }
            }
            if version >= 11 {
                buf.put_i32(p.preferred_read_replica);
            }
            if flexible {
                uvarint(&mut buf, p.records.len() as u64 + 1);
            } else {
                buf.put_i32(p.records.len() as i32);
            }
            if !p.records.is_empty() {
                chunks.push(Records::Bytes(buf.split().freeze()));
                chunks.push(p.records.clone());
            }
            if flexible {
                buf.put_u8(0); // partition: no tagged fields
            }
        }
        if flexible {
            buf.put_u8(0); // topic: no tagged fields
        }
    }
    if flexible {
        buf.put_u8(0); // response: no tagged fields
    }
    chunks.push(Records::Bytes(buf.freeze()));
    let total: usize = chunks.iter().map(Records::len).sum();
    let Records::Bytes(head) = &chunks[0] else {
        unreachable!("the frame starts with its header")
    };
    let mut first = BytesMut::from(&head[..]);
    first[..4].copy_from_slice(&((total - 4) as i32).to_be_bytes());
    chunks[0] = Records::Bytes(first.freeze());
    chunks.retain(|c| !c.is_empty());
    chunks
}

fn uvarint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn array_len(buf: &mut BytesMut, flexible: bool, n: usize) {
    if flexible {
        uvarint(buf, n as u64 + 1);
    } else {
        buf.put_i32(n as i32);
    }
}

fn string(buf: &mut BytesMut, flexible: bool, s: &str) {
    if flexible {
        uvarint(buf, s.len() as u64 + 1);
    } else {
        buf.put_i16(s.len() as i16);
    }
    buf.put_slice(s.as_bytes());
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use kafka_protocol::messages::fetch_response::{
        AbortedTransaction, FetchableTopicResponse, PartitionData,
    };
    use kafka_protocol::messages::{ApiKey, FetchResponse};
    use kafka_protocol::protocol::StrBytes;
    use proptest::prelude::*;

    use super::*;

    /// The same answer through the `kafka-protocol` codec.
    fn reference(version: i16, correlation_id: i32, a: &FetchAnswer) -> Bytes {
        let mut resp = FetchResponse::default();
        if version >= 7 {
            resp.error_code = a.error_code;
            resp.session_id = a.session_id;
        }
        resp.throttle_time_ms = a.throttle.as_millis() as i32;
        for t in &a.topics {
            let mut topic = FetchableTopicResponse::default();
            if version >= 13 {
                topic.topic_id = t.id;
            } else {
                topic.topic = StrBytes::from_string(t.name.clone()).into();
            }
            for p in &t.partitions {
                let mut d = PartitionData::default();
                d.partition_index = p.index;
                d.error_code = p.error_code;
                d.high_watermark = p.high_watermark;
                d.last_stable_offset = p.last_stable_offset;
                d.log_start_offset = p.log_start_offset;
                if version >= 11 {
                    // Older versions have no such field (the codec refuses a value).
                    d.preferred_read_replica = p.preferred_read_replica.into();
                }
                d.aborted_transactions = Some(
                    (p.aborted.iter())
                        .map(|&(producer_id, first_offset)| {
                            let mut a = AbortedTransaction::default();
                            a.producer_id = producer_id.into();
                            a.first_offset = first_offset;
                            a
                        })
                        .collect(),
                );
                d.records = Some(p.records.clone().into_bytes().unwrap());
                topic.partitions.push(d);
            }
            resp.responses.push(topic);
        }
        crate::frame::encode(ApiKey::Fetch, version, correlation_id, &resp).unwrap()
    }

    fn answers() -> impl Strategy<Value = FetchAnswer> {
        let partition = (
            any::<i32>(),
            any::<i16>(),
            any::<i64>(),
            any::<i64>(),
            any::<i64>(),
            any::<i32>(),
            proptest::collection::vec((any::<i64>(), any::<i64>()), 0..3),
            proptest::collection::vec(any::<u8>(), 0..300),
        )
            .prop_map(
                |(index, error_code, hw, lso, lstart, preferred, aborted, records)| {
                    PartitionAnswer {
                        index,
                        error_code,
                        high_watermark: hw,
                        last_stable_offset: lso,
                        log_start_offset: lstart,
                        preferred_read_replica: preferred,
                        aborted,
                        records: Bytes::from(records).into(),
                    }
                },
            );
        let topic = (
            "[a-z._-]{0,200}",
            any::<u128>(),
            proptest::collection::vec(partition, 0..4),
        )
            .prop_map(|(name, id, partitions)| TopicAnswer {
                name,
                id: uuid::Uuid::from_u128(id),
                partitions,
            });
        (
            proptest::collection::vec(topic, 0..4),
            0u64..100_000,
            any::<i16>(),
            any::<i32>(),
        )
            .prop_map(|(topics, ms, error_code, session_id)| FetchAnswer {
                error_code,
                session_id,
                topics,
                throttle: std::time::Duration::from_millis(ms),
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Byte for byte what the codec writes, for every version served.
        #[test]
        fn chunks_equal_the_codec_encoding(
            version in VERSIONS.0..=VERSIONS.1,
            id in any::<i32>(),
            answer in answers(),
        ) {
            let chunks = encode(version, id, &answer);
            prop_assert!(chunks.iter().all(|c| !c.is_empty()));
            let joined: Vec<u8> = chunks
                .into_iter()
                .flat_map(|c| c.into_bytes().unwrap())
                .collect();
            prop_assert_eq!(&joined[..], &reference(version, id, &answer)[..]);
        }
    }

    /// Record bytes are handed on as they are, not copied.
    #[test]
    fn records_are_not_copied() {
        let records = Bytes::from(vec![7u8; 4096]);
        let answer = FetchAnswer {
            topics: vec![TopicAnswer {
                name: "t".into(),
                id: uuid::Uuid::from_u128(7),
                partitions: vec![PartitionAnswer {
                    records: records.clone().into(),
                    ..Default::default()
                }],
            }],
            ..Default::default()
        };
        for version in VERSIONS.0..=VERSIONS.1 {
            let chunks = encode(version, 1, &answer);
            assert!(
                chunks
                    .iter()
                    .any(|c| matches!(c, Records::Bytes(b) if b.as_ptr() == records.as_ptr())),
                "v{version}: the records chunk is the log's own bytes"
            );
        }
    }
}
