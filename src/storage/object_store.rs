//! An S3 warehouse's storage: iceberg's OpenDAL storage (`iceberg-storage-opendal`),
//! with uploads in parts several at once, and every operation counted.
//!
//! Reads, stats and deletes are `OpenDalStorage::S3`'s own. Writes go through an OpenDAL
//! operator built from the same `S3Config` with an explicit part size and part
//! concurrency ([`PART_BYTES`], [`PARTS_IN_FLIGHT`]): `OpenDalStorage` writes a large
//! file as 5 MiB parts one after the other. A write returns only once its object is
//! complete (a PUT, or a completed multipart upload), and an object that S3 acknowledged
//! is durable — so the catalog needs no sync before it moves a pointer; a failed upload
//! fails the write and so the commit that needed it. Manifests and manifest lists are
//! the exception: they upload behind their writer and the catalog waits for them before
//! the pointer moves ([`super::uploads`]); a commit takes its parent's manifest list from
//! memory, never from the store (`catalog::manifest_cache`). Listing, single-object
//! stats and batch deletes for cleanup, gc and purge: [`ObjectStorage::list`],
//! [`ObjectStorage::stat`], [`ObjectStorage::delete_all`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use iceberg::io::{
    FileMetadata, FileRead, FileWrite, InputFile, OutputFile, S3_ACCESS_KEY_ID, S3_ENDPOINT,
    S3_PATH_STYLE_ACCESS, S3_REGION, S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN, Storage,
    StorageConfig, StorageFactory,
};
use iceberg::{Error, ErrorKind, Result};
use iceberg_storage_opendal::OpenDalStorage;
use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::services::S3Config;
use opendal::{Configurator, Operator};

use super::uploads::PendingUploads;
use serde::{Deserialize, Serialize};

/// Bytes per part of a multipart upload (S3's minimum is 5 MiB but for the last part).
pub const PART_BYTES: usize = 8 * 1024 * 1024;
/// Parts of one file uploaded at once.
pub const PARTS_IN_FLIGHT: usize = 4;

/// The object-store metric handles (`skade_object_store_*`, registered by
/// [`crate::metrics`]), label `op` = `read` | `write` | `stat` | `delete` | `list`. Only
/// this module records on them.
#[derive(Debug, Clone)]
pub struct ObjectStoreMetrics {
    /// Operations started.
    requests: prometheus::IntCounterVec,
    /// Operations that failed.
    errors: prometheus::IntCounterVec,
    /// Seconds per operation (a whole upload for `write`).
    duration: prometheus::HistogramVec,
}

impl ObjectStoreMetrics {
    /// Handles over the registered vectors: `requests` counts operations started,
    /// `errors` those that failed, `duration` their seconds (a whole upload for
    /// `write`); each has the one label `op`.
    pub(crate) fn new(
        requests: prometheus::IntCounterVec,
        errors: prometheus::IntCounterVec,
        duration: prometheus::HistogramVec,
    ) -> Self {
        Self {
            requests,
            errors,
            duration,
        }
    }

    /// Records one operation `op` that began at `started` and succeeded when `ok`.
    fn observe(&self, op: &str, started: Instant, ok: bool) {
        self.requests.with_label_values(&[op]).inc();
        if !ok {
            self.errors.with_label_values(&[op]).inc();
        }
        self.duration
            .with_label_values(&[op])
            .observe(started.elapsed().as_secs_f64());
    }
}

/// Builds [`ObjectStorage`] from a `FileIO`'s `s3.*` properties.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ObjectStorageFactory {
    #[serde(skip)]
    metrics: Option<ObjectStoreMetrics>,
    #[serde(skip)]
    uploads: Arc<PendingUploads>,
}

impl ObjectStorageFactory {
    /// A factory whose storages count their operations on `metrics` and register their
    /// write-behind uploads in `uploads` (the warehouse's, awaited by the catalog before
    /// a pointer moves).
    pub fn new(metrics: Option<ObjectStoreMetrics>, uploads: Arc<PendingUploads>) -> Self {
        Self { metrics, uploads }
    }
}

