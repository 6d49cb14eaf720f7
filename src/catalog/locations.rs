//! Which files are a table's own: where skade places a new table, and which tables'
//! locations cleanup may sweep (`docs/maintenance.md`, "What cleanup may delete").
//!
//! Cleanup (online, `skade gc`, a purge) removes files a table's metadata does not
//! reference from under its location. That is only safe when everything stored there
//! was written for that table. A location can hold other files: those of a table dropped
//! without purge whose name was used again, those of a table of another catalog name on
//! the same database, those of a table another engine created or registered there. So:
//!
//! - **A new table gets a free location.** A location is free when no table of the
//!   store (this catalog's, and on a shared PostgreSQL catalog every catalog name's)
//!   lies at, inside or around it, no claim (below) does, and nothing is stored under
//!   it. The default `<warehouse>/<namespace...>/<table>` is used when free, else
//!   `<default>-<uuid>` (a unique suffix, as Nessie's and Lakekeeper's locations); a
//!   location the creation names must be free, or the create is refused with what
//!   uses it.
//! - **The create claims it.** The catalog keeps, per location, the uuid of the table
//!   skade created there (in its store: `location_claims` in redb,
//!   `skade_table_locations` in PostgreSQL), written in the same transaction as the
//!   table's first pointer. A claim
//!   outlives a drop without purge (the files stay, and so does the location's owner);
//!   a purge removes it.
//! - **Cleanup sweeps a location only when it is owned** ([`Ownership::Owned`]): the
//!   table's uuid holds the claim of its location, and no other table or claim lies at,
//!   inside or around it. A registered table, a table another engine created, and a
//!   location shared with anything else are never swept: their unreferenced files stay
//!   (counted and logged by maintenance), their referenced ones are never touched.
//!
//! Tables that existed before claims were kept (an older catalog) have a claim without
//! uuid, written when the store was upgraded; the first sweep that finds a table there
//! with nothing overlapping adopts it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use iceberg::table::Table;
use iceberg::{Error, ErrorKind, Result, TableIdent};

use super::RedbCatalog;
use crate::storage::file_store::FileStore;

/// One table's standing for cleanup (module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// skade created the table at its location, and nothing else lies at, inside or
    /// around it: cleanup may sweep it.
    Owned,
    /// The location is not this table's claim: a registered table, one another engine
    /// created, or a location not of the warehouse's storage.
    NotOwned,
    /// Another table or claim lies at, inside or around the location (`with` names it).
    Shared {
        /// What else uses the location.
        with: String,
    },
}

impl Ownership {
    /// The `reason` label of [`crate::metrics::MAINTENANCE_SKIPPED_TABLES`] for a table
    /// cleanup does not sweep; `None` for an owned one.
    pub fn skipped_reason(&self) -> Option<&'static str> {
        match self {
            Self::Owned => None,
            Self::NotOwned => Some("location_not_owned"),
            Self::Shared { .. } => Some("location_shared"),
        }
    }
}

/// A claim: a location and the uuid of the table that holds it (`None`: to adopt).
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) location: PathBuf,
    pub(crate) uuid: Option<String>,
}

/// Another table of the store: its name (`ns.table`, or `catalog/ns.table` for another
/// catalog name) and its location, taken from its metadata location.
#[derive(Debug, Clone)]
pub(crate) struct Neighbour {
    pub(crate) name: String,
    pub(crate) location: PathBuf,
    pub(crate) metadata_location: String,
    /// The table's identifier in this catalog; `None` for a table of another catalog
    /// name of the database.
    pub(crate) ident: Option<TableIdent>,
}

/// Whether one location lies at, inside or around the other.
fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// The table location a metadata location lies in, when it is where Iceberg writers put
/// it: `<location>/metadata/<file>`.
pub(crate) fn location_of_metadata(metadata_location: &str) -> Option<&str> {
    let (dir, _) = metadata_location.rsplit_once('/')?;
    dir.strip_suffix("/metadata")
}

impl RedbCatalog {
    /// `location` as a claim's key: the plain path of the warehouse's storage
    /// ([`FileStore::path_of`]); `None` for a location outside it.
    pub(crate) fn location_key(&self, location: &str) -> Option<PathBuf> {
        FileStore::of(&self.warehouse).path_of(location)
    }

    /// Every claim of the store (every catalog name's, on PostgreSQL).
    ///
    /// # Errors
    /// The store's error.
    pub(crate) async fn claims(&self) -> Result<Vec<Claim>> {
        Ok(self
            .store
            .location_claims()
            .await?
            .into_iter()
            .map(|(location, uuid)| Claim {
                location: PathBuf::from(location),
                uuid,
            })
            .collect())
    }

