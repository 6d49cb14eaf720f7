//! A row predicate over an Iceberg schema, by field id: what a `WHERE` clause becomes
//! once its names are resolved and its literals and parameters typed. Evaluated on an
//! Arrow batch by [`super::eval`]; [`Predicate::may_match_file`] tells from a data file's
//! column bounds whether any of its rows can match.
//!
//! Fields are named by id, not by name, so a predicate keeps its meaning across renames
//! and reads files written under older schemas; values are [`Datum`]s of the field's own
//! type, so comparisons are exact (no implicit casts at evaluation time).

use std::cmp::Ordering;
use std::fmt;

use iceberg::spec::{DataFile, Datum, PrimitiveLiteral, PrimitiveType, Type};

/// A (possibly nested) primitive field of the table's schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    /// The field id.
    pub id: i32,
    /// The field ids from the top-level column down to this field (`[id]` for a
    /// top-level column).
    pub path: Vec<i32>,
    /// Its full name, nested names joined by `.` (for messages).
    pub name: String,
    /// Its type: primitive for every predicate but [`Predicate::IsNull`], which takes
    /// any field (a struct, list or map column too).
    pub ty: Type,
}

impl Field {
    /// The field's type when it is primitive.
    pub fn primitive(&self) -> Option<&PrimitiveType> {
        match &self.ty {
            Type::Primitive(p) => Some(p),
            _ => None,
        }
    }
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    /// `=`
    Eq,
    /// `<>` / `!=`
    NotEq,
    /// `<`
    Lt,
    /// `<=`
    LtEq,
    /// `>`
    Gt,
    /// `>=`
    GtEq,
}

impl CmpOp {
    /// The operator with its operands swapped (`5 < x` is `x > 5`).
    pub fn flipped(self) -> Self {
        match self {
            CmpOp::Eq | CmpOp::NotEq => self,
            CmpOp::Lt => CmpOp::Gt,
            CmpOp::LtEq => CmpOp::GtEq,
            CmpOp::Gt => CmpOp::Lt,
            CmpOp::GtEq => CmpOp::LtEq,
        }
    }

    fn symbol(self) -> &'static str {
        match self {
            CmpOp::Eq => "=",
            CmpOp::NotEq => "<>",
            CmpOp::Lt => "<",
            CmpOp::LtEq => "<=",
            CmpOp::Gt => ">",
            CmpOp::GtEq => ">=",
        }
    }
}

/// A row predicate with SQL's three-valued logic: a comparison with a null value is
/// unknown, `NOT` unknown is unknown, and a row is selected only where the predicate is
/// true.
#[derive(Debug, Clone, PartialEq)]
pub enum Predicate {
    /// Every row (no `WHERE`).
    True,
    /// Both hold.
    And(Box<Predicate>, Box<Predicate>),
    /// Either holds.
    Or(Box<Predicate>, Box<Predicate>),
    /// The operand is false (unknown stays unknown).
    Not(Box<Predicate>),
    /// `field op value`; `value` is of `field.ty`.
    Compare {
        /// The field compared.
        field: Field,
        /// The operator, field on the left.
        op: CmpOp,
        /// A value of the field's type.
        value: Datum,
    },
    /// `field IN (values)`; every value is of `field.ty`.
    In {
        /// The field.
        field: Field,
        /// The values, at least one.
        values: Vec<Datum>,
    },
    /// `field IS NULL`.
    IsNull {
        /// The field.
        field: Field,
    },
    /// `field LIKE pattern` on a string field: `%` any run of characters, `_` one
    /// character, no escape character.
    Like {
        /// The field (a string).
        field: Field,
        /// The pattern.
        pattern: String,
    },
}

impl Predicate {
    /// `a AND b`, dropping a `True` operand.
    pub fn and(a: Predicate, b: Predicate) -> Predicate {
        match (a, b) {
            (Predicate::True, p) | (p, Predicate::True) => p,
            (a, b) => Predicate::And(Box::new(a), Box::new(b)),
        }
    }

    /// `a OR b`.
    pub fn or(a: Predicate, b: Predicate) -> Predicate {
        Predicate::Or(Box::new(a), Box::new(b))
    }

