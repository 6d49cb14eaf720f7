//! Evaluating a [`Predicate`] on an Arrow batch with Arrow's kernels (`arrow-ord`
//! comparisons, `arrow-string` `LIKE`, Kleene `AND`/`OR`/`NOT`), and projecting a batch
//! to a statement's output columns.
//!
//! Columns are found by Iceberg field id (the `PARQUET:field_id` metadata the reads'
//! Arrow schemas carry), descending into structs for nested fields; a nested field of a
//! null struct is null.

use std::sync::Arc;

use arrow::buffer::NullBuffer;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, Scalar, StructArray, make_array};
use arrow_schema::{DataType, Field as ArrowField, Fields, Schema, SchemaRef};

use super::SqlError;
use super::predicate::{CmpOp, Field, Predicate};
use super::value::datum_array;

/// The Arrow field metadata key holding an Iceberg field id.
const FIELD_ID_KEY: &str = "PARQUET:field_id";

fn eval_error(e: impl std::fmt::Display) -> SqlError {
    SqlError::Eval {
        reason: e.to_string(),
    }
}

fn field_id(field: &ArrowField) -> Option<i32> {
    field.metadata().get(FIELD_ID_KEY)?.parse().ok()
}

/// The column of `batch` holding the field whose ids from the top are `path`, with
/// the nulls of the structs above it; `None` when the batch lacks it.
pub(crate) fn column(batch: &RecordBatch, path: &[i32]) -> Option<(ArrowField, ArrayRef)> {
    let (&top, rest) = path.split_first()?;
    let index = batch
        .schema()
        .fields()
        .iter()
        .position(|f| field_id(f) == Some(top))?;
    let mut field = batch.schema().field(index).clone();
    let mut array = batch.column(index).clone();
    for &id in rest {
        let DataType::Struct(children) = field.data_type().clone() else {
            return None;
        };
        let child = children.iter().position(|f| field_id(f) == Some(id))?;
        let parent = array.as_any().downcast_ref::<StructArray>()?;
        let values = parent.column(child).clone();
        let nulls = NullBuffer::union(parent.nulls(), values.nulls());
        let data = values.to_data().into_builder().nulls(nulls).build().ok()?;
        array = make_array(data);
        field = children[child].as_ref().clone();
    }
    Some((field, array))
}

fn field_column(batch: &RecordBatch, field: &Field) -> Result<ArrayRef, SqlError> {
    column(batch, &field.path)
        .map(|(_, array)| array)
        .ok_or_else(|| SqlError::Eval {
            reason: format!(
                "the batch read has no column {} (field id {})",
                field.name, field.id
            ),
        })
}

/// Where `predicate` is true, false or unknown (null) for each row of `batch`.
///
/// # Errors
/// [`SqlError::Eval`] when the batch lacks a field the predicate reads, or a kernel
/// fails.
pub fn evaluate(predicate: &Predicate, batch: &RecordBatch) -> Result<BooleanArray, SqlError> {
    use arrow::compute::{and_kleene, not, or_kleene};
    Ok(match predicate {
        Predicate::True => BooleanArray::from(vec![true; batch.num_rows()]),
        Predicate::And(a, b) => {
            and_kleene(&evaluate(a, batch)?, &evaluate(b, batch)?).map_err(eval_error)?
        }
        Predicate::Or(a, b) => {
            or_kleene(&evaluate(a, batch)?, &evaluate(b, batch)?).map_err(eval_error)?
        }
        Predicate::Not(p) => not(&evaluate(p, batch)?).map_err(eval_error)?,
        Predicate::Compare { field, op, value } => {
            let column = field_column(batch, field)?;
            let scalar = Scalar::new(datum_array(value, column.data_type())?);
            compare(&column, *op, &scalar)?
        }
        Predicate::In { field, values } => {
            let column = field_column(batch, field)?;
            let mut any: Option<BooleanArray> = None;
            for value in values {
                let scalar = Scalar::new(datum_array(value, column.data_type())?);
                let eq = compare(&column, CmpOp::Eq, &scalar)?;
                any = Some(match any {
                    Some(acc) => or_kleene(&acc, &eq).map_err(eval_error)?,
                    None => eq,
                });
            }
            any.unwrap_or_else(|| BooleanArray::from(vec![false; batch.num_rows()]))
        }
        Predicate::IsNull { field } => {
            arrow::compute::is_null(&field_column(batch, field)?).map_err(eval_error)?
        }
        Predicate::Like { field, pattern } => {
            let column = field_column(batch, field)?;
            let text = arrow_cast::cast(&column, &DataType::Utf8).map_err(eval_error)?;
            let pattern = Scalar::new(arrow_array::StringArray::from(vec![pattern.as_str()]));
            arrow_string::like::like(&text, &pattern).map_err(eval_error)?
        }
    })
}

