//! SQL text to a [`Select`] (with `sqlparser`, generic dialect), and a `Select` bound to a
//! table's schema and parameters ([`Select::bind`]): names resolved to field ids,
//! literals and parameters typed as their columns, the `WHERE` clause a [`Predicate`].
//!
//! The subset: `SELECT * | <column> [AS <name>], … FROM [<catalog>.]<namespace…>.<table>
//! [AS <alias>] [WHERE <filter>] [LIMIT <n>]`, where a column is a top-level column or a
//! nested field (`s.a`), and a filter combines with `AND`, `OR`, `NOT` and parentheses
//! the comparisons `<column> <op> <value>` (`=`, `<>`, `!=`, `<`, `<=`, `>`, `>=`, either
//! side), `<column> [NOT] IN (<value>, …)`, `<column> IS [NOT] NULL`, `<column> [NOT]
//! BETWEEN <value> AND <value>`, `<column> [NOT] LIKE '<pattern>'` and a boolean column alone; a value is a
//! literal (number, string, `TRUE`/`FALSE`, `X'…'`, `DATE '…'`, `TIME '…'`,
//! `TIMESTAMP '…'`) or a parameter (`?` in order, or `$n`). Unquoted names match a
//! column exactly, else case-insensitively when only one column matches; quoted names
//! (`"Name"`) match exactly. Anything else is [`SqlError::Unsupported`] naming it.

use arrow_array::RecordBatch;
use iceberg::spec::{NestedFieldRef, PrimitiveType, Schema, Type};
use sqlparser::ast::{
    self, BinaryOperator, Expr, GroupByExpr, LimitClause, ObjectNamePart, SelectItem, SetExpr,
    Statement as AstStatement, TableFactor, UnaryOperator, Value,
};
use sqlparser::dialect::GenericDialect;
use sqlparser::parser::Parser;

use super::SqlError;
use super::eval::Output;
use super::predicate::{CmpOp, Field, Predicate};
use super::value::{Literal, array_datum, literal_datum};

/// Deepest nesting of expressions the parser accepts (sqlparser's own guard against a
/// stack overflow on hostile input).
const RECURSION_LIMIT: usize = 64;

/// A name as written: its text and whether it was quoted (quoted names match exactly).
#[derive(Debug, Clone, PartialEq)]
pub struct Name {
    /// The text, without quotes.
    pub value: String,
    /// Whether it was quoted.
    pub quoted: bool,
}

impl From<&ast::Ident> for Name {
    fn from(ident: &ast::Ident) -> Self {
        Name {
            value: ident.value.clone(),
            quoted: ident.quote_style.is_some(),
        }
    }
}

fn dotted(names: &[Name]) -> String {
    names
        .iter()
        .map(|n| n.value.as_str())
        .collect::<Vec<_>>()
        .join(".")
}

/// One item of the select list.
#[derive(Debug, Clone, PartialEq)]
pub enum Item {
    /// `*` (or `<table>.*`): every top-level column, in schema order.
    Wildcard,
    /// A column or nested field, and the name it gets in the result.
    Column {
        /// The name as written (`s.a` is two parts).
        path: Vec<Name>,
        /// `AS <alias>`.
        alias: Option<String>,
    },
}

/// A value in a filter: a literal, or the n-th parameter (0-based).
#[derive(Debug, Clone, PartialEq)]
enum Operand {
    Literal(Literal),
    Param(usize),
}

/// A filter before its names are resolved.
#[derive(Debug, Clone, PartialEq)]
enum Cond {
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
    Not(Box<Cond>),
    Cmp {
        column: Vec<Name>,
        op: CmpOp,
        value: Operand,
    },
    In {
        column: Vec<Name>,
        values: Vec<Operand>,
        negated: bool,
    },
    IsNull {
        column: Vec<Name>,
        negated: bool,
    },
    Between {
        column: Vec<Name>,
        low: Operand,
        high: Operand,
        negated: bool,
    },
    Like {
        column: Vec<Name>,
        pattern: Operand,
        negated: bool,
    },
}

impl Cond {
    /// The column of a leaf term that takes a parameter; `None` for other terms.
    fn param_column(&self) -> Option<&[Name]> {
        let is_param = |o: &Operand| matches!(o, Operand::Param(_));
        match self {
            Cond::Cmp { column, value, .. } if is_param(value) => Some(column),
            Cond::In { column, values, .. } if values.iter().any(is_param) => Some(column),
            Cond::Between {
                column, low, high, ..
            } if is_param(low) || is_param(high) => Some(column),
            Cond::Like {
                column, pattern, ..
            } if is_param(pattern) => Some(column),
            _ => None,
        }
    }
}

/// A parsed `SELECT`, names not yet resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Select {
    /// The table's name parts as written: `[catalog.]namespace….table` (one part: the
    /// table in namespace `default`).
    pub table: Vec<Name>,
    /// `AS <alias>` of the table, which may qualify column names.
    alias: Option<String>,
    /// The select list.
    pub items: Vec<Item>,
    filter: Option<Cond>,
    /// `LIMIT <n>`.
    pub limit: Option<u64>,
    /// How many parameters the statement takes.
    pub parameters: usize,
}

/// A [`Select`] resolved against a table's schema and its parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Bound {
    /// The output columns.
    pub outputs: Vec<Output>,
    /// The filter (`Predicate::True` without `WHERE`).
    pub predicate: Predicate,
    /// `LIMIT <n>`.
    pub limit: Option<u64>,
    /// The top-level columns the outputs and the filter read, by id (what a scan
    /// selects).
    pub columns: Vec<i32>,
}

fn unsupported(what: impl Into<String>) -> SqlError {
    SqlError::Unsupported { what: what.into() }
}

/// The kind of a statement that is not a query, for the message refusing it.
fn statement_kind(statement: &AstStatement) -> String {
    let text = statement.to_string();
    let words: Vec<&str> = text.split_whitespace().take(2).collect();
    match words.first().map(|w| w.to_ascii_uppercase()) {
        Some(first) if ["CREATE", "DROP", "ALTER"].contains(&first.as_str()) => {
            words.join(" ").to_ascii_uppercase()
        }
        Some(first) => first,
        None => "an empty statement".to_string(),
    }
}

/// A statement of skade's SQL: a query or a `DELETE`.
#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `SELECT …`.
    Select(Select),
    /// `DELETE FROM …`.
    Delete(Delete),
}

