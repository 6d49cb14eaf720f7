//! Snapshot producers: one file per kind of table change, each a
//! [`crate::catalog::Stage`] the catalog's commit driver runs (`catalog/commit.rs`) — as
//! iceberg-rust's `transaction/` actions are run by its `Transaction::commit`.
//!
//! A stage is handed the commit's tables as they stand under their commit turns and
//! builds the change of each — the files it must write (manifests, manifest lists) and
//! the `(requirements, updates)` that make them current — or gives way with `None`.
//! The driver releases what it built in ONE transaction of the catalog's store and, on
//! a retryable conflict of that release, runs the stage again on the tables as they then
//! stand. A stage's error is its own type (a REST refusal stays a 400 from the stage to
//! the response) and is never retried.
//!
//! The producers:
//! - [`append`]: Java's merge append (plain, or evolving the schema in the same commit),
//!   of one table or of several in one commit — both ingest lanes;
//! - [`fast_append`]: iceberg's own fast append (what other Iceberg writers do);
//! - [`replace`]: compaction's `replace` (small data files swapped for their rewrite);
//! - [`rewrite_manifests`]: manifest merging's `replace` (the same files in fewer
//!   manifests);
//! - [`row_delta`]: rows deleted by a filter (position deletes, deletion vectors, whole
//!   data files) and data files appended, in one snapshot — `DELETE` and a
//!   transaction's scope replace;
//! - [`replace_table`]: a table's schema and rows replaced in one commit (ADBC's
//!   `mode="replace"`);
//! - [`expire`]: snapshot expiry;
//! - [`schema_change`]: a schema change committed together with an append (schema
//!   evolution on ingest);
//!
//! and what they share: [`manifests`] (writing manifests, Java's merge rules), `files`
//! (the added-files manifest and the manifest list every producer writes last) and
//! [`deletes`] (which data files a live delete file may apply to).

pub mod append;
pub(crate) mod deletes;
pub mod expire;
pub mod fast_append;
mod files;
pub mod manifests;
pub mod replace;
pub mod replace_table;
pub mod rewrite_manifests;
pub mod row_delta;
pub mod schema_change;
