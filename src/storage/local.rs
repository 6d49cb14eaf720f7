//! The warehouse's file storage: iceberg's local-filesystem storage without its per-file
//! fsync.
//!
//! iceberg 0.10.1's `LocalFsStorage` fsyncs every file written through
//! `OutputFile::writer` when it is closed — each manifest and manifest list of a commit,
//! two fsyncs per snapshot — from inside its async functions, so they also block a
//! runtime worker. skade does not need them: a commit becomes visible only when the
//! catalog flips the table's pointer, and before every flip the catalog `syncfs`es the
//! warehouse's filesystem ([`super::durable`]), which makes every file written until then
//! durable at once: data files, manifests, manifest lists and metadata JSON
//! (`docs/internals.md`, "Durability"). A crash before the flip leaves unreferenced files, never a pointer to a
//! file that is not on disk (`tests/crash/`). So [`WarehouseStorage`] is `LocalFsStorage`
//! whose writers only hand their bytes to the page cache on close.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, LocalFsStorage, OutputFile, Storage,
    StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use serde::{Deserialize, Serialize};

/// Local-filesystem storage for `file:` paths (and plain absolute paths) whose writers do
/// not fsync on close; durability comes from the catalog's `syncfs` before each commit.
/// Everything but [`Storage::writer`] is `LocalFsStorage`'s.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WarehouseStorage;

/// Builds [`WarehouseStorage`] for a `FileIO` (see [`file_io`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct WarehouseStorageFactory;

#[typetag::serde]
impl StorageFactory for WarehouseStorageFactory {
    fn build(&self, _config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(WarehouseStorage))
    }
}

/// The `FileIO` the catalog and the write path use for the warehouse.
pub fn file_io() -> iceberg::io::FileIO {
    iceberg::io::FileIOBuilder::new(Arc::new(WarehouseStorageFactory)).build()
}

#[async_trait]
#[typetag::serde]
impl Storage for WarehouseStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        LocalFsStorage.exists(path).await
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        LocalFsStorage.metadata(path).await
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        LocalFsStorage.read(path).await
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        LocalFsStorage.reader(path).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        LocalFsStorage.write(path, bs).await
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        let path = local_path(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_error("create directory", parent, e))?;
        }
        let file = std::fs::File::create(&path).map_err(|e| io_error("create", &path, e))?;
        Ok(Box::new(PageCacheWrite {
            file: Some(file),
            path,
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        LocalFsStorage.delete(path).await
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        LocalFsStorage.delete_prefix(path).await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        LocalFsStorage.delete_stream(paths).await
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// A file being written; closing it flushes nothing beyond the page cache.
struct PageCacheWrite {
    file: Option<std::fs::File>,
    path: PathBuf,
}

#[async_trait]
impl FileWrite for PageCacheWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::new(ErrorKind::DataInvalid, "write to a closed file"))?;
        file.write_all(&bs)
            .map_err(|e| io_error("write", &self.path, e))
    }

    async fn close(&mut self) -> Result<()> {
        match self.file.take() {
            Some(_) => Ok(()),
            None => Err(Error::new(ErrorKind::DataInvalid, "file already closed")),
        }
    }
}

/// `file:///p`, `file:/p` and `/p` → `/p`, as `LocalFsStorage` reads paths.
fn local_path(path: &str) -> PathBuf {
    let stripped = path
        .strip_prefix("file://")
        .or_else(|| path.strip_prefix("file:"))
        .unwrap_or(path);
    if stripped.starts_with('/') {
        PathBuf::from(stripped)
    } else {
        PathBuf::from(format!("/{stripped}"))
    }
}

fn io_error(what: &str, path: &std::path::Path, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::Unexpected,
        format!("{what} {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_read_as_local_fs_storage_reads_them() {
        assert_eq!(local_path("file:///a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("file:/a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("file://a/b"), PathBuf::from("/a/b"));
        assert_eq!(local_path("/a/b"), PathBuf::from("/a/b"));
    }

    #[tokio::test]
    async fn writer_round_trips_through_file_io() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = format!("file://{}/x/y.bin", dir.path().display());
        let io = file_io();
        let mut w = io
            .new_output(&path)
            .expect("output")
            .writer()
            .await
            .expect("writer");
        w.write(Bytes::from_static(b"abc")).await.expect("write");
        w.write(Bytes::from_static(b"def")).await.expect("write");
        w.close().await.expect("close");
        assert!(w.close().await.is_err(), "a second close is an error");
        let back = io
            .new_input(&path)
            .expect("input")
            .read()
            .await
            .expect("read");
        assert_eq!(&back[..], b"abcdef");
    }
}
