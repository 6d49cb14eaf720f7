//! The append skade's lanes commit: Iceberg Java's merge append, built on iceberg's
//! manifest and manifest-list writers, that never reads back what its catalog wrote.
//!
//! iceberg 0.10.1's fast append ([`super::fast_append::stage_fast_append`]) reads the parent
//! snapshot's manifest list from storage on every commit and carries every manifest on,
//! so a table's manifest list — and each commit's and each reader's cost — grows with
//! every append until something merges it. This append instead:
//! - writes one manifest of the new data files (entries `ADDED`, sequence numbers
//!   inherited from the manifest list, as the fast append writes them);
//! - takes the parent's manifests from the catalog's cache of the lists it wrote
//!   ([`crate::catalog::manifest_cache::WrittenManifests`]), reading the file only on a
//!   miss;
//! - merges the list inline when the table's merge rules say so ([`super::manifests`]:
//!   `commit.manifest-merge.enabled`, `commit.manifest.min-count-to-merge`,
//!   `commit.manifest.target-size-bytes`), as Java's `MergeAppend` does (table spec:
//!   the merged entries are `EXISTING` with their original snapshot ids and sequence
//!   numbers);
//! - writes the manifest list and returns the commit: `AddSnapshot` (operation
//!   `append`, summary as Java's `SnapshotProducer` computes it) and `SetSnapshotRef
//!   main`, with the table's uuid and `main` at the parent as requirements.
//!
//! Format v1 and v3 tables (v3 assigns row ids in the manifest list) take iceberg's fast
//! append unchanged.
//!
//! [`Append`] is the stage both ingest lanes commit through: the append of one table, or
//! of several in ONE commit (Lane 2), each optionally evolving its table's schema in the
//! same commit ([`SchemaChange`]), each carrying the producer's writer range.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    DataFile, FormatVersion, ManifestFile, Operation, SnapshotSummaryCollector, Summary,
    TableProperties,
};
use iceberg::table::Table;
use iceberg::{Result, TableRequirement, TableUpdate};

use async_trait::async_trait;
use futures::future::try_join_all;

use super::fast_append::stage_fast_append_with;
use super::files::{carry_totals, write_added, write_snapshot};
use super::manifests::{merge_manifests, unique_snapshot_id};
use super::row_delta;
use super::schema_change::{SchemaChange, evolved_handle};
use crate::catalog::RedbCatalog;
use crate::catalog::manifest_cache::{ManifestCache, WrittenManifests};
use crate::catalog::{Stage, Staged, TableChange, WriterRange};
use crate::sql::Predicate;
use crate::storage::blocking::run_blocking_io;

/// One table's part of an [`Append`]: the data files it appends (in write order; they
/// become ONE snapshot) and the schema change it makes current with them, if any.
#[derive(Debug, Clone, Default)]
pub struct AppendPart {
    /// The data files, already written for the table.
    pub files: Vec<DataFile>,
    /// A schema the files were written with, made current in the same commit.
    pub change: Option<SchemaChange>,
    /// Filters whose rows are deleted in the same snapshot ([`super::row_delta`]): a
    /// transaction's `DELETE`s of the table.
    pub deletes: Vec<Predicate>,
    /// Whether the files replace the table's rows and schema (`change` holds the new
    /// schema): [`super::replace_table`].
    pub replace: bool,
}

/// The merge append of one or several tables in one commit (module docs). A part without
/// files changes nothing of its table (a table the commit creates is created empty).
#[derive(Debug)]
pub struct Append<'a> {
    catalog: &'a RedbCatalog,
    parts: Vec<AppendPart>,
    properties: HashMap<String, String>,
    mark: Option<WriterRange>,
}

impl<'a> Append<'a> {
    /// The append of `parts`, one per commit target in target order, with `properties`
    /// in every new snapshot's summary (`catalog` builds the handles a schema change is
    /// staged on).
    pub fn new(
        catalog: &'a RedbCatalog,
        parts: Vec<AppendPart>,
        properties: HashMap<String, String>,
    ) -> Self {
        Self {
            catalog,
            parts,
            properties,
            mark: None,
        }
    }

    /// This append, advancing `mark` (a producer's writer range: exactly-once) in every
    /// table it appends to.
    pub fn with_mark(mut self, mark: Option<WriterRange>) -> Self {
        self.mark = mark;
        self
    }
}

