//! `value_schema` tables: each record's value, a JSON object, as typed columns.
//!
//! The columns come from the schema given in `iceberg.value.schema` (fixed: a field it
//! lacks sends the record to the dead letters), or, with none given, from the records
//! themselves: a field seen for the first time adds an optional column of the type
//! its value suggests (a whole number: `long`; any other number: `double`; a string:
//! `string`; `true`/`false`: `boolean`; an object: a `struct`; an array: a `list`),
//! through Iceberg's schema evolution, before the records that bring it are written.
//!
//! A record whose value is not a JSON object, or whose field does not fit its column
//! (a string where the column is a `long`, a number beyond an `int` column's range, a
//! required field missing) goes to the topic's dead-letter table, `<topic>~dlq`, with
//! the reason: no record is dropped. A record without a value (a tombstone) is a row
//! whose value columns are all null.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use iceberg::spec::{
    ListType, NestedField, NestedFieldRef, PrimitiveType, Schema, StructType, Type,
};
use iceberg::table::Table;
use iceberg::transaction::{AddColumn, ApplyTransactionAction, Transaction};
use iceberg_catalog_sql::SqlCatalog;
use serde_json::Value;
use shale_records::record::Record;

use crate::schema::{PARTITION_FIELD, RESERVED};

/// The types a value field may have (given or inferred).
fn supported(p: &PrimitiveType) -> bool {
    use PrimitiveType::*;
    matches!(
        p,
        Boolean | Int | Long | Float | Double | String | Date | Timestamp | Timestamptz
    )
}

/// Parses `iceberg.value.schema` (an Iceberg schema as JSON) and checks that every
/// field has a type JSON values can fill and no name is one of the record's own
/// columns.
pub fn parse_value_schema(json: &str) -> Result<Schema, String> {
    let schema: Schema =
        serde_json::from_str(json).map_err(|e| format!("not an Iceberg schema: {e}"))?;
    fn walk(fields: &[NestedFieldRef], path: &str) -> Result<(), String> {
        for f in fields {
            let name = format!("{path}{}", f.name);
            walk_type(&f.field_type, &name)?;
        }
        Ok(())
    }
    fn walk_type(t: &Type, name: &str) -> Result<(), String> {
        match t {
            Type::Primitive(p) if supported(p) => Ok(()),
            Type::Struct(s) => walk(s.fields(), &format!("{name}.")),
            Type::List(l) => walk_type(&l.element_field.field_type, name),
            other => Err(format!(
                "field {name}: type {other} cannot be filled from JSON (supported: boolean, int, \
                 long, float, double, string, date, timestamp, timestamptz, struct, list)"
            )),
        }
    }
    let fields = schema.as_struct().fields();
    let own = |n: &str| RESERVED.contains(&n) || n == PARTITION_FIELD;
    if let Some(f) = fields.iter().find(|f| own(&f.name)) {
        return Err(format!(
            "field {} is one of the record's own columns",
            f.name
        ));
    }
    walk(fields, "")?;
    Ok(schema)
}

/// A column the records bring: added to `parent` (a dotted path; `None`: the top).
#[derive(Debug, Clone, PartialEq)]
pub struct NewColumn {
    pub parent: Option<String>,
    pub name: String,
    pub field_type: Type,
}

/// The value fields of a `value_schema` table's schema (all but the record's own).
pub fn value_fields(schema: &Schema) -> StructType {
    StructType::new(
        (schema.as_struct().fields().iter())
            .filter(|f| !RESERVED.contains(&f.name.as_str()))
            .cloned()
            .collect(),
    )
}

