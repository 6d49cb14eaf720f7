//! Where a catalog's tables live: a local directory or an S3 prefix
//! (`docs/object-storage.md`).
//!
//! A local warehouse is written through [`crate::storage::local::WarehouseStorage`] and made
//! durable by one `syncfs(2)` before each pointer flip ([`crate::storage::durable`]). An S3
//! warehouse is written through iceberg's own OpenDAL storage
//! ([`crate::storage::object_store::ObjectStorage`]): an object PUT (or a completed multipart
//! upload) that returned is durable, so nothing is synced — every data file, manifest,
//! manifest list and metadata JSON of a commit has been uploaded before its release is
//! queued, and the redb transaction moves the pointer only after that.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use iceberg::io::{
    FileIO, FileIOBuilder, S3_ACCESS_KEY_ID, S3_ENDPOINT, S3_PATH_STYLE_ACCESS, S3_REGION,
    S3_SECRET_ACCESS_KEY, S3_SESSION_TOKEN,
};
use iceberg::{Error, ErrorKind, Result};

use crate::storage::local as storage;
use crate::storage::object_store::{ObjectStorage, ObjectStorageFactory, ObjectStoreMetrics};
use crate::storage::uploads::PendingUploads;

/// The key Iceberg Java's AWS clients read their region from (`AwsClientProperties.CLIENT_REGION`).
pub const CLIENT_REGION: &str = "client.region";

/// The region used when neither `--s3-region` nor `AWS_REGION`/`AWS_DEFAULT_REGION` says
/// one (S3-compatible stores mostly ignore it, but requests are signed with it).
pub const DEFAULT_S3_REGION: &str = "us-east-1";

/// How skade reaches an S3 warehouse. Credentials are not here: they come from the
/// standard AWS chain (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN`,
/// then `AWS_PROFILE` and `~/.aws/`), as OpenDAL's S3 service loads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct S3Options {
    /// The S3 endpoint URL (e.g. `http://127.0.0.1:9000`); `None`: AWS's own.
    pub endpoint: Option<String>,
    /// The signing region; `None`: `AWS_REGION`, `AWS_DEFAULT_REGION`, then
    /// [`DEFAULT_S3_REGION`].
    pub region: Option<String>,
    /// Address buckets as `endpoint/bucket/key` (what most S3-compatible stores need)
    /// instead of `bucket.endpoint/key`, Iceberg's default.
    pub path_style_access: bool,
    /// Hand the server's AWS credentials to REST clients that ask for vended credentials
    /// (`X-Iceberg-Access-Delegation: vended-credentials`).
    pub vend_credentials: bool,
}

/// A warehouse root: a local directory or `s3://bucket/prefix`.
#[derive(Debug, Clone)]
pub enum Warehouse {
    /// Tables under a local directory (absolute once opened).
    Local(PathBuf),
    /// Tables under an S3 prefix.
    S3(S3Warehouse),
}

/// An S3 warehouse: bucket, key prefix and how to reach them.
#[derive(Debug, Clone)]
pub struct S3Warehouse {
    bucket: String,
    /// The key prefix without leading or trailing `/` (may be empty).
    prefix: String,
    options: S3Options,
    /// The region requests are signed with (resolved from the options and environment).
    region: String,
    metrics: Option<ObjectStoreMetrics>,
    /// Manifests and manifest lists still uploading (shared by every storage of this
    /// warehouse; see [`crate::storage::uploads`]).
    uploads: Arc<PendingUploads>,
}

