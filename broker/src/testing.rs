//! In-process test harness: a broker on a real SQLite metastore and a real local-file
//! object store, each behind the test kit's fault-injecting wrappers (a slow lease
//! renewal, a failing metastore read, work done in the middle of an object-store
//! request). Used by unit tests of races that real processes cannot hit on purpose;
//! end-to-end behaviour is tested with real processes under `tests/`.

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
pub(crate) use shale_testkit::faults::{FaultyMetastore, HookedStore, StoreOp};
use tokio_util::sync::CancellationToken;

use crate::broker::Broker;
use shale_config::{BrokerConfig, Overrides};

/// An in-process broker (id 0) in `dir`, on SQLite and a local-file object store,
/// each wrapped for fault injection, with no background tasks (tests drive the
/// passes themselves).
pub(crate) struct TestBroker {
    pub broker: Arc<Broker>,
    pub metastore: Arc<FaultyMetastore>,
    pub store: Arc<HookedStore>,
    pub cancel: CancellationToken,
}

impl TestBroker {
    pub(crate) async fn start(dir: &Path, toml: &str) -> Self {
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
pub(crate) fn batch(n: usize, len: usize) -> Bytes {
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
