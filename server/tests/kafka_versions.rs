//! Kafka versions on the wire against a real `shale-broker`, with raw frames: Fetch
//! naming topics by id (v13–17, KIP-516), incremental fetch sessions (KIP-227), and
//! every version Kafka 3.9 accepts of the APIs old clients use, including the ones
//! read by hand (Produce 0–2 and Fetch 0–3 in the message formats before RecordBatch
//! v2, OffsetCommit 0–1, OffsetFetch 0, ListOffsets 0, CreateTopics 0–1,
//! DescribeConfigs 0, DeleteTopics 0, OffsetForLeaderEpoch 0–1).

mod common;

use bytes::Buf;
use common::wire::{Conn, W, legacy_call, one_topic_one_partition, string};
use common::{Broker, free_port};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use shale_records::ErrorCode;
use shale_records::batch::BatchHeader;
use shale_records::record::{BatchBuilder, Record};

/// Creates a topic (Metadata v12 auto-creation), waits for its leader, and returns
/// its id.
async fn create(c: &mut Conn, topic: &str) -> uuid::Uuid {
    for _ in 0..100 {
        let mut r = MetadataRequest::default();
        let mut t = metadata_request::MetadataRequestTopic::default();
        t.name = Some(StrBytes::from_string(topic.into()).into());
        r.topics = Some(vec![t]);
        r.allow_auto_topic_creation = true;
        let m: MetadataResponse = c.call(ApiKey::Metadata, 12, &r).await;
        let t = &m.topics[0];
        if t.error_code == 0 && t.partitions.first().is_some_and(|p| p.leader_id.0 >= 0) {
            assert!(!t.topic_id.is_nil(), "Metadata v12 gives the topic's id");
            return t.topic_id;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("topic {topic} has no leader");
}

async fn produce(c: &mut Conn, topic: &str, values: &[&str]) {
    for v in values {
        let r = common::auth::produce(topic, v);
        let resp: ProduceResponse = c.call(ApiKey::Produce, 9, &r).await;
        assert_eq!(resp.responses[0].partition_responses[0].error_code, 0);
    }
}

/// A Fetch naming topics by id (partition 0 of each, from `offset`).
fn by_id(topics: &[(uuid::Uuid, i64)], session_id: i32, epoch: i32) -> FetchRequest {
    let mut r = FetchRequest::default();
    r.replica_id = (-1).into();
    r.max_wait_ms = 50;
    r.min_bytes = 1;
    r.max_bytes = 1 << 20;
    r.session_id = session_id;
    r.session_epoch = epoch;
    r.topics = topics
        .iter()
        .map(|&(id, offset)| {
            let mut p = fetch_request::FetchPartition::default();
            p.fetch_offset = offset;
            p.partition_max_bytes = 1 << 20;
            p.current_leader_epoch = -1;
            let mut t = fetch_request::FetchTopic::default();
            t.topic_id = id;
            t.partitions = vec![p];
            t
        })
        .collect();
    r
}

/// The values of every record in a partition's answer (any number of batches).
fn values(p: &fetch_response::PartitionData) -> Vec<String> {
    let mut records = p.records.clone().unwrap_or_default();
    let mut out = Vec::new();
    while !records.is_empty() {
        let size = BatchHeader::parse(&records).unwrap().total_size();
        let batch = records.split_to(size);
        for r in shale_records::record::decode_records(&batch).unwrap() {
            out.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
        }
    }
    out
}

/// (topic id, partition error, values) of each partition answered.
fn answered(f: &FetchResponse) -> Vec<(uuid::Uuid, i16, Vec<String>)> {
    f.responses
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic_id, p.error_code, values(p)))
        })
        .collect()
}

