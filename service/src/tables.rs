//! The topics' Iceberg tables, as the read-only REST catalog serves them: a table is
//! visible to whoever may describe its topic.

use shale_broker::error::{Error, Result};
use shale_security::acl::{Operation, ResourceType};

use shale_broker::clock::now_ms;
use shale_broker::topics::TopicDescription;
use shale_config::iceberg::IcebergMode;
use shale_table::catalog::TableStatus;

use crate::{RequestContext, Service};

/// A topic's table, and how far each partition's records lag behind in it.
#[derive(Debug, Clone)]
pub struct TableReport {
    pub status: TableStatus,
    pub partitions: Vec<TablePartitionLag>,
}

#[derive(Debug, Clone, Copy)]
pub struct TablePartitionLag {
    pub partition: i32,
    /// The first offset not in the table; -1: none of the partition's records is.
    pub next_offset: i64,
    /// Offsets below the high watermark not in the table yet.
    pub lag_offsets: i64,
    /// With a lag: how long since the partition last committed (or since the topic
    /// was created); 0 without one.
    pub lag_ms: i64,
}

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

    /// The status of a described topic's table (describing it authorized the
    /// caller), each partition's lag measured against the high watermarks described;
    /// `None` for a topic without `iceberg.mode`.
    pub async fn table_report(&self, d: &TopicDescription) -> Option<Result<TableReport>> {
        if d.config.table.mode == IcebergMode::Disabled {
            return None;
        }
        let status = match self
            .broker
            .table_status(&d.topic.name, d.topic.partitions)
            .await
        {
            Ok(s) => s.unwrap_or_default(),
            Err(e) => return Some(Err(e)),
        };
        let now = now_ms();
        let partitions = (status.partitions.iter().zip(&d.partitions))
            .map(|(&(next, committed), p)| {
                let hw = p.offsets.map_or(0, |o| o.high_watermark);
                let lag = (hw - next.unwrap_or(0)).max(0);
                TablePartitionLag {
                    partition: p.partition,
                    next_offset: next.unwrap_or(-1),
                    lag_offsets: lag,
                    lag_ms: if lag > 0 {
                        now - committed.unwrap_or(d.topic.created_at_ms)
                    } else {
                        0
                    },
                }
            })
            .collect();
        Some(Ok(TableReport { status, partitions }))
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
