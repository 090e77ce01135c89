//! What scenarios start: broker processes (the `shale-broker` built beside this binary),
//! an `s3s-fs` server, and readings of a process's peak RSS and CPU time.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use shale_client::Client;

pub(crate) use shale_testkit::free_port;

/// `shale-broker` next to this binary (`cargo build --bins` puts them together).
fn broker_bin() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe()?;
    let path = me.with_file_name("shale-broker");
    if !path.exists() {
        bail!(
            "{} is missing: build it with `cargo build --release --bins`",
            path.display()
        );
    }
    Ok(path)
}

/// A broker process with its own data directory.
pub(crate) struct BrokerProcess {
    pub dir: tempfile::TempDir,
    pub port: u16,
    args: Vec<String>,
    process: shale_testkit::broker::BrokerProcess,
}

impl BrokerProcess {
    /// Starts a broker on the embedded default (SQLite, file object store) unless `args`
    /// say otherwise; `config` is written to a TOML file passed with `--config`.
    pub(crate) async fn start(config: &str, args: &[String], base: &Path) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir_in(base)?;
        let cfg = dir.path().join("shale.toml");
        std::fs::write(&cfg, config)?;
        let mut all = vec!["--config".to_string(), cfg.display().to_string()];
        all.extend(args.iter().cloned());
        let mut b = BrokerProcess {
            process: shale_testkit::broker::BrokerProcess::new(dir.path().join("broker.log")),
            dir,
            port: free_port(),
            args: all,
        };
        b.spawn().await?;
        Ok(b)
    }

    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid().unwrap_or(0)
    }

    /// Starts the process and waits until it answers; returns how long that took.
    pub(crate) async fn spawn(&mut self) -> anyhow::Result<Duration> {
        let start = Instant::now();
        let mut command = Command::new(broker_bin()?);
        command
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg(self.address())
            .args(&self.args)
            .env(
                "RUST_LOG",
                std::env::var("SHALE_BENCH_BROKER_LOG").unwrap_or_else(|_| "warn".into()),
            );
        (self.process.spawn(command)).context("cannot start shale-broker")?;
        let deadline = start + Duration::from_secs(120);
        loop {
            if let Ok(c) = Client::connect(&self.address()).await
                && c.list_topics().await.is_ok()
            {
                return Ok(start.elapsed());
            }
            if let Some(status) = self.process.exited() {
                bail!("shale-broker exited with {status}: {}", self.log_tail());
            }
            if Instant::now() > deadline {
                bail!("shale-broker did not become ready: {}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn log_tail(&self) -> String {
        let log = self.process.started_log();
        log.lines().rev().take(5).collect::<Vec<_>>().join(" | ")
    }

    pub(crate) fn stats(&self) -> ProcessStats {
        ProcessStats::of(self.pid())
    }

    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
        // SHALE_BENCH_KEEP=1 keeps the broker's directory (its log) for a look after.
        if std::env::var_os("SHALE_BENCH_KEEP").is_some() {
            let dir = std::mem::replace(&mut self.dir, tempfile::TempDir::new().expect("tempdir"));
            eprintln!("shale-bench: kept {}", dir.keep().display());
        }
    }
}

/// Peak resident memory and CPU time of a process, from `/proc`.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub(crate) struct ProcessStats {
    pub peak_rss_mib: f64,
    pub cpu_seconds: f64,
}

impl ProcessStats {
    pub(crate) fn of(pid: u32) -> Self {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        let peak_kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0.0);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start at ") ".
        let fields: Vec<&str> = stat
            .rsplit_once(") ")
            .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
        let cpu = (ticks(11) + ticks(12)) / clock_ticks_per_second();
        ProcessStats {
            peak_rss_mib: peak_kib / 1024.0,
            cpu_seconds: cpu,
        }
    }

    /// Several processes together (a cluster): summed.
    pub(crate) fn sum(all: &[ProcessStats]) -> Self {
        ProcessStats {
            peak_rss_mib: all.iter().map(|s| s.peak_rss_mib).sum(),
            cpu_seconds: all.iter().map(|s| s.cpu_seconds).sum(),
        }
    }
}

fn clock_ticks_per_second() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

/// An `s3s-fs` server on a loopback port (for the replay scenario), logging every
/// request it receives.
pub(crate) struct S3Process {
    server: shale_testkit::s3::S3Server,
    _root: tempfile::TempDir,
}

pub(crate) const S3_BUCKET: &str = "bench";
pub(crate) const S3_KEY: &str = "shale-bench";
pub(crate) const S3_SECRET: &str = "shale-bench-secret";

impl S3Process {
    pub(crate) async fn start(base: &Path) -> anyhow::Result<Self> {
        let root = tempfile::tempdir_in(base)?;
        let log = root.path().with_extension("s3s-fs.log");
        let server = shale_testkit::s3::S3Server::start(
            root.path(),
            S3_BUCKET,
            S3_KEY,
            S3_SECRET,
            Some(log),
        )
        .map_err(anyhow::Error::msg)?;
        Ok(S3Process {
            server,
            _root: root,
        })
    }

    pub(crate) fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    /// Where the bucket's objects lie on disk.
    pub(crate) fn bucket_dir(&self) -> PathBuf {
        self.server.objects_dir("")
    }

    /// `[object_store]` settings for a broker using this server.
    pub(crate) fn broker_config(&self) -> String {
        self.server.broker_config("")
    }

    pub(crate) fn stats(&self) -> ProcessStats {
        ProcessStats::of(self.pid())
    }

    pub(crate) fn pid(&self) -> u32 {
        self.server.pid().unwrap_or(0)
    }

