//! Authentication on gRPC listeners and between brokers: two real brokers on
//! PostgreSQL replicate over an internal `SASL_SSL` gRPC listener as the broker user,
//! while a process without that user's password, or with an ordinary user's, cannot
//! replicate from a leader. The CLI reaches the internal listener with TLS and
//! credentials.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::certs::Ca;
use common::{Broker, PgDatabase, cli_bin, free_port, write_config};
use shale_proto::v1::replication_client::ReplicationClient;
use shale_proto::v1::{ReplicaFetchPartition, ReplicaFetchRequest, ReplicaFetchResponse};
use shale_records::ErrorCode;

const BROKER_PASSWORD: &str = "inter-broker-secret";

/// A broker's config: the default `grpc` listener (plaintext, from `--listen`), and
/// the `internal` one brokers replicate over.
fn config(dir: &Path, internal_port: u16) -> String {
    let d = dir.display();
    format!(
        "[listeners.internal]\nprotocol = \"grpc\"\nlisten = \"127.0.0.1:{internal_port}\"\n\
         security_protocol = \"SASL_SSL\"\ntls_cert = \"{d}/server.pem\"\ntls_key = \"{d}/server.key\"\n\
         [cluster]\ninter_broker_listener = \"internal\"\ninter_broker_user = \"broker\"\n\
         inter_broker_password_file = \"{d}/broker-password\"\ninter_broker_tls_ca = \"{d}/ca.pem\"\n\
         [authorization]\nenable = true\nsuper_users = [\"User:broker\"]\n"
    )
}

/// The CLI against `address` with the security options `security` and the
/// environment `env`.
fn cli(address: &str, security: &[&str], env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut child = Command::new(cli_bin())
        .arg("--bootstrap")
        .arg(address)
        .args(security)
        .args(args)
        .env_remove("SHALE_AUTH_USER")
        .env_remove("SHALE_AUTH_PASSWORD")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start shale");
    if args.first() == Some(&"produce") {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"a\nb\nc\n").unwrap();
    } else {
        drop(child.stdin.take());
    }
    child.wait_with_output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// One replica fetch of partition 0 of `topic_id` over `channel`, sending
/// `authorization` if given.
async fn replica_fetch(
    channel: tonic::transport::Channel,
    topic_id: &str,
    authorization: Option<&str>,
) -> Result<ReplicaFetchResponse, tonic::Status> {
    let request = ReplicaFetchRequest {
        replica_id: 99,
        max_wait_ms: 0,
        max_bytes: 1 << 20,
        replica_epoch: 0,
        partitions: vec![ReplicaFetchPartition {
            topic_id: topic_id.into(),
            partition: 0,
            current_leader_epoch: -1,
            fetch_offset: 0,
            last_fetched_epoch: -1,
            partition_max_bytes: 1 << 20,
            state_version: 0,
            log_start_offset: None,
        }],
    };
    let mut call = tonic::Request::new(futures::stream::iter([request]));
    if let Some(a) = authorization {
        call.metadata_mut()
            .insert("authorization", a.parse().unwrap());
    }
    let mut answers = ReplicationClient::new(channel)
        .replica_fetch(call)
        .await?
        .into_inner();
    Ok(answers.message().await?.expect("an answer"))
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    let e = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {e}")
}

async fn tls_channel(address: &str, ca: &str) -> tonic::transport::Channel {
    use tonic::transport::{Certificate, ClientTlsConfig, Endpoint};
    Endpoint::from_shared(format!("https://{address}"))
        .unwrap()
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca)))
        .unwrap()
        .connect()
        .await
        .unwrap()
}

