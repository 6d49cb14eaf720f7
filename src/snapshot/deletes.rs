//! Which data files a table's live delete files may apply to: the guard that keeps
//! maintenance from rewriting or dropping a row another writer deleted.
//!
//! A delete file hides rows of data files that a reader matches it with at scan time
//! (Iceberg table spec, "Scan Planning"):
//! - a position delete file or a deletion vector applies to a data file whose data
//!   sequence number is at most the delete's, in the same partition spec and partition,
//!   and, when it names one (`referenced_data_file`, or equal `file_path` lower and upper
//!   bounds), only to that file;
//! - an equality delete file applies to a data file whose data sequence number is
//!   strictly lower than the delete's, in the same spec and partition — or in any, when
//!   the delete file's spec is unpartitioned.
//!
//! Rewriting such a data file into a new one (a new path, a new sequence number) would
//! leave the deletes naming a file that no longer exists, or below the new file's
//! sequence number: the deleted rows come back. So compaction leaves every data file
//! [`DeleteIndex::may_apply`] answers `true` for where it is. The index is conservative
//! where the spec lets a reader be precise (it does not read position delete files to
//! see which paths they name): "may apply" never misses a file a delete applies to.

use std::collections::HashMap;

use iceberg::io::FileIO;
use iceberg::spec::{DataContentType, DataFile, Datum, ManifestContentType, ManifestFile, Struct};
use iceberg::{Error, ErrorKind, Result};

use crate::catalog::manifest_cache::ManifestCache;

/// Field id of a position delete file's `file_path` column (table spec, "Position
/// Delete Files").
pub(crate) const DELETE_FILE_PATH_FIELD_ID: i32 = 2_147_483_546;

/// The live delete files of one snapshot, indexed by what they may apply to (module
/// docs). Sequence numbers are data sequence numbers.
#[derive(Debug, Default)]
pub(crate) struct DeleteIndex {
    /// Data file path → the highest sequence number of a position delete (file or
    /// deletion vector) that names it.
    by_path: HashMap<String, i64>,
    /// (spec id, partition) → the highest sequence number of a position delete file of
    /// that partition that names no single file.
    positional: HashMap<(i32, Struct), i64>,
    /// (spec id, partition) → the highest sequence number of an equality delete file of
    /// that (partitioned) spec's partition.
    equality: HashMap<(i32, Struct), i64>,
    /// The highest sequence number of an equality delete file of an unpartitioned
    /// spec: it applies to every partition.
    global_equality: Option<i64>,
    /// Live delete files indexed.
    files: usize,
}

