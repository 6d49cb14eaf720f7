"""Interop: reading back over Flight SQL with the stock ADBC driver
(``adbc-driver-flightsql``), against a real ``skade serve``.

* Metadata: ``adbc_get_objects`` at every depth (catalogs, db_schemas, tables, columns)
  lists exactly the namespaces, tables and columns that were created; its filters narrow
  it; ``adbc_get_table_schema`` equals the table's Iceberg schema as pyiceberg converts it
  to Arrow (a second implementation, through skade's REST catalog);
  ``adbc_get_table_types`` is ``["TABLE"]``.
* SELECT: ``cursor.execute`` with and without parameters, on a table holding every
  Iceberg primitive type and a struct, returns what DuckDB returns for the same SQL over
  the rows ``DoGet`` streams for the same snapshot (DuckDB is the second implementation
  of the filter); also on a partitioned table, an evolved one, and one another engine
  deleted rows from with position-delete files (the reads honour them).
* An ADBC transaction of four ingests, one of an empty table: the empty one's ingest is
  refused with a message saying what happened and what to do, and the other three
  commit.

Run from the repository root (after ``cargo build``)::

    .venv/bin/pytest tests/interop/test_flight_sql.py
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import duckdb
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

from foreign_writer import delete_rows
from test_shared_catalog import skade, sql_catalog

ROWS = 50


@pytest.fixture(scope="module")
def server(skade_local_server):
    return skade_local_server


@pytest.fixture(scope="module")
def rest(server):
    return load_catalog(f"rest-{server.metrics_url}", type="rest", uri=server.metrics_url)


def connect(server, autocommit=True):
    return flightsql.connect(server.flight_uri, autocommit=autocommit)


def put(uri: str, path: tuple[str, ...], table: pa.Table) -> None:
    client = flight.FlightClient(uri)
    try:
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), table.schema)
        writer.write_table(table)
        writer.done_writing()
        while reader.read() is not None:
            pass
        writer.close()
    finally:
        client.close()


def do_get(uri: str, *path: str) -> pa.Table:
    client = flight.FlightClient(uri)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_path(*path))
        return client.do_get(info.endpoints[0].ticket).read_all()
    finally:
        client.close()


ALL_TYPES = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "b", BooleanType()),
    NestedField(3, "i", IntegerType()),
    NestedField(4, "f", FloatType()),
    NestedField(5, "d", DoubleType()),
    NestedField(6, "dec", DecimalType(10, 2)),
    NestedField(7, "day", DateType()),
    NestedField(8, "t", TimeType()),
    NestedField(9, "ts", TimestampType()),
    NestedField(10, "tz", TimestamptzType()),
    NestedField(11, "s", StringType()),
    NestedField(12, "u", UUIDType()),
    NestedField(13, "fx", FixedType(3)),
    NestedField(14, "bin", BinaryType()),
    NestedField(
        15, "st", StructType(NestedField(16, "x", IntegerType()), NestedField(17, "y", StringType()))
    ),
)


def all_types_rows(arrow_schema: pa.Schema) -> pa.Table:
    """``ROWS`` rows with a null in every nullable column now and then."""
    n = range(ROWS)
    base = dt.datetime(2024, 1, 1)
    return pa.Table.from_pydict(
        {
            "id": list(n),
            "b": [None if i % 7 == 0 else i % 2 == 0 for i in n],
            "i": [None if i % 9 == 0 else (i * 37) % 101 - 50 for i in n],
            "f": [i * 0.5 for i in n],
            "d": [None if i % 11 == 0 else i * 1.25 - 20 for i in n],
            "dec": [decimal.Decimal(i * 7 % 1000) / 100 for i in n],
            "day": [dt.date(2024, 1, 1) + dt.timedelta(days=i % 20) for i in n],
            "t": [dt.time(i % 24, i % 60) for i in n],
            "ts": [base + dt.timedelta(minutes=i) for i in n],
            "tz": [(base + dt.timedelta(hours=i)).replace(tzinfo=dt.timezone.utc) for i in n],
            "s": [None if i % 13 == 0 else f"s{i % 17:02}-{i}" for i in n],
            "u": [uuid.UUID(int=i % 10).bytes for i in n],
            "fx": [bytes([i % 5] * 3) for i in n],
            "bin": [bytes([i % 4]) * (i % 3) for i in n],
            "st": [None if i % 6 == 0 else {"x": i % 8, "y": f"y{i % 3}"} for i in n],
        },
        schema=arrow_schema,
    )


@pytest.fixture(scope="module")
def all_types(server, rest):
    """``fsq.all``: created over REST with every primitive type, then one put."""
    rest.create_namespace_if_not_exists("fsq")
    table = rest.create_table("fsq.all", ALL_TYPES)
    put(server.flight_uri, ("fsq", "all"), all_types_rows(table.schema().as_arrow()))
    return table


def duckdb_over(table: pa.Table):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    con.register("doget", table)
    return con


def assert_same(server, sql: str, params, expected_from) -> None:
    """skade's answer to ``sql`` (table ``{t}``) equals DuckDB's over ``expected_from``."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(sql.format(t="fsq.all"), params)
            got = cur.fetch_arrow_table()
    finally:
        conn.close()
    expected = duckdb_over(expected_from).execute(
        sql.format(t="doget"), list(params or [])
    ).fetch_arrow_table()
    assert got.column_names == expected.column_names, (sql, got.schema, expected.schema)
    assert got.to_pylist() == expected.to_pylist(), sql


