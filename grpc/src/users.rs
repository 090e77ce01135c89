//! The `Admin` service's user calls: SCRAM credentials.

use shale_proto::v1::*;
use shale_security::ScramMechanism;
use shale_service::{RequestContext, ScramDeletion, ScramUpsertion, Service};

use super::{error_fields, error_result};

/// A mechanism's Kafka number, or 0 (refused as unknown by the service).
fn mechanism(name: &str) -> i8 {
    ScramMechanism::from_name(name).map_or(0, ScramMechanism::kafka_type)
}

pub(crate) async fn describe(
    service: &Service,
    ctx: &RequestContext,
    r: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let users = (!r.users.is_empty()).then_some(r.users);
    let result = service.describe_user_scram_credentials(ctx, users).await;
    let error = error_result(&result);
    let users = result
        .unwrap_or_default()
        .into_iter()
        .map(|(user, result)| {
            let (error_code, error_message) = error_fields(&result);
            UserScramCredentials {
                user,
                error_code,
                error_message,
                credentials: result
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(m, iterations)| ScramCredentialInfo {
                        mechanism: m.name().into(),
                        iterations,
                    })
                    .collect(),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse { error, users }
}

pub(crate) async fn alter(
    service: &Service,
    ctx: &RequestContext,
    r: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let deletions = r
        .deletions
        .into_iter()
        .map(|d| ScramDeletion {
            mechanism: mechanism(&d.mechanism),
            user: d.user,
        })
        .collect();
    let upsertions = r
        .upsertions
        .into_iter()
        .map(|u| ScramUpsertion {
            mechanism: mechanism(&u.mechanism),
            user: u.user,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    let results = service
        .alter_user_scram_credentials(ctx, deletions, upsertions)
        .await
        .into_iter()
        .map(|(user, result)| {
            let (error_code, error_message) = error_fields(&result);
            AlterUserScramCredentialsResult {
                user,
                error_code,
                error_message,
            }
        })
        .collect();
    AlterUserScramCredentialsResponse { results }
}
