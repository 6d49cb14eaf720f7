//! Partition transforms as the Iceberg spec defines them ("Partition Transforms",
//! "Truncate Transform Details", Appendix B).
//!
//! skade computes `year`, `month`, `day`, `hour` and `truncate[W]` itself, and takes
//! `identity`, `bucket[N]` and `void` from iceberg 0.10.1 (checked against the spec's
//! Appendix B values in the tests below). The reasons, each a departure of iceberg
//! 0.10.1 from the spec:
//! - its `day` of a timestamp before 1970 with a fractional second is one day late
//!   (`1969-12-30T23:59:59.5` gives −1, the spec's floor division −2), so a reader
//!   filtering on the value prunes the file;
//! - its `truncate` has no `binary` as skade stores it (`LargeBinary`), and panics (or
//!   wraps, in release builds) on `truncate` of values near the minimum of `int`/`long`;
//! - its `year`/`month` go through chrono, whose range is narrower than a `timestamp`'s.
//!
//! Every temporal transform is floor division on days or microseconds since
//! 1970-01-01 (a value before the epoch falls in the earlier day, month, year or hour);
//! `truncate` is `v - (((v % W) + W) % W)` on integers and decimals' unscaled values, the
//! first `L` code points of a string and the first `L` bytes of a binary. A result the
//! spec's result type cannot hold (an `hour` beyond ±2³¹ hours, a `truncate` below the
//! type's minimum or beyond a decimal's precision) is refused as `DataInvalid` naming the
//! value, never wrapped.

use std::sync::Arc;

use arrow_array::cast::AsArray;
use arrow_array::types::{
    Date32Type, Decimal128Type, Int32Type, Int64Type, TimestampMicrosecondType,
    TimestampNanosecondType,
};
use arrow_array::{
    Array, ArrayRef, BinaryArray, Date32Array, Int32Array, LargeBinaryArray, LargeStringArray,
    PrimitiveArray, StringArray,
};
use arrow_schema::{DataType, TimeUnit};
use iceberg::spec::{Datum, PrimitiveLiteral, Transform};
use iceberg::transform::{BoxedTransformFunction, TransformFunction, create_transform_function};
use iceberg::{Error, ErrorKind, Result};

const MICROS_PER_DAY: i64 = 86_400_000_000;
const MICROS_PER_HOUR: i64 = 3_600_000_000;

/// The function that computes `transform`'s partition values: skade's own for the
/// temporal transforms and `truncate` (module docs), iceberg's for the rest.
///
/// # Errors
/// iceberg's error for a transform it does not know.
pub fn transform_function(transform: &Transform) -> Result<BoxedTransformFunction> {
    Ok(match transform {
        Transform::Year => Box::new(Temporal(Unit::Year)),
        Transform::Month => Box::new(Temporal(Unit::Month)),
        Transform::Day => Box::new(Temporal(Unit::Day)),
        Transform::Hour => Box::new(Temporal(Unit::Hour)),
        Transform::Truncate(width) => Box::new(Truncate(*width)),
        other => create_transform_function(other)?,
    })
}

#[derive(Debug, Clone, Copy)]
enum Unit {
    Year,
    Month,
    Day,
    Hour,
}

/// `year`, `month`, `day` or `hour` (spec, "Partition Transforms").
#[derive(Debug)]
struct Temporal(Unit);

/// `(year, month 1..=12)` of the civil (proleptic Gregorian) date `days` after
/// 1970-01-01 (H. Hinnant's `civil_from_days`, exact for every `i64` day in range).
fn civil_from_days(days: i64) -> (i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month)
}

fn out_of_range(what: &str, value: i64) -> Error {
    Error::new(
        ErrorKind::DataInvalid,
        format!("the partition value {what} of {value} does not fit an Iceberg int"),
    )
}

