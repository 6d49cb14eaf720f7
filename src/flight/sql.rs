//! The Flight SQL subset (docs/SERVICE.md, Lane 2) that lets the standard ADBC Flight SQL
//! driver and JDBC-style clients ingest into skade, list what is there and read it back:
//! the metadata commands ([`super::metadata`]), `SELECT` queries and prepared statements
//! ([`super::query`]), `DoPut(CommandStatementIngest)`, and the actions
//! `BeginTransaction`, `EndTransaction`, `CreatePreparedStatement`,
//! `ClosePreparedStatement` and `CloseSession`.
//!
//! An ingest goes through the same [`write::Batcher`] as a streaming put: conformed to
//! its table's schema batch by batch, held against the server's memory budget, and cut
//! into data files of about `--target-file-size` whose row groups encode on all cores as
//! rows arrive; each full file is written at once ([`write::StageFiles`]). It becomes
//! visible only when its transaction commits ([`super::txn`]), or — with no transaction
//! — when the stream ends, as one snapshot. A table that does not exist is created by that
//! same commit, so a rolled back transaction leaves no empty table behind.

use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::metadata::SqlInfoData;
use arrow_flight::sql::{
    ActionBeginTransactionRequest, ActionBeginTransactionResult,
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest,
    ActionEndTransactionRequest, Any, Command, CommandStatementIngest, EndTransaction,
    ProstMessageExt, TableExistsOption, TableNotExistOption,
};
use arrow_flight::{
    Action, ActionType, FlightData, FlightDescriptor, FlightEndpoint, FlightInfo, PutResult,
};
use arrow_flight::{Result as ActionResult, Ticket};
use arrow_schema::SchemaRef;
use futures::TryStreamExt;
use iceberg::{Catalog, ErrorKind, TableIdent};
use prost::Message;
use tokio::sync::OwnedSemaphorePermit;
use tonic::Request;
use tracing::{Instrument, Span, debug, info};

use super::Service;
use super::decode::{Batches, BoxStream};
use super::exactly_once::TxnKey;
use super::names;
use super::query;
use super::txn::{SESSION_HEADER, SessionKey, Target, TxnState, TxnTable};
use crate::auth;
use crate::error::Error;
use crate::metrics::LANE_STREAM;
use crate::proto::PreparedQuery;
use crate::storage::file_store::FileStore;
use crate::write::{self, BatchLimits, Batcher, FileNames, StageFiles, StagedTable};

/// The Flight SQL action that opens a transaction.
pub(crate) const BEGIN_TRANSACTION: &str = "BeginTransaction";
/// The Flight SQL action that commits or rolls back a transaction.
pub(crate) const END_TRANSACTION: &str = "EndTransaction";
/// The Flight SQL action that prepares a statement.
pub(crate) const CREATE_PREPARED_STATEMENT: &str = "CreatePreparedStatement";
/// The Flight SQL action that closes a prepared statement.
pub(crate) const CLOSE_PREPARED_STATEMENT: &str = "ClosePreparedStatement";
/// The Flight session action that ends a client session (rolls back its transaction).
pub(crate) const CLOSE_SESSION: &str = "CloseSession";

/// `arrow.flight.protocol.CloseSessionResult` (Flight's session management, which
/// arrow-flight 58 does not generate).
#[derive(Clone, PartialEq, prost::Message)]
struct CloseSessionResult {
    /// `CloseSessionResult.Status`: 1 = CLOSED.
    #[prost(int32, tag = "1")]
    status: i32,
}

/// The session a request belongs to: the [`SESSION_HEADER`] header when set, else the
/// client's connection (peer address); `None` when neither is known.
pub(crate) fn session_of<T>(request: &Request<T>) -> Option<SessionKey> {
    if let Some(value) = request.metadata().get(SESSION_HEADER)
        && let Ok(value) = value.to_str()
        && !value.is_empty()
    {
        return Some(SessionKey::Header(value.to_string()));
    }
    request.remote_addr().map(SessionKey::Peer)
}

