"""Interop: Go clients against a real ``skade serve``.

* Arrow Flight's Go client (``github.com/apache/arrow-go/v18/arrow/flight``): the Go
  producer of ``docs/exactly-once.md``, ``examples/go/exactlyonce`` (run by ``examples/go/cmd/produce``), puts with
  a writer id and a sequence per batch into a server that commits one small file at a
  time; the server is SIGKILLed while the producer holds mid-stream (after 30 of 60
  batches, waiting on its standard input) and started again on the same ports; the
  producer then fails, retries, resumes from ``skade.v1.WriterMarks`` and reads the table
  back with ``DoGet``. Every row lands exactly once; a rerun writes nothing.
* The ADBC Flight SQL driver for Go (``github.com/apache/arrow-adbc/go/adbc/driver/flightsql``),
  used directly from Go (``examples/go/transaction``, run by ``cmd/transaction``): two
  tables in one transaction are one catalog commit, a rollback leaves nothing, and the
  transaction's writer id and sequence make a retry land once.
* The Go excerpts of ``docs/exactly-once.md`` and ``docs/transactions.md`` are verbatim
  parts of the files the tests build.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError

from clients import GO_ROOT
from conftest import wait_for
from test_adbc import metric
from test_exactly_once import Server, committed
from test_java import EXACTLY_ONCE, TRANSACTIONS, doc_excerpts, marked_region

BATCHES, ROWS, HOLD_AFTER = 60, 50, 30


def test_documented_go_excerpts_are_the_files_the_test_builds():
    """Catches the Go snippets of the guides drifting from the code that runs."""
    for guide, path, marker in [(EXACTLY_ONCE, GO_ROOT / "exactlyonce" / "produce.go", "exactly-once"),
                                (TRANSACTIONS, GO_ROOT / "transaction" / "transaction.go", "transaction")]:
        assert marked_region(path, marker) in doc_excerpts(guide, "go"), (
            f"{guide.name} shows no Go block equal to {path.name}'s {marker} part"
        )


def test_go_flight_client_resumes_exactly_once_after_a_server_restart(go_clients, tmp_path):
    """Catches rows lost or doubled when a Go producer's server dies mid-stream, and a
    rerun that writes again."""
    server = Server(tmp_path)
    server.start()
    cmd = [str(go_clients["produce"]), "-uri", server.uri, "-writer", "go-loader", "-table", "go_eo.events",
           "-batches", str(BATCHES), "-rows", str(ROWS)]
    producer = subprocess.Popen([*cmd, "-hold-after", str(HOLD_AFTER)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert producer.stdout.readline().strip() == f"holding before batch {HOLD_AFTER + 1}"
        before_kill = wait_for("a commit of the Go producer", lambda: committed(server.uri, "go-loader"))
        assert before_kill <= HOLD_AFTER
        server.kill()
        server.start()
        producer.stdin.write("go on\n")
        producer.stdin.close()
        output = producer.stdout.read()
        assert producer.wait(timeout=120) == 0, output
        assert "retrying after" in output, output  # the stream it held did fail
        assert f"doget rows={BATCHES * ROWS} id_sum={sum(range(BATCHES * ROWS))}" in output, output
        assert committed(server.uri, "go-loader") == BATCHES

        catalog = load_catalog("go", type="rest", uri=server.metrics_url)
        snapshots = len(catalog.load_table("go_eo.events").metadata.snapshots)
        rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert rerun.returncode == 0, rerun.stderr
        assert "ack " not in rerun.stderr, rerun.stderr  # nothing left to send: no put
        table = catalog.load_table("go_eo.events")
        assert len(table.metadata.snapshots) == snapshots
        data = table.scan().to_arrow().sort_by("id")
        assert data.column("id").to_pylist() == list(range(BATCHES * ROWS)), "a row is missing or doubled"
        assert data.column("note").to_pylist() == [f"row-{i}" for i in range(BATCHES * ROWS)]
    finally:
        if producer.poll() is None:
            producer.kill()
        server.stop()


def test_go_adbc_driver_writes_two_tables_in_one_transaction(go_clients, skade_server):
    """Catches the Go ADBC driver's transaction not being one commit (a table visible
    without the other, the commit counter moving twice), a rollback that leaves data, and
    a retried transaction landing twice."""
    catalog = load_catalog("go", type="rest", uri=skade_server.metrics_url)
    commits = "skade_catalog_commits_total"

    def transaction(namespace: str, sequence: int, *extra: str) -> str:
        done = subprocess.run(
            [str(go_clients["transaction"]), "-uri", skade_server.flight_uri, "-writer", "go-nightly",
             "-sequence", str(sequence), "-namespace", namespace, "-rows", "100", *extra],
            capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def rows(name: str) -> list[tuple]:
        table = catalog.load_table(("go_scan", name)).scan().to_arrow()
        return sorted(zip(*(table.column(c).to_pylist() for c in table.column_names)))

    hosts = [(i, f"h{i}") for i in range(100)]
    ports = sorted((i, 1000 * k + i) for i in range(100) for k in (1, 2, 3))

    before = metric(skade_server, commits)
    assert transaction("go_scan_rolled_back", 1, "-rollback") == "rolled back"
    assert metric(skade_server, commits) == before
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables("go_scan_rolled_back")

    assert transaction("go_scan", 1) == "committed"
    assert metric(skade_server, commits) == before + 1
    assert (rows("hosts"), rows("ports")) == (hosts, ports)
    for name in ("hosts", "ports"):
        summary = catalog.load_table(("go_scan", name)).current_snapshot().summary
        assert (summary["skade.writer-id"], summary["skade.writer-last-sequence"]) == ("go-nightly", "1")

    assert transaction("go_scan", 1) == "committed"  # the retry: lands nothing
    assert (rows("hosts"), rows("ports")) == (hosts, ports)
    assert transaction("go_scan", 2) == "committed"  # the next one lands
    assert (rows("hosts"), rows("ports")) == (sorted(hosts * 2), sorted(ports * 2))
