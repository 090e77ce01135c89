//! `[listeners.*]`: each listener's protocol, addresses, limits and security, with
//! the command line's shorthands applied.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use super::{
    BrokerConfig, ConfigLoadError, GRPC_LISTENER, HTTP_LISTENER, KAFKA_LISTENER, ListenerConfig,
    ListenerSection, Protocol, invalid, socket_addr,
};
use shale_security::ListenerSecurity;
use shale_security::listener::{ClientTls, InterBrokerClient, SecurityKeys};
use shale_security::secrets::Secret;

/// `[listeners.*]` with the shorthands applied: `grpc_listen` (`--listen`,
/// `[broker] listen`) and `grpc_advertised` (`[cluster] advertised_address`) set the
/// `grpc` listener, `kafka` (listen, advertised) the `kafka` one, `http_listen` the
/// `http` one. With
/// no listener configured at all, `kafka` on 127.0.0.1:9092, `grpc` on 127.0.0.1:9093
/// and `http` on 127.0.0.1:9644; without any gRPC listener, a `grpc` one on
/// 127.0.0.1:9093 (brokers replicate through it).
pub(super) fn resolve_listeners(
    mut sections: BTreeMap<String, ListenerSection>,
    grpc_listen: Option<String>,
    (kafka_listen, kafka_advertised): (Option<String>, Option<String>),
    http_listen: Option<String>,
    grpc_advertised: Option<String>,
) -> Result<Vec<ListenerConfig>, ConfigLoadError> {
    if sections.is_empty() && grpc_listen.is_none() && grpc_advertised.is_none() {
        // The embedded default: Kafka clients on 9092 beside gRPC on 9093, and the
        // console on 9644.
        sections.insert(KAFKA_LISTENER.into(), ListenerSection::default());
        sections.insert(HTTP_LISTENER.into(), ListenerSection::default());
    }
    if let Some(listen) = http_listen {
        sections.entry(HTTP_LISTENER.into()).or_default().listen = Some(listen);
    }
    let has_grpc = sections
        .iter()
        .any(|(name, s)| s.protocol.as_deref().unwrap_or(name) == GRPC_LISTENER);
    if grpc_listen.is_some() || grpc_advertised.is_some() || !has_grpc {
        let grpc = sections.entry(GRPC_LISTENER.into()).or_default();
        if let Some(listen) = grpc_listen {
            grpc.listen = Some(listen);
        }
        if let Some(advertised) = grpc_advertised {
            grpc.advertised = Some(advertised);
        }
    }
    if let Some(listen) = kafka_listen {
        sections.entry(KAFKA_LISTENER.into()).or_default().listen = Some(listen);
    }
    if let Some(advertised) = kafka_advertised {
        sections
            .entry(KAFKA_LISTENER.into())
            .or_default()
            .advertised = Some(advertised);
    }
    let mut out = Vec::new();
    for (name, s) in sections {
        let key = |field: &str| format!("listeners.{name}.{field}");
        if name.is_empty()
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
        {
            return Err(invalid(
                format!("listeners.{name}"),
                "a listener name is ASCII letters, digits, '_' and '-'",
            ));
        }
        let protocol = s.protocol.as_deref().unwrap_or(&name);
        let protocol = Protocol::parse(protocol).ok_or_else(|| {
            invalid(
                key("protocol"),
                format!("must be grpc, kafka or http, not '{protocol}'"),
            )
        })?;
        let listen = match (&s.listen, protocol) {
            (Some(addr), _) => socket_addr(&key("listen"), addr)?,
            (None, Protocol::Grpc) => SocketAddr::from(([127, 0, 0, 1], 9093)),
            (None, Protocol::Kafka) => SocketAddr::from(([127, 0, 0, 1], 9092)),
            (None, Protocol::Http) => SocketAddr::from(([127, 0, 0, 1], 9644)),
        };
        let advertised = s.advertised.unwrap_or_else(|| listen.to_string());
        if advertised
            .rsplit_once(':')
            .is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err())
        {
            return Err(invalid(key("advertised"), "must be host:port"));
        }
        if let Some(other) = out.iter().find(|l: &&ListenerConfig| l.listen == listen) {
            return Err(invalid(
                key("listen"),
                format!("{listen} is the address of listener '{}' too", other.name),
            ));
        }
        if protocol != Protocol::Kafka {
            // gRPC carries a user and password with each call, and HTTP a session
            // cookie from a login, checked against the users' SCRAM credentials: there
            // are no mechanisms and no re-authentication.
            // Nor a bound on requests in flight on one connection: HTTP/2 multiplexes.
            for (field, set) in [
                ("sasl_mechanisms", s.sasl_mechanisms.is_some()),
                (
                    "connections_max_reauth_ms",
                    s.connections_max_reauth_ms.is_some(),
                ),
                ("max_inflight_requests", s.max_inflight_requests.is_some()),
                ("sendfile", s.sendfile.is_some()),
            ] {
                if set {
                    return Err(invalid(key(field), "applies to kafka listeners only"));
                }
            }
        }
        if protocol == Protocol::Http && s.max_connections.is_some() {
            return Err(invalid(
                key("max_connections"),
                "applies to kafka and grpc listeners only (put a reverse proxy before an http one)",
            ));
        }
        let security = ListenerSecurity::resolve(SecurityKeys {
            security_protocol: s.security_protocol,
            tls_cert: s.tls_cert,
            tls_key: s.tls_key,
            tls_client_ca: s.tls_client_ca,
            sasl_mechanisms: s.sasl_mechanisms,
            connections_max_reauth_ms: s.connections_max_reauth_ms,
        })
        .map_err(|(field, reason)| invalid(key(field), reason))?;
        let positive = |field: &str, v: Option<usize>, default: usize| match v {
            Some(0) => Err(invalid(key(field), "must be > 0")),
            v => Ok(v.unwrap_or(default)),
        };
        out.push(ListenerConfig {
            protocol,
            listen,
            advertised,
            max_connections: positive("max_connections", s.max_connections, 10_000)?,
            max_request_bytes: positive(
                "max_request_bytes",
                s.max_request_bytes,
                if protocol == Protocol::Http {
                    1 << 20
                } else {
                    100 << 20
                },
            )?,
            max_inflight_requests: positive("max_inflight_requests", s.max_inflight_requests, 16)?,
            sendfile: s.sendfile.unwrap_or(true),
            security,
            name,
        });
    }
    Ok(out)
}

