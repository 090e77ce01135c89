//! The files a cleaning leaves between its steps: the cleaner's checkpoint, the staged
//! and swap files, and the recovery that completes or discards them on open.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use super::STAGED_SUFFIX;
use crate::files::FileCache;
use crate::layout::{
    CLEANER_CHECKPOINT as CHECKPOINT_FILE, INDEX_SUFFIX, KEYS_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX,
    TIME_INDEX_SUFFIX, segment_path,
};
use crate::segment::Segment;
use crate::sync_dir;

/// What the cleaner remembers of a log between cleanings (`cleaner.checkpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerCheckpoint {
    /// Offsets below this have been cleaned; the dirty section starts here.
    pub first_dirty: i64,
    /// Wall-clock ms of the last cleaning that changed the log; -1: none yet.
    pub last_clean_ms: i64,
}

impl Default for CleanerCheckpoint {
    fn default() -> Self {
        Self {
            first_dirty: 0,
            last_clean_ms: -1,
        }
    }
}

impl CleanerCheckpoint {
    pub(crate) fn load(dir: &Path) -> Self {
        let Ok(text) = std::fs::read_to_string(dir.join(CHECKPOINT_FILE)) else {
            return Self::default();
        };
        let mut lines = text.lines();
        let parsed = (|| {
            if lines.next()? != "v1" {
                return None;
            }
            Some(Self {
                first_dirty: lines.next()?.parse().ok()?,
                last_clean_ms: lines.next()?.parse().ok()?,
            })
        })();
        // A damaged checkpoint costs a cleaning of the whole log, nothing more.
        parsed.unwrap_or_default()
    }

    pub(crate) fn persist(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!("{CHECKPOINT_FILE}.tmp"));
        std::fs::write(
            &tmp,
            format!("v1\n{}\n{}\n", self.first_dirty, self.last_clean_ms),
        )?;
        File::open(&tmp)?.sync_all()?;
        std::fs::rename(&tmp, dir.join(CHECKPOINT_FILE))?;
        sync_dir(dir)
    }
}

#[cfg(unix)]
pub(super) fn dir_ino(dir: &Path) -> io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    Ok(std::fs::metadata(dir)?.ino())
}

pub(super) fn swap_path(dir: &Path, base: i64, end: i64) -> PathBuf {
    dir.join(format!("{base:020}.{end:020}.{SWAP_SUFFIX}"))
}

pub(super) fn remove_staged(dir: &Path, base: i64) {
    for (staged, _) in Segment::staged_paths(dir, base) {
        let _ = std::fs::remove_file(staged);
    }
}

/// Finishes or discards what a cleaning cut short by a crash left in `dir` (see the
/// module doc). Runs before the segments are listed.
pub(crate) fn recover_cleaning(dir: &Path, files: &FileCache) -> io::Result<()> {
    let mut swaps = Vec::new();
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(&format!(".{STAGED_SUFFIX}")) {
            std::fs::remove_file(dir.join(&name))?;
        } else if let Some(stem) = name.strip_suffix(&format!(".{SWAP_SUFFIX}")) {
            let range = stem
                .split_once('.')
                .and_then(|(b, e)| Some((b.parse::<i64>().ok()?, e.parse::<i64>().ok()?)));
            match range {
                Some(range) => swaps.push(range),
                None => std::fs::remove_file(dir.join(&name))?,
            }
        } else {
            names.push(name);
        }
    }
    if swaps.is_empty() {
        return Ok(());
    }
    for (base, end) in swaps {
        tracing::warn!(dir = %dir.display(), base, end, "completing a cleaning a crash interrupted");
        for name in &names {
            let Some((stem, suffix)) = name.split_once('.') else {
                continue;
            };
            let replaced = [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, KEYS_SUFFIX]
                .contains(&suffix)
                && stem.parse::<i64>().is_ok_and(|b| (base..end).contains(&b));
            if replaced {
                files.forget(&dir.join(name));
                match std::fs::remove_file(dir.join(name)) {
                    Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                    _ => {}
                }
            }
        }
        // The indexes are rebuilt from the log when the segment is opened.
        std::fs::rename(
            swap_path(dir, base, end),
            segment_path(dir, base, LOG_SUFFIX),
        )?;
    }
    sync_dir(dir)
}
