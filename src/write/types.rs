//! Which Iceberg type each Arrow type becomes when a stream creates a table, and why the
//! ones Iceberg cannot hold are refused (the table in `docs/arrow-types.md` is this
//! module's `storage_type` in prose).
//!
//! The walk is ours, not iceberg's converter's: every refusal names the column path
//! (`addr.town`, `items.element.code`, `tags.key`), the Arrow type, and what to send
//! instead. The result is the *canonical* Arrow type of the column — one that iceberg's
//! `arrow_schema_to_schema` maps to exactly one Iceberg type (e.g. any time zone becomes
//! `+00:00`, seconds become microseconds, `float16` becomes `float32`) — and
//! [`super::conform`] converts a batch's values to it exactly or refuses them.
//!
//! Rules (Iceberg spec, "Schemas and Data Types"; format v2 has no nanosecond, unsigned,
//! union, interval or duration type, and decimals hold at most 38 digits):
//! - integers of ≤ 32 bits and `uint8`/`uint16` → `int`; `int64`, `uint32` → `long`;
//!   `uint64` refused (send `int64` or `decimal(20, 0)`).
//! - `float16`, `float32` → `float`; `float64` → `double`.
//! - `decimal32/64/128(p, s)` → `decimal(p, s)`; `decimal256(p, s)` likewise when p ≤ 38.
//! - `date32`, `date64` → `date` (a `date64` that is not at midnight is refused per row).
//! - `time32`/`time64` of any unit → `time` (microseconds; nanoseconds only when exact).
//! - `timestamp` of any unit → `timestamp` without a zone, `timestamptz` with any zone
//!   (Arrow stores UTC instants, so only the type's zone changes).
//! - strings (`utf8`, `large_utf8`, `utf8_view`) → `string`; binaries → `binary`;
//!   `fixed_size_binary(n)` → `fixed(n)`.
//! - dictionaries and run-end encoded arrays → their value type.
//! - `list`, `large_list`, `fixed_size_list`, `list_view`, `large_list_view` → `list`;
//!   `struct` → `struct` (at least one field); `map` → `map`.
//! - extension types (e.g. `arrow.uuid`, `arrow.json`) → their storage type; the
//!   extension name is not kept.
//! - `null`, `duration`, `interval`, `union` and an empty `struct` are refused.

use std::collections::HashSet;
use std::sync::Arc;

use arrow_schema::{DataType, Field, Fields, TimeUnit};

/// The time zone iceberg's Arrow schema gives every `timestamptz` column.
pub const UTC: &str = "+00:00";

/// The largest precision of an Iceberg decimal (spec, "Primitive Types").
pub const MAX_DECIMAL_PRECISION: u8 = 38;

/// A column (at any depth) that cannot be stored: its path and the reason, which names
/// the Arrow type and what to send instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnError {
    /// Dotted path: `a`, `a.b`, `a.element`, `a.key`, `a.value`.
    pub path: String,
    /// What is wrong and what to send instead.
    pub reason: String,
}

impl ColumnError {
    pub(crate) fn new(path: &str, reason: impl Into<String>) -> Self {
        Self {
            path: path.to_string(),
            reason: reason.into(),
        }
    }
}

/// The path of `child` inside the column at `parent` (`""` for a top-level column).
pub(crate) fn child_path(parent: &str, child: &str) -> String {
    if parent.is_empty() {
        child.to_string()
    } else {
        format!("{parent}.{child}")
    }
}

/// The canonical Arrow fields for a new table's columns `fields`: names and nullability
/// kept, every type replaced by [`storage_type`], field metadata dropped.
///
/// # Errors
/// The first column that cannot be stored, by path: a duplicate name at any depth, no
/// columns at all, or a type [`storage_type`] refuses.
pub fn storage_fields(parent: &str, fields: &Fields) -> Result<Fields, ColumnError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(fields.len());
    for field in fields {
        let path = child_path(parent, field.name());
        if !seen.insert(field.name()) {
            return Err(ColumnError::new(&path, "duplicate column name"));
        }
        let data_type = storage_type(&path, field.data_type())?;
        out.push(Arc::new(Field::new(
            field.name(),
            data_type,
            field.is_nullable(),
        )));
    }
    Ok(out.into())
}

