//! Exactly-once on the streaming put: a producer names itself with the
//! [`WRITER_ID_HEADER`] header and numbers each batch in its `FlightData.app_metadata`
//! (a decimal `u64`, as pyarrow's `write_with_metadata` sends it). Batches at or below
//! the writer's committed high-water mark in the table are replays and are skipped; the
//! rest must be consecutive. Each commit carries the writer id and sequence range in its
//! snapshot summary, and the catalog advances the mark in the same redb transaction
//! (`catalog::marks`), so a producer that retries after any failure lands every batch
//! exactly once.

use std::str;
use std::sync::Weak;
use std::time::Duration;

use tonic::metadata::MetadataMap;
use tracing::{info, warn};

use super::Service;
use crate::catalog::marks::{MAX_WRITER_ID_BYTES, WriterMark};
use crate::error::Error;

/// The gRPC header that names a producer (any string of at most
/// [`MAX_WRITER_ID_BYTES`] bytes).
pub(crate) const WRITER_ID_HEADER: &str = "x-skade-writer-id";

/// The writer id a request names, if any.
///
/// # Errors
/// [`Error::BadRequest`] for a header that is not text, empty, or longer than
/// [`MAX_WRITER_ID_BYTES`].
pub(crate) fn writer_id(headers: &MetadataMap) -> Result<Option<String>, Error> {
    let Some(value) = headers.get(WRITER_ID_HEADER) else {
        return Ok(None);
    };
    let bad = |why: &str| Error::BadRequest {
        reason: format!("the {WRITER_ID_HEADER} header {why}"),
    };
    let text = value.to_str().map_err(|_| bad("is not ASCII text"))?;
    if text.is_empty() {
        return Err(bad("is empty"));
    }
    if text.len() > MAX_WRITER_ID_BYTES {
        return Err(bad(&format!(
            "is {} bytes long; at most {MAX_WRITER_ID_BYTES} are allowed",
            text.len()
        )));
    }
    Ok(Some(text.to_string()))
}

/// What to do with one batch of a keyed stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Admit {
    /// A new batch: take it, numbered this.
    Take(u64),
    /// At or below the committed high-water mark: already landed, skip it.
    Replay,
}

/// The sequence check of one keyed stream into one table.
#[derive(Debug)]
pub(crate) struct Sequencer {
    writer: String,
    /// The writer's committed mark in the table when the stream started.
    mark: Option<WriterMark>,
    /// The sequence the next batch must carry; `None` before the first batch.
    expected: Option<u64>,
    /// A batch numbered `u64::MAX`, the last usable sequence, was taken: no batch may
    /// follow it.
    exhausted: bool,
    /// Batches skipped as replays.
    pub(crate) replayed: u64,
}

impl Sequencer {
    /// A check for `writer`, whose committed mark in the table is `mark`.
    pub(crate) fn new(writer: String, mark: Option<WriterMark>) -> Self {
        Self {
            writer,
            mark,
            expected: None,
            exhausted: false,
            replayed: 0,
        }
    }

    /// The writer id.
    pub(crate) fn writer(&self) -> &str {
        &self.writer
    }

    /// The writer's committed mark in the table when the stream started.
    pub(crate) fn mark(&self) -> Option<WriterMark> {
        self.mark
    }

