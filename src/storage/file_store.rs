//! Where a warehouse's table files are listed, inspected and removed: the local
//! filesystem or an object store.
//!
//! Online cleanup ([`crate::maintenance::cleanup`]), `skade gc` ([`crate::catalog::gc`])
//! and purge (`catalog::purge`) decide *which* files go by one set of rules each, whatever the
//! storage; [`FileStore`] is the only place that knows *how* a directory is listed, a
//! file's size and modification time read, and files removed. Paths are kept as
//! [`PathBuf`]s in both cases (`/abs/path` or `s3://bucket/key`), so references, table
//! locations and listed files compare the same way (by `/`-separated component).

use std::path::{Component, Path, PathBuf};
use std::time::SystemTime;

use futures::{StreamExt, TryStreamExt};

use super::StorageError;
use super::object_store::{ListedObject, ObjectStorage};
use super::warehouse::{Warehouse, local_path};

/// Objects inspected at once on an object store (one `HEAD` each).
const STATS_IN_FLIGHT: usize = 16;

/// The storage of a catalog's table files (see the module docs).
#[derive(Debug, Clone)]
pub(crate) enum FileStore {
    /// Files on the local filesystem; blocking calls run in `spawn_blocking`.
    Local,
    /// Objects in an S3 (or S3-compatible) store.
    Object(ObjectStorage),
}

/// One file (or object) found by [`FileStore::list_names`] or [`FileStore::stat`].
#[derive(Debug, Clone)]
pub(crate) struct StoredFile {
    /// `/abs/path` or `s3://bucket/key`.
    pub(crate) path: PathBuf,
    /// Its size in bytes.
    pub(crate) size_bytes: u64,
    /// When it was last written (an object store's `Last-Modified`, whole seconds on
    /// S3); `None` when the storage does not say.
    pub(crate) modified: Option<SystemTime>,
}

/// One file (or object) found by [`FileStore::list_names`]: its path, and its size and
/// modification time when the listing gave them at no cost of its own.
#[derive(Debug, Clone)]
pub(crate) enum NamedFile {
    /// A local directory's read names its files only; learning a file's size and
    /// modification time is one more system call each ([`FileStore::stat`]).
    Path(PathBuf),
    /// An object store's listing says every object's size and `Last-Modified`.
    Stored(StoredFile),
}

impl NamedFile {
    /// `/abs/path` or `s3://bucket/key`.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Self::Path(path) => path,
            Self::Stored(file) => &file.path,
        }
    }
}

impl From<ListedObject> for StoredFile {
    fn from(object: ListedObject) -> Self {
        Self {
            path: PathBuf::from(object.location),
            size_bytes: object.size_bytes,
            modified: object.modified,
        }
    }
}

impl FileStore {
    /// The store of `warehouse`'s tables.
    pub(crate) fn of(warehouse: &Warehouse) -> Self {
        match warehouse.object_storage() {
            Some(storage) => Self::Object(storage),
            None => Self::Local,
        }
    }

    /// `location` (a table location or file path as iceberg stores it) as a path of this
    /// store, when it is one and is plain: on the local filesystem an absolute path
    /// (`file:` stripped), on an object store `s3://bucket/...` (or `s3a://`); in both
    /// cases without `..`, so that "starts with" means "lies under". `None` otherwise:
    /// such a location is never listed or removed from.
    pub(crate) fn path_of(&self, location: &str) -> Option<PathBuf> {
        let path = match self {
            Self::Local => local_path(location),
            Self::Object(_) => {
                let (scheme, rest) = location.split_once("://")?;
                let bucket = rest.split('/').next().unwrap_or_default();
                if !matches!(scheme, "s3" | "s3a") || bucket.is_empty() {
                    return None;
                }
                PathBuf::from(location.trim_end_matches('/'))
            }
        };
        self.is_plain(&path).then_some(path)
    }

    /// Whether `path` is a plain path of this store (see [`Self::path_of`]).
    pub(crate) fn is_plain(&self, path: &Path) -> bool {
        let no_parent = path.components().all(|c| c != Component::ParentDir);
        match self {
            Self::Local => path.is_absolute() && no_parent,
            Self::Object(_) => {
                no_parent
                    && path
                        .to_str()
                        .is_some_and(|p| p.starts_with("s3://") || p.starts_with("s3a://"))
            }
        }
    }

