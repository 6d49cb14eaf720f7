//! Write-behind uploads of manifests and manifest lists on an S3 warehouse, and the
//! barrier that makes them durable before a commit's pointer moves.
//!
//! An append writes a manifest, then a manifest list, then the catalog writes the
//! metadata JSON — on an object store three round trips one after the other, because
//! each write returns only once its object is stored. None of them needs the one before
//! it to be *stored*, only *written* (a manifest list names its manifests by location and
//! length, the metadata JSON its manifest list by location). So an S3 warehouse uploads
//! `<table>/metadata/*.avro` files behind the writer: closing one starts its upload and
//! returns; the upload is registered here, and [`PendingUploads::wait_under`] — called by
//! the catalog for every table of a release before the release is queued for its redb
//! transaction — waits until every upload under that table's location has returned. A
//! failed upload fails that release (with the store's error: `Unavailable`), and no
//! pointer ever names an object that is not stored. It is the object-store counterpart
//! of a local warehouse's `syncfs` before the pointer flip.
//!
//! Every manifest and manifest list iceberg and skade write lies under
//! `<table location>/metadata/` (iceberg's `SnapshotProducer`, `maintenance::merge`,
//! `maintenance::compact`), so waiting for the table's covers all of a commit's. Every
//! such writer holds the table's commit turn (`RedbCatalog::commit_turns`) from its first
//! manifest to its release, so what a release waits for is its own commit's (or the
//! leftovers of an earlier attempt that failed under the same turn: a failed one of
//! those fails this release too, once). A read of a location whose upload is still
//! pending waits for it first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::{BoxFuture, FutureExt, Shared};
use iceberg::{Error, ErrorKind, Result};

/// An upload's outcome, shareable between the barrier and readers waiting for it.
type PendingUpload = Shared<BoxFuture<'static, std::result::Result<(), Arc<Error>>>>;

/// The uploads of one warehouse still in flight, or failed and not yet reported to a
/// release (see the module docs).
#[derive(Debug, Default)]
pub struct PendingUploads {
    uploads: Mutex<HashMap<String, PendingUpload>>,
}

impl PendingUploads {
    /// Whether a location is uploaded behind its writer: a manifest or manifest list
    /// (`.../metadata/*.avro`).
    pub(crate) fn behind(location: &str) -> bool {
        location
            .rsplit_once("/metadata/")
            .is_some_and(|(_, name)| !name.contains('/') && name.ends_with(".avro"))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, PendingUpload>> {
        self.uploads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Starts `upload` of `location` on the runtime and registers it before it can
    /// finish; a successful upload unregisters itself, a failed one stays until a
    /// [`Self::wait_under`] reports it.
    pub(crate) fn start(
        self: &Arc<Self>,
        location: String,
        upload: impl std::future::Future<Output = Result<()>> + Send + 'static,
    ) {
        let (done, outcome) = tokio::sync::oneshot::channel();
        let outcome: PendingUpload = outcome
            .map(|sent| match sent {
                Ok(result) => result,
                Err(_) => Err(Arc::new(Error::new(
                    ErrorKind::Unexpected,
                    "the upload task ended without an outcome (runtime shut down)",
                ))),
            })
            .boxed()
            .shared();
        self.lock().insert(location.clone(), outcome);
        let uploads = Arc::clone(self);
        tokio::spawn(async move {
            let result = upload.await.map_err(Arc::new);
            if result.is_ok() {
                uploads.lock().remove(&location);
            }
            let _ = done.send(result);
        });
    }

    /// Waits for a pending upload of `location`, if any (its failure is left for the
    /// release to report).
    pub(crate) async fn settled(&self, location: &str) {
        let pending = self.lock().get(location).cloned();
        if let Some(outcome) = pending {
            let _ = outcome.await;
        }
    }

    /// Waits until every upload registered for the table at `table_location` (a table's
    /// location, `s3://bucket/...`; its uploads are the files directly in
    /// `<table_location>/metadata/`, so a table nested in its location is not waited
    /// for) has returned. Returns how many it waited for.
    ///
    /// # Errors
    /// `Unexpected` naming the first failed upload's location, with the store's error as
    /// its source (so it maps to `Unavailable`); every failed upload under the location
    /// is then forgotten.
    ///
    /// # Cancel safety
    /// Cancel safe: the uploads go on; a later call waits for them again.
    pub async fn wait_under(&self, table_location: &str) -> Result<usize> {
        let prefix = format!("{}/metadata/", table_location.trim_end_matches('/'));
        let pending: Vec<(String, PendingUpload)> = self
            .lock()
            .iter()
            .filter(|(location, _)| {
                location
                    .strip_prefix(&prefix)
                    .is_some_and(|name| !name.contains('/'))
            })
            .map(|(location, outcome)| (location.clone(), outcome.clone()))
            .collect();
        let waited = pending.len();
        let outcomes = futures::future::join_all(
            pending
                .into_iter()
                .map(|(location, outcome)| async move { (location, outcome.await) }),
        )
        .await;
        let mut failed = None;
        for (location, outcome) in outcomes {
            if let Err(source) = outcome {
                self.lock().remove(&location);
                failed.get_or_insert((location, source));
            }
        }
        match failed {
            None => Ok(waited),
            Some((location, source)) => Err(Error::new(
                ErrorKind::Unexpected,
                format!("upload of {location} failed; nothing of the commit is visible"),
            )
            .with_source(UploadFailed(source))),
        }
    }
}

/// A failed upload's error, shared by everyone who waited for it.
#[derive(Debug)]
struct UploadFailed(Arc<Error>);

impl std::fmt::Display for UploadFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for UploadFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(self.0.as_ref())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_metadata_avro_goes_behind() {
        assert!(PendingUploads::behind(
            "s3://b/w/t/metadata/snap-1-0-u.avro"
        ));
        assert!(PendingUploads::behind("s3://b/w/t/metadata/u-m0.avro"));
        assert!(!PendingUploads::behind(
            "s3://b/w/t/metadata/00001-u.metadata.json"
        ));
        assert!(!PendingUploads::behind("s3://b/w/t/data/x.avro"));
    }

    #[tokio::test]
    async fn a_failed_upload_fails_the_wait_under_its_table_once() {
        let uploads = Arc::new(PendingUploads::default());
        uploads.start("s3://b/t/metadata/ok.avro".into(), async { Ok(()) });
        uploads.start("s3://b/t/metadata/bad.avro".into(), async {
            Err(Error::new(ErrorKind::Unexpected, "refused"))
        });
        uploads.start("s3://b/other/metadata/bad.avro".into(), async {
            Err(Error::new(ErrorKind::Unexpected, "refused"))
        });
        uploads.start("s3://b/t/nested/metadata/bad.avro".into(), async {
            Err(Error::new(ErrorKind::Unexpected, "refused"))
        });
        let err = uploads
            .wait_under("s3://b/t")
            .await
            .expect_err("a failed upload");
        assert!(
            err.to_string().contains("s3://b/t/metadata/bad.avro"),
            "{err}"
        );
        assert_eq!(
            uploads.wait_under("s3://b/t").await.expect("reported once"),
            0
        );
        assert!(uploads.wait_under("s3://b/other").await.is_err());
        assert!(uploads.wait_under("s3://b/t/nested").await.is_err());
    }
}
