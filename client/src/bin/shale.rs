//! `shale`: the command-line client. Errors are one line on stderr and a non-zero exit.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Parser, Subcommand};
use shale_client::format::Format;
use shale_client::{
    Acks, Client, Consumer, GroupConfig, GroupConsumer, OffsetReset, Producer, ProducerRecord,
    StartFrom,
};
use shale_proto::batch::Compression;

#[derive(Parser)]
#[command(
    name = "shale",
    version,
    about = "Command-line client for the Shale broker"
)]
struct Cli {
    /// Broker address(es), `host:port[,host:port…]`.
    #[arg(
        long,
        global = true,
        env = "SHALE_BOOTSTRAP",
        default_value = "127.0.0.1:9093"
    )]
    bootstrap: String,
    /// How long one produce/fetch call may take before it is retried elsewhere.
    #[arg(long, global = true, default_value_t = 30_000)]
    request_timeout_ms: u64,
    /// How long produce/fetch keep retrying while leadership moves.
    #[arg(long, global = true, default_value_t = 60_000)]
    retry_timeout_ms: u64,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create, list, describe, alter and delete topics.
    #[command(subcommand)]
    Topic(TopicCommand),
    /// Produce records read from stdin, one per line.
    Produce(ProduceArgs),
    /// Consume records and print them.
    Consume(ConsumeArgs),
    /// Tiered storage.
    #[command(subcommand)]
    Tiering(TieringCommand),
    /// The cluster.
    #[command(subcommand)]
    Cluster(ClusterCommand),
    /// Consumer groups: list, describe (lag), reset offsets, delete.
    #[command(subcommand)]
    Group(GroupCommand),
    /// Print partition offsets: `topic:partition:offset` per line.
    Offsets {
        topic: String,
        /// earliest, latest, or an RFC 3339 time (first offset at or after it; -1 if none).
        #[arg(long, default_value = "latest")]
        time: String,
    },
}

#[derive(Subcommand)]
enum TopicCommand {
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Default: the broker's `cluster.default_replication_factor`.
        #[arg(long, default_value_t = -1)]
        replication_factor: i32,
        /// Topic config override, `key=value` (repeatable).
        #[arg(long = "config", value_parser = parse_kv)]
        configs: Vec<(String, String)>,
    },
    List,
    Describe {
        name: String,
    },
    /// Raise the partition count and/or change config overrides.
    Alter {
        name: String,
        /// New, larger partition count.
        #[arg(long)]
        partitions: Option<i32>,
        #[arg(long = "config", value_parser = parse_kv)]
        configs: Vec<(String, String)>,
        /// Remove an override, returning the key to the broker default (repeatable).
        #[arg(long = "delete-config")]
        delete_configs: Vec<String>,
    },
    Delete {
        name: String,
    },
}

#[derive(Subcommand)]
enum GroupCommand {
    /// Every group, its state and member count.
    List,
    /// Members, assignment, and per partition the committed offset, log end and lag.
    Describe { group: String },
    /// Set a group's committed offsets for a topic (the group must have no members).
    /// Prints the plan; writes it only with --execute.
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        #[arg(long, group = "to")]
        to_earliest: bool,
        #[arg(long, group = "to")]
        to_latest: bool,
        #[arg(long, group = "to")]
        to_offset: Option<i64>,
        /// RFC 3339 time: the first offset at or after it (the end if none).
        #[arg(long, group = "to")]
        to_datetime: Option<String>,
        #[arg(long)]
        execute: bool,
    },
    /// Delete a group without members and its committed offsets.
    Delete { group: String },
}

#[derive(Subcommand)]
enum ClusterCommand {
    /// Brokers (alive or not, lease expiry, partitions led and held) and the controller.
    Status,
}

#[derive(Subcommand)]
enum TieringCommand {
    /// Per partition: log start, local log start, remote start, highest uploaded offset,
    /// upload lag (segments, bytes), remote segments and bytes.
    Status { topic: Option<String> },
}

