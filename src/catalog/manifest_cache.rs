//! Manifest lists and manifests read once, parsed once.
//!
//! Manifest lists and manifests are written once and never changed (Iceberg table spec,
//! "Manifest Lists" and "Manifests"), so a parsed one serves every later reader. Table
//! maintenance reads the same files several times a pass — cleanup's references, the
//! manifest merge, compaction's choice of inputs and its check under the commit turn —
//! and parsing a manifest (Avro, with its schema) costs far more than looking it up, so
//! all of them read through one [`ManifestCache`] kept across passes. What a pass no
//! longer uses (files of expired snapshots) is dropped by [`ManifestCache::forget_unused`],
//! so the cache follows the tables' live metadata, not their age.
//!
//! What a catalog writes, it never reads back: the snapshot producers (`crate::snapshot`)
//! hand the manifest lists and manifests they write to the catalog's
//! [`WrittenManifests`] ([`WrittenManifests::remember_list`],
//! [`WrittenManifests::remember_manifest`]), a small cache of recent files that every
//! [`ManifestCache`] of that catalog and its next append consult before the storage, so
//! the committer never re-reads or re-parses what it wrote. Each catalog instance has its
//! own ([`crate::catalog::RedbCatalog::written_manifests`]).

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use iceberg::io::FileIO;
use iceberg::spec::{DataFile, Manifest, ManifestFile, SnapshotRef};
use iceberg::table::Table;

/// Parsed manifest lists (by path: the manifests they list) and manifests (by path), in
/// front of the catalog's [`WrittenManifests`].
#[derive(Debug)]
pub struct ManifestCache {
    lists: HashMap<String, Arc<[ManifestFile]>>,
    manifests: HashMap<String, Arc<Manifest>>,
    /// Paths looked up since [`Self::forget_unused`] last ran.
    used: HashSet<String>,
    written: Arc<WrittenManifests>,
}

impl ManifestCache {
    /// An empty cache in front of `written` (its catalog's:
    /// [`crate::catalog::RedbCatalog::manifest_cache`]).
    pub fn new(written: Arc<WrittenManifests>) -> Self {
        Self {
            lists: HashMap::new(),
            manifests: HashMap::new(),
            used: HashSet::new(),
            written,
        }
    }

    /// What the catalog this cache reads for wrote lately.
    pub fn written(&self) -> &Arc<WrittenManifests> {
        &self.written
    }

    /// The manifests `snapshot` of `table` lists, in list order; read and parsed only the
    /// first time.
    ///
    /// # Errors
    /// iceberg's error when the manifest list cannot be read or parsed.
    pub async fn list(
        &mut self,
        table: &Table,
        snapshot: &SnapshotRef,
    ) -> iceberg::Result<Arc<[ManifestFile]>> {
        let path = snapshot.manifest_list();
        if let Some(list) = self.lists.get(path) {
            self.used.insert(path.to_string());
            return Ok(list.clone());
        }
        let list = self.written.read_list(table, snapshot).await?;
        self.used.insert(path.to_string());
        self.lists.insert(path.to_string(), list.clone());
        Ok(list)
    }

    /// The manifests of `table`'s current snapshot (none for a table without snapshots).
    ///
    /// # Errors
    /// As [`Self::list`].
    pub async fn current(&mut self, table: &Table) -> iceberg::Result<Arc<[ManifestFile]>> {
        match table.metadata().current_snapshot() {
            Some(snapshot) => self.list(table, snapshot).await,
            None => Ok(Arc::from(Vec::new())),
        }
    }

    /// The parsed manifest `manifest` names, read through `file_io` only the first time.
    ///
    /// # Errors
    /// iceberg's error when the manifest cannot be read or parsed.
    pub async fn manifest(
        &mut self,
        file_io: &FileIO,
        manifest: &ManifestFile,
    ) -> iceberg::Result<Arc<Manifest>> {
        let path = &manifest.manifest_path;
        self.used.insert(path.clone());
        if let Some(parsed) = self.manifests.get(path) {
            return Ok(parsed.clone());
        }
        let parsed = self.written.read_manifest(file_io, manifest).await?;
        self.manifests.insert(path.clone(), parsed.clone());
        Ok(parsed)
    }