#[async_trait]
impl Stage for Append<'_> {
    type Out = ();
    type Error = iceberg::Error;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<()>>> {
        if current.len() != self.parts.len() {
            return Err(iceberg::Error::new(
                iceberg::ErrorKind::Unexpected,
                format!(
                    "an append of {} tables was run on {}",
                    self.parts.len(),
                    current.len()
                ),
            ));
        }
        let mut properties = self.properties.clone();
        if let Some(mark) = &self.mark {
            properties.extend(mark.summary());
        }
        // Every table at once: a flush of N tables waits for its slowest table, not for
        // the sum (the multi-table latency target).
        let catalog = self.catalog;
        let changes = try_join_all(self.parts.iter().zip(current).map(|(part, base)| {
            stage_part(
                catalog,
                part,
                base.clone(),
                properties.clone(),
                self.mark.clone(),
            )
        }))
        .await?;
        Ok(Some(Staged::new(changes, ())))
    }
}

/// One table's change of an [`Append`]: its append (when it has files) staged on `base`
/// — on the blocking pool, since iceberg's local storage blocks and fsyncs inside its
/// futures — with the schema change it evolves, if any.
///
/// # Errors
/// iceberg's error when the stage failed, or the schema the change was planned on is no
/// longer current.
async fn stage_part(
    catalog: &RedbCatalog,
    part: &AppendPart,
    base: Table,
    properties: HashMap<String, String>,
    mark: Option<WriterRange>,
) -> Result<TableChange> {
    if part.replace {
        return stage_replace_part(catalog, part, base, properties, mark).await;
    }
    if !part.deletes.is_empty() {
        return stage_row_delta_part(catalog, part, base, properties, mark).await;
    }
    if part.files.is_empty() {
        return Ok(TableChange::default());
    }
    let files = part.files.clone();
    let change = match &part.change {
        Some(change) => Some(evolved_handle(catalog, &base, change)?),
        None => None,
    };
    let written = catalog.written_manifests().clone();
    let (requirements, updates) = run_blocking_io(async move {
        match change {
            Some((evolved, change)) => {
                stage_evolving_append(&written, evolved, &change, files, properties).await
            }
            None => stage_append(&written, &base, files, properties).await,
        }
    })
    .await?;
    Ok(TableChange::new(requirements, updates).with_mark(mark))
}

/// A replacing part: the table's schema and rows replaced by the part's (on the
/// blocking pool, as every stage that writes files).
///
/// # Errors
/// `Unexpected` for a replacing part without its schema; as
/// [`super::replace_table::stage_replace`].
async fn stage_replace_part(
    catalog: &RedbCatalog,
    part: &AppendPart,
    base: Table,
    properties: HashMap<String, String>,
    mark: Option<WriterRange>,
) -> Result<TableChange> {
    let Some(change) = part.change.clone() else {
        return Err(iceberg::Error::new(
            iceberg::ErrorKind::Unexpected,
            format!("the replace of {} carries no schema", base.identifier()),
        ));
    };
    let handle = super::replace_table::replaced_handle(
        catalog,
        &base,
        &change.schema,
        change.base_schema_id,
    )?;
    let written = catalog.written_manifests().clone();
    let files = part.files.clone();
    let (requirements, updates) = run_blocking_io(async move {
        super::replace_table::stage_replace(
            &written,
            &base,
            &handle,
            &change.schema,
            change.base_schema_id,
            files,
            properties,
        )
        .await
    })
    .await?;
    Ok(TableChange::new(requirements, updates).with_mark(mark))
}

/// A part with deletes: one row delta of its deletes and files on `base`.
///
/// # Errors
/// `FeatureUnsupported` for a part that also changes the schema; as
/// [`super::row_delta::stage_on`].
async fn stage_row_delta_part(
    catalog: &RedbCatalog,
    part: &AppendPart,
    base: Table,
    properties: HashMap<String, String>,
    mark: Option<WriterRange>,
) -> Result<TableChange> {
    if part.change.is_some() {
        return Err(iceberg::Error::new(
            iceberg::ErrorKind::FeatureUnsupported,
            format!(
                "table {} gets a DELETE and an append that changes its schema in one \
                 transaction: commit the schema change first",
                base.identifier()
            ),
        ));
    }
    let staged = row_delta::stage_on(
        catalog.written_manifests().clone(),
        base,
        part.deletes.clone(),
        part.files.clone(),
        properties,
    )
    .await?;
    Ok(match staged {
        Some((requirements, updates, _)) => TableChange::new(requirements, updates).with_mark(mark),
        None => TableChange::default(),
    })
}