#[derive(Args)]
struct ProduceArgs {
    topic: String,
    /// Split each line at the first SEP into key and value.
    #[arg(long)]
    key_separator: Option<String>,
    /// Send every record to this partition.
    #[arg(long)]
    partition: Option<i32>,
    /// 0, 1 or all.
    #[arg(long, default_value = "1")]
    acks: Acks,
    /// Print `partition:offset` for each record once acknowledged, in input order.
    #[arg(long)]
    print_offsets: bool,
    /// Largest batch in bytes (before compression).
    #[arg(long, default_value_t = 256 * 1024)]
    batch_size: usize,
    /// none, gzip, snappy, lz4 or zstd.
    #[arg(long, default_value = "none")]
    compression: Compression,
    /// How long a batch waits for more records (linger.ms).
    #[arg(long, default_value_t = 5)]
    linger_ms: u64,
    /// Idempotent producer (default: on with --acks all).
    #[arg(long)]
    idempotence: Option<bool>,
}

#[derive(Args)]
struct ConsumeArgs {
    topic: String,
    #[arg(long, conflicts_with_all = ["offset", "from_time"])]
    from_beginning: bool,
    /// Start at this offset in every consumed partition.
    #[arg(long, conflicts_with = "from_time")]
    offset: Option<i64>,
    /// Start at the first record at or after this RFC 3339 time.
    #[arg(long)]
    from_time: Option<String>,
    /// Consume only this partition (default: all).
    #[arg(long)]
    partition: Option<i32>,
    /// Exit after this many records.
    #[arg(long)]
    max_messages: Option<u64>,
    /// Exit when nothing arrives for this long.
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    /// kcat-style format: %t %p %o %k %s %T %h %K %S.
    #[arg(long, default_value = "%s\\n")]
    format: Format,
    /// Consume as a member of this group: partitions are shared with the group's other
    /// members and the group's offsets are committed as records are printed.
    #[arg(long, conflicts_with_all = ["offset", "from_time", "partition"])]
    group: Option<String>,
    /// Group session timeout.
    #[arg(long, default_value_t = 10_000, requires = "group")]
    session_timeout_ms: u64,
    /// Group heartbeat interval.
    #[arg(long, default_value_t = 1_000, requires = "group")]
    heartbeat_interval_ms: u64,
}

fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got '{s}'"))
}

fn parse_time(s: &str) -> anyhow::Result<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|e| {
        anyhow::anyhow!("'{s}' is not an RFC 3339 time ({e}), e.g. 2026-01-31T12:00:00Z")
    })?;
    Ok(t.timestamp_millis())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Warnings (e.g. a consumer position reset) go to stderr; RUST_LOG overrides.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .without_time()
        .with_target(false)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("shale: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            if e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("shale: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    let client = Client::connect(&cli.bootstrap)
        .await?
        .with_request_timeout(Duration::from_millis(cli.request_timeout_ms))
        .with_retry_timeout(Duration::from_millis(cli.retry_timeout_ms));
    match cli.command {
        Command::Cluster(ClusterCommand::Status) => {
            let s = client.cluster_status().await?;
            let controller = match s.controller_id {
                -1 => "none".to_string(),
                id => format!("{id} (epoch {})", s.controller_epoch),
            };
            println!("Controller: {controller}");
            println!(
                "BROKER\tADDRESS\tALIVE\tLEASE_EXPIRES_MS\tLEADER_PARTITIONS\tREPLICA_PARTITIONS"
            );
            for b in s.brokers {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    b.broker_id,
                    b.address,
                    b.alive,
                    b.lease_expires_ms,
                    b.leader_partitions,
                    b.replica_partitions
                );
            }
            Ok(())
        }
        Command::Topic(cmd) => topic(client, cmd).await,
        Command::Produce(args) => produce(client, args).await,
        Command::Consume(args) => consume(client, args).await,
        Command::Group(cmd) => group(client, cmd).await,
        Command::Tiering(TieringCommand::Status { topic }) => {
            let status = client.tiering_status_full(topic.as_deref()).await?;
            let rows = status.partitions;
            let mut out = String::from(
                "TOPIC\tPARTITION\tTIERED\tLOG_START\tLOCAL_LOG_START\tREMOTE_START\tUPLOADED_TO\tLAG_SEGMENTS\tLAG_BYTES\tREMOTE_SEGMENTS\tREMOTE_BYTES\n",
            );
            for r in rows {
                out.push_str(&format!(
                    "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\n",
                    r.topic,
                    r.partition,
                    r.remote_storage_enabled,
                    r.log_start_offset,
                    r.local_log_start_offset,
                    r.remote_log_start_offset,
                    r.highest_uploaded_offset,
                    r.upload_lag_segments,
                    r.upload_lag_bytes,
                    r.remote_segments,
                    r.remote_bytes
                ));
            }
            out.push_str(&format!(
                "remote reads since start: {} GET requests, {} bytes\n",
                status.remote_get_requests, status.remote_bytes_fetched
            ));
            print!("{out}");
            Ok(())
        }
        Command::Offsets { topic, time } => {
            let ts = match time.as_str() {
                "earliest" => -2,
                "latest" => -1,
                other => parse_time(other)?,
            };
            let mut out = String::new();
            for p in 0..client.partition_count(&topic).await? {
                let offset = client.list_offset(&topic, p, ts).await?.unwrap_or(-1);
                out.push_str(&format!("{topic}:{p}:{offset}\n"));
            }
            print!("{out}");
            Ok(())
        }
    }
}

