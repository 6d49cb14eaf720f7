"""Maintenance changes and deletes only what is its own table's (docs/maintenance.md,
"Tables with delete files" and "What cleanup may delete").

The three replays of silent data loss in maintenance, each with maintenance at its
busiest (passes every 100 ms, grace 0, compaction on, two snapshots kept):

* another engine deletes rows of a skade table in the shared PostgreSQL catalog with
  position-delete files (or an equality-delete file); every reader — ``DoGet``, pyiceberg
  through the JDBC catalog and through skade's REST catalog, DuckDB through the REST
  catalog — keeps missing exactly those rows after maintenance;
* a table dropped over REST without purge keeps every file when a put uses its name
  again, and its metadata still registers and reads back;
* two deployments with different ``--catalog-name`` on one database and one warehouse
  both create ``ns.t``: each keeps its table whole.

Also: the properties that move where a table's files go are refused with their name,
never ignored.

Expected rows come from what the test sent and deleted; readers are pyiceberg and DuckDB
(second implementations).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog

from conftest import wait_for
from foreign_writer import delete_rows
from test_shared_catalog import (
    CATALOG_NAME,
    NO_PROXY,
    id_table,
    ids_of,
    metric,
    put,
    rest_catalog,
    skade,
    sql_catalog,
)

QUIET = ["--maintenance", "false"]
"""An instance that neither maintains nor sweeps: the state before maintenance runs."""

BUSIEST = ["--maintenance-interval", "100ms", "--cleanup-grace", "0s",
           "--metadata-cleanup-grace", "0s", "--max-snapshots", "2",
           "--target-file-size", "64MiB"]
"""Maintenance at its busiest: every job, passes back to back, nothing waits."""

GONE = [5, 17, 42]


def ten_puts(server) -> None:
    """Ten puts of ten rows into ``fd.t`` (ids 0..99, one data file each)."""
    for i in range(10):
        put(server.flight_uri, ("fd", "t"), id_table(range(i * 10, i * 10 + 10), "flight"))


def passes_done(server, n: int) -> None:
    """Waits until ``server`` has run ``n`` more maintenance passes."""
    name = "skade_maintenance_pass_duration_seconds_count"
    start = metric(server, name)
    wait_for(f"{n} maintenance passes", lambda: metric(server, name) >= start + n, timeout_s=60)


def do_get_ids(server, *path: str) -> list[int]:
    client = flight.FlightClient(server.flight_uri)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_path(*path))
        table = client.do_get(info.endpoints[0].ticket).read_all()
        return sorted(table.column("id").to_pylist())
    finally:
        client.close()


def flight_total_records(server, *path: str) -> int:
    client = flight.FlightClient(server.flight_uri)
    try:
        return client.get_flight_info(flight.FlightDescriptor.for_path(*path)).total_records
    finally:
        client.close()


def duckdb_ids(server, table: str) -> list[int]:
    """The ids DuckDB reads from ``table`` through skade's REST catalog (offline wheels)."""
    import duckdb
    import duckdb_ext

    con = duckdb.connect()
    extensions = Path(list(duckdb_ext.__path__)[0]) / "extensions"
    con.execute("SET extension_directory = ?", [str(extensions)])
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("LOAD iceberg")
    con.execute(f"ATTACH '' AS skade (TYPE iceberg, ENDPOINT '{server.metrics_url}', "
                "AUTHORIZATION_TYPE 'none')")
    return sorted(r[0] for r in con.execute(f"SELECT id FROM skade.{table}").fetchall())


def files_under(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize("equality", [False, True], ids=["position", "equality"])
def test_rows_another_engine_deleted_stay_deleted_through_maintenance(
        tmp_path, postgres_database, equality):
    """Catches compaction rewriting data files that another engine's delete files apply
    to: the rewritten files carry the deleted rows under paths (and a sequence number)
    the deletes do not reach, and every reader returns them again."""
    database = postgres_database("foreign_deletes")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with skade(tmp_path / "quiet", database, warehouse, *QUIET) as server:
        ten_puts(server)
    engine = sql_catalog(database, warehouse)
    try:
        delete_rows(engine, "fd.t", GONE, equality=equality)
    finally:
        engine.close()
    expected = [i for i in range(100) if i not in GONE]
    with skade(tmp_path / "busy", database, warehouse, *BUSIEST) as server:
        passes_done(server, 5)
        assert do_get_ids(server, "fd", "t") == expected
        # Rows hidden by delete files are not in total-records: unknown (-1).
        assert flight_total_records(server, "fd", "t") == -1
        assert metric(server, "skade_maintenance_skipped_tables",
                      'reason="delete_files"') == 1
        assert duckdb_ids(server, "fd.t") == expected
        # pyiceberg 0.12 cannot read equality deletes (iceberg-python #3270).
        if not equality:
            rest = rest_catalog(server)
            assert ids_of(rest.load_table("fd.t").scan().to_arrow()) == expected
            engine = sql_catalog(database, warehouse)
            try:
                assert ids_of(engine.load_table("fd.t").scan().to_arrow()) == expected
            finally:
                engine.close()
        # More puts: compaction goes on for the files no delete applies to (a run is at
        # least five files; the old files' run, with position deletes, was one already).
        before = metric(server, "skade_files_rewritten_total", 'kind="data"')
        for i in range(10, 16):
            put(server.flight_uri, ("fd", "t"), id_table(range(i * 10, i * 10 + 10), "flight"))
        wait_for("the new files compacted",
                 lambda: metric(server, "skade_files_rewritten_total", 'kind="data"')
                 >= before + 5)
        assert do_get_ids(server, "fd", "t") == expected + list(range(100, 160))


def rest_request(server, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"{server.metrics_url}{path}", data=data, method=method,
                                     headers={"Content-Type": "application/json"})
    try:
        with NO_PROXY.open(request, timeout=30) as resp:
            text = resp.read().decode()
            return resp.status, json.loads(text) if text else {}
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read().decode() or "{}")


