//! Values: a literal of the statement or a bound parameter, typed as the column it is
//! compared with ([`Datum`]), and back to Arrow to compare with a batch's column.
//!
//! Text becomes a value of the column's type the way Arrow's cast reads it (numbers,
//! booleans, `YYYY-MM-DD`, `HH:MM:SS[.f]`, timestamps with `T` or a space and, for
//! `timestamptz`, an offset or none for UTC), except decimals (exact: a literal with
//! more decimal places than the column's scale is refused, never rounded), UUIDs (their
//! canonical text) and binary (a hex literal `X'…'`, or the UTF-8 bytes of a string).
//! A bound parameter is cast to the column's type the same way, refusing a value that
//! does not fit (an int64 parameter above an int column's range, say).

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Float32Type, Float64Type, Int32Type, Int64Type,
    Time64MicrosecondType, TimestampMicrosecondType, TimestampNanosecondType,
};
use arrow_array::{
    Array, ArrayRef, ArrowPrimitiveType, BinaryArray, BooleanArray, Date32Array, Decimal128Array,
    FixedSizeBinaryArray, Float32Array, Float64Array, Int32Array, Int64Array, StringArray,
    Time64MicrosecondArray, TimestampMicrosecondArray, TimestampNanosecondArray,
};
use arrow_cast::CastOptions;
use arrow_schema::DataType;
use iceberg::spec::{Datum, PrimitiveLiteral, PrimitiveType, Type};

use super::SqlError;
use super::predicate::Field;

/// A literal as written in the statement, before it is typed by its column.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Literal {
    /// A number, as written (`-12`, `3.5`, `1e3`).
    Number(String),
    /// A quoted string, or the text of a typed literal (`DATE '2024-01-31'`).
    Text(String),
    /// `TRUE` / `FALSE`.
    Bool(bool),
    /// A hex string `X'0aff'`: its digits.
    Hex(String),
    /// `NULL`.
    Null,
}

impl std::fmt::Display for Literal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Literal::Number(n) => write!(f, "{n}"),
            Literal::Text(t) => write!(f, "'{}'", t.replace('\'', "''")),
            Literal::Bool(b) => write!(f, "{}", if *b { "TRUE" } else { "FALSE" }),
            Literal::Hex(h) => write!(f, "X'{h}'"),
            Literal::Null => write!(f, "NULL"),
        }
    }
}

