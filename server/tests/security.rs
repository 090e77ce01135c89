//! Authentication on the Kafka listener, on the wire: TLS (with client certificates
//! and certificate reload) and SASL (PLAIN, SCRAM-SHA-256/512, handshake v0 and v1,
//! re-authentication) against a real `shale-broker`, with users made by `shale user`.
//! Refused clients must get the right error, or a closed connection, and write
//! nothing. Real Kafka clients are exercised by `infra/kafka-compat.sh`.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::auth::{add_user, broker_with, end_offset, metadata, produce, produce_one};
use common::certs::{Ca, Pem};
use common::wire::Conn;
use common::{free_port, write_config};
use kafka_protocol::messages::*;
use shale_records::ErrorCode;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// TLS on a raw connection.
impl Conn {
    /// A TLS connection trusting `ca`, showing `client` (cert, key) if given.
    async fn tls(addr: &str, ca: &Pem, client: Option<&Pem>) -> std::io::Result<Self> {
        let tcp = TcpStream::connect(addr).await?;
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(ca, client)));
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut tls = connector.connect(name, tcp).await?;
        // TLS 1.3 reports a refused client certificate only on the first read.
        tls.flush().await?;
        Ok(Self::over(tls))
    }
}

fn client_config(ca: &Pem, client: Option<&Pem>) -> rustls::ClientConfig {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca.cert.as_bytes()).unwrap())
        .unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    match client {
        None => builder.with_no_client_auth(),
        Some(c) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(c.cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(c.key.as_bytes()).unwrap(),
            )
            .unwrap(),
    }
}

/// Writes the server's certificate and key (and the client CA) into `dir`.
fn write_tls(dir: &Path, server: &Pem, client_ca: Option<&Pem>) {
    std::fs::write(dir.join("server.pem"), &server.cert).unwrap();
    std::fs::write(dir.join("server.key"), &server.key).unwrap();
    if let Some(ca) = client_ca {
        std::fs::write(dir.join("client-ca.pem"), &ca.cert).unwrap();
    }
}

#[tokio::test]
async fn scram_over_tls_authenticates_and_wrong_or_missing_credentials_write_nothing() {
    let ca = Ca::new("Shale test CA");
    let server = ca.sign("localhost", true);
    let (broker, addr, _dir) = broker_with(
        "security_protocol = \"SASL_SSL\"\ntls_cert = \"$DIR/server.pem\"\ntls_key = \"$DIR/server.key\"",
        |d| write_tls(d, &server, None),
    )
    .await;
    add_user(&broker, "alice", "alice-secret", &[]);
    broker.cli_ok(&["topic", "create", "logs", "--partitions", "1"], None);

    // Each SCRAM mechanism, and PLAIN is not enabled by default.
    for mechanism in ["SCRAM-SHA-512", "SCRAM-SHA-256"] {
        let mut c = Conn::tls(&addr, &ca.pem, None).await.unwrap();
        let done = c.scram(mechanism, "alice", "alice-secret").await;
        assert_eq!(done.error_code, 0, "{mechanism}: {:?}", done.error_message);
        assert_eq!(done.session_lifetime_ms, 0, "no expiry configured");
        let m: MetadataResponse = c.call(ApiKey::Metadata, 9, &metadata()).await;
        assert!(!m.brokers.is_empty());
        produce_one(&mut c, "logs", mechanism).await;
    }
    let mut c = Conn::tls(&addr, &ca.pem, None).await.unwrap();
    let h = c.handshake(1, "PLAIN").await;
    assert_eq!(h.error_code, ErrorCode::UnsupportedSaslMechanism as i16);
    let offered: Vec<_> = h.mechanisms.iter().map(|m| m.to_string()).collect();
    assert_eq!(offered, ["SCRAM-SHA-256", "SCRAM-SHA-512"]);
    assert!(c.closed().await);

    // A wrong password: SASL_AUTHENTICATION_FAILED, then the connection closes.
    let mut c = Conn::tls(&addr, &ca.pem, None).await.unwrap();
    let done = c.scram("SCRAM-SHA-512", "alice", "guess").await;
    assert_eq!(done.error_code, ErrorCode::SaslAuthenticationFailed as i16);
    assert!(c.closed().await);
    // An unknown user, likewise.
    let mut c = Conn::tls(&addr, &ca.pem, None).await.unwrap();
    let done = c.scram("SCRAM-SHA-512", "mallory", "x").await;
    assert_eq!(done.error_code, ErrorCode::SaslAuthenticationFailed as i16);
    assert!(c.closed().await);
    // No credentials at all: a produce before authenticating closes the connection.
    let mut c = Conn::tls(&addr, &ca.pem, None).await.unwrap();
    let versions: ApiVersionsResponse = c
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .await;
    assert!(
        versions
            .api_keys
            .iter()
            .any(|k| k.api_key == ApiKey::SaslAuthenticate as i16)
    );
    c.send(ApiKey::Produce, 9, &produce("logs", "sneaky")).await;
    assert!(c.closed().await);
    // A plaintext client on the TLS listener gets nowhere.
    let mut c = Conn::connect(&addr).await;
    c.send(ApiKey::Produce, 9, &produce("logs", "plain")).await;
    assert!(c.closed().await);
    // SaslAuthenticate before a handshake.
    let mut c = Conn::tls(&addr, &ca.pem, None).await.unwrap();
    let r = c.authenticate(b"n,,n=alice,r=x").await;
    assert_eq!(r.error_code, ErrorCode::IllegalSaslState as i16);
    assert!(c.closed().await);

    assert_eq!(
        end_offset(&broker, "logs").await,
        2,
        "only the two good produces wrote"
    );
    let log = broker.log();
    assert!(
        log.contains("authentication failed"),
        "failures are audited"
    );
    assert!(!log.contains("guess"), "a password never reaches the log");
}