def test_a_dropped_tables_files_stay_when_a_put_uses_its_name_again(tmp_path, postgres_database):
    """Catches cleanup taking the files of a table dropped without purge for leftovers of
    a new table created at the same location (a put re-using the name)."""
    database = postgres_database("drop_reuse")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with skade(tmp_path / "a", database, warehouse, *BUSIEST) as server:
        put(server.flight_uri, ("dr", "t"), id_table(range(0, 30), "old"))
        old = load_catalog("old", type="rest", uri=server.metrics_url).load_table("dr.t")
        old_location = Path(old.metadata.location)
        old_metadata = old.metadata_location
        status, _ = rest_request(server, "DELETE", "/v1/namespaces/dr/tables/t?purgeRequested=false")
        assert status == 204
        kept = files_under(old_location)
        assert any(f.endswith(".parquet") for f in kept), kept

        put(server.flight_uri, ("dr", "t"), id_table(range(100, 110), "new"))
        new = rest_catalog(server).load_table("dr.t")
        assert Path(new.metadata.location) != old_location
        passes_done(server, 10)
        assert files_under(old_location) == kept
        assert do_get_ids(server, "dr", "t") == list(range(100, 110))

        # The dropped table comes back whole by registering its metadata (here through
        # the JDBC catalog, as another engine would).
        engine = sql_catalog(database, warehouse)
        try:
            engine.register_table(("dr", "back"), old_metadata)
        finally:
            engine.close()
        passes_done(server, 5)
        assert do_get_ids(server, "dr", "back") == list(range(30))
        assert files_under(old_location) == kept


def test_two_catalog_names_on_one_warehouse_keep_each_others_tables(tmp_path, postgres_database):
    """Catches two deployments (different --catalog-name, one database, one warehouse)
    that both create ns.t at one location and remove each other's files as leftovers."""
    database = postgres_database("two_names")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    with skade(tmp_path / "a", database, warehouse, "--catalog-name", "alpha",
               *BUSIEST) as a, \
            skade(tmp_path / "b", database, warehouse, "--catalog-name", "beta",
                  *BUSIEST) as b:
        for i in range(4):
            put(a.flight_uri, ("ns", "t"), id_table(range(i * 10, i * 10 + 10), "a"))
            put(b.flight_uri, ("ns", "t"), id_table(range(1000 + i * 10, 1010 + i * 10), "b"))
        locations = {rest_catalog(s).load_table("ns.t").metadata.location for s in (a, b)}
        assert len(locations) == 2, locations
        passes_done(a, 10)
        passes_done(b, 10)
        assert do_get_ids(a, "ns", "t") == list(range(40))
        assert do_get_ids(b, "ns", "t") == list(range(1000, 1040))
        for name, first in (("alpha", 0), ("beta", 1000)):
            engine = SqlCatalog(name, uri=database.sqlalchemy_url, warehouse=f"file://{warehouse}")
            try:
                got = engine.load_table("ns.t").scan().to_arrow()
                assert ids_of(got) == list(range(first, first + 40))
            finally:
                engine.close()


@pytest.mark.parametrize("prop", ["write.data.path", "write.metadata.path",
                                  "write.object-storage.path"])
def test_properties_that_move_files_are_refused_by_name(tmp_path, postgres_database, prop):
    """Catches a table property that moves where files go being silently ignored (files
    written under <location>/data and /metadata whatever the owner asked)."""
    database = postgres_database("paths")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    elsewhere = f"{tmp_path}/elsewhere"
    schema = {"type": "struct", "schema-id": 0,
              "fields": [{"id": 1, "name": "id", "type": "long", "required": True}]}
    with skade(tmp_path / "a", database, warehouse, *BUSIEST) as server:
        status, _ = rest_request(server, "POST", "/v1/namespaces", {"namespace": ["pp"]})
        assert status == 200
        status, body = rest_request(server, "POST", "/v1/namespaces/pp/tables", {
            "name": "t", "schema": schema, "properties": {prop: elsewhere}})
        assert status == 400 and prop in body["error"]["message"], body
        assert rest_request(server, "GET", "/v1/namespaces/pp/tables/t")[0] == 404

        put(server.flight_uri, ("pp", "u"), id_table(range(5), "x"))
        table = rest_catalog(server).load_table("pp.u")
        status, body = rest_request(server, "POST", "/v1/namespaces/pp/tables/u", {
            "requirements": [],
            "updates": [{"action": "set-properties", "updates": {prop: elsewhere}}]})
        assert status == 400 and prop in body["error"]["message"], body

        # Set by another engine through the JDBC catalog: skade's puts are refused, by
        # name, and nothing lands.
        engine = sql_catalog(database, warehouse)
        try:
            with engine.load_table("pp.u").transaction() as tx:
                tx.set_properties({prop: elsewhere})
        finally:
            engine.close()
        # (pyiceberg honours write.metadata.path: its own commit wrote there.)
        theirs = files_under(Path(elsewhere)) if Path(elsewhere).exists() else set()
        with pytest.raises((flight.FlightError, pa.ArrowNotImplementedError), match=prop):
            put(server.flight_uri, ("pp", "u"), id_table(range(5, 10), "x"))
        assert do_get_ids(server, "pp", "u") == list(range(5))
        wait_for("the table left out of maintenance",
                 lambda: metric(server, "skade_maintenance_skipped_tables",
                                'reason="write_path_property"') == 1)
        mine = files_under(Path(elsewhere)) if Path(elsewhere).exists() else set()
        assert mine == theirs, "skade wrote where the property points"
        del table
