"""What a newcomer and an operator meet first, checked against the real ``skade`` binary.

* The README's first screen: its one complete example (a pyarrow put, read back with
  pyiceberg through the REST catalog) runs as written against a fresh server, and the
  ``decode_commit_ack`` snippet of ``docs/writing.md`` decodes the acks of a real put.
* DuckDB reads a table through skade's REST catalog with the SQL of ``docs/reading.md``
  (the extensions from PyPI's ``duckdb-ext-*`` instead of ``INSTALL``).
* A client process killed mid-put: the server logs it at ``info`` as ``client left``
  and counts it under ``skade_ingest_errors_total{code="Cancelled"}`` -- no ``WARN``,
  no ``Unknown``.
* Operators' kit: a real Prometheus server (Debian's ``prometheus``; ``tests/run.sh``
  installs it) on a free loopback port scrapes skade during puts with the rules of
  ``deploy/prometheus/skade-rules.yaml``, and the commit rate is read back through its
  HTTP query API; every expression of ``deploy/grafana/skade-dashboard.json`` evaluates.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import REPO_ROOT, free_tcp_ports, launch_skade, wait_for

README = REPO_ROOT / "README.md"
WRITING = REPO_ROOT / "docs" / "writing.md"
READING = REPO_ROOT / "docs" / "reading.md"
RULES = REPO_ROOT / "deploy" / "prometheus" / "skade-rules.yaml"
DASHBOARD = REPO_ROOT / "deploy" / "grafana" / "skade-dashboard.json"

# Loopback only: never route through an http(s)_proxy from the environment.
NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def python_blocks(markdown: str) -> list[str]:
    """The ```python fenced blocks of ``markdown``, in order."""
    return re.findall(r"^```python\n(.*?)^```", markdown, flags=re.S | re.M)


def http_text(url: str) -> str:
    with NO_PROXY.open(url, timeout=10) as resp:
        return resp.read().decode()


def metric_value(body: str, name: str) -> float:
    """The value of the sample line ``name value`` (``name`` with its labels) in ``body``."""
    for line in body.splitlines():
        key, _, value = line.rpartition(" ")
        if key == name:
            return float(value)
    return 0.0


def put_table(uri: str, path: tuple[str, ...], table: pa.Table) -> list[bytes]:
    """One DoPut of ``table`` to ``path``; returns every ack's ``app_metadata``."""
    client = flight.FlightClient(uri)
    writer, reader = client.do_put(flight.FlightDescriptor.for_path(*path), table.schema)
    writer.write_table(table)
    writer.done_writing()
    acks = []
    while (ack := reader.read()) is not None:
        acks.append(ack.to_pybytes())
    writer.close()
    return acks


@pytest.fixture
def fresh_server(tmp_path):
    """A server of its own (empty catalog), so the README's example sees exactly its rows."""
    yield from launch_skade(tmp_path)


# Catches: a first-screen example that does not run as written (a missing import, a
# wrong address, a read-back step that needs something the first screen does not say).
def test_readme_first_screen_example_writes_and_reads_back(fresh_server, tmp_path):
    readme = README.read_text()
    first = python_blocks(readme)[0]
    first_screen = readme[: readme.index("## ", readme.index("\n") + 1)]
    assert first in first_screen, "the complete example must be on the first screen"
    # The command that runs the server comes before anything about the test suite, whose
    # prerequisites follow the example (the reader met them first).
    serve = first_screen.index("cargo run --release -- serve")
    assert serve < first_screen.index("tests/run.sh"), "tests/run.sh before the first command"
    assert first_screen.index(first) < first_screen.index("promtool"), "test prerequisites first"
    assert "grpc://127.0.0.1:50051" in first and "http://127.0.0.1:9464" in first
    script = first.replace("grpc://127.0.0.1:50051", fresh_server.flight_uri).replace(
        "http://127.0.0.1:9464", fresh_server.metrics_url
    )
    path = tmp_path / "first_table.py"
    path.write_text(script)
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    done = subprocess.run(
        [sys.executable, str(path)], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert done.returncode == 0, done.stderr
    assert "id: [[1,2,3]]" in done.stdout, done.stdout
    assert 'name: [["a","b",null]]' in done.stdout, done.stdout


# Catches: a documented decoder (docs/writing.md) that misreads a field (e.g. the signed
# snapshot id, or the `final` flag) of the acks a real put returns.
def test_docs_commit_ack_decoder_decodes_real_acks(skade_server):
    [snippet] = [b for b in python_blocks(WRITING.read_text()) if "def decode_commit_ack" in b]
    namespace: dict = {}
    exec(compile(snippet, "docs/writing.md:decode_commit_ack", "exec"), namespace)  # noqa: S102
    decode = namespace["decode_commit_ack"]

    table = pa.table({"id": list(range(10))})
    acks = [decode(a) for a in put_table(skade_server.flight_uri, ("readme", "acks"), table)]
    client = flight.FlightClient(skade_server.flight_uri)
    assert acks, "no acks"
    last = acks[-1]
    assert last["final"] is True and all(not a["final"] for a in acks[:-1]), acks
    assert last["table"] == "readme.acks"
    assert last["committed_rows"] == 10 and last["commits"] == 1, last
    assert last["committed_data_files"] == 1, last
    info = client.get_flight_info(flight.FlightDescriptor.for_path("readme", "acks"))
    snapshot = json.loads(Path(info.app_metadata.decode()).read_text())["current-snapshot-id"]
    assert last["snapshot_id"] == snapshot, (last, snapshot)


# Catches: a DuckDB example (docs/reading.md) that does not work as written (a missing
# LOAD, a wrong ATTACH option, a catalog answer DuckDB cannot read).
def test_docs_duckdb_example_reads_the_table(fresh_server):
    import duckdb
    import duckdb_ext

    [sql] = re.findall(r"^  ```sql\n(.*?)^  ```", READING.read_text(), flags=re.S | re.M)
    statements = [line.strip() for line in sql.splitlines() if line.strip()]
    assert statements[0].startswith("INSTALL iceberg"), statements
    assert "LOAD iceberg;" in statements, statements

    table = pa.table({"id": [1, 2, 3], "name": ["a", "b", None]})
    put_table(fresh_server.flight_uri, ("demo", "people"), table)

    con = duckdb.connect()
    extensions = Path(list(duckdb_ext.__path__)[0]) / "extensions"
    con.execute("SET extension_directory = ?", [str(extensions)])
    con.execute("SET autoinstall_known_extensions = false")
    rows = None
    for statement in statements[1:]:
        result = con.execute(statement.replace("http://127.0.0.1:9464", fresh_server.metrics_url))
        if statement.upper().startswith("SELECT"):
            rows = result.fetchall()
    assert rows == [(1, "a"), (2, "b"), (3, None)], rows


KILLED_CLIENT = """
import sys, time
import pyarrow as pa, pyarrow.flight as flight
client = flight.FlightClient(sys.argv[1])
table = pa.table({"id": list(range(100))})
writer, reader = client.do_put(flight.FlightDescriptor.for_path("killed", "t"), table.schema)
writer.write_table(table)
reader.read()                     # the first commit (--commit-interval 100ms) is acked
print("acked", flush=True)
while True:
    writer.write_table(table)
    time.sleep(0.05)
"""


@pytest.fixture
def short_interval_server(tmp_path):
    yield from launch_skade(tmp_path, ["--commit-interval", "100ms"])


# Catches: a killed client logged `WARN request failed code=Unknown` with a hyper Debug
# dump and counted as skade_ingest_errors_total{code="Unknown"}.
def test_a_client_killed_mid_put_is_info_and_cancelled(short_interval_server, tmp_path):
    server = short_interval_server
    script = tmp_path / "client.py"
    script.write_text(KILLED_CLIENT)
    client = subprocess.Popen(
        [sys.executable, str(script), server.flight_uri], stdout=subprocess.PIPE, text=True
    )
    try:
        line = wait_for("the client's first ack", lambda: client.stdout.readline(), timeout_s=60)
        assert line.strip() == "acked", line
        client.send_signal(signal.SIGKILL)
        client.wait(timeout=20)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()

    def counted():
        body = http_text(f"{server.metrics_url}/metrics")
        return metric_value(body, 'skade_ingest_errors_total{code="Cancelled"}') == 1 and body

    body = wait_for("the killed put counted as Cancelled", counted)
    assert 'code="Unknown"' not in body
    log = wait_for("the `client left` event", lambda: "client left" in server.log_path.read_text() and server.log_path.read_text())
    assert " WARN " not in log, log
    assert "Unknown" not in log, log
    [left] = [line for line in log.splitlines() if "client left" in line]
    assert " INFO " in left and 'code="Cancelled"' in left, left
    assert re.search(r"committed_rows=[1-9]", left), left


def prometheus_query(base: str, expr: str) -> dict:
    url = f"{base}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    return json.loads(http_text(url))


# Catches: rules or dashboard expressions that a real Prometheus cannot evaluate against
# what skade exports (a renamed metric, a label mismatch), and a /metrics that Prometheus
# cannot scrape.
def test_prometheus_scrapes_skade_during_puts_and_reads_back_the_commit_rate(skade_server, tmp_path):
    binary = shutil.which("prometheus")
    assert binary, "prometheus is not installed (tests/ops/install-prometheus.sh installs it)"
    [port] = free_tcp_ports(1)
    target = urllib.parse.urlparse(skade_server.metrics_url).netloc
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {RULES}\n"
        f"scrape_configs:\n  - job_name: skade\n    static_configs:\n      - targets: ['{target}']\n"
    )
    log = open(tmp_path / "prometheus.log", "wb")
    prometheus = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    base = f"http://127.0.0.1:{port}"
    stop = threading.Event()

    def put_until_stopped():
        table = pa.table({"id": list(range(100))})
        while not stop.is_set():
            put_table(skade_server.flight_uri, ("prom", "t"), table)
            time.sleep(0.1)

    putter = threading.Thread(target=put_until_stopped, daemon=True)
    try:

        def ready():
            if prometheus.poll() is not None:
                pytest.fail(f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()}")
            try:
                return http_text(f"{base}/-/ready")
            except OSError:
                return None

        wait_for("prometheus /-/ready", ready)
        putter.start()

        def positive(expr):
            def check():
                got = prometheus_query(base, expr)
                assert got["status"] == "success", got
                values = [float(r["value"][1]) for r in got["data"]["result"]]
                return values and all(v > 0 for v in values) and got["data"]["result"]

            return check

        [raw] = wait_for("a commit rate", positive('rate(skade_catalog_commits_total{job="skade"}[10s])'))
        assert raw["metric"]["instance"] == target, raw
        [recorded] = wait_for("the recorded commit rate", positive("skade:catalog_commits:rate5m"))
        assert recorded["metric"]["job"] == "skade", recorded
        wait_for("rows committed per second", positive("skade:rows_committed:rate5m"))
        [ready_now] = prometheus_query(base, "skade_ready")["data"]["result"]
        assert ready_now["value"][1] == "1", ready_now

        # Every dashboard expression evaluates (with $instance selecting everything).
        dashboard = json.loads(DASHBOARD.read_text())
        exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
        assert exprs
        for expr in exprs:
            got = prometheus_query(base, expr.replace("$instance", ".*"))
            assert got["status"] == "success", (expr, got)

        # The alert rules are loaded and evaluate without error.
        rules = json.loads(http_text(f"{base}/api/v1/rules"))["data"]["groups"]
        alerts = [r for g in rules for r in g["rules"] if r["type"] == "alerting"]
        assert {a["name"] for a in alerts} >= {"SkadeCommitsStalled", "SkadeNotReady"}
        assert all(r.get("health") != "err" for g in rules for r in g["rules"]), rules
    finally:
        stop.set()
        if putter.is_alive():
            putter.join(timeout=30)
        prometheus.terminate()
        try:
            prometheus.wait(timeout=20)
        except subprocess.TimeoutExpired:
            prometheus.kill()
            prometheus.wait()
        log.close()
