//! The `shale` CLI as a new user meets it, through the real binaries: streaming
//! produce, signals, partial failures, closed pipes, and the Kafka-tool habits
//! (offset specs, headers, tombstones, effective configs, JSON output, offset resets,
//! preferred leaders).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::Broker;

fn spawn_cli(broker: &Broker, args: &[&str]) -> Child {
    Command::new(common::cli_bin())
        .arg("--bootstrap")
        .arg(broker.address())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Waits up to `secs` for `cond` (polled every 50 ms); panics with `what` otherwise.
async fn wait_for(secs: u64, what: &str, mut cond: impl AsyncFnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !cond().await {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "timed out: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    start.elapsed()
}

async fn high_watermark(broker: &Broker, topic: &str, p: i32) -> i64 {
    let c = broker.client().await;
    c.list_offset(topic, p, -1).await.unwrap().unwrap_or(-1)
}

/// Lines are sent as they are read, while stdin stays open (`tail -f | shale
/// produce`); SIGTERM sends what was read and exits cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_sends_each_line_as_it_is_read_and_flushes_on_sigterm() {
    let broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "live"], None);
    let mut child = spawn_cli(&broker, &["produce", "live", "--print-offsets"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a\n").unwrap();
    stdin.flush().unwrap();
    let seen = wait_for(30, "the first line to arrive", async || {
        high_watermark(&broker, "live", 0).await == 1
    })
    .await;
    assert!(child.try_wait().unwrap().is_none(), "the producer exited");
    eprintln!("[cli] first line readable {seen:?} after it was written, stdin still open");
    stdin.write_all(b"b\n").unwrap();
    stdin.flush().unwrap();
    // SIGTERM with stdin still open: what was read goes out, then it exits.
    tokio::time::sleep(Duration::from_millis(100)).await;
    signal(&child, "-TERM");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "0:0\n0:1\n");
    assert_eq!(high_watermark(&broker, "live", 0).await, 2);
}

/// A batch that fails among good ones: the good ones are written and their offsets
/// printed, the bad line is named on stderr, and the exit status says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_failed_produce_reports_every_record() {
    let broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "mixed"], None);
    let mut input = b"a\n".to_vec();
    input.extend(vec![b'x'; 2 << 20]);
    input.extend(b"\nb\n");
    let out = broker.cli(
        &["produce", "mixed", "--print-offsets", "--linger-ms", "0"],
        Some(&input),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit status hides the failure");
    // The failed record's line gets a marker: output lines match input lines.
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0:0\n-1:-1\n0:1\n");
    assert!(stderr.contains("line 2: MESSAGE_TOO_LARGE"), "{stderr}");
    assert!(
        stderr.contains("1 of 3 records were not written"),
        "{stderr}"
    );
}

/// Producing to a topic that does not exist says how to create it (brokers do not
/// create topics on produce).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producing_to_a_missing_topic_says_how_to_create_it() {
    let broker = Broker::start(&[]).await;
    let out = broker.cli(&["produce", "nosuch"], Some(b"a\n"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("create it with `shale topic create nosuch`"),
        "{stderr}"
    );
}

/// `shale … | head` ends quietly, also when nothing more arrives to write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_pipe_ends_the_command_quietly() {
    let broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "piped"], None);
    broker.cli_ok(&["produce", "piped"], Some(b"1\n2\n3\n4\n"));
    let mut child = spawn_cli(&broker, &["consume", "piped", "--from-beginning"]);
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "1");
    assert_eq!(lines.next().unwrap().unwrap(), "2");
    drop(lines); // like `head -2`
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "consume kept running after its reader left"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    // A listing into a closed pipe, too.
    let mut child = spawn_cli(&broker, &["topic", "describe"]);
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// SIGTERM on a group member: it commits what it printed and leaves, so the other
/// member takes its partitions at once, not after the (long) session timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_on_a_group_member_moves_its_partitions_at_once() {
    let broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "shared", "--partitions", "4"], None);
    let member = |broker: &Broker| {
        spawn_cli(
            broker,
            &[
                "consume",
                "shared",
                "--group",
                "g",
                "--session-timeout-ms",
                "120000",
            ],
        )
    };
    let (first, mut second) = (member(&broker), member(&broker));
    let members = async |broker: &Broker| {
        let c = broker.client().await;
        c.describe_group("g")
            .await
            .map_or((0, String::new()), |d| (d.members.len(), d.state))
    };
    wait_for(60, "two stable members", async || {
        members(&broker).await == (2, "Stable".to_string())
    })
    .await;
    signal(&first, "-TERM");
    let left = wait_for(60, "the group to rebalance to one member", async || {
        members(&broker).await == (1, "Stable".to_string())
    })
    .await;
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!(
        "[cli] a member left on SIGTERM; the group had one member {left:?} later (session timeout 120 s)"
    );
    second.kill().unwrap();
    second.wait().unwrap();
}

