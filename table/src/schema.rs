//! The `key_value` table: one row per record, with the record's partition, offset,
//! timestamp, key, value and headers, partitioned by the hour of the timestamp
//! (hidden partitioning: queries filter on `timestamp`, engines prune by hour).

use std::sync::Arc;

use arrow_array::builder::{Int32Builder, Int64Builder, LargeBinaryBuilder, StringBuilder};
use arrow_array::{
    Array, ArrayRef, LargeBinaryArray, ListArray, RecordBatch, StructArray,
    TimestampMicrosecondArray,
};
use arrow_schema::{DataType, Fields, SchemaRef};
use iceberg::spec::{
    ListType, NestedField, PrimitiveType, Schema, StructType, Transform, Type, UnboundPartitionSpec,
};
use shale_records::record::Record;

/// Field ids of the `key_value` schema (stable: files written by any version agree).
const PARTITION: i32 = 1;
const OFFSET: i32 = 2;
const TIMESTAMP: i32 = 3;

pub fn key_value_schema() -> iceberg::Result<Schema> {
    let header = StructType::new(vec![
        NestedField::required(8, "key", Type::Primitive(PrimitiveType::String)).into(),
        NestedField::optional(9, "value", Type::Primitive(PrimitiveType::Binary)).into(),
    ]);
    let headers = ListType::new(NestedField::list_element(7, Type::Struct(header), true).into());
    Schema::builder()
        .with_schema_id(0)
        .with_fields(vec![
            NestedField::required(PARTITION, "partition", Type::Primitive(PrimitiveType::Int))
                .into(),
            NestedField::required(OFFSET, "offset", Type::Primitive(PrimitiveType::Long)).into(),
            NestedField::required(
                TIMESTAMP,
                "timestamp",
                Type::Primitive(PrimitiveType::Timestamptz),
            )
            .into(),
            NestedField::optional(4, "key", Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::optional(5, "value", Type::Primitive(PrimitiveType::Binary)).into(),
            NestedField::required(6, "headers", Type::List(headers)).into(),
        ])
        .build()
}

/// Partitioned by the hour of `timestamp`.
pub fn hourly_spec() -> iceberg::Result<UnboundPartitionSpec> {
    Ok(UnboundPartitionSpec::builder()
        .with_spec_id(0)
        .add_partition_field(TIMESTAMP, "timestamp_hour", Transform::Hour)?
        .build())
}

/// The hour a timestamp (ms) falls in, as Iceberg's `hour` transform gives it: hours
/// since the epoch.
pub fn hour_of(timestamp_ms: i64) -> i32 {
    i32::try_from(timestamp_ms.div_euclid(3_600_000)).unwrap_or(i32::MAX)
}

/// The rows of `records` (all of one partition), as `schema` (the table's Arrow schema,
/// with Iceberg's field ids) has them.
pub fn key_value_batch(
    schema: &SchemaRef,
    partition: i32,
    records: &[&Record],
) -> anyhow::Result<RecordBatch> {
    let n = records.len();
    let mut partitions = Int32Builder::with_capacity(n);
    let mut offsets = Int64Builder::with_capacity(n);
    let mut keys = LargeBinaryBuilder::new();
    let mut values = LargeBinaryBuilder::new();
    let mut header_keys = StringBuilder::new();
    let mut header_values = LargeBinaryBuilder::new();
    let mut list_offsets = Vec::with_capacity(n + 1);
    list_offsets.push(0i32);
    let mut timestamps = Vec::with_capacity(n);
    for r in records {
        partitions.append_value(partition);
        offsets.append_value(r.offset);
        timestamps.push(r.timestamp.saturating_mul(1000));
        keys.append_option(r.key.as_deref());
        values.append_option(r.value.as_deref());
        for (k, v) in &r.headers {
            header_keys.append_value(k);
            header_values.append_option(v.as_deref());
        }
        let last = *list_offsets.last().unwrap_or(&0);
        list_offsets.push(last + i32::try_from(r.headers.len())?);
    }
    let field_type = |i: usize| schema.field(i).data_type().clone();
    let timestamps = match field_type(2) {
        DataType::Timestamp(_, tz) => {
            TimestampMicrosecondArray::from(timestamps).with_timezone_opt(tz)
        }
        other => anyhow::bail!("timestamp column of type {other}"),
    };
    let DataType::List(element) = field_type(5) else {
        anyhow::bail!("headers column is not a list");
    };
    let DataType::Struct(header_fields) = element.data_type().clone() else {
        anyhow::bail!("header is not a struct");
    };
    let header_values: LargeBinaryArray = header_values.finish();
    let headers = StructArray::try_new(
        Fields::clone(&header_fields),
        vec![
            Arc::new(header_keys.finish()) as ArrayRef,
            Arc::new(header_values) as ArrayRef,
        ],
        None,
    )?;
    let headers = ListArray::try_new(
        element,
        arrow_buffer_offsets(list_offsets),
        Arc::new(headers),
        None,
    )?;
    let columns: Vec<ArrayRef> = vec![
        Arc::new(partitions.finish()),
        Arc::new(offsets.finish()),
        Arc::new(timestamps),
        Arc::new(keys.finish()),
        Arc::new(values.finish()),
        Arc::new(headers),
    ];
    debug_assert!(columns.iter().all(|c| c.len() == n));
    Ok(RecordBatch::try_new(schema.clone(), columns)?)
}

fn arrow_buffer_offsets(offsets: Vec<i32>) -> arrow_buffer::OffsetBuffer<i32> {
    arrow_buffer::OffsetBuffer::new(offsets.into())
}

#[cfg(test)]
mod tests {
    use super::*;
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
        let batch = key_value_batch(&arrow, 3, &[&a, &b]).unwrap();
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
