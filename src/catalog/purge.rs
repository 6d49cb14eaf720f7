//! Purging a dropped table's files (`DELETE …/tables/{table}?purgeRequested=true`, the
//! REST spec's `dropTable`): only files under the table's own location are removed.
//!
//! iceberg's `drop_table_data` deletes every file the metadata references, wherever it
//! lies; a table's metadata may name files elsewhere (a registered table, files added
//! from another table), so skade removes only what is under `<location>/`. When the table
//! owns that location (`locations.rs`), every file under its `data/` and `metadata/` goes
//! (orphans of failed commits too) and the emptied directories are removed; when it does
//! not (registered, created by another engine, or sharing the location), only this
//! table's referenced files that no table lying there references go. On an S3 warehouse
//! the same objects go, in batches ([`FileStore::remove`]); an object store has no
//! directories to remove.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use iceberg::spec::TableMetadata;
use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, Result, TableIdent};
use tracing::info;

use super::RedbCatalog;
use super::gc::ReferenceWalker;
use super::locations::locations_overlap;
use crate::storage::file_store::FileStore;

/// Removes `table`'s files under its location; `table` is already out of the catalog.
/// Returns how many files were removed.
///
/// When the table owns its location ([`super::Ownership::Owned`]: skade created it
/// there and nothing else lies at, inside or around it), every file under its `data/`
/// and `metadata/` goes (orphans of failed commits too), the emptied directories are
/// removed and so is its claim of the location. Otherwise only the files its metadata
/// references under its location go, and of those only the ones no table lying at,
/// inside or around it (of this catalog, or of another catalog name of the database)
/// references.
///
/// # Errors
/// `DataInvalid` for a location that is not a plain path of the warehouse's storage
/// (nothing removed); iceberg's error reading a manifest or a neighbouring table's
/// metadata (nothing removed then), or `Unexpected` for a file that could not be listed
/// or removed (those before it may be gone).
pub(super) async fn purge_files(catalog: &RedbCatalog, table: &Table) -> Result<usize> {
    let store = FileStore::of(catalog.warehouse());
    let raw = table.metadata().location();
    let Some(location) = store.path_of(raw) else {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "table {} has a location that is not a plain path of the warehouse {} ({raw}): nothing purged",
                table.identifier(),
                catalog.warehouse()
            ),
        ));
    };
    let owned = catalog
        .ownership(std::slice::from_ref(table))
        .await?
        .pop()
        .is_some_and(|o| o == super::Ownership::Owned);
    let mut walker = ReferenceWalker::new(catalog.written_manifests().clone());
    let mut protected = HashSet::new();
    if !owned {
        for neighbour in catalog.neighbours().await? {
            if !locations_overlap(&neighbour.location, &location) {
                continue;
            }
            let other = match &neighbour.ident {
                Some(ident) => match catalog.load_table(ident).await {
                    Ok(other) => other,
                    Err(e) if e.kind() == ErrorKind::TableNotFound => continue,
                    Err(e) => return Err(e),
                },
                // Another catalog name's table: read as it stands now.
                None => {
                    let metadata =
                        TableMetadata::read_from(catalog.file_io(), &neighbour.metadata_location)
                            .await?;
                    catalog.table_handle(
                        TableIdent::from_strs(["other-catalog", neighbour.name.as_str()])?,
                        neighbour.metadata_location.clone(),
                        metadata,
                    )?
                }
            };
            walker.references(&other, &mut protected).await?;
        }
    }
    let mut ours = HashSet::new();
    walker.references(table, &mut ours).await?;
    let ident = table.identifier().to_string();
    let failed = |e: crate::storage::StorageError| {
        Error::new(ErrorKind::Unexpected, format!("purge {ident}: {e}")).with_source(e)
    };

    let mut doomed: Vec<PathBuf> = ours
        .into_iter()
        .filter(|path| {
            store.is_plain(path) && path.starts_with(&location) && !protected.contains(path)
        })
        .collect();
    let dirs = [location.join("data"), location.join("metadata")];
    if owned {
        for dir in &dirs {
            let listed = store.list_names(dir).await.map_err(failed)?;
            doomed.extend(listed.into_iter().map(|file| file.path().to_path_buf()));
        }
    }
    doomed.sort();
    doomed.dedup();
    let files = doomed.len();
    store.remove(doomed).await.map_err(failed)?;
    if owned {
        let mut dirs = dirs.to_vec();
        dirs.push(location);
        store.remove_empty_dirs(dirs).await;
        catalog.release_location(table).await?;
    }
    info!(table = ident, files, owned, "purged");
    Ok(files)
}

/// Whether `path` is absolute and has no `..` (so `starts_with` means "lies under").
pub(crate) fn is_plain_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir))
}