impl Warehouse {
    /// Reads `--warehouse`: `s3://bucket[/prefix]` is an S3 warehouse, anything else a
    /// local directory.
    ///
    /// # Errors
    /// `DataInvalid` for an `s3://` URI without a bucket, or with a query or fragment.
    pub fn parse(location: &str, options: S3Options) -> Result<Self> {
        let Some(rest) = location.strip_prefix("s3://") else {
            return Ok(Self::Local(PathBuf::from(location)));
        };
        let invalid = |why: &str| {
            Error::new(
                ErrorKind::DataInvalid,
                format!("--warehouse {location:?}: {why} (expected s3://bucket/prefix)"),
            )
        };
        if rest.contains(['?', '#']) {
            return Err(invalid("a query or fragment is not allowed"));
        }
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(invalid("the bucket is missing"));
        }
        let region = options
            .region
            .clone()
            .or_else(|| std::env::var("AWS_REGION").ok())
            .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
            .filter(|r| !r.is_empty())
            .unwrap_or_else(|| DEFAULT_S3_REGION.to_string());
        Ok(Self::S3(S3Warehouse {
            bucket: bucket.to_string(),
            prefix: prefix.trim_matches('/').to_string(),
            options,
            region,
            metrics: None,
            uploads: Arc::default(),
        }))
    }

    /// Counts this warehouse's object-store operations on `metrics` (S3 only; a local
    /// warehouse ignores it).
    pub fn with_object_store_metrics(mut self, metrics: ObjectStoreMetrics) -> Self {
        if let Self::S3(s3) = &mut self {
            s3.metrics = Some(metrics);
        }
        self
    }

    /// The local directory, `None` for an object-store warehouse.
    pub fn local_path(&self) -> Option<&Path> {
        match self {
            Self::Local(path) => Some(path),
            Self::S3(_) => None,
        }
    }

    /// The object storage of an S3 warehouse (counting on its metrics), for listing and
    /// removing objects; `None` for a local warehouse.
    pub fn object_storage(&self) -> Option<ObjectStorage> {
        match self {
            Self::Local(_) => None,
            Self::S3(s3) => Some(
                ObjectStorage::new(&s3.storage_properties(), s3.metrics.clone())
                    .with_uploads(s3.uploads.clone()),
            ),
        }
    }

    /// The write-behind uploads of an S3 warehouse, which a release must wait for
    /// ([`PendingUploads::wait_under`]) before its pointers move; `None` for a local
    /// warehouse (made durable by `syncfs` instead).
    pub fn pending_uploads(&self) -> Option<&Arc<PendingUploads>> {
        match self {
            Self::Local(_) => None,
            Self::S3(s3) => Some(&s3.uploads),
        }
    }

    /// Whether a pointer flip must first sync the local filesystem (`syncfs`).
    pub fn needs_sync(&self) -> bool {
        matches!(self, Self::Local(_))
    }

    /// The root as a location string: an absolute path or `s3://bucket/prefix`.
    pub fn root(&self) -> String {
        match self {
            Self::Local(path) => path.to_string_lossy().into_owned(),
            Self::S3(s3) => s3.root(),
        }
    }

    /// Whether `location` (a metadata, manifest or data file location as the catalog
    /// stores it) lies below this warehouse's root: for a local warehouse a path (or
    /// `file://` URL) under its directory, compared by path components; for S3 an
    /// `s3://bucket/prefix/...` location under its prefix. Only such locations are read
    /// and written through this warehouse's storage ([`Self::file_io`]).
    pub fn holds(&self, location: &str) -> bool {
        match self {
            Self::Local(root) => local_path(location).starts_with(root),
            Self::S3(s3) => {
                let root = s3.root();
                location
                    .strip_prefix(root.as_str())
                    .is_some_and(|rest| rest.starts_with('/'))
            }
        }
    }

    /// The default location of table `name` in `namespace`:
    /// `<root>/<namespace...>/<table>`.
    pub fn table_location<'a>(
        &self,
        namespace: impl IntoIterator<Item = &'a String>,
        name: &str,
    ) -> String {
        match self {
            Self::Local(path) => {
                let mut path = path.clone();
                path.extend(namespace);
                path.push(name);
                path.to_string_lossy().into_owned()
            }
            Self::S3(s3) => {
                let mut location = s3.root();
                for part in namespace {
                    location.push('/');
                    location.push_str(part);
                }
                location.push('/');
                location.push_str(name);
                location
            }
        }
    }

    /// The `FileIO` tables of this warehouse read and write through.
    ///
    /// # Errors
    /// iceberg's error building the `FileIO`.
    pub fn file_io(&self) -> Result<FileIO> {
        match self {
            Self::Local(_) => Ok(storage::file_io()),
            Self::S3(s3) => Ok(FileIOBuilder::new(Arc::new(ObjectStorageFactory::new(
                s3.metrics.clone(),
                s3.uploads.clone(),
            )))
            .with_props(s3.storage_properties())
            .build()),
        }
    }

    /// The table `config` a REST catalog hands readers so they open this warehouse's
    /// paths with no configuration of their own (Iceberg REST spec,
    /// `LoadTableResult.config`; keys as iceberg's `S3FileIOProperties`). Credentials are
    /// included only when `vended` (the client asked for vended credentials) and the
    /// server is configured to vend them. Empty for a local warehouse.
    pub fn reader_config(&self, vended: bool) -> HashMap<String, String> {
        match self {
            Self::Local(_) => HashMap::new(),
            Self::S3(s3) => {
                let mut config = s3.storage_properties();
                // Iceberg Java's S3FileIO reads the region from `client.region`
                // (`AwsClientProperties`); pyiceberg and iceberg-rust from `s3.region`.
                config.insert(CLIENT_REGION.to_string(), s3.region.clone());
                if vended && s3.options.vend_credentials {
                    for (key, var) in [
                        (S3_ACCESS_KEY_ID, "AWS_ACCESS_KEY_ID"),
                        (S3_SECRET_ACCESS_KEY, "AWS_SECRET_ACCESS_KEY"),
                        (S3_SESSION_TOKEN, "AWS_SESSION_TOKEN"),
                    ] {
                        if let Ok(value) = std::env::var(var) {
                            config.insert(key.to_string(), value);
                        }
                    }
                }
                config
            }
        }
    }
}