    /// `NOT p`.
    #[allow(clippy::should_implement_trait)] // a constructor, not an operator
    pub fn not(p: Predicate) -> Predicate {
        Predicate::Not(Box::new(p))
    }

    /// The ids of every field the predicate reads, each once, in order of appearance.
    pub fn field_ids(&self) -> Vec<i32> {
        let mut ids = Vec::new();
        self.visit_fields(&mut |f| {
            if !ids.contains(&f.id) {
                ids.push(f.id);
            }
        });
        ids
    }

    /// The top-level column ids the predicate reads (what a scan must select).
    pub fn column_ids(&self) -> Vec<i32> {
        let mut ids = Vec::new();
        self.visit_fields(&mut |f| {
            if let Some(&top) = f.path.first()
                && !ids.contains(&top)
            {
                ids.push(top);
            }
        });
        ids
    }

    fn visit_fields(&self, visit: &mut impl FnMut(&Field)) {
        match self {
            Predicate::True => {}
            Predicate::And(a, b) | Predicate::Or(a, b) => {
                a.visit_fields(visit);
                b.visit_fields(visit);
            }
            Predicate::Not(p) => p.visit_fields(visit),
            Predicate::Compare { field, .. }
            | Predicate::In { field, .. }
            | Predicate::IsNull { field }
            | Predicate::Like { field, .. } => visit(field),
        }
    }

    /// Whether a row of `file` may match, judged from its column statistics (value,
    /// null and NaN counts, lower and upper bounds): `false` only when no row can,
    /// `true` whenever the statistics do not rule it out (missing, truncated, of
    /// another type after a promotion, a float column with NaNs). A delete can skip a
    /// file for which it is `false`; a scan can leave it unread.
    pub fn may_match_file(&self, file: &DataFile) -> bool {
        self.may_match(file, false)
    }

    /// Whether the data file's column statistics prove that EVERY row of `file` matches:
    /// no row may match the predicate's negation, and no field a comparison, `IN` or
    /// `LIKE` reads may be null in it (such a row's outcome is NULL, which matches
    /// nothing, as SQL's `WHERE`). `false` whenever the statistics cannot prove it. A
    /// delete removes a file for which it is `true` whole, without reading it.
    pub fn must_match_file(&self, file: &DataFile) -> bool {
        let stats = Stats { file };
        let mut maybe_null = false;
        self.visit_compared(&mut |f| maybe_null |= stats.may_hold_null(f.id));
        !maybe_null && !self.may_match(file, true)
    }

    /// Visits the fields of every term whose outcome is NULL on a null value (all but
    /// `IS NULL`).
    fn visit_compared(&self, visit: &mut impl FnMut(&Field)) {
        match self {
            Predicate::True | Predicate::IsNull { .. } => {}
            Predicate::And(a, b) | Predicate::Or(a, b) => {
                a.visit_compared(visit);
                b.visit_compared(visit);
            }
            Predicate::Not(p) => p.visit_compared(visit),
            Predicate::Compare { field, .. }
            | Predicate::In { field, .. }
            | Predicate::Like { field, .. } => visit(field),
        }
    }

    /// [`Self::may_match_file`] for this predicate, or — `negated` — for its negation,
    /// pushing `NOT` down to the leaves (`NOT (a AND b)` = `NOT a OR NOT b`; a row whose
    /// field is null matches neither a comparison nor its negation).
    fn may_match(&self, file: &DataFile, negated: bool) -> bool {
        let stats = Stats { file };
        match (self, negated) {
            (Predicate::True, false) => true,
            (Predicate::True, true) => false,
            (Predicate::And(a, b), false) | (Predicate::Or(a, b), true) => {
                a.may_match(file, negated) && b.may_match(file, negated)
            }
            (Predicate::Or(a, b), false) | (Predicate::And(a, b), true) => {
                a.may_match(file, negated) || b.may_match(file, negated)
            }
            (Predicate::Not(p), _) => p.may_match(file, !negated),
            (Predicate::IsNull { field }, false) => stats.may_hold_null(field.id),
            (Predicate::IsNull { field }, true) => stats.may_hold_non_null(field.id),
            (Predicate::Compare { field, op, value }, false) => {
                stats.may_compare(field, *op, value)
            }
            (Predicate::Compare { field, op, value }, true) => {
                stats.may_compare(field, negate(*op), value)
            }
            (Predicate::In { field, values }, false) => values
                .iter()
                .any(|v| stats.may_compare(field, CmpOp::Eq, v)),
            (Predicate::In { field, values }, true) => values
                .iter()
                .all(|v| stats.may_compare(field, CmpOp::NotEq, v)),
            (Predicate::Like { field, pattern }, false) => stats.may_like(field, pattern),
            (Predicate::Like { field, .. }, true) => stats.may_hold_non_null(field.id),
        }
    }
}

