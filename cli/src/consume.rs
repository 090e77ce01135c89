//! `shale consume`: of chosen partitions, or as a member of a group. SIGINT or SIGTERM
//! ends it cleanly: a group member commits what it printed and leaves the group at
//! once, so its partitions move without waiting out the session timeout.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use clap::Args;
use shale_client::format::Format;
use shale_client::{Client, ConsumedRecord, Consumer, GroupConfig, GroupConsumer, OffsetReset};

use crate::out;
use crate::produce::Signals;

#[derive(Args)]
pub(crate) struct ConsumeArgs {
    /// The topic.
    topic: String,
    /// Start at the beginning (the same as `--offset beginning`).
    #[arg(long, conflicts_with_all = ["offset", "from_time"])]
    from_beginning: bool,
    /// Where to start in each partition: `beginning`/`earliest`, `end`/`latest` (the
    /// default), an offset, `-N` (N before the end, as kcat's -o -N), or `s@MS` (the
    /// first record at or after that time, ms since the epoch).
    #[arg(
        short = 'O',
        long,
        allow_hyphen_values = true,
        conflicts_with = "from_time"
    )]
    offset: Option<String>,
    /// Start at the first record at or after this RFC 3339 time.
    #[arg(long)]
    from_time: Option<String>,
    /// Consume only this partition (default: all).
    #[arg(short = 'p', long)]
    partition: Option<i32>,
    /// Exit after this many records.
    #[arg(short = 'c', long)]
    max_messages: Option<u64>,
    /// Exit when nothing arrives for this long, in ms.
    #[arg(long)]
    idle_timeout_ms: Option<u64>,
    /// Exit once every partition has been read to its end (kcat's -e).
    #[arg(short = 'e', long)]
    exit: bool,
    /// kcat-style format: %t topic, %p partition, %o offset, %k key, %s value,
    /// %T timestamp, %h headers, %K key length, %S value length, \n, \t.
    #[arg(short = 'f', long, default_value = "%s\\n")]
    format: Format,
    /// Consume as a member of this group: partitions are shared with the group's other
    /// members, and the group's offsets are committed as records are printed.
    #[arg(long, conflicts_with_all = ["offset", "from_time", "partition"])]
    group: Option<String>,
    /// Group session timeout, in ms.
    #[arg(long, default_value_t = 10_000, requires = "group")]
    session_timeout_ms: u64,
    /// Group heartbeat interval, in ms.
    #[arg(long, default_value_t = 1_000, requires = "group")]
    heartbeat_interval_ms: u64,
}

/// Where consumption starts, as `--offset` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Earliest,
    Latest,
    At(i64),
    /// N records before the end (never before the start).
    FromEnd(i64),
    Time(i64),
}

fn parse_start(s: &str) -> anyhow::Result<Start> {
    Ok(match s {
        "beginning" | "earliest" => Start::Earliest,
        "end" | "latest" => Start::Latest,
        _ => {
            if let Some(ms) = s.strip_prefix("s@") {
                Start::Time(
                    ms.parse().map_err(|_| {
                        anyhow::anyhow!("'{s}': s@ takes milliseconds since the epoch")
                    })?,
                )
            } else {
                let n: i64 = s.parse().map_err(|_| {
                    anyhow::anyhow!("'{s}' is not an offset: use beginning, end, N, -N or s@MS")
                })?;
                if n < 0 {
                    Start::FromEnd(-n)
                } else {
                    Start::At(n)
                }
            }
        }
    })
}

/// Where the records come from.
enum Source {
    Assigned(Box<Consumer>),
    Group(Box<GroupConsumer>),
}

