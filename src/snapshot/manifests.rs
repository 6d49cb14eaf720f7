//! Manifest merging, Iceberg Java's rules (`ManifestMergeManager`, the table properties
//! of its merge append), shared by the append (`write::append`, Java's inline merge)
//! and table maintenance's background `replace` (`maintenance::merge`).
//!
//! `commit.manifest-merge.enabled` (default `true`) turns it on. Once a manifest list
//! holds at least `commit.manifest.min-count-to-merge` data manifests of the default
//! partition spec (skade's default [`MIN_COUNT_TO_MERGE_DEFAULT`], 16; Java's is 100),
//! they are packed in list order into bins of at most `commit.manifest.target-size-bytes`
//! (default 8 MiB) of manifest file, and every bin of two or more is rewritten as one
//! manifest through iceberg's `ManifestWriter`. Live entries are carried as `EXISTING`
//! with their original snapshot id and sequence numbers (the spec's rule for rewritten
//! entries), deleted entries are dropped, delete manifests and other specs' manifests
//! are kept as they are.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use iceberg::spec::{
    DataFile, FormatVersion, Manifest, ManifestContentType, ManifestEntry, ManifestFile,
    ManifestMetadata, ManifestStatus, ManifestWriter, ManifestWriterBuilder,
    UNASSIGNED_SEQUENCE_NUMBER,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};

use crate::catalog::manifest_cache::ManifestCache;

/// Table property: merge manifests (Iceberg's; default `true`).
pub const MERGE_ENABLED_PROPERTY: &str = "commit.manifest-merge.enabled";
/// Table property: data manifests the current snapshot must list before a merge
/// (Iceberg's; default [`MIN_COUNT_TO_MERGE_DEFAULT`]).
pub const MIN_COUNT_TO_MERGE_PROPERTY: &str = "commit.manifest.min-count-to-merge";
/// skade's default of [`MIN_COUNT_TO_MERGE_PROPERTY`]: 16 (Iceberg Java's is 100). A
/// streaming writer appends one manifest per commit, and every reader plans by opening
/// each manifest of the list, so skade keeps the list short: at one commit per second
/// Java's default lets it grow to 100 manifests between merges.
pub const MIN_COUNT_TO_MERGE_DEFAULT: usize = 16;
/// Table property: bytes of manifest file one merged manifest may hold (Iceberg's;
/// default [`TARGET_SIZE_BYTES_DEFAULT`]).
pub const TARGET_SIZE_BYTES_PROPERTY: &str = "commit.manifest.target-size-bytes";
/// Iceberg's default of [`TARGET_SIZE_BYTES_PROPERTY`]: 8 MiB.
pub const TARGET_SIZE_BYTES_DEFAULT: u64 = 8 << 20;

/// A manifest list after a merge ([`merge_manifests`]).
#[derive(Debug)]
pub(crate) struct Merged {
    /// The new list, in order: kept manifests and merged ones in their bins' places.
    pub(crate) manifests: Vec<ManifestFile>,
    /// Manifests replaced by merged ones.
    pub(crate) replaced: usize,
    /// Merged manifests written.
    pub(crate) written: usize,
    /// Bytes of the manifests replaced.
    pub(crate) replaced_bytes: u64,
    /// Live entries the merged manifests carry.
    pub(crate) entries: usize,
}