/// A parsed `DELETE FROM [<catalog>.]<namespace…>.<table> [AS <alias>] [WHERE <filter>]`
/// (the filter as [`Select`]'s), names not yet resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Delete {
    /// The table and the filter, as a select of no columns.
    select: Select,
}

impl Delete {
    /// The table's name parts without a leading catalog name (as
    /// [`Select::table_path`]).
    pub fn table_path(&self, catalog: &str) -> Vec<String> {
        self.select.table_path(catalog)
    }

    /// How many parameters the statement takes.
    pub fn parameters(&self) -> usize {
        self.select.parameters
    }

    /// The type each parameter is compared with, as [`Select::parameter_types`].
    ///
    /// # Errors
    /// As [`Self::bind`].
    pub fn parameter_types(
        &self,
        schema: &Schema,
        table: &str,
    ) -> Result<Vec<Option<PrimitiveType>>, SqlError> {
        self.select.parameter_types(schema, table)
    }

    /// The rows to delete: the filter resolved against `schema` (of the table named
    /// `table`) with the parameters of `params` (one row, a column per parameter);
    /// `Predicate::True` without `WHERE` (every row).
    ///
    /// # Errors
    /// As [`Select::bind`].
    pub fn bind(
        &self,
        schema: &Schema,
        table: &str,
        params: Option<&RecordBatch>,
    ) -> Result<Predicate, SqlError> {
        Ok(self.select.bind(schema, table, params)?.predicate)
    }

    /// Checks names and literals against `schema` before parameters are bound (a
    /// prepared `DELETE`).
    ///
    /// # Errors
    /// As [`Select::prepare`].
    pub fn prepare(&self, schema: &Schema, table: &str) -> Result<(), SqlError> {
        self.select.prepare(schema, table).map(|_| ())
    }
}

/// Parses `sql`: one `SELECT` in the subset.
///
/// # Errors
/// [`SqlError::Parse`] for text that is not SQL; [`SqlError::Unsupported`] naming the
/// first construct outside the subset (`DELETE`, `ORDER BY`, `JOIN`, a function, …).
pub fn parse(sql: &str) -> Result<Select, SqlError> {
    match parse_statement(sql)? {
        Statement::Select(select) => Ok(select),
        Statement::Delete(_) => Err(unsupported(
            "DELETE (run it as an update: cursor.execute, executeUpdate)",
        )),
    }
}

/// Parses `sql`: one `SELECT` or `DELETE` in the subset (module docs; a `DELETE` takes
/// the same filters).
///
/// # Errors
/// [`SqlError::Parse`] for text that is not SQL; [`SqlError::Unsupported`] naming the
/// first construct outside the subset (`INSERT`, `UPDATE`, `ORDER BY`, `JOIN`, `USING`,
/// `RETURNING`, a function, …).
pub fn parse_statement(sql: &str) -> Result<Statement, SqlError> {
    let dialect = GenericDialect {};
    let statements = Parser::new(&dialect)
        .with_recursion_limit(RECURSION_LIMIT)
        .try_with_sql(sql)
        .and_then(|mut p| p.parse_statements())
        .map_err(|e| SqlError::Parse {
            reason: e.to_string(),
        })?;
    let statement = match statements.as_slice() {
        [one] => one,
        [] => return Err(unsupported("an empty statement")),
        _ => return Err(unsupported("several statements in one request")),
    };
    let mut params = Placeholders::default();
    let select = match statement {
        AstStatement::Query(query) => query_select(query, &mut params)?,
        AstStatement::Delete(delete) => {
            let select = delete_select(delete, &mut params)?;
            return Ok(Statement::Delete(Delete {
                select: Select {
                    parameters: params.count,
                    ..select
                },
            }));
        }
        other => {
            return Err(unsupported(format!(
                "{} (skade's SQL reads with SELECT and changes rows with DELETE)",
                statement_kind(other)
            )));
        }
    };
    Ok(Statement::Select(Select {
        parameters: params.count,
        ..select
    }))
}

/// A `DELETE`'s table and filter, as a select of no columns.
fn delete_select(delete: &ast::Delete, params: &mut Placeholders) -> Result<Select, SqlError> {
    let refuse = |present: bool, what: &str| {
        if present {
            Err(unsupported(format!("{what} in DELETE")))
        } else {
            Ok(())
        }
    };
    refuse(!delete.tables.is_empty(), "a multi-table DELETE")?;
    refuse(delete.using.is_some(), "USING")?;
    refuse(delete.returning.is_some(), "RETURNING")?;
    refuse(delete.output.is_some(), "OUTPUT")?;
    refuse(!delete.order_by.is_empty(), "ORDER BY")?;
    refuse(delete.limit.is_some(), "LIMIT")?;
    refuse(delete.settings.is_some(), "SETTINGS")?;
    refuse(delete.on_cluster.is_some(), "ON CLUSTER")?;
    refuse(!delete.optimizer_hints.is_empty(), "optimizer hints")?;
    let from = match &delete.from {
        ast::FromTable::WithFromKeyword(from) | ast::FromTable::WithoutKeyword(from) => from,
    };
    let (table, alias) = from_table(from)?;
    let filter = delete
        .selection
        .as_ref()
        .map(|e| cond(e, params))
        .transpose()?;
    Ok(Select {
        table,
        alias,
        items: Vec::new(),
        filter,
        limit: None,
        parameters: 0,
    })
}

/// Numbers the parameters in order of appearance (`?`), or by their number (`$n`).
#[derive(Default)]
struct Placeholders {
    count: usize,
    positional: bool,
    numbered: bool,
}

impl Placeholders {
    fn take(&mut self, text: &str) -> Result<usize, SqlError> {
        if text == "?" {
            if self.numbered {
                return Err(unsupported("mixing ? and $n parameters"));
            }
            self.positional = true;
            self.count += 1;
            return Ok(self.count - 1);
        }
        let n: usize = text
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .filter(|n| *n >= 1)
            .ok_or_else(|| unsupported(format!("the parameter {text} (use ? or $1, $2, …)")))?;
        if self.positional {
            return Err(unsupported("mixing ? and $n parameters"));
        }
        self.numbered = true;
        self.count = self.count.max(n);
        Ok(n - 1)
    }
}