/// `memory://` loses everything at restart: tiering to it is off and refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_object_store_never_tiers() {
    let broker = Broker::start(&["--object-store-url", "memory://"]).await;
    broker.cli_ok(&["topic", "create", "m"], None);
    let d = broker.cli_ok(&["topic", "describe", "m"], None);
    assert!(
        d.contains("Config: remote.storage.enable=false (broker)"),
        "{d}"
    );
    let out = broker.cli(
        &[
            "topic",
            "create",
            "m2",
            "--config",
            "remote.storage.enable=true",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("INVALID_CONFIG"),
        "{err}"
    );
    let out = broker.cli(
        &[
            "topic",
            "alter",
            "m",
            "--config",
            "remote.storage.enable=true",
        ],
        None,
    );
    assert!(!out.status.success());
    // And a config file that asks for it does not start.
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(
        dir.path(),
        "[topic_defaults]\n\"remote.storage.enable\" = true\n",
    );
    let out = Command::new(common::broker_bin())
        .args([
            "--config",
            cfg.to_str().unwrap(),
            "--object-store-url",
            "memory://",
        ])
        .args(["--data-dir", dir.path().join("d").to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("memory://"), "{err}");
}

/// Offsets as kcat and Kafka's tools take them, `--exit`, headers and tombstones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_headers_and_tombstones_as_kafka_tools_take_them() {
    let broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "h"], None);
    let before = chrono::Utc::now().timestamp_millis();
    broker.cli_ok(
        &[
            "produce",
            "h",
            "-K",
            ":",
            "-H",
            "app=shale",
            "--null-value",
            "NULL",
        ],
        Some(b"k1:v1\nk2:NULL\nk3:v3\nk4:v4\nk5:v5\n"),
    );
    let consume = |extra: &[&str]| {
        let mut args = vec!["consume", "h", "-e", "-f", "%o %k %s %h\\n"];
        args.extend_from_slice(extra);
        broker.cli_ok(&args, None)
    };
    let all = consume(&["-O", "beginning"]);
    assert_eq!(
        all,
        "0 k1 v1 app=shale\n1 k2  app=shale\n2 k3 v3 app=shale\n3 k4 v4 app=shale\n4 k5 v5 app=shale\n"
    );
    assert_eq!(consume(&["-O", "-2"]).lines().count(), 2);
    assert!(consume(&["-O", "-2"]).starts_with("3 k4"));
    assert!(consume(&["-O", "3"]).starts_with("3 k4"));
    assert_eq!(consume(&["-O", "end"]), "");
    assert!(consume(&["-O", &format!("s@{before}")]).starts_with("0 k1"));
    // The tombstone has a null value, not an empty one.
    let null = broker.cli_ok(&["consume", "h", "-O", "1", "-c", "1", "-f", "%S\\n"], None);
    assert_eq!(null, "-1\n");
    for (time, want) in [
        ("earliest", "h:0:0\n"),
        ("-2", "h:0:0\n"),
        ("latest", "h:0:5\n"),
        ("-1", "h:0:5\n"),
    ] {
        assert_eq!(
            broker.cli_ok(&["offsets", "h", "--time", time], None),
            want,
            "{time}"
        );
    }
    let ms = broker.cli_ok(&["offsets", "h", "--time", &before.to_string()], None);
    assert_eq!(ms, "h:0:0\n");
    let json: serde_json::Value =
        serde_json::from_str(&broker.cli_ok(&["offsets", "h", "-o", "json"], None)).unwrap();
    assert_eq!(json[0]["offset"], 5);
}

