//! What goes in and what comes back: the record to send, and the future that resolves
//! to where it went once its batch is answered.

use std::sync::Arc;

use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::oneshot;

use crate::{Error, Result};

#[derive(Debug, Clone, Default)]
pub struct ProducerRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub partition: Option<i32>,
    /// Milliseconds since the epoch; now if unset.
    pub timestamp: Option<i64>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Where an acknowledged record went (`offset` -1 with `Acks::None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordMetadata {
    pub partition: i32,
    pub offset: i64,
}

/// The answer of one batch: its base offset (-1 with acks=0) or why it failed.
pub(super) type Outcome = Result<i64, Arc<Error>>;
pub(super) type OutcomeFuture = Shared<BoxFuture<'static, Outcome>>;

/// Resolves to where a sent record went (a future; cheap to hold per record).
pub struct DeliveryFuture {
    pub(super) outcome: OutcomeFuture,
    pub(super) partition: i32,
    pub(super) index: i64,
}

impl Future for DeliveryFuture {
    type Output = Result<RecordMetadata>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        std::pin::Pin::new(&mut this.outcome).poll(cx).map(|r| {
            let base = r.map_err(Error::Shared)?;
            Ok(RecordMetadata {
                partition: this.partition,
                offset: if base < 0 { -1 } else { base + this.index },
            })
        })
    }
}

pub(super) fn outcome_pair() -> (oneshot::Sender<Outcome>, OutcomeFuture) {
    let (tx, rx) = oneshot::channel();
    let fut = async move {
        rx.await.unwrap_or_else(|_| {
            Err(Arc::new(Error::Invalid(
                "the producer stopped before the record was sent".into(),
            )))
        })
    }
    .boxed()
    .shared();
    (tx, fut)
}
