"""Every table shape skade writes, written to a server with stock clients, with the rows
a reader must see computed here from what was sent (never read back from the server).

Used by ``test_spark.py`` (Spark reads each shape) and ``test_iceberg_java.py`` (Iceberg
Java parses each shape's metadata, manifest lists and manifests). ``write_shapes(server,
namespace)`` writes them all and returns them by name:

* ``plain``: unpartitioned, created by its first put, every Iceberg type Spark reads
  (boolean, int, long, float, double, decimal, date, timestamp, timestamptz, string,
  binary, fixed, list, struct, map, list of struct), nulls in every column, two puts;
* ``p_identity``, ``p_bucket``, ``p_truncate``, ``p_year``, ``p_month``, ``p_day``,
  ``p_hour``: every partition transform (created over REST with pyiceberg, then one put),
  values before and after 1970, nulls, multi-byte strings; each with a predicate on its
  source column (``where``), so a reader that prunes by the partition values must still
  find every row;
* ``evolved``: renames (top level and nested), promotions (int → long, float → double,
  decimal(5, 2) → decimal(8, 2)), a drop and a re-add under the same name, a new column,
  rows written before and after;
* ``v3_defaults``: a format v3 table with a required column added with an
  ``initial-default`` (rows written before read it) and a ``write-default`` (a later put
  that leaves the column out stores it);
* ``many``: 25 puts, 25 append snapshots (``snapshot_rows`` maps each put's snapshot id,
  from its ack, to the rows a reader sees as of it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import json
import urllib.request
from typing import Callable

import pyarrow as pa
import pyarrow.flight as flight
from pyiceberg.catalog import load_catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import (
    BucketTransform,
    DayTransform,
    HourTransform,
    IdentityTransform,
    MonthTransform,
    TruncateTransform,
    YearTransform,
)
from pyiceberg.types import (
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
)

from test_flight_roundtrip import put_table

UTC = dt.timezone.utc


@dataclasses.dataclass
class Shape:
    name: str
    rows: list[dict]
    """Every row a reader of the current snapshot sees, as ``pyarrow``'s ``to_pylist``."""
    where: str | None = None
    """A Spark SQL predicate on a partition source column (None: unpartitioned)."""
    matches: Callable[[dict], bool] | None = None
    """The same predicate in Python, applied to ``rows``."""
    snapshot_rows: dict[int, list[dict]] = dataclasses.field(default_factory=dict)
    """Snapshot id → the rows a reader sees as of that snapshot (``many`` only)."""
    puts: int = 1
    """DoPut streams sent (one append snapshot each)."""


def flight_client(server) -> flight.FlightClient:
    return flight.FlightClient(server.flight_uri, generic_options=[("grpc.enable_http_proxy", 0)])


