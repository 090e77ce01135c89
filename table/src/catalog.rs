//! The tables' catalog: Iceberg's SQL catalog in the metastore's own database (tables
//! `iceberg_tables` and `iceberg_namespace_properties`, the layout pyiceberg's
//! `SqlCatalog` and the JDBC catalogs of Spark, Trino and Flink read), catalog name
//! `shale`, namespace `shale`, one table per topic.
//!
//! # Progress and fencing
//! Each partition's progress is kept in the table's properties, written in the same
//! commit as the partition's files: `shale.partition.<p>.next-offset` (the first offset
//! not in the table) and `shale.partition.<p>.leader-epoch` (the leader epoch of the
//! partition's last commit). A commit goes through a [`Fenced`] view of the catalog,
//! which refuses to base the commit on a table whose progress for the partition is not
//! the one the commit starts from, or whose epoch is newer. Iceberg's own checks
//! (the table's current snapshot is the one the commit was based on; the catalog's
//! compare-and-swap of the metadata location) make that the table the commit lands
//! on. So a retried, late or zombie commit never adds a row twice or skips one.

use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

use iceberg::spec::Schema;
use iceberg::table::Table;
use iceberg::{
    Catalog, CatalogBuilder, Error, ErrorKind, MetadataLocation, Namespace, NamespaceIdent, Result,
    TableCommit, TableCreation, TableIdent,
};
use iceberg_catalog_sql::{SqlBindStyle, SqlCatalog, SqlCatalogBuilder};

use crate::storage::{BucketStorage, BucketStorageFactory};

pub const CATALOG_NAME: &str = "shale";
pub const NAMESPACE: &str = "shale";
/// Where the tables live in the bucket.
pub const TABLES_PREFIX: &str = "_shale/tables";

/// The SQL catalog, and its database for the commits Shale makes itself (a fenced
/// commit, a rewrite: see [`TableCatalog::swap_metadata_location`]). Derefs to the
/// catalog.
pub struct TableCatalog {
    sql: SqlCatalog,
    url: String,
    pool: tokio::sync::OnceCell<sqlx::AnyPool>,
}

impl std::fmt::Debug for TableCatalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TableCatalog").finish_non_exhaustive()
    }
}

impl std::ops::Deref for TableCatalog {
    type Target = SqlCatalog;
    fn deref(&self) -> &SqlCatalog {
        &self.sql
    }
}

impl TableCatalog {
    /// The SQL catalog's own commit: the table's row moves from metadata file `old` to
    /// `new` only if it is still at `old` (else `CatalogCommitConflicts`, retryable).
    pub async fn swap_metadata_location(
        &self,
        table: &TableIdent,
        old: &str,
        new: &str,
    ) -> Result<()> {
        let sql_error = |e: sqlx::Error| Error::new(ErrorKind::Unexpected, e.to_string());
        let pool = (self.pool)
            .get_or_try_init(|| async {
                sqlx::any::AnyPoolOptions::new()
                    .max_connections(2)
                    .connect(&self.url)
                    .await
            })
            .await
            .map_err(sql_error)?;
        let sql = if self.url.starts_with("postgres") {
            "UPDATE iceberg_tables SET metadata_location = $1, previous_metadata_location = $2 \
             WHERE catalog_name = $3 AND table_namespace = $4 AND table_name = $5 \
             AND metadata_location = $6"
        } else {
            "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
             WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? \
             AND metadata_location = ?"
        };
        let done = sqlx::query(sql)
            .bind(new)
            .bind(old)
            .bind(CATALOG_NAME)
            .bind(table.namespace().join("."))
            .bind(table.name())
            .bind(old)
            .execute(pool)
            .await
            .map_err(sql_error)?;
        if done.rows_affected() == 0 {
            return Err(Error::new(
                ErrorKind::CatalogCommitConflicts,
                format!("table {table} was changed meanwhile"),
            )
            .with_retryable(true));
        }
        Ok(())
    }
}

