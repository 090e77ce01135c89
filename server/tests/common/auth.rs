//! Authenticated raw Kafka connections: SASL (PLAIN and SCRAM, RFC 5802's client
//! side) on [`Conn`], a broker whose `kafka` listener has security keys, and the few
//! requests the security tests make.

use std::path::Path;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use shale_records::record::{BatchBuilder, Record};

use super::wire::Conn;
use super::{Broker, free_port, write_config};

impl Conn {
    pub(crate) async fn handshake(
        &mut self,
        version: i16,
        mechanism: &str,
    ) -> SaslHandshakeResponse {
        let mut r = SaslHandshakeRequest::default();
        r.mechanism = StrBytes::from_string(mechanism.into());
        self.call(ApiKey::SaslHandshake, version, &r).await
    }

    pub(crate) async fn authenticate(&mut self, token: &[u8]) -> SaslAuthenticateResponse {
        let mut r = SaslAuthenticateRequest::default();
        r.auth_bytes = Bytes::copy_from_slice(token);
        self.call(ApiKey::SaslAuthenticate, 2, &r).await
    }

    /// SCRAM through SaslHandshake v1 and SaslAuthenticate: the last answer.
    pub(crate) async fn scram(
        &mut self,
        mechanism: &str,
        user: &str,
        password: &str,
    ) -> SaslAuthenticateResponse {
        let h = self.handshake(1, mechanism).await;
        assert_eq!(h.error_code, 0, "handshake for {mechanism}");
        let client = ScramClient::new(mechanism, user);
        let first = self.authenticate(client.first.as_bytes()).await;
        if first.error_code != 0 {
            return first;
        }
        let server_first = std::str::from_utf8(&first.auth_bytes).unwrap().to_string();
        let (last, expected) = client.last(password, &server_first);
        let done = self.authenticate(last.as_bytes()).await;
        if done.error_code == 0 {
            assert_eq!(
                std::str::from_utf8(&done.auth_bytes).unwrap(),
                expected,
                "the broker proves it knows the credential"
            );
        }
        done
    }

    pub(crate) async fn plain_v1(
        &mut self,
        user: &str,
        password: &str,
    ) -> SaslAuthenticateResponse {
        assert_eq!(self.handshake(1, "PLAIN").await.error_code, 0);
        self.authenticate(format!("\0{user}\0{password}").as_bytes())
            .await
    }
}

/// The client's side of SCRAM (RFC 5802).
pub(crate) struct ScramClient {
    mechanism: &'static str,
    first: String,
    bare: String,
}

impl ScramClient {
    pub(crate) fn new(mechanism: &str, user: &str) -> Self {
        let bare = format!("n={user},r=clientnonce{}", free_port());
        Self {
            mechanism: if mechanism == "SCRAM-SHA-256" {
                "SCRAM-SHA-256"
            } else {
                "SCRAM-SHA-512"
            },
            first: format!("n,,{bare}"),
            bare,
        }
    }

    /// The final message and the server's final message it should get back.
    pub(crate) fn last(&self, password: &str, server_first: &str) -> (String, String) {
        let (hmac, digest, pbkdf2) = match self.mechanism {
            "SCRAM-SHA-256" => (
                ring::hmac::HMAC_SHA256,
                &ring::digest::SHA256,
                ring::pbkdf2::PBKDF2_HMAC_SHA256,
            ),
            _ => (
                ring::hmac::HMAC_SHA512,
                &ring::digest::SHA512,
                ring::pbkdf2::PBKDF2_HMAC_SHA512,
            ),
        };
        let attr = |k: &str| {
            server_first
                .split(',')
                .find_map(|a| a.strip_prefix(k))
                .unwrap()
                .to_string()
        };
        let (nonce, salt, iterations) = (attr("r="), B64.decode(attr("s=")).unwrap(), attr("i="));
        let mut salted = vec![0u8; digest.output_len()];
        ring::pbkdf2::derive(
            pbkdf2,
            iterations.parse().unwrap(),
            &salt,
            password.as_bytes(),
            &mut salted,
        );
        let sign = |key: &[u8], msg: &[u8]| {
            ring::hmac::sign(&ring::hmac::Key::new(hmac, key), msg)
                .as_ref()
                .to_vec()
        };
        let client_key = sign(&salted, b"Client Key");
        let stored_key = ring::digest::digest(digest, &client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{server_first},{without_proof}", self.bare);
        let signature = sign(stored_key.as_ref(), auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(a, b)| a ^ b)
            .collect();
        let server_signature = sign(&sign(&salted, b"Server Key"), auth.as_bytes());
        (
            format!("{without_proof},p={}", B64.encode(proof)),
            format!("v={}", B64.encode(server_signature)),
        )
    }
}

/// A broker whose `kafka` listener has these extra keys; returns it, the Kafka
/// address and the directory its TLS files go in.
pub(crate) async fn broker_with(
    listener_keys: &str,
    files: impl FnOnce(&Path),
) -> (Broker, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    files(dir.path());
    let addr = format!("127.0.0.1:{}", free_port());
    let d = dir.path().display();
    let keys = listener_keys.replace("$DIR", &d.to_string());
    let config = write_config(
        dir.path(),
        &format!("[listeners.kafka]\nlisten = \"{addr}\"\n{keys}\n"),
    );
    let broker = Broker::start(&["--config", config.to_str().unwrap()]).await;
    (broker, addr, dir)
}

pub(crate) fn add_user(broker: &Broker, user: &str, password: &str, mechanisms: &[&str]) {
    let mut args = vec!["user", "create", user, "--password-file", "-"];
    for m in mechanisms {
        args.extend(["--mechanism", m]);
    }
    broker.cli_ok(&args, Some(password.as_bytes()));
}

pub(crate) fn metadata() -> MetadataRequest {
    let mut r = MetadataRequest::default();
    r.topics = None;
    r
}

pub(crate) fn produce(topic: &str, value: &str) -> ProduceRequest {
    let mut b = BatchBuilder::new(1_700_000_000_000);
    b.push(Record::new(None, Some(value.as_bytes()), 1_700_000_000_000));
    let mut p = produce_request::PartitionProduceData::default();
    p.records = Some(b.build());
    let mut t = produce_request::TopicProduceData::default();
    t.name = StrBytes::from_string(topic.into()).into();
    t.partition_data = vec![p];
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    r
}

/// Produces one record to partition 0 on an authenticated connection: its offset.
pub(crate) async fn produce_one(c: &mut Conn, topic: &str, value: &str) -> i64 {
    let r: ProduceResponse = c.call(ApiKey::Produce, 9, &produce(topic, value)).await;
    let p = &r.responses[0].partition_responses[0];
    assert_eq!(p.error_code, 0, "produce: {:?}", p.error_message);
    p.base_offset
}

/// The end offset of partition 0, through the gRPC listener.
pub(crate) async fn end_offset(broker: &Broker, topic: &str) -> i64 {
    let out = broker.cli_ok(&["offsets", topic], None);
    out.trim().rsplit(':').next().unwrap().parse().unwrap()
}
