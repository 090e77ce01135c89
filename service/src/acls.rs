//! ACLs: Kafka's CreateAcls, DescribeAcls and DeleteAcls. Changes take effect on this
//! broker at once and on the others at their next metadata refresh (at once where the
//! metastore announces changes).

use super::{RequestContext, Service};
use shale_broker::error::{Error, Result};
use shale_security::acl::{Acl, CLUSTER_NAME, Operation, PatternType, Permission, ResourceType};

/// How a filter matches a binding's pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternFilter {
    /// Any pattern.
    Any,
    /// The bindings that apply to the named resource: its literal name, the `*`
    /// wildcard, and every prefix of it.
    Match,
    /// This pattern type, and the name exactly.
    Exact(PatternType),
}

/// Which bindings a describe or delete selects; `None` matches anything.
#[derive(Debug, Clone)]
pub struct AclFilter {
    pub resource_type: Option<ResourceType>,
    pub resource_name: Option<String>,
    pub pattern: PatternFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclFilter {
    pub fn matches(&self, a: &Acl) -> bool {
        let name_ok = match (&self.resource_name, self.pattern) {
            (None, _) => true,
            (Some(name), PatternFilter::Any) => &a.resource_name == name,
            (Some(name), PatternFilter::Exact(p)) => {
                p == a.pattern_type && &a.resource_name == name
            }
            (Some(name), PatternFilter::Match) => match a.pattern_type {
                PatternType::Literal => &a.resource_name == name || a.resource_name == "*",
                PatternType::Prefixed => name.starts_with(&a.resource_name),
            },
        };
        let pattern_ok = match (self.pattern, &self.resource_name) {
            (PatternFilter::Exact(p), None) => p == a.pattern_type,
            _ => true,
        };
        name_ok
            && pattern_ok
            && self.resource_type.is_none_or(|t| t == a.resource_type)
            && self.principal.as_ref().is_none_or(|p| p == &a.principal)
            && self.host.as_ref().is_none_or(|h| h == &a.host)
            && self.operation.is_none_or(|o| o == a.operation)
            && self.permission.is_none_or(|p| p == a.permission)
    }
}

/// Why a binding cannot be stored.
fn check(a: &Acl) -> Result<()> {
    let bad = |why: &str| Err(Error::InvalidRequest(format!("invalid ACL: {why}")));
    if a.resource_name.is_empty() {
        return bad("the resource name is empty");
    }
    if a.resource_type == ResourceType::Cluster && a.resource_name != CLUSTER_NAME {
        return bad("the cluster resource is named kafka-cluster");
    }
    if !a.principal.starts_with("User:") || a.principal.len() == "User:".len() {
        return bad("a principal is User:NAME (or User:*)");
    }
    if a.host.is_empty() || (a.host != "*" && a.host.parse::<std::net::IpAddr>().is_err()) {
        return bad("the host is an IP address or *");
    }
    Ok(())
}

impl Service {
    /// Stores each binding; one answer each.
    pub async fn create_acls(&self, ctx: &RequestContext, acls: Vec<Acl>) -> Vec<Result<()>> {
        self.call(ctx, "CreateAcls", async {
            if let Err(e) = self.authorize_cluster(ctx, Operation::Alter) {
                let e = std::sync::Arc::new(e);
                return acls
                    .iter()
                    .map(|_| self.counted(Err(Error::Shared(e.clone()))))
                    .collect();
            }
            let checked: Vec<Result<()>> = acls.iter().map(check).collect();
            let rows: Vec<_> = acls
                .iter()
                .zip(&checked)
                .filter(|(_, c)| c.is_ok())
                .map(|(a, _)| a.to_row())
                .collect();
            let stored = self.broker.metastore().create_acls(&rows).await;
            self.refresh_acls().await;
            let stored = stored.map_err(|e| std::sync::Arc::new(Error::from(e)));
            checked
                .into_iter()
                .map(|c| {
                    let r = c.and_then(|()| stored.clone().map_err(Error::Shared));
                    self.counted(r)
                })
                .collect()
        })
        .await
    }

    /// The bindings a filter selects.
    pub async fn describe_acls(&self, ctx: &RequestContext, filter: AclFilter) -> Result<Vec<Acl>> {
        self.call(ctx, "DescribeAcls", async {
            self.counted(self.authorize_cluster(ctx, Operation::Describe))?;
            let rows = self.counted(
                self.broker
                    .metastore()
                    .list_acls()
                    .await
                    .map_err(Error::from),
            )?;
            Ok(rows
                .iter()
                .filter_map(Acl::from_row)
                .filter(|a| filter.matches(a))
                .collect())
        })
        .await
    }

    /// Deletes the bindings each filter selects; one answer each, with what it
    /// deleted.
    pub async fn delete_acls(
        &self,
        ctx: &RequestContext,
        filters: Vec<AclFilter>,
    ) -> Vec<Result<Vec<Acl>>> {
        self.call(ctx, "DeleteAcls", async {
            if let Err(e) = self.authorize_cluster(ctx, Operation::Alter) {
                let e = std::sync::Arc::new(e);
                return filters
                    .iter()
                    .map(|_| self.counted(Err(Error::Shared(e.clone()))))
                    .collect();
            }
            let mut out = Vec::new();
            for filter in &filters {
                let r = async {
                    let rows = self.broker.metastore().list_acls().await?;
                    let chosen: Vec<Acl> = rows
                        .iter()
                        .filter_map(Acl::from_row)
                        .filter(|a| filter.matches(a))
                        .collect();
                    let rows: Vec<_> = chosen.iter().map(Acl::to_row).collect();
                    self.broker.metastore().delete_acls(&rows).await?;
                    Ok(chosen)
                }
                .await;
                out.push(self.counted(r));
            }
            self.refresh_acls().await;
            out
        })
        .await
    }

    async fn refresh_acls(&self) {
        match self.broker.metastore().list_acls().await {
            Ok(rows) => self.broker.security.authorizer().replace(&rows),
            Err(e) => tracing::warn!(error = %e, "cannot re-read the ACLs; the next refresh will"),
        }
    }
}
