//! The tables' schemas: one row per record, with the record's partition, offset,
//! timestamp, key and headers, and its value as bytes (`key_value`) or as the typed
//! columns of its JSON fields (`value_schema`); partitioned by the hour of the
//! timestamp (hidden partitioning: queries filter on the timestamp, engines prune by
//! hour).

use std::sync::Arc;

use arrow_array::builder::{LargeBinaryBuilder, StringBuilder};
use arrow_array::{
    ArrayRef, Int32Array, Int64Array, LargeBinaryArray, ListArray, RecordBatch, StringArray,
    StructArray, TimestampMicrosecondArray,
};
use arrow_buffer::OffsetBuffer;
use arrow_schema::{DataType, Field, Fields, SchemaRef};
use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Transform, Type,
    UnboundPartitionSpec,
};
use shale_records::record::Record;

/// What a table's rows are made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// `iceberg.mode=key_value`: `partition`, `offset`, `timestamp`, `key`, `value`
    /// (binary) and `headers`.
    KeyValue,
    /// `iceberg.mode=value_schema`: the record's own columns (`shale_partition`, `shale_offset`,
    /// `shale_timestamp`, `shale_key`, `shale_headers`), then the fields of its JSON value as typed
    /// columns (see `values`).
    Values,
    /// The dead-letter table of a `value_schema` topic: `key_value`'s columns, and
    /// `reason`, why the record did not fit.
    DeadLetters,
}

/// The record's own columns of a `value_schema` table; no value field may be named so.
pub const RESERVED: [&str; 5] = [
    "shale_partition",
    "shale_offset",
    "shale_timestamp",
    "shale_key",
    "shale_headers",
];

/// The name of a `value_schema` table's partition field (the hour of
/// `shale_timestamp`): no value field may be named so.
pub const PARTITION_FIELD: &str = "shale_hour";

impl Layout {
    fn partition_field(self) -> &'static str {
        match self {
            Layout::Values => PARTITION_FIELD,
            _ => "hour",
        }
    }

    /// The column the table is partitioned by (hour).
    pub fn timestamp_column(self) -> &'static str {
        match self {
            Layout::Values => "shale_timestamp",
            _ => "timestamp",
        }
    }
}

fn headers_type(first_id: i32) -> Type {
    let header = StructType::new(vec![
        NestedField::required(first_id + 1, "key", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(
            first_id + 2,
            "value",
            Type::Primitive(PrimitiveType::Binary),
        )
        .into(),
    ]);
    Type::List(ListType::new(
        NestedField::list_element(first_id, Type::Struct(header), true).into(),
    ))
}

fn primitive(id: i32, name: &str, required: bool, p: PrimitiveType) -> NestedFieldRef {
    Arc::new(NestedField::new(id, name, Type::Primitive(p), required))
}

/// The `key_value` table's schema (field ids 1 to 9, stable).
pub fn key_value_schema() -> iceberg::Result<Schema> {
    Schema::builder()
        .with_schema_id(0)
        .with_fields(key_value_fields())
        .build()
}

fn key_value_fields() -> Vec<NestedFieldRef> {
    vec![
        primitive(1, "partition", true, PrimitiveType::Int),
        primitive(2, "offset", true, PrimitiveType::Long),
        primitive(3, "timestamp", true, PrimitiveType::Timestamptz),
        primitive(4, "key", false, PrimitiveType::Binary),
        primitive(5, "value", false, PrimitiveType::Binary),
        NestedField::required(6, "headers", headers_type(7)).into(),
    ]
}

/// The dead-letter table's schema: `key_value`'s, and `reason` (field id 10).
pub fn dead_letter_schema() -> iceberg::Result<Schema> {
    let mut fields = key_value_fields();
    fields.push(primitive(10, "reason", true, PrimitiveType::String));
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
}

/// A `value_schema` table's schema: the record's own columns, then `value`'s fields
/// (the schema given in `iceberg.value.schema`; none: the fields are added as
/// records bring them). Field ids are assigned afresh when the table is created.
pub fn values_schema(value: Option<&Schema>) -> iceberg::Result<Schema> {
    let base = value.map_or(0, |v| v.highest_field_id());
    let mut fields = vec![
        primitive(base + 1, "shale_partition", true, PrimitiveType::Int),
        primitive(base + 2, "shale_offset", true, PrimitiveType::Long),
        primitive(
            base + 3,
            "shale_timestamp",
            true,
            PrimitiveType::Timestamptz,
        ),
        primitive(base + 4, "shale_key", false, PrimitiveType::Binary),
        NestedField::required(base + 5, "shale_headers", headers_type(base + 6)).into(),
    ];
    if let Some(v) = value {
        fields.extend(v.as_struct().fields().iter().cloned());
    }
    Schema::builder()
        .with_schema_id(0)
        .with_fields(fields)
        .build()
}

/// Partitioned by the hour of the layout's timestamp column.
pub fn hourly_spec(schema: &Schema, layout: Layout) -> iceberg::Result<UnboundPartitionSpec> {
    let column = layout.timestamp_column();
    let source = schema.field_by_name(column).ok_or_else(|| {
        iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!("no {column} column"),
        )
    })?;
    Ok(UnboundPartitionSpec::builder()
        .with_spec_id(0)
        // Named short: a data file's key holds it (`…/data/hour=493000/…`), and keys
        // past about 150 bytes are too long for some S3 servers (`s3s-fs`). A
        // `value_schema` table's name cannot be a value field's.
        .add_partition_field(source.id, layout.partition_field(), Transform::Hour)?
        .build())
}

