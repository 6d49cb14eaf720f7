//! A row delta: the rows a filter matches deleted, and data files appended, in ONE
//! snapshot — what a `DELETE`, and a transaction's "delete these rows, add those" (a
//! scope replace), commit. Iceberg Java's `RowDelta`; written the way the table spec asks
//! ("Delete Formats", "Row-level Deletes"), never with equality deletes:
//!
//! - a data file none of whose rows can match (its column bounds, [`Predicate::may_match_file`])
//!   is not read;
//! - a data file that is read has its matching rows recorded by position: on a v2 table a
//!   file-scoped position-delete file per data file, on a v3 table one deletion vector
//!   per data file, merged with the file's existing deletes (the spec allows one DV per
//!   data file per snapshot; the DV it replaces leaves the delete manifests);
//! - a data file whose rows all go is removed whole on a v2 table (its entry `DELETED`,
//!   its file-scoped delete files with it); on a v3 table it gets a DV of every row
//!   (removing it would mean rewriting data manifests with their row lineage;
//!   compaction drops such a file);
//! - rows already deleted are not counted or recorded again.
//!
//! The delete is planned on the table as it stands in its commit turn, so a re-stage
//! after a conflict plans again on what committed meanwhile: rows a concurrent append
//! added that match the filter are deleted too, and a data file a concurrent commit
//! removed is never named — the serializable isolation of Iceberg's
//! `write.delete.isolation-level` default.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use futures::TryStreamExt;
use iceberg::scan::FileScanTask;
use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, FormatVersion, ManifestContentType, ManifestFile,
    ManifestStatus, ManifestWriterBuilder, Operation, Struct, Summary,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};
use roaring::RoaringTreemap;

use super::deletes::referenced_file;
use super::files::{carry_totals, write_added, write_snapshot};
use super::manifests::{entry_ids, unique_snapshot_id};
use crate::catalog::manifest_cache::{ManifestCache, WrittenManifests};
use crate::catalog::{RedbCatalog, Stage, Staged, TableChange};
use crate::deletes::{DeletedRows, deleted_positions, write_delete_files};
use crate::sql::{Predicate, evaluate};
use crate::storage::blocking::run_blocking_io;

/// Rows read per batch while looking for the rows a filter matches.
const MATCH_BATCH_ROWS: usize = 65_536;

/// One table's live files, as the delete planner needs them.
#[derive(Default)]
struct LiveFiles {
    /// Live data files: (spec id, data sequence number, file).
    data: Vec<(i32, i64, DataFile)>,
    /// Live delete files that name one data file, by that file's path: (data sequence
    /// number, file).
    by_path: HashMap<String, Vec<(i64, DataFile)>>,
    /// Live position-delete files that name no single file, by (spec id, partition).
    by_partition: HashMap<(i32, Struct), Vec<(i64, DataFile)>>,
    /// Live equality-delete files: (spec id, partition, data sequence number).
    equality: Vec<(i32, Struct, i64)>,
    /// Spec ids of unpartitioned specs.
    unpartitioned: HashSet<i32>,
}

/// A manifest entry's file: its path and, for a deletion vector, its blob's offset —
/// one Puffin file holds the vectors of many data files, and a vector merged into a new
/// one leaves the delete manifests alone, its neighbours staying live (table spec,
/// "Deletion Vectors").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FileKey {
    path: String,
    offset: Option<i64>,
}

impl FileKey {
    pub(crate) fn of(file: &DataFile) -> Self {
        Self {
            path: file.file_path().to_string(),
            offset: file.content_offset(),
        }
    }
}

/// What a delete changes in one table (module docs).
#[derive(Debug, Default)]
pub(crate) struct DeletePlan {
    /// Data files removed whole (v2): (spec id, file).
    pub(crate) removed: Vec<(i32, DataFile)>,
    /// Delete files that leave with them or are replaced by a merged DV, by
    /// [`FileKey`]: (spec id, file).
    pub(crate) removed_deletes: HashMap<FileKey, (i32, DataFile)>,
    /// Rows to record in new delete files, per data file.
    pub(crate) rows: Vec<DeletedRows>,
    /// The spec id of each data file in `rows`, by path.
    pub(crate) specs: HashMap<String, i32>,
    /// Rows deleted (not deleted before).
    pub(crate) deleted: u64,
}

