//! Storage: how the warehouse's files are written, made durable, listed, inspected and
//! removed — on the local filesystem or an S3 (or S3-compatible) object store through
//! OpenDAL. Shaped like iceberg-rust's `io/storage`: the catalog, the write path and
//! table maintenance decide *what* to write or remove; this module alone knows *how*.
//!
//! - [`blocking`]: blocking work off the async runtime (one way for the crate).
//! - [`local`]: iceberg's local-filesystem storage without its per-file fsync (every
//!   commit's `syncfs` makes the files durable instead).
//! - [`durable`]: that `syncfs` of a local warehouse before a pointer flip.
//! - [`object_store`]: S3 through iceberg-storage-opendal, with parallel part uploads and
//!   the object-store request metrics.
//! - [`uploads`]: write-behind uploads of manifests and manifest lists, and the barrier a
//!   release waits on before its pointer flips (the object-store counterpart of
//!   `syncfs`).
//! - `file_store`: listing, inspecting and removing table files for cleanup, `skade gc`,
//!   purge and a rolled-back transaction's staged files.
//! - [`warehouse`]: where the tables live (a local directory or an S3 prefix), the
//!   `FileIO` their files are read and written through, and each table's default
//!   location.
//!
//! Failures are [`StorageError`]s naming the operation and the file or object.

pub mod blocking;
pub mod durable;
mod error;
pub(crate) mod file_store;
pub mod local;
pub mod object_store;
pub mod uploads;
pub mod warehouse;

pub use error::StorageError;
pub use warehouse::{S3Options, Warehouse};
