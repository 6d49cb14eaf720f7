//! Storage's errors: what was being done, to which file or object, and the cause.

use std::path::PathBuf;

/// Why listing, inspecting, writing or removing warehouse files failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A local filesystem operation failed.
    #[error("{what} {path}: {source}")]
    Io {
        /// What was being done (`list`, `remove`, ...).
        what: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// An object-store operation failed.
    #[error("{what} {location}: {source}")]
    Store {
        /// What was being done.
        what: &'static str,
        /// The location concerned (`s3://bucket/key`).
        location: String,
        /// The object store's error (as iceberg's, with OpenDAL's as its source).
        #[source]
        source: Box<iceberg::Error>,
    },
}
