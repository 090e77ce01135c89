//! The HTTP front end against a real broker on PostgreSQL and a real S3 server
//! (`s3s-fs`): records read from the object store, a key found through the segments'
//! key filters though it lives only in the object store, groups with lag and their
//! reset, config changes, and bad input answered with JSON errors.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::{Broker, S3Server};
use serde_json::Value;
use shale_client::{Acks, Client, Producer, ProducerRecord};

struct Api(u16);

impl Api {
    async fn call(&self, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
        let (status, text) = common::http(self.0, method, path, body.map(str::as_bytes)).await;
        let v = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text:?}"));
        (status, v)
    }

    async fn get(&self, path: &str) -> Value {
        let (status, v) = self.call("GET", path, None).await;
        assert_eq!(status, 200, "GET {path}: {v}");
        v
    }

    /// Asserts the request fails with this status and Kafka error name.
    async fn fails(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        status: u16,
        error: &str,
    ) -> String {
        let (got, v) = self.call(method, path, body).await;
        assert_eq!(
            (got, v["error"].as_str().unwrap_or("")),
            (status, error),
            "{method} {path}: {v}"
        );
        v["message"].as_str().unwrap().to_string()
    }
}

const KEYS: usize = 300;

/// Record `i` goes to partition `i % 2` with key `customer-{i % KEYS}`.
async fn produce(c: &Client, topic: &str, n: usize) {
    let mut p = Producer::new(c.clone(), topic, Acks::All)
        .await
        .unwrap()
        .with_batch_size(2048);
    let records = (0..n)
        .map(|i| ProducerRecord {
            key: Some(format!("customer-{}", i % KEYS).into()),
            value: Some(format!("{{\"order\":{i},\"pad\":\"{}\"}}", "x".repeat(60)).into()),
            partition: Some(i as i32 % 2),
            ..Default::default()
        })
        .collect();
    p.send_all(records).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_api_reads_finds_and_changes_over_a_tiered_topic() {
    let s3 = S3Server::start("shale");
    let cfg_dir = tempfile::tempdir().unwrap();
    let extra = "[tiering]\nupload_interval_ms = 100\n[log]\nretention_check_interval_ms = 100\n";
    let cfg = common::write_config(cfg_dir.path(), &s3.broker_config(extra));
    let db = common::PgDatabase::create();
    let port = common::free_port();
    let http = format!("127.0.0.1:{port}");
    let objects = format!("s3://{}/http", s3.bucket);
    let broker = Broker::start(&[
        "--config",
        cfg.to_str().unwrap(),
        "--object-store-url",
        &objects,
        "--metastore-url",
        &db.url(),
        "--http-listen",
        &http,
    ])
    .await;
    assert!(broker.log().contains(&format!("console at http://{http}/")));
    let api = Api(port);
    let c = broker.client().await;

    // A tiered topic whose history leaves the local disk at once.
    let (status, v) = api
        .call(
            "POST",
            "/api/v1/topics",
            Some(r#"{"name": "orders", "partitions": 2, "configs": {"segment.bytes": "4096", "local.retention.bytes": "1"}}"#),
        )
        .await;
    assert_eq!(status, 201, "{v}");
    let n = 3000;
    produce(&c, "orders", n).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    let topic = loop {
        let t = api.get("/api/v1/topics/orders").await;
        let remote_only = t["partitions"].as_array().unwrap().iter().all(|p| {
            p["local_log_start_offset"].as_i64().unwrap() > 1400 && p["log_start_offset"] == 0
        });
        if remote_only {
            break t;
        }
        assert!(
            Instant::now() < deadline,
            "history did not move to the object store: {t}\n{}",
            broker.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(topic["remote_bytes"].as_u64().unwrap() > 100_000, "{topic}");
    for p in topic["partitions"].as_array().unwrap() {
        assert_eq!(p["high_watermark"], 1500, "{p}");
        assert_eq!(p["log_end_offset"], 1500, "{p}");
        assert_eq!(p["leader"], 0);
    }

    // Records from offset 0: remote, rendered as asked.
    let r = api
        .get("/api/v1/topics/orders/partitions/1/records?offset=0&count=5&format=json")
        .await;
    let recs = r["records"].as_array().unwrap();
    assert_eq!(recs.len(), 5, "{r}");
    for (j, rec) in recs.iter().enumerate() {
        assert_eq!(rec["offset"], j as i64);
        assert_eq!(rec["key"]["data"], format!("customer-{}", 2 * j + 1));
        assert_eq!(rec["value"]["encoding"], "json");
        assert_eq!(rec["value"]["data"]["order"], 2 * j + 1);
    }
    assert_eq!(r["next_offset"], 5);
    let hex = api
        .get("/api/v1/topics/orders/partitions/0/records?offset=3&count=1&format=hex")
        .await;
    assert_eq!(hex["records"][0]["key"]["data"], "637573746f6d65722d36"); // customer-6
    let ts = recs[2]["timestamp"].as_i64().unwrap();
    let by_time = api
        .get(&format!(
            "/api/v1/topics/orders/partitions/1/records?timestamp={ts}&count=1"
        ))
        .await;
    assert!(
        by_time["records"][0]["offset"].as_i64().unwrap() <= 2,
        "{by_time}"
    );

    // A key whose every record lives only in the object store, found through the
    // key filters: every record, in order, and most segments skipped unread.
    let key = 7;
    let expected: Vec<(i64, i64)> = (0..n)
        .filter(|i| i % KEYS == key)
        .map(|i| ((i % 2) as i64, (i / 2) as i64))
        .collect();
    let local_start = topic["partitions"][1]["local_log_start_offset"]
        .as_i64()
        .unwrap();
    assert!(
        expected.iter().all(|(_, o)| *o < local_start),
        "the key's records are all remote"
    );
    let f = api
        .get(&format!("/api/v1/topics/orders/find?key=customer-{key}"))
        .await;
    let found: Vec<(i64, i64)> = f["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["partition"].as_i64().unwrap(),
                r["offset"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(found, expected, "{f}");
    for r in f["records"].as_array().unwrap() {
        assert_eq!(r["key"]["data"], format!("customer-{key}"));
    }
    let searched = f["segments_searched"].as_u64().unwrap();
    let skipped = f["segments_skipped"].as_u64().unwrap();
    assert!(searched > 50, "{f}");
    assert!(
        skipped * 10 >= searched * 7,
        "most segments are skipped by their filter: {f}"
    );
    assert!(
        f["segments_matched"].as_u64().unwrap() >= expected.len() as u64 / 2,
        "{f}"
    );
    assert_eq!(
        f["segments_without_filter"],
        2,
        "only the active segments: {f}\n{}",
        broker
            .log()
            .lines()
            .filter(|l| l.contains("key filter"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Filters were cached when the segments were copied: no GET for them, only for
    // the chunks of the matching segments.
    assert!(
        f["remote_gets"].as_u64().unwrap() <= f["segments_matched"].as_u64().unwrap() + 2,
        "{f}"
    );
    // The same lookup through the CLI, over gRPC.
    let cli = broker.cli_ok(
        &["find", "orders", "--key", &format!("customer-{key}")],
        None,
    );
    assert_eq!(cli.lines().count(), expected.len(), "{cli}");
    assert!(cli.starts_with(&format!("1\t{}\t", expected[0].1)), "{cli}");
    // A time range that holds none of them skips every sealed segment.
    let none = api
        .get("/api/v1/topics/orders/find?key=customer-7&from_time=1&to_time=2")
        .await;
    assert_eq!(none["records"].as_array().unwrap().len(), 0);
    assert_eq!(
        none["segments_skipped"].as_u64().unwrap() + 2,
        none["segments_searched"].as_u64().unwrap(),
        "{none}"
    );
    let missing = api.get("/api/v1/topics/orders/find?key=nobody").await;
    assert!(missing["records"].as_array().unwrap().is_empty());
    let limited = api
        .get("/api/v1/topics/orders/find?key=customer-7&limit=3")
        .await;
    assert_eq!(limited["records"].as_array().unwrap().len(), 3);
    assert_eq!(limited["truncated"], true);

    // A group with lag, then reset.
    let mut offsets = BTreeMap::new();
    offsets.insert(("orders".to_string(), 0), 100i64);
    offsets.insert(("orders".to_string(), 1), 1400i64);
    c.commit_group_offsets("billing", &offsets).await.unwrap();
    let g = api.get("/api/v1/groups/billing").await;
    assert_eq!(g["state"], "Empty");
    assert_eq!(g["total_lag"], 1400 + 100, "{g}");
    assert_eq!(g["partitions"][0]["lag"], 1400);
    assert_eq!(g["partitions"][1]["committed_offset"], 1400);
    let listed = api.get("/api/v1/groups").await;
    assert!(
        listed["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x["group"] == "billing"),
        "{listed}"
    );
    let (status, v) = api
        .call(
            "POST",
            "/api/v1/groups/billing/reset-offsets",
            Some(r#"{"to": "earliest"}"#),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let g = api.get("/api/v1/groups/billing").await;
    assert_eq!(g["total_lag"], 3000, "{g}");
    let (status, v) = api
        .call(
            "POST",
            "/api/v1/groups/billing/reset-offsets",
            Some(r#"{"to": "offset", "offset": 42, "topic": "orders"}"#),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        api.get("/api/v1/groups/billing").await["partitions"][1]["committed_offset"],
        42
    );

    // Config changes, checked before they are written.
    let (status, v) = api
        .call(
            "PATCH",
            "/api/v1/topics/orders/configs",
            Some(r#"{"set": {"retention.ms": "86400000"}}"#),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(
        v.as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "retention.ms"
                && c["value"] == "86400000"
                && c["source"] == "topic"),
        "{v}"
    );
    api.fails(
        "PATCH",
        "/api/v1/topics/orders/configs",
        Some(r#"{"set": {"retention.ms": "soon"}}"#),
        400,
        "INVALID_CONFIG",
    )
    .await;
    assert_eq!(
        api.get("/api/v1/topics/orders").await["retention_ms"],
        86_400_000
    );

    // Bad input: JSON errors that say what is wrong, nothing changed.
    let topic_missing = (404, "UNKNOWN_TOPIC_OR_PARTITION");
    for (method, path, body, (status, error)) in [
        ("GET", "/api/v1/topics/nope", None, topic_missing),
        (
            "GET",
            "/api/v1/topics/orders/partitions/9/records",
            None,
            topic_missing,
        ),
        ("GET", "/api/v1/topics/nope/find?key=a", None, topic_missing),
        (
            "GET",
            "/api/v1/groups/nobody",
            None,
            (404, "GROUP_ID_NOT_FOUND"),
        ),
        (
            "GET",
            "/api/v1/topics/orders/partitions/0/records?offset=999999",
            None,
            (400, "OFFSET_OUT_OF_RANGE"),
        ),
        (
            "POST",
            "/api/v1/topics",
            Some("{not json"),
            (400, "INVALID_REQUEST"),
        ),
        (
            "POST",
            "/api/v1/topics",
            Some(r#"{"name": "bad name!"}"#),
            (400, "INVALID_TOPIC_EXCEPTION"),
        ),
        (
            "POST",
            "/api/v1/topics",
            Some(r#"{"name": "orders"}"#),
            (409, "TOPIC_ALREADY_EXISTS"),
        ),
        (
            "POST",
            "/api/v1/groups/billing/reset-offsets",
            Some(r#"{"to": "yesterday"}"#),
            (400, "INVALID_REQUEST"),
        ),
        ("GET", "/api/v1/nothing-here", None, (404, "NOT_FOUND")),
    ] {
        api.fails(method, path, body, status, error).await;
    }
    for (path, param) in [
        ("/api/v1/topics/orders/partitions/x/records", "partition"),
        (
            "/api/v1/topics/orders/partitions/0/records?offset=ten",
            "offset",
        ),
        (
            "/api/v1/topics/orders/partitions/0/records?offset=-3",
            "offset",
        ),
        (
            "/api/v1/topics/orders/partitions/0/records?timestamp=noon",
            "timestamp",
        ),
        (
            "/api/v1/topics/orders/partitions/0/records?count=0",
            "count",
        ),
        (
            "/api/v1/topics/orders/partitions/0/records?format=xml",
            "format",
        ),
        ("/api/v1/topics/orders/find", "key"),
        ("/api/v1/topics/orders/find?key=zz&key_encoding=hex", "key"),
        (
            "/api/v1/topics/orders/find?key=a&key_encoding=base64",
            "key_encoding",
        ),
        (
            "/api/v1/topics/orders/find?key=a&from_time=5&to_time=1",
            "to_time",
        ),
    ] {
        let m = api.fails("GET", path, None, 400, "INVALID_REQUEST").await;
        assert!(m.contains(&format!("'{param}'")), "{path}: {m}");
    }
    let big = format!(r#"{{"name": "{}"}}"#, "a".repeat(2 << 20));
    api.fails("POST", "/api/v1/topics", Some(&big), 413, "INVALID_REQUEST")
        .await;
    // Bytes that are not UTF-8 are shown as hex, never refused.
    api.call(
        "POST",
        "/api/v1/topics",
        Some(r#"{"name": "raw", "partitions": 1}"#),
    )
    .await;
    let mut p = Producer::new(c.clone(), "raw", Acks::All).await.unwrap();
    p.send_all(vec![ProducerRecord {
        key: Some(vec![0xff, 0x00].into()),
        value: Some(vec![0xc3, 0x28].into()),
        ..Default::default()
    }])
    .await
    .unwrap();
    for format in ["utf8", "json"] {
        let r = api
            .get(&format!(
                "/api/v1/topics/raw/partitions/0/records?format={format}"
            ))
            .await;
        assert_eq!(
            r["records"][0]["key"],
            serde_json::json!({"encoding": "hex", "data": "ff00"})
        );
        assert_eq!(r["records"][0]["value"]["data"], "c328");
    }
    let (status, _) = api.call("DELETE", "/api/v1/topics/raw", None).await;
    assert_eq!(status, 200);
    api.fails(
        "GET",
        "/api/v1/topics/raw",
        None,
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    .await;
    assert_eq!(
        api.get("/api/v1/topics/orders").await["partitions"][0]["high_watermark"],
        1500
    );

    // Cluster, overview, tiering; metrics and the console on the same listener.
    let cluster = api.get("/api/v1/cluster").await;
    assert_eq!(cluster["brokers"][0]["alive"], true);
    assert_eq!(cluster["controller"]["broker_id"], 0);
    let o = api.get("/api/v1/overview").await;
    assert_eq!(o["under_replicated"].as_array().unwrap().len(), 0);
    assert_eq!(o["offline"].as_array().unwrap().len(), 0);
    let t = api.get("/api/v1/tiering?topic=orders").await;
    assert_eq!(t["partitions"].as_array().unwrap().len(), 2);
    api.fails(
        "GET",
        "/api/v1/tiering?topic=nope",
        None,
        404,
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
    .await;
    let spec = api.get("/api/v1/openapi.json").await;
    for path in [
        "/topics/{topic}/find",
        "/groups/{group}/reset-offsets",
        "/topics/{topic}/partitions/{partition}/records",
        "/overview",
    ] {
        assert!(spec["paths"][path].is_object(), "{path} is documented");
    }
    // Metrics on the same listener; every series the Grafana dashboard plots exists.
    let metrics = common::http_get(port, "/metrics").await;
    let dashboard = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../infra/grafana/shale-dashboard.json"),
    )
    .unwrap();
    let mut plotted: Vec<&str> = dashboard
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| w.starts_with("shale_") || w.starts_with("process_"))
        .map(|w| w.trim_end_matches("_bucket"))
        .collect();
    plotted.sort_unstable();
    plotted.dedup();
    assert!(plotted.len() >= 10, "{plotted:?}");
    for name in plotted {
        assert!(
            metrics.contains(&format!("# TYPE {name} ")),
            "the dashboard plots {name}, which /metrics lacks"
        );
    }
    let page = common::http_get(port, "/").await;
    assert!(
        page.starts_with("HTTP/1.1 200") && page.contains("/console/app.js"),
        "{page}"
    );
}

/// Another site's page can make a browser POST a plain-text body without asking the
/// server first: the API takes JSON alone, so it creates nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_that_is_not_json_is_refused_and_changes_nothing() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let port = common::free_port();
    let broker = Broker::start(&["--http-listen", &format!("127.0.0.1:{port}")]).await;
    let body = r#"{"name": "forged", "partitions": 1}"#;
    for content_type in ["text/plain", "application/x-www-form-urlencoded"] {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let request = format!(
            "POST /api/v1/topics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
             Origin: http://evil.example\r\nContent-Type: {content_type}\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer).await;
        assert!(
            answer.starts_with("HTTP/1.1 415"),
            "{content_type}: {answer}"
        );
    }
    let c = broker.client().await;
    assert!(
        c.list_topics()
            .await
            .unwrap()
            .iter()
            .all(|t| t.name != "forged")
    );
    // The same body as JSON creates the topic.
    let (status, text) = common::http(port, "POST", "/api/v1/topics", Some(body.as_bytes())).await;
    assert!((200..300).contains(&status), "{status}: {text}");

    // DNS rebinding: another site's name pointed at 127.0.0.1 reads nothing.
    for (host, served) in [
        ("rebound.example", false),
        ("rebound.example:9644", false),
        ("localhost", true),
        ("127.0.0.1:9644", true),
    ] {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let request =
            format!("GET /api/v1/topics HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        s.write_all(request.as_bytes()).await.unwrap();
        let mut answer = String::new();
        let _ = s.read_to_string(&mut answer).await;
        assert_eq!(answer.contains("forged"), served, "{host}: {answer}");
        if !served {
            assert!(answer.starts_with("HTTP/1.1 421"), "{host}: {answer}");
        }
    }
}