fn query_select(query: &ast::Query, params: &mut Placeholders) -> Result<Select, SqlError> {
    if query.with.is_some() {
        return Err(unsupported("WITH"));
    }
    if query.order_by.is_some() {
        return Err(unsupported("ORDER BY"));
    }
    if query.fetch.is_some() {
        return Err(unsupported("FETCH"));
    }
    if !query.locks.is_empty() {
        return Err(unsupported("FOR UPDATE / FOR SHARE"));
    }
    if query.for_clause.is_some() || query.settings.is_some() || query.format_clause.is_some() {
        return Err(unsupported("FOR / SETTINGS / FORMAT clauses"));
    }
    if !query.pipe_operators.is_empty() {
        return Err(unsupported("pipe operators"));
    }
    let limit = match &query.limit_clause {
        None => None,
        Some(LimitClause::LimitOffset {
            limit,
            offset,
            limit_by,
        }) => {
            if offset.is_some() {
                return Err(unsupported("OFFSET"));
            }
            if !limit_by.is_empty() {
                return Err(unsupported("LIMIT BY"));
            }
            match limit {
                None => None,
                Some(Expr::Value(v)) => match &v.value {
                    Value::Number(n, _) => Some(n.parse::<u64>().map_err(|_| {
                        unsupported(format!("LIMIT {n} (a count of rows, 0 or more)"))
                    })?),
                    other => return Err(unsupported(format!("LIMIT {other}"))),
                },
                Some(other) => return Err(unsupported(format!("LIMIT {other}"))),
            }
        }
        Some(LimitClause::OffsetCommaLimit { .. }) => {
            return Err(unsupported("LIMIT <offset>, <n>"));
        }
    };
    let select = match query.body.as_ref() {
        SetExpr::Select(select) => select,
        SetExpr::Query(inner) => return Err(unsupported(format!("the nested query ({inner})"))),
        SetExpr::SetOperation { op, .. } => return Err(unsupported(op.to_string())),
        SetExpr::Values(_) => return Err(unsupported("VALUES")),
        SetExpr::Insert(_) => return Err(unsupported("INSERT")),
        SetExpr::Update(_) => return Err(unsupported("UPDATE")),
        SetExpr::Delete(_) => return Err(unsupported("DELETE")),
        SetExpr::Merge(_) => return Err(unsupported("MERGE")),
        SetExpr::Table(_) => return Err(unsupported("TABLE <name>")),
    };
    check_select_clauses(select)?;
    let (table, alias) = from_table(&select.from)?;
    let items = select
        .projection
        .iter()
        .map(select_item)
        .collect::<Result<Vec<_>, _>>()?;
    let filter = select
        .selection
        .as_ref()
        .map(|e| cond(e, params))
        .transpose()?;
    Ok(Select {
        table,
        alias,
        items,
        filter,
        limit,
        parameters: 0,
    })
}

fn check_select_clauses(select: &ast::Select) -> Result<(), SqlError> {
    let refuse = |present: bool, what: &str| {
        if present {
            Err(unsupported(what))
        } else {
            Ok(())
        }
    };
    refuse(select.distinct.is_some(), "DISTINCT")?;
    refuse(select.top.is_some(), "TOP")?;
    refuse(select.into.is_some(), "SELECT INTO")?;
    refuse(!select.lateral_views.is_empty(), "LATERAL VIEW")?;
    refuse(select.prewhere.is_some(), "PREWHERE")?;
    refuse(!select.connect_by.is_empty(), "CONNECT BY")?;
    let grouped = match &select.group_by {
        GroupByExpr::All(_) => true,
        GroupByExpr::Expressions(exprs, modifiers) => !exprs.is_empty() || !modifiers.is_empty(),
    };
    refuse(grouped, "GROUP BY")?;
    refuse(!select.cluster_by.is_empty(), "CLUSTER BY")?;
    refuse(!select.distribute_by.is_empty(), "DISTRIBUTE BY")?;
    refuse(!select.sort_by.is_empty(), "SORT BY")?;
    refuse(select.having.is_some(), "HAVING")?;
    refuse(!select.named_window.is_empty(), "WINDOW")?;
    refuse(select.qualify.is_some(), "QUALIFY")?;
    refuse(select.exclude.is_some(), "EXCLUDE")?;
    refuse(
        select.value_table_mode.is_some(),
        "SELECT AS STRUCT / VALUE",
    )?;
    refuse(!select.optimizer_hints.is_empty(), "optimizer hints")?;
    refuse(select.select_modifiers.is_some(), "SELECT modifiers")?;
    Ok(())
}

