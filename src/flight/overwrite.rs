//! Overwrite over `DoPut`, for Flight clients without ADBC: a put on a `PATH` descriptor
//! with the [`OVERWRITE_HEADER`] header (a SQL filter, `DELETE`'s subset) replaces the
//! rows the filter matches with the stream's rows, in ONE snapshot when the stream ends —
//! a row delta (`snapshot/row_delta.rs`: the matching rows deleted with position deletes
//! or deletion vectors, the stream's data files added), committed like a Flight SQL
//! transaction of one table. Readers see the old rows until the commit and the new ones
//! after it, never both or neither.
//!
//! The stream is written while it arrives but committed only at its end: the client
//! gets one `PutResult` (a final `skade.v1.CommitAck`). Exactly-once as a Flight SQL
//! transaction: `x-skade-writer-id` with `x-skade-sequence` headers name the put, and a
//! resend of a committed one commits nothing (docs/exactly-once.md). The table must exist
//! (the filter is resolved against its schema).

use arrow_flight::PutResult;
use iceberg::TableIdent;
use prost::Message;
use tonic::metadata::MetadataMap;
use tracing::info;

use super::Service;
use super::decode::Batches;
use super::exactly_once::TxnKey;
use super::sql;
use super::txn::TxnState;
use crate::error::Error;
use crate::metrics::LANE_STREAM;
use crate::proto::CommitAck;
use crate::sql::{Predicate, SqlError, Statement, parse_statement};

/// The header naming the rows an overwriting put replaces: a SQL filter, as in
/// `DELETE FROM <table> WHERE <filter>` (docs/changing-rows.md).
pub(crate) const OVERWRITE_HEADER: &str = "x-skade-overwrite-where";

/// The filter of [`OVERWRITE_HEADER`] in `headers`, if any.
///
/// # Errors
/// [`Error::BadRequest`] for a header that is not UTF-8 or is empty.
pub(crate) fn filter_of(headers: &MetadataMap) -> Result<Option<String>, Error> {
    let Some(value) = headers.get(OVERWRITE_HEADER) else {
        return Ok(None);
    };
    match value.to_str().map(str::trim) {
        Ok(filter) if !filter.is_empty() => Ok(Some(filter.to_string())),
        _ => Err(Error::BadRequest {
            reason: format!(
                "the {OVERWRITE_HEADER} header must be a SQL filter (e.g. repo = 'acme/api'), \
                 as UTF-8 text"
            ),
        }),
    }
}

/// Runs an overwriting put to its end (module docs) and answers its one ack.
///
/// # Errors
/// The filter's refusal ([`SqlError`]: unsupported syntax, an unknown column, a value of
/// the wrong type) before the stream is read; `NotFound` for a missing table; the
/// stream's and the commit's errors. Nothing is committed on an error.
pub(crate) async fn run(
    svc: &Service,
    ident: TableIdent,
    filter: &str,
    batches: Batches,
    key: Option<&TxnKey>,
) -> Result<PutResult, Error> {
    let table = super::dml::load_named(svc, &ident).await?;
    let predicate = bind(&table, filter)?;
    let mut state = TxnState::default();
    let rows = match sql::stage_stream(svc, &mut state, &ident, batches).await {
        Ok(rows) => rows,
        Err(e) => {
            state.discard().await;
            return Err(e);
        }
    };
    if let Some(staged) = state.table_mut(&ident) {
        staged.part.deletes.push(predicate);
    }
    let (tables, stats) = state.commit(svc, LANE_STREAM, key).await?;
    let snapshot_id = tables
        .first()
        .and_then(|t| t.metadata().current_snapshot_id())
        .unwrap_or(0);
    info!(table = %ident, rows, snapshot_id, "overwrite committed");
    let ack = CommitAck {
        table: ident.to_string(),
        snapshot_id,
        committed_rows: stats.rows,
        committed_data_files: stats.files,
        commits: stats.commits,
        r#final: true,
        committed_sequence: key.map_or(0, |k| k.sequence),
    };
    Ok(PutResult {
        app_metadata: ack.encode_to_vec().into(),
    })
}

/// `filter` resolved against `table`'s current schema, as a `DELETE`'s `WHERE`.
///
/// # Errors
/// As [`crate::sql::Delete::bind`]; [`SqlError::Unsupported`] for a filter that is more
/// than a filter.
fn bind(table: &iceberg::table::Table, filter: &str) -> Result<Predicate, Error> {
    let quoted: Vec<String> = table
        .identifier()
        .namespace()
        .iter()
        .chain(std::iter::once(&table.identifier().name().to_string()))
        .map(|part| format!("\"{}\"", part.replace('"', "\"\"")))
        .collect();
    let sql = format!("DELETE FROM {} WHERE {filter}", quoted.join("."));
    match parse_statement(&sql)? {
        Statement::Delete(delete) => Ok(delete.bind(
            table.metadata().current_schema(),
            &table.identifier().to_string(),
            None,
        )?),
        Statement::Select(_) => Err(SqlError::Unsupported {
            what: format!("the {OVERWRITE_HEADER} header {filter:?} (a filter)"),
        }
        .into()),
    }
}