    /// The parsed manifest at `path` for a caller that keeps only what it needs of it
    /// (the reference walk keeps its files' paths): a manifest already here or among the
    /// catalog's recent ones is shared, one read now is not kept (a parsed manifest holds
    /// every entry's statistics, about ten times its paths' size). Read by path alone,
    /// so inherited fields (entries' snapshot ids and sequence numbers) stay as written.
    ///
    /// # Errors
    /// iceberg's error when the manifest cannot be read or parsed.
    pub async fn manifest_unkept(
        &self,
        file_io: &FileIO,
        path: &str,
    ) -> iceberg::Result<Arc<Manifest>> {
        if let Some(parsed) = self.manifests.get(path) {
            return Ok(parsed.clone());
        }
        if let Some(parsed) = self.written.recent().manifest(path) {
            return Ok(parsed);
        }
        let bytes = file_io.new_input(path)?.read().await?;
        Ok(Arc::new(Manifest::parse_avro(&bytes)?))
    }

    /// Parsed manifests held now.
    pub fn manifests_held(&self) -> usize {
        self.manifests.len()
    }

    /// Drops what was not looked up since the last call (the files of expired snapshots
    /// and of dropped tables).
    pub fn forget_unused(&mut self) {
        let used = std::mem::take(&mut self.used);
        self.lists.retain(|path, _| used.contains(path));
        self.manifests.retain(|path, _| used.contains(path));
    }
}

/// Manifest lists a catalog keeps (the oldest is forgotten first): the current list of
/// 128 busy tables, which is all an append reads. A miss only costs a read.
const RECENT_LISTS: usize = 128;
/// Manifests a catalog keeps: those awaiting a merge (at most
/// `commit.manifest.min-count-to-merge` per table) and the newest ones maintenance reads
/// next. A miss only costs a read and a parse.
const RECENT_MANIFESTS: usize = 512;
/// Bytes the manifests a catalog keeps hold at most, by [`parsed_bytes`]'s estimate. A
/// merged manifest holds every live data file of its table, and a busy table writes one
/// every `commit.manifest.min-count-to-merge` commits: bounded by count alone, the cache
/// would hold dozens of copies of one table's file list, a heap that grows with the
/// square of its live data files (`docs/performance.md`, "Heap per live data file
/// (`live_files` arm)").
const RECENT_MANIFEST_BYTES: usize = 32 << 20;
/// A manifest larger than this ([`parsed_bytes`]) is not kept: it would push
/// out most of the others, and its next reader reads and parses it again.
const RECENT_LARGEST_MANIFEST: usize = RECENT_MANIFEST_BYTES / 4;

/// The manifest lists and manifests a catalog wrote lately, parsed.
#[derive(Default)]
struct Recent {
    lists: HashMap<String, Arc<[ManifestFile]>>,
    list_order: VecDeque<String>,
    /// Each manifest with its [`parsed_bytes`].
    manifests: HashMap<String, (Arc<Manifest>, usize)>,
    manifest_order: VecDeque<String>,
    /// The sum of the kept manifests' [`parsed_bytes`].
    manifest_bytes: usize,
}

impl Recent {
    /// Keeps `manifest` (written at `path`) unless it is larger than
    /// [`RECENT_LARGEST_MANIFEST`], then forgets the oldest until at most
    /// [`RECENT_MANIFESTS`] manifests of at most [`RECENT_MANIFEST_BYTES`] are kept.
    fn keep_manifest(&mut self, path: &str, manifest: Arc<Manifest>) {
        let bytes = parsed_bytes(&manifest);
        if bytes > RECENT_LARGEST_MANIFEST {
            self.forget_manifest(path);
            return;
        }
        match self.manifests.insert(path.to_string(), (manifest, bytes)) {
            Some((_, old)) => self.manifest_bytes -= old,
            None => self.manifest_order.push_back(path.to_string()),
        }
        self.manifest_bytes += bytes;
        while self.manifest_order.len() > RECENT_MANIFESTS
            || self.manifest_bytes > RECENT_MANIFEST_BYTES
        {
            let Some(old) = self.manifest_order.pop_front() else {
                break;
            };
            if let Some((_, old_bytes)) = self.manifests.remove(&old) {
                self.manifest_bytes -= old_bytes;
            }
        }
    }