/// Every version from 13 to 17 reads a topic by its id and answers with the id; an
/// id the broker does not know is UNKNOWN_TOPIC_ID, and the topic beside it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_v13_to_v17_name_topics_by_id() {
    let addr = format!("127.0.0.1:{}", free_port());
    let _broker = Broker::start(&["--kafka-listen", &addr]).await;
    let mut c = Conn::connect(&addr).await;
    let id = create(&mut c, "by-id").await;
    produce(&mut c, "by-id", &["a", "b", "c"]).await;
    let unknown = uuid::Uuid::from_u128(12345);
    for version in 13..=17 {
        let f: FetchResponse = c
            .call(
                ApiKey::Fetch,
                version,
                &by_id(&[(unknown, 0), (id, 0)], 0, -1),
            )
            .await;
        assert_eq!((f.error_code, f.session_id), (0, 0), "v{version}");
        let abc = vec!["a".to_string(), "b".into(), "c".into()];
        assert_eq!(
            answered(&f),
            [
                (unknown, ErrorCode::UnknownTopicId as i16, vec![]),
                (id, 0, abc)
            ],
            "v{version}"
        );
        assert_eq!(f.responses[1].partitions[0].high_watermark, 3);
    }
}

/// A session: the first request names every partition and gets them all; later ones
/// name only what changed and get only partitions with news; a stale epoch or an
/// unknown session is refused with its error code, and the final epoch ends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incremental_fetch_session_answers_only_news() {
    let addr = format!("127.0.0.1:{}", free_port());
    let _broker = Broker::start(&["--kafka-listen", &addr]).await;
    let mut c = Conn::connect(&addr).await;
    let (a, b) = (create(&mut c, "sa").await, create(&mut c, "sb").await);
    produce(&mut c, "sa", &["a1"]).await;
    produce(&mut c, "sb", &["b1"]).await;

    let f: FetchResponse = c
        .call(ApiKey::Fetch, 13, &by_id(&[(a, 0), (b, 0)], 0, 0))
        .await;
    let session = f.session_id;
    assert!(session > 0, "a session was created: {f:?}");
    assert_eq!(
        answered(&f),
        [
            (a, 0, vec!["a1".to_string()]),
            (b, 0, vec!["b1".to_string()])
        ]
    );
    // Both partitions move on to offset 1: nothing new, nothing answered.
    let f: FetchResponse = c
        .call(ApiKey::Fetch, 13, &by_id(&[(a, 1), (b, 1)], session, 1))
        .await;
    assert_eq!((f.error_code, f.session_id), (0, session));
    assert_eq!(answered(&f), []);
    // A record for sb: the next request names no partition, and gets sb only.
    produce(&mut c, "sb", &["b2"]).await;
    let f: FetchResponse = c.call(ApiKey::Fetch, 13, &by_id(&[], session, 2)).await;
    assert_eq!(answered(&f), [(b, 0, vec!["b2".to_string()])]);
    assert_eq!(f.responses[0].partitions[0].high_watermark, 2);
    // sa forgotten (by id): its next record is not read, sb's is.
    produce(&mut c, "sa", &["a-x"]).await;
    produce(&mut c, "sb", &["b3"]).await;
    let mut forget = by_id(&[(b, 2)], session, 3);
    let mut gone = fetch_request::ForgottenTopic::default();
    gone.topic_id = a;
    gone.partitions = vec![0];
    forget.forgotten_topics_data = vec![gone];
    let f: FetchResponse = c.call(ApiKey::Fetch, 13, &forget).await;
    assert_eq!(answered(&f), [(b, 0, vec!["b3".to_string()])]);

    // The same epoch again, and a session that does not exist.
    let f: FetchResponse = c.call(ApiKey::Fetch, 13, &by_id(&[], session, 3)).await;
    assert_eq!(
        (f.error_code, f.responses.len()),
        (ErrorCode::InvalidFetchSessionEpoch as i16, 0)
    );
    let f: FetchResponse = c
        .call(ApiKey::Fetch, 13, &by_id(&[], session + 1000, 1))
        .await;
    assert_eq!(f.error_code, ErrorCode::FetchSessionIdNotFound as i16);
    // Topics by name in a session (v12), after the final epoch closed the first one.
    let f: FetchResponse = c
        .call(ApiKey::Fetch, 13, &by_id(&[(a, 0)], session, -1))
        .await;
    assert_eq!((f.error_code, f.session_id), (0, 0));
    let a1x = vec!["a1".to_string(), "a-x".to_string()];
    assert_eq!(answered(&f), [(a, 0, a1x.clone())]);
    let f: FetchResponse = c.call(ApiKey::Fetch, 13, &by_id(&[], session, 4)).await;
    assert_eq!(f.error_code, ErrorCode::FetchSessionIdNotFound as i16);
    let mut named = by_id(&[(uuid::Uuid::nil(), 0)], 0, 0);
    named.topics[0].topic = StrBytes::from_static_str("sa").into();
    let f: FetchResponse = c.call(ApiKey::Fetch, 12, &named).await;
    let session = f.session_id;
    assert!(session > 0);
    assert_eq!(values(&f.responses[0].partitions[0]), a1x);
    produce(&mut c, "sa", &["a2"]).await;
    let mut next = by_id(&[], session, 1);
    next.max_wait_ms = 500;
    let f: FetchResponse = c.call(ApiKey::Fetch, 12, &next).await;
    assert_eq!(f.responses[0].topic.0.as_str(), "sa");
    // Offset 0 is still the session's fetch offset: both records.
    assert_eq!(values(&f.responses[0].partitions[0]), ["a1", "a-x", "a2"]);
}

