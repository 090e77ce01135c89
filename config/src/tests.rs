use super::*;

fn with_file(text: &str) -> Result<BrokerConfig, ConfigLoadError> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shale.toml");
    std::fs::write(&path, text).unwrap();
    BrokerConfig::load(Overrides {
        config: Some(path),
        ..Overrides::default()
    })
}

#[test]
fn no_configuration_is_the_embedded_default() {
    let c = BrokerConfig::load(Overrides::default()).unwrap();
    assert_eq!(grpc(&c).listen.to_string(), "127.0.0.1:9093");
    assert_eq!(
        c.listener(KAFKA_LISTENER).unwrap().listen.to_string(),
        "127.0.0.1:9092"
    );
    assert_eq!(
        c.listener(HTTP_LISTENER).unwrap().listen.to_string(),
        "127.0.0.1:9644"
    );
    assert_eq!(
        c.listener(HTTP_LISTENER).unwrap().max_request_bytes,
        1 << 20
    );
    assert_eq!(c.listeners.len(), 3);
    // Configuring a listener replaces the defaults.
    let c = BrokerConfig::load(Overrides {
        listen: Some("127.0.0.1:19093".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.listeners.len(), 1);
    // `metrics_listen` (and --http-listen) is the http listener's address.
    let c = with_file("[broker]\nlisten = \"127.0.0.1:1\"\nmetrics_listen = \"127.0.0.1:2\"\n")
        .unwrap();
    assert_eq!(c.listener(HTTP_LISTENER).unwrap().protocol, Protocol::Http);
    assert_eq!(c.listener(HTTP_LISTENER).unwrap().listen.port(), 2);
    let c = BrokerConfig::load(Overrides::default()).unwrap();
    assert_eq!(c.data_dir, PathBuf::from("./shale-data"));
    assert_eq!(c.metastore_url, "sqlite://./shale-data/metastore.db");
    assert_eq!(c.object_store_url, "file://./shale-data/objects");
}

#[test]
fn file_then_flags_override_defaults() {
    let c = with_file(
        "[broker]\nlisten = \"127.0.0.1:1\"\ndata_dir = \"/tmp/x\"\n[log]\nretention_check_interval_ms = 5\n\
         [topic_defaults]\n\"retention.ms\" = 1000\n\"message.timestamp.type\" = \"LogAppendTime\"\n",
    )
    .unwrap();
    assert_eq!(grpc(&c).listen.port(), 1);
    assert_eq!(c.metastore_url, "sqlite:///tmp/x/metastore.db");
    assert_eq!(c.log.retention_check_interval_ms, 5);
    assert_eq!(c.topic_defaults.retention_ms, 1000);
    let args = Overrides {
        listen: Some("127.0.0.1:2".into()),
        ..Overrides::default()
    };
    assert_eq!(grpc(&BrokerConfig::load(args).unwrap()).listen.port(), 2);
}

#[test]
fn errors_name_the_key() {
    for (text, key) in [
        ("[broker]\nlisten = \"nowhere\"\n", "listen"),
        ("[broker]\nbogus = 1\n", "bogus"),
        (
            "[log]\nflush_check_interval_ms = 0\n",
            "flush_check_interval_ms",
        ),
        (
            "[topic_defaults]\n\"retention.ms\" = \"soon\"\n",
            "retention.ms",
        ),
        ("[topic_defaults]\n\"no.such\" = 1\n", "no.such"),
        ("[broker]\nrack = \"\"\n", "broker.rack"),
    ] {
        let e = with_file(text).unwrap_err().to_string();
        assert!(e.contains(key), "{e}");
    }
    let racked = with_file("[broker]\nrack = \"eu-west-1a\"\n").unwrap();
    assert_eq!(racked.rack.as_deref(), Some("eu-west-1a"));
}

fn grpc(c: &BrokerConfig) -> &ListenerConfig {
    c.listener(GRPC_LISTENER).unwrap()
}

#[test]
fn listeners_by_name_with_shorthands() {
    let c = with_file(
        "[listeners.kafka]\nlisten = \"127.0.0.1:19092\"\nadvertised = \"kafka.example:9092\"\n\
         [listeners.internal]\nprotocol = \"grpc\"\nlisten = \"127.0.0.1:19193\"\n\
         [cluster]\ninter_broker_listener = \"internal\"\n",
    )
    .unwrap();
    let kafka = c.listener("kafka").unwrap();
    assert_eq!(kafka.protocol, Protocol::Kafka);
    assert_eq!(kafka.advertised, "kafka.example:9092");
    assert_eq!(c.advertised_address(), "127.0.0.1:19193");
    // A gRPC listener exists already: no default one is added.
    assert!(c.listener(GRPC_LISTENER).is_none());
    assert_eq!(
        c.endpoints(),
        vec![
            ("internal".to_string(), "127.0.0.1:19193".to_string()),
            ("kafka".to_string(), "kafka.example:9092".to_string()),
        ]
    );

    // Flags and the old keys set the grpc and kafka listeners.
    let c = with_file("[cluster]\nadvertised_address = \"b1:9000\"\n").unwrap();
    assert_eq!(grpc(&c).advertised, "b1:9000");
    assert_eq!(c.advertised_address(), "b1:9000");
    let c = BrokerConfig::load(Overrides {
        kafka_listen: Some("127.0.0.1:29092".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.listener(KAFKA_LISTENER).unwrap().listen.port(), 29092);
    assert_eq!(grpc(&c).listen.port(), 9093);
    let c = BrokerConfig::load(Overrides {
        kafka_listen: Some("0.0.0.0:29092".into()),
        kafka_advertised: Some("localhost:29092".into()),
        advertised: Some("localhost:29093".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(
        c.listener(KAFKA_LISTENER).unwrap().advertised,
        "localhost:29092"
    );
    assert_eq!(c.advertised_address(), "localhost:29093");
}

#[test]
fn listener_errors_name_the_key() {
    for (text, key) in [
        (
            "[listeners.weird]\nlisten = \"127.0.0.1:1\"\n",
            "listeners.weird.protocol",
        ),
        (
            "[listeners.grpc]\nadvertised = \"nohost\"\n",
            "listeners.grpc.advertised",
        ),
        ("[listeners.kafka]\nlisten = \"127.0.0.1:9093\"\n", "listen"),
        (
            "[cluster]\ninter_broker_listener = \"kafka\"\n[listeners.kafka]\n",
            "cluster.inter_broker_listener",
        ),
        ("[listeners.grpc]\nbogus = 1\n", "bogus"),
        // Keys a listener would not enforce.
        (
            "[listeners.http]\nmax_connections = 5\n",
            "listeners.http.max_connections",
        ),
        (
            "[listeners.grpc]\nmax_inflight_requests = 5\n",
            "listeners.grpc.max_inflight_requests",
        ),
    ] {
        let e = with_file(text).unwrap_err().to_string();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn secrets_come_from_files_and_are_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let url_file = dir.path().join("metastore-url");
    std::fs::write(&url_file, "postgres://shale:hunter2@db:5432/shale\n").unwrap();
    let key_file = dir.path().join("s3-secret");
    std::fs::write(&key_file, "s3cr3t\n").unwrap();
    let c = with_file(&format!(
        "[broker]\nmetastore_url_file = \"{}\"\n[object_store]\naccess_key_id = \"AK\"\nsecret_access_key_file = \"{}\"\n",
        url_file.display(),
        key_file.display()
    ))
    .unwrap();
    assert_eq!(c.metastore_url, "postgres://shale:hunter2@db:5432/shale");
    assert_eq!(c.object_store.secret_access_key.as_deref(), Some("s3cr3t"));
    let shown = format!("{c:?}");
    assert!(!shown.contains("s3cr3t"), "{shown}");
    // The flag (or SHALE_METASTORE_URL) wins over the file.
    let c = BrokerConfig::load(Overrides {
        metastore_url: Some("sqlite://x.db".into()),
        ..Overrides::default()
    })
    .unwrap();
    assert_eq!(c.metastore_url, "sqlite://x.db");
    // A missing file, or a secret given twice, names the key.
    let e = with_file("[broker]\nmetastore_url_file = \"/no/such/file\"\n").unwrap_err();
    assert!(e.to_string().contains("broker.metastore_url_file"), "{e}");
    let e = with_file(&format!(
        "[object_store]\nsecret_access_key = \"x\"\nsecret_access_key_file = \"{}\"\n",
        key_file.display()
    ))
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("object_store.secret_access_key_file"),
        "{e}"
    );
}

#[test]
fn inter_broker_security_follows_the_listener_and_names_missing_keys() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    for f in ["c.pem", "k.pem", "ca.pem"] {
        std::fs::write(dir.path().join(f), "x").unwrap();
    }
    std::fs::write(dir.path().join("pw"), "secret-pw\n").unwrap();
    let listener = format!(
        "[listeners.grpc]\nprotocol = \"grpc\"\nlisten = \"127.0.0.1:9093\"\n\
         security_protocol = \"SASL_SSL\"\ntls_cert = \"{d}/c.pem\"\ntls_key = \"{d}/k.pem\"\n"
    );
    let c = with_file(&format!(
        "{listener}[cluster]\ninter_broker_user = \"broker\"\n\
         inter_broker_password_file = \"{d}/pw\"\ninter_broker_tls_ca = \"{d}/ca.pem\"\n"
    ))
    .unwrap();
    let tls = c.inter_broker.tls.as_ref().unwrap();
    assert_eq!(tls.ca, dir.path().join("ca.pem"));
    assert_eq!(tls.identity, None, "no client certificate is asked for");
    let (user, password) = c.inter_broker.credentials.as_ref().unwrap();
    assert_eq!((user.as_str(), password.expose()), ("broker", "secret-pw"));
    assert!(!format!("{c:?}").contains("secret-pw"));
    for (cluster, key) in [
        (
            format!("inter_broker_user = \"b\"\ninter_broker_password_file = \"{d}/pw\"\n"),
            "cluster.inter_broker_tls_ca",
        ),
        (
            format!("inter_broker_tls_ca = \"{d}/ca.pem\"\n"),
            "cluster.inter_broker_user",
        ),
        (
            format!("inter_broker_user = \"b\"\ninter_broker_tls_ca = \"{d}/ca.pem\"\n"),
            "cluster.inter_broker_password_file",
        ),
    ] {
        let e = with_file(&format!("{listener}[cluster]\n{cluster}")).unwrap_err();
        assert!(e.to_string().contains(key), "{cluster}: {e}");
    }
    // gRPC and HTTP have no SASL mechanisms and no re-authentication.
    let e = with_file(&format!("{listener}sasl_mechanisms = [\"PLAIN\"]\n")).unwrap_err();
    assert!(e.to_string().contains("grpc.sasl_mechanisms"), "{e}");
    let e = with_file(
        "[listeners.http]\nprotocol = \"http\"\nlisten = \"127.0.0.1:9644\"\n\
         security_protocol = \"SASL_PLAINTEXT\"\nconnections_max_reauth_ms = 1000\n",
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("http.connections_max_reauth_ms"),
        "{e}"
    );
}