fn bad(field: &Field, value: impl std::fmt::Display, reason: impl Into<String>) -> SqlError {
    SqlError::BadValue {
        column: field.name.clone(),
        ty: field.ty.to_string(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

/// The field's primitive type; comparisons and values take primitive fields only.
fn primitive(field: &Field) -> Result<&PrimitiveType, SqlError> {
    field.primitive().ok_or_else(|| SqlError::Unsupported {
        what: format!(
            "comparing {}, a {} column, with a value (only IS [NOT] NULL)",
            field.name, field.ty
        ),
    })
}

/// The canonical Arrow type of an Iceberg primitive type (as skade's reads produce it).
fn arrow_type(ty: &PrimitiveType) -> Result<DataType, SqlError> {
    iceberg::arrow::type_to_arrow_type(&Type::Primitive(ty.clone())).map_err(|e| SqlError::Eval {
        reason: format!("no Arrow type for {ty}: {e}"),
    })
}

/// `literal` as a value of `field`'s type.
///
/// # Errors
/// [`SqlError::BadValue`] naming the column, its type and the literal when the literal
/// is not such a value (or is `NULL`: a comparison with NULL is never true).
pub(crate) fn literal_datum(literal: &Literal, field: &Field) -> Result<Datum, SqlError> {
    let ty = primitive(field)?;
    let text = match literal {
        Literal::Null => {
            return Err(bad(
                field,
                literal,
                "a comparison with NULL is never true; use IS NULL or IS NOT NULL",
            ));
        }
        Literal::Bool(b) => {
            return match ty {
                PrimitiveType::Boolean => Ok(Datum::bool(*b)),
                _ => Err(bad(
                    field,
                    literal,
                    "a boolean compares with boolean columns only",
                )),
            };
        }
        Literal::Hex(hex) => {
            let bytes =
                decode_hex(hex).ok_or_else(|| bad(field, literal, "odd or non-hex digits"))?;
            return bytes_datum(bytes, field, literal);
        }
        Literal::Number(n) => {
            if matches!(
                ty,
                PrimitiveType::String
                    | PrimitiveType::Uuid
                    | PrimitiveType::Binary
                    | PrimitiveType::Fixed(_)
                    | PrimitiveType::Boolean
                    | PrimitiveType::Date
                    | PrimitiveType::Time
                    | PrimitiveType::Timestamp
                    | PrimitiveType::Timestamptz
                    | PrimitiveType::TimestampNs
                    | PrimitiveType::TimestamptzNs
            ) {
                return Err(bad(
                    field,
                    literal,
                    "a number compares with numeric columns only",
                ));
            }
            n.as_str()
        }
        Literal::Text(t) => t.as_str(),
    };
    match ty {
        PrimitiveType::String => Ok(Datum::string(text)),
        PrimitiveType::Uuid => {
            Datum::uuid_from_str(text).map_err(|e| bad(field, literal, e.message()))
        }
        PrimitiveType::Binary | PrimitiveType::Fixed(_) => {
            bytes_datum(text.as_bytes().to_vec(), field, literal)
        }
        PrimitiveType::Decimal { precision, scale } => {
            exact_decimal(text, *precision, *scale).map_err(|reason| bad(field, literal, reason))
        }
        _ => {
            let array: ArrayRef = Arc::new(StringArray::from(vec![text]));
            array_datum(&array, 0, field)
                .map_err(|e| match e {
                    SqlError::BadValue { reason, .. } => bad(field, literal, reason),
                    other => other,
                })?
                .ok_or_else(|| bad(field, literal, "not a value of this type"))
        }
    }
}

fn bytes_datum(bytes: Vec<u8>, field: &Field, literal: &Literal) -> Result<Datum, SqlError> {
    match *primitive(field)? {
        PrimitiveType::Binary => Ok(Datum::binary(bytes)),
        PrimitiveType::Fixed(len) if bytes.len() as u64 == len => Ok(Datum::fixed(bytes)),
        PrimitiveType::Fixed(len) => Err(bad(
            field,
            literal,
            format!("{} bytes, the column holds {len}", bytes.len()),
        )),
        _ => Err(bad(
            field,
            literal,
            "bytes compare with binary columns only",
        )),
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The unscaled value of the decimal `text` at `scale`, exactly.
fn decimal_mantissa(text: &str, precision: u32, scale: u32) -> Result<i128, String> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.chars().chain(frac.chars()).all(|c| c.is_ascii_digit())
    {
        return Err("not a decimal number".into());
    }
    let frac = frac.trim_end_matches('0');
    if frac.len() as u32 > scale {
        return Err(format!(
            "more than the column's {scale} decimal places (skade does not round)"
        ));
    }
    let mut all = String::from(int.trim_start_matches('0'));
    all.push_str(frac);
    for _ in frac.len() as u32..scale {
        all.push('0');
    }
    let all = all.trim_start_matches('0');
    if all.len() as u32 > precision {
        return Err(format!("more than the column's {precision} digits"));
    }
    let value: i128 = if all.is_empty() {
        0
    } else {
        all.parse().map_err(|_| "out of range".to_string())?
    };
    Ok(if negative { -value } else { value })
}

fn decimal_datum(mantissa: i128, ty: &PrimitiveType) -> Result<Datum, String> {
    Datum::try_from_bytes(&mantissa.to_be_bytes(), ty.clone()).map_err(|e| e.message().to_string())
}

/// Row `row` of `array` (a bound parameter, or text to read) as a value of `field`'s
/// type: the array is cast to the column's Arrow type (refusing values that do not fit);
/// `None` for a null.
///
/// # Errors
/// [`SqlError::BadValue`] when the value does not cast to the column's type.
pub(crate) fn array_datum(
    array: &ArrayRef,
    row: usize,
    field: &Field,
) -> Result<Option<Datum>, SqlError> {
    let ty = primitive(field)?;
    let value = array.slice(row, 1);
    if value.is_null(0) {
        return Ok(None);
    }
    // A decimal from text or a float goes through our exact reading, never a rounding cast.
    if let PrimitiveType::Decimal { precision, scale } = *ty
        && !matches!(
            value.data_type(),
            DataType::Decimal128(..)
                | DataType::Int8
                | DataType::Int16
                | DataType::Int32
                | DataType::Int64
        )
    {
        let text = describe(&value);
        return exact_decimal(&text, precision, scale)
            .map(Some)
            .map_err(|reason| bad(field, &text, reason));
    }
    if *ty == PrimitiveType::Uuid {
        return uuid_datum(&value, field).map(Some);
    }
    let cast = cast_to_column(&value, ty, field)?;
    cast_datum(&cast, &value, ty, field).map(Some)
}

/// The one value of `value` as text, for an error message.
fn describe(value: &ArrayRef) -> String {
    arrow_cast::display::ArrayFormatter::try_new(value.as_ref(), &Default::default())
        .map(|f| f.value(0).to_string())
        .unwrap_or_else(|_| "the value".to_string())
}

/// `text` as a decimal of `precision` digits and `scale` decimal places, read exactly.
///
/// # Errors
/// Why it is not one: not a decimal number, more decimal places or digits than the
/// column holds, or out of range.
fn exact_decimal(text: &str, precision: u32, scale: u32) -> Result<Datum, String> {
    let mantissa = decimal_mantissa(text, precision, scale)?;
    decimal_datum(mantissa, &PrimitiveType::Decimal { precision, scale })
}

/// The one value of `value` (16 bytes, or text) as a UUID.
///
/// # Errors
/// [`SqlError::BadValue`] when the bytes or the text are not a UUID.
fn uuid_datum(value: &ArrayRef, field: &Field) -> Result<Datum, SqlError> {
    let text = describe(value);
    match value.data_type() {
        DataType::FixedSizeBinary(16) => {
            let bytes = value
                .as_fixed_size_binary_opt()
                .ok_or_else(|| bad(field, &text, "not 16 bytes"))?
                .value(0);
            let uuid =
                uuid::Uuid::from_slice(bytes).map_err(|e| bad(field, &text, e.to_string()))?;
            Ok(Datum::uuid(uuid))
        }
        _ => Datum::uuid_from_str(&text).map_err(|e| bad(field, &text, e.message())),
    }
}

/// `value` cast to the Arrow type a value of `ty` is read from: the canonical one, with
/// the plain (32-bit offset) layouts of strings and binaries. The cast refuses values
/// that do not fit instead of making them null.
///
/// # Errors
/// [`SqlError::BadValue`] when the value does not convert; [`SqlError::Eval`] when `ty`
/// has no Arrow type.
fn cast_to_column(
    value: &ArrayRef,
    ty: &PrimitiveType,
    field: &Field,
) -> Result<ArrayRef, SqlError> {
    let target = match ty {
        PrimitiveType::String => DataType::Utf8,
        PrimitiveType::Binary => DataType::Binary,
        _ => arrow_type(ty)?,
    };
    let options = CastOptions {
        safe: false,
        ..Default::default()
    };
    let cast = arrow_cast::cast_with_options(value, &target, &options)
        .map_err(|e| bad(field, describe(value), e.to_string()))?;
    if cast.is_null(0) {
        return Err(bad(field, describe(value), "does not convert"));
    }
    Ok(cast)
}

/// The one value of `cast` ([`cast_to_column`] of `value`) as a [`Datum`] of `ty`.
///
/// # Errors
/// [`SqlError::BadValue`] naming `value` for a decimal or time out of the column's
/// range; [`SqlError::Eval`] when `cast` is not of the type `ty` is read from.
fn cast_datum(
    cast: &ArrayRef,
    value: &ArrayRef,
    ty: &PrimitiveType,
    field: &Field,
) -> Result<Datum, SqlError> {
    let missing = || not_cast(cast);
    Ok(match ty {
        PrimitiveType::Boolean => Datum::bool(cast.as_boolean_opt().ok_or_else(missing)?.value(0)),
        PrimitiveType::Int => Datum::int(only::<Int32Type>(cast)?),
        PrimitiveType::Long => Datum::long(only::<Int64Type>(cast)?),
        PrimitiveType::Float => Datum::float(only::<Float32Type>(cast)?),
        PrimitiveType::Double => Datum::double(only::<Float64Type>(cast)?),
        PrimitiveType::Decimal { .. } => decimal_datum(only::<Decimal128Type>(cast)?, ty)
            .map_err(|reason| bad(field, describe(value), reason))?,
        PrimitiveType::Date => Datum::date(only::<Date32Type>(cast)?),
        PrimitiveType::Time => Datum::time_micros(only::<Time64MicrosecondType>(cast)?)
            .map_err(|e| bad(field, describe(value), e.message()))?,
        PrimitiveType::Timestamp => {
            Datum::timestamp_micros(only::<TimestampMicrosecondType>(cast)?)
        }
        PrimitiveType::Timestamptz => {
            Datum::timestamptz_micros(only::<TimestampMicrosecondType>(cast)?)
        }
        PrimitiveType::TimestampNs => {
            Datum::timestamp_nanos(only::<TimestampNanosecondType>(cast)?)
        }
        PrimitiveType::TimestamptzNs => {
            Datum::timestamptz_nanos(only::<TimestampNanosecondType>(cast)?)
        }
        PrimitiveType::String => {
            Datum::string(cast.as_string_opt::<i32>().ok_or_else(missing)?.value(0))
        }
        PrimitiveType::Binary => Datum::binary(
            cast.as_binary_opt::<i32>()
                .ok_or_else(missing)?
                .value(0)
                .to_vec(),
        ),
        PrimitiveType::Fixed(_) => Datum::fixed(
            cast.as_fixed_size_binary_opt()
                .ok_or_else(missing)?
                .value(0)
                .to_vec(),
        ),
        PrimitiveType::Uuid => return Err(missing()),
    })
}

/// The one value of `cast`, an array of `P`.
///
/// # Errors
/// [`SqlError::Eval`] when `cast` is not an array of `P`.
fn only<P: ArrowPrimitiveType>(cast: &ArrayRef) -> Result<P::Native, SqlError> {
    Ok(cast
        .as_primitive_opt::<P>()
        .ok_or_else(|| not_cast(cast))?
        .value(0))
}

/// The error for a cast array that is not of the type it was cast to (not expected).
fn not_cast(cast: &ArrayRef) -> SqlError {
    SqlError::Eval {
        reason: format!("a value cast to {} is not one", cast.data_type()),
    }
}

/// `datum` as a one-row Arrow array of `data_type` (the type of the column it is
/// compared with, which may differ from the canonical one in its string or timezone
/// representation).
///
/// # Errors
/// [`SqlError::Eval`] when the value cannot be represented in `data_type`.
pub(crate) fn datum_array(datum: &Datum, data_type: &DataType) -> Result<ArrayRef, SqlError> {
    let eval = |reason: String| SqlError::Eval { reason };
    let ty = datum.data_type();
    let array: ArrayRef = match (datum.literal(), ty) {
        (PrimitiveLiteral::Boolean(b), _) => Arc::new(BooleanArray::from(vec![*b])),
        (PrimitiveLiteral::Int(v), PrimitiveType::Date) => Arc::new(Date32Array::from(vec![*v])),
        (PrimitiveLiteral::Int(v), _) => Arc::new(Int32Array::from(vec![*v])),
        (PrimitiveLiteral::Long(v), PrimitiveType::Time) => {
            Arc::new(Time64MicrosecondArray::from(vec![*v]))
        }
        (PrimitiveLiteral::Long(v), PrimitiveType::Timestamp) => {
            Arc::new(TimestampMicrosecondArray::from(vec![*v]))
        }
        (PrimitiveLiteral::Long(v), PrimitiveType::Timestamptz) => {
            Arc::new(TimestampMicrosecondArray::from(vec![*v]).with_timezone("+00:00"))
        }
        (PrimitiveLiteral::Long(v), PrimitiveType::TimestampNs) => {
            Arc::new(TimestampNanosecondArray::from(vec![*v]))
        }
        (PrimitiveLiteral::Long(v), PrimitiveType::TimestamptzNs) => {
            Arc::new(TimestampNanosecondArray::from(vec![*v]).with_timezone("+00:00"))
        }
        (PrimitiveLiteral::Long(v), _) => Arc::new(Int64Array::from(vec![*v])),
        (PrimitiveLiteral::Float(v), _) => Arc::new(Float32Array::from(vec![v.0])),
        (PrimitiveLiteral::Double(v), _) => Arc::new(Float64Array::from(vec![v.0])),
        (PrimitiveLiteral::String(s), _) => Arc::new(StringArray::from(vec![s.as_str()])),
        (PrimitiveLiteral::Binary(b), PrimitiveType::Fixed(len)) => Arc::new(
            FixedSizeBinaryArray::try_from_iter(std::iter::once(b.as_slice()))
                .map_err(|e| eval(format!("fixed({len}) value: {e}")))?,
        ),
        (PrimitiveLiteral::Binary(b), _) => Arc::new(BinaryArray::from(vec![b.as_slice()])),
        (PrimitiveLiteral::UInt128(u), _) => Arc::new(
            FixedSizeBinaryArray::try_from_iter(std::iter::once(u.to_be_bytes()))
                .map_err(|e| eval(format!("uuid value: {e}")))?,
        ),
        (PrimitiveLiteral::Int128(v), PrimitiveType::Decimal { precision, scale }) => {
            let precision = u8::try_from(*precision).map_err(|e| eval(e.to_string()))?;
            let scale = i8::try_from(*scale).map_err(|e| eval(e.to_string()))?;
            Arc::new(
                Decimal128Array::from(vec![*v])
                    .with_precision_and_scale(precision, scale)
                    .map_err(|e| eval(e.to_string()))?,
            )
        }
        (literal, ty) => return Err(eval(format!("no Arrow value for {literal:?} of {ty}"))),
    };
    if array.data_type() == data_type {
        return Ok(array);
    }
    arrow_cast::cast(&array, data_type).map_err(|e| {
        eval(format!(
            "cannot compare a {} value with a column of Arrow type {data_type}: {e}",
            array.data_type()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(ty: PrimitiveType) -> Field {
        Field {
            id: 1,
            path: vec![1],
            name: "c".into(),
            ty: Type::Primitive(ty),
        }
    }

    // Catches a decimal literal rounded to the column's scale (a filter `= 1.005` on a
    // decimal(10,2) column must not match 1.01 or 1.00) or read at the wrong scale.
    #[test]
    fn decimal_literals_are_exact() {
        assert_eq!(decimal_mantissa("1.5", 10, 2), Ok(150));
        assert_eq!(decimal_mantissa("-0.05", 10, 2), Ok(-5));
        assert_eq!(decimal_mantissa("12", 10, 2), Ok(1200));
        assert_eq!(decimal_mantissa("1.500", 10, 2), Ok(150));
        assert!(decimal_mantissa("1.005", 10, 2).is_err());
        assert!(decimal_mantissa("123456789", 10, 2).is_err());
        assert!(decimal_mantissa("1e3", 10, 2).is_err());
    }

    // Catches literals typed wrongly for their column: the text of a date, time or
    // timestamp read as another instant, a number accepted by a string column, an int
    // literal that overflows its column accepted.
    #[test]
    fn literals_take_their_column_type() {
        let text = |t: &str| Literal::Text(t.into());
        let num = |n: &str| Literal::Number(n.into());
        let ok = |l: &Literal, ty: PrimitiveType| literal_datum(l, &field(ty)).expect("literal");
        assert_eq!(ok(&num("7"), PrimitiveType::Int), Datum::int(7));
        assert_eq!(ok(&num("-7"), PrimitiveType::Long), Datum::long(-7));
        assert_eq!(ok(&num("2.5"), PrimitiveType::Double), Datum::double(2.5));
        assert_eq!(ok(&text("1970-01-02"), PrimitiveType::Date), Datum::date(1));
        assert_eq!(
            ok(&text("1970-01-01 00:00:01"), PrimitiveType::Timestamp),
            Datum::timestamp_micros(1_000_000)
        );
        assert_eq!(
            ok(
                &text("1970-01-01T01:00:00+01:00"),
                PrimitiveType::Timestamptz
            ),
            Datum::timestamptz_micros(0)
        );
        assert_eq!(
            ok(&text("00:00:01.5"), PrimitiveType::Time),
            Datum::time_micros(1_500_000).unwrap()
        );
        assert_eq!(
            ok(&Literal::Hex("0aff".into()), PrimitiveType::Binary),
            Datum::binary(vec![10, 255])
        );
        // A bound binary parameter, read from either layout (RED once: a panic on the
        // large-binary cast of a binary column's canonical type).
        for array in [
            Arc::new(BinaryArray::from(vec![&b"ab"[..]])) as ArrayRef,
            Arc::new(arrow_array::LargeBinaryArray::from(vec![&b"ab"[..]])),
        ] {
            assert_eq!(
                array_datum(&array, 0, &field(PrimitiveType::Binary)).unwrap(),
                Some(Datum::binary(b"ab".to_vec()))
            );
        }
        for (literal, ty) in [
            (num("3000000000"), PrimitiveType::Int),
            (num("2.5"), PrimitiveType::Int),
            (num("1"), PrimitiveType::String),
            (text("2024-13-01"), PrimitiveType::Date),
            (Literal::Null, PrimitiveType::Int),
            (Literal::Hex("0a".into()), PrimitiveType::Fixed(2)),
        ] {
            assert!(
                literal_datum(&literal, &field(ty.clone())).is_err(),
                "{literal} as {ty}"
            );
        }
    }
}
