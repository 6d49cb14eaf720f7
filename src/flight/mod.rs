//! The Arrow Flight service: the state every RPC shares ([`Service`]) and the RPC
//! dispatch ([`SkadeFlight`]) over streaming put (`put.rs`, Lane 1), read back
//! (`read.rs`), the Flight SQL subset for ingest and transactions (`sql.rs`, `txn.rs`,
//! Lane 2), metadata (`metadata.rs`) and queries (`query.rs`), exactly-once writer ids and sequences (`exactly_once.rs`), table names on the
//! wire ([`names`]) and the decoding both ingest lanes share (`decode.rs`).

mod decode;
mod dml;
mod exactly_once;
pub(crate) use exactly_once::spawn_writer_expiry;
mod metadata;
pub mod names;
mod overwrite;
mod put;
mod query;
mod read;
mod sql;
pub mod txn;

use std::sync::Arc;

use arrow_flight::flight_descriptor::DescriptorType;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::Command;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use iceberg::TableIdent;
use tokio::sync::mpsc;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::metadata::MetadataMap;
use tonic::{Code, Request, Response, Status, Streaming};
use tracing::{Instrument, Span, info, warn};

use crate::auth::{self, Tokens};
use crate::catalog::{RedbCatalog, WritePin};
use crate::config::IngestConfig;
use crate::error::Error;
use crate::metrics::Metrics;
use crate::write::MemoryBudget;
use decode::{Batches, BoxStream};
use txn::SessionKey;

/// What every RPC shares: the catalog, the metrics and the ingest settings.
#[derive(Debug)]
pub struct Service {
    /// The catalog all tables live in.
    pub catalog: Arc<RedbCatalog>,
    /// The catalog's name (`--catalog-name`): Flight SQL metadata lists the tables under
    /// it, and an ingest or query may name it.
    pub catalog_name: String,
    /// This server's metrics.
    pub metrics: Metrics,
    /// How puts are cut into files and commits.
    pub config: IngestConfig,
    /// The memory budget all streams share for rows in flight.
    pub budget: MemoryBudget,
    /// Open and recently finished Flight SQL transactions.
    pub transactions: txn::Transactions,
    /// Cancelled when the server starts shutting down: streaming puts stop reading,
    /// commit what they have and end with `Unavailable`.
    pub shutdown: CancellationToken,
    /// The streaming-put tasks, so shutdown can wait for them.
    pub puts: TaskTracker,
    /// One permit per open DoPut stream (`--max-streams`).
    pub streams: Arc<Semaphore>,
    /// The bearer tokens when authentication is on (`--auth-token-file`).
    pub tokens: Option<Arc<Tokens>>,
}

/// The namespace property saying whether puts may create tables in the namespace
/// (`true` or `false`), overriding `--auto-create-tables` for its tables.
pub const AUTO_CREATE_PROPERTY: &str = "skade.ingest.auto-create-tables";

impl Service {
    /// Whether a put may create `ident`, which does not exist: the property
    /// [`AUTO_CREATE_PROPERTY`] of its namespace when set, else `--auto-create-tables`.
    ///
    /// # Errors
    /// [`Error::NoAutoCreate`] (NotFound) naming the table and what turned creation off;
    /// [`Error::BadRequest`] for a property that is neither `true` nor `false`; the
    /// catalog's error reading the namespace.
    pub(crate) async fn may_create_on_put(&self, ident: &iceberg::TableIdent) -> Result<(), Error> {
        use iceberg::Catalog;
        let namespace = ident.namespace();
        let property = match self.catalog.get_namespace(namespace).await {
            Ok(ns) => ns.properties().get(AUTO_CREATE_PROPERTY).cloned(),
            Err(e) if e.kind() == iceberg::ErrorKind::NamespaceNotFound => None,
            Err(e) => return Err(Error::catalog(ident, e)),
        };
        let setting = match property.as_deref().map(str::trim) {
            None if self.config.auto_create_tables => return Ok(()),
            None => "--auto-create-tables false".to_string(),
            Some(v) if v.eq_ignore_ascii_case("true") => return Ok(()),
            Some(v) if v.eq_ignore_ascii_case("false") => {
                format!("namespace {namespace} has {AUTO_CREATE_PROPERTY}=false")
            }
            Some(other) => {
                return Err(Error::BadRequest {
                    reason: format!(
                        "namespace {namespace}: property {AUTO_CREATE_PROPERTY}={other:?} must be true or false"
                    ),
                });
            }
        };
        Err(Error::NoAutoCreate {
            table: ident.to_string(),
            setting,
        })
    }
}