impl DeleteIndex {
    /// The index of the live delete files that `manifests` (a snapshot's manifest list)
    /// hold; `unpartitioned` tells whether a spec id is unpartitioned (a spec the table
    /// does not know counts as partitioned: such a delete then applies less widely than
    /// an unpartitioned one would, so the caller must refuse unknown specs itself — see
    /// [`Self::of`]).
    ///
    /// # Errors
    /// iceberg's error for a delete manifest that cannot be read; `DataInvalid` for a
    /// delete manifest entry without a sequence number or of a spec the table does not
    /// have.
    pub(crate) async fn of(
        file_io: &FileIO,
        manifests: &[ManifestFile],
        unpartitioned: impl Fn(i32) -> Option<bool>,
        cache: &mut ManifestCache,
    ) -> Result<Self> {
        let mut index = Self::default();
        for manifest in manifests {
            if manifest.content != ManifestContentType::Deletes {
                continue;
            }
            let spec_id = manifest.partition_spec_id;
            let Some(spec_unpartitioned) = unpartitioned(spec_id) else {
                return Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "delete manifest {} names partition spec {spec_id}, which the table does not have",
                        manifest.manifest_path
                    ),
                ));
            };
            for entry in cache.manifest(file_io, manifest).await?.entries() {
                if !entry.is_alive() {
                    continue;
                }
                let sequence = entry.sequence_number().ok_or_else(|| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!(
                            "delete file {} in manifest {} has no sequence number",
                            entry.file_path(),
                            manifest.manifest_path
                        ),
                    )
                })?;
                index.add(spec_id, spec_unpartitioned, sequence, entry.data_file());
            }
        }
        Ok(index)
    }

    /// [`Self::of`] for `table`, whose specs say which are unpartitioned.
    ///
    /// # Errors
    /// As [`Self::of`].
    pub(crate) async fn of_table(
        table: &iceberg::table::Table,
        manifests: &[ManifestFile],
        cache: &mut ManifestCache,
    ) -> Result<Self> {
        let metadata = table.metadata();
        Self::of(
            table.file_io(),
            manifests,
            |spec_id| {
                metadata
                    .partition_spec_by_id(spec_id)
                    .map(|spec| spec.fields().is_empty())
            },
            cache,
        )
        .await
    }

    /// Adds one live delete file of spec `spec_id` (unpartitioned or not) with data
    /// sequence number `sequence`. A data file among the entries of a delete manifest is
    /// ignored.
    fn add(&mut self, spec_id: i32, spec_unpartitioned: bool, sequence: i64, file: &DataFile) {
        let higher = |slot: &mut i64| *slot = (*slot).max(sequence);
        match file.content_type() {
            DataContentType::Data => return,
            DataContentType::PositionDeletes => match referenced_file(file) {
                Some(path) => higher(self.by_path.entry(path).or_insert(sequence)),
                None => higher(
                    self.positional
                        .entry((spec_id, file.partition().clone()))
                        .or_insert(sequence),
                ),
            },
            DataContentType::EqualityDeletes if spec_unpartitioned => {
                self.global_equality =
                    Some(self.global_equality.map_or(sequence, |s| s.max(sequence)));
            }
            DataContentType::EqualityDeletes => higher(
                self.equality
                    .entry((spec_id, file.partition().clone()))
                    .or_insert(sequence),
            ),
        }
        self.files += 1;
    }

    /// Whether no live delete file was found.
    pub(crate) fn is_empty(&self) -> bool {
        self.files == 0
    }

    /// Whether a live delete file may apply to `file`, a data file of spec `spec_id`
    /// with data sequence number `sequence` (module docs).
    pub(crate) fn may_apply(&self, spec_id: i32, sequence: i64, file: &DataFile) -> bool {
        if self.is_empty() {
            return false;
        }
        let key = (spec_id, file.partition().clone());
        self.by_path
            .get(file.file_path())
            .is_some_and(|&delete| sequence <= delete)
            || self
                .positional
                .get(&key)
                .is_some_and(|&delete| sequence <= delete)
            || self
                .equality
                .get(&key)
                .is_some_and(|&delete| sequence < delete)
            || self.global_equality.is_some_and(|delete| sequence < delete)
    }
}

/// The one data file a position delete file (or deletion vector) names: its
/// `referenced_data_file`, or the `file_path` column's lower bound when it equals the
/// upper bound (what Iceberg Java's `ContentFileUtil.referencedDataFile` reads).
pub(crate) fn referenced_file(file: &DataFile) -> Option<String> {
    if let Some(path) = file.referenced_data_file() {
        return Some(path);
    }
    let lower = file.lower_bounds().get(&DELETE_FILE_PATH_FIELD_ID)?;
    let upper = file.upper_bounds().get(&DELETE_FILE_PATH_FIELD_ID)?;
    match (lower, upper) {
        (lower, upper) if lower == upper => string_of(lower),
        _ => None,
    }
}

