//! The topics' Iceberg tables, as the read-only REST catalog serves them: a table is
//! visible to whoever may describe its topic.

use shale_broker::error::{Error, Result};
use shale_security::acl::{Operation, ResourceType};

use crate::{RequestContext, Service};

impl Service {
    /// The topics with a table that the caller may describe.
    pub async fn list_tables(&self, ctx: &RequestContext) -> Result<Vec<String>> {
        self.call(ctx, "ListTables", async {
            let names = self.counted(self.broker.table_names().await)?;
            Ok(names
                .into_iter()
                .filter(|t| self.may(ctx, Operation::Describe, ResourceType::Topic, t))
                .collect())
        })
        .await
    }

    /// A topic's table: its metadata location and metadata (Iceberg's JSON).
    pub async fn load_table(
        &self,
        ctx: &RequestContext,
        topic: &str,
    ) -> Result<(String, serde_json::Value)> {
        self.call(ctx, "LoadTable", async {
            self.counted(self.authorize(ctx, Operation::Describe, ResourceType::Topic, topic))?;
            let table = self.counted(self.broker.table_metadata(topic).await)?;
            table.ok_or_else(|| Error::UnknownTopic(format!("{topic} (it has no Iceberg table)")))
        })
        .await
    }
}