/// The tonic `FlightService` over a shared [`Service`].
#[derive(Debug, Clone)]
pub struct SkadeFlight {
    svc: Arc<Service>,
}

impl SkadeFlight {
    /// Wraps `svc`.
    pub fn new(svc: Arc<Service>) -> Self {
        Self { svc }
    }

    /// Counts a failed put, logs it (once, here) and turns it into its status.
    fn fail(&self, e: Error) -> Status {
        let status = reject(e);
        self.svc
            .metrics
            .record_ingest_error(code_name(status.code()));
        status
    }

    /// `GetFlightInfo` (and `GetSchema`, which answers its schema) on `descriptor`: a
    /// Flight SQL command's info, or a table's for a `PATH` descriptor. A `DELETE` run
    /// as a query runs here when `run` (`GetFlightInfo`), in `session`'s transaction if
    /// it has one; `GetSchema` only answers its result's schema.
    async fn flight_info(
        &self,
        descriptor: &FlightDescriptor,
        session: Option<SessionKey>,
        run: bool,
    ) -> Result<FlightInfo, Status> {
        if is_cmd(descriptor) {
            return sql::flight_info(&self.svc, descriptor, session.as_ref(), run)
                .await
                .map_err(reject);
        }
        let ident = path_table(descriptor).map_err(reject)?;
        auth::record("table", &ident);
        read::flight_info(&self.svc, &ident).await.map_err(reject)
    }

    /// A permit for one more DoPut stream.
    fn stream_permit(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.svc.streams.clone().try_acquire_owned().map_err(|_| {
            self.fail(Error::LimitReached {
                what: "open DoPut streams",
                limit: self.svc.config.max_streams.get(),
                flag: "--max-streams",
            })
        })
    }

    /// A DoPut whose descriptor is the Flight SQL `command`: Lane 2's bulk ingest (keyed
    /// by the exactly-once headers in `headers`), or the parameters bound to a prepared
    /// query; updates and other commands are refused. `held` (the stream's permit and
    /// write pin) is kept until the ingest ends.
    ///
    /// # Errors
    /// The status of the ingest's or the binding's error, or of the refusal (each
    /// counted by [`Self::fail`]).
    async fn put_command(
        &self,
        command: Command,
        batches: Batches,
        session: Option<SessionKey>,
        headers: &MetadataMap,
        held: (OwnedSemaphorePermit, WritePin),
    ) -> Result<Response<BoxStream<PutResult>>, Status> {
        let cmd = match command {
            Command::CommandStatementIngest(cmd) => cmd,
            Command::CommandPreparedStatementQuery(cmd) => {
                let result = query::bind_parameters(cmd, batches)
                    .await
                    .map_err(|e| self.fail(e))?;
                return Ok(one_result(result));
            }
            Command::CommandStatementUpdate(cmd) => {
                let result = query::execute_update(&self.svc, session.as_ref(), cmd)
                    .await
                    .map_err(|e| self.fail(e))?;
                return Ok(one_result(result));
            }
            Command::CommandPreparedStatementUpdate(cmd) => {
                let result =
                    query::execute_prepared_update(&self.svc, session.as_ref(), cmd, batches)
                        .await
                        .map_err(|e| self.fail(e))?;
                return Ok(one_result(result));
            }
            other => {
                return Err(self.fail(Error::Unsupported {
                    what: format!(
                        "DoPut with the command {} (only CommandStatementIngest, \
                         CommandStatementUpdate and the prepared statement commands)",
                        other.type_url()
                    ),
                }));
            }
        };
        let key = exactly_once::txn_key(headers).map_err(|e| self.fail(e))?;
        let result = sql::do_put(self.svc.clone(), session, cmd, batches, key, held)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(one_result(result))
    }