    /// Every file under `dir`, recursively, as cheaply as the store names them: on the
    /// local filesystem by path alone (a directory read, no `lstat` per file: those would
    /// be most of a large listing's time, `docs/performance.md`, "Judging a listing"), on
    /// an object store with the size and modification time its listing gives anyway.
    /// None when `dir` does not exist; symbolic links are neither followed nor listed.
    ///
    /// # Errors
    /// [`StorageError::Io`] or [`StorageError::Store`] when the listing failed.
    pub(crate) async fn list_names(&self, dir: &Path) -> Result<Vec<NamedFile>, StorageError> {
        match self {
            Self::Local => {
                let dir = dir.to_path_buf();
                blocking(move || {
                    Ok(names_under(&dir)?
                        .into_iter()
                        .map(NamedFile::Path)
                        .collect())
                })
                .await
            }
            Self::Object(storage) => {
                let location = dir.to_string_lossy();
                let listed = storage
                    .list(&location)
                    .await
                    .map_err(|e| store_error("list", &location, e))?;
                Ok(listed
                    .into_iter()
                    .map(|object| NamedFile::Stored(StoredFile::from(object)))
                    .collect())
            }
        }
    }

    /// The files of `paths` that exist (regular files only, on the local filesystem),
    /// with their sizes and modification times; missing ones are left out.
    ///
    /// # Errors
    /// [`StorageError::Io`] or [`StorageError::Store`] when one could not be inspected.
    pub(crate) async fn stat(&self, paths: Vec<PathBuf>) -> Result<Vec<StoredFile>, StorageError> {
        match self {
            Self::Local => {
                blocking(move || {
                    let mut found = Vec::with_capacity(paths.len());
                    for path in paths {
                        let meta = match std::fs::symlink_metadata(&path) {
                            Ok(meta) if meta.is_file() => meta,
                            Ok(_) => continue,
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                            Err(source) => {
                                return Err(StorageError::Io {
                                    what: "read the metadata of",
                                    path,
                                    source,
                                });
                            }
                        };
                        found.push(StoredFile {
                            size_bytes: meta.len(),
                            modified: meta.modified().ok(),
                            path,
                        });
                    }
                    Ok(found)
                })
                .await
            }
            Self::Object(storage) => {
                let found: Vec<Option<StoredFile>> = futures::stream::iter(paths)
                    .map(|path| async move {
                        let location = path.to_string_lossy();
                        storage
                            .stat(&location)
                            .await
                            .map(|object| object.map(StoredFile::from))
                            .map_err(|e| store_error("inspect", &location, e))
                    })
                    .buffer_unordered(STATS_IN_FLIGHT)
                    .try_collect()
                    .await?;
                Ok(found.into_iter().flatten().collect())
            }
        }
    }

    /// Removes `paths`; one already gone is not an error. On an object store they go in
    /// batches (S3 `DeleteObjects`).
    ///
    /// # Errors
    /// [`StorageError::Io`] or [`StorageError::Store`] when a removal failed; some of the others
    /// may be gone by then.
    pub(crate) async fn remove(&self, paths: Vec<PathBuf>) -> Result<(), StorageError> {
        if paths.is_empty() {
            return Ok(());
        }
        match self {
            Self::Local => {
                blocking(move || {
                    for path in paths {
                        match std::fs::remove_file(&path) {
                            Ok(()) => {}
                            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                            Err(source) => {
                                return Err(StorageError::Io {
                                    what: "remove",
                                    path,
                                    source,
                                });
                            }
                        }
                    }
                    Ok(())
                })
                .await
            }
            Self::Object(storage) => {
                let locations: Vec<String> = paths
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect();
                storage
                    .delete_all(&locations)
                    .await
                    .map_err(|e| store_error("remove", &locations[0], e))
            }
        }
    }

    /// Removes each of `dirs` and every directory below it that is (then) empty, on the
    /// local filesystem; an object store has no directories, so nothing is done there.
    pub(crate) async fn remove_empty_dirs(&self, dirs: Vec<PathBuf>) {
        if let Self::Local = self {
            let _ = super::blocking::run_blocking(move || {
                for dir in &dirs {
                    remove_empty_dirs(dir);
                }
            })
            .await;
        }
    }
}