fn from_table(from: &[ast::TableWithJoins]) -> Result<(Vec<Name>, Option<String>), SqlError> {
    let one = match from {
        [] => return Err(unsupported("SELECT without FROM")),
        [one] => one,
        _ => return Err(unsupported("several tables in FROM (a join)")),
    };
    if !one.joins.is_empty() {
        return Err(unsupported("JOIN"));
    }
    let TableFactor::Table {
        name,
        alias,
        args,
        with_hints,
        version,
        with_ordinality,
        partitions,
        json_path,
        sample,
        index_directives,
        inheritance,
    } = &one.relation
    else {
        return Err(unsupported(format!(
            "FROM {} (only a table name)",
            one.relation
        )));
    };
    if args.is_some()
        || !with_hints.is_empty()
        || version.is_some()
        || *with_ordinality
        || !partitions.is_empty()
        || json_path.is_some()
        || sample.is_some()
        || !index_directives.is_empty()
        || inheritance.is_some()
    {
        return Err(unsupported(format!(
            "FROM {} (only a table name)",
            one.relation
        )));
    }
    let parts = name
        .0
        .iter()
        .map(|part| match part {
            ObjectNamePart::Identifier(ident) => Ok(Name::from(ident)),
            other => Err(unsupported(format!("the table name part {other}"))),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let alias = match alias {
        None => None,
        Some(alias) if alias.columns.is_empty() => Some(alias.name.value.clone()),
        Some(alias) => return Err(unsupported(format!("column aliases in {alias}"))),
    };
    Ok((parts, alias))
}

fn select_item(item: &SelectItem) -> Result<Item, SqlError> {
    let column = |expr: &Expr| -> Result<Vec<Name>, SqlError> {
        column_name(expr).ok_or_else(|| {
            unsupported(format!(
                "the expression {expr} in the select list (only columns and *)"
            ))
        })
    };
    match item {
        SelectItem::Wildcard(options) if options_plain(options) => Ok(Item::Wildcard),
        SelectItem::QualifiedWildcard(_, options) if options_plain(options) => Ok(Item::Wildcard),
        SelectItem::UnnamedExpr(expr) => Ok(Item::Column {
            path: column(expr)?,
            alias: None,
        }),
        SelectItem::ExprWithAlias { expr, alias } => Ok(Item::Column {
            path: column(expr)?,
            alias: Some(alias.value.clone()),
        }),
        other => Err(unsupported(format!("the select item {other}"))),
    }
}

fn options_plain(options: &ast::WildcardAdditionalOptions) -> bool {
    options.opt_ilike.is_none()
        && options.opt_exclude.is_none()
        && options.opt_except.is_none()
        && options.opt_replace.is_none()
        && options.opt_rename.is_none()
}

/// The name parts of a column reference (`a`, `s.a`, `t.a`), `None` for anything else.
fn column_name(expr: &Expr) -> Option<Vec<Name>> {
    match expr {
        Expr::Identifier(ident) => Some(vec![Name::from(ident)]),
        Expr::CompoundIdentifier(idents) => Some(idents.iter().map(Name::from).collect()),
        Expr::Nested(inner) => column_name(inner),
        _ => None,
    }
}

fn operand(expr: &Expr, params: &mut Placeholders) -> Option<Result<Operand, SqlError>> {
    let literal = |l: Literal| Some(Ok(Operand::Literal(l)));
    match expr {
        Expr::Nested(inner) => operand(inner, params),
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => literal(Literal::Number(n.clone())),
            Value::SingleQuotedString(s) => literal(Literal::Text(s.clone())),
            Value::Boolean(b) => literal(Literal::Bool(*b)),
            Value::HexStringLiteral(h) => literal(Literal::Hex(h.clone())),
            Value::Null => literal(Literal::Null),
            Value::Placeholder(p) => Some(params.take(p).map(Operand::Param)),
            other => Some(Err(unsupported(format!("the literal {other}")))),
        },
        Expr::UnaryOp {
            op: op @ (UnaryOperator::Minus | UnaryOperator::Plus),
            expr: inner,
        } => match inner.as_ref() {
            Expr::Value(v) => match &v.value {
                Value::Number(n, _) => {
                    let sign = if *op == UnaryOperator::Minus { "-" } else { "" };
                    literal(Literal::Number(format!("{sign}{n}")))
                }
                _ => Some(Err(unsupported(format!("the expression {expr}")))),
            },
            _ => Some(Err(unsupported(format!("the expression {expr}")))),
        },
        Expr::TypedString(typed) => {
            let allowed = matches!(
                typed.data_type,
                ast::DataType::Date
                    | ast::DataType::Time(..)
                    | ast::DataType::Timestamp(..)
                    | ast::DataType::Datetime(..)
            );
            match (&typed.value.value, allowed) {
                (Value::SingleQuotedString(s), true) => literal(Literal::Text(s.clone())),
                _ => Some(Err(unsupported(format!("the typed literal {expr}")))),
            }
        }
        _ => None,
    }
}

fn cmp_op(op: &BinaryOperator) -> Option<CmpOp> {
    Some(match op {
        BinaryOperator::Eq => CmpOp::Eq,
        BinaryOperator::NotEq => CmpOp::NotEq,
        BinaryOperator::Lt => CmpOp::Lt,
        BinaryOperator::LtEq => CmpOp::LtEq,
        BinaryOperator::Gt => CmpOp::Gt,
        BinaryOperator::GtEq => CmpOp::GtEq,
        _ => return None,
    })
}

/// A column operand of a filter; anything else is refused naming `context`.
fn filter_column(expr: &Expr, context: &Expr) -> Result<Vec<Name>, SqlError> {
    column_name(expr).ok_or_else(|| {
        unsupported(format!(
            "{expr} in {context} (a filter compares a column with values)"
        ))
    })
}

fn value_operand(
    expr: &Expr,
    context: &Expr,
    params: &mut Placeholders,
) -> Result<Operand, SqlError> {
    operand(expr, params).unwrap_or_else(|| {
        Err(unsupported(format!(
            "{expr} in {context} (a value is a literal or a parameter)"
        )))
    })
}

/// A `WHERE` expression as a [`Cond`], parameters numbered by `params`.
///
/// # Errors
/// [`SqlError::Unsupported`] naming the first construct outside the subset.
fn cond(expr: &Expr, params: &mut Placeholders) -> Result<Cond, SqlError> {
    match expr {
        Expr::Nested(inner) => cond(inner, params),
        Expr::BinaryOp { left, op, right } => match op {
            BinaryOperator::And => Ok(Cond::And(
                Box::new(cond(left, params)?),
                Box::new(cond(right, params)?),
            )),
            BinaryOperator::Or => Ok(Cond::Or(
                Box::new(cond(left, params)?),
                Box::new(cond(right, params)?),
            )),
            _ => comparison(expr, left, op, right, params),
        },
        Expr::UnaryOp {
            op: UnaryOperator::Not,
            expr: inner,
        } => Ok(Cond::Not(Box::new(cond(inner, params)?))),
        Expr::IsNull(inner) => Ok(Cond::IsNull {
            column: filter_column(inner, expr)?,
            negated: false,
        }),
        Expr::IsNotNull(inner) => Ok(Cond::IsNull {
            column: filter_column(inner, expr)?,
            negated: true,
        }),
        Expr::In {
            expr: inner,
            target,
            negated,
            global: false,
        } => in_list(expr, inner, target, *negated, params),
        Expr::Between {
            expr: inner,
            negated,
            low,
            high,
        } => Ok(Cond::Between {
            column: filter_column(inner, expr)?,
            low: value_operand(low, expr, params)?,
            high: value_operand(high, expr, params)?,
            negated: *negated,
        }),
        Expr::Like {
            negated,
            any: false,
            expr: inner,
            pattern,
            escape_char: None,
        } => Ok(Cond::Like {
            column: filter_column(inner, expr)?,
            pattern: value_operand(pattern, expr, params)?,
            negated: *negated,
        }),
        Expr::Like { .. } => Err(unsupported(format!("LIKE with ANY or ESCAPE ({expr})"))),
        Expr::ILike { .. } => Err(unsupported(format!("ILIKE ({expr})"))),
        Expr::Function(f) => Err(unsupported(format!("the function {f}"))),
        // A bare column is a boolean column's value: `WHERE flag`, `WHERE NOT flag`.
        Expr::Identifier(_) | Expr::CompoundIdentifier(_) => Ok(Cond::Cmp {
            column: filter_column(expr, expr)?,
            op: CmpOp::Eq,
            value: Operand::Literal(Literal::Bool(true)),
        }),
        other => Err(unsupported(format!("the filter {other}"))),
    }
}

/// `left <op> right` (the whole `expr`) as a comparison of a column with a value; either
/// side may be the column. The value is read in textual order so `?` parameters number
/// left to right.
///
/// # Errors
/// [`SqlError::Unsupported`] for another operator, two columns or two values.
fn comparison(
    expr: &Expr,
    left: &Expr,
    op: &BinaryOperator,
    right: &Expr,
    params: &mut Placeholders,
) -> Result<Cond, SqlError> {
    let Some(op) = cmp_op(op) else {
        return Err(unsupported(format!("the operator {op} (in {expr})")));
    };
    match (column_name(left), column_name(right)) {
        (Some(_), Some(_)) => Err(unsupported(format!("comparing two columns ({expr})"))),
        (Some(column), None) => Ok(Cond::Cmp {
            column,
            op,
            value: value_operand(right, expr, params)?,
        }),
        (None, Some(column)) => Ok(Cond::Cmp {
            column,
            op: op.flipped(),
            value: value_operand(left, expr, params)?,
        }),
        (None, None) => Err(unsupported(format!(
            "{expr} (a filter compares a column with values)"
        ))),
    }
}

/// `inner [NOT] IN (<values>)` (the whole `expr`).
///
/// # Errors
/// [`SqlError::Unsupported`] for a subquery, a table or an empty list.
fn in_list(
    expr: &Expr,
    inner: &Expr,
    target: &ast::InTarget,
    negated: bool,
    params: &mut Placeholders,
) -> Result<Cond, SqlError> {
    let column = filter_column(inner, expr)?;
    let ast::InTarget::List(list) = target else {
        return Err(unsupported(format!("IN with a subquery or table ({expr})")));
    };
    if list.is_empty() {
        return Err(unsupported(format!("an empty IN list ({expr})")));
    }
    let values = list
        .iter()
        .map(|v| value_operand(v, expr, params))
        .collect::<Result<_, _>>()?;
    Ok(Cond::In {
        column,
        values,
        negated,
    })
}

/// Resolves names against one table's schema.
struct Resolver<'a> {
    schema: &'a Schema,
    /// The table as written, and its alias: a first name part equal to either (and not
    /// a column) qualifies the column.
    qualifiers: Vec<String>,
    table: String,
}

