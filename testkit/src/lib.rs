//! The one test kit: what Shale's integration tests, the fault harness (`shale-chaos`)
//! and the benchmarks start, so that each is started one way, configured by one set
//! of environment variables, and fails with one message saying how to fix it:
//!
//! - [`free_port`]: a port free on every interface;
//! - [`which`] and [`workspace_bin`]: programs on `PATH` (or in `~/.cargo/bin`) and
//!   programs of this workspace;
//! - [`postgres`]: fresh databases on the server `SHALE_TEST_POSTGRES_URL` names;
//! - [`s3`]: `s3s-fs` servers (a real S3-protocol server) on loopback ports;
//! - [`broker`]: a `shale-broker` process (start, log, readiness, signals, kill);
//! - `faults` (with the `faults` feature): a metastore and an object store that fail,
//!   stall or run a test's code in the middle of a request, for unit tests.
//!
//! Errors are strings meant for a person: they say what is missing and how to start it.

pub mod broker;
#[cfg(feature = "faults")]
pub mod faults;
pub mod postgres;
pub mod s3;

use std::path::PathBuf;

/// A TCP port free on every interface (so also on loopback) at the time of the call.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("0.0.0.0:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("cannot bind an ephemeral port")
}

/// A program on `PATH`, else in `~/.cargo/bin` (where `cargo install` puts it).
pub fn which(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(name)).find(|p| p.is_file())
}

/// A program of this workspace (`shale-broker`, `shale`), found beside the running
/// binary or up to two directories above it (a test binary lives in `target/debug/deps`).
pub fn workspace_bin(name: &str) -> Result<PathBuf, String> {
    let me = std::env::current_exe().map_err(|e| format!("cannot find this binary: {e}"))?;
    me.ancestors()
        .skip(1)
        .take(3)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            format!(
                "{name} is missing next to {}: build it with `cargo build --workspace --bins` \
                 (infra/test.sh does)",
                me.display()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_free_port_can_be_bound_and_programs_are_found_or_not() {
        let port = free_port();
        assert_ne!(port, 0);
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
        assert!(which("sh").is_some());
        assert!(which("no-such-program-shale").is_none());
        assert!(workspace_bin("no-such-program-shale").is_err());
    }
}
