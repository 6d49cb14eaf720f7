//! Purging a dropped table's files (`DELETE …/tables/{table}?purgeRequested=true`, the
//! REST spec's `dropTable`): only files under the table's own location are removed.
//!
//! iceberg's `drop_table_data` deletes every file the metadata references, wherever it
//! lies; a table's metadata may name files elsewhere (a registered table, files added
//! from another table), so skade removes only what is under `<location>/`. When no other
//! table of the catalog shares or nests in that location, every file under its `data/`
//! and `metadata/` goes (orphans of failed commits too) and the emptied directories are
//! removed; when one does, only this table's referenced files that the other tables do
//! not reference go.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use iceberg::table::Table;
use iceberg::{Catalog, Error, ErrorKind, Result};
use tracing::info;

use super::RedbCatalog;
use super::gc::{ReferenceWalker, files_under, local_path};

/// Removes `table`'s files under its location; `table` is already out of the catalog.
/// Returns how many files were removed.
///
/// # Errors
/// iceberg's error reading a manifest (nothing removed then), or `Unexpected` for a file
/// that could not be removed (those before it are gone).
pub(super) async fn purge_files(catalog: &RedbCatalog, table: &Table) -> Result<usize> {
    let raw = table.metadata().location();
    if raw.contains("://") && !raw.starts_with("file:") {
        // An object-store table: dropped, its objects left in place, as online cleanup
        // leaves them there (README, "Object storage").
        tracing::warn!(table = %table.identifier(), location = raw, "purge: objects on an object store are left in place");
        return Ok(0);
    }
    let location = local_path(raw);
    if !is_plain_absolute(&location) {
        return Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "table {} has a location that is not a plain absolute path ({}): nothing purged",
                table.identifier(),
                location.display()
            ),
        ));
    }
    let mut walker = ReferenceWalker::default();
    let mut protected = HashSet::new();
    let mut shared = false;
    for other in catalog.all_tables().await? {
        let other = match catalog.load_table(&other).await {
            Ok(other) => other,
            Err(e) if e.kind() == ErrorKind::TableNotFound => continue,
            Err(e) => return Err(e),
        };
        let theirs = local_path(other.metadata().location());
        if theirs.starts_with(&location) || location.starts_with(&theirs) {
            shared = true;
            walker.references(&other, &mut protected).await?;
        }
    }
    let mut ours = HashSet::new();
    walker.references(table, &mut ours).await?;
    let ident = table.identifier().to_string();
    tokio::task::spawn_blocking(move || remove(&ident, &location, &ours, &protected, shared))
        .await
        .map_err(|e| Error::new(ErrorKind::Unexpected, "purge task failed").with_source(e))?
}

/// Removes the files of the module docs; blocking.
fn remove(
    table: &str,
    location: &Path,
    ours: &HashSet<PathBuf>,
    protected: &HashSet<PathBuf>,
    shared: bool,
) -> Result<usize> {
    let mut doomed: Vec<PathBuf> = ours
        .iter()
        .filter(|path| {
            is_plain_absolute(path) && path.starts_with(location) && !protected.contains(*path)
        })
        .cloned()
        .collect();
    let dirs = [location.join("data"), location.join("metadata")];
    if !shared {
        for dir in &dirs {
            let listed = files_under(dir)
                .map_err(|e| Error::new(ErrorKind::Unexpected, format!("purge {table}: {e}")))?;
            doomed.extend(listed.into_iter().map(|(path, _)| path));
        }
    }
    doomed.sort();
    doomed.dedup();
    for path in &doomed {
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::new(
                    ErrorKind::Unexpected,
                    format!("purge {table}: cannot remove {}: {e}", path.display()),
                )
                .with_source(e));
            }
        }
    }
    if !shared {
        for dir in &dirs {
            remove_empty_dirs(dir);
        }
        let _ = std::fs::remove_dir(location);
    }
    info!(table, files = doomed.len(), "purged");
    Ok(doomed.len())
}

/// Whether `path` is absolute and has no `..` (so `starts_with` means "lies under").
pub(crate) fn is_plain_absolute(path: &Path) -> bool {
    path.is_absolute()
        && path
            .components()
            .all(|c| !matches!(c, std::path::Component::ParentDir))
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