    /// Forgets the manifest written at `path`, if kept.
    fn forget_manifest(&mut self, path: &str) {
        if let Some((_, bytes)) = self.manifests.remove(path) {
            self.manifest_bytes -= bytes;
            self.manifest_order.retain(|p| p != path);
        }
    }

    fn manifest(&self, path: &str) -> Option<Arc<Manifest>> {
        self.manifests.get(path).map(|(parsed, _)| parsed.clone())
    }
}

/// An estimate of the heap a parsed manifest holds, in bytes: per entry, the entry
/// itself, its data file's path, and a slot of each per-column statistics map (column
/// sizes, value, null and NaN counts; lower and upper bounds) with the maps' own
/// allocations. For a 3-column table's entries it gives about 2.3 KiB, close to what
/// heaptrack counts (`docs/performance.md`, "Heap per live data file (`live_files`
/// arm)").
pub(crate) fn parsed_bytes(manifest: &Manifest) -> usize {
    use iceberg::spec::{Datum, ManifestEntry};
    /// A map slot of `(i32, V)` with hashbrown's control byte, at a load of one half.
    fn slots<V>(n: usize) -> usize {
        n * 2 * (std::mem::size_of::<(i32, V)>() + 1)
    }
    /// Seven allocations per entry (six maps and the path) besides the entry: the
    /// allocator's rounding and bookkeeping.
    const PER_ALLOCATION: usize = 16;
    manifest
        .entries()
        .iter()
        .map(|entry| {
            let file = entry.data_file();
            std::mem::size_of::<ManifestEntry>()
                + std::mem::size_of::<DataFile>()
                + 7 * PER_ALLOCATION
                + file.file_path().len()
                + slots::<u64>(
                    file.column_sizes().len()
                        + file.value_counts().len()
                        + file.null_value_counts().len()
                        + file.nan_value_counts().len(),
                )
                + slots::<Datum>(file.lower_bounds().len() + file.upper_bounds().len())
                + file.split_offsets().map_or(0, |o| o.len() * 8)
        })
        .sum()
}

/// Paths the [`Written`] registry holds at most (manifest paths of lists plus file paths
/// of manifests, about 16 and 150 bytes each): about 16 MiB of lists, or a minute of
/// 100-manifest lists at 100 commits a second. Past it the oldest entries go, and the
/// reference walk reads those files back.
const WRITTEN_PATHS: usize = 1 << 20;

/// What the reference walk (`catalog::gc::ReferenceWalker`) needs of the manifest lists
/// and manifests a catalog wrote and no walk has taken yet: each list's manifest paths
/// and each manifest's file paths, handed over once
/// ([`WrittenManifests::take_written_list`], [`WrittenManifests::take_written_manifest`]).
/// A busy catalog writes a manifest list and a manifest per commit — thousands between
/// two maintenance passes, far more than [`Recent`] keeps —
/// and reading each back (Avro, with its schema) would be most of a maintenance pass's
/// CPU (`docs/performance.md`, "What the soak measured behind maintenance's shape").
#[derive(Default)]
struct Written {
    lists: HashMap<String, Arc<[Arc<str>]>>,
    manifests: HashMap<String, Arc<[PathBuf]>>,
    /// Both kinds' paths, oldest first (some already taken).
    order: VecDeque<String>,
    /// Paths held in `lists` and `manifests`.
    paths: usize,
    /// Metadata directory → the last list remembered there: a list shares the manifest
    /// path strings it has in common with the one before (an append carries every
    /// earlier manifest on), so a list costs a pointer per manifest.
    last: HashMap<String, Arc<[Arc<str>]>>,
}

impl Written {
    fn insert_list(&mut self, path: &str, manifests: &[ManifestFile]) {
        let dir = path.rsplit_once('/').map_or("", |(dir, _)| dir);
        let before: HashMap<&str, &Arc<str>> = self
            .last
            .get(dir)
            .map(|last| last.iter().map(|name| (&**name, name)).collect())
            .unwrap_or_default();
        let names: Arc<[Arc<str>]> = manifests
            .iter()
            .map(|m| match before.get(m.manifest_path.as_str()) {
                Some(name) => Arc::clone(name),
                None => Arc::from(m.manifest_path.as_str()),
            })
            .collect();
        drop(before);
        if self.last.len() >= 4096 && !self.last.contains_key(dir) {
            self.last.clear();
        }
        self.last.insert(dir.to_string(), names.clone());
        let added = names.len();
        let replaced = self
            .lists
            .insert(path.to_string(), names)
            .map(|old| old.len());
        self.admit(path, added, replaced);
    }

