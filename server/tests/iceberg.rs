//! Topics as Iceberg tables with real brokers, PostgreSQL and `s3s-fs`: three brokers
//! write a topic of JSON values with `iceberg.mode=value_schema` at RF 3; the leader
//! of partition 0 is SIGKILLed while the table is being written, more records follow,
//! with a new field, and one record whose field has the wrong type. The table, read
//! through the SQL catalog in the cluster's database and the files in the bucket,
//! holds every (partition, offset) of the topic exactly once, with its fields as typed
//! columns (the new one added), the misfit is in the dead-letter table with its
//! reason, and `shale topic describe` shows the table caught up. `iceberg.retention.ms`
//! removes the rows of past hours; the topic's own retention removes none. Deleted and
//! created again (now `key_value`), the topic gets a table of its own; the old one
//! stays, renamed aside.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow_array::Array;
use arrow_array::cast::AsArray;
use arrow_array::types::{Int32Type, Int64Type};
use common::{PgDatabase, S3Server};
use futures::TryStreamExt;
use shale_client::{Acks, Client, Producer, ProducerRecord};

const TOPIC: &str = "logs";
const PARTITIONS: i32 = 3;
const PREFIX: &str = "tables";

const TOML: &str = "[cluster]\nlease_ms = 3000\nheartbeat_interval_ms = 500\n\
    controller_interval_ms = 200\nreplica_lag_time_max_ms = 2000\nreplica_fetch_max_wait_ms = 200\n\
    [log]\nmetadata_refresh_interval_ms = 500\nretention_check_interval_ms = 500\n";

/// The value of record `i` of partition `p`: from record 3000 on, with a new field.
fn value(p: i32, i: i64) -> String {
    let level = if i >= 3000 { ",\"level\":\"info\"" } else { "" };
    format!(
        "{{\"p\":{p},\"i\":{i},\"pad\":\"{}\"{level}}}",
        "x".repeat(40)
    )
}

/// How a row shows it in a `value_schema` table: its `p`, `i` and `level` columns.
fn shown(p: i32, i: i64) -> String {
    format!("{p}/{i}/{}", if i >= 3000 { "info" } else { "-" })
}

async fn produce(c: &Client, from: i64, to: i64) {
    produce_values(c, from, to, value).await
}

async fn produce_values(c: &Client, from: i64, to: i64, value: fn(i32, i64) -> String) {
    let mut producer =
        (Producer::new(c.clone(), TOPIC, Acks::All).await.unwrap()).with_batch_size(16 << 10);
    for p in 0..PARTITIONS {
        let records: Vec<ProducerRecord> = (from..to)
            .map(|i| ProducerRecord {
                partition: Some(p),
                key: Some(format!("k{i}").into()),
                value: Some(value(p, i).into()),
                ..Default::default()
            })
            .collect();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            match producer.send_all(records.clone()).await {
                Ok(_) => break,
                Err(e) => {
                    assert!(Instant::now() < deadline, "produce: {e}");
                    tokio::time::sleep(Duration::from_millis(300)).await;
                }
            }
        }
    }
}