/// Applies the merge rules of `table` (module docs) to `manifests`, the manifest list
/// of a snapshot `snapshot_id` being built (a background `replace`, or an append that
/// merges inline as Java's merge append does): writes a merged manifest for every bin of
/// two or more (`<commit_uuid>-m<n>.avro`, n counting from `first_name`: iceberg's
/// naming) and returns the new list — or `None` when no merge is due. Nothing is
/// committed.
///
/// # Errors
/// iceberg's error for a manifest that cannot be read or written.
pub(crate) async fn merge_manifests(
    table: &Table,
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    first_name: usize,
    manifests: &[ManifestFile],
    cache: &mut ManifestCache,
) -> Result<Option<Merged>> {
    let metadata = table.metadata();
    let rules = MergeRules::of(metadata.properties());
    let spec_id = metadata.default_partition_spec_id();
    let mergeable =
        |m: &ManifestFile| m.content == ManifestContentType::Data && m.partition_spec_id == spec_id;
    if !rules.enabled || manifests.iter().filter(|m| mergeable(m)).count() < rules.min_count {
        return Ok(None);
    }
    let slots = bin_manifests(manifests, mergeable, rules.target_bytes);
    if !slots
        .iter()
        .any(|s| matches!(s, Slot::Bin(bin) if bin.len() > 1))
    {
        return Ok(None);
    }
    let mut merged = Merged {
        manifests: Vec::with_capacity(slots.len()),
        replaced: 0,
        written: 0,
        replaced_bytes: 0,
        entries: 0,
    };
    for slot in slots {
        let bin = match slot {
            Slot::Keep(manifest) => {
                merged.manifests.push(manifest);
                continue;
            }
            Slot::Bin(mut bin) if bin.len() == 1 => {
                merged.manifests.extend(bin.pop());
                continue;
            }
            Slot::Bin(bin) => bin,
        };
        let path = format!(
            "{}/metadata/{commit_uuid}-m{}.avro",
            metadata.location(),
            first_name + merged.written
        );
        let (manifest, live) = write_merged(table, snapshot_id, &path, &bin, cache).await?;
        // Replaced by the merged one, which holds their live entries: keeping both would
        // hold a busy table's file list once per merge
        // (`catalog::manifest_cache::RECENT_MANIFEST_BYTES`).
        cache
            .written()
            .forget_manifests(bin.iter().map(|m| m.manifest_path.as_str()));
        merged.entries += live;
        merged.replaced_bytes += bin
            .iter()
            .map(|m| u64::try_from(m.manifest_length).unwrap_or(0))
            .sum::<u64>();
        merged.manifests.push(manifest);
        merged.replaced += bin.len();
        merged.written += 1;
    }
    Ok(Some(merged))
}

/// The merge properties of a table (module docs), with Iceberg's defaults.
struct MergeRules {
    enabled: bool,
    /// Data manifests of the default spec needed before a merge (at least 2).
    min_count: usize,
    /// Bytes of manifests one merged manifest gathers at most.
    target_bytes: u64,
}

impl MergeRules {
    fn of(props: &HashMap<String, String>) -> Self {
        Self {
            enabled: props
                .get(MERGE_ENABLED_PROPERTY)
                .is_none_or(|v| !v.trim().eq_ignore_ascii_case("false")),
            min_count: props
                .get(MIN_COUNT_TO_MERGE_PROPERTY)
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(MIN_COUNT_TO_MERGE_DEFAULT)
                .max(2),
            target_bytes: props
                .get(TARGET_SIZE_BYTES_PROPERTY)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(TARGET_SIZE_BYTES_DEFAULT),
        }
    }
}

/// One place in the new manifest list: a manifest kept as it is, or a bin of manifests
/// to merge into one.
enum Slot {
    Keep(ManifestFile),
    Bin(Vec<ManifestFile>),
}

/// Bins `manifests` in list order: a `mergeable` manifest joins the open bin while the
/// bin stays within `target_bytes`; any other manifest is kept in place.
fn bin_manifests(
    manifests: &[ManifestFile],
    mergeable: impl Fn(&ManifestFile) -> bool,
    target_bytes: u64,
) -> Vec<Slot> {
    let mut slots: Vec<Slot> = Vec::new();
    let mut open: Option<(usize, u64)> = None; // (slot index, bytes)
    for manifest in manifests {
        if !mergeable(manifest) {
            slots.push(Slot::Keep(manifest.clone()));
            continue;
        }
        let len = u64::try_from(manifest.manifest_length).unwrap_or(0);
        match open {
            Some((at, bytes)) if bytes + len <= target_bytes => {
                if let Slot::Bin(bin) = &mut slots[at] {
                    bin.push(manifest.clone());
                }
                open = Some((at, bytes + len));
            }
            _ => {
                slots.push(Slot::Bin(vec![manifest.clone()]));
                open = Some((slots.len() - 1, len));
            }
        }
    }
    slots
}

/// Writes the live entries of `bin`'s manifests as one manifest at `path` (entries
/// `EXISTING`, keeping their snapshot and sequence numbers); returns it and its entry
/// count.
///
/// # Errors
/// iceberg's error for a manifest that cannot be read or written, or a live entry
/// without snapshot id or sequence number (`DataInvalid`).
async fn write_merged(
    table: &Table,
    snapshot_id: i64,
    path: &str,
    bin: &[ManifestFile],
    cache: &mut ManifestCache,
) -> Result<(ManifestFile, usize)> {
    let file_io = table.file_io();
    let mut writer = manifest_writer(table, path, snapshot_id)?;
    let mut entries = Vec::new();
    for manifest in bin {
        for entry in cache.manifest(file_io, manifest).await?.entries() {
            if !entry.is_alive() {
                continue;
            }
            let (added_by, sequence) = entry_ids(entry, manifest)?;
            writer.add_existing_file(
                entry.data_file().clone(),
                added_by,
                sequence,
                entry.file_sequence_number,
            )?;
            entries.push(entry_as_read(
                ManifestStatus::Existing,
                added_by,
                sequence,
                entry.file_sequence_number,
                entry.data_file().clone(),
            ));
        }
    }
    let written = writer.write_manifest_file().await?;
    let live = entries.len();
    cache
        .written()
        .remember_manifest(path, Arc::new(as_read(table, entries)));
    Ok((written, live))
}

