"""Several skade instances and other Iceberg engines on one PostgreSQL catalog.

Each test starts its own ``skade serve --catalog postgres://...`` servers on a fresh
database (``postgres_database``) and one warehouse directory they all see (``--warehouse
<dir>``), and checks what a user of a shared catalog relies on
(``docs/several-instances.md``):

* pyiceberg's ``SqlCatalog`` on the same database and catalog name (``--catalog-name``,
  default ``skade``) reads skade's tables equal to what went over Flight ``DoPut``, and
  lists skade's namespaces and tables;
* a pyiceberg append racing skade puts into one table loses nothing (both commit by
  compare-and-swap on ``iceberg_tables.metadata_location``);
* instance B's cleanup never removes the data files of instance A's put that is still
  open, however long past B's grace it stays open (A's write pin is published in the
  database);
* ``skade gc --catalog postgres://...`` run beside the instances removes an old orphan
  file but keeps the data files of a put still open on an instance, and that put's
  commit reads back whole;
* maintenance of a table runs on one instance at a time (``skade_maintenance_tables``);
* puts fail ``Unavailable`` naming the catalog database while PostgreSQL is down, and
  work again once it is back, without a restart of skade (this test has a PostgreSQL
  cluster of its own, since it stops it).

Expected values come from what the test sent, read back through pyiceberg (a second
implementation) or skade's REST catalog.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType

from conftest import DEFAULT_BIN, SkadeServer, launch_skade, wait_for
from pg import PostgresCluster, PostgresDatabase, PostgresError, new_cluster_dir

CATALOG_NAME = "skade"
"""skade's default ``--catalog-name``: pyiceberg's ``SqlCatalog`` must be given the same
name to see skade's rows."""

NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))

ONE_COMMIT_PER_STREAM = ["--maintenance", "false", "--target-file-size", "1KiB",
                         "--files-per-commit", "1000", "--commit-interval", "120s"]
"""Server flags for an instance whose put writes a data file per batch and commits only
at the end of the stream, and which neither maintains nor sweeps: its open put's files
are on disk, unreferenced, for as long as the test keeps it open."""


# ----------------------------------------------------------------------- helpers


@contextlib.contextmanager
def skade(
    base: Path, database: PostgresDatabase, warehouse: Path, *args: str
) -> Iterator[SkadeServer]:
    """One ``skade serve`` on ``database`` and the warehouse directory ``warehouse``
    (``base``: its own data dir and log), stopped (SIGTERM, exit 0) on leaving."""
    base.mkdir(parents=True, exist_ok=True)
    yield from launch_skade(
        base,
        ["--catalog", database.url, "--warehouse", str(warehouse), *args],
        catalog_database=database,
    )


def sql_catalog(
    database: PostgresDatabase, warehouse: Path, name: str = CATALOG_NAME
) -> SqlCatalog:
    """pyiceberg's JDBC-schema catalog on ``database`` (its own files, for tables it
    creates, under ``warehouse``)."""
    return SqlCatalog(name, uri=database.sqlalchemy_url, warehouse=f"file://{warehouse}")


def metrics_of(server: SkadeServer) -> dict[str, float]:
    """Every sample of ``/metrics`` (name with labels) and its value."""
    _, body = http_get(f"{server.metrics_url}/metrics")
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.rpartition(" ")
            samples[key] = float(value)
    return samples


def rest_catalog(server: SkadeServer):
    return load_catalog(f"rest-{server.metrics_url}", type="rest", uri=server.metrics_url)


def put(uri: str, path: tuple[str, ...], table: pa.Table, batch_rows: int | None = None) -> None:
    """One Flight ``DoPut`` stream of ``table`` into ``path`` (namespace levels, table),
    returning once the server answered the end of the stream (its rows are committed)."""
    client = flight.FlightClient(uri)
    try:
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), table.schema)
        for batch in table.to_batches(max_chunksize=batch_rows):
            writer.write_batch(batch)
        finish_put(writer, reader)
    finally:
        client.close()


def finish_put(writer, reader) -> None:
    """Ends an open ``DoPut`` and returns once the server answered its end (the stream's
    rows are committed)."""
    writer.done_writing()
    while reader.read() is not None:
        pass
    writer.close()


