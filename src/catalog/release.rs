//! The release (commit) protocol: check each table's requirements, write its next metadata
//! JSON (all tables at once), then flip every pointer in one group-committed redb write
//! transaction ([`super::group_commit`]).

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Arc;

use iceberg::compression::CompressionCodec;
use iceberg::spec::{FormatVersion, TableMetadata, TableMetadataBuilder, TableMetadataRef};
use iceberg::table::Table;
use iceberg::{
    Catalog, Error, ErrorKind, MetadataLocation, Result, TableCreation, TableIdent,
    TableRequirement, TableUpdate,
};

use super::group_commit;
use super::marks::WriterRange;
use super::metadata_cache::cache_key;
use super::metadata_json::{self, Refs, Written};
use super::store::Flip;
use super::{RedbCatalog, marks};
use crate::storage::blocking::run_blocking_io;

/// A pause of a catalog's commits ([`RedbCatalog::pause_commits`]); dropping it resumes
/// them, committing everything queued meanwhile as one batch.
#[doc(hidden)]
#[derive(Debug)]
#[must_use = "dropping the pause resumes commits at once"]
pub struct CommitPause {
    _held: group_commit::Pause,
}

/// One table's entry in [`RedbCatalog::atomic_release_raw`]: the table, the requirements
/// its base must still meet, and the updates to apply.
pub type ReleaseEntry = (TableIdent, Vec<TableRequirement>, Vec<TableUpdate>);

/// One table's part in [`RedbCatalog::atomic_release_raw`].
#[derive(Debug)]
pub enum Release {
    /// Advance an existing table: its identifier, the requirements its current metadata
    /// must meet, and the updates to apply (as [`ReleaseEntry`]).
    Advance(ReleaseEntry),
    /// Advance an existing table as the caller just loaded it (the commit driver, which
    /// loads every table under its commit turn): the requirements are checked against
    /// that metadata and the compare-and-swap made against its location, without reading
    /// the pointer again. A pointer moved since the load is a retryable conflict, as for
    /// [`Release::Advance`].
    AdvanceLoaded {
        /// The table as loaded (its metadata location is the compare-and-swap's base).
        table: Table,
        /// Requirements on that metadata.
        requirements: Vec<TableRequirement>,
        /// Updates to apply on top of it.
        updates: Vec<TableUpdate>,
        /// The producer's writer range the commit advances (`marks.rs`).
        mark: Option<WriterRange>,
    },
    /// Create a table that does not exist yet, with its first updates applied: `table`
    /// comes from [`RedbCatalog::plan_table`] (nothing of it is in the catalog), and the
    /// requirements are checked against its planned metadata.
    Create {
        /// The planned table.
        table: Table,
        /// Requirements on the planned metadata (e.g. a staged append's).
        requirements: Vec<TableRequirement>,
        /// Updates to apply on top of the planned metadata (may be empty).
        updates: Vec<TableUpdate>,
        /// The producer's writer range the commit advances (`marks.rs`).
        mark: Option<WriterRange>,
    },
}

/// A table commit whose metadata JSON is written and whose pointer has not moved yet.
pub(super) struct PreparedCommit {
    key: String,
    /// The pointer the commit was built on; `None` for a table the commit creates (the
    /// key must then still be absent).
    base_location: Option<String>,
    new_location: String,
    /// Namespaces (every level, outermost first) to create when absent; only for
    /// creates.
    namespaces: Vec<iceberg::NamespaceIdent>,
    /// The claim of the table's location (key, table uuid) a create writes
    /// (`locations.rs`); only for creates.
    claim: Option<(String, String)>,
    /// The producer's high-water mark the commit advances ([`marks`]).
    mark: Option<marks::MarkAdvance>,
    table: Table,
    /// What is carried beside the new metadata (its refs, its snapshots' JSON), when
    /// known (`metadata_json.rs`).
    written: Option<Arc<Written>>,
}

impl From<ReleaseEntry> for Release {
    fn from(entry: ReleaseEntry) -> Self {
        Self::Advance(entry)
    }
}

