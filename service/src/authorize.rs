//! The one place operations are authorized (see `security::acl`): every `Service`
//! method asks here before it acts, so every front end is checked alike. A refusal is
//! logged under the `audit` target with the principal, the client's address, the
//! operation and the resource; a topic left out of a listing is not (it is not a
//! refusal).

use std::future::Future;

use super::{RequestContext, Service};
use shale_broker::error::{Error, Result};
use shale_security::acl::{ANONYMOUS, CLUSTER_NAME, Operation, ResourceType};

impl Service {
    /// Whether the caller may do `op` on the resource, without auditing a refusal
    /// (for filtering what a listing shows).
    pub(crate) fn may(
        &self,
        ctx: &RequestContext,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        self.broker.security.authorizer().allows(
            ctx.principal.as_deref(),
            // An IPv4 client of a dual-stack listener is its IPv4 address, as in Kafka.
            ctx.peer.map(|p| p.ip().to_canonical()),
            op,
            resource_type,
            name,
        )
    }

    /// Whether the caller may do `op` on the resource; a refusal is audited.
    pub(crate) fn allowed(
        &self,
        ctx: &RequestContext,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        let ok = self.may(ctx, op, resource_type, name);
        if !ok {
            tracing::warn!(target: "audit",
                principal = ctx.principal.as_deref().unwrap_or(ANONYMOUS),
                peer = %ctx.peer.map_or_else(String::new, |p| p.to_string()),
                listener = %ctx.listener,
                operation = op.name(),
                resource_type = resource_type.name(),
                resource = name,
                "denied");
        }
        ok
    }

    /// `Ok` if the caller may do `op` on the resource, else its authorization error.
    pub(crate) fn authorize(
        &self,
        ctx: &RequestContext,
        op: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> Result<()> {
        if self.allowed(ctx, op, resource_type, name) {
            return Ok(());
        }
        let what = format!("{} {}", op.name(), name);
        Err(match resource_type {
            ResourceType::Topic => Error::TopicAuthorizationFailed(what),
            ResourceType::Group => Error::GroupAuthorizationFailed(what),
            ResourceType::Cluster => Error::ClusterAuthorizationFailed(op.name().to_string()),
            ResourceType::TransactionalId => Error::TransactionalIdAuthorizationFailed(what),
        })
    }

    /// Whether operations are checked against the ACLs (`[authorization] enable`).
    pub fn authorization_enabled(&self) -> bool {
        self.broker.security.authorizer().enabled()
    }

    pub(crate) fn authorize_cluster(&self, ctx: &RequestContext, op: Operation) -> Result<()> {
        self.authorize(ctx, op, ResourceType::Cluster, CLUSTER_NAME)
    }

    /// Runs `work` on the items whose topic the caller may `op` on; the others are
    /// answered TOPIC_AUTHORIZATION_FAILED. The answers come in the items' order.
    pub(crate) async fn on_allowed_topics<I, T, Fut>(
        &self,
        ctx: &RequestContext,
        op: Operation,
        items: Vec<I>,
        topic: impl Fn(&I) -> &str,
        work: impl FnOnce(Vec<I>) -> Fut,
    ) -> Vec<Result<T>>
    where
        Fut: Future<Output = Vec<Result<T>>>,
    {
        if !self.broker.security.authorizer().enabled() {
            return work(items).await;
        }
        let mut denied = Vec::new();
        let mut allowed = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            match self.authorize(ctx, op, ResourceType::Topic, topic(&item)) {
                Ok(()) => allowed.push(item),
                Err(e) => denied.push((i, e)),
            }
        }
        let mut done = work(allowed).await.into_iter();
        let total = done.len() + denied.len();
        let mut denied = denied.into_iter().peekable();
        (0..total)
            .map(|i| match denied.next_if(|(at, _)| *at == i) {
                Some((_, e)) => Err(e),
                None => done
                    .next()
                    .unwrap_or_else(|| Err(Error::InvalidRequest("lost answer".into()))),
            })
            .collect()
    }
}