/// A manifest entry as a reader of the written file sees it: every id explicit (what
/// the writer leaves to inheritance, the reader fills from the manifest list's values,
/// table spec "Sequence Number Inheritance"), for [`as_read`].
pub(crate) fn entry_as_read(
    status: ManifestStatus,
    snapshot_id: i64,
    sequence_number: i64,
    file_sequence_number: Option<i64>,
    data_file: DataFile,
) -> ManifestEntry {
    ManifestEntry::builder()
        .status(status)
        .snapshot_id(snapshot_id)
        .sequence_number(sequence_number)
        .file_sequence_number_opt(file_sequence_number)
        .data_file(data_file)
        .build()
}

/// The data manifest of `entries` written for `table` (by [`manifest_writer`]), as a
/// reader of the file sees it (what [`ManifestFile::load_manifest`] returns), for
/// [`crate::catalog::manifest_cache::WrittenManifests::remember_manifest`].
pub(crate) fn as_read(table: &Table, entries: Vec<ManifestEntry>) -> Manifest {
    let metadata = table.metadata();
    Manifest::new(
        ManifestMetadata::builder()
            .schema(metadata.current_schema().clone())
            .schema_id(metadata.current_schema_id())
            .partition_spec(metadata.default_partition_spec().as_ref().clone())
            .format_version(metadata.format_version())
            .content(ManifestContentType::Data)
            .build(),
        entries,
    )
}

/// A positive snapshot id no snapshot of `table` has (iceberg's own rule: two halves of
/// a random uuid xor-ed).
pub(crate) fn unique_snapshot_id(table: &Table) -> i64 {
    loop {
        let (a, b) = uuid::Uuid::new_v4().as_u64_pair();
        let id = ((a ^ b) >> 1) as i64;
        if table.metadata().snapshot_by_id(id).is_none() {
            return id;
        }
    }
}

/// Milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// `manifests` as the manifest list of snapshot `snapshot_id` (sequence number
/// `sequence_number`) lists them once written: the manifests this snapshot added get
/// its sequence number (what iceberg's `ManifestListWriter` assigns, table spec
/// "Sequence Number Inheritance"), for [`crate::catalog::manifest_cache::WrittenManifests::remember_list`].
pub(crate) fn as_listed(
    manifests: Vec<ManifestFile>,
    snapshot_id: i64,
    sequence_number: i64,
) -> Arc<[ManifestFile]> {
    manifests
        .into_iter()
        .map(|mut m| {
            if m.added_snapshot_id == snapshot_id {
                if m.sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
                    m.sequence_number = sequence_number;
                }
                if m.min_sequence_number == UNASSIGNED_SEQUENCE_NUMBER {
                    m.min_sequence_number = sequence_number;
                }
            }
            m
        })
        .collect()
}

/// A data manifest writer at `path` for snapshot `snapshot_id`, with `table`'s current
/// schema and default partition spec (every manifest skade writes: an append's, a
/// merge's, a compaction's).
///
/// # Errors
/// iceberg's error when `path` cannot be opened for writing.
pub(crate) fn manifest_writer(
    table: &Table,
    path: &str,
    snapshot_id: i64,
) -> Result<ManifestWriter> {
    let metadata = table.metadata();
    let builder = ManifestWriterBuilder::new(
        table.file_io().new_output(path)?,
        Some(snapshot_id),
        metadata.current_schema().clone(),
        metadata.default_partition_spec().as_ref().clone(),
    );
    // v3 manifests carry row lineage fields.
    Ok(match metadata.format_version() {
        FormatVersion::V3 => builder.build_v3_data(),
        _ => builder.build_v2_data(),
    })
}

/// The snapshot that added `entry` (of `manifest`) and its data sequence number, which a
/// rewritten entry keeps (table spec, "Manifest Entry Fields").
///
/// # Errors
/// `DataInvalid` for an entry read without either (a reader inherits both).
pub(crate) fn entry_ids(entry: &ManifestEntry, manifest: &ManifestFile) -> Result<(i64, i64)> {
    match (entry.snapshot_id(), entry.sequence_number()) {
        (Some(added_by), Some(sequence)) => Ok((added_by, sequence)),
        _ => Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "manifest {} has an entry without snapshot id or sequence number",
                manifest.manifest_path
            ),
        )),
    }
}
