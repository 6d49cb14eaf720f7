"""Pytest fixtures for skade's Python interop suite.

The suite talks to a real ``skade serve`` process with the clients users use:
``pyarrow.flight`` for Flight and ``pyiceberg`` for reading the Iceberg tables
skade writes. This file provides the session-scoped ``skade_server`` fixture that
starts the server on free loopback ports with a fresh data dir and stops it
(SIGTERM, then SIGKILL after 20 s) when the session ends.

Run (from the repository root, after ``cargo build``)::

    python3 -m venv .venv
    .venv/bin/pip install -r tests/interop/requirements.txt
    .venv/bin/pytest tests/interop

Warehouses: ``skade_server`` keeps its tables in a local directory, ``skade_s3_server``
in a bucket of moto's S3 server (``moto`` starts it on a free loopback port). A test
module that defines ``skade_server`` as ``any_warehouse_server`` runs on both.

Java, Go and Spark: ``jvm`` builds the Maven modules of tests/java/pom.xml once per session
(``clients.build_jvm``: each module's classpath), ``go_clients`` the Go commands of
examples/go (``clients.build_go``), and ``spark`` is the one PySpark session every Spark
test shares, started with the settings of docs/reading.md (its ``pyspark --packages ...
--conf ...`` command between ``<!-- spark:begin -->`` and ``<!-- spark:end -->``) and the jars of
tests/java/spark-jars. ``test_iceberg_java.py``'s check of every file the session wrote
runs last (``pytest_collection_modifyitems``).

PostgreSQL: the session-scoped ``postgres`` fixture is one private cluster
(``pg.PostgresCluster``, tests/pg/cluster.sh) for the whole session, and
``postgres_database()`` makes a fresh database in it per caller (one catalog database per
skade server). PostgreSQL comes from tests/pg/install-postgres.sh.

Environment:

* ``SKADE_BIN`` -- the skade binary to test (default ``$CARGO_TARGET_DIR/debug/skade``,
  ``<repo>/target/debug/skade`` when ``CARGO_TARGET_DIR`` is unset).

The server's stdout/stderr go to ``skade.log`` in the session's pytest temp dir
(``pytest --basetemp DIR`` to choose where); its tail is shown when the server
fails to start or does not exit cleanly.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator

import pytest

import clients
from pg import PostgresCluster, PostgresDatabase, PostgresError, new_cluster_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = Path(os.environ.get("CARGO_TARGET_DIR") or REPO_ROOT / "target") / "debug" / "skade"


def wait_for(what: str, check: Callable[[], object], timeout_s: float = 60.0, every_s: float = 0.2):
    """Polls ``check()`` until it returns something truthy and returns that; fails the
    test (naming ``what``) after ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout_s:.0f} s waiting for {what}", pytrace=False)
        time.sleep(every_s)

HEALTH_TIMEOUT_S = 60.0
TERM_TIMEOUT_S = 20.0
LOG_TAIL_LINES = 60


