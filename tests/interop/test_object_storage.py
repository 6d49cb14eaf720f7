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

moto (``moto[server]`` from PyPI) is started by the ``moto`` fixture; the AWS
credentials are given to skade and boto3 only, never to this process's environment,
so the readers can only work with what the REST catalog hands them.
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog

from conftest import free_tcp_ports, launch_skade
from test_adbc import NYCFLIGHTS_TABLES, commits, metric, source
from test_flight_roundtrip import assert_tables_equal

BUCKET = "skade-warehouse"
CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "skade-test-key",
    "AWS_SECRET_ACCESS_KEY": "skade-test-secret",
    "AWS_REGION": "us-east-1",
}
RELAY = Path(__file__).resolve().parent / "s3_relay.py"
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _reachable(url: str) -> bool:
    try:
        with NO_PROXY.open(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def _wait(proc: subprocess.Popen, url: str, what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not _reachable(url):
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with code {proc.returncode}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not answer at {url} within {timeout_s:.0f}s", pytrace=False)
        time.sleep(0.1)


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    """moto's S3 server on a free loopback port, with the bucket ``BUCKET``; yields its
    endpoint URL."""
    [port] = free_tcp_ports(1)
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    endpoint = f"http://127.0.0.1:{port}"
    try:
        _wait(proc, endpoint, "moto_server")
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def s3_client(endpoint: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=CREDENTIALS["AWS_REGION"],
    )


def keys(endpoint: str, prefix: str) -> list[str]:
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(
        Bucket=BUCKET, Prefix=prefix
    )
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def s3_args(endpoint: str, prefix: str) -> list[str]:
    return [
        "--warehouse",
        f"s3://{BUCKET}/{prefix}",
        "--s3-endpoint",
        endpoint,
        "--s3-path-style-access",
        "true",
        "--s3-vend-credentials",
        "true",
    ]


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory, moto):
    yield from launch_skade(
        tmp_path_factory.mktemp("skade-s3"), s3_args(moto, "wh"), env=CREDENTIALS
    )


@pytest.fixture
def relay(moto):
    """A relay in front of moto that refuses every write; yields its endpoint."""
    proc = subprocess.Popen(
        [sys.executable, str(RELAY), "--upstream", moto, "--refuse-writes"],
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
        with pytest.raises(flight.FlightUnavailableError):
            put(server, ("refused", "t"), table)
        assert commits(server) == 0, "a refused write committed something"
        assert keys(moto, "refused/") == []
        try:
            NO_PROXY.open(f"{server.metrics_url}/readyz", timeout=30)
            pytest.fail("/readyz answered 200 while the bucket refuses writes")
        except urllib.error.HTTPError as e:
            assert e.code == 503
            reason = e.read().decode()
            assert f"s3://{BUCKET}/refused" in reason and "not writable" in reason, reason
        assert metric(server, 'skade_object_store_errors_total{op="write"}') > 0
    finally:
        with pytest.raises(StopIteration):
            next(gen)