#[tokio::test]
async fn plain_over_sasl_plaintext_with_handshake_v0_and_v1() {
    let (broker, addr, _dir) = broker_with(
        "security_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanisms = [\"PLAIN\", \"SCRAM-SHA-256\"]",
        |_| {},
    )
    .await;
    add_user(&broker, "bob", "bob-pw", &["SCRAM-SHA-256"]);
    broker.cli_ok(&["topic", "create", "t", "--partitions", "1"], None);

    let mut c = Conn::connect(&addr).await;
    let done = c.plain_v1("bob", "bob-pw").await;
    assert_eq!(done.error_code, 0, "{:?}", done.error_message);
    assert_eq!(produce_one(&mut c, "t", "v1").await, 0);

    // v0: the token travels as a bare frame, and success is an empty bare frame.
    let mut c = Conn::connect(&addr).await;
    assert_eq!(c.handshake(0, "PLAIN").await.error_code, 0);
    c.send_raw(b"\0bob\0bob-pw").await;
    assert_eq!(c.recv().await.unwrap().len(), 0);
    assert_eq!(produce_one(&mut c, "t", "v0").await, 1);
    // v0 with a wrong password: the connection closes (v0 carries no error).
    let mut c = Conn::connect(&addr).await;
    assert_eq!(c.handshake(0, "PLAIN").await.error_code, 0);
    c.send_raw(b"\0bob\0nope").await;
    assert!(c.closed().await);

    let mut c = Conn::connect(&addr).await;
    let done = c.plain_v1("bob", "wrong").await;
    assert_eq!(done.error_code, ErrorCode::SaslAuthenticationFailed as i16);
    assert!(c.closed().await);
    // A frame larger than 512 KiB before authenticating closes the connection.
    let mut c = Conn::connect(&addr).await;
    c.send_raw(&vec![0u8; 600 * 1024]).await;
    assert!(c.closed().await);
    assert_eq!(end_offset(&broker, "t").await, 2);
}

