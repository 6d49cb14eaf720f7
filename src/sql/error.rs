//! What a statement can be refused or fail for, each naming what the user wrote.

/// Why a SQL statement is refused, or its evaluation failed.
#[derive(Debug, thiserror::Error)]
pub enum SqlError {
    /// The text does not parse as SQL.
    #[error("the SQL does not parse: {reason}")]
    Parse {
        /// The parser's words.
        reason: String,
    },
    /// The statement is SQL, but outside the subset skade runs (docs/reading.md, "SQL").
    #[error(
        "skade's SQL does not support {what}; it runs SELECT <columns> FROM <table> [WHERE <filter>] [LIMIT <n>]"
    )]
    Unsupported {
        /// What was used, as the user wrote it where it helps (`ORDER BY`, `JOIN`,
        /// `the function upper(name)`, `DELETE`).
        what: String,
    },
    /// The FROM clause names a table the catalog does not have.
    #[error("table {table} does not exist")]
    UnknownTable {
        /// The table as resolved (`ns.table`).
        table: String,
    },
    /// A column (or a nested field) the table does not have.
    #[error("table {table} has no column {column}")]
    UnknownColumn {
        /// The table.
        table: String,
        /// The column as written.
        column: String,
    },
    /// A literal or parameter that is not a value of its column's type.
    #[error("{value} is not a value of column {column} ({ty}): {reason}")]
    BadValue {
        /// The column compared with.
        column: String,
        /// Its Iceberg type.
        ty: String,
        /// The literal as written, or `parameter N`.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The bound parameters do not fit the statement's placeholders.
    #[error("parameters: {reason}")]
    Parameters {
        /// What does not fit.
        reason: String,
    },
    /// A Flight SQL handle or ticket that skade did not give out (or that was altered).
    #[error("invalid {what}: {reason}")]
    BadHandle {
        /// `prepared statement handle` or `query ticket`.
        what: &'static str,
        /// Why it does not decode.
        reason: String,
    },
    /// An Arrow kernel failed evaluating a predicate or a projection on a batch whose
    /// columns should have fitted it: the server's failure, not the statement's.
    #[error("evaluating the statement failed: {reason}")]
    Eval {
        /// Arrow's words.
        reason: String,
    },
}
