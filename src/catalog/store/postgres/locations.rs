//! Table locations as rows of the catalog database: which table skade created at which
//! location (`skade_table_locations`, one row per location, shared by every catalog
//! name of the database), and where the tables of the other catalog names live. The
//! rules they serve are in `catalog/locations.rs`.

use iceberg::Result;

use super::{IS_TABLE, PgStore};

/// Claims `$1` (location) for table `$3` (uuid) of catalog `$2` unless a row holds the
/// location: 0 rows inserted means another table claimed it.
pub(super) const INSERT_CLAIM: &str = "INSERT INTO skade_table_locations (location,
    catalog_name, table_uuid) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING";

impl PgStore {
    /// Every location claim of the database, every catalog name's: (location, table
    /// uuid; `None` for a table that existed before claims were kept, adopted by the
    /// first sweep that finds it).
    pub(crate) async fn location_claims(&self) -> Result<Vec<(String, Option<String>)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT location, table_uuid FROM skade_table_locations",
                &[],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Gives the unclaimed row of `location` (a table that predates claims) to table
    /// `uuid`. Returns whether it did: `false` when the row is gone or already held.
    pub(crate) async fn adopt_location(&self, location: &str, uuid: &str) -> Result<bool> {
        let client = self.client().await?;
        let updated = client
            .execute(
                "UPDATE skade_table_locations SET table_uuid = $2, catalog_name = $3
                 WHERE location = $1 AND table_uuid IS NULL",
                &[&location, &uuid, &self.catalog],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(updated == 1)
    }

    /// Removes the claim of `location` by table `uuid` (its files were purged).
    pub(crate) async fn release_location(&self, location: &str, uuid: &str) -> Result<()> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM skade_table_locations WHERE location = $1 AND table_uuid = $2",
                &[&location, &uuid],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The tables of the other catalog names of the database: (`catalog/ns.table`,
    /// metadata location).
    pub(crate) async fn other_catalogs_tables(&self) -> Result<Vec<(String, String)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT catalog_name, table_namespace, table_name, metadata_location
                     FROM iceberg_tables
                     WHERE catalog_name <> $1 AND {IS_TABLE} AND metadata_location IS NOT NULL"
                ),
                &[&self.catalog],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows
            .iter()
            .map(|r| {
                let (catalog, ns, name): (String, String, String) = (r.get(0), r.get(1), r.get(2));
                (format!("{catalog}/{ns}.{name}"), r.get(3))
            })
            .collect())
    }
}
