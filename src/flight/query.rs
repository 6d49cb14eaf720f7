//! Flight SQL queries: `CommandStatementQuery` (ADBC's `cursor.execute(sql)`) and
//! prepared statements (`CreatePreparedStatement`, parameters bound by a `DoPut` of
//! `CommandPreparedStatementQuery`, run by `GetFlightInfo` of it), each answered with a
//! `FlightInfo` whose one endpoint's ticket `DoGet` streams. The SQL is [`crate::sql`]'s
//! subset; it reads through the same Iceberg scan as a table's `DoGet` (delete files
//! applied), one data file at a time in write order, batch by batch: each batch is
//! filtered, projected and cut at the `LIMIT` as it arrives, and the scan stops at the
//! limit.
//!
//! Nothing is kept on the server between calls: a prepared statement's handle is the
//! statement itself (with its bound parameters once bound, `proto::PreparedQuery`), and
//! a query's ticket adds the snapshot and schema `GetFlightInfo` planned it on
//! (`proto::QueryTicket`), so `DoGet` reads exactly that snapshot — the rows the
//! FlightInfo's schema describes, whatever commits in between.
//!
//! A `DELETE` is served on the same paths and as an update ([`super::dml`]): run as a
//! query, `GetFlightInfo` runs it and its ticket answers one row, `rows_affected`. Any
//! other statement (`INSERT`, `UPDATE`, DDL) is `InvalidArgument` naming it, on every
//! path.

use std::io::Cursor;

use arrow::ipc::reader::StreamReader;
use arrow::ipc::writer::StreamWriter;
use arrow_array::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::sql::{
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    CommandPreparedStatementQuery, CommandPreparedStatementUpdate, CommandStatementUpdate,
    DoPutPreparedStatementResult, DoPutUpdateResult, ProstMessageExt, TicketStatementQuery,
};
use arrow_flight::{
    FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, PutResult, SchemaAsIpc,
    Ticket,
};
use arrow_schema::{DataType, Field, Schema, SchemaRef};
use futures::TryStreamExt;
use iceberg::spec::SchemaRef as IcebergSchemaRef;
use iceberg::table::Table;
use iceberg::{ErrorKind, TableIdent};
use prost::Message;
use tracing::debug;

use super::Service;
use super::decode::{Batches, BoxStream};
use super::dml;
use super::txn::SessionKey;
use crate::error::Error;
use crate::proto::{PreparedQuery, QueryTicket};
use crate::sql::{self, Bound, Delete, SqlError, Statement};

/// A statement resolved against one snapshot of its table.
struct Planned {
    ident: TableIdent,
    table: Table,
    /// The snapshot read (`None`: the table has none, no rows).
    snapshot_id: Option<i64>,
    /// The schema the statement was resolved on (the snapshot's).
    schema: IcebergSchemaRef,
    bound: Bound,
    /// The result's Arrow schema.
    output: SchemaRef,
}

fn bad_handle(what: &'static str, reason: impl ToString) -> Error {
    SqlError::BadHandle {
        what,
        reason: reason.to_string(),
    }
    .into()
}

/// The statement of a prepared statement's handle.
///
/// # Errors
/// [`SqlError::BadHandle`] for bytes skade did not give out.
pub(crate) fn prepared(handle: &[u8]) -> Result<PreparedQuery, Error> {
    PreparedQuery::decode(handle).map_err(|e| bad_handle("prepared statement handle", e))
}

/// `batch` (one row of parameters) as an Arrow IPC stream.
fn encode_parameters(batch: &RecordBatch) -> Result<Vec<u8>, Error> {
    let internal = |e: arrow_schema::ArrowError| Error::Internal {
        what: format!("cannot encode the bound parameters: {e}"),
    };
    let mut writer = StreamWriter::try_new(Vec::new(), &batch.schema()).map_err(internal)?;
    writer.write(batch).map_err(internal)?;
    writer.into_inner().map_err(internal)
}

/// The parameters a handle carries, `None` when none are bound.
fn decode_parameters(bytes: &[u8]) -> Result<Option<RecordBatch>, Error> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let bad = |e: arrow_schema::ArrowError| bad_handle("prepared statement handle", e);
    let reader = StreamReader::try_new(Cursor::new(bytes), None).map_err(bad)?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().map_err(bad)?;
    arrow_select::concat::concat_batches(&schema, &batches)
        .map(Some)
        .map_err(bad)
}

