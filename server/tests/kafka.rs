//! The Kafka listener on the wire: a real `shale-broker` and raw Kafka frames, for
//! what real clients trip over (ApiVersions fallbacks, tagged fields, pipelining,
//! acks=0, old Produce versions, Metadata's null/empty rules, MEMBER_ID_REQUIRED,
//! whole batches from mid-batch offsets) and for bad input (unknown keys,
//! unsupported versions, garbage, oversized frames), which must close the connection
//! and leave stored data alone. Real clients are exercised by `infra/kafka-compat.sh`.

mod common;

use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use common::wire::Conn;
use common::{Broker, free_port};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, StrBytes};
use shale_records::ErrorCode;
use shale_records::batch::BatchHeader;
use shale_records::record::{BatchBuilder, Record};

async fn kafka_broker() -> (Broker, String) {
    let addr = format!("127.0.0.1:{}", free_port());
    let broker = Broker::start(&["--kafka-listen", &addr]).await;
    (broker, addr)
}

/// Creates a topic through Metadata's auto-creation and waits for its leader.
async fn create(c: &mut Conn, topic: &str) {
    for _ in 0..100 {
        let m: MetadataResponse = c
            .call(ApiKey::Metadata, 9, &metadata_request(Some(&[topic])))
            .await;
        assert!(!m.brokers.is_empty(), "a Metadata answer without brokers");
        let t = &m.topics[0];
        if t.error_code == 0 && t.partitions.first().is_some_and(|p| p.leader_id.0 >= 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("topic {topic} has no leader");
}

fn batch(values: &[&str], timestamp: i64) -> Bytes {
    let mut b = BatchBuilder::new(timestamp);
    for v in values {
        b.push(Record::new(None, Some(v.as_bytes()), timestamp));
    }
    b.build()
}

fn produce_request(topic: &str, acks: i16, records: Bytes) -> ProduceRequest {
    let mut p = produce_request::PartitionProduceData::default();
    p.index = 0;
    p.records = Some(records);
    let mut t = produce_request::TopicProduceData::default();
    t.name = StrBytes::from_string(topic.into()).into();
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.acks = acks;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    r
}

fn fetch_request(topic: &str, offset: i64) -> FetchRequest {
    let mut p = fetch_request::FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = offset;
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = StrBytes::from_string(topic.into()).into();
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = (-1).into();
    r.max_wait_ms = 100;
    r.min_bytes = 1;
    r.max_bytes = 1 << 20;
    r.topics = vec![t];
    r
}

fn metadata_request(topics: Option<&[&str]>) -> MetadataRequest {
    let mut r = MetadataRequest::default();
    r.topics = topics.map(|ts| {
        ts.iter()
            .map(|t| {
                let mut mt = metadata_request::MetadataRequestTopic::default();
                mt.name = Some(StrBytes::from_string(t.to_string()).into());
                mt
            })
            .collect()
    });
    r.allow_auto_topic_creation = true;
    r
}

/// ApiVersions as clients use it: every advertised range, librdkafka's and Java's
/// fallback from a version the broker does not speak (a v0 body with
/// UNSUPPORTED_VERSION and the list), and no default-valued tagged field (Debian's
/// librdkafka 2.0.2 mis-skips them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_versions_advertise_what_old_clients_need() {
    let (_broker, addr) = kafka_broker().await;
    let mut c = Conn::connect(&addr).await;
    for version in [0, 1, 2, 3, 4] {
        let r: ApiVersionsResponse = c
            .call(ApiKey::ApiVersions, version, &ApiVersionsRequest::default())
            .await;
        assert_eq!(r.error_code, 0);
        let range = |key: ApiKey| {
            let v = r
                .api_keys
                .iter()
                .find(|v| v.api_key == key as i16)
                .unwrap_or_else(|| panic!("{key:?} not advertised"));
            (v.min_version, v.max_version)
        };
        assert_eq!(
            range(ApiKey::Produce),
            (0, 11),
            "compression needs Produce 0"
        );
        assert_eq!(range(ApiKey::Fetch), (0, 17));
        let (lo, hi) = range(ApiKey::ListOffsets);
        assert!(lo <= 1 && hi >= 1, "offsets-for-times needs 1");
        assert_eq!(range(ApiKey::Metadata), (0, 12));
        for key in [
            ApiKey::FindCoordinator,
            ApiKey::JoinGroup,
            ApiKey::SyncGroup,
            ApiKey::Heartbeat,
            ApiKey::LeaveGroup,
            ApiKey::InitProducerId,
        ] {
            assert_eq!(range(key).0, 0, "librdkafka < 2.11.1 needs {key:?} 0");
        }
        // Transactions up to the versions before KIP-890's second part (v5).
        for key in [
            ApiKey::AddPartitionsToTxn,
            ApiKey::EndTxn,
            ApiKey::TxnOffsetCommit,
        ] {
            assert_eq!(range(key), (0, 4), "{key:?}");
        }
    }
    // v3's body ends with an empty tagged-field section: no finalized-features epoch.
    c.send(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    let frame = c.recv().await.unwrap();
    assert_eq!(frame.last(), Some(&0u8), "a tagged field was sent");
    // A version the broker does not speak: a v0 body (v0 header) with the list.
    let mut header = BytesMut::new();
    header.put_i16(ApiKey::ApiVersions as i16);
    header.put_i16(99);
    header.put_i32(77);
    header.put_slice(b"\x00\x02ab garbage body");
    c.send_raw(&header).await;
    let mut frame = c.recv().await.unwrap();
    assert_eq!(frame.get_i32(), 77);
    let r = ApiVersionsResponse::decode(&mut frame, 0).unwrap();
    assert_eq!(r.error_code, ErrorCode::UnsupportedVersion as i16);
    assert!(r.api_keys.iter().any(|v| v.api_key == 18));
}

/// Bad input closes the connection (as Kafka does) and harms nothing: an unknown
/// API key, an unsupported version, a body that does not decode, a frame too short
/// for a header, a frame beyond `max_request_bytes`, a negative length.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_close_the_connection_and_lose_nothing() {
    let (_broker, addr) = kafka_broker().await;
    let mut c = Conn::connect(&addr).await;
    create(&mut c, "bad").await;
    let r: ProduceResponse = c
        .call(
            ApiKey::Produce,
            9,
            &produce_request("bad", 1, batch(&["kept"], 1_000)),
        )
        .await;
    assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    let mut garbage_body = BytesMut::new();
    garbage_body.put_i16(ApiKey::Produce as i16);
    garbage_body.put_i16(9);
    garbage_body.put_i32(5);
    garbage_body.put_slice(b"\x00\x04test\x00\xff\xff\xff\xff\x7f");
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("unknown API key", {
            let mut f = BytesMut::new();
            f.put_i16(999);
            f.put_i16(0);
            f.put_i32(1);
            f.put_i16(-1);
            f.to_vec()
        }),
        ("unsupported Fetch version", {
            let mut f = BytesMut::new();
            f.put_i16(ApiKey::Fetch as i16);
            f.put_i16(2);
            f.put_i32(1);
            f.put_i16(-1);
            f.to_vec()
        }),
        ("undecodable body", garbage_body.to_vec()),
        ("frame shorter than a header", vec![0, 3, 0]),
        // 14 bytes whose topic count would size a 154 GB allocation in the decoder.
        ("an array count far beyond the frame", {
            let mut f = BytesMut::new();
            f.put_i16(ApiKey::Metadata as i16);
            f.put_i16(0);
            f.put_i32(1);
            f.put_i16(-1);
            f.put_i32(i32::MAX);
            f.to_vec()
        }),
    ];
    for (what, frame) in cases {
        let mut bad = Conn::connect(&addr).await;
        bad.send_raw(&frame).await;
        assert!(bad.closed().await, "{what}: connection left open");
    }
    for len in [i32::MAX, -5] {
        let mut bad = Conn::connect(&addr).await;
        bad.send_bytes(&len.to_be_bytes()).await;
        assert!(bad.closed().await, "length {len}: connection left open");
    }
    // The stored record is intact, and the first connection still works.
    let f: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_request("bad", 0)).await;
    let p = &f.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 1));
    let records = p.records.clone().unwrap();
    let values: Vec<Vec<u8>> = shale_records::record::decode_records(&records)
        .unwrap()
        .into_iter()
        .map(|r| r.value.unwrap().to_vec())
        .collect();
    assert_eq!(values, [b"kept".to_vec()]);
}

