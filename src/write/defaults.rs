//! Column defaults as Arrow columns (Iceberg spec, "Default values").
//!
//! A field's `initial-default` is the value of every row written before the field was
//! added (a reader fills it in for files that lack the field: "Column Projection"); its
//! `write-default` is the value a writer stores when a write leaves the field out. A
//! primitive default repeats its literal; a struct's default is `null` or an empty
//! struct `{}`, whose fields then take their own defaults ("The effective default value
//! is produced by setting each fields' default in a new struct").

use std::sync::Arc;

use arrow_array::{
    ArrayRef, BooleanArray, Decimal128Array, FixedSizeBinaryArray, Float32Array, Float64Array,
    Int32Array, Int64Array, LargeBinaryArray, StringArray, StructArray, new_null_array,
};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{DataType, Field};
use iceberg::spec::{Literal, NestedField, PrimitiveLiteral, Type};

use super::types::{ColumnError, child_path};

/// Which of a field's two defaults a column is filled with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldDefault {
    /// `initial-default`: rows of files written before the field existed.
    Initial,
    /// `write-default`: rows a write leaves the field out of.
    Write,
}

impl FieldDefault {
    fn of(self, field: &NestedField) -> Option<&Literal> {
        match self {
            FieldDefault::Initial => field.initial_default.as_ref(),
            FieldDefault::Write => field.write_default.as_ref(),
        }
    }
}

/// A column of `len` rows holding `field`'s `which` default, typed as the table's Arrow
/// field `to`; `None` when the field has no such default (its value is then null).
///
/// # Errors
/// [`ColumnError`] naming `path` when the default does not fit the column's Arrow type
/// (a default iceberg parsed for another type, a nested default other than `{}`).
pub fn default_column(
    path: &str,
    field: &NestedField,
    which: FieldDefault,
    to: &Field,
    len: usize,
) -> Result<Option<ArrayRef>, ColumnError> {
    let Some(literal) = which.of(field) else {
        return Ok(None);
    };
    match (literal, field.field_type.as_ref(), to.data_type()) {
        (Literal::Primitive(value), Type::Primitive(_), data_type) => {
            repeated(path, value, data_type, len).map(Some)
        }
        // `{}`: each child takes its own default, or null.
        (Literal::Struct(_), Type::Struct(children), DataType::Struct(fields)) => {
            let mut columns = Vec::with_capacity(fields.len());
            for (child, arrow) in children.fields().iter().zip(fields.iter()) {
                let child_path = child_path(path, &child.name);
                let column = default_column(&child_path, child, which, arrow, len)?
                    .unwrap_or_else(|| new_null_array(arrow.data_type(), len));
                columns.push(column);
            }
            let built = StructArray::try_new(fields.clone(), columns, None).map_err(|e| {
                ColumnError::new(path, format!("the struct default does not fit: {e}"))
            })?;
            Ok(Some(Arc::new(built)))
        }
        (literal, _, data_type) => Err(ColumnError::new(
            path,
            format!("the default {literal:?} does not fit the column's type {data_type}"),
        )),
    }
}

