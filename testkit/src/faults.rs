//! Wrappers that inject faults into real backends, for unit tests of what happens
//! when a request is slow, fails, or races with other work: [`FaultyMetastore`]
//! around any metastore, [`HookedStore`] around any object store. With the `faults`
//! feature.

use std::collections::BTreeMap;
use std::ops::Range;
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
use uuid::Uuid;

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
    async fn restore_topics(&self, topics: &[shale_metastore::RestoredTopic]) -> R<Vec<Topic>> {
        self.inner.restore_topics(topics).await
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
    async fn detach_topic(&self, name: &str) -> R<Topic> {
        self.inner.detach_topic(name).await
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
        rack: Option<&str>,
    ) -> R<i64> {
        self.inner
            .register_broker(broker_id, address, endpoints, rack)
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
    async fn set_decommissioned(&self, broker_id: i32, decommissioned: bool) -> R<()> {
        self.inner
            .set_decommissioned(broker_id, decommissioned)
            .await
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
    async fn report_partition_sizes(&self, sizes: &[(Uuid, i32, i64)]) -> R<()> {
        self.inner.report_partition_sizes(sizes).await
    }
    async fn partition_sizes(&self) -> R<Vec<(Uuid, i32, i64)>> {
        self.inner.partition_sizes().await
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
    async fn transaction(&self, id: &str) -> R<Option<shale_metastore::TxnRecord>> {
        self.inner.transaction(id).await
    }
    async fn transactions(&self) -> R<Vec<shale_metastore::TxnRecord>> {
        self.inner.transactions().await
    }
    async fn transactions_to_check(&self, idle_before: i64) -> R<Vec<shale_metastore::TxnRecord>> {
        self.inner.transactions_to_check(idle_before).await
    }
    async fn write_transaction(
        &self,
        record: &shale_metastore::TxnRecord,
        offsets: shale_metastore::TxnOffsets,
    ) -> R<i64> {
        self.inner.write_transaction(record, offsets).await
    }
    async fn put_txn_offsets(
        &self,
        id: &str,
        version: i64,
        group: &str,
        offsets: &[CommittedOffset],
    ) -> R<()> {
        self.inner
            .put_txn_offsets(id, version, group, offsets)
            .await
    }
    async fn pending_txn_offsets(&self, group: &str) -> R<Vec<(Uuid, i32)>> {
        self.inner.pending_txn_offsets(group).await
    }
    async fn delete_transaction(&self, id: &str, version: i64) -> R<bool> {
        self.inner.delete_transaction(id, version).await
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
/// leader that is copying), fails the requests a test asks it to fail, and counts
/// them.
#[derive(Default)]
pub struct HookedStore {
    inner: Option<Arc<dyn ObjectStore>>,
    hook: Mutex<Option<Hook>>,
    counts: Arc<Counts>,
}

/// Requests made, and requests still to fail, by kind.
#[derive(Debug, Default)]
struct Counts {
    /// Of puts and gets: how many more succeed, then how many fail.
    failing: Mutex<[(u64, u64); 2]>,
    puts: AtomicU64,
    gets: AtomicU64,
}

impl Counts {
    /// Counts a request; whether it is to fail.
    fn take(&self, op: StoreOp) -> bool {
        let counter = match op {
            StoreOp::Put => &self.puts,
            StoreOp::Get => &self.gets,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        let mut failing = self.failing.lock().unwrap();
        let (succeed, fail) = &mut failing[op as usize];
        if *succeed > 0 {
            *succeed -= 1;
            return false;
        }
        let failed = *fail > 0;
        *fail = fail.saturating_sub(1);
        failed
    }
}

fn injected(op: StoreOp, path: &dyn std::fmt::Display) -> object_store::Error {
    object_store::Error::Generic {
        store: "HookedStore",
        source: format!("injected {op:?} failure at {path}").into(),
    }
}

/// A multipart upload whose parts count as puts (and fail when puts are to fail).
#[derive(Debug)]
struct HookedUpload {
    inner: Box<dyn MultipartUpload>,
    path: ObjectPath,
    counts: Arc<Counts>,
}

#[async_trait]
impl MultipartUpload for HookedUpload {
    fn put_part(&mut self, data: PutPayload) -> object_store::UploadPart {
        if self.counts.take(StoreOp::Put) {
            let e = injected(StoreOp::Put, &self.path);
            return Box::pin(async move { Err(e) });
        }
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        self.inner.complete().await
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
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
            ..Self::default()
        })
    }

    /// After `after` more requests of kind `op` (a multipart upload's parts count as
    /// puts), the next `count` fail, as with a store that went down; `count` 0 ends
    /// the failures.
    pub fn fail(&self, op: StoreOp, after: u64, count: u64) {
        self.counts.failing.lock().unwrap()[op as usize] = (after, count);
    }

    /// Requests of kind `op` made so far (failed ones included).
    pub fn requests(&self, op: StoreOp) -> u64 {
        match op {
            StoreOp::Put => self.counts.puts.load(Ordering::SeqCst),
            StoreOp::Get => self.counts.gets.load(Ordering::SeqCst),
        }
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

    /// Counts the request, runs the hook, and fails the request if it should.
    async fn run_hook(&self, op: StoreOp, path: &ObjectPath) -> object_store::Result<()> {
        let hook = self.hook.lock().unwrap().clone();
        if let Some(hook) = hook {
            hook(op, path.clone()).await;
        }
        if self.counts.take(op) {
            return Err(injected(op, path));
        }
        Ok(())
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
        self.run_hook(StoreOp::Put, location).await?;
        self.inner().put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &ObjectPath,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        self.run_hook(StoreOp::Put, location).await?;
        let inner = self.inner().put_multipart_opts(location, opts).await?;
        Ok(Box::new(HookedUpload {
            inner,
            path: location.clone(),
            counts: self.counts.clone(),
        }))
    }

    async fn get_opts(
        &self,
        location: &ObjectPath,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        self.run_hook(StoreOp::Get, location).await?;
        self.inner().get_opts(location, options).await
    }

    async fn get_range(
        &self,
        location: &ObjectPath,
        range: Range<u64>,
    ) -> object_store::Result<Bytes> {
        self.run_hook(StoreOp::Get, location).await?;
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