    fn insert_manifest(&mut self, path: &str, manifest: &Manifest) {
        let files: Arc<[PathBuf]> = manifest
            .entries()
            .iter()
            .map(|e| crate::storage::warehouse::local_path(e.file_path()))
            .collect();
        let added = files.len();
        let replaced = self
            .manifests
            .insert(path.to_string(), files)
            .map(|old| old.len());
        self.admit(path, added, replaced);
    }

    /// Counts an entry of `added` paths just stored at `path` (in place of one of
    /// `replaced` paths, or new: then it joins `order`), and keeps the bound.
    fn admit(&mut self, path: &str, added: usize, replaced: Option<usize>) {
        self.paths += added;
        match replaced {
            Some(old) => self.paths -= old,
            None => self.order.push_back(path.to_string()),
        }
        self.bound();
    }

    /// Forgets the oldest entries past [`WRITTEN_PATHS`], and the taken ones' places in
    /// `order` once they outnumber the held ones.
    fn bound(&mut self) {
        while self.paths > WRITTEN_PATHS {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(names) = self.lists.remove(&old) {
                self.paths -= names.len();
            } else if let Some(files) = self.manifests.remove(&old) {
                self.paths -= files.len();
            }
        }
        let held = self.lists.len() + self.manifests.len();
        if self.order.len() > 2 * held + 1024 {
            let (lists, manifests) = (&self.lists, &self.manifests);
            self.order
                .retain(|p| lists.contains_key(p) || manifests.contains_key(p));
        }
    }
}

/// What one catalog wrote lately: the manifest lists and manifests its snapshot
/// producers wrote, parsed (a later reader in the catalog does not read them back), and
/// their paths for its next reference walk (module docs). Bounded: at most
/// [`RECENT_LISTS`] lists, [`RECENT_MANIFESTS`] manifests of [`RECENT_MANIFEST_BYTES`],
/// and [`WRITTEN_PATHS`] paths for the walk.
#[derive(Default)]
pub struct WrittenManifests {
    recent: Mutex<Recent>,
    written: Mutex<Written>,
}

impl std::fmt::Debug for WrittenManifests {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WrittenManifests")
            .field("paths_for_the_walk", &self.written_paths())
            .finish_non_exhaustive()
    }
}

impl WrittenManifests {
    fn recent(&self) -> MutexGuard<'_, Recent> {
        // A panic while holding the lock leaves consistent maps (each change is one call).
        self.recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn written(&self) -> MutexGuard<'_, Written> {
        // As `recent`: each change is one call.
        self.written
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Paths held for the next reference walk, not yet taken (at most [`WRITTEN_PATHS`]).
    pub fn written_paths(&self) -> usize {
        self.written().paths
    }

    /// The manifest paths of the list at `path` if this catalog wrote it and no walk took
    /// them yet (they leave the registry).
    pub fn take_written_list(&self, path: &str) -> Option<Arc<[Arc<str>]>> {
        let mut written = self.written();
        let names = written.lists.remove(path)?;
        written.paths -= names.len();
        Some(names)
    }

    /// The file paths of the manifest at `path` if this catalog wrote it and no walk took
    /// them yet (they leave the registry).
    pub fn take_written_manifest(&self, path: &str) -> Option<Arc<[PathBuf]>> {
        let mut written = self.written();
        let files = written.manifests.remove(path)?;
        written.paths -= files.len();
        Some(files)
    }

    /// Remembers the manifest list at `path` (as the writer finished it: sequence numbers
    /// assigned), so a later reader of it in this catalog does not read the file, and its
    /// manifest paths for the next reference walk ([`Self::take_written_list`]).
    pub fn remember_list(&self, path: &str, manifests: Arc<[ManifestFile]>) {
        self.written().insert_list(path, &manifests);
        let mut recent = self.recent();
        if recent.lists.insert(path.to_string(), manifests).is_none() {
            recent.list_order.push_back(path.to_string());
        }
        while recent.list_order.len() > RECENT_LISTS {
            if let Some(old) = recent.list_order.pop_front() {
                recent.lists.remove(&old);
            }
        }
    }