/// Decodes a `CMD` descriptor's (or ticket's) protobuf `Any` into a Flight SQL command.
///
/// # Errors
/// [`Error::BadRequest`] when the bytes are not a Flight SQL command.
pub(crate) fn command(bytes: &[u8]) -> Result<Command, Error> {
    let any = Any::decode(bytes).map_err(|e| Error::BadRequest {
        reason: format!("the command is not a protobuf Any: {e}"),
    })?;
    Command::try_from(any).map_err(|e| Error::BadRequest {
        reason: format!("the command cannot be decoded: {e}"),
    })
}

/// Whether a `DoGet` ticket is a Flight SQL command (a protobuf `Any`, whose first byte is
/// field 1's tag) rather than a table ticket (`ns.table` in `[A-Za-z0-9_.-]`).
pub(crate) fn is_command_ticket(ticket: &[u8]) -> bool {
    ticket.first() == Some(&0x0a)
}

/// What skade answers to `GetSqlInfo` ([`super::metadata::sql_info`]).
///
/// # Errors
/// Arrow's error building the info batch (not expected).
pub(crate) fn sql_info(svc: &Service) -> Result<SqlInfoData, Error> {
    super::metadata::sql_info(svc)
}

fn unsupported_command(command: &Command) -> Error {
    Error::Unsupported {
        what: format!(
            "the Flight SQL command {} (skade serves metadata, SELECT queries, prepared \
             statements, bulk ingest and transactions)",
            command.type_url()
        ),
    }
}

/// A metadata answer: its schema, and the batch `DoGet` sends.
struct Answer {
    schema: SchemaRef,
    batch: RecordBatch,
}

impl Answer {
    fn of(batch: RecordBatch) -> Self {
        Self {
            schema: batch.schema(),
            batch,
        }
    }
}

/// The answer to a metadata command; `None` for a command that is not one.
async fn metadata(svc: &Service, command: Command) -> Result<Option<Answer>, Error> {
    use super::metadata as m;
    let internal = |what: &str, e: arrow_flight::error::FlightError| Error::Internal {
        what: format!("cannot build the {what}: {e}"),
    };
    Ok(Some(match command {
        Command::CommandGetSqlInfo(cmd) => {
            debug!(info = ?cmd.info, "GetSqlInfo");
            let data = sql_info(svc)?;
            let batch = cmd
                .into_builder(&data)
                .build()
                .map_err(|e| internal("SQL info", e))?;
            Answer {
                schema: data.schema(),
                batch,
            }
        }
        Command::CommandGetCatalogs(cmd) => Answer::of(m::catalogs(svc, cmd)?),
        Command::CommandGetDbSchemas(cmd) => Answer::of(m::db_schemas(svc, cmd).await?),
        Command::CommandGetTables(cmd) => Answer::of(m::tables(svc, cmd).await?),
        Command::CommandGetTableTypes(cmd) => Answer::of(m::table_types(cmd)?),
        Command::CommandGetPrimaryKeys(cmd) => Answer::of(m::primary_keys(svc, cmd).await?),
        Command::CommandGetExportedKeys(_)
        | Command::CommandGetImportedKeys(_)
        | Command::CommandGetCrossReference(_) => Answer::of(m::no_foreign_keys()),
        Command::CommandGetXdbcTypeInfo(cmd) => {
            let data = m::xdbc_types()?;
            let batch = cmd
                .into_builder(&data)
                .build()
                .map_err(|e| internal("type info", e))?;
            Answer {
                schema: data.schema(),
                batch,
            }
        }
        _ => return Ok(None),
    }))
}

