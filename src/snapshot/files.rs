//! The files every snapshot producer writes last: the manifest of the data files a
//! snapshot adds, and the manifest list that makes a snapshot (v2, or v3 assigning row
//! ids), with the commit that makes it current. Shared by the append, compaction's
//! `replace`, manifest merging and the row delta.

use std::collections::HashMap;
use std::sync::Arc;

use iceberg::spec::{
    DataFile, FormatVersion, MAIN_BRANCH, ManifestFile, ManifestListWriter, ManifestStatus,
    Snapshot, SnapshotReference, SnapshotRetention, Summary, UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::table::Table;
use iceberg::{Result, TableRequirement, TableUpdate};

use super::manifests::{as_listed, as_read, entry_as_read, manifest_writer, now_ms};
use crate::catalog::manifest_cache::WrittenManifests;

/// Writes the manifest of `data_files`, added by snapshot `snapshot_id` (sequence number
/// `sequence_number`) at `path`, and remembers it in `written` as a reader sees it;
/// returns it as the
/// manifest list lists it. Shared by the append (`<commit_uuid>-m0.avro`, iceberg's
/// name) and compaction's outputs.
///
/// # Errors
/// iceberg's error when the manifest cannot be written.
pub(crate) async fn write_added(
    table: &Table,
    written: &WrittenManifests,
    path: &str,
    snapshot_id: i64,
    sequence_number: i64,
    data_files: Vec<DataFile>,
) -> Result<ManifestFile> {
    let mut writer = manifest_writer(table, path, snapshot_id)?;
    let mut entries = Vec::with_capacity(data_files.len());
    for data_file in data_files {
        // Sequence numbers left to inheritance (a negative number is "unassigned").
        writer.add_file(data_file.clone(), UNASSIGNED_SEQUENCE_NUMBER)?;
        // As a reader sees it: snapshot id and sequence numbers inherited.
        entries.push(entry_as_read(
            ManifestStatus::Added,
            snapshot_id,
            sequence_number,
            Some(sequence_number),
            data_file,
        ));
    }
    let mut added = writer.write_manifest_file().await?;
    written.remember_manifest(path, Arc::new(as_read(table, entries)));
    // As the manifest list writer assigns them (table spec, "Sequence Number Inheritance").
    added.sequence_number = sequence_number;
    added.min_sequence_number = sequence_number;
    Ok(added)
}

/// Writes the manifest list of snapshot `snapshot_id` — child of `table`'s current
/// snapshot (if any), listing `manifests`, with `summary` (a v2 list, or on a v3 table a
/// v3 list that assigns row ids) — remembers it in `written`
/// ([`WrittenManifests::remember_list`]), and returns the commit that makes the snapshot current, as
/// iceberg's snapshot producer commits it: the table's uuid and `main` still at the
/// parent as requirements; `AddSnapshot` and `SetSnapshotRef main` as updates. Shared by
/// the append and maintenance's `replace` snapshots.
///
/// # Errors
/// iceberg's error when the manifest list cannot be written.
pub(crate) async fn write_snapshot(
    table: &Table,
    written: &WrittenManifests,
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    manifests: Vec<ManifestFile>,
    summary: Summary,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let metadata = table.metadata();
    let sequence_number = metadata.next_sequence_number();
    let parent_id = metadata.current_snapshot_id();
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_uuid}.avro",
        metadata.location()
    );
    let output = table.file_io().new_output(&list_path)?.writer().await?;
    // v3 assigns row ids: the list writer gives each data manifest without a first row
    // id the next ones (table spec, "Row Lineage").
    let first_row_id =
        (metadata.format_version() == FormatVersion::V3).then(|| metadata.next_row_id());
    let mut list = match first_row_id {
        Some(first) => {
            ManifestListWriter::v3(output, snapshot_id, parent_id, sequence_number, Some(first))
        }
        None => ManifestListWriter::v2(output, snapshot_id, parent_id, sequence_number),
    };
    list.add_manifests(manifests.iter().cloned())?;
    let next_row_id = list.next_row_id();
    list.close().await?;
    written.remember_list(
        &list_path,
        as_listed(manifests, snapshot_id, sequence_number),
    );
    let builder = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(parent_id)
        .with_sequence_number(sequence_number)
        .with_summary(summary)
        .with_schema_id(metadata.current_schema_id())
        .with_timestamp_ms(now_ms().max(metadata.last_updated_ms()));
    let snapshot = match (first_row_id, next_row_id) {
        (Some(first), Some(next)) => builder.with_row_range(first, next - first).build(),
        _ => builder.build(),
    };
    Ok((
        vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_string(),
                snapshot_id: parent_id,
            },
        ],
        vec![
            TableUpdate::AddSnapshot { snapshot },
            TableUpdate::SetSnapshotRef {
                ref_name: MAIN_BRANCH.to_string(),
                reference: SnapshotReference::new(
                    snapshot_id,
                    SnapshotRetention::branch(None, None, None),
                ),
            },
        ],
    ))
}

/// Each `total-*` figure, the `added-*` figure that raises it and the `deleted-*` /
/// `removed-*` one that lowers it.
const TOTALS: &[(&str, &str, &str)] = &[
    ("total-data-files", "added-data-files", "deleted-data-files"),
    (
        "total-delete-files",
        "added-delete-files",
        "removed-delete-files",
    ),
    ("total-records", "added-records", "deleted-records"),
    ("total-files-size", "added-files-size", "removed-files-size"),
    (
        "total-position-deletes",
        "added-position-deletes",
        "removed-position-deletes",
    ),
    (
        "total-equality-deletes",
        "added-equality-deletes",
        "removed-equality-deletes",
    ),
];

/// Sets every `total-*` of `summary` to the total of `table`'s current snapshot (0 without
/// one) plus what the new snapshot adds, minus what it removes (Java's
/// `SnapshotProducer.updateTotal`, the spec's "Snapshot Summary": a parent without the
/// total, or with one that is not a count, leaves it out). Every producer's summary.
pub(crate) fn carry_totals(table: &Table, summary: &mut HashMap<String, String>) {
    let previous = table
        .metadata()
        .current_snapshot()
        .map(|s| &s.summary().additional_properties);
    let figure = |summary: &HashMap<String, String>, key: &str| {
        summary.get(key).map_or(Some(0), |v| v.parse::<i64>().ok())
    };
    for (total, added, removed) in TOTALS {
        let before = match previous.map(|p| p.get(*total)) {
            None => Some(0),
            Some(value) => value.and_then(|v| v.parse::<i64>().ok()),
        };
        if let (Some(before), Some(add), Some(remove)) =
            (before, figure(summary, added), figure(summary, removed))
        {
            summary.insert(
                total.to_string(),
                (before + add - remove).max(0).to_string(),
            );
        }
    }
}