fn compare(
    column: &ArrayRef,
    op: CmpOp,
    value: &Scalar<ArrayRef>,
) -> Result<BooleanArray, SqlError> {
    use arrow_ord::cmp;
    let result = match op {
        CmpOp::Eq => cmp::eq(column, value),
        CmpOp::NotEq => cmp::neq(column, value),
        CmpOp::Lt => cmp::lt(column, value),
        CmpOp::LtEq => cmp::lt_eq(column, value),
        CmpOp::Gt => cmp::gt(column, value),
        CmpOp::GtEq => cmp::gt_eq(column, value),
    };
    result.map_err(eval_error)
}

/// The rows of `batch` where `predicate` is true (false and unknown rows dropped).
///
/// # Errors
/// As [`evaluate`].
pub fn filter(predicate: &Predicate, batch: &RecordBatch) -> Result<RecordBatch, SqlError> {
    if *predicate == Predicate::True {
        return Ok(batch.clone());
    }
    let mask = evaluate(predicate, batch)?;
    arrow_select::filter::filter_record_batch(batch, &mask).map_err(eval_error)
}

/// One output column of a statement: the field at `path` (field ids from the top),
/// named `name`.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    /// The column's name in the result.
    pub name: String,
    /// Field ids from the top-level column down to the field.
    pub path: Vec<i32>,
}

/// The schema of `outputs` read from batches of `schema`.
///
/// # Errors
/// [`SqlError::Eval`] when `schema` lacks an output's field.
pub fn output_schema(schema: &Schema, outputs: &[Output]) -> Result<SchemaRef, SqlError> {
    let probe = RecordBatch::new_empty(Arc::new(schema.clone()));
    let fields: Vec<ArrowField> = outputs
        .iter()
        .map(|o| {
            column(&probe, &o.path)
                .map(|(field, _)| field.with_name(&o.name))
                .ok_or_else(|| SqlError::Eval {
                    reason: format!("the table schema has no column {}", o.name),
                })
        })
        .collect::<Result<_, _>>()?;
    Ok(Arc::new(Schema::new(Fields::from(fields))))
}

/// `batch` projected to `outputs`, as `schema` (from [`output_schema`]).
///
/// # Errors
/// [`SqlError::Eval`] when the batch lacks an output's field.
pub fn project(
    batch: &RecordBatch,
    outputs: &[Output],
    schema: &SchemaRef,
) -> Result<RecordBatch, SqlError> {
    let columns: Vec<ArrayRef> = outputs
        .iter()
        .map(|o| {
            column(batch, &o.path)
                .map(|(_, a)| a)
                .ok_or_else(|| SqlError::Eval {
                    reason: format!("the batch read has no column {}", o.name),
                })
        })
        .collect::<Result<_, _>>()?;
    RecordBatch::try_new_with_options(
        schema.clone(),
        columns,
        &arrow_array::RecordBatchOptions::new().with_row_count(Some(batch.num_rows())),
    )
    .map_err(eval_error)
}
