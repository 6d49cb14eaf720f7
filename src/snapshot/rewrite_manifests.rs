//! Manifest merging in the background: a `replace` snapshot whose manifest list carries
//! the same live data files in fewer manifests (like Java's `RewriteManifests`).
//!
//! Appends made by skade merge inline, as Java's merge append does ([`super::append`]);
//! this pass merges what other writers left (e.g. a table written by another Iceberg
//! writer's fast append), and tables whose rules changed. The rules and the merge
//! itself are shared: [`super::manifests`].

use std::collections::HashMap;

use async_trait::async_trait;
use iceberg::spec::{FormatVersion, ManifestFile, Operation, Snapshot, Summary};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableRequirement, TableUpdate};

use super::files::write_snapshot;
use super::manifests::{merge_manifests, unique_snapshot_id};
use crate::catalog::manifest_cache::{ManifestCache, WrittenManifests};
use crate::catalog::{Stage, Staged, TableChange};

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

/// Merges `table`'s current manifests (`manifests`, its current snapshot's list) when
/// the rules in the module docs ask for it: writes the merged manifests and the new
/// manifest list, and returns the commit to make — or `None` when no merge is due.
/// Nothing is committed; the files written are orphans until the commit lands.
///
/// # Errors
/// iceberg's error for properties that do not parse or a manifest that cannot be read
/// or written.
pub(crate) async fn plan(
    table: &Table,
    manifests: &[ManifestFile],
    cache: &mut ManifestCache,
) -> Result<Option<Merge>> {
    let metadata = table.metadata();
    let (Some(current), FormatVersion::V2) =
        (metadata.current_snapshot(), metadata.format_version())
    else {
        return Ok(None);
    };
    let snapshot_id = unique_snapshot_id(table);
    let commit_uuid = uuid::Uuid::now_v7();
    let Some(merged) =
        merge_manifests(table, snapshot_id, commit_uuid, 0, manifests, cache).await?
    else {
        return Ok(None);
    };
    let manifests_after = merged.manifests.len();
    // The table's content is unchanged: the totals carry over (Java's
    // `RewriteManifests` summary, plus its manifest counts).
    let mut properties = carried_totals(current);
    properties.insert("manifests-created".into(), merged.written.to_string());
    properties.insert("manifests-replaced".into(), merged.replaced.to_string());
    properties.insert(
        "manifests-kept".into(),
        (manifests_after - merged.written).to_string(),
    );
    properties.insert("entries-processed".into(), merged.entries.to_string());
    let (requirements, updates) = replace_snapshot(
        table,
        cache.written(),
        snapshot_id,
        commit_uuid,
        merged.manifests,
        properties,
    )
    .await?;
    Ok(Some(Merge {
        requirements,
        updates,
        replaced: merged.replaced,
        written: merged.written,
        replaced_bytes: merged.replaced_bytes,
        manifests_after,
    }))
}

/// Manifest merging of one table as a commit: planned again on the table as it stands
/// at each attempt ([`plan`], reading manifests through `cache`), giving way when no
/// merge is due. Its value: manifests replaced, merged manifests written, manifests the
/// new snapshot lists, bytes of the manifests replaced.
#[derive(Debug)]
pub struct RewriteManifests<'a> {
    cache: &'a mut ManifestCache,
}

impl<'a> RewriteManifests<'a> {
    /// Manifest merging reading (and keeping) parsed manifests in `cache`.
    pub fn new(cache: &'a mut ManifestCache) -> Self {
        Self { cache }
    }
}

#[async_trait]
impl Stage for RewriteManifests<'_> {
    type Out = (usize, usize, usize, u64);
    type Error = Error;

    async fn stage(&mut self, current: &[Table]) -> Result<Option<Staged<Self::Out>>> {
        let [table] = current else {
            return Err(Error::new(
                ErrorKind::Unexpected,
                "a manifest merge commits one table",
            ));
        };
        let list = self.cache.current(table).await?;
        let merged = plan(table, &list, self.cache).await?;
        Ok(merged.map(|m| {
            let counts = (m.replaced, m.written, m.manifests_after, m.replaced_bytes);
            Staged::new(vec![TableChange::new(m.requirements, m.updates)], counts)
        }))
    }
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
/// snapshot producer commits); the list is remembered in `written`.
///
/// # Errors
/// `Unexpected` for a table without a current snapshot; the manifest list's write error.
pub(crate) async fn replace_snapshot(
    table: &Table,
    written: &WrittenManifests,
    snapshot_id: i64,
    commit_uuid: uuid::Uuid,
    manifests: Vec<ManifestFile>,
    properties: HashMap<String, String>,
) -> Result<(Vec<TableRequirement>, Vec<TableUpdate>)> {
    if table.metadata().current_snapshot().is_none() {
        return Err(Error::new(
            ErrorKind::Unexpected,
            "replace without a current snapshot",
        ));
    }
    let summary = Summary {
        operation: Operation::Replace,
        additional_properties: properties,
    };
    write_snapshot(table, written, snapshot_id, commit_uuid, manifests, summary).await
}
