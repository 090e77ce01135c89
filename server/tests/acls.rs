//! Authorization with Kafka's ACLs on real brokers: users authenticate with SASL on
//! the Kafka listener, ACLs are managed with `shale acl` and with Kafka's CreateAcls,
//! DescribeAcls and DeleteAcls, and every refusal is the right authorization error
//! with nothing written. The gRPC listener does not authenticate yet: its callers
//! (the CLI here) are `User:ANONYMOUS`, made a super user in these brokers' config.

mod common;

use std::time::Duration;

use common::auth::{add_user, end_offset, metadata, produce, produce_one};
use common::wire::Conn;
use common::{Broker, PgDatabase, free_port, write_config};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use shale_records::ErrorCode;

const AUTHORIZATION: &str =
    "[authorization]\nenable = true\nsuper_users = [\"User:admin\", \"User:ANONYMOUS\"]\n";

fn listener(port: u16) -> String {
    format!(
        "[listeners.kafka]\nlisten = \"127.0.0.1:{port}\"\nsecurity_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanisms = [\"PLAIN\", \"SCRAM-SHA-512\"]\n"
    )
}

/// A broker with authorization on; its Kafka address.
async fn secured_broker() -> (Broker, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let config = write_config(dir.path(), &format!("{}{AUTHORIZATION}", listener(port)));
    let broker = Broker::start(&["--config", config.to_str().unwrap()]).await;
    for (user, pw) in [
        ("admin", "admin-pw"),
        ("alice", "alice-pw"),
        ("bob", "bob-pw"),
    ] {
        add_user(&broker, user, pw, &["SCRAM-SHA-512"]);
    }
    (broker, format!("127.0.0.1:{port}"), dir)
}

async fn login(addr: &str, user: &str) -> Conn {
    let mut c = Conn::connect(addr).await;
    let done = c.plain_v1(user, &format!("{user}-pw")).await;
    assert_eq!(done.error_code, 0, "{user}: {:?}", done.error_message);
    c
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn fetch(topic: &str) -> FetchRequest {
    let mut p = fetch_request::FetchPartition::default();
    p.partition_max_bytes = 1 << 20;
    let mut t = fetch_request::FetchTopic::default();
    t.topic = s(topic).into();
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = (-1).into();
    r.max_wait_ms = 100;
    r.min_bytes = 1;
    r.max_bytes = 1 << 20;
    r.topics = vec![t];
    r
}

/// A fetch's error code and record bytes of partition 0.
async fn fetch_code(c: &mut Conn, topic: &str) -> (i16, usize) {
    let r: FetchResponse = c.call(ApiKey::Fetch, 12, &fetch(topic)).await;
    let p = &r.responses[0].partitions[0];
    (p.error_code, p.records.as_ref().map_or(0, |b| b.len()))
}

async fn produce_code(c: &mut Conn, topic: &str) -> i16 {
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &produce(topic, "x")).await;
    r.responses[0].partition_responses[0].error_code
}

fn named_metadata(topics: &[&str]) -> MetadataRequest {
    let mut r = MetadataRequest::default();
    r.topics = Some(
        topics
            .iter()
            .map(|t| {
                let mut m = metadata_request::MetadataRequestTopic::default();
                m.name = Some(s(t).into());
                m
            })
            .collect(),
    );
    r
}

async fn topics_seen(c: &mut Conn) -> Vec<String> {
    let m: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata()).await;
    let mut names: Vec<String> = m
        .topics
        .iter()
        .map(|t| t.name.as_ref().unwrap().to_string())
        .collect();
    names.sort();
    names
}

async fn commit_code(c: &mut Conn, group: &str, topic: &str) -> i16 {
    let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
    p.committed_offset = 1;
    let mut t = offset_commit_request::OffsetCommitRequestTopic::default();
    t.name = s(topic).into();
    t.partitions = vec![p];
    let mut r = OffsetCommitRequest::default();
    r.group_id = s(group).into();
    r.generation_id_or_member_epoch = -1;
    r.topics = vec![t];
    let resp: OffsetCommitResponse = c.call(ApiKey::OffsetCommit, 8, &r).await;
    resp.topics[0].partitions[0].error_code
}