/// `GetFlightInfo` on a `CMD` descriptor: a metadata command's info (its schema, one
/// endpoint whose ticket is the command), or a query's ([`query::flight_info`], which
/// runs a `DELETE` when `run`: `GetFlightInfo`, not `GetSchema`).
///
/// # Errors
/// [`Error::BadRequest`] for bytes that are not a Flight SQL command; a statement's
/// refusal; [`Error::Unsupported`] for a command skade does not serve.
pub(crate) async fn flight_info(
    svc: &Service,
    descriptor: &FlightDescriptor,
    session: Option<&SessionKey>,
    run: bool,
) -> Result<FlightInfo, Error> {
    let command = command(&descriptor.cmd)?;
    let ticket = Ticket::new(command.clone().into_any().encode_to_vec());
    match command {
        Command::CommandStatementQuery(cmd) => {
            let query = PreparedQuery {
                sql: cmd.query,
                parameters: Vec::new(),
                transaction_id: cmd.transaction_id.map(|id| id.to_vec()).unwrap_or_default(),
            };
            return query::flight_info(svc, descriptor, query, session, run).await;
        }
        Command::CommandPreparedStatementQuery(cmd) => {
            let query = query::prepared(&cmd.prepared_statement_handle)?;
            return query::flight_info(svc, descriptor, query, session, run).await;
        }
        Command::CommandStatementUpdate(cmd) => return Err(query::refuse_update(&cmd.query)),
        Command::CommandPreparedStatementUpdate(cmd) => {
            let query = query::prepared(&cmd.prepared_statement_handle)?;
            return Err(query::refuse_update(&query.sql));
        }
        _ => {}
    }
    let type_url = command.type_url().to_string();
    let Some(answer) = metadata(svc, command.clone()).await? else {
        return Err(unsupported_command(&command));
    };
    debug!(command = %type_url, rows = answer.batch.num_rows(), "metadata");
    FlightInfo::new()
        .try_with_schema(&answer.schema)
        .map_err(|e| Error::Internal {
            what: format!("cannot encode the {type_url} schema: {e}"),
        })
        .map(|info| {
            info.with_descriptor(descriptor.clone())
                .with_endpoint(FlightEndpoint::new().with_ticket(ticket))
                .with_total_records(i64::try_from(answer.batch.num_rows()).unwrap_or(-1))
                .with_total_bytes(-1)
        })
}

/// `DoGet` on a Flight SQL ticket (see [`is_command_ticket`]): a metadata command's
/// answer, or a query's rows.
///
/// # Errors
/// As [`flight_info`].
pub(crate) async fn do_get(svc: &Service, ticket: &[u8]) -> Result<BoxStream<FlightData>, Error> {
    let command = command(ticket)?;
    if let Command::TicketStatementQuery(ticket) = command {
        return query::do_get(svc, ticket).await;
    }
    let Some(answer) = metadata(svc, command.clone()).await? else {
        return Err(unsupported_command(&command));
    };
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(answer.schema)
        .build(futures::stream::iter([Ok(answer.batch)]))
        .map_err(|e| {
            Error::Internal {
                what: format!("encoding the answer failed: {e}"),
            }
            .into_status()
        });
    Ok(Box::pin(stream))
}

/// The Flight SQL actions skade serves, for `ListActions`.
pub(crate) fn action_types() -> Vec<ActionType> {
    vec![
        ActionType {
            r#type: BEGIN_TRANSACTION.to_string(),
            description: "Begin a transaction. Request: ActionBeginTransactionRequest; \
                          result: ActionBeginTransactionResult"
                .to_string(),
        },
        ActionType {
            r#type: END_TRANSACTION.to_string(),
            description: "Commit (all staged tables in one catalog transaction) or roll \
                          back a transaction. Request: ActionEndTransactionRequest"
                .to_string(),
        },
        ActionType {
            r#type: CREATE_PREPARED_STATEMENT.to_string(),
            description: "Prepare a SELECT: the handle is the statement (no server state). \
                          Request: ActionCreatePreparedStatementRequest; result: \
                          ActionCreatePreparedStatementResult"
                .to_string(),
        },
        ActionType {
            r#type: CLOSE_PREPARED_STATEMENT.to_string(),
            description: "Close a prepared statement (nothing to free). Request: \
                          ActionClosePreparedStatementRequest"
                .to_string(),
        },
        ActionType {
            r#type: CLOSE_SESSION.to_string(),
            description: "Close the session: roll back its open transaction".to_string(),
        },
    ]
}