@dataclasses.dataclass(frozen=True)
class SkadeServer:
    """A running ``skade serve`` process, as seen by the tests."""

    flight_uri: str
    """``grpc://127.0.0.1:<port>``, for ``pyarrow.flight.FlightClient``."""
    metrics_url: str
    """``http://127.0.0.1:<port>`` (serves ``/healthz``, ``/metrics``, Iceberg REST);
    ``https://localhost:<port>`` when the server runs with ``--tls-cert``."""
    data_dir: Path
    """The server's ``--data-dir`` (holds ``catalog.redb`` and ``warehouse/``)."""
    log_path: Path
    """Where the server's stdout and stderr go."""
    process: subprocess.Popen
    token: str | None = None
    """The bearer token when the server runs with ``--auth-token-file``."""
    token_file: Path | None = None
    """That token file (rewrite it and send SIGHUP to change the tokens)."""
    tls_root_certs: bytes | None = None
    """The PEM certificate to trust when the server runs with ``--tls-cert``."""
    s3: S3Warehouse | None = None
    """The bucket and prefix when the server's warehouse is on S3."""
    catalog_database: "PostgresDatabase | None" = None
    """The PostgreSQL database when the server runs with ``--catalog postgres://...``
    (else its catalog is ``catalog.redb`` in the data dir)."""

    @property
    def warehouse(self) -> Path:
        """The local warehouse directory (a server whose warehouse is on S3 has none)."""
        assert self.s3 is None, "this server's warehouse is on S3: use warehouse_files()"
        return self.data_dir / "warehouse"

    def warehouse_location(self, *parts: str) -> str:
        """``<warehouse>/<parts...>`` as skade names it: a path or an ``s3://`` URI."""
        if self.s3 is not None:
            return "/".join([f"s3://{S3_BUCKET}/{self.s3.prefix}", *parts])
        return str(self.warehouse.joinpath(*parts))

    def warehouse_files(self, *parts: str) -> set[str]:
        """Every file under ``<warehouse>/<parts...>``, as paths relative to it (``/``
        separated), whichever the storage."""
        if self.s3 is not None:
            prefix = "/".join([self.s3.prefix, *parts]) + "/"
            return {key[len(prefix) :] for key in s3_keys(self.s3.endpoint, prefix)}
        root = self.warehouse.joinpath(*parts)
        if not root.exists():
            return set()
        return {p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file()}

    def file_io_properties(self) -> dict[str, str]:
        """What pyiceberg needs to read this warehouse's files without the REST catalog."""
        if self.s3 is None:
            return {}
        return {
            "s3.endpoint": self.s3.endpoint,
            "s3.region": S3_CREDENTIALS["AWS_REGION"],
            "s3.access-key-id": S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "s3.path-style-access": "true",
        }

    def log_tail(self, lines: int = LOG_TAIL_LINES) -> str:
        return log_tail(self.log_path, lines)


@dataclasses.dataclass(frozen=True)
class S3Warehouse:
    """A server's warehouse on moto's S3: ``s3://S3_BUCKET/<prefix>``."""

    endpoint: str
    prefix: str


S3_BUCKET = "skade-warehouse"
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "skade-test-key",
    "AWS_SECRET_ACCESS_KEY": "skade-test-secret",
    "AWS_REGION": "us-east-1",
}
"""Given to skade, boto3 and ``skade gc`` only, never to this process's environment, so
readers through the REST catalog work only with what it hands them."""


def s3_client(endpoint: str):
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=S3_CREDENTIALS["AWS_REGION"],
    )


def s3_keys(endpoint: str, prefix: str) -> list[str]:
    """Every key of ``S3_BUCKET`` under ``prefix``."""
    pages = s3_client(endpoint).get_paginator("list_objects_v2").paginate(
        Bucket=S3_BUCKET, Prefix=prefix
    )
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def s3_args(endpoint: str, prefix: str) -> list[str]:
    """``skade serve``/``skade gc`` flags for the warehouse ``s3://S3_BUCKET/<prefix>``."""
    return [
        "--warehouse",
        f"s3://{S3_BUCKET}/{prefix}",
        "--s3-endpoint",
        endpoint,
        "--s3-path-style-access",
        "true",
        "--s3-vend-credentials",
        "true",
    ]


def _reachable(url: str) -> bool:
    try:
        with _NO_PROXY_OPENER.open(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError):
        return False


def wait_reachable(proc: subprocess.Popen, url: str, what: str, timeout_s: float = 60.0) -> None:
    """Waits until ``url`` answers at all, failing if ``proc`` exits first."""
    deadline = time.monotonic() + timeout_s
    while not _reachable(url):
        if proc.poll() is not None:
            pytest.fail(f"{what} exited with code {proc.returncode}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not answer at {url} within {timeout_s:.0f}s", pytrace=False)
        time.sleep(0.1)


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        return f"<no log at {path}: {e}>"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else "<log is empty>"