/// Values of a message set (magic 0 or 1), through the broker's own converter (its
/// layouts are checked in `shale_records::legacy`'s tests), with the magic seen.
fn message_set_values(set: &[u8]) -> (Vec<String>, Vec<i8>) {
    let mut magics = Vec::new();
    let mut rest = set;
    while rest.len() >= 17 {
        let size = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        magics.push(rest[16] as i8);
        rest = &rest[12 + size..];
    }
    if set.is_empty() {
        return (Vec::new(), magics);
    }
    let (batch, _) = shale_records::legacy::to_batch(set, 0).unwrap();
    let values = shale_records::record::decode_records(&batch)
        .unwrap()
        .into_iter()
        .map(|r| String::from_utf8(r.value.unwrap().to_vec()).unwrap())
        .collect();
    (values, magics)
}

/// Produce in every version from 0 to 11, each one record ("p0" … "p11"; v0–1 in
/// message format v0, v2 in v1, v3+ in RecordBatch v2), then Fetch in every version
/// from 0 to 17 reads all twelve in order, in the format its version reads. A message
/// set with a bad CRC is refused with CORRUPT_MESSAGE and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_produce_and_fetch_version_reads_what_the_others_wrote() {
    let addr = format!("127.0.0.1:{}", free_port());
    let http_port = free_port();
    let http = format!("127.0.0.1:{http_port}");
    let _broker = Broker::start(&["--kafka-listen", &addr, "--http-listen", &http]).await;
    let mut c = Conn::connect(&addr).await;
    let id = create(&mut c, "every").await;
    let one = |v: &str| {
        let mut b = BatchBuilder::new(1_000);
        b.push(Record::new(Some(b"k"), Some(v.as_bytes()), 1_000));
        b.build()
    };
    for version in 0..=11i16 {
        let value = format!("p{version}");
        if version <= 2 {
            let magic = if version == 2 { 1 } else { 0 };
            let (set, _) = shale_records::legacy::to_message_set(one(&value), magic, 0);
            let body = W::default()
                .i16(1)
                .i32(10_000)
                .i32(1)
                .str("every")
                .i32(1)
                .i32(0)
                .bytes(&set);
            let mut a = legacy_call(&mut c, ApiKey::Produce, version, &body.0).await;
            one_topic_one_partition(&mut a, "every");
            assert_eq!(
                (a.get_i32(), a.get_i16(), a.get_i64()),
                (0, 0, i64::from(version))
            );
            if version == 2 {
                assert_eq!(a.get_i64(), -1, "log append time: CreateTime topic");
            }
            if version >= 1 {
                assert_eq!(a.get_i32(), 0, "throttle");
            }
            assert!(a.is_empty(), "v{version}: bytes left in the answer");
        } else {
            let mut p = produce_request::PartitionProduceData::default();
            p.records = Some(one(&value));
            let mut t = produce_request::TopicProduceData::default();
            t.name = StrBytes::from_static_str("every").into();
            t.partition_data = vec![p];
            let mut r = ProduceRequest::default();
            r.acks = 1;
            r.timeout_ms = 10_000;
            r.topic_data = vec![t];
            let resp: ProduceResponse = c.call(ApiKey::Produce, version, &r).await;
            let p = &resp.responses[0].partition_responses[0];
            assert_eq!((p.error_code, p.base_offset), (0, i64::from(version)));
        }
    }
    // A corrupt message set: refused, nothing written.
    let (set, _) = shale_records::legacy::to_message_set(one("bad"), 1, 0);
    let mut set = set.to_vec();
    let last = set.len() - 1;
    set[last] ^= 0xff;
    let body = W::default()
        .i16(1)
        .i32(10_000)
        .i32(1)
        .str("every")
        .i32(1)
        .i32(0)
        .bytes(&set);
    let mut a = legacy_call(&mut c, ApiKey::Produce, 2, &body.0).await;
    a.advance(4 + 2 + 5 + 4 + 4);
    assert_eq!(a.get_i16(), ErrorCode::CorruptMessage as i16);

    let all: Vec<String> = (0..=11).map(|v| format!("p{v}")).collect();
    for version in 0..=17i16 {
        if version <= 3 {
            let mut body = W::default().i32(-1).i32(100).i32(1);
            if version == 3 {
                body = body.i32(1 << 20);
            }
            let body = body.i32(1).str("every").i32(1).i32(0).i64(0).i32(1 << 20);
            let mut a = legacy_call(&mut c, ApiKey::Fetch, version, &body.0).await;
            if version >= 1 {
                assert_eq!(a.get_i32(), 0, "throttle");
            }
            one_topic_one_partition(&mut a, "every");
            assert_eq!((a.get_i32(), a.get_i16(), a.get_i64()), (0, 0, 12));
            let n = a.get_i32() as usize;
            let (values, magics) = message_set_values(&a.split_to(n));
            assert_eq!(values, all, "v{version}");
            let magic = if version >= 2 { 1 } else { 0 };
            assert!(magics.iter().all(|&m| m == magic), "v{version}: {magics:?}");
            assert!(a.is_empty(), "v{version}: bytes left in the answer");
        } else {
            let mut r = if version >= 13 {
                by_id(&[(id, 0)], 0, -1)
            } else {
                let mut r = by_id(&[(uuid::Uuid::nil(), 0)], 0, -1);
                r.topics[0].topic = StrBytes::from_static_str("every").into();
                r
            };
            r.max_wait_ms = 100;
            let f: FetchResponse = c.call(ApiKey::Fetch, version, &r).await;
            assert_eq!(values(&f.responses[0].partitions[0]), all, "v{version}");
        }
    }
    // Three records converted up (Produce v0–2); twelve down for each of Fetch v0–3.
    let metrics = common::http_get(http_port, "/metrics").await;
    for (name, want) in [
        ("shale_produce_message_conversions_total", 3),
        ("shale_fetch_message_conversions_total", 48),
    ] {
        let line = metrics.lines().find(|l| l.starts_with(name));
        assert_eq!(line, Some(format!("{name} {want}").as_str()), "{name}");
    }
}