    /// An overwriting put into `ident` ([`overwrite`]): a task of [`Service::puts`] runs
    /// it to its end, holding `held`, and the returned stream answers its one ack.
    ///
    /// # Errors
    /// The status of a malformed exactly-once header; the put's own errors end the
    /// returned stream instead.
    fn put_overwrite(
        &self,
        ident: TableIdent,
        filter: String,
        batches: Batches,
        headers: &MetadataMap,
        held: (OwnedSemaphorePermit, WritePin),
    ) -> Result<Response<BoxStream<PutResult>>, Status> {
        auth::record("table", &ident);
        let key = exactly_once::txn_key(headers).map_err(|e| self.fail(e))?;
        let svc = self.svc.clone();
        let task = self.svc.puts.spawn(
            async move {
                let (_permit, _pin) = held;
                overwrite::run(&svc, ident, &filter, batches, key.as_ref()).await
            }
            .instrument(Span::current()),
        );
        let this = self.clone();
        let answer = async move {
            let result = task.await.map_err(|e| Error::Internal {
                what: format!("the overwrite task failed: {e}"),
            });
            result.and_then(|r| r).map_err(|e| this.fail(e))
        };
        Ok(Response::new(Box::pin(futures::stream::once(answer))))
    }

    /// A streaming put (Lane 1) into `ident`, with the writer id in `headers` if any: a
    /// task of [`Service::puts`] ingests `batches` and answers on the returned stream,
    /// holding `held` (the stream's permit and write pin) until it ends.
    ///
    /// # Errors
    /// The status of a malformed writer id header; the ingest's own errors end the
    /// returned stream instead.
    fn put_table(
        &self,
        ident: TableIdent,
        batches: Batches,
        headers: &MetadataMap,
        held: (OwnedSemaphorePermit, WritePin),
    ) -> Result<Response<BoxStream<PutResult>>, Status> {
        auth::record("table", &ident);
        let writer = exactly_once::writer_id(headers).map_err(|e| self.fail(e))?;
        let (tx, rx) = mpsc::unbounded_channel();
        let this = self.clone();
        let guard = self.svc.metrics.table_put_opened(&ident.to_string());
        self.svc.puts.spawn(
            async move {
                let _guard = guard;
                let (_permit, _pin) = held;
                if let Err(e) = put::run(&this.svc, ident, batches, writer, tx.clone()).await {
                    let _ = tx.send(Err(this.fail(e)));
                }
            }
            .instrument(Span::current()),
        );
        Ok(Response::new(Box::pin(UnboundedReceiverStream::new(rx))))
    }
}

/// Logs a failed RPC once, in the RPC's span: a client that left (cancel, reset, broken
/// pipe, deadline) as `client left` at `info` with the rows committed before, the
/// client's mistakes as `request refused` at `info`, a stream the server's shutdown ended
/// as `request ended by shutdown` at `info`, the server's failures as `request failed`
/// at `warn`; returns its status.
fn reject(e: Error) -> Status {
    let message = crate::error::describe(&e);
    let committed_rows = match &e {
        Error::ClientGone { committed_rows, .. } => Some(*committed_rows),
        _ => None,
    };
    let shutdown = matches!(e, Error::ShuttingDown { .. });
    let status = e.into_status();
    let code = code_name(status.code());
    match (committed_rows, status.code()) {
        (Some(committed_rows), _) => {
            info!(code, committed_rows, error = %message, "client left")
        }
        // Planned: the operator stopped the server; the client resends the rest.
        (None, _) if shutdown => info!(code, error = %message, "request ended by shutdown"),
        (
            None,
            Code::Internal | Code::Unavailable | Code::Aborted | Code::Unknown | Code::DataLoss,
        ) => {
            warn!(code, error = %message, "request failed")
        }
        (None, _) => info!(code, error = %message, "request refused"),
    }
    status
}