#[typetag::serde]
impl StorageFactory for ObjectStorageFactory {
    fn build(&self, config: &StorageConfig) -> Result<Arc<dyn Storage>> {
        Ok(Arc::new(
            ObjectStorage::new(config.props(), self.metrics.clone())
                .with_uploads(self.uploads.clone()),
        ))
    }
}

/// S3 storage for `s3://bucket/key` paths (see the module docs).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectStorage {
    inner: OpenDalStorage,
    config: Arc<S3Config>,
    #[serde(skip)]
    metrics: Option<ObjectStoreMetrics>,
    #[serde(skip)]
    uploads: Arc<PendingUploads>,
}

impl ObjectStorage {
    /// Storage configured by iceberg's standard `s3.*` properties (`s3.endpoint`,
    /// `s3.region`, `s3.path-style-access`, `s3.access-key-id`, `s3.secret-access-key`,
    /// `s3.session-token`); missing credentials come from the AWS environment/profile.
    pub fn new(props: &HashMap<String, String>, metrics: Option<ObjectStoreMetrics>) -> Self {
        let config = Arc::new(s3_config(props));
        Self {
            inner: OpenDalStorage::S3 {
                config: config.clone(),
                customized_credential_load: None,
            },
            config,
            metrics,
            uploads: Arc::default(),
        }
    }

    /// Registers this storage's write-behind uploads in `uploads` (see
    /// [`super::uploads`]).
    pub fn with_uploads(mut self, uploads: Arc<PendingUploads>) -> Self {
        self.uploads = uploads;
        self
    }

    /// An operator on `path`'s bucket and the key of `path` in it.
    fn operator<'a>(&self, path: &'a str) -> Result<(Operator, &'a str)> {
        let (bucket, key) = split_s3(path)?;
        let builder = (*self.config).clone().into_builder().bucket(bucket);
        let op = Operator::new(builder)
            .map_err(from_opendal)?
            .finish()
            .layer(TimeoutLayer::new())
            .layer(RetryLayer::new());
        Ok((op, key))
    }

    async fn observed<T>(
        &self,
        op: &str,
        fut: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let started = Instant::now();
        let out = fut.await;
        if let Some(metrics) = &self.metrics {
            metrics.observe(op, started, out.is_ok());
        }
        out
    }

    /// Every object under `prefix` (an `s3://bucket/...` location, taken as a directory)
    /// with its size in bytes and last-modified time, recursively.
    ///
    /// # Errors
    /// The object store's error listing.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ListedObject>> {
        let (bucket, _) = split_s3(prefix)?;
        let (op, key) = self.operator(prefix)?;
        let dir = if key.is_empty() || key.ends_with('/') {
            key.to_string()
        } else {
            format!("{key}/")
        };
        let entries = self
            .observed("list", async {
                op.list_with(&dir)
                    .recursive(true)
                    .await
                    .map_err(from_opendal)
            })
            .await?;
        Ok(entries
            .into_iter()
            .filter(|e| e.metadata().is_file())
            .map(|e| ListedObject {
                location: format!("s3://{bucket}/{}", e.path()),
                size_bytes: e.metadata().content_length(),
                modified: e
                    .metadata()
                    .last_modified()
                    .map(std::time::SystemTime::from),
            })
            .collect())
    }

    /// The object at `location` (`s3://bucket/key`) with its size and last-modified
    /// time; `None` when there is none.
    ///
    /// # Errors
    /// The object store's error (other than not found).
    pub async fn stat(&self, location: &str) -> Result<Option<ListedObject>> {
        let (op, key) = self.operator(location)?;
        let stat = self
            .observed("stat", async {
                match op.stat(key).await {
                    Ok(meta) => Ok(Some(meta)),
                    Err(e) if e.kind() == opendal::ErrorKind::NotFound => Ok(None),
                    Err(e) => Err(from_opendal(e)),
                }
            })
            .await?;
        Ok(stat.map(|meta| ListedObject {
            location: location.to_string(),
            size_bytes: meta.content_length(),
            modified: meta.last_modified().map(std::time::SystemTime::from),
        }))
    }

    /// Deletes the objects at `locations` (`s3://bucket/key`), in batches per bucket (S3
    /// `DeleteObjects`, up to 1000 keys a request); an object already gone is not an
    /// error.
    ///
    /// # Errors
    /// The object store's error; objects of earlier batches may be gone by then.
    pub async fn delete_all(&self, locations: &[String]) -> Result<()> {
        let mut by_bucket: HashMap<&str, Vec<&str>> = HashMap::new();
        for location in locations {
            let (bucket, _) = split_s3(location)?;
            by_bucket.entry(bucket).or_default().push(location);
        }
        for (_, locations) in by_bucket {
            let (op, _) = self.operator(locations[0])?;
            let keys = locations
                .iter()
                .map(|l| split_s3(l).map(|(_, key)| key.to_string()))
                .collect::<Result<Vec<_>>>()?;
            self.observed("delete", async {
                op.delete_iter(keys).await.map_err(from_opendal)
            })
            .await?;
        }
        Ok(())
    }
}