fn string_of(datum: &Datum) -> Option<String> {
    match datum.literal() {
        iceberg::spec::PrimitiveLiteral::String(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iceberg::spec::{DataFileBuilder, DataFileFormat, Literal};

    fn file(content: DataContentType, path: &str, partition: Struct) -> DataFileBuilder {
        let mut builder = DataFileBuilder::default();
        builder
            .content(content)
            .file_path(path.to_string())
            .file_format(DataFileFormat::Parquet)
            .partition(partition)
            .record_count(1)
            .file_size_in_bytes(1);
        builder
    }

    fn data(path: &str, partition: Struct) -> DataFile {
        file(DataContentType::Data, path, partition)
            .build()
            .expect("data file")
    }

    fn part(v: i32) -> Struct {
        Struct::from_iter([Some(Literal::int(v))])
    }

    /// Catches compaction rewriting a file that a delete names or covers, by each rule of
    /// the spec's scan planning: a file-scoped position delete (`referenced_data_file`
    /// and equal `file_path` bounds) applies to its file at or below its sequence number
    /// and to no other; a partition-scoped one to its partition; an equality delete
    /// strictly below its sequence number, to its partition, or everywhere when its spec
    /// is unpartitioned.
    #[test]
    fn a_delete_applies_where_the_spec_says_and_nowhere_else() {
        let mut index = DeleteIndex::default();
        assert!(index.is_empty());
        let named = file(
            DataContentType::PositionDeletes,
            "/t/d/pos1.parquet",
            part(1),
        )
        .referenced_data_file(Some("/t/a.parquet".into()))
        .build()
        .expect("delete");
        index.add(0, false, 5, &named);
        let bounded = file(
            DataContentType::PositionDeletes,
            "/t/d/pos2.parquet",
            part(1),
        )
        .lower_bounds(HashMap::from([(
            DELETE_FILE_PATH_FIELD_ID,
            Datum::string("/t/b.parquet"),
        )]))
        .upper_bounds(HashMap::from([(
            DELETE_FILE_PATH_FIELD_ID,
            Datum::string("/t/b.parquet"),
        )]))
        .build()
        .expect("delete");
        index.add(0, false, 5, &bounded);
        assert!(!index.is_empty());
        assert!(index.may_apply(0, 5, &data("/t/a.parquet", part(1))));
        assert!(index.may_apply(0, 3, &data("/t/b.parquet", part(1))));
        assert!(
            !index.may_apply(0, 6, &data("/t/a.parquet", part(1))),
            "added after"
        );
        assert!(
            !index.may_apply(0, 1, &data("/t/c.parquet", part(1))),
            "another file"
        );

        let partition_scoped = file(
            DataContentType::PositionDeletes,
            "/t/d/pos3.parquet",
            part(2),
        )
        .build()
        .expect("delete");
        index.add(0, false, 7, &partition_scoped);
        assert!(index.may_apply(0, 7, &data("/t/c.parquet", part(2))));
        assert!(
            !index.may_apply(1, 7, &data("/t/c.parquet", part(2))),
            "other spec"
        );
        assert!(
            !index.may_apply(0, 7, &data("/t/c.parquet", part(3))),
            "other partition"
        );

        let equality = file(DataContentType::EqualityDeletes, "/t/d/eq.parquet", part(3))
            .equality_ids(Some(vec![1]))
            .build()
            .expect("delete");
        index.add(0, false, 9, &equality);
        assert!(index.may_apply(0, 8, &data("/t/e.parquet", part(3))));
        assert!(
            !index.may_apply(0, 9, &data("/t/e.parquet", part(3))),
            "same sequence"
        );
        assert!(!index.may_apply(0, 1, &data("/t/e.parquet", part(4))));

        let global = file(
            DataContentType::EqualityDeletes,
            "/t/d/eq2.parquet",
            Struct::empty(),
        )
        .equality_ids(Some(vec![1]))
        .build()
        .expect("delete");
        index.add(5, true, 11, &global);
        assert!(index.may_apply(0, 10, &data("/t/f.parquet", part(4))));
        assert!(!index.may_apply(0, 11, &data("/t/f.parquet", part(4))));
    }
}