/// The gRPC code's name as the metric label and log field show it (`NotFound`, ...).
pub(crate) fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "Ok",
        Code::Cancelled => "Cancelled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

/// How long `Handshake` waits for a first request whose payload may carry the token.
const HANDSHAKE_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

fn unimplemented(rpc: &str) -> Status {
    reject(Error::Unsupported {
        what: rpc.to_string(),
    })
}

/// The table of a `PATH` descriptor.
fn path_table(descriptor: &FlightDescriptor) -> Result<iceberg::TableIdent, Error> {
    match DescriptorType::try_from(descriptor.r#type) {
        Ok(DescriptorType::Path) => names::table_from_path(&descriptor.path),
        Ok(DescriptorType::Cmd) => Err(Error::BadRequest {
            reason: "this command descriptor is not one skade serves; use a PATH descriptor \
                     [namespace..., table]"
                .to_string(),
        }),
        _ => Err(Error::BadRequest {
            reason: "the descriptor is neither PATH nor CMD".to_string(),
        }),
    }
}

/// Whether `descriptor` is a `CMD` descriptor (a Flight SQL command).
fn is_cmd(descriptor: &FlightDescriptor) -> bool {
    DescriptorType::try_from(descriptor.r#type) == Ok(DescriptorType::Cmd)
}

/// A DoPut's or DoAction's answer of one message.
fn one_result<T: Send + 'static>(result: T) -> Response<BoxStream<T>> {
    Response::new(Box::pin(futures::stream::iter([Ok(result)])))
}

