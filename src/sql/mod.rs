//! The SQL skade runs over Flight SQL: one `SELECT` over one table, with a projection, a
//! filter and a limit (the subset is [`parse()`]'s), read through the table's Iceberg scan
//! (`DoGet`'s read path, which applies delete files).
//!
//! [`parse()`] turns text into a [`Select`]; [`Select::bind`] resolves it against a
//! table's schema and bound parameters into output columns and a [`Predicate`] over
//! field ids; [`evaluate`]/[`filter`] run the predicate on Arrow batches with Arrow's
//! kernels, [`project`] picks the output columns. The predicate is the piece a `DELETE`
//! reuses: it is typed by the Iceberg schema, evaluates on any batch that carries field
//! ids, and [`Predicate::may_match_file`] rules data files out from their column bounds.
//!
//! No query engine (DataFusion) is embedded: README, "Reading with SQL", says why.

mod error;
mod eval;
mod parse;
mod predicate;
mod value;

pub use error::SqlError;
pub use eval::{Output, evaluate, filter, output_schema, project};
pub use parse::{Bound, Delete, Item, Name, Select, Statement, parse, parse_statement};
pub use predicate::{CmpOp, Field, Predicate};
