"""The Iceberg SQL (JDBC) catalog schema as pyiceberg's ``SqlCatalog`` writes it into
PostgreSQL: the two tables ``iceberg_tables`` and ``iceberg_namespace_properties``, their
columns, the catalog name and the namespace encoding.

A skade server with ``--catalog postgres://...`` keeps its table pointers in the same two
tables so that pyiceberg (and Iceberg's Java ``JdbcCatalog``) read skade's tables from the
database; these tests pin what that shared format is, read back with ``psql`` (not through
pyiceberg), and prove the ``postgres`` fixtures work. They fail when a pyiceberg upgrade
changes the format skade must match.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

CATALOG = "skade_interop"
"""The ``name`` given to ``SqlCatalog``: pyiceberg writes it as every row's
``catalog_name``."""


@pytest.fixture
def db(postgres_database):
    return postgres_database("pyiceberg")


@pytest.fixture
def catalog(db, tmp_path):
    cat = SqlCatalog(CATALOG, uri=db.sqlalchemy_url, warehouse=f"file://{tmp_path}")
    yield cat
    cat.close()


def columns(postgres, db, table: str) -> list[tuple]:
    """(name, data type, max length, nullable) of ``table``'s columns, in order."""
    return postgres.execute(
        "SELECT column_name, data_type, character_maximum_length, is_nullable "
        "FROM information_schema.columns "
        f"WHERE table_schema = 'public' AND table_name = '{table}' ORDER BY ordinal_position",
        database=db.name,
    )


def primary_key(postgres, db, table: str) -> list[str]:
    rows = postgres.execute(
        "SELECT a.attname FROM pg_index i "
        "JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
        f"WHERE i.indrelid = '{table}'::regclass AND i.indisprimary "
        "ORDER BY array_position(i.indkey, a.attnum)",
        database=db.name,
    )
    return [name for (name,) in rows]


def test_tables_and_columns(postgres, db, catalog):
    """pyiceberg creates both tables (its "v1" schema, with ``iceberg_type``) on first use."""
    assert columns(postgres, db, "iceberg_tables") == [
        ("catalog_name", "character varying", "255", "NO"),
        ("table_namespace", "character varying", "255", "NO"),
        ("table_name", "character varying", "255", "NO"),
        ("metadata_location", "character varying", "1000", "YES"),
        ("previous_metadata_location", "character varying", "1000", "YES"),
        ("iceberg_type", "character varying", "5", "YES"),
    ]
    assert primary_key(postgres, db, "iceberg_tables") == [
        "catalog_name",
        "table_namespace",
        "table_name",
    ]
    assert columns(postgres, db, "iceberg_namespace_properties") == [
        ("catalog_name", "character varying", "255", "NO"),
        ("namespace", "character varying", "255", "NO"),
        ("property_key", "character varying", "255", "NO"),
        ("property_value", "character varying", "1000", "NO"),
    ]
    assert primary_key(postgres, db, "iceberg_namespace_properties") == [
        "catalog_name",
        "namespace",
        "property_key",
    ]


def test_namespace_rows(postgres, db, catalog):
    """Levels joined with ``.``; no properties -> the one row ``exists = true``; with
    properties -> those rows only; a parent of a created namespace gets no row."""
    catalog.create_namespace(("lvl1", "lvl2", "lvl3"))
    catalog.create_namespace("flat", {"owner": "ops", "comment": "x"})
    assert sorted(
        postgres.execute(
            "SELECT catalog_name, namespace, property_key, property_value "
            "FROM iceberg_namespace_properties",
            database=db.name,
        )
    ) == [
        (CATALOG, "flat", "comment", "x"),
        (CATALOG, "flat", "owner", "ops"),
        (CATALOG, "lvl1.lvl2.lvl3", "exists", "true"),
    ]
    # The parents exist only through a child (``namespace LIKE 'lvl1.%'``).
    assert catalog.namespace_exists(("lvl1",))
    assert catalog.namespace_exists(("lvl1", "lvl2"))
    assert not catalog.namespace_exists(("lvl",))
    assert sorted(catalog.list_namespaces()) == [("flat",), ("lvl1",)]
    assert catalog.list_namespaces(("lvl1",)) == [("lvl1", "lvl2")]
    # pyiceberg hands the reserved ``exists`` row back as a property (Java's JdbcCatalog
    # drops it from loadNamespaceMetadata).
    assert catalog.load_namespace_properties(("lvl1", "lvl2", "lvl3")) == {"exists": "true"}


def test_table_rows_and_stale_commit(postgres, db, catalog):
    """A table is one row: namespace as ``a.b``, ``iceberg_type = 'TABLE'``, previous
    location NULL; each commit moves the old location to ``previous_metadata_location``."""
    catalog.create_namespace(("a", "b"))
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    table = catalog.create_table(("a", "b", "events"), schema)

    query = (
        "SELECT catalog_name, table_namespace, table_name, metadata_location, "
        "previous_metadata_location, iceberg_type FROM iceberg_tables"
    )
    [created] = postgres.execute(query, database=db.name)
    assert created[:3] == (CATALOG, "a.b", "events")
    assert created[3] == table.metadata_location
    assert created[3].startswith("file://") and created[3].endswith(".metadata.json")
    assert created[4:] == (None, "TABLE")

    stale = catalog.load_table(("a", "b", "events"))
    table.append(pa.table({"id": pa.array([1, 2], pa.int64())}, schema=schema))
    [appended] = postgres.execute(query, database=db.name)
    assert appended[3] == table.metadata_location != created[3]
    assert appended[4] == created[3]

    # From a stale base the commit conflicts (pyiceberg raises CommitFailedException
    # inside) and pyiceberg's append refreshes and retries: both appends land, chained.
    stale.append(pa.table({"id": pa.array([3], pa.int64())}, schema=schema))
    [retried] = postgres.execute(query, database=db.name)
    assert retried[4] == appended[3]
    assert retried[3] == catalog.load_table(("a", "b", "events")).metadata_location
    assert sorted(
        catalog.load_table(("a", "b", "events")).scan().to_arrow()["id"].to_pylist()
    ) == [1, 2, 3]


def test_execute_returns_nulls_and_empty_strings_apart(postgres, db):
    """``PostgresCluster.execute`` keeps SQL NULL (None) apart from '' and from text that
    holds the separators' neighbours (tabs, newlines, pipes)."""
    rows = postgres.execute(
        "SELECT NULL::text, ''::text, E'a\\tb|c\\nd', 42 UNION ALL SELECT 'x', NULL, NULL, NULL",
        database=db.name,
    )
    assert rows == [(None, "", "a\tb|c\nd", "42"), ("x", None, None, None)]
    assert postgres.execute("CREATE TABLE t (x int)", database=db.name) == []
    assert postgres.execute("SELECT x FROM t", database=db.name) == []