/// The record's value as JSON, or why it is none.
pub fn parse(record: &Record) -> Result<Value, String> {
    let Some(v) = record.value.as_deref() else {
        return Ok(Value::Object(Default::default()));
    };
    match serde_json::from_slice::<Value>(v) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(format!("the value is {}, not a JSON object", kind(&other))),
        Err(e) => Err(format!("the value is not JSON: {e}")),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Whether `value` (an object) fits `fields`; with `new` given, a field they lack is
/// added there as a new column (when its value says of what type) instead of being
/// refused. `Err`: why it does not fit.
pub fn check(
    value: &Value,
    fields: &StructType,
    mut new: Option<&mut Vec<NewColumn>>,
) -> Result<(), String> {
    let Value::Object(map) = value else {
        return Err(format!("the value is {}, not a JSON object", kind(value)));
    };
    if let Some(k) = map.keys().find(|k| RESERVED.contains(&k.as_str())) {
        return Err(format!("field {k} is one of the record's own columns"));
    }
    if let Some(k) = map.keys().find(|k| *k == PARTITION_FIELD) {
        return Err(format!("field {k} is the name of the table's partitioning"));
    }
    check_struct(value, fields, "", &mut new)
}

fn check_struct(
    value: &Value,
    fields: &StructType,
    path: &str,
    new: &mut Option<&mut Vec<NewColumn>>,
) -> Result<(), String> {
    let Value::Object(map) = value else {
        return Err(format!(
            "field {path}: expected an object, got {}",
            kind(value)
        ));
    };
    let prefix = if path.is_empty() {
        String::new()
    } else {
        format!("{path}.")
    };
    for f in fields.fields() {
        if f.required && map.get(&f.name).is_none_or(Value::is_null) {
            return Err(format!("field {prefix}{} is required", f.name));
        }
    }
    for (k, v) in map {
        if let Some(f) = fields.field_by_name(k) {
            check_field(v, f, &format!("{prefix}{k}"), new)?;
            continue;
        }
        // A field the table lacks, of a value that says nothing of its type (null, an
        // empty array or object), loses nothing when left out.
        let Some(field_type) = infer(v) else {
            continue;
        };
        let Some(new) = new.as_deref_mut() else {
            return Err(format!("field {prefix}{k} is not in the table's schema"));
        };
        if let Some(why) = unfit_name(k, &field_type) {
            return Err(format!("field {prefix}{k}: {why}"));
        }
        let parent = (!path.is_empty()).then(|| path.to_string());
        // A second record bringing the same new column adds nothing now (its other
        // new sub-fields come in the next round, see `topic`).
        if !new.iter().any(|c| c.parent == parent && c.name == *k) {
            new.push(NewColumn {
                parent,
                name: k.clone(),
                field_type,
            });
        }
    }
    Ok(())
}

fn check_field(
    v: &Value,
    f: &NestedField,
    path: &str,
    new: &mut Option<&mut Vec<NewColumn>>,
) -> Result<(), String> {
    if v.is_null() {
        return match f.required {
            true => Err(format!("field {path} is required")),
            false => Ok(()),
        };
    }
    match f.field_type.as_ref() {
        Type::Struct(s) => check_struct(v, s, path, new),
        Type::List(l) => {
            let Value::Array(items) = v else {
                return Err(format!("field {path}: expected an array, got {}", kind(v)));
            };
            // New fields of a list's structs are added to the list's element.
            (items.iter()).try_for_each(|item| check_field(item, &l.element_field, path, new))
        }
        Type::Primitive(p) if fits(v, p) => Ok(()),
        other => Err(format!("field {path}: expected {other}, got {}", shown(v))),
    }
}

fn fits(v: &Value, p: &PrimitiveType) -> bool {
    use PrimitiveType::*;
    match p {
        Boolean => v.is_boolean(),
        Int => v.as_i64().is_some_and(|n| i32::try_from(n).is_ok()),
        Long => v.as_i64().is_some(),
        Float => v.as_f64().is_some_and(|n| n.abs() <= f32::MAX as f64),
        Double => v.is_number(),
        String => v.is_string(),
        // As `arrow-json` parses them (a value that passes here must decode).
        Date => (v.as_str()).is_some_and(|s| {
            <arrow_array::types::Date32Type as arrow_cast::parse::Parser>::parse(s).is_some()
        }),
        Timestamp | Timestamptz => (v.as_str())
            .is_some_and(|s| arrow_cast::parse::string_to_datetime(&chrono::Utc, s).is_ok()),
        _ => false,
    }
}

/// A value as a reason quotes it: at most about 60 characters.
fn shown(v: &Value) -> String {
    let s = v.to_string();
    match s.char_indices().nth(60) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s,
    }
}