/// Pipelined requests are answered in order; an acks=0 produce gets no answer at all;
/// Produce v2 with a RecordBatch v2 gets INVALID_RECORD; a fetch from inside a batch returns that
/// whole batch; ListOffsets' special timestamps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelining_acks_zero_old_produce_and_mid_batch_fetch() {
    let (_broker, addr) = kafka_broker().await;
    let mut c = Conn::connect(&addr).await;
    create(&mut c, "p").await;
    // Three requests back to back: acks=1, acks=0, acks=1.
    let first = c
        .send(
            ApiKey::Produce,
            9,
            &produce_request("p", 1, batch(&["a", "b", "c"], 1_000)),
        )
        .await;
    c.send(
        ApiKey::Produce,
        9,
        &produce_request("p", 0, batch(&["d"], 2_000)),
    )
    .await;
    let third = c
        .send(
            ApiKey::Produce,
            9,
            &produce_request("p", 1, batch(&["e", "f"], 3_000)),
        )
        .await;
    let (id, r1): (i32, ProduceResponse) = c.response(ApiKey::Produce, 9).await;
    assert_eq!(id, first);
    assert_eq!(r1.responses[0].partition_responses[0].base_offset, 0);
    let (id, r3): (i32, ProduceResponse) = c.response(ApiKey::Produce, 9).await;
    assert_eq!(id, third, "the acks=0 produce was answered");
    assert_eq!(r3.responses[0].partition_responses[0].base_offset, 4);

    // Produce v2 carrying a RecordBatch v2 (which needs v3+): INVALID_RECORD for the
    // partition, and nothing written (the high watermark below stays 6).
    let mut old = BytesMut::new();
    old.put_i16(ApiKey::Produce as i16);
    old.put_i16(2);
    old.put_i32(42);
    old.put_i16(4);
    old.put_slice(b"test");
    old.put_i16(1); // acks
    old.put_i32(1000); // timeout
    old.put_i32(1); // one topic
    old.put_i16(1);
    old.put_slice(b"p");
    old.put_i32(1); // one partition
    old.put_i32(0);
    let records = batch(&["old"], 1);
    old.put_i32(records.len() as i32);
    old.put_slice(&records);
    c.send_raw(&old).await;
    let mut frame = c.recv().await.unwrap();
    assert_eq!(frame.get_i32(), 42);
    assert_eq!(frame.get_i32(), 1);
    let name_len = frame.get_i16() as usize;
    frame.advance(name_len);
    assert_eq!(frame.get_i32(), 1);
    assert_eq!(frame.get_i32(), 0);
    assert_eq!(frame.get_i16(), ErrorCode::InvalidRecord as i16);

    // A fetch from offset 1 (inside the first batch) returns that whole batch.
    let f: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch_request("p", 1)).await;
    let p = &f.responses[0].partitions[0];
    assert_eq!(
        (p.error_code, p.high_watermark, p.last_stable_offset),
        (0, 6, 6)
    );
    let records = p.records.clone().unwrap();
    assert_eq!(BatchHeader::parse(&records).unwrap().base_offset, 0);
    // Fetch v4 (kafka-python 2.0.2) reads the same.
    let f: FetchResponse = c.call(ApiKey::Fetch, 4, &fetch_request("p", 0)).await;
    assert_eq!(f.responses[0].partitions[0].high_watermark, 6);

    // ListOffsets: latest, earliest, max timestamp, and by timestamp.
    let list = |timestamp: i64| {
        let mut p = list_offsets_request::ListOffsetsPartition::default();
        p.partition_index = 0;
        p.timestamp = timestamp;
        let mut t = list_offsets_request::ListOffsetsTopic::default();
        t.name = StrBytes::from_static_str("p").into();
        t.partitions = vec![p];
        let mut r = ListOffsetsRequest::default();
        r.replica_id = (-1).into();
        r.topics = vec![t];
        r
    };
    for (timestamp, offset) in [
        (-1, 6),
        (-2, 0),
        (-3, 4),
        (1_500, 3),
        (2_500, 4),
        (9_999, -1),
    ] {
        let r: ListOffsetsResponse = c.call(ApiKey::ListOffsets, 7, &list(timestamp)).await;
        let p = &r.topics[0].partitions[0];
        assert_eq!(
            (p.error_code, p.offset),
            (0, offset),
            "timestamp {timestamp}"
        );
    }

    // Pipelined produces to one partition append in the order they were sent.
    let mut ids = Vec::new();
    for i in 0..100 {
        let value = format!("seq-{i}");
        let request = produce_request("p", 1, batch(&[value.as_str()], 10_000 + i));
        ids.push(c.send(ApiKey::Produce, 9, &request).await);
    }
    for (i, sent) in ids.into_iter().enumerate() {
        let (id, r): (i32, ProduceResponse) = c.response(ApiKey::Produce, 9).await;
        assert_eq!(id, sent);
        let p = &r.responses[0].partition_responses[0];
        assert_eq!(
            (p.error_code, p.base_offset),
            (0, 6 + i as i64),
            "request {i}"
        );
    }
}