def free_tcp_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports on 127.0.0.1 (bind port 0, read it, close).

    All sockets stay open until every port has been read, so the ports differ.
    There is an unavoidable race between closing here and the server binding.
    """
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


# Loopback only: never route the health check through an http(s)_proxy from the env.
_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _healthz_ok(url: str, root_certs: bytes | None = None) -> bool:
    """Whether ``url`` answers 200 (over HTTPS trusting ``root_certs`` when given)."""
    opener = _NO_PROXY_OPENER
    if root_certs is not None:
        context = ssl.create_default_context(cadata=root_certs.decode())
        opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=context)
        )
    try:
        with opener.open(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def _stop(proc: subprocess.Popen) -> int:
    """SIGTERM, wait up to TERM_TIMEOUT_S, then SIGKILL. Returns the exit code."""
    if proc.poll() is not None:
        return proc.returncode
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=TERM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return proc.returncode


def launch_skade(
    base: Path,
    extra_args: list[str] | None = None,
    env: dict[str, str] | None = None,
    **fields,
) -> Iterator[SkadeServer]:
    """Start ``skade serve`` on free loopback ports with a fresh data dir under ``base``
    (plus ``extra_args``, and ``env`` over this process's environment), wait for
    ``/healthz``, yield it, and stop it with SIGTERM, failing unless it exits 0.
    ``fields`` fill the optional ``SkadeServer`` fields. A second launch on the same
    ``base`` (after the first stopped) restarts on the same data dir, its log appended."""
    binary = Path(os.environ.get("SKADE_BIN", str(DEFAULT_BIN)))
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(
            f"skade binary not found or not executable: {binary} "
            "(build it with `cargo build` or set SKADE_BIN)",
            pytrace=False,
        )

    data_dir = base / "data"
    data_dir.mkdir(exist_ok=True)
    log_path = base / "skade.log"
    flight_port, metrics_port = free_tcp_ports(2)

    cmd = [
        str(binary),
        "serve",
        "--data-dir",
        str(data_dir),
        "--flight-addr",
        f"127.0.0.1:{flight_port}",
        "--metrics-addr",
        f"127.0.0.1:{metrics_port}",
        *(extra_args or []),
    ]
    with open(log_path, "ab") as log:
        log.write(("$ " + " ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=base,
            env={**os.environ, **(env or {})},
        )

    scheme = "grpc+tls" if fields.get("tls_root_certs") else "grpc"
    server = SkadeServer(
        flight_uri=f"{scheme}://{'localhost' if scheme == 'grpc+tls' else '127.0.0.1'}:{flight_port}",
        # With a certificate the HTTP listener speaks only HTTPS (metrics, probes, REST).
        metrics_url=(
            f"https://localhost:{metrics_port}"
            if scheme == "grpc+tls"
            else f"http://127.0.0.1:{metrics_port}"
        ),
        data_dir=data_dir,
        log_path=log_path,
        process=proc,
        **fields,
    )

    health_url = f"{server.metrics_url}/healthz"
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            pytest.fail(
                f"skade exited with code {proc.returncode} before {health_url} "
                f"answered 200; log tail ({log_path}):\n{server.log_tail()}",
                pytrace=False,
            )
        if _healthz_ok(health_url, fields.get("tls_root_certs")):
            break
        if time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(
                f"{health_url} did not answer 200 within {HEALTH_TIMEOUT_S:.0f}s; "
                f"log tail ({log_path}):\n{server.log_tail()}",
                pytrace=False,
            )
        time.sleep(0.1)

    try:
        yield server
    finally:
        rc = _stop(proc)
    # The contract: SIGTERM -> stop accepting, finish in-flight streams, exit 0.
    if rc != 0:
        pytest.fail(
            f"skade did not exit 0 after SIGTERM (exit code {rc}); "
            f"log tail ({log_path}):\n{server.log_tail()}",
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def no_proxy_for_loopback() -> Iterator[None]:
    """pyiceberg's ``requests`` session honours ``http_proxy``; every server here is on
    loopback."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NO_PROXY", "127.0.0.1,localhost")
        mp.setenv("no_proxy", "127.0.0.1,localhost")
        yield


@pytest.fixture(scope="session")
def skade_local_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkadeServer]:
    """Start ``skade serve`` on free loopback ports with a fresh data dir."""
    yield from launch_skade(tmp_path_factory.mktemp("skade"))


@pytest.fixture(scope="session")
def skade_server(skade_local_server: SkadeServer) -> SkadeServer:
    """The shared server, its warehouse on local disk (a module may redefine
    ``skade_server`` as ``any_warehouse_server`` to run on S3 too)."""
    return skade_local_server


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto's S3 server (``moto[server]`` from PyPI) on a free loopback port, with the
    bucket ``S3_BUCKET``; yields its endpoint URL."""
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
        wait_reachable(proc, endpoint, "moto_server")
        s3_client(endpoint).create_bucket(Bucket=S3_BUCKET)
        yield endpoint
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="session")
def skade_s3_server(tmp_path_factory: pytest.TempPathFactory, moto: str) -> Iterator[SkadeServer]:
    """``skade serve`` as ``skade_server``, with its warehouse at
    ``s3://S3_BUCKET/shared`` on moto."""
    yield from launch_skade(
        tmp_path_factory.mktemp("skade-s3"),
        s3_args(moto, "shared"),
        env=S3_CREDENTIALS,
        s3=S3Warehouse(endpoint=moto, prefix="shared"),
    )


