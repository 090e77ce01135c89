//! This broker's replica fetchers, one per leader broker it follows, and how they
//! reach the leaders (a [`ReplicaConnector`]). The fetchers themselves run in
//! `replication::follower`.

use std::collections::HashMap;
use std::sync::Arc;

use crate::transport::{ReplicaConnector, ReplicaLink};

/// This broker's replica fetchers, one per leader broker, and how they reach leaders.
pub(crate) struct Followers {
    fetchers: std::sync::Mutex<HashMap<i32, tokio::task::JoinHandle<()>>>,
    connector: Arc<dyn ReplicaConnector>,
}

impl std::fmt::Debug for Followers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Followers")
            .field("fetchers", &self.fetchers)
            .finish_non_exhaustive()
    }
}

impl Followers {
    /// How this broker reaches other brokers.
    pub(crate) fn connector(&self) -> &Arc<dyn ReplicaConnector> {
        &self.connector
    }

    pub(crate) fn new(connector: Arc<dyn ReplicaConnector>) -> Self {
        Self {
            fetchers: std::sync::Mutex::new(HashMap::new()),
            connector,
        }
    }

    /// Starts a fetcher (with `spawn`) for each of `leaders` that has none running.
    pub(crate) fn ensure(
        &self,
        leaders: impl IntoIterator<Item = i32>,
        spawn: impl Fn(i32) -> tokio::task::JoinHandle<()>,
    ) {
        let mut fetchers = self.fetchers.lock().unwrap_or_else(|e| e.into_inner());
        fetchers.retain(|_, handle| !handle.is_finished());
        for leader in leaders {
            fetchers.entry(leader).or_insert_with(|| spawn(leader));
        }
    }

    pub(crate) async fn connect(
        &self,
        address: &str,
    ) -> std::result::Result<Box<dyn ReplicaLink>, crate::transport::TransportError> {
        self.connector.connect(address).await
    }
}