async fn topic(client: Client, cmd: TopicCommand) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            configs,
        } => {
            let id = client
                .create_topic(
                    &name,
                    partitions,
                    replication_factor,
                    configs.into_iter().collect(),
                )
                .await?;
            println!("created topic {name} ({id})");
        }
        TopicCommand::List => {
            for t in client.list_topics().await? {
                println!("{}", t.name);
            }
        }
        TopicCommand::Describe { name } => {
            let d = client.describe_topic(&name).await?;
            let t = d.topic.unwrap_or_default();
            println!(
                "Topic: {}\tTopicId: {}\tPartitions: {}\tReplicationFactor: {}",
                t.name, t.topic_id, t.partitions, t.replication_factor
            );
            let overrides: BTreeMap<_, _> = d.config_overrides.into_iter().collect();
            let list: Vec<String> = overrides.iter().map(|(k, v)| format!("{k}={v}")).collect();
            println!("Configs: {}", list.join(","));
            for p in d.partitions {
                let ids = |v: &[i32]| v.iter().map(i32::to_string).collect::<Vec<_>>().join(",");
                println!(
                    "\tPartition: {}\tLeader: {}\tLeaderEpoch: {}\tReplicas: {}\tIsr: {}\tLogStartOffset: {}\tLocalLogStartOffset: {}\tHighWatermark: {}\tLogEndOffset: {}\tSizeBytes: {}\tSegments: {}",
                    p.partition,
                    p.leader,
                    p.leader_epoch,
                    ids(&p.replicas),
                    ids(&p.isr),
                    p.log_start_offset,
                    p.local_log_start_offset,
                    p.high_watermark,
                    p.log_end_offset,
                    p.size_bytes,
                    p.segments
                );
            }
        }
        TopicCommand::Alter {
            name,
            partitions,
            configs,
            delete_configs,
        } => {
            if partitions.is_none() && configs.is_empty() && delete_configs.is_empty() {
                anyhow::bail!("nothing to alter: give --partitions, --config or --delete-config");
            }
            if !configs.is_empty() || !delete_configs.is_empty() {
                client
                    .alter_configs(&name, configs.into_iter().collect(), delete_configs)
                    .await?;
            }
            if let Some(n) = partitions {
                client.create_partitions(&name, n).await?;
            }
            println!("altered topic {name}");
        }
        TopicCommand::Delete { name } => {
            client.delete_topic(&name).await?;
            println!("deleted topic {name}");
        }
    }
    Ok(())
}

/// Lines per request: large enough to amortize a round trip, small enough to pipeline
/// reading stdin with sending.
const PRODUCE_CHUNK_LINES: usize = 20_000;
const PRODUCE_CHUNK_BYTES: usize = 4 * 1024 * 1024;