/// Why a new field (or one of its sub-fields) cannot be a column: Iceberg resolves a
/// column by its dotted path, so no name may hold a `.`, nor be empty.
fn unfit_name(name: &str, t: &Type) -> Option<String> {
    if name.is_empty() {
        return Some("an empty name cannot be a column".into());
    }
    if name.contains('.') {
        return Some(format!("a name with '.' ({name}) cannot be a column"));
    }
    unfit_type(t)
}

fn unfit_type(t: &Type) -> Option<String> {
    match t {
        Type::Struct(s) => (s.fields().iter()).find_map(|f| unfit_name(&f.name, &f.field_type)),
        Type::List(l) => unfit_type(&l.element_field.field_type),
        _ => None,
    }
}

/// The type a new column gets from its first value; `None` when the value says
/// nothing (null, an empty array or object).
fn infer(v: &Value) -> Option<Type> {
    Some(match v {
        Value::Null => return None,
        Value::Bool(_) => Type::Primitive(PrimitiveType::Boolean),
        Value::Number(n) if n.is_i64() => Type::Primitive(PrimitiveType::Long),
        Value::Number(_) => Type::Primitive(PrimitiveType::Double),
        Value::String(_) => Type::Primitive(PrimitiveType::String),
        Value::Array(items) => {
            let element = items.iter().find_map(infer)?;
            Type::List(ListType::new(
                NestedField::list_element(0, element, false).into(),
            ))
        }
        Value::Object(map) => {
            let fields: Vec<NestedFieldRef> = (map.iter())
                .filter_map(|(k, v)| Some(NestedField::optional(0, k, infer(v)?).into()))
                .collect();
            if fields.is_empty() {
                return None;
            }
            Type::Struct(StructType::new(fields))
        }
    })
}

/// Adds `columns` to the table (Iceberg schema evolution: optional columns, fresh
/// field ids), and returns it as it is now.
pub async fn widen(
    catalog: &SqlCatalog,
    table: &Table,
    columns: &[NewColumn],
) -> iceberg::Result<Table> {
    let tx = Transaction::new(table);
    let mut update = tx.update_schema();
    for c in columns {
        let add = match &c.parent {
            None => AddColumn::optional(&c.name, c.field_type.clone()),
            Some(parent) => AddColumn::builder()
                .parent(parent.clone())
                .name(c.name.clone())
                .field_type(c.field_type.clone())
                .build(),
        };
        update = update.add_column(add);
    }
    update.apply(tx)?.commit(catalog).await
}

/// The value columns of `records` (all of which passed [`check`]), decoded by
/// `arrow-json` into the table's Arrow types.
pub(crate) fn decode(schema: &SchemaRef, records: &[&Record]) -> anyhow::Result<RecordBatch> {
    let fields: Vec<_> = (schema.fields().iter())
        .filter(|f| !RESERVED.contains(&f.name().as_str()))
        .cloned()
        .collect();
    let values = Arc::new(arrow_schema::Schema::new(fields));
    if values.fields().is_empty() {
        let rows = arrow_array::RecordBatchOptions::new().with_row_count(Some(records.len()));
        return Ok(RecordBatch::try_new_with_options(values, vec![], &rows)?);
    }
    let mut decoder = arrow_json::ReaderBuilder::new(values.clone())
        .with_batch_size(records.len().max(1))
        .build_decoder()?;
    for r in records {
        let mut buf = r.value.as_deref().unwrap_or(b"{}");
        while !buf.is_empty() {
            let n = decoder.decode(buf)?;
            anyhow::ensure!(n > 0, "the JSON decoder took no more of a value");
            buf = &buf[n..];
        }
        decoder.decode(b"\n")?;
    }
    let batch = decoder.flush()?;
    let batch = batch.unwrap_or_else(|| RecordBatch::new_empty(values));
    anyhow::ensure!(
        batch.num_rows() == records.len(),
        "{} values decoded into {} rows",
        records.len(),
        batch.num_rows()
    );
    Ok(batch)
}