    /// Every table of the store with its location as its pointer gives it: this
    /// catalog's, and on PostgreSQL every other catalog name's.
    ///
    /// # Errors
    /// The store's error.
    pub(crate) async fn neighbours(&self) -> Result<Vec<Neighbour>> {
        // (name, identifier in this catalog, metadata location)
        let mut pointers: Vec<(String, Option<TableIdent>, String)> = self
            .store
            .all_pointers()
            .await?
            .into_iter()
            .map(|(ident, location)| (ident.to_string(), Some(ident), location))
            .collect();
        for (name, metadata_location) in self.store.other_catalogs_tables().await? {
            pointers.push((name, None, metadata_location));
        }
        Ok(pointers
            .into_iter()
            .filter_map(|(name, ident, metadata_location)| {
                let location = self.location_key(location_of_metadata(&metadata_location)?)?;
                Some(Neighbour {
                    name,
                    location,
                    metadata_location,
                    ident,
                })
            })
            .collect())
    }

    /// The standing of each of `tables` (this catalog's tables, loaded) for cleanup
    /// (module docs), in order. A table that predates claims and overlaps nothing is
    /// adopted here.
    ///
    /// # Errors
    /// The store's error.
    pub async fn ownership(&self, tables: &[Table]) -> Result<Vec<Ownership>> {
        let claims = self.claims().await?;
        let neighbours = self.neighbours().await?;
        let mut out = Vec::with_capacity(tables.len());
        for table in tables {
            out.push(self.ownership_of(table, &claims, &neighbours).await?);
        }
        Ok(out)
    }

    async fn ownership_of(
        &self,
        table: &Table,
        claims: &[Claim],
        neighbours: &[Neighbour],
    ) -> Result<Ownership> {
        let Some(location) = self.location_key(table.metadata().location()) else {
            return Ok(Ownership::NotOwned);
        };
        let name = table.identifier().to_string();
        let uuid = table.metadata().uuid().to_string();
        if let Some(other) = neighbours
            .iter()
            .find(|n| n.name != name && overlaps(&n.location, &location))
        {
            return Ok(Ownership::Shared {
                with: format!("table {} at {}", other.name, other.location.display()),
            });
        }
        let mut own = None;
        for claim in claims {
            if claim.location == location {
                own = Some(claim);
            } else if overlaps(&claim.location, &location) {
                return Ok(Ownership::Shared {
                    with: format!("the location {} of another table", claim.location.display()),
                });
            }
        }
        match own.map(|claim| claim.uuid.as_deref()) {
            Some(Some(holder)) if holder == uuid => Ok(Ownership::Owned),
            Some(Some(holder)) => Ok(Ownership::Shared {
                with: format!("table {holder}, created there before (dropped without purge?)"),
            }),
            Some(None) if self.adopt_location(&location, &uuid).await? => Ok(Ownership::Owned),
            Some(None) | None => Ok(Ownership::NotOwned),
        }
    }

    /// Gives the claim without uuid at `location` to table `uuid`; whether it did.
    async fn adopt_location(&self, location: &Path, uuid: &str) -> Result<bool> {
        self.store
            .adopt_location(&location.to_string_lossy(), uuid)
            .await
    }

    /// Removes `table`'s claim of its location (after its files were purged).
    ///
    /// # Errors
    /// The store's error.
    pub(crate) async fn release_location(&self, table: &Table) -> Result<()> {
        let Some(location) = self.location_key(table.metadata().location()) else {
            return Ok(());
        };
        let uuid = table.metadata().uuid().to_string();
        self.store
            .release_location(&location.to_string_lossy(), &uuid)
            .await
    }

    /// The location of a new table `ident` (module docs): `explicit` when free, or the
    /// default `<warehouse>/<namespace...>/<table>` when free, else the default with a
    /// `-<uuid>` suffix.
    ///
    /// # Errors
    /// `DataInvalid` naming what uses `explicit`; the store's or the storage's error.
    pub(crate) async fn choose_location(
        &self,
        ident: &TableIdent,
        explicit: Option<&str>,
    ) -> Result<String> {
        let claims = self.claims().await?;
        let neighbours = self.neighbours().await?;
        if let Some(location) = explicit {
            return match self.in_use(location, &claims, &neighbours).await? {
                None => Ok(location.to_string()),
                Some(what) => Err(Error::new(
                    ErrorKind::DataInvalid,
                    format!(
                        "table {ident}: location {location} is in use ({what}); choose a location no table uses, or register the table"
                    ),
                )),
            };
        }
        let default = self
            .warehouse
            .table_location(ident.namespace().as_ref(), ident.name());
        if self.in_use(&default, &claims, &neighbours).await?.is_none() {
            return Ok(default);
        }
        Ok(format!("{default}-{}", uuid::Uuid::now_v7().simple()))
    }

