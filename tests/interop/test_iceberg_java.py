"""Interop: Iceberg Java (``iceberg-core``, the reference implementation) parses and checks
every metadata file skade wrote in this pytest session.

``tests/java/iceberg-check`` (``org.apache.iceberg.SkadeIcebergCheck``) reads every
``*.metadata.json`` under the given directories with ``TableMetadataParser``, every
manifest list and manifest they reference with Iceberg's own readers, every Puffin file
with ``Puffin``, and checks what the parsers leave to the writer: unique field ids within
``last-column-id``, partition field ids and transforms, snapshot and manifest sequence
numbers (added entries inherit their manifest's; ``min-sequence-number``), v3 row lineage
(``first-row-id``, ``added-rows``, ``next-row-id``, data manifests' ``first_row_id``), the
manifest list's file and row counts and partition summaries against the entries, metrics
only for known field ids, and every data file's partition tuple against its column
bounds through Iceberg's own transforms.

``test_iceberg_java_parses_every_file_the_suite_wrote`` runs after every other test
(``conftest.py``), first writing every table shape (``shapes.py``) on the local and the
S3 warehouse so that it covers them when run alone, then checks the whole session's
temporary directory (every local warehouse of every server the suite started) and a copy
of moto's bucket. Two negative controls show the check fails on a broken table, a third
that it reports a manifest another writer made and Iceberg Java cannot read.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from pathlib import Path

import pytest

from clients import java_command
from conftest import S3_BUCKET, s3_client
from shapes import write_partitioned, write_plain, write_shapes

CHECK = "org.apache.iceberg.SkadeIcebergCheck"
EVERY_TRANSFORM = {"identity", "bucket", "truncate", "year", "month", "day", "hour"}


# What Iceberg Java's reader throws on a delete manifest whose equality_ids (the spec's
# field 135, list<int>) is an Avro array of long, as pyiceberg 0.12 writes it.
# tests/interop/foreign_writer.py writes list<int>; the negative control below writes
# pyiceberg's own.
LONG_EQUALITY_IDS = "ClassCastException: class java.lang.Long cannot be cast to class java.lang.Integer"


def run_check(jvm, *args: str) -> tuple[int, list[str], dict, list[str]]:
    """Runs the check; returns its exit code, its FAIL lines (files skade wrote), its
    summary and its FOREIGN lines (manifests another writer made)."""
    done = subprocess.run(java_command(jvm, "iceberg-check", CHECK, *args),
                          capture_output=True, text=True, timeout=600)
    lines = done.stdout.splitlines()
    summaries = [line for line in lines if line.startswith("summary ")]
    assert summaries, f"no summary (exit {done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    failures = [line for line in lines if line.startswith("FAIL ")]
    foreign = [line for line in lines if line.startswith("FOREIGN ")]
    return done.returncode, failures, json.loads(summaries[-1][len("summary "):]), foreign


def mirror_bucket(endpoint: str, into: Path) -> int:
    """Copies every object of moto's bucket to ``into/<key>``; returns how many."""
    s3 = s3_client(endpoint)
    n = 0
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=S3_BUCKET):
        for obj in page.get("Contents", []):
            target = into / obj["Key"]
            target.parent.mkdir(parents=True, exist_ok=True)
            s3.download_file(S3_BUCKET, obj["Key"], str(target))
            n += 1
    return n


def test_iceberg_java_parses_every_file_the_suite_wrote(jvm, skade_server, skade_s3_server, moto, tmp_path_factory):
    """Catches a metadata JSON, manifest list, manifest or Puffin file that Iceberg's own
    parsers reject, or that breaks a rule of the spec they do not enforce."""
    write_shapes(skade_server, "java_shapes")
    write_plain(skade_s3_server, "java_s3")
    write_partitioned(skade_s3_server, "java_s3", "p_day")
    mirror = tmp_path_factory.mktemp("s3-mirror")
    assert mirror_bucket(moto, mirror) > 0
    base = tmp_path_factory.getbasetemp()

    code, failures, summary, foreign = run_check(jvm, "--map", f"s3://{S3_BUCKET}/={mirror}/", str(base))
    assert failures == [] and code == 0, "\n".join(failures[:50])
    assert foreign == [], "Iceberg Java rejects files another writer of the suite made:\n" + "\n".join(foreign[:20])
    assert summary["metadata_json"] >= 40 and summary["manifest"] >= 40, summary
    assert EVERY_TRANSFORM <= set(summary["transforms"]), summary
    assert {2, 3} <= set(summary["format_versions"]), summary
    assert summary["partition_values_checked_by_bounds"] > 100, summary