#[tonic::async_trait]
impl FlightService for SkadeFlight {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = BoxStream<FlightData>;
    type DoPutStream = BoxStream<PutResult>;
    type DoExchangeStream = BoxStream<FlightData>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    /// Without authentication: accepted, nothing returned. With it: trades a valid token
    /// (bearer or basic-auth header, or the first request's payload) for the response
    /// header `authorization: Bearer <token>` and one response carrying the token.
    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        let Some(tokens) = &self.svc.tokens else {
            return Ok(Response::new(Box::pin(futures::stream::empty())));
        };
        let token = match auth::handshake_token(tokens, request.metadata(), None) {
            Ok(token) => token,
            Err(_) => {
                // No usable header: the token may be the first request's payload.
                let mut input = request.into_inner();
                let first = tokio::time::timeout(HANDSHAKE_READ_TIMEOUT, input.message())
                    .await
                    .ok()
                    .and_then(Result::ok)
                    .flatten();
                let payload = first.as_ref().map(|r| r.payload.as_ref());
                auth::handshake_token(tokens, &tonic::metadata::MetadataMap::new(), payload)
                    .map_err(|_| {
                        tokens.refused(auth::SURFACE_FLIGHT);
                        reject(Error::Unauthenticated)
                    })?
            }
        };
        let bearer = format!("Bearer {token}")
            .parse::<tonic::metadata::MetadataValue<_>>()
            .map_err(|_| reject(Error::Unauthenticated))?;
        let reply = HandshakeResponse {
            protocol_version: 0,
            payload: token.into_bytes().into(),
        };
        let mut response: Response<Self::HandshakeStream> =
            Response::new(Box::pin(futures::stream::iter([Ok(reply)])));
        response.metadata_mut().insert(auth::AUTHORIZATION, bearer);
        Ok(response)
    }

    /// The tables whose dotted name (`ns.table`) starts with the criteria's expression
    /// (UTF-8; empty lists every table), in name order.
    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        let prefix = std::str::from_utf8(&request.get_ref().expression).map_err(|_| {
            reject(Error::BadRequest {
                reason: "the ListFlights criteria must be a UTF-8 table-name prefix \
                         (e.g. `demo.`)"
                    .to_string(),
            })
        })?;
        let infos = read::list(&self.svc, prefix).await.map_err(reject)?;
        Ok(Response::new(read::info_stream(infos)))
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let session = sql::session_of(&request);
        let info = self.flight_info(request.get_ref(), session, true).await?;
        Ok(Response::new(info))
    }

    async fn poll_flight_info(
        &self,
        _request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(unimplemented("PollFlightInfo"))
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let info = self.flight_info(request.get_ref(), None, false).await?;
        Ok(Response::new(SchemaResult {
            schema: info.schema,
        }))
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        if sql::is_command_ticket(&request.get_ref().ticket) {
            let stream = sql::do_get(&self.svc, &request.get_ref().ticket)
                .await
                .map_err(reject)?;
            return Ok(Response::new(stream));
        }
        let ident = names::table_from_ticket(&request.get_ref().ticket).map_err(reject)?;
        auth::record("table", &ident);
        let stream = read::do_get(&self.svc, &ident).await.map_err(reject)?;
        Ok(Response::new(stream))
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        self.svc.metrics.record_ingest_request();
        let permit = self.stream_permit()?;
        // Online cleanup leaves the files this put writes alone until it has ended.
        let pin = self.svc.catalog.pin_writes();
        let session = sql::session_of(&request);
        // Exactly-once headers: a writer id on a streaming put, writer id + sequence on a
        // Flight SQL ingest; each lane reads its own.
        let headers = request.metadata().clone();
        let limit = self.svc.config.max_message_size;
        let mut input = request.into_inner();
        let first = decode::first_message(&mut input, limit)
            .await
            .map_err(|e| self.fail(e))?;
        let descriptor = first.flight_descriptor.clone().unwrap_or_default();
        if is_cmd(&descriptor) {
            let command = sql::command(&descriptor.cmd).map_err(|e| self.fail(e))?;
            let batches = Batches::new(first, input, limit);
            return self
                .put_command(command, batches, session, &headers, (permit, pin))
                .await;
        }
        let ident = path_table(&descriptor).map_err(|e| self.fail(e))?;
        let batches = Batches::new(first, input, limit);
        if let Some(filter) = overwrite::filter_of(&headers).map_err(|e| self.fail(e))? {
            return self.put_overwrite(ident, filter, batches, &headers, (permit, pin));
        }
        self.put_table(ident, batches, &headers, (permit, pin))
    }

    async fn do_exchange(
        &self,
        _request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(unimplemented("DoExchange"))
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        self.svc.metrics.record_ingest_request();
        let session = sql::session_of(&request);
        let headers = request.metadata().clone();
        let action = request.into_inner();
        // Only a COMMIT is keyed (exactly-once); other actions ignore the headers.
        let key = if action.r#type == sql::END_TRANSACTION {
            exactly_once::txn_key(&headers).map_err(|e| self.fail(e))?
        } else {
            None
        };
        if action.r#type == exactly_once::WRITER_MARKS_ACTION {
            let body = exactly_once::writer_marks(&self.svc.catalog, &action.body)
                .await
                .map_err(reject)?;
            return Ok(one_result(arrow_flight::Result { body: body.into() }));
        }
        let stream = sql::do_action(&self.svc, session, key, action)
            .await
            .map_err(|e| self.fail(e))?;
        Ok(Response::new(stream))
    }

    async fn list_actions(
        &self,
        _request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        let mut types = sql::action_types();
        types.push(exactly_once::action_type());
        let types = types.into_iter().map(Ok);
        Ok(Response::new(Box::pin(futures::stream::iter(types))))
    }
}
