//! A topic's tables, as one broker's pass commits to them: the topic's table (and,
//! for `value_schema`, its dead letters, `<topic>~dlq`), created by whichever leader
//! gets there first.
//!
//! # Dead letters, exactly once
//! A `value_schema` commit goes in two steps: first the dead letters, to the
//! dead-letter table, with its own progress per partition (fenced as any commit);
//! then the rows that fit, with the partition's progress, to the topic's table. A
//! crash between the two leaves the dead-letter table ahead: the next attempt reads
//! the same records again from the topic table's progress, and adds to the dead
//! letters only those past the dead-letter table's own.

use std::sync::Arc;

use iceberg::spec::Schema;
use iceberg::table::Table;
use iceberg::{Catalog, TableIdent};
use shale_records::record::Record;

use crate::append::{Appended, Chunk, append};
use crate::catalog::{self, TableCatalog};
use crate::schema::{Layout, dead_letter_schema, hourly_spec, key_value_schema, values_schema};
use crate::storage::BucketStorage;
use crate::values;

/// What a topic's table holds.
#[derive(Debug, Clone)]
pub enum Mode {
    KeyValue,
    /// The value's fields as columns: those of the given schema (fixed), or, with none
    /// given, those the records bring (added as they come).
    Values(Option<Box<Schema>>),
}

impl Mode {
    /// What the rows of a table of this mode are, as the table records it.
    fn kind(&self) -> String {
        match self {
            Mode::KeyValue => "key_value".into(),
            Mode::Values(None) => "value_schema".into(),
            Mode::Values(Some(given)) => {
                let json = serde_json::to_string(given.as_struct()).unwrap_or_default();
                format!("value_schema:{json}")
            }
        }
    }
}

/// Which topic, and where its tables go.
#[derive(Debug, Clone, Copy)]
pub struct TopicTables<'a> {
    pub catalog: &'a TableCatalog,
    pub storage: &'a BucketStorage,
    pub topic: &'a str,
    pub topic_id: uuid::Uuid,
}

/// What one commit did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Committed {
    pub appended: Appended,
    pub dead_letters: u64,
    pub new_columns: usize,
}

/// The name of a topic's dead-letter table.
pub fn dead_letter_table(topic: &str) -> String {
    format!("{topic}~dlq")
}

