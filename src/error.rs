//! skade's top-level error and its one mapping to a gRPC status.

use iceberg::ErrorKind;
use tonic::{Code, Status};

use crate::write::WriteError;

/// Everything a Flight RPC can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A table name or path element breaks docs/SERVICE.md's naming rule.
    #[error("invalid table name: {reason}")]
    BadName {
        /// What is wrong, quoting the element.
        reason: String,
    },
    /// The request's descriptor or ticket is not one skade serves.
    #[error("invalid request: {reason}")]
    BadRequest {
        /// What is wrong.
        reason: String,
    },
    /// The client's Arrow IPC stream could not be decoded.
    #[error("invalid Arrow IPC stream: {reason}")]
    Decode {
        /// The decoder's message.
        reason: String,
    },
    /// The write path failed.
    #[error(transparent)]
    Write(#[from] Box<WriteError>),
    /// A catalog operation outside the write path failed.
    #[error("table {table}: {source}")]
    Catalog {
        /// Table identifier or namespace concerned.
        table: String,
        /// The catalog's error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// A put into a table that does not exist, where puts may not create tables
    /// (`--auto-create-tables false`, or the namespace property
    /// [`crate::flight::AUTO_CREATE_PROPERTY`] `false`).
    #[error(
        "table {table} does not exist, and puts do not create tables here ({setting}): create it over the REST catalog (or with Flight SQL mode \"create\"), or check the name"
    )]
    NoAutoCreate {
        /// The table identifier as sent.
        table: String,
        /// What turned creation off, naming the flag or property.
        setting: String,
    },
    /// A Flight SQL transaction id this server never gave out (or forgot long ago).
    #[error("unknown transaction {id}")]
    NoTransaction {
        /// The id as sent (UUID or hex bytes).
        id: String,
    },
    /// A Flight SQL transaction that is no longer open.
    #[error("transaction {id} {outcome}")]
    TransactionEnded {
        /// The transaction id.
        id: String,
        /// How it ended ("was committed", "was rolled back", ...).
        outcome: String,
    },
    /// A Flight SQL transaction an ingest of which failed: it can only roll back.
    #[error("the transaction was aborted and can only be rolled back: {reason}")]
    TransactionAborted {
        /// What failed.
        reason: String,
    },
    /// A request skade understands but does not serve.
    #[error("skade does not support {what}")]
    Unsupported {
        /// What was asked for.
        what: String,
    },
    /// The server is shutting down: the stream's rows read so far are committed (and
    /// acked); the rest was not read.
    #[error(
        "skade is shutting down: this stream's first {committed_rows} rows are committed and acked; send the rest again"
    )]
    ShuttingDown {
        /// Rows of the stream committed before it ended.
        committed_rows: u64,
    },
    /// The call carries no valid bearer token (authentication is on). Never names the
    /// token sent.
    #[error(
        "a valid bearer token is required: send `authorization: Bearer <token>` (or trade one through Handshake)"
    )]
    Unauthenticated,
    /// A configured limit is reached (`--max-streams`, `--max-transactions`).
    #[error("{what}: the limit of {limit} is reached ({flag}); retry later")]
    LimitReached {
        /// What is limited ("open DoPut streams", ...).
        what: &'static str,
        /// The limit in force.
        limit: usize,
        /// The flag that sets it.
        flag: &'static str,
    },
    /// A producer's batch sequence is not the next one (exactly-once): a gap, or a
    /// sequence going backwards inside a stream.
    #[error(
        "writer {writer:?}: batch sequence {got} is out of order; expected {expected} \
         (sequences of a stream are consecutive; resume from the writer's high-water mark)"
    )]
    SequenceOutOfOrder {
        /// The writer id.
        writer: String,
        /// The sequence the server expects next.
        expected: u64,
        /// The sequence the batch carried.
        got: u64,
    },
    /// A producer sent a batch after sequence `u64::MAX`, the last usable sequence
    /// (exactly-once): there is no next number, so the mark cannot advance.
    #[error(
        "writer {writer:?}: batch sequence {got} follows {max}, the last usable sequence (u64::MAX);          a writer's sequences cannot go past it: start a new writer id"
    )]
    SequencesExhausted {
        /// The writer id.
        writer: String,
        /// The sequence the batch carried.
        got: u64,
        /// `u64::MAX`.
        max: u64,
    },
    /// A gRPC message is larger than `--max-message-size`.
    #[error(
        "a message exceeds the server's limit of {limit_bytes} bytes (--max-message-size): {detail}"
    )]
    MessageTooLarge {
        /// The limit in force, in bytes.
        limit_bytes: u64,
        /// The transport's own words.
        detail: String,
    },
    /// A failure only the server can cause (a task that panicked, an answer it could not
    /// build); the client's request was fine.
    #[error("internal error: {what}")]
    Internal {
        /// What failed.
        what: String,
    },
    /// The client ended the call before the server did: it cancelled, its deadline
    /// expired, or its connection was reset or closed (a killed process, a broken pipe).
    /// Not a server failure: logged at `info` and counted under `code="Cancelled"`.
    #[error(
        "the client ended the call ({reason}); {committed_rows} rows of it were committed and acked before"
    )]
    ClientGone {
        /// How it ended, from the transport ("connection reset by peer", ...).
        reason: String,
        /// Rows of the stream committed (and acked) before it ended.
        committed_rows: u64,
    },
    /// The transport reported an error; its status is passed on as it is. Displays the
    /// status's message only, never its source's `Debug` form.
    #[error("{}", .0.message())]
    Transport(Box<Status>),
    /// A Flight SQL statement was refused, or failed while it ran.
    #[error(transparent)]
    Sql(#[from] Box<crate::sql::SqlError>),
}

