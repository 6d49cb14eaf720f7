//! Splitting a batch by its table's partition spec (Iceberg spec, "Partitioning" and
//! "Partition Transforms").
//!
//! Each partition field's transform (`identity`, `year`, `month`, `day`, `hour`,
//! `bucket[N]`, `truncate[W]`, `void`) is applied to its source column (found by field id,
//! nested in structs too, with iceberg's `RecordBatchProjector`), a null source value
//! giving a null partition value; the transforms are the spec's
//! ([`super::transform`]: skade's own where iceberg 0.10.1 departs from the spec). A
//! value a transform refuses (e.g. `truncate` below a type's minimum) fails the batch
//! naming the source column. Rows are grouped by their
//! partition tuple through Arrow's row format (one hash per row, no per-row `Literal`),
//! then gathered with one `take` and cut into one zero-copy slice per partition; only one
//! row per partition becomes an Iceberg [`Struct`] (iceberg's `arrow_struct_to_literal`),
//! the tuple its data file carries. A batch whose rows all share one partition (the usual
//! case for time-ordered data) is passed on as it is.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::StructArray;
use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_schema::DataType;
use arrow_select::take::take_record_batch;
use iceberg::arrow::record_batch_projector::RecordBatchProjector;
use iceberg::arrow::{arrow_struct_to_literal, type_to_arrow_type};
use iceberg::spec::{Literal, PartitionSpec, PartitionSpecRef, Schema, Struct, StructType, Type};
use iceberg::table::Table;
use iceberg::transform::BoxedTransformFunction;

use super::WriteError;
use super::transform::transform_function;

/// The partition a data file's rows belong to: the spec they were split by and their
/// partition tuple (`Struct::empty()` for an unpartitioned spec).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PartitionTuple {
    /// The partition spec id (`partition-spec-id` of the data file's manifest).
    pub spec_id: i32,
    /// One value per partition field, in spec order; null for a null source value.
    pub values: Struct,
}

/// Splits batches of one table by its default partition spec.
#[derive(Debug)]
pub struct Partitioner {
    table: String,
    spec_id: i32,
    partition_type: StructType,
    /// `None` when every field is `void`: every row then has the all-null tuple.
    calculator: Option<Calculator>,
    /// Encodes the partition columns as comparable rows (grouping key).
    converter: Option<RowConverter>,
}

impl Partitioner {
    /// The partitioner for `table`'s default spec over its current schema, or `None` for
    /// an unpartitioned table (a spec without fields).
    ///
    /// # Errors
    /// [`WriteError::Encode`] when the spec does not fit the schema (e.g. a transform
    /// iceberg cannot apply to its source type).
    pub fn for_table(table: &Table) -> Result<Option<Self>, WriteError> {
        let metadata = table.metadata();
        Self::new(
            &table.identifier().to_string(),
            metadata.default_partition_spec(),
            metadata.current_schema(),
        )
    }