@pytest.fixture(scope="session")
def skade_pg_server(
    tmp_path_factory: pytest.TempPathFactory, moto: str, postgres_database
) -> Iterator[SkadeServer]:
    """``skade serve --catalog postgres://...`` with a catalog database of its own in the
    session's PostgreSQL cluster and its warehouse at ``s3://S3_BUCKET/pg`` on moto: the
    shape several instances share (``docs/several-instances.md``)."""
    database = postgres_database("interop")
    yield from launch_skade(
        tmp_path_factory.mktemp("skade-pg"),
        [*s3_args(moto, "pg"), "--catalog", database.url],
        env=S3_CREDENTIALS,
        s3=S3Warehouse(endpoint=moto, prefix="pg"),
        catalog_database=database,
    )


WAREHOUSES = ["local", "s3", "postgres"]
"""``local`` and ``s3``: the embedded redb catalog with the warehouse on local disk or
on S3; ``postgres``: a PostgreSQL catalog with the warehouse on S3."""


@pytest.fixture(scope="session", params=WAREHOUSES)
def any_warehouse_server(request: pytest.FixtureRequest) -> SkadeServer:
    """``skade_server``, ``skade_s3_server`` and ``skade_pg_server`` in turn: a test using
    it runs on a local warehouse, on S3, and on S3 with a PostgreSQL catalog (ids
    ``[local]``, ``[s3]``, ``[postgres]``)."""
    return request.getfixturevalue(
        {"local": "skade_local_server", "s3": "skade_s3_server", "postgres": "skade_pg_server"}[
            request.param
        ]
    )


AUTH_TOKEN = "interop-token-3c9e1f"
"""The token of ``skade_auth_server``'s token file."""


@pytest.fixture(scope="session")
def skade_auth_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkadeServer]:
    """A second server with ``--auth-token-file`` (holding ``AUTH_TOKEN``) and
    ``RUST_LOG=debug`` -- so the tests can check that no token reaches its log."""
    base = tmp_path_factory.mktemp("skade-auth")
    token_file = base / "tokens"
    token_file.write_text(f"# interop\n{AUTH_TOKEN}\n")
    yield from launch_skade(
        base,
        ["--auth-token-file", str(token_file)],
        env={"RUST_LOG": "debug"},
        token=AUTH_TOKEN,
        token_file=token_file,
    )


def self_signed_certificate(directory: Path) -> tuple[Path, Path, bytes]:
    """A self-signed certificate for ``localhost`` and 127.0.0.1 (P-256, one day),
    written as ``cert.pem`` and ``key.pem`` in ``directory``; returns both paths and
    the certificate's PEM."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert_pem)
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path, cert_pem


@pytest.fixture(scope="session")
def skade_tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SkadeServer]:
    """A server with ``--tls-cert``/``--tls-key`` (a self-signed certificate made here)
    and ``--auth-token-file``; its ``flight_uri`` is ``grpc+tls://localhost:<port>``."""
    base = tmp_path_factory.mktemp("skade-tls")
    cert_path, key_path, cert_pem = self_signed_certificate(base)
    token_file = base / "tokens"
    token_file.write_text(f"{AUTH_TOKEN}\n")
    yield from launch_skade(
        base,
        [
            "--tls-cert",
            str(cert_path),
            "--tls-key",
            str(key_path),
            "--auth-token-file",
            str(token_file),
        ],
        token=AUTH_TOKEN,
        token_file=token_file,
        tls_root_certs=cert_pem,
    )


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """One private PostgreSQL cluster for the session (tests/pg/cluster.sh) in a fresh
    directory under /tmp (reachable by the OS user ``postgres`` when running as root),
    with its database ``skade``; stopped and deleted at the end of the session, also when
    the session is interrupted (Ctrl-C runs this teardown; a pytest that is killed
    outright leaves cluster.sh's watcher, which stops the server once pytest is gone).
    Fails, naming tests/pg/install-postgres.sh, when PostgreSQL is missing."""
    cluster = PostgresCluster(new_cluster_dir())
    try:
        cluster.start()
    except PostgresError as e:
        shutil.rmtree(cluster.directory, ignore_errors=True)
        pytest.fail(str(e), pytrace=False)
    try:
        yield cluster
    finally:
        cluster.remove()


