//! The catalog database's tables, created and upgraded in versioned steps.
//!
//! The two Iceberg JDBC catalog tables have the shape of Java's `JdbcUtil` (its V1
//! schema, with `iceberg_type`) and pyiceberg's `SqlCatalog`, which create them the same
//! way when absent: skade creates them when absent and adds `iceberg_type` to a table an
//! older JDBC catalog (or pyiceberg) made without it, as Java's `JdbcCatalog` does.
//! skade's own tables are `skade_*`; `skade_schema_version` holds the last step applied.
//!
//! [`migrate`] runs every step in one transaction under a transaction-scoped advisory
//! lock, so instances starting together apply each step once, in order, and an instance
//! of an older skade never sees a half-upgraded schema.

use deadpool_postgres::Object;

/// The advisory lock key migrations take (`pg_advisory_xact_lock`): "skade" in ASCII.
const MIGRATION_LOCK: i64 = 0x0073_6b61_6465;

/// Each step's SQL, in order; step `n` (1-based) is applied when the stored version is
/// below `n`. Steps are never edited once released: a change is a new step.
const STEPS: &[&str] = &[
    // 1: the JDBC catalog's tables and skade's own.
    "CREATE TABLE IF NOT EXISTS iceberg_tables (
        catalog_name VARCHAR(255) NOT NULL,
        table_namespace VARCHAR(255) NOT NULL,
        table_name VARCHAR(255) NOT NULL,
        metadata_location VARCHAR(1000),
        previous_metadata_location VARCHAR(1000),
        iceberg_type VARCHAR(5),
        PRIMARY KEY (catalog_name, table_namespace, table_name));
     ALTER TABLE iceberg_tables ADD COLUMN IF NOT EXISTS iceberg_type VARCHAR(5);
     CREATE TABLE IF NOT EXISTS iceberg_namespace_properties (
        catalog_name VARCHAR(255) NOT NULL,
        namespace VARCHAR(255) NOT NULL,
        property_key VARCHAR(255),
        property_value VARCHAR(1000),
        PRIMARY KEY (catalog_name, namespace, property_key));
     CREATE TABLE skade_writer_marks (
        catalog_name VARCHAR(255) NOT NULL,
        writer_id VARCHAR(128) NOT NULL,
        table_namespace VARCHAR(255) NOT NULL,
        table_name VARCHAR(255) NOT NULL,
        sequence NUMERIC(20, 0) NOT NULL,
        snapshot_id BIGINT NOT NULL,
        committed_at_ms BIGINT NOT NULL,
        PRIMARY KEY (catalog_name, writer_id, table_namespace, table_name));
     CREATE TABLE skade_writers (
        catalog_name VARCHAR(255) NOT NULL,
        writer_id VARCHAR(128) NOT NULL,
        last_commit_ms BIGINT NOT NULL,
        PRIMARY KEY (catalog_name, writer_id));
     CREATE TABLE skade_instances (
        catalog_name VARCHAR(255) NOT NULL,
        instance_id VARCHAR(64) NOT NULL,
        host VARCHAR(255) NOT NULL,
        registered_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        heartbeat_at TIMESTAMPTZ NOT NULL DEFAULT now(),
        oldest_pin_ms BIGINT,
        PRIMARY KEY (catalog_name, instance_id));",
    // 2: which table skade created at which location (`catalog/locations.rs`), one row
    // per location across every catalog name. The tables that exist when the step runs
    // get a row without a uuid: the first sweep that finds a table there adopts it.
    "CREATE TABLE skade_table_locations (
        location VARCHAR(1000) PRIMARY KEY,
        catalog_name VARCHAR(255) NOT NULL,
        table_uuid VARCHAR(36),
        claimed_at TIMESTAMPTZ NOT NULL DEFAULT now());
     INSERT INTO skade_table_locations (location, catalog_name, table_uuid)
        SELECT DISTINCT ON (location) location, catalog_name, NULL FROM (
            SELECT regexp_replace(regexp_replace(metadata_location,
                       '/metadata/[^/]*$', ''), '^file:(//)?', '') AS location,
                   catalog_name
            FROM iceberg_tables
            WHERE metadata_location ~ '/metadata/[^/]*$'
              AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)) AS existing
        ORDER BY location, catalog_name
        ON CONFLICT DO NOTHING;",
];

/// Creates the tables or applies the steps the database lacks.
///
/// # Errors
/// The database's error; nothing of a failed step is applied.
pub(super) async fn migrate(client: &mut Object) -> Result<(), tokio_postgres::Error> {
    let txn = client.transaction().await?;
    txn.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    txn.batch_execute(
        "CREATE TABLE IF NOT EXISTS skade_schema_version (
            version INTEGER NOT NULL,
            applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .await?;
    let row = txn
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM skade_schema_version",
            &[],
        )
        .await?;
    let applied: i32 = row.get(0);
    for (index, step) in STEPS.iter().enumerate() {
        let version = i32::try_from(index + 1).unwrap_or(i32::MAX);
        if version <= applied {
            continue;
        }
        txn.batch_execute(step).await?;
        txn.execute(
            "INSERT INTO skade_schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await?;
        tracing::info!(version, "catalog database schema upgraded");
    }
    txn.commit().await
}