def http_get(url: str) -> tuple[int, str]:
    try:
        with NO_PROXY.open(url, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metric(server: SkadeServer, name: str, labels: str = "") -> float:
    """The value of the series ``name{labels}`` on ``server``'s ``/metrics`` (0 when the
    series is absent); ``labels`` as Prometheus prints them, e.g. ``kind="data"``."""
    status, body = http_get(f"{server.metrics_url}/metrics")
    assert status == 200, body
    series = f"{name}{{{labels}}}" if labels else name
    total = None
    for line in body.splitlines():
        if line.startswith("#"):
            continue
        key, _, value = line.rpartition(" ")
        if key == series or (not labels and key.startswith(name + "{")):
            total = (total or 0.0) + float(value)
    return total or 0.0


def ids_of(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def id_table(ids: range, source: str) -> pa.Table:
    """Rows ``id`` (not null) and ``source`` (who wrote it)."""
    return pa.table(
        {
            "id": pa.array(list(ids), pa.int64()),
            "source": pa.array([source] * len(ids), pa.string()),
        },
        schema=pa.schema(
            [pa.field("id", pa.int64(), nullable=False), pa.field("source", pa.string())]
        ),
    )


# -------------------------------------------------------------------------- tests


def typed_rows() -> pa.Table:
    """Several Arrow types that map 1:1 to Iceberg types (docs/arrow-types.md), with
    nulls, edge values and a list."""
    utc = datetime.timezone.utc
    dt, d, dec = datetime.datetime, datetime.date, decimal.Decimal
    columns = [
        ("i32", pa.int32(), [-7, None, 2**31 - 1, 0]),
        ("f64", pa.float64(), [1.5, -0.25, None, 1e300]),
        ("f32", pa.float32(), [0.5, None, -2.0, 3.25]),
        ("flag", pa.bool_(), [True, False, None, True]),
        ("name", pa.string(), ["a", "ünï", None, ""]),
        ("blob", pa.binary(), [b"\x00\x01", None, b"", b"xyz"]),
        ("day", pa.date32(), [d(2024, 2, 29), None, d(1970, 1, 1), d(1, 1, 1)]),
        (
            "at",
            pa.timestamp("us", tz="UTC"),
            [
                dt(2024, 1, 2, 3, 4, 5, 678901, tzinfo=utc),
                None,
                dt(1969, 12, 31, 23, 59, 59, tzinfo=utc),
                dt(2038, 1, 19, tzinfo=utc),
            ],
        ),
        (
            "local",
            pa.timestamp("us"),
            [dt(2024, 1, 2, 3, 4, 5), None, dt(2000, 1, 1), dt(1999, 12, 31, 23, 59, 59, 999999)],
        ),
        ("price", pa.decimal128(12, 2), [dec("12.34"), None, dec("-0.01"), dec("9999999999.99")]),
        ("tags", pa.list_(pa.int64()), [[1, 2], [], None, [3]]),
    ]
    schema = pa.schema(
        [pa.field("id", pa.int64(), nullable=False)] + [pa.field(n, t) for n, t, _ in columns]
    )
    arrays = [pa.array([1, 2, 3, 4], pa.int64())] + [pa.array(v, t) for _, t, v in columns]
    return pa.Table.from_arrays(arrays, schema=schema)


def rows_by_id(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: r["id"])


def test_sql_catalog_reads_skades_tables_as_sent(tmp_path, postgres_database):
    """Catches skade's rows not being the JDBC catalog's (wrong catalog name, namespace
    encoding or metadata location): pyiceberg's SqlCatalog would not list or load them."""
    database = postgres_database("shared_read")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    typed = typed_rows()
    with skade(tmp_path / "a", database, warehouse) as server:
        put(server.flight_uri, ("lvl1", "lvl2", "typed"), typed)
        flat = id_table(range(100), "flight")
        put(server.flight_uri, ("flat", "ids"), flat, batch_rows=30)
        # A partitioned table, created over skade's REST catalog, filled over Flight.
        rest = rest_catalog(server)
        rest.create_namespace(("parts",))
        rest.create_table(
            ("parts", "by_source"),
            Schema(
                NestedField(1, "id", LongType(), required=True),
                NestedField(2, "source", StringType(), required=False),
            ),
            partition_spec=PartitionSpec(
                PartitionField(
                    source_id=2, field_id=1000, transform=IdentityTransform(), name="source"
                )
            ),
        )
        parted = pa.concat_tables([id_table(range(0, 5), "x"), id_table(range(5, 12), "y")])
        put(server.flight_uri, ("parts", "by_source"), parted)

        catalog = sql_catalog(database, warehouse)
        try:
            assert sorted(catalog.list_namespaces()) == [("flat",), ("lvl1",), ("parts",)]
            assert catalog.list_namespaces(("lvl1",)) == [("lvl1", "lvl2")]
            assert catalog.list_tables(("lvl1", "lvl2")) == [("lvl1", "lvl2", "typed")]
            assert catalog.list_tables("flat") == [("flat", "ids")]

            got = catalog.load_table(("lvl1", "lvl2", "typed")).scan().to_arrow()
            assert got.column_names == typed.column_names
            assert rows_by_id(got) == rows_by_id(typed)

            got = catalog.load_table(("flat", "ids")).scan().to_arrow()
            assert rows_by_id(got) == rows_by_id(flat)

            by_source = catalog.load_table(("parts", "by_source"))
            assert [f.name for f in by_source.spec().fields] == ["source"]
            assert rows_by_id(by_source.scan().to_arrow()) == rows_by_id(parted)
            # Every data file holds one partition's rows (the partition tuple is real).
            files = by_source.inspect.files().to_pylist()
            parts = sorted((f["partition"]["source"], f["record_count"]) for f in files)
            assert parts == [("x", 5), ("y", 7)]
        finally:
            catalog.close()


def test_pyiceberg_append_racing_skade_puts_loses_nothing(tmp_path, postgres_database):
    """Catches a lost update between engines: a skade commit or a pyiceberg commit that
    overwrites the other's snapshot instead of failing its compare-and-swap and retrying."""
    database = postgres_database("shared_race")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    path = ("race", "events")
    # Threads of each engine, commits per thread, rows per commit: enough overlapping
    # commits that one engine's lands between the other's read of the pointer and its
    # compare-and-swap many times over.
    threads_each, commits, rows = 3, 8, 5
    with skade(tmp_path / "a", database, warehouse) as server:
        put(server.flight_uri, path, id_table(range(0, rows), "seed"))
        catalog = sql_catalog(database, warehouse)
        errors: list[BaseException] = []
        committed: dict[str, list[float]] = {"pyiceberg": [], "flight": []}
        expected = list(range(0, rows))
        start = threading.Barrier(2 * threads_each)

        def batches(base: int) -> list[range]:
            ranges = [range(base + i * rows, base + (i + 1) * rows) for i in range(commits)]
            expected.extend(i for r in ranges for i in r)
            return ranges

        def pyiceberg_appends(base: int):
            try:
                table = catalog.load_table(path)
                start.wait()
                for ids in batches(base):
                    for _ in range(50):
                        try:
                            table.append(id_table(ids, "pyiceberg"))
                            break
                        except CommitFailedException:
                            table = catalog.load_table(path)
                    else:
                        raise AssertionError("a pyiceberg append kept conflicting")
                    committed["pyiceberg"].append(time.monotonic())
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        pyiceberg_done = threading.Event()

        def flight_puts(base: int):
            # skade commits much faster than pyiceberg appends: each putter keeps pace
            # with them (its n-th put once n appends landed), so the commits interleave.
            try:
                start.wait()
                for n, ids in enumerate(batches(base)):
                    while len(committed["pyiceberg"]) < n and not pyiceberg_done.is_set():
                        time.sleep(0.01)
                    put(server.flight_uri, path, id_table(ids, "flight"))
                    committed["flight"].append(time.monotonic())
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        appenders = [
            threading.Thread(target=pyiceberg_appends, args=(100_000 + 1000 * t,))
            for t in range(threads_each)
        ]
        putters = [
            threading.Thread(target=flight_puts, args=(200_000 + 10_000 * t,))
            for t in range(threads_each)
        ]
        for t in appenders + putters:
            t.start()
        for t in appenders:
            t.join(timeout=120)
        pyiceberg_done.set()
        for t in putters:
            t.join(timeout=120)
        assert not errors, errors
        # The two engines' commits overlapped in time (the race took place).
        py, fl = committed["pyiceberg"], committed["flight"]
        assert len(py) == len(fl) == threads_each * commits
        assert min(py) < max(fl) and min(fl) < max(py), committed

        try:
            got = catalog.load_table(path).scan().to_arrow()
            assert ids_of(got) == sorted(expected)
            # skade reads the same table back over its REST catalog.
            got = rest_catalog(server).load_table(path).scan().to_arrow()
            assert ids_of(got) == sorted(expected)
        finally:
            catalog.close()


def test_cleanup_on_b_keeps_the_files_of_a_put_open_on_a(tmp_path, postgres_database):
    """Catches an instance's cleanup honouring only its own write pins: B would remove the
    data files A's open put wrote more than B's grace ago, and A's commit would reference
    missing files."""
    database = postgres_database("shared_pins")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    path = ("pins", "events")
    # A writes a data file per batch and commits only at the end of the stream; it
    # neither maintains nor sweeps. B sweeps with a 1 s grace and expires all but two
    # snapshots, so its sweeps have files to remove.
    a_args = ONE_COMMIT_PER_STREAM
    b_args = ["--cleanup-grace", "1s", "--metadata-cleanup-grace", "1s",
              "--maintenance-interval", "1s", "--max-snapshots", "2"]
    # B starts once A's first files are older than B's grace plus the window in which
    # cleanup keeps every new file anyway (a pin may be published up to 10 s late:
    # cluster.rs PIN_PUBLISH_BOUND), so the listing sweep B runs first judges them.
    # (Later listings come only every 30 s: cleanup.rs LISTING_EVERY.)
    b_starts_after_s, batch_every_s, batch_rows = 12.0, 0.5, 200
    b_ids: list[int] = []
    a_ids: list[int] = []
    stop = threading.Event()
    errors: list[BaseException] = []
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(skade(tmp_path / "a", database, warehouse, *a_args))
        put(a.flight_uri, path, id_table(range(0, 100), "seed"))

        client = flight.FlightClient(a.flight_uri)
        stack.callback(client.close)
        schema = id_table(range(0), "a").schema
        writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), schema)

        def send_batch():
            start = 100_000 + len(a_ids)
            batch = id_table(range(start, start + batch_rows), "a")
            writer.write_table(batch)
            a_ids.extend(batch.column("id").to_pylist())
            time.sleep(batch_every_s)

        opened = time.monotonic()
        while time.monotonic() - opened < b_starts_after_s:
            send_batch()

        b = stack.enter_context(skade(tmp_path / "b", database, warehouse, *b_args))

        def b_puts():
            try:
                n = 0
                while not stop.is_set():
                    ids = range(50_000 + n * 10, 50_000 + (n + 1) * 10)
                    put(b.flight_uri, path, id_table(ids, "b"))
                    b_ids.extend(ids)
                    n += 1
                    time.sleep(0.3)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        producer = threading.Thread(target=b_puts)
        producer.start()
        try:
            # A's put stays open over several of B's sweeps, until B's maintenance has
            # removed files (expired snapshots' manifest lists): B's cleanup runs.
            b_up = time.monotonic()
            while time.monotonic() - b_up < 4.0 or metric(b, "skade_files_deleted_total") == 0:
                assert time.monotonic() - b_up < 30, f"B removed nothing; log:\n{b.log_tail()}"
                send_batch()
            finish_put(writer, reader)
        finally:
            stop.set()
            producer.join(timeout=60)
        assert not errors, errors

        expected = sorted([*range(0, 100), *b_ids, *a_ids])
        got = rest_catalog(b).load_table(path).scan().to_arrow()
        assert ids_of(got) == expected
        catalog = sql_catalog(database, warehouse)
        try:
            assert ids_of(catalog.load_table(path).scan().to_arrow()) == expected
        finally:
            catalog.close()