async fn produce(client: Client, args: ProduceArgs) -> anyhow::Result<()> {
    let mut producer = Producer::new(client, &args.topic, args.acks)
        .await?
        .with_batch_size(args.batch_size)
        .with_compression(args.compression)
        .with_linger(Duration::from_millis(args.linger_ms));
    if let Some(on) = args.idempotence {
        producer = producer.with_idempotence(on);
    }
    // A reader thread keeps the next chunk of lines ready while one is in flight.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<std::io::Result<Vec<Vec<u8>>>>(2);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        let mut lines = stdin.lock().split(b'\n');
        loop {
            let mut chunk = Vec::new();
            let mut bytes = 0;
            while chunk.len() < PRODUCE_CHUNK_LINES && bytes < PRODUCE_CHUNK_BYTES {
                match lines.next() {
                    Some(Ok(mut line)) => {
                        if line.last() == Some(&b'\r') {
                            line.pop();
                        }
                        bytes += line.len();
                        chunk.push(line);
                    }
                    Some(Err(e)) => {
                        let _ = tx.blocking_send(Err(e));
                        return;
                    }
                    None => break,
                }
            }
            let done = chunk.len() < PRODUCE_CHUNK_LINES && bytes < PRODUCE_CHUNK_BYTES;
            if !chunk.is_empty() && tx.blocking_send(Ok(chunk)).is_err() || done {
                return;
            }
        }
    });
    let separator = args.key_separator.as_deref().map(str::as_bytes);
    let stdout = std::io::stdout();
    let mut total = 0u64;
    // Chunks whose answers are still awaited: the next chunk is sent meanwhile.
    let mut pending: std::collections::VecDeque<Vec<shale_client::DeliveryFuture>> =
        Default::default();
    let print = |acked: Vec<shale_client::RecordMetadata>| -> std::io::Result<()> {
        if args.print_offsets {
            let mut out = String::with_capacity(acked.len() * 12);
            for m in acked {
                out.push_str(&format!("{}:{}\n", m.partition, m.offset));
            }
            stdout.lock().write_all(out.as_bytes())?;
        }
        Ok(())
    };
    while let Some(chunk) = rx.recv().await {
        let records: Vec<ProducerRecord> = chunk?
            .into_iter()
            .map(|line| {
                let (key, value) = match separator.and_then(|s| split_once(&line, s)) {
                    Some((k, v)) => (Some(Bytes::copy_from_slice(k)), Bytes::copy_from_slice(v)),
                    None => (None, Bytes::from(line)),
                };
                ProducerRecord {
                    key,
                    value: Some(value),
                    partition: args.partition,
                    ..Default::default()
                }
            })
            .collect();
        total += records.len() as u64;
        let mut futures = Vec::with_capacity(records.len());
        for r in records {
            futures.push(producer.send(r).await?);
        }
        pending.push_back(futures);
        while pending.len() > 2 {
            print(await_all(pending.pop_front().expect("len > 2")).await?)?;
        }
    }
    producer.flush().await?;
    for futures in pending {
        print(await_all(futures).await?)?;
    }
    stdout.lock().flush()?;
    tracing::debug!(records = total, "produced");
    Ok(())
}

async fn await_all(
    futures: Vec<shale_client::DeliveryFuture>,
) -> shale_client::Result<Vec<shale_client::RecordMetadata>> {
    let mut out = Vec::with_capacity(futures.len());
    for f in futures {
        out.push(f.await?);
    }
    Ok(out)
}

fn split_once<'a>(line: &'a [u8], sep: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
    if sep.is_empty() {
        return None;
    }
    line.windows(sep.len())
        .position(|w| w == sep)
        .map(|i| (&line[..i], &line[i + sep.len()..]))
}

/// Where a consume loop gets its records.
enum Source {
    Assigned(Box<Consumer>),
    Group(Box<GroupConsumer>),
}

impl Source {
    async fn poll(
        &mut self,
        wait: Duration,
    ) -> shale_client::Result<Vec<shale_client::ConsumedRecord>> {
        match self {
            Source::Assigned(c) => c.poll(wait).await,
            Source::Group(g) => g.poll(wait).await,
        }
    }

