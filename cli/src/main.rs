//! `shale`: the command-line client. Errors are one line on stderr and a non-zero exit;
//! output to a pipe whose reader has gone ends the command quietly.

mod acl;
mod admin;
mod consume;
mod find;
mod group;
mod out;
mod partition;
mod produce;
mod progress;
mod restore;
mod topic;
mod user;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use shale_client::{Client, ClientSecurity, TlsSettings};

use crate::out::OutputFormat;

#[derive(Parser)]
#[command(
    name = "shale",
    version,
    about = "Command-line client for the Shale broker",
    after_help = "Every command takes the global options; `shale COMMAND --help` describes one."
)]
struct Cli {
    /// Broker address(es), `host:port[,host:port…]`.
    #[arg(
        long,
        global = true,
        env = "SHALE_BOOTSTRAP",
        default_value = "127.0.0.1:9093",
        help_heading = "Global options"
    )]
    bootstrap: String,
    /// How long one produce/fetch call may take before it is retried elsewhere, in ms.
    #[arg(
        long,
        global = true,
        default_value_t = 30_000,
        help_heading = "Global options"
    )]
    request_timeout_ms: u64,
    /// How long produce/fetch keep retrying while leadership moves, in ms.
    #[arg(
        long,
        global = true,
        default_value_t = 60_000,
        help_heading = "Global options"
    )]
    retry_timeout_ms: u64,
    /// Output of describe, list, offsets, group, cluster and tiering commands.
    #[arg(
        short = 'o',
        long = "output",
        global = true,
        value_enum,
        default_value_t = OutputFormat::Text,
        help_heading = "Global options"
    )]
    output: OutputFormat,
    /// CA certificates (PEM) the brokers' certificates are checked against: connects
    /// with TLS.
    #[arg(long, global = true, env = "SHALE_TLS_CA", help_heading = "Security")]
    tls_ca: Option<PathBuf>,
    /// Client certificate (PEM), for listeners that require one (with --tls-key).
    #[arg(
        long,
        global = true,
        env = "SHALE_TLS_CERT",
        requires = "tls_key",
        help_heading = "Security"
    )]
    tls_cert: Option<PathBuf>,
    /// The client certificate's private key (PEM).
    #[arg(
        long,
        global = true,
        env = "SHALE_TLS_KEY",
        requires = "tls_cert",
        help_heading = "Security"
    )]
    tls_key: Option<PathBuf>,
    /// User to authenticate as, on listeners that require credentials. The password
    /// comes from SHALE_AUTH_PASSWORD or --auth-password-file, never from the
    /// command line.
    #[arg(
        long,
        global = true,
        env = "SHALE_AUTH_USER",
        help_heading = "Security"
    )]
    auth_user: Option<String>,
    /// File holding the password of --auth-user.
    #[arg(long, global = true, requires = "auth_user", help_heading = "Security")]
    auth_password_file: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// TLS and credentials from the security options.
    fn security(&self) -> anyhow::Result<ClientSecurity> {
        use anyhow::Context;
        let read =
            |p: &PathBuf| std::fs::read(p).with_context(|| format!("cannot read {}", p.display()));
        let tls = match &self.tls_ca {
            None if self.tls_cert.is_some() => anyhow::bail!("--tls-cert needs --tls-ca"),
            None => None,
            Some(ca) => Some(TlsSettings {
                ca: read(ca)?,
                identity: match (&self.tls_cert, &self.tls_key) {
                    (Some(cert), Some(key)) => Some((read(cert)?, read(key)?)),
                    _ => None,
                },
            }),
        };
        let credentials = match &self.auth_user {
            None => None,
            Some(user) => {
                let password = match &self.auth_password_file {
                    Some(path) => {
                        let text = String::from_utf8(read(path)?)
                            .with_context(|| format!("{} is not UTF-8", path.display()))?;
                        text.trim_end_matches(['\n', '\r']).to_string()
                    }
                    None => std::env::var("SHALE_AUTH_PASSWORD").map_err(|_| {
                        anyhow::anyhow!(
                            "--auth-user needs a password: set SHALE_AUTH_PASSWORD or give \
                             --auth-password-file"
                        )
                    })?,
                };
                Some((user.clone(), password))
            }
        };
        Ok(ClientSecurity { tls, credentials })
    }
}