/// `DoAction`: `BeginTransaction`, `EndTransaction`, `CloseSession`.
///
/// # Errors
/// [`Error::BadRequest`] for a body that does not decode; the transaction errors of
/// [`super::txn::Transactions`]; [`Error::Unsupported`] for any other action.
pub(crate) async fn do_action(
    svc: &Service,
    session: Option<SessionKey>,
    key: Option<TxnKey>,
    action: Action,
) -> Result<BoxStream<ActionResult>, Error> {
    let result = |body: Vec<u8>| -> BoxStream<ActionResult> {
        Box::pin(futures::stream::iter([Ok(ActionResult {
            body: body.into(),
        })]))
    };
    match action.r#type.as_str() {
        BEGIN_TRANSACTION => {
            if !action.body.is_empty() {
                unpack::<ActionBeginTransactionRequest>(&action.body)?;
            }
            let id = svc.transactions.begin(session, svc.catalog.pin_writes())?;
            auth::record("transaction", id);
            let reply = ActionBeginTransactionResult {
                transaction_id: id.as_bytes().to_vec().into(),
            };
            Ok(result(reply.as_any().encode_to_vec()))
        }
        END_TRANSACTION => {
            let request = unpack::<ActionEndTransactionRequest>(&action.body)?;
            if let Ok(id) = uuid::Uuid::from_slice(&request.transaction_id) {
                auth::record("transaction", id);
            }
            match EndTransaction::try_from(request.action) {
                Ok(EndTransaction::Commit) => {
                    svc.transactions
                        .commit(svc, &request.transaction_id, key.as_ref())
                        .await?;
                }
                Ok(EndTransaction::Rollback) => {
                    svc.transactions.rollback(&request.transaction_id).await?;
                }
                _ => {
                    return Err(Error::BadRequest {
                        reason: format!(
                            "EndTransaction action {} is neither COMMIT (1) nor ROLLBACK (2)",
                            request.action
                        ),
                    });
                }
            }
            Ok(Box::pin(futures::stream::empty()))
        }
        CREATE_PREPARED_STATEMENT => {
            let request = unpack::<ActionCreatePreparedStatementRequest>(&action.body)?;
            let reply = query::create_prepared(svc, request).await?;
            Ok(result(reply.as_any().encode_to_vec()))
        }
        CLOSE_PREPARED_STATEMENT => {
            let request = unpack::<ActionClosePreparedStatementRequest>(&action.body)?;
            query::prepared(&request.prepared_statement_handle)?;
            Ok(Box::pin(futures::stream::empty()))
        }
        CLOSE_SESSION => {
            if let Some(session) = &session {
                svc.transactions.close_session(session).await;
            }
            Ok(result(CloseSessionResult { status: 1 }.encode_to_vec()))
        }
        other => Err(Error::Unsupported {
            what: format!("the action {other:?}"),
        }),
    }
}

fn unpack<M: ProstMessageExt>(body: &[u8]) -> Result<M, Error> {
    let bad = |why: String| Error::BadRequest {
        reason: format!("the action body is not a {}: {why}", M::type_url()),
    };
    let any = Any::decode(body).map_err(|e| bad(e.to_string()))?;
    any.unpack::<M>()
        .map_err(|e| bad(e.to_string()))?
        .ok_or_else(|| bad(format!("it holds a {}", any.type_url)))
}

/// What to do with a table that does not exist / that exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Definition {
    create_missing: bool,
    fail_if_exists: bool,
    /// `if_exists = REPLACE`: an existing table's schema and rows are replaced by the
    /// stream's ([`crate::snapshot::replace_table`]).
    replace: bool,
}

/// The table `cmd` names: `schema` is the namespace (dotted for nested ones, `default`
/// when unset), `table` the table; `catalog` must be unset or skade's own.
fn ingest_target(
    cmd: &CommandStatementIngest,
    catalog_name: &str,
) -> Result<(TableIdent, Definition), Error> {
    if cmd
        .catalog
        .as_deref()
        .is_some_and(|c| !c.is_empty() && c != catalog_name)
    {
        return Err(Error::BadRequest {
            reason: format!(
                "skade has a single catalog, {catalog_name:?} (--catalog-name): leave the \
                 ingest's catalog unset (or name that one) and name the namespace as its schema"
            ),
        });
    }
    if cmd.temporary {
        return Err(Error::Unsupported {
            what: "temporary tables".to_string(),
        });
    }
    let mut path: Vec<String> = match cmd.schema.as_deref() {
        Some(schema) if !schema.is_empty() => schema.split('.').map(str::to_string).collect(),
        _ => vec![names::DEFAULT_NAMESPACE.to_string()],
    };
    path.push(cmd.table.clone());
    let ident = names::table_from_path(&path)?;
    let definition = match cmd.table_definition_options {
        None => Definition {
            create_missing: true,
            fail_if_exists: false,
            replace: false,
        },
        Some(options) => {
            let create_missing = match TableNotExistOption::try_from(options.if_not_exist) {
                Ok(TableNotExistOption::Create) => true,
                Ok(TableNotExistOption::Fail) => false,
                _ => {
                    return Err(Error::BadRequest {
                        reason: format!(
                            "table_definition_options.if_not_exist must be CREATE or FAIL, \
                             got {}",
                            options.if_not_exist
                        ),
                    });
                }
            };
            let (fail_if_exists, replace) = match TableExistsOption::try_from(options.if_exists) {
                Ok(TableExistsOption::Append) => (false, false),
                Ok(TableExistsOption::Fail) => (true, false),
                Ok(TableExistsOption::Replace) => (false, true),
                _ => {
                    return Err(Error::BadRequest {
                        reason: format!(
                            "table_definition_options.if_exists must be FAIL, APPEND or \
                             REPLACE, got {}",
                            options.if_exists
                        ),
                    });
                }
            };
            Definition {
                create_missing,
                fail_if_exists,
                replace,
            }
        }
    };
    Ok((ident, definition))
}

