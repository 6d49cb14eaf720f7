//! Compaction's commit: a `replace` snapshot that swaps data files for the files their
//! rows were rewritten into (`maintenance/compact.rs` rewrites them), the totals
//! unchanged, as Java's `RewriteFiles`.
//!
//! Built on the table as it stands under its commit turn: every input must still be
//! live, and no live delete file may apply to one ([`super::deletes`]: committed, the
//! deleted rows would come back under the new files' paths) — else the stage gives way
//! and the rewritten files are leftovers for cleanup. So a compaction never loses,
//! doubles or brings back a row, whatever commits run beside it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use async_trait::async_trait;
use iceberg::spec::{
    DataFile, Manifest, ManifestContentType, ManifestFile, ManifestStatus, Snapshot,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};

use super::deletes::DeleteIndex;
use super::files::write_added;
use super::manifests::{as_read, entry_as_read, entry_ids, manifest_writer, unique_snapshot_id};
use super::rewrite_manifests::{carried_totals, replace_snapshot};
use crate::catalog::manifest_cache::ManifestCache;
use crate::catalog::{Stage, Staged, TableChange};

/// Data files rewritten into new ones (compaction's runs), not yet committed.
#[derive(Debug)]
pub struct Rewrite {
    /// The files replaced.
    pub inputs: Vec<DataFile>,
    /// The files written in their place, one per run.
    pub outputs: Vec<DataFile>,
}

/// A written compaction commit.
#[derive(Debug)]
pub(crate) struct Compaction {
    pub(crate) requirements: Vec<TableRequirement>,
    pub(crate) updates: Vec<TableUpdate>,
    /// Files replaced and their bytes.
    pub(crate) files: usize,
    pub(crate) bytes: u64,
}

/// Compaction's commit of `rewrite` (module docs), reading manifests through `cache`.
/// Its value: the data files replaced and their bytes.
#[derive(Debug)]
pub struct Replace<'a> {
    rewrite: &'a Rewrite,
    cache: &'a mut ManifestCache,
}

impl<'a> Replace<'a> {
    /// The commit of `rewrite`.
    pub fn new(rewrite: &'a Rewrite, cache: &'a mut ManifestCache) -> Self {
        Self { rewrite, cache }
    }
}

#[async_trait]
impl Stage for Replace<'_> {
    type Out = (usize, u64);
    type Error = Error;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<(usize, u64)>>> {
        let [table] = current else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a compaction commits one table",
            ));
        };
        let manifests = self.cache.current(table).await?;
        let plan = commit_plan(table, &manifests, self.rewrite, self.cache).await?;
        Ok(plan.map(|p| {
            Staged::new(
                vec![TableChange::new(p.requirements, p.updates)],
                (p.files, p.bytes),
            )
        }))
    }
}

/// Builds the `replace` commit of `rewrite` on `table` (the current table, read under
/// the commit turn): `None` when an input is no longer live, or a delete file committed
/// since the rewrite may apply to one (the attempt is dropped: committed, it would bring
/// the deleted rows back).
///
/// # Errors
/// iceberg's error for a manifest that cannot be read or written.
async fn commit_plan(
    table: &Table,
    manifests: &[ManifestFile],
    rewrite: &Rewrite,
    cache: &mut ManifestCache,
) -> Result<Option<Compaction>> {
    let Some(current) = table.metadata().current_snapshot() else {
        return Ok(None);
    };
    let deletes = DeleteIndex::of_table(table, manifests, cache).await?;
    let snapshot_id = unique_snapshot_id(table);
    let commit_uuid = uuid::Uuid::now_v7();
    let written = Replacing {
        snapshot_id,
        commit_uuid,
        deletes: &deletes,
    };
    let Some(mut out) = without_inputs(table, manifests, rewrite, &written, cache).await? else {
        return Ok(None);
    };
    let added_path = written.manifest_path(table, out.len());
    let sequence_number = table.metadata().next_sequence_number();
    let added = write_added(
        table,
        cache.written(),
        &added_path,
        snapshot_id,
        sequence_number,
        rewrite.outputs.clone(),
    )
    .await?;
    out.insert(0, added);
    let properties = summary(current, rewrite);
    let (requirements, updates) = replace_snapshot(
        table,
        cache.written(),
        snapshot_id,
        commit_uuid,
        out,
        properties,
    )
    .await?;
    Ok(Some(Compaction {
        requirements,
        updates,
        files: rewrite.inputs.len(),
        bytes: rewrite.inputs.iter().map(|f| f.file_size_in_bytes()).sum(),
    }))
}

/// The snapshot a compaction commit writes, and the delete files of the table it is
/// built on.
struct Replacing<'a> {
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    deletes: &'a DeleteIndex,
}

impl Replacing<'_> {
    /// Where the commit writes its `n`th manifest (0-based) in `table`'s metadata.
    fn manifest_path(&self, table: &Table, n: usize) -> String {
        format!(
            "{}/metadata/{}-m{n}.avro",
            table.metadata().location(),
            self.commit_uuid
        )
    }
}