/// Opens the SQL catalog in the metastore's database (`postgres://…` or `sqlite:…`).
pub async fn open(metastore_url: &str, storage: BucketStorage) -> Result<TableCatalog> {
    sqlx::any::install_default_drivers();
    let bind = if metastore_url.starts_with("postgres") {
        SqlBindStyle::DollarNumeric
    } else {
        SqlBindStyle::QMark
    };
    let warehouse = storage.location(TABLES_PREFIX);
    let catalog = SqlCatalogBuilder::default()
        .uri(metastore_url)
        .warehouse_location(warehouse)
        .sql_bind_style(bind)
        .with_storage_factory(Arc::new(BucketStorageFactory(storage)))
        .load(CATALOG_NAME, HashMap::new())
        .await?;
    let ns = NamespaceIdent::new(NAMESPACE.to_string());
    if !catalog.namespace_exists(&ns).await? {
        match catalog.create_namespace(&ns, HashMap::new()).await {
            Ok(_) => {}
            // Another broker created it first.
            Err(e) if catalog.namespace_exists(&ns).await.unwrap_or(false) => {
                tracing::debug!(error = %e, "namespace created concurrently")
            }
            Err(e) => return Err(e),
        }
    }
    Ok(TableCatalog {
        sql: catalog,
        url: metastore_url.to_string(),
        pool: Default::default(),
    })
}

pub fn ident(topic: &str) -> TableIdent {
    TableIdent::new(
        NamespaceIdent::new(NAMESPACE.to_string()),
        topic.to_string(),
    )
}

/// Where the table of one topic (by id) lives: `<tables>/shale/<topic>@<topic id>`
/// (`@` is in no topic name, and object stores take it as it is), so that a topic
/// created again under the same name gets files of its own.
pub fn table_location(storage: &BucketStorage, topic: &str, topic_id: uuid::Uuid) -> String {
    storage.location(&format!("{TABLES_PREFIX}/{NAMESPACE}/{topic}@{topic_id}"))
}

const TOPIC_ID: &str = "shale.topic-id";
/// What the table's rows are (see [`load_or_create`]).
const KIND: &str = "shale.table-kind";

/// The table of `topic` (with id `topic_id`), created at `location` if missing (by
/// whichever leader gets there first). A table of the same name that belongs to an
/// earlier topic of that name (deleted since) is renamed aside first, to
/// `<topic>@<its topic id>`, keeping its rows: the new topic's offsets start again.
/// So is one of this topic whose `kind` (what its rows are: the table mode, and a
/// `value_schema` table's given schema) is not the one asked for, to
/// `<topic>@<topic id>.<ms>`: the new table starts from the log's start, at a location
/// of its own.
pub async fn load_or_create(
    catalog: &SqlCatalog,
    topic: &str,
    topic_id: uuid::Uuid,
    location: String,
    schema: Schema,
    spec: iceberg::spec::UnboundPartitionSpec,
    kind: &str,
) -> Result<Table> {
    let id = ident(topic);
    let mut location = location;
    match catalog.load_table(&id).await {
        Ok(t) => {
            let props = t.metadata().properties();
            let owner = props.get(TOPIC_ID).cloned();
            let same_topic = owner.as_deref() == Some(topic_id.to_string().as_str());
            // Tables from before kinds were recorded are `key_value` ones.
            let same_kind = props.get(KIND).map_or("key_value", String::as_str) == kind;
            if same_topic && same_kind {
                return Ok(t);
            }
            let aside = if same_topic {
                let now = chrono::Utc::now().timestamp_millis();
                location = format!("{location}.{now}");
                ident(&format!("{topic}@{topic_id}.{now}"))
            } else {
                ident(&format!(
                    "{topic}@{}",
                    owner.as_deref().unwrap_or("unknown")
                ))
            };
            tracing::info!(topic, %topic_id, renamed = %aside, same_topic,
                "the table is an earlier topic's of this name, or of another kind: renaming it aside");
            if let Err(e) = catalog.rename_table(&id, &aside).await {
                // Another leader renamed it first.
                if catalog.table_exists(&id).await? && !catalog.table_exists(&aside).await? {
                    return Err(e);
                }
            }
        }
        Err(e) if e.kind() == ErrorKind::TableNotFound => {}
        Err(e) => return Err(e),
    }
    let creation = TableCreation::builder()
        .name(topic.to_string())
        .location(location)
        .schema(schema)
        .partition_spec(spec)
        .properties([
            (TOPIC_ID.to_string(), topic_id.to_string()),
            (KIND.to_string(), kind.to_string()),
            (
                "write.parquet.compression-codec".to_string(),
                "zstd".to_string(),
            ),
            ("shale.topic".to_string(), topic.to_string()),
            // Every commit adds a snapshot and a metadata file: see `housekeeping`.
            (
                "history.expire.max-snapshot-age-ms".to_string(),
                "3600000".to_string(),
            ),
            (
                "write.metadata.previous-versions-max".to_string(),
                "20".to_string(),
            ),
        ])
        .build();
    match catalog.create_table(id.namespace(), creation).await {
        Ok(t) => Ok(t),
        Err(e) if e.kind() == ErrorKind::TableAlreadyExists => {
            let t = catalog.load_table(&id).await?;
            match t.metadata().properties().get(TOPIC_ID) {
                Some(owner) if *owner == topic_id.to_string() => Ok(t),
                _ => Err(Error::new(
                    ErrorKind::CatalogCommitConflicts,
                    format!("table {id} was created for another topic meanwhile"),
                )),
            }
        }
        Err(e) => Err(e),
    }
}

