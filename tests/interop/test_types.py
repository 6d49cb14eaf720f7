"""Interop: every Arrow type pyarrow can build lands exactly or is refused by name.

The type table of ``docs/arrow-types.md`` (between ``<!-- arrow-types:begin -->`` and
``<!-- arrow-types:end -->``) is this test's input: each row names a pyarrow type
expression and the Iceberg type it must become, or ``refused``. For each row, against
a real ``skade serve`` and real clients:

* accepted: a pyarrow ``DoPut`` of a column ``c`` of that type (values and a null)
  creates the table with that Iceberg type (pyiceberg's view through the REST
  catalog), a second put of the same batch appends, and a pyiceberg scan reads back
  equal values (as instants for timestamps);
* refused: the put is ``INVALID_ARGUMENT`` naming the column path and the Arrow
  type, and no table (nor namespace) exists afterwards.

Then the cases of issue #12 that need real readers: struct fields matched by name at
every depth, timestamp zones and units as new tables and as appends, lossless and
lossy nanoseconds, empty structs and zero-column puts, long names, uint64 naming its
column.
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.types import ListType, MapType, StructType

ARROW_TYPES_DOC = Path(__file__).resolve().parents[2] / "docs" / "arrow-types.md"
ROW = re.compile(r"^\| `(?P<expr>[^`]+)` \| (?P<iceberg>[^|]+?) \| (?P<notes>[^|]*)\|$")
UTC = dt.timezone.utc
INVALID = "Flight returned invalid argument error"


def type_table() -> list[tuple[str, str]]:
    """``(pyarrow expression, Iceberg type or "refused")`` for every row of the table."""
    text = ARROW_TYPES_DOC.read_text()
    body = text.split("<!-- arrow-types:begin -->", 1)[1].split("<!-- arrow-types:end -->", 1)[0]
    rows = []
    for line in body.splitlines():
        m = ROW.match(line.strip())
        if m:
            rows.append((m["expr"], m["iceberg"].strip().strip("`")))
    assert len(rows) > 50, "docs/arrow-types.md's type table is missing or unreadable"
    return rows


TYPES = type_table()


# ------------------------------------------------------------------------ samples


def sample(t: pa.DataType) -> pa.Array:
    """Three values of type ``t`` with a null in the middle (where ``t`` allows one)."""
    if isinstance(t, pa.BaseExtensionType):
        storage = sample(t.storage_type)
        if pa.types.is_integer(t.storage_type):  # bool8: 0 or 1
            storage = pa.array([1, None, 0], t.storage_type)
        return pa.ExtensionArray.from_storage(t, storage)
    if pa.types.is_null(t):
        return pa.nulls(3)
    if pa.types.is_boolean(t):
        return pa.array([True, None, False], t)
    if pa.types.is_integer(t):
        hi = 2**(t.bit_width - (0 if pa.types.is_unsigned_integer(t) else 1)) - 1
        return pa.array([hi, None, 0 if pa.types.is_unsigned_integer(t) else -hi - 1], t)
    if pa.types.is_floating(t):
        return pa.array([1.5, None, -2.25], pa.float64()).cast(t)
    if pa.types.is_decimal(t):
        q = decimal.Decimal(1).scaleb(-t.scale)
        return pa.array([decimal.Decimal("12.5").quantize(q), None, decimal.Decimal("-3").quantize(q)], t)
    if pa.types.is_date(t):
        return pa.array([dt.date(2024, 2, 29), None, dt.date(1969, 12, 31)], t)
    if pa.types.is_time(t):
        return pa.array([dt.time(1, 2, 3), None, dt.time(23, 59, 59)], t)
    if pa.types.is_timestamp(t):
        tz = UTC if t.tz else None
        values = [dt.datetime(2024, 3, 31, 0, 30, 1, tzinfo=tz), None, dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=tz)]
        return pa.array(values, pa.timestamp("s", tz=t.tz)).cast(t)
    if pa.types.is_duration(t):
        return pa.array([dt.timedelta(seconds=5), None, dt.timedelta(days=-1)], t)
    if pa.types.is_interval(t):
        return pa.array([pa.MonthDayNano([1, 2, 3]), None, pa.MonthDayNano([0, 0, 0])], t)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.array(["Tromsø", None, ""], t)
    if pa.types.is_fixed_size_binary(t):
        return pa.array([b"\x01" * t.byte_width, None, b"\x00" * t.byte_width], t)
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.array([b"\x00\xff", None, b""], t)
    if pa.types.is_dictionary(t):
        values = sample(t.value_type)
        return pa.DictionaryArray.from_arrays(pa.array([2, None, 0], t.index_type), values)
    if pa.types.is_run_end_encoded(t):
        values = sample(t.value_type)
        return pa.RunEndEncodedArray.from_arrays(pa.array([2, 3, 5], t.run_end_type), values)
    if pa.types.is_fixed_size_list(t):
        values = pa.concat_arrays([sample(t.value_type), sample(t.value_type)])
        return pa.FixedSizeListArray.from_arrays(values, t.list_size, mask=pa.array([False, True, False]))
    if pa.types.is_list_view(t) or pa.types.is_large_list_view(t):
        values = sample(t.value_type)
        cls = pa.ListViewArray if pa.types.is_list_view(t) else pa.LargeListViewArray
        return cls.from_arrays([0, 2, 1], [2, 0, 2], values, mask=pa.array([False, True, False]))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        values = sample(t.value_type)
        cls = pa.ListArray if pa.types.is_list(t) else pa.LargeListArray
        return cls.from_arrays([0, 2, 2, 3], values, mask=pa.array([False, True, False]))
    if pa.types.is_map(t):
        keys = pa.array(["a", "b", "c"], t.key_type)
        return pa.MapArray.from_arrays([0, 2, 2, 3], keys, sample(t.item_type), mask=pa.array([False, True, False]))
    if pa.types.is_struct(t):
        if t.num_fields == 0:
            return pa.array([{}, None, {}], t)
        children = [sample(t.field(i).type) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays(children, fields=list(t), mask=pa.array([False, True, False]))
    if pa.types.is_union(t):
        children = [sample(t.field(i).type) for i in range(t.num_fields)]
        types = pa.array([0, 1, 0], pa.int8())
        if t.mode == "sparse":
            return pa.UnionArray.from_sparse(types, children, [f.name for f in t])
        return pa.UnionArray.from_dense(types, pa.array([0, 1, 2], pa.int32()), children, [f.name for f in t])
    raise AssertionError(f"no sample for {t}")


def plain(value):
    """A value as compared after read-back: instants in UTC, nested values element-wise."""
    if hasattr(value, "to_pydatetime"):  # pandas.Timestamp (nanosecond types)
        value = value.to_pydatetime()
    if isinstance(value, dt.datetime) and value.tzinfo is not None:
        return value.astimezone(UTC)
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    if isinstance(value, tuple):
        return tuple(plain(v) for v in value)
    return value


def iceberg_name(t) -> str:
    """pyiceberg's type as docs/arrow-types.md writes it (no field ids, no `optional`)."""
    if isinstance(t, ListType):
        return f"list<{iceberg_name(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{iceberg_name(t.key_type)}, {iceberg_name(t.value_type)}>"
    if isinstance(t, StructType):
        inner = ", ".join(f"{f.name}: {iceberg_name(f.field_type)}" for f in t.fields)
        return f"struct<{inner}>"
    return str(t)