    /// Every request the server has received so far, by kind, from its own log.
    pub(crate) fn requests(&self) -> anyhow::Result<S3Requests> {
        let log = self.server.log().context("the server keeps no log")?;
        let text = std::fs::read_to_string(log)?;
        Ok(S3Requests::parse(&text, S3_BUCKET))
    }
}

impl Drop for S3Process {
    fn drop(&mut self) {
        self.server.kill();
        if let Some(log) = self.server.log() {
            let _ = std::fs::remove_file(log);
        }
    }
}

/// Requests an S3 server received, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct S3Requests {
    /// GET and HEAD of an object.
    pub get: u64,
    /// Single-request uploads.
    pub put: u64,
    /// Listings of a bucket.
    pub list: u64,
    pub delete: u64,
    /// Parts of multipart uploads.
    pub parts: u64,
    /// Creations, completions and aborts of multipart uploads.
    pub multipart: u64,
}

impl S3Requests {
    /// Counts the requests in `s3s-fs`'s log (`s3s::service` debug lines: `req:
    /// Request { method: GET, uri: /bucket/key?query, ...`).
    pub(crate) fn parse(log: &str, bucket: &str) -> Self {
        let mut out = Self::default();
        for line in log.lines() {
            let Some(rest) = line.split_once("req: Request { method: ").map(|(_, r)| r) else {
                continue;
            };
            let Some((method, rest)) = rest.split_once(", uri: ") else {
                continue;
            };
            let uri = rest.split(", version").next().unwrap_or("");
            let (path, query) = uri.split_once('?').unwrap_or((uri, ""));
            let object = path
                .trim_start_matches('/')
                .trim_start_matches(bucket)
                .len()
                > 1;
            let has = |k: &str| {
                query
                    .split('&')
                    .any(|q| q == k || q.starts_with(&format!("{k}=")))
            };
            match method {
                "GET" | "HEAD" if object => out.get += 1,
                "GET" => out.list += 1,
                "PUT" if has("partNumber") => out.parts += 1,
                "PUT" => out.put += 1,
                "POST" => out.multipart += 1,
                "DELETE" if has("uploadId") => out.multipart += 1,
                "DELETE" => out.delete += 1,
                _ => {}
            }
        }
        out
    }

    /// Every request of an upload: single PUTs, parts, multipart creations and
    /// completions.
    pub(crate) fn writes(&self) -> u64 {
        self.put + self.parts + self.multipart
    }
}

impl std::ops::Sub for S3Requests {
    type Output = S3Requests;
    fn sub(self, o: Self) -> Self {
        S3Requests {
            get: self.get - o.get,
            put: self.put - o.put,
            list: self.list - o.list,
            delete: self.delete - o.delete,
            parts: self.parts - o.parts,
            multipart: self.multipart - o.multipart,
        }
    }
}

/// The process listening on TCP `port` of this machine (from `/proc/net/tcp{,6}` and
/// the processes' open sockets), to read a peer broker's CPU time.
#[cfg_attr(not(feature = "kafka"), allow(dead_code))]
pub(crate) fn listening_pid(port: u16) -> Option<u32> {
    const LISTEN: &str = "0A";
    let inode = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|table| {
            table
                .lines()
                .skip(1)
                .filter_map(|line| {
                    let f: Vec<&str> = line.split_whitespace().collect();
                    let local_port = f.get(1)?.rsplit_once(':')?.1;
                    let listening =
                        *f.get(3)? == LISTEN && u16::from_str_radix(local_port, 16).ok()? == port;
                    listening.then(|| f.get(9).map(|i| i.to_string()))?
                })
                .collect::<Vec<_>>()
        })
        .next()?;
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|proc| {
        let pid: u32 = proc.file_name().to_str()?.parse().ok()?;
        let fds = std::fs::read_dir(proc.path().join("fd")).ok()?;
        fds.flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == socket.as_str()))
            .then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_requests_are_counted_by_kind_from_the_servers_log() {
        let log = "\
x DEBUG s3s::service: req: Request { method: GET, uri: /bench/replay/a/0/x.log, version: HTTP/1.1 }
x DEBUG s3s::service: req: Request { method: HEAD, uri: /bench/replay/a/0/x.meta, version: HTTP/1.1 }
x DEBUG s3s::service: req: Request { method: GET, uri: /bench?list-type=2&prefix=replay, version: HTTP/1.1 }
x DEBUG s3s::service: req: Request { method: PUT, uri: /bench/replay/a/0/x.index, version: HTTP/1.1 }
x DEBUG s3s::service: req: Request { method: POST, uri: /bench/replay/a/0/x.log?uploads, version: HTTP/1.1 }
x DEBUG s3s::service: req: Request { method: PUT, uri: /bench/replay/a/0/x.log?partNumber=1&uploadId=u, version: HTTP/1.1 }
x DEBUG s3s::service: req: Request { method: POST, uri: /bench/replay/a/0/x.log?uploadId=u, version: HTTP/1.1 }
x DEBUG s3s::service: req: Request { method: DELETE, uri: /bench/replay/a/0/x.log, version: HTTP/1.1 }
x DEBUG s3s::service: duration: 1ms, resp: Response { status: 200 }
";
        let r = S3Requests::parse(log, "bench");
        assert_eq!(
            r,
            S3Requests {
                get: 2,
                put: 1,
                list: 1,
                delete: 1,
                parts: 1,
                multipart: 2
            }
        );
        assert_eq!(r.writes(), 4);
    }

    #[test]
    fn the_process_listening_on_a_port_is_found() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(super::listening_pid(port), Some(std::process::id()));
        drop(listener);
        assert_eq!(super::listening_pid(port), None);
    }
}
