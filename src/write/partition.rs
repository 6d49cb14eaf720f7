//! Splitting a batch by its table's partition spec (Iceberg spec, "Partitioning" and
//! "Partition Transforms").
//!
//! The partition values are iceberg 0.10.1's own: its `PartitionValueCalculator` applies
//! each field's transform (`identity`, `year`, `month`, `day`, `hour`, `bucket[N]`,
//! `truncate[W]`, `void`; `iceberg::transform::create_transform_function`) to the source
//! column, a null source value giving a null partition value. Rows are grouped by their
//! partition tuple through Arrow's row format (one hash per row, no per-row `Literal`),
//! then gathered with one `take` and cut into one zero-copy slice per partition; only one
//! row per partition becomes an Iceberg [`Struct`] (iceberg's `arrow_struct_to_literal`),
//! the tuple its data file carries. A batch whose rows all share one partition (the usual
//! case for time-ordered data) is passed on as it is.

use std::collections::HashMap;

use arrow_array::cast::AsArray;
use arrow_array::{ArrayRef, RecordBatch, UInt32Array};
use arrow_row::{RowConverter, SortField};
use arrow_select::take::take_record_batch;
use iceberg::arrow::{PartitionValueCalculator, arrow_struct_to_literal};
use iceberg::spec::{Literal, PartitionSpecRef, Struct, StructType};
use iceberg::table::Table;

use super::WriteError;

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
    calculator: Option<PartitionValueCalculator>,
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
        let partition_type = spec.partition_type(schema).map_err(bad)?;
        let (calculator, converter) = if spec.is_unpartitioned() {
            (None, None)
        } else {
            let calculator = PartitionValueCalculator::try_new(spec, schema).map_err(bad)?;
            let arrow_schema::DataType::Struct(fields) = calculator.partition_arrow_type() else {
                return Err(bad(iceberg::Error::new(
                    iceberg::ErrorKind::Unexpected,
                    "the partition type is not a struct",
                )));
            };
            let sort_fields = fields
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
        let values = calculator.calculate(batch).map_err(|e| self.bad(e))?;
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

/// The partition tuple of an unpartitioned spec `spec_id`.
pub fn unpartitioned(spec_id: i32) -> PartitionTuple {
    PartitionTuple {
        spec_id,
        values: Struct::empty(),
    }
}
