//! The catalog's errors: iceberg `Error`s with the kind a caller branches on and a
//! message naming what is wrong (as iceberg-rust's SQL catalog keeps its constructors
//! apart, `crates/catalog/sql/src/error.rs`).

use std::path::Path;

use iceberg::{Error, ErrorKind, NamespaceIdent, TableIdent};

/// Whether `e` is redb's "Database already open. Cannot acquire lock." — another process
/// (a running skade, `skade gc`) holds the catalog file.
pub fn is_lock_error(e: &Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(redb::Error::DatabaseAlreadyOpen) = s.downcast_ref::<redb::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// Whether `e` is a failure of the local storage under the catalog — a commit's warehouse
/// `syncfs` or its redb transaction (an I/O error in its source chain) — rather than a
/// bug: the server answers it `Unavailable`, keeping the cause in the message.
pub fn is_storage_failure(e: &Error) -> bool {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if s.is::<std::io::Error>() || s.is::<redb::Error>() {
            return true;
        }
        source = s.source();
    }
    false
}

/// The kind of the I/O error under `e` (directly, or under a redb error), if any.
pub(super) fn io_kind(e: &Error) -> Option<std::io::ErrorKind> {
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return Some(io.kind());
        }
        if let Some(redb::Error::Io(io)) = s.downcast_ref::<redb::Error>() {
            return Some(io.kind());
        }
        source = s.source();
    }
    None
}

pub(super) fn redb_error(e: impl Into<redb::Error>) -> Error {
    let e: redb::Error = e.into();
    Error::new(ErrorKind::Unexpected, format!("catalog storage: {e}")).with_source(e)
}

pub(super) fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} {}: {e}", path.display()),
    )
    .with_source(e)
}

pub(super) fn namespace_not_found(ns: &NamespaceIdent) -> Error {
    Error::new(
        ErrorKind::NamespaceNotFound,
        format!("namespace {} does not exist", ns.join(".")),
    )
}

pub(super) fn table_not_found(ident: &TableIdent) -> Error {
    Error::new(
        ErrorKind::TableNotFound,
        format!("table {ident} does not exist"),
    )
}

pub(super) fn table_exists(ident: &TableIdent) -> Error {
    Error::new(
        ErrorKind::TableAlreadyExists,
        format!("table {ident} already exists"),
    )
}