/// Parses `query`, finds its table and resolves it against `at` (a snapshot id, or
/// `None` for a table without one, and the schema id of a ticket) or, without `at`,
/// the table's current snapshot; with the parameters it carries, or — `prepare` — none
/// yet (parameters are then only typed).
async fn plan(
    svc: &Service,
    query: &PreparedQuery,
    at: Option<(Option<i64>, i32)>,
    prepare: bool,
) -> Result<Planned, Error> {
    let select = sql::parse(&query.sql)?;
    let table = dml::statement_table(svc, select.table_path(&svc.catalog_name)).await?;
    let ident = table.identifier().clone();
    let metadata = table.metadata();
    let (snapshot_id, schema) = match at {
        Some((snapshot_id, schema_id)) => {
            if let Some(id) = snapshot_id
                && metadata.snapshot_by_id(id).is_none()
            {
                return Err(Error::catalog(
                    &ident,
                    iceberg::Error::new(
                        ErrorKind::PreconditionFailed,
                        format!(
                            "snapshot {id}, which this query's ticket reads, is gone (expired \
                             since GetFlightInfo): run the query again"
                        ),
                    ),
                ));
            }
            let schema = metadata.schema_by_id(schema_id).cloned().ok_or_else(|| {
                bad_handle(
                    "query ticket",
                    format!("table {ident} has no schema {schema_id}"),
                )
            })?;
            (snapshot_id, schema)
        }
        None => match metadata.current_snapshot() {
            Some(snapshot) => (
                Some(snapshot.snapshot_id()),
                snapshot
                    .schema(metadata)
                    .map_err(|e| Error::catalog(&ident, e))?,
            ),
            None => (None, metadata.current_schema().clone()),
        },
    };
    let parameters = decode_parameters(&query.parameters)?;
    let name = ident.to_string();
    let bound = if prepare && parameters.is_none() {
        select.prepare(&schema, &name)?
    } else {
        select.bind(&schema, &name, parameters.as_ref())?
    };
    let arrow =
        iceberg::arrow::schema_to_arrow_schema(&schema).map_err(|e| Error::catalog(&ident, e))?;
    let output = sql::output_schema(&arrow, &bound.outputs)?;
    Ok(Planned {
        ident,
        table,
        snapshot_id,
        schema,
        bound,
        output,
    })
}

/// `schema` as Flight's IPC schema bytes.
fn schema_bytes(schema: &Schema) -> Result<bytes::Bytes, Error> {
    let message: Result<IpcMessage, _> =
        SchemaAsIpc::new(schema, &arrow::ipc::writer::IpcWriteOptions::default()).try_into();
    message
        .map(|IpcMessage(bytes)| bytes)
        .map_err(|e| Error::Internal {
            what: format!("cannot encode a schema: {e}"),
        })
}

/// `GetFlightInfo` on `CommandStatementQuery` or `CommandPreparedStatementQuery`: plans
/// `query` on the table's current snapshot and answers its result's schema and one
/// endpoint whose ticket reads that snapshot.
///
/// # Errors
/// The statement's refusal ([`SqlError`]: InvalidArgument naming what is unsupported or
/// unknown, NotFound for an unknown table); the catalog's errors.
pub(crate) async fn flight_info(
    svc: &Service,
    descriptor: &FlightDescriptor,
    query: PreparedQuery,
    session: Option<&SessionKey>,
    run: bool,
) -> Result<FlightInfo, Error> {
    if let Statement::Delete(delete) = sql::parse_statement(&query.sql)? {
        return delete_info(svc, descriptor, query, &delete, session, run).await;
    }
    let planned = plan(svc, &query, None, false).await?;
    debug!(table = %planned.ident, snapshot_id = ?planned.snapshot_id, predicate = %planned.bound.predicate, "query planned");
    let ticket = QueryTicket {
        query: Some(query),
        snapshot_id: planned.snapshot_id,
        schema_id: planned.schema.schema_id(),
        rows_affected: None,
    };
    let ticket = TicketStatementQuery {
        statement_handle: ticket.encode_to_vec().into(),
    };
    FlightInfo::new()
        .try_with_schema(&planned.output)
        .map_err(|e| Error::Internal {
            what: format!("cannot encode the result schema: {e}"),
        })
        .map(|info| {
            info.with_descriptor(descriptor.clone())
                .with_endpoint(
                    FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
                )
                .with_total_records(-1)
                .with_total_bytes(-1)
                .with_ordered(true)
        })
}