impl From<crate::sql::SqlError> for Error {
    fn from(e: crate::sql::SqlError) -> Self {
        Self::Sql(Box::new(e))
    }
}

impl From<WriteError> for Error {
    fn from(e: WriteError) -> Self {
        Self::Write(Box::new(e))
    }
}

impl Error {
    /// A catalog failure concerning `table` (a table identifier or namespace).
    pub fn catalog(table: &impl std::fmt::Display, source: iceberg::Error) -> Self {
        Self::Catalog {
            table: table.to_string(),
            source: Box::new(source),
        }
    }

    /// The gRPC status for this error: InvalidArgument (bad names, schema, data),
    /// NotFound (incl. unknown transactions), AlreadyExists, FailedPrecondition (a
    /// transaction that already ended), Aborted (conflict after retries, an aborted
    /// transaction), Unimplemented, Unavailable (storage, shutting down), Unauthenticated,
    /// ResourceExhausted (a limit), Internal (the rest). The message is the error's
    /// `Display`.
    pub fn into_status(self) -> Status {
        let code = match &self {
            Error::BadName { .. } | Error::BadRequest { .. } | Error::Decode { .. } => {
                Code::InvalidArgument
            }
            Error::Write(e) => match e.as_ref() {
                WriteError::Schema { .. }
                | WriteError::UnsupportedSchema { .. }
                | WriteError::RepeatedTable { .. } => Code::InvalidArgument,
                WriteError::Encode { source, .. } => iceberg_code(source),
                WriteError::Storage { .. } => Code::Unavailable,
                WriteError::Catalog { source, .. } => iceberg_code(source),
                WriteError::Task { .. } => Code::Internal,
            },
            Error::Catalog { source, .. } => iceberg_code(source),
            Error::NoTransaction { .. } | Error::NoAutoCreate { .. } => Code::NotFound,
            Error::TransactionEnded { .. }
            | Error::SequenceOutOfOrder { .. }
            | Error::SequencesExhausted { .. } => Code::FailedPrecondition,
            Error::TransactionAborted { .. } => Code::Aborted,
            Error::Unsupported { .. } => Code::Unimplemented,
            Error::ShuttingDown { .. } => Code::Unavailable,
            Error::Unauthenticated => Code::Unauthenticated,
            Error::LimitReached { .. } | Error::MessageTooLarge { .. } => Code::ResourceExhausted,
            Error::Internal { .. } => Code::Internal,
            Error::ClientGone { .. } => Code::Cancelled,
            Error::Transport(status) => return *status.clone(),
            Error::Sql(e) => sql_code(e),
        };
        Status::new(code, redact(describe(&self)))
    }
}