/// A chunk's records, sorted: those that fit the table (and their value columns),
/// and the dead letters with their reasons.
#[derive(Default)]
pub(crate) struct Sorted {
    pub good: Vec<Record>,
    pub values: Option<RecordBatch>,
    pub bad: Vec<Record>,
    pub reasons: Vec<String>,
}

impl Sorted {
    pub(crate) fn dead(&mut self, r: Record, reason: String) {
        self.bad.push(r);
        self.reasons.push(reason);
    }

    /// Decodes the value columns of the records that fit. A record `arrow-json` cannot
    /// decode after all is a dead letter, with its reason.
    pub(crate) fn decode(&mut self, arrow: &arrow_schema::SchemaRef) -> anyhow::Result<()> {
        let all: Vec<&Record> = self.good.iter().collect();
        if let Ok(v) = decode(arrow, &all) {
            self.values = Some(v);
            return Ok(());
        }
        let good = std::mem::take(&mut self.good);
        for r in good {
            match decode(arrow, &[&r]) {
                Ok(_) => self.good.push(r),
                Err(e) => self.dead(r, format!("the value does not decode: {e:#}")),
            }
        }
        let all: Vec<&Record> = self.good.iter().collect();
        self.values = Some(decode(arrow, &all)?);
        Ok(())
    }
}