/// The operator a negated comparison holds by, on non-null values.
fn negate(op: CmpOp) -> CmpOp {
    match op {
        CmpOp::Eq => CmpOp::NotEq,
        CmpOp::NotEq => CmpOp::Eq,
        CmpOp::Lt => CmpOp::GtEq,
        CmpOp::LtEq => CmpOp::Gt,
        CmpOp::Gt => CmpOp::LtEq,
        CmpOp::GtEq => CmpOp::Lt,
    }
}

/// A data file's column statistics, read conservatively.
struct Stats<'a> {
    file: &'a DataFile,
}

impl Stats<'_> {
    fn count(map: &std::collections::HashMap<i32, u64>, id: i32) -> Option<u64> {
        map.get(&id).copied()
    }

    /// Whether a null of field `id` may be in the file.
    fn may_hold_null(&self, id: i32) -> bool {
        Self::count(self.file.null_value_counts(), id) != Some(0)
    }

    /// Whether a non-null value of field `id` may be in the file.
    fn may_hold_non_null(&self, id: i32) -> bool {
        match (
            Self::count(self.file.value_counts(), id),
            Self::count(self.file.null_value_counts(), id),
        ) {
            (Some(values), Some(nulls)) => values > nulls,
            _ => true,
        }
    }

    /// Whether a NaN of field `id` may be in the file (bounds leave NaNs out).
    fn may_hold_nan(&self, field: &Field) -> bool {
        matches!(
            field.primitive(),
            Some(PrimitiveType::Float | PrimitiveType::Double)
        ) && Self::count(self.file.nan_value_counts(), field.id) != Some(0)
    }

    /// Whether a row may satisfy `field op value`.
    fn may_compare(&self, field: &Field, op: CmpOp, value: &Datum) -> bool {
        if !self.may_hold_non_null(field.id) {
            return false;
        }
        if value.is_nan() || self.may_hold_nan(field) {
            // Arrow orders NaN above every number and equal to itself; the bounds say
            // nothing about NaNs.
            return true;
        }
        let lower = self.file.lower_bounds().get(&field.id);
        let upper = self.file.upper_bounds().get(&field.id);
        // A bound of another type (written before a promotion) compares as None: no
        // verdict from it.
        let vs = |bound: Option<&Datum>| bound.and_then(|b| b.partial_cmp(value));
        match op {
            // Some value v with lower <= v <= upper equals `value`.
            CmpOp::Eq => vs(lower) != Some(Ordering::Greater) && vs(upper) != Some(Ordering::Less),
            // Not every value equals `value`: unknown unless lower = upper = value.
            CmpOp::NotEq => {
                !(vs(lower) == Some(Ordering::Equal) && vs(upper) == Some(Ordering::Equal))
            }
            CmpOp::Lt => vs(lower) != Some(Ordering::Greater) && vs(lower) != Some(Ordering::Equal),
            CmpOp::LtEq => vs(lower) != Some(Ordering::Greater),
            CmpOp::Gt => vs(upper) != Some(Ordering::Less) && vs(upper) != Some(Ordering::Equal),
            CmpOp::GtEq => vs(upper) != Some(Ordering::Less),
        }
    }

    /// Whether a row may match `LIKE pattern`: only a literal prefix (before the first
    /// `%` or `_`) is judged, against the bounds (which Iceberg may truncate, keeping
    /// them bounds).
    fn may_like(&self, field: &Field, pattern: &str) -> bool {
        if !self.may_hold_non_null(field.id) {
            return false;
        }
        let prefix: String = pattern
            .chars()
            .take_while(|c| *c != '%' && *c != '_')
            .collect();
        if prefix.is_empty() {
            return true;
        }
        let text = |bound: Option<&Datum>| match bound.map(Datum::literal) {
            Some(PrimitiveLiteral::String(s)) => Some(s.clone()),
            _ => None,
        };
        let lower = text(self.file.lower_bounds().get(&field.id));
        let upper = text(self.file.upper_bounds().get(&field.id));
        // Every value starting with `prefix` lies in [prefix, prefix + U+10FFFF...]: none
        // is in the file when the upper bound sorts before the prefix, or the lower
        // bound, cut to the prefix's length, sorts after it.
        if upper.as_deref().is_some_and(|u| u < prefix.as_str()) {
            return false;
        }
        if let Some(lower) = lower {
            let cut: String = lower.chars().take(prefix.chars().count()).collect();
            if cut.as_str() > prefix.as_str() {
                return false;
            }
        }
        true
    }
}