    /// The partitioner for `spec` over `schema` (see [`Self::for_table`]).
    ///
    /// # Errors
    /// As [`Self::for_table`].
    pub fn new(
        table: &str,
        spec: &PartitionSpecRef,
        schema: &iceberg::spec::Schema,
    ) -> Result<Option<Self>, WriteError> {
        if spec.fields().is_empty() {
            return Ok(None);
        }
        let bad = |source: iceberg::Error| WriteError::Encode {
            table: table.to_string(),
            source: Box::new(source),
        };
        // Each field checked against its source first, so an error names the field.
        for field in spec.fields() {
            check_field(field, schema).map_err(bad)?;
        }
        let partition_type = spec.partition_type(schema).map_err(bad)?;
        let (calculator, converter) = if spec.is_unpartitioned() {
            (None, None)
        } else {
            let calculator = Calculator::try_new(spec, schema).map_err(bad)?;
            let sort_fields = calculator
                .fields
                .iter()
                .map(|f| SortField::new(f.data_type().clone()))
                .collect();
            let converter = RowConverter::new(sort_fields).map_err(|e| {
                bad(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    format!("partition values cannot be grouped: {e}"),
                ))
            })?;
            (Some(calculator), Some(converter))
        };
        Ok(Some(Self {
            table: table.to_string(),
            spec_id: spec.spec_id(),
            partition_type,
            calculator,
            converter,
        }))
    }

    /// The spec id the batches are split by.
    pub fn spec_id(&self) -> i32 {
        self.spec_id
    }

    /// Splits `batch` (conformed to the table's schema) into one batch per partition, in
    /// the order each partition first appears; rows keep their order within a partition.
    ///
    /// # Errors
    /// [`WriteError::Encode`] when a transform fails on the batch.
    pub fn split(
        &self,
        batch: &RecordBatch,
    ) -> Result<Vec<(PartitionTuple, RecordBatch)>, WriteError> {
        let (Some(calculator), Some(converter)) = (&self.calculator, &self.converter) else {
            let nulls = Struct::from_iter(self.partition_type.fields().iter().map(|_| None));
            return Ok(vec![(self.tuple(nulls), batch.clone())]);
        };
        let values = calculator.calculate(&self.table, batch)?;
        let columns = values.as_struct().columns().to_vec();
        let rows = converter
            .convert_columns(&columns)
            .map_err(|e| self.unexpected(format!("partition values cannot be grouped: {e}")))?;
        // Group id of every row, and each group's first row.
        let mut ids: HashMap<&[u8], u32> = HashMap::new();
        let mut first_rows: Vec<usize> = Vec::new();
        let mut group_of: Vec<u32> = Vec::with_capacity(batch.num_rows());
        for (i, row) in rows.iter().enumerate() {
            let next = first_rows.len() as u32;
            let id = *ids.entry(row.data()).or_insert_with(|| {
                first_rows.push(i);
                next
            });
            group_of.push(id);
        }
        let tuples = first_rows
            .iter()
            .map(|&row| self.tuple_at(&values, row))
            .collect::<Result<Vec<_>, _>>()?;
        if tuples.len() == 1 {
            return Ok(tuples.into_iter().map(|t| (t, batch.clone())).collect());
        }
        // Counting sort of the row indices by group, then one gather and a slice each.
        let mut offsets = vec![0usize; tuples.len() + 1];
        for &id in &group_of {
            offsets[id as usize + 1] += 1;
        }
        for i in 1..offsets.len() {
            offsets[i] += offsets[i - 1];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; group_of.len()];
        for (row, &id) in group_of.iter().enumerate() {
            order[next[id as usize]] = row as u32;
            next[id as usize] += 1;
        }
        let gathered = take_record_batch(batch, &UInt32Array::from(order))
            .map_err(|e| self.unexpected(format!("splitting a batch by partition failed: {e}")))?;
        Ok(tuples
            .into_iter()
            .enumerate()
            .map(|(id, tuple)| {
                let (start, end) = (offsets[id], offsets[id + 1]);
                (tuple, gathered.slice(start, end - start))
            })
            .collect())
    }

    /// The partition tuple of row `row` of the calculated partition values.
    fn tuple_at(&self, values: &ArrayRef, row: usize) -> Result<PartitionTuple, WriteError> {
        let one = values.slice(row, 1);
        match arrow_struct_to_literal(&one, &self.partition_type)
            .map_err(|e| self.bad(e))?
            .pop()
        {
            Some(Some(Literal::Struct(values))) => Ok(self.tuple(values)),
            _ => Err(self.unexpected("a partition value is not a struct".to_string())),
        }
    }

    fn tuple(&self, values: Struct) -> PartitionTuple {
        PartitionTuple {
            spec_id: self.spec_id,
            values,
        }
    }

    fn bad(&self, source: iceberg::Error) -> WriteError {
        WriteError::Encode {
            table: self.table.clone(),
            source: Box::new(source),
        }
    }

    fn unexpected(&self, what: String) -> WriteError {
        self.bad(iceberg::Error::new(iceberg::ErrorKind::Unexpected, what))
    }
}