    /// What uses `location` (module docs), or `None` when it is free. A location not of
    /// the warehouse's storage cannot be looked at and counts as free.
    async fn in_use(
        &self,
        location: &str,
        claims: &[Claim],
        neighbours: &[Neighbour],
    ) -> Result<Option<String>> {
        let Some(key) = self.location_key(location) else {
            return Ok(None);
        };
        if let Some(table) = neighbours.iter().find(|n| overlaps(&n.location, &key)) {
            return Ok(Some(format!(
                "table {} is at {}",
                table.name,
                table.location.display()
            )));
        }
        if let Some(claim) = claims.iter().find(|c| overlaps(&c.location, &key)) {
            return Ok(Some(format!(
                "a table was created at {}",
                claim.location.display()
            )));
        }
        let stored = FileStore::of(&self.warehouse)
            .list_names(&key)
            .await
            .map_err(|e| {
                Error::new(
                    ErrorKind::Unexpected,
                    format!("look at location {location}: {e}"),
                )
                .with_source(e)
            })?;
        Ok((!stored.is_empty()).then(|| format!("{} files are stored under it", stored.len())))
    }
}

/// The claim a create writes: `table`'s location key and uuid, when its location is of
/// the warehouse's storage.
pub(crate) fn claim_of(catalog: &RedbCatalog, table: &Table) -> Option<(String, String)> {
    let location = catalog.location_key(table.metadata().location())?;
    Some((
        location.to_string_lossy().into_owned(),
        table.metadata().uuid().to_string(),
    ))
}

/// Table properties that move where a table's files go (Iceberg's `write.data.path`,
/// `write.metadata.path`, the object-storage layout's `write.object-storage.path` and its
/// deprecated `write.folder-storage.path`). skade writes every data file under
/// `<location>/data/` and every metadata file under `<location>/metadata/`, so a table
/// that sets one is refused rather than written where its owner did not ask.
pub const PATH_PROPERTIES: &[&str] = &[
    "write.data.path",
    "write.metadata.path",
    "write.object-storage.path",
    "write.folder-storage.path",
];

/// Iceberg's object-storage layout (hashed data file prefixes), refused when `true`.
pub const OBJECT_STORAGE_PROPERTY: &str = "write.object-storage.enabled";

/// Checks that table `name`'s `properties` leave its files where skade writes them
/// ([`PATH_PROPERTIES`], [`OBJECT_STORAGE_PROPERTY`]).
///
/// # Errors
/// `FeatureUnsupported` naming the first property that moves them.
pub fn check_file_paths(name: &str, properties: &HashMap<String, String>) -> Result<()> {
    let set = PATH_PROPERTIES
        .iter()
        .find(|p| properties.contains_key(**p))
        .map(|p| (*p, properties[*p].as_str()))
        .or_else(|| {
            properties
                .get(OBJECT_STORAGE_PROPERTY)
                .filter(|v| v.trim().eq_ignore_ascii_case("true"))
                .map(|v| (OBJECT_STORAGE_PROPERTY, v.as_str()))
        });
    match set {
        None => Ok(()),
        Some((property, value)) => Err(Error::new(
            ErrorKind::FeatureUnsupported,
            format!(
                "table {name}: property {property}={value} is not supported: skade writes a table's data files under <location>/data/ and its metadata under <location>/metadata/; remove the property"
            ),
        )),
    }
}

/// Whether one location lies at, inside or around the other (by path component).
pub(crate) fn locations_overlap(a: &Path, b: &Path) -> bool {
    overlaps(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_overlaps_what_lies_at_inside_or_around_it_by_component() {
        let t = Path::new("/w/ns/t");
        assert!(overlaps(t, Path::new("/w/ns/t")));
        assert!(overlaps(t, Path::new("/w/ns/t/data/x")));
        assert!(overlaps(t, Path::new("/w/ns")));
        assert!(!overlaps(t, Path::new("/w/ns/t-0193")));
        assert!(!overlaps(t, Path::new("/w/ns/u")));
        assert!(overlaps(
            Path::new("s3://b/w/ns/t"),
            Path::new("s3://b/w/ns/t/metadata")
        ));
        assert!(!overlaps(
            Path::new("s3://b/w/ns/t"),
            Path::new("s3://b/w/ns/tt")
        ));
    }

    #[test]
    fn the_location_of_a_metadata_file_is_above_its_metadata_directory() {
        assert_eq!(
            location_of_metadata("/w/ns/t/metadata/00001-a.metadata.json"),
            Some("/w/ns/t")
        );
        assert_eq!(
            location_of_metadata("s3://b/ns/t/metadata/v1.metadata.json"),
            Some("s3://b/ns/t")
        );
        assert_eq!(location_of_metadata("/elsewhere/v1.metadata.json"), None);
    }
}