def rest(server, method: str, path: str, body: dict | None = None) -> dict | None:
    """One Iceberg REST call to the server's catalog; raises on an error status."""
    request = urllib.request.Request(
        f"{server.metrics_url}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as response:
        text = response.read()
    return json.loads(text) if text else None


def snapshot_id_of(ack: bytes) -> int:
    """The ``snapshot_id`` (field 2, a signed int64 varint) of a ``skade.v1.CommitAck``."""
    pos, snapshot_id = 0, 0

    def varint() -> int:
        nonlocal pos
        value = shift = 0
        while True:
            byte = ack[pos]
            pos += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value

    while pos < len(ack):
        key = varint()
        field, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
            if field == 2:
                snapshot_id = value - (1 << 64) if value >= 1 << 63 else value
        elif wire == 2:
            size = varint()
            pos += size
        else:
            pos += 8 if wire == 1 else 4
    return snapshot_id


# --------------------------------------------------------------------------- plain


def plain_rows(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))

    def nul(i: int, value, every: int = 7):
        return None if i % every == 3 else value

    base = dt.datetime(1969, 12, 30, 23, 0, 0, 250_000)
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "flag": pa.array([nul(i, i % 2 == 0) for i in ids], pa.bool_()),
            "small": pa.array([nul(i, i * 3 - 50) for i in ids], pa.int32()),
            "ratio": pa.array([nul(i, i / 4) for i in ids], pa.float32()),
            "score": pa.array([nul(i, i * 1.25 - 3) for i in ids], pa.float64()),
            "price": pa.array(
                [nul(i, decimal.Decimal(i * 101 - 999) / 100) for i in ids], pa.decimal128(10, 2)
            ),
            "day": pa.array([nul(i, dt.date(1969, 12, 1) + dt.timedelta(days=i * 3)) for i in ids], pa.date32()),
            "at": pa.array([nul(i, base + dt.timedelta(minutes=37 * i)) for i in ids], pa.timestamp("us")),
            "at_utc": pa.array(
                [nul(i, (base + dt.timedelta(hours=5 * i)).replace(tzinfo=UTC)) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "name": pa.array([nul(i, f"näme-{i}-✓") for i in ids], pa.string()),
            "blob": pa.array([nul(i, bytes([i % 256, 0, 255])) for i in ids], pa.binary()),
            "key": pa.array([nul(i, i.to_bytes(16, "big")) for i in ids], pa.binary(16)),
            "tags": pa.array([nul(i, [f"t{i % 3}", None, "x"][: i % 4]) for i in ids], pa.list_(pa.string())),
            "addr": pa.array(
                [nul(i, {"city": f"c{i % 5}", "zip": nul(i + 1, 1000 + i)}) for i in ids],
                pa.struct([("city", pa.string()), ("zip", pa.int32())]),
            ),
            "attrs": pa.array(
                [nul(i, [("a", i), ("b", nul(i + 2, -i))]) for i in ids], pa.map_(pa.string(), pa.int64())
            ),
            "items": pa.array(
                [nul(i, [{"code": f"k{i}"}, {"code": None}][: 1 + i % 2]) for i in ids],
                pa.list_(pa.struct([("code", pa.string())])),
            ),
        }
    )


def write_plain(server, ns: str, name: str = "plain") -> Shape:
    client = flight_client(server)
    first, second = plain_rows(0, 120), plain_rows(120, 80)
    put_table(client, (ns, name), first)
    put_table(client, (ns, name), second)
    client.close()
    return Shape(name, pa.concat_tables([first, second]).to_pylist(), puts=2)


# --------------------------------------------------------------------------- partitions

PART_SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "i", IntegerType(), required=False),
    NestedField(3, "s", StringType(), required=False),
    NestedField(4, "day", DateType(), required=False),
    NestedField(5, "ts", TimestampType(), required=False),
    NestedField(6, "tstz", TimestamptzType(), required=False),
)


