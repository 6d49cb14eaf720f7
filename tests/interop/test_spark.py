"""Interop: Apache Spark (PySpark 4.1 with Iceberg 1.12's Spark runtime) reads and
creates skade's tables through skade's REST catalog, with the settings of docs/reading.md.

One Spark session for the whole suite (``spark`` in ``conftest.py``); each server is a
catalog of it (``spark_catalog``), configured with only that guide's ``--conf`` lines.

* Every table shape skade writes (``shapes.py``: unpartitioned with every type, each
  partition transform, evolved schemas, v3 defaults, 25 snapshots) reads equal to what
  was sent; each partitioned table also through a filter on its source column (so a
  partition value that is wrong makes Iceberg prune a file whose rows then go missing),
  and every row's partition value (Spark's ``_partition`` column) equals Iceberg Java's
  own transform of its value (``system.bucket``, ``system.days``, ...); ``many`` also as of
  three of its snapshots (time travel).
* Metadata tables: ``.snapshots``, ``.history``, ``.files``, ``.manifests`` and
  ``.partitions`` parse and agree with what was sent.
* On S3 (moto) with vended credentials: the catalog URI is all Spark is given.
* DDL from Spark: ``CREATE TABLE ... PARTITIONED BY`` and ``ALTER TABLE ... ADD COLUMN``
  through skade's REST catalog; skade's Flight puts then follow the new spec and schema.

* skade's deletes (position-delete files on v2, deletion vectors on v3) and a replaced
  table (new schema and rows, the older snapshot by time travel) read as skade meant.

Not yet: Spark writes (``INSERT``, ``DELETE``, ``MERGE``): skade refuses ``add-snapshot``
over REST.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import Counter

import pyarrow as pa
import pytest
from pyiceberg.catalog import load_catalog

from conftest import documented_spark_command
from shapes import PARTITIONED, flight_client, write_shapes, write_partitioned, write_plain
from test_flight_roundtrip import put_table

NS = "spark_shapes"
SHAPES = ["plain", *PARTITIONED, "evolved", "v3_defaults", "many"]
UTC = dt.timezone.utc

# Each transform as Iceberg's Spark functions compute it, for the _partition check.
SPARK_FUNCTIONS = {
    "p_identity": {"s": "s"},
    "p_bucket": {"id_bucket": "{cat}.system.bucket(8, id)", "s_bucket": "{cat}.system.bucket(4, s)"},
    "p_truncate": {"i_trunc": "{cat}.system.truncate(50, i)", "s_trunc": "{cat}.system.truncate(1, s)"},
    "p_year": {"day_year": "{cat}.system.years(day)"},
    "p_month": {"tstz_month": "{cat}.system.months(tstz)"},
    "p_day": {"ts_day": "{cat}.system.days(ts)"},
    "p_hour": {"tstz_hour": "{cat}.system.hours(tstz)"},
}


def spark_catalog(spark, alias: str, server) -> str:
    """Makes ``alias`` docs/reading.md's ``skade`` catalog (its ``spark.sql.catalog.skade*``
    settings) on ``server``; returns ``alias``."""
    _, confs = documented_spark_command()
    prefix = "spark.sql.catalog.skade"
    settings = {k[len(prefix):]: v for k, v in confs.items() if k == prefix or k.startswith(prefix + ".")}
    assert settings[".uri"] == "http://127.0.0.1:9464", settings
    settings[".uri"] = server.metrics_url
    for suffix, value in settings.items():
        spark.conf.set(f"spark.sql.catalog.{alias}{suffix}", value)
    return alias


def ordered(rows: list[dict]) -> list[dict]:
    """Rows by id, then by all their values (rows without an id), whichever the reader."""
    return sorted(rows, key=lambda r: (r.get("id") is None, r.get("id") or 0, json.dumps(r, default=str, sort_keys=True)))


def spark_rows(spark, sql: str) -> list[dict]:
    return ordered(spark.sql(sql).toArrow().to_pylist())


@pytest.fixture(scope="module")
def local(spark, skade_server):
    return spark_catalog(spark, "skade_local", skade_server)


@pytest.fixture(scope="module")
def shapes(skade_server):
    return write_shapes(skade_server, NS)


@pytest.mark.parametrize("name", SHAPES)
def test_spark_reads_every_shape_equal_to_what_was_sent(spark, local, shapes, name):
    """Catches a table shape Iceberg Java cannot read or reads differently: a type, a
    partition tuple, an evolved or defaulted column, a snapshot."""
    shape = shapes[name]
    table = f"{local}.{NS}.{name}"
    assert spark_rows(spark, f"SELECT * FROM {table}") == ordered(shape.rows), name

    if shape.where is not None:
        got = spark_rows(spark, f"SELECT * FROM {table} WHERE {shape.where}")
        assert got == ordered([r for r in shape.rows if shape.matches(r)]), f"{name} WHERE {shape.where}"
        checks = " OR ".join(
            f"NOT (_partition.{field} <=> {function.format(cat=local)})"
            for field, function in SPARK_FUNCTIONS[name].items()
        )
        wrong = spark.sql(f"SELECT *, _partition FROM {table} WHERE {checks}").toArrow().to_pylist()
        assert wrong == [], f"{name}: rows whose partition value is not Iceberg's transform of them: {wrong[:5]}"
        for field in SPARK_FUNCTIONS[name]:  # the check above compared real values
            values = spark.sql(f"SELECT count(DISTINCT _partition.{field}) AS n FROM {table}").collect()[0]["n"]
            assert values > 1, f"{name}: _partition.{field} has {values} distinct values"

    for snapshot_id in list(shape.snapshot_rows)[:: max(1, len(shape.snapshot_rows) // 3)][:3]:
        got = spark_rows(spark, f"SELECT * FROM {table} VERSION AS OF {snapshot_id}")
        assert got == ordered(shape.snapshot_rows[snapshot_id]), f"{name} as of {snapshot_id}"


def test_spark_metadata_tables_parse_and_agree_with_what_was_sent(spark, local, shapes, skade_server):
    """Catches snapshots, history, manifests, files or partitions Iceberg Java's metadata
    tables cannot read or that disagree with the puts."""
    many = shapes["many"]
    table = f"{local}.{NS}.many"
    snapshots = spark.sql(f"SELECT * FROM {table}.snapshots").toArrow().to_pylist()
    appends = [s for s in snapshots if s["operation"] == "append"]
    assert len(appends) == many.puts, [s["operation"] for s in snapshots]
    assert {s["snapshot_id"] for s in appends} == set(many.snapshot_rows)
    assert sum(int(dict(s["summary"])["added-records"]) for s in appends) == len(many.rows)
    assert all(isinstance(s["committed_at"], dt.datetime) for s in snapshots)

    history = spark.sql(f"SELECT * FROM {table}.history").toArrow().to_pylist()
    assert set(many.snapshot_rows) <= {h["snapshot_id"] for h in history}
    assert all(h["is_current_ancestor"] for h in history)

    files = spark.sql(f"SELECT * FROM {table}.files").toArrow().to_pylist()
    assert sum(f["record_count"] for f in files) == len(many.rows)
    assert all(f["file_format"] == "PARQUET" and f["content"] == 0 for f in files)
    manifests = spark.sql(f"SELECT * FROM {table}.manifests").toArrow().to_pylist()
    assert sum(m["added_data_files_count"] + m["existing_data_files_count"] for m in manifests if m["content"] == 0) == len(files)

    # .partitions of a day-partitioned table: one row per day (and one for null), with
    # the rows of that day, as computed from what was sent.
    days = Counter(None if r["ts"] is None else r["ts"].date() for r in shapes["p_day"].rows)
    partitions = spark.sql(f"SELECT partition.ts_day AS day, record_count FROM {local}.{NS}.p_day.partitions")
    assert {r["day"]: r["record_count"] for r in partitions.toArrow().to_pylist()} == dict(days)


def test_spark_reads_s3_tables_with_vended_credentials(spark, skade_s3_server):
    """Catches an S3 table Spark cannot open with what skade's catalog hands it (endpoint,
    path style, region as Iceberg Java's `client.region`, credentials): Spark is given
    only the catalog URI."""
    catalog = spark_catalog(spark, "skade_s3", skade_s3_server)
    # No region but the catalog's: none in the settings, none in the environment (the
    # suite gives its S3 credentials and region to skade and boto3 only).
    assert spark.conf.get(f"spark.sql.catalog.{catalog}.client.region", None) is None
    ns = "spark_s3"
    load_catalog("s3", type="rest", uri=skade_s3_server.metrics_url).create_namespace_if_not_exists(ns)
    for shape in [write_plain(skade_s3_server, ns), write_partitioned(skade_s3_server, ns, "p_hour")]:
        table = f"{catalog}.{ns}.{shape.name}"
        assert spark_rows(spark, f"SELECT * FROM {table}") == ordered(shape.rows), shape.name
        if shape.where is not None:
            got = spark_rows(spark, f"SELECT * FROM {table} WHERE {shape.where}")
            assert got == ordered([r for r in shape.rows if shape.matches(r)]), shape.name
    files = spark.sql(f"SELECT file_path FROM {catalog}.{ns}.plain.files").toArrow().to_pylist()
    assert files and all(f["file_path"].startswith("s3://") for f in files), files


def test_spark_ddl_creates_and_evolves_tables_that_skade_puts_follow(spark, local, skade_server):
    """Catches REST DDL from Iceberg's Java catalog client that skade refuses or stores
    differently (the partition spec, the new column), and puts that do not follow it."""
    ns = "spark_ddl"
    table = f"{local}.{ns}.events"
    spark.sql(f"CREATE NAMESPACE IF NOT EXISTS {local}.{ns}")
    spark.sql(
        f"CREATE TABLE {table} (id BIGINT, ts TIMESTAMP, category STRING) USING iceberg "
        "PARTITIONED BY (days(ts), bucket(4, id), category)"
    )
    spec = load_catalog("ddl", type="rest", uri=skade_server.metrics_url).load_table((ns, "events")).spec()
    assert [(f.name, str(f.transform)) for f in spec.fields] == [
        ("ts_day", "day"), ("id_bucket", "bucket[4]"), ("category", "identity")
    ]

    start = dt.datetime(2026, 3, 1, 22, tzinfo=UTC)
    first = pa.table({
        "id": pa.array(range(40), pa.int64()),
        "ts": pa.array([start + dt.timedelta(hours=3 * i) for i in range(40)], pa.timestamp("us", tz="UTC")),
        "category": pa.array([["x", "y", None][i % 3] for i in range(40)]),
    })
    client = flight_client(skade_server)
    put_table(client, (ns, "events"), first)

    spark.sql(f"ALTER TABLE {table} ADD COLUMN note STRING")
    with_note = pa.table({
        "id": pa.array([100, 101], pa.int64()),
        "ts": pa.array([start, None], pa.timestamp("us", tz="UTC")),
        "category": pa.array(["z", "x"]),
        "note": pa.array(["n100", None]),
    })
    put_table(client, (ns, "events"), with_note)
    put_table(client, (ns, "events"), first.slice(0, 5))  # leaves the new column out
    client.close()

    expected = (
        [{**r, "note": None} for r in first.to_pylist()]
        + with_note.to_pylist()
        + [{**r, "note": None} for r in first.slice(0, 5).to_pylist()]
    )
    assert spark_rows(spark, f"SELECT * FROM {table}") == ordered(expected)
    one_day = [r for r in expected if r["ts"] is not None and r["ts"].date() == dt.date(2026, 3, 2)]
    assert spark_rows(spark, f"SELECT * FROM {table} WHERE ts >= TIMESTAMP '2026-03-02 00:00:00 UTC' "
                             "AND ts < TIMESTAMP '2026-03-03 00:00:00 UTC'") == ordered(one_day)
    wrong = spark.sql(
        f"SELECT * FROM {table} WHERE NOT (_partition.ts_day <=> {local}.system.days(ts)) "
        f"OR NOT (_partition.id_bucket <=> {local}.system.bucket(4, id)) "
        "OR NOT (_partition.category <=> category)"
    ).toArrow().to_pylist()
    assert wrong == []


@pytest.mark.parametrize("version", [2, 3])
def test_spark_reads_skades_deletes_and_replaces(spark, local, skade_server, version):
    """Catches delete files Iceberg Java reads differently from what skade meant (a
    position-delete file's path or positions, a deletion vector's blob, offset or
    referenced file) and a replaced table whose new schema, rows or older snapshot Spark
    cannot read."""
    import adbc_driver_flightsql.dbapi as flightsql

    rest = load_catalog(f"spark-del-{skade_server.metrics_url}", type="rest", uri=skade_server.metrics_url)
    rest.create_namespace_if_not_exists("spark_del")
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    name = f"d_v{version}"
    rest.create_table(
        f"spark_del.{name}",
        Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "s", StringType())),
        properties={"format-version": str(version)},
    )
    client = flight_client(skade_server)
    try:
        for first in (0, 100, 200):
            rows = pa.table({"id": pa.array(range(first, first + 100), pa.int64()),
                             "s": pa.array([f"s{i}" for i in range(first, first + 100)], pa.string())})
            put_table(client, ("spark_del", name), rows)
    finally:
        client.close()
    conn = flightsql.connect(skade_server.flight_uri, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DELETE FROM spark_del.{name} WHERE id < 10 OR id IN (150, 151, 299)")
            cur.fetchall()
            cur.execute(f"DELETE FROM spark_del.{name} WHERE id BETWEEN 5 AND 20")
            cur.fetchall()
    finally:
        conn.close()
    gone = set(range(21)) | {150, 151, 299}
    table = f"{local}.spark_del.{name}"
    got = [r["id"] for r in spark_rows(spark, f"SELECT id FROM {table}")]
    assert got == [i for i in range(300) if i not in gone]
    before = rest.load_table(f"spark_del.{name}").current_snapshot().snapshot_id
    conn = flightsql.connect(skade_server.flight_uri)
    try:
        with conn.cursor() as cur:
            replacement = pa.table({"k": pa.array(["x", "y"], pa.string()), "v": pa.array([1.5, 2.5])})
            cur.adbc_ingest(name, replacement, mode="replace", db_schema_name="spark_del")
        conn.commit()
    finally:
        conn.close()
    spark.sql(f"REFRESH TABLE {table}")
    assert spark.sql(f"SELECT k, v FROM {table} ORDER BY k").toArrow().to_pylist() == replacement.to_pylist()
    old = [r["id"] for r in spark_rows(spark, f"SELECT id FROM {table} VERSION AS OF {before}")]
    assert old == got
