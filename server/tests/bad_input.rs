//! Bad input gets a specific Kafka error code and changes nothing; malformed frames
//! never take the broker down. Against a real `shale-broker` process.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes};
use common::Broker;
use shale_client::{Acks, Client, Error, Producer, ProducerRecord};
use shale_records::ErrorCode;
use shale_records::record::{BatchBuilder, Record};

fn batch(n: usize, value_len: usize) -> Bytes {
    let mut b = BatchBuilder::new(1_000);
    for i in 0..n {
        let mut v = format!("value-{i}-").into_bytes();
        v.resize(value_len.max(v.len()), b'x');
        b.push(Record::new(None, Some(&v), 1_000));
    }
    b.build()
}

fn code_of<T: std::fmt::Debug>(r: Result<T, Error>) -> ErrorCode {
    r.unwrap_err().code().expect("a broker error code")
}

fn configs(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Everything a client can observe about the topic.
async fn snapshot(c: &Client) -> (Vec<String>, String, Bytes, Bytes) {
    let topics = c
        .list_topics()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    let d = c.describe_topic("good").await.unwrap();
    let describe = format!(
        "{:?} {:?} {:?}",
        d.topic,
        d.partitions,
        d.config_overrides.iter().collect::<BTreeMap<_, _>>()
    );
    let p0 = c
        .fetch_partition("good", 0, 0, 1 << 20, 0)
        .await
        .unwrap()
        .records;
    let p1 = c
        .fetch_partition("good", 1, 0, 1 << 20, 0)
        .await
        .unwrap()
        .records;
    (topics, describe, p0, p1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_specific_error_codes_and_change_nothing() {
    let broker = Broker::start(&[]).await;
    let c = broker.client().await;
    c.create_topic("good", 2, 1, configs(&[("max.message.bytes", "2000")]))
        .await
        .unwrap();
    let mut p = Producer::new(c.clone(), "good", Acks::Leader)
        .await
        .unwrap();
    let records = (0..10)
        .map(|i| ProducerRecord {
            value: Some(format!("v{i}").into()),
            partition: Some(i % 2),
            ..Default::default()
        })
        .collect();
    p.send_all(records).await.unwrap();
    let before = snapshot(&c).await;

    // Topic administration.
    for name in ["", ".", "..", "a b", "a/b", "ü", &"x".repeat(250)] {
        assert_eq!(
            code_of(c.create_topic(name, 1, 1, BTreeMap::new()).await),
            ErrorCode::InvalidTopicException,
            "{name:?}"
        );
    }
    assert_eq!(
        code_of(c.create_topic("good", 1, 1, BTreeMap::new()).await),
        ErrorCode::TopicAlreadyExists
    );
    assert_eq!(
        code_of(c.create_topic("n", 0, 1, BTreeMap::new()).await),
        ErrorCode::InvalidPartitions
    );
    assert_eq!(
        code_of(c.create_topic("n", -3, 1, BTreeMap::new()).await),
        ErrorCode::InvalidPartitions
    );
    assert_eq!(
        code_of(c.create_topic("n", 1, 0, BTreeMap::new()).await),
        ErrorCode::InvalidReplicationFactor
    );
    assert_eq!(
        code_of(c.create_topic("n", 1, 3, BTreeMap::new()).await),
        ErrorCode::InvalidReplicationFactor
    );
    for bad in [
        &[("no.such.key", "1")][..],
        &[("retention.ms", "soon")],
        &[("segment.bytes", "1")],
        &[("cleanup.policy", "compact,forever")],
        &[("min.cleanable.dirty.ratio", "2")],
    ] {
        assert_eq!(
            code_of(c.create_topic("n", 1, 1, configs(bad)).await),
            ErrorCode::InvalidConfig,
            "{bad:?}"
        );
    }
    assert_eq!(
        code_of(
            c.alter_configs("good", configs(&[("bogus", "1")]), vec![])
                .await
        ),
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        code_of(
            c.alter_configs("good", configs(&[("retention.bytes", "-9")]), vec![])
                .await
        ),
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        code_of(
            c.alter_configs("good", BTreeMap::new(), vec!["bogus".into()])
                .await
        ),
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        code_of(
            c.alter_configs("nope", configs(&[("retention.ms", "1")]), vec![])
                .await
        ),
        ErrorCode::UnknownTopicOrPartition
    );
    for n in [2, 1, 0] {
        assert_eq!(
            code_of(c.create_partitions("good", n).await),
            ErrorCode::InvalidPartitions,
            "{n}"
        );
    }
    assert_eq!(
        code_of(c.create_partitions("nope", 5).await),
        ErrorCode::UnknownTopicOrPartition
    );
    assert_eq!(
        code_of(c.delete_topic("nope").await),
        ErrorCode::UnknownTopicOrPartition
    );
    assert_eq!(
        code_of(c.describe_topic("nope").await),
        ErrorCode::UnknownTopicOrPartition
    );

    // Produce.
    let produce = |topic: &'static str, partition: i32, acks: i32, records: Bytes| {
        let c = c.clone();
        async move {
            let r = c
                .produce_raw(topic, partition, acks, records)
                .await
                .unwrap();
            (ErrorCode::try_from(r.error_code).unwrap(), r.error_message)
        }
    };
    let good = batch(3, 10);
    let mut crc = good.to_vec();
    *crc.last_mut().unwrap() ^= 0x55;
    let mut magic = good.to_vec();
    magic[16] = 1;
    let mut bad_count = good.to_vec();
    bad_count[57..61].copy_from_slice(&7i32.to_be_bytes()); // record count, inside the CRC
    let crc_fixed = crc32c::crc32c(&bad_count[21..]);
    bad_count[17..21].copy_from_slice(&crc_fixed.to_be_bytes());
    let mut good_then_bad = good.to_vec();
    good_then_bad.extend_from_slice(&crc);
    let cases: Vec<(&str, &'static str, i32, i32, Bytes, ErrorCode)> = vec![
        (
            "unknown topic",
            "nope",
            0,
            1,
            good.clone(),
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            "unknown partition",
            "good",
            2,
            1,
            good.clone(),
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            "negative partition",
            "good",
            -1,
            1,
            good.clone(),
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            "over max.message.bytes",
            "good",
            0,
            1,
            batch(5, 500),
            ErrorCode::MessageTooLarge,
        ),
        (
            "crc mismatch",
            "good",
            0,
            1,
            crc.into(),
            ErrorCode::CorruptMessage,
        ),
        (
            "truncated batch",
            "good",
            0,
            1,
            good.slice(..good.len() - 5),
            ErrorCode::CorruptMessage,
        ),
        (
            "header only",
            "good",
            0,
            1,
            good.slice(..40),
            ErrorCode::CorruptMessage,
        ),
        (
            "zero bytes",
            "good",
            0,
            1,
            Bytes::from(vec![0u8; 100]),
            ErrorCode::CorruptMessage,
        ),
        (
            "old magic",
            "good",
            0,
            1,
            magic.into(),
            ErrorCode::UnsupportedForMessageFormat,
        ),
        (
            "count mismatch",
            "good",
            0,
            1,
            bad_count.into(),
            ErrorCode::InvalidRecord,
        ),
        (
            "empty",
            "good",
            0,
            1,
            Bytes::new(),
            ErrorCode::InvalidRecord,
        ),
        (
            "good then bad",
            "good",
            0,
            1,
            good_then_bad.into(),
            ErrorCode::CorruptMessage,
        ),
        (
            "bad acks",
            "good",
            0,
            5,
            good.clone(),
            ErrorCode::InvalidRequiredAcks,
        ),
    ];
    for (what, topic, partition, acks, records, want) in cases {
        let (code, message) = produce(topic, partition, acks, records).await;
        assert_eq!(code, want, "{what}: {message}");
        assert!(!message.is_empty(), "{what}: the error says why");
    }

    // Fetch and list offsets.
    for (what, topic, partition, offset, want) in [
        ("past the end", "good", 0, 6, ErrorCode::OffsetOutOfRange),
        ("negative", "good", 0, -1, ErrorCode::OffsetOutOfRange),
        (
            "unknown topic",
            "nope",
            0,
            0,
            ErrorCode::UnknownTopicOrPartition,
        ),
        (
            "unknown partition",
            "good",
            9,
            0,
            ErrorCode::UnknownTopicOrPartition,
        ),
    ] {
        let r = c
            .fetch_partition(topic, partition, offset, 1 << 20, 0)
            .await
            .unwrap();
        assert_eq!(
            ErrorCode::try_from(r.error_code).unwrap(),
            want,
            "{what}: {}",
            r.error_message
        );
    }
    assert_eq!(
        code_of(c.list_offset("good", 0, -7).await),
        ErrorCode::InvalidRequest
    );
    assert_eq!(
        code_of(c.list_offset("nope", 0, -1).await),
        ErrorCode::UnknownTopicOrPartition
    );

    assert_eq!(
        snapshot(&c).await,
        before,
        "no bad request changed anything"
    );
}

/// A codec that sends raw bytes as the gRPC message, to hand the server malformed protobuf.
#[derive(Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Bytes;
    type Decode = Bytes;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Bytes,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Bytes;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Bytes>, tonic::Status> {
        Ok(Some(src.copy_to_bytes(src.remaining())))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_frames_do_not_crash_the_broker() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut broker = Broker::start(&[]).await;
    let c = broker.client().await;
    c.create_topic("t", 1, 1, BTreeMap::new()).await.unwrap();

    // Raw TCP garbage, and an HTTP/2 preface followed by garbage.
    for payload in [
        b"\x00\x01\x02garbage\xff\xfe".to_vec(),
        [b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".as_slice(), &[0xff; 64]].concat(),
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
    ] {
        let mut s = tokio::net::TcpStream::connect(broker.address())
            .await
            .unwrap();
        let _ = s.write_all(&payload).await;
        let mut sink = [0u8; 1024];
        let _ = tokio::time::timeout(Duration::from_secs(2), s.read(&mut sink)).await;
    }

    // Well-framed gRPC calls whose protobuf bodies are garbage or truncated.
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", broker.address()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut truncated = Vec::new();
    prost::Message::encode(
        &shale_proto::v1::ProduceRequest {
            acks: 1,
            timeout_ms: 1000,
            partitions: vec![shale_proto::v1::PartitionProduceData {
                topic: "t".into(),
                partition: 0,
                records: batch(2, 10),
            }],
        },
        &mut truncated,
    )
    .unwrap();
    truncated.truncate(truncated.len() - 20);
    for (path, body) in [
        (
            "/shale.v1.Data/Produce",
            Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x01]),
        ),
        ("/shale.v1.Data/Produce", Bytes::from(truncated)),
        ("/shale.v1.Data/Fetch", Bytes::from_static(&[0x0a, 0x80])),
        (
            "/shale.v1.Admin/CreateTopic",
            Bytes::from_static(&[0x12, 0x03, 0x01]),
        ),
        ("/shale.v1.Data/NoSuchMethod", Bytes::new()),
    ] {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let r = grpc
            .unary::<Bytes, Bytes, RawCodec>(
                tonic::Request::new(body),
                tonic::codegen::http::uri::PathAndQuery::from_static(path),
                RawCodec,
            )
            .await;
        let status = r.expect_err(path);
        assert!(
            matches!(
                status.code(),
                tonic::Code::Internal | tonic::Code::InvalidArgument | tonic::Code::Unimplemented
            ),
            "{path}: {status:?}"
        );
    }

    assert!(broker.is_alive(), "broker survived; log:\n{}", broker.log());
    let c = broker.client().await;
    let r = c.produce_raw("t", 0, 1, batch(2, 10)).await.unwrap();
    assert_eq!(
        (r.error_code, r.base_offset),
        (0, 0),
        "the truncated produce wrote nothing"
    );
    let r = c.fetch_partition("t", 0, 0, 1 << 20, 0).await.unwrap();
    assert_eq!(r.high_watermark, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_long_polls_until_data_arrives_or_max_wait() {
    let broker = Broker::start(&[]).await;
    let c = broker.client().await;
    c.create_topic("lp", 1, 1, BTreeMap::new()).await.unwrap();

    // Nothing arrives: an empty answer, no error.
    let r = c.fetch_partition("lp", 0, 0, 1 << 20, 200).await.unwrap();
    assert_eq!((r.error_code, r.records.len()), (0, 0));

    // A waiting fetch is woken by a produce well before its 20 s max wait.
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move {
            c.fetch_partition("lp", 0, 0, 1 << 20, 20_000)
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the fetch waits while there is nothing to read"
    );
    c.produce_raw("lp", 0, 1, batch(4, 10)).await.unwrap();
    let r = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("woken by the produce")
        .unwrap();
    assert_eq!(r.error_code, 0);
    assert_eq!(r.high_watermark, 4);
    assert_eq!(
        shale_records::record::decode_records(&r.records)
            .unwrap()
            .len(),
        4
    );
}

/// A gRPC listener enforces its `max_request_bytes` (a larger message is refused and
/// nothing is written) and its `max_connections` (one more is closed at once while the
/// first keeps working).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_listeners_enforce_their_request_size_and_connection_limits() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let config = common::write_config(
        dir.path(),
        &format!(
            "[listeners.grpc]\n[listeners.limited]\nprotocol = \"grpc\"\n\
             listen = \"127.0.0.1:{port}\"\nmax_request_bytes = 1000\nmax_connections = 1\n"
        ),
    );
    let broker = Broker::start(&["--config", config.to_str().unwrap()]).await;
    let admin = broker.client().await;
    admin
        .create_topic("t", 1, 1, BTreeMap::new())
        .await
        .unwrap();

    let limited = Client::connect(&format!("127.0.0.1:{port}")).await.unwrap();
    let small = limited.produce_raw("t", 0, 1, batch(2, 10)).await.unwrap();
    assert_eq!(small.error_code, ErrorCode::None as i32, "{small:?}");
    let large = limited.produce_raw("t", 0, 1, batch(5, 10_000)).await;
    assert!(
        large.is_err(),
        "a 50 kB request passed a 1000-byte limit: {large:?}"
    );
    assert_eq!(admin.list_offset("t", 0, -1).await.unwrap(), Some(2));

    // The second connection is closed; the first still answers.
    let second = match Client::connect(&format!("127.0.0.1:{port}")).await {
        Ok(c) => c.list_topics().await.map(|_| ()),
        Err(e) => Err(e),
    };
    assert!(second.is_err(), "a second connection was served");
    assert!(limited.list_topics().await.is_ok());
    // The default listener is not limited.
    assert!(admin.produce_raw("t", 0, 1, batch(5, 10_000)).await.is_ok());
}