impl fmt::Display for Predicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Predicate::True => write!(f, "TRUE"),
            Predicate::And(a, b) => write!(f, "({a} AND {b})"),
            Predicate::Or(a, b) => write!(f, "({a} OR {b})"),
            Predicate::Not(p) => write!(f, "NOT {p}"),
            Predicate::Compare { field, op, value } => {
                write!(f, "{} {} {value}", field.name, op.symbol())
            }
            Predicate::In { field, values } => {
                let list: Vec<String> = values.iter().map(ToString::to_string).collect();
                write!(f, "{} IN ({})", field.name, list.join(", "))
            }
            Predicate::IsNull { field } => write!(f, "{} IS NULL", field.name),
            Predicate::Like { field, pattern } => write!(f, "{} LIKE {pattern:?}", field.name),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use iceberg::spec::{DataContentType, DataFileBuilder, DataFileFormat, Struct};

    use super::*;

    fn field(id: i32, ty: PrimitiveType) -> Field {
        Field {
            id,
            path: vec![id],
            name: format!("c{id}"),
            ty: Type::Primitive(ty),
        }
    }

    /// A file of 10 rows whose field 1 (long) holds 10..=20 with 2 nulls, field 2
    /// (string) "apple".."banana", field 3 (double) with a NaN.
    fn file() -> DataFile {
        DataFileBuilder::default()
            .content(DataContentType::Data)
            .file_path("f.parquet".into())
            .file_format(DataFileFormat::Parquet)
            .partition(Struct::empty())
            .record_count(10)
            .file_size_in_bytes(100)
            .value_counts(HashMap::from([(1, 10), (2, 10), (3, 10)]))
            .null_value_counts(HashMap::from([(1, 2), (2, 0), (3, 0)]))
            .nan_value_counts(HashMap::from([(3, 1)]))
            .lower_bounds(HashMap::from([
                (1, Datum::long(10)),
                (2, Datum::string("apple")),
                (3, Datum::double(1.0)),
            ]))
            .upper_bounds(HashMap::from([
                (1, Datum::long(20)),
                (2, Datum::string("banana")),
                (3, Datum::double(2.0)),
            ]))
            .build()
            .expect("data file")
    }

    fn cmp(id: i32, ty: PrimitiveType, op: CmpOp, value: Datum) -> Predicate {
        Predicate::Compare {
            field: field(id, ty),
            op,
            value,
        }
    }

    // Catches a file removed whole although one of its rows does not match (a wrong
    // direction at a bound, a null or NaN row forgotten: its outcome is not TRUE), and a
    // proof never made where the bounds give it. Field 2 ("apple".."banana", no nulls)
    // decides; field 1 has nulls; field 3 a NaN.
    #[test]
    fn every_row_matches_only_where_the_bounds_prove_it() {
        let f = file();
        let string = |op, v: &str| cmp(2, PrimitiveType::String, op, Datum::string(v));
        for (p, must) in [
            (Predicate::True, true),
            (string(CmpOp::GtEq, "apple"), true),
            (string(CmpOp::Gt, "apple"), false),
            (string(CmpOp::LtEq, "banana"), true),
            (string(CmpOp::Lt, "banana"), false),
            (string(CmpOp::NotEq, "cherry"), true),
            (string(CmpOp::NotEq, "apricot"), false),
            (Predicate::not(string(CmpOp::Lt, "apple")), true),
            (
                Predicate::and(string(CmpOp::GtEq, "a"), string(CmpOp::Lt, "c")),
                true,
            ),
            (
                Predicate::or(string(CmpOp::Lt, "b"), string(CmpOp::GtEq, "b")),
                false,
            ),
            // Field 1's bounds say every non-null value matches, but two rows are null.
            (
                cmp(1, PrimitiveType::Long, CmpOp::GtEq, Datum::long(0)),
                false,
            ),
            (
                Predicate::not(Predicate::IsNull {
                    field: field(2, PrimitiveType::String),
                }),
                true,
            ),
            // Field 3 holds a NaN, which the bounds leave out.
            (
                cmp(3, PrimitiveType::Double, CmpOp::GtEq, Datum::double(0.0)),
                false,
            ),
        ] {
            assert_eq!(p.must_match_file(&f), must, "{p}");
        }
    }

    // Catches a bounds check that rules out a file holding a matching row (a wrong
    // comparison direction or an off-by-one at a bound), and one that never rules out.
    #[test]
    fn bounds_rule_out_only_files_without_a_match() {
        let f = file();
        let long = |op, v: i64| cmp(1, PrimitiveType::Long, op, Datum::long(v));
        for (p, may) in [
            (long(CmpOp::Eq, 10), true),
            (long(CmpOp::Eq, 20), true),
            (long(CmpOp::Eq, 21), false),
            (long(CmpOp::Eq, 9), false),
            (long(CmpOp::Lt, 10), false),
            (long(CmpOp::Lt, 11), true),
            (long(CmpOp::LtEq, 10), true),
            (long(CmpOp::Gt, 20), false),
            (long(CmpOp::GtEq, 20), true),
            (long(CmpOp::NotEq, 15), true),
            (Predicate::not(long(CmpOp::Lt, 30)), false),
            (Predicate::not(long(CmpOp::Lt, 15)), true),
            (
                Predicate::In {
                    field: field(1, PrimitiveType::Long),
                    values: vec![Datum::long(1), Datum::long(30)],
                },
                false,
            ),
            (
                Predicate::In {
                    field: field(1, PrimitiveType::Long),
                    values: vec![Datum::long(1), Datum::long(12)],
                },
                true,
            ),
            (
                Predicate::IsNull {
                    field: field(1, PrimitiveType::Long),
                },
                true,
            ),
            (
                Predicate::IsNull {
                    field: field(2, PrimitiveType::String),
                },
                false,
            ),
            (
                Predicate::not(Predicate::IsNull {
                    field: field(2, PrimitiveType::String),
                }),
                true,
            ),
            (
                Predicate::and(long(CmpOp::Gt, 12), long(CmpOp::Lt, 5)),
                false,
            ),
            (
                Predicate::or(long(CmpOp::Gt, 25), long(CmpOp::Lt, 5)),
                false,
            ),
            (
                Predicate::or(long(CmpOp::Gt, 25), long(CmpOp::Lt, 15)),
                true,
            ),
            (
                Predicate::Like {
                    field: field(2, PrimitiveType::String),
                    pattern: "ba%".into(),
                },
                true,
            ),
            (
                Predicate::Like {
                    field: field(2, PrimitiveType::String),
                    pattern: "cherry%".into(),
                },
                false,
            ),
            (
                Predicate::Like {
                    field: field(2, PrimitiveType::String),
                    pattern: "aa%".into(),
                },
                false,
            ),
            (
                Predicate::Like {
                    field: field(2, PrimitiveType::String),
                    pattern: "%x".into(),
                },
                true,
            ),
            // NaN lies above every bound: `> 5` may match the NaN row.
            (
                cmp(3, PrimitiveType::Double, CmpOp::Gt, Datum::double(5.0)),
                true,
            ),
            // A field without statistics is never ruled out.
            (cmp(9, PrimitiveType::Long, CmpOp::Eq, Datum::long(1)), true),
            // A bound of another type (an int written before a promotion) gives no verdict.
            (cmp(1, PrimitiveType::Int, CmpOp::Eq, Datum::int(99)), true),
        ] {
            assert_eq!(p.may_match_file(&f), may, "{p}");
        }
    }
}