# Literal filters over every primitive type, AND/OR/NOT, IN, BETWEEN, IS [NOT] NULL,
# LIKE and nested fields; each is run by skade and by DuckDB.
LITERAL_QUERIES = [
    "SELECT * FROM {t}",
    "SELECT id, s AS label FROM {t} WHERE id < 10 OR id >= 45",
    "SELECT id FROM {t} WHERE b",
    "SELECT id FROM {t} WHERE NOT b",
    "SELECT id FROM {t} WHERE b IS NULL",
    "SELECT id FROM {t} WHERE i BETWEEN -10 AND 10",
    "SELECT id FROM {t} WHERE i NOT BETWEEN -10 AND 10",
    "SELECT id FROM {t} WHERE f > 12.5 AND f <= 20",
    "SELECT id FROM {t} WHERE d <> 5 AND d IS NOT NULL",
    "SELECT id FROM {t} WHERE dec >= 2.1 AND dec < 3.5",
    "SELECT id FROM {t} WHERE day = DATE '2024-01-05'",
    "SELECT id FROM {t} WHERE day IN (DATE '2024-01-02', DATE '2024-01-09')",
    "SELECT id FROM {t} WHERE t < TIME '05:30:00'",
    "SELECT id FROM {t} WHERE ts > TIMESTAMP '2024-01-01 00:30:00'",
    "SELECT id FROM {t} WHERE tz <= TIMESTAMP '2024-01-02 03:00:00'",
    "SELECT id, s FROM {t} WHERE s LIKE 's0%'",
    "SELECT id FROM {t} WHERE s NOT LIKE 's1%' AND NOT (id IN (1, 2, 3))",
    "SELECT id FROM {t} WHERE s IN ('s01-1', 's03-20', 'nope')",
    "SELECT id, st.x, st.y FROM {t} WHERE st.x > 4 OR st.y = 'y0'",
    "SELECT id FROM {t} WHERE st IS NULL",
    "SELECT id FROM {t} WHERE st.x IS NULL",
    "SELECT id FROM {t} WHERE (id > 5 AND NOT (i < 0 OR b)) OR s LIKE '%-4_'",
    "SELECT id FROM {t} WHERE id > 20 LIMIT 5",
]


@pytest.mark.parametrize("sql", LITERAL_QUERIES)
def test_select_with_literals_equals_duckdb_over_doget(server, all_types, sql):
    assert_same(server, sql, None, do_get(server.flight_uri, "fsq", "all"))


# Parameters of every primitive type, bound by ADBC from Python values.
PARAMETER_QUERIES = [
    ("SELECT id FROM {t} WHERE b = ?", (True,)),
    ("SELECT id FROM {t} WHERE i > ?", (20,)),
    ("SELECT id FROM {t} WHERE f = ?", (3.5,)),
    ("SELECT id FROM {t} WHERE d < ?", (-10.0,)),
    ("SELECT id FROM {t} WHERE dec = ?", (decimal.Decimal("0.70"),)),
    ("SELECT id FROM {t} WHERE day = ?", (dt.date(2024, 1, 3),)),
    ("SELECT id FROM {t} WHERE t >= ?", (dt.time(20, 0),)),
    ("SELECT id FROM {t} WHERE ts BETWEEN ? AND ?", (dt.datetime(2024, 1, 1, 0, 10), dt.datetime(2024, 1, 1, 0, 20))),
    ("SELECT id FROM {t} WHERE tz = ?", (dt.datetime(2024, 1, 2, 5, tzinfo=dt.timezone.utc),)),
    ("SELECT id FROM {t} WHERE s = ? OR id = ?", ("s02-2", 40)),
    ("SELECT id FROM {t} WHERE u = ?", (uuid.UUID(int=3).bytes,)),
    ("SELECT id FROM {t} WHERE fx = ?", (bytes([2, 2, 2]),)),
    ("SELECT id FROM {t} WHERE bin = ?", (bytes([1, 1]),)),
    ("SELECT id FROM {t} WHERE st.x IN (?, ?)", (1, 7)),
    ("SELECT id FROM {t} WHERE s LIKE ?", ("s1%",)),
]