    /// Decides on the batch whose `app_metadata` is `metadata`.
    ///
    /// # Errors
    /// [`Error::BadRequest`] when the metadata is not a decimal `u64`;
    /// [`Error::SequenceOutOfOrder`] when the sequence is not the next one: after the
    /// first batch each must be the previous + 1, and the first may not skip past the
    /// mark + 1; [`Error::SequencesExhausted`] for any batch after one numbered
    /// `u64::MAX`, the last usable sequence (so a high-water mark never steps back).
    pub(crate) fn admit(&mut self, metadata: &[u8]) -> Result<Admit, Error> {
        let sequence = str::from_utf8(metadata)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .ok_or_else(|| Error::BadRequest {
                reason: format!(
                    "a put with the {WRITER_ID_HEADER} header numbers every batch: send its \
                     sequence as the batch's app_metadata, a decimal u64 (got {} bytes)",
                    metadata.len()
                ),
            })?;
        if self.exhausted {
            return Err(Error::SequencesExhausted {
                writer: self.writer.clone(),
                got: sequence,
                max: u64::MAX,
            });
        }
        let committed = self.mark.map(|m| m.sequence);
        let expected = match (self.expected, committed) {
            (Some(expected), _) => Some(expected),
            (None, Some(committed)) if sequence > committed => committed.checked_add(1),
            (None, _) => None,
        };
        if let Some(expected) = expected
            && sequence != expected
        {
            return Err(Error::SequenceOutOfOrder {
                writer: self.writer.clone(),
                expected,
                got: sequence,
            });
        }
        self.expected = sequence.checked_add(1);
        self.exhausted = sequence == u64::MAX;
        if committed.is_some_and(|committed| sequence <= committed) {
            self.replayed += 1;
            return Ok(Admit::Replay);
        }
        Ok(Admit::Take(sequence))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(sequence: u64) -> Option<WriterMark> {
        Some(WriterMark {
            sequence,
            snapshot_id: 7,
            committed_at_ms: 0,
        })
    }

    /// Replays below the mark are skipped, the next ones taken; gaps and steps back are
    /// refused naming the expected sequence.
    #[test]
    fn replays_skip_and_gaps_fail() {
        let mut s = Sequencer::new("w".into(), mark(5));
        assert_eq!(s.admit(b"4").unwrap(), Admit::Replay);
        assert_eq!(s.admit(b"5").unwrap(), Admit::Replay);
        assert_eq!(s.admit(b"6").unwrap(), Admit::Take(6));
        let err = s.admit(b"8").unwrap_err();
        assert!(err.to_string().contains("expected 7"), "{err}");
        let mut s = Sequencer::new("w".into(), mark(5));
        let err = s.admit(b"7").unwrap_err();
        assert!(err.to_string().contains("expected 6"), "{err}");
        let mut fresh = Sequencer::new("w".into(), None);
        assert_eq!(fresh.admit(b"100").unwrap(), Admit::Take(100));
        assert!(fresh.admit(b"100").is_err());
        assert!(fresh.admit(b"").is_err());
    }

    /// `u64::MAX` is the last usable sequence: it is taken, and any batch after it (`1`,
    /// or `u64::MAX` again) is refused naming the limit. Catches the
    /// overflowed expectation that let `1` through and moved the mark back.
    #[test]
    fn nothing_follows_the_last_sequence() {
        let max = u64::MAX.to_string();
        let mut s = Sequencer::new("w".into(), None);
        assert_eq!(s.admit(max.as_bytes()).unwrap(), Admit::Take(u64::MAX));
        for next in [b"1".as_slice(), b"0", max.as_bytes()] {
            let err = s.admit(next).unwrap_err();
            assert!(matches!(err, Error::SequencesExhausted { .. }), "{err}");
            assert!(err.to_string().contains(&max), "{err}");
        }
        // After a committed mark of u64::MAX every sequence is a replay.
        let mut s = Sequencer::new("w".into(), mark(u64::MAX));
        assert_eq!(s.admit(b"1").unwrap(), Admit::Replay);
        assert_eq!(s.admit(b"2").unwrap(), Admit::Replay);
    }
}

/// The action that returns a writer's committed high-water marks (body: the writer id
/// as text; result: one JSON object, see [`writer_marks`]).
pub(crate) const WRITER_MARKS_ACTION: &str = "skade.v1.WriterMarks";

/// The [`WRITER_MARKS_ACTION`] entry of `ListActions`.
pub(crate) fn action_type() -> arrow_flight::ActionType {
    arrow_flight::ActionType {
        r#type: WRITER_MARKS_ACTION.to_string(),
        description: "A writer's committed high-water mark in every table it wrote to, so a \
                      restarted producer knows where to resume. Request: the writer id \
                      (UTF-8); result: JSON {\"writer_id\", \"marks\": [{\"table\", \
                      \"sequence\", \"snapshot_id\" (a string), \"committed_at_ms\"}]}"
            .to_string(),
    }
}

/// Answers [`WRITER_MARKS_ACTION`] for the writer named by `body`: UTF-8 JSON
/// `{"writer_id": "...", "marks": [{"table": "ns.t", "sequence": 42, "snapshot_id":
/// "7651916352768405764", "committed_at_ms": 1764550000000}]}`, tables in name order.
/// JSON so any Flight client reads it without generated code; snapshot ids are strings
/// because they exceed 2^53.
///
/// # Errors
/// [`Error::BadRequest`] for a body that is not a valid writer id; [`Error::Catalog`]
/// when the catalog cannot be read.
pub(crate) async fn writer_marks(
    catalog: &crate::catalog::RedbCatalog,
    body: &[u8],
) -> Result<Vec<u8>, Error> {
    let writer = str::from_utf8(body)
        .ok()
        .filter(|w| !w.is_empty() && w.len() <= MAX_WRITER_ID_BYTES)
        .ok_or_else(|| Error::BadRequest {
            reason: format!(
                "the {WRITER_MARKS_ACTION} action's body is the writer id: UTF-8, 1 to \
                 {MAX_WRITER_ID_BYTES} bytes"
            ),
        })?;
    let marks = catalog
        .writer_marks(writer)
        .await
        .map_err(|e| Error::catalog(&writer, e))?;
    let marks: Vec<serde_json::Value> = marks
        .into_iter()
        .map(|(ident, mark)| {
            serde_json::json!({
                "table": super::names::path_of(&ident).join("."),
                "sequence": mark.sequence,
                "snapshot_id": mark.snapshot_id.to_string(),
                "committed_at_ms": mark.committed_at_ms,
            })
        })
        .collect();
    let reply = serde_json::json!({ "writer_id": writer, "marks": marks });
    Ok(reply.to_string().into_bytes())
}

/// The gRPC header that numbers a Flight SQL transaction (or autocommit ingest) of the
/// writer named by [`WRITER_ID_HEADER`]: a decimal `u64`, higher than every sequence the
/// writer committed before. With the ADBC driver, set both as connection options
/// `adbc.flight.sql.rpc.call_header.<name>`.
pub(crate) const SEQUENCE_HEADER: &str = "x-skade-sequence";

/// The exactly-once key of a Flight SQL commit: the writer and the transaction's
/// sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TxnKey {
    /// The writer id ([`WRITER_ID_HEADER`]).
    pub(crate) writer: String,
    /// The transaction's sequence ([`SEQUENCE_HEADER`]).
    pub(crate) sequence: u64,
}

