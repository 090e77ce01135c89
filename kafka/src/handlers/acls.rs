//! ACLs: CreateAcls, DescribeAcls, DeleteAcls. Kafka's numbers for resource types,
//! pattern types, operations and permissions become `security::acl`'s; 1 is ANY in
//! a filter.

use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use shale_broker::error::Error;
use shale_security::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use shale_service::{AclFilter, PatternFilter, RequestContext, Service};

use super::{code, message, str};

const ANY: i8 = 1;
const MATCH: i8 = 2;

fn invalid(what: &str, code: i8) -> Error {
    Error::InvalidRequest(format!("unknown {what} {code}"))
}

/// A creation's binding.
fn binding(c: &create_acls_request::AclCreation) -> Result<Acl, Error> {
    Ok(Acl {
        resource_type: ResourceType::from_code(c.resource_type)
            .ok_or_else(|| invalid("resource type", c.resource_type))?,
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type)
            .ok_or_else(|| invalid("pattern type", c.resource_pattern_type))?,
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: Operation::from_code(c.operation)
            .ok_or_else(|| invalid("operation", c.operation))?,
        permission: Permission::from_code(c.permission_type)
            .ok_or_else(|| invalid("permission", c.permission_type))?,
    })
}

/// A filter's fields, as DescribeAcls and DeleteAcls carry them.
#[allow(clippy::too_many_arguments)] // Kafka's seven filter fields
fn filter(
    resource_type: i8,
    name: Option<&StrBytes>,
    pattern_type: i8,
    principal: Option<&StrBytes>,
    host: Option<&StrBytes>,
    operation: i8,
    permission: i8,
) -> Result<AclFilter, Error> {
    fn any<T>(code: i8, what: &str, parse: impl Fn(i8) -> Option<T>) -> Result<Option<T>, Error> {
        if code == ANY {
            return Ok(None);
        }
        parse(code).map(Some).ok_or_else(|| invalid(what, code))
    }
    Ok(AclFilter {
        resource_type: any(resource_type, "resource type", ResourceType::from_code)?,
        resource_name: name.map(|n| n.to_string()),
        pattern: match pattern_type {
            ANY => PatternFilter::Any,
            MATCH => PatternFilter::Match,
            p => PatternFilter::Exact(
                PatternType::from_code(p).ok_or_else(|| invalid("pattern type", p))?,
            ),
        },
        principal: principal.map(|p| p.to_string()),
        host: host.map(|h| h.to_string()),
        operation: any(operation, "operation", Operation::from_code)?,
        permission: any(permission, "permission", Permission::from_code)?,
    })
}

pub async fn create(s: &Service, ctx: &RequestContext, r: CreateAclsRequest) -> CreateAclsResponse {
    let parsed: Vec<Result<Acl, Error>> = r.creations.iter().map(binding).collect();
    let valid: Vec<Acl> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut stored = s.create_acls(ctx, valid).await.into_iter();
    let mut resp = CreateAclsResponse::default();
    resp.results = parsed
        .into_iter()
        .map(|p| {
            let r = p.and_then(|_| stored.next().unwrap_or(Ok(())));
            let mut out = AclCreationResult::default();
            out.error_code = code(&r);
            out.error_message = message(&r);
            out
        })
        .collect();
    resp
}

pub async fn describe(
    s: &Service,
    ctx: &RequestContext,
    r: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let f = filter(
        r.resource_type_filter,
        r.resource_name_filter.as_ref(),
        r.pattern_type_filter,
        r.principal_filter.as_ref(),
        r.host_filter.as_ref(),
        r.operation,
        r.permission_type,
    );
    let result = match f {
        Ok(f) => s.describe_acls(ctx, f).await,
        Err(e) => Err(e),
    };
    let mut resp = DescribeAclsResponse::default();
    resp.error_code = code(&result);
    resp.error_message = message(&result);
    // One resource per pattern, with its entries.
    for a in result.unwrap_or_default() {
        let same = |res: &DescribeAclsResource| {
            res.resource_type == a.resource_type.code()
                && res.resource_name.as_str() == a.resource_name
                && res.pattern_type == a.pattern_type.code()
        };
        let i = match resp.resources.iter().position(same) {
            Some(i) => i,
            None => {
                let mut res = DescribeAclsResource::default();
                res.resource_type = a.resource_type.code();
                res.resource_name = str(&a.resource_name);
                res.pattern_type = a.pattern_type.code();
                resp.resources.push(res);
                resp.resources.len() - 1
            }
        };
        let mut d = AclDescription::default();
        d.principal = str(&a.principal);
        d.host = str(&a.host);
        d.operation = a.operation.code();
        d.permission_type = a.permission.code();
        resp.resources[i].acls.push(d);
    }
    resp
}

pub async fn delete(s: &Service, ctx: &RequestContext, r: DeleteAclsRequest) -> DeleteAclsResponse {
    let parsed: Vec<Result<AclFilter, Error>> = r
        .filters
        .iter()
        .map(|f| {
            filter(
                f.resource_type_filter,
                f.resource_name_filter.as_ref(),
                f.pattern_type_filter,
                f.principal_filter.as_ref(),
                f.host_filter.as_ref(),
                f.operation,
                f.permission_type,
            )
        })
        .collect();
    let valid: Vec<AclFilter> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let mut deleted = s.delete_acls(ctx, valid).await.into_iter();
    let mut resp = DeleteAclsResponse::default();
    resp.filter_results = parsed
        .into_iter()
        .map(|p| {
            let r = p.and_then(|_| deleted.next().unwrap_or(Ok(Vec::new())));
            let mut out = DeleteAclsFilterResult::default();
            out.error_code = code(&r);
            out.error_message = message(&r);
            out.matching_acls = r
                .unwrap_or_default()
                .into_iter()
                .map(|a| {
                    let mut m = DeleteAclsMatchingAcl::default();
                    m.resource_type = a.resource_type.code();
                    m.resource_name = str(&a.resource_name);
                    m.pattern_type = a.pattern_type.code();
                    m.principal = str(&a.principal);
                    m.host = str(&a.host);
                    m.operation = a.operation.code();
                    m.permission_type = a.permission.code();
                    m
                })
                .collect();
            out
        })
        .collect();
    resp
}
