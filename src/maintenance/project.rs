//! A data file's rows in the table's current schema, resolved by field id as an Iceberg
//! reader resolves them (spec, "Column Projection").
//!
//! Every column of the current schema, at every depth, is looked up in the file by its
//! field id (the Parquet field ids skade writes); names are never compared, so a renamed
//! field keeps its values and a field added under a dropped field's name (a new id)
//! does not pick up the dropped field's values. A field the file lacks reads its
//! `initial-default` ("Default values"), or null; a field of the file the schema no
//! longer has is not read. A field whose type was promoted since the file was written
//! (`int → long`, `float → double`, `decimal(P, S) → decimal(P', S)`; spec "Schema
//! Evolution") is widened exactly; list elements and map keys and values keep their
//! ids, so they resolve by position.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::{Array, ArrayRef, RecordBatch, RecordBatchOptions, StructArray, new_null_array};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field, FieldRef, Fields, SchemaRef};
use iceberg::spec::Schema;
use parquet::arrow::PARQUET_FIELD_ID_META_KEY;

use crate::write::conform::{rebuild_list, rebuild_map};
use crate::write::defaults::{FieldDefault, default_column};
use crate::write::types::{ColumnError, child_path};

/// `batch` (rows of one data file, its Arrow fields carrying the file's Parquet field
/// ids) in the table's current `schema`, whose Arrow form is `target` (from
/// [`crate::write::table_arrow_schema`], field ids in its metadata).
///
/// # Errors
/// [`ColumnError`] naming the column path: a field of `target` without a field id, a
/// required field the file lacks that has no `initial-default`, a column whose type is
/// neither the schema's nor one it was promoted from.
pub(crate) fn project(
    batch: &RecordBatch,
    schema: &Schema,
    target: &SchemaRef,
) -> Result<RecordBatch, ColumnError> {
    let source = batch.schema();
    let project = Projection { schema };
    let columns = project.children(
        "",
        source.fields(),
        batch.columns(),
        target.fields(),
        batch.num_rows(),
    )?;
    let rows = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(target.clone(), columns, &rows)
        .map_err(|e| ColumnError::new("*", format!("the file's rows do not fit the schema: {e}")))
}

/// The field id in `field`'s metadata.
fn field_id(field: &Field) -> Option<i32> {
    field
        .metadata()
        .get(PARQUET_FIELD_ID_META_KEY)
        .and_then(|id| id.parse().ok())
}

struct Projection<'a> {
    schema: &'a Schema,
}

impl Projection<'_> {
    /// The columns of the struct `target` (at `parent`) from the file's struct
    /// `fields`/`columns`, each matched by field id.
    fn children(
        &self,
        parent: &str,
        fields: &Fields,
        columns: &[ArrayRef],
        target: &Fields,
        len: usize,
    ) -> Result<Vec<ArrayRef>, ColumnError> {
        let mut out = Vec::with_capacity(target.len());
        for want in target {
            let path = child_path(parent, want.name());
            let id = field_id(want)
                .ok_or_else(|| ColumnError::new(&path, "the table's column has no field id"))?;
            let found = fields.iter().position(|f| field_id(f) == Some(id));
            let column = match found {
                Some(i) => self.value(&path, &columns[i], want)?,
                None => self.missing(&path, id, want, len)?,
            };
            out.push(column);
        }
        Ok(out)
    }

    /// A column the file lacks: the field's `initial-default`, or null.
    fn missing(
        &self,
        path: &str,
        id: i32,
        want: &Field,
        len: usize,
    ) -> Result<ArrayRef, ColumnError> {
        let field = self.schema.field_by_id(id).ok_or_else(|| {
            ColumnError::new(path, format!("field id {id} is not in the table's schema"))
        })?;
        if let Some(column) = default_column(path, field, FieldDefault::Initial, want, len)? {
            return Ok(column);
        }
        if !want.is_nullable() {
            return Err(ColumnError::new(
                path,
                "a required field is missing from the data file and has no initial-default",
            ));
        }
        Ok(new_null_array(want.data_type(), len))
    }

    /// The file's `array` as the table's field `want`.
    fn value(&self, path: &str, array: &ArrayRef, want: &Field) -> Result<ArrayRef, ColumnError> {
        match want.data_type() {
            DataType::Struct(fields) => {
                let source = array
                    .as_struct_opt()
                    .ok_or_else(|| mismatch(path, array, want))?;
                let columns = self.children(
                    path,
                    source.fields(),
                    source.columns(),
                    fields,
                    source.len(),
                )?;
                let rebuilt =
                    StructArray::try_new(fields.clone(), columns, source.nulls().cloned())
                        .map_err(|e| ColumnError::new(path, format!("does not fit: {e}")))?;
                Ok(Arc::new(rebuilt))
            }
            DataType::List(element) => self.list(path, array, want, element),
            DataType::Map(entries, sorted) => {
                let (Some(source), DataType::Struct(kv)) =
                    (array.as_map_opt(), entries.data_type())
                else {
                    return Err(mismatch(path, array, want));
                };
                let keys = self.value(&child_path(path, "key"), source.keys(), &kv[0])?;
                let values = self.value(&child_path(path, "value"), source.values(), &kv[1])?;
                rebuild_map(entries, kv, source, keys, values, *sorted)
                    .map_err(|e| ColumnError::new(path, format!("does not fit: {e}")))
            }
            to if array.data_type() == to => Ok(array.clone()),
            to if !array.data_type().is_nested() => {
                // A promoted type, or another Arrow layout of the same Iceberg type
                // (`binary` read back as `Binary`): exact, or refused.
                let exact = CastOptions {
                    safe: false,
                    ..Default::default()
                };
                cast_with_options(array, to, &exact).map_err(|e| {
                    ColumnError::new(
                        path,
                        format!(
                            "the file's {} cannot be read as {to}: {e}",
                            array.data_type()
                        ),
                    )
                })
            }
            _ => Err(mismatch(path, array, want)),
        }
    }

    fn list(
        &self,
        path: &str,
        array: &ArrayRef,
        want: &Field,
        element: &FieldRef,
    ) -> Result<ArrayRef, ColumnError> {
        let as_list = match array.data_type() {
            DataType::List(_) => array.clone(),
            DataType::LargeList(inner) => {
                let plain = Arc::new(inner.as_ref().clone());
                let exact = CastOptions {
                    safe: false,
                    ..Default::default()
                };
                cast_with_options(array, &DataType::List(plain), &exact)
                    .map_err(|e| ColumnError::new(path, format!("does not fit: {e}")))?
            }
            _ => return Err(mismatch(path, array, want)),
        };
        let source = as_list.as_list::<i32>();
        let values = self.value(&child_path(path, "element"), source.values(), element)?;
        rebuild_list(element, source, values)
            .map_err(|e| ColumnError::new(path, format!("does not fit: {e}")))
    }
}

fn mismatch(path: &str, array: &ArrayRef, want: &Field) -> ColumnError {
    ColumnError::new(
        path,
        format!(
            "the file holds {} where the table has {}",
            array.data_type(),
            want.data_type()
        ),
    )
}