#[derive(Subcommand)]
enum Command {
    /// Create, list, describe, alter and delete topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Produce records read from stdin, one per line, as each line is read.
    Produce(produce::ProduceArgs),
    /// Consume records and print them.
    Consume(consume::ConsumeArgs),
    /// Print partition offsets (`topic:partition:offset` per line).
    Offsets(admin::OffsetsArgs),
    /// Consumer groups: list, describe (lag), reset offsets, delete.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// The cluster: brokers and controller; preferred leader election.
    #[command(subcommand)]
    Cluster(admin::ClusterCommand),
    /// Partition reassignment: move replicas between brokers.
    #[command(subcommand)]
    Partition(partition::PartitionCommand),
    /// Tiered storage.
    #[command(subcommand)]
    Tiering(admin::TieringCommand),
    /// Records by key: every record with a key in a topic, within a time range,
    /// reading only the segments whose key filter may hold it.
    Find(find::FindArgs),
    /// ACLs: who may do what on topics, groups and the cluster.
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Users and their SCRAM credentials (SASL/SCRAM and PLAIN on Kafka listeners).
    #[command(subcommand)]
    User(user::UserCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Warnings (e.g. retries, a consumer position reset) go to stderr as `shale: warn:
    // ...`, like the CLI's own messages; RUST_LOG overrides the level.
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(Plain)
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
    let result = runtime.block_on(run(cli));
    // Whatever is still running (a stdin reader blocked on a terminal) ends with us.
    runtime.shutdown_background();
    match result {
        Ok(code) => code,
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

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let client = Client::connect_with(&cli.bootstrap, cli.security()?)
        .await?
        .with_request_timeout(Duration::from_millis(cli.request_timeout_ms))
        .with_retry_timeout(Duration::from_millis(cli.retry_timeout_ms));
    let output = cli.output;
    match cli.command {
        Command::Topic(cmd) => topic::run(client, cmd, output).await?,
        Command::Produce(args) => return produce::run(client, args).await,
        Command::Consume(args) => consume::run(client, args).await?,
        Command::Offsets(args) => admin::offsets(client, args, output).await?,
        Command::Group(cmd) => group::run(client, cmd, output).await?,
        Command::Cluster(cmd) => admin::cluster(client, cmd, output).await?,
        Command::Partition(cmd) => partition::run(client, cmd, output).await?,
        Command::Tiering(cmd) => admin::tiering(client, cmd, output).await?,
        Command::Find(args) => find::run(client, args, output).await?,
        Command::User(cmd) => user::run(client, cmd, output).await?,
        Command::Acl(cmd) => acl::run(client, cmd, output).await?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `key=value` (a topic config, a header).
fn parse_kv(s: &str) -> Result<(String, String), String> {
    s.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.to_string()))
        .ok_or_else(|| format!("expected key=value, got '{s}'"))
}

/// An RFC 3339 time, in ms since the epoch.
fn parse_rfc3339(s: &str) -> anyhow::Result<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(s).map_err(|e| {
        anyhow::anyhow!("'{s}' is not an RFC 3339 time ({e}), e.g. 2026-01-31T12:00:00Z")
    })?;
    Ok(t.timestamp_millis())
}

/// A ListOffsets time as Kafka's tools take it: `earliest`/`-2`, `latest`/`-1`,
/// milliseconds since the epoch, or an RFC 3339 time.
fn parse_list_time(s: &str) -> anyhow::Result<i64> {
    Ok(match s {
        "earliest" | "beginning" | "-2" => -2,
        "latest" | "end" | "-1" => -1,
        ms if ms.bytes().all(|b| b.is_ascii_digit()) => ms
            .parse()
            .map_err(|_| anyhow::anyhow!("'{ms}' is out of range"))?,
        other => parse_rfc3339(other)?,
    })
}

/// Log lines as `shale: LEVEL: message field=value ...`.
struct Plain;

impl<S, N> tracing_subscriber::fmt::FormatEvent<S, N> for Plain
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let level = event.metadata().level().as_str().to_lowercase();
        write!(writer, "shale: {level}: ")?;
        ctx.field_format().format_fields(writer.by_ref(), event)?;
        writeln!(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_times_take_kafka_spellings() {
        assert_eq!(parse_list_time("earliest").unwrap(), -2);
        assert_eq!(parse_list_time("-2").unwrap(), -2);
        assert_eq!(parse_list_time("latest").unwrap(), -1);
        assert_eq!(parse_list_time("-1").unwrap(), -1);
        assert_eq!(parse_list_time("1700000000000").unwrap(), 1_700_000_000_000);
        assert_eq!(
            parse_list_time("2026-01-31T12:00:00Z").unwrap(),
            1_769_860_800_000
        );
        assert!(parse_list_time("yesterday").is_err());
        assert!(parse_list_time("-5").is_err());
    }
}