    /// Group members commit what was printed: per partition, the offset after the
    /// last record printed.
    async fn commit(&mut self, printed: BTreeMap<(String, i32), i64>) -> shale_client::Result<()> {
        match self {
            Source::Assigned(_) => Ok(()),
            Source::Group(g) => g.commit_offsets(printed).await,
        }
    }
}

async fn consume(client: Client, args: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(group) = &args.group {
        let mut config = GroupConfig::new(group);
        config.client_id = "shale-cli".into();
        config.session_timeout = Duration::from_millis(args.session_timeout_ms);
        config.heartbeat_interval = Duration::from_millis(args.heartbeat_interval_ms);
        // Offsets are committed after each batch of records is printed.
        config.auto_commit_interval = None;
        config.auto_offset_reset = if args.from_beginning {
            OffsetReset::Earliest
        } else {
            OffsetReset::Latest
        };
        let consumer = GroupConsumer::new(client, &[args.topic.as_str()], config);
        let mut source = Source::Group(Box::new(consumer));
        let r = consume_loop(&mut source, &args).await;
        if let Source::Group(g) = source {
            g.close().await?;
        }
        return r;
    }
    let start = if args.from_beginning {
        StartFrom::Earliest
    } else if let Some(o) = args.offset {
        StartFrom::Offset(o)
    } else if let Some(t) = &args.from_time {
        StartFrom::Timestamp(parse_time(t)?)
    } else {
        StartFrom::Latest
    };
    let consumer =
        Consumer::new(client, &args.topic, args.partition.map(|p| vec![p]), start).await?;
    consume_loop(&mut Source::Assigned(Box::new(consumer)), &args).await
}

async fn consume_loop(consumer: &mut Source, args: &ConsumeArgs) -> anyhow::Result<()> {
    let idle = args.idle_timeout_ms.map(Duration::from_millis);
    let mut last_record = Instant::now();
    let mut seen = 0u64;
    let stdout = std::io::stdout();
    let mut buf = Vec::with_capacity(1 << 16);
    loop {
        if args.max_messages.is_some_and(|m| seen >= m) {
            break;
        }
        let wait = match idle {
            Some(idle) => {
                let left = idle.saturating_sub(last_record.elapsed());
                if left.is_zero() {
                    break;
                }
                left.min(Duration::from_secs(1))
            }
            None => Duration::from_secs(1),
        };
        let records = consumer.poll(wait).await?;
        if !records.is_empty() {
            last_record = Instant::now();
        }
        let mut printed = BTreeMap::new();
        for r in records {
            if args.max_messages.is_some_and(|m| seen >= m) {
                break;
            }
            args.format.write(&mut buf, &r);
            printed.insert((r.topic.to_string(), r.partition), r.offset + 1);
            seen += 1;
        }
        {
            let mut out = stdout.lock();
            out.write_all(&buf)?;
            out.flush()?;
        }
        if !printed.is_empty()
            && let Err(e) = consumer.commit(printed).await
        {
            // The group moved on (rebalance): the next poll rejoins; records printed
            // since the last commit may be printed again by whoever takes them.
            tracing::warn!(error = %e, "commit failed");
        }
        buf.clear();
    }
    Ok(())
}

