//! Conforming an incoming batch to a table's Arrow schema, exactly or not at all.
//!
//! Fields are matched by name at every depth (top-level columns and struct children
//! alike; order never matters), list elements and map keys/values by position. A value
//! is converted only when the conversion is exact: Iceberg's widenings (int → long,
//! float → double, decimal precision), any string/binary layout, dictionary and run-end
//! encodings, timestamp units (`s`/`ms` → `us` with an overflow check, `ns` → `us` only
//! when no value has a sub-microsecond part, unless the table opts in to truncation with
//! [`TRUNCATE_NANOS`]), any time zone into a `timestamptz` column (Arrow stores UTC
//! instants, so only the zone label changes). Anything else is refused naming the path.
//! A field the batch leaves out takes its `write-default` (spec, "Default values"; the
//! table's schema in [`ConformOptions::defaults`]), or null; a required one without a
//! default is refused.

use std::collections::HashSet;
use std::sync::Arc;

use arrow::buffer::NullBuffer;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date64Type, Time32MillisecondType, Time32SecondType, Time64MicrosecondType,
    Time64NanosecondType, TimestampMicrosecondType, TimestampMillisecondType,
    TimestampNanosecondType, TimestampSecondType,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, Date32Array, ListArray, MapArray, PrimitiveArray,
    RecordBatch, RecordBatchOptions, StructArray, Time64MicrosecondArray,
    TimestampMicrosecondArray, new_null_array,
};
use arrow_cast::{CastOptions, cast_with_options};
use arrow_schema::{ArrowError, DataType, Field, FieldRef, Fields, SchemaRef, TimeUnit};
use iceberg::spec::{PrimitiveType, Type};

use super::defaults::{FieldDefault, default_column};
use super::types::{ColumnError, child_path, storage_type};

/// Table property: `true` lets nanosecond timestamps and times with a sub-microsecond
/// part be truncated (rounded down) to microseconds; by default such a value is refused.
pub const TRUNCATE_NANOS: &str = "skade.ingest.truncate-nanoseconds";

const MILLIS_PER_DAY: i64 = 86_400_000;

/// How values are conformed, from the table's properties and schema.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConformOptions {
    /// Round sub-microsecond values down instead of refusing them ([`TRUNCATE_NANOS`]).
    pub truncate_nanos: bool,
    /// The table's schema, whose fields' `write-default`s fill the columns a batch leaves
    /// out (spec, "Default values": "The write default for a field must be written if a
    /// field is not supplied to a write"); `None`: no defaults, a left-out column is null.
    pub defaults: Option<iceberg::spec::SchemaRef>,
}

impl ConformOptions {
    /// The options `table`'s properties ask for, with its current schema's defaults.
    pub fn for_table(table: &iceberg::table::Table) -> Self {
        let props = table.metadata().properties();
        Self {
            truncate_nanos: props
                .get(TRUNCATE_NANOS)
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            defaults: Some(table.metadata().current_schema().clone()),
        }
    }
}

/// Rebuilds `batch` with the table's Arrow schema `target`, converting every column (at
/// every depth) exactly; see the module docs for the rules.
///
/// # Errors
/// [`ColumnError`] naming the path of the first column that does not fit: not in the
/// table, a required field missing or null, another type, or a value that would change.
pub fn conform_columns(
    batch: &RecordBatch,
    target: &SchemaRef,
    options: &ConformOptions,
) -> Result<RecordBatch, ColumnError> {
    let conform = Conform { options };
    let incoming = batch.schema();
    let columns = conform.children(
        "",
        incoming.fields(),
        batch.columns(),
        target.fields(),
        batch.num_rows(),
        None,
    )?;
    let row_count = RecordBatchOptions::new().with_row_count(Some(batch.num_rows()));
    RecordBatch::try_new_with_options(target.clone(), columns, &row_count)
        .map_err(|e| ColumnError::new("*", format!("batch does not fit the table schema: {e}")))
}

struct Conform<'a> {
    options: &'a ConformOptions,
}

/// arrow-cast options under which an overflow or a lossy value is an error, never null.
fn exact() -> CastOptions<'static> {
    CastOptions {
        safe: false,
        ..Default::default()
    }
}

