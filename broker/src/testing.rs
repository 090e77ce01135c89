//! In-process test harness: a broker on a real SQLite metastore and a real local-file
//! object store, each behind a wrapper that injects faults where a test asks for them
//! (a slow lease renewal, a failing metastore read, work done in the middle of an
//! object-store request). Used by unit tests of races that real processes cannot hit
//! on purpose; end-to-end behaviour is tested with real processes under `tests/`.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use object_store::path::Path as ObjectPath;
use object_store::{
    GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult,
};
use shale_metastore::{
    BrokerLease, CommittedOffset, ControllerLease, Metastore, NewTopic, PartitionState, RemoteLog,
    RemoteSegment, RemoteSegmentState, StateGuard, Topic,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::broker::Broker;
use shale_config::{BrokerConfig, Overrides};

/// A metastore that can be slowed or made to fail on purpose.
pub struct FaultyMetastore {
    inner: Arc<dyn Metastore>,
    /// Extra time every lease renewal takes, in ms.
    pub renew_delay_ms: AtomicU64,
    /// When set, reads of remote segments fail (as with a lost connection).
    pub fail_remote_reads: AtomicBool,
}

impl FaultyMetastore {
    pub fn new(inner: Arc<dyn Metastore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            renew_delay_ms: AtomicU64::new(0),
            fail_remote_reads: AtomicBool::new(false),
        })
    }

    fn remote_read(&self) -> shale_metastore::Result<()> {
        if self.fail_remote_reads.load(Ordering::SeqCst) {
            return Err(shale_metastore::Error::CorruptRow("injected fault".into()));
        }
        Ok(())
    }
}

type R<T> = shale_metastore::Result<T>;

