//! Decoding what a client sends, for both ingest lanes: a `DoPut`'s Flight data into
//! record batches (the first batch and the schema, then batch by batch, each with its
//! `app_metadata`), decode-side Flight errors into skade's [`Error`], and the one boxed
//! stream type every streaming RPC answers with.

use std::pin::Pin;

use arrow_array::RecordBatch;
use arrow_flight::FlightData;
use arrow_flight::decode::{DecodedPayload, FlightDataDecoder};
use arrow_flight::error::FlightError;
use arrow_schema::SchemaRef;
use bytes::Bytes;
use futures::{Stream, StreamExt, TryStreamExt};
use tonic::{Code, Status, Streaming};

use crate::error::Error;

/// A streaming RPC's answer: items of `T`, or a status that ends the stream.
pub(crate) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// One record batch of a `DoPut` and the `app_metadata` of the Flight message that
/// carried it (a streaming put's exactly-once sequence; empty when unset).
pub(crate) type Batch = (RecordBatch, Bytes);

/// A `DoPut`'s record batches as they arrive. A stream keeps one schema: a second Schema
/// message is an error, as arrow-flight's own `FlightRecordBatchStream` makes it.
/// Errors are mapped by [`flight_error`] against the message size limit.
pub(crate) struct Batches {
    data: FlightDataDecoder,
    limit_bytes: u64,
}

/// Why an empty `DoPut` (no message at all) is refused: what the client sent, what the
/// server did (nothing) and what to do instead. The ADBC Flight SQL drivers send one for
/// an ingest of a table with no rows; refusing it loudly keeps the user from believing
/// an empty table was created.
pub(crate) const EMPTY_DOPUT: &str = "empty DoPut: the client sent no descriptor and no schema \
     (ADBC drivers send this for an ingest of a table with no rows), so skade created nothing \
     and touched no open transaction (its other tables still commit); to create an empty \
     table, create it over the REST catalog, or ingest a stream that carries its schema \
     (docs/transactions.md, \"Empty tables\")";

/// The first message of a `DoPut`, the one whose descriptor names the target, read from
/// `input` (whose messages may be at most `limit_bytes` long).
///
/// # Errors
/// [`Error::BadRequest`] ([`EMPTY_DOPUT`]) for a stream with no message; [`flight_error`]'s mapping of a
/// transport failure.
pub(crate) async fn first_message(
    input: &mut Streaming<FlightData>,
    limit_bytes: u64,
) -> Result<FlightData, Error> {
    match input.message().await {
        Ok(Some(first)) => Ok(first),
        Ok(None) => Err(Error::BadRequest {
            reason: EMPTY_DOPUT.to_string(),
        }),
        Err(status) => Err(flight_error(
            FlightError::Tonic(Box::new(status)),
            limit_bytes,
        )),
    }
}

impl Batches {
    /// The batches of a `DoPut`: its `first` message (from [`first_message`]; it may
    /// carry the schema or a batch too) and the rest of `input`, whose messages may be at
    /// most `limit_bytes` long (`--max-message-size`).
    pub(crate) fn new(first: FlightData, input: Streaming<FlightData>, limit_bytes: u64) -> Self {
        let data = futures::stream::once(async move { Ok(first) })
            .chain(input)
            .map_err(|status| FlightError::Tonic(Box::new(status)));
        Self {
            data: FlightDataDecoder::new(data),
            limit_bytes,
        }
    }

    /// Reads up to the first record batch: returns the stream's Arrow schema (the first
    /// batch's, else that of a stream that sent a schema and no rows) and the first batch,
    /// `None` for a stream with no batch. Call it once, before [`Self::next`].
    ///
    /// # Errors
    /// [`Error::BadRequest`] saying "the `{stream}` carries no Arrow schema" for a stream
    /// that ends before any schema; the errors of [`Self::next`].
    pub(crate) async fn first(
        &mut self,
        stream: &str,
    ) -> Result<(SchemaRef, Option<Batch>), Error> {
        let first = self.next().await?;
        let schema = match (&first, self.data.schema()) {
            (Some((batch, _)), _) => batch.schema(),
            (None, Some(schema)) => schema.clone(),
            (None, None) => {
                return Err(Error::BadRequest {
                    reason: format!("the {stream} carries no Arrow schema"),
                });
            }
        };
        Ok((schema, first))
    }

    /// The next record batch and its `app_metadata`; `None` at the end of the stream.
    ///
    /// # Errors
    /// [`flight_error`]'s mapping of a message that does not decode, a second Schema
    /// message, a message over the size limit, or a client that went away.
    ///
    /// # Cancel safety
    /// Cancel safe: a message is taken from the stream only when it is returned.
    pub(crate) async fn next(&mut self) -> Result<Option<Batch>, Error> {
        loop {
            let had_schema = self.data.schema().is_some();
            let Some(item) = self.data.next().await else {
                return Ok(None);
            };
            let item = item.map_err(|e| flight_error(e, self.limit_bytes))?;
            match item.payload {
                DecodedPayload::RecordBatch(batch) => {
                    return Ok(Some((batch, item.inner.app_metadata)));
                }
                DecodedPayload::Schema(_) if had_schema => {
                    return Err(flight_error(
                        FlightError::protocol(
                            "Unexpectedly saw multiple Schema messages in FlightData stream",
                        ),
                        self.limit_bytes,
                    ));
                }
                DecodedPayload::Schema(_) | DecodedPayload::None => {}
            }
        }
    }
}

/// Maps a decode-side Flight error to skade's error: a message over the size limit
/// (`limit_bytes`) becomes [`Error::MessageTooLarge`] naming the limit; a client that
/// left becomes [`Error::ClientGone`] (with 0 rows: the caller fills in what it
/// committed); another transport status [`Error::Transport`]; anything else (bad IPC, a
/// protocol error) [`Error::Decode`].
pub(crate) fn flight_error(e: FlightError, limit_bytes: u64) -> Error {
    match e {
        FlightError::Tonic(status)
            if matches!(status.code(), Code::OutOfRange | Code::ResourceExhausted) =>
        {
            Error::MessageTooLarge {
                limit_bytes,
                detail: status.message().to_string(),
            }
        }
        FlightError::Tonic(status) => match crate::error::client_ending(&status) {
            Some(reason) => Error::ClientGone {
                reason,
                committed_rows: 0,
            },
            None => Error::Transport(status),
        },
        other => Error::Decode {
            reason: other.to_string(),
        },
    }
}