/// The canonical Arrow type a column of `data_type` at `path` is stored as (see the
/// module's rules).
///
/// # Errors
/// [`ColumnError`] naming `path` (or a nested path), the Arrow type, and what to send.
pub fn storage_type(path: &str, data_type: &DataType) -> Result<DataType, ColumnError> {
    use DataType as D;
    let refuse = |why: &str| Err(ColumnError::new(path, format!("{data_type} {why}")));
    Ok(match data_type {
        D::Boolean | D::Int8 | D::Int16 | D::Int32 | D::Int64 => data_type.clone(),
        D::UInt8 | D::UInt16 | D::UInt32 => data_type.clone(),
        D::UInt64 => {
            return refuse(
                "has no Iceberg type (Iceberg integers are signed): send Int64 when every \
                 value is ≤ 2^63-1, or Decimal128(20, 0)",
            );
        }
        D::Float16 | D::Float32 => D::Float32,
        D::Float64 => D::Float64,
        D::Decimal32(_, s) | D::Decimal64(_, s) | D::Decimal128(_, s) | D::Decimal256(_, s)
            if *s < 0 =>
        {
            return refuse(
                "has a negative scale, which Iceberg decimals cannot have: rescale to a \
                 scale ≥ 0",
            );
        }
        D::Decimal32(p, s) | D::Decimal64(p, s) | D::Decimal128(p, s) => D::Decimal128(*p, *s),
        D::Decimal256(p, s) if *p <= MAX_DECIMAL_PRECISION => D::Decimal128(*p, *s),
        D::Decimal256(..) => {
            return refuse(
                "has more digits than an Iceberg decimal holds (at most 38): send \
                 Decimal128(p ≤ 38, s), or a string",
            );
        }
        D::Date32 | D::Date64 => D::Date32,
        D::Time32(_) | D::Time64(_) => D::Time64(TimeUnit::Microsecond),
        D::Timestamp(_, None) => D::Timestamp(TimeUnit::Microsecond, None),
        D::Timestamp(_, Some(_)) => D::Timestamp(TimeUnit::Microsecond, Some(UTC.into())),
        D::Utf8 | D::LargeUtf8 | D::Utf8View => D::Utf8,
        D::Binary | D::LargeBinary | D::BinaryView => D::LargeBinary,
        D::FixedSizeBinary(width) if *width > 0 => data_type.clone(),
        D::FixedSizeBinary(_) => {
            return refuse("holds no bytes, which Iceberg's fixed type cannot: send Binary");
        }
        D::Dictionary(_, value) => storage_type(path, value)?,
        D::RunEndEncoded(_, values) => storage_type(path, values.data_type())?,
        D::List(element)
        | D::LargeList(element)
        | D::FixedSizeList(element, _)
        | D::ListView(element)
        | D::LargeListView(element) => list_storage_type(path, element)?,
        D::Struct(fields) if fields.is_empty() => {
            return refuse(
                "is a struct without fields, which Parquet cannot store: drop the column or \
                 give the struct a field",
            );
        }
        D::Struct(fields) => D::Struct(storage_fields(path, fields)?),
        D::Map(entries, sorted) => map_storage_type(path, data_type, entries, *sorted)?,
        D::Null => {
            return refuse(
                "has no values to take a type from (all nulls, no type): send the column's \
                 real type, e.g. a nullable Int64 or Utf8",
            );
        }
        D::Duration(_) => {
            return refuse("has no Iceberg type: send Int64 (e.g. microseconds)");
        }
        D::Interval(_) => {
            return refuse(
                "has no Iceberg type: send its parts as Int32/Int64 columns (months, days, \
                 nanoseconds)",
            );
        }
        D::Union(..) => {
            return refuse("has no Iceberg type: send one nullable column per variant");
        }
    })
}

/// The storage type of a list column at `path` of `element`s: Arrow `List` of the
/// element's storage type (every list layout becomes one).
///
/// # Errors
/// The element's [`ColumnError`].
fn list_storage_type(path: &str, element: &Field) -> Result<DataType, ColumnError> {
    let element_type = storage_type(&child_path(path, "element"), element.data_type())?;
    Ok(DataType::List(Arc::new(Field::new(
        element.name(),
        element_type,
        element.is_nullable(),
    ))))
}

/// The storage type of a map column at `path` (`data_type`, of `entries`): its key and
/// value in their storage types, the key required.
///
/// # Errors
/// [`ColumnError`] for entries that are not a `(key, value)` struct, or the key's or
/// value's own.
fn map_storage_type(
    path: &str,
    data_type: &DataType,
    entries: &Field,
    sorted: bool,
) -> Result<DataType, ColumnError> {
    let refuse = |why: &str| Err(ColumnError::new(path, format!("{data_type} {why}")));
    let DataType::Struct(kv) = entries.data_type() else {
        return refuse("is a map whose entries are not a struct: send a valid map");
    };
    let [key, value] = kv.iter().collect::<Vec<_>>()[..] else {
        return refuse("is a map whose entries are not (key, value): send a valid map");
    };
    let key_type = storage_type(&child_path(path, "key"), key.data_type())?;
    let value_type = storage_type(&child_path(path, "value"), value.data_type())?;
    let kv = Fields::from(vec![
        Field::new(key.name(), key_type, false),
        Field::new(value.name(), value_type, value.is_nullable()),
    ]);
    Ok(DataType::Map(
        Arc::new(Field::new(entries.name(), DataType::Struct(kv), false)),
        sorted,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(data_type: DataType) -> Result<DataType, ColumnError> {
        storage_type("c", &data_type)
    }

    /// Every refusal names the path and the Arrow type, at any depth.
    #[test]
    fn refusals_name_the_path_and_the_type() {
        let err = check(DataType::UInt64).unwrap_err();
        assert_eq!(err.path, "c");
        assert!(err.reason.starts_with("UInt64 "), "{}", err.reason);
        let nested = DataType::List(Arc::new(Field::new(
            "item",
            DataType::Struct(vec![Field::new("u", DataType::UInt64, true)].into()),
            true,
        )));
        assert_eq!(check(nested).unwrap_err().path, "c.element.u");
        let empty = DataType::Struct(Fields::empty());
        assert!(check(empty).unwrap_err().reason.contains("without fields"));
    }

    /// Zones and units collapse to the one type iceberg's converter accepts.
    #[test]
    fn timestamps_become_microseconds_in_utc() {
        for unit in [
            TimeUnit::Second,
            TimeUnit::Millisecond,
            TimeUnit::Microsecond,
            TimeUnit::Nanosecond,
        ] {
            for zone in ["Europe/Oslo", "+01:00", "Etc/UTC", "UTC"] {
                let got = check(DataType::Timestamp(unit, Some(zone.into()))).unwrap();
                assert_eq!(
                    got,
                    DataType::Timestamp(TimeUnit::Microsecond, Some(UTC.into()))
                );
            }
            let got = check(DataType::Timestamp(unit, None)).unwrap();
            assert_eq!(got, DataType::Timestamp(TimeUnit::Microsecond, None));
        }
    }
}
