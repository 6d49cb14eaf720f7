"""The JVM and Go clients of the interop suite: built once per session from the
repository's sources with Maven and Go, their dependencies fetched from Maven Central and
the Go module proxy into the machine's caches (``~/.m2``, Go's module and build caches),
so later runs build offline and in seconds.

* ``build_jvm()``: ``mvn -B -q -f tests/java/pom.xml package`` (modules
  ``examples/java``, ``tests/java/iceberg-check``, ``tests/java/jdbc-check``,
  ``tests/java/spark-jars``); ``java_command(module, main_class, *args)`` runs one of
  their programs on its module's classpath.
* ``build_go(out_dir)``: ``go build`` of ``examples/go/cmd/...`` into ``out_dir``.

Java is the machine's ``java``/``mvn`` (Java 17, or ``JAVA_HOME``); Go is ``go`` on the
``PATH``. A missing tool fails the test that needs it, naming the tool.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
JAVA_ROOT = REPO_ROOT / "tests" / "java"
JAVA_MODULES = {
    "examples": REPO_ROOT / "examples" / "java",
    "iceberg-check": JAVA_ROOT / "iceberg-check",
    "jdbc-check": JAVA_ROOT / "jdbc-check",
    "spark-jars": JAVA_ROOT / "spark-jars",
}
GO_ROOT = REPO_ROOT / "examples" / "go"

# Arrow Java needs these on Java 17+ (its memory module reads direct buffers' addresses).
JAVA_OPTIONS = ["--add-opens=java.base/java.nio=ALL-UNNAMED", "-Xmx512m"]


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"`{name}` is not on the PATH: the Java/Go interop tests need it", pytrace=False)
    return path


def _run(cmd: list[str], cwd: Path, what: str) -> None:
    done = subprocess.run(cmd, cwd=cwd, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        pytest.fail(
            f"{what} failed ({' '.join(cmd)}, exit {done.returncode}):\n"
            f"{done.stdout[-6000:]}\n{done.stderr[-6000:]}",
            pytrace=False,
        )


def build_jvm() -> dict[str, list[str]]:
    """Builds every JVM module; returns each module's runtime classpath (its classes
    first, then its dependencies' jars in ``~/.m2``)."""
    _run([_tool("mvn"), "-B", "-q", "-f", str(JAVA_ROOT / "pom.xml"), "package"], REPO_ROOT, "Maven build")
    classpaths = {}
    for name, module in JAVA_MODULES.items():
        jars = (module / "target" / "classpath.txt").read_text().strip()
        entries = [str(module / "target" / "classes")] if (module / "target" / "classes").is_dir() else []
        classpaths[name] = entries + [j for j in jars.split(os.pathsep) if j]
    return classpaths


def java_command(classpaths: dict[str, list[str]], module: str, main_class: str, *args: str) -> list[str]:
    return [_tool("java"), *JAVA_OPTIONS, "-cp", os.pathsep.join(classpaths[module]), main_class, *args]


def build_go(out_dir: Path) -> dict[str, Path]:
    """``go build`` of every command under ``examples/go/cmd``; returns name → binary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _run([_tool("go"), "build", "-o", str(out_dir) + os.sep, "./cmd/..."], GO_ROOT, "go build")
    binaries = {p.name: out_dir / p.name for p in (GO_ROOT / "cmd").iterdir() if p.is_dir()}
    missing = [str(b) for b in binaries.values() if not b.is_file()]
    assert not missing, f"go build made no {missing}"
    return binaries