#[tokio::test]
async fn sessions_expire_and_clients_reauthenticate_as_themselves() {
    let (broker, addr, _dir) = broker_with(
        "security_protocol = \"SASL_PLAINTEXT\"\nconnections_max_reauth_ms = 1500\nsasl_mechanisms = [\"SCRAM-SHA-512\", \"PLAIN\"]",
        |_| {},
    )
    .await;
    add_user(&broker, "carol", "c-pw", &["SCRAM-SHA-512"]);
    add_user(&broker, "dave", "d-pw", &["SCRAM-SHA-512"]);
    broker.cli_ok(&["topic", "create", "r", "--partitions", "1"], None);

    // Re-authenticating before the next request keeps the connection.
    let mut c = Conn::connect(&addr).await;
    let done = c.scram("SCRAM-SHA-512", "carol", "c-pw").await;
    assert!(
        (1..=1500).contains(&done.session_lifetime_ms),
        "{}",
        done.session_lifetime_ms
    );
    produce_one(&mut c, "r", "a").await;
    tokio::time::sleep(Duration::from_millis(1700)).await;
    let again = c.scram("SCRAM-SHA-512", "carol", "c-pw").await;
    assert_eq!(again.error_code, 0);
    assert!(again.session_lifetime_ms > 0);
    produce_one(&mut c, "r", "b").await;

    // Without re-authenticating, the first request after expiry closes it.
    let mut c = Conn::connect(&addr).await;
    assert_eq!(
        c.scram("SCRAM-SHA-512", "carol", "c-pw").await.error_code,
        0
    );
    tokio::time::sleep(Duration::from_millis(1700)).await;
    c.send(ApiKey::Produce, 9, &produce("r", "late")).await;
    assert!(c.closed().await);

    // Re-authenticating with another mechanism is refused, as in Kafka.
    let mut c = Conn::connect(&addr).await;
    assert_eq!(
        c.scram("SCRAM-SHA-512", "carol", "c-pw").await.error_code,
        0
    );
    let h = c.handshake(1, "PLAIN").await;
    assert_eq!(h.error_code, ErrorCode::UnsupportedSaslMechanism as i16);
    assert!(c.closed().await);

    // Re-authenticating as someone else is refused.
    let mut c = Conn::connect(&addr).await;
    assert_eq!(
        c.scram("SCRAM-SHA-512", "carol", "c-pw").await.error_code,
        0
    );
    let other = c.scram("SCRAM-SHA-512", "dave", "d-pw").await;
    assert_eq!(other.error_code, ErrorCode::SaslAuthenticationFailed as i16);
    assert!(c.closed().await);
    assert_eq!(end_offset(&broker, "r").await, 2);
}

#[tokio::test]
async fn client_certificates_are_required_and_certificates_reload() {
    let ca = Ca::new("Shale test CA");
    let clients = Ca::new("Shale client CA");
    let server = ca.sign("localhost", true);
    let (broker, addr, dir) = broker_with(
        "security_protocol = \"SSL\"\ntls_cert = \"$DIR/server.pem\"\ntls_key = \"$DIR/server.key\"\ntls_client_ca = \"$DIR/client-ca.pem\"",
        |d| write_tls(d, &server, Some(&clients.pem)),
    )
    .await;
    broker.cli_ok(&["topic", "create", "m", "--partitions", "1"], None);

    let good = clients.sign("writer", false);
    let mut c = Conn::tls(&addr, &ca.pem, Some(&good)).await.unwrap();
    assert_eq!(produce_one(&mut c, "m", "mtls").await, 0);

    // No client certificate, or one from another CA: the handshake fails.
    for cert in [None, Some(ca.sign("intruder", false))] {
        let refused = match Conn::tls(&addr, &ca.pem, cert.as_ref()).await {
            Err(_) => true,
            Ok(mut c) => {
                c.send(ApiKey::Produce, 9, &produce("m", "intruder")).await;
                c.closed().await
            }
        };
        assert!(refused);
    }
    assert!(broker.log().contains("TLS handshake failed"));

    // A new certificate from another CA is served to new connections.
    let ca2 = Ca::new("Shale renewed CA");
    write_tls(dir.path(), &ca2.sign("localhost", true), None);
    let mut served = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if let Ok(mut c) = Conn::tls(&addr, &ca2.pem, Some(&good)).await
            && c.try_call::<_, MetadataResponse>(ApiKey::Metadata, 9, &metadata())
                .await
                .is_some()
        {
            served = true;
            break;
        }
    }
    assert!(served, "the renewed certificate was not served");
    assert!(
        Conn::tls(&addr, &ca.pem, Some(&good)).await.is_err(),
        "the old one is gone"
    );
    assert_eq!(end_offset(&broker, "m").await, 1);
}

