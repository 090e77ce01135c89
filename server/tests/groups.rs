//! Consumer groups against a real broker: partitions split within a group and shared
//! across groups, idle members, a member killed mid-stream, committed offsets across a
//! restart, lag, reset-offsets and delete through the CLI, and the bad-input cases.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Broker, Member, settle};
use shale_client::{Acks, Assignor, Client, GroupConfig, OffsetReset, Producer, ProducerRecord};
use shale_proto::v1::groups_client::GroupsClient;
use shale_proto::v1::*;
use shale_records::ErrorCode;

const GROUPS_TOML: &str =
    "[groups]\nmin_session_timeout_ms = 500\ninitial_rebalance_delay_ms = 0\n";

async fn start_broker() -> (Broker, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = common::write_config(dir.path(), GROUPS_TOML);
    let broker = Broker::start(&["--config", cfg.to_str().unwrap()]).await;
    (broker, dir)
}

fn config(group: &str) -> GroupConfig {
    let mut c = GroupConfig::new(group);
    c.session_timeout = Duration::from_secs(3);
    c.heartbeat_interval = Duration::from_millis(200);
    c.auto_commit_interval = None;
    c.auto_offset_reset = OffsetReset::Earliest;
    c
}

async fn produce(c: &Client, topic: &str, n: usize, tag: &str) {
    let mut p = Producer::new(c.clone(), topic, Acks::All).await.unwrap();
    let records = (0..n)
        .map(|i| ProducerRecord {
            key: Some(format!("key-{i}").into()),
            value: Some(format!("{tag}-{i}").into()),
            ..Default::default()
        })
        .collect();
    p.send_all(records).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_split_partitions_groups_share_them_and_extra_members_idle() {
    let (broker, _cfg) = start_broker().await;
    let c = broker.client().await;
    c.create_topic("orders", 6, 1, BTreeMap::new())
        .await
        .unwrap();

    // Three members of one group: two partitions each.
    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::start(&c, "orders", config("billing")))
        .collect();
    let took = settle(&members, |a| a.iter().all(|a| a.len() == 2)).await;
    println!("3 members settled on 2 partitions each in {took:?}");
    let owned: Vec<BTreeSet<(String, i32)>> = members
        .iter()
        .map(|m| m.assignment().into_iter().collect())
        .collect();
    let all: BTreeSet<_> = owned.iter().flatten().cloned().collect();
    assert_eq!(all.len(), 6, "every partition assigned once: {owned:?}");

    // Every record read exactly once, each by the owner of its partition.
    produce(&c, "orders", 3000, "o").await;
    let mut seen: BTreeMap<(i32, i64), String> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.len() < 3000 {
        for (i, m) in members.iter_mut().enumerate() {
            while let Ok(r) = m.records.try_recv() {
                assert!(owned[i].contains(&(r.topic.to_string(), r.partition)));
                let value = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                assert!(
                    seen.insert((r.partition, r.offset), value).is_none(),
                    "read twice: {}@{}",
                    r.partition,
                    r.offset
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "only {} of 3000 read",
            seen.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let values: BTreeSet<&String> = seen.values().collect();
    assert_eq!(values.len(), 3000);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let committed = c.committed_offsets("billing").await.unwrap();
        if committed.values().sum::<i64>() == 3000 {
            break;
        }
        assert!(Instant::now() < deadline, "commits missing: {committed:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Another group reads everything too (pub-sub), from the beginning.
    let mut other = Member::start(&c, "orders", config("audit"));
    let mut count = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    while count < 3000 {
        assert!(Instant::now() < deadline, "the second group read {count}");
        if tokio::time::timeout(Duration::from_millis(100), other.records.recv())
            .await
            .is_ok()
        {
            count += 1;
        }
    }
    assert_eq!(other.assignment().len(), 6);
    other.stop().await;

    // A 4th and a 5th member on a 3-partition topic: two idle.
    c.create_topic("small", 3, 1, BTreeMap::new())
        .await
        .unwrap();
    let five: Vec<Member> = (0..5)
        .map(|_| Member::start(&c, "small", config("five")))
        .collect();
    settle(&five, |a| {
        a.len() == 5 && a.iter().filter(|a| a.len() == 1).count() == 3
    })
    .await;
    let sizes: Vec<usize> = five.iter().map(|m| m.assignment().len()).collect();
    assert_eq!(sizes.iter().filter(|&&n| n == 0).count(), 2, "{sizes:?}");
    for m in five {
        m.stop().await;
    }

    // A member leaving: its partitions move, the sticky assignor keeps the rest.
    for m in members.drain(..) {
        m.stop().await;
    }
    let mut sticky_config = config("sticky");
    sticky_config.assignors = vec![Assignor::Sticky];
    let mut sticky: Vec<Member> = (0..3)
        .map(|_| Member::start(&c, "orders", sticky_config.clone()))
        .collect();
    settle(&sticky, |a| a.iter().all(|a| a.len() == 2)).await;
    let before: Vec<Vec<(String, i32)>> = sticky.iter().map(Member::assignment).collect();
    let left = Instant::now();
    sticky.pop().unwrap().stop().await;
    let took = settle(&sticky, |a| a.iter().all(|a| a.len() == 3)).await;
    println!(
        "rebalance after a member left: {:?} (settled {took:?} after the leave)",
        left.elapsed()
    );
    for (i, m) in sticky.iter().enumerate() {
        let now = m.assignment();
        assert!(
            before[i].iter().all(|tp| now.contains(tp)),
            "member {i} lost a partition it had: {:?} -> {now:?}",
            before[i]
        );
    }
}

/// A `shale consume --group` process printing `partition:offset` lines to a file.
struct CliConsumer {
    child: Child,
    out: std::path::PathBuf,
}

impl CliConsumer {
    fn start(address: &str, dir: &std::path::Path, name: &str, group: &str, topic: &str) -> Self {
        let out = dir.join(format!("{name}.out"));
        let child = Command::new(common::cli_bin())
            .args(["--bootstrap", address, "consume", topic, "--group", group])
            .args(["--from-beginning", "--format", "%p:%o\\n"])
            .args([
                "--session-timeout-ms",
                "2000",
                "--heartbeat-interval-ms",
                "200",
            ])
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(dir.join(format!("{name}.err"))).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        Self { child, out }
    }

    fn lines(&self) -> Vec<(i32, i64)> {
        std::fs::read_to_string(&self.out)
            .unwrap()
            .lines()
            .filter_map(|l| {
                let (p, o) = l.split_once(':')?;
                Some((p.parse().ok()?, o.parse().ok()?))
            })
            .collect()
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for CliConsumer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_s_partitions_move_to_the_others_without_a_gap() {
    let (broker, _cfg) = start_broker().await;
    let c = broker.client().await;
    c.create_topic("stream", 6, 1, BTreeMap::new())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut consumers: Vec<CliConsumer> = (0..3)
        .map(|i| {
            CliConsumer::start(
                &broker.address(),
                dir.path(),
                &format!("c{i}"),
                "workers",
                "stream",
            )
        })
        .collect();
    // Wait until the group is stable with three members.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let d = c.describe_group("workers").await.unwrap();
        if d.state == "Stable" && d.members.len() == 3 {
            break;
        }
        assert!(Instant::now() < deadline, "group never stable: {d:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    produce(&c, "stream", 3000, "a").await;
    // Mid-stream: everyone has printed something; kill one with SIGKILL.
    let deadline = Instant::now() + Duration::from_secs(30);
    while consumers.iter().any(|c| c.lines().is_empty()) {
        assert!(Instant::now() < deadline, "a consumer printed nothing");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let victim_partitions: BTreeSet<i32> = consumers[0].lines().iter().map(|(p, _)| *p).collect();
    consumers[0].kill();
    let killed = Instant::now();
    produce(&c, "stream", 3000, "b").await;

    // The others take the victim's partitions; together everything is read.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut moved_after = None;
    loop {
        let survivors: BTreeSet<(i32, i64)> =
            consumers[1..].iter().flat_map(|c| c.lines()).collect();
        if moved_after.is_none()
            && victim_partitions
                .iter()
                .all(|p| survivors.iter().any(|(q, o)| q == p && *o >= 500))
        {
            moved_after = Some(killed.elapsed());
        }
        let all: BTreeSet<(i32, i64)> = consumers.iter().flat_map(|c| c.lines()).collect();
        if all.len() == 6000 && moved_after.is_some() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{} of 6000 read after the kill",
            all.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!(
        "killed member's partitions {victim_partitions:?} read by the others {:?} after the kill (session timeout 2 s)",
        moved_after.unwrap()
    );
    // No gap: every partition's offsets are dense from 0 to its end.
    let all: Vec<(i32, i64)> = consumers.iter().flat_map(|c| c.lines()).collect();
    let distinct: BTreeSet<(i32, i64)> = all.iter().copied().collect();
    for p in 0..6 {
        let end = c.list_offset("stream", p, -1).await.unwrap().unwrap();
        let got = distinct.iter().filter(|(q, _)| *q == p).count() as i64;
        assert_eq!(got, end, "partition {p}: a gap");
    }
    println!(
        "at-least-once: {} lines for {} records ({} read again after the kill)",
        all.len(),
        distinct.len(),
        all.len() - distinct.len()
    );
    let d = c.describe_group("workers").await.unwrap();
    assert_eq!(d.members.len(), 2);
}

/// Waits until the group's member count satisfies `want`.
async fn wait_for_members(c: &Client, group: &str, want: impl Fn(usize) -> bool, why: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !want(c.describe_group(group).await.unwrap().members.len()) {
        assert!(Instant::now() < deadline, "{why}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn cli(broker: &Broker, args: &[&str]) -> std::process::Output {
    broker.cli(args, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_survive_a_restart_and_the_cli_reports_lag_resets_and_deletes() {
    let (mut broker, _cfg) = start_broker().await;
    let c = broker.client().await;
    c.create_topic("logs", 2, 1, BTreeMap::new()).await.unwrap();
    let input: String = (0..100).map(|i| format!("k{i}\tline-{i}\n")).collect();
    broker.cli_ok(
        &["produce", "logs", "--key-separator", "\t", "--acks", "all"],
        Some(input.as_bytes()),
    );
    let first = broker.cli_ok(
        &[
            "consume",
            "logs",
            "--group",
            "readers",
            "--from-beginning",
            "--max-messages",
            "60",
        ],
        None,
    );
    assert_eq!(first.lines().count(), 60);
    let lag_of = |out: &str| -> i64 {
        out.lines()
            .find_map(|l| l.strip_prefix("TOTAL-LAG\t"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no total lag in:\n{out}"))
    };
    // Per partition: committed offset, log end, lag = end - committed; a partition
    // without a commit shows "-" (as in Kafka) and adds nothing to the total.
    let described = broker.cli_ok(&["group", "describe", "readers"], None);
    let rows: Vec<Vec<String>> = described
        .lines()
        .filter(|l| l.starts_with("logs\t"))
        .map(|l| l.split('\t').map(String::from).collect())
        .collect();
    let mut committed_sum = 0;
    let mut lag_sum = 0;
    for r in &rows {
        let end: i64 = r[3].parse().unwrap();
        if r[2] == "-" {
            assert_eq!(r[4], "-", "{described}");
            continue;
        }
        let (current, lag): (i64, i64) = (r[2].parse().unwrap(), r[4].parse().unwrap());
        assert_eq!(end - current, lag, "{described}");
        committed_sum += current;
        lag_sum += lag;
    }
    assert_eq!(
        committed_sum, 60,
        "the 60 printed records are committed: {described}"
    );
    assert_eq!(lag_of(&described), lag_sum, "{described}");
    let lag_before = lag_sum;

    // A SIGKILL of the broker loses no committed offset.
    broker.kill();
    broker.start_again().await;
    let after = broker.cli_ok(&["group", "describe", "readers"], None);
    assert_eq!(lag_of(&after), lag_before, "{after}");
    let list = broker.cli_ok(&["group", "list"], None);
    assert!(list.lines().any(|l| l.starts_with("readers\t")), "{list}");

    // The rest, exactly: the group resumes where it committed (and, in a partition
    // it never committed, at the earliest offset).
    let rest = broker.cli_ok(
        &[
            "consume",
            "logs",
            "--group",
            "readers",
            "--from-beginning",
            "--idle-timeout-ms",
            "1500",
        ],
        None,
    );
    let mut all: Vec<&str> = first.lines().chain(rest.lines()).collect();
    all.sort();
    all.dedup();
    assert_eq!((rest.lines().count(), all.len()), (40, 100), "{rest}");
    assert_eq!(
        lag_of(&broker.cli_ok(&["group", "describe", "readers"], None)),
        0
    );

    // While a member is active, reset-offsets and delete are refused.
    let dir = tempfile::tempdir().unwrap();
    let mut active = CliConsumer::start(&broker.address(), dir.path(), "active", "readers", "logs");
    wait_for_members(&c, "readers", |n| n > 0, "the consumer never joined").await;
    let refused = cli(
        &broker,
        &[
            "group",
            "reset-offsets",
            "readers",
            "--topic",
            "logs",
            "--to-earliest",
            "--execute",
        ],
    );
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("is active"), "{err}");
    let refused = cli(&broker, &["group", "delete", "readers"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("NON_EMPTY_GROUP"));
    assert_eq!(
        lag_of(&broker.cli_ok(&["group", "describe", "readers"], None)),
        0
    );
    active.kill();
    // Its session (2 s) expires; then the group is empty.
    wait_for_members(&c, "readers", |n| n == 0, "the killed member never expired").await;

    // Dry run by default; --execute writes.
    let plan = broker.cli_ok(
        &[
            "group",
            "reset-offsets",
            "readers",
            "--topic",
            "logs",
            "--to-earliest",
        ],
        None,
    );
    assert_eq!(
        plan.lines().filter(|l| l.ends_with("\t0")).count(),
        2,
        "{plan}"
    );
    assert_eq!(
        lag_of(&broker.cli_ok(&["group", "describe", "readers"], None)),
        0
    );
    broker.cli_ok(
        &[
            "group",
            "reset-offsets",
            "readers",
            "--topic",
            "logs",
            "--to-offset",
            "10",
            "--execute",
        ],
        None,
    );
    assert_eq!(
        lag_of(&broker.cli_ok(&["group", "describe", "readers"], None)),
        100 - 20
    );
    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    broker.cli_ok(
        &[
            "group",
            "reset-offsets",
            "readers",
            "--topic",
            "logs",
            "--to-datetime",
            &since.to_rfc3339(),
            "--execute",
        ],
        None,
    );
    assert_eq!(
        lag_of(&broker.cli_ok(&["group", "describe", "readers"], None)),
        100
    );
    broker.cli_ok(
        &[
            "group",
            "reset-offsets",
            "readers",
            "--topic",
            "logs",
            "--to-latest",
            "--execute",
        ],
        None,
    );
    assert_eq!(
        lag_of(&broker.cli_ok(&["group", "describe", "readers"], None)),
        0
    );

    broker.cli_ok(&["group", "delete", "readers"], None);
    let list = broker.cli_ok(&["group", "list"], None);
    assert!(!list.contains("readers"), "{list}");
    let gone = cli(&broker, &["group", "delete", "readers"]);
    assert!(String::from_utf8_lossy(&gone.stderr).contains("GROUP_ID_NOT_FOUND"));
    let gone = cli(&broker, &["group", "describe", "readers"]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("GROUP_ID_NOT_FOUND"));
}

fn code(r: &Option<ErrorResult>) -> i32 {
    r.as_ref().map_or(0, |e| e.error_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_generations_unknown_members_and_bad_commits_get_their_codes_and_write_nothing() {
    let (broker, _cfg) = start_broker().await;
    let c = broker.client().await;
    c.create_topic("t", 2, 1, BTreeMap::new()).await.unwrap();
    let mut g = GroupsClient::connect(format!("http://{}", broker.address()))
        .await
        .unwrap();
    let join = |member: &str, session: i32, group: &str| JoinGroupRequest {
        group_id: group.into(),
        member_id: member.into(),
        client_id: "raw".into(),
        session_timeout_ms: session,
        rebalance_timeout_ms: 5000,
        protocol_type: "consumer".into(),
        protocols: vec![GroupProtocol {
            name: "range".into(),
            metadata: Default::default(),
        }],
    };
    let j = g
        .join_group(join("", 3000, "g"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&j.error), 0);
    let s = g
        .sync_group(SyncGroupRequest {
            group_id: "g".into(),
            generation_id: j.generation_id,
            member_id: j.member_id.clone(),
            assignments: vec![],
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&s.error), 0);
    let commit = |generation: i32, member: &str, partition: i32, topic: &str| OffsetCommitRequest {
        group_id: "g".into(),
        generation_id: generation,
        member_id: member.into(),
        partitions: vec![OffsetCommitPartition {
            topic: topic.into(),
            partition,
            offset: 7,
            metadata: String::new(),
        }],
    };
    let ok = g
        .offset_commit(commit(j.generation_id, &j.member_id, 0, "t"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&ok.error), 0);
    assert_eq!(ok.partitions[0].error_code, 0);

    let stale = g
        .offset_commit(commit(j.generation_id - 1, &j.member_id, 1, "t"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&stale.error), ErrorCode::IllegalGeneration as i32);
    let unknown = g
        .offset_commit(commit(j.generation_id, "nobody", 1, "t"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&unknown.error), ErrorCode::UnknownMemberId as i32);
    let admin = g
        .offset_commit(commit(-1, "", 1, "t"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        code(&admin.error),
        ErrorCode::NonEmptyGroup as i32,
        "the group has a member"
    );
    let no_partition = g
        .offset_commit(commit(j.generation_id, &j.member_id, 9, "t"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        no_partition.partitions[0].error_code,
        ErrorCode::UnknownTopicOrPartition as i32
    );
    let no_topic = g
        .offset_commit(commit(j.generation_id, &j.member_id, 0, "nope"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        no_topic.partitions[0].error_code,
        ErrorCode::UnknownTopicOrPartition as i32
    );
    let committed = c.committed_offsets("g").await.unwrap();
    assert_eq!(
        committed,
        BTreeMap::from([(("t".to_string(), 0), 7)]),
        "only the valid commit was written"
    );

    let hb = g
        .heartbeat(HeartbeatRequest {
            group_id: "g".into(),
            generation_id: j.generation_id,
            member_id: "nobody".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&hb.error), ErrorCode::UnknownMemberId as i32);
    let hb = g
        .heartbeat(HeartbeatRequest {
            group_id: "g".into(),
            generation_id: j.generation_id + 5,
            member_id: j.member_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&hb.error), ErrorCode::IllegalGeneration as i32);
    let bad = g.join_group(join("", 10, "g2")).await.unwrap().into_inner();
    assert_eq!(code(&bad.error), ErrorCode::InvalidSessionTimeout as i32);
    let bad = g.join_group(join("", 3000, "")).await.unwrap().into_inner();
    assert_eq!(code(&bad.error), ErrorCode::InvalidGroupId as i32);
    let bad = g
        .join_group(join("ghost", 3000, "g"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&bad.error), ErrorCode::UnknownMemberId as i32);
    let mut other = join("", 3000, "g");
    other.protocol_type = "connect".into();
    let bad = g.join_group(other).await.unwrap().into_inner();
    assert_eq!(
        code(&bad.error),
        ErrorCode::InconsistentGroupProtocol as i32
    );
    // None of that disturbed the member.
    let hb = g
        .heartbeat(HeartbeatRequest {
            group_id: "g".into(),
            generation_id: j.generation_id,
            member_id: j.member_id.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(code(&hb.error), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_partitions_of_a_subscribed_topic_are_assigned_after_a_rebalance() {
    let (broker, _cfg) = start_broker().await;
    let c = broker.client().await;
    c.create_topic("growing", 2, 1, BTreeMap::new())
        .await
        .unwrap();
    let mut cfg = config("grow");
    cfg.metadata_max_age = Duration::from_millis(200);
    let members: Vec<Member> = (0..2)
        .map(|_| Member::start(&c, "growing", cfg.clone()))
        .collect();
    settle(&members, |a| a.iter().all(|a| a.len() == 1)).await;
    c.create_partitions("growing", 6).await.unwrap();
    let added = Instant::now();
    let took = settle(&members, |a| a.iter().all(|a| a.len() == 3)).await;
    println!(
        "6 partitions assigned {:?} after the topic grew (settled in {took:?})",
        added.elapsed()
    );
    let mut all: Vec<(String, i32)> = members.iter().flat_map(Member::assignment).collect();
    all.sort();
    assert_eq!(
        all,
        (0..6)
            .map(|p| ("growing".to_string(), p))
            .collect::<Vec<_>>()
    );
    for m in members {
        m.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_stops_polling_leaves_and_its_partitions_move() {
    let (broker, _cfg) = start_broker().await;
    let c = broker.client().await;
    c.create_topic("slow", 4, 1, BTreeMap::new()).await.unwrap();
    let mut cfg = config("pollers");
    cfg.max_poll_interval = Duration::from_millis(800);
    let active = Member::start(&c, "slow", cfg.clone());
    let mut stuck = shale_client::GroupConsumer::new(c.clone(), &["slow"], cfg);
    // Both poll until each holds two partitions; then `stuck` stops polling (its
    // heartbeats go on: only max.poll.interval can notice).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(stuck.assignment().len() == 2 && active.assignment().len() == 2) {
        stuck.poll(Duration::from_millis(50)).await.unwrap();
        assert!(Instant::now() < deadline, "never split 2/2");
    }
    let stopped = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    while active.assignment().len() != 4 {
        assert!(
            Instant::now() < deadline,
            "the idle member kept its partitions"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "the member that stopped polling lost its partitions {:?} later (max.poll.interval 800 ms)",
        stopped.elapsed()
    );
    let d = c.describe_group("pollers").await.unwrap();
    assert_eq!(d.members.len(), 1);
    // Polling again, it joins again and the partitions are split again.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(active.assignment().len() == 2 && stuck.assignment().len() == 2) {
        stuck.poll(Duration::from_millis(50)).await.unwrap();
        assert!(Instant::now() < deadline, "it never rejoined");
    }
    assert_eq!(c.describe_group("pollers").await.unwrap().members.len(), 2);
    active.stop().await;
}

/// Records what it is told; on revocation asks to commit offset 7 everywhere.
struct Recorder(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl shale_client::RebalanceListener for Recorder {
    fn on_revoked(&mut self, partitions: &[(String, i32)]) -> BTreeMap<(String, i32), i64> {
        self.0
            .lock()
            .unwrap()
            .push(format!("revoked {partitions:?}"));
        partitions.iter().map(|tp| (tp.clone(), 7)).collect()
    }

    fn on_assigned(&mut self, partitions: &[((String, i32), i64)]) {
        self.0
            .lock()
            .unwrap()
            .push(format!("assigned {partitions:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebalance_listener_hears_of_revocations_and_assignments() {
    let (broker, _cfg) = start_broker().await;
    let c = broker.client().await;
    c.create_topic("heard", 2, 1, BTreeMap::new())
        .await
        .unwrap();
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut a = shale_client::GroupConsumer::new(c.clone(), &["heard"], config("listening"))
        .with_listener(Recorder(events.clone()));
    while a.assignment().len() != 2 {
        a.poll(Duration::from_millis(50)).await.unwrap();
    }
    let b = Member::start(&c, "heard", config("listening"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(a.assignment().len() == 1 && b.assignment().len() == 1) {
        a.poll(Duration::from_millis(50)).await.unwrap();
        assert!(Instant::now() < deadline, "never split");
    }
    let kept = a.assignment()[0].clone();
    let events = events.lock().unwrap().clone();
    assert_eq!(
        events,
        [
            format!(
                "assigned {:?}",
                [(("heard".to_string(), 0), 0), (("heard".to_string(), 1), 0)]
            ),
            format!(
                "revoked {:?}",
                [("heard".to_string(), 0), ("heard".to_string(), 1)]
            ),
            // The offsets returned on revocation were committed, so it resumes there.
            format!("assigned {:?}", [(kept, 7)]),
        ]
    );
    let committed = c.committed_offsets("listening").await.unwrap();
    assert_eq!(committed.values().copied().collect::<Vec<_>>(), [7, 7]);
    b.stop().await;
}