/// A `DELETE` run as a query (`cursor.execute`): runs it when `run` (once per bound
/// parameter row, in the statement's transaction — its own, else `session`'s — or
/// autocommit) and answers a FlightInfo of one row, `rows_affected`, whose ticket
/// carries the count. `GetSchema` (`run` false) only answers the schema.
///
/// # Errors
/// As [`dml::run_delete`].
async fn delete_info(
    svc: &Service,
    descriptor: &FlightDescriptor,
    query: PreparedQuery,
    delete: &Delete,
    session: Option<&SessionKey>,
    run: bool,
) -> Result<FlightInfo, Error> {
    let schema = dml::result_schema();
    let info = FlightInfo::new()
        .try_with_schema(&schema)
        .map_err(|e| Error::Internal {
            what: format!("cannot encode the result schema: {e}"),
        })?
        .with_descriptor(descriptor.clone());
    if !run {
        return Ok(info);
    }
    let params = decode_parameters(&query.parameters)?;
    let transaction = (!query.transaction_id.is_empty()).then_some(query.transaction_id.as_slice());
    let rows = dml::run_delete(svc, session, transaction, delete, params.as_ref()).await?;
    let ticket = QueryTicket {
        query: Some(query),
        snapshot_id: None,
        schema_id: 0,
        rows_affected: Some(rows),
    };
    let ticket = TicketStatementQuery {
        statement_handle: ticket.encode_to_vec().into(),
    };
    Ok(info
        .with_endpoint(
            FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
        )
        .with_total_records(1)
        .with_total_bytes(-1))
}

/// `DoPut` of `CommandStatementUpdate`: runs the statement (a `DELETE`) in the
/// command's transaction (else `session`'s, else autocommit) and answers
/// `DoPutUpdateResult` with the rows deleted.
///
/// # Errors
/// [`SqlError::Unsupported`] for a query or any other statement; as
/// [`dml::run_delete`].
pub(crate) async fn execute_update(
    svc: &Service,
    session: Option<&SessionKey>,
    cmd: CommandStatementUpdate,
) -> Result<PutResult, Error> {
    let delete = update_statement(&cmd.query)?;
    let rows = dml::run_delete(svc, session, cmd.transaction_id.as_deref(), &delete, None).await?;
    Ok(update_result(rows))
}

/// `DoPut` of `CommandPreparedStatementUpdate`: runs the prepared statement (a
/// `DELETE`) once per parameter row the stream carries (once with the parameters bound
/// earlier when it carries none) and answers `DoPutUpdateResult` with the rows deleted.
///
/// # Errors
/// As [`execute_update`]; [`SqlError::Parameters`] when the rows sent do not fit.
pub(crate) async fn execute_prepared_update(
    svc: &Service,
    session: Option<&SessionKey>,
    cmd: CommandPreparedStatementUpdate,
    mut batches: Batches,
) -> Result<PutResult, Error> {
    let query = prepared(&cmd.prepared_statement_handle)?;
    let delete = update_statement(&query.sql)?;
    let mut all: Vec<RecordBatch> = Vec::new();
    while let Some((batch, _)) = batches.next().await? {
        all.push(batch);
    }
    let params = match all.first() {
        None => decode_parameters(&query.parameters)?,
        Some(first) => Some(
            arrow_select::concat::concat_batches(&first.schema(), &all).map_err(|e| {
                Error::from(SqlError::Parameters {
                    reason: format!("the batches do not concatenate: {e}"),
                })
            })?,
        ),
    };
    let transaction = (!query.transaction_id.is_empty()).then_some(query.transaction_id.as_slice());
    let rows = dml::run_delete(svc, session, transaction, &delete, params.as_ref()).await?;
    Ok(update_result(rows))
}

/// The `DELETE` an update runs.
///
/// # Errors
/// [`SqlError::Unsupported`] for a query.
fn update_statement(sql: &str) -> Result<Delete, Error> {
    match sql::parse_statement(sql)? {
        Statement::Delete(delete) => Ok(delete),
        Statement::Select(_) => Err(SqlError::Unsupported {
            what: "a query run as an update (run SELECT as a query: cursor.execute, \
                   executeQuery)"
                .to_string(),
        }
        .into()),
    }
}

/// `DoPutUpdateResult { record_count: rows }`, plain (not `Any`-wrapped), as Flight SQL
/// clients decode it.
pub(crate) fn update_result(rows: u64) -> PutResult {
    let result = DoPutUpdateResult {
        record_count: i64::try_from(rows).unwrap_or(i64::MAX),
    };
    PutResult {
        app_metadata: result.encode_to_vec().into(),
    }
}