/// The rows of `table`'s current snapshot (listed by `manifests`) that any of `filters`
/// matches, not yet deleted, and how to delete them (module docs).
///
/// # Errors
/// `FeatureUnsupported` for a format-1 table or a data file an equality delete applies
/// to (skade cannot tell which of its rows are live); iceberg's error for a manifest,
/// data file or delete file that cannot be read.
pub(crate) async fn plan_delete(
    table: &Table,
    manifests: &[ManifestFile],
    filters: &[Predicate],
    cache: &mut ManifestCache,
) -> Result<DeletePlan> {
    let version = table.metadata().format_version();
    if version == FormatVersion::V1 {
        return Err(Error::new(
            ErrorKind::FeatureUnsupported,
            format!(
                "table {} is format version 1: row-level deletes need format version 2 or later \
                 (upgrade it: set-properties format-version=2)",
                table.identifier()
            ),
        ));
    }
    let live = live_files(table, manifests, cache).await?;
    let mut plan = DeletePlan::default();
    for (spec_id, sequence, file) in &live.data {
        if !filters.iter().any(|f| f.may_match_file(file)) {
            continue;
        }
        let applicable = live.applicable(*spec_id, *sequence, file)?;
        let existing = if applicable.is_empty() {
            RoaringTreemap::new()
        } else {
            deleted_positions(table.file_io(), file.file_path(), &applicable).await?
        };
        let matched = matching_rows(table, *spec_id, file, filters).await?;
        let new = &matched - &existing;
        if new.is_empty() {
            continue;
        }
        plan.deleted += new.len();
        let all = &existing | &new;
        let named = live
            .by_path
            .get(file.file_path())
            .into_iter()
            .flatten()
            .filter(|(seq, _)| sequence <= seq)
            .map(|(_, d)| (FileKey::of(d), (*spec_id, d.clone())));
        match version {
            FormatVersion::V2 if all.len() >= file.record_count() => {
                plan.removed.push((*spec_id, file.clone()));
                plan.removed_deletes.extend(named);
            }
            FormatVersion::V2 => {
                plan.specs.insert(file.file_path().to_string(), *spec_id);
                plan.rows.push(DeletedRows {
                    data_file: file.clone(),
                    positions: new,
                });
            }
            _ => {
                plan.specs.insert(file.file_path().to_string(), *spec_id);
                plan.removed_deletes.extend(named);
                plan.rows.push(DeletedRows {
                    data_file: file.clone(),
                    positions: all,
                });
            }
        }
    }
    Ok(plan)
}

impl LiveFiles {
    /// The live delete files that apply to `file` (spec `spec_id`, data sequence
    /// number `sequence`) by the table spec's "Scan Planning" rules.
    ///
    /// # Errors
    /// `FeatureUnsupported` when an equality delete applies.
    fn applicable(&self, spec_id: i32, sequence: i64, file: &DataFile) -> Result<Vec<DataFile>> {
        let partition = file.partition();
        if self.equality.iter().any(|(spec, part, seq)| {
            sequence < *seq
                && (self.unpartitioned.contains(spec) || (*spec == spec_id && part == partition))
        }) {
            return Err(Error::new(
                ErrorKind::FeatureUnsupported,
                format!(
                    "an equality delete applies to data file {}: skade does not delete rows from \
                     it (compact the table with the engine that wrote the equality deletes)",
                    file.file_path()
                ),
            ));
        }
        let named = self.by_path.get(file.file_path()).into_iter().flatten();
        let scoped = self
            .by_partition
            .get(&(spec_id, partition.clone()))
            .into_iter()
            .flatten();
        Ok(named
            .chain(scoped)
            .filter(|(seq, _)| sequence <= *seq)
            .map(|(_, d)| d.clone())
            .collect())
    }
}