fn next_offset_key(partition: i32) -> String {
    format!("shale.partition.{partition}.next-offset")
}

fn epoch_key(partition: i32) -> String {
    format!("shale.partition.{partition}.leader-epoch")
}

/// A partition's progress as the table has it: the first offset not in the table
/// (`None`: none of the partition's records is), and the leader epoch of its last
/// commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub next_offset: Option<i64>,
    pub leader_epoch: i32,
}

pub fn progress(table: &Table, partition: i32) -> Progress {
    let props = table.metadata().properties();
    let get = |k: String| props.get(&k).and_then(|v| v.parse::<i64>().ok());
    Progress {
        next_offset: get(next_offset_key(partition)),
        leader_epoch: get(epoch_key(partition))
            .and_then(|e| i32::try_from(e).ok())
            .unwrap_or(-1),
    }
}

/// Dead-letter tables: the schema (id) of the topic's table that the partition's
/// records up to `next-offset` were classified by.
pub(crate) fn classified_by_key(partition: i32) -> String {
    format!("shale.partition.{partition}.classified-by-schema")
}

pub fn classified_by(table: &Table, partition: i32) -> Option<i32> {
    (table.metadata().properties())
        .get(&classified_by_key(partition))
        .and_then(|v| v.parse().ok())
}

fn committed_key(partition: i32) -> String {
    format!("shale.partition.{partition}.committed-ms")
}

/// The properties a commit of `partition` up to `next_offset` sets (`now_ms`: when).
pub fn progress_properties(
    partition: i32,
    next_offset: i64,
    epoch: i32,
    now_ms: i64,
) -> [(String, String); 3] {
    [
        (next_offset_key(partition), next_offset.to_string()),
        (epoch_key(partition), epoch.to_string()),
        (committed_key(partition), now_ms.to_string()),
    ]
}

/// A table as `shale topic describe` shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TableStatus {
    pub location: String,
    pub data_files: u64,
    pub bytes: u64,
    pub rows: u64,
    /// When the current snapshot was committed (ms), -1 before the first.
    pub last_commit_ms: i64,
    /// Per partition `0..partitions`: (`next-offset`, when it last committed (ms)).
    pub partitions: Vec<(Option<i64>, Option<i64>)>,
}

pub fn status(table: &Table, partitions: i32) -> TableStatus {
    let metadata = table.metadata();
    let snapshot = metadata.current_snapshot();
    let total = |key: &str| {
        snapshot
            .and_then(|s| s.summary().additional_properties.get(key))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let props = metadata.properties();
    TableStatus {
        location: metadata.location().to_string(),
        data_files: total("total-data-files"),
        bytes: total("total-files-size"),
        rows: total("total-records"),
        last_commit_ms: snapshot.map_or(-1, |s| s.timestamp_ms()),
        partitions: (0..partitions)
            .map(|p| {
                let committed = props.get(&committed_key(p)).and_then(|v| v.parse().ok());
                (progress(table, p).next_offset, committed)
            })
            .collect(),
    }
}

/// Why a commit was refused by [`Fenced`]: the message starts with this.
pub const FENCED: &str = "fenced";

/// The catalog as one commit sees it: a table whose progress for one of the
/// commit's partitions is not the one expected, or whose epoch for it is newer than
/// the commit's, is refused (a non-retryable error, message starting with
/// [`FENCED`]). Iceberg's transaction loads the table it bases the commit on through
/// `load_table`, and again on every retry after a conflict, so each attempt is
/// checked.
#[derive(Debug)]
pub struct Fenced<'a> {
    pub inner: &'a TableCatalog,
    /// (partition, expected `next-offset`, the commit's leader epoch).
    pub expected: Vec<(i32, Option<i64>, i32)>,
}

