//! Output: text in the style of Kafka's tools, or JSON (`-o json`). Writing to a pipe
//! whose reader has gone (`shale … | head`) ends the command quietly, as Unix tools
//! do.

use std::io::Write;

/// How commands print what they found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OutputFormat {
    /// Tab-separated, as Kafka's command-line tools print.
    Text,
    /// One JSON document.
    Json,
}

/// Writes `bytes` to stdout and flushes it.
pub(crate) fn write(bytes: &[u8]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// Prints `text`; a closed stdout ends the process at once, quietly and successfully.
pub(crate) fn print(text: &str) -> anyhow::Result<()> {
    match write(text.as_bytes()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        other => Ok(other?),
    }
}

/// Prints one JSON document (pretty, with a final newline).
pub(crate) fn json(value: &serde_json::Value) -> anyhow::Result<()> {
    print(&format!("{value:#}\n"))
}

/// Whether stdout is a pipe whose reader has gone. Commands that may print nothing
/// for a long time (`consume`) check it, so `shale consume | head -2` ends once `head`
/// has.
pub(crate) fn stdout_closed() -> bool {
    use rustix::event::{PollFd, PollFlags, poll};
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(&stdout, PollFlags::empty())];
    let timeout = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    matches!(poll(&mut fds, Some(&timeout)), Ok(n) if n > 0)
        && fds[0].revents().intersects(PollFlags::ERR | PollFlags::HUP)
}

/// `ids` as `1,2,3`.
pub(crate) fn ids(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// A duration in milliseconds as people read it: `in 4.2 s`, `12.0 s ago`.
pub(crate) fn relative_ms(ms: i64) -> String {
    let s = ms.unsigned_abs() as f64 / 1000.0;
    if ms >= 0 {
        format!("in {s:.1} s")
    } else {
        format!("{s:.1} s ago")
    }
}

/// Where a compacted partition's cleaner stands, for text output: `ratio 0.42, 1200
/// dirty bytes, cleaned 12.0 s ago` (`None` for a topic that is not compacted).
pub(crate) fn cleaner(ratio: f64, dirty_bytes: i64, last_cleaned_ms: i64) -> Option<String> {
    if dirty_bytes < 0 {
        return None;
    }
    let when = if last_cleaned_ms < 0 {
        "never cleaned".to_string()
    } else {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        format!("cleaned {}", relative_ms(last_cleaned_ms - now))
    };
    Some(format!("{ratio:.2} ({dirty_bytes} dirty bytes, {when})"))
}