/// The live files of the snapshot `manifests` list.
///
/// # Errors
/// iceberg's error for a manifest that cannot be read; `DataInvalid` for an entry without
/// sequence number.
async fn live_files(
    table: &Table,
    manifests: &[ManifestFile],
    cache: &mut ManifestCache,
) -> Result<LiveFiles> {
    let mut live = LiveFiles::default();
    for spec in table.metadata().partition_specs_iter() {
        if spec.fields().is_empty() {
            live.unpartitioned.insert(spec.spec_id());
        }
    }
    for manifest in manifests {
        let spec_id = manifest.partition_spec_id;
        for entry in cache.manifest(table.file_io(), manifest).await?.entries() {
            if !entry.is_alive() {
                continue;
            }
            let (_, sequence) = entry_ids(entry, manifest)?;
            let file = entry.data_file();
            match file.content_type() {
                DataContentType::Data => live.data.push((spec_id, sequence, file.clone())),
                DataContentType::PositionDeletes => match referenced_file(file) {
                    Some(path) => live
                        .by_path
                        .entry(path)
                        .or_default()
                        .push((sequence, file.clone())),
                    None => live
                        .by_partition
                        .entry((spec_id, file.partition().clone()))
                        .or_default()
                        .push((sequence, file.clone())),
                },
                DataContentType::EqualityDeletes => {
                    live.equality
                        .push((spec_id, file.partition().clone(), sequence))
                }
            }
        }
    }
    Ok(live)
}

/// The positions of `file`'s rows that any of `filters` matches (a `NULL` outcome does
/// not match, as SQL's `WHERE`). A filter whose column statistics prove every row
/// matches ([`Predicate::must_match_file`]: `TRUE`, a whole partition, …) matches them
/// without reading.
///
/// # Errors
/// iceberg's error when the file cannot be read; `DataInvalid` when a filter cannot be
/// evaluated on its rows.
async fn matching_rows(
    table: &Table,
    spec_id: i32,
    file: &DataFile,
    filters: &[Predicate],
) -> Result<RoaringTreemap> {
    if filters.iter().any(|f| f.must_match_file(file)) {
        let mut all = RoaringTreemap::new();
        all.insert_range(0..file.record_count());
        return Ok(all);
    }
    let mut columns: Vec<i32> = Vec::new();
    for id in filters.iter().flat_map(Predicate::column_ids) {
        if !columns.contains(&id) {
            columns.push(id);
        }
    }
    let metadata = table.metadata();
    let task = FileScanTask {
        file_size_in_bytes: file.file_size_in_bytes(),
        start: 0,
        length: file.file_size_in_bytes(),
        record_count: Some(file.record_count()),
        data_file_path: file.file_path().to_string(),
        data_file_format: file.file_format(),
        schema: metadata.current_schema().clone(),
        project_field_ids: columns,
        predicate: None,
        deletes: Vec::new(),
        partition: Some(file.partition().clone()),
        partition_spec: metadata.partition_spec_by_id(spec_id).cloned(),
        name_mapping: None,
        case_sensitive: true,
    };
    if task.data_file_format != DataFileFormat::Parquet {
        return Err(Error::new(
            ErrorKind::FeatureUnsupported,
            format!("data file {} is not Parquet", file.file_path()),
        ));
    }
    let mut batches = table
        .reader_builder()
        .with_data_file_concurrency_limit(1)
        .with_batch_size(MATCH_BATCH_ROWS)
        .build()
        .read(Box::pin(futures::stream::iter([Ok(task)])))?
        .stream();
    let mut matched = RoaringTreemap::new();
    let mut offset: u64 = 0;
    while let Some(batch) = batches.try_next().await? {
        for filter in filters {
            let hits = evaluate(filter, &batch).map_err(|e| {
                Error::new(
                    ErrorKind::DataInvalid,
                    format!("evaluating the filter on {}: {e}", file.file_path()),
                )
            })?;
            for (i, hit) in hits.iter().enumerate() {
                if hit == Some(true) {
                    matched.insert(offset + i as u64);
                }
            }
        }
        offset += batch.num_rows() as u64;
    }
    if offset != file.record_count() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "data file {} has {offset} rows; its manifest entry says {}",
                file.file_path(),
                file.record_count()
            ),
        ));
    }
    Ok(matched)
}

