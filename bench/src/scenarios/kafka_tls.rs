//! The cost of security for Kafka clients: one broker with a plaintext, an SSL and a
//! SASL_SSL (SCRAM-SHA-512) Kafka listener, and the same bytes produced and consumed
//! through librdkafka on each, in one run, so each protocol is compared with
//! plaintext on the same broker, disk and moment.

use std::collections::BTreeMap;

use super::kafka::{client_params, consume, produce, rates};
use super::{Ctx, running};
use crate::harness::{BrokerProcess, free_port};
use crate::report::{CaseResult, Ratio, numbers};
use rdkafka::ClientConfig;

const PASSWORD: &str = "bench-password";

/// A librdkafka setting: name, value.
type Setting<'a> = (&'a str, &'a str);

/// A CA and a certificate for 127.0.0.1 it signed, written to `dir`.
fn certificates(dir: &std::path::Path) -> anyhow::Result<()> {
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "shale-bench CA");
    let ca = rcgen::CertifiedIssuer::self_signed(ca, rcgen::KeyPair::generate()?)?;
    let key = rcgen::KeyPair::generate()?;
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into(), "localhost".into()])?
        .signed_by(&key, &ca)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    std::fs::write(dir.join("server.pem"), cert.pem())?;
    std::fs::write(dir.join("server.key"), key.serialize_pem())?;
    Ok(())
}

/// Produce and consume MiB/s (acks=1, 1 KiB records, 8 partitions) through each
/// security protocol, with the ratio to plaintext's.
pub(crate) async fn kafka_tls(ctx: &Ctx) -> anyhow::Result<Vec<CaseResult>> {
    let certs = tempfile::tempdir_in(&ctx.base)?;
    certificates(certs.path())?;
    let d = certs.path().display();
    let ports = [free_port(), free_port(), free_port()];
    let config = format!(
        "[listeners.kafka]\nlisten = \"127.0.0.1:{}\"\n\
         [listeners.ssl]\nprotocol = \"kafka\"\nlisten = \"127.0.0.1:{}\"\nsecurity_protocol = \"SSL\"\n\
         tls_cert = \"{d}/server.pem\"\ntls_key = \"{d}/server.key\"\n\
         [listeners.sasl_ssl]\nprotocol = \"kafka\"\nlisten = \"127.0.0.1:{}\"\nsecurity_protocol = \"SASL_SSL\"\n\
         tls_cert = \"{d}/server.pem\"\ntls_key = \"{d}/server.key\"\nsasl_mechanisms = [\"SCRAM-SHA-512\"]\n",
        ports[0], ports[1], ports[2]
    );
    let broker = BrokerProcess::start(&config, &[], &ctx.base).await?;
    let admin = shale_client::Client::connect(&broker.address()).await?;
    admin
        .set_user_password("bench", PASSWORD, &["SCRAM-SHA-512"], 4096)
        .await?;
    let bytes = ctx.size(256, 16);
    let ca = format!("{d}/ca.pem");
    let protocols: [(&str, u16, &[Setting]); 3] = [
        ("PLAINTEXT", ports[0], &[]),
        (
            "SSL",
            ports[1],
            &[("security.protocol", "SSL"), ("ssl.ca.location", &ca)],
        ),
        (
            "SASL_SSL",
            ports[2],
            &[
                ("security.protocol", "SASL_SSL"),
                ("ssl.ca.location", &ca),
                ("sasl.mechanisms", "SCRAM-SHA-512"),
                ("sasl.username", "bench"),
                ("sasl.password", PASSWORD),
            ],
        ),
    ];
    let mut out = Vec::new();
    let (mut plain_produce, mut plain_consume) = (0.0, 0.0);
    for (protocol, port, settings) in protocols {
        running("kafka", format_args!("security {protocol}"));
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", format!("127.0.0.1:{port}"));
        for (k, v) in settings {
            config.set(*k, *v);
        }
        let topic = ctx.topic(&format!("kafka-security-{}", protocol.to_lowercase()));
        admin.create_topic(&topic, 8, 1, BTreeMap::new()).await?;
        let (c, t) = (config.clone(), topic.clone());
        let sent =
            tokio::task::spawn_blocking(move || produce(c, &t, Some(8), bytes, 1024)).await??;
        let count = sent.records;
        let read = tokio::task::spawn_blocking(move || consume(config, &topic, 8, count)).await??;
        if protocol == "PLAINTEXT" {
            (plain_produce, plain_consume) = (sent.mib_per_sec(), read.mib_per_sec());
        }
        for (scenario, result, plain) in [
            ("kafka-security-produce", &sent, plain_produce),
            ("kafka-security-consume", &read, plain_consume),
        ] {
            out.push(CaseResult {
                scenario: scenario.into(),
                params: client_params(&[
                    ("security_protocol", protocol),
                    ("record_bytes", "1024"),
                    ("partitions", "8"),
                ]),
                metrics: rates(result),
                baselines: numbers(&[("plaintext_mib_per_sec", plain)]),
                ratio: Some(Ratio::new(
                    "mib_per_sec / plaintext's on the same broker",
                    result.mib_per_sec() / plain.max(1e-9),
                    None,
                )),
                broker: broker.stats(),
            });
        }
    }
    Ok(out)
}