@pytest.fixture(scope="module")
def one_table(skade_server):
    """A day-partitioned table's directory (metadata and data), written for the
    negative controls."""
    ns = "java_broken"
    from pyiceberg.catalog import load_catalog

    load_catalog("broken", type="rest", uri=skade_server.metrics_url).create_namespace_if_not_exists(ns)
    write_partitioned(skade_server, ns, "p_day")
    return skade_server.warehouse / ns / "p_day"


@pytest.fixture
def scratch():
    """A directory outside the session's temporary directory, so the broken files of the
    negative controls never reach the check of everything the session wrote."""
    with tempfile.TemporaryDirectory(prefix="skade-iceberg-check-") as path:
        yield Path(path)


def current_metadata(table_dir: Path) -> Path:
    return max((table_dir / "metadata").glob("*.metadata.json"), key=lambda p: int(p.name.split("-")[0]))


def test_iceberg_java_check_fails_on_a_lowered_last_column_id(jvm, one_table, scratch):
    """The negative control of the schema checks: a metadata JSON whose last-column-id is
    below its schema's field ids must fail."""
    metadata = json.loads(current_metadata(one_table).read_text())
    metadata["last-column-id"] = 2
    broken = scratch / "00009-broken.metadata.json"
    broken.write_text(json.dumps(metadata))
    code, failures, _, _ = run_check(jvm, str(scratch))
    assert code == 1 and failures, failures
    assert all(str(broken) in f for f in failures), failures
    assert any(re.search(r"last-column-id|lastColumnId|column id", f, re.I) for f in failures), failures


def test_iceberg_java_check_fails_on_partition_values_of_another_transform(jvm, one_table, scratch):
    """The negative control of the partition checks: the table's files (partitioned by
    day) described as partitioned by month must fail on their partition values."""
    metadata = json.loads(current_metadata(one_table).read_text())
    for spec in metadata["partition-specs"]:
        for field in spec["fields"]:
            assert field["transform"] == "day"
            field["transform"] = "month"
    broken = scratch / "00009-broken.metadata.json"
    broken.write_text(json.dumps(metadata))
    code, failures, _, _ = run_check(jvm, str(scratch))
    assert code == 1 and any("partition ts_day" in f and "outside" in f for f in failures), failures[:5]


def test_iceberg_java_check_reports_a_foreign_manifest_it_cannot_read(jvm, scratch, monkeypatch):
    """The negative control of the suite's other writers (no FOREIGN line above): an
    equality delete committed by tests/interop/foreign_writer.py with pyiceberg 0.12's own
    delete manifest writer (equality_ids as list<long>), on pyiceberg's SQLite catalog,
    must be reported as a FOREIGN problem of that manifest -- and not as skade's."""
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.manifest import ManifestWriterV2

    import foreign_writer

    catalog = SqlCatalog("foreign", uri=f"sqlite:///{scratch}/catalog.db", warehouse=f"file://{scratch}")
    catalog.create_namespace("fw")
    table = catalog.create_table("fw.t", pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    table.append(pa.table({"id": pa.array(range(10), pa.int64())},
                          schema=pa.schema([pa.field("id", pa.int64(), nullable=False)])))
    monkeypatch.setattr(foreign_writer._DeleteManifestWriter, "_with_partition",
                        ManifestWriterV2._with_partition)
    foreign_writer.delete_rows(catalog, "fw.t", [3, 7], equality=True)

    code, failures, summary, foreign = run_check(jvm, str(scratch))
    assert code == 0 and failures == [], failures[:5]
    assert foreign and all(LONG_EQUALITY_IDS in line and "-m0.avro" in line for line in foreign), foreign
    assert summary["foreign_failures"] == len(foreign), summary