impl TopicTables<'_> {
    async fn load_or_create(
        &self,
        name: &str,
        schema: Schema,
        layout: Layout,
        kind: &str,
    ) -> anyhow::Result<Table> {
        let spec = hourly_spec(&schema, layout)?;
        let location = catalog::table_location(self.storage, name, self.topic_id);
        let (catalog, id) = (self.catalog, self.topic_id);
        Ok(catalog::load_or_create(catalog, name, id, location, schema, spec, kind).await?)
    }

    /// The topic's table, created if missing (or if the one there holds rows of
    /// another kind: see `catalog::load_or_create`).
    pub async fn open(&self, mode: &Mode) -> anyhow::Result<Table> {
        let (schema, layout) = match mode {
            Mode::KeyValue => (key_value_schema()?, Layout::KeyValue),
            Mode::Values(given) => (values_schema(given.as_deref())?, Layout::Values),
        };
        (self.load_or_create(self.topic, schema, layout, &mode.kind())).await
    }

    /// Commits `chunks` to `table` (the topic's, as [`TopicTables::open`] gave it),
    /// all or none (but for the dead letters, see the module's doc).
    pub async fn commit(
        &self,
        table: &Table,
        mode: &Mode,
        chunks: &[Chunk<'_>],
        target_file_bytes: usize,
    ) -> anyhow::Result<Committed> {
        let Mode::Values(given) = mode else {
            let (_, appended) = append(
                self.catalog,
                table,
                Layout::KeyValue,
                chunks,
                target_file_bytes,
            )
            .await?;
            return Ok(Committed {
                appended,
                ..Default::default()
            });
        };
        let parsed: Vec<Vec<Result<serde_json::Value, String>>> = (chunks.iter())
            .map(|c| c.records.iter().map(values::parse).collect())
            .collect();
        let (table, new_columns) = match given {
            None => self.widen(table, &parsed).await?,
            Some(_) => (table.clone(), 0),
        };
        // Records below the dead-letter table's progress were sorted before (their
        // dead letters are in it): sorted again by the same schema, they go the same
        // way, whatever columns were added since.
        let dlq = match self
            .catalog
            .load_table(&dead_letter_ident(self.topic))
            .await
        {
            Ok(t) => Some(t),
            Err(e) if e.kind() == iceberg::ErrorKind::TableNotFound => None,
            Err(e) => return Err(e.into()),
        };
        let metadata = table.metadata();
        let current = values::value_fields(metadata.current_schema());
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(
            metadata.current_schema(),
        )?);
        let mut sorted = Vec::with_capacity(chunks.len());
        for (chunk, parsed) in chunks.iter().zip(&parsed) {
            let earlier = dlq.as_ref().and_then(|d| {
                let below = catalog::progress(d, chunk.partition).next_offset?;
                let schema = metadata.schema_by_id(catalog::classified_by(d, chunk.partition)?)?;
                Some((below, values::value_fields(schema)))
            });
            let mut s = values::Sorted::default();
            for (r, v) in chunk.records.iter().zip(parsed) {
                let fields = match &earlier {
                    Some((below, fields)) if r.offset < *below => fields,
                    _ => &current,
                };
                match v
                    .as_ref()
                    .map_err(Clone::clone)
                    .and_then(|v| values::check(v, fields, None))
                {
                    Ok(()) => s.good.push(r.clone()),
                    Err(reason) => s.dead(r.clone(), reason),
                }
            }
            s.decode(&arrow)?;
            sorted.push(s);
        }
        let schema_id = metadata.current_schema_id();
        let dead_letters =
            (self.commit_dead_letters(chunks, &sorted, schema_id, target_file_bytes)).await?;
        let chunks: Vec<Chunk<'_>> = (chunks.iter().zip(&sorted))
            .map(|(c, s)| Chunk {
                records: &s.good,
                values: s.values.as_ref(),
                ..*c
            })
            .collect();
        let (_, appended) = append(
            self.catalog,
            &table,
            Layout::Values,
            &chunks,
            target_file_bytes,
        )
        .await?;
        Ok(Committed {
            appended,
            dead_letters,
            new_columns,
        })
    }

    /// Adds the columns the records of `parsed` bring to `table`, in rounds (a new
    /// struct's sub-fields that a later record brings come in the next), up to
    /// [`MAX_COLUMN_ID`]; the table as it is then, and how many were added. Columns
    /// that cannot be added leave their records to the dead letters.
    async fn widen(
        &self,
        table: &Table,
        parsed: &[Vec<Result<serde_json::Value, String>>],
    ) -> anyhow::Result<(Table, usize)> {
        let mut table = table.clone();
        let (mut added, mut failed) = (0, 0);
        for _ in 0..8 {
            let new = values::columns_to_add(&table, parsed);
            if new.is_empty() {
                break;
            }
            if table.metadata().last_column_id() >= MAX_COLUMN_ID {
                tracing::warn!(
                    topic = self.topic,
                    "the table has as many columns as it may \
                    have: records with new fields are dead letters"
                );
                break;
            }
            match values::widen(self.catalog, &table, &new).await {
                Ok(t) => {
                    added += new.len();
                    let names: Vec<_> = new.iter().map(|c| &c.name).collect();
                    tracing::info!(topic = self.topic, columns = ?names,
                        "new fields: columns added to the topic's table");
                    table = t;
                }
                Err(e) => {
                    failed += 1;
                    if failed == 2 {
                        tracing::warn!(topic = self.topic, error = %e,
                            "cannot add columns: the records bringing them are dead letters");
                        break;
                    }
                    // Another partition's leader widened it meanwhile: look again.
                    table = self.catalog.load_table(table.identifier()).await?;
                }
            }
        }
        Ok((table, added))
    }

    /// Adds the dead letters of `chunks` (`bad`, one entry per chunk) past the
    /// dead-letter table's progress to it; how many.
    async fn commit_dead_letters(
        &self,
        chunks: &[Chunk<'_>],
        sorted: &[values::Sorted],
        schema_id: i32,
        target_file_bytes: usize,
    ) -> anyhow::Result<u64> {
        if sorted.iter().all(|s| s.bad.is_empty()) {
            return Ok(0);
        }
        let name = dead_letter_table(self.topic);
        let dlq = self
            .load_or_create(
                &name,
                dead_letter_schema()?,
                Layout::DeadLetters,
                "dead_letters",
            )
            .await?;
        let mut kept: Vec<(Chunk<'_>, Vec<Record>, Vec<String>)> = Vec::new();
        for (
            c,
            values::Sorted {
                bad: records,
                reasons,
                ..
            },
        ) in chunks.iter().zip(sorted)
        {
            let after = catalog::progress(&dlq, c.partition);
            let from = after.next_offset.unwrap_or(i64::MIN);
            let (r, why): (Vec<Record>, Vec<String>) = (records.iter().zip(reasons))
                .filter(|(r, _)| r.offset >= from)
                .map(|(r, w)| (r.clone(), w.clone()))
                .unzip();
            if !r.is_empty() && c.next_offset > from {
                kept.push((
                    Chunk {
                        after,
                        start: c.start.max(from),
                        classified_by: Some(schema_id),
                        ..*c
                    },
                    r,
                    why,
                ));
            }
        }
        let chunks: Vec<Chunk<'_>> = (kept.iter())
            .map(|(c, r, w)| Chunk {
                records: r,
                reasons: w,
                ..*c
            })
            .collect();
        if chunks.is_empty() {
            return Ok(0);
        }
        let (_, appended) = append(
            self.catalog,
            &dlq,
            Layout::DeadLetters,
            &chunks,
            target_file_bytes,
        )
        .await?;
        Ok(appended.rows)
    }
}

/// Inferred columns stop being added once the table's field ids reach this (a value
/// whose keys are data, such as ids, would add columns without end).
const MAX_COLUMN_ID: i32 = 2000;

/// The identifier of a topic's dead-letter table.
pub fn dead_letter_ident(topic: &str) -> TableIdent {
    catalog::ident(&dead_letter_table(topic))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::cast::AsArray;
    use arrow_array::types::Int64Type;
    use arrow_array::{Array, RecordBatch};
    use futures::TryStreamExt;

    async fn scan(table: &Table) -> Vec<RecordBatch> {
        let scan = table.scan().select_all().build().unwrap();
        scan.to_arrow().await.unwrap().try_collect().await.unwrap()
    }

    /// A chunk of partition 0 from `start`, up to its last record, continuing the
    /// table's progress.
    fn partition_0<'a>(table: &Table, epoch: i32, start: i64, records: &'a [Record]) -> Chunk<'a> {
        Chunk {
            partition: 0,
            leader_epoch: epoch,
            after: catalog::progress(table, 0),
            start,
            next_offset: records.last().map_or(start, |r| r.offset + 1),
            records,
            reasons: &[],
            values: None,
            classified_by: None,
        }
    }

    fn record(offset: i64, value: Option<&str>) -> Record {
        let mut r = Record::new(None, value.map(str::as_bytes), 1_700_000_000_000 + offset);
        r.offset = offset;
        r
    }

    #[tokio::test]
    async fn json_values_become_columns_and_misfits_dead_letters_once() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, storage) = crate::testing::local_catalog(dir.path()).await;
        let tables = TopicTables {
            catalog: &catalog,
            storage: &storage,
            topic: "logs",
            topic_id: uuid::Uuid::from_u128(7),
        };
        let mode = Mode::Values(None);
        let table = tables.open(&mode).await.unwrap();
        let first = vec![
            record(0, Some(r#"{"level":"info","ms":12}"#)),
            record(1, Some(r#"{"level":"warn","ms":30,"user":{"id":4}}"#)),
            record(2, None),
            record(3, Some(r#"{"level":"info","ms":"slow"}"#)),
            record(4, Some("not json")),
        ];
        let chunk = partition_0(&table, 1, 0, &first);
        let done = tables
            .commit(&table, &mode, &[chunk], 1 << 20)
            .await
            .unwrap();
        assert_eq!(done.appended.rows, 3);
        assert_eq!((done.dead_letters, done.new_columns), (2, 3));
        let table = catalog.load_table(table.identifier()).await.unwrap();
        let names: Vec<String> = (table
            .metadata()
            .current_schema()
            .as_struct()
            .fields()
            .iter())
        .map(|f| f.name.clone())
        .collect();
        assert_eq!(
            names,
            [
                "shale_partition",
                "shale_offset",
                "shale_timestamp",
                "shale_key",
                "shale_headers",
                "level",
                "ms",
                "user"
            ]
        );
        let rows = scan(&table).await;
        let ms: i64 = rows
            .iter()
            .map(|b| {
                let c = b.column_by_name("ms").unwrap().as_primitive::<Int64Type>();
                c.iter().flatten().sum::<i64>()
            })
            .sum();
        assert_eq!(ms, 42);
        let dlq = catalog
            .load_table(&dead_letter_ident("logs"))
            .await
            .unwrap();
        let dead = scan(&dlq).await;
        let reasons: Vec<String> = (dead.iter())
            .flat_map(|b| {
                let r = b.column_by_name("reason").unwrap().as_string::<i32>();
                r.iter().map(|s| s.unwrap().to_string()).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(reasons.len(), 2);
        assert!(
            reasons.contains(&"field ms: expected long, got \"slow\"".to_string()),
            "{reasons:?}"
        );
        assert!(
            reasons
                .iter()
                .any(|r| r.starts_with("the value is not JSON")),
            "{reasons:?}"
        );
        assert_eq!(catalog::progress(&dlq, 0).next_offset, Some(5));

        // A crash after the dead letters' commit, before the rows': the next attempt
        // (a new leader, from the table's progress) adds no dead letter twice, and a
        // new field widens the table again.
        // (The table's progress of another partition: none.)
        let more = vec![
            record(5, Some(r#"{"ms":1,"level":"info","host":"a"}"#)),
            record(6, Some(r#"{"ms":true}"#)),
        ];
        let at = |next_offset| Chunk {
            next_offset,
            ..partition_0(&table, 2, 5, &more)
        };
        // The dead letter of offset 6 lands, the rows do not (a stale expected progress).
        let stale = Chunk {
            after: catalog::progress(&table, 1),
            ..at(7)
        };
        assert!(
            tables
                .commit(&table, &mode, &[stale], 1 << 20)
                .await
                .is_err()
        );
        let done = tables
            .commit(&table, &mode, &[at(7)], 1 << 20)
            .await
            .unwrap();
        // (The refused attempt had added the new field's column already.)
        assert_eq!(
            (done.appended.rows, done.dead_letters, done.new_columns),
            (1, 0, 0)
        );
        let dlq = catalog
            .load_table(&dead_letter_ident("logs"))
            .await
            .unwrap();
        let dead: usize = scan(&dlq).await.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(dead, 3, "offset 6 once");
        let table = catalog.load_table(table.identifier()).await.unwrap();
        let rows: usize = scan(&table).await.iter().map(RecordBatch::num_rows).sum();
        assert_eq!(rows, 4);
        assert_eq!(catalog::progress(&table, 0).next_offset, Some(7));
        let host = table.metadata().current_schema().field_by_name("host");
        assert!(host.is_some());
        // Earlier rows read the new column as null.
        let batches = scan(&table).await;
        let nulls: usize = batches
            .iter()
            .map(|b| b.column_by_name("host").unwrap().null_count())
            .sum();
        assert_eq!(nulls, 3);
        // Every value in its own column, whatever the order of the fields.
        let mut seen: Vec<(i64, String)> = Vec::new();
        for b in &batches {
            let ms = b.column_by_name("ms").unwrap().as_primitive::<Int64Type>();
            let level = b.column_by_name("level").unwrap().as_string::<i32>();
            for i in 0..b.num_rows() {
                if !ms.is_null(i) {
                    seen.push((ms.value(i), level.value(i).to_string()));
                }
            }
        }
        seen.sort();
        let want = [(1, "info"), (12, "info"), (30, "warn")];
        assert_eq!(seen, want.map(|(m, l)| (m, l.to_string())));
    }

    #[tokio::test]
    async fn new_struct_fields_all_come_and_a_table_of_another_kind_is_set_aside() {
        let dir = tempfile::tempdir().unwrap();
        let (catalog, storage) = crate::testing::local_catalog(dir.path()).await;
        let id = uuid::Uuid::from_u128(8);
        let tables = TopicTables {
            catalog: &catalog,
            storage: &storage,
            topic: "m",
            topic_id: id,
        };
        let mode = Mode::Values(None);
        let table = tables.open(&mode).await.unwrap();
        // Two records bring two sub-fields of one new struct: both become columns.
        let records = vec![
            record(0, Some(r#"{"a":{"x":1}}"#)),
            record(1, Some(r#"{"a":{"y":"two"}}"#)),
            record(2, Some(r#"{"b":[]}"#)),
        ];
        let chunk = partition_0(&table, 0, 0, &records);
        let done = tables
            .commit(&table, &mode, &[chunk], 1 << 20)
            .await
            .unwrap();
        assert_eq!((done.appended.rows, done.dead_letters), (3, 0));
        let table = catalog.load_table(table.identifier()).await.unwrap();
        let schema = table.metadata().current_schema();
        assert!(schema.field_by_name("a.x").is_some() && schema.field_by_name("a.y").is_some());
        assert!(
            schema.field_by_name("b").is_none(),
            "an empty array says no type"
        );

        // The topic switched to key_value: the table is set aside with its rows, a new
        // one starts at a location of its own.
        let kv = tables.open(&Mode::KeyValue).await.unwrap();
        assert!(
            kv.metadata()
                .current_schema()
                .field_by_name("value")
                .is_some()
        );
        assert_eq!(catalog::progress(&kv, 0).next_offset, None);
        assert_ne!(kv.metadata().location(), table.metadata().location());
        let aside: Vec<_> = (catalog
            .list_tables(table.identifier().namespace())
            .await
            .unwrap())
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with(&format!("m@{id}.")))
        .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        let old = catalog
            .load_table(&catalog::ident(&aside[0]))
            .await
            .unwrap();
        assert_eq!(catalog::status(&old, 1).rows, 3);
        // Opened again in the same mode, it is the same table.
        let again = tables.open(&Mode::KeyValue).await.unwrap();
        assert_eq!(again.metadata().location(), kv.metadata().location());
    }
}