#[async_trait]
impl Metastore for FaultyMetastore {
    async fn create_topic(&self, topic: NewTopic) -> R<Topic> {
        self.inner.create_topic(topic).await
    }
    async fn get_topic(&self, name: &str) -> R<Option<Topic>> {
        self.inner.get_topic(name).await
    }
    async fn list_topics(&self) -> R<Vec<Topic>> {
        self.inner.list_topics().await
    }
    async fn delete_topic(&self, name: &str) -> R<Topic> {
        self.inner.delete_topic(name).await
    }
    async fn alter_topic_configs(
        &self,
        name: &str,
        set: &BTreeMap<String, String>,
        delete: &[String],
    ) -> R<Topic> {
        self.inner.alter_topic_configs(name, set, delete).await
    }
    async fn add_partitions(&self, name: &str, total: i32, assignments: &[Vec<i32>]) -> R<Topic> {
        self.inner.add_partitions(name, total, assignments).await
    }
    async fn register_broker(
        &self,
        broker_id: i32,
        address: &str,
        endpoints: &[(String, String)],
    ) -> R<i64> {
        self.inner
            .register_broker(broker_id, address, endpoints)
            .await
    }
    async fn cluster_id(&self) -> R<Uuid> {
        self.inner.cluster_id().await
    }
    async fn renew_broker_lease(
        &self,
        broker_id: i32,
        broker_epoch: i64,
        address: &str,
        lease_ms: i64,
    ) -> R<()> {
        let delay = self.renew_delay_ms.load(Ordering::SeqCst);
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.inner
            .renew_broker_lease(broker_id, broker_epoch, address, lease_ms)
            .await
    }
    async fn list_brokers(&self) -> R<Vec<BrokerLease>> {
        self.inner.list_brokers().await
    }
    async fn try_acquire_controller(
        &self,
        broker_id: i32,
        lease_ms: i64,
    ) -> R<Option<ControllerLease>> {
        self.inner.try_acquire_controller(broker_id, lease_ms).await
    }
    async fn controller(&self) -> R<Option<ControllerLease>> {
        self.inner.controller().await
    }
    async fn list_partition_states(&self) -> R<Vec<PartitionState>> {
        self.inner.list_partition_states().await
    }
    async fn update_partition_state(
        &self,
        state: &PartitionState,
        guard: StateGuard,
    ) -> R<PartitionState> {
        self.inner.update_partition_state(state, guard).await
    }
    async fn advance_log_start(&self, topic_id: Uuid, partition: i32, offset: i64) -> R<i64> {
        self.inner
            .advance_log_start(topic_id, partition, offset)
            .await
    }
    async fn log_start_offsets(&self) -> R<Vec<(Uuid, i32, i64)>> {
        self.inner.log_start_offsets().await
    }
    fn supports_replication(&self) -> bool {
        self.inner.supports_replication()
    }
    async fn add_remote_segment(&self, segment: &RemoteSegment) -> R<()> {
        self.inner.add_remote_segment(segment).await
    }
    async fn transition_remote_segment(
        &self,
        segment_id: Uuid,
        from: RemoteSegmentState,
        to: RemoteSegmentState,
    ) -> R<RemoteSegment> {
        self.inner
            .transition_remote_segment(segment_id, from, to)
            .await
    }
    async fn replace_remote_segments(&self, replaced: &[Uuid], replacements: &[Uuid]) -> R<()> {
        self.inner
            .replace_remote_segments(replaced, replacements)
            .await
    }
    async fn truncate_remote_log(
        &self,
        topic_id: Uuid,
        partition: i32,
        from: i64,
        epoch: i32,
    ) -> R<u64> {
        self.inner
            .truncate_remote_log(topic_id, partition, from, epoch)
            .await
    }
    async fn remote_segment_topic_ids(&self) -> R<Vec<Uuid>> {
        self.inner.remote_segment_topic_ids().await
    }
    async fn undeleted_remote_segments(&self, topic_id: Uuid) -> R<Vec<RemoteSegment>> {
        self.inner.undeleted_remote_segments(topic_id).await
    }
    async fn remote_log_end_offset(&self, topic_id: Uuid, partition: i32) -> R<i64> {
        self.remote_read()?;
        self.inner.remote_log_end_offset(topic_id, partition).await
    }
    async fn remote_logs(&self, topic_id: Uuid) -> R<BTreeMap<i32, RemoteLog>> {
        self.remote_read()?;
        self.inner.remote_logs(topic_id).await
    }
    async fn list_remote_segments(
        &self,
        topic_id: Uuid,
        partition: i32,
        states: &[RemoteSegmentState],
    ) -> R<Vec<RemoteSegment>> {
        self.remote_read()?;
        self.inner
            .list_remote_segments(topic_id, partition, states)
            .await
    }
    async fn allocate_producer_ids(&self, count: i64) -> R<i64> {
        self.inner.allocate_producer_ids(count).await
    }
    async fn commit_offsets(
        &self,
        group: &str,
        offsets: &[CommittedOffset],
        live: Option<&[i32]>,
    ) -> R<()> {
        self.inner.commit_offsets(group, offsets, live).await
    }
    async fn committed_offsets(&self, group: &str) -> R<Vec<CommittedOffset>> {
        self.inner.committed_offsets(group).await
    }
    async fn offset_groups(&self) -> R<Vec<String>> {
        self.inner.offset_groups().await
    }
    async fn delete_group_offsets(&self, group: &str) -> R<u64> {
        self.inner.delete_group_offsets(group).await
    }
    async fn delete_committed_offsets(&self, group: &str, partitions: &[(Uuid, i32)]) -> R<()> {
        self.inner.delete_committed_offsets(group, partitions).await
    }
    async fn list_scram_credentials(&self) -> R<Vec<shale_metastore::ScramCredential>> {
        self.inner.list_scram_credentials().await
    }
    async fn upsert_scram_credential(&self, c: &shale_metastore::ScramCredential) -> R<()> {
        self.inner.upsert_scram_credential(c).await
    }
    async fn delete_scram_credential(&self, user: &str, mechanism: &str) -> R<bool> {
        self.inner.delete_scram_credential(user, mechanism).await
    }
    async fn list_acls(&self) -> R<Vec<shale_metastore::AclBinding>> {
        self.inner.list_acls().await
    }
    async fn create_acls(&self, acls: &[shale_metastore::AclBinding]) -> R<()> {
        self.inner.create_acls(acls).await
    }
    async fn delete_acls(&self, acls: &[shale_metastore::AclBinding]) -> R<u64> {
        self.inner.delete_acls(acls).await
    }
}

/// What a hooked object-store request is about to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreOp {
    Put,
    Get,
}

type Hook = Arc<dyn Fn(StoreOp, ObjectPath) -> BoxFuture<'static, ()> + Send + Sync>;

/// An object store that runs a test's hook before each put and get, so a test can
/// change the world in the middle of a request (delete what is being read, depose the
/// leader that is copying).
#[derive(Default)]
pub struct HookedStore {
    inner: Option<Arc<dyn ObjectStore>>,
    hook: Mutex<Option<Hook>>,
}

