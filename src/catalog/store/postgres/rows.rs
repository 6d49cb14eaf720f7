//! Namespaces, table pointers and producers' marks as rows of the catalog database, with
//! the JDBC catalog's meaning (Java's `JdbcCatalog`, pyiceberg's `SqlCatalog`):
//! - a namespace exists when a property row or a table names it or a namespace below it
//!   (so a namespace another JDBC writer made implicitly, by creating a table in it, is
//!   one here too); skade writes the `exists` = `true` row the JDBC catalog writes for a
//!   namespace created without properties, keeps it for every namespace it creates (so
//!   removing every property does not drop the namespace) and never shows it;
//! - a table is a row of `iceberg_tables` whose `iceberg_type` is `TABLE` or null (a
//!   view's row is not a table).

use std::collections::HashMap;

use iceberg::{Error, ErrorKind, Result};

use super::{IS_TABLE, PgStore, namespace_levels, namespace_string};
use crate::catalog::marks::WriterMark;

/// The property the JDBC catalog writes for a namespace without properties.
pub(crate) const EXISTS_PROPERTY: &str = "exists";

/// Inserts a new table's row (`$1` catalog, `$2` namespace, `$3` name, `$4` metadata
/// location) unless a row holds the name: 0 rows inserted means the table exists. The
/// row the JDBC catalog writes for a table: no previous location, `iceberg_type` `TABLE`.
pub(super) const INSERT_TABLE: &str = "INSERT INTO iceberg_tables (catalog_name,
    table_namespace, table_name, metadata_location, previous_metadata_location, iceberg_type)
    VALUES ($1, $2, $3, $4, NULL, 'TABLE') ON CONFLICT DO NOTHING";

/// `ns` escaped for a `LIKE` pattern matching every namespace below it.
fn below(ns: &str) -> String {
    let escaped = ns
        .replace('\\', "\\\\")
        .replace('%', "\\%")
        .replace('_', "\\_");
    format!("{escaped}.%")
}

impl PgStore {
    /// Whether the namespace exists (see the module docs).
    pub(crate) async fn namespace_exists(&self, levels: &[String]) -> Result<bool> {
        let ns = namespace_string(levels)?;
        let client = self.client().await?;
        exists_in(&**client, &self.catalog, &ns)
            .await
            .map_err(|e| self.error(e))
    }

