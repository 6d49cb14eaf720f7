"""Interop: the documented exactly-once producer survives a SIGKILL of the server.

The ``produce`` function is taken verbatim from ``docs/exactly-once.md`` (between
``<!-- exactly-once:begin -->`` and ``<!-- exactly-once:end -->``) and run in a thread
against a real ``skade serve`` that commits one small data file at a time. Once some
batches are durable the server is SIGKILLed mid-stream and started again on the same
ports: on the embedded redb catalog on the same data dir (``[redb]``); on a PostgreSQL
catalog as another instance, on a fresh data dir, sharing only the database and the
warehouse (``[postgres]``: a failover). The producer resumes from its high-water mark.
Afterwards every row is in the table exactly once (no loss, no duplicate), read back
through pyiceberg. The other tests run on every warehouse and catalog
(``any_warehouse_server``: ``[local]``, ``[s3]``, ``[postgres]``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog

from conftest import DEFAULT_BIN, _healthz_ok, free_tcp_ports

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "exactly-once.md"
BATCHES, ROWS = 120, 50


def documented_producer():
    text = GUIDE.read_text()
    block = text.split("<!-- exactly-once:begin -->", 1)[1].split("<!-- exactly-once:end -->", 1)[0]
    code = re.search(r"```python\n(.*?)```", block, re.S).group(1)
    namespace: dict = {}
    exec(code, namespace)  # the guide's own code
    return namespace["produce"]


class Server:
    """A skade process that can be SIGKILLed and started again on the same ports, with
    ``extra`` arguments (a ``--catalog`` and ``--warehouse``, say)."""

    def __init__(self, base: Path, extra: list[str] | None = None):
        self.data_dir = base / "data"
        self.log = base / "skade.log"
        self.extra = extra or []
        self.flight_port, self.metrics_port = free_tcp_ports(2)
        self.proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"grpc://127.0.0.1:{self.flight_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def start(self) -> None:
        binary = os.environ.get("SKADE_BIN", str(DEFAULT_BIN))
        cmd = [binary, "serve", "--data-dir", str(self.data_dir),
               "--flight-addr", f"127.0.0.1:{self.flight_port}",
               "--metrics-addr", f"127.0.0.1:{self.metrics_port}",
               # one small file per commit, so the stream spans many commits
               "--target-file-size", "1KiB", "--files-per-commit", "1", *self.extra]
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not _healthz_ok(f"{self.metrics_url}/healthz"):
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            assert time.monotonic() < deadline, "skade did not become healthy"
            time.sleep(0.05)

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=20)


def committed(uri: str, writer_id: str) -> int:
    try:
        client = flight.FlightClient(uri)
        reply = next(iter(client.do_action(flight.Action("skade.v1.WriterMarks", writer_id.encode()))))
        marks = json.loads(reply.body.to_pybytes())["marks"]
        return max((m["sequence"] for m in marks), default=0)
    except (flight.FlightError, pa.ArrowException, OSError):
        return 0


@pytest.fixture(scope="module")
def skade_server(any_warehouse_server):
    """The module's other tests run on a local warehouse, on S3, and on a PostgreSQL
    catalog."""
    return any_warehouse_server


@pytest.mark.parametrize("catalog", ["redb", "postgres"])
def test_the_documented_producer_lands_every_row_once_across_a_server_kill(
    tmp_path, monkeypatch, catalog, request
):
    """Catches rows lost or doubled when the server dies mid-stream and the producer
    retries -- on a PostgreSQL catalog through the second of the two URIs it was given
    (the documented producer took one URI; its failover is what several instances
    promise)."""
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    produce = documented_producer()
    extra = []
    if catalog == "postgres":
        database = request.getfixturevalue("postgres_database")("exactly_once")
        extra = ["--catalog", database.url, "--warehouse", str(tmp_path / "warehouse")]
    server = Server(tmp_path, extra)
    server.start()
    # On a PostgreSQL catalog a second instance serves the same tables: the producer is
    # given both and must fail over to it while the first stays down.
    other = None
    uris = [server.uri]
    if catalog == "postgres":
        other = Server(tmp_path / "other", extra)
        other.data_dir = tmp_path / "data-other"
        (tmp_path / "other").mkdir()
        other.start()
        uris.append(other.uri)
    batches = [
        pa.record_batch({"id": pa.array(range(i * ROWS, (i + 1) * ROWS), pa.int64()),
                         "note": pa.array([f"b{i}"] * ROWS)})
        for i in range(BATCHES)
    ]
    errors: list[BaseException] = []

    def run():
        try:
            produce(uris, "loader-1", ("eo", "events"), batches)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    producer = threading.Thread(target=run, daemon=True)
    try:
        producer.start()
        deadline = time.monotonic() + 60
        while committed(server.uri, "loader-1") < 5:
            assert time.monotonic() < deadline, "nothing committed before the kill"
            time.sleep(0.01)
        before_kill = committed(server.uri, "loader-1")
        server.kill()
        assert before_kill < BATCHES, "the stream ended before the kill"
        assert committed(server.uri, "loader-1") == 0  # the server is down
        if other is None:
            time.sleep(1.0)  # the producer fails and retries meanwhile
            server.start()
            reader = server
        else:
            # The first instance stays down: the producer goes on through the other.
            reader = other
        producer.join(timeout=120)
        assert not producer.is_alive(), "the producer did not finish"
        assert not errors, errors
        assert committed(reader.uri, "loader-1") == BATCHES
        table = load_catalog("eo", type="rest", uri=reader.metrics_url).load_table("eo.events")
        ids = table.scan().to_arrow().column("id").to_pylist()
        assert len(ids) == BATCHES * ROWS, f"{len(ids)} rows for {BATCHES * ROWS} sent"
        assert sorted(ids) == list(range(BATCHES * ROWS)), "a row is missing or doubled"
    finally:
        server.stop()
        if other is not None:
            other.stop()


def test_the_documented_producer_raises_a_permanent_refusal_instead_of_retrying(skade_server):
    """Catches a documented producer that retries a refusal no resend can fix (here a uint64
    column, InvalidArgument) forever instead of raising it."""
    produce = documented_producer()
    batches = [pa.record_batch({"id": pa.array([1, 2, 3], pa.uint64())})]
    outcome: list[BaseException] = []

    def run():
        try:
            produce([skade_server.flight_uri], "refused-1", ("eo", "refused"), batches)
        except BaseException as e:  # noqa: BLE001 - inspected below
            outcome.append(e)

    producer = threading.Thread(target=run, daemon=True)
    producer.start()
    producer.join(timeout=20)
    assert not producer.is_alive(), "produce() still retrying a permanent refusal after 20 s"
    [error] = outcome
    assert isinstance(error, pa.ArrowInvalid), repr(error)
    assert "UInt64" in str(error), str(error)


def test_an_adbc_transaction_retried_with_its_key_lands_once(skade_server):
    """Catches a retried ADBC COMMIT (same writer id and sequence, new connection, as after
    a lost answer) adding its tables' rows a second time."""
    import adbc_driver_flightsql.dbapi as flightsql

    header = "adbc.flight.sql.rpc.call_header."
    catalog = load_catalog("eo", type="rest", uri=skade_server.metrics_url)
    orders = pa.table({"id": list(range(10))})
    lines = pa.table({"id": list(range(25))})

    def transaction(sequence: int) -> None:
        conn = flightsql.connect(
            skade_server.flight_uri,
            db_kwargs={header + "x-skade-writer-id": "adbc-loader"},
            autocommit=False,
        )
        try:
            conn.adbc_connection.set_options(**{header + "x-skade-sequence": str(sequence)})
            with conn.cursor() as cur:
                cur.adbc_ingest("orders", orders, mode="create_append", db_schema_name="eo_adbc")
                cur.adbc_ingest("lines", lines, mode="create_append", db_schema_name="eo_adbc")
            conn.commit()
        finally:
            conn.close()

    def rows(name: str) -> int:
        return catalog.load_table(f"eo_adbc.{name}").scan().to_arrow().num_rows

    transaction(1)
    snapshots = len(catalog.load_table("eo_adbc.orders").metadata.snapshots)
    transaction(1)  # the retry: writes nothing, succeeds
    assert (rows("orders"), rows("lines")) == (10, 25)
    assert len(catalog.load_table("eo_adbc.orders").metadata.snapshots) == snapshots
    transaction(2)  # the next transaction lands
    assert (rows("orders"), rows("lines")) == (20, 50)
    summary = catalog.load_table("eo_adbc.lines").current_snapshot().summary
    assert summary["skade.writer-id"] == "adbc-loader"
    assert summary["skade.writer-last-sequence"] == "2"