/// Metadata's topic-list rules (v0: empty is every topic; v1+: null is every topic,
/// empty none), the controller and topic ids; transactions refused at once;
/// JoinGroup v4+ hands a new member its id first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_rules_transactions_and_member_id_required() {
    let (_broker, addr) = kafka_broker().await;
    let mut c = Conn::connect(&addr).await;
    let _: MetadataResponse = c
        .call(ApiKey::Metadata, 4, &metadata_request(Some(&["m1", "m2"])))
        .await;
    let mut v0 = MetadataRequest::default();
    v0.topics = Some(Vec::new());
    let all: MetadataResponse = c.call(ApiKey::Metadata, 0, &v0).await;
    assert_eq!(all.topics.len(), 2, "v0: an empty list means every topic");
    let none: MetadataResponse = c.call(ApiKey::Metadata, 1, &v0).await;
    assert!(none.topics.is_empty(), "v1+: an empty list means none");
    let all: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_request(None)).await;
    assert_eq!(all.topics.len(), 2, "null means every topic");
    assert!(
        all.topics.iter().all(|t| !t.topic_id.is_nil()),
        "stable topic ids"
    );
    assert_eq!(all.controller_id.0, 0);
    let again: MetadataResponse = c.call(ApiKey::Metadata, 12, &metadata_request(None)).await;
    assert_eq!(
        all.topics.iter().map(|t| t.topic_id).collect::<Vec<_>>(),
        again.topics.iter().map(|t| t.topic_id).collect::<Vec<_>>()
    );
    let mut no_create = metadata_request(Some(&["absent"]));
    no_create.allow_auto_topic_creation = false;
    let r: MetadataResponse = c.call(ApiKey::Metadata, 9, &no_create).await;
    assert_eq!(
        r.topics[0].error_code,
        ErrorCode::UnknownTopicOrPartition as i16
    );

    let mut txn = InitProducerIdRequest::default();
    txn.transactional_id = Some(StrBytes::from_static_str("tx-1").into());
    txn.transaction_timeout_ms = 60_000;
    let first: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &txn).await;
    assert_eq!((first.error_code, first.producer_epoch), (0, 0));
    // A second instance of the id gets the same producer id at the next epoch.
    let second: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &txn).await;
    assert_eq!(
        (second.error_code, second.producer_id, second.producer_epoch),
        (0, first.producer_id, 1)
    );
    // A zombie naming the epoch before is fenced (KIP-360).
    let mut zombie = txn.clone();
    zombie.producer_id = first.producer_id;
    zombie.producer_epoch = 0;
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &zombie).await;
    assert_eq!(r.error_code, ErrorCode::ProducerFenced as i16);
    txn.transaction_timeout_ms = 0;
    let r: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &txn).await;
    assert_eq!(r.error_code, ErrorCode::InvalidTransactionTimeout as i16);
    let mut plain = InitProducerIdRequest::default();
    plain.transactional_id = None;
    let idempotent: InitProducerIdResponse = c.call(ApiKey::InitProducerId, 4, &plain).await;
    assert_eq!(idempotent.error_code, 0);
    assert!(idempotent.producer_id.0 >= 0);

    let mut join = JoinGroupRequest::default();
    join.group_id = StrBytes::from_static_str("g").into();
    join.session_timeout_ms = 10_000;
    join.rebalance_timeout_ms = 10_000;
    join.protocol_type = StrBytes::from_static_str("consumer");
    let mut protocol = join_group_request::JoinGroupRequestProtocol::default();
    protocol.name = StrBytes::from_static_str("range");
    protocol.metadata = Bytes::from_static(b"\x00\x00\x00\x00\x00\x01\x00\x02m1\xff\xff\xff\xff");
    join.protocols = vec![protocol];
    let first: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join).await;
    assert_eq!(first.error_code, ErrorCode::MemberIdRequired as i16);
    assert!(!first.member_id.is_empty());
    join.member_id = first.member_id.clone();
    let joined: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &join).await;
    assert_eq!(joined.error_code, 0);
    assert_eq!(
        (joined.member_id.clone(), joined.generation_id),
        (first.member_id, 1)
    );
    assert_eq!(joined.leader, joined.member_id);
}