async fn group(client: Client, cmd: GroupCommand) -> anyhow::Result<()> {
    match cmd {
        GroupCommand::List => {
            println!("GROUP\tSTATE\tMEMBERS\tCOORDINATOR");
            for g in client.list_groups().await? {
                println!(
                    "{}\t{}\t{}\t{}",
                    g.group_id, g.state, g.members, g.coordinator
                );
            }
        }
        GroupCommand::Describe { group } => describe_group(&client, &group).await?,
        GroupCommand::ResetOffsets {
            group,
            topic,
            to_earliest,
            to_latest,
            to_offset,
            to_datetime,
            execute,
        } => {
            let d = client.describe_group(&group).await?;
            if !d.members.is_empty() {
                anyhow::bail!(
                    "group '{group}' is active ({} members, state {}): stop its consumers before resetting its offsets",
                    d.members.len(),
                    d.state
                );
            }
            let partitions = client.partition_count(&topic).await?;
            let ts = to_datetime.as_deref().map(parse_time).transpose()?;
            let mut plan = BTreeMap::new();
            for p in 0..partitions {
                let offset = if to_earliest {
                    client.list_offset(&topic, p, -2).await?.unwrap_or(0)
                } else if to_latest {
                    client.list_offset(&topic, p, -1).await?.unwrap_or(0)
                } else if let Some(o) = to_offset {
                    let earliest = client.list_offset(&topic, p, -2).await?.unwrap_or(0);
                    let latest = client.list_offset(&topic, p, -1).await?.unwrap_or(0);
                    o.clamp(earliest, latest)
                } else if let Some(ts) = ts {
                    match client.list_offset(&topic, p, ts).await? {
                        Some(o) => o,
                        None => client.list_offset(&topic, p, -1).await?.unwrap_or(0),
                    }
                } else {
                    anyhow::bail!(
                        "say where to: --to-earliest, --to-latest, --to-offset N or --to-datetime T"
                    );
                };
                plan.insert((topic.clone(), p), offset);
            }
            println!("GROUP\tTOPIC\tPARTITION\tNEW-OFFSET");
            for ((t, p), o) in &plan {
                println!("{group}\t{t}\t{p}\t{o}");
            }
            if execute {
                client.commit_group_offsets(&group, &plan).await?;
                eprintln!("offsets of group '{group}' reset");
            } else {
                eprintln!("dry run: nothing changed; add --execute to apply");
            }
        }
        GroupCommand::Delete { group } => {
            client.delete_group(&group).await?;
            eprintln!("group '{group}' deleted");
        }
    }
    Ok(())
}

async fn describe_group(client: &Client, group: &str) -> anyhow::Result<()> {
    use prost::Message;
    let d = client.describe_group(group).await?;
    let committed = client.committed_offsets(group).await?;
    if d.members.is_empty() && committed.is_empty() {
        anyhow::bail!(
            "GROUP_ID_NOT_FOUND: group '{group}' has no members and no committed offsets"
        );
    }
    // Who holds each partition.
    let mut owner: BTreeMap<(String, i32), (String, String, String)> = BTreeMap::new();
    for m in &d.members {
        let a =
            shale_proto::v1::ConsumerAssignment::decode(m.assignment.clone()).unwrap_or_default();
        for tp in a.partitions {
            for p in tp.partitions {
                owner.insert(
                    (tp.topic.clone(), p),
                    (
                        m.member_id.clone(),
                        m.client_id.clone(),
                        m.client_host.clone(),
                    ),
                );
            }
        }
    }
    let mut keys: std::collections::BTreeSet<(String, i32)> = committed.keys().cloned().collect();
    keys.extend(owner.keys().cloned());
    println!(
        "Group '{group}': state {}, generation {}, protocol {}, {} members",
        d.state,
        d.generation_id,
        if d.protocol_name.is_empty() {
            "-"
        } else {
            &d.protocol_name
        },
        d.members.len()
    );
    println!("TOPIC\tPARTITION\tCURRENT-OFFSET\tLOG-END-OFFSET\tLAG\tMEMBER-ID\tCLIENT-ID\tHOST");
    let mut total_lag = 0i64;
    for (t, p) in keys {
        let end = client.list_offset(&t, p, -1).await?.unwrap_or(0);
        let current = committed.get(&(t.clone(), p)).copied();
        let lag = current.map(|c| (end - c).max(0));
        total_lag += lag.unwrap_or(0);
        let (m, c, h) = owner
            .get(&(t.clone(), p))
            .cloned()
            .unwrap_or_else(|| ("-".into(), "-".into(), "-".into()));
        println!(
            "{t}\t{p}\t{}\t{end}\t{}\t{m}\t{c}\t{h}",
            current.map_or("-".to_string(), |c| c.to_string()),
            lag.map_or("-".to_string(), |l| l.to_string()),
        );
    }
    println!("TOTAL-LAG\t{total_lag}");
    Ok(())
}