impl Resolver<'_> {
    fn find<'f>(fields: &'f [NestedFieldRef], name: &Name) -> Option<&'f NestedFieldRef> {
        if let Some(exact) = fields.iter().find(|f| f.name == name.value) {
            return Some(exact);
        }
        if name.quoted {
            return None;
        }
        let mut folded = fields
            .iter()
            .filter(|f| f.name.eq_ignore_ascii_case(&name.value));
        match (folded.next(), folded.next()) {
            (Some(one), None) => Some(one),
            _ => None,
        }
    }

    /// The field a name path refers to: its ids from the top, its full name and type.
    fn resolve(&self, path: &[Name]) -> Result<(Vec<i32>, String, Type), SqlError> {
        let unknown = || SqlError::UnknownColumn {
            table: self.table.clone(),
            column: dotted(path),
        };
        let top = self.schema.as_struct().fields();
        let path = match path.split_first() {
            Some((first, rest))
                if !rest.is_empty()
                    && Self::find(top, first).is_none()
                    && self
                        .qualifiers
                        .iter()
                        .any(|q| q.eq_ignore_ascii_case(&first.value)) =>
            {
                rest
            }
            _ => path,
        };
        let mut fields = top;
        let mut ids = Vec::new();
        let mut names = Vec::new();
        let mut ty = None;
        for (i, name) in path.iter().enumerate() {
            let field = Self::find(fields, name).ok_or_else(unknown)?;
            ids.push(field.id);
            names.push(field.name.clone());
            let field_type = field.field_type.as_ref().clone();
            if i + 1 < path.len() {
                let Type::Struct(inner) = field.field_type.as_ref() else {
                    return Err(unknown());
                };
                fields = inner.fields();
            }
            ty = Some(field_type);
        }
        let ty = ty.ok_or_else(unknown)?;
        Ok((ids, names.join("."), ty))
    }

    /// A filter's field: a primitive one.
    fn field(&self, path: &[Name]) -> Result<Field, SqlError> {
        let field = self.any_field(path)?;
        if field.primitive().is_some() {
            return Ok(field);
        }
        let kind = match field.ty {
            Type::Struct(_) => "struct",
            Type::List(_) => "list",
            Type::Map(_) => "map",
            Type::Primitive(_) => "primitive",
        };
        Err(unsupported(format!(
            "comparing {}, a {kind} column, with a value (only IS [NOT] NULL)",
            field.name
        )))
    }

    /// A field of any type (for `IS [NOT] NULL`).
    fn any_field(&self, path: &[Name]) -> Result<Field, SqlError> {
        let (ids, name, ty) = self.resolve(path)?;
        Ok(Field {
            id: ids.last().copied().unwrap_or_default(),
            path: ids,
            name,
            ty,
        })
    }
}

impl Select {
    /// The table's name parts without a leading catalog name: `catalog` is dropped when
    /// the name has at least three parts and starts with it.
    pub fn table_path(&self, catalog: &str) -> Vec<String> {
        let mut parts: Vec<String> = self.table.iter().map(|n| n.value.clone()).collect();
        if parts.len() >= 3 && parts[0] == catalog {
            parts.remove(0);
        }
        parts
    }

    /// The type each parameter is compared with (`None` for one never used), as
    /// resolved against `schema`.
    ///
    /// # Errors
    /// As [`Self::bind`].
    pub fn parameter_types(
        &self,
        schema: &Schema,
        table: &str,
    ) -> Result<Vec<Option<PrimitiveType>>, SqlError> {
        let resolver = self.resolver(schema, table);
        let mut types = vec![None; self.parameters];
        if let Some(filter) = &self.filter {
            collect_param_types(filter, &resolver, &mut types)?;
        }
        Ok(types)
    }

