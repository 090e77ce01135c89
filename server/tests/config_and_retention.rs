//! Broker configuration (file, `SHALE_*` environment, flags) and retention on a
//! running broker.

mod common;

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::Broker;
use shale_client::{Acks, Producer, ProducerRecord};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_old_segments_on_a_running_broker() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let config = common::write_config(
        cfg_dir.path(),
        "[log]\nretention_check_interval_ms = 200\n\n[topic_defaults]\n\"segment.bytes\" = 4096\n",
    );
    // The config file comes through SHALE_CONFIG, not a flag.
    let broker = Broker::start_with_env(&[], &[("SHALE_CONFIG", config.to_str().unwrap())]).await;
    let c = broker.client().await;
    let retention: BTreeMap<_, _> = [("retention.bytes".to_string(), "16384".to_string())].into();
    c.create_topic("logs", 1, 1, retention).await.unwrap();
    let d = c.describe_topic("logs").await.unwrap();
    assert_eq!(
        d.configs.get("segment.bytes").map(String::as_str),
        Some("4096"),
        "broker default applied"
    );

    let mut p = Producer::new(c.clone(), "logs", Acks::Leader)
        .await
        .unwrap()
        .with_batch_size(1024);
    for round in 0..20 {
        let records = (0..50)
            .map(|i| ProducerRecord {
                value: Some(format!("{round}-{i}-{}", "x".repeat(80)).into()),
                ..Default::default()
            })
            .collect();
        p.send_all(records).await.unwrap();
    }
    // Retention works in passes (the remote tier's segments, then the local ones'):
    // wait until the log is within the limit, give or take the active segment.
    let within = |size: i64| size < 16384 + 4096 + 2048;
    let deadline = Instant::now() + Duration::from_secs(30);
    let part = loop {
        let d = c.describe_topic("logs").await.unwrap();
        let part = d.partitions[0].clone();
        if part.log_start_offset > 0 && within(part.size_bytes) {
            break part;
        }
        assert!(
            Instant::now() < deadline,
            "retention never brought the log within retention.bytes: {part:?}\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(part.log_end_offset, 1000);
    assert!(
        part.size_bytes >= 16384,
        "deleted more than it had to: {part:?}"
    );
    // ListOffsets earliest agrees (retention may have moved it on since: only upwards).
    let earliest = c.list_offset("logs", 0, -2).await.unwrap().unwrap();
    assert!(
        part.log_start_offset <= earliest && earliest < part.log_end_offset,
        "{earliest} vs {part:?}"
    );
    // A consumer from the beginning starts at the new log start.
    let out = broker.cli_ok(
        &[
            "consume",
            "logs",
            "--from-beginning",
            "--max-messages",
            "1",
            "--format",
            "%o\\n",
        ],
        None,
    );
    // Retention keeps running (the topic is tiered), so the log start only moves up:
    // the consumer began at the log start of some moment between the two readings.
    let first = out.trim().parse::<i64>().unwrap();
    let now = c.list_offset("logs", 0, -2).await.unwrap().unwrap();
    assert!(
        part.log_start_offset <= first && first <= now,
        "{first} not in [{}, {now}]",
        part.log_start_offset
    );
    // Fetching below it is out of range.
    let r = c.fetch_partition("logs", 0, 0, 1 << 20, 0).await.unwrap();
    assert_eq!(
        r.error_code,
        shale_records::ErrorCode::OffsetOutOfRange as i32
    );
}

fn broker_fails_to_start(args: &[&str], envs: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(common::broker_bin());
    cmd.arg("--data-dir")
        .arg(dir.path())
        .args(args)
        .envs(envs.iter().copied());
    if !envs.iter().any(|(k, _)| *k == "SHALE_LISTEN") {
        // A flag would override SHALE_LISTEN, so give it only when the env does not.
        cmd.arg("--listen")
            .arg(format!("127.0.0.1:{}", common::free_port()));
    }
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // A broker that wrongly starts must not hang the test: give it 20 s to fail.
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            panic!("broker started with {args:?} {envs:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        !out.status.success(),
        "broker exited cleanly with {args:?} {envs:?}"
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn invalid_configuration_stops_start_up_with_an_error_naming_the_key() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let unknown = common::write_config(cfg_dir.path(), "[broker]\nlisten_address = \"x\"\n");
    let err = broker_fails_to_start(&["--config", unknown.to_str().unwrap()], &[]);
    assert!(err.contains("listen_address"), "{err}");

    let err = broker_fails_to_start(&[], &[("SHALE_LISTEN", "not-an-address")]);
    assert!(err.contains("listen"), "{err}");

    let err = broker_fails_to_start(&["--metastore-url", "mysql://localhost/x"], &[]);
    assert!(err.contains("metastore_url"), "{err}");

    let err = broker_fails_to_start(&["--object-store-url", "ftp://somewhere"], &[]);
    assert!(
        err.contains("object store") && err.contains("ftp://somewhere"),
        "{err}"
    );

    let missing = cfg_dir.path().join("missing.toml");
    let err = broker_fails_to_start(&["--config", missing.to_str().unwrap()], &[]);
    assert!(err.contains("missing.toml"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_metrics_describe_partitions_and_traffic() {
    let port = common::free_port();
    let broker = Broker::start(&["--metrics-listen", &format!("127.0.0.1:{port}")]).await;
    broker.cli_ok(&["topic", "create", "m", "--partitions", "2"], None);
    broker.cli_ok(&["produce", "m", "--partition", "1"], Some(b"a\nb\nc\n"));
    let consumed = broker.cli_ok(
        &["consume", "m", "--from-beginning", "--max-messages", "3"],
        None,
    );
    assert_eq!(consumed, "a\nb\nc\n");

    let page = common::http_get(port, "/metrics").await;
    assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
    for line in [
        "shale_partition_log_end_offset{topic=\"m\",partition=\"1\"} 3",
        "shale_partition_log_end_offset{topic=\"m\",partition=\"0\"} 0",
        "shale_partition_high_watermark{topic=\"m\",partition=\"1\"} 3",
        "shale_produce_requests_total 1",
        "# TYPE shale_fetched_bytes_total counter",
        "shale_partition_remote_segments{topic=\"m\",partition=\"1\"} 0",
        "shale_leader_partitions 2",
        "shale_under_replicated_partitions 0",
        "shale_under_min_isr_partitions 0",
        "shale_lease_valid 1",
    ] {
        assert!(
            page.lines().any(|l| l == line),
            "missing {line:?} in\n{page}"
        );
    }
    let fetched: u64 = page
        .lines()
        .find_map(|l| l.strip_prefix("shale_fetched_bytes_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(fetched > 0, "the consume's fetch is counted");
    assert!(
        common::http_get(port, "/nope")
            .await
            .starts_with("HTTP/1.1 404")
    );
    // Latency per API, errors by code, group lag, the process, readiness.
    let out = broker.cli(&["topic", "describe", "nope"], None);
    assert!(!out.status.success());
    broker.cli_ok(
        &[
            "consume",
            "m",
            "--group",
            "lagging",
            "--from-beginning",
            "--max-messages",
            "2",
        ],
        None,
    );
    let page = common::http_get(port, "/metrics").await;
    for line in [
        "# TYPE shale_request_duration_seconds histogram",
        "shale_errors_total{code=\"UNKNOWN_TOPIC_OR_PARTITION\"}",
        "shale_group_lag{group=\"lagging\",topic=\"m\",partition=\"1\"} 1",
        "process_open_fds ",
        "process_resident_memory_bytes ",
        "process_cpu_seconds_total ",
        "shale_open_segment_files ",
    ] {
        assert!(page.contains(line), "missing {line:?} in\n{page}");
    }
    let produce_count: u64 = page
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "shale_request_duration_seconds_count{listener=\"grpc\",api=\"Produce\"} ",
            )
        })
        .expect("produce latency")
        .parse()
        .unwrap();
    assert!(produce_count >= 1);
    let health = common::http_get(port, "/health").await;
    assert!(
        health.starts_with("HTTP/1.1 200 OK") && health.ends_with("ready\n"),
        "{health}"
    );
}

/// Runs `shale-broker` with `args` until it exits; its status and stderr.
fn run_broker_to_exit(args: &[&str]) -> (std::process::ExitStatus, String) {
    let out = Command::new(common::broker_bin())
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A data directory the broker cannot write to is named as such at start, not reported
/// as the metastore failing to open (`/proc` is not writable even by root).
#[test]
fn an_unwritable_data_directory_is_named_at_start() {
    let listen = format!("127.0.0.1:{}", common::free_port());
    let (status, err) = run_broker_to_exit(&["--data-dir", "/proc", "--listen", &listen]);
    assert!(!status.success());
    assert!(
        err.contains("cannot write to the data directory /proc"),
        "{err}"
    );
    assert!(!err.contains("unable to open database file"), "{err}");
}

/// One process per data directory, and a data directory only with its own cluster
/// and broker id: a second broker on the same directory, or one pointed at another
/// cluster's metastore, refuses to start (the latter would otherwise delete every
/// partition its metastore does not know).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_serves_one_broker_of_one_cluster() {
    let mut broker = Broker::start(&[]).await;
    let c = broker.client().await;
    c.create_topic("kept", 1, 1, BTreeMap::new()).await.unwrap();
    let data = broker.data_dir();
    let data = data.to_str().unwrap();
    let port = common::free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let (status, err) = run_broker_to_exit(&["--data-dir", data, "--listen", &listen]);
    assert!(!status.success());
    assert!(
        err.contains("in use by another shale-broker process"),
        "{err}"
    );

    let other = tempfile::tempdir().unwrap();
    let metastore = format!("sqlite://{}/other.db", other.path().display());
    broker.kill(); // the lock goes with the process
    let (status, err) = run_broker_to_exit(&[
        "--data-dir",
        data,
        "--listen",
        &listen,
        "--metastore-url",
        &metastore,
    ]);
    assert!(!status.success());
    assert!(err.contains("belongs to cluster"), "{err}");
    let (status, err) =
        run_broker_to_exit(&["--data-dir", data, "--listen", &listen, "--broker-id", "7"]);
    assert!(!status.success());
    assert!(err.contains("belongs to broker 0"), "{err}");
    assert!(
        std::path::Path::new(data).join("kept-0").is_dir(),
        "the partition survived"
    );
}

/// A position below the log start (records deleted) moves per the consumer's
/// `auto.offset.reset`: to the log start, to the end (Kafka's default), or nowhere,
/// failing the poll with OFFSET_OUT_OF_RANGE.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_out_of_range_follows_its_reset_policy() {
    use shale_client::{Consumer, OffsetReset, StartFrom};
    let broker = Broker::start(&[]).await;
    let c = broker.client().await;
    c.create_topic("reset", 1, 1, BTreeMap::new())
        .await
        .unwrap();
    let mut p = Producer::new(c.clone(), "reset", Acks::All).await.unwrap();
    let records = (0..30)
        .map(|i| ProducerRecord {
            value: Some(format!("v-{i}").into()),
            ..Default::default()
        })
        .collect();
    p.send_all(records).await.unwrap();
    assert_eq!(c.delete_records("reset", 0, 10).await.unwrap(), 10);
    let at_zero = |reset: Option<OffsetReset>| {
        let c = c.clone();
        async move {
            let consumer = Consumer::new(c, "reset", Some(vec![0]), StartFrom::Offset(0))
                .await
                .unwrap();
            match reset {
                Some(r) => consumer.with_offset_reset(r),
                None => consumer,
            }
        }
    };
    let mut earliest = at_zero(Some(OffsetReset::Earliest)).await;
    let mut first = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while first.is_empty() {
        assert!(Instant::now() < deadline, "earliest read nothing");
        first = earliest.poll(Duration::from_millis(200)).await.unwrap();
    }
    assert_eq!(first[0].offset, 10);
    for reset in [Some(OffsetReset::Latest), None] {
        let mut latest = at_zero(reset).await;
        let got = latest.poll(Duration::from_millis(200)).await.unwrap();
        assert!(got.is_empty(), "{reset:?} read {got:?}");
        assert_eq!(latest.positions()[&0], 30, "{reset:?}");
    }
    let mut none = at_zero(Some(OffsetReset::None)).await;
    let err = none.poll(Duration::from_millis(200)).await.unwrap_err();
    assert_eq!(
        err.code(),
        Some(shale_records::ErrorCode::OffsetOutOfRange),
        "{err}"
    );
    assert_eq!(none.positions()[&0], 0, "none moves nothing");
}

/// A listener bound to a wildcard address with no advertised address is warned about at
/// start (clients would be told to connect to 0.0.0.0); advertising a host silences it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_listener_without_an_advertised_address_is_warned_about() {
    let listen = format!("0.0.0.0:{}", common::free_port());
    let broker = Broker::start(&["--kafka-listen", &listen]).await;
    assert!(
        broker
            .log()
            .contains("this listener advertises a wildcard address"),
        "{}",
        broker.log()
    );
    drop(broker);
    let port = common::free_port();
    let (listen, advertised) = (format!("0.0.0.0:{port}"), format!("localhost:{port}"));
    let broker =
        Broker::start(&["--kafka-listen", &listen, "--kafka-advertised", &advertised]).await;
    assert!(!broker.log().contains("wildcard"), "{}", broker.log());
}