impl Conform<'_> {
    /// Matches `fields`/`columns` to `target` by name; `parent_nulls` masks the rows where
    /// the enclosing struct is null (a required child may be null there).
    fn children(
        &self,
        parent: &str,
        fields: &Fields,
        columns: &[ArrayRef],
        target: &Fields,
        len: usize,
        parent_nulls: Option<&NullBuffer>,
    ) -> Result<Vec<ArrayRef>, ColumnError> {
        let mut seen = HashSet::new();
        for field in fields {
            let path = child_path(parent, field.name());
            if !seen.insert(field.name()) {
                return Err(ColumnError::new(&path, "duplicate column name"));
            }
            if target.find(field.name()).is_none() {
                let reason = if parent.is_empty() {
                    format!(
                        "column is not in the table (the table property {}=true lets a put add new nullable columns)",
                        super::EVOLVE_SCHEMA
                    )
                } else {
                    let names: Vec<&str> = target.iter().map(|f| f.name().as_str()).collect();
                    format!(
                        "field is not in the table's struct `{parent}` (its fields: {})",
                        names.join(", ")
                    )
                };
                return Err(ColumnError::new(&path, reason));
            }
        }
        let mut out = Vec::with_capacity(target.len());
        for want in target {
            let path = child_path(parent, want.name());
            let column = match fields.find(want.name()) {
                Some((i, _)) => self.array(&path, &columns[i], want.data_type())?,
                None => match self.write_default(&path, want, len)? {
                    Some(default) => default,
                    None if want.is_nullable() => new_null_array(want.data_type(), len),
                    None if parent.is_empty() => {
                        return Err(ColumnError::new(
                            &path,
                            "required column is missing (and has no write-default)",
                        ));
                    }
                    None => {
                        return Err(ColumnError::new(
                            &path,
                            "required field is missing (and has no write-default)",
                        ));
                    }
                },
            };
            check_required(&path, want, &column, parent_nulls)?;
            out.push(column);
        }
        Ok(out)
    }

    /// The `write-default` of the table's field `want` (found by its field id) for a
    /// batch that leaves it out, `len` rows; `None` without one.
    fn write_default(
        &self,
        path: &str,
        want: &Field,
        len: usize,
    ) -> Result<Option<ArrayRef>, ColumnError> {
        let Some(schema) = &self.options.defaults else {
            return Ok(None);
        };
        let field = want
            .metadata()
            .get(parquet::arrow::PARQUET_FIELD_ID_META_KEY)
            .and_then(|id| id.parse::<i32>().ok())
            .and_then(|id| schema.field_by_id(id));
        match field {
            Some(field) => default_column(path, field, FieldDefault::Write, want, len),
            None => Ok(None),
        }
    }

    /// `array` converted to `to`, the table's Arrow type for `path`.
    fn array(&self, path: &str, array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ColumnError> {
        let from = array.data_type();
        if from == to && !to.is_nested() {
            return Ok(array.clone());
        }
        if let DataType::Dictionary(_, value) = from {
            return self.array(path, &cast_to(path, array, value)?, to);
        }
        if let DataType::RunEndEncoded(_, value) = from {
            return self.array(path, &cast_to(path, array, value.data_type())?, to);
        }
        match to {
            DataType::Struct(fields) => self.structure(path, array, fields),
            DataType::List(element) => self.list(path, array, element),
            DataType::Map(entries, sorted) => self.map(path, array, entries, *sorted),
            DataType::Timestamp(TimeUnit::Microsecond, zone) => {
                self.timestamp(path, array, to, zone.is_some())
            }
            DataType::Time64(TimeUnit::Microsecond) => self.time(path, array, to),
            DataType::Date32 => date(path, array, to),
            _ => primitive(path, array, to),
        }
    }

    fn structure(
        &self,
        path: &str,
        array: &ArrayRef,
        to: &Fields,
    ) -> Result<ArrayRef, ColumnError> {
        let Some(source) = array.as_struct_opt() else {
            return Err(mismatch(
                path,
                array.data_type(),
                &DataType::Struct(to.clone()),
            ));
        };
        let columns = self.children(
            path,
            source.fields(),
            source.columns(),
            to,
            source.len(),
            source.nulls(),
        )?;
        let rebuilt = StructArray::try_new(to.clone(), columns, source.nulls().cloned())
            .map_err(|e| ColumnError::new(path, format!("does not fit the table's struct: {e}")))?;
        Ok(Arc::new(rebuilt))
    }

    fn list(
        &self,
        path: &str,
        array: &ArrayRef,
        element: &FieldRef,
    ) -> Result<ArrayRef, ColumnError> {
        let as_list = match array.data_type() {
            DataType::List(_) => array.clone(),
            DataType::LargeList(inner)
            | DataType::FixedSizeList(inner, _)
            | DataType::ListView(inner)
            | DataType::LargeListView(inner) => {
                let plain = Field::new(inner.name(), inner.data_type().clone(), true);
                cast_to(path, array, &DataType::List(Arc::new(plain)))?
            }
            other => return Err(mismatch(path, other, &DataType::List(element.clone()))),
        };
        let source = as_list.as_list::<i32>();
        let element_path = child_path(path, "element");
        let values = self.array(&element_path, source.values(), element.data_type())?;
        if !element.is_nullable() && values.null_count() > 0 {
            return Err(ColumnError::new(
                &element_path,
                "null elements in a list whose elements are required",
            ));
        }
        rebuild_list(element, source, values)
            .map_err(|e| ColumnError::new(path, format!("does not fit the table's list: {e}")))
    }

    fn map(
        &self,
        path: &str,
        array: &ArrayRef,
        entries: &FieldRef,
        sorted: bool,
    ) -> Result<ArrayRef, ColumnError> {
        let (Some(source), DataType::Struct(kv)) = (array.as_map_opt(), entries.data_type()) else {
            return Err(mismatch(
                path,
                array.data_type(),
                &DataType::Map(entries.clone(), sorted),
            ));
        };
        let (key_path, value_path) = (child_path(path, "key"), child_path(path, "value"));
        let keys = self.array(&key_path, source.keys(), kv[0].data_type())?;
        let values = self.array(&value_path, source.values(), kv[1].data_type())?;
        check_required(&value_path, &kv[1], &values, None)?;
        rebuild_map(entries, kv, source, keys, values, sorted)
            .map_err(|e| ColumnError::new(path, format!("does not fit the table's map: {e}")))
    }

    /// Any unit to microseconds, exactly; the zone only relabelled (instants are UTC).
    fn timestamp(
        &self,
        path: &str,
        array: &ArrayRef,
        to: &DataType,
        to_zoned: bool,
    ) -> Result<ArrayRef, ColumnError> {
        let DataType::Timestamp(unit, zone) = array.data_type() else {
            return Err(mismatch(path, array.data_type(), to));
        };
        if zone.is_some() != to_zoned {
            let (want, have) = if to_zoned {
                ("timestamptz (with a time zone)", "no time zone")
            } else {
                ("timestamp (without a time zone)", "a time zone")
            };
            return Err(ColumnError::new(
                path,
                format!(
                    "the table's column is {want}, the batch sends {} with {have}: send the \
                     table's kind of timestamp",
                    array.data_type()
                ),
            ));
        }
        let micros = match unit {
            TimeUnit::Second => scale_up::<TimestampSecondType>(path, array, 1_000_000)?,
            TimeUnit::Millisecond => scale_up::<TimestampMillisecondType>(path, array, 1_000)?,
            TimeUnit::Microsecond => {
                let source = array.as_primitive::<TimestampMicrosecondType>();
                PrimitiveArray::new(source.values().clone(), source.nulls().cloned())
            }
            TimeUnit::Nanosecond => self.scale_down::<TimestampNanosecondType>(path, array)?,
        };
        let micros: TimestampMicrosecondArray = micros.reinterpret_cast();
        let zone = match to {
            DataType::Timestamp(_, zone) => zone.clone(),
            _ => None,
        };
        Ok(Arc::new(micros.with_timezone_opt(zone)))
    }

    fn time(&self, path: &str, array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ColumnError> {
        let micros = match array.data_type() {
            DataType::Time32(TimeUnit::Second) => widen::<Time32SecondType>(array, 1_000_000),
            DataType::Time32(TimeUnit::Millisecond) => widen::<Time32MillisecondType>(array, 1_000),
            DataType::Time64(TimeUnit::Microsecond) => {
                let source = array.as_primitive::<Time64MicrosecondType>();
                PrimitiveArray::new(source.values().clone(), source.nulls().cloned())
            }
            DataType::Time64(TimeUnit::Nanosecond) => {
                self.scale_down::<Time64NanosecondType>(path, array)?
            }
            other => return Err(mismatch(path, other, to)),
        };
        let micros: Time64MicrosecondArray = micros.reinterpret_cast();
        Ok(Arc::new(micros))
    }

    /// Nanoseconds → microseconds: exact, or rounded down when the table allows it.
    fn scale_down<T: ArrowPrimitiveType<Native = i64>>(
        &self,
        path: &str,
        array: &ArrayRef,
    ) -> Result<PrimitiveArray<arrow_array::types::Int64Type>, ColumnError> {
        let source = array.as_primitive::<T>();
        if !self.options.truncate_nanos
            && let Some((row, value)) = first_valid(source, |v| v % 1_000 != 0)
        {
            return Err(ColumnError::new(
                path,
                format!(
                    "{} value {value} at row {row} has a sub-microsecond part, which Iceberg \
                     (microseconds) cannot hold: round it to microseconds, or set the table \
                     property {TRUNCATE_NANOS}=true",
                    array.data_type()
                ),
            ));
        }
        Ok(PrimitiveArray::new(
            source
                .values()
                .iter()
                .map(|v| v.div_euclid(1_000))
                .collect(),
            source.nulls().cloned(),
        ))
    }
}

/// Seconds/milliseconds → microseconds, refusing a value that overflows 64 bits.
fn scale_up<T: ArrowPrimitiveType<Native = i64>>(
    path: &str,
    array: &ArrayRef,
    factor: i64,
) -> Result<PrimitiveArray<arrow_array::types::Int64Type>, ColumnError> {
    let source = array.as_primitive::<T>();
    if let Some((row, value)) = first_valid(source, |v| v.checked_mul(factor).is_none()) {
        return Err(ColumnError::new(
            path,
            format!(
                "{} value {value} at row {row} overflows a microsecond timestamp: send a \
                 value within ±292,000 years of 1970",
                array.data_type()
            ),
        ));
    }
    Ok(PrimitiveArray::new(
        source
            .values()
            .iter()
            .map(|v| v.wrapping_mul(factor))
            .collect(),
        source.nulls().cloned(),
    ))
}

/// 32-bit times → 64-bit microseconds (never overflows).
fn widen<T: ArrowPrimitiveType<Native = i32>>(
    array: &ArrayRef,
    factor: i64,
) -> PrimitiveArray<arrow_array::types::Int64Type> {
    let source = array.as_primitive::<T>();
    PrimitiveArray::new(
        source
            .values()
            .iter()
            .map(|v| i64::from(*v) * factor)
            .collect(),
        source.nulls().cloned(),
    )
}

/// `date64` (milliseconds) → `date32` (days), refusing a value that is not at midnight.
fn date(path: &str, array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ColumnError> {
    match array.data_type() {
        DataType::Date32 => Ok(array.clone()),
        DataType::Date64 => {
            let source = array.as_primitive::<Date64Type>();
            let bad =
                |v: i64| v % MILLIS_PER_DAY != 0 || i32::try_from(v / MILLIS_PER_DAY).is_err();
            if let Some((row, value)) = first_valid(source, bad) {
                return Err(ColumnError::new(
                    path,
                    format!(
                        "Date64 value {value} at row {row} is not a whole day: send Date32, or \
                         a timestamp column for instants"
                    ),
                ));
            }
            let days = source
                .values()
                .iter()
                .map(|v| (v / MILLIS_PER_DAY) as i32)
                .collect();
            Ok(Arc::new(Date32Array::new(days, source.nulls().cloned())))
        }
        other => Err(mismatch(path, other, to)),
    }
}

/// Scalars: the same Iceberg type, or one of Iceberg's lossless widenings (int → long,
/// float → double, decimal(P, S) → decimal(P', S) with P ≤ P'), converted by arrow-cast
/// with overflow as an error.
fn primitive(path: &str, array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ColumnError> {
    let from = array.data_type();
    let have = storage_type(path, from)?;
    let fits = match (iceberg_type(&have), iceberg_type(to)) {
        (Some(a), Some(b)) => {
            a == b
                || matches!(
                    (&a, &b),
                    (PrimitiveType::Int, PrimitiveType::Long)
                        | (PrimitiveType::Float, PrimitiveType::Double)
                )
                || matches!(
                    (&a, &b),
                    (
                        PrimitiveType::Decimal { precision: p1, scale: s1 },
                        PrimitiveType::Decimal { precision: p2, scale: s2 },
                    ) if s1 == s2 && p1 <= p2
                )
        }
        _ => false,
    };
    if !fits {
        return Err(mismatch(path, from, to));
    }
    cast_to(path, array, to)
}

/// The Iceberg primitive type of a canonical Arrow type, if it is one.
fn iceberg_type(data_type: &DataType) -> Option<PrimitiveType> {
    match iceberg::arrow::arrow_type_to_type(data_type) {
        Ok(Type::Primitive(p)) => Some(p),
        _ => None,
    }
}

/// The list `source` (its offsets and nulls) over `values`, its elements already
/// converted to the table's `element`: how conforming and compaction's projection
/// ([`crate::maintenance`]) both rebuild a list.
///
/// # Errors
/// Arrow's error when `values` does not fit `element` or `source`'s offsets.
pub(crate) fn rebuild_list(
    element: &FieldRef,
    source: &ListArray,
    values: ArrayRef,
) -> Result<ArrayRef, ArrowError> {
    let rebuilt = ListArray::try_new(
        element.clone(),
        source.offsets().clone(),
        values,
        source.nulls().cloned(),
    )?;
    Ok(Arc::new(rebuilt))
}

/// The map `source` (its offsets and nulls) over `keys` and `values`, already converted
/// to the table's `entries` field (a struct of the two fields `kv`), with `sorted` keys:
/// how conforming and compaction's projection both rebuild a map.
///
/// # Errors
/// Arrow's error when the keys or values do not fit `kv`, or the entries `source`'s
/// offsets.
pub(crate) fn rebuild_map(
    entries: &FieldRef,
    kv: &Fields,
    source: &MapArray,
    keys: ArrayRef,
    values: ArrayRef,
    sorted: bool,
) -> Result<ArrayRef, ArrowError> {
    let entries_array = StructArray::try_new(kv.clone(), vec![keys, values], None)?;
    let rebuilt = MapArray::try_new(
        entries.clone(),
        source.offsets().clone(),
        entries_array,
        source.nulls().cloned(),
        sorted,
    )?;
    Ok(Arc::new(rebuilt))
}

fn cast_to(path: &str, array: &ArrayRef, to: &DataType) -> Result<ArrayRef, ColumnError> {
    cast_with_options(array, to, &exact()).map_err(|e| {
        ColumnError::new(
            path,
            format!(
                "cannot convert {} to the table's {to}: {e}",
                array.data_type()
            ),
        )
    })
}

fn mismatch(path: &str, have: &DataType, want: &DataType) -> ColumnError {
    let name = describe(want);
    let example = if want.is_nested() {
        String::new()
    } else {
        format!(" (e.g. Arrow {want})")
    };
    ColumnError::new(
        path,
        format!("the table's column is {name}, the batch sends Arrow {have}: send {name}{example}"),
    )
}

/// The Iceberg name of a table's Arrow type, for messages.
fn describe(data_type: &DataType) -> String {
    match data_type {
        DataType::Struct(fields) => {
            let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
            format!("struct<{}>", names.join(", "))
        }
        DataType::List(_) => "list".to_string(),
        DataType::Map(..) => "map".to_string(),
        other => match iceberg_type(other) {
            Some(p) => p.to_string(),
            None => other.to_string(),
        },
    }
}

/// Refuses nulls in a required field, except under a null parent (`parent_nulls`).
fn check_required(
    path: &str,
    field: &Field,
    column: &ArrayRef,
    parent_nulls: Option<&NullBuffer>,
) -> Result<(), ColumnError> {
    if field.is_nullable() || column.null_count() == 0 {
        return Ok(());
    }
    let masked = match (parent_nulls, column.logical_nulls()) {
        (Some(parent), Some(child)) => parent.contains(&child),
        _ => false,
    };
    if masked {
        return Ok(());
    }
    Err(ColumnError::new(
        path,
        format!("{} nulls in a required column", column.null_count()),
    ))
}

/// The first non-null `(row, value)` of `array` for which `bad` holds.
fn first_valid<T: ArrowPrimitiveType>(
    array: &PrimitiveArray<T>,
    bad: impl Fn(T::Native) -> bool,
) -> Option<(usize, T::Native)> {
    array
        .values()
        .iter()
        .enumerate()
        .find(|(row, v)| array.is_valid(*row) && bad(**v))
        .map(|(row, v)| (row, *v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray, TimestampNanosecondArray};
    use arrow_schema::Schema;

    fn batch(name: &str, array: ArrayRef) -> RecordBatch {
        let schema = Schema::new(vec![Field::new(name, array.data_type().clone(), true)]);
        RecordBatch::try_new(Arc::new(schema), vec![array]).unwrap()
    }

    /// Struct children match by name, whatever their order; a renamed child is refused.
    #[test]
    fn struct_children_match_by_name() {
        let target_fields = Fields::from(vec![
            Field::new("city", DataType::Utf8, true),
            Field::new("zip", DataType::Utf8, true),
        ]);
        let target = Arc::new(Schema::new(vec![Field::new(
            "addr",
            DataType::Struct(target_fields),
            true,
        )]));
        let reordered = StructArray::from(vec![
            (
                Arc::new(Field::new("zip", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec!["9000"])) as ArrayRef,
            ),
            (
                Arc::new(Field::new("city", DataType::Utf8, true)),
                Arc::new(StringArray::from(vec!["Tromso"])) as ArrayRef,
            ),
        ]);
        let got = conform_columns(
            &batch("addr", Arc::new(reordered)),
            &target,
            &Default::default(),
        )
        .unwrap();
        let addr = got.column(0).as_struct();
        assert_eq!(addr.column(0).as_string::<i32>().value(0), "Tromso");
        let renamed = StructArray::from(vec![(
            Arc::new(Field::new("town", DataType::Utf8, true)),
            Arc::new(StringArray::from(vec!["Tromso"])) as ArrayRef,
        )]);
        let err = conform_columns(
            &batch("addr", Arc::new(renamed)),
            &target,
            &Default::default(),
        )
        .unwrap_err();
        assert_eq!(err.path, "addr.town");
    }

    /// Nanoseconds land only when exact; the first lossy row is named.
    #[test]
    fn lossy_nanoseconds_are_refused_naming_the_row() {
        let target = Arc::new(Schema::new(vec![Field::new(
            "ts",
            DataType::Timestamp(TimeUnit::Microsecond, None),
            true,
        )]));
        let exact = TimestampNanosecondArray::from(vec![Some(1_000), None, Some(-2_000)]);
        let got =
            conform_columns(&batch("ts", Arc::new(exact)), &target, &Default::default()).unwrap();
        let micros = got.column(0).as_primitive::<TimestampMicrosecondType>();
        assert_eq!(micros.value(0), 1);
        assert!(micros.is_null(1));
        assert_eq!(micros.value(2), -2);
        let lossy = TimestampNanosecondArray::from(vec![1_000, 1_500]);
        let err = conform_columns(
            &batch("ts", Arc::new(lossy.clone())),
            &target,
            &Default::default(),
        )
        .unwrap_err();
        assert!(err.reason.contains("at row 1"), "{}", err.reason);
        let truncate = ConformOptions {
            truncate_nanos: true,
            defaults: None,
        };
        let got = conform_columns(&batch("ts", Arc::new(lossy)), &target, &truncate).unwrap();
        assert_eq!(
            got.column(0)
                .as_primitive::<TimestampMicrosecondType>()
                .value(1),
            1
        );
        let _ = Int64Array::from(vec![0]);
    }
}