/// The gRPC code of a refused or failed statement: the statement's faults are
/// InvalidArgument (NotFound for an unknown table), an evaluation failure Internal.
fn sql_code(e: &crate::sql::SqlError) -> Code {
    use crate::sql::SqlError;
    match e {
        SqlError::Parse { .. }
        | SqlError::Unsupported { .. }
        | SqlError::UnknownColumn { .. }
        | SqlError::BadValue { .. }
        | SqlError::Parameters { .. }
        | SqlError::BadHandle { .. } => Code::InvalidArgument,
        SqlError::UnknownTable { .. } => Code::NotFound,
        SqlError::Eval { .. } => Code::Internal,
    }
}

/// `e` and its causes as one line in skade's words: where the message embeds an iceberg
/// or OpenDAL error's own rendering (`Unexpected, context: { … } => message, source: …`),
/// that rendering is replaced by its message, its context in parentheses and its causes,
/// each said once; a cause that only marks an error's class (an I/O error made from its
/// kind alone, such as the `not connected` a catalog database outage carries) is left
/// out. Statuses and logs show this, never the libraries' `Kind => message` form.
pub fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cause {
        if let Some(words) = own_words(c) {
            let raw = c.to_string();
            if text.contains(&raw) {
                text = text.replace(&raw, &words);
            } else if !text.contains(&words) {
                text = format!("{text}: {words}");
            }
            break;
        }
        cause = c.source();
    }
    text
}

/// An iceberg or OpenDAL error in skade's words (see [`describe`]); `None` for others.
fn own_words(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let (mut out, mut cause) = if let Some(ice) = iceberg_error(e) {
        let mut out = ice.message().to_string();
        if let Some(context) = iceberg_context(ice) {
            out = format!("{out} ({context})");
        }
        (out, std::error::Error::source(ice))
    } else if let Some(dal) = e.downcast_ref::<opendal::Error>() {
        let kind = match dal.kind() {
            opendal::ErrorKind::Unexpected => String::new(),
            other => format!("{}: ", kind_words(other)),
        };
        // What was done to which object (`write http://host:port/bucket/key`), from the
        // rendering: OpenDAL keeps the operation and the URI only there.
        let rendered = dal.to_string();
        let op = rendered
            .split(" => ")
            .next()
            .and_then(|head| head.split(" at ").nth(1))
            .and_then(|rest| rest.split([',', ' ']).next())
            .filter(|op| !op.is_empty());
        let uri = rendered
            .split("uri: ")
            .nth(1)
            .and_then(|rest| rest.split([',', ' ']).next());
        let target = match (op, uri) {
            (Some(op), Some(uri)) => format!("{op} {uri}: "),
            (Some(op), None) => format!("{op}: "),
            (None, Some(uri)) => format!("{uri}: "),
            (None, None) => String::new(),
        };
        (
            format!("{target}{kind}{}", store_message(dal.message())),
            std::error::Error::source(dal),
        )
    } else {
        return None;
    };
    while let Some(c) = cause {
        if is_marker(c) {
            cause = c.source();
            continue;
        }
        let (piece, handled) = match own_words(c) {
            Some(words) => (words, true),
            None => (c.to_string(), false),
        };
        if !piece.is_empty() && !out.contains(&piece) {
            out = format!("{out}: {piece}");
        }
        if handled {
            break;
        }
        cause = c.source();
    }
    Some(out)
}