/// `DoGet` on a query's ticket: streams the rows of the snapshot the ticket names that
/// the statement selects, in write order, at most `LIMIT` of them.
///
/// # Errors
/// [`SqlError::BadHandle`] for a ticket skade did not give out; `FailedPrecondition`
/// when its snapshot has been expired since; the catalog's and the scan's errors
/// (errors while streaming end the stream with their status).
pub(crate) async fn do_get(
    svc: &Service,
    ticket: TicketStatementQuery,
) -> Result<BoxStream<FlightData>, Error> {
    let ticket = QueryTicket::decode(ticket.statement_handle.as_ref())
        .map_err(|e| bad_handle("query ticket", e))?;
    if let Some(rows) = ticket.rows_affected {
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(dml::result_schema())
            .build(futures::stream::iter([
                dml::result_batch(rows).map_err(|e| FlightError::Tonic(Box::new(e.into_status())))
            ]))
            .map_err(|e| match e {
                FlightError::Tonic(status) => *status,
                other => Error::Internal {
                    what: format!("encoding the result failed: {other}"),
                }
                .into_status(),
            });
        return Ok(Box::pin(stream));
    }
    let query = ticket
        .query
        .ok_or_else(|| bad_handle("query ticket", "it holds no statement"))?;
    let planned = plan(
        svc,
        &query,
        Some((ticket.snapshot_id, ticket.schema_id)),
        false,
    )
    .await?;
    let Planned {
        ident,
        table,
        snapshot_id,
        schema,
        bound,
        output,
    } = planned;
    let limit = bound.limit;
    let batches: BoxStream<RecordBatch> = match (snapshot_id, limit) {
        (None, _) | (_, Some(0)) => Box::pin(futures::stream::empty()),
        (Some(snapshot_id), _) => {
            let columns: Vec<String> = bound
                .columns
                .iter()
                .filter_map(|id| schema.as_struct().field_by_id(*id).map(|f| f.name.clone()))
                .collect();
            let scan =
                crate::read::scan_snapshot_in_write_order(&table, Some(snapshot_id), Some(columns))
                    .await
                    .map_err(|e| Error::catalog(&ident, e))?;
            Box::pin(rows(scan, bound, output.clone(), ident))
        }
    };
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(output)
        .build(batches.map_err(|status| FlightError::Tonic(Box::new(status))))
        .map_err(|e| match e {
            FlightError::Tonic(status) => *status,
            other => Error::Internal {
                what: format!("encoding the result failed: {other}"),
            }
            .into_status(),
        });
    Ok(Box::pin(stream))
}

/// The scan's batches filtered by the statement's predicate, projected to its outputs
/// and cut at its limit; the scan is dropped (not read further) once the limit is met.
fn rows(
    scan: iceberg::scan::ArrowRecordBatchStream,
    bound: Bound,
    schema: SchemaRef,
    ident: TableIdent,
) -> impl futures::Stream<Item = Result<RecordBatch, tonic::Status>> + Send {
    struct State {
        scan: iceberg::scan::ArrowRecordBatchStream,
        bound: Bound,
        schema: SchemaRef,
        ident: TableIdent,
        remaining: Option<u64>,
    }
    let state = State {
        remaining: bound.limit,
        scan,
        bound,
        schema,
        ident,
    };
    futures::stream::try_unfold(state, |mut st| async move {
        loop {
            if st.remaining == Some(0) {
                return Ok(None);
            }
            let Some(batch) = st
                .scan
                .try_next()
                .await
                .map_err(|e| Error::catalog(&st.ident, e).into_status())?
            else {
                return Ok(None);
            };
            let step = || -> Result<RecordBatch, Error> {
                let kept = sql::filter(&st.bound.predicate, &batch)?;
                Ok(sql::project(&kept, &st.bound.outputs, &st.schema)?)
            };
            let mut out = step().map_err(Error::into_status)?;
            if let Some(remaining) = st.remaining.as_mut() {
                let take = usize::try_from(*remaining)
                    .unwrap_or(usize::MAX)
                    .min(out.num_rows());
                out = out.slice(0, take);
                *remaining -= take as u64;
            }
            if out.num_rows() > 0 {
                return Ok(Some((out, st)));
            }
        }
    })
}

/// `CreatePreparedStatement`: checks the statement against its table (names, literals,
/// the subset) and answers a handle that is the statement itself, the result's schema
/// and the parameters' schema (one field per parameter, `$1`, `$2`, …, typed as the
/// column it is compared with).
///
/// # Errors
/// As [`flight_info`].
pub(crate) async fn create_prepared(
    svc: &Service,
    request: ActionCreatePreparedStatementRequest,
) -> Result<ActionCreatePreparedStatementResult, Error> {
    let query = PreparedQuery {
        sql: request.query,
        parameters: Vec::new(),
        transaction_id: request
            .transaction_id
            .map(|id| id.to_vec())
            .unwrap_or_default(),
    };
    if let Statement::Delete(delete) = sql::parse_statement(&query.sql)? {
        return prepare_delete(svc, query, &delete).await;
    }
    let planned = plan(svc, &query, None, true).await?;
    let select = sql::parse(&query.sql)?;
    let types = select.parameter_types(&planned.schema, &planned.ident.to_string())?;
    Ok(ActionCreatePreparedStatementResult {
        prepared_statement_handle: query.encode_to_vec().into(),
        dataset_schema: schema_bytes(&planned.output)?,
        parameter_schema: schema_bytes(&parameter_schema(&types))?,
    })
}