    /// Remembers the manifest at `path` as a reader of the file would see it (entries'
    /// snapshot ids and sequence numbers inherited), so a later reader of it in this
    /// catalog does not read or parse the file, and its file paths for the next reference
    /// walk ([`Self::take_written_manifest`]).
    pub fn remember_manifest(&self, path: &str, manifest: Arc<Manifest>) {
        self.written().insert_manifest(path, &manifest);
        self.recent().keep_manifest(path, manifest);
    }

    /// Forgets the manifests at `paths` (those a merge or a compaction just replaced: only
    /// older snapshots still list them, and a reader of those reads them again), so the
    /// recent ones kept are the current ones.
    pub fn forget_manifests<'a>(&self, paths: impl IntoIterator<Item = &'a str>) {
        let mut recent = self.recent();
        for path in paths {
            recent.forget_manifest(path);
        }
    }

    /// The manifests `snapshot` of `table` lists: remembered, or read from the storage.
    ///
    /// # Errors
    /// iceberg's error when the manifest list cannot be read or parsed.
    pub async fn read_list(
        &self,
        table: &Table,
        snapshot: &SnapshotRef,
    ) -> iceberg::Result<Arc<[ManifestFile]>> {
        if let Some(list) = self.recent().lists.get(snapshot.manifest_list()) {
            return Ok(list.clone());
        }
        Ok(table
            .manifest_list_reader(snapshot)
            .load()
            .await?
            .consume_entries()
            .into_iter()
            .collect())
    }

    /// The parsed manifest `manifest` names: remembered, or read and parsed.
    ///
    /// # Errors
    /// iceberg's error when the manifest cannot be read or parsed.
    pub async fn read_manifest(
        &self,
        file_io: &FileIO,
        manifest: &ManifestFile,
    ) -> iceberg::Result<Arc<Manifest>> {
        if let Some(parsed) = self.recent().manifest(&manifest.manifest_path) {
            return Ok(parsed);
        }
        Ok(Arc::new(manifest.load_manifest(file_io).await?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{
        DataContentType, DataFileBuilder, DataFileFormat, Datum, FormatVersion,
        ManifestContentType, ManifestEntry, ManifestMetadata, ManifestStatus, NestedField,
        PartitionSpec, PrimitiveType, Schema, Struct, Type,
    };

    /// A data manifest of `files` entries of a 3-column table, each with every statistic
    /// of every column, as the streaming put writes them.
    fn manifest(files: usize) -> Arc<Manifest> {
        let schema = Schema::builder()
            .with_fields((1..=3).map(|id| {
                NestedField::required(id, format!("c{id}"), Type::Primitive(PrimitiveType::Long))
                    .into()
            }))
            .build()
            .expect("schema");
        let stats = |v: u64| (1..=3).map(|id| (id, v)).collect::<HashMap<i32, u64>>();
        let bounds = |v: i64| (1..=3).map(|id| (id, Datum::long(v))).collect();
        let entries = (0..files)
            .map(|i| {
                let file = DataFileBuilder::default()
                    .content(DataContentType::Data)
                    .file_path(format!(
                        "/warehouse/ns/t/data/{i:08}-0-{}.parquet",
                        uuid::Uuid::nil()
                    ))
                    .file_format(DataFileFormat::Parquet)
                    .partition(Struct::empty())
                    .record_count(1000)
                    .file_size_in_bytes(1 << 20)
                    .column_sizes(stats(1 << 18))
                    .value_counts(stats(1000))
                    .null_value_counts(stats(0))
                    .nan_value_counts(HashMap::new())
                    .lower_bounds(bounds(0))
                    .upper_bounds(bounds(999))
                    .split_offsets(Some(vec![4]))
                    .build()
                    .expect("data file");
                ManifestEntry::builder()
                    .status(ManifestStatus::Existing)
                    .snapshot_id(1)
                    .sequence_number(1)
                    .file_sequence_number(1)
                    .data_file(file)
                    .build()
            })
            .collect();
        Arc::new(Manifest::new(
            ManifestMetadata::builder()
                .schema(Arc::new(schema))
                .schema_id(0)
                .partition_spec(PartitionSpec::unpartition_spec())
                .format_version(FormatVersion::V2)
                .content(ManifestContentType::Data)
                .build(),
            entries,
        ))
    }

    /// Catches the cache bounded by count alone: a table merging every 16 commits left
    /// the last 32 copies of its whole file list in it, the heap growing with the square
    /// of its live data files.
    #[test]
    fn merged_manifests_stay_within_the_byte_bound_and_the_newest_stays() {
        let mut recent = Recent::default();
        let merged = manifest(3_000);
        let each = parsed_bytes(&merged);
        assert!(each <= RECENT_LARGEST_MANIFEST, "{each} bytes: kept at all");
        for commit in 0..128 {
            recent.keep_manifest(&format!("m{commit}-small.avro"), manifest(4));
            if commit % 16 == 15 {
                recent.keep_manifest(&format!("m{commit}-merged.avro"), merged.clone());
            }
            let held: usize = recent.manifests.values().map(|(_, b)| b).sum();
            assert_eq!(held, recent.manifest_bytes, "the running sum is the sum");
            assert!(recent.manifest_bytes <= RECENT_MANIFEST_BYTES);
            assert!(recent.manifests.len() <= RECENT_MANIFESTS);
            assert_eq!(recent.manifests.len(), recent.manifest_order.len());
        }
        assert!(
            recent.manifest("m127-merged.avro").is_some(),
            "the newest is kept"
        );
        assert!(recent.manifest("m127-small.avro").is_some());
        assert!(
            recent.manifest("m15-merged.avro").is_none(),
            "the oldest went"
        );
    }

    /// Catches one huge manifest flushing the whole cache (or being kept past the bound).
    #[test]
    fn a_manifest_over_a_quarter_of_the_bound_is_not_kept() {
        let mut recent = Recent::default();
        recent.keep_manifest("small.avro", manifest(4));
        let huge = manifest(20_000);
        assert!(parsed_bytes(&huge) > RECENT_LARGEST_MANIFEST);
        recent.keep_manifest("huge.avro", huge);
        assert!(recent.manifest("huge.avro").is_none());
        assert!(recent.manifest("small.avro").is_some(), "the others stay");
        assert_eq!(recent.manifest_bytes, parsed_bytes(&manifest(4)));
    }

    /// Catches a merge's inputs staying in the cache beside the merged manifest.
    #[test]
    fn a_forgotten_manifest_leaves_with_its_bytes() {
        let mut recent = Recent::default();
        for i in 0..3 {
            recent.keep_manifest(&format!("m{i}.avro"), manifest(100));
        }
        recent.forget_manifest("m1.avro");
        recent.forget_manifest("never-kept.avro");
        assert!(recent.manifest("m1.avro").is_none());
        assert_eq!(recent.manifest_order, ["m0.avro", "m2.avro"]);
        assert_eq!(recent.manifest_bytes, 2 * parsed_bytes(&manifest(100)));
        // Kept again after it was forgotten: counted once.
        recent.keep_manifest("m0.avro", manifest(100));
        assert_eq!(recent.manifest_bytes, 2 * parsed_bytes(&manifest(100)));
    }

    /// Catches an estimate that ignores the statistics: a wide table's entries hold far
    /// more than a narrow one's, and the bound must see it.
    #[test]
    fn the_estimate_grows_with_entries_and_their_statistics() {
        let one = parsed_bytes(&manifest(1));
        assert_eq!(parsed_bytes(&manifest(10)), 10 * one);
        let bare = Arc::new(Manifest::new(
            manifest(1).metadata().clone(),
            vec![
                ManifestEntry::builder()
                    .status(ManifestStatus::Added)
                    .snapshot_id(1)
                    .data_file(
                        DataFileBuilder::default()
                            .content(DataContentType::Data)
                            .file_path("/warehouse/ns/t/data/x.parquet".into())
                            .file_format(DataFileFormat::Parquet)
                            .partition(Struct::empty())
                            .record_count(1)
                            .file_size_in_bytes(1)
                            .build()
                            .expect("data file"),
                    )
                    .build(),
            ],
        ));
        // At least 16 bytes for each of the 18 statistics (6 kinds × 3 columns).
        assert!(
            one > parsed_bytes(&bare) + 18 * 16,
            "{one} vs {}",
            parsed_bytes(&bare)
        );
    }
}
