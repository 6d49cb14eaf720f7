//! Flight SQL `DELETE`: `DELETE FROM <table> [WHERE <filter>]` ([`crate::sql`]'s filter
//! subset) on every path a stock client takes — `CommandStatementUpdate` (ADBC
//! `executescript`, JDBC `executeUpdate`), `CommandStatementQuery` (DB-API
//! `cursor.execute`, answered with one row `rows_affected`), and prepared statements with
//! parameters (`CommandPreparedStatementUpdate`, where each bound row runs the statement
//! once: `executemany`) — in autocommit or inside a Flight SQL transaction.
//!
//! Autocommit: the rows are deleted in one commit through the catalog's commit driver
//! ([`crate::snapshot::row_delta::DeleteRows`]: position deletes on v2 tables, deletion
//! vectors on v3, whole data files when every row goes). In a transaction the filter is
//! staged with the table's part and COMMIT commits it with every other table's appends
//! and deletes in ONE catalog commit ([`crate::write::ingest_multi_commit`]); the rows
//! affected a transaction's `DELETE` reports are the rows it matches when it runs, and
//! COMMIT deletes what it matches then. A `DELETE` after an append to the same table in
//! one transaction is refused (it would have to see the rows appended before it).

use arrow_array::{RecordBatch, UInt64Array};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use iceberg::table::Table;
use iceberg::{Catalog, ErrorKind, TableIdent};
use std::sync::Arc;
use tracing::info;

use super::Service;
use super::names;
use super::txn::{SessionKey, Target, TxnTable};
use crate::catalog::CommitTarget;
use crate::error::Error;
use crate::snapshot::row_delta::{DeleteRows, count_matching};
use crate::sql::{Delete, Predicate, SqlError};
use crate::storage::file_store::FileStore;
use crate::write::{FileNames, StagedTable};

/// The one column of a `DELETE` run as a query.
pub(crate) const ROWS_AFFECTED: &str = "rows_affected";

/// The schema of a `DELETE`'s result when run as a query: one non-null `UInt64` column.
pub(crate) fn result_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new(
        ROWS_AFFECTED,
        DataType::UInt64,
        false,
    )]))
}

/// The result of a `DELETE` run as a query: one row, the rows it deleted.
///
/// # Errors
/// `Internal` if the batch cannot be built (it always can).
pub(crate) fn result_batch(rows: u64) -> Result<RecordBatch, Error> {
    RecordBatch::try_new(
        result_schema(),
        vec![Arc::new(UInt64Array::from(vec![rows]))],
    )
    .map_err(|e| Error::Internal {
        what: format!("building the rows-affected result: {e}"),
    })
}

/// The table `delete` names, loaded (as [`statement_table`]).
///
/// # Errors
/// As [`statement_table`].
pub(crate) async fn table_of(svc: &Service, delete: &Delete) -> Result<Table, Error> {
    statement_table(svc, delete.table_path(&svc.catalog_name)).await
}

/// The table a statement names by `path` (without skade's catalog name; a one-part name
/// is in namespace `default`), loaded: what `SELECT` and `DELETE` read.
///
/// # Errors
/// [`SqlError::UnknownTable`]; bad names; the catalog's errors.
pub(crate) async fn statement_table(svc: &Service, mut path: Vec<String>) -> Result<Table, Error> {
    if path.len() == 1 {
        path.insert(0, names::DEFAULT_NAMESPACE.to_string());
    }
    let ident = names::table_from_path(&path)?;
    crate::auth::record("table", &ident);
    load_named(svc, &ident).await
}

/// `ident` loaded; a missing table is [`SqlError::UnknownTable`] naming it.
///
/// # Errors
/// [`SqlError::UnknownTable`]; the catalog's errors.
pub(crate) async fn load_named(svc: &Service, ident: &TableIdent) -> Result<Table, Error> {
    match svc.catalog.load_table(ident).await {
        Ok(table) => Ok(table),
        Err(e) if e.kind() == ErrorKind::TableNotFound => Err(SqlError::UnknownTable {
            table: ident.to_string(),
        }
        .into()),
        Err(e) => Err(Error::catalog(ident, e)),
    }
}