def part_rows(n: int = 240) -> pa.Table:
    """Rows around 1970 (both sides, fractional seconds before it), nulls in every column."""
    start = dt.datetime(1969, 12, 31, 22, 59, 59, 500_000)
    ids = list(range(n))

    def nul(i: int, value, every: int):
        return None if i % every == 0 else value

    return pa.table(
        {
            "id": pa.array([nul(i, i * 7919 - 900_000, 41) for i in ids], pa.int64()),
            "i": pa.array([nul(i, i - 120, 13) for i in ids], pa.int32()),
            "s": pa.array([nul(i, ["a", "b", "ab", "äöü", "日本語", "zz"][i % 6] + str(i % 4), 11) for i in ids]),
            "day": pa.array([nul(i, dt.date(1968, 11, 20) + dt.timedelta(days=9 * i), 17) for i in ids], pa.date32()),
            "ts": pa.array([nul(i, start + dt.timedelta(hours=2 * i), 19) for i in ids], pa.timestamp("us")),
            "tstz": pa.array(
                [nul(i, (start + dt.timedelta(minutes=7 * i)).replace(tzinfo=UTC), 23) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


def _between(column: str, low, high) -> Callable[[dict], bool]:
    return lambda r: r[column] is not None and low <= r[column] < high


PARTITIONED = {
    # name: (partition fields as (source id, transform, name), Spark predicate, Python predicate)
    "p_identity": (
        [(3, IdentityTransform(), "s")],
        "s = 'äöü3'",
        lambda r: r["s"] == "äöü3",
    ),
    "p_bucket": (
        [(1, BucketTransform(8), "id_bucket"), (3, BucketTransform(4), "s_bucket")],
        "id = 7919 * 50 - 900000",
        lambda r: r["id"] == 7919 * 50 - 900_000,
    ),
    "p_truncate": (
        [(2, TruncateTransform(50), "i_trunc"), (3, TruncateTransform(1), "s_trunc")],
        "i >= -35 AND i < 7",
        _between("i", -35, 7),
    ),
    "p_year": (
        [(4, YearTransform(), "day_year")],
        "day >= DATE '1969-03-01' AND day < DATE '1970-02-01'",
        _between("day", dt.date(1969, 3, 1), dt.date(1970, 2, 1)),
    ),
    "p_month": (
        [(6, MonthTransform(), "tstz_month")],
        "tstz >= TIMESTAMP '1969-12-31 23:00:00 UTC' AND tstz < TIMESTAMP '1970-01-01 00:30:00 UTC'",
        _between("tstz", dt.datetime(1969, 12, 31, 23, tzinfo=UTC), dt.datetime(1970, 1, 1, 0, 30, tzinfo=UTC)),
    ),
    "p_day": (
        [(5, DayTransform(), "ts_day")],
        "ts >= TIMESTAMP_NTZ '1969-12-31 12:00:00' AND ts < TIMESTAMP_NTZ '1970-01-02 06:00:00'",
        _between("ts", dt.datetime(1969, 12, 31, 12), dt.datetime(1970, 1, 2, 6)),
    ),
    "p_hour": (
        [(6, HourTransform(), "tstz_hour")],
        "tstz >= TIMESTAMP '1969-12-31 23:59:59.5 UTC' AND tstz < TIMESTAMP '1970-01-01 04:00:00 UTC'",
        _between("tstz", dt.datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=UTC), dt.datetime(1970, 1, 1, 4, tzinfo=UTC)),
    ),
}


def write_partitioned(server, ns: str, name: str) -> Shape:
    fields, where, matches = PARTITIONED[name]
    catalog = load_catalog("shapes", type="rest", uri=server.metrics_url)
    spec = PartitionSpec(
        *(
            PartitionField(source_id=source, field_id=1000 + k, transform=transform, name=field)
            for k, (source, transform, field) in enumerate(fields)
        )
    )
    catalog.create_table((ns, name), schema=PART_SCHEMA, partition_spec=spec)
    rows = part_rows()
    client = flight_client(server)
    put_table(client, (ns, name), rows, max_chunksize=64)
    client.close()
    sent = rows.to_pylist()
    assert any(matches(r) for r in sent) and not all(matches(r) for r in sent), name
    return Shape(name, sent, where=where, matches=matches)


# --------------------------------------------------------------------------- evolved


def write_evolved(server, ns: str, name: str = "evolved") -> Shape:
    catalog = load_catalog("shapes", type="rest", uri=server.metrics_url)
    schema = Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "a", IntegerType(), required=False),
        NestedField(3, "f", FloatType(), required=False),
        NestedField(4, "d", DecimalType(5, 2), required=False),
        NestedField(5, "s", StructType(NestedField(6, "p", StringType(), required=False)), required=False),
        NestedField(7, "x", StringType(), required=False),
    )
    catalog.create_table((ns, name), schema=schema)
    before = pa.table(
        {
            "id": pa.array([1, 2, 3], pa.int64()),
            "a": pa.array([10, None, -30], pa.int32()),
            "f": pa.array([1.5, -0.25, None], pa.float32()),
            "d": pa.array([decimal.Decimal("123.45"), None, decimal.Decimal("-0.01")], pa.decimal128(5, 2)),
            "s": pa.array([{"p": "one"}, {"p": None}, None], pa.struct([("p", pa.string())])),
            "x": pa.array(["gone-1", "gone-2", None], pa.string()),
        }
    )
    client = flight_client(server)
    put_table(client, (ns, name), before)
    table = catalog.load_table((ns, name))
    with table.update_schema() as update:
        update.rename_column("a", "a2")
        update.rename_column(("s", "p"), "q")
        update.update_column("a", LongType())  # by its name before this update
        update.update_column("f", DoubleType())
        update.update_column("d", DecimalType(8, 2))
        update.delete_column("x")
    table = catalog.load_table((ns, name))
    with table.update_schema() as update:
        update.add_column("x", StringType())  # a new field id under the old name
        update.add_column("y", LongType())
    after = pa.table(
        {
            "id": pa.array([4, 5], pa.int64()),
            "a2": pa.array([2**40, None], pa.int64()),
            "f": pa.array([0.1, None], pa.float64()),
            "d": pa.array([decimal.Decimal("123456.78"), None], pa.decimal128(8, 2)),
            "s": pa.array([{"q": "four"}, None], pa.struct([("q", pa.string())])),
            "x": pa.array(["new-4", None], pa.string()),
            "y": pa.array([None, 5], pa.int64()),
        }
    )
    put_table(client, (ns, name), after)
    client.close()
    expected = [
        {"id": 1, "a2": 10, "f": 1.5, "d": decimal.Decimal("123.45"), "s": {"q": "one"}, "x": None, "y": None},
        {"id": 2, "a2": None, "f": -0.25, "d": None, "s": {"q": None}, "x": None, "y": None},
        {"id": 3, "a2": -30, "f": None, "d": decimal.Decimal("-0.01"), "s": None, "x": None, "y": None},
        *after.to_pylist(),
    ]
    return Shape(name, expected, puts=2)


# --------------------------------------------------------------------------- v3 defaults


def write_v3_defaults(server, ns: str, name: str = "v3_defaults") -> Shape:
    """A format v3 table; ``level`` (required int) is added after the first put with
    ``initial-default`` 7 and ``write-default`` 9, then a put leaves it out."""
    rest(server, "POST", f"/v1/namespaces/{ns}/tables", {
        "name": name,
        "schema": {"type": "struct", "schema-id": 0, "fields": [
            {"id": 1, "name": "id", "required": False, "type": "long"},
            {"id": 2, "name": "name", "required": False, "type": "string"}]},
        "properties": {"format-version": "3"},
    })
    client = flight_client(server)
    first = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["a", None]})
    put_table(client, (ns, name), first)
    loaded = rest(server, "GET", f"/v1/namespaces/{ns}/tables/{name}")
    current = loaded["metadata"]["current-schema-id"]
    rest(server, "POST", f"/v1/namespaces/{ns}/tables/{name}", {
        "requirements": [{"type": "assert-current-schema-id", "current-schema-id": current}],
        "updates": [
            {"action": "add-schema", "schema": {"type": "struct", "schema-id": current + 1, "fields": [
                {"id": 1, "name": "id", "required": False, "type": "long"},
                {"id": 2, "name": "name", "required": False, "type": "string"},
                {"id": 3, "name": "level", "required": True, "type": "int",
                 "initial-default": 7, "write-default": 9}]}},
            {"action": "set-current-schema", "schema-id": -1},
        ],
    })
    second = pa.table({"id": pa.array([3], pa.int64()), "name": ["c"]})
    put_table(client, (ns, name), second)
    client.close()
    expected = [
        {"id": 1, "name": "a", "level": 7},
        {"id": 2, "name": None, "level": 7},
        {"id": 3, "name": "c", "level": 9},
    ]
    return Shape(name, expected, puts=2)


