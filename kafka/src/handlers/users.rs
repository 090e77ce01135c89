//! SCRAM credentials: DescribeUserScramCredentials and AlterUserScramCredentials.

use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use shale_service::{RequestContext, ScramDeletion, ScramUpsertion, Service};

use super::{code, message, str};

pub async fn describe(
    s: &Service,
    ctx: &RequestContext,
    r: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    // An empty list asks for every user, as null does.
    let users = r
        .users
        .filter(|u| !u.is_empty())
        .map(|u| u.into_iter().map(|n| n.name.to_string()).collect());
    let mut resp = DescribeUserScramCredentialsResponse::default();
    match s.describe_user_scram_credentials(ctx, users).await {
        Err(e) => {
            let r = Err::<(), _>(e);
            resp.error_code = code(&r);
            resp.error_message = message(&r);
        }
        Ok(users) => {
            resp.results = users
                .into_iter()
                .map(|(user, result)| {
                    let mut out = DescribeUserScramCredentialsResult::default();
                    out.user = str(&user);
                    out.error_code = code(&result);
                    out.error_message = message(&result);
                    out.credential_infos = result
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(m, iterations)| {
                            let mut info = CredentialInfo::default();
                            info.mechanism = m.kafka_type();
                            info.iterations = iterations;
                            info
                        })
                        .collect();
                    out
                })
                .collect();
        }
    }
    resp
}

pub async fn alter(
    s: &Service,
    ctx: &RequestContext,
    r: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let deletions = r
        .deletions
        .into_iter()
        .map(|d| ScramDeletion {
            user: d.name.to_string(),
            mechanism: d.mechanism,
        })
        .collect();
    let upsertions = r
        .upsertions
        .into_iter()
        .map(|u| ScramUpsertion {
            user: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    let mut resp = AlterUserScramCredentialsResponse::default();
    resp.results = s
        .alter_user_scram_credentials(ctx, deletions, upsertions)
        .await
        .into_iter()
        .map(|(user, result)| {
            let mut out = AlterUserScramCredentialsResult::default();
            out.user = str(&user);
            out.error_code = code(&result);
            out.error_message = message(&result);
            out
        })
        .collect();
    resp
}