/// The key a Flight SQL call names, if any.
///
/// # Errors
/// [`Error::BadRequest`] for a bad writer id, or a writer id without a valid
/// [`SEQUENCE_HEADER`].
pub(crate) fn txn_key(headers: &MetadataMap) -> Result<Option<TxnKey>, Error> {
    let Some(writer) = writer_id(headers)? else {
        return Ok(None);
    };
    let sequence = headers
        .get(SEQUENCE_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .ok_or_else(|| Error::BadRequest {
            reason: format!(
                "a Flight SQL call with the {WRITER_ID_HEADER} header numbers its transaction \
                 with the {SEQUENCE_HEADER} header: a decimal u64"
            ),
        })?;
    Ok(Some(TxnKey { writer, sequence }))
}

/// Lets `writer` start a keyed put or transaction: a writer id the catalog knows always
/// may; a new one only while fewer than `--max-writers` are kept.
///
/// # Errors
/// [`Error::LimitReached`] for a new writer id at the limit; [`Error::Catalog`] when the
/// catalog cannot be read.
pub(crate) async fn admit_writer(svc: &Service, writer: &str) -> Result<(), Error> {
    let (count, known) = svc
        .catalog
        .writers(Some(writer))
        .await
        .map_err(|e| Error::catalog(&writer, e))?;
    let limit = svc.config.max_writers.get();
    if !known && usize::try_from(count).unwrap_or(usize::MAX) >= limit {
        return Err(Error::LimitReached {
            what: "writer ids with a high-water mark",
            limit,
            flag: "--max-writers",
        });
    }
    Ok(())
}

/// How often [`spawn_writer_expiry`] looks for idle writers: a tenth of the retention,
/// between 1 second and 1 minute.
fn expiry_tick(retention: Duration) -> Duration {
    (retention / 10).clamp(Duration::from_secs(1), Duration::from_secs(60))
}

/// Forgets writer ids idle longer than `--writer-retention`, in the background, until
/// the service is dropped or shuts down; counts them on `skade_writers_forgotten_total`.
pub(crate) fn spawn_writer_expiry(svc: Weak<Service>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Some(service) = svc.upgrade() else { return };
            if service.shutdown.is_cancelled() {
                return;
            }
            let retention = service.config.writer_retention;
            match service.catalog.forget_idle_writers(retention).await {
                Ok(forgotten) if !forgotten.is_empty() => {
                    service
                        .metrics
                        .record_writers_forgotten(forgotten.len() as u64);
                    info!(
                        writers = forgotten.len(),
                        retention = %humantime::format_duration(retention),
                        "idle writer ids forgotten"
                    );
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "cannot forget idle writer ids"),
            }
            let shutdown = service.shutdown.clone();
            drop(service);
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(expiry_tick(retention)) => {}
            }
        }
    })
}