@pytest.mark.parametrize("sql,params", PARAMETER_QUERIES, ids=[q for q, _ in PARAMETER_QUERIES])
def test_select_with_parameters_equals_duckdb_over_doget(server, all_types, sql, params):
    assert_same(server, sql, params, do_get(server.flight_uri, "fsq", "all"))


def test_select_reads_partitioned_and_evolved_tables(server, rest):
    """Catches reads that lose rows of a partitioned table's files or of the files
    written before a schema change (their new column reads as null)."""
    schema = Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "region", StringType()),
        NestedField(3, "v", DoubleType()),
    )
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="region"),
        PartitionField(source_id=1, field_id=1001, transform=BucketTransform(4), name="id_bucket"),
    )
    rest.create_namespace_if_not_exists("fsq_p")
    table = rest.create_table("fsq_p.parts", schema, partition_spec=spec)
    rows = pa.Table.from_pydict(
        {"id": list(range(40)), "region": [["eu", "us", None][i % 3] for i in range(40)],
         "v": [i / 4 for i in range(40)]},
        schema=table.schema().as_arrow(),
    )
    put(server.flight_uri, ("fsq_p", "parts"), rows)
    for sql in ["SELECT * FROM {t} WHERE region = 'eu' AND id > 10",
                "SELECT id, v FROM {t} WHERE region IS NULL OR v >= 9"]:
        conn = connect(server)
        try:
            with conn.cursor() as cur:
                cur.execute(sql.format(t="fsq_p.parts"))
                got = cur.fetch_arrow_table()
        finally:
            conn.close()
        expected = duckdb_over(do_get(server.flight_uri, "fsq_p", "parts")).execute(
            sql.format(t="doget")).fetch_arrow_table()
        assert sorted(got.to_pylist(), key=lambda r: r["id"]) == sorted(
            expected.to_pylist(), key=lambda r: r["id"]), sql

    # Evolved: puts may add a nullable column; the first put's rows read it as null.
    rest.create_table("fsq_p.evolving", Schema(NestedField(1, "id", LongType(), required=True)),
                      properties={"skade.ingest.evolve-schema": "true"})
    first = pa.table({"id": pa.array([1, 2, 3], pa.int64())},
                     schema=pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    put(server.flight_uri, ("fsq_p", "evolving"), first)
    second = pa.table({"id": pa.array([4, 5], pa.int64()), "note": ["four", None]},
                      schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                        pa.field("note", pa.string())]))
    put(server.flight_uri, ("fsq_p", "evolving"), second)
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT id, note FROM fsq_p.evolving WHERE note IS NULL")
            got = cur.fetch_arrow_table()
    finally:
        conn.close()
    assert got.to_pylist() == [{"id": 1, "note": None}, {"id": 2, "note": None},
                               {"id": 3, "note": None}, {"id": 5, "note": None}]


def test_select_honours_another_engines_deletes(tmp_path, postgres_database):
    """Catches a query path that reads data files without their position deletes: the
    deleted rows would come back (the expected rows are what was put, less what was
    deleted)."""
    database = postgres_database("fsq_deletes")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    gone = [3, 14, 15, 92]
    with skade(tmp_path / "a", database, warehouse, "--maintenance", "false") as srv:
        for i in range(4):
            ids = list(range(i * 25, i * 25 + 25))
            put(srv.flight_uri, ("fd", "t"), pa.table(
                {"id": pa.array(ids, pa.int64()), "source": ["flight"] * 25},
                schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                  pa.field("source", pa.string())])))
        engine = sql_catalog(database, warehouse)
        try:
            delete_rows(engine, "fd.t", gone)
        finally:
            engine.close()
        conn = connect(srv)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT id FROM fd.t WHERE id < 50 OR id > ?", (80,))
                got = sorted(cur.fetch_arrow_table().column("id").to_pylist())
        finally:
            conn.close()
        assert got == [i for i in range(100) if (i < 50 or i > 80) and i not in gone]
        assert sorted(do_get(srv.flight_uri, "fd", "t").column("id").to_pylist()) == [
            i for i in range(100) if i not in gone]