@pytest.fixture(scope="session")
def postgres_database(postgres: PostgresCluster) -> Callable[..., PostgresDatabase]:
    """A factory: ``postgres_database(prefix="catalog")`` creates a fresh database
    ``<prefix>_<n>`` in the session's cluster and returns it (``.url`` for ``skade serve
    --catalog``, ``.sqlalchemy_url`` for pyiceberg's ``SqlCatalog``), so each skade server
    gets a catalog database of its own."""
    counter = itertools.count(1)

    def create(prefix: str = "catalog") -> PostgresDatabase:
        return postgres.create_database(f"{prefix}_{next(counter)}")

    return create


# --------------------------------------------------------------------------- Java, Go, Spark

RUNS_LAST = "test_iceberg_java.py::test_iceberg_java_parses_every_file_the_suite_wrote"


def pytest_collection_modifyitems(session, config, items):
    """Iceberg Java's check of every metadata file the session wrote runs after every
    other test, so it sees all of them."""
    last = [item for item in items if item.nodeid.endswith(RUNS_LAST)]
    items[:] = [item for item in items if item not in last] + last


@pytest.fixture(scope="session")
def jvm() -> dict[str, list[str]]:
    """The JVM modules of tests/java/pom.xml, built; module name → runtime classpath."""
    return clients.build_jvm()


@pytest.fixture(scope="session")
def go_clients(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The Go commands of examples/go/cmd, built; name → binary."""
    return clients.build_go(tmp_path_factory.mktemp("go-bin"))


READING_GUIDE = REPO_ROOT / "docs" / "reading.md"


def documented_spark_command() -> tuple[list[str], dict[str, str]]:
    """The Spark command of docs/reading.md (between ``<!-- spark:begin -->`` and
    ``<!-- spark:end -->``): its ``--packages`` Maven coordinates and its ``--conf``
    settings, in order."""
    block = READING_GUIDE.read_text().split("<!-- spark:begin -->", 1)[1].split("<!-- spark:end -->", 1)[0]
    words = block.replace("\\\n", " ").split()
    packages: list[str] = []
    confs: dict[str, str] = {}
    for flag, value in zip(words, words[1:]):
        if flag == "--packages":
            packages = value.split(",")
        elif flag == "--conf":
            key, _, setting = value.partition("=")
            confs[key] = setting
    assert packages and confs, f"no --packages/--conf in docs/reading.md's Spark block:{block}"
    return packages, confs


@pytest.fixture(scope="session")
def spark(jvm, tmp_path_factory: pytest.TempPathFactory):
    """One local PySpark session (2 cores) for every Spark test, with the settings of
    docs/reading.md but its catalogs (``spark_catalog`` in test_spark.py points a
    catalog at a server) and the jars of tests/java/spark-jars, which must be that
    command's ``--packages``."""
    import pyspark
    from pyspark.sql import SparkSession

    packages, confs = documented_spark_command()
    jars = jvm["spark-jars"]
    spark_line = ".".join(pyspark.__version__.split(".")[:2])
    assert any(f"iceberg-spark-runtime-{spark_line}_" in p for p in packages), (
        f"PySpark {pyspark.__version__} needs Iceberg's runtime for Spark {spark_line}: {packages}"
    )
    assert sorted(f"{p.split(':')[1]}-{p.split(':')[2]}.jar" for p in packages) == sorted(
        Path(j).name for j in jars
    ), f"docs/reading.md's --packages {packages} are not the jars tests/java/spark-jars fetches: {jars}"
    work = tmp_path_factory.mktemp("spark")
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"  # the driver binds loopback only
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("skade-interop")
        .config("spark.jars", ",".join(jars))
        .config("spark.driver.host", "127.0.0.1")  # loopback only
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(work))
        .config("spark.sql.warehouse.dir", str(work / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work}")
    )
    for key, value in confs.items():
        if not key.startswith("spark.sql.catalog."):
            builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
    finally:
        session.stop()