/// The columns the records of `parsed` bring that `table` lacks.
pub(crate) fn columns_to_add(
    table: &Table,
    parsed: &[Vec<Result<serde_json::Value, String>>],
) -> Vec<NewColumn> {
    let fields = value_fields(table.metadata().current_schema());
    let mut new = Vec::new();
    for v in parsed.iter().flatten().flatten() {
        // A record that does not fit brings no column: it is a dead letter.
        let mut with = new.clone();
        if check(v, &fields, Some(&mut with)).is_ok() {
            new = with;
        }
    }
    new
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(json: &str) -> StructType {
        value_fields(&parse_value_schema(json).unwrap())
    }

    #[test]
    fn values_fit_their_columns_or_say_why_not() {
        let f = fields(
            r#"{"type":"struct","schema-id":0,"fields":[
                {"id":1,"name":"n","required":true,"type":"int"},
                {"id":2,"name":"x","required":false,"type":"float"},
                {"id":3,"name":"at","required":false,"type":"timestamptz"},
                {"id":4,"name":"tags","required":false,
                 "type":{"type":"list","element-id":5,"element":"string","element-required":false}}]}"#,
        );
        assert_eq!(
            check(&json!({"n": 1, "x": 2.5, "tags": ["a"]}), &f, None),
            Ok(())
        );
        assert_eq!(
            check(&json!({"n": 1, "at": "2026-12-05T10:00:00Z"}), &f, None),
            Ok(())
        );
        let why = |v: Value| check(&v, &f, None).unwrap_err();
        assert_eq!(why(json!({"x": 1})), "field n is required");
        assert_eq!(
            why(json!({"n": 3_000_000_000i64})),
            "field n: expected int, got 3000000000"
        );
        assert_eq!(why(json!({"n": "1"})), "field n: expected int, got \"1\"");
        assert_eq!(
            why(json!({"n": 1, "tags": [1]})),
            "field tags: expected string, got 1"
        );
        assert_eq!(
            why(json!({"n": 1, "at": "yesterday"})),
            "field at: expected timestamptz, got \"yesterday\""
        );
        assert_eq!(
            why(json!({"n": 1, "y": 0})),
            "field y is not in the table's schema"
        );
        assert_eq!(
            why(json!({"n": 1, "shale_offset": 0})),
            "field shale_offset is one of the record's own columns"
        );
        assert_eq!(why(json!([1])), "the value is an array, not a JSON object");
        let mut r = Record::new(None, Some(b"{oops"), 0);
        assert!(parse(&r).unwrap_err().starts_with("the value is not JSON"));
        r.value = None;
        assert_eq!(parse(&r), Ok(json!({})));

        assert!(parse_value_schema(r#"{"type":"struct","fields":[{"id":1,"name":"b","required":false,"type":"binary"}]}"#)
            .unwrap_err().contains("cannot be filled from JSON"));
        assert!(parse_value_schema(r#"{"type":"struct","fields":[{"id":1,"name":"shale_key","required":false,"type":"long"}]}"#)
            .unwrap_err().contains("own columns"));
        assert!(parse_value_schema("{").is_err());
    }

    #[test]
    fn new_fields_become_columns_of_the_type_their_value_says() {
        let f = fields(
            r#"{"type":"struct","fields":[
            {"id":1,"name":"user","required":false,"type":{"type":"struct","fields":[
                {"id":2,"name":"id","required":false,"type":"long"}]}}]}"#,
        );
        let mut new = Vec::new();
        let v = json!({"user": {"id": 1, "name": "a"}, "ms": 2.5, "ok": true, "none": null,
                       "empty": [], "ids": [null, 3]});
        check(&v, &f, Some(&mut new)).unwrap();
        let mut added: Vec<_> = new
            .iter()
            .map(|c| {
                (
                    c.parent.as_deref(),
                    c.name.as_str(),
                    c.field_type.to_string(),
                )
            })
            .collect();
        added.sort();
        assert_eq!(
            added,
            [
                (None, "ids", "list".to_string()),
                (None, "ms", "double".to_string()),
                (None, "ok", "boolean".to_string()),
                (Some("user"), "name", "string".to_string()),
            ]
        );
        // Fields that cannot be columns make the record a dead letter; fields whose
        // value says nothing of a type are left out.
        let mut more = Vec::new();
        let bad = |v: Value, more: &mut Vec<NewColumn>| check(&v, &f, Some(more)).unwrap_err();
        assert!(bad(json!({"http.status": 200}), &mut more).contains("a name with '.'"));
        assert!(bad(json!({"x": {"a.b": 1}}), &mut more).contains("a name with '.'"));
        assert!(bad(json!({"shale_hour": 1}), &mut more).contains("partitioning"));
        check(&json!({"err": null, "tags": [], "ctx": {}}), &f, None).unwrap();
        assert!(more.is_empty());
        // Dates and timestamps as `arrow-json` reads them.
        let d = fields(
            r#"{"type":"struct","fields":[{"id":1,"name":"d","required":false,"type":"date"},
            {"id":2,"name":"t","required":false,"type":"timestamp"}]}"#,
        );
        check(
            &json!({"d": "2026-05-01", "t": "2026-05-01T10:00:00"}),
            &d,
            None,
        )
        .unwrap();
        check(&json!({"t": "2026-05-01T10:00:00Z"}), &d, None).unwrap();
        assert!(check(&json!({"d": "yesterday"}), &d, None).is_err());
        assert!(check(&json!({"t": "10 o'clock"}), &d, None).is_err());
        // Seen twice, added once; a conflicting type is caught when the record is
        // checked against the widened schema.
        check(&json!({"ms": "slow"}), &f, Some(&mut new)).unwrap();
        assert_eq!(new.len(), 4);
    }
}
