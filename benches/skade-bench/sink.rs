//! A Flight server that only receives: its `DoPut` decodes every batch and drops it.
//!
//! The `ingest` arm uses it to measure what the Flight loopback transfer alone costs on
//! this machine (client encode, HTTP/2, server decode), beside skade's encode ceiling:
//! skade's end-to-end put cannot beat either, and on a machine whose cores are all busy
//! it cannot beat their combined CPU bound. Same transport settings as skade's server
//! (HTTP/2 windows, `TCP_NODELAY`).

use std::net::SocketAddr;

use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo,
    HandshakeRequest, HandshakeResponse, PollInfo, PutResult, SchemaResult, Ticket,
};
use futures::stream::BoxStream;
use tokio::sync::oneshot;
use tonic::{Request, Response, Status, Streaming};

use crate::common::*;

/// A running sink server; dropping the stop sender ends it.
pub(crate) struct Sink {
    /// Where it listens (127.0.0.1, ephemeral port).
    pub(crate) addr: SocketAddr,
    _stop: oneshot::Sender<()>,
}

/// Starts a sink on 127.0.0.1.
pub(crate) async fn start() -> Sink {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok::<_, std::io::Error>(conn)
    });
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .initial_stream_window_size(16 << 20)
            .initial_connection_window_size(32 << 20)
            .add_service(
                FlightServiceServer::new(Drain)
                    .max_decoding_message_size(64 << 20)
                    .max_encoding_message_size(64 << 20),
            )
            .serve_with_incoming_shutdown(incoming, async {
                let _ = stopped.await;
            })
            .await
            .expect("sink server");
    });
    Sink { addr, _stop: stop }
}

struct Drain;

type Stream<T> = BoxStream<'static, Result<T, Status>>;

#[tonic::async_trait]
impl FlightService for Drain {
    type HandshakeStream = Stream<HandshakeResponse>;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        let data = request.into_inner().map_err(FlightError::from);
        let mut batches = FlightRecordBatchStream::new_from_flight_data(data);
        let mut rows = 0u64;
        while let Some(batch) = batches.next().await {
            rows += batch
                .map_err(|e| Status::invalid_argument(e.to_string()))?
                .num_rows() as u64;
        }
        let ack = PutResult {
            app_metadata: rows.to_le_bytes().to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(ack)]))))
    }

    async fn handshake(
        &self,
        _: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn list_flights(
        &self,
        _: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn get_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn poll_flight_info(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn get_schema(
        &self,
        _: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn do_get(&self, _: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn do_exchange(
        &self,
        _: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn do_action(
        &self,
        _: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        Err(Status::unimplemented("sink"))
    }
    async fn list_actions(
        &self,
        _: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::unimplemented("sink"))
    }
}