# ------------------------------------------------------------------------ fixtures


@pytest.fixture(autouse=True)
def no_proxy_for_loopback(monkeypatch):
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    monkeypatch.setenv("no_proxy", "127.0.0.1,localhost")


@pytest.fixture(scope="module")
def client(skade_server):
    with flight.FlightClient(skade_server.flight_uri) as c:
        yield c


@pytest.fixture(scope="module")
def catalog(skade_server):
    return load_catalog("skade", type="rest", uri=skade_server.metrics_url)


def put(client, path: tuple[str, ...], table: pa.Table) -> None:
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), table.schema)
    try:
        if table.num_rows:
            writer.write_table(table)
        writer.done_writing()
        while reader.read() is not None:
            pass
    finally:
        writer.close()


def refused(client, path: tuple[str, ...], table: pa.Table) -> str:
    """Puts ``table``, expects INVALID_ARGUMENT, returns the message."""
    with pytest.raises(pa.ArrowInvalid) as info:
        put(client, path, table)
    message = str(info.value)
    assert INVALID in message, message
    return message


def assert_absent(catalog, namespace: str, name: str) -> None:
    with pytest.raises(NoSuchTableError):
        catalog.load_table(f"{namespace}.{name}")


def read_back(catalog, namespace: str, name: str) -> pa.Table:
    return catalog.load_table(f"{namespace}.{name}").scan().to_arrow()


# --------------------------------------------------------------------- the table