/// Removes `dir` and every directory below it that is (then) empty; leaves the rest.
fn remove_empty_dirs(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Runs blocking filesystem work off the async workers ([`super::blocking`]).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StorageError> + Send + 'static,
) -> Result<T, StorageError> {
    super::blocking::run_blocking(f)
        .await
        .map_err(|e| StorageError::Io {
            what: "run the file task for",
            path: PathBuf::new(),
            source: std::io::Error::other(e.to_string()),
        })?
}

fn store_error(what: &'static str, location: &str, source: iceberg::Error) -> StorageError {
    StorageError::Store {
        what,
        location: location.to_string(),
        source: Box::new(source),
    }
}

/// The path of every regular file under `dir` (recursively), from directory reads alone
/// (the entry's type comes with its name on ext4, xfs, btrfs and tmpfs; where it does
/// not, the standard library looks it up); none when `dir` does not exist. Symbolic
/// links are not followed and not listed; a directory removed while it is read is left
/// out.
fn names_under(dir: &Path) -> Result<Vec<PathBuf>, StorageError> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(StorageError::Io {
                    what: "list",
                    path: dir,
                    source,
                });
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| StorageError::Io {
                what: "list",
                path: dir.clone(),
                source,
            })?;
            let file_type = match entry.file_type() {
                Ok(file_type) => file_type,
                // Removed between the read that named it and the type's lookup.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(source) => {
                    return Err(StorageError::Io {
                        what: "inspect",
                        path: entry.path(),
                        source,
                    });
                }
            };
            if file_type.is_dir() {
                stack.push(entry.path());
            } else if file_type.is_file() {
                out.push(entry.path());
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::S3Options;

    /// Catches a listing that names a directory, a symbolic link or a file of a
    /// directory it does not descend into, and a look at files (`stat`) that fails when
    /// one it was given is gone — removed between the listing that named it and the look
    /// (cleanup's removals run beside its listings, so this happens).
    #[tokio::test]
    async fn a_listing_names_regular_files_and_a_look_leaves_out_the_gone() {
        let dir = tempfile::tempdir().expect("temp dir");
        let kept = dir.path().join("kept.parquet");
        std::fs::write(&kept, b"xy").expect("write");
        let deep = dir.path().join("a/b/deep.avro");
        std::fs::create_dir_all(deep.parent().expect("parent")).expect("mkdir");
        std::fs::write(&deep, b"x").expect("write");
        std::os::unix::fs::symlink(&kept, dir.path().join("link.parquet")).expect("symlink");
        let store = FileStore::Local;
        let mut named: Vec<PathBuf> = store
            .list_names(dir.path())
            .await
            .expect("list")
            .iter()
            .map(|file| file.path().to_path_buf())
            .collect();
        named.sort();
        assert_eq!(named, vec![deep.clone(), kept.clone()]);
        assert!(
            store
                .list_names(&dir.path().join("missing"))
                .await
                .expect("a missing directory lists as empty")
                .is_empty()
        );
        std::fs::remove_file(&deep).expect("remove");
        let looked: Vec<(PathBuf, u64)> = store
            .stat(named)
            .await
            .expect("stat")
            .into_iter()
            .map(|file| (file.path, file.size_bytes))
            .collect();
        assert_eq!(looked, vec![(kept, 2)]);
    }

    #[test]
    fn plain_paths_only() {
        let local = FileStore::Local;
        assert_eq!(local.path_of("file:///w/t"), Some(PathBuf::from("/w/t")));
        assert_eq!(local.path_of("w/t"), None);
        assert_eq!(local.path_of("/w/../t"), None);
        let warehouse = Warehouse::parse("s3://b/w", S3Options::default()).expect("parse");
        let object = FileStore::of(&warehouse);
        let table = object.path_of("s3://b/w/ns/t/").expect("an s3 location");
        assert!(PathBuf::from("s3://b/w/ns/t/data/x.parquet").starts_with(&table));
        assert!(!PathBuf::from("s3://b/w/ns/t2/data/x.parquet").starts_with(&table));
        assert_eq!(object.path_of("/w/ns/t"), None);
        assert_eq!(object.path_of("s3://b/w/../x"), None);
        assert_eq!(object.path_of("gs://b/w"), None);
    }
}