/// Checks that partition field `field` has its source column in `schema` and that its
/// transform applies to the column's type (spec, "Partition Transforms": source types).
///
/// # Errors
/// `DataInvalid` naming the partition field, its transform and the source column.
pub(crate) fn check_field(
    field: &iceberg::spec::PartitionField,
    schema: &Schema,
) -> iceberg::Result<()> {
    let Some(source) = schema.field_by_id(field.source_id) else {
        return Err(iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!(
                "partition field {:?}: its source column (field id {}) is not in the schema",
                field.name, field.source_id
            ),
        ));
    };
    let column = schema
        .name_by_field_id(field.source_id)
        .unwrap_or(&source.name);
    let refuse = |why: String| {
        iceberg::Error::new(
            iceberg::ErrorKind::DataInvalid,
            format!(
                "partition field {:?}: {} cannot be applied to column {column:?} ({}): {why}",
                field.name, field.transform, source.field_type
            ),
        )
    };
    field
        .transform
        .result_type(&source.field_type)
        .map_err(|e| refuse(e.message().to_string()))?;
    let transform = transform_function(&field.transform)?;
    // Applied once to no rows of the source's type: a transform that cannot take this
    // type fails here, when the spec is made, not on every put.
    let empty = arrow_array::new_empty_array(&type_to_arrow_type(&source.field_type)?);
    transform
        .transform(empty)
        .map_err(|e| refuse(e.message().to_string()))?;
    Ok(())
}

/// A spec's partition values for a batch: each field's source column (by field id) through
/// its transform ([`transform_function`]), as one struct column.
#[derive(Debug)]
struct Calculator {
    projector: RecordBatchProjector,
    /// Each field's source column path (for errors) and transform.
    transforms: Vec<(String, BoxedTransformFunction)>,
    fields: arrow_schema::Fields,
}

impl Calculator {
    fn try_new(spec: &PartitionSpec, schema: &Schema) -> iceberg::Result<Self> {
        let mut transforms = Vec::with_capacity(spec.fields().len());
        for field in spec.fields() {
            let source = schema
                .name_by_field_id(field.source_id)
                .unwrap_or(field.name.as_str())
                .to_string();
            let transform = transform_function(&field.transform)?;
            transforms.push((source, transform));
        }
        let ids: Vec<i32> = spec.fields().iter().map(|f| f.source_id).collect();
        let projector = RecordBatchProjector::from_iceberg_schema(Arc::new(schema.clone()), &ids)?;
        let partition_type = spec.partition_type(schema)?;
        let DataType::Struct(fields) = type_to_arrow_type(&Type::Struct(partition_type))? else {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                "the partition type is not a struct",
            ));
        };
        Ok(Self {
            projector,
            transforms,
            fields,
        })
    }

    /// The partition values of every row of `batch` of `table`, one struct column.
    ///
    /// # Errors
    /// [`WriteError::Schema`] naming the source column when its transform refuses a
    /// value; [`WriteError::Encode`] when a source column cannot be found.
    fn calculate(&self, table: &str, batch: &RecordBatch) -> Result<ArrayRef, WriteError> {
        let encode = |source: iceberg::Error| WriteError::Encode {
            table: table.to_string(),
            source: Box::new(source),
        };
        let sources = self
            .projector
            .project_column(batch.columns())
            .map_err(encode)?;
        let mut values = Vec::with_capacity(sources.len());
        for (source, (column, transform)) in sources.into_iter().zip(&self.transforms) {
            let value = transform
                .transform(source)
                .map_err(|e| WriteError::Schema {
                    table: table.to_string(),
                    column: column.clone(),
                    reason: format!("partition transform: {}", e.message()),
                })?;
            values.push(value);
        }
        let built = StructArray::try_new(self.fields.clone(), values, None).map_err(|e| {
            encode(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!("partition values: {e}"),
            ))
        })?;
        Ok(Arc::new(built))
    }
}

/// The partition tuple of an unpartitioned spec `spec_id`.
pub fn unpartitioned(spec_id: i32) -> PartitionTuple {
    PartitionTuple {
        spec_id,
        values: Struct::empty(),
    }
}