def test_gc_beside_running_instances_keeps_an_open_puts_files(tmp_path, postgres_database):
    """Catches `skade gc --catalog` ignoring the instances' write pins (it would remove the
    data files A's open put wrote, which no table references yet, and A's commit would
    name missing files), and a gc on a shared catalog that removes nothing at all."""
    database = postgres_database("shared_gc")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    path = ("gc", "events")
    # No maintenance on A, so only gc removes anything.
    batch_rows = 200
    with skade(tmp_path / "a", database, warehouse, *ONE_COMMIT_PER_STREAM) as a:
        put(a.flight_uri, path, id_table(range(0, 100), "seed"))
        table_dir = warehouse / "gc" / "events"
        orphan = table_dir / "data" / "orphan-from-a-crash.parquet"
        orphan.write_bytes(b"not referenced by any snapshot")
        an_hour_ago = time.time() - 3600
        os.utime(orphan, (an_hour_ago, an_hour_ago))

        client = flight.FlightClient(a.flight_uri)
        try:
            schema = id_table(range(0), "a").schema
            writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), schema)
            a_ids: list[int] = []
            # Files older than gc's 1 s grace and than the 10 s within which a new pin is
            # published (cluster.rs PIN_PUBLISH_BOUND): only A's pin keeps them.
            opened = time.monotonic()
            while time.monotonic() - opened < 13.0:
                start = 100_000 + len(a_ids)
                writer.write_table(id_table(range(start, start + batch_rows), "a"))
                a_ids.extend(range(start, start + batch_rows))
                time.sleep(0.5)
            written = sorted(p.name for p in (table_dir / "data").rglob("*.parquet"))
            binary = os.environ.get("SKADE_BIN", str(DEFAULT_BIN))
            done = subprocess.run(
                [binary, "gc", "--catalog", database.url, "--warehouse", str(warehouse),
                 "--data-dir", str(tmp_path / "gc-data"), "--grace", "1s"],
                capture_output=True, text=True, timeout=120,
            )
            assert done.returncode == 0, done.stdout + done.stderr
            assert "removed 1 orphan files" in done.stdout, done.stdout
            assert not orphan.exists()
            kept = sorted(p.name for p in (table_dir / "data").rglob("*.parquet"))
            assert set(written) - {orphan.name} <= set(kept), "gc removed an open put's files"
            finish_put(writer, reader)
        finally:
            client.close()
        expected = sorted([*range(0, 100), *a_ids])
        assert ids_of(rest_catalog(a).load_table(path).scan().to_arrow()) == expected


