"""Interop: Java clients against a real ``skade serve``.

* Arrow Flight's Java client (``org.apache.arrow:flight-core``): the Java producer of
  ``docs/exactly-once.md``, ``examples/java/.../ExactlyOncePut.java`` (built by ``jvm`` from
  tests/java/pom.xml and run as is), puts with a writer id and a sequence per batch,
  reads the acks, resumes from ``skade.v1.WriterMarks`` and reads the table back with
  ``DoGet``: every row lands once, a rerun writes nothing.
* The Flight SQL JDBC driver (``org.apache.arrow:flight-sql-jdbc-driver``): it connects,
  reads skade's ``GetSqlInfo`` and its catalogs, namespaces, tables, columns and primary
  keys through ``DatabaseMetaData``, and runs a ``SELECT`` (plain and prepared); it
  cannot ingest, because its only write path is SQL (a prepared ``INSERT``), which
  skade's read-only SQL refuses (the driver has no bulk ingest: arrow-java issue 931).
  The test pins all of it, and that the refused inserts create nothing.
* The Java excerpt of ``docs/exactly-once.md`` is a verbatim part of the file the tests run.
"""

from __future__ import annotations

import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from pyiceberg.catalog import load_catalog
from pyiceberg.exceptions import NoSuchNamespaceError

from clients import REPO_ROOT, java_command

EXAMPLE = REPO_ROOT / "examples" / "java" / "src" / "main" / "java" / "skade" / "examples" / "ExactlyOncePut.java"
EXACTLY_ONCE = REPO_ROOT / "docs" / "exactly-once.md"
TRANSACTIONS = REPO_ROOT / "docs" / "transactions.md"


def run(cmd: list[str], timeout_s: float = 180) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, f"{cmd[-6:]} exited {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done.stdout


def acks(output: str) -> list[dict[str, str]]:
    """The ``ack {k=v, ...}`` lines the example prints, as dicts."""
    return [
        dict(kv.split("=", 1) for kv in line[len("ack {") : -1].split(", "))
        for line in output.splitlines()
        if line.startswith("ack {")
    ]


def doc_excerpts(guide: Path, language: str) -> list[str]:
    """Every ``language`` code block of ``guide``."""
    return re.findall(r"```" + language + r"\n(.*?)```", guide.read_text(), re.S)


def marked_region(path: Path, marker: str) -> str:
    """The lines of ``path`` between ``// <marker>:begin`` and ``// <marker>:end``,
    dedented, without leading or trailing blank lines: what the guides show."""
    text = path.read_text()
    block = re.split(r"\n[ \t]*// " + marker + r":end\n", re.split(r"// " + marker + r":begin\n", text, maxsplit=1)[1])[0]
    return textwrap.dedent(block).strip("\n") + "\n"


def test_documented_java_excerpt_is_the_file_the_test_runs():
    """Catches the Java snippet of docs/exactly-once.md drifting from the code that runs."""
    assert marked_region(EXAMPLE, "exactly-once") in doc_excerpts(EXACTLY_ONCE, "java"), (
        "docs/exactly-once.md shows no Java block equal to ExactlyOncePut.java's exactly-once part"
    )


def test_java_flight_client_puts_exactly_once_and_reads_back(jvm, skade_server):
    """Catches a stock Java Flight client that cannot send skade's writer id and sequences
    (headers, app_metadata), read its acks, or resume: rows lost, doubled, or a rerun
    that writes again."""
    table, writer, rows = "java_eo.events", "java-loader", 500

    def put(batches: int) -> str:
        return run(java_command(jvm, "examples", "skade.examples.ExactlyOncePut",
                                skade_server.flight_uri, writer, table, str(batches), str(rows)))

    first = put(4)
    got = acks(first)
    assert got and got[-1]["final"] == "true", first
    assert got[-1]["committed_sequence"] == "4" and got[-1]["committed_rows"] == str(4 * rows), got[-1]
    assert f"doget rows={4 * rows} id_sum={sum(range(4 * rows))}" in first

    second = put(10)  # resumes at batch 5
    got = acks(second)
    assert got[-1]["committed_sequence"] == "10" and got[-1]["committed_rows"] == str(6 * rows), got[-1]
    assert f"doget rows={10 * rows} id_sum={sum(range(10 * rows))}" in second

    third = put(10)  # everything is committed: no put at all
    assert acks(third) == [], third
    assert f"doget rows={10 * rows} id_sum={sum(range(10 * rows))}" in third

    loaded = load_catalog("java", type="rest", uri=skade_server.metrics_url).load_table(table)
    data = loaded.scan().to_arrow().sort_by("id")
    assert data.column("id").to_pylist() == list(range(10 * rows))
    assert data.column("note").to_pylist() == [f"row-{i}" for i in range(10 * rows)]
    summary = loaded.current_snapshot().summary
    assert summary["skade.writer-id"] == writer
    assert summary["skade.writer-last-sequence"] == "10"


def test_flight_sql_jdbc_driver_lists_and_reads_but_cannot_ingest(jvm, skade_server):
    """Pins what the JDBC driver does against skade: connects, reads GetSqlInfo
    (supportsTransactions() answers, where it threw a NullPointerException without
    SQL_TRANSACTIONS_SUPPORTED), lists catalogs, namespaces, table types, tables, columns
    and primary keys through DatabaseMetaData, runs a SELECT plainly and prepared with a
    parameter, and its only write path (SQL INSERT) is refused naming INSERT with nothing
    created. Expected values are what the test put. Catches a change on either side
    (then docs/transactions.md's JDBC note needs an update)."""
    import pyarrow as pa
    import pyarrow.flight as flight

    people = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "name": ["a", "b", None]})
    client = flight.FlightClient(skade_server.flight_uri)
    writer, reader = client.do_put(flight.FlightDescriptor.for_path("jdbc_meta", "people"), people.schema)
    writer.write_table(people)
    writer.done_writing()
    while reader.read() is not None:
        pass
    writer.close()
    client.close()

    host, port = skade_server.flight_uri.removeprefix("grpc://").rsplit(":", 1)
    out = run(java_command(jvm, "jdbc-check", "skade.interop.JdbcCheck", host, port, "jdbc_meta"))
    lines = dict(line.split(": ", 1) if ": " in line else (line, "") for line in out.splitlines())
    assert "connected" in lines, out
    assert re.search(r"^product=skade version=\S+$", out, re.M), out
    assert lines.get("transactions") == "true", out
    assert lines.get("catalogs") == "skade", out
    assert lines.get("schemas") == "jdbc_meta", out
    assert lines.get("table-types") == "TABLE", out
    assert lines.get("tables") == "people", out
    assert [c.split(":")[0] for c in lines.get("columns", "").split(",")] == people.column_names, out
    assert lines.get("primary-keys") == "", out
    assert lines.get("query") == "2=b", out
    assert lines.get("prepared-query") == "2", out
    for step in ("prepare-insert", "execute-insert"):
        # The driver turns every write into SQL, which skade's read-only subset refuses
        # by name (Flight SQL bulk ingest is CommandStatementIngest; the driver never
        # sends it: arrow-java issue 931).
        assert "skade's SQL does not support INSERT" in lines.get(step, ""), out
    with pytest.raises(NoSuchNamespaceError):
        load_catalog("jdbc", type="rest", uri=skade_server.metrics_url).list_tables("jdbc")
