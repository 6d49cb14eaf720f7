//! The write path: Arrow record batches → Parquet data files → Iceberg snapshots.
//!
//! What each server lane runs:
//! - **Lane 1** (`DoPut` on a `PATH`): a [`Batcher`] cuts the stream into files that
//!   encode as rows arrive, and [`ingest_pipelined_overlap_stream_evolving`] (the
//!   stream form of [`ingest_pipelined_overlap`]) writes them while its committer,
//!   beside the writer, commits every few files (one merge append each,
//!   [`crate::snapshot::append::Append`], through the catalog's commit driver
//!   [`crate::catalog::RedbCatalog::commit`]).
//! - **Lane 2** (Flight SQL ingest): the same [`Batcher`], each full file written at once
//!   ([`StageFiles`]); the transaction's COMMIT runs [`ingest_multi_commit`], the commit half of
//!   [`ingest_multi`]: a merge append per table, every table in ONE redb write transaction
//!   (one run of the commit driver over every table, creating those the transaction
//!   made).
//!
//! The design notes' other entry points stay public as the library API their tests pin
//! (`docs/design/`): [`fn@append`] and [`ingest_parallel`] (one snapshot from collected
//! groups), [`ingest_pipelined`] (the serial baseline the overlap is compared with),
//! [`ingest_pipelined_overlap`] (the overlap over collected groups, a thin wrapper of the
//! stream form), [`encode_pipelined`] and [`encode_and_write_files`], and [`ingest_multi`]
//! over collected groups. They take skade's catalog ([`crate::catalog::RedbCatalog`], the
//! notes' `catalog`) and commit exactly as the server's lanes do — a merge append through
//! the catalog's commit driver — so the notes' tests pin the code the server runs. There
//! is no commit path over a plain `iceberg::Catalog`: a library caller with one commits
//! through iceberg's own transactions.
//!
//! Modules:
//! - [`batcher`]: conform → reserve budget → encode as rows arrive → hand on full files.
//! - [`partition`]: splitting a batch by the table's partition spec.
//! - [`transform`]: the partition transforms as the spec defines them.
//! - [`schema`]: the Arrow ↔ Iceberg schema rules (table creation, conforming batches).
//! - [`types`]: which Iceberg type each Arrow type becomes, or why it is refused.
//! - [`conform`]: exact conversion of a batch to a table's schema, by name at every depth.
//! - [`defaults`]: column defaults (`initial-default`, `write-default`) as Arrow columns.
//! - [`mod@encode`], [`parallel`], [`file_stats`]: all-core Parquet encode (whole files or row
//!   groups as they fill) and each file's Iceberg metrics from its footer.
//! - [`file_out`]: a filled file finished straight into storage, never whole in memory.
//! - [`evolve`]: schema evolution on ingest (opt-in table property): the evolved schema
//!   a stream's files are written with (committed with its first data by
//!   [`crate::snapshot::append`]).
//! - [`ingest`]: the primitives every lane shares (file names and writes, the one-table
//!   append commit) and the single-commit lanes.
//!
//! The snapshots these lanes commit are built in [`crate::snapshot`].
//! - [`pipeline`]: multi-commit lanes, serial and overlapped (`ingest_pipelined*`).
//! - [`multi`]: one redb transaction for many tables (`ingest_multi`, `ingest_multi_commit`).
//! - [`budget`]: the shared memory budget for rows in flight.

pub mod batcher;
pub mod budget;
pub mod conform;
pub mod defaults;
pub mod encode;
pub mod evolve;
pub mod file_out;
pub mod file_stats;
pub mod ingest;
pub mod multi;
pub mod parallel;
pub mod partition;
pub mod pipeline;
pub mod schema;
pub mod transform;
pub mod types;

