//! End to end through the real binaries: `shale-broker` processes and the `shale` CLI.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Broker;
use shale_client::partitioner::partition_for_key;
use shale_client::{Acks, Producer, ProducerRecord};
use shale_records::batch::BatchIter;

/// `partition offset key value` lines, sorted.
fn consume_all(broker: &Broker, topic: &str) -> Vec<(i32, i64, String, String)> {
    let out = broker.cli_ok(
        &[
            "consume",
            topic,
            "--from-beginning",
            "--idle-timeout-ms",
            "1500",
            "--format",
            "%p %o %k %s\\n",
        ],
        None,
    );
    let mut rows: Vec<_> = out
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.splitn(4, ' ').collect();
            (
                f[0].parse().unwrap(),
                f[1].parse().unwrap(),
                f[2].to_string(),
                f[3].to_string(),
            )
        })
        .collect();
    rows.sort();
    rows
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_produces_and_consumes_10k_keyed_records_across_restarts() {
    let mut broker = Broker::start(&[]).await;
    broker.cli_ok(
        &[
            "topic",
            "create",
            "orders",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
        ],
        None,
    );

    let input: String = (0..10_000)
        .map(|i| format!("customer-{}:order-{i}\n", i % 97))
        .collect();
    let acks = broker.cli_ok(
        &[
            "produce",
            "orders",
            "--key-separator",
            ":",
            "--acks",
            "all",
            "--print-offsets",
        ],
        Some(input.as_bytes()),
    );
    let acks: Vec<(i32, i64)> = acks
        .lines()
        .map(|l| {
            let (p, o) = l.split_once(':').unwrap();
            (p.parse().unwrap(), o.parse().unwrap())
        })
        .collect();
    assert_eq!(acks.len(), 10_000, "one acknowledgement per input line");

    // Every record is where Kafka's default partitioner puts its key, at the printed offset.
    let mut expected = Vec::new();
    for (i, (p, o)) in acks.iter().enumerate() {
        let key = format!("customer-{}", i % 97);
        assert_eq!(*p, partition_for_key(key.as_bytes(), 3), "record {i}");
        expected.push((*p, *o, key, format!("order-{i}")));
    }
    expected.sort();
    // Offsets are dense per partition and input order is kept within a partition.
    let mut per_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
    for (p, o) in &acks {
        per_partition.entry(*p).or_default().push(*o);
    }
    assert_eq!(
        per_partition.len(),
        3,
        "97 keys spread over all 3 partitions"
    );
    for offsets in per_partition.values() {
        assert_eq!(*offsets, (0..offsets.len() as i64).collect::<Vec<_>>());
    }

    let first = consume_all(&broker, "orders");
    assert_eq!(first, expected);

    broker.restart().await; // SIGTERM, clean shutdown
    assert_eq!(
        consume_all(&broker, "orders"),
        expected,
        "after a clean restart"
    );

    broker.kill();
    broker.start_again().await;
    assert_eq!(
        consume_all(&broker, "orders"),
        expected,
        "after SIGKILL and restart"
    );

    let describe = broker.cli_ok(&["topic", "describe", "orders"], None);
    for (p, offsets) in per_partition {
        let line = format!("Partition: {p}\t");
        let row = describe.lines().find(|l| l.contains(&line)).unwrap();
        assert!(
            row.contains(&format!("LogEndOffset: {}", offsets.len())),
            "{row}"
        );
        assert!(
            row.contains(&format!("HighWatermark: {}", offsets.len())),
            "{row}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_produce_keeps_every_acknowledged_record() {
    let mut broker = Broker::start(&[]).await;
    let client = broker.client().await;
    let mut configs = BTreeMap::new();
    configs.insert("segment.bytes".to_string(), "65536".to_string());
    client.create_topic("events", 2, 1, configs).await.unwrap();

    // Produce until the broker dies under us (no retrying a dead broker for long);
    // remember what was acknowledged.
    let short_retry = client
        .clone()
        .with_retry_timeout(Duration::from_millis(500));
    let mut producer = Producer::new(short_retry, "events", Acks::Leader)
        .await
        .unwrap()
        .with_batch_size(4096);
    let (acked_tx, mut acked_rx) = tokio::sync::mpsc::unbounded_channel();
    let producing = tokio::spawn(async move {
        let mut n = 0u64;
        loop {
            let records: Vec<_> = (0..50)
                .map(|i| ProducerRecord {
                    value: Some(format!("event-{:08}", n + i).into_bytes().into()),
                    partition: Some(((n + i) % 2) as i32),
                    ..Default::default()
                })
                .collect();
            match producer.send_all(records).await {
                Ok(meta) => {
                    for (i, m) in meta.into_iter().enumerate() {
                        let _ = acked_tx.send((
                            m.partition,
                            m.offset,
                            format!("event-{:08}", n + i as u64),
                        ));
                    }
                    n += 50;
                }
                Err(_) => return n,
            }
        }
    });
    // Let a few hundred batches through, then kill without warning.
    let mut acked = Vec::new();
    while acked.len() < 20_000 {
        acked.push(acked_rx.recv().await.unwrap());
    }
    broker.kill();
    let sent = producing.await.unwrap();
    while let Ok(a) = acked_rx.try_recv() {
        acked.push(a);
    }
    assert!(acked.len() >= 20_000 && sent as usize >= acked.len());

    broker.start_again().await;
    let client = broker.client().await;
    for partition in 0..2 {
        // Read the raw log: every batch must be intact and offsets dense from 0.
        let mut offset = 0;
        let mut values = Vec::new();
        let end = client
            .list_offset("events", partition, -1)
            .await
            .unwrap()
            .unwrap();
        while offset < end {
            let mut consumer = shale_client::Consumer::new(
                client.clone(),
                "events",
                Some(vec![partition]),
                shale_client::StartFrom::Offset(offset),
            )
            .await
            .unwrap();
            let records = consumer.poll(Duration::from_secs(1)).await.unwrap();
            assert!(
                !records.is_empty(),
                "no progress at offset {offset} of {end}"
            );
            for r in records {
                assert_eq!(r.offset, offset, "offsets are dense");
                values.push(String::from_utf8(r.value.unwrap().to_vec()).unwrap());
                offset += 1;
            }
        }
        for (p, o, v) in acked.iter().filter(|a| a.0 == partition) {
            assert_eq!(
                values.get(*o as usize),
                Some(v),
                "acknowledged record {p}:{o} lost or changed"
            );
        }
        // Whatever survived beyond the acknowledgements is a prefix of what was sent, in order.
        let mut previous = None;
        for v in &values {
            assert!(v.starts_with("event-"), "garbage record {v:?}");
            assert!(previous < Some(v.clone()), "order broken at {v}");
            previous = Some(v.clone());
        }
    }
    // The raw bytes of the recovered log pass CRC checks batch by batch.
    let (bytes, _) = fetch_raw(&client, "events", 0, 0).await;
    for b in BatchIter::new(&bytes) {
        let (h, r) = b.unwrap();
        h.validate(&bytes[r]).unwrap();
    }
}

async fn fetch_raw(
    client: &shale_client::Client,
    topic: &str,
    partition: i32,
    offset: i64,
) -> (bytes::Bytes, i64) {
    let r = client
        .fetch_partition(topic, partition, offset, 1 << 20, 0)
        .await
        .unwrap();
    assert_eq!(r.error_code, 0, "{}", r.error_message);
    (r.records, r.high_watermark)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_by_time_and_topic_lifecycle_through_the_cli() {
    let broker = Broker::start(&[]).await;
    broker.cli_ok(
        &[
            "topic",
            "create",
            "t1",
            "--partitions",
            "1",
            "--config",
            "retention.ms=86400000",
        ],
        None,
    );
    let before = chrono_now();
    broker.cli_ok(&["produce", "t1"], Some(b"a\nb\n"));
    std::thread::sleep(Duration::from_millis(20));
    let middle = chrono_now();
    broker.cli_ok(&["produce", "t1"], Some(b"c\n"));
    std::thread::sleep(Duration::from_millis(20));
    let after = chrono_now();
    assert_eq!(
        broker.cli_ok(&["offsets", "t1", "--time", &before], None),
        "t1:0:0\n"
    );
    assert_eq!(
        broker.cli_ok(&["offsets", "t1", "--time", &middle], None),
        "t1:0:2\n"
    );
    assert_eq!(
        broker.cli_ok(&["offsets", "t1", "--time", &after], None),
        "t1:0:-1\n"
    );
    assert_eq!(
        broker.cli_ok(&["offsets", "t1", "--time", "earliest"], None),
        "t1:0:0\n"
    );
    assert_eq!(broker.cli_ok(&["offsets", "t1"], None), "t1:0:3\n");
    let from_middle = broker.cli_ok(
        &[
            "consume",
            "t1",
            "--from-time",
            &middle,
            "--idle-timeout-ms",
            "500",
        ],
        None,
    );
    assert_eq!(from_middle, "c\n");
    let from_offset = broker.cli_ok(
        &["consume", "t1", "--offset", "1", "--max-messages", "1"],
        None,
    );
    assert_eq!(from_offset, "b\n");

    // Alter configs and partitions.
    broker.cli_ok(
        &[
            "topic",
            "alter",
            "t1",
            "--partitions",
            "4",
            "--config",
            "retention.bytes=1000000",
        ],
        None,
    );
    let d = broker.cli_ok(&["topic", "describe", "t1"], None);
    assert!(d.contains("Partitions: 4"), "{d}");
    assert!(
        d.contains("retention.bytes=1000000") && d.contains("retention.ms=86400000"),
        "{d}"
    );
    broker.cli_ok(
        &["topic", "alter", "t1", "--delete-config", "retention.ms"],
        None,
    );
    let d = broker.cli_ok(&["topic", "describe", "t1"], None);
    assert!(
        d.contains("Config: retention.ms=604800000 (default)"),
        "{d}"
    );
    assert!(d.contains("Config: retention.bytes=1000000 (topic)"), "{d}");
    broker.cli_ok(&["produce", "t1", "--partition", "3"], Some(b"p3\n"));
    assert_eq!(
        broker.cli_ok(
            &[
                "consume",
                "t1",
                "--partition",
                "3",
                "--from-beginning",
                "--max-messages",
                "1"
            ],
            None
        ),
        "p3\n"
    );

    // Delete and re-create: the new topic starts empty.
    broker.cli_ok(&["topic", "delete", "t1"], None);
    assert_eq!(broker.cli_ok(&["topic", "list"], None), "");
    broker.cli_ok(&["topic", "create", "t1"], None);
    assert_eq!(broker.cli_ok(&["offsets", "t1"], None), "t1:0:0\n");
    assert!(
        !broker.data_dir().join("t1-3").exists(),
        "old partition directory removed"
    );
    broker.cli_ok(&["produce", "t1"], Some(b"fresh\n"));
    std::thread::sleep(Duration::from_millis(2500)); // past a metadata refresh
    let again = broker.cli_ok(
        &[
            "consume",
            "t1",
            "--from-beginning",
            "--idle-timeout-ms",
            "500",
        ],
        None,
    );
    assert_eq!(
        again, "fresh\n",
        "the re-created topic holds only its own data"
    );
}

fn chrono_now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[tokio::test]
async fn compressed_batches_are_stored_as_sent_and_read_back_for_every_codec() {
    let broker = Broker::start(&[]).await;
    let lines: String = (0..2_000)
        .map(|i| format!("k{}:record {i} {}\n", i % 5, "payload ".repeat(i % 9)))
        .collect();
    for codec in ["gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("z-{codec}");
        broker.cli_ok(&["topic", "create", &topic, "--partitions", "2"], None);
        broker.cli_ok(
            &[
                "produce",
                &topic,
                "--key-separator",
                ":",
                "--compression",
                codec,
            ],
            Some(lines.as_bytes()),
        );
        let out = broker.cli_ok(
            &[
                "consume",
                &topic,
                "--from-beginning",
                "--max-messages",
                "2000",
                "--format",
                "%k:%s\n",
            ],
            None,
        );
        let mut got: Vec<&str> = out.lines().collect();
        let mut want: Vec<&str> = lines.lines().collect();
        got.sort_unstable();
        want.sort_unstable();
        assert_eq!(got, want, "{codec}");
        // The broker kept the producer's compressed batches.
        let c = broker.client().await;
        let raw = c.fetch_partition(&topic, 0, 0, 1 << 20, 0).await.unwrap();
        let h = shale_records::batch::BatchHeader::parse(&raw.records).unwrap();
        assert_eq!(
            h.compression().unwrap(),
            codec.parse::<shale_records::batch::Compression>().unwrap(),
            "{codec}"
        );
    }
    let out = broker.cli(
        &["produce", "z-gzip", "--compression", "brotli"],
        Some(b"x\n"),
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("compression must be"));
}