/// One object found by [`ObjectStorage::list`].
#[derive(Debug, Clone)]
pub struct ListedObject {
    /// `s3://bucket/key`.
    pub location: String,
    /// Its size in bytes.
    pub size_bytes: u64,
    /// When it was last written, when the store says.
    pub modified: Option<std::time::SystemTime>,
}

#[async_trait]
#[typetag::serde]
impl Storage for ObjectStorage {
    async fn exists(&self, path: &str) -> Result<bool> {
        self.uploads.settled(path).await;
        self.observed("stat", self.inner.exists(path)).await
    }

    async fn metadata(&self, path: &str) -> Result<FileMetadata> {
        self.uploads.settled(path).await;
        self.observed("stat", self.inner.metadata(path)).await
    }

    async fn read(&self, path: &str) -> Result<Bytes> {
        self.uploads.settled(path).await;
        self.observed("read", self.inner.read(path)).await
    }

    async fn reader(&self, path: &str) -> Result<Box<dyn FileRead>> {
        self.uploads.settled(path).await;
        self.observed("read", self.inner.reader(path)).await
    }

    async fn write(&self, path: &str, bs: Bytes) -> Result<()> {
        let (op, key) = self.operator(path)?;
        self.observed("write", async {
            op.write_with(key, bs)
                .chunk(PART_BYTES)
                .concurrent(PARTS_IN_FLIGHT)
                .await
                .map(|_| ())
                .map_err(from_opendal)
        })
        .await
    }

    async fn writer(&self, path: &str) -> Result<Box<dyn FileWrite>> {
        // Manifests and manifest lists upload behind their writer (on a runtime, where
        // the upload can run on its own): see `super::uploads`.
        if PendingUploads::behind(path) && tokio::runtime::Handle::try_current().is_ok() {
            split_s3(path)?;
            return Ok(Box::new(BehindWrite {
                storage: self.clone(),
                location: path.to_string(),
                bytes: Vec::new(),
            }));
        }
        let (op, key) = self.operator(path)?;
        let writer = op
            .writer_with(key)
            .chunk(PART_BYTES)
            .concurrent(PARTS_IN_FLIGHT)
            .await
            .map_err(from_opendal)?;
        Ok(Box::new(ObjectWrite {
            writer,
            started: Instant::now(),
            metrics: self.metrics.clone(),
        }))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        self.observed("delete", self.inner.delete(path)).await
    }

    async fn delete_prefix(&self, path: &str) -> Result<()> {
        self.observed("delete", self.inner.delete_prefix(path))
            .await
    }

    async fn delete_stream(&self, paths: BoxStream<'static, String>) -> Result<()> {
        self.observed("delete", self.inner.delete_stream(paths))
            .await
    }

    fn new_input(&self, path: &str) -> Result<InputFile> {
        Ok(InputFile::new(Arc::new(self.clone()), path.to_string()))
    }

