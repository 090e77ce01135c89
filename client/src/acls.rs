//! ACLs: create, describe and delete bindings (Kafka's names throughout).

use shale_proto::v1::*;

use crate::{Client, Result, check, check_result};

impl Client {
    /// Stores each binding.
    pub async fn create_acls(&self, acls: Vec<AclBinding>) -> Result<()> {
        let r = self
            .admin
            .clone()
            .create_acls(CreateAclsRequest { acls })
            .await?
            .into_inner();
        for result in r.results {
            check(result.error_code, &result.error_message)?;
        }
        Ok(())
    }

    /// The bindings a filter selects.
    pub async fn describe_acls(&self, filter: AclBindingFilter) -> Result<Vec<AclBinding>> {
        let r = self
            .admin
            .clone()
            .describe_acls(DescribeAclsRequest {
                filter: Some(filter),
            })
            .await?
            .into_inner();
        check_result(r.error)?;
        Ok(r.acls)
    }

    /// Deletes what the filter selects; answers what was deleted.
    pub async fn delete_acls(&self, filter: AclBindingFilter) -> Result<Vec<AclBinding>> {
        let r = self
            .admin
            .clone()
            .delete_acls(DeleteAclsRequest {
                filters: vec![filter],
            })
            .await?
            .into_inner();
        let mut deleted = Vec::new();
        for result in r.results {
            check(result.error_code, &result.error_message)?;
            deleted.extend(result.deleted);
        }
        Ok(deleted)
    }
}