/// How followers connect to leaders: the inter-broker listener's protocol with the
/// client's side of it (`cluster.inter_broker_*`). `password` is
/// `SHALE_INTER_BROKER_PASSWORD`; `read` reads a secret's file.
pub(super) fn resolve_inter_broker(
    config: &BrokerConfig,
    password: Option<String>,
    read: impl Fn(&str, &std::path::Path) -> Result<String, ConfigLoadError>,
) -> Result<InterBrokerClient, ConfigLoadError> {
    let c = &config.cluster;
    let security = &config
        .listener(&c.inter_broker_listener)
        .expect("validated: the inter-broker listener exists")
        .security;
    let tls = match &security.tls {
        None => None,
        Some(files) => {
            let ca = c
                .inter_broker_tls_ca
                .clone()
                .or_else(|| files.client_ca.clone())
                .ok_or_else(|| {
                    invalid(
                        "cluster.inter_broker_tls_ca",
                        "the inter-broker listener uses TLS: give the CA its certificates are \
                         checked against",
                    )
                })?;
            // A listener that asks for client certificates gets its own from followers.
            let identity = files
                .client_ca
                .is_some()
                .then(|| (files.cert.clone(), files.key.clone()));
            Some(ClientTls { ca, identity })
        }
    };
    let credentials = if security.protocol.uses_sasl() {
        let user = c.inter_broker_user.clone().ok_or_else(|| {
            invalid(
                "cluster.inter_broker_user",
                "the inter-broker listener uses SASL: give the user brokers authenticate as",
            )
        })?;
        let password = match (&c.inter_broker_password_file, password) {
            (Some(path), _) => read("cluster.inter_broker_password_file", path)?,
            (None, Some(p)) => p,
            (None, None) => {
                return Err(invalid(
                    "cluster.inter_broker_password_file",
                    "the inter-broker listener uses SASL: give the password's file (or \
                     SHALE_INTER_BROKER_PASSWORD)",
                ));
            }
        };
        Some((user, Secret::new(password)))
    } else {
        None
    };
    Ok(InterBrokerClient { tls, credentials })
}