/// An S3 error body as OpenDAL renders it (`S3Error { code: "AccessDenied", message:
/// "Access Denied", … }`) as `AccessDenied: Access Denied`; other messages as they are.
fn store_message(message: &str) -> String {
    let field = |name: &str| {
        message
            .split(&format!("{name}: \""))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .filter(|v| !v.is_empty())
    };
    match (
        message.starts_with("S3Error {"),
        field("code"),
        field("message"),
    ) {
        (true, Some(code), Some(text)) => format!("{code}: {text}"),
        (true, Some(code), None) => code.to_string(),
        _ => message.to_string(),
    }
}

fn iceberg_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a iceberg::Error> {
    e.downcast_ref::<iceberg::Error>()
        .or_else(|| e.downcast_ref::<Box<iceberg::Error>>().map(AsRef::as_ref))
}

/// The `k: v, …` context an iceberg error renders between `context: {` and `}` (a failed
/// requirement's `expected` and `found`, …).
fn iceberg_context(e: &iceberg::Error) -> Option<String> {
    let text = e.to_string();
    let head = text.split(" => ").next().unwrap_or_default();
    let start = head.find(", context: { ")? + ", context: { ".len();
    let end = head.rfind(" }")?;
    (end > start).then(|| head[start..end].to_string())
}

/// An I/O error made from its kind alone (no OS code, no inner error): it marks a class
/// of failure (`Unavailable`) and says nothing more.
fn is_marker(e: &(dyn std::error::Error + 'static)) -> bool {
    e.downcast_ref::<std::io::Error>()
        .is_some_and(|io| io.raw_os_error().is_none() && io.get_ref().is_none())
}

fn kind_words(kind: opendal::ErrorKind) -> &'static str {
    match kind {
        opendal::ErrorKind::NotFound => "not found",
        opendal::ErrorKind::PermissionDenied => "permission denied",
        opendal::ErrorKind::RateLimited => "rate limited",
        opendal::ErrorKind::ConfigInvalid => "invalid configuration",
        opendal::ErrorKind::Unsupported => "not supported by the store",
        opendal::ErrorKind::AlreadyExists => "already exists",
        opendal::ErrorKind::ConditionNotMatch => "precondition failed",
        _ => "failed",
    }
}

/// Absolute server paths that never appear in a status sent to a client; each is
/// replaced by its label. Filled by [`hide_in_statuses`].
static HIDDEN_PATHS: std::sync::RwLock<Vec<(String, &'static str)>> =
    std::sync::RwLock::new(Vec::new());

/// Makes every later status message show `label` (e.g. `<warehouse>`) instead of the
/// absolute server path `path` and anything below it: clients learn a table's layout,
/// not where the server keeps its files. Logs keep the full path.
pub fn hide_in_statuses(path: &std::path::Path, label: &'static str) {
    let path = path.to_string_lossy().trim_end_matches('/').to_string();
    if path.is_empty() {
        return;
    }
    let mut hidden = HIDDEN_PATHS
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if !hidden.iter().any(|(p, _)| *p == path) {
        hidden.push((path, label));
        // Longest first, so a path inside another is replaced by its own label.
        hidden.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
    }
}

fn redact(mut message: String) -> String {
    let hidden = HIDDEN_PATHS
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for (path, label) in hidden.iter() {
        if message.contains(path.as_str()) {
            message = message.replace(path.as_str(), label);
        }
    }
    message
}

/// Why `status`, read from a client's request stream, means the client ended the call
/// (rather than the server failing): the call was cancelled or its deadline expired, or
/// the transport below it saw the client's side go away — an HTTP/2 `RST_STREAM`/`GOAWAY`
/// from the client, a reset, aborted or closed connection, a broken pipe, or a body cut
/// short. `None` for anything else. The reason is the innermost cause's `Display`.
pub fn client_ending(status: &Status) -> Option<String> {
    use std::error::Error as _;
    use std::io::ErrorKind as Io;
    let gone = |kind: Io| {
        matches!(
            kind,
            Io::BrokenPipe
                | Io::ConnectionReset
                | Io::ConnectionAborted
                | Io::UnexpectedEof
                | Io::NotConnected
        )
    };
    match status.code() {
        Code::Cancelled => return Some("cancelled".to_string()),
        Code::DeadlineExceeded => return Some("deadline exceeded".to_string()),
        _ => {}
    }
    let mut cause = status.source();
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && gone(io.kind())
        {
            return Some(io.to_string());
        }
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            if let Some(io) = h2.get_io() {
                return gone(io.kind()).then(|| io.to_string());
            }
            if h2.is_remote() || h2.reason() == Some(h2::Reason::CANCEL) {
                return Some(h2.to_string());
            }
        }
        if let Some(hyper) = e.downcast_ref::<hyper::Error>()
            && (hyper.is_incomplete_message()
                || hyper.is_canceled()
                || hyper.is_closed()
                || hyper.is_body_write_aborted())
        {
            return Some(hyper.to_string());
        }
        cause = e.source();
    }
    None
}