/// `DoPut` with `CommandStatementIngest`: runs the ingest to its end (in its own task, so
/// a client that goes away mid-stream fails the ingest cleanly instead of leaving it half
/// done; the task holds `permit`, the stream's `--max-streams` slot and its write pin,
/// and graceful shutdown waits for it) and returns the one `PutResult` carrying
/// `DoPutUpdateResult { record_count }`.
///
/// # Errors
/// Bad names or options, transaction errors, a schema mismatch naming the column,
/// storage and catalog failures. A failed ingest in a transaction aborts the transaction:
/// its staged files are deleted and only a rollback is accepted.
pub(crate) async fn do_put(
    svc: Arc<Service>,
    session: Option<SessionKey>,
    cmd: CommandStatementIngest,
    batches: Batches,
    key: Option<TxnKey>,
    permit: (OwnedSemaphorePermit, crate::catalog::WritePin),
) -> Result<PutResult, Error> {
    // The task, not this handler, holds the stream's `--max-streams` permit: a client that
    // goes away drops the handler at once, but the ingest runs until it notices.
    let tracker = svc.puts.clone();
    let task = tracker.spawn(
        async move {
            let _permit = permit;
            ingest(&svc, session, cmd, batches, key.as_ref()).await
        }
        .instrument(Span::current()),
    );
    let rows = task.await.map_err(|e| Error::Internal {
        what: format!("the ingest task failed: {e}"),
    })??;
    Ok(query::update_result(rows))
}

async fn ingest(
    svc: &Service,
    session: Option<SessionKey>,
    cmd: CommandStatementIngest,
    batches: Batches,
    key: Option<&TxnKey>,
) -> Result<u64, Error> {
    let (ident, definition) = ingest_target(&cmd, &svc.catalog_name)?;
    auth::record("table", &ident);
    let target = svc
        .transactions
        .target(cmd.transaction_id.as_deref(), session.as_ref())?;
    match target {
        Target::Txn(txn) => {
            auth::record("transaction", txn.id);
            let mut state = txn.state.lock().await;
            if let Some(reason) = &state.failure {
                return Err(Error::TransactionAborted {
                    reason: reason.clone(),
                });
            }
            // Poisoned until the ingest finishes: a cancelled ingest cannot be committed.
            state.failure = Some(format!("an ingest into {ident} did not finish"));
            let result =
                stream_into(svc, &mut state, &ident, definition, batches, Some(&txn)).await;
            txn.touch();
            match result {
                Ok(rows) => {
                    state.failure = None;
                    info!(transaction = %txn.id, table = %ident, rows, "ingest staged");
                    Ok(rows)
                }
                Err(e) => {
                    // The error itself is logged once, where it becomes the RPC's status.
                    info!(transaction = %txn.id, table = %ident, "ingest failed; transaction aborted");
                    state.failure = Some(format!("the ingest into {ident} failed: {e}"));
                    state.discard().await;
                    Err(e)
                }
            }
        }
        Target::Autocommit => {
            let mut state = TxnState::default();
            let rows = match stream_into(svc, &mut state, &ident, definition, batches, None).await {
                Ok(rows) => rows,
                Err(e) => {
                    state.discard().await;
                    return Err(e);
                }
            };
            state.commit(svc, LANE_STREAM, key).await?;
            Ok(rows)
        }
    }
}

