//! Manifest merging: a `replace` snapshot whose manifest list carries the same live data
//! files in fewer manifests.
//!
//! Every fast append adds one manifest to the current snapshot's manifest list, and the
//! next append reads and rewrites that whole list, so without merging a commit's cost
//! and a reader's planning grow with the table's age. The rules are Iceberg Java's
//! (`ManifestMergeManager`, the table properties of its merge append):
//! `commit.manifest-merge.enabled` (default `true`) turns it on; once the current
//! snapshot lists at least `commit.manifest.min-count-to-merge` (default `100`) data
//! manifests of the default partition spec, they are packed in list order into bins of
//! at most `commit.manifest.target-size-bytes` (default 8 MiB) of manifest file, and
//! every bin of two or more is rewritten as one manifest through iceberg's
//! `ManifestWriter`. Live entries are carried as `EXISTING` with their original snapshot
//! id and sequence numbers (the spec's rule for rewritten entries), deleted entries are
//! dropped, delete manifests and other specs' manifests are kept as they are. Instead of
//! Java's inline merge in the append, skade runs it in the background maintenance pass
//! as its own snapshot (operation `replace`, like Java's `RewriteManifests`), so the
//! append path stays as it is and a merge never delays an ack.

use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

use iceberg::spec::{
    FormatVersion, MAIN_BRANCH, ManifestContentType, ManifestFile, ManifestListWriter,
    ManifestWriterBuilder, Operation, Snapshot, SnapshotReference, SnapshotRetention, Summary,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};

/// Table property: merge manifests (Iceberg's; default `true`).
pub const MERGE_ENABLED_PROPERTY: &str = "commit.manifest-merge.enabled";
/// Table property: data manifests the current snapshot must list before a merge
/// (Iceberg's; default [`MIN_COUNT_TO_MERGE_DEFAULT`]).
pub const MIN_COUNT_TO_MERGE_PROPERTY: &str = "commit.manifest.min-count-to-merge";
/// Iceberg's default of [`MIN_COUNT_TO_MERGE_PROPERTY`].
pub const MIN_COUNT_TO_MERGE_DEFAULT: usize = 100;
/// Table property: bytes of manifest file one merged manifest may hold (Iceberg's;
/// default [`TARGET_SIZE_BYTES_DEFAULT`]).
pub const TARGET_SIZE_BYTES_PROPERTY: &str = "commit.manifest.target-size-bytes";
/// Iceberg's default of [`TARGET_SIZE_BYTES_PROPERTY`]: 8 MiB.
pub const TARGET_SIZE_BYTES_DEFAULT: u64 = 8 << 20;

/// A written merge, ready to commit.
#[derive(Debug)]
pub(crate) struct Merge {
    /// The table's uuid, and `main` still at the snapshot the merge was built on.
    pub(crate) requirements: Vec<TableRequirement>,
    /// `AddSnapshot` (operation `replace`) and `SetSnapshotRef main`.
    pub(crate) updates: Vec<TableUpdate>,
    /// Manifests replaced by merged ones.
    pub(crate) replaced: usize,
    /// Merged manifests written.
    pub(crate) written: usize,
    /// Bytes of the manifests replaced.
    pub(crate) replaced_bytes: u64,
    /// Manifests the new snapshot lists.
    pub(crate) manifests_after: usize,
}

/// The current snapshot's manifest list entries (empty for a table without snapshots).
///
/// # Errors
/// iceberg's error when the manifest list cannot be read.
pub(crate) async fn current_manifests(table: &Table) -> Result<Vec<ManifestFile>> {
    let Some(snapshot) = table.metadata().current_snapshot() else {
        return Ok(Vec::new());
    };
    let list = table.manifest_list_reader(snapshot).load().await?;
    Ok(list.consume_entries().into_iter().collect())
}