/// A client over its fetch quota (`[quotas] consumer_byte_rate`) is told so in
/// `throttle_time_ms` (Fetch v8+; the broker then reads nothing more from it until
/// the time is up), still gets every record, and the metric counts it; a gRPC
/// consumer over the same quota also reads everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_fetch_quota_is_throttled_and_reads_everything() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(dir.path(), "[quotas]\nconsumer_byte_rate = 200000\n");
    let addr = format!("127.0.0.1:{}", free_port());
    let metrics = free_port();
    let broker = Broker::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--kafka-listen",
        &addr,
        "--metrics-listen",
        &format!("127.0.0.1:{metrics}"),
    ])
    .await;
    let mut c = Conn::connect(&addr).await;
    create(&mut c, "quota").await;
    let value = "q".repeat(1000);
    for _ in 0..10 {
        let values: Vec<&str> = (0..100).map(|_| value.as_str()).collect();
        let r: ProduceResponse = c
            .call(
                ApiKey::Produce,
                9,
                &produce_request("quota", -1, batch(&values, 1)),
            )
            .await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
    }
    // 1 MB to read at 200 kB/s: the first fetch already overdraws the quota.
    let mut offset = 0;
    let mut throttles = Vec::new();
    while offset < 1000 {
        let r: FetchResponse = c
            .call(ApiKey::Fetch, 11, &fetch_request("quota", offset))
            .await;
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.error_code, 0);
        throttles.push(r.throttle_time_ms);
        let records = p.records.clone().unwrap();
        let mut pos = 0;
        while pos < records.len() {
            let h = BatchHeader::parse(&records[pos..]).unwrap();
            offset = offset.max(h.last_offset() + 1);
            pos += h.total_size();
        }
        // Honour the throttle, as a client does.
        tokio::time::sleep(Duration::from_millis(r.throttle_time_ms as u64)).await;
    }
    assert!(
        throttles.iter().any(|t| *t > 0),
        "never throttled: {throttles:?}"
    );
    let text = common::http_get(metrics, "/metrics").await;
    let throttled: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("shale_fetch_throttled_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(throttled >= 1.0, "{text}");
    // The gRPC consumer (throttled by a late answer) reads every record too.
    let lines = broker.cli_ok(
        &[
            "consume",
            "quota",
            "--from-beginning",
            "--exit",
            "--format",
            "%o\\n",
        ],
        None,
    );
    assert_eq!(lines.lines().count(), 1000);
}