/// Reads `batches` into `state`'s entry for the existing table `ident` (appended to,
/// never created): what an overwriting put stages before its delete is added.
///
/// # Errors
/// As the ingest of a Flight SQL transaction; `NotFound` when the table is gone.
pub(super) async fn stage_stream(
    svc: &Service,
    state: &mut TxnState,
    ident: &TableIdent,
    batches: Batches,
) -> Result<u64, Error> {
    let definition = Definition {
        create_missing: false,
        fail_if_exists: false,
        replace: false,
    };
    stream_into(svc, state, ident, definition, batches, None).await
}

/// Reads the stream into `state`'s entry for `ident`, writing a data file every
/// `--target-file-size` bytes. Returns the rows read.
async fn stream_into(
    svc: &Service,
    state: &mut TxnState,
    ident: &TableIdent,
    definition: Definition,
    mut batches: Batches,
    txn: Option<&super::txn::Txn>,
) -> Result<u64, Error> {
    let (schema, mut next) = batches.first("ingest stream").await?;
    resolve(svc, state, ident, definition, &schema).await?;
    let name = ident.to_string();
    let limits = BatchLimits {
        budget: svc.budget.clone(),
        target_file_size_bytes: svc.config.target_file_size,
        commit_interval: None,
    };
    let staged = staged_mut(state, ident)?;
    let part = &mut staged.part;
    let mut batcher = match &part.schema_change {
        Some(change) => Batcher::with_schema(&part.table, change.schema.clone(), limits)?,
        None => Batcher::new(&part.table, limits)?,
    };
    let mut sink = StageFiles {
        table: &part.table,
        names: &mut staged.names,
        files: &mut part.data_files,
    };
    let mut rows = 0u64;
    loop {
        let batch = match next.take() {
            Some((batch, _)) => batch,
            None => match batches.next().await? {
                Some((batch, _)) => batch,
                None => break,
            },
        };
        if let Some(txn) = txn {
            txn.touch();
        }
        let taken = batcher.push(&batch, &mut sink).await?;
        debug!(table = %name, rows = taken, "ingest batch");
        rows += taken;
    }
    batcher.cut(&mut sink).await?;
    Ok(rows)
}

fn staged_mut<'a>(state: &'a mut TxnState, ident: &TableIdent) -> Result<&'a mut TxnTable, Error> {
    state.table_mut(ident).ok_or_else(|| Error::Internal {
        what: format!("table {ident} is not staged in this transaction"),
    })
}

/// Makes sure `state` has an entry for `ident`, applying the table definition options:
/// an existing table (in the catalog or staged earlier in the transaction) is appended to
/// or refused; a missing one is planned from `schema` (created by the commit) or refused.
async fn resolve(
    svc: &Service,
    state: &mut TxnState,
    ident: &TableIdent,
    definition: Definition,
    schema: &arrow_schema::SchemaRef,
) -> Result<(), Error> {
    if let Some(TxnTable { part: staged, .. }) = state.table_mut(ident) {
        return resolve_staged(staged, ident, definition, schema);
    }
    let (table, create) = match svc.catalog.load_table(ident).await {
        Ok(table) => {
            if definition.fail_if_exists {
                return Err(already_exists(ident, ""));
            }
            // Refused before any file is written: the commit would be too.
            crate::catalog::check_file_paths(&ident.to_string(), table.metadata().properties())
                .map_err(|e| Error::catalog(ident, e))?;
            if definition.replace {
                return stage_replace(svc, state, table, schema);
            }
            (table, false)
        }
        Err(e) if e.kind() == ErrorKind::TableNotFound => {
            (plan_missing(svc, ident, definition, schema).await?, true)
        }
        Err(e) => return Err(Error::catalog(ident, e)),
    };
    let schema_change = if create {
        None
    } else {
        write::evolve::plan(&table, table.metadata().current_schema(), schema)?
    };
    state.tables.push(TxnTable {
        part: StagedTable {
            table,
            create,
            data_files: Vec::new(),
            schema_change,
            deletes: Vec::new(),
            replace: false,
        },
        names: FileNames::new(),
        store: FileStore::of(svc.catalog.warehouse()),
    });
    Ok(())
}