/// A row delta on one table: rows `filters` match deleted, `added` data files appended,
/// in one snapshot on `table` (read in its commit turn; `manifests` its current list).
/// `None` when it changes nothing (no row matched, nothing added).
///
/// # Errors
/// As [`plan_delete`]; iceberg's error when a delete file, manifest or manifest list
/// cannot be written.
pub(crate) async fn stage_row_delta(
    table: &Table,
    manifests: &[ManifestFile],
    filters: &[Predicate],
    added: Vec<DataFile>,
    properties: HashMap<String, String>,
    cache: &mut ManifestCache,
) -> Result<Option<(Vec<TableRequirement>, Vec<TableUpdate>, u64)>> {
    let plan = plan_delete(table, manifests, filters, cache).await?;
    if plan.deleted == 0 && added.is_empty() {
        return Ok(None);
    }
    let delete_files = write_delete_files(table, &plan.rows).await?;
    let snapshot = NewSnapshot {
        id: unique_snapshot_id(table),
        commit_uuid: uuid::Uuid::now_v7(),
        sequence_number: table.metadata().next_sequence_number(),
        written: 0,
    };
    let (snapshot, out) = write_manifests(
        table,
        manifests,
        snapshot,
        &added,
        &delete_files,
        &plan,
        cache,
    )
    .await?;
    let summary = summary(table, &added, &delete_files, &plan, properties);
    let (requirements, updates) = write_snapshot(
        table,
        cache.written(),
        snapshot.id,
        snapshot.commit_uuid,
        out,
        summary,
    )
    .await?;
    Ok(Some((requirements, updates, plan.deleted)))
}

/// The snapshot a row delta writes, and how many manifests it has written.
struct NewSnapshot {
    id: i64,
    commit_uuid: uuid::Uuid,
    sequence_number: i64,
    written: usize,
}

impl NewSnapshot {
    /// The path of its next manifest (`<commit_uuid>-m<n>.avro`, iceberg's names).
    fn next_path(&mut self, table: &Table) -> String {
        let path = format!(
            "{}/metadata/{}-m{}.avro",
            table.metadata().location(),
            self.commit_uuid,
            self.written
        );
        self.written += 1;
        path
    }
}

/// The manifests of a row delta's snapshot: the data manifest of `added` (Java puts the
/// new manifest first), a delete manifest per spec of `delete_files`, then `manifests`
/// (the current list) with `plan`'s removed data and delete files marked `DELETED`.
///
/// # Errors
/// iceberg's error when a manifest cannot be read or written.
async fn write_manifests(
    table: &Table,
    manifests: &[ManifestFile],
    mut snapshot: NewSnapshot,
    added: &[DataFile],
    delete_files: &[DataFile],
    plan: &DeletePlan,
    cache: &mut ManifestCache,
) -> Result<(NewSnapshot, Vec<ManifestFile>)> {
    let mut out: Vec<ManifestFile> = Vec::new();
    if !added.is_empty() {
        let path = snapshot.next_path(table);
        out.push(
            write_added(
                table,
                cache.written(),
                &path,
                snapshot.id,
                snapshot.sequence_number,
                added.to_vec(),
            )
            .await?,
        );
    }
    for (spec_id, files) in by_spec(delete_files, &plan.specs) {
        let path = snapshot.next_path(table);
        out.push(
            write_deletes(
                table,
                &path,
                snapshot.id,
                spec_id,
                files,
                snapshot.sequence_number,
            )
            .await?,
        );
    }
    let removed: HashSet<FileKey> = plan
        .removed
        .iter()
        .map(|(_, f)| FileKey::of(f))
        .chain(plan.removed_deletes.keys().cloned())
        .collect();
    for manifest in manifests {
        out.push(without(table, manifest, &removed, &mut snapshot, cache).await?);
    }
    Ok((snapshot, out))
}

/// `files` grouped by the spec id of the data file each names (`specs`, by path).
fn by_spec(files: &[DataFile], specs: &HashMap<String, i32>) -> Vec<(i32, Vec<DataFile>)> {
    let mut groups: Vec<(i32, Vec<DataFile>)> = Vec::new();
    for file in files {
        let spec_id = file
            .referenced_data_file()
            .and_then(|p| specs.get(&p).copied())
            .unwrap_or_default();
        match groups.iter_mut().find(|(s, _)| *s == spec_id) {
            Some((_, group)) => group.push(file.clone()),
            None => groups.push((spec_id, vec![file.clone()])),
        }
    }
    groups
}