/// The hour a timestamp (ms) falls in, as Iceberg's `hour` transform gives it: hours
/// since the epoch.
pub fn hour_of(timestamp_ms: i64) -> i32 {
    i32::try_from(timestamp_ms.div_euclid(3_600_000)).unwrap_or(i32::MAX)
}

/// The rows of `records` (all of one partition), as `schema` (the table's Arrow schema,
/// with Iceberg's field ids) has them; `reasons` (dead letters only) go with them one
/// by one. The records of a `value_schema` table must have passed `values::check`;
/// their value columns are `values` (decoded here when `None`).
pub fn rows(
    layout: Layout,
    schema: &SchemaRef,
    partition: i32,
    records: &[&Record],
    reasons: &[&str],
    values: Option<RecordBatch>,
) -> anyhow::Result<RecordBatch> {
    let n = records.len();
    let values = match (layout, values) {
        (Layout::Values, Some(v)) => Some(v),
        (Layout::Values, None) => Some(crate::values::decode(schema, records)?),
        _ => None,
    };
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    for field in schema.fields() {
        // The record's own columns, by their name in `key_value`; none: a value field.
        let own = match layout {
            Layout::Values if RESERVED.contains(&field.name().as_str()) => {
                field.name().strip_prefix("shale_")
            }
            Layout::Values => None,
            _ => Some(field.name().as_str()),
        };
        let column: ArrayRef = match own {
            Some("partition") => Arc::new(Int32Array::from(vec![partition; n])),
            Some("offset") => Arc::new(Int64Array::from_iter_values(
                records.iter().map(|r| r.offset),
            )),
            Some("timestamp") => timestamps(field, records)?,
            Some("key") => Arc::new(
                records
                    .iter()
                    .map(|r| r.key.as_deref())
                    .collect::<LargeBinaryArray>(),
            ),
            Some("value") => Arc::new(
                records
                    .iter()
                    .map(|r| r.value.as_deref())
                    .collect::<LargeBinaryArray>(),
            ),
            Some("headers") => headers(field, records)?,
            Some("reason") if layout == Layout::DeadLetters => {
                Arc::new(StringArray::from_iter_values(reasons.iter()))
            }
            Some(other) => anyhow::bail!("unexpected column {other} in a {layout:?} table"),
            None => {
                let values = values.as_ref().expect("a value_schema table");
                let name = field.name();
                (values.column_by_name(name))
                    .ok_or_else(|| anyhow::anyhow!("no column {name} among the values"))?
                    .clone()
            }
        };
        columns.push(column);
    }
    debug_assert!(columns.iter().all(|c| c.len() == n));
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn timestamps(field: &Field, records: &[&Record]) -> anyhow::Result<ArrayRef> {
    let micros = records.iter().map(|r| r.timestamp.saturating_mul(1000));
    match field.data_type() {
        DataType::Timestamp(_, tz) => Ok(Arc::new(
            TimestampMicrosecondArray::from_iter_values(micros).with_timezone_opt(tz.clone()),
        )),
        other => anyhow::bail!("timestamp column of type {other}"),
    }
}

fn headers(field: &Field, records: &[&Record]) -> anyhow::Result<ArrayRef> {
    let mut header_keys = StringBuilder::new();
    let mut header_values = LargeBinaryBuilder::new();
    let mut list_offsets = Vec::with_capacity(records.len() + 1);
    list_offsets.push(0i32);
    for r in records {
        for (k, v) in &r.headers {
            header_keys.append_value(k);
            header_values.append_option(v.as_deref());
        }
        let last = *list_offsets.last().unwrap_or(&0);
        list_offsets.push(last + i32::try_from(r.headers.len())?);
    }
    let DataType::List(element) = field.data_type() else {
        anyhow::bail!("headers column is not a list");
    };
    let DataType::Struct(header_fields) = element.data_type() else {
        anyhow::bail!("header is not a struct");
    };
    let header_values: LargeBinaryArray = header_values.finish();
    let headers = StructArray::try_new(
        Fields::clone(header_fields),
        vec![
            Arc::new(header_keys.finish()) as ArrayRef,
            Arc::new(header_values) as ArrayRef,
        ],
        None,
    )?;
    Ok(Arc::new(ListArray::try_new(
        element.clone(),
        OffsetBuffer::new(list_offsets.into()),
        Arc::new(headers),
        None,
    )?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use bytes::Bytes;

    #[test]
    fn records_become_rows_with_their_headers() {
        let schema = key_value_schema().unwrap();
        let arrow = Arc::new(iceberg::arrow::schema_to_arrow_schema(&schema).unwrap());
        let mut a = Record::new(Some(b"k"), Some(b"v"), 1_700_000_000_123);
        a.offset = 7;
        a.headers = vec![
            ("h1".into(), Some(Bytes::from_static(b"x"))),
            ("h2".into(), None),
        ];
        let mut b = Record::new(None, None, 5);
        b.offset = 8;
        let batch = rows(Layout::KeyValue, &arrow, 3, &[&a, &b], &[], None).unwrap();
        assert_eq!(batch.num_rows(), 2);
        let offsets = batch
            .column(1)
            .as_primitive::<arrow_array::types::Int64Type>();
        assert_eq!(offsets.values(), &[7, 8]);
        let ts = batch
            .column(2)
            .as_primitive::<arrow_array::types::TimestampMicrosecondType>();
        assert_eq!(ts.value(0), 1_700_000_000_123_000);
        assert!(batch.column(3).is_null(1));
        let headers = batch.column(5).as_list::<i32>();
        assert_eq!(headers.value(0).len(), 2);
        assert_eq!(headers.value(1).len(), 0);
        assert_eq!(hour_of(3_600_000 * 5 + 1), 5);
        assert_eq!(hour_of(-1), -1);
    }
}