/// `CreatePreparedStatement` of a `DELETE`: checks names and literals against the
/// table's current schema; the dataset schema is the rows-affected result's.
///
/// # Errors
/// As [`dml::table_of`] and [`Delete::prepare`].
async fn prepare_delete(
    svc: &Service,
    query: PreparedQuery,
    delete: &Delete,
) -> Result<ActionCreatePreparedStatementResult, Error> {
    let table = dml::table_of(svc, delete).await?;
    let schema = table.metadata().current_schema();
    let name = table.identifier().to_string();
    delete.prepare(schema, &name)?;
    let types = delete.parameter_types(schema, &name)?;
    Ok(ActionCreatePreparedStatementResult {
        prepared_statement_handle: query.encode_to_vec().into(),
        dataset_schema: schema_bytes(&dml::result_schema())?,
        parameter_schema: schema_bytes(&parameter_schema(&types))?,
    })
}

/// One field per parameter, `$1`, `$2`, …, typed as the column it is compared with
/// (`Null` for a parameter never used).
fn parameter_schema(types: &[Option<iceberg::spec::PrimitiveType>]) -> Schema {
    let fields: Vec<Field> = types
        .iter()
        .enumerate()
        .map(|(i, ty)| {
            let data_type = ty
                .as_ref()
                .and_then(|ty| {
                    iceberg::arrow::type_to_arrow_type(&iceberg::spec::Type::Primitive(ty.clone()))
                        .ok()
                })
                .unwrap_or(DataType::Null);
            Field::new(format!("${}", i + 1), data_type, true)
        })
        .collect();
    Schema::new(fields)
}

/// `DoPut` of `CommandPreparedStatementQuery`: binds the stream's parameters (one row,
/// a column per parameter) to the statement; answers `DoPutPreparedStatementResult` with
/// the new handle, which carries them.
///
/// # Errors
/// [`SqlError::BadHandle`] for a handle skade did not give out;
/// [`SqlError::Parameters`] when the rows or columns sent do not fit the statement; the
/// stream's decoding errors.
pub(crate) async fn bind_parameters(
    cmd: CommandPreparedStatementQuery,
    mut batches: Batches,
) -> Result<PutResult, Error> {
    let mut query = prepared(&cmd.prepared_statement_handle)?;
    let statement = sql::parse_statement(&query.sql)?;
    let (schema, first) = batches.first("parameter stream").await?;
    let mut all: Vec<RecordBatch> = first.into_iter().map(|(b, _)| b).collect();
    while let Some((batch, _)) = batches.next().await? {
        all.push(batch);
    }
    let batch = arrow_select::concat::concat_batches(&schema, &all).map_err(|e| {
        Error::from(SqlError::Parameters {
            reason: format!("the batches do not concatenate: {e}"),
        })
    })?;
    match statement {
        Statement::Select(select) => select.check_parameters(&batch)?,
        // A DELETE runs once per row.
        Statement::Delete(delete) if batch.num_columns() != delete.parameters() => {
            return Err(SqlError::Parameters {
                reason: format!(
                    "{} parameter(s) are bound; the statement takes {}",
                    batch.num_columns(),
                    delete.parameters()
                ),
            }
            .into());
        }
        Statement::Delete(_) => {}
    }
    query.parameters = encode_parameters(&batch)?;
    let result = DoPutPreparedStatementResult {
        prepared_statement_handle: Some(query.encode_to_vec().into()),
    };
    Ok(PutResult {
        app_metadata: result.encode_to_vec().into(),
    })
}

/// The refusal of `GetFlightInfo` on an update command (`CommandStatementUpdate`,
/// `CommandPreparedStatementUpdate`): Flight SQL runs updates with `DoPut`. A statement
/// outside the subset is refused naming it first.
pub(crate) fn refuse_update(sql: &str) -> Error {
    match sql::parse_statement(sql) {
        Err(e) => e.into(),
        Ok(_) => SqlError::Unsupported {
            what: "GetFlightInfo of an update command (Flight SQL runs updates with DoPut; \
                   ADBC's execute_update and JDBC's executeUpdate do)"
                .to_string(),
        }
        .into(),
    }
}