    fn resolver<'a>(&self, schema: &'a Schema, table: &str) -> Resolver<'a> {
        let mut qualifiers: Vec<String> = self
            .table
            .last()
            .map(|n| n.value.clone())
            .into_iter()
            .collect();
        qualifiers.extend(self.alias.clone());
        Resolver {
            schema,
            qualifiers,
            table: table.to_string(),
        }
    }

    /// Resolves the statement against `schema` (of the table named `table`, for
    /// messages), typing literals and the parameters of `params` (one row, a column per
    /// parameter) as the columns they are compared with.
    ///
    /// # Errors
    /// [`SqlError::UnknownColumn`], [`SqlError::BadValue`] for a literal or parameter
    /// that is no value of its column's type, [`SqlError::Parameters`] when the
    /// parameters bound do not fit the statement's, [`SqlError::Unsupported`] for a
    /// filter on a non-primitive column or a LIKE on a non-string one.
    pub fn bind(
        &self,
        schema: &Schema,
        table: &str,
        params: Option<&RecordBatch>,
    ) -> Result<Bound, SqlError> {
        check_params(self.parameters, params)?;
        self.bind_with(schema, table, Params::Bound(params))
    }

    /// As [`Self::bind`] before parameters are bound (a prepared statement): names and
    /// literals are checked; a filter term with a parameter is left out of the
    /// predicate (which is then not the statement's: only its outputs are to be used).
    ///
    /// # Errors
    /// As [`Self::bind`], but never for parameters.
    pub fn prepare(&self, schema: &Schema, table: &str) -> Result<Bound, SqlError> {
        self.bind_with(schema, table, Params::Unbound)
    }

    /// Whether `params` fit the statement's parameters: one row, a column per
    /// parameter.
    ///
    /// # Errors
    /// [`SqlError::Parameters`] saying what does not fit.
    pub fn check_parameters(&self, params: &RecordBatch) -> Result<(), SqlError> {
        check_params(self.parameters, Some(params))
    }

    fn bind_with(
        &self,
        schema: &Schema,
        table: &str,
        params: Params<'_>,
    ) -> Result<Bound, SqlError> {
        let resolver = self.resolver(schema, table);
        let mut outputs = Vec::new();
        for item in &self.items {
            match item {
                Item::Wildcard => {
                    outputs.extend(schema.as_struct().fields().iter().map(|f| Output {
                        name: f.name.clone(),
                        path: vec![f.id],
                    }))
                }
                Item::Column { path, alias } => {
                    let (ids, _, _) = resolver.resolve(path)?;
                    let leaf = path.last().map(|n| n.value.clone()).unwrap_or_default();
                    let name = match alias {
                        Some(alias) => alias.clone(),
                        // The column's own spelling (an unquoted name matched without case).
                        None => schema
                            .field_by_id(*ids.last().unwrap_or(&0))
                            .map(|f| f.name.clone())
                            .unwrap_or(leaf),
                    };
                    outputs.push(Output { name, path: ids });
                }
            }
        }
        let predicate = match &self.filter {
            None => Predicate::True,
            Some(filter) => bind_cond(filter, &resolver, params)?,
        };
        let mut columns: Vec<i32> = Vec::new();
        for id in outputs
            .iter()
            .filter_map(|o| o.path.first().copied())
            .chain(predicate.column_ids())
        {
            if !columns.contains(&id) {
                columns.push(id);
            }
        }
        Ok(Bound {
            outputs,
            predicate,
            limit: self.limit,
            columns,
        })
    }
}

/// The parameters a statement is bound with.
#[derive(Clone, Copy)]
enum Params<'a> {
    /// Bound (or none, for a statement without parameters).
    Bound(Option<&'a RecordBatch>),
    /// Not bound yet: terms with a parameter are left out.
    Unbound,
}

fn check_params(expected: usize, params: Option<&RecordBatch>) -> Result<(), SqlError> {
    let bad = |reason: String| Err(SqlError::Parameters { reason });
    match params {
        None if expected == 0 => Ok(()),
        None => bad(format!(
            "the statement takes {expected} parameter(s) and none are bound (bind them, \
             e.g. cursor.execute(sql, parameters))"
        )),
        Some(batch) if batch.num_rows() != 1 => bad(format!(
            "{} rows of parameters are bound; skade runs a query with one row",
            batch.num_rows()
        )),
        Some(batch) if batch.num_columns() != expected => bad(format!(
            "{} parameter(s) are bound; the statement takes {expected}",
            batch.num_columns()
        )),
        Some(_) => Ok(()),
    }
}

fn collect_param_types(
    cond: &Cond,
    resolver: &Resolver<'_>,
    types: &mut [Option<PrimitiveType>],
) -> Result<(), SqlError> {
    let mut note = |column: &[Name], operand: &Operand| -> Result<(), SqlError> {
        if let Operand::Param(i) = operand {
            let field = resolver.field(column)?;
            if let Some(slot) = types.get_mut(*i) {
                *slot = field.primitive().cloned();
            }
        }
        Ok(())
    };
    match cond {
        Cond::And(a, b) | Cond::Or(a, b) => {
            collect_param_types(a, resolver, types)?;
            collect_param_types(b, resolver, types)
        }
        Cond::Not(c) => collect_param_types(c, resolver, types),
        Cond::Cmp { column, value, .. } => note(column, value),
        Cond::In { column, values, .. } => values.iter().try_for_each(|v| note(column, v)),
        Cond::IsNull { .. } => Ok(()),
        Cond::Between {
            column, low, high, ..
        } => {
            note(column, low)?;
            note(column, high)
        }
        Cond::Like {
            column, pattern, ..
        } => note(column, pattern),
    }
}

fn value_of(
    operand: &Operand,
    field: &Field,
    params: Option<&RecordBatch>,
) -> Result<iceberg::spec::Datum, SqlError> {
    match operand {
        Operand::Literal(literal) => literal_datum(literal, field),
        Operand::Param(i) => {
            let column =
                params
                    .and_then(|p| p.columns().get(*i))
                    .ok_or_else(|| SqlError::Parameters {
                        reason: format!("parameter {} is not bound", i + 1),
                    })?;
            array_datum(column, 0, field)
                .map_err(|e| match e {
                    SqlError::BadValue { column, ty, reason, .. } => SqlError::BadValue {
                        column,
                        ty,
                        value: format!("parameter {}", i + 1),
                        reason,
                    },
                    other => other,
                })?
                .ok_or_else(|| SqlError::BadValue {
                    column: field.name.clone(),
                    ty: field.ty.to_string(),
                    value: format!("parameter {}", i + 1),
                    reason: "it is NULL, and a comparison with NULL is never true; use IS NULL or IS NOT NULL".into(),
                })
        }
    }
}