/// Merges `table`'s current manifests (`manifests`, its current snapshot's list) when
/// the rules in the module docs ask for it: writes the merged manifests and the new
/// manifest list, and returns the commit to make — or `None` when no merge is due.
/// Nothing is committed; the files written are orphans until the commit lands.
///
/// # Errors
/// iceberg's error for properties that do not parse or a manifest that cannot be read
/// or written.
pub(crate) async fn plan(table: &Table, manifests: &[ManifestFile]) -> Result<Option<Merge>> {
    let metadata = table.metadata();
    let rules = MergeRules::of(metadata.properties());
    let (Some(current), FormatVersion::V2) =
        (metadata.current_snapshot(), metadata.format_version())
    else {
        return Ok(None);
    };
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

    let snapshot_id = unique_snapshot_id(table);
    let commit_uuid = uuid::Uuid::now_v7();
    let spec = metadata
        .partition_spec_by_id(spec_id)
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "default partition spec missing"))?
        .as_ref()
        .clone();
    let mut out = Vec::with_capacity(slots.len());
    let (mut replaced, mut written, mut entries) = (0usize, 0usize, 0usize);
    let mut replaced_bytes = 0u64;
    for slot in slots {
        let bin = match slot {
            Slot::Keep(manifest) => {
                out.push(manifest);
                continue;
            }
            Slot::Bin(mut bin) if bin.len() == 1 => {
                out.extend(bin.pop());
                continue;
            }
            Slot::Bin(bin) => bin,
        };
        let path = format!(
            "{}/metadata/{commit_uuid}-m{written}.avro",
            metadata.location()
        );
        let (merged, live) = write_merged(table, &spec, snapshot_id, &path, &bin).await?;
        entries += live;
        replaced_bytes += bin
            .iter()
            .map(|m| u64::try_from(m.manifest_length).unwrap_or(0))
            .sum::<u64>();
        out.push(merged);
        replaced += bin.len();
        written += 1;
    }

    let manifests_after = out.len();
    // The table's content is unchanged: the totals carry over (Java's
    // `RewriteManifests` summary, plus its manifest counts).
    let mut properties = carried_totals(current);
    properties.insert("manifests-created".into(), written.to_string());
    properties.insert("manifests-replaced".into(), replaced.to_string());
    properties.insert(
        "manifests-kept".into(),
        (manifests_after - written).to_string(),
    );
    properties.insert("entries-processed".into(), entries.to_string());
    let (requirements, updates) =
        replace_snapshot(table, snapshot_id, commit_uuid, out, properties).await?;
    Ok(Some(Merge {
        requirements,
        updates,
        replaced,
        written,
        replaced_bytes,
        manifests_after,
    }))
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
    spec: &iceberg::spec::PartitionSpec,
    snapshot_id: i64,
    path: &str,
    bin: &[ManifestFile],
) -> Result<(ManifestFile, usize)> {
    let file_io = table.file_io();
    let mut writer = ManifestWriterBuilder::new(
        file_io.new_output(path)?,
        Some(snapshot_id),
        table.metadata().current_schema().clone(),
        spec.clone(),
    )
    .build_v2_data();
    let mut entries = 0;
    for manifest in bin {
        for entry in manifest.load_manifest(file_io).await?.entries() {
            if !entry.is_alive() {
                continue;
            }
            let (Some(added_by), Some(sequence)) = (entry.snapshot_id(), entry.sequence_number())
            else {
                return Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "manifest {} has a live entry without snapshot id or sequence number",
                        manifest.manifest_path
                    ),
                ));
            };
            writer.add_existing_file(
                entry.data_file().clone(),
                added_by,
                sequence,
                entry.file_sequence_number,
            )?;
            entries += 1;
        }
    }
    Ok((writer.write_manifest_file().await?, entries))
}

/// The `total-*` properties of `snapshot`'s summary.
pub(crate) fn carried_totals(snapshot: &Snapshot) -> HashMap<String, String> {
    snapshot
        .summary()
        .additional_properties
        .iter()
        .filter(|(k, _)| k.starts_with("total-"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Writes the manifest list of snapshot `snapshot_id` — operation `replace`, child of
/// `table`'s current snapshot, listing `manifests`, summary `properties` — and returns
/// its commit: the table's uuid and `main` still at the current snapshot as
/// requirements, `AddSnapshot` and `SetSnapshotRef main` as updates (what iceberg's own
/// snapshot producer commits).
///
/// # Errors
/// `Unexpected` for a table without a current snapshot; the manifest list's write error.
pub(crate) async fn replace_snapshot(
    table: &Table,
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    manifests: Vec<ManifestFile>,
    properties: HashMap<String, String>,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    let metadata = table.metadata();
    let current = metadata
        .current_snapshot()
        .ok_or_else(|| Error::new(ErrorKind::Unexpected, "replace without a current snapshot"))?;
    let sequence_number = metadata.next_sequence_number();
    let list_path = format!(
        "{}/metadata/snap-{snapshot_id}-0-{commit_uuid}.avro",
        metadata.location()
    );
    let mut list = ManifestListWriter::v2(
        table.file_io().new_output(&list_path)?.writer().await?,
        snapshot_id,
        Some(current.snapshot_id()),
        sequence_number,
    );
    list.add_manifests(manifests.into_iter())?;
    list.close().await?;
    let snapshot = Snapshot::builder()
        .with_manifest_list(list_path)
        .with_snapshot_id(snapshot_id)
        .with_parent_snapshot_id(Some(current.snapshot_id()))
        .with_sequence_number(sequence_number)
        .with_summary(Summary {
            operation: Operation::Replace,
            additional_properties: properties,
        })
        .with_schema_id(metadata.current_schema_id())
        .with_timestamp_ms(now_ms().max(metadata.last_updated_ms()))
        .build();
    Ok((
        vec![
            TableRequirement::UuidMatch {
                uuid: metadata.uuid(),
            },
            TableRequirement::RefSnapshotIdMatch {
                r#ref: MAIN_BRANCH.to_string(),
                snapshot_id: Some(current.snapshot_id()),
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