/// `AlreadyExists` for `ident` under `if_exists = FAIL` (`why` says where it exists).
fn already_exists(ident: &TableIdent, why: &str) -> Error {
    Error::catalog(
        ident,
        iceberg::Error::new(
            ErrorKind::TableAlreadyExists,
            format!("table {ident} already exists{why} and if_exists is FAIL"),
        ),
    )
}

/// An ingest into a table this transaction staged before: refused under `FAIL`, or a
/// replace after other writes; else the schema evolved further from where the earlier
/// ingest left it (when the table opted in).
///
/// # Errors
/// As described; [`write::evolve::plan`]'s errors.
fn resolve_staged(
    staged: &mut StagedTable,
    ident: &TableIdent,
    definition: Definition,
    schema: &arrow_schema::SchemaRef,
) -> Result<(), Error> {
    if definition.fail_if_exists {
        return Err(already_exists(
            ident,
            " (written earlier in this transaction)",
        ));
    }
    if definition.replace && !staged.replace {
        return Err(Error::catalog(
            ident,
            iceberg::Error::new(
                ErrorKind::PreconditionFailed,
                format!(
                    "this transaction wrote to table {ident} before replacing it: replace \
                     it first (mode \"replace\"), then append"
                ),
            ),
        ));
    }
    let current = match &staged.schema_change {
        Some(change) => change.schema.clone(),
        None => staged.table.metadata().current_schema().clone(),
    };
    if let Some(change) = write::evolve::plan(&staged.table, &current, schema)? {
        staged.schema_change = Some(crate::snapshot::schema_change::SchemaChange {
            base_schema_id: staged.table.metadata().current_schema_id(),
            schema: change.schema,
        });
    }
    Ok(())
}

/// The table a commit creates for an ingest into missing `ident` (Arrow schema
/// `schema`), when the definition and `--auto-create-tables` allow it.
///
/// # Errors
/// `NotFound` under `if_not_exist = FAIL`; [`Service::may_create_on_put`]'s refusal; a
/// schema without an Iceberg form; the catalog's errors.
async fn plan_missing(
    svc: &Service,
    ident: &TableIdent,
    definition: Definition,
    schema: &arrow_schema::SchemaRef,
) -> Result<iceberg::table::Table, Error> {
    if !definition.create_missing {
        return Err(Error::catalog(
            ident,
            iceberg::Error::new(
                ErrorKind::TableNotFound,
                format!("table {ident} does not exist and if_not_exist is FAIL"),
            ),
        ));
    }
    // Mode "create" asks for the table by name; "create_append" (and no options) creates
    // on a put, which `--auto-create-tables` governs.
    if !definition.fail_if_exists {
        svc.may_create_on_put(ident).await?;
    }
    let name = ident.to_string();
    let creation = iceberg::TableCreation::builder()
        .name(ident.name().to_string())
        .schema(write::iceberg_schema_for(&name, schema)?)
        .build();
    svc.catalog
        .plan_table(ident, creation)
        .await
        .map_err(|e| Error::catalog(ident, e))
}

/// Stages the replace of `table` by a stream with Arrow schema `arrow`: its new schema
/// (fresh field ids above the table's `last-column-id`) is what the stream's files are
/// written with.
///
/// # Errors
/// [`crate::write::WriteError::Schema`] naming a column without an Iceberg type.
fn stage_replace(
    svc: &Service,
    state: &mut TxnState,
    table: iceberg::table::Table,
    arrow: &arrow_schema::SchemaRef,
) -> Result<(), Error> {
    let name = table.identifier().to_string();
    let metadata = table.metadata();
    let schema = crate::snapshot::replace_table::with_fresh_ids(
        &write::iceberg_schema_for(&name, arrow)?,
        metadata.last_column_id(),
    )
    .map_err(|e| Error::catalog(table.identifier(), e))?;
    let change = crate::snapshot::schema_change::SchemaChange {
        base_schema_id: metadata.current_schema_id(),
        schema: Arc::new(schema),
    };
    state.tables.push(TxnTable {
        part: StagedTable {
            table,
            create: false,
            data_files: Vec::new(),
            schema_change: Some(change),
            deletes: Vec::new(),
            replace: true,
        },
        names: FileNames::new(),
        store: FileStore::of(svc.catalog.warehouse()),
    });
    Ok(())
}