def maintenance_counts(server: SkadeServer) -> tuple[float, float]:
    """``skade_maintenance_tables`` of ``server``'s last pass: (this_instance,
    another_instance)."""
    name = "skade_maintenance_tables"
    return (
        metric(server, name, 'maintained_by="this_instance"'),
        metric(server, name, 'maintained_by="another_instance"'),
    )


def complete_rounds(servers: list[SkadeServer], tables: int, rounds: int) -> list[list[float]]:
    """Scrapes every server ``rounds`` times (every 0.3 s); returns the ``this_instance``
    counts of the rounds in which every server's last pass saw all ``tables`` (a pass
    whose lease query failed counts the table neither way: such rounds are skipped)."""
    out = []
    for _ in range(rounds):
        counts = [maintenance_counts(s) for s in servers]
        if all(mine + other == tables for mine, other in counts):
            out.append([mine for mine, _ in counts])
        time.sleep(0.3)
    return out


def test_each_table_is_maintained_by_one_instance(tmp_path, postgres_database):
    """Catches every instance maintaining every table (a lease not held, or held only per
    job so that the instances' passes take turns): the instances' ``this_instance`` counts
    would add up to more than the tables."""
    database = postgres_database("shared_maint")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    tables, instances = 4, 3
    managers = [
        skade(tmp_path / f"i{i}", database, warehouse, "--maintenance-interval", "300ms")
        for i in range(instances)
    ]
    servers = [m.__enter__() for m in managers]
    running = list(range(instances))
    try:
        for t in range(tables):
            put(servers[t % instances].flight_uri, ("maint", f"t{t}"), id_table(range(10), "x"))
        # Every instance's pass has seen the four tables.
        wait_for(
            "every instance's pass finds every table",
            lambda: all(sum(maintenance_counts(s)) == tables for s in servers),
            timeout_s=20,
        )
        # Also catches PostgreSQL NOTICEs in the log: the instances that find the schema
        # made (all but the first) would log one per `CREATE ... IF NOT EXISTS` at start.
        for server in servers:
            assert "NOTICE" not in server.log_path.read_text(), server.log_tail()
        rounds = complete_rounds(servers, tables, 12)
        assert len(rounds) >= 6, rounds
        assert all(sum(r) <= tables for r in rounds), rounds
        assert sum(1 for r in rounds if sum(r) == tables) >= len(rounds) // 2, rounds

        # The instance maintaining the most tables stops: the others take its tables over.
        holder = max(range(instances), key=lambda i: rounds[-1][i])
        assert rounds[-1][holder] > 0
        managers[holder].__exit__(None, None, None)
        running.remove(holder)
        rest = [servers[i] for i in running]

        def taken_over():
            r = complete_rounds(rest, tables, 1)
            return r and sum(r[0]) == tables

        wait_for(
            "the stopped instance's tables are maintained by the others", taken_over, timeout_s=15
        )
        rounds = complete_rounds(rest, tables, 6)
        assert rounds and all(sum(r) <= tables for r in rounds), rounds
    finally:
        for i in running:
            managers[i].__exit__(None, None, None)