/// `cond` resolved against `resolver`'s schema with `mode`'s parameters.
///
/// # Errors
/// As [`Select::bind`].
fn bind_cond(
    cond: &Cond,
    resolver: &Resolver<'_>,
    mode: Params<'_>,
) -> Result<Predicate, SqlError> {
    let negate = |p: Predicate, negated: bool| if negated { Predicate::not(p) } else { p };
    let params = match mode {
        Params::Bound(params) => params,
        Params::Unbound => {
            if let Some(column) = cond.param_column() {
                resolver.field(column)?;
                return Ok(Predicate::True);
            }
            None
        }
    };
    Ok(match cond {
        Cond::And(a, b) => Predicate::And(
            Box::new(bind_cond(a, resolver, mode)?),
            Box::new(bind_cond(b, resolver, mode)?),
        ),
        Cond::Or(a, b) => {
            Predicate::or(bind_cond(a, resolver, mode)?, bind_cond(b, resolver, mode)?)
        }
        Cond::Not(c) => Predicate::not(bind_cond(c, resolver, mode)?),
        Cond::Cmp { column, op, value } => {
            let field = resolver.field(column)?;
            let value = value_of(value, &field, params)?;
            Predicate::Compare {
                field,
                op: *op,
                value,
            }
        }
        Cond::In {
            column,
            values,
            negated,
        } => {
            let field = resolver.field(column)?;
            let values = values
                .iter()
                .map(|v| value_of(v, &field, params))
                .collect::<Result<_, _>>()?;
            negate(Predicate::In { field, values }, *negated)
        }
        Cond::IsNull { column, negated } => negate(
            Predicate::IsNull {
                field: resolver.any_field(column)?,
            },
            *negated,
        ),
        Cond::Between {
            column,
            low,
            high,
            negated,
        } => {
            let field = resolver.field(column)?;
            let low = value_of(low, &field, params)?;
            let high = value_of(high, &field, params)?;
            negate(between(field, low, high), *negated)
        }
        Cond::Like {
            column,
            pattern,
            negated,
        } => negate(like(resolver.field(column)?, pattern, params)?, *negated),
    })
}

/// `field BETWEEN low AND high`: `field >= low AND field <= high`.
fn between(field: Field, low: iceberg::spec::Datum, high: iceberg::spec::Datum) -> Predicate {
    Predicate::And(
        Box::new(Predicate::Compare {
            field: field.clone(),
            op: CmpOp::GtEq,
            value: low,
        }),
        Box::new(Predicate::Compare {
            field,
            op: CmpOp::LtEq,
            value: high,
        }),
    )
}

/// `field LIKE pattern` on a string field.
///
/// # Errors
/// [`SqlError::Unsupported`] for a field that is not a string or a pattern with an
/// escape; as [`value_of`].
fn like(
    field: Field,
    pattern: &Operand,
    params: Option<&RecordBatch>,
) -> Result<Predicate, SqlError> {
    if field.primitive() != Some(&PrimitiveType::String) {
        return Err(unsupported(format!(
            "LIKE on {}, a {} column (only string columns)",
            field.name, field.ty
        )));
    }
    let pattern = match value_of(pattern, &field, params)?.literal() {
        iceberg::spec::PrimitiveLiteral::String(s) => s.clone(),
        _ => String::new(),
    };
    if pattern.contains('\\') {
        return Err(unsupported(format!(
            "a LIKE pattern with a backslash ({pattern:?}): escapes are not supported"
        )));
    }
    Ok(Predicate::Like { field, pattern })
}

#[cfg(test)]
mod tests {
    use iceberg::spec::{Datum, NestedField, StructType};

    use super::*;

    fn schema() -> Schema {
        Schema::builder()
            .with_fields(vec![
                NestedField::required(1, "id", Type::Primitive(PrimitiveType::Long)).into(),
                NestedField::optional(2, "Name", Type::Primitive(PrimitiveType::String)).into(),
                NestedField::optional(
                    3,
                    "s",
                    Type::Struct(StructType::new(vec![
                        NestedField::optional(4, "a", Type::Primitive(PrimitiveType::Int)).into(),
                    ])),
                )
                .into(),
            ])
            .build()
            .expect("schema")
    }

    fn unsupported_what(sql: &str) -> String {
        match parse(sql) {
            Err(SqlError::Unsupported { what }) => what,
            other => panic!("{sql}: {other:?}"),
        }
    }

    // Catches a statement outside the subset that is run anyway (silently dropping the
    // ORDER BY, the join, the aggregate) instead of being refused by name, and DML taken
    // for a query.
    #[test]
    fn statements_outside_the_subset_are_refused_by_name() {
        for (sql, named) in [
            ("DELETE FROM t WHERE id = 1", "DELETE"),
            ("INSERT INTO t VALUES (1)", "INSERT"),
            ("UPDATE t SET id = 2", "UPDATE"),
            ("DROP TABLE t", "DROP TABLE"),
            ("SELECT * FROM t ORDER BY id", "ORDER BY"),
            ("SELECT * FROM t LIMIT 5 OFFSET 2", "OFFSET"),
            ("SELECT DISTINCT id FROM t", "DISTINCT"),
            ("SELECT id FROM t GROUP BY id", "GROUP BY"),
            ("SELECT count(*) FROM t", "count(*)"),
            ("SELECT * FROM a JOIN b ON a.id = b.id", "JOIN"),
            ("SELECT * FROM a, b", "join"),
            ("SELECT * FROM t WHERE upper(Name) = 'A'", "upper(Name)"),
            ("SELECT * FROM t WHERE id = id", "two columns"),
            ("SELECT * FROM t WHERE id + 1 = 2", "+"),
            ("SELECT * FROM t WHERE Name ILIKE 'a%'", "ILIKE"),
            ("SELECT * FROM t WHERE id IN (SELECT id FROM u)", "subquery"),
            ("SELECT * FROM t UNION SELECT * FROM u", "UNION"),
            ("SELECT 1", "without FROM"),
            ("SELECT * FROM t; SELECT * FROM u", "several statements"),
        ] {
            let what = unsupported_what(sql);
            assert!(what.contains(named), "{sql}: {what}");
        }
        assert!(matches!(
            parse("SELEC * FROM t"),
            Err(SqlError::Parse { .. })
        ));
    }

