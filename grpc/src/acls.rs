//! The `Admin` service's ACL calls.

use shale_broker::error::Error;
use shale_proto::v1::*;
use shale_security::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use shale_service::{AclFilter, PatternFilter, RequestContext, Service};

use super::{error_fields, error_result};

fn parse<T>(what: &str, s: &str, f: impl Fn(&str) -> Option<T>) -> Result<T, Error> {
    f(s).ok_or_else(|| Error::InvalidRequest(format!("unknown {what} '{s}'")))
}

/// An empty field matches anything.
fn any<T>(what: &str, s: &str, f: impl Fn(&str) -> Option<T>) -> Result<Option<T>, Error> {
    if s.is_empty() || s.eq_ignore_ascii_case("ANY") {
        return Ok(None);
    }
    parse(what, s, f).map(Some)
}

fn binding(b: &AclBinding) -> Result<Acl, Error> {
    Ok(Acl {
        resource_type: parse("resource type", &b.resource_type, ResourceType::parse)?,
        resource_name: b.resource_name.clone(),
        pattern_type: parse("pattern type", &b.pattern_type, PatternType::parse)?,
        principal: b.principal.clone(),
        host: b.host.clone(),
        operation: parse("operation", &b.operation, Operation::parse)?,
        permission: parse("permission", &b.permission, Permission::parse)?,
    })
}

fn message(a: Acl) -> AclBinding {
    AclBinding {
        resource_type: a.resource_type.name().into(),
        resource_name: a.resource_name,
        pattern_type: a.pattern_type.name().into(),
        principal: a.principal,
        host: a.host,
        operation: a.operation.name().into(),
        permission: a.permission.name().into(),
    }
}

fn filter(f: &AclBindingFilter) -> Result<AclFilter, Error> {
    let set = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Ok(AclFilter {
        resource_type: any("resource type", &f.resource_type, ResourceType::parse)?,
        resource_name: set(&f.resource_name),
        pattern: match f.pattern_type.to_ascii_uppercase().as_str() {
            "" | "ANY" => PatternFilter::Any,
            "MATCH" => PatternFilter::Match,
            p => PatternFilter::Exact(parse("pattern type", p, PatternType::parse)?),
        },
        principal: set(&f.principal),
        host: set(&f.host),
        operation: any("operation", &f.operation, Operation::parse)?,
        permission: any("permission", &f.permission, Permission::parse)?,
    })
}

pub(crate) async fn create(
    service: &Service,
    ctx: &RequestContext,
    r: CreateAclsRequest,
) -> CreateAclsResponse {
    let parsed: Vec<Result<Acl, Error>> = r.acls.iter().map(binding).collect();
    let valid = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut stored = service.create_acls(ctx, valid).await.into_iter();
    let results = parsed
        .into_iter()
        .map(|p| {
            let r = p.and_then(|_| stored.next().unwrap_or(Ok(())));
            let (error_code, error_message) = error_fields(&r);
            AclResult {
                error_code,
                error_message,
            }
        })
        .collect();
    CreateAclsResponse { results }
}

pub(crate) async fn describe(
    service: &Service,
    ctx: &RequestContext,
    r: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let result = match filter(&r.filter.unwrap_or_default()) {
        Ok(f) => service.describe_acls(ctx, f).await,
        Err(e) => Err(e),
    };
    let error = error_result(&result);
    let acls = result
        .unwrap_or_default()
        .into_iter()
        .map(message)
        .collect();
    DescribeAclsResponse { error, acls }
}

pub(crate) async fn delete(
    service: &Service,
    ctx: &RequestContext,
    r: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let parsed: Vec<Result<AclFilter, Error>> = r.filters.iter().map(filter).collect();
    let valid = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut deleted = service.delete_acls(ctx, valid).await.into_iter();
    let results = parsed
        .into_iter()
        .map(|p| {
            let r = p.and_then(|_| deleted.next().unwrap_or(Ok(Vec::new())));
            let (error_code, error_message) = error_fields(&r);
            DeleteAclsResult {
                error_code,
                error_message,
                deleted: r.unwrap_or_default().into_iter().map(message).collect(),
            }
        })
        .collect();
    DeleteAclsResponse { results }
}