/// Writes the delete manifest of `files` (spec `spec_id`) added by snapshot
/// `snapshot_id`, sequence numbers left to inheritance.
///
/// # Errors
/// iceberg's error when the manifest cannot be written; `DataInvalid` for an unknown spec.
async fn write_deletes(
    table: &Table,
    path: &str,
    snapshot_id: i64,
    spec_id: i32,
    files: Vec<DataFile>,
    sequence_number: i64,
) -> Result<ManifestFile> {
    let mut writer = writer_for(
        table,
        path,
        snapshot_id,
        spec_id,
        ManifestContentType::Deletes,
    )?;
    for file in files {
        writer.add_file(file, iceberg::spec::UNASSIGNED_SEQUENCE_NUMBER)?;
    }
    let mut manifest = writer.write_manifest_file().await?;
    manifest.sequence_number = sequence_number;
    manifest.min_sequence_number = sequence_number;
    Ok(manifest)
}

/// A manifest writer of `content` for `table`'s spec `spec_id` and its format version.
///
/// # Errors
/// `DataInvalid` for a spec the table does not have; iceberg's error when `path` cannot
/// be opened.
fn writer_for(
    table: &Table,
    path: &str,
    snapshot_id: i64,
    spec_id: i32,
    content: ManifestContentType,
) -> Result<iceberg::spec::ManifestWriter> {
    let metadata = table.metadata();
    let spec = metadata.partition_spec_by_id(spec_id).ok_or_else(|| {
        Error::new(
            ErrorKind::DataInvalid,
            format!(
                "table {} has no partition spec {spec_id}",
                table.identifier()
            ),
        )
    })?;
    let builder = ManifestWriterBuilder::new(
        table.file_io().new_output(path)?,
        Some(snapshot_id),
        metadata.current_schema().clone(),
        spec.as_ref().clone(),
    );
    Ok(match (metadata.format_version(), content) {
        (FormatVersion::V3, ManifestContentType::Data) => builder.build_v3_data(),
        (FormatVersion::V3, ManifestContentType::Deletes) => builder.build_v3_deletes(),
        (_, ManifestContentType::Data) => builder.build_v2_data(),
        (_, ManifestContentType::Deletes) => builder.build_v2_deletes(),
    })
}

/// `manifest` without the files named in `removed`: as it is when it holds none of
/// them; else rewritten by `snapshot` with those entries `DELETED` and the
/// others `EXISTING` (their snapshot ids and sequence numbers kept, table spec "Manifest
/// Entry Fields"), entries deleted earlier dropped.
///
/// # Errors
/// iceberg's error for a manifest that cannot be read or written.
async fn without(
    table: &Table,
    manifest: &ManifestFile,
    removed: &HashSet<FileKey>,
    snapshot: &mut NewSnapshot,
    cache: &mut ManifestCache,
) -> Result<ManifestFile> {
    let loaded = cache.manifest(table.file_io(), manifest).await?;
    let hits = loaded
        .entries()
        .iter()
        .any(|e| e.is_alive() && removed.contains(&FileKey::of(e.data_file())));
    if !hits {
        return Ok(manifest.clone());
    }
    let path = snapshot.next_path(table);
    let mut writer = writer_for(
        table,
        &path,
        snapshot.id,
        manifest.partition_spec_id,
        manifest.content,
    )?;
    for entry in loaded.entries() {
        if entry.status() == ManifestStatus::Deleted {
            continue;
        }
        let (added_by, sequence) = entry_ids(entry, manifest)?;
        let file = entry.data_file().clone();
        if removed.contains(&FileKey::of(entry.data_file())) {
            writer.add_delete_file(file, sequence, entry.file_sequence_number)?;
        } else {
            writer.add_existing_file(file, added_by, sequence, entry.file_sequence_number)?;
        }
    }
    writer.write_manifest_file().await
}

