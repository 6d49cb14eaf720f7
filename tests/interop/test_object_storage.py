"""Interop: the warehouse on S3 (issue #17), against moto's S3 server on 127.0.0.1.

What is tested, with a real ``skade serve --warehouse s3://...`` and real clients:

* A pyarrow put lands as objects in the bucket (nothing under the local data dir but
  ``catalog.redb``); ``GetFlightInfo``/``DoGet`` read it back; pyiceberg and DuckDB read
  it through the REST catalog with no S3 configuration of their own (the load-table
  answer carries endpoint, region, path style and -- asked for -- vended credentials).
* The ADBC five-table transaction commits as one catalog commit with every table's
  files on S3, and pyiceberg reads each table back.
* ``/readyz`` checks the bucket and ``/metrics`` counts object-store operations.
* A bucket that refuses writes (a relay answering S3's ``403 AccessDenied`` to every
  write, ``s3_relay.py``): a put fails ``Unavailable``, nothing is committed, and
  ``/readyz`` answers 503 naming the warehouse.
* Removing objects: online cleanup removes the objects no retained snapshot references
  (and old orphans under a table's location, nothing outside it), a REST drop with
  ``purgeRequested`` removes the table's objects, and ``skade gc`` with the server's S3
  flags removes orphan objects.

moto (``moto[server]`` from PyPI) is started by conftest's ``moto`` fixture; the AWS
credentials are given to skade and boto3 only, never to this process's environment,
so the readers can only work with what the REST catalog hands them. The core interop
modules (``test_flight_roundtrip``, ``test_adbc``, ``test_rest_catalog``) run on an S3
warehouse too (``any_warehouse_server``).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog

from conftest import (
    DEFAULT_BIN,
    S3_BUCKET,
    S3_CREDENTIALS,
    launch_skade,
    s3_args,
    s3_client,
    s3_keys,
)
from test_adbc import NYCFLIGHTS_TABLES, commits, metric, source
from test_flight_roundtrip import assert_tables_equal

BUCKET = S3_BUCKET
CREDENTIALS = S3_CREDENTIALS
keys = s3_keys
RELAY = Path(__file__).resolve().parent / "s3_relay.py"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory, moto):
    yield from launch_skade(
        tmp_path_factory.mktemp("skade-s3"), s3_args(moto, "wh"), env=CREDENTIALS
    )


@contextlib.contextmanager
def relay_to(moto: str, *refusing: str):
    """``s3_relay.py`` in front of moto with the flags ``refusing``; yields its endpoint."""
    proc = subprocess.Popen(
        [sys.executable, str(RELAY), "--upstream", moto, *refusing],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening "), line
        yield f"http://127.0.0.1:{line.split()[1]}"
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture
def relay(moto):
    """A relay in front of moto that refuses every write; yields its endpoint."""
    with relay_to(moto, "--refuse-writes") as endpoint:
        yield endpoint


def put(server, path: tuple[str, ...], table: pa.Table) -> None:
    client = flight.FlightClient(server.flight_uri)
    writer, acks = client.do_put(flight.FlightDescriptor.for_path(*path), table.schema)
    writer.write_table(table)
    writer.done_writing()
    while acks.read() is not None:
        pass
    writer.close()


def rest_catalog(server):
    # Only the URI: endpoint, path style and credentials must come from skade.
    return load_catalog("skade", type="rest", uri=server.metrics_url)


# Catches: data or metadata written to the local disk instead of the bucket, a REST
# answer a reader cannot open S3 paths with, a Flight read that assumes local files.
def test_put_lands_in_the_bucket_and_every_reader_reads_it(s3_server, moto):
    table = pa.table({"id": list(range(1000)), "name": [f"n{i}" for i in range(1000)]})
    put(s3_server, ("s3demo", "people"), table)

    objects = keys(moto, "wh/s3demo/people/")
    assert any(k.startswith("wh/s3demo/people/data/") and k.endswith(".parquet") for k in objects)
    assert any(k.endswith(".metadata.json") for k in objects), objects
    local = sorted(p.name for p in s3_server.data_dir.rglob("*") if p.is_file())
    assert local == ["catalog.redb"], local

    client = flight.FlightClient(s3_server.flight_uri)
    info = client.get_flight_info(flight.FlightDescriptor.for_path("s3demo", "people"))
    got = client.do_get(info.endpoints[0].ticket).read_all()
    assert_tables_equal(got, table, what="DoGet", ordered=False)

    tbl = rest_catalog(s3_server).load_table("s3demo.people")
    assert tbl.metadata.location == f"s3://{BUCKET}/wh/s3demo/people"
    assert_tables_equal(tbl.scan().to_arrow(), table, what="pyiceberg", ordered=False)

    import duckdb
    import duckdb_ext

    con = duckdb.connect()
    extensions = Path(list(duckdb_ext.__path__)[0]) / "extensions"
    con.execute("SET extension_directory = ?", [str(extensions)])
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("LOAD iceberg")
    con.execute(
        f"ATTACH '' AS skade (TYPE iceberg, ENDPOINT '{s3_server.metrics_url}', "
        "AUTHORIZATION_TYPE 'none')"
    )
    [(count, total)] = con.execute("SELECT count(*), sum(id) FROM skade.s3demo.people").fetchall()
    assert (count, total) == (1000, sum(range(1000)))


# Catches: a multi-table commit that is not one catalog commit on S3, or whose files a
# reader cannot find.
def test_adbc_five_table_transaction_on_s3(s3_server):
    import adbc_driver_flightsql.dbapi as flightsql

    ns = "s3_nyc"
    sources = {name: source(name) for name in NYCFLIGHTS_TABLES}
    before = commits(s3_server)
    conn = flightsql.connect(s3_server.flight_uri, autocommit=False)
    try:
        with conn.cursor() as cur:
            for name in NYCFLIGHTS_TABLES:
                cur.adbc_ingest(name, sources[name], mode="create", db_schema_name=ns)
        assert commits(s3_server) == before, "something was committed before commit()"
        conn.commit()
    finally:
        conn.close()
    assert commits(s3_server) - before == 1, "five tables must be ONE catalog commit"
    catalog = rest_catalog(s3_server)
    for name in NYCFLIGHTS_TABLES:
        tbl = catalog.load_table(f"{ns}.{name}")
        assert len(tbl.metadata.snapshots) == 1, name
        assert_tables_equal(tbl.scan().to_arrow(), sources[name], what=name, ordered=False)


# Catches: a readiness check that does not touch the bucket; object-store operations
# not counted.
def test_readyz_and_metrics_on_s3(s3_server):
    with NO_PROXY.open(f"{s3_server.metrics_url}/readyz", timeout=10) as resp:
        assert resp.status == 200
    assert metric(s3_server, 'skade_object_store_requests_total{op="write"}') > 0
    assert metric(s3_server, 'skade_object_store_request_duration_seconds_count{op="write"}') > 0
    assert metric(s3_server, "skade_file_syncs_total") == 0, "an S3 warehouse never syncfs"


# Catches: a refused upload reported as Internal/Unknown, a pointer moved to files that
# were never stored, a /readyz that says ready while the bucket refuses writes.
def test_a_bucket_that_refuses_writes(tmp_path, relay, moto):
    gen = launch_skade(tmp_path, s3_args(relay, "refused"), env=CREDENTIALS)
    server = next(gen)
    try:
        table = pa.table({"id": [1, 2, 3]})
        with pytest.raises(flight.FlightUnavailableError) as refused:
            put(server, ("refused", "t"), table)
        # The status says what was refused in skade's words: the object, and the store's
        # reason, never OpenDAL's or iceberg's `Kind (status) at op, context: … =>` form.
        said = str(refused.value).split("gRPC client debug context")[0]
        assert "write http://127.0.0.1:" in said and "AccessDenied" in said, said
        for internal in ["=>", "Unexpected", "context: {", "(persistent)", "(temporary)"]:
            assert internal not in said, said
        assert commits(server) == 0, "a refused write committed something"
        assert keys(moto, "refused/") == []
        try:
            NO_PROXY.open(f"{server.metrics_url}/readyz", timeout=30)
            pytest.fail("/readyz answered 200 while the bucket refuses writes")
        except urllib.error.HTTPError as e:
            assert e.code == 503
            reason = e.read().decode()
            assert f"s3://{BUCKET}/refused" in reason and "not writable" in reason, reason
            assert "=>" not in reason, reason
        assert metric(server, 'skade_object_store_errors_total{op="write"}') > 0
    finally:
        with pytest.raises(StopIteration):
            next(gen)


# Online cleanup as fast as a test can watch it: two snapshots kept, 1 s grace.
# Compaction off: with a 1 s grace it would remove the inputs of a scan a test just
# planned (the grace period exists for exactly that reader).
CLEANUP_ARGS = [
    "--max-snapshots",
    "2",
    "--cleanup-grace",
    "1s",
    "--maintenance-interval",
    "200ms",
    "--compaction",
    "false",
]


@contextlib.contextmanager
def running(base: Path, args: list[str]):
    """``skade serve`` with ``args`` and the S3 credentials on the data dir under
    ``base`` (a second ``running`` on the same ``base`` restarts on that data dir)."""
    gen = launch_skade(base, args, env=CREDENTIALS)
    server = next(gen)
    try:
        yield server
    finally:
        with pytest.raises(StopIteration):
            next(gen)


def put_objects(endpoint: str, names: list[str]) -> None:
    s3 = s3_client(endpoint)
    for key in names:
        s3.put_object(Bucket=BUCKET, Key=key, Body=b"not referenced by any table")


def referenced_keys(tbl) -> set[str]:
    """The bucket keys ``tbl``'s metadata references: the current metadata JSON and its
    metadata log, every snapshot's manifest list, those lists' manifests and the files
    those name (whatever the entry's status)."""
    md = tbl.metadata
    locations = {tbl.metadata_location, *(e.metadata_file for e in md.metadata_log)}
    for snapshot in md.snapshots:
        locations.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(tbl.io):
            locations.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(tbl.io, discard_deleted=False):
                locations.add(entry.data_file.file_path)
    prefix = f"s3://{BUCKET}/"
    assert all(loc.startswith(prefix) for loc in locations), locations
    return {loc[len(prefix) :] for loc in locations}


def poll(condition, what: str, timeout_s: float = 30.0):
    """Calls ``condition`` (returning ``(done, detail)``) until done; fails with the last
    detail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        done, detail = condition()
        if done:
            return
        if time.monotonic() > deadline:
            pytest.fail(f"{what} within {timeout_s:.0f}s: {detail}", pytrace=False)
        time.sleep(0.2)


# Catches: online cleanup that skips object-store tables (expired snapshots' manifest
# lists and manifests pile up in the bucket), or one that removes an object a retained
# snapshot still reads.
def test_cleanup_removes_unreferenced_objects(tmp_path, moto):
    parts = [pa.table({"id": list(range(i * 10, i * 10 + 10))}) for i in range(12)]
    with running(tmp_path, s3_args(moto, "clean") + CLEANUP_ARGS) as server:
        for part in parts:
            put(server, ("cl", "t"), part)
        catalog = rest_catalog(server)

        def settled():
            tbl = catalog.load_table("cl.t")
            stored = set(keys(moto, "clean/cl/t/"))
            try:
                referenced = referenced_keys(tbl)
            except FileNotFoundError as e:
                # Expiry still runs: a snapshot this load listed expired and its files
                # went once the 1 s grace passed, while the walk was reading them.
                return False, {"walk": f"a file went during the walk: {e}"}
            return stored == referenced, {
                "not referenced": sorted(stored - referenced),
                "missing": sorted(referenced - stored),
            }

        poll(settled, "the bucket did not come down to the referenced objects")
        assert metric(server, 'skade_object_store_requests_total{op="delete"}') > 0
        assert len(catalog.load_table("cl.t").metadata.snapshots) <= 2
        assert_tables_equal(
            catalog.load_table("cl.t").scan().to_arrow(),
            pa.concat_tables(parts),
            what="pyiceberg after cleanup",
            ordered=False,
        )


# Catches: compaction that reads its input files from the local filesystem (on S3 every
# compaction job fails: skade_maintenance_errors_total{job="compact"}), or one that
# loses or doubles a row.
def test_compaction_rewrites_small_objects(tmp_path, moto):
    parts = [pa.table({"id": list(range(i * 10, i * 10 + 10))}) for i in range(8)]
    args = ["--maintenance-interval", "200ms", "--cleanup-grace", "1h"]
    with running(tmp_path, s3_args(moto, "compact") + args) as server:
        for part in parts:
            put(server, ("cp", "t"), part)

        def compacted():
            rewritten = metric(server, 'skade_files_rewritten_total{kind="data"}')
            failed = metric(server, 'skade_maintenance_errors_total{job="compact"}')
            return rewritten >= 5 or failed > 0, {"rewritten": rewritten, "failed": failed}

        poll(compacted, "no compaction")
        assert metric(server, 'skade_maintenance_errors_total{job="compact"}') == 0
        tbl = rest_catalog(server).load_table("cp.t")
        assert int(tbl.current_snapshot().summary["total-data-files"]) < len(parts)
        assert_tables_equal(
            tbl.scan().to_arrow(),
            pa.concat_tables(parts),
            what="pyiceberg after compaction",
            ordered=False,
        )


# Catches: leftovers of failed commits never removed on S3, and a sweep that reaches
# outside the table's own location (a sibling whose name starts the same, another prefix).
def test_cleanup_removes_an_old_orphan_under_the_table_only(tmp_path, moto):
    table = pa.table({"id": [1, 2, 3]})
    with running(tmp_path, s3_args(moto, "orph") + CLEANUP_ARGS) as server:
        put(server, ("ns", "t"), table)
    inside = ["orph/ns/t/data/orphan-1.parquet", "orph/ns/t/metadata/orphan-2.avro"]
    outside = [
        "orph/ns/tx/data/x.parquet",
        "orph/ns/t-copy/metadata/y.avro",
        "orph/stray.parquet",
        "other/ns/t/data/z.parquet",
    ]
    put_objects(moto, inside + outside)
    # The restarted server's first sweep lists the table's prefix and finds them.
    with running(tmp_path, s3_args(moto, "orph") + CLEANUP_ARGS) as server:

        def removed():
            present = set(keys(moto, "orph/")) & set(inside)
            return not present, sorted(present)

        poll(removed, "the orphans under the table's location were not removed")
        for key in outside:
            assert keys(moto, key) == [key], f"{key} outside the table location was removed"
        tbl = rest_catalog(server).load_table("ns.t")
        assert_tables_equal(tbl.scan().to_arrow(), table, what="pyiceberg", ordered=False)


# Catches: a purge that drops the table but leaves its objects on S3, or that removes a
# sibling table's objects whose prefix starts the same.
def test_purge_removes_the_tables_objects(s3_server, moto):
    table = pa.table({"id": [1, 2, 3]})
    put(s3_server, ("purge", "t"), table)
    put(s3_server, ("purge", "tx"), table)
    put_objects(moto, ["wh/purge/t/data/orphan.parquet"])
    assert keys(moto, "wh/purge/t/")
    catalog = rest_catalog(s3_server)
    catalog.purge_table("purge.t")
    assert keys(moto, "wh/purge/t/") == []
    assert not catalog.table_exists("purge.t")
    tbl = catalog.load_table("purge.tx")
    assert_tables_equal(tbl.scan().to_arrow(), table, what="the sibling", ordered=False)


# Catches: `skade gc` that cannot reach an S3 warehouse (no --warehouse/--s3-* flags, or
# local listing only), or one that removes referenced objects or objects outside a
# table's location.
def test_gc_removes_orphan_objects(tmp_path, moto):
    table = pa.table({"id": [1, 2, 3]})
    with running(tmp_path, s3_args(moto, "gc")) as server:
        put(server, ("ns", "t"), table)
    inside = ["gc/ns/t/data/orphan-1.parquet", "gc/ns/t/metadata/00009-orphan.metadata.json"]
    outside = ["gc/ns/tx/data/x.parquet", "gc/stray.parquet"]
    put_objects(moto, inside + outside)
    before = set(keys(moto, "gc/"))
    binary = os.environ.get("SKADE_BIN", str(DEFAULT_BIN))
    done = subprocess.run(
        [binary, "gc", "--data-dir", str(tmp_path / "data"), "--grace", "0s", *s3_args(moto, "gc")],
        env={**os.environ, **CREDENTIALS},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "removed 2 orphan files" in done.stdout, done.stdout
    assert set(keys(moto, "gc/")) == before - set(inside)
    with running(tmp_path, s3_args(moto, "gc")) as server:
        tbl = rest_catalog(server).load_table("ns.t")
        assert_tables_equal(tbl.scan().to_arrow(), table, what="pyiceberg", ordered=False)


# Catches: every commit of a stream reading back from S3 the manifest list the commit
# before it had just uploaded (one more round trip per commit).
def test_a_commit_does_not_read_back_its_parents_manifest_list(tmp_path, moto):
    with running(tmp_path, s3_args(moto, "reads") + ["--maintenance", "false"]) as server:
        put(server, ("ns", "t"), pa.table({"id": [0]}))
        before = metric(server, 'skade_object_store_requests_total{op="read"}')
        for i in range(1, 6):
            put(server, ("ns", "t"), pa.table({"id": [i]}))
        assert metric(server, 'skade_object_store_requests_total{op="read"}') == before
        tbl = rest_catalog(server).load_table("ns.t")
        assert len(tbl.metadata.snapshots) == 6
        assert sorted(tbl.scan().to_arrow().column("id").to_pylist()) == list(range(6))


# Catches: a commit whose manifest upload (which runs behind the writer on S3) failed
# moving the table's pointer anyway -- a snapshot naming a manifest that is not stored --
# or failing with anything but Unavailable.
def test_a_refused_manifest_upload_fails_the_commit_and_moves_no_pointer(tmp_path, moto):
    with relay_to(moto, "--refuse-writes-to=-m0.avro") as endpoint:
        with running(tmp_path, s3_args(endpoint, "nomanifest")) as server:
            with pytest.raises(flight.FlightUnavailableError, match="m0.avro"):
                put(server, ("ns", "t"), pa.table({"id": [1, 2, 3]}))
            assert commits(server) == 0, "a commit without its manifest moved a pointer"
            # The put created ns.t and failed before its first commit: the table is
            # dropped again, so no snapshot (and no table) names the missing manifest.
            assert not rest_catalog(server).table_exists("ns.t"), "a failed first put left its table"