// Multi-threaded: the brokers' CLI calls block while the test's clients run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn brokers_replicate_as_the_broker_user_and_no_one_else_can() {
    let db = PgDatabase::create();
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Shale inter-broker CA");
    let server = ca.sign("broker", true);
    std::fs::write(dir.path().join("ca.pem"), &ca.pem.cert).unwrap();
    std::fs::write(dir.path().join("server.pem"), &server.cert).unwrap();
    std::fs::write(dir.path().join("server.key"), &server.key).unwrap();
    std::fs::write(
        dir.path().join("broker-password"),
        format!("{BROKER_PASSWORD}\n"),
    )
    .unwrap();
    let objects = format!("file://{}", dir.path().join("objects").display());
    let mut brokers = Vec::new();
    let mut internal = Vec::new();
    for id in 1..=2 {
        let port = free_port();
        let sub = dir.path().join(format!("b{id}"));
        std::fs::create_dir_all(&sub).unwrap();
        let config = write_config(&sub, &config(dir.path(), port));
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
        internal.push(format!("127.0.0.1:{port}"));
    }
    let logs = brokers.iter().map(Broker::log).collect::<String>();
    assert!(
        logs.contains("created the inter-broker user's SCRAM credentials"),
        "{logs}"
    );
    assert!(
        !logs.contains(BROKER_PASSWORD),
        "the password reached a log"
    );

    // The CLI as the broker user, over TLS: create a replicated topic and write to it
    // with acks=all. With min.insync.replicas=2 the write is acknowledged only once
    // the follower has fetched it from the leader, as the broker user.
    let ca_path = dir.path().join("ca.pem");
    let tls = ["--tls-ca", ca_path.to_str().unwrap()];
    let as_broker = [
        ("SHALE_AUTH_USER", "broker"),
        ("SHALE_AUTH_PASSWORD", BROKER_PASSWORD),
    ];
    let ok = |o: Output| {
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    ok(cli(
        &internal[0],
        &tls,
        &as_broker,
        &[
            "topic",
            "create",
            "r",
            "--partitions",
            "1",
            "--replication-factor",
            "2",
            "--config",
            "min.insync.replicas=2",
        ],
    ));
    ok(cli(
        &internal[0],
        &tls,
        &as_broker,
        &["produce", "r", "--acks", "all"],
    ));
    // Both replicas in sync.
    let deadline = Instant::now() + Duration::from_secs(20);
    let topic_id = loop {
        let out = ok(cli(
            &internal[1],
            &tls,
            &as_broker,
            &["topic", "describe", "r", "-o", "json"],
        ));
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        let v = if v.is_array() { v[0].clone() } else { v };
        let isr = v["partitions"][0]["isr"].as_array().map_or(0, Vec::len);
        if isr == 2 {
            break v["topic_id"].as_str().unwrap().to_string();
        }
        assert!(
            Instant::now() < deadline,
            "the follower never joined the ISR: {out}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let consumed = ok(cli(
        &internal[1],
        &tls,
        &as_broker,
        &["consume", "r", "--from-beginning", "--max-messages", "3"],
    ));
    assert_eq!(consumed, "a\nb\nc\n");

    // Without credentials, with a wrong password, or without TLS: refused.
    let o = cli(&internal[0], &tls, &[], &["topic", "list"]);
    assert!(
        !o.status.success() && stderr(&o).contains("requires a user and password"),
        "{}",
        stderr(&o)
    );
    let wrong = [
        ("SHALE_AUTH_USER", "broker"),
        ("SHALE_AUTH_PASSWORD", "guess"),
    ];
    let o = cli(&internal[0], &tls, &wrong, &["topic", "list"]);
    assert!(
        !o.status.success() && stderr(&o).contains("authentication failed"),
        "{}",
        stderr(&o)
    );
    let o = cli(&internal[0], &[], &as_broker, &["topic", "list"]);
    assert!(!o.status.success(), "plaintext reached a TLS listener");

    // An ordinary user, made by the broker user.
    std::fs::write(dir.path().join("alice-password"), "alice-pw").unwrap();
    ok(cli(
        &internal[0],
        &tls,
        &as_broker,
        &[
            "user",
            "create",
            "alice",
            "--password-file",
            dir.path().join("alice-password").to_str().unwrap(),
        ],
    ));

    // Posing as a follower: refused for a wrong password, for an ordinary user, and
    // for an anonymous caller on the plaintext listener; nothing is returned.
    let leader = &internal[0];
    let ca_pem = ca.pem.cert.as_str();
    let internal_fetch = async |credentials: Option<(&str, &str)>| {
        let authorization = credentials.map(|(u, p)| basic(u, p));
        replica_fetch(
            tls_channel(leader, ca_pem).await,
            &topic_id,
            authorization.as_deref(),
        )
        .await
    };
    for credentials in [None, Some(("broker", "guess"))] {
        let status = internal_fetch(credentials).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status}");
    }
    let refused = |r: ReplicaFetchResponse| {
        let p = &r.partitions[0];
        assert_eq!(
            p.error_code,
            ErrorCode::ClusterAuthorizationFailed as i32,
            "{p:?}"
        );
        assert!(p.records.is_empty());
    };
    refused(internal_fetch(Some(("alice", "alice-pw"))).await.unwrap());
    for b in &brokers {
        let plain = tonic::transport::Endpoint::from_shared(format!("http://{}", b.address()))
            .unwrap()
            .connect()
            .await
            .unwrap();
        refused(replica_fetch(plain, &topic_id, None).await.unwrap());
    }
    // The broker user passes the same checks (the caller is no replica, so the
    // partition may still be refused, but not for authorization).
    let r = internal_fetch(Some(("broker", BROKER_PASSWORD)))
        .await
        .unwrap();
    let p = &r.partitions[0];
    assert_ne!(
        p.error_code,
        ErrorCode::ClusterAuthorizationFailed as i32,
        "{p:?}"
    );
}