impl RedbCatalog {
    /// Commits N tables' updates in ONE transaction of the store (one fsync): every table
    /// advances or none does. What every commit of this process ends in (the commit
    /// driver releases its stage's changes here).
    ///
    /// Each entry's requirements are checked against its table's current metadata and its
    /// updates applied; the new metadata JSON files are written (all tables at once), the
    /// warehouse synced, then one transaction compare-and-swaps every pointer — shared
    /// with concurrent commits (group commit), which cannot make this release partial.
    /// An entry is a [`ReleaseEntry`] `(ident, requirements, updates)` (the design notes'
    /// form) or any [`Release`]: a [`Release::Create`] inserts its table's pointer (and any
    /// missing namespace level) in the same transaction, so a multi-table flush into new
    /// tables is all or nothing too. Returns the tables in input order. An empty batch
    /// writes nothing and returns `[]`.
    ///
    /// # Errors
    /// - `DataInvalid` when an identifier appears twice — rejected before anything is
    ///   written, since both entries would build on the same base and one would be lost
    ///   (`docs/design/ingest_multi.md` §f1, "Distinct idents per batch").
    /// - `TableNotFound` for an unknown table; `CatalogCommitConflicts` (retryable) when a
    ///   requirement fails or a pointer moved after it was read; `TableAlreadyExists`
    ///   (not retryable) when a table to create exists by the time the pointers flip.
    ///   Nothing is committed; the metadata files already written are orphans.
    pub async fn atomic_release_raw<R: Into<Release>>(
        &self,
        batch: impl IntoIterator<Item = R>,
    ) -> Result<Vec<Table>> {
        let batch: Vec<Release> = batch.into_iter().map(Into::into).collect();
        let mut seen = HashSet::new();
        for entry in &batch {
            let ident = match entry {
                Release::Advance((ident, _, _)) => ident,
                Release::AdvanceLoaded { table, .. } | Release::Create { table, .. } => {
                    table.identifier()
                }
            };
            if !seen.insert(ident.clone()) {
                return Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!("table {ident} appears more than once in one atomic release"),
                ));
            }
        }
        if batch.is_empty() {
            return Ok(Vec::new());
        }
        // Every table's metadata is built and written at once: a flush of N tables waits
        // for the slowest write, not for the sum of N.
        let prepared = futures::future::try_join_all(batch.into_iter().map(|entry| async {
            match entry {
                Release::Advance((ident, requirements, updates)) => {
                    let base = self.load_table(&ident).await?;
                    self.prepare_commit(base, requirements, updates, None).await
                }
                Release::AdvanceLoaded {
                    table,
                    requirements,
                    updates,
                    mark,
                } => {
                    self.prepare_commit(table, requirements, updates, mark.as_ref())
                        .await
                }
                Release::Create {
                    table,
                    requirements,
                    updates,
                    mark,
                } => {
                    self.prepare_create(table, requirements, updates, mark.as_ref())
                        .await
                }
            }
        }))
        .await?;
        self.release(prepared).await
    }

    /// A handle for a table that does not exist yet: its metadata as `create_table` would
    /// write it, with nothing written and nothing in the catalog. Data files can be
    /// written under its location and staged against it; [`Release::Create`] makes it
    /// real, and claims the location for it.
    ///
    /// The location is a free one (`locations.rs`): the creation's own, when no table
    /// or claim lies at, inside or around it and nothing is stored under it; without
    /// one, `<warehouse>/<namespace...>/<table>` when free, else that with a `-<uuid>`
    /// suffix.
    ///
    /// # Errors
    /// `DataInvalid` naming what uses the creation's location; iceberg's error for an
    /// invalid creation (e.g. a bad schema or partition spec); the store's or the
    /// storage's error looking at the location.
    pub async fn plan_table(&self, ident: &TableIdent, creation: TableCreation) -> Result<Table> {
        let location = self
            .choose_location(ident, creation.location.as_deref())
            .await?;
        let creation = TableCreation {
            name: ident.name().to_string(),
            location: Some(location.clone()),
            ..creation
        };
        let metadata = TableMetadataBuilder::from_table_creation(creation)?
            .build()?
            .metadata;
        let metadata_location = MetadataLocation::new_with_metadata(location, &metadata);
        self.table_handle(ident.clone(), metadata_location.to_string(), metadata)
    }

    /// Writes a planned table's first metadata and the metadata with `updates` applied;
    /// does not insert its pointer.
    pub(super) async fn prepare_create(
        &self,
        planned: Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
        mark: Option<&WriterRange>,
    ) -> Result<PreparedCommit> {
        let ident = planned.identifier().clone();
        for requirement in &requirements {
            requirement.check(Some(planned.metadata()))?;
        }
        let key = cache_key(&ident);
        let mark = marks::MarkAdvance::of(&ident, mark, &updates)?;
        check_file_paths_after(&ident, planned.metadata(), &updates)?;
        let first_location = planned.metadata_location_result()?.to_string();
        let at = MetadataLocation::from_str(&first_location)?;
        // A planned table without snapshots has no refs (iceberg refuses a ref to a
        // missing snapshot); any other is left to iceberg's writer.
        let refs = (planned.metadata().snapshots().len() == 0)
            .then(|| metadata_json::refs_after(&Refs::new(), &[], planned.metadata()))
            .flatten();
        let first = self
            .write_metadata(planned.metadata_ref(), at, refs, None)
            .await?;
        let (new_location, metadata, written) = if updates.is_empty() {
            (first_location, planned.metadata_ref(), first)
        } else {
            self.write_next_metadata(planned.metadata(), &first_location, first, updates)
                .await?
        };
        let parts = ident.namespace().as_ref();
        let namespaces = (1..=parts.len())
            .map(|depth| iceberg::NamespaceIdent::from_vec(parts[..depth].to_vec()))
            .collect::<Result<Vec<_>>>()?;
        let table = self.table_handle(ident.clone(), new_location.clone(), metadata)?;
        Ok(PreparedCommit {
            key,
            base_location: None,
            new_location,
            namespaces,
            claim: super::locations::claim_of(self, &planned),
            mark,
            table,
            written,
        })
    }

    /// Applies `updates` to `base` (stored at `base_location`, with what was carried
    /// beside it when this process wrote it), writes the result as the next metadata
    /// version, and returns its location, metadata and what to carry beside it.
    ///
    /// # Errors
    /// iceberg's error for an update that does not apply, or the write's storage error.
    pub(super) async fn write_next_metadata(
        &self,
        base: &TableMetadata,
        base_location: &str,
        base_written: Option<Arc<Written>>,
        updates: Vec<TableUpdate>,
    ) -> Result<(String, TableMetadataRef, Option<Arc<Written>>)> {
        let advanced = base_written
            .as_deref()
            .and_then(|base| metadata_json::advance_refs(&base.refs, &updates));
        let mut builder = base.clone().into_builder(Some(base_location.to_string()));
        for update in updates {
            builder = update.apply(builder)?;
        }
        let metadata = builder.build()?.metadata;
        let location = MetadataLocation::from_str(base_location)?
            .with_next_version()
            .with_new_metadata(&metadata);
        let refs = advanced.filter(|refs| metadata_json::consistent(refs, &metadata));
        let metadata = Arc::new(metadata);
        let written = self
            .write_metadata(metadata.clone(), location.clone(), refs, base_written)
            .await?;
        Ok((location.to_string(), metadata, written))
    }

    /// Writes `metadata` at `location` — as [`metadata_json::v2_bytes`] when its `refs`
    /// are known (reusing the snapshot JSON `previous` carries), else as iceberg
    /// serializes it — and returns what to carry beside it (`None` for a table not in
    /// format v2, or a compressed metadata codec, which iceberg writes).
    ///
    /// # Errors
    /// The write's storage error, or iceberg's error for properties that do not parse.
    async fn write_metadata(
        &self,
        metadata: TableMetadataRef,
        location: MetadataLocation,
        refs: Option<Refs>,
        previous: Option<Arc<Written>>,
    ) -> Result<Option<Arc<Written>>> {
        let file_io = self.file_io.clone();
        run_blocking_io(async move {
            let fast = match refs {
                Some(refs) => metadata_json::v2_bytes(&metadata, refs, previous.as_deref())?,
                None => None,
            };
            let (bytes, written) = match fast {
                Some((bytes, written)) => {
                    // Debug builds check against iceberg's writer (up to 32 KiB: the
                    // larger documents of long tests have the same shape).
                    debug_assert!(
                        bytes.len() > 32 << 10 || metadata_json::same_document(&bytes, &metadata),
                        "metadata JSON differs from iceberg's"
                    );
                    (bytes, Some(written))
                }
                // Carried for v2 only: the only form `v2_bytes` writes (a v1 document
                // has no `refs` member to take them from).
                None if metadata.metadata_compression_codec()? == CompressionCodec::None => {
                    let bytes = serde_json::to_vec(metadata.as_ref())?;
                    let written = match metadata.format_version() {
                        FormatVersion::V2 => {
                            Some(Written::of_refs(metadata_json::refs_of(&bytes)?))
                        }
                        _ => None,
                    };
                    (bytes, written)
                }
                None => {
                    metadata.write_to(&file_io, &location).await?;
                    return Ok(None);
                }
            };
            file_io
                .new_output(location.to_string())?
                .write(bytes.into())
                .await?;
            Ok(written.map(Arc::new))
        })
        .await
    }

    /// Builds and writes the new metadata for one table on `base` (its metadata location
    /// is the compare-and-swap's base); does not move its pointer.
    pub(super) async fn prepare_commit(
        &self,
        base: Table,
        requirements: Vec<TableRequirement>,
        updates: Vec<TableUpdate>,
        mark: Option<&WriterRange>,
    ) -> Result<PreparedCommit> {
        let ident = base.identifier().clone();
        let ident = &ident;
        for requirement in &requirements {
            requirement.check(Some(base.metadata()))?;
        }
        let key = cache_key(ident);
        let mark = marks::MarkAdvance::of(ident, mark, &updates)?;
        check_file_paths_after(ident, base.metadata(), &updates)?;
        let base_location = base.metadata_location_result()?.to_string();
        let base_written = self.metadata.written(&key, &base_location);
        let (new_location, metadata, written) = self
            .write_next_metadata(base.metadata(), &base_location, base_written, updates)
            .await?;
        let table = self.table_handle(ident.clone(), new_location.clone(), metadata)?;
        Ok(PreparedCommit {
            key,
            base_location: Some(base_location),
            new_location,
            namespaces: Vec::new(),
            claim: None,
            mark,
            table,
            written,
        })
    }

    /// Flips every prepared pointer in one redb write transaction — shared with any
    /// concurrent release ([`group_commit`]) — after the warehouse sync that makes the
    /// prepared files durable; returns once that transaction is durable. Remembers each
    /// table's new metadata ([`super::metadata_cache`]).
    ///
    /// # Errors
    /// As [`super::group_commit::Committer::submit`], or a failed write-behind upload on S3
    /// ([`crate::storage::uploads::PendingUploads::wait_under`]); nothing of `prepared` is visible
    /// then.
    pub(super) async fn release(&self, prepared: Vec<PreparedCommit>) -> Result<Vec<Table>> {
        // On S3 a commit's manifests upload behind their writers: stored before queued.
        if let Some(uploads) = self.warehouse.pending_uploads() {
            for p in &prepared {
                uploads.wait_under(p.table.metadata().location()).await?;
            }
        }
        let flips = prepared
            .iter()
            .map(|p| Flip {
                ident: p.table.identifier().clone(),
                base: p.base_location.clone(),
                new: p.new_location.clone(),
                namespaces: p.namespaces.clone(),
                claim: p.claim.clone(),
                mark: p.mark.clone(),
            })
            .collect();
        self.committer.submit(flips).await?;
        for p in &prepared {
            self.metadata.put(
                &p.key,
                &p.new_location,
                p.table.metadata_ref(),
                p.written.clone(),
            );
        }
        Ok(prepared.into_iter().map(|p| p.table).collect())
    }

    /// Testing aid for group commit: while the returned guard lives, data commits of this
    /// catalog queue and none reaches redb; dropping it commits everything queued as ONE
    /// batch (one warehouse sync, one write transaction). A batch already running when
    /// the pause starts finishes first. Never needed in production: holding it stalls
    /// every commit.
    #[doc(hidden)]
    pub fn pause_commits(&self) -> CommitPause {
        CommitPause {
            _held: self.committer.pause(),
        }
    }

    /// Testing aid: data commits queued for the next group-commit batch (see
    /// [`Self::pause_commits`]).
    #[doc(hidden)]
    pub fn queued_commits(&self) -> usize {
        self.committer.queued()
    }
}

/// Checks that `metadata` with `updates` applied leaves the table's files where skade
/// writes them ([`super::check_file_paths`]), before anything of the commit is written.
///
/// # Errors
/// `FeatureUnsupported` naming the property.
fn check_file_paths_after(
    ident: &TableIdent,
    metadata: &TableMetadata,
    updates: &[TableUpdate],
) -> Result<()> {
    let mut properties = metadata.properties().clone();
    for update in updates {
        match update {
            TableUpdate::SetProperties { updates } => properties.extend(updates.clone()),
            TableUpdate::RemoveProperties { removals } => {
                for key in removals {
                    properties.remove(key);
                }
            }
            _ => {}
        }
    }
    super::check_file_paths(&ident.to_string(), &properties)
}