    fn new_output(&self, path: &str) -> Result<OutputFile> {
        Ok(OutputFile::new(Arc::new(self.clone()), path.to_string()))
    }
}

/// A manifest or manifest list gathered in memory; `close` starts its upload and returns
/// (the catalog waits for it before any pointer names it: [`PendingUploads::wait_under`]).
struct BehindWrite {
    storage: ObjectStorage,
    location: String,
    bytes: Vec<u8>,
}

#[async_trait]
impl FileWrite for BehindWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        self.bytes.extend_from_slice(&bs);
        Ok(())
    }

    async fn close(&mut self) -> Result<()> {
        let bytes = Bytes::from(std::mem::take(&mut self.bytes));
        let (storage, location) = (self.storage.clone(), self.location.clone());
        self.storage
            .uploads
            .start(self.location.clone(), async move {
                storage.write(&location, bytes).await
            });
        Ok(())
    }
}

/// An upload in progress; `close` completes it (and only then is the object there).
struct ObjectWrite {
    writer: opendal::Writer,
    started: Instant,
    metrics: Option<ObjectStoreMetrics>,
}

#[async_trait]
impl FileWrite for ObjectWrite {
    async fn write(&mut self, bs: Bytes) -> Result<()> {
        let out = self.writer.write(bs).await.map_err(from_opendal);
        if out.is_err()
            && let Some(metrics) = &self.metrics
        {
            metrics.observe("write", self.started, false);
        }
        out
    }

    async fn close(&mut self) -> Result<()> {
        let out = self.writer.close().await.map(|_| ()).map_err(from_opendal);
        if let Some(metrics) = &self.metrics {
            metrics.observe("write", self.started, out.is_ok());
        }
        out
    }
}

/// iceberg's `S3Config` for the standard `s3.*` properties skade sets (the same keys
/// `iceberg-storage-opendal` reads, and the REST catalog hands readers).
fn s3_config(props: &HashMap<String, String>) -> S3Config {
    let mut cfg = S3Config::default();
    cfg.endpoint = props.get(S3_ENDPOINT).cloned();
    cfg.region = props.get(S3_REGION).cloned();
    // Iceberg's default is virtual-host style; `s3.path-style-access=true` turns it off.
    cfg.enable_virtual_host_style = !props
        .get(S3_PATH_STYLE_ACCESS)
        .is_some_and(|v| matches!(v.to_lowercase().as_str(), "true" | "t" | "1" | "on"));
    cfg.access_key_id = props.get(S3_ACCESS_KEY_ID).cloned();
    cfg.secret_access_key = props.get(S3_SECRET_ACCESS_KEY).cloned();
    cfg.session_token = props.get(S3_SESSION_TOKEN).cloned();
    cfg
}

/// `s3://bucket/key` → (`bucket`, `key`).
fn split_s3(path: &str) -> Result<(&str, &str)> {
    let rest = path
        .split_once("://")
        .map(|(_, rest)| rest)
        .ok_or_else(|| Error::new(ErrorKind::DataInvalid, format!("not an s3 path: {path}")))?;
    let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!("s3 path without a bucket: {path}"),
        ));
    }
    Ok((bucket, key))
}

/// An OpenDAL error as iceberg's `Unexpected`, keeping it as the source (so
/// [`crate::error`] can tell an object-store failure: `Unavailable`).
fn from_opendal(e: opendal::Error) -> Error {
    Error::new(ErrorKind::Unexpected, "object store operation failed").with_source(e)
}

/// Whether `e` (or one of its sources) is an object-store failure.
pub fn is_object_store_error(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cause {
        if err.downcast_ref::<opendal::Error>().is_some() {
            return true;
        }
        cause = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_paths_split_into_bucket_and_key() {
        assert_eq!(
            split_s3("s3://b/k/x.parquet").expect("split"),
            ("b", "k/x.parquet")
        );
        assert_eq!(split_s3("s3://b").expect("split"), ("b", ""));
        assert!(split_s3("s3:///k").is_err());
    }
}
