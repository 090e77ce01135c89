//! `s3s-fs` servers: a real S3-protocol server storing objects as files under a
//! directory, on a loopback port. `infra/test-services.sh` installs it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `s3s-fs` binary: `SHALE_TEST_S3S_FS`, else on `PATH` or in `~/.cargo/bin`.
pub fn s3s_fs_bin() -> Result<PathBuf, String> {
    if let Ok(p) = std::env::var("SHALE_TEST_S3S_FS") {
        return Ok(PathBuf::from(p));
    }
    crate::which("s3s-fs").ok_or_else(|| {
        "s3s-fs is not installed: run infra/test-services.sh, or \
         `cargo install s3s-fs --version 0.14.1 --features binary --locked`"
            .to_string()
    })
}

/// One server. It stores `bucket` under `root`, answers only its own credentials,
/// and is killed when dropped.
#[derive(Debug)]
pub struct S3Server {
    pub root: PathBuf,
    pub port: u16,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    /// Where the server's request log goes (`s3s::service` at debug), if anywhere.
    log: Option<PathBuf>,
    child: Option<Child>,
}

impl S3Server {
    /// Starts a server for `bucket` under `root` on a free port.
    pub fn start(
        root: &Path,
        bucket: &str,
        access_key: &str,
        secret_key: &str,
        log: Option<PathBuf>,
    ) -> Result<Self, String> {
        std::fs::create_dir_all(root.join(bucket))
            .map_err(|e| format!("cannot create {}: {e}", root.display()))?;
        let mut server = Self {
            root: root.to_path_buf(),
            port: crate::free_port(),
            bucket: bucket.to_string(),
            access_key: access_key.to_string(),
            secret_key: secret_key.to_string(),
            log,
            child: None,
        };
        server.start_again()?;
        Ok(server)
    }

    /// Starts the server again (after [`S3Server::kill`]) on the same port and data.
    pub fn start_again(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the server is running");
        let mut command = Command::new(s3s_fs_bin()?);
        command
            .args(["--host", "127.0.0.1", "--port", &self.port.to_string()])
            .args(["--access-key", &self.access_key])
            .args(["--secret-key", &self.secret_key])
            .arg(&self.root)
            .stderr(Stdio::null());
        match &self.log {
            // It logs to stdout.
            Some(log) => {
                let file = std::fs::File::create(log)
                    .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
                command
                    .env("RUST_LOG", "s3s::service=debug")
                    .env("NO_COLOR", "1")
                    .stdout(file);
            }
            None => {
                command.stdout(Stdio::null());
            }
        }
        let child = command
            .spawn()
            .map_err(|e| format!("cannot start s3s-fs: {e}"))?;
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            if Instant::now() > deadline {
                self.kill();
                return Err(format!("s3s-fs did not start listening on {}", self.port));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// SIGKILLs the server (an outage).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The request log, if the server keeps one.
    pub fn log(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// A broker's `[object_store]` section for this server (plus `extra` TOML).
    pub fn broker_config(&self, extra: &str) -> String {
        format!(
            "[object_store]\nendpoint = \"{}\"\nregion = \"us-east-1\"\npath_style = true\n\
             allow_http = true\naccess_key_id = \"{}\"\nsecret_access_key = \"{}\"\n{extra}",
            self.endpoint(),
            self.access_key,
            self.secret_key
        )
    }

    /// Where the objects under `prefix` lie on disk.
    pub fn objects_dir(&self, prefix: &str) -> PathBuf {
        self.root.join(&self.bucket).join(prefix)
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}
