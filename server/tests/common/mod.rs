//! Test harness: real `shale-broker` processes on loopback ports, and the real `shale`
//! CLI. Brokers are stopped with SIGTERM or killed with SIGKILL for real.

#![allow(dead_code)] // each test binary uses a different part of the harness

pub(crate) mod auth;
pub(crate) mod certs;
pub(crate) mod wire;

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use shale_client::Client;
use shale_testkit::broker::BrokerProcess;

pub(crate) fn broker_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_shale-broker"))
}

/// The `shale` CLI, built beside the broker by `cargo build --workspace --bins`
/// (the test command does that first).
pub(crate) fn cli_bin() -> PathBuf {
    let path = broker_bin().with_file_name("shale");
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` (infra/test.sh does) before these tests",
        path.display()
    );
    path
}

pub(crate) use shale_testkit::free_port;

pub(crate) struct Broker {
    pub dir: tempfile::TempDir,
    pub port: u16,
    extra_args: Vec<String>,
    envs: Vec<(String, String)>,
    /// Open-files limit (soft and hard) the process starts under.
    fd_limit: Option<u64>,
    process: BrokerProcess,
}

impl Broker {
    /// Starts a broker on the embedded default (SQLite, file object store) in a fresh
    /// data directory and waits until it answers.
    pub(crate) async fn start(extra_args: &[&str]) -> Self {
        Self::start_with_env(extra_args, &[]).await
    }

    /// Like [`Broker::start`], with extra environment variables (`SHALE_*`).
    pub(crate) async fn start_with_env(extra_args: &[&str], envs: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut b = Broker {
            process: BrokerProcess::new(dir.path().join("broker.log")),
            dir,
            port: free_port(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            envs: envs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            fd_limit: None,
        };
        b.spawn_first().await;
        b
    }

    /// A broker whose data lives under `dir` (e.g. a tmpfs), started under an
    /// open-files limit (soft and hard, so the broker cannot raise it).
    pub(crate) async fn start_limited(
        dir: tempfile::TempDir,
        extra_args: &[&str],
        fd_limit: u64,
    ) -> Self {
        let mut b = Broker {
            process: BrokerProcess::new(dir.path().join("broker.log")),
            dir,
            port: free_port(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            envs: Vec::new(),
            fd_limit: Some(fd_limit),
        };
        b.spawn_first().await;
        b
    }

    pub(crate) fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub(crate) fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub(crate) fn log_path(&self) -> PathBuf {
        self.process.log_path().to_path_buf()
    }

    /// The first start: a port that another process took between `free_port` and the
    /// bind (an ephemeral port handed to some connection) is replaced by a new one.
    async fn spawn_first(&mut self) {
        for _ in 0..3 {
            match self.try_spawn().await {
                Ok(()) => return,
                Err(log) if log.contains("in use") => self.port = free_port(),
                Err(log) => panic!("shale-broker exited; log:\n{log}"),
            }
        }
        panic!(
            "shale-broker found its port taken three times; log:\n{}",
            self.log()
        );
    }

    async fn spawn(&mut self) {
        if let Err(log) = self.try_spawn().await {
            panic!("shale-broker exited; log:\n{log}");
        }
    }

    /// Starts the process and waits until it is ready; `Err` with this start's log if
    /// it exited first.
    async fn try_spawn(&mut self) -> Result<(), String> {
        let mut command = match self.fd_limit {
            None => Command::new(broker_bin()),
            Some(limit) => {
                let mut c = Command::new("bash");
                c.args(["-c", "ulimit -n \"$1\" && shift && exec \"$@\"", "bash"])
                    .arg(limit.to_string())
                    .arg(broker_bin());
                c
            }
        };
        command
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg(self.address())
            .args(&self.extra_args)
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", "info");
        self.process
            .spawn(command)
            .expect("cannot start shale-broker");
        self.wait_ready().await
    }

    /// Ready: this start logged that it is ready (so the broker answering on the port
    /// is this one, not a process that took the port), and it answers.
    async fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if self.process.logged_ready()
                && let Ok(c) = Client::connect(&self.address()).await
                && c.list_topics().await.is_ok()
            {
                return Ok(());
            }
            if let Some(status) = self.process.exited() {
                return Err(format!(
                    "(exited with {status})\n{}",
                    self.process.started_log()
                ));
            }
            assert!(
                Instant::now() < deadline,
                "shale-broker did not become ready; log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn log(&self) -> String {
        self.process.log()
    }

    pub(crate) fn pid(&self) -> u32 {
        self.process.pid().expect("broker is running")
    }

    /// Waits for the broker to exit by itself (e.g. at a failpoint).
    pub(crate) fn wait_exit(&mut self, timeout: Duration) -> std::process::ExitStatus {
        assert!(self.process.is_running(), "broker is not running");
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.process.exited() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "broker did not exit; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Environment for the next start.
    pub(crate) fn set_envs(&mut self, envs: &[(&str, &str)]) {
        self.envs = envs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
    }

    /// Whether the process is still running.
    pub(crate) fn is_alive(&mut self) -> bool {
        self.process.exited().is_none() && self.process.is_running()
    }

    pub(crate) async fn client(&self) -> Client {
        Client::connect(&self.address()).await.unwrap()
    }

    /// SIGKILL: no flush, no goodbye.
    pub(crate) fn kill(&mut self) {
        self.process.kill();
    }

    /// SIGSTOP: the process freezes (no heartbeat, no answers) until [`Broker::resume`].
    pub(crate) fn pause(&self) {
        self.process.pause();
    }

    /// SIGCONT.
    pub(crate) fn resume(&self) {
        self.process.resume();
    }

    /// SIGTERM and wait for a clean exit.
    pub(crate) fn stop(&mut self) {
        if let Some(status) = self.process.terminate() {
            let status = status.unwrap();
            assert!(
                status.success(),
                "graceful shutdown exited with {status}; log:\n{}",
                self.log()
            );
        }
    }

    pub(crate) async fn restart(&mut self) {
        self.stop();
        self.spawn().await;
    }

    pub(crate) async fn start_again(&mut self) {
        assert!(!self.process.is_running(), "broker still running");
        self.spawn().await;
    }

    /// Runs the CLI against this broker.
    pub(crate) fn cli(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        run_cli(&self.address(), args, stdin)
    }

    /// Runs the CLI and requires success, returning stdout.
    pub(crate) fn cli_ok(&self, args: &[&str], stdin: Option<&[u8]>) -> String {
        let out = self.cli(args, stdin);
        assert!(
            out.status.success(),
            "shale {args:?} failed: {}\nbroker log:\n{}",
            String::from_utf8_lossy(&out.stderr),
            self.log()
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Broker {
    /// Killed before its directory goes.
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) fn run_cli(address: &str, args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(cli_bin())
        .arg("--bootstrap")
        .arg(address)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start shale");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let input = input.to_vec();
        // Write from a thread so a full stdout pipe cannot deadlock us.
        std::thread::spawn(move || pipe.write_all(&input));
    }
    child.wait_with_output().unwrap()
}

/// Writes a broker config file into `dir` and returns its path.
pub(crate) fn write_config(dir: &Path, text: &str) -> PathBuf {
    let path = dir.join("shale.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// A real S3-protocol server (`s3s-fs`, see `shale_testkit::s3`) on a loopback port,
/// storing under a temp dir. Each server has its own credentials, so a broker whose
/// server is down can never reach another test's server that happens to reuse the port.
pub(crate) struct S3Server {
    server: shale_testkit::s3::S3Server,
    _root: tempfile::TempDir,
}

impl std::ops::Deref for S3Server {
    type Target = shale_testkit::s3::S3Server;
    fn deref(&self) -> &Self::Target {
        &self.server
    }
}

impl std::ops::DerefMut for S3Server {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.server
    }
}

impl S3Server {
    pub(crate) fn start(bucket: &str) -> Self {
        let root = tempfile::tempdir().unwrap();
        let unique = root
            .path()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .replace('.', "");
        let server = shale_testkit::s3::S3Server::start(
            root.path(),
            bucket,
            &format!("key{unique}"),
            &format!("secret{unique}"),
            std::env::var_os("SHALE_TEST_S3_LOG").map(Into::into),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        S3Server {
            server,
            _root: root,
        }
    }

    /// Start again on the same port and data.
    pub(crate) fn start_again(&mut self) {
        self.server.start_again().unwrap_or_else(|e| panic!("{e}"));
    }

    /// A broker config file's text pointing at this server (plus `extra` TOML), with
    /// short timeouts and one retry, so outages show quickly.
    pub(crate) fn broker_config(&self, extra: &str) -> String {
        self.server.broker_config(&format!(
            "max_retries = 1\nrequest_timeout_ms = 3000\n{extra}"
        ))
    }

    /// Keys (relative to `prefix` in the bucket) of every stored segment object.
    pub(crate) fn segment_objects(&self, prefix: &str) -> Vec<String> {
        segment_objects_in(&self.objects_dir(prefix))
    }

    pub(crate) fn read_object(&self, prefix: &str, key: &str) -> Vec<u8> {
        std::fs::read(self.objects_dir(prefix).join(key)).unwrap()
    }
}

/// Keys (relative to `base`) of every segment object stored as a file below `base`
/// (an `s3s-fs` bucket prefix, or a `file://` object store).
pub(crate) fn segment_objects_in(base: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![base.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path
                    .strip_prefix(base)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                if [".log", ".indexes", ".index", ".timeindex", ".keys", ".meta"]
                    .iter()
                    .any(|ext| rel.ends_with(ext))
                {
                    out.push(rel);
                }
            }
        }
    }
    out.sort();
    out
}