async fn coordinator_code(c: &mut Conn, group: &str) -> i16 {
    let mut r = FindCoordinatorRequest::default();
    r.key = s(group);
    let resp: FindCoordinatorResponse = c.call(ApiKey::FindCoordinator, 3, &r).await;
    resp.error_code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acls_decide_what_each_principal_may_do() {
    let (mut broker, addr, _dir) = secured_broker().await;
    for t in ["logs.app", "billing"] {
        broker.cli_ok(&["topic", "create", t, "--partitions", "1"], None);
    }
    // A super user writes everywhere.
    let mut admin = login(&addr, "admin").await;
    produce_one(&mut admin, "logs.app", "a1").await;
    produce_one(&mut admin, "billing", "b1").await;

    // No ACL at all: alice may do nothing, and sees no topic.
    let mut alice = login(&addr, "alice").await;
    assert_eq!(topics_seen(&mut alice).await, Vec::<String>::new());
    assert_eq!(
        fetch_code(&mut alice, "logs.app").await.0,
        ErrorCode::TopicAuthorizationFailed as i16
    );

    // READ on the prefix `logs.`: she reads logs.app, not billing, and does not see it.
    broker.cli_ok(
        &[
            "acl",
            "add",
            "--topic",
            "logs.",
            "--prefixed",
            "--principal",
            "User:alice",
            "--operation",
            "READ",
        ],
        None,
    );
    let (code, bytes) = fetch_code(&mut alice, "logs.app").await;
    assert_eq!(code, 0);
    assert!(bytes > 0, "alice reads logs.app's record");
    assert_eq!(
        fetch_code(&mut alice, "billing").await.0,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    assert_eq!(topics_seen(&mut alice).await, ["logs.app"]);
    let m: MetadataResponse = alice
        .call(ApiKey::Metadata, 9, &named_metadata(&["billing"]))
        .await;
    assert_eq!(
        m.topics[0].error_code,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    // Reading is not writing: nothing is written.
    assert_eq!(
        produce_code(&mut alice, "logs.app").await,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    assert_eq!(end_offset(&broker, "logs.app").await, 1);

    // A consumer group needs READ on the group.
    assert_eq!(
        coordinator_code(&mut alice, "readers").await,
        ErrorCode::GroupAuthorizationFailed as i16
    );
    assert_eq!(
        commit_code(&mut alice, "readers", "logs.app").await,
        ErrorCode::GroupAuthorizationFailed as i16
    );
    broker.cli_ok(
        &[
            "acl",
            "add",
            "--group",
            "readers",
            "--principal",
            "User:alice",
            "--operation",
            "READ",
        ],
        None,
    );
    assert_eq!(coordinator_code(&mut alice, "readers").await, 0);
    assert_eq!(commit_code(&mut alice, "readers", "logs.app").await, 0);
    // …and READ on each topic it commits.
    assert_eq!(
        commit_code(&mut alice, "readers", "billing").await,
        ErrorCode::TopicAuthorizationFailed as i16
    );

    // DENY wins over ALLOW.
    broker.cli_ok(
        &[
            "acl",
            "add",
            "--topic",
            "logs.app",
            "--principal",
            "User:alice",
            "--operation",
            "READ",
            "--deny",
        ],
        None,
    );
    assert_eq!(
        fetch_code(&mut alice, "logs.app").await.0,
        ErrorCode::TopicAuthorizationFailed as i16
    );

    // bob may write billing (WRITE implies DESCRIBE), nothing else.
    broker.cli_ok(
        &[
            "acl",
            "add",
            "--topic",
            "billing",
            "--principal",
            "User:bob",
            "--operation",
            "WRITE",
        ],
        None,
    );
    let mut bob = login(&addr, "bob").await;
    assert_eq!(produce_code(&mut bob, "billing").await, 0);
    assert_eq!(topics_seen(&mut bob).await, ["billing"]);
    assert_eq!(
        fetch_code(&mut bob, "billing").await.0,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    // Cluster operations: refused to bob, allowed to the super user.
    let mut req = CreateTopicsRequest::default();
    let mut t = create_topics_request::CreatableTopic::default();
    t.name = s("bobs").into();
    t.num_partitions = 1;
    t.replication_factor = 1;
    req.topics = vec![t];
    req.timeout_ms = 10_000;
    let r: CreateTopicsResponse = bob.call(ApiKey::CreateTopics, 7, &req).await;
    assert_eq!(
        r.topics[0].error_code,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    let r: CreateTopicsResponse = admin.call(ApiKey::CreateTopics, 7, &req).await;
    assert_eq!(r.topics[0].error_code, 0);
    let r: DescribeAclsResponse = bob.call(ApiKey::DescribeAcls, 3, &any_acls()).await;
    assert_eq!(r.error_code, ErrorCode::ClusterAuthorizationFailed as i16);

    // Kafka's ACL APIs, as the super user: describe, create, delete.
    let r: DescribeAclsResponse = admin.call(ApiKey::DescribeAcls, 3, &any_acls()).await;
    assert_eq!(r.error_code, 0);
    let entries: usize = r.resources.iter().map(|res| res.acls.len()).sum();
    assert_eq!(entries, 4, "{r:?}");
    let mut create = CreateAclsRequest::default();
    let mut c = create_acls_request::AclCreation::default();
    c.resource_type = 2;
    c.resource_name = s("billing");
    c.resource_pattern_type = 3;
    c.principal = s("User:alice");
    c.host = s("*");
    c.operation = 3;
    c.permission_type = 3;
    create.creations = vec![c.clone()];
    let r: CreateAclsResponse = admin.call(ApiKey::CreateAcls, 3, &create).await;
    assert_eq!(r.results[0].error_code, 0);
    assert_eq!(
        fetch_code(&mut alice, "billing").await.0,
        0,
        "in effect at once"
    );
    // A malformed binding is refused alone.
    c.principal = s("alice");
    create.creations = vec![c];
    let r: CreateAclsResponse = admin.call(ApiKey::CreateAcls, 3, &create).await;
    assert_eq!(r.results[0].error_code, ErrorCode::InvalidRequest as i16);

    // ACLs survive a restart.
    broker.restart().await;
    let mut admin = login(&addr, "admin").await;
    let mut alice = login(&addr, "alice").await;
    assert_eq!(fetch_code(&mut alice, "billing").await.0, 0);
    assert_eq!(
        fetch_code(&mut alice, "logs.app").await.0,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    let listed = broker.cli_ok(&["acl", "list", "--principal", "User:alice"], None);
    assert_eq!(listed.lines().count(), 1 + 4, "{listed}");

    let mut delete = DeleteAclsRequest::default();
    let mut f = delete_acls_request::DeleteAclsFilter::default();
    f.resource_type_filter = 2;
    f.resource_name_filter = Some(s("billing"));
    f.pattern_type_filter = 3;
    f.principal_filter = Some(s("User:alice"));
    f.host_filter = None;
    f.operation = 1;
    f.permission_type = 1;
    delete.filters = vec![f];
    let r: DeleteAclsResponse = admin.call(ApiKey::DeleteAcls, 3, &delete).await;
    assert_eq!(r.filter_results[0].matching_acls.len(), 1);
    assert_eq!(
        fetch_code(&mut alice, "billing").await.0,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    let removed = broker.cli_ok(
        &[
            "acl",
            "remove",
            "--topic",
            "logs.",
            "--prefixed",
            "--principal",
            "User:alice",
        ],
        None,
    );
    assert!(removed.contains("removed 1"), "{removed}");
    assert_eq!(
        fetch_code(&mut alice, "logs.app").await.0,
        ErrorCode::TopicAuthorizationFailed as i16
    );
    assert!(broker.log().contains("denied"), "refusals are audited");
}

fn any_acls() -> DescribeAclsRequest {
    let mut r = DescribeAclsRequest::default();
    // The codec's defaults are empty names, which match nothing: any is null.
    r.resource_name_filter = None;
    r.principal_filter = None;
    r.host_filter = None;
    r.resource_type_filter = 1;
    r.pattern_type_filter = 1;
    r.operation = 1;
    r.permission_type = 1;
    r
}

/// An ACL added through one broker is in force on the others within a second or so
/// (PostgreSQL's notifications; polling is the fallback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_changes_reach_every_broker_of_a_cluster() {
    let db = PgDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let objects = format!("file://{}", dir.path().join("objects").display());
    let mut brokers = Vec::new();
    let mut kafka = Vec::new();
    for id in 1..=3 {
        let port = free_port();
        let sub = dir.path().join(format!("b{id}"));
        std::fs::create_dir_all(&sub).unwrap();
        let config = write_config(&sub, &format!("{}{AUTHORIZATION}", listener(port)));
        let id = id.to_string();
        brokers.push(
            Broker::start(&[
                "--config",
                config.to_str().unwrap(),
                "--broker-id",
                &id,
                "--metastore-url",
                &db.url(),
                "--object-store-url",
                &objects,
            ])
            .await,
        );
        kafka.push(format!("127.0.0.1:{port}"));
    }
    add_user(&brokers[0], "alice", "alice-pw", &["SCRAM-SHA-512"]);
    brokers[0].cli_ok(
        &[
            "topic",
            "create",
            "shared",
            "--partitions",
            "3",
            "--replication-factor",
            "3",
        ],
        None,
    );
    // The user reaches the other brokers too.
    let mut conns = Vec::new();
    for addr in &kafka {
        let mut c = None;
        for _ in 0..50 {
            let mut conn = Conn::connect(addr).await;
            if conn.plain_v1("alice", "alice-pw").await.error_code == 0 {
                c = Some(conn);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        conns.push(c.expect("the user did not reach every broker"));
    }
    for c in &mut conns {
        assert_eq!(topics_seen(c).await, Vec::<String>::new());
    }
    brokers[0].cli_ok(
        &[
            "acl",
            "add",
            "--topic",
            "shared",
            "--principal",
            "User:alice",
            "--operation",
            "DESCRIBE",
        ],
        None,
    );
    for (i, c) in conns.iter_mut().enumerate() {
        let mut seen = false;
        for _ in 0..50 {
            if topics_seen(c).await == ["shared"] {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(seen, "broker {} did not apply the ACL within 5 s", i + 1);
    }
    brokers[2].cli_ok(
        &[
            "acl",
            "remove",
            "--topic",
            "shared",
            "--principal",
            "User:alice",
        ],
        None,
    );
    for c in &mut conns {
        let mut gone = false;
        for _ in 0..50 {
            if topics_seen(c).await.is_empty() {
                gone = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(gone, "an ACL removal did not reach every broker");
    }
}
