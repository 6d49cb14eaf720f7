//! Which live deletion vectors of a snapshot apply to which data files (table spec,
//! "Scan Planning"): a DV applies to the data file whose `file_path` equals its
//! `referenced_data_file`, of the same partition spec and partition, whose data sequence
//! number is at most the DV's. At most one DV may apply to a data file ("Delete Formats").
//!
//! iceberg 0.10.1's scan cannot read DVs (its delete loader reads every delete file as
//! Parquet), so the read path finds them here and applies them itself.

use std::collections::{HashMap, HashSet};

use iceberg::spec::{
    DataContentType, DataFile, DataFileFormat, ManifestContentType, SnapshotRef, Struct,
};
use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result};

/// A live DV entry of a delete manifest, before matching it with its data file.
struct Candidate {
    spec_id: i32,
    sequence: i64,
    file: DataFile,
}

/// The live deletion vectors of one snapshot that apply to one of its live data files,
/// by that data file's path; and the paths of every Puffin file live DVs are in.
#[derive(Debug, Default)]
pub struct LiveVectors {
    by_data_file: HashMap<String, DataFile>,
    puffin_files: HashSet<String>,
}

impl LiveVectors {
    /// Nothing applies (a snapshot without DVs).
    pub fn none() -> Self {
        Self::default()
    }

    /// The DVs of `snapshot` of `table` (module docs). Reads the snapshot's delete
    /// manifests, and its data manifests only when a live DV is found (for the data
    /// files' sequence numbers and partitions).
    ///
    /// # Errors
    /// iceberg's error for a manifest list or manifest that cannot be read;
    /// `DataInvalid` for a live DV without a sequence number or `referenced_data_file`,
    /// or two DVs that apply to one data file.
    pub async fn of_snapshot(table: &Table, snapshot: &SnapshotRef) -> Result<Self> {
        let file_io = table.file_io();
        let list = table.manifest_list_reader(snapshot).load().await?;
        let mut candidates: HashMap<String, Vec<Candidate>> = HashMap::new();
        let mut puffin_files = HashSet::new();
        for manifest in list.entries() {
            if manifest.content != ManifestContentType::Deletes {
                continue;
            }
            for entry in manifest.load_manifest(file_io).await?.entries() {
                let file = entry.data_file();
                if !entry.is_alive()
                    || file.content_type() != DataContentType::PositionDeletes
                    || file.file_format() != DataFileFormat::Puffin
                {
                    continue;
                }
                let invalid = |what: &str| {
                    Error::new(
                        ErrorKind::DataInvalid,
                        format!(
                            "deletion vector in {} (manifest {}) has no {what}",
                            file.file_path(),
                            manifest.manifest_path
                        ),
                    )
                };
                let sequence = entry
                    .sequence_number()
                    .ok_or_else(|| invalid("sequence number"))?;
                let referenced = file
                    .referenced_data_file()
                    .ok_or_else(|| invalid("referenced_data_file"))?;
                puffin_files.insert(file.file_path().to_string());
                candidates.entry(referenced).or_default().push(Candidate {
                    spec_id: manifest.partition_spec_id,
                    sequence,
                    file: file.clone(),
                });
            }
        }
        let mut vectors = Self {
            by_data_file: HashMap::new(),
            puffin_files,
        };
        if candidates.is_empty() {
            return Ok(vectors);
        }
        for manifest in list.entries() {
            if manifest.content != ManifestContentType::Data {
                continue;
            }
            for entry in manifest.load_manifest(file_io).await?.entries() {
                if !entry.is_alive() {
                    continue;
                }
                let Some(dvs) = candidates.get(entry.file_path()) else {
                    continue;
                };
                let Some(sequence) = entry.sequence_number() else {
                    return Err(Error::new(
                        ErrorKind::DataInvalid,
                        format!(
                            "data file {} (manifest {}) has no sequence number",
                            entry.file_path(),
                            manifest.manifest_path
                        ),
                    ));
                };
                let partition = entry.data_file().partition();
                let spec_id = manifest.partition_spec_id;
                vectors.add(entry.file_path(), spec_id, partition, sequence, dvs)?;
            }
        }
        Ok(vectors)
    }

    /// Records which of `dvs` (the DVs naming the data file `path`) apply to it, a data
    /// file of spec `spec_id`, `partition` and data sequence number `sequence`.
    fn add(
        &mut self,
        path: &str,
        spec_id: i32,
        partition: &Struct,
        sequence: i64,
        dvs: &[Candidate],
    ) -> Result<()> {
        let mut applying = dvs.iter().filter(|dv| {
            dv.spec_id == spec_id && dv.file.partition() == partition && sequence <= dv.sequence
        });
        let Some(first) = applying.next() else {
            return Ok(());
        };
        if let Some(second) = applying.next() {
            return Err(Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "two deletion vectors apply to data file {path} (in {} and {}); the spec allows one",
                    first.file.file_path(),
                    second.file.file_path()
                ),
            ));
        }
        self.by_data_file
            .insert(path.to_string(), first.file.clone());
        Ok(())
    }

    /// Records `dv` (a Puffin position-delete entry) as the one DV that applies to the
    /// data file it references; for tests of the read path that plan by hand.
    ///
    /// # Errors
    /// `DataInvalid` when `dv` references no data file.
    pub fn insert(&mut self, dv: DataFile) -> Result<()> {
        let referenced = dv.referenced_data_file().ok_or_else(|| {
            Error::new(
                ErrorKind::DataInvalid,
                format!(
                    "deletion vector in {} has no referenced_data_file",
                    dv.file_path()
                ),
            )
        })?;
        self.puffin_files.insert(dv.file_path().to_string());
        self.by_data_file.insert(referenced, dv);
        Ok(())
    }

    /// The DV that applies to the data file `data_file_path`, if any.
    pub fn vector_for(&self, data_file_path: &str) -> Option<&DataFile> {
        self.by_data_file.get(data_file_path)
    }

    /// Whether `path` is a Puffin file holding a live DV (so a scan task must not read
    /// it as a delete file).
    pub fn is_vector_file(&self, path: &str) -> bool {
        self.puffin_files.contains(path)
    }

    /// Whether the snapshot has no live DV at all.
    pub fn is_empty(&self) -> bool {
        self.puffin_files.is_empty()
    }
}
