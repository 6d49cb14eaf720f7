"""Interop: pyiceberg reads skade's tables through skade's Iceberg REST catalog.

What is tested, against a real ``skade serve`` (see ``conftest.py``), with pyiceberg's
own REST client: ``load_catalog("skade", type="rest", uri=<metrics_url>)`` -- the
metrics address is the catalog URI, there is no other service:

* Namespaces (nested ones too) and tables written over Flight are listed, a namespace
  loads with its (empty) properties, ``namespace_exists``/``table_exists`` answer.
* A table loaded right after each Flight put's commit shows that commit's snapshot
  (one more snapshot each time, the new one current, ``metadata_location`` equal to the
  ``GetFlightInfo`` ``app_metadata``), and its scan equals every row pushed so far; before
  its first put the table is neither listed nor loadable.
* Unknown names: ``NoSuchTableError`` / ``NoSuchNamespaceError`` (HTTP 404 with the
  spec's ``{"error": {"type", "code", "message"}}`` body, checked raw too); calls of
  endpoints ``/v1/config`` does not advertise are refused by the client itself
  (``test_rest_ddl.py`` covers the DDL routes it does advertise).
* A multi-table ADBC Flight SQL transaction's two new tables become visible to a REST
  reader polling all along the transaction at once: never one without the other, and
  neither before ``commit()``.

Each test's docstring says how it was seen failing once (RED). Every test runs twice:
with the warehouse on local disk and on moto's S3 (``any_warehouse_server`` in
``conftest.py``; test ids ``[local]`` and ``[s3]``).

Run from the repository root (after ``cargo build``)::

    .venv/bin/pytest tests/interop/test_rest_catalog.py
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request

import adbc_driver_flightsql.dbapi as flightsql
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

from test_flight_roundtrip import assert_tables_equal, put_table

NS = "rest"
POLL_TIMEOUT_S = 60.0

_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---------------------------------------------------------------------- fixtures


def rest_catalog(server):
    return load_catalog("skade", type="rest", uri=server.metrics_url)


@pytest.fixture(scope="module")
def skade_server(any_warehouse_server):
    """This module runs once on a local warehouse and once on S3 (issue #17)."""
    return any_warehouse_server


@pytest.fixture(scope="module")
def catalog(skade_server):
    return rest_catalog(skade_server)


@pytest.fixture(scope="module")
def client(skade_server):
    c = flight.FlightClient(skade_server.flight_uri, generic_options=[("grpc.enable_http_proxy", 0)])
    yield c
    c.close()


def rows(first_id: int, n: int) -> pa.Table:
    ids = list(range(first_id, first_id + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([None if i % 7 == 0 else f"n{i}" for i in ids], pa.string()),
            "score": pa.array([i * 0.25 for i in ids], pa.float64()),
            "ts": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def http_json(url: str) -> tuple[int, dict]:
    try:
        with _NO_PROXY_OPENER.open(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


# ------------------------------------------------------------------------- tests


def test_lists_namespaces_and_tables(skade_server, client, catalog):
    """RED once: with the server ignoring ``parent`` in ``GET /v1/namespaces``,
    ``list_namespaces("rest")`` returned the top level (``[('rest',)]``) instead of
    ``[('rest', 'nested')]``."""
    put_table(client, (NS, "listed"), rows(0, 10))
    put_table(client, (NS, "nested", "deep"), rows(0, 10))

    assert (NS,) in catalog.list_namespaces()
    assert catalog.list_namespaces(NS) == [(NS, "nested")]
    assert catalog.list_namespaces((NS, "nested")) == []
    assert (NS, "listed") in catalog.list_tables(NS)
    assert catalog.list_tables((NS, "nested")) == [(NS, "nested", "deep")]
    assert catalog.load_namespace_properties((NS, "nested")) == {}
    assert catalog.namespace_exists((NS, "nested"))
    assert catalog.table_exists((NS, "nested", "deep"))


def test_load_right_after_each_commit_sees_the_new_snapshot(skade_server, client, catalog):
    """RED once: with the server answering the table's first metadata file
    (``metadata-log[0]``) instead of the catalog's current pointer, the first load had
    ``current_snapshot() is None`` ("after put 1: no current snapshot")."""
    ident = (NS, "growing")
    assert ident not in catalog.list_tables(NS)
    assert not catalog.table_exists(ident)
    with pytest.raises(NoSuchTableError):
        catalog.load_table(ident)

    pushed = []
    seen_snapshots: list[int] = []
    for i in range(3):
        batch = rows(i * 1000, 1000)
        put_table(client, ident, batch)
        pushed.append(batch)

        tbl = catalog.load_table(ident)  # right after the put's final ack: committed
        snapshot = tbl.current_snapshot()
        assert snapshot is not None, f"after put {i + 1}: no current snapshot"
        assert snapshot.snapshot_id not in seen_snapshots, f"after put {i + 1}: an old snapshot"
        assert len(tbl.metadata.snapshots) == i + 1
        assert snapshot.summary["total-records"] == str((i + 1) * 1000)
        seen_snapshots.append(snapshot.snapshot_id)

        info = client.get_flight_info(flight.FlightDescriptor.for_path(*ident))
        assert info.app_metadata.decode() == tbl.metadata_location

        n_files = len(list(tbl.scan().plan_files()))
        assert_tables_equal(
            tbl.scan().to_arrow(),
            pa.concat_tables(pushed),
            what=f"REST scan after put {i + 1} ({n_files} files)",
            ordered=False,
        )
    assert ident in catalog.list_tables(NS)


def test_unknown_names_are_404(skade_server, client, catalog):
    """RED once: with the server answering an unknown table with 500
    ``InternalServerError``, pyiceberg raised ``ServerError: InternalServerError: table
    rest.nope does not exist`` where ``NoSuchTableError`` was expected."""
    put_table(client, (NS, "known"), rows(0, 5))

    with pytest.raises(NoSuchTableError):
        catalog.load_table((NS, "nope"))
    with pytest.raises(NoSuchTableError):
        catalog.load_table(("no_such_ns", "t"))
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables("no_such_ns")
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_namespaces("no_such_ns")
    with pytest.raises(NoSuchNamespaceError):
        catalog.load_namespace_properties("no_such_ns")
    assert not catalog.table_exists((NS, "nope"))
    assert not catalog.namespace_exists("no_such_ns")

    status, body = http_json(f"{skade_server.metrics_url}/v1/namespaces/{NS}/tables/nope")
    assert status == 404
    assert body["error"]["type"] == "NoSuchTableException", body
    assert body["error"]["code"] == 404, body
    assert f"{NS}.nope" in body["error"]["message"], body

    # What is not advertised (registering a table, views) the client refuses before
    # sending anything.
    with pytest.raises(NotImplementedError):
        catalog.register_table((NS, "registered"), "/nowhere/00000-x.metadata.json")
    with pytest.raises(NotImplementedError):
        catalog.load_view((NS, "v"))


def test_multi_table_transaction_is_visible_all_at_once(skade_server):
    """RED once: with the server listing a namespace's tables from the warehouse
    directories instead of the catalog, the poller saw ``{'a'}`` listed while the
    transaction was still staging (its data files are written before ``commit()``).

    A poller with its own REST catalog runs from before the first ingest until it has
    seen the commit. Each round it lists the namespace (one catalog read) and loads both
    tables, alternating which first. Visibility only ever grows, so: a listing holds
    neither table or both; if the table loaded first is there, the second is too; a
    loaded table has exactly one snapshot; and nothing shows in a round that ended
    before ``commit()`` was called (one that only began before it can see the commit
    land between its reads: seen once as ``{'b': None, 'a': 1}`` in order b, a).
    """
    ns, names = "rest_txn", ("a", "b")
    sources = {"a": rows(0, 20_000), "b": rows(50_000, 30_000)}
    commit_called = threading.Event()
    stop = threading.Event()
    observations: list[dict] = []
    errors: list[BaseException] = []

    def poll() -> None:
        cat = rest_catalog(skade_server)
        i = 0
        try:
            while not stop.is_set():
                try:
                    listed = {t[-1] for t in cat.list_tables(ns)} & set(names)
                except NoSuchNamespaceError:
                    listed = set()
                order = names if i % 2 == 0 else names[::-1]
                loaded = {}
                for name in order:
                    try:
                        loaded[name] = len(cat.load_table((ns, name)).metadata.snapshots)
                    except NoSuchTableError:
                        loaded[name] = None
                # Read at the round's end: a round that began before commit() may see
                # the commit land midway; one that ended before it must see nothing.
                before_commit = not commit_called.is_set()
                observations.append(
                    {"before_commit": before_commit, "listed": listed, "order": order, "loaded": loaded}
                )
                i += 1
        except BaseException as e:  # surfaced in the main thread
            errors.append(e)

    def wait_for(predicate, what: str) -> None:
        deadline = time.monotonic() + POLL_TIMEOUT_S
        while not predicate():
            assert not errors, f"poller failed: {errors[0]!r}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.01)

    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    try:
        wait_for(lambda: len(observations) >= 1, "the first poll")
        conn = flightsql.connect(skade_server.flight_uri, autocommit=False)
        try:
            with conn.cursor() as cur:
                for name in names:
                    n = cur.adbc_ingest(name, sources[name], mode="create", db_schema_name=ns)
                    assert n == sources[name].num_rows
                    seen = len(observations)
                    wait_for(lambda: len(observations) >= seen + 2, f"polls after ingesting {name}")
            commit_called.set()
            conn.commit()
        finally:
            conn.close()
        wait_for(
            lambda: bool(observations) and observations[-1]["listed"] == set(names),
            "the poller to see the commit",
        )
    finally:
        stop.set()
        poller.join(timeout=POLL_TIMEOUT_S)
    assert not errors, f"poller failed: {errors[0]!r}"

    assert sum(o["before_commit"] for o in observations) >= 3, "too few polls before commit()"
    for o in observations:
        assert o["listed"] in (set(), set(names)), f"one table without the other: {o}"
        if o["before_commit"]:
            assert not o["listed"] and not any(o["loaded"].values()), f"visible before commit(): {o}"
        first, second = o["order"]
        if o["loaded"][first] is not None:
            assert o["loaded"][second] is not None, f"{first} loaded, {second} not: {o}"
        if o["listed"]:
            assert all(v is not None for v in o["loaded"].values()), f"listed, not loadable: {o}"
        for name, snapshots in o["loaded"].items():
            assert snapshots in (None, 1), f"{name}: {snapshots} snapshots: {o}"

    cat = rest_catalog(skade_server)
    for name in names:
        tbl = cat.load_table((ns, name))
        assert len(tbl.metadata.snapshots) == 1
        assert_tables_equal(tbl.scan().to_arrow(), sources[name], what=f"REST scan {ns}.{name}", ordered=False)