/// The summary of a row delta: `properties`, iceberg's collector's `added-*` /
/// `deleted-*` / `removed-*` figures for the files added and removed, `added-dvs` /
/// `removed-dvs` (Java's `SnapshotSummary`), and every `total-*` carried from the
/// parent with them. Operation `delete` when nothing is added, else `overwrite`.
fn summary(
    table: &Table,
    added: &[DataFile],
    delete_files: &[DataFile],
    plan: &DeletePlan,
    properties: HashMap<String, String>,
) -> Summary {
    let metadata = table.metadata();
    let mut collector = iceberg::spec::SnapshotSummaryCollector::default();
    let schema = metadata.current_schema().clone();
    let spec_of = |id: i32| {
        metadata
            .partition_spec_by_id(id)
            .cloned()
            .unwrap_or_else(|| metadata.default_partition_spec().clone())
    };
    for file in added {
        collector.add_file(
            file,
            schema.clone(),
            metadata.default_partition_spec().clone(),
        );
    }
    for file in delete_files {
        let spec = file
            .referenced_data_file()
            .and_then(|p| plan.specs.get(&p).copied())
            .unwrap_or_default();
        collector.add_file(file, schema.clone(), spec_of(spec));
    }
    for (spec, file) in plan.removed.iter().chain(plan.removed_deletes.values()) {
        collector.remove_file(file, schema.clone(), spec_of(*spec));
    }
    let mut summary = properties;
    summary.extend(collector.build());
    let dvs = delete_files
        .iter()
        .filter(|f| f.file_format() == DataFileFormat::Puffin)
        .count();
    if dvs > 0 {
        summary.insert("added-dvs".into(), dvs.to_string());
    }
    let removed_dvs = plan
        .removed_deletes
        .values()
        .filter(|(_, f)| f.file_format() == DataFileFormat::Puffin)
        .count();
    if removed_dvs > 0 {
        summary.insert("removed-dvs".into(), removed_dvs.to_string());
    }
    carry_totals(table, &mut summary);
    Summary {
        operation: if added.is_empty() {
            Operation::Delete
        } else {
            Operation::Overwrite
        },
        additional_properties: summary,
    }
}

/// The commit of a `DELETE` on one table (module docs): its value is the rows deleted.
/// A delete that matches no live row commits nothing.
#[derive(Debug)]
pub struct DeleteRows {
    written: Arc<WrittenManifests>,
    filters: Vec<Predicate>,
}

impl DeleteRows {
    /// The delete of the rows any of `filters` matches, through the manifests `catalog`
    /// wrote.
    pub fn new(catalog: &RedbCatalog, filters: Vec<Predicate>) -> Self {
        Self {
            written: catalog.written_manifests().clone(),
            filters,
        }
    }
}

#[async_trait]
impl Stage for DeleteRows {
    type Out = u64;
    type Error = Error;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<u64>>> {
        let [table] = current else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a DELETE commits one table",
            ));
        };
        let staged = stage_on(
            self.written.clone(),
            table.clone(),
            self.filters.clone(),
            Vec::new(),
            HashMap::new(),
        )
        .await?;
        Ok(Some(match staged {
            None => Staged::new(vec![TableChange::default()], 0),
            Some((requirements, updates, deleted)) => {
                Staged::new(vec![TableChange::new(requirements, updates)], deleted)
            }
        }))
    }
}

/// [`stage_row_delta`] on `table`'s current snapshot, on the blocking pool (iceberg's
/// local storage blocks and fsyncs inside its futures).
///
/// # Errors
/// As [`stage_row_delta`].
pub(crate) async fn stage_on(
    written: Arc<WrittenManifests>,
    table: Table,
    filters: Vec<Predicate>,
    added: Vec<DataFile>,
    properties: HashMap<String, String>,
) -> Result<Option<(Vec<TableRequirement>, Vec<TableUpdate>, u64)>> {
    run_blocking_io(async move {
        let mut cache = ManifestCache::new(written);
        let manifests = cache.current(&table).await?;
        stage_row_delta(&table, &manifests, &filters, added, properties, &mut cache).await
    })
    .await
}

/// The rows of `table`'s current snapshot any of `filters` matches and no delete hides
/// yet: what a `DELETE` would delete if it committed now (a transaction's `DELETE`
/// reports it; its commit plans again).
///
/// # Errors
/// As [`plan_delete`].
pub(crate) async fn count_matching(
    written: Arc<WrittenManifests>,
    table: Table,
    filters: Vec<Predicate>,
) -> Result<u64> {
    run_blocking_io(async move {
        let mut cache = ManifestCache::new(written);
        let manifests = cache.current(&table).await?;
        Ok(plan_delete(&table, &manifests, &filters, &mut cache)
            .await?
            .deleted)
    })
    .await
}