/// Describe shows every effective config with its source, all topics without a name,
/// and filters; create --if-not-exists; JSON output of the listing commands.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_and_json_output() {
    let cfg_dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(
        cfg_dir.path(),
        "[topic_defaults]\n\"segment.ms\" = 3600000\n",
    );
    let broker = Broker::start(&["--config", cfg.to_str().unwrap()]).await;
    broker.cli_ok(
        &["topic", "create", "d1", "--config", "retention.ms=1000"],
        None,
    );
    broker.cli_ok(&["topic", "create", "d2", "--partitions", "2"], None);
    let again = broker.cli_ok(&["topic", "create", "d1", "--if-not-exists"], None);
    assert!(again.contains("exists already"), "{again}");
    let out = broker.cli(&["topic", "create", "d1"], None);
    assert!(!out.status.success());
    let all = broker.cli_ok(&["topic", "describe"], None);
    assert!(
        all.contains("Topic: d1") && all.contains("Topic: d2"),
        "{all}"
    );
    assert!(all.contains("Config: retention.ms=1000 (topic)"), "{all}");
    assert!(all.contains("Config: segment.ms=3600000 (broker)"), "{all}");
    assert!(
        all.contains("Config: max.message.bytes=1048588 (default)"),
        "{all}"
    );
    // Nothing is under-replicated on one healthy broker.
    assert_eq!(
        broker.cli_ok(&["topic", "describe", "--under-replicated"], None),
        ""
    );
    assert_eq!(
        broker.cli_ok(&["topic", "describe", "--unavailable"], None),
        ""
    );
    let json: serde_json::Value =
        serde_json::from_str(&broker.cli_ok(&["topic", "describe", "d1", "-o", "json"], None))
            .unwrap();
    assert_eq!(json[0]["configs"]["retention.ms"]["source"], "topic");
    assert_eq!(json[0]["partitions"][0]["leader"], 0);
    let list: serde_json::Value =
        serde_json::from_str(&broker.cli_ok(&["topic", "list", "-o", "json"], None)).unwrap();
    assert_eq!(list.as_array().unwrap().len(), 2);
    let cluster: serde_json::Value =
        serde_json::from_str(&broker.cli_ok(&["cluster", "status", "-o", "json"], None)).unwrap();
    assert_eq!(cluster["brokers"][0]["alive"], true);
    assert!(
        cluster["brokers"][0]["lease_remaining_ms"]
            .as_i64()
            .unwrap()
            > 0
    );
    let status = broker.cli_ok(&["cluster", "status"], None);
    assert!(status.contains("\tin "), "{status}");
    let tiering: serde_json::Value =
        serde_json::from_str(&broker.cli_ok(&["tiering", "status", "-o", "json"], None)).unwrap();
    assert_eq!(tiering["partitions"].as_array().unwrap().len(), 3);
    // Bad input says what is wrong.
    let out = common::run_cli("127.0.0.1", &["topic", "list"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("has no port"),
        "{err}"
    );
    // min.insync.replicas above the replication factor is a config error.
    let out = broker.cli(
        &["topic", "create", "d3", "--config", "min.insync.replicas=2"],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("INVALID_CONFIG") && err.contains("replication factor"),
        "{err}"
    );
    // local.retention.bytes above retention.bytes, at create and at alter.
    let out = broker.cli(
        &[
            "topic",
            "create",
            "d4",
            "--config",
            "retention.bytes=1000",
            "--config",
            "local.retention.bytes=2000",
        ],
        None,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("local.retention.bytes") && err.contains("retention.bytes (1000)"),
        "{err}"
    );
    broker.cli_ok(
        &["topic", "alter", "d2", "--config", "retention.bytes=1000"],
        None,
    );
    let out = broker.cli(
        &[
            "topic",
            "alter",
            "d2",
            "--config",
            "local.retention.bytes=5000",
        ],
        None,
    );
    assert!(!out.status.success());
}