@pytest.fixture
def own_postgres() -> Iterator[PostgresCluster]:
    """A PostgreSQL cluster for this test alone (it stops and restarts it)."""
    cluster = PostgresCluster(new_cluster_dir())
    try:
        cluster.start()
    except PostgresError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.remove()


def test_puts_recover_after_a_postgres_restart(tmp_path, own_postgres):
    """Catches an instance that does not come back by itself once its catalog database
    does (a broken pool kept), or that fails puts without naming the database, or loses
    an acked row across the restart."""
    database = own_postgres.create_database("restart")
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir()
    path = ("pg", "restart")
    target = f"127.0.0.1:{own_postgres.port}/{database.name}"
    acked: list[int] = []
    next_id = 0

    def put_next(server: SkadeServer) -> None:
        nonlocal next_id
        ids = range(next_id, next_id + 10)
        next_id += 10
        put(server.flight_uri, path, id_table(ids, "flight"))
        acked.extend(ids)

    with skade(tmp_path / "a", database, warehouse) as server:
        put_next(server)
        put_next(server)

        own_postgres.stop("immediate")
        names_the_database = re.escape(f"catalog database {target}")
        with pytest.raises(flight.FlightUnavailableError, match=names_the_database) as refused:
            put_next(server)
        # Also catches the reason said twice (it was repeated as the status's source);
        # pyarrow repeats the whole status after "gRPC client debug context".
        said = str(refused.value).split("gRPC client debug context")[0]
        assert said.count(f"catalog database {target}") == 1, said
        # In skade's words: no iceberg `Kind => message`, no `source: not connected`.
        for internal in ["=>", "Unexpected", "source:", "not connected"]:
            assert internal not in said, said

        def not_ready():
            status, body = http_get(f"{server.metrics_url}/readyz")
            return status == 503 and target in body and body

        body = wait_for("/readyz says not ready naming the database", not_ready, timeout_s=10)
        assert body.startswith("not ready"), body
        assert "=>" not in body and "Unexpected" not in body, body

        # Maintenance fails every pass while the database is down: each failure is
        # counted, but an identical one is logged once a minute (with a count), not
        # twice a second.
        failures = "skade_maintenance_errors_total"
        start = sum(v for k, v in metrics_of(server).items() if k.startswith(failures))
        wait_for("six more failed maintenance jobs",
                 lambda: sum(v for k, v in metrics_of(server).items()
                             if k.startswith(failures)) >= start + 6, timeout_s=30)
        log = server.log_path.read_text()
        failed = [line for line in log.splitlines()
                  if "maintenance pass failed" in line or "maintenance job failed" in line]
        assert failed, log[-3000:]
        reasons = [line.split("error=", 1)[-1].split(" repeats=")[0] for line in failed]
        assert len(reasons) == len(set(reasons)), "\n".join(failed)
        for line in failed:
            assert "=>" not in line and "source: not connected" not in line, line
        assert "Connection error: db error" not in log
        assert "Connection could not be recycled" not in log
        for line in log.splitlines():
            if "a connection to the catalog database ended" in line:
                assert target in line and "reason=" in line, line

        own_postgres.restart()
        restarted = time.monotonic()

        def put_succeeds():
            try:
                put_next(server)
                return True
            except flight.FlightUnavailableError:
                return False

        wait_for("a put succeeds after the restart", put_succeeds, timeout_s=10, every_s=0.5)
        assert time.monotonic() - restarted < 10
        put_next(server)
        wait_for(
            "/readyz says ready again",
            lambda: http_get(f"{server.metrics_url}/readyz")[0] == 200,
            timeout_s=10,
        )

        catalog = sql_catalog(database, warehouse)
        try:
            assert ids_of(catalog.load_table(path).scan().to_arrow()) == sorted(acked)
        finally:
            catalog.close()
