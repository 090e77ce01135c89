//! The object-store tier. For now: turning an object-store URL into a checked
//! `Arc<dyn ObjectStore>` at start-up, so a bad URL fails before the first upload.
//! Upload of sealed segments, remote reads and the read cache build on this.

use std::path::PathBuf;
use std::sync::Arc;

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("object store URL '{0}' is not supported: use file://PATH or memory://")]
    UnsupportedUrl(String),
    #[error("object store directory {path} cannot be used")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("object store error")]
    Store(#[from] object_store::Error),
}

/// The object store as the rest of Shale holds it.
pub type ObjectStoreRef = Arc<dyn ObjectStore>;

/// Opens the object store a URL names: `file://PATH` (relative paths allowed, created if
/// missing) or `memory://`.
pub fn open(url: &str) -> Result<ObjectStoreRef, Error> {
    if let Some(path) = url.strip_prefix("file://") {
        let path = PathBuf::from(path);
        std::fs::create_dir_all(&path).map_err(|source| Error::Directory {
            path: path.clone(),
            source,
        })?;
        let abs =
            std::fs::canonicalize(&path).map_err(|source| Error::Directory { path, source })?;
        Ok(Arc::new(LocalFileSystem::new_with_prefix(abs)?))
    } else if url == "memory://" || url == "memory:///" {
        Ok(Arc::new(InMemory::new()))
    } else {
        Err(Error::UnsupportedUrl(url.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_url_creates_directory() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("objects");
        open(&format!("file://{}", path.display())).unwrap();
        assert!(path.is_dir());
    }

    #[test]
    fn unknown_scheme_is_refused() {
        assert!(matches!(open("ftp://x"), Err(Error::UnsupportedUrl(_))));
        assert!(open("memory://").is_ok());
    }
}