/// Every row of a table (`value_schema`: of the topic's, shown by [`shown`]; else of
/// a `key_value` one, or the dead letters, by its value): (partition, offset) → value,
/// failing on a row seen twice.
async fn rows(
    db_url: &str,
    objects: &std::path::Path,
    bucket_url: &str,
    table: &str,
    value_schema: bool,
) -> HashMap<(i32, i64), String> {
    if !objects.exists() {
        return HashMap::new();
    }
    let store: shale_tiering::store::ObjectStoreRef =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(objects).unwrap());
    let storage = shale_table::storage::BucketStorage::new(bucket_url, store);
    let catalog = shale_table::catalog::open(db_url, storage).await.unwrap();
    let table =
        match iceberg::Catalog::load_table(&*catalog, &shale_table::catalog::ident(table)).await {
            Ok(t) => t,
            Err(_) => return HashMap::new(),
        };
    // `level` is a column once a record brought it (as the current snapshot's
    // schema has it: a commit by a leader that had not seen the new column yet
    // names the schema before it).
    let metadata = table.metadata();
    let schema = (metadata.current_snapshot()).map(|s| s.schema(metadata).unwrap());
    let has_level = schema.is_some_and(|s| s.field_by_name("level").is_some());
    if !value_schema
        && metadata
            .current_schema()
            .field_by_name("partition")
            .is_none()
    {
        // A `value_schema` table (the topic's before it was created again as
        // `key_value`): none of the rows asked for.
        return HashMap::new();
    }
    let columns: &[&str] = match (value_schema, has_level) {
        // In the table's order: iceberg-rust 0.10's reader relabels columns of the
        // same types by position when a projection's order differs from the file's.
        (true, true) => &["shale_partition", "shale_offset", "i", "p", "level"],
        (true, false) => &["shale_partition", "shale_offset", "i", "p"],
        (false, _) => &["partition", "offset", "value"],
    };
    let scan = table
        .scan()
        .select(columns.iter().copied())
        .build()
        .unwrap();
    let batches: Vec<_> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
    let mut out = HashMap::new();
    for b in batches {
        let parts = b.column(0).as_primitive::<Int32Type>();
        let offsets = b.column(1).as_primitive::<Int64Type>();
        for i in 0..b.num_rows() {
            let key = (parts.value(i), offsets.value(i));
            let v = match value_schema {
                true => {
                    let field = |c: &str| {
                        let column = b.column_by_name(c).unwrap();
                        column.as_primitive::<Int64Type>().value(i)
                    };
                    let level = b.column_by_name("level").map(|c| c.as_string::<i32>());
                    let level = match level {
                        Some(l) if !l.is_null(i) => l.value(i),
                        _ => "-",
                    };
                    format!("{}/{}/{level}", field("p"), field("i"))
                }
                false => {
                    String::from_utf8(b.column(2).as_binary::<i64>().value(i).to_vec()).unwrap()
                }
            };
            assert!(
                out.insert(key, v).is_none(),
                "row {key:?} is in the table twice"
            );
        }
    }
    out
}