    /// The namespaces one level below `parent` (the top level for an empty `parent`),
    /// sorted.
    pub(crate) async fn list_namespaces(&self, parent: &[String]) -> Result<Vec<Vec<String>>> {
        let client = self.client().await?;
        let rows = if parent.is_empty() {
            client
                .query(
                    &format!(
                        "SELECT namespace FROM iceberg_namespace_properties WHERE catalog_name = $1
                         UNION SELECT table_namespace FROM iceberg_tables
                           WHERE catalog_name = $1 AND {IS_TABLE}"
                    ),
                    &[&self.catalog],
                )
                .await
        } else {
            let ns = namespace_string(parent)?;
            client
                .query(
                    &format!(
                        "SELECT namespace FROM iceberg_namespace_properties
                           WHERE catalog_name = $1 AND namespace LIKE $2
                         UNION SELECT table_namespace FROM iceberg_tables
                           WHERE catalog_name = $1 AND {IS_TABLE} AND table_namespace LIKE $2"
                    ),
                    &[&self.catalog, &below(&ns)],
                )
                .await
        }
        .map_err(|e| self.error(e))?;
        let mut out: Vec<Vec<String>> = rows
            .iter()
            .map(|row| {
                let mut levels = namespace_levels(row.get::<_, &str>(0));
                levels.truncate(parent.len() + 1);
                levels
            })
            .filter(|levels| levels.len() == parent.len() + 1 && levels.starts_with(parent))
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The namespace's properties, or `None` when it does not exist.
    pub(crate) async fn namespace_properties(
        &self,
        levels: &[String],
    ) -> Result<Option<HashMap<String, String>>> {
        if !self.namespace_exists(levels).await? {
            return Ok(None);
        }
        let ns = namespace_string(levels)?;
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT property_key, property_value FROM iceberg_namespace_properties
                 WHERE catalog_name = $1 AND namespace = $2",
                &[&self.catalog, &ns],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(Some(
            rows.iter()
                .filter_map(|row| {
                    let key: Option<String> = row.get(0);
                    let value: Option<String> = row.get(1);
                    key.filter(|k| k != EXISTS_PROPERTY)
                        .map(|k| (k, value.unwrap_or_default()))
                })
                .collect(),
        ))
    }

    /// Creates a namespace with `properties` (its parent must exist).
    ///
    /// # Errors
    /// `NamespaceAlreadyExists`, `NamespaceNotFound` for a missing parent, `DataInvalid`
    /// for the reserved `exists` property.
    pub(crate) async fn create_namespace(
        &self,
        levels: &[String],
        properties: &HashMap<String, String>,
    ) -> Result<()> {
        refuse_reserved(properties.keys())?;
        let ns = namespace_string(levels)?;
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(|e| self.error(e))?;
        // Two creates of one namespace take turns: the second sees the first's rows.
        txn.execute(
            "SELECT pg_advisory_xact_lock($1)",
            &[&super::cluster::lock_key(&[
                "namespace",
                &self.catalog,
                &ns,
            ])],
        )
        .await
        .map_err(|e| self.error(e))?;
        if exists_in(&*txn, &self.catalog, &ns)
            .await
            .map_err(|e| self.error(e))?
        {
            return Err(Error::new(
                ErrorKind::NamespaceAlreadyExists,
                format!("namespace {ns} already exists"),
            ));
        }
        if levels.len() > 1 {
            let parent = namespace_string(&levels[..levels.len() - 1])?;
            if !exists_in(&*txn, &self.catalog, &parent)
                .await
                .map_err(|e| self.error(e))?
            {
                return Err(Error::new(
                    ErrorKind::NamespaceNotFound,
                    format!("parent of namespace {ns} does not exist"),
                ));
            }
        }
        let mut rows: Vec<(&str, &str)> = properties
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        rows.push((EXISTS_PROPERTY, "true"));
        let (keys, values): (Vec<&str>, Vec<&str>) = rows.into_iter().unzip();
        txn.execute(
            "INSERT INTO iceberg_namespace_properties
               (catalog_name, namespace, property_key, property_value)
             SELECT $1, $2, k, v FROM unnest($3::text[], $4::text[]) AS p(k, v)
             ON CONFLICT DO NOTHING",
            &[&self.catalog, &ns, &keys, &values],
        )
        .await
        .map_err(|e| self.error(e))?;
        txn.commit().await.map_err(|e| self.error(e))
    }

    /// Sets `updates` and removes `removals` in one transaction; returns the keys removed
    /// and the keys asked to be removed that were absent (unsorted).
    ///
    /// # Errors
    /// `NamespaceNotFound`; `DataInvalid` for the reserved `exists` property.
    pub(crate) async fn update_namespace_properties(
        &self,
        levels: &[String],
        removals: &[String],
        updates: &HashMap<String, String>,
        replace_all: bool,
    ) -> Result<(Vec<String>, Vec<String>)> {
        refuse_reserved(updates.keys().chain(removals))?;
        let ns = namespace_string(levels)?;
        if !self.namespace_exists(levels).await? {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("namespace {ns} does not exist"),
            ));
        }
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(|e| self.error(e))?;
        let rows = txn
            .query(
                "SELECT property_key FROM iceberg_namespace_properties
                 WHERE catalog_name = $1 AND namespace = $2 FOR UPDATE",
                &[&self.catalog, &ns],
            )
            .await
            .map_err(|e| self.error(e))?;
        let present: Vec<String> = rows.iter().filter_map(|r| r.get(0)).collect();
        let (mut removed, mut missing) = (Vec::new(), Vec::new());
        for key in removals {
            if present.contains(key) {
                removed.push(key.clone());
            } else {
                missing.push(key.clone());
            }
        }
        let delete: Vec<&str> = if replace_all {
            present
                .iter()
                .map(String::as_str)
                .filter(|k| *k != EXISTS_PROPERTY)
                .collect()
        } else {
            removed.iter().map(String::as_str).collect()
        };
        txn.execute(
            "DELETE FROM iceberg_namespace_properties
             WHERE catalog_name = $1 AND namespace = $2 AND property_key = ANY($3)",
            &[&self.catalog, &ns, &delete],
        )
        .await
        .map_err(|e| self.error(e))?;
        let mut keys: Vec<&str> = updates.keys().map(String::as_str).collect();
        let mut values: Vec<&str> = updates.values().map(String::as_str).collect();
        keys.push(EXISTS_PROPERTY);
        values.push("true");
        txn.execute(
            "INSERT INTO iceberg_namespace_properties
               (catalog_name, namespace, property_key, property_value)
             SELECT $1, $2, k, v FROM unnest($3::text[], $4::text[]) AS p(k, v)
             ON CONFLICT (catalog_name, namespace, property_key)
             DO UPDATE SET property_value = EXCLUDED.property_value",
            &[&self.catalog, &ns, &keys, &values],
        )
        .await
        .map_err(|e| self.error(e))?;
        txn.commit().await.map_err(|e| self.error(e))?;
        Ok((removed, missing))
    }

    /// Drops an empty namespace.
    ///
    /// # Errors
    /// `NamespaceNotFound`; `PreconditionFailed` when a table or a namespace is below it.
    pub(crate) async fn drop_namespace(&self, levels: &[String]) -> Result<()> {
        let ns = namespace_string(levels)?;
        let client = self.client().await?;
        let row = client
            .query_one(
                &format!(
                    "SELECT
                       EXISTS (SELECT 1 FROM iceberg_namespace_properties
                         WHERE catalog_name = $1 AND namespace = $2),
                       EXISTS (SELECT 1 FROM iceberg_tables WHERE catalog_name = $1
                         AND {IS_TABLE} AND (table_namespace = $2 OR table_namespace LIKE $3))
                       OR EXISTS (SELECT 1 FROM iceberg_namespace_properties
                         WHERE catalog_name = $1 AND namespace LIKE $3)"
                ),
                &[&self.catalog, &ns, &below(&ns)],
            )
            .await
            .map_err(|e| self.error(e))?;
        let (own, holds): (bool, bool) = (row.get(0), row.get(1));
        if holds {
            return Err(Error::new(
                ErrorKind::PreconditionFailed,
                format!("namespace {ns} is not empty"),
            ));
        }
        if !own {
            return Err(Error::new(
                ErrorKind::NamespaceNotFound,
                format!("namespace {ns} does not exist"),
            ));
        }
        client
            .execute(
                "DELETE FROM iceberg_namespace_properties WHERE catalog_name = $1 AND namespace = $2",
                &[&self.catalog, &ns],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(())
    }

    /// The names of the tables directly in the namespace, sorted.
    pub(crate) async fn list_tables(&self, levels: &[String]) -> Result<Vec<String>> {
        let ns = namespace_string(levels)?;
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT table_name FROM iceberg_tables
                     WHERE catalog_name = $1 AND table_namespace = $2 AND {IS_TABLE}
                     ORDER BY table_name"
                ),
                &[&self.catalog, &ns],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The table's metadata location, or `None` when it does not exist.
    pub(crate) async fn pointer(&self, levels: &[String], name: &str) -> Result<Option<String>> {
        let ns = namespace_string(levels)?;
        let client = self.client().await?;
        let statement = client
            .prepare_cached(&format!(
                "SELECT metadata_location FROM iceberg_tables
                 WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3 AND {IS_TABLE}"
            ))
            .await
            .map_err(|e| self.error(e))?;
        let row = client
            .query_opt(&statement, &[&self.catalog, &ns, &name])
            .await
            .map_err(|e| self.error(e))?;
        Ok(row.and_then(|r| r.get(0)))
    }

    /// Every table with its metadata location, in (namespace, name) order.
    pub(crate) async fn all_pointers(&self) -> Result<Vec<(Vec<String>, String, String)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT table_namespace, table_name, metadata_location FROM iceberg_tables
                     WHERE catalog_name = $1 AND {IS_TABLE} AND metadata_location IS NOT NULL
                     ORDER BY table_namespace, table_name"
                ),
                &[&self.catalog],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows
            .iter()
            .map(|r| (namespace_levels(r.get(0)), r.get(1), r.get(2)))
            .collect())
    }

    /// Inserts a table's first pointer and, when given, the claim `(location key, table
    /// uuid)` of its location, in one transaction.
    ///
    /// # Errors
    /// `TableAlreadyExists` when a row (table or view) holds the name; `DataInvalid` when
    /// another table claimed the location.
    pub(crate) async fn insert_pointer(
        &self,
        levels: &[String],
        name: &str,
        location: &str,
        claim: Option<(&str, &str)>,
    ) -> Result<()> {
        let ns = namespace_string(levels)?;
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(|e| self.error(e))?;
        let inserted = txn
            .execute(INSERT_TABLE, &[&self.catalog, &ns, &name, &location])
            .await
            .map_err(|e| self.error(e))?;
        if inserted == 0 {
            return Err(Error::new(
                ErrorKind::TableAlreadyExists,
                format!("table {ns}.{name} already exists"),
            ));
        }
        if let Some((key, uuid)) = claim {
            let claimed = txn
                .execute(
                    super::locations::INSERT_CLAIM,
                    &[&key, &self.catalog, &uuid],
                )
                .await
                .map_err(|e| self.error(e))?;
            if claimed == 0 {
                let ident = iceberg::TableIdent::new(
                    iceberg::NamespaceIdent::from_vec(levels.to_vec())?,
                    name.to_string(),
                );
                return Err(crate::catalog::store::location_taken(&ident, key));
            }
        }
        txn.commit().await.map_err(|e| self.error(e))
    }

    /// Removes a table's row — only while its pointer is `expected`, when given. Returns
    /// whether a row was removed.
    pub(crate) async fn drop_pointer(
        &self,
        levels: &[String],
        name: &str,
        expected: Option<&str>,
    ) -> Result<bool> {
        let ns = namespace_string(levels)?;
        let client = self.client().await?;
        let removed = client
            .execute(
                &format!(
                    "DELETE FROM iceberg_tables
                     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                       AND {IS_TABLE} AND ($4::text IS NULL OR metadata_location = $4)"
                ),
                &[&self.catalog, &ns, &name, &expected],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(removed > 0)
    }

    /// Moves a table's row to another name.
    ///
    /// # Errors
    /// `TableNotFound` for an unknown source; `TableAlreadyExists` when the destination
    /// exists.
    pub(crate) async fn rename_table(
        &self,
        from: (&[String], &str),
        to: (&[String], &str),
    ) -> Result<()> {
        let (from_ns, to_ns) = (namespace_string(from.0)?, namespace_string(to.0)?);
        let client = self.client().await?;
        let moved = client
            .execute(
                &format!(
                    "UPDATE iceberg_tables SET table_namespace = $4, table_name = $5
                     WHERE catalog_name = $1 AND table_namespace = $2 AND table_name = $3
                       AND {IS_TABLE}"
                ),
                &[&self.catalog, &from_ns, &from.1, &to_ns, &to.1],
            )
            .await;
        match moved {
            Ok(0) => Err(Error::new(
                ErrorKind::TableNotFound,
                format!("table {from_ns}.{} does not exist", from.1),
            )),
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some(&tokio_postgres::error::SqlState::UNIQUE_VIOLATION) => {
                Err(Error::new(
                    ErrorKind::TableAlreadyExists,
                    format!("table {to_ns}.{} already exists", to.1),
                ))
            }
            Err(e) => Err(self.error(e)),
        }
    }

    /// Every table `writer` has a mark in, with the mark, in (namespace, name) order.
    pub(crate) async fn writer_marks(
        &self,
        writer: &str,
    ) -> Result<Vec<(Vec<String>, String, WriterMark)>> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT table_namespace, table_name, sequence::text, snapshot_id, committed_at_ms
                 FROM skade_writer_marks WHERE catalog_name = $1 AND writer_id = $2
                 ORDER BY table_namespace, table_name",
                &[&self.catalog, &writer],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(rows
            .iter()
            .filter_map(|r| Some((namespace_levels(r.get(0)), r.get(1), mark_of(r, 2)?)))
            .collect())
    }

    /// `writer`'s mark in one table.
    pub(crate) async fn writer_mark(
        &self,
        writer: &str,
        levels: &[String],
        name: &str,
    ) -> Result<Option<WriterMark>> {
        let ns = namespace_string(levels)?;
        let client = self.client().await?;
        let row = client
            .query_opt(
                "SELECT sequence::text, snapshot_id, committed_at_ms FROM skade_writer_marks
                 WHERE catalog_name = $1 AND writer_id = $2 AND table_namespace = $3
                   AND table_name = $4",
                &[&self.catalog, &writer, &ns, &name],
            )
            .await
            .map_err(|e| self.error(e))?;
        Ok(row.and_then(|r| mark_of(&r, 0)))
    }

    /// The number of writer ids with a mark, and whether `writer` is one of them.
    pub(crate) async fn writers(&self, writer: Option<&str>) -> Result<(u64, bool)> {
        let client = self.client().await?;
        let row = client
            .query_one(
                "SELECT COUNT(*), COALESCE(BOOL_OR(writer_id = $2), false)
                 FROM skade_writers WHERE catalog_name = $1",
                &[&self.catalog, &writer.unwrap_or("")],
            )
            .await
            .map_err(|e| self.error(e))?;
        let count: i64 = row.get(0);
        Ok((
            u64::try_from(count).unwrap_or(0),
            writer.is_some() && row.get::<_, bool>(1),
        ))
    }

    /// Forgets every writer whose last commit is before `cutoff_ms`, with its marks, in
    /// one transaction; returns the ids forgotten, sorted.
    pub(crate) async fn forget_idle_writers(&self, cutoff_ms: u64) -> Result<Vec<String>> {
        let cutoff = i64::try_from(cutoff_ms).unwrap_or(i64::MAX);
        let mut client = self.client().await?;
        let txn = client.transaction().await.map_err(|e| self.error(e))?;
        let rows = txn
            .query(
                "DELETE FROM skade_writers WHERE catalog_name = $1 AND last_commit_ms < $2
                 RETURNING writer_id",
                &[&self.catalog, &cutoff],
            )
            .await
            .map_err(|e| self.error(e))?;
        let mut idle: Vec<String> = rows.iter().map(|r| r.get(0)).collect();
        txn.execute(
            "DELETE FROM skade_writer_marks WHERE catalog_name = $1 AND writer_id = ANY($2)",
            &[&self.catalog, &idle],
        )
        .await
        .map_err(|e| self.error(e))?;
        txn.commit().await.map_err(|e| self.error(e))?;
        idle.sort();
        Ok(idle)
    }
}

