//! A `shale-broker` process as the tests, the fault harness and the benchmarks run one:
//! started with its stderr appended to a log file, signalled (SIGSTOP, SIGCONT,
//! SIGTERM), killed, and ready once this start has logged `shale-broker ready`. Each
//! of them wraps it with what it adds (port retries and an open-files limit, network
//! namespaces, timings), and waits in its own way.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use rustix::process::{Pid, Signal, kill_process};

/// The line a broker logs (at `info`) once every listener serves.
pub const READY_LINE: &str = "shale-broker ready";

/// One broker process, started again as often as needed; killed when dropped.
#[derive(Debug)]
pub struct BrokerProcess {
    log_path: PathBuf,
    child: Option<Child>,
    paused: AtomicBool,
    /// Where the current start's output begins in the log.
    since: u64,
}

impl BrokerProcess {
    /// Not started yet; its output will go to `log_path`.
    pub fn new(log_path: PathBuf) -> Self {
        Self {
            log_path,
            child: None,
            paused: AtomicBool::new(false),
            since: 0,
        }
    }

    /// Starts `command` (stdout discarded, stderr appended to the log). The caller
    /// waits for it to be ready ([`BrokerProcess::logged_ready`], or a client).
    pub fn spawn(&mut self, mut command: Command) -> std::io::Result<()> {
        let log = (OpenOptions::new().create(true).append(true)).open(&self.log_path)?;
        self.since = log.metadata()?.len();
        let child = command.stdout(Stdio::null()).stderr(log).spawn()?;
        self.child = Some(child);
        self.paused.store(false, Ordering::SeqCst);
        Ok(())
    }

    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log, every start included.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// What the current start has logged so far.
    pub fn started_log(&self) -> String {
        let log = std::fs::read(&self.log_path).unwrap_or_default();
        let from = (self.since as usize).min(log.len());
        String::from_utf8_lossy(&log[from..]).into_owned()
    }

    /// Whether the current start has logged that it is ready (so the process answering
    /// on its port is this one).
    pub fn logged_ready(&self) -> bool {
        self.started_log().contains(READY_LINE)
    }

    /// How the process ended, if it has (it is then no longer running).
    pub fn exited(&mut self) -> Option<ExitStatus> {
        let status = self.child.as_mut()?.try_wait().ok().flatten()?;
        self.child = None;
        Some(status)
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Started and not reaped (it may have exited since: see [`BrokerProcess::exited`]).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    fn signal(&self, signal: Signal) {
        if let Some(pid) = self.pid().and_then(|p| Pid::from_raw(p as i32)) {
            let _ = kill_process(pid, signal);
        }
    }

    /// SIGSTOP: the process freezes (no heartbeat, no answers) until resumed.
    pub fn pause(&self) {
        self.signal(Signal::STOP);
        self.paused.store(true, Ordering::SeqCst);
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal(Signal::CONT);
        self.paused.store(false, Ordering::SeqCst);
    }

    /// SIGKILL (resumed first if paused): no flush, no goodbye. Waits for the exit.
    pub fn kill(&mut self) {
        if self.paused.swap(false, Ordering::SeqCst) {
            self.signal(Signal::CONT);
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, and how the process exited (`None`: it was not running).
    pub fn terminate(&mut self) -> Option<std::io::Result<ExitStatus>> {
        if self.paused.swap(false, Ordering::SeqCst) {
            self.signal(Signal::CONT);
        }
        self.signal(Signal::TERM);
        let mut child = self.child.take()?;
        Some(child.wait())
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_is_started_logged_signalled_and_stopped() {
        let dir = std::env::temp_dir().join(format!("shale-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = BrokerProcess::new(dir.join("broker.log"));
        let mut c = Command::new("sh");
        c.args(["-c", &format!("echo {READY_LINE} >&2; sleep 30")]);
        p.spawn(c).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !p.logged_ready() {
            assert!(std::time::Instant::now() < deadline, "{}", p.log());
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(p.exited().is_none());
        p.pause();
        p.resume();
        let status = p.terminate().unwrap().unwrap();
        assert!(!status.success(), "SIGTERM ends sh: {status}");
        assert!(!p.is_running());
        // A second start's log begins after the first one's.
        let mut c = Command::new("sh");
        c.args(["-c", "echo second >&2"]);
        p.spawn(c).unwrap();
        while p.exited().is_none() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(p.started_log(), "second\n");
        assert!(!p.logged_ready());
        assert!(p.log().contains(READY_LINE));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