/// The values of a string column of a table.
async fn column_strings(
    db_url: &str,
    objects: &std::path::Path,
    bucket_url: &str,
    table: &str,
    column: &str,
) -> Vec<String> {
    let store: shale_tiering::store::ObjectStoreRef =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(objects).unwrap());
    let storage = shale_table::storage::BucketStorage::new(bucket_url, store);
    let catalog = shale_table::catalog::open(db_url, storage).await.unwrap();
    let ident = shale_table::catalog::ident(table);
    let table = iceberg::Catalog::load_table(&*catalog, &ident)
        .await
        .unwrap();
    let scan = table.scan().select([column]).build().unwrap();
    let batches: Vec<_> = scan.to_arrow().await.unwrap().try_collect().await.unwrap();
    (batches.iter())
        .flat_map(|b| {
            b.column(0)
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_topic_is_written_into_its_iceberg_table_exactly_once_across_a_leader_kill() {
    let s3 = S3Server::start("shale-iceberg");
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(TOML));
    let db = PgDatabase::create();
    let bucket_url = format!("s3://{}/{PREFIX}", s3.bucket);
    let mut brokers = common::start_brokers(&cfg, &db.url(), &bucket_url, 3).await;
    let client = brokers[0].client().await;
    let configs = [
        ("iceberg.mode", "value_schema"),
        ("iceberg.commit.interval.ms", "300"),
    ];
    let configs = (configs.iter()).map(|(k, v)| (k.to_string(), v.to_string()));
    client
        .create_topic(TOPIC, PARTITIONS, 3, configs.collect())
        .await
        .unwrap();
    let objects = s3.objects_dir(PREFIX);

    produce(&client, 0, 3000).await;
    // Some of it in the table, then the leader of partition 0 dies mid-stream.
    let deadline = Instant::now() + Duration::from_secs(60);
    while rows(&db.url(), &objects, &bucket_url, TOPIC, true)
        .await
        .is_empty()
    {
        if Instant::now() > deadline {
            let said: Vec<String> = (brokers.iter())
                .flat_map(|b| {
                    b.log()
                        .lines()
                        .filter(|l| l.contains("table"))
                        .map(String::from)
                        .collect::<Vec<_>>()
                })
                .take(20)
                .collect();
            panic!(
                "nothing reached the table; the brokers said:\n{}",
                said.join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let described = client.describe_topic(TOPIC).await.unwrap();
    let leader = described.partitions[0].leader;
    // Broker ids are 1, 2, 3 in start order.
    let victim = usize::try_from(leader - 1).unwrap();
    brokers[victim].kill();
    let survivor = (victim + 1) % brokers.len();
    let client = brokers[survivor].client().await;
    produce(&client, 3000, 5000).await;
    // A record whose field has the wrong type: offset 5000 of each partition.
    produce_values(&client, 5000, 5001, |p, _| {
        format!("{{\"p\":{p},\"i\":\"five\"}}")
    })
    .await;
    brokers[victim].start_again().await;

    let want: HashMap<(i32, i64), String> = (0..PARTITIONS)
        .flat_map(|p| (0..5000).map(move |i| ((p, i), shown(p, i))))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    let got = loop {
        let got = rows(&db.url(), &objects, &bucket_url, TOPIC, true).await;
        if got.len() >= want.len() || Instant::now() > deadline {
            break got;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let missing: Vec<_> = want
        .keys()
        .filter(|k| !got.contains_key(k))
        .take(5)
        .collect();
    assert!(
        missing.is_empty(),
        "{} rows of {}; missing e.g. {missing:?}",
        got.len(),
        want.len()
    );
    let wrong = got.iter().filter(|(k, v)| want.get(*k) != Some(*v)).count();
    assert_eq!(
        (got.len(), wrong),
        (want.len(), 0),
        "the table holds exactly the topic's records"
    );

    // `shale topic describe` shows the table caught up (the dead letter's offset
    // too: its commit to the topic's table follows the dead-letter table's).
    let deadline = Instant::now() + Duration::from_secs(60);
    let described = loop {
        let described = brokers[survivor].cli_ok(&["topic", "describe", TOPIC, "-o", "json"], None);
        let described: serde_json::Value = serde_json::from_str(&described).unwrap();
        let table = &described[0]["table"];
        let caught_up = (table["partitions"].as_array().unwrap().iter())
            .all(|p| (&p["next_offset"], &p["lag_offsets"]) == (&5001.into(), &0.into()));
        if caught_up {
            break described;
        }
        assert!(
            Instant::now() < deadline,
            "the table did not catch up: {table}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let dlq = shale_table::topic::dead_letter_table(TOPIC);
    let dead = rows(&db.url(), &objects, &bucket_url, &dlq, false).await;
    let want_dead: HashMap<(i32, i64), String> = (0..PARTITIONS)
        .map(|p| ((p, 5000), format!("{{\"p\":{p},\"i\":\"five\"}}")))
        .collect();
    assert_eq!(dead, want_dead, "each misfit once in the dead letters");
    let reasons = column_strings(&db.url(), &objects, &bucket_url, &dlq, "reason").await;
    assert_eq!(reasons, vec!["field i: expected long, got \"five\""; 3]);
    let table = &described[0]["table"];
    assert_eq!(table["rows"], 15_000, "{table}");
    assert!(table["data_files"].as_i64().unwrap() > 0, "{table}");
    let text = brokers[survivor].cli_ok(&["topic", "describe", TOPIC], None);
    assert!(
        text.contains("\tTable: s3://") && text.contains("LagOffsets: 0"),
        "{text}"
    );

    // `iceberg.retention.ms`: rows of hours past it leave the table (a snapshot built
    // by Shale, committed by compare-and-swap in PostgreSQL); the others stay.
    let two_days_ago = chrono::Utc::now().timestamp_millis() - 2 * 86_400_000;
    let old: Vec<ProducerRecord> = (0..10)
        .map(|i| ProducerRecord {
            partition: Some(2),
            value: Some(format!("{{\"p\":2,\"i\":{}}}", 5001 + i).into()),
            timestamp: Some(two_days_ago),
            ..Default::default()
        })
        .collect();
    let mut producer = Producer::new(client.clone(), TOPIC, Acks::All)
        .await
        .unwrap();
    producer.send_all(old).await.unwrap();
    let table_rows = || async {
        let got = rows(&db.url(), &objects, &bucket_url, TOPIC, true).await;
        got.len()
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while table_rows().await != 15_010 {
        assert!(
            Instant::now() < deadline,
            "the old records did not reach the table"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let day = [("iceberg.retention.ms".to_string(), "86400000".to_string())];
    client
        .alter_configs(TOPIC, day.into(), vec![])
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = rows(&db.url(), &objects, &bucket_url, TOPIC, true).await;
        if got.len() == 15_000 {
            assert_eq!(got, want, "retention removed exactly the old hour's rows");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} rows after retention",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // The topic's own retention deletes log segments, never table rows.
    let kept = "kept";
    let configs = [
        ("iceberg.mode", "value_schema"),
        ("iceberg.commit.interval.ms", "300"),
        ("remote.storage.enable", "false"),
        ("segment.bytes", "1024"),
        ("retention.ms", "2000"),
    ];
    let configs = (configs.iter()).map(|(k, v)| (k.to_string(), v.to_string()));
    client
        .create_topic(kept, 1, 3, configs.collect())
        .await
        .unwrap();
    let records: Vec<ProducerRecord> = (0..200)
        .map(|i| ProducerRecord {
            partition: Some(0),
            value: Some(value(0, i).into()),
            ..Default::default()
        })
        .collect();
    // Batches of 10 (about 1 KiB): segments of one batch each, which retention deletes
    // but for the active one.
    let mut producer = Producer::new(client.clone(), kept, Acks::All)
        .await
        .unwrap();
    for batch in records.chunks(10) {
        producer.send_all(batch.to_vec()).await.unwrap();
    }
    let want_kept: HashMap<(i32, i64), String> = (0..200).map(|i| ((0, i), shown(0, i))).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = rows(&db.url(), &objects, &bucket_url, kept, true).await;
        let start = client.describe_topic(kept).await.unwrap().partitions[0].log_start_offset;
        // Once the log has lost records to retention, the table still has them all.
        if start > 0 && got == want_kept {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "log start {start}, {} rows in the table",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The topic deleted and created again under its name: the old table is renamed
    // aside with its rows, the new topic's records go into a table of their own.
    let old_id = described[0]["topic_id"].as_str().unwrap().to_string();
    client.delete_topic(TOPIC).await.unwrap();
    // Now one row per record, its value as bytes.
    let configs = [
        ("iceberg.mode", "key_value"),
        ("iceberg.commit.interval.ms", "300"),
    ];
    let configs = (configs.iter()).map(|(k, v)| (k.to_string(), v.to_string()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = client
        .create_topic(TOPIC, PARTITIONS, 3, configs.clone().collect())
        .await
    {
        assert!(Instant::now() < deadline, "re-create: {e}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    produce(&client, 0, 100).await;
    let want: HashMap<(i32, i64), String> = (0..PARTITIONS)
        .flat_map(|p| (0..100).map(move |i| ((p, i), value(p, i))))
        .collect();
    // Until the new topic's first commit, the name is still the old table's.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = rows(&db.url(), &objects, &bucket_url, TOPIC, false).await;
        if got == want {
            break;
        }
        let stray = got.keys().filter(|k| !want.contains_key(k)).count();
        assert!(
            Instant::now() < deadline,
            "the new topic's table: {} rows, {stray} not the new topic's",
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let store: shale_tiering::store::ObjectStoreRef =
        Arc::new(object_store::local::LocalFileSystem::new_with_prefix(&objects).unwrap());
    let storage = shale_table::storage::BucketStorage::new(&bucket_url, store);
    let catalog = shale_table::catalog::open(&db.url(), storage)
        .await
        .unwrap();
    let aside = shale_table::catalog::ident(&format!("{TOPIC}@{old_id}"));
    let old = iceberg::Catalog::load_table(&*catalog, &aside)
        .await
        .unwrap();
    let old_rows = old
        .scan()
        .select(["shale_offset"])
        .build()
        .unwrap()
        .to_arrow()
        .await
        .unwrap();
    let old_rows: Vec<_> = old_rows.try_collect().await.unwrap();
    assert_eq!(old_rows.iter().map(|b| b.num_rows()).sum::<usize>(), 15_000);
}