/// Stages `data_files` as one append on `table` (module docs): writes its manifest, any
/// merged manifests and its manifest list, and returns its `(requirements, updates)`.
/// `properties` go into the snapshot summary beside the computed `added-*` / `total-*`
/// figures (which win on a collision, as in Java). The catalog is not touched (its
/// `written` manifests aside: [`crate::catalog::RedbCatalog::written_manifests`]); the
/// files written are orphans until the commit lands.
///
/// # Errors
/// iceberg's error for a manifest list or manifest that cannot be read or written.
pub async fn stage_append(
    written: &Arc<WrittenManifests>,
    table: &Table,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let metadata = table.metadata();
    if metadata.format_version() != FormatVersion::V2 || data_files.is_empty() {
        return stage_fast_append_with(table, data_files, properties).await;
    }
    let snapshot_id = unique_snapshot_id(table);
    let commit_uuid = uuid::Uuid::now_v7();
    let sequence_number = metadata.next_sequence_number();
    let parent = metadata.current_snapshot();
    let summary = summary(table, &data_files, properties);

    let path = format!("{}/metadata/{commit_uuid}-m0.avro", metadata.location());
    let added = write_added(
        table,
        written,
        &path,
        snapshot_id,
        sequence_number,
        data_files,
    )
    .await?;
    // Java puts the new manifest first.
    let mut manifests: Vec<ManifestFile> = vec![added];
    if let Some(parent) = parent {
        manifests.extend(written.read_list(table, parent).await?.iter().cloned());
    }
    let mut cache = ManifestCache::new(written.clone());
    if let Some(merged) =
        merge_manifests(table, snapshot_id, commit_uuid, 1, &manifests, &mut cache).await?
    {
        manifests = merged.manifests;
    }

    write_snapshot(table, written, snapshot_id, commit_uuid, manifests, summary).await
}

/// The summary of an append of `data_files` to `table`: `properties`, then the
/// `added-*` figures of iceberg's [`SnapshotSummaryCollector`] (partition summaries up
/// to `write.summary.partition-limit`), then every `total-*` as the parent's total plus
/// what this snapshot adds (Java's `SnapshotProducer.summary`, the spec's "Snapshot
/// Summary" section).
fn summary(table: &Table, data_files: &[DataFile], properties: HashMap<String, String>) -> Summary {
    let metadata = table.metadata();
    let mut collector = SnapshotSummaryCollector::default();
    collector.set_partition_summary_limit(
        metadata
            .properties()
            .get(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT)
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(TableProperties::PROPERTY_WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT),
    );
    for data_file in data_files {
        collector.add_file(
            data_file,
            metadata.current_schema().clone(),
            metadata.default_partition_spec().clone(),
        );
    }
    let mut summary = properties;
    summary.extend(collector.build());
    carry_totals(table, &mut summary);
    Summary {
        operation: Operation::Append,
        additional_properties: summary,
    }
}

/// Stages `data_files` as one append ([`stage_append`]) on `evolved` (from [`evolved_handle`]) that
/// also makes `change` the table's current schema: `(requirements, updates)` for ONE
/// catalog commit — the append's own, plus "the current schema is still
/// `change.base_schema_id`", with `AddSchema` + `SetCurrentSchema` before the append.
///
/// # Errors
/// iceberg's error from the append (e.g. a manifest write failure).
pub async fn stage_evolving_append(
    written: &Arc<WrittenManifests>,
    evolved: Table,
    change: &SchemaChange,
    data_files: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> iceberg::Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let (mut requirements, appended) =
        stage_append(written, &evolved, data_files, properties).await?;
    requirements.push(TableRequirement::CurrentSchemaIdMatch {
        current_schema_id: change.base_schema_id,
    });
    let mut updates = vec![
        TableUpdate::AddSchema {
            schema: change.schema.as_ref().clone(),
        },
        TableUpdate::SetCurrentSchema { schema_id: -1 },
    ];
    updates.extend(appended);
    Ok((requirements, updates))
}