impl Temporal {
    /// The transform of `days` since the epoch (a date, or a timestamp's floor day).
    fn of_days(&self, days: i64) -> Result<i32> {
        let value = match self.0 {
            Unit::Day => days,
            Unit::Year => civil_from_days(days).0 - 1970,
            Unit::Month => {
                let (year, month) = civil_from_days(days);
                (year - 1970) * 12 + month - 1
            }
            Unit::Hour => {
                return Err(Error::new(
                    ErrorKind::DataInvalid,
                    "hour applies to timestamps, not dates",
                ));
            }
        };
        i32::try_from(value).map_err(|_| out_of_range(self.name(), days))
    }

    /// The transform of a timestamp `micros` since the epoch: floor division.
    fn of_micros(&self, micros: i64) -> Result<i32> {
        match self.0 {
            Unit::Hour => i32::try_from(micros.div_euclid(MICROS_PER_HOUR))
                .map_err(|_| out_of_range("hour", micros)),
            _ => self.of_days(micros.div_euclid(MICROS_PER_DAY)),
        }
    }

    fn name(&self) -> &'static str {
        match self.0 {
            Unit::Year => "year",
            Unit::Month => "month",
            Unit::Day => "day",
            Unit::Hour => "hour",
        }
    }

    /// `day` is a `date` (spec, result type); the others are `int`.
    fn output(&self, values: Int32Array) -> ArrayRef {
        match self.0 {
            Unit::Day => {
                let days: Date32Array = values.reinterpret_cast();
                Arc::new(days)
            }
            _ => Arc::new(values),
        }
    }
}

impl TransformFunction for Temporal {
    fn transform(&self, input: ArrayRef) -> Result<ArrayRef> {
        let values: Int32Array = match input.data_type() {
            DataType::Date32 => input
                .as_primitive::<Date32Type>()
                .try_unary(|d| self.of_days(i64::from(d)))?,
            DataType::Timestamp(TimeUnit::Microsecond, _) => input
                .as_primitive::<TimestampMicrosecondType>()
                .try_unary(|v| self.of_micros(v))?,
            DataType::Timestamp(TimeUnit::Nanosecond, _) => input
                .as_primitive::<TimestampNanosecondType>()
                .try_unary(|v| self.of_micros(v.div_euclid(1_000)))?,
            other => {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!("{} does not apply to {other}", self.name()),
                ));
            }
        };
        Ok(self.output(values))
    }

    fn transform_literal(&self, input: &Datum) -> Result<Option<Datum>> {
        use iceberg::spec::PrimitiveType as P;
        let value = match (input.data_type(), input.literal()) {
            (P::Date, PrimitiveLiteral::Int(d)) => self.of_days(i64::from(*d))?,
            (P::Timestamp | P::Timestamptz, PrimitiveLiteral::Long(v)) => self.of_micros(*v)?,
            (P::TimestampNs | P::TimestamptzNs, PrimitiveLiteral::Long(v)) => {
                self.of_micros(v.div_euclid(1_000))?
            }
            (other, _) => {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!("{} does not apply to {other}", self.name()),
                ));
            }
        };
        Ok(Some(match self.0 {
            Unit::Day => Datum::date(value),
            _ => Datum::int(value),
        }))
    }
}

/// `truncate[W]` (spec, "Truncate Transform Details").
#[derive(Debug)]
struct Truncate(u32);

impl Truncate {
    fn refused(&self, value: impl std::fmt::Display, why: &str) -> Error {
        Error::new(
            ErrorKind::DataInvalid,
            format!("truncate[{}] of {value}: {why}", self.0),
        )
    }

    fn int(&self, v: i32) -> Result<i32> {
        let width = i32::try_from(self.0).map_err(|_| self.refused(v, "width beyond an int"))?;
        v.checked_sub(v.rem_euclid(width))
            .ok_or_else(|| self.refused(v, "below the smallest int"))
    }

    fn long(&self, v: i64) -> Result<i64> {
        let width = i64::from(self.0);
        v.checked_sub(v.rem_euclid(width))
            .ok_or_else(|| self.refused(v, "below the smallest long"))
    }