/// Whether namespace `ns` of `catalog` exists, read through `client` (a connection or an
/// open transaction).
async fn exists_in(
    client: &impl tokio_postgres::GenericClient,
    catalog: &str,
    ns: &str,
) -> std::result::Result<bool, tokio_postgres::Error> {
    let row = client
        .query_one(
            &format!(
                "SELECT EXISTS (SELECT 1 FROM iceberg_namespace_properties
                   WHERE catalog_name = $1 AND (namespace = $2 OR namespace LIKE $3))
                 OR EXISTS (SELECT 1 FROM iceberg_tables
                   WHERE catalog_name = $1 AND {IS_TABLE}
                     AND (table_namespace = $2 OR table_namespace LIKE $3))"
            ),
            &[&catalog, &ns, &below(ns)],
        )
        .await?;
    Ok(row.get(0))
}

/// The mark in columns `at..at + 3` (sequence as text, snapshot id, committed at).
pub(super) fn mark_of(row: &tokio_postgres::Row, at: usize) -> Option<WriterMark> {
    let sequence: String = row.get(at);
    let committed: i64 = row.get(at + 2);
    Some(WriterMark {
        sequence: sequence.parse().ok()?,
        snapshot_id: row.get(at + 1),
        committed_at_ms: u64::try_from(committed).unwrap_or(0),
    })
}

/// Refuses the JDBC catalog's `exists` marker as a user property: skade writes it for
/// every namespace it creates and never shows it.
fn refuse_reserved<'a>(mut keys: impl Iterator<Item = &'a String>) -> Result<()> {
    match keys.any(|k| k == EXISTS_PROPERTY) {
        true => Err(Error::new(
            ErrorKind::DataInvalid,
            format!(
                "namespace property {EXISTS_PROPERTY:?} is reserved on a PostgreSQL catalog: \
                 the JDBC catalog schema uses it to mark a namespace"
            ),
        )),
        false => Ok(()),
    }
}