impl std::fmt::Display for Warehouse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.root())
    }
}

impl S3Warehouse {
    /// `s3://bucket/prefix` (no trailing `/`).
    fn root(&self) -> String {
        if self.prefix.is_empty() {
            format!("s3://{}", self.bucket)
        } else {
            format!("s3://{}/{}", self.bucket, self.prefix)
        }
    }

    /// The `s3.*` properties of this warehouse's `FileIO`, by iceberg's standard names.
    fn storage_properties(&self) -> HashMap<String, String> {
        let mut props = HashMap::new();
        if let Some(endpoint) = &self.options.endpoint {
            props.insert(S3_ENDPOINT.to_string(), endpoint.clone());
        }
        props.insert(S3_REGION.to_string(), self.region.clone());
        props.insert(
            S3_PATH_STYLE_ACCESS.to_string(),
            self.options.path_style_access.to_string(),
        );
        props
    }
}

/// The local path of a location as iceberg stores it (`/abs/path` or `file:///abs/path`).
pub(crate) fn local_path(location: &str) -> PathBuf {
    let path = location
        .strip_prefix("file://")
        .or_else(|| location.strip_prefix("file:"))
        .unwrap_or(location);
    PathBuf::from(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_uri_names_bucket_and_prefix() {
        let w = Warehouse::parse("s3://b/p/q/", S3Options::default()).expect("parse");
        assert_eq!(w.root(), "s3://b/p/q");
        let ns = ["ns".to_string()];
        assert_eq!(w.table_location(&ns, "t"), "s3://b/p/q/ns/t");
        let bare = Warehouse::parse("s3://b", S3Options::default()).expect("parse");
        assert_eq!(bare.table_location(&ns, "t"), "s3://b/ns/t");
    }

    #[test]
    fn holds_only_locations_below_the_root() {
        let s3 = Warehouse::parse("s3://lake/skade", S3Options::default()).expect("parse");
        assert!(s3.holds("s3://lake/skade/demo/people/metadata/00001.metadata.json"));
        assert!(!s3.holds("s3://lake/skade2/demo/people/metadata/00001.metadata.json"));
        assert!(!s3.holds("/data/warehouse/demo/people/metadata/00001.metadata.json"));
        let local = Warehouse::Local(PathBuf::from("/data/warehouse"));
        assert!(local.holds("/data/warehouse/demo/people/metadata/00001.metadata.json"));
        assert!(local.holds("file:///data/warehouse/demo/people/metadata/1.metadata.json"));
        assert!(!local.holds("/data/warehouse2/demo/people/metadata/1.metadata.json"));
        assert!(!local.holds("s3://lake/skade/demo/people/metadata/1.metadata.json"));
    }

    #[test]
    fn s3_uri_without_bucket_is_refused() {
        assert!(Warehouse::parse("s3:///p", S3Options::default()).is_err());
        assert!(Warehouse::parse("s3://b/p?x=1", S3Options::default()).is_err());
    }

    #[test]
    fn credentials_are_vended_only_when_asked_and_allowed() {
        let options = S3Options {
            endpoint: Some("http://127.0.0.1:1".into()),
            region: Some("r".into()),
            path_style_access: true,
            vend_credentials: false,
        };
        let w = Warehouse::parse("s3://b", options).expect("parse");
        let config = w.reader_config(true);
        assert_eq!(
            config.get(S3_ENDPOINT).map(String::as_str),
            Some("http://127.0.0.1:1")
        );
        assert_eq!(
            config.get(S3_PATH_STYLE_ACCESS).map(String::as_str),
            Some("true")
        );
        assert!(!config.contains_key(S3_SECRET_ACCESS_KEY));
        // Catches Spark (Iceberg Java's S3FileIO) finding no region in the config.
        assert_eq!(config.get(S3_REGION).map(String::as_str), Some("r"));
        assert_eq!(config.get(CLIENT_REGION).map(String::as_str), Some("r"));
    }
}