impl Source {
    async fn poll(&mut self, wait: Duration) -> shale_client::Result<Vec<ConsumedRecord>> {
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

    /// Topic, partition and position of everything assigned now.
    fn positions(&self, topic: &str) -> Vec<(String, i32, i64)> {
        match self {
            Source::Assigned(c) => c
                .positions()
                .iter()
                .map(|(p, o)| (topic.to_string(), *p, *o))
                .collect(),
            Source::Group(g) => g
                .positions()
                .into_iter()
                .map(|((t, p), o)| (t, p, o))
                .collect(),
        }
    }
}

pub(crate) async fn run(client: Client, args: ConsumeArgs) -> anyhow::Result<()> {
    let mut source = if let Some(group) = &args.group {
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
        let consumer = GroupConsumer::new(client.clone(), &[args.topic.as_str()], config);
        Source::Group(Box::new(consumer))
    } else {
        let start = if args.from_beginning {
            Start::Earliest
        } else if let Some(o) = &args.offset {
            parse_start(o)?
        } else if let Some(t) = &args.from_time {
            Start::Time(crate::parse_rfc3339(t)?)
        } else {
            Start::Latest
        };
        let count = client.partition_count(&args.topic).await?;
        let partitions = match args.partition {
            Some(p) if !(0..count).contains(&p) => anyhow::bail!(
                "partition {p} does not exist: topic '{}' has {count} partitions",
                args.topic
            ),
            Some(p) => vec![p],
            None => (0..count).collect(),
        };
        let mut positions = BTreeMap::new();
        for p in partitions {
            positions.insert(p, start_offset(&client, &args.topic, p, start).await?);
        }
        // A position that leaves the log moves as the console consumer's does.
        let reset = if args.from_beginning {
            OffsetReset::Earliest
        } else {
            OffsetReset::Latest
        };
        Source::Assigned(Box::new(
            Consumer::at_positions(client.clone(), &args.topic, positions).with_offset_reset(reset),
        ))
    };
    let result = consume_loop(&client, &mut source, &args).await;
    if let Source::Group(g) = source {
        // Leaves the group now: its partitions go to the other members at once.
        g.close().await?;
    }
    result
}

async fn start_offset(client: &Client, topic: &str, p: i32, start: Start) -> anyhow::Result<i64> {
    let earliest =
        || async { Ok::<_, anyhow::Error>(client.list_offset(topic, p, -2).await?.unwrap_or(0)) };
    let latest =
        || async { Ok::<_, anyhow::Error>(client.list_offset(topic, p, -1).await?.unwrap_or(0)) };
    Ok(match start {
        Start::Earliest => earliest().await?,
        Start::Latest => latest().await?,
        Start::At(o) => o,
        Start::FromEnd(n) => (latest().await? - n).max(earliest().await?),
        Start::Time(ts) => match client.list_offset(topic, p, ts).await? {
            Some(o) => o,
            None => latest().await?,
        },
    })
}

async fn consume_loop(
    client: &Client,
    source: &mut Source,
    args: &ConsumeArgs,
) -> anyhow::Result<()> {
    let idle = args.idle_timeout_ms.map(Duration::from_millis);
    let mut last_record = Instant::now();
    let mut seen = 0u64;
    let mut buf = Vec::with_capacity(1 << 16);
    let mut stop = Signals::new()?;
    let mut progress = crate::progress::Progress::new("consumed");
    let mut lag_checked: Option<Instant> = None;
    let result = loop {
        if args.max_messages.is_some_and(|m| seen >= m) || out::stdout_closed() {
            break Ok(());
        }
        let wait = match idle {
            Some(idle) => {
                let left = idle.saturating_sub(last_record.elapsed());
                if left.is_zero() {
                    break Ok(());
                }
                left.min(Duration::from_secs(1))
            }
            None => Duration::from_secs(1),
        };
        let records = tokio::select! {
            r = source.poll(wait) => r,
            _ = stop.recv() => break Ok(()),
        };
        let records = match records {
            Ok(r) => r,
            Err(e) => break Err(e.into()),
        };
        if records.is_empty() {
            match at_end_if(args.exit, client, source, &args.topic).await {
                Ok(true) => break Ok(()),
                Ok(false) => continue,
                Err(e) => break Err(e),
            }
        }
        last_record = Instant::now();
        let mut printed = BTreeMap::new();
        let (mut sizes, before) = (0u64, seen);
        for r in records {
            if args.max_messages.is_some_and(|m| seen >= m) {
                break;
            }
            sizes += (r.key.as_ref().map_or(0, |k| k.len())
                + r.value.as_ref().map_or(0, |v| v.len())) as u64;
            args.format.write(&mut buf, &r);
            printed.insert((r.topic.to_string(), r.partition), r.offset + 1);
            seen += 1;
        }
        if let Err(e) = out::write(&buf) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                break Ok(()); // nothing printed: nothing to commit
            }
            break Err(e.into());
        }
        buf.clear();
        if progress.enabled() {
            // What is left of a bounded consume: its record budget, or the lag to the
            // end (`-e`), looked up once a second.
            let left = match args.max_messages {
                Some(m) => Some(m.saturating_sub(seen)),
                None if args.exit
                    && lag_checked.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) =>
                {
                    lag_checked = Some(Instant::now());
                    lag(client, source, &args.topic).await.ok()
                }
                None => None,
            };
            if left.is_some() || args.max_messages.is_some() {
                progress.set_left(left);
            }
            progress.add(seen - before, sizes);
        }
        if let Err(e) = source.commit(printed).await {
            // The group moved on (rebalance): the next poll rejoins; records printed
            // since the last commit may be printed again by whoever takes them.
            tracing::warn!(error = %e, "commit failed");
        }
    };
    progress.finish();
    result
}

/// With `-e`: whether every partition has been read to its end.
async fn at_end_if(
    exit: bool,
    client: &Client,
    source: &Source,
    topic: &str,
) -> anyhow::Result<bool> {
    Ok(exit && at_end(client, source, topic).await?)
}

/// Records between the consumer's positions and the partitions' ends.
async fn lag(client: &Client, source: &Source, topic: &str) -> anyhow::Result<u64> {
    let mut left = 0;
    for (t, p, position) in source.positions(topic) {
        let end = client.list_offset(&t, p, -1).await?.unwrap_or(0);
        left += (end - position).max(0) as u64;
    }
    Ok(left)
}

/// Whether every assigned partition has been read to its high watermark (a group
/// member with no partition yet is not at the end).
async fn at_end(client: &Client, source: &Source, topic: &str) -> anyhow::Result<bool> {
    let positions = source.positions(topic);
    if positions.is_empty() {
        return Ok(false);
    }
    for (t, p, position) in positions {
        if position < client.list_offset(&t, p, -1).await?.unwrap_or(0) {
            return Ok(false);
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_offsets_take_kcat_spellings() {
        assert_eq!(parse_start("beginning").unwrap(), Start::Earliest);
        assert_eq!(parse_start("earliest").unwrap(), Start::Earliest);
        assert_eq!(parse_start("end").unwrap(), Start::Latest);
        assert_eq!(parse_start("latest").unwrap(), Start::Latest);
        assert_eq!(parse_start("42").unwrap(), Start::At(42));
        assert_eq!(parse_start("-10").unwrap(), Start::FromEnd(10));
        assert_eq!(
            parse_start("s@1700000000000").unwrap(),
            Start::Time(1_700_000_000_000)
        );
        assert!(parse_start("s@soon").is_err());
        assert!(parse_start("middle").is_err());
    }
}