// Multi-threaded: a restart waits for the broker synchronously while the client's
// connection tasks must still run to close their connections.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_survive_restarts_and_are_managed_with_the_cli() {
    let (mut broker, addr, _dir) =
        broker_with("security_protocol = \"SASL_PLAINTEXT\"", |_| {}).await;
    add_user(&broker, "erin", "first", &[]);
    add_user(&broker, "erin", "second", &["SCRAM-SHA-256"]);
    let list = broker.cli_ok(&["user", "list"], None);
    assert!(list.contains("erin\tSCRAM-SHA-256\t8192"), "{list}");
    assert!(list.contains("erin\tSCRAM-SHA-512\t8192"), "{list}");
    // Iterations out of Kafka's bounds are refused.
    let out = broker.cli(
        &[
            "user",
            "create",
            "frank",
            "--password",
            "x",
            "--iterations",
            "100",
        ],
        None,
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("iterations"));

    broker.restart().await;
    let mut c = Conn::connect(&addr).await;
    assert_eq!(
        c.scram("SCRAM-SHA-256", "erin", "second").await.error_code,
        0
    );
    let mut c = Conn::connect(&addr).await;
    assert_eq!(
        c.scram("SCRAM-SHA-512", "erin", "first").await.error_code,
        0
    );

    broker.cli_ok(
        &["user", "delete", "erin", "--mechanism", "SCRAM-SHA-512"],
        None,
    );
    let mut c = Conn::connect(&addr).await;
    let r = c.scram("SCRAM-SHA-512", "erin", "first").await;
    assert_eq!(r.error_code, ErrorCode::SaslAuthenticationFailed as i16);
    broker.cli_ok(&["user", "delete", "erin"], None);
    let out = broker.cli(&["user", "delete", "erin"], None);
    assert!(!out.status.success(), "deleting a user twice is an error");
    let json = broker.cli_ok(&["user", "list", "-o", "json"], None);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["users"].as_array().unwrap().len(), 0);
}

#[tokio::test]
async fn listener_security_configs_are_checked_at_start() {
    for (keys, key) in [
        ("security_protocol = \"SSL\"", "tls_cert"),
        ("security_protocol = \"TLS\"", "security_protocol"),
        ("tls_cert = \"/x\"\ntls_key = \"/y\"", "security_protocol"),
        (
            "security_protocol = \"SASL_PLAINTEXT\"\nsasl_mechanisms = [\"GSSAPI\"]",
            "sasl_mechanisms",
        ),
        (
            "security_protocol = \"PLAINTEXT\"\nsasl_mechanisms = [\"PLAIN\"]",
            "sasl_mechanisms",
        ),
        (
            "security_protocol = \"SSL\"\ntls_cert = \"/no/such.pem\"\ntls_key = \"/no/such.key\"",
            "/no/such.pem",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = write_config(
            dir.path(),
            &format!(
                "[listeners.kafka]\nlisten = \"127.0.0.1:{}\"\n{keys}\n",
                free_port()
            ),
        );
        let out = std::process::Command::new(common::broker_bin())
            .args(["--data-dir", dir.path().join("data").to_str().unwrap()])
            .args(["--listen", &format!("127.0.0.1:{}", free_port())])
            .args(["--config", config.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{keys}: started");
        assert!(stderr.contains(key), "{keys}: {stderr}");
    }
}

/// A metastore password given through the environment (not the command line, which
/// `ps` shows) never reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metastore_password_stays_out_of_the_log() {
    let db = common::PgDatabase::create();
    // PostgreSQL here trusts local connections: the password is accepted and unused.
    let url = db.url().replacen("postgres@", "postgres:hunter2@", 1);
    assert!(url.contains(":hunter2@"), "{url}");
    let broker = common::Broker::start_with_env(&[], &[("SHALE_METASTORE_URL", &url)]).await;
    let log = broker.log();
    assert!(
        log.contains("postgres:***@"),
        "the metastore is named, redacted: {log}"
    );
    assert!(!log.contains("hunter2"), "{log}");
}