/// Runs `delete` once per row of `params` (once when `None`), in the transaction
/// `transaction_id` names (or the session's, else autocommit): the rows deleted, summed.
/// Autocommit deletes every run's rows in ONE commit.
///
/// # Errors
/// [`SqlError`] for names, values or parameters that do not fit the table; transaction
/// errors (unknown, ended, aborted); `Unimplemented` for a format-1 table or a data file
/// an equality delete applies to; `FailedPrecondition` for a `DELETE` after an append to
/// the same table in one transaction; the catalog's and storage's errors. Nothing is
/// deleted on an error.
pub(crate) async fn run_delete(
    svc: &Service,
    session: Option<&SessionKey>,
    transaction_id: Option<&[u8]>,
    delete: &Delete,
    params: Option<&RecordBatch>,
) -> Result<u64, Error> {
    let table = table_of(svc, delete).await?;
    let ident = table.identifier().clone();
    let filters = bind_rows(delete, &table, params)?;
    match svc.transactions.target(transaction_id, session)? {
        Target::Autocommit => {
            let mut stage = DeleteRows::new(&svc.catalog, filters);
            let outcome = svc
                .catalog
                .commit(&[CommitTarget::data(&table)], &mut stage)
                .await
                .map_err(|e| Error::catalog(&ident, e))?;
            let deleted = outcome.committed().map_or(0, |(_, rows)| rows);
            info!(table = %ident, rows = deleted, "delete committed");
            Ok(deleted)
        }
        Target::Txn(txn) => {
            crate::auth::record("transaction", txn.id);
            let mut state = txn.state.lock().await;
            if let Some(reason) = &state.failure {
                return Err(Error::TransactionAborted {
                    reason: reason.clone(),
                });
            }
            let rows = count_matching(
                svc.catalog.written_manifests().clone(),
                table.clone(),
                filters.clone(),
            )
            .await
            .map_err(|e| Error::catalog(&ident, e))?;
            stage_in(svc, &mut state.tables, table, filters)?;
            txn.touch();
            info!(transaction = %txn.id, table = %ident, rows, "delete staged");
            Ok(rows)
        }
    }
}

/// `delete`'s filter bound to `table`'s current schema, once per row of `params`.
///
/// # Errors
/// As [`Delete::bind`].
fn bind_rows(
    delete: &Delete,
    table: &Table,
    params: Option<&RecordBatch>,
) -> Result<Vec<Predicate>, Error> {
    let schema = table.metadata().current_schema();
    let name = table.identifier().to_string();
    match params {
        Some(batch) if batch.num_rows() > 1 => (0..batch.num_rows())
            .map(|row| Ok(delete.bind(schema, &name, Some(&batch.slice(row, 1)))?))
            .collect(),
        Some(batch) if batch.num_rows() == 0 => Ok(Vec::new()),
        params => Ok(vec![delete.bind(schema, &name, params)?]),
    }
}

/// Adds `filters` to `table`'s part of a transaction (a new part when the transaction has
/// not touched the table).
///
/// # Errors
/// `FailedPrecondition` when the transaction has appended to the table already or
/// creates it.
fn stage_in(
    svc: &Service,
    tables: &mut Vec<TxnTable>,
    table: Table,
    filters: Vec<Predicate>,
) -> Result<(), Error> {
    let ident: TableIdent = table.identifier().clone();
    if let Some(staged) = tables
        .iter_mut()
        .find(|t| t.part.table.identifier() == &ident)
    {
        if staged.part.create || !staged.part.data_files.is_empty() {
            return Err(Error::catalog(
                &ident,
                iceberg::Error::new(
                    ErrorKind::PreconditionFailed,
                    format!(
                        "this transaction appended to table {ident} before this DELETE: a \
                         DELETE must come before the transaction's appends to its table \
                         (delete, then ingest: a scope replace)"
                    ),
                ),
            ));
        }
        staged.part.deletes.extend(filters);
        return Ok(());
    }
    tables.push(TxnTable {
        part: StagedTable {
            table,
            create: false,
            data_files: Vec::new(),
            schema_change: None,
            deletes: filters,
            replace: false,
        },
        names: FileNames::new(),
        store: FileStore::of(svc.catalog.warehouse()),
    });
    Ok(())
}