/// reset-offsets: shift, duration, current, partition lists, all topics, and
/// offsets outside the log refused unless --clamp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reset_offsets_takes_every_kafka_option() {
    let broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "r", "--partitions", "3"], None);
    for p in 0..3 {
        let p = p.to_string();
        broker.cli_ok(
            &["produce", "r", "-p", &p],
            Some(b"1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n"),
        );
    }
    let reset = |args: &[&str]| {
        let mut all = vec!["group", "reset-offsets", "rg"];
        all.extend_from_slice(args);
        broker.cli(&all, None)
    };
    let ok = |args: &[&str]| {
        let out = reset(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let plan = ok(&["--topic", "r:0,2", "--to-offset", "4", "--execute"]);
    assert_eq!(
        plan,
        "GROUP\tTOPIC\tPARTITION\tNEW-OFFSET\nrg\tr\t0\t4\nrg\tr\t2\t4\n"
    );
    let shifted = ok(&["--topic", "r:0", "--shift-by", "-3", "--execute"]);
    assert!(shifted.contains("rg\tr\t0\t1\n"), "{shifted}");
    let current = ok(&["--all-topics", "--to-current"]);
    assert!(current.contains("rg\tr\t2\t4\n"), "{current}");
    // Partition 1 has no commit: --to-current cannot say where it is.
    assert!(!reset(&["--topic", "r", "--to-current"]).status.success());
    // Past the end: refused, or clamped.
    let out = reset(&["--topic", "r:2", "--shift-by", "100"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("--clamp"), "{err}");
    assert!(ok(&["--topic", "r:2", "--shift-by", "100", "--clamp"]).contains("rg\tr\t2\t10\n"));
    // An hour ago, everything was newer: the start.
    assert!(ok(&["--topic", "r:1", "--by-duration", "PT1H"]).contains("rg\tr\t1\t0\n"));
    let json: serde_json::Value =
        serde_json::from_str(&broker.cli_ok(&["group", "describe", "rg", "-o", "json"], None))
            .unwrap();
    assert_eq!(json["total_lag"], 9 + 6);
}

/// A produce that keeps failing is not silent: the first retriable error is logged at
/// once, and the records that never made it are reported when it gives up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_logged_and_undelivered_lines_reported() {
    let mut broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "flaky"], None);
    let mut child = spawn_cli(
        &broker,
        &[
            "produce",
            "flaky",
            "--retry-timeout-ms",
            "3000",
            "--request-timeout-ms",
            "1000",
        ],
    );
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"a\n").unwrap();
    stdin.flush().unwrap();
    wait_for(30, "the first line", async || {
        high_watermark(&broker, "flaky", 0).await == 1
    })
    .await;
    broker.kill();
    stdin.write_all(b"b\n").unwrap();
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("shale: warn: produce failed, retrying"),
        "{err}"
    );
    // tonic's status is told by its code and message, not dumped.
    assert!(
        !err.contains("MetadataMap") && !err.contains("details: ["),
        "{err}"
    );
    assert!(err.contains("line 2:"), "{err}");
    assert!(err.contains("1 of 2 records were not written"), "{err}");
}

/// A producer fed faster than a dead broker can take: it stops reading its input
/// (what it holds stays bounded) and, on SIGTERM, exits within its grace period,
/// reporting the records it could not write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_whose_broker_died_holds_little_and_exits_on_sigterm() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};
    let mut broker = Broker::start(&[]).await;
    broker.cli_ok(&["topic", "create", "stream"], None);
    let mut child = spawn_cli(&broker, &["produce", "stream", "--acks", "1"]);
    let mut stdin = child.stdin.take().unwrap();
    // Its output is drained as it comes (a failure is reported per line).
    let mut err_pipe = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut err_pipe, &mut text);
        text
    });
    let mut out_pipe = child.stdout.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut out_pipe, &mut std::io::sink()));
    stdin.write_all(b"first\n").unwrap();
    stdin.flush().unwrap();
    wait_for(30, "the first line to arrive", async || {
        high_watermark(&broker, "stream", 0).await == 1
    })
    .await;
    broker.kill();
    // Ten million lines, written until the producer stops reading.
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    let writer = std::thread::spawn(move || {
        for i in 0..10_000_000u64 {
            if stdin.write_all(format!("{i:08}\n").as_bytes()).is_err() {
                return;
            }
            w.store(i + 1, Ordering::Relaxed);
        }
    });
    // Until what it took stops growing.
    let mut last = 0;
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = written.load(Ordering::Relaxed);
        if now == last || now == 10_000_000 {
            break;
        }
        last = now;
    }
    let rss_kib: u64 = std::fs::read_to_string(format!("/proc/{}/status", child.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    let taken = written.load(Ordering::Relaxed);
    eprintln!(
        "[cli] a dead broker: the producer took {taken} lines and holds {} MiB",
        rss_kib >> 10
    );
    assert!(taken < 10_000_000, "it read the whole input");
    assert!(rss_kib < 256 << 10, "the producer holds {rss_kib} KiB");
    let signalled = Instant::now();
    signal(&child, "-TERM");
    let exited = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            signalled.elapsed() < Duration::from_secs(60),
            "still running a minute after SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("[cli] exited {:?} after SIGTERM", signalled.elapsed());
    let stderr = stderr.join().unwrap();
    assert!(
        !exited.success(),
        "records were lost, yet it exited successfully"
    );
    assert!(stderr.contains("were not written"), "{stderr}");
    drop(writer);
}