/// Records sent from segment files with `sendfile(2)` (a plaintext Kafka connection)
/// are byte for byte what the copying read returns (the gRPC fetch): from every
/// batch's first offset and from inside batches, with limits that cut a batch, across
/// segment boundaries, at the high watermark; and the metric shows the slices were
/// used.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_sent_from_files_equal_the_copying_read() {
    let addr = format!("127.0.0.1:{}", free_port());
    let metrics = free_port();
    let broker = Broker::start(&[
        "--kafka-listen",
        &addr,
        "--metrics-listen",
        &format!("127.0.0.1:{metrics}"),
    ])
    .await;
    let client = broker.client().await;
    // Local only: the uploader would roll and upload the segments, and local
    // retention delete them, while the test reads.
    let configs = [
        ("segment.bytes", "20000"),
        ("remote.storage.enable", "false"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    client.create_topic("slices", 1, 1, configs).await.unwrap();
    let mut c = Conn::connect(&addr).await;
    create(&mut c, "slices").await;
    let mut starts = Vec::new();
    let mut next = 0;
    for i in 0..120usize {
        let value = "s".repeat(10 + (i * 37) % 900);
        let values: Vec<&str> = (0..1 + i % 5).map(|_| value.as_str()).collect();
        let r: ProduceResponse = c
            .call(
                ApiKey::Produce,
                9,
                &produce_request("slices", -1, batch(&values, 1)),
            )
            .await;
        assert_eq!(r.responses[0].partition_responses[0].error_code, 0);
        starts.push(next);
        next += values.len() as i64;
    }
    let end = next;
    let mut offsets: Vec<i64> = starts.iter().flat_map(|&s| [s, s + 1]).collect();
    offsets.push(end);
    let mut compared = 0;
    for &offset in offsets.iter().filter(|o| **o <= end) {
        for limit in [1, 700, 5000, 1 << 20] {
            let mut req = fetch_request("slices", offset);
            req.max_bytes = limit;
            req.topics[0].partitions[0].partition_max_bytes = limit;
            req.max_wait_ms = 0;
            let r: FetchResponse = c.call(ApiKey::Fetch, 12, &req).await;
            let p = &r.responses[0].partitions[0];
            assert_eq!(p.error_code, 0, "offset {offset}");
            let sent = p.records.clone().unwrap_or_default();
            let copied = client
                .fetch_partition("slices", 0, offset, limit, 0)
                .await
                .unwrap();
            assert_eq!(copied.error_code, 0);
            assert_eq!(sent, copied.records, "offset {offset}, limit {limit}");
            compared += sent.len();
        }
    }
    assert!(compared > 100_000, "{compared} bytes compared");
    let text = common::http_get(metrics, "/metrics").await;
    let zero_copy: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("shale_fetch_zero_copy_bytes_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0);
    assert!(zero_copy > 10_000.0, "{text}");
}