/// The gRPC code for an iceberg error, by its kind (never by its text); a failure of the
/// object store (an S3 warehouse's upload, read or delete) is `Unavailable` whatever its
/// kind: the storage, not the request, failed.
fn iceberg_code(e: &iceberg::Error) -> Code {
    if crate::storage::object_store::is_object_store_error(e)
        || crate::catalog::is_storage_failure(e)
    {
        return Code::Unavailable;
    }
    match e.kind() {
        ErrorKind::DataInvalid => Code::InvalidArgument,
        ErrorKind::NamespaceNotFound | ErrorKind::TableNotFound => Code::NotFound,
        ErrorKind::NamespaceAlreadyExists | ErrorKind::TableAlreadyExists => Code::AlreadyExists,
        ErrorKind::CatalogCommitConflicts => Code::Aborted,
        ErrorKind::PreconditionFailed => Code::FailedPrecondition,
        ErrorKind::FeatureUnsupported => Code::Unimplemented,
        ErrorKind::Unexpected => Code::Internal,
        // iceberg's ErrorKind is non_exhaustive
        _ => Code::Internal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A failure only the server can cause is Internal, never the client's
    /// InvalidArgument (RED before: a panicked ingest task answered InvalidArgument).
    #[test]
    fn server_side_failures_are_internal_and_limits_resource_exhausted() {
        let internal = Error::Internal {
            what: "the ingest task failed: panicked".into(),
        };
        assert_eq!(internal.into_status().code(), Code::Internal);
        let large = Error::MessageTooLarge {
            limit_bytes: 64,
            detail: "decoded message length too large".into(),
        };
        let status = large.into_status();
        assert_eq!(status.code(), Code::ResourceExhausted);
        assert!(status.message().contains("--max-message-size"));
    }

    /// A storage failure's status names the file below the warehouse, never the
    /// server's absolute path.
    #[test]
    fn statuses_hide_server_paths() {
        hide_in_statuses(
            std::path::Path::new("/srv/skade-test-hidden/warehouse"),
            "<warehouse>",
        );
        let e = Error::BadRequest {
            reason: "cannot write /srv/skade-test-hidden/warehouse/ns/t/data/x.parquet".into(),
        };
        let status = e.into_status();
        assert_eq!(
            status.message(),
            "invalid request: cannot write <warehouse>/ns/t/data/x.parquet"
        );
    }

    /// A commit whose upload the object store refused is `Unavailable` (the storage
    /// failed), not `Internal` as other `Unexpected` iceberg errors.
    /// RED before: the commit's catalog error mapped by kind alone answered Internal.
    #[test]
    fn object_store_failures_at_commit_are_unavailable() {
        let refused = opendal::Error::new(opendal::ErrorKind::PermissionDenied, "AccessDenied");
        let source = iceberg::Error::new(ErrorKind::Unexpected, "object store operation failed")
            .with_source(refused);
        let e = Error::Write(Box::new(WriteError::Catalog {
            table: "ns.t".into(),
            source: Box::new(source),
        }));
        assert_eq!(e.into_status().code(), Code::Unavailable);
        let other = Error::catalog(&"ns.t", iceberg::Error::new(ErrorKind::Unexpected, "bug"));
        assert_eq!(other.into_status().code(), Code::Internal);
    }

    /// A commit whose local warehouse sync or redb transaction failed is `Unavailable`
    /// with the cause in its message, not `Internal`.
    /// RED before: the group commit's error had no source and mapped to Internal.
    #[test]
    fn local_storage_failures_at_commit_are_unavailable() {
        let full = std::io::Error::new(std::io::ErrorKind::StorageFull, "No space left on device");
        let source = iceberg::Error::new(ErrorKind::Unexpected, "sync warehouse /w: No space left")
            .with_source(full);
        let e = Error::catalog(&"ns.t", source);
        let status = e.into_status();
        assert_eq!(status.code(), Code::Unavailable);
        assert!(
            status.message().contains("No space left"),
            "{}",
            status.message()
        );
    }

    /// A catalog database outage reads in skade's words: the database, what failed and
    /// why, once — never iceberg's `Unexpected => …, source: not connected`; an object
    /// store's error keeps its reason without OpenDAL's `Kind (status) at op =>` form.
    /// RED before: the status read "table ns.t: Unexpected => the catalog database
    /// 127.0.0.1:5432/skade is unavailable: ..., source: not connected".
    #[test]
    fn outage_statuses_are_in_our_words() {
        let outage = iceberg::Error::new(
            ErrorKind::Unexpected,
            "the catalog database 127.0.0.1:5432/skade is unavailable: connection refused",
        )
        .with_source(std::io::Error::from(std::io::ErrorKind::NotConnected));
        let status = Error::catalog(&"ns.t", outage).into_status();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(
            status.message(),
            "table ns.t: the catalog database 127.0.0.1:5432/skade is unavailable: connection refused"
        );
        let timeout = opendal::Error::new(
            opendal::ErrorKind::Unexpected,
            "io operation timeout reached",
        )
        .with_operation("list")
        .set_persistent();
        let store = iceberg::Error::new(ErrorKind::Unexpected, "object store operation failed")
            .with_source(timeout);
        let said = describe(&Error::catalog(&"ns.t", store));
        assert_eq!(
            said,
            "table ns.t: object store operation failed: list: io operation timeout reached"
        );
        let denied = opendal::Error::new(
            opendal::ErrorKind::PermissionDenied,
            r#"S3Error { code: "AccessDenied", message: "Access Denied", resource: "" }"#,
        )
        .with_operation("write")
        .with_context("uri", "http://127.0.0.1:9000/bucket/ns/t/data/f.parquet")
        .with_context("service", "s3");
        let store = iceberg::Error::new(ErrorKind::Unexpected, "object store operation failed")
            .with_source(denied);
        assert_eq!(
            describe(&store),
            "object store operation failed: write http://127.0.0.1:9000/bucket/ns/t/data/f.parquet: permission denied: AccessDenied: Access Denied"
        );
        let conflict = iceberg::Error::new(ErrorKind::CatalogCommitConflicts, "requirement failed")
            .with_context("expected", "1")
            .with_context("found", "2");
        assert_eq!(
            describe(&conflict),
            "requirement failed (expected: 1, found: 2)"
        );
        for text in [status.message().to_string(), said] {
            assert!(
                !text.contains("=>") && !text.contains("Unexpected"),
                "{text}"
            );
        }
    }

    /// The error travels inside every `Result` of the put path; keep it small. Catches:
    /// a large variant left unboxed (`Status` and `iceberg::Error` are boxed for this).
    #[test]
    fn error_stays_small() {
        assert!(
            std::mem::size_of::<Error>() <= 128,
            "{}",
            std::mem::size_of::<Error>()
        );
    }
}
