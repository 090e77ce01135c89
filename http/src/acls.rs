//! `/api/v1/acls`: the ACL bindings, for the console's ACL page. Listing needs
//! DESCRIBE on the cluster, adding and removing ALTER, as over Kafka and gRPC.

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};
use shale_security::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use shale_service::{AclFilter, PatternFilter};

use crate::auth::Call;
use crate::{ApiError, ApiResult, body};

/// A binding as the API takes it; pattern, host and permission have Kafka's defaults.
#[derive(Deserialize)]
struct Binding {
    resource_type: String,
    resource_name: String,
    #[serde(default = "literal")]
    pattern_type: String,
    principal: String,
    #[serde(default = "any_host")]
    host: String,
    operation: String,
    #[serde(default = "allow")]
    permission: String,
}

fn literal() -> String {
    "LITERAL".into()
}
fn any_host() -> String {
    "*".into()
}
fn allow() -> String {
    "ALLOW".into()
}

fn parse<T>(field: &str, s: &str, f: impl Fn(&str) -> Option<T>) -> ApiResult<T> {
    f(s).ok_or_else(|| ApiError::param(field, format!("unknown value '{s}'")))
}

impl Binding {
    fn acl(self) -> ApiResult<Acl> {
        Ok(Acl {
            resource_type: parse("resource_type", &self.resource_type, ResourceType::parse)?,
            resource_name: self.resource_name,
            pattern_type: parse("pattern_type", &self.pattern_type, PatternType::parse)?,
            principal: self.principal,
            host: self.host,
            operation: parse("operation", &self.operation, Operation::parse)?,
            permission: parse("permission", &self.permission, Permission::parse)?,
        })
    }
}

fn json_of(a: &Acl) -> Value {
    json!({
        "resource_type": a.resource_type.name(),
        "resource_name": a.resource_name,
        "pattern_type": a.pattern_type.name(),
        "principal": a.principal,
        "host": a.host,
        "operation": a.operation.name(),
        "permission": a.permission.name(),
    })
}

/// `GET /api/v1/acls`: every binding.
pub(crate) async fn list(s: Call) -> ApiResult<Json<Value>> {
    let any = AclFilter {
        resource_type: None,
        resource_name: None,
        pattern: PatternFilter::Any,
        principal: None,
        host: None,
        operation: None,
        permission: None,
    };
    let mut acls = s.service.describe_acls(&s.ctx(), any).await?;
    acls.sort();
    Ok(Json(json!({
        "acls": acls.iter().map(json_of).collect::<Vec<_>>(),
        "authorization_enabled": s.service.authorization_enabled(),
    })))
}

/// `POST /api/v1/acls`: adds one binding.
pub(crate) async fn create(
    s: Call,
    b: Result<Bytes, BytesRejection>,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let acl = body::<Binding>(b)?.acl()?;
    let result = s.service.create_acls(&s.ctx(), vec![acl.clone()]).await;
    result.into_iter().next().unwrap_or(Ok(()))?;
    Ok((StatusCode::CREATED, Json(json_of(&acl))))
}

/// `POST /api/v1/acls/delete`: removes one binding (exactly this one).
pub(crate) async fn delete(s: Call, b: Result<Bytes, BytesRejection>) -> ApiResult<Json<Value>> {
    let acl = body::<Binding>(b)?.acl()?;
    let exact = AclFilter {
        resource_type: Some(acl.resource_type),
        resource_name: Some(acl.resource_name),
        pattern: PatternFilter::Exact(acl.pattern_type),
        principal: Some(acl.principal),
        host: Some(acl.host),
        operation: Some(acl.operation),
        permission: Some(acl.permission),
    };
    let deleted = s.service.delete_acls(&s.ctx(), vec![exact]).await;
    let deleted = deleted.into_iter().next().unwrap_or(Ok(Vec::new()))?;
    if deleted.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "RESOURCE_NOT_FOUND",
            "no such binding",
        ));
    }
    Ok(Json(json!({ "deleted": deleted.len() })))
}