# --------------------------------------------------------------------------- many snapshots


def write_many(server, ns: str, name: str = "many", puts: int = 25) -> Shape:
    client = flight_client(server)
    sent: list[dict] = []
    snapshot_rows: dict[int, list[dict]] = {}
    for k in range(puts):
        batch = pa.table({"id": pa.array(range(k * 10, k * 10 + 10), pa.int64()), "put": pa.array([k] * 10, pa.int32())})
        acks = put_table(client, (ns, name), batch)
        sent.extend(batch.to_pylist())
        snapshot_rows[snapshot_id_of(acks[-1])] = list(sent)
    client.close()
    assert len(snapshot_rows) == puts, "one snapshot per put"
    return Shape(name, sent, snapshot_rows=snapshot_rows, puts=puts)


def write_shapes(server, ns: str) -> dict[str, Shape]:
    """Every shape above in namespace ``ns`` of ``server``."""
    load_catalog("shapes", type="rest", uri=server.metrics_url).create_namespace_if_not_exists(ns)
    shapes = [write_plain(server, ns)]
    shapes += [write_partitioned(server, ns, name) for name in PARTITIONED]
    shapes += [write_evolved(server, ns), write_v3_defaults(server, ns), write_many(server, ns)]
    return {shape.name: shape for shape in shapes}