impl std::fmt::Debug for HookedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookedStore")
    }
}

impl std::fmt::Display for HookedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HookedStore")
    }
}

impl HookedStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<Self> {
        Arc::new(Self {
            inner: Some(inner),
            hook: Mutex::new(None),
        })
    }

    pub fn set_hook(
        &self,
        hook: impl Fn(StoreOp, ObjectPath) -> BoxFuture<'static, ()> + Send + Sync + 'static,
    ) {
        *self.hook.lock().unwrap() = Some(Arc::new(hook));
    }

    pub fn clear_hook(&self) {
        *self.hook.lock().unwrap() = None;
    }

    fn inner(&self) -> &Arc<dyn ObjectStore> {
        self.inner
            .as_ref()
            .expect("HookedStore::new sets the inner store")
    }

    async fn run_hook(&self, op: StoreOp, path: &ObjectPath) {
        let hook = self.hook.lock().unwrap().clone();
        if let Some(hook) = hook {
            hook(op, path.clone()).await;
        }
    }
}

#[async_trait]
impl ObjectStore for HookedStore {
    async fn put_opts(
        &self,
        location: &ObjectPath,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        self.run_hook(StoreOp::Put, location).await;
        self.inner().put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.run_hook(StoreOp::Put, location).await;
        self.inner().put_multipart_opts(location, opts).await
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.run_hook(StoreOp::Get, location).await;
        self.inner().get_opts(location, options).await
    }

    async fn get_range(
        &self,
        location: &ObjectPath,
        range: Range<u64>,
    ) -> object_store::Result<Bytes> {
        self.run_hook(StoreOp::Get, location).await;
        self.inner().get_range(location, range).await
    }

    async fn delete(&self, location: &ObjectPath) -> object_store::Result<()> {
        self.inner().delete(location).await
    }

    fn list(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.inner().list(prefix)
    }

    async fn list_with_delimiter(
        &self,
        prefix: Option<&ObjectPath>,
    ) -> object_store::Result<ListResult> {
        self.inner().list_with_delimiter(prefix).await
    }

    async fn copy(&self, from: &ObjectPath, to: &ObjectPath) -> object_store::Result<()> {
        self.inner().copy(from, to).await
    }

    async fn copy_if_not_exists(
        &self,
        from: &ObjectPath,
        to: &ObjectPath,
    ) -> object_store::Result<()> {
        self.inner().copy_if_not_exists(from, to).await
    }
}

/// An in-process broker (id 0) in `dir`, on SQLite and a local-file object store,
/// each wrapped for fault injection, with no background tasks (tests drive the
/// passes themselves).
pub struct TestBroker {
    pub broker: Arc<Broker>,
    pub metastore: Arc<FaultyMetastore>,
    pub store: Arc<HookedStore>,
    pub cancel: CancellationToken,
}

impl TestBroker {
    pub async fn start(dir: &Path, toml: &str) -> Self {
        let config_path = dir.join("shale.toml");
        std::fs::write(&config_path, toml).unwrap();
        let data_dir = dir.join("data");
        let config = BrokerConfig::load(Overrides {
            config: Some(config_path),
            data_dir: Some(data_dir.clone()),
            listen: Some("127.0.0.1:0".into()),
            ..Overrides::default()
        })
        .unwrap();
        std::fs::create_dir_all(&data_dir).unwrap();
        let sqlite = shale_metastore::open(&config.metastore_url).await.unwrap();
        let metastore = FaultyMetastore::new(sqlite);
        let objects = dir.join("objects");
        let local = shale_tiering::open(
            &format!("file://{}", objects.display()),
            &Default::default(),
        )
        .await
        .unwrap();
        let store = HookedStore::new(local);
        let cancel = CancellationToken::new();
        let broker = Broker::start_with(
            config,
            metastore.clone(),
            store.clone(),
            store.clone(),
            Arc::new(crate::replication::NoReplicaTransport),
            cancel.clone(),
        )
        .await
        .unwrap();
        Self {
            broker,
            metastore,
            store,
            cancel,
        }
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A record batch of `n` records of `len` bytes each.
pub fn batch(n: usize, len: usize) -> Bytes {
    let mut b = shale_records::record::BatchBuilder::new(crate::clock::now_ms());
    for _ in 0..n {
        b.push(shale_records::record::Record::new(
            None,
            Some(&vec![b'x'; len]),
            crate::clock::now_ms(),
        ));
    }
    b.build()
}