/// The other APIs old clients use, in every version Kafka 3.9 accepts: commits in
/// OffsetCommit 0–9 each read back by OffsetFetch of the same version (0–9); topics
/// made by CreateTopics 0–7 and seen by Metadata 0–12; DescribeConfigs 0–4;
/// ListOffsets 0–8; OffsetForLeaderEpoch 0–4; DeleteTopics 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_version_of_the_admin_and_offset_apis_answers() {
    let addr = format!("127.0.0.1:{}", free_port());
    let _broker = Broker::start(&["--kafka-listen", &addr]).await;
    let mut c = Conn::connect(&addr).await;
    create(&mut c, "old").await;
    produce(&mut c, "old", &["a", "b", "c"]).await;

    // OffsetCommit vN commits N+1, and OffsetFetch vN reads it.
    for version in 0..=9i16 {
        let offset = i64::from(version) + 1;
        let group = format!("g{version}");
        if version <= 1 {
            let mut body = W::default().str(&group);
            if version == 1 {
                body = body.i32(-1).str("");
            }
            body = body.i32(1).str("old").i32(1).i32(0).i64(offset);
            if version == 1 {
                body = body.i64(-1); // commit timestamp
            }
            let body = body.str("meta");
            let mut a = legacy_call(&mut c, ApiKey::OffsetCommit, version, &body.0).await;
            one_topic_one_partition(&mut a, "old");
            assert_eq!(
                (a.get_i32(), a.get_i16()),
                (0, 0),
                "OffsetCommit v{version}"
            );
            assert!(a.is_empty());
        } else {
            let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
            p.committed_offset = offset;
            p.committed_leader_epoch = -1;
            p.committed_metadata = Some(StrBytes::from_static_str("meta"));
            let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
            t.name = StrBytes::from_static_str("old").into();
            t.partitions = vec![p];
            let mut r = OffsetCommitRequest::default();
            r.group_id = StrBytes::from_string(group.clone()).into();
            r.generation_id_or_member_epoch = -1;
            r.retention_time_ms = -1;
            r.topics = vec![t];
            let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, version, &r).await;
            let code = resp.topics[0].partitions[0].error_code;
            assert_eq!(code, 0, "OffsetCommit v{version}");
        }
        if version == 0 {
            let body = W::default().str(&group).i32(1).str("old").i32(1).i32(0);
            let mut a = legacy_call(&mut c, ApiKey::OffsetFetch, 0, &body.0).await;
            one_topic_one_partition(&mut a, "old");
            assert_eq!((a.get_i32(), a.get_i64()), (0, offset), "OffsetFetch v0");
            assert_eq!((string(&mut a), a.get_i16()), ("meta".into(), 0));
            assert!(a.is_empty());
            continue;
        }
        let mut topic = offset_fetch_request::OffsetFetchRequestTopic::default();
        topic.name = StrBytes::from_static_str("old").into();
        topic.partition_indexes = vec![0];
        let mut r = OffsetFetchRequest::default();
        if version >= 8 {
            let mut topic8 = offset_fetch_request::OffsetFetchRequestTopics::default();
            topic8.name = topic.name.clone();
            topic8.partition_indexes = vec![0];
            let mut g = offset_fetch_request::OffsetFetchRequestGroup::default();
            g.group_id = StrBytes::from_string(group.clone()).into();
            g.topics = Some(vec![topic8]);
            r.groups = vec![g];
        } else {
            r.group_id = StrBytes::from_string(group.clone()).into();
            r.topics = Some(vec![topic]);
        }
        let resp: OffsetFetchResponse = c.call(ApiKey::OffsetFetch, version, &r).await;
        let got = if version >= 8 {
            resp.groups[0].topics[0].partitions[0].committed_offset
        } else {
            resp.topics[0].partitions[0].committed_offset
        };
        assert_eq!(got, offset, "OffsetFetch v{version}");
    }

    // CreateTopics v0–7, one topic each; Metadata v0–12 sees them all.
    for version in 0..=7i16 {
        let name = format!("ct{version}");
        if version <= 1 {
            let mut body = W::default()
                .i32(1)
                .str(&name)
                .i32(2)
                .i16(1)
                .i32(0)
                .i32(1)
                .str("retention.ms")
                .str("60000")
                .i32(10_000);
            if version == 1 {
                body = body.i8(0); // validate_only
            }
            let mut a = legacy_call(&mut c, ApiKey::CreateTopics, version, &body.0).await;
            assert_eq!(
                (a.get_i32(), string(&mut a), a.get_i16()),
                (1, name.clone(), 0)
            );
            if version == 1 {
                assert_eq!(a.get_i16(), -1, "no error message");
            }
            assert!(a.is_empty(), "CreateTopics v{version}");
        } else {
            let mut t = create_topics_request::CreatableTopic::default();
            t.name = StrBytes::from_string(name.clone()).into();
            t.num_partitions = 2;
            t.replication_factor = 1;
            let mut r = CreateTopicsRequest::default();
            r.topics = vec![t];
            r.timeout_ms = 10_000;
            let resp: CreateTopicsResponse = c.call(ApiKey::CreateTopics, version, &r).await;
            assert_eq!(resp.topics[0].error_code, 0, "CreateTopics v{version}");
        }
    }
    for version in 0..=12i16 {
        let mut r = MetadataRequest::default();
        r.topics = if version == 0 { Some(vec![]) } else { None };
        let m: MetadataResponse = c.call(ApiKey::Metadata, version, &r).await;
        for v in 0..=7 {
            let name = format!("ct{v}");
            let t = m
                .topics
                .iter()
                .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == name));
            let t = t.unwrap_or_else(|| panic!("Metadata v{version} lacks {name}"));
            assert_eq!(t.partitions.len(), 2, "Metadata v{version}: {name}");
        }
    }

    // DescribeConfigs v0–4: ct0's retention.ms, set at creation.
    for version in 0..=4i16 {
        let value = if version == 0 {
            let body = W::default()
                .i32(1)
                .i8(2)
                .str("ct0")
                .i32(1)
                .str("retention.ms");
            let mut a = legacy_call(&mut c, ApiKey::DescribeConfigs, 0, &body.0).await;
            let _throttle = a.get_i32();
            assert_eq!(a.get_i32(), 1);
            assert_eq!(a.get_i16(), 0, "DescribeConfigs v0 error");
            let _message = string(&mut a);
            assert_eq!(
                (a.get_i8(), string(&mut a), a.get_i32()),
                (2, "ct0".into(), 1)
            );
            assert_eq!(string(&mut a), "retention.ms");
            let value = string(&mut a);
            let (_read_only, is_default, _sensitive) = (a.get_u8(), a.get_u8(), a.get_u8());
            assert_eq!(is_default, 0, "set at creation: not the default");
            assert!(a.is_empty());
            value
        } else {
            let mut res = describe_configs_request::DescribeConfigsResource::default();
            res.resource_type = 2;
            res.resource_name = StrBytes::from_static_str("ct0");
            res.configuration_keys = Some(vec![StrBytes::from_static_str("retention.ms")]);
            let mut r = DescribeConfigsRequest::default();
            r.resources = vec![res];
            let resp: DescribeConfigsResponse = c.call(ApiKey::DescribeConfigs, version, &r).await;
            let configs = &resp.results[0].configs;
            configs[0].value.as_ref().unwrap().to_string()
        };
        assert_eq!(value, "60000", "DescribeConfigs v{version}");
    }

    // ListOffsets v0–8: the latest offset of "old" is 3.
    for version in 0..=8i16 {
        let latest = if version == 0 {
            let body = W::default()
                .i32(-1)
                .i32(1)
                .str("old")
                .i32(1)
                .i32(0)
                .i64(-1)
                .i32(1);
            let mut a = legacy_call(&mut c, ApiKey::ListOffsets, 0, &body.0).await;
            one_topic_one_partition(&mut a, "old");
            assert_eq!((a.get_i32(), a.get_i16(), a.get_i32()), (0, 0, 1));
            let latest = a.get_i64();
            assert!(a.is_empty());
            latest
        } else {
            let mut p = list_offsets_request::ListOffsetsPartition::default();
            p.timestamp = -1;
            p.current_leader_epoch = -1;
            let mut t = list_offsets_request::ListOffsetsTopic::default();
            t.name = StrBytes::from_static_str("old").into();
            t.partitions = vec![p];
            let mut r = ListOffsetsRequest::default();
            r.replica_id = (-1).into();
            r.topics = vec![t];
            let resp: ListOffsetsResponse = c.call(ApiKey::ListOffsets, version, &r).await;
            let p = &resp.topics[0].partitions[0];
            assert_eq!(p.error_code, 0, "ListOffsets v{version}");
            p.offset
        };
        assert_eq!(latest, 3, "ListOffsets v{version}");
    }

    // OffsetForLeaderEpoch v0–1: the end of the current epoch is the log end.
    let mut all = MetadataRequest::default();
    all.topics = None;
    let m: MetadataResponse = c.call(ApiKey::Metadata, 9, &all).await;
    let epoch = m
        .topics
        .iter()
        .find(|t| t.name.as_ref().is_some_and(|n| n.0.as_str() == "old"))
        .unwrap()
        .partitions[0]
        .leader_epoch;
    for version in 0..=1i16 {
        let body = W::default().i32(1).str("old").i32(1).i32(0).i32(epoch);
        let mut a = legacy_call(&mut c, ApiKey::OffsetForLeaderEpoch, version, &body.0).await;
        one_topic_one_partition(&mut a, "old");
        assert_eq!(
            (a.get_i16(), a.get_i32()),
            (0, 0),
            "v{version}: error, partition"
        );
        if version == 1 {
            assert_eq!(a.get_i32(), epoch);
        }
        assert_eq!(a.get_i64(), 3, "OffsetForLeaderEpoch v{version}");
        assert!(a.is_empty());
    }

    // DeleteTopics v0.
    let body = W::default().i32(1).str("ct0").i32(10_000);
    let mut a = legacy_call(&mut c, ApiKey::DeleteTopics, 0, &body.0).await;
    assert_eq!(
        (a.get_i32(), string(&mut a), a.get_i16()),
        (1, "ct0".into(), 0)
    );
    assert!(a.is_empty());
}

