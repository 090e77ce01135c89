//! The broker's open segment files. Every partition's `.log` files are opened through
//! one cache that holds at most `capacity` descriptors and closes the least recently
//! used first, so a broker with tens of thousands of partitions, most of them idle,
//! never runs out of file descriptors. Index files hold no descriptor at all: their
//! entries live in memory and are written (open, append, close) at fsync and seal.
//!
//! A handle handed out stays valid after its entry is evicted: it is an `Arc<File>`,
//! and the descriptor closes when the last reader drops it. So the cache bounds the
//! idle descriptors, and in-flight reads add at most one each.

use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub struct FileCache {
    capacity: usize,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    tick: u64,
    files: HashMap<PathBuf, (Arc<File>, u64)>,
    /// Last use → path, oldest first.
    order: BTreeMap<u64, PathBuf>,
}

impl State {
    fn touch(&mut self, path: &Path) -> Option<Arc<File>> {
        self.tick += 1;
        let tick = self.tick;
        let (file, used) = self.files.get_mut(path)?;
        let old = std::mem::replace(used, tick);
        let file = file.clone();
        self.order.remove(&old);
        self.order.insert(tick, path.to_path_buf());
        Some(file)
    }

    fn insert(&mut self, path: &Path, file: Arc<File>, capacity: usize) {
        self.tick += 1;
        let tick = self.tick;
        if let Some((_, old)) = self.files.insert(path.to_path_buf(), (file, tick)) {
            self.order.remove(&old);
        }
        self.order.insert(tick, path.to_path_buf());
        while self.files.len() > capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.files.remove(&oldest);
        }
    }

    fn remove(&mut self, path: &Path) {
        if let Some((_, used)) = self.files.remove(path) {
            self.order.remove(&used);
        }
    }
}

impl FileCache {
    pub fn new(capacity: usize) -> Arc<Self> {
        Arc::new(Self {
            capacity: capacity.max(1),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open handle of an existing file (read, append), opening it if needed.
    pub fn open(&self, path: &Path) -> io::Result<Arc<File>> {
        if let Some(file) = self.state().touch(path) {
            return Ok(file);
        }
        // Opened outside the lock; a concurrent open of the same file just wins or
        // loses the insert.
        let file = Arc::new(OpenOptions::new().read(true).append(true).open(path)?);
        self.state().insert(path, file.clone(), self.capacity);
        Ok(file)
    }

    /// Creates a new file (it must not exist) and caches its handle.
    pub fn create(&self, path: &Path) -> io::Result<Arc<File>> {
        let file = Arc::new(
            OpenOptions::new()
                .create_new(true)
                .read(true)
                .append(true)
                .open(path)?,
        );
        self.state().insert(path, file.clone(), self.capacity);
        Ok(file)
    }

    /// Drops the cached handle of a file about to be deleted or replaced.
    pub fn forget(&self, path: &Path) {
        self.state().remove(path);
    }

    /// Drops every cached handle of files in `dir` (a partition directory going away).
    pub fn forget_dir(&self, dir: &Path) {
        let mut state = self.state();
        let doomed: Vec<PathBuf> = state
            .files
            .keys()
            .filter(|p| p.parent() == Some(dir))
            .cloned()
            .collect();
        for path in doomed {
            state.remove(&path);
        }
    }

    /// Handles held now.
    pub fn open_files(&self) -> usize {
        self.state().files.len()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Puts a given handle in place of a file's (tests: a handle that cannot write).
    #[cfg(test)]
    pub fn replace_for_test(&self, path: &Path, file: File) {
        self.state().insert(path, Arc::new(file), self.capacity);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_at_most_capacity_and_closes_the_least_recently_used() {
        let dir = tempfile::tempdir().unwrap();
        let cache = FileCache::new(3);
        let paths: Vec<PathBuf> = (0..5)
            .map(|i| dir.path().join(format!("{i}.log")))
            .collect();
        for p in &paths[..3] {
            cache.create(p).unwrap();
        }
        cache.open(&paths[0]).unwrap(); // 1 is now the oldest
        std::fs::write(&paths[3], b"").unwrap();
        let held = cache.open(&paths[3]).unwrap();
        assert_eq!(cache.open_files(), 3);
        let cached = |p: &Path| cache.state().files.contains_key(p);
        assert!(cached(&paths[0]) && !cached(&paths[1]) && cached(&paths[3]));
        // An evicted handle stays usable by whoever holds it.
        cache.forget(&paths[3]);
        use std::io::Write;
        (&*held).write_all(b"still open").unwrap();
        assert_eq!(std::fs::read(&paths[3]).unwrap(), b"still open");
        cache.forget_dir(dir.path());
        assert_eq!(cache.open_files(), 0);
        assert!(
            cache.create(&paths[0]).is_err(),
            "create_new refuses an existing file"
        );
    }
}