/// `value` repeated `len` times as an array of `to`.
fn repeated(
    path: &str,
    value: &PrimitiveLiteral,
    to: &DataType,
    len: usize,
) -> Result<ArrayRef, ColumnError> {
    use PrimitiveLiteral as P;
    let natural: ArrayRef = match (value, to) {
        (P::Int128(v), DataType::Decimal128(precision, scale)) => Arc::new(
            Decimal128Array::from(vec![*v; len])
                .with_precision_and_scale(*precision, *scale)
                .map_err(|e| ColumnError::new(path, format!("decimal default: {e}")))?,
        ),
        (P::UInt128(v), DataType::FixedSizeBinary(16)) => Arc::new(
            FixedSizeBinaryArray::try_from_sparse_iter_with_size(
                std::iter::repeat_n(Some(v.to_be_bytes()), len),
                16,
            )
            .map_err(|e| ColumnError::new(path, format!("uuid default: {e}")))?,
        ),
        (P::UInt128(_), _) => Arc::new(new_null_array(to, 0)),
        (P::Boolean(v), _) => Arc::new(BooleanArray::from(vec![*v; len])),
        (P::Int(v), _) => Arc::new(Int32Array::from(vec![*v; len])),
        (P::Long(v), _) => Arc::new(Int64Array::from(vec![*v; len])),
        (P::Float(v), _) => Arc::new(Float32Array::from(vec![v.0; len])),
        (P::Double(v), _) => Arc::new(Float64Array::from(vec![v.0; len])),
        (P::String(v), _) => Arc::new(StringArray::from(vec![v.as_str(); len])),
        (P::Binary(v), _) => Arc::new(LargeBinaryArray::from(vec![v.as_slice(); len])),
        (P::Int128(_), _) | (P::AboveMax, _) | (P::BelowMin, _) => Arc::new(new_null_array(to, 0)),
    };
    if natural.data_type() == to {
        return Ok(natural);
    }
    if natural.len() != len {
        return Err(ColumnError::new(
            path,
            format!("the default {value:?} does not fit the column's type {to}"),
        ));
    }
    let exact = CastOptions {
        safe: false,
        ..Default::default()
    };
    cast_with_options(&natural, to, &exact).map_err(|e| {
        ColumnError::new(
            path,
            format!("the default {value:?} does not fit the column's type {to}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Array;
    use arrow_array::cast::AsArray;
    use arrow_array::types::{Date32Type, TimestampMicrosecondType};
    use arrow_schema::TimeUnit;
    use iceberg::spec::PrimitiveType;

    /// Dates and timestamps land in their Arrow types; a struct `{}` takes its
    /// children's defaults; no default is `None`. Catches a default stored as its
    /// physical integer type or a struct default dropped.
    #[test]
    fn defaults_take_the_columns_arrow_type() {
        let day = NestedField::optional(1, "d", Type::Primitive(PrimitiveType::Date))
            .with_initial_default(Literal::date(-3));
        let col = default_column(
            "d",
            &day,
            FieldDefault::Initial,
            &Field::new("d", DataType::Date32, true),
            2,
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            col.as_primitive::<Date32Type>().values().to_vec(),
            vec![-3, -3]
        );
        assert!(
            default_column(
                "d",
                &day,
                FieldDefault::Write,
                &Field::new("d", DataType::Date32, true),
                2
            )
            .unwrap()
            .is_none()
        );
        let ts = NestedField::optional(2, "t", Type::Primitive(PrimitiveType::Timestamptz))
            .with_write_default(Literal::timestamptz(-1));
        let zoned = DataType::Timestamp(TimeUnit::Microsecond, Some("+00:00".into()));
        let col = default_column(
            "t",
            &ts,
            FieldDefault::Write,
            &Field::new("t", zoned.clone(), true),
            1,
        )
        .unwrap()
        .unwrap();
        assert_eq!(col.data_type(), &zoned);
        assert_eq!(col.as_primitive::<TimestampMicrosecondType>().value(0), -1);
        let x = NestedField::optional(4, "x", Type::Primitive(PrimitiveType::Long))
            .with_initial_default(Literal::long(7));
        let y = NestedField::optional(5, "y", Type::Primitive(PrimitiveType::Long));
        let point = NestedField::optional(
            3,
            "p",
            Type::Struct(iceberg::spec::StructType::new(vec![x.into(), y.into()])),
        )
        .with_initial_default(Literal::Struct(iceberg::spec::Struct::empty()));
        let fields = vec![
            Field::new("x", DataType::Int64, true),
            Field::new("y", DataType::Int64, true),
        ];
        let to = Field::new("p", DataType::Struct(fields.into()), true);
        let col = default_column("p", &point, FieldDefault::Initial, &to, 1)
            .unwrap()
            .unwrap();
        let col = col.as_struct();
        assert!(col.is_valid(0));
        assert_eq!(
            col.column(0)
                .as_primitive::<arrow_array::types::Int64Type>()
                .value(0),
            7
        );
        assert!(col.column(1).is_null(0));
    }
}