/// A gRPC listener with client certificates: the CLI's certificate subject is its
/// principal (here a super user); without a certificate, or with one from another CA,
/// the handshake fails.
#[tokio::test]
async fn grpc_clients_authenticate_with_certificates() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("Shale gRPC CA");
    let rogue = Ca::new("Someone else");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    let server = ca.sign("broker", true);
    let admin = ca.sign("admin", false);
    let intruder = rogue.sign("admin", false);
    let (ca_pem, server_pem, server_key) = (
        write("ca.pem", &ca.pem.cert),
        write("server.pem", &server.cert),
        write("server.key", &server.key),
    );
    let (admin_pem, admin_key) = (
        write("admin.pem", &admin.cert),
        write("admin.key", &admin.key),
    );
    let (rogue_pem, rogue_key) = (
        write("rogue.pem", &intruder.cert),
        write("rogue.key", &intruder.key),
    );
    let port = free_port();
    let config = write_config(
        dir.path(),
        &format!(
            "[listeners.secure]\nprotocol = \"grpc\"\nlisten = \"127.0.0.1:{port}\"\n\
             security_protocol = \"SSL\"\ntls_cert = \"{server_pem}\"\ntls_key = \"{server_key}\"\n\
             tls_client_ca = \"{ca_pem}\"\n\
             [authorization]\nenable = true\nsuper_users = [\"User:O=Shale Tests,CN=admin\"]\n"
        ),
    );
    let broker = Broker::start(&["--config", config.to_str().unwrap()]).await;
    let secure = format!("127.0.0.1:{port}");
    let as_admin = [
        "--tls-ca",
        &ca_pem,
        "--tls-cert",
        &admin_pem,
        "--tls-key",
        &admin_key,
    ];
    let o = cli(&secure, &as_admin, &[], &["topic", "create", "t"]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Anonymous on the plaintext listener: not allowed to create topics.
    let o = cli(&broker.address(), &[], &[], &["topic", "create", "u"]);
    assert!(
        !o.status.success() && stderr(&o).contains("TOPIC_AUTHORIZATION_FAILED"),
        "{}",
        stderr(&o)
    );
    for security in [
        vec!["--tls-ca", &ca_pem],
        vec![
            "--tls-ca",
            &ca_pem,
            "--tls-cert",
            &rogue_pem,
            "--tls-key",
            &rogue_key,
        ],
    ] {
        let o = cli(&secure, &security, &[], &["topic", "list"]);
        assert!(!o.status.success(), "{security:?} was let in");
    }
    let listed = cli(&secure, &as_admin, &[], &["topic", "list"]);
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), "t");
}
