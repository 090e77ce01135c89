//! `shale find TOPIC --key K`: every record with the key, through the segments' key
//! filters (only segments that may hold the key are read, local or remote).

use clap::Args;
use serde_json::json;
use shale_client::Client;
use shale_client::format::Format;

use crate::out::{self, OutputFormat};

#[derive(Args)]
pub(crate) struct FindArgs {
    /// The topic.
    topic: String,
    /// The key (UTF-8; with --hex-key, hex digits).
    #[arg(long)]
    key: String,
    /// The key is given in hex.
    #[arg(long)]
    hex_key: bool,
    /// Only records at or after this time (RFC 3339, or ms since the epoch).
    #[arg(long)]
    from_time: Option<String>,
    /// Only records at or before this time (RFC 3339, or ms since the epoch).
    #[arg(long)]
    to_time: Option<String>,
    /// At most this many records (per broker searched).
    #[arg(long, default_value_t = 100)]
    limit: i32,
    /// kcat-style format of each record (see `shale consume --help`).
    #[arg(short = 'f', long, default_value = "%p\\t%o\\t%T\\t%k\\t%s\\n")]
    format: Format,
}

fn time(s: &Option<String>) -> anyhow::Result<Option<i64>> {
    s.as_deref()
        .map(|t| match t.parse::<i64>() {
            Ok(ms) if ms >= 0 => Ok(ms),
            _ => crate::parse_rfc3339(t),
        })
        .transpose()
}

fn unhex(s: &str) -> anyhow::Result<Vec<u8>> {
    anyhow::ensure!(
        s.len().is_multiple_of(2),
        "--key: an odd number of hex digits"
    );
    (0..s.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&s[i..i + 2], 16)
                .map_err(|_| anyhow::anyhow!("--key: '{s}' is not hex"))
        })
        .collect()
}

pub(crate) async fn run(
    client: Client,
    args: FindArgs,
    output: OutputFormat,
) -> anyhow::Result<()> {
    let key = if args.hex_key {
        unhex(&args.key)?
    } else {
        args.key.clone().into_bytes()
    };
    let (from, to) = (time(&args.from_time)?, time(&args.to_time)?);
    let found = client
        .find_records(&args.topic, key.into(), from, to, args.limit)
        .await?;
    let summary = format!(
        "{} records{}; {} segments searched, {} skipped by key filter or time, {} matched, {} without a filter; {} object-store GETs, {} bytes read",
        found.records.len(),
        if found.truncated {
            " (limit reached)"
        } else {
            ""
        },
        found.segments_searched,
        found.segments_skipped,
        found.segments_matched,
        found.segments_without_filter,
        found.remote_gets,
        found.bytes_read,
    );
    match output {
        OutputFormat::Json => out::json(&json!({
            "records": found.records.iter().map(|r| json!({
                "partition": r.partition, "offset": r.offset, "timestamp": r.timestamp,
                "key": r.key.as_ref().map(|k| String::from_utf8_lossy(k).into_owned()),
                "value": r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()),
            })).collect::<Vec<_>>(),
            "truncated": found.truncated,
            "segments_searched": found.segments_searched,
            "segments_skipped": found.segments_skipped,
            "segments_matched": found.segments_matched,
            "segments_without_filter": found.segments_without_filter,
            "remote_gets": found.remote_gets,
            "bytes_read": found.bytes_read,
            "partitions_not_searched": found.partitions_not_searched,
        }))?,
        OutputFormat::Text => {
            let mut text = Vec::new();
            for r in &found.records {
                args.format.write(&mut text, r);
            }
            out::print(&String::from_utf8_lossy(&text))?;
            eprintln!("{summary}");
        }
    }
    if !found.partitions_not_searched.is_empty() {
        eprintln!(
            "warning: partitions {:?} have no live leader and were not searched",
            found.partitions_not_searched
        );
    }
    Ok(())
}