    /// The unscaled `v` of a `decimal(precision, _)`.
    fn decimal(&self, v: i128, precision: u8) -> Result<i128> {
        let width = i128::from(self.0);
        let out = v
            .checked_sub(v.rem_euclid(width))
            .ok_or_else(|| self.refused(v, "beyond a decimal"))?;
        if out.unsigned_abs() >= 10u128.pow(u32::from(precision)) {
            return Err(self.refused(
                v,
                &format!("the result {out} has more than the column's {precision} digits"),
            ));
        }
        Ok(out)
    }

    fn string<'a>(&self, s: &'a str) -> &'a str {
        match s.char_indices().nth(self.0 as usize) {
            Some((at, _)) => &s[..at],
            None => s,
        }
    }

    fn bytes<'a>(&self, b: &'a [u8]) -> &'a [u8] {
        &b[..b.len().min(self.0 as usize)]
    }
}

impl TransformFunction for Truncate {
    fn transform(&self, input: ArrayRef) -> Result<ArrayRef> {
        if self.0 == 0 {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                "truncate[0] has no width",
            ));
        }
        Ok(match input.data_type() {
            DataType::Int32 => {
                let out: PrimitiveArray<Int32Type> = input
                    .as_primitive::<Int32Type>()
                    .try_unary(|v| self.int(v))?;
                Arc::new(out)
            }
            DataType::Int64 => {
                let out: PrimitiveArray<Int64Type> = input
                    .as_primitive::<Int64Type>()
                    .try_unary(|v| self.long(v))?;
                Arc::new(out)
            }
            DataType::Decimal128(precision, scale) => {
                let out: PrimitiveArray<Decimal128Type> = input
                    .as_primitive::<Decimal128Type>()
                    .try_unary(|v| self.decimal(v, *precision))?;
                Arc::new(
                    out.with_precision_and_scale(*precision, *scale)
                        .map_err(|e| Error::new(ErrorKind::Unexpected, e.to_string()))?,
                )
            }
            DataType::Utf8 => Arc::new(
                input
                    .as_string::<i32>()
                    .iter()
                    .map(|v| v.map(|s| self.string(s)))
                    .collect::<StringArray>(),
            ),
            DataType::LargeUtf8 => Arc::new(
                input
                    .as_string::<i64>()
                    .iter()
                    .map(|v| v.map(|s| self.string(s)))
                    .collect::<LargeStringArray>(),
            ),
            DataType::Binary => Arc::new(
                input
                    .as_binary::<i32>()
                    .iter()
                    .map(|v| v.map(|b| self.bytes(b)))
                    .collect::<BinaryArray>(),
            ),
            DataType::LargeBinary => Arc::new(
                input
                    .as_binary::<i64>()
                    .iter()
                    .map(|v| v.map(|b| self.bytes(b)))
                    .collect::<LargeBinaryArray>(),
            ),
            other => {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!("truncate does not apply to {other}"),
                ));
            }
        })
    }

    fn transform_literal(&self, input: &Datum) -> Result<Option<Datum>> {
        use iceberg::spec::PrimitiveType as P;
        Ok(Some(match (input.data_type(), input.literal()) {
            (P::Int, PrimitiveLiteral::Int(v)) => Datum::int(self.int(*v)?),
            (P::Long, PrimitiveLiteral::Long(v)) => Datum::long(self.long(*v)?),
            // A decimal literal's Datum cannot be built outside iceberg (its constructor is
            // crate-private); skade's write path calls `transform`, never this.
            (P::Decimal { .. }, _) => {
                return create_transform_function(&Transform::Truncate(self.0))?
                    .transform_literal(input);
            }
            (P::String, PrimitiveLiteral::String(s)) => Datum::string(self.string(s)),
            (P::Binary, PrimitiveLiteral::Binary(b)) => Datum::binary(self.bytes(b).to_vec()),
            (other, _) => {
                return Err(Error::new(
                    ErrorKind::FeatureUnsupported,
                    format!("truncate does not apply to {other}"),
                ));
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::TimestampMicrosecondArray;

    fn apply(transform: Transform, input: ArrayRef) -> Result<ArrayRef> {
        transform_function(&transform)?.transform(input)
    }

    fn ints(out: &ArrayRef) -> Vec<Option<i32>> {
        match out.data_type() {
            DataType::Date32 => out.as_primitive::<Date32Type>().iter().collect(),
            _ => out.as_primitive::<Int32Type>().iter().collect(),
        }
    }

    /// Microseconds of `days` after the epoch plus `micros` into that day.
    fn at(days: i64, micros: i64) -> i64 {
        days * MICROS_PER_DAY + micros
    }

    // 1969-12-30 is day −2, 1899-12-31 is day −25568, 1900-01-01 is day −25567 (counted:
    // 70 years of 365 days plus 17 leap days, 1904..=1968, before 1970).
    const DEC_30_1969: i64 = -2;
    const DEC_31_1899: i64 = -25_568;

    /// The spec's floor division before the epoch, with fractional seconds: three values
    /// iceberg got wrong (it gave −1, −1, −25567), the last microsecond of
    /// 1969, the epoch itself, and a null. Values from the spec's definition (days since
    /// 1970-01-01, floor), not from the code.
    #[test]
    fn day_floors_before_the_epoch() {
        let input: ArrayRef = Arc::new(
            TimestampMicrosecondArray::from(vec![
                Some(at(DEC_30_1969, 86_399_500_000)), // 1969-12-30T23:59:59.5
                Some(at(DEC_30_1969, 86_399_000_001)), // 1969-12-30T23:59:59.000001
                Some(at(DEC_31_1899, 86_399_250_000)), // 1899-12-31T23:59:59.25
                Some(-1),                              // 1969-12-31T23:59:59.999999
                Some(0),
                None,
            ])
            .with_timezone("+00:00"),
        );
        let out = apply(Transform::Day, input).unwrap();
        assert_eq!(out.data_type(), &DataType::Date32);
        assert_eq!(
            ints(&out),
            vec![Some(-2), Some(-2), Some(-25_568), Some(-1), Some(0), None]
        );
    }

    /// Year, month and hour of the same instants: 1899-12 is year −71, month
    /// −71·12 + 11 = −841; 1969-12-30T23:59:59.5 is hour −25 (floor of −24.000…14);
    /// the extremes of a microsecond timestamp have a year and month but no int hour.
    #[test]
    fn year_month_hour_floor_and_refuse_what_an_int_cannot_hold() {
        let instants = vec![
            at(DEC_30_1969, 86_399_500_000),
            at(DEC_31_1899, 86_399_250_000),
            -1,
        ];
        let input: ArrayRef = Arc::new(TimestampMicrosecondArray::from(instants));
        assert_eq!(
            ints(&apply(Transform::Year, input.clone()).unwrap()),
            vec![Some(-1), Some(-71), Some(-1)]
        );
        assert_eq!(
            ints(&apply(Transform::Month, input.clone()).unwrap()),
            vec![Some(-1), Some(-841), Some(-1)]
        );
        assert_eq!(
            ints(&apply(Transform::Hour, input).unwrap()),
            vec![Some(-25), Some(-25_568 * 24 + 23), Some(-1)]
        );
        // i64::MAX µs is 294247-01-10T04:00:54.775807Z; i64::MIN µs is
        // -290308-12-21T19:59:05.224192Z (proleptic Gregorian).
        let extremes: ArrayRef =
            Arc::new(TimestampMicrosecondArray::from(vec![i64::MAX, i64::MIN]));
        assert_eq!(
            ints(&apply(Transform::Year, extremes.clone()).unwrap()),
            vec![Some(294_247 - 1970), Some(-290_308 - 1970)]
        );
        assert_eq!(
            ints(&apply(Transform::Month, extremes.clone()).unwrap()),
            vec![
                Some((294_247 - 1970) * 12),
                Some((-290_308 - 1970) * 12 + 11)
            ]
        );
        let err = apply(Transform::Hour, extremes).unwrap_err();
        assert!(err.message().contains("does not fit"), "{err}");
    }

    /// Dates: 1970-01-01 is 0, 1969-12-31 is year −1 and month −1, 0001-01-01 (day
    /// −719162) is year −1969, month −1969·12, and the extremes of `date` (±2³¹ days)
    /// have a year.
    #[test]
    fn date_transforms() {
        let input: ArrayRef = Arc::new(Date32Array::from(vec![0, -1, -719_162, 59]));
        assert_eq!(
            ints(&apply(Transform::Year, input.clone()).unwrap()),
            vec![Some(0), Some(-1), Some(-1969), Some(0)]
        );
        assert_eq!(
            ints(&apply(Transform::Month, input.clone()).unwrap()),
            vec![Some(0), Some(-1), Some(-1969 * 12), Some(2)]
        );
        assert_eq!(
            ints(&apply(Transform::Day, input).unwrap()),
            vec![Some(0), Some(-1), Some(-719_162), Some(59)]
        );
        // i32::MAX days after 1970 is 5881580-07-11; i32::MIN days is -5877641-06-23.
        let extremes: ArrayRef = Arc::new(Date32Array::from(vec![i32::MAX, i32::MIN]));
        assert_eq!(
            ints(&apply(Transform::Year, extremes.clone()).unwrap()),
            vec![Some(5_881_580 - 1970), Some(-5_877_641 - 1970)]
        );
        assert_eq!(
            ints(&apply(Transform::Month, extremes).unwrap()),
            vec![
                Some((5_881_580 - 1970) * 12 + 6),
                Some((-5_877_641 - 1970) * 12 + 5)
            ]
        );
    }

    /// The spec's truncate examples (`1 → 0`, `-1 → -10`, `10.65 → 10.50`, `iceberg →
    /// ice`, `\x01..\x05 → \x01\x02\x03`), code points not bytes for strings, bytes for
    /// binaries of both Arrow layouts, and the minimum of int/long refused rather than
    /// wrapped.
    #[test]
    fn truncate_per_the_spec() {
        let ten = Transform::Truncate(10);
        let out = apply(ten, Arc::new(Int32Array::from(vec![1, -1, i32::MAX, 0]))).unwrap();
        assert_eq!(
            ints(&out),
            vec![Some(0), Some(-10), Some(2_147_483_640), Some(0)]
        );
        let out = apply(
            ten,
            Arc::new(arrow_array::Int64Array::from(vec![1, -1, i64::MAX])),
        )
        .unwrap();
        let longs: Vec<i64> = out.as_primitive::<Int64Type>().values().to_vec();
        assert_eq!(longs, vec![0, -10, 9_223_372_036_854_775_800]);
        assert!(apply(ten, Arc::new(Int32Array::from(vec![i32::MIN]))).is_err());
        assert!(apply(ten, Arc::new(arrow_array::Int64Array::from(vec![i64::MIN]))).is_err());
        let decimals = arrow_array::Decimal128Array::from(vec![1065, -1065])
            .with_precision_and_scale(4, 2)
            .unwrap();
        let out = apply(Transform::Truncate(50), Arc::new(decimals)).unwrap();
        let unscaled: Vec<i128> = out.as_primitive::<Decimal128Type>().values().to_vec();
        assert_eq!(unscaled, vec![1050, -1100]);
        let three = Transform::Truncate(3);
        let out = apply(
            three,
            Arc::new(StringArray::from(vec![
                Some("iceberg"),
                Some("åæøü"),
                Some("ab"),
                None,
            ])),
        )
        .unwrap();
        let strings: Vec<Option<&str>> = out.as_string::<i32>().iter().collect();
        assert_eq!(strings, vec![Some("ice"), Some("åæø"), Some("ab"), None]);
        for input in [
            Arc::new(LargeBinaryArray::from(vec![
                &[1u8, 2, 3, 4, 5][..],
                &[0xff][..],
            ])) as ArrayRef,
            Arc::new(BinaryArray::from(vec![&[1u8, 2, 3, 4, 5][..], &[0xff][..]])),
        ] {
            let out = apply(three, input).unwrap();
            let bytes: Vec<Vec<u8>> = match out.data_type() {
                DataType::LargeBinary => out
                    .as_binary::<i64>()
                    .iter()
                    .map(|b| b.unwrap().to_vec())
                    .collect(),
                _ => out
                    .as_binary::<i32>()
                    .iter()
                    .map(|b| b.unwrap().to_vec())
                    .collect(),
            };
            assert_eq!(bytes, vec![vec![1, 2, 3], vec![0xff]]);
        }
        // decimal(3, 0): −999 truncates to −1000, which has 4 digits.
        let narrow = arrow_array::Decimal128Array::from(vec![-999])
            .with_precision_and_scale(3, 0)
            .unwrap();
        assert!(apply(ten, Arc::new(narrow)).is_err());
    }

    /// Appendix B's hash values through `bucket[N]` with N = 2³¹−1 (`hash & MAX % N`
    /// is then the hash's low 31 bits for these values): int and long `34` →
    /// 2017239379, string `iceberg` → 1210000089, binary `00 01 02 03` → −188683207,
    /// timestamp `2017-11-16T22:31:08` → −2047944441, date `2017-11-16` → −653330422,
    /// decimal `14.20` → −500754589.
    #[test]
    fn bucket_matches_appendix_b() {
        let bucket = Transform::Bucket(i32::MAX as u32);
        let expect = |hash: i32| Some((hash & i32::MAX) % i32::MAX);
        let one = |input: ArrayRef| ints(&apply(bucket, input).unwrap())[0];
        assert_eq!(
            one(Arc::new(Int32Array::from(vec![34]))),
            expect(2_017_239_379)
        );
        assert_eq!(
            one(Arc::new(arrow_array::Int64Array::from(vec![34]))),
            expect(2_017_239_379)
        );
        assert_eq!(
            one(Arc::new(StringArray::from(vec!["iceberg"]))),
            expect(1_210_000_089)
        );
        assert_eq!(
            one(Arc::new(LargeBinaryArray::from(vec![&[0u8, 1, 2, 3][..]]))),
            expect(-188_683_207)
        );
        // 2017-11-16 is day 17486; 22:31:08 is 81068 s into it.
        assert_eq!(
            one(Arc::new(Date32Array::from(vec![17_486]))),
            expect(-653_330_422)
        );
        assert_eq!(
            one(Arc::new(TimestampMicrosecondArray::from(vec![at(
                17_486,
                81_068_000_000
            )]))),
            expect(-2_047_944_441)
        );
        assert_eq!(
            one(Arc::new(TimestampMicrosecondArray::from(vec![at(
                17_486,
                81_068_000_001
            )]))),
            expect(-1_207_196_810)
        );
        let decimal = arrow_array::Decimal128Array::from(vec![1420])
            .with_precision_and_scale(4, 2)
            .unwrap();
        assert_eq!(one(Arc::new(decimal)), expect(-500_754_589));
        let uuid = arrow_array::FixedSizeBinaryArray::try_from_iter(
            [[
                0xF7u8, 0x9C, 0x3E, 0x09, 0x67, 0x7C, 0x4B, 0xBD, 0xA4, 0x79, 0x3F, 0x34, 0x9C,
                0xB7, 0x85, 0xE7,
            ]]
            .into_iter(),
        )
        .unwrap();
        assert_eq!(one(Arc::new(uuid)), expect(1_488_055_340));
        let time = arrow_array::Time64MicrosecondArray::from(vec![81_068_000_000]);
        assert_eq!(one(Arc::new(time)), expect(-662_762_989));
    }
}