@pytest.mark.parametrize("expr,iceberg", TYPES, ids=[e for e, _ in TYPES])
def test_every_arrow_type_lands_exactly_or_is_refused_by_name(client, catalog, expr, iceberg):
    """Catches any type whose row in docs/arrow-types.md is not what the server does."""
    t = eval(expr, {"pa": pa})  # the table's own expressions
    column = sample(t)
    table = pa.table({"c": column})
    name = "t_" + re.sub(r"[^A-Za-z0-9]+", "_", expr).strip("_")[:100]
    if iceberg == "refused":
        message = refused(client, ("types", name), table)
        assert '"c' in message, f"the refusal does not name the column: {message}"
        assert_absent(catalog, "types", name)
        return
    put(client, ("types", name), table)
    put(client, ("types", name), table)  # the append conforms the same type again
    loaded = catalog.load_table(f"types.{name}")
    assert iceberg_name(loaded.schema().find_field("c").field_type) == iceberg
    # Extension types are stored as their storage type.
    stored = column.storage if isinstance(t, pa.BaseExtensionType) else column
    want = stored.to_pylist() * 2
    # skade's own reader (DoGet) returns exactly what was put, nulls included.
    info = client.get_flight_info(flight.FlightDescriptor.for_path("types", name))
    got = client.do_get(info.endpoints[0].ticket).read_all().column("c").to_pylist()
    assert same_values(got, want), (got, want)
    # pyiceberg 0.12 reads a null list or map whose elements hold a struct back as empty
    # (its struct projection drops the list's validity; the Parquet file has the null).
    got = loaded.scan().to_arrow().column("c").to_pylist()
    if nested_struct(t):
        want = [[] if v is None else v for v in want]
    assert same_values(got, want), (got, want)


def same_values(got: list, want: list) -> bool:
    """Equal as multisets (several data files have no defined order)."""
    key = lambda v: repr(plain(v))  # noqa: E731
    return len(got) == len(want) and sorted(map(key, got)) == sorted(map(key, want))


