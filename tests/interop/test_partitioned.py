"""Interop: partitioned tables end to end with stock clients, against a real
``skade serve`` (``conftest.py``).

pyiceberg's ``RestCatalog`` creates the tables (``day(ts)`` + ``bucket(8, id)``, and
``identity(category)``), pyarrow streams rows over Flight that span several days and
include null ``ts`` and null ``category``, and pyiceberg reads them back: equal rows,
the right partition tuple on every data file, and a scan filtered on one day plans only
that day's files.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pyarrow.parquet as pq
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.expressions import And, GreaterThanOrEqual, LessThan
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from test_flight_roundtrip import put_table

NS = "parts"
DAY_US = 86_400_000_000
START = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


@pytest.fixture(scope="module")
def catalog(skade_server):
    cat = load_catalog("skade", type="rest", uri=skade_server.metrics_url)
    cat.create_namespace_if_not_exists(NS)
    return cat


@pytest.fixture(scope="module")
def client(skade_server):
    c = flight.FlightClient(skade_server.flight_uri, generic_options=[("grpc.enable_http_proxy", 0)])
    yield c
    c.close()


def schema() -> Schema:
    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "category", StringType(), required=False),
    )


def rows(n: int) -> pa.Table:
    """``n`` rows over 4 days (every 7th ``ts`` null, every 5th ``category`` null)."""
    start_us = int(START.timestamp() * 1_000_000)
    ts = [None if i % 7 == 0 else start_us + (i % 4) * DAY_US + i for i in range(n)]
    category = [None if i % 5 == 0 else f"c{i % 3}" for i in range(n)]
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
            "category": pa.array(category, pa.string()),
        }
    )


def read_back(catalog, name: str, row_filter=None) -> pa.Table:
    table = catalog.load_table((NS, name))
    scan = table.scan(row_filter=row_filter) if row_filter is not None else table.scan()
    return scan.to_arrow().sort_by("id")


def test_day_and_bucket_partitions_read_back_and_prune(catalog, client):
    """Catches rows written to the wrong partition (tuples checked per file with the
    day of every row) and a spec readers cannot prune by (a one-day filter must plan
    only that day's files)."""
    spec = PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=1, field_id=1001, transform=BucketTransform(8), name="id_bucket"),
    )
    catalog.create_table((NS, "events"), schema=schema(), partition_spec=spec)
    sent = rows(400)
    put_table(client, (NS, "events"), sent)

    got = read_back(catalog, "events")
    assert got.num_rows == sent.num_rows
    assert got.column("id").to_pylist() == sent.column("id").to_pylist()
    assert got.column("ts").to_pylist() == sent.column("ts").to_pylist()

    table = catalog.load_table((NS, "events"))
    tasks = list(table.scan().plan_files())
    days = set()
    for task in tasks:
        day = task.file.partition[0]
        days.add(day)
        path = task.file.file_path.removeprefix("file://").removeprefix("file:")
        in_file = pq.read_table(path).column("ts").to_pylist()
        assert {None if v is None else (v - EPOCH).days for v in in_file} == {day}, path
    assert None in days, "null ts rows are a partition of their own"
    assert len(days) == 5, days  # 4 days + null

    one_day = And(
        GreaterThanOrEqual("ts", START.isoformat()),
        LessThan("ts", (START + dt.timedelta(days=1)).isoformat()),
    )
    pruned = list(table.scan(row_filter=one_day).plan_files())
    assert 0 < len(pruned) < len(tasks)
    first_day = (START - EPOCH).days
    assert {t.file.partition[0] for t in pruned} == {first_day}
    filtered = read_back(catalog, "events", one_day)
    assert filtered.num_rows == pc.sum(
        pc.and_(pc.greater_equal(sent["ts"], pa.scalar(START)), pc.less(sent["ts"], pa.scalar(START + dt.timedelta(days=1))))
    ).as_py()


def test_identity_partitions_keep_nulls(catalog, client):
    """Catches null category rows dropped or mixed into another partition."""
    spec = PartitionSpec(PartitionField(source_id=3, field_id=1000, transform=IdentityTransform(), name="category"))
    catalog.create_table((NS, "by_category"), schema=schema(), partition_spec=spec)
    sent = rows(100)
    put_table(client, (NS, "by_category"), sent)
    got = read_back(catalog, "by_category")
    assert got.column("category").to_pylist() == sent.column("category").to_pylist()
    partitions = {t.file.partition[0] for t in catalog.load_table((NS, "by_category")).scan().plan_files()}
    assert partitions == {None, "c0", "c1", "c2"}