/// A ConsumerGroupHeartbeat of member `id` at `epoch` (0: join, subscribing to `cg`).
fn beat(
    id: &str,
    epoch: i32,
    owned: Option<&[i32]>,
    topic: uuid::Uuid,
) -> ConsumerGroupHeartbeatRequest {
    let mut r = ConsumerGroupHeartbeatRequest::default();
    r.group_id = StrBytes::from_static_str("kip848").into();
    r.member_id = StrBytes::from_string(id.into());
    r.member_epoch = epoch;
    r.rebalance_timeout_ms = if epoch == 0 { 30_000 } else { -1 };
    if epoch == 0 {
        r.subscribed_topic_names = Some(vec![StrBytes::from_static_str("cg").into()]);
    }
    r.topic_partitions = owned.map(|ps| {
        let mut tp = consumer_group_heartbeat_request::TopicPartitions::default();
        tp.topic_id = topic;
        tp.partitions = ps.to_vec();
        vec![tp]
    });
    r
}

/// The partitions of an assignment (of the one topic), if it came.
fn assigned(r: &ConsumerGroupHeartbeatResponse, topic: uuid::Uuid) -> Option<Vec<i32>> {
    let a = r.assignment.as_ref()?;
    assert!(a.topic_partitions.iter().all(|tp| tp.topic_id == topic));
    Some(
        a.topic_partitions
            .iter()
            .flat_map(|tp| tp.partitions.clone())
            .collect(),
    )
}