/// `manifests` with `rewrite`'s inputs marked `DELETED`: each data manifest holding an
/// input is rewritten (other entries carried as `EXISTING`, deleted ones dropped), the
/// rest kept as they are. `None` when an input is no longer live, or a live delete file
/// may apply to one (the attempt is dropped).
///
/// # Errors
/// iceberg's error for a manifest that cannot be read or written; `DataInvalid` for an
/// entry without snapshot id or sequence number.
async fn without_inputs(
    table: &Table,
    manifests: &[ManifestFile],
    rewrite: &Rewrite,
    replacing: &Replacing<'_>,
    cache: &mut ManifestCache,
) -> Result<Option<Vec<ManifestFile>>> {
    let inputs: HashSet<&str> = rewrite.inputs.iter().map(|f| f.file_path()).collect();
    let mut out = Vec::with_capacity(manifests.len() + 1);
    let (mut found, mut written) = (0usize, 0usize);
    for manifest in manifests {
        if manifest.content != ManifestContentType::Data {
            out.push(manifest.clone());
            continue;
        }
        let loaded = cache.manifest(table.file_io(), manifest).await?;
        let Some(hits) = live_inputs(&loaded, manifest, &inputs, replacing.deletes)? else {
            return Ok(None);
        };
        if hits == 0 {
            out.push(manifest.clone());
            continue;
        }
        found += hits;
        let path = replacing.manifest_path(table, written);
        written += 1;
        let (file, read) = mark_inputs_deleted(
            table,
            manifest,
            &loaded,
            &inputs,
            replacing.snapshot_id,
            &path,
        )
        .await?;
        out.push(file);
        cache.written().remember_manifest(&path, Arc::new(read));
        // Replaced by the one just written (a merged manifest can hold every live file
        // of the table: one copy kept is enough).
        cache
            .written()
            .forget_manifests([manifest.manifest_path.as_str()]);
    }
    Ok((found == inputs.len()).then_some(out))
}

/// How many of `inputs` `loaded` (the content of `manifest`) lists as live; `None` when
/// a delete file of `deletes` may apply to one of them.
///
/// # Errors
/// `DataInvalid` for an input's entry without snapshot id or sequence number.
fn live_inputs(
    loaded: &Manifest,
    manifest: &ManifestFile,
    inputs: &HashSet<&str>,
    deletes: &DeleteIndex,
) -> Result<Option<usize>> {
    let mut hits = 0;
    for entry in loaded.entries() {
        if !entry.is_alive() || !inputs.contains(entry.file_path()) {
            continue;
        }
        let (_, sequence) = entry_ids(entry, manifest)?;
        if deletes.may_apply(manifest.partition_spec_id, sequence, entry.data_file()) {
            return Ok(None);
        }
        hits += 1;
    }
    Ok(Some(hits))
}

/// Writes `loaded` (the content of `manifest`) again at `path` for the snapshot
/// `snapshot_id`: `inputs` as `DELETED` by it, every other live entry `EXISTING`, the
/// entries already deleted dropped. Returns the manifest written and its content as a
/// reader sees it.
///
/// # Errors
/// iceberg's error writing the manifest; `DataInvalid` for an entry without snapshot id
/// or sequence number.
async fn mark_inputs_deleted(
    table: &Table,
    manifest: &ManifestFile,
    loaded: &Manifest,
    inputs: &HashSet<&str>,
    snapshot_id: i64,
    path: &str,
) -> Result<(ManifestFile, Manifest)> {
    let mut writer = manifest_writer(table, path, snapshot_id)?;
    let mut entries = Vec::with_capacity(loaded.entries().len());
    for entry in loaded.entries() {
        if entry.status() == ManifestStatus::Deleted {
            continue;
        }
        let (added_by, sequence) = entry_ids(entry, manifest)?;
        let file = entry.data_file().clone();
        // Written, and as a reader sees it: every id explicit, nothing inherited.
        let (status, by) = if inputs.contains(entry.file_path()) {
            writer.add_delete_file(file.clone(), sequence, entry.file_sequence_number)?;
            (ManifestStatus::Deleted, snapshot_id)
        } else {
            writer.add_existing_file(
                file.clone(),
                added_by,
                sequence,
                entry.file_sequence_number,
            )?;
            (ManifestStatus::Existing, added_by)
        };
        entries.push(entry_as_read(
            status,
            by,
            sequence,
            entry.file_sequence_number,
            file,
        ));
    }
    let written = writer.write_manifest_file().await?;
    Ok((written, as_read(table, entries)))
}

/// The summary of `rewrite`'s `replace` snapshot on `current`: the totals carried over
/// with the data files and bytes replaced, and the `added-*` / `deleted-*` figures
/// (Java's `RewriteFiles` summary).
fn summary(current: &Snapshot, rewrite: &Rewrite) -> HashMap<String, String> {
    let removed_bytes: u64 = rewrite.inputs.iter().map(|f| f.file_size_in_bytes()).sum();
    let rows: u64 = rewrite.inputs.iter().map(|f| f.record_count()).sum();
    let added_bytes: u64 = rewrite.outputs.iter().map(|f| f.file_size_in_bytes()).sum();
    let added_rows: u64 = rewrite.outputs.iter().map(|f| f.record_count()).sum();
    let previous = &current.summary().additional_properties;
    let total = |key: &str| previous.get(key).and_then(|v| v.parse::<i64>().ok());
    let mut properties = carried_totals(current);
    if let Some(files) = total("total-data-files") {
        properties.insert(
            "total-data-files".into(),
            (files - rewrite.inputs.len() as i64 + rewrite.outputs.len() as i64).to_string(),
        );
    }
    if let Some(size) = total("total-files-size") {
        properties.insert(
            "total-files-size".into(),
            (size - removed_bytes as i64 + added_bytes as i64).to_string(),
        );
    }
    properties.insert("added-data-files".into(), rewrite.outputs.len().to_string());
    properties.insert(
        "deleted-data-files".into(),
        rewrite.inputs.len().to_string(),
    );
    properties.insert("added-records".into(), added_rows.to_string());
    properties.insert("deleted-records".into(), rows.to_string());
    properties.insert("added-files-size".into(), added_bytes.to_string());
    properties.insert("removed-files-size".into(), removed_bytes.to_string());
    properties
}
