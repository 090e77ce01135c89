//! Iceberg's file access over the broker's own object store: the tables' Parquet,
//! manifest and metadata files go through the same client (endpoint, credentials,
//! retries) as the tier's segments. Iceberg names files by absolute location
//! (`s3://bucket/prefix/…`, `file:///dir/…`); a location is mapped to a key of the
//! store by removing the store's own URL.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, Storage, StorageConfig,
    StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use object_store::ObjectStore;
use object_store::buffered::BufWriter;
use object_store::path::Path;
use shale_tiering::store::ObjectStoreRef;
use tokio::io::AsyncWriteExt;

/// The store, and the URL its keys are relative to.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BucketStorage {
    /// e.g. `s3://bucket/prefix` or `file:///var/lib/shale/bucket`, no trailing `/`.
    base: String,
    /// Not serializable: a deserialized copy (iceberg serializes its file access only to
    /// ship it to other processes, which Shale never does) refuses every operation.
    #[serde(skip)]
    store: Option<ObjectStoreRef>,
}

fn io_error(context: &str, e: object_store::Error) -> Error {
    Error::new(ErrorKind::Unexpected, format!("{context}: {e}")).with_source(e)
}

impl BucketStorage {
    pub fn new(base_url: &str, store: ObjectStoreRef) -> Self {
        Self {
            base: base_url.trim_end_matches('/').to_string(),
            store: Some(store),
        }
    }

    /// The absolute location of a key of the store.
    pub fn location(&self, key: &str) -> String {
        format!("{}/{}", self.base, key.trim_start_matches('/'))
    }

    /// The store itself.
    pub fn object_store(&self) -> Result<&ObjectStoreRef> {
        self.store()
    }

    fn store(&self) -> Result<&ObjectStoreRef> {
        self.store.as_ref().ok_or_else(|| {
            Error::new(
                ErrorKind::FeatureUnsupported,
                "this copy of the bucket's file access was deserialized and holds no store",
            )
        })
    }

    /// The key of an absolute location, which must lie under the store's URL.
    pub fn key(&self, location: &str) -> Result<Path> {
        location
            .strip_prefix(&self.base)
            .and_then(|rest| rest.strip_prefix('/'))
            .filter(|rest| !rest.is_empty())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("'{location}' is not in the bucket '{}'", self.base),
                )
            })
            // As it is, never percent-encoded: the key must be what the location says,
            // for every reader of the table.
            .and_then(|rest| {
                Path::parse(rest)
                    .map_err(|e| Error::new(ErrorKind::DataInvalid, format!("'{location}': {e}")))
            })
    }
}

struct Reader {
    store: ObjectStoreRef,
    key: Path,
}

#[async_trait::async_trait]
impl FileRead for Reader {
    async fn read(&self, range: Range<u64>) -> Result<Bytes> {
        (self.store.get_range(&self.key, range).await).map_err(|e| io_error("read", e))
    }
}

/// Buffers up to 10 MiB, then uploads in parts.
struct Writer(BufWriter);

#[async_trait::async_trait]
impl FileWrite for Writer {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.0.put(bs).await.map_err(|e| io_error("write", e))
    }

    async fn close(&mut self) -> Result<()> {
        self.0
            .shutdown()
            .await
            .map_err(|e| Error::new(ErrorKind::Unexpected, format!("close: {e}")))
    }
}

#[async_trait::async_trait]
#[typetag::serde(name = "shale-bucket")]
impl Storage for BucketStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        match self.store()?.head(&self.key(path)?).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(io_error("head", e)),
        }
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        let meta = (self.store()?.head(&self.key(path)?).await).map_err(|e| io_error("head", e))?;
        Ok(FileMetadata { size: meta.size })
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        let got = (self.store()?.get(&self.key(path)?).await).map_err(|e| io_error("get", e))?;
        got.bytes().await.map_err(|e| io_error("get", e))
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        Ok(Box::new(Reader {
            store: self.store()?.clone(),
            key: self.key(path)?,
        }))
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let key = self.key(path)?;
        (self.store()?.put(&key, bs.into()).await).map_err(|e| io_error("put", e))?;
        Ok(())
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let key = self.key(path)?;
        Ok(Box::new(Writer(BufWriter::new(self.store()?.clone(), key))))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        match self.store()?.delete(&self.key(path)?).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io_error("delete", e)),
        }
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        let store = self.store()?.clone();
        let prefix = self.key(path.trim_end_matches('/'))?;
        let keys = store
            .list(Some(&prefix))
            .map(|m| m.map(|m| m.location))
            .boxed();
        let mut deleted = store.delete_stream(keys);
        while let Some(r) = deleted.next().await {
            match r {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(io_error("delete", e)),
            }
        }
        Ok(())
    }

    async fn delete_stream(&self, mut paths: BoxStream<'static, String>) -> Result<()> {
        while let Some(path) = paths.next().await {
            self.delete(&path).await?;
        }
        Ok(())
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// Hands the catalog the broker's store, whatever the table's properties say.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct BucketStorageFactory(pub BucketStorage);

#[typetag::serde(name = "shale-bucket")]
impl StorageFactory for BucketStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(self.0.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn locations_map_to_keys_of_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let store: ObjectStoreRef =
            Arc::new(object_store::local::LocalFileSystem::new_with_prefix(dir.path()).unwrap());
        let s = BucketStorage::new("s3://bucket/prefix/", store);
        assert_eq!(
            s.key("s3://bucket/prefix/a/b.json").unwrap(),
            Path::from("a/b.json")
        );
        assert!(s.key("s3://other/prefix/a").is_err());
        assert!(s.key("s3://bucket/prefixed/a").is_err());
        assert!(s.key("s3://bucket/prefix/").is_err());
        let raw = s.key("s3://bucket/prefix/a~b/c=d").unwrap();
        assert_eq!(raw.as_ref(), "a~b/c=d", "never percent-encoded");

        let loc = s.location("t/data/f.parquet");
        assert!(!s.exists(&loc).await.unwrap());
        let mut w = s.writer(&loc).await.unwrap();
        w.write(Bytes::from_static(b"hello ")).await.unwrap();
        w.write(Bytes::from_static(b"world")).await.unwrap();
        w.close().await.unwrap();
        assert_eq!(s.metadata(&loc).await.unwrap().size, 11);
        let r = s.reader(&loc).await.unwrap();
        assert_eq!(r.read(6..11).await.unwrap(), Bytes::from_static(b"world"));
        s.delete_prefix(&s.location("t")).await.unwrap();
        assert!(!s.exists(&loc).await.unwrap());
        // Deleting what is gone is not an error.
        s.delete(&loc).await.unwrap();
        assert!(s.read(&loc).await.is_err());
    }
}