/// A fresh PostgreSQL database for one test, dropped afterwards, on the server
/// `SHALE_TEST_POSTGRES_URL` names (see `shale_testkit::postgres`).
pub(crate) struct PgDatabase(shale_testkit::postgres::Database);

impl PgDatabase {
    pub(crate) fn create() -> Self {
        PgDatabase(
            shale_testkit::postgres::Database::create("shale_it").unwrap_or_else(|e| panic!("{e}")),
        )
    }

    pub(crate) fn url(&self) -> String {
        self.0.url()
    }

    /// Runs a query in this database; rows as `|`-separated lines.
    pub(crate) fn query(&self, sql: &str) -> Vec<String> {
        self.0.query(sql).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Brokers 1..=`count` of one cluster: on the config file `cfg`, the metastore
/// `metastore` and the object store `object_store`.
pub(crate) async fn start_brokers(
    cfg: &Path,
    metastore: &str,
    object_store: &str,
    count: i32,
) -> Vec<Broker> {
    let mut brokers = Vec::new();
    for id in 1..=count {
        let id = id.to_string();
        let args = [
            "--config",
            cfg.to_str().unwrap(),
            "--metastore-url",
            metastore,
            "--object-store-url",
            object_store,
            "--broker-id",
            &id,
        ];
        brokers.push(Broker::start(&args).await);
    }
    brokers
}

/// A plain HTTP/1.1 GET on loopback (the metrics page).
pub(crate) async fn http_get(port: u16, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}

/// One HTTP/1.1 request (the connection closed after it): the status code and the body.
pub(crate) async fn http(
    port: u16,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let body = body.unwrap_or_default();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    // A refused body may be cut off: the answer still comes.
    let _ = s.write_all(body).await;
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    let text = String::from_utf8_lossy(&out).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let (headers, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    // Bodies come whole or chunked; the API's JSON is small enough to join the chunks.
    let body = if headers
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut joined = String::new();
        let mut rest = body;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
            if n == 0 {
                break;
            }
            joined.push_str(&after[..n]);
            rest = &after[n + 2..];
        }
        joined
    } else {
        body.to_string()
    };
    (status, body)
}

/// A group member running in its own task, as in an application: it polls, commits
/// after each poll (manual commits), and reports records and its assignment.
pub(crate) struct Member {
    pub state: tokio::sync::watch::Receiver<(i32, Vec<(String, i32)>)>,
    pub records: tokio::sync::mpsc::UnboundedReceiver<shale_client::ConsumedRecord>,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Member {
    pub(crate) fn start(c: &Client, topic: &str, config: shale_client::GroupConfig) -> Self {
        let mut consumer = shale_client::GroupConsumer::new(c.clone(), &[topic], config);
        let (state_tx, state) = tokio::sync::watch::channel((-1, Vec::new()));
        let (records_tx, records) = tokio::sync::mpsc::unbounded_channel();
        let (stop, mut stopped) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            while stopped.try_recv().is_err() {
                let got = consumer.poll(Duration::from_millis(100)).await.unwrap();
                state_tx.send_replace((consumer.generation(), consumer.assignment().to_vec()));
                let any = !got.is_empty();
                for r in got {
                    let _ = records_tx.send(r);
                }
                if any {
                    // A rebalance may have started: the next poll rejoins.
                    let _ = consumer.commit_sync().await;
                }
            }
            consumer.close().await.unwrap();
        });
        Self {
            state,
            records,
            stop,
            task,
        }
    }

    pub(crate) fn assignment(&self) -> Vec<(String, i32)> {
        self.state.borrow().1.clone()
    }

    pub(crate) async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap();
    }
}

/// Waits until every member reports the same generation and `done` holds of their
/// assignments; returns how long it took.
pub(crate) async fn settle(
    members: &[Member],
    done: impl Fn(&[Vec<(String, i32)>]) -> bool,
) -> Duration {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(60);
    loop {
        let states: Vec<(i32, Vec<(String, i32)>)> =
            members.iter().map(|m| m.state.borrow().clone()).collect();
        let generations: BTreeSet<i32> = states.iter().map(|s| s.0).collect();
        let assignments: Vec<Vec<(String, i32)>> = states.into_iter().map(|s| s.1).collect();
        if generations.len() == 1 && !generations.contains(&-1) && done(&assignments) {
            return started.elapsed();
        }
        assert!(
            Instant::now() < deadline,
            "the group never settled: {assignments:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