def test_get_objects_at_every_depth_lists_what_was_created(server):
    """Catches metadata commands that miss a namespace (a nested one), a table, or a
    column, or whose filters select the wrong ones."""
    tables = {
        ("fsq_meta", "alpha"): pa.table({"id": [1], "name": ["a"]}),
        ("fsq_meta", "beta"): pa.table({"k": [1.5]}),
        ("fsq_meta.inner", "gamma"): pa.table({"when": pa.array([0], pa.timestamp("us", "UTC"))}),
    }
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            for (ns, name), data in tables.items():
                cur.adbc_ingest(name, data, mode="create", db_schema_name=ns)
        catalogs = conn.adbc_get_objects(depth="catalogs").read_all().to_pylist()
        assert [c["catalog_name"] for c in catalogs] == ["skade"]
        assert catalogs[0]["catalog_db_schemas"] is None

        schemas = conn.adbc_get_objects(depth="db_schemas", db_schema_filter="fsq_meta%").read_all()
        [entry] = schemas.to_pylist()
        assert sorted(s["db_schema_name"] for s in entry["catalog_db_schemas"]) == [
            "fsq_meta", "fsq_meta.inner"]

        listed = conn.adbc_get_objects(depth="tables", db_schema_filter="fsq_meta%").read_all()
        found = {(s["db_schema_name"], t["table_name"], t["table_type"])
                 for c in listed.to_pylist() for s in c["catalog_db_schemas"]
                 for t in s["db_schema_tables"] or []}
        assert found == {(ns, name, "TABLE") for ns, name in tables}

        columns = conn.adbc_get_objects(depth="all", db_schema_filter="fsq_meta%",
                                        table_name_filter="%a").read_all().to_pylist()
        got = {(s["db_schema_name"], t["table_name"]): [c["column_name"] for c in t["table_columns"]]
               for c in columns for s in c["catalog_db_schemas"] for t in s["db_schema_tables"] or []}
        assert got == {(ns, name): data.column_names for (ns, name), data in tables.items()
                       if name.endswith("a")}

        none = conn.adbc_get_objects(depth="tables", catalog_filter="other").read_all().to_pylist()
        assert none == []
        assert conn.adbc_get_table_types() == ["TABLE"]
    finally:
        conn.close()


def test_get_table_schema_equals_the_iceberg_schema_as_arrow(server, rest, all_types):
    """Catches a table schema that is not the table's Iceberg schema converted to Arrow
    (a type, nullability or field id that differs from what pyiceberg derives)."""
    conn = connect(server)
    try:
        got = conn.adbc_get_table_schema("all", db_schema_filter="fsq")
    finally:
        conn.close()
    expected = rest.load_table("fsq.all").schema().as_arrow()

    def plain(t: pa.DataType) -> pa.DataType:
        # pyiceberg reads strings as their large layout; skade sends the layout
        # docs/arrow-types.md gives. The values are the same.
        if t == pa.large_string():
            return pa.string()
        # The same instants: pyiceberg names UTC "UTC", skade "+00:00" (docs/arrow-types.md).
        if pa.types.is_timestamp(t) and t.tz in ("UTC", "+00:00"):
            return pa.timestamp(t.unit, "UTC")
        if isinstance(t, pa.BaseExtensionType):
            # arrow.uuid: skade sends its storage, fixed_size_binary(16).
            return t.storage_type
        if pa.types.is_struct(t):
            return pa.struct([pa.field(f.name, plain(f.type), f.nullable) for f in t])
        return t

    shape = lambda s: [(f.name, plain(f.type), f.nullable, (f.metadata or {}).get(b"PARQUET:field_id"))
                       for f in s]
    assert shape(got) == shape(expected)


def test_a_transaction_with_an_empty_table_commits_the_other_three(server):
    """Catches an empty ingest (ADBC sends an empty DoPut for a table with no rows)
    answered with a silent success, with a message that does not say what happened, or
    that ends the user's transaction: the other three tables must commit."""
    data = {name: pa.table({"id": list(range(i + 1))}) for i, name in enumerate(["a", "b", "c"])}
    conn = connect(server, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.adbc_ingest("a", data["a"], mode="create", db_schema_name="fsq_txn")
            with pytest.raises(adbc_driver_manager.Error) as refused:
                cur.adbc_ingest("empty", pa.table({"id": pa.array([], pa.int64())}),
                                mode="create", db_schema_name="fsq_txn")
            message = str(refused.value)
            for said in ["no descriptor and no schema", "created nothing",
                         "touched no open transaction", "REST catalog"]:
                assert said in message, message
            cur.adbc_ingest("b", data["b"], mode="create", db_schema_name="fsq_txn")
            cur.adbc_ingest("c", data["c"], mode="create", db_schema_name="fsq_txn")
        conn.commit()
    finally:
        conn.close()
    for name, table in data.items():
        assert do_get(server.flight_uri, "fsq_txn", name).column("id").to_pylist() == table.column("id").to_pylist()
    with pytest.raises(pa.ArrowKeyError, match="does not exist"):
        do_get(server.flight_uri, "fsq_txn", "empty")