def nested_struct(t: pa.DataType) -> bool:
    """Whether ``t`` is a list or map whose elements contain a struct."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.types.is_struct(t.value_type)
    if pa.types.is_map(t):
        return pa.types.is_struct(t.item_type)
    return False


# ------------------------------------------------------------- nested by name


def struct_table(fields: dict[str, list]) -> pa.Table:
    return pa.table({"id": [1], "addr": pa.array([fields], pa.struct([(k, pa.string()) for k in fields]))})


def test_struct_fields_match_by_name_at_every_depth(client, catalog):
    """Catches nested fields landing in the wrong place (matched by position) or dropped."""
    put(client, ("nested", "people"), struct_table({"city": "Oslo", "zip": "0150"}))
    # Reordered children land by name.
    put(client, ("nested", "people"), struct_table({"zip": "9000", "city": "Tromso"}))
    # A renamed child is refused naming its path; an extra child too.
    message = refused(client, ("nested", "people"), struct_table({"town": "Tromso", "zip": "9000"}))
    assert "addr.town" in message, message
    message = refused(
        client, ("nested", "people"), struct_table({"city": "Bergen", "zip": "5003", "country": "NO"})
    )
    assert "addr.country" in message, message
    # A missing nullable child is written as null.
    put(client, ("nested", "people"), struct_table({"city": "Bodø"}))
    rows = sorted(read_back(catalog, "nested", "people").column("addr").to_pylist(), key=repr)
    assert rows == sorted(
        [{"city": "Oslo", "zip": "0150"}, {"city": "Tromso", "zip": "9000"}, {"city": "Bodø", "zip": None}],
        key=repr,
    )

    items = lambda name: pa.table(  # noqa: E731
        {"items": pa.array([[{name: "x1"}]], pa.list_(pa.struct([(name, pa.string())])))}
    )
    put(client, ("nested", "orders"), items("code"))
    message = refused(client, ("nested", "orders"), items("kode"))
    assert "items.element.kode" in message, message

    tags = lambda name: pa.table(  # noqa: E731
        {"tags": pa.array([[("k", {name: 1.0})]], pa.map_(pa.string(), pa.struct([(name, pa.float64())])))}
    )
    put(client, ("nested", "tags"), tags("x"))
    message = refused(client, ("nested", "tags"), tags("y"))
    assert "tags.value.y" in message, message
    assert read_back(catalog, "nested", "orders").num_rows == 1
    assert read_back(catalog, "nested", "tags").num_rows == 1


# ---------------------------------------------------------------- timestamps


ZONED = [
    pa.timestamp("us", tz="Europe/Oslo"),
    pa.timestamp("us", tz="+01:00"),
    pa.timestamp("us", tz="Etc/UTC"),
    pa.timestamp("ms"),
    pa.timestamp("s", tz="UTC"),
]
INSTANTS = [dt.datetime(2024, 3, 31, 0, 30, 1, tzinfo=UTC), dt.datetime(1969, 7, 20, 20, 17, 40, tzinfo=UTC)]


@pytest.mark.parametrize("t", ZONED, ids=str)
def test_timestamps_of_any_zone_and_unit_create_and_append(client, catalog, t):
    """Catches refused zones/units and values that change instant on the way in."""
    name = "ts_" + re.sub(r"[^A-Za-z0-9]+", "_", str(t)).strip("_")
    values = INSTANTS if t.tz else [v.replace(tzinfo=None) for v in INSTANTS]
    table = pa.table({"ts": pa.array(values, pa.timestamp("s", tz=t.tz)).cast(t)})
    put(client, ("tz", name), table)
    got = sorted(read_back(catalog, "tz", name).column("ts").to_pylist())
    assert got == sorted(values)
    # Appends: the other zones into this table's kind (zoned or not) land as the same instants.
    for other in ZONED:
        if (other.tz is None) != (t.tz is None):
            message = refused(client, ("tz", name), pa.table({"ts": table.column("ts").cast(other)}))
            assert '"ts"' in message and "time zone" in message, message
            continue
        put(client, ("tz", name), pa.table({"ts": table.column("ts").cast(other)}))
    got = read_back(catalog, "tz", name).column("ts").to_pylist()
    assert sorted(set(got)) == sorted(values)


def test_nanoseconds_land_only_when_exact(client, catalog):
    """Catches 1500 ns silently becoming 1 µs (pandas sends timestamp[ns] by default)."""
    exact = pa.table({"ts": pa.array([1_000, 2_000_000, None], pa.timestamp("ns"))})
    put(client, ("ns", "exact"), exact)
    got = read_back(catalog, "ns", "exact").column("ts").cast(pa.int64()).to_pylist()
    assert sorted(got, key=lambda v: (v is None, v)) == [1, 2_000, None]
    lossy = pa.table({"ts": pa.array([1, 1500], pa.timestamp("ns"))})
    message = refused(client, ("ns", "lossy"), lossy)
    assert '"ts"' in message and "row 0" in message, message
    assert_absent(catalog, "ns", "lossy")
    # Into an existing table: refused, nothing appended.
    message = refused(client, ("ns", "exact"), lossy)
    assert "row 0" in message, message
    assert read_back(catalog, "ns", "exact").num_rows == 3


# ------------------------------------------------------- nothing left behind


def test_refused_first_puts_leave_no_table(client, catalog, skade_server):
    """Catches a table that a refused first put leaves behind and that can never be written."""
    empty_struct = pa.table({"id": [1, 2], "meta": pa.array([{}, None], pa.struct([]))})
    message = refused(client, ("left", "meta"), empty_struct)
    assert '"meta"' in message, message
    assert_absent(catalog, "left", "meta")
    # The same name works for a good put afterwards.
    put(client, ("left", "meta"), pa.table({"id": [1, 2]}))
    assert read_back(catalog, "left", "meta").num_rows == 2

    no_columns = pa.Table.from_batches([pa.RecordBatch.from_pydict({})], schema=pa.schema([]))
    refused(client, ("left", "nothing"), no_columns)
    assert_absent(catalog, "left", "nothing")
    assert not (skade_server.warehouse / "left" / "nothing").exists()

    message = refused(client, ("left", "u"), pa.table({"u": pa.array([1], pa.uint64())}))
    assert '"u"' in message and "UInt64" in message and "Int64" in message, message
    assert_absent(catalog, "left", "u")


def test_a_long_name_is_refused_naming_the_limit_and_no_server_path(client, skade_server):
    """Catches 'File name too long' with the server's absolute path reaching the client."""
    message = refused(client, ("left", "x" * 300), pa.table({"id": [1]}))
    assert "at most 128" in message, message
    assert str(skade_server.data_dir) not in message, message


def test_flight_sql_ingest_follows_the_same_rules(skade_server, catalog):
    """Catches the ADBC lane creating a table for a refused type, or matching nested fields by position."""
    import adbc_driver_flightsql.dbapi as flightsql
    import adbc_driver_manager

    conn = flightsql.connect(skade_server.flight_uri, autocommit=True)
    try:
        with conn.cursor() as cur:
            with pytest.raises(adbc_driver_manager.Error) as info:
                cur.adbc_ingest("meta", pa.table({"id": [1], "m": pa.array([{}], pa.struct([]))}),
                                mode="create", db_schema_name="sqlnested")
            assert '"m"' in str(info.value), info.value
            cur.adbc_ingest("people", struct_table({"city": "Oslo", "zip": "0150"}),
                            mode="create_append", db_schema_name="sqlnested")
            with pytest.raises(adbc_driver_manager.Error) as info:
                cur.adbc_ingest("people", struct_table({"town": "Oslo", "zip": "0150"}),
                                mode="append", db_schema_name="sqlnested")
            assert "addr.town" in str(info.value), info.value
    finally:
        conn.close()
    assert_absent(catalog, "sqlnested", "meta")
    assert read_back(catalog, "sqlnested", "people").column("addr").to_pylist() == [
        {"city": "Oslo", "zip": "0150"}
    ]