impl Fenced<'_> {
    fn check(&self, table: &Table) -> Result<()> {
        for &(partition, expected, epoch) in &self.expected {
            let now = progress(table, partition);
            if now.next_offset != expected || now.leader_epoch > epoch {
                return Err(Error::new(
                    ErrorKind::PreconditionFailed,
                    format!(
                        "{FENCED}: partition {partition} of table {} is at {:?} (epoch {}), \
                         this commit starts at {expected:?} (epoch {epoch})",
                        table.identifier(),
                        now.next_offset,
                        now.leader_epoch,
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Catalog for Fenced<'_> {
    async fn list_namespaces(
        &self,
        parent: Option<&NamespaceIdent>,
    ) -> Result<Vec<NamespaceIdent>> {
        self.inner.list_namespaces(parent).await
    }

    async fn create_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<Namespace> {
        self.inner.create_namespace(namespace, properties).await
    }

    async fn get_namespace(&self, namespace: &NamespaceIdent) -> Result<Namespace> {
        self.inner.get_namespace(namespace).await
    }

    async fn namespace_exists(&self, namespace: &NamespaceIdent) -> Result<bool> {
        self.inner.namespace_exists(namespace).await
    }

    async fn update_namespace(
        &self,
        namespace: &NamespaceIdent,
        properties: HashMap<String, String>,
    ) -> Result<()> {
        self.inner.update_namespace(namespace, properties).await
    }

    async fn drop_namespace(&self, namespace: &NamespaceIdent) -> Result<()> {
        self.inner.drop_namespace(namespace).await
    }

    async fn list_tables(&self, namespace: &NamespaceIdent) -> Result<Vec<TableIdent>> {
        self.inner.list_tables(namespace).await
    }

    async fn create_table(
        &self,
        namespace: &NamespaceIdent,
        creation: TableCreation,
    ) -> Result<Table> {
        self.inner.create_table(namespace, creation).await
    }

    async fn load_table(&self, table: &TableIdent) -> Result<Table> {
        let t = self.inner.load_table(table).await?;
        self.check(&t)?;
        Ok(t)
    }

    async fn drop_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.drop_table(table).await
    }

    async fn purge_table(&self, table: &TableIdent) -> Result<()> {
        self.inner.purge_table(table).await
    }

    async fn table_exists(&self, table: &TableIdent) -> Result<bool> {
        self.inner.table_exists(table).await
    }

    async fn rename_table(&self, src: &TableIdent, dest: &TableIdent) -> Result<()> {
        self.inner.rename_table(src, dest).await
    }

    async fn register_table(&self, table: &TableIdent, metadata_location: String) -> Result<Table> {
        self.inner.register_table(table, metadata_location).await
    }

    /// The SQL catalog's commit, but checked against the fence on the very table it
    /// swaps: the catalog's own `update_table` loads the table again and checks only
    /// the commit's requirements, which a commit that changes no snapshot (progress
    /// alone) does not have.
    async fn update_table(&self, commit: TableCommit) -> Result<Table> {
        let ident = commit.identifier().clone();
        let current = self.inner.load_table(&ident).await?;
        self.check(&current)?;
        let old = current.metadata_location_result()?.to_string();
        let staged = commit.apply(current)?;
        let new = MetadataLocation::from_str(staged.metadata_location_result()?)?;
        staged.metadata().write_to(staged.file_io(), &new).await?;
        (self.inner)
            .swap_metadata_location(&ident, &old, &new.to_string())
            .await?;
        Ok(staged)
    }
}