pub use batcher::{
    BatchLimits, Batcher, FileSink, FullFile, TARGET_FILE_SIZE_PROPERTY, target_file_size,
};
pub use budget::{MemoryBudget, Reservation, batch_bytes};
pub use conform::{ConformOptions, TRUNCATE_NANOS};
pub use encode::{EncodedFile, WriteProps, encode_groups, writer_properties};
pub use file_out::finish_and_write;
pub use ingest::{
    FileNames, IngestStats, append, commit_files, commit_files_with, encode, ingest_parallel,
    write_file, write_files,
};
pub use multi::{StagedTable, encode_and_write_files, ingest_multi, ingest_multi_commit};
pub use parallel::FileEncoder;
pub use partition::{PartitionTuple, Partitioner, unpartitioned};
pub use pipeline::{
    CommitReport, Segment, StageFiles, encode_pipelined, ingest_pipelined,
    ingest_pipelined_overlap, ingest_pipelined_overlap_stream,
    ingest_pipelined_overlap_stream_evolving,
};
pub use schema::{
    check_new_table, conform_batch, conform_batch_with, ensure_table, ensure_table_created,
    iceberg_schema_for, table_arrow_schema,
};

/// skade's table property that lets a stream evolve the table's schema (`true`; any other
/// value or none: off, the schema never changes on ingest; [`evolve`]).
pub const EVOLVE_SCHEMA: &str = "skade.ingest.evolve-schema";

/// What can go wrong on the write path. Each variant names the table it concerns.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The data does not fit the table's schema (a bad column, type or null).
    #[error("table {table}: column {column:?}: {reason}")]
    Schema {
        /// Table identifier, `ns.table`.
        table: String,
        /// Offending column name.
        column: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The stream's Arrow schema has no Iceberg equivalent.
    #[error("table {table}: unsupported Arrow schema: {source}")]
    UnsupportedSchema {
        /// Table identifier, `ns.table`.
        table: String,
        /// iceberg's explanation.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// Parquet encoding failed.
    #[error("table {table}: encoding a data file failed: {source}")]
    Encode {
        /// Table identifier, `ns.table`.
        table: String,
        /// iceberg's (or parquet's) error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// Writing a data file to storage failed.
    #[error("table {table}: writing data file {path} failed: {source}")]
    Storage {
        /// Table identifier, `ns.table`.
        table: String,
        /// The data file's location.
        path: String,
        /// The storage error.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// A catalog operation (load, create, commit) failed.
    #[error("table {table}: {source}")]
    Catalog {
        /// Table identifier, `ns.table`.
        table: String,
        /// The catalog's error; its `kind()` tells conflicts from other failures.
        #[source]
        source: Box<iceberg::Error>,
    },
    /// A multi-table ingest named the same table twice (`docs/design/ingest_multi.md` §f1,
    /// "Distinct idents per batch"); rejected before anything is encoded.
    #[error("table {table} appears more than once in one multi-table ingest")]
    RepeatedTable {
        /// Table identifier, `ns.table`.
        table: String,
    },
    /// A blocking encode task panicked or was cancelled.
    #[error("table {table}: encode task failed: {reason}")]
    Task {
        /// Table identifier, `ns.table`.
        table: String,
        /// The join error's text.
        reason: String,
    },
}

impl WriteError {
    /// Whether this failure of a multi-table commit ([`ingest_multi_commit`]) certainly left
    /// the catalog untouched — a conflict, a table created or dropped meanwhile, a
    /// rejected update, a repeated table — so the staged files can be deleted. Any other
    /// failure (e.g. storage during the redb transaction) may have committed; its files
    /// must stay.
    pub fn committed_nothing(&self) -> bool {
        use iceberg::ErrorKind;
        match self {
            WriteError::RepeatedTable { .. } => true,
            WriteError::Catalog { source, .. } => matches!(
                source.kind(),
                ErrorKind::CatalogCommitConflicts
                    | ErrorKind::TableAlreadyExists
                    | ErrorKind::TableNotFound
                    | ErrorKind::DataInvalid
            ),
            _ => false,
        }
    }

    /// Wraps a catalog error for `table`.
    pub fn catalog(table: &impl std::fmt::Display, source: iceberg::Error) -> Self {
        Self::Catalog {
            table: table.to_string(),
            source: Box::new(source),
        }
    }
}