/// The consumer group protocol (KIP-848) on the wire: a member joins and gets every
/// partition by topic id; a second joins and gets its half only once the first has
/// given it up; commits carry member epochs (a stale one is STALE_MEMBER_EPOCH);
/// ConsumerGroupDescribe shows both; a classic JoinGroup is refused while the group
/// has members; when the first leaves, the second takes everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_group_heartbeats_assign_incrementally_by_topic_id() {
    let addr = format!("127.0.0.1:{}", free_port());
    let _broker = Broker::start(&["--kafka-listen", &addr]).await;
    let mut c = Conn::connect(&addr).await;
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = StrBytes::from_static_str("cg").into();
    t.num_partitions = 4;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 10_000;
    let created: CreateTopicsResponse = c.call(ApiKey::CreateTopics, 7, &r).await;
    let topic = created.topics[0].topic_id;
    create(&mut c, "cg").await;

    let v = 1;
    let a: ConsumerGroupHeartbeatResponse = c
        .call(ApiKey::ConsumerGroupHeartbeat, v, &beat("", 0, None, topic))
        .await;
    assert_eq!(a.error_code, 0, "{a:?}");
    let a_id = a.member_id.clone().unwrap().to_string();
    assert_eq!(assigned(&a, topic), Some(vec![0, 1, 2, 3]));
    let a_epoch = a.member_epoch;

    let b: ConsumerGroupHeartbeatResponse = c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            v,
            &beat("member-b", 0, None, topic),
        )
        .await;
    assert_eq!(
        (b.error_code, b.member_id.as_deref()),
        (0, Some("member-b"))
    );
    assert_eq!(assigned(&b, topic), Some(vec![]), "nothing is free yet");
    // A gives up two partitions (at its epoch), says so, and moves to the new epoch.
    let owned = [0, 1, 2, 3];
    let r: ConsumerGroupHeartbeatResponse = c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            v,
            &beat(&a_id, a_epoch, Some(&owned), topic),
        )
        .await;
    let kept = assigned(&r, topic).unwrap();
    assert_eq!((kept.len(), r.member_epoch), (2, a_epoch));
    let r: ConsumerGroupHeartbeatResponse = c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            v,
            &beat(&a_id, a_epoch, Some(&kept), topic),
        )
        .await;
    assert!(r.member_epoch > a_epoch);
    let a_epoch = r.member_epoch;
    let r: ConsumerGroupHeartbeatResponse = c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            v,
            &beat("member-b", b.member_epoch, Some(&[]), topic),
        )
        .await;
    let theirs = assigned(&r, topic).unwrap();
    assert_eq!(theirs.len(), 2);
    assert!(theirs.iter().all(|p| !kept.contains(p)));

    // Commits: at the member's epoch; an older one is refused.
    for (epoch, want) in [
        (a_epoch, 0),
        (a_epoch - 1, ErrorCode::StaleMemberEpoch as i16),
    ] {
        let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
        p.partition_index = kept[0];
        p.committed_offset = 0;
        let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
        t.name = StrBytes::from_static_str("cg").into();
        t.partitions = vec![p];
        let mut r = OffsetCommitRequest::default();
        r.group_id = StrBytes::from_static_str("kip848").into();
        r.generation_id_or_member_epoch = epoch;
        r.member_id = StrBytes::from_string(a_id.clone());
        r.topics = vec![t];
        let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 9, &r).await;
        assert_eq!(
            resp.topics[0].partitions[0].error_code, want,
            "epoch {epoch}"
        );
    }

    let mut d = ConsumerGroupDescribeRequest::default();
    d.group_ids = vec![StrBytes::from_static_str("kip848").into()];
    let d: ConsumerGroupDescribeResponse = c.call(ApiKey::ConsumerGroupDescribe, 0, &d).await;
    let g = &d.groups[0];
    assert_eq!(
        (g.error_code, g.group_state.as_str(), g.members.len()),
        (0, "Stable", 2)
    );
    let names = &g.members[0].assignment.topic_partitions[0].topic_name;
    assert_eq!(names.0.as_str(), "cg");

    let mut j = JoinGroupRequest::default();
    j.group_id = StrBytes::from_static_str("kip848").into();
    j.session_timeout_ms = 10_000;
    j.rebalance_timeout_ms = 10_000;
    j.protocol_type = StrBytes::from_static_str("consumer");
    let mut proto = join_group_request::JoinGroupRequestProtocol::default();
    proto.name = StrBytes::from_static_str("range");
    j.protocols = vec![proto];
    let j: JoinGroupResponse = c.call(ApiKey::JoinGroup, 5, &j).await;
    assert_eq!(j.error_code, ErrorCode::InconsistentGroupProtocol as i16);

    let left: ConsumerGroupHeartbeatResponse = c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            v,
            &beat(&a_id, -1, None, topic),
        )
        .await;
    assert_eq!((left.error_code, left.member_epoch), (0, -1));
    let r: ConsumerGroupHeartbeatResponse = c
        .call(
            ApiKey::ConsumerGroupHeartbeat,
            v,
            &beat("member-b", r.member_epoch, Some(&theirs), topic),
        )
        .await;
    let mut all = assigned(&r, topic).unwrap();
    all.sort();
    assert_eq!(all, [0, 1, 2, 3]);
}