    // Catches a filter bound to the wrong field, operator or value: every form of the
    // subset against the predicate it must become.
    #[test]
    fn filters_bind_to_field_ids_and_typed_values() {
        let schema = schema();
        let bind = |sql: &str| {
            parse(sql)
                .expect(sql)
                .bind(&schema, "ns.t", None)
                .expect(sql)
                .predicate
                .to_string()
        };
        assert_eq!(bind("SELECT * FROM t WHERE id > 5"), "id > 5");
        assert_eq!(bind("SELECT * FROM t WHERE 5 > id"), "id < 5");
        let flags = Schema::builder()
            .with_fields(vec![
                NestedField::optional(1, "ok", Type::Primitive(PrimitiveType::Boolean)).into(),
            ])
            .build()
            .unwrap();
        let flag = parse("SELECT * FROM t WHERE NOT ok")
            .unwrap()
            .bind(&flags, "t", None)
            .unwrap();
        assert_eq!(flag.predicate.to_string(), "NOT ok = true");
        assert_eq!(bind("SELECT * FROM t WHERE ID <> -3"), "id <> -3");
        assert_eq!(
            bind("SELECT * FROM t WHERE t.s.a = 1 OR s.a IS NULL"),
            "(s.a = 1 OR s.a IS NULL)"
        );
        assert_eq!(
            bind("SELECT * FROM t AS x WHERE x.id BETWEEN 1 AND 3"),
            "(id >= 1 AND id <= 3)"
        );
        assert_eq!(
            bind("SELECT * FROM t WHERE NOT (id IN (1, 2))"),
            "NOT id IN (1, 2)"
        );
        assert_eq!(bind("SELECT * FROM t WHERE id NOT IN (1)"), "NOT id IN (1)");
        assert_eq!(
            bind("SELECT * FROM t WHERE name LIKE 'ab%'"),
            "Name LIKE \"ab%\""
        );
        assert_eq!(
            bind("SELECT * FROM t WHERE \"Name\" IS NOT NULL"),
            "NOT Name IS NULL"
        );
        let unknown = parse("SELECT * FROM t WHERE \"name\" = 'a'")
            .unwrap()
            .bind(&schema, "ns.t", None);
        assert!(
            matches!(unknown, Err(SqlError::UnknownColumn { ref column, .. }) if column == "name"),
            "{unknown:?}"
        );
        let bad = parse("SELECT * FROM t WHERE id = 'x'")
            .unwrap()
            .bind(&schema, "ns.t", None);
        assert!(matches!(bad, Err(SqlError::BadValue { .. })), "{bad:?}");
        let like_long = parse("SELECT * FROM t WHERE id LIKE '1%'")
            .unwrap()
            .bind(&schema, "ns.t", None);
        assert!(
            matches!(like_long, Err(SqlError::Unsupported { .. })),
            "{like_long:?}"
        );
    }

    // Catches parameters numbered out of textual order, typed by the wrong column, or
    // run with the wrong number bound.
    #[test]
    fn parameters_number_in_order_and_take_their_column_type() {
        use std::sync::Arc;
        let schema = schema();
        let select = parse("SELECT id FROM ns.t WHERE s.a = ? AND id BETWEEN ? AND ?").unwrap();
        assert_eq!(select.parameters, 3);
        assert_eq!(
            select.parameter_types(&schema, "ns.t").unwrap(),
            vec![
                Some(PrimitiveType::Int),
                Some(PrimitiveType::Long),
                Some(PrimitiveType::Long)
            ]
        );
        let params = RecordBatch::try_from_iter(vec![
            (
                "0",
                Arc::new(arrow_array::Int64Array::from(vec![7])) as arrow_array::ArrayRef,
            ),
            ("1", Arc::new(arrow_array::Int64Array::from(vec![1]))),
            ("2", Arc::new(arrow_array::StringArray::from(vec!["9"]))),
        ])
        .unwrap();
        let bound = select.bind(&schema, "ns.t", Some(&params)).unwrap();
        assert_eq!(
            bound.predicate.to_string(),
            "(s.a = 7 AND (id >= 1 AND id <= 9))"
        );
        match &bound.predicate {
            Predicate::And(a, _) => match a.as_ref() {
                Predicate::Compare { value, .. } => assert_eq!(*value, Datum::int(7)),
                other => panic!("{other}"),
            },
            other => panic!("{other}"),
        }
        assert!(matches!(
            select.bind(&schema, "ns.t", None),
            Err(SqlError::Parameters { .. })
        ));
        let numbered = parse("SELECT * FROM t WHERE id = $2 OR id = $1").unwrap();
        assert_eq!(numbered.parameters, 2);
        let too_big = RecordBatch::try_from_iter(vec![(
            "0",
            Arc::new(arrow_array::Int64Array::from(vec![5_000_000_000])) as arrow_array::ArrayRef,
        )])
        .unwrap();
        let int_param = parse("SELECT * FROM t WHERE s.a = ?").unwrap();
        assert!(matches!(
            int_param.bind(&schema, "ns.t", Some(&too_big)),
            Err(SqlError::BadValue { .. })
        ));
    }

    // Catches a catalog-qualified name read as a namespace, and projections that lose a
    // nested field's path or an alias.
    #[test]
    fn names_and_projections() {
        let select = parse("SELECT s.a AS x, id FROM skade.ns.t").unwrap();
        assert_eq!(select.table_path("skade"), vec!["ns", "t"]);
        assert_eq!(
            parse("SELECT * FROM ns.t").unwrap().table_path("skade"),
            vec!["ns", "t"]
        );
        let bound = select.bind(&schema(), "ns.t", None).unwrap();
        assert_eq!(
            bound.outputs,
            vec![
                Output {
                    name: "x".into(),
                    path: vec![3, 4]
                },
                Output {
                    name: "id".into(),
                    path: vec![1]
                },
            ]
        );
        assert_eq!(bound.columns, vec![3, 1]);
        assert_eq!(parse("SELECT * FROM t LIMIT 3").unwrap().limit, Some(3));
    }
}
