//! A store that sends each topic's paths to the store holding that topic: a
//! read-replica topic's segments are in the bucket of the cluster that writes it, the
//! rest in this cluster's. The remote reader reads through one; paths are
//! `{topic_id}/…`, so the first part decides.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::RwLock;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use uuid::Uuid;

use crate::store::ObjectStoreRef;

#[derive(Debug)]
pub struct RoutingStore {
    default: ObjectStoreRef,
    routes: RwLock<HashMap<String, ObjectStoreRef>>,
}

impl RoutingStore {
    pub fn new(default: ObjectStoreRef) -> Self {
        Self {
            default,
            routes: RwLock::new(HashMap::new()),
        }
    }

    /// Sends the paths of topic `topic_id` to `store` from now on.
    pub fn route(&self, topic_id: Uuid, store: ObjectStoreRef) {
        let mut routes = self.routes.write().unwrap_or_else(|e| e.into_inner());
        routes.insert(topic_id.to_string(), store);
    }

    fn pick(&self, path: Option<&Path>) -> ObjectStoreRef {
        let first = path.and_then(|p| p.parts().next());
        let routes = self.routes.read().unwrap_or_else(|e| e.into_inner());
        (first.and_then(|part| routes.get(part.as_ref()).cloned()))
            .unwrap_or_else(|| self.default.clone())
    }
}

impl std::fmt::Display for RoutingStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RoutingStore({})", self.default)
    }
}

#[async_trait]
impl ObjectStore for RoutingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.pick(Some(location))
            .put_opts(location, payload, opts)
            .await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.pick(Some(location))
            .put_multipart_opts(location, opts)
            .await
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.pick(Some(location)).get_opts(location, options).await
    }

    async fn get_range(&self, location: &Path, range: Range<u64>) -> object_store::Result<Bytes> {
        self.pick(Some(location)).get_range(location, range).await
    }

    async fn delete(&self, location: &Path) -> object_store::Result<()> {
        self.pick(Some(location)).delete(location).await
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.pick(prefix).list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        self.pick(prefix).list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.pick(Some(from)).copy(from, to).await
    }

    async fn copy_if_not_exists(&self, from: &Path, to: &Path) -> object_store::Result<()> {
        self.pick(Some(from)).copy_if_not_exists(from, to).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use object_store::memory::InMemory;

    use super::*;

    #[tokio::test]
    async fn a_routed_topics_paths_go_to_its_store() {
        let (ours, theirs): (ObjectStoreRef, ObjectStoreRef) =
            (Arc::new(InMemory::new()), Arc::new(InMemory::new()));
        let routes = RoutingStore::new(ours.clone());
        let topic = Uuid::new_v4();
        let path = Path::from(format!("{topic}/0/x.log"));
        theirs
            .put(&path, PutPayload::from_static(b"theirs"))
            .await
            .unwrap();
        ours.put(&path, PutPayload::from_static(b"ours"))
            .await
            .unwrap();
        let got = routes.get_range(&path, 0..4).await.unwrap();
        assert_eq!(got, Bytes::from_static(b"ours"));
        routes.route(topic, theirs);
        let got = routes.get_range(&path, 0..4).await.unwrap();
        assert_eq!(got, Bytes::from_static(b"thei"));
        let other = Path::from(format!("{}/0/x.log", Uuid::new_v4()));
        assert!(routes.get(&other).await.is_err());
    }
}
