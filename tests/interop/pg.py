"""A private PostgreSQL cluster for the interop tests, driven through tests/pg/cluster.sh.

``PostgresCluster(directory)`` wraps one cluster in ``directory`` (``initdb`` there on the
first ``start()``): the server listens on 127.0.0.1 on a free port with trust
authentication for the superuser ``postgres``, and has a database ``skade``. As root,
PostgreSQL runs as the OS user ``postgres``, so ``directory`` must be reachable by it:
``new_cluster_dir()`` makes one directly under the system temp dir (pytest's own
``tmp_path`` is in a 0700 directory of root's and is not).

PostgreSQL itself comes from tests/pg/install-postgres.sh (tests/run.sh runs it).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SH = REPO_ROOT / "tests" / "pg" / "cluster.sh"
INSTALL_SH = REPO_ROOT / "tests" / "pg" / "install-postgres.sh"

SUPERUSER = "postgres"
DEFAULT_DATABASE = "skade"

# psql's unaligned output with separators that no catalog value holds: ASCII unit and
# record separators between fields and rows, and a NUL-free marker for SQL NULL.
_FIELD_SEP = "\x1f"
_RECORD_SEP = "\x1e"
_NULL = "\x01NULL\x01"

# A cluster's commands are quick (start: initdb ~1-2 s plus the server); a hung one fails.
_COMMAND_TIMEOUT_S = 120


class PostgresError(RuntimeError):
    """A cluster.sh or psql command failed; the message holds its stderr."""


@dataclasses.dataclass(frozen=True)
class PostgresDatabase:
    """One database of a ``PostgresCluster``."""

    name: str
    url: str
    """``postgres://postgres@127.0.0.1:<port>/<name>``: the form ``skade serve --catalog``
    takes."""
    sqlalchemy_url: str
    """``postgresql+psycopg://postgres@127.0.0.1:<port>/<name>``: the ``uri`` for
    pyiceberg's ``SqlCatalog``."""


def new_cluster_dir(prefix: str = "skade-pg-") -> Path:
    """A fresh empty directory directly under the system temp dir (``/tmp``), where the OS
    user ``postgres`` can reach it when the tests run as root."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir=tempfile.gettempdir()))


class PostgresCluster:
    """One private cluster in ``directory`` (see the module doc).

    ``owner_pid``: when given (the default: this process), ``start()`` leaves a watcher
    that stops the cluster once that process is gone, so a killed test run leaves no
    server behind. Every method raises ``PostgresError`` when its command fails.
    """

    def __init__(self, directory: Path, owner_pid: int | None = None):
        self.directory = Path(directory)
        self.owner_pid = os.getpid() if owner_pid is None else owner_pid

    def _run(self, *args: str) -> str:
        if not CLUSTER_SH.is_file():
            raise PostgresError(f"{CLUSTER_SH} missing")
        env = {**os.environ, "PG_CLUSTER_OWNER": str(self.owner_pid)}
        proc = subprocess.run(
            [str(CLUSTER_SH), args[0], str(self.directory), *args[1:]],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            timeout=_COMMAND_TIMEOUT_S,
        )
        if proc.returncode != 0:
            raise PostgresError(
                f"tests/pg/cluster.sh {args[0]} {self.directory} failed (exit {proc.returncode}): "
                f"{proc.stderr.strip()} (is PostgreSQL installed? run {INSTALL_SH})"
            )
        return proc.stdout

    @property
    def port(self) -> int:
        """The server's TCP port on 127.0.0.1 (from ``<directory>/port``)."""
        return int((self.directory / "port").read_text().strip())

    @property
    def url(self) -> str:
        """``postgres://postgres@127.0.0.1:<port>/skade``: the form ``skade serve
        --catalog`` takes."""
        return self.database_url(DEFAULT_DATABASE)

    def database_url(self, database: str) -> str:
        """``postgres://postgres@127.0.0.1:<port>/<database>``."""
        return f"postgres://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def sqlalchemy_url(self, database: str = DEFAULT_DATABASE) -> str:
        """``postgresql+psycopg://postgres@127.0.0.1:<port>/<database>``: the ``uri`` for
        pyiceberg's ``SqlCatalog`` (SQLAlchemy with psycopg 3)."""
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def start(self) -> str:
        """Starts the server (``initdb`` first when ``directory`` holds no cluster yet) on a
        free port; returns ``url``. Nothing to do but return it when already running."""
        return self._run("start").strip()

    def stop(self, mode: str = "fast") -> None:
        """``pg_ctl stop -m <mode>``: ``fast`` (clean shutdown) or ``immediate`` (a crash:
        the next start runs crash recovery). Nothing to do when not running."""
        self._run("stop", mode)

    def restart(self) -> str:
        """Stops the server (fast) when running and starts it again on the same port with
        the same data; returns ``url``."""
        return self._run("restart").strip()

    def psql(self, *args: str, database: str = DEFAULT_DATABASE) -> str:
        """Runs ``psql`` with ``args`` on ``database`` (ON_ERROR_STOP, no psqlrc); returns
        its stdout."""
        return self._run("psql", "-d", database, *args)

    def execute(self, sql: str, database: str = DEFAULT_DATABASE) -> list[tuple[str | None, ...]]:
        """Runs ``sql`` through ``psql -c`` on ``database`` (several statements in it run as
        one implicit transaction, PostgreSQL's simple query protocol) and returns the rows
        of its last statement, every value as psql prints it (text) or ``None``
        for SQL NULL; ``[]`` for a statement that returns no rows."""
        out = self.psql(
            "--no-align",
            "--tuples-only",
            "--field-separator",
            _FIELD_SEP,
            "--record-separator",
            _RECORD_SEP,
            "--pset",
            f"null={_NULL}",
            "-c",
            sql,
            database=database,
        )
        # psql ends the last record with a newline, not the record separator.
        out = out.removesuffix("\n")
        if out == "":
            return []
        return [
            tuple(None if value == _NULL else value for value in record.split(_FIELD_SEP))
            for record in out.split(_RECORD_SEP)
        ]

    def create_database(self, name: str) -> PostgresDatabase:
        """``CREATE DATABASE <name>`` (``name``: ASCII lower-case letters, digits and ``_``,
        so it needs no quoting); returns it."""
        if not name or not all(c in "abcdefghijklmnopqrstuvwxyz0123456789_" for c in name):
            raise ValueError(f"database name must be a-z, 0-9 and _: {name!r}")
        self.psql("-c", f"CREATE DATABASE {name}", database="postgres")
        return PostgresDatabase(name, self.database_url(name), self.sqlalchemy_url(name))

    def remove(self) -> None:
        """Stops the server (immediate: nothing in it is kept) and deletes ``directory``."""
        try:
            self.stop("immediate")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)
