"""Row deletes committed as another engine commits them to a v2 table in the JDBC catalog
(Spark, Trino, Flink): built from the Iceberg table spec with pyiceberg's low-level writers
(pyiceberg itself deletes copy-on-write, never with delete files).

``delete_rows`` writes, per data file holding some of the ids, a position-delete file
("Position Delete Files": columns ``file_path`` and ``pos`` with the reserved field ids
2147483546 and 2147483545, rows sorted by position, equal ``file_path`` lower and upper
bounds), or one equality-delete file on the ``id`` column ("Equality Delete Files"), lists
them in one delete manifest (``content`` = deletes) before the parent snapshot's manifests,
and commits a ``delete`` snapshot with the JDBC catalog's compare-and-swap
(``SqlCatalog.commit_table``: the pointer row moves only from the metadata it was built on).
"""

from __future__ import annotations

import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.update import (
    AddSnapshotUpdate,
    AssertRefSnapshotId,
    AssertTableUUID,
    SetSnapshotRefUpdate,
)
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, ListType, NestedField, StructType

FILE_PATH_ID = 2147483546
POS_ID = 2147483545


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 manifest writer, for a delete manifest, with the spec's
    ``equality_ids`` type (``list<int>``, field 135; pyiceberg 0.12 writes ``list<long>``,
    which Iceberg Java and DuckDB fail to read)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}

    def _with_partition(self, format_version):
        schema = super()._with_partition(format_version)
        return Schema(*[_int_equality_ids(f) for f in schema.fields], schema_id=schema.schema_id)


def _int_equality_ids(field: NestedField) -> NestedField:
    """``field`` with every ``equality_ids`` (field 135) below it as ``list<int>``."""
    if field.field_id == 135:
        element = ListType(element_id=136, element_type=IntegerType(), element_required=True)
        return NestedField(field_id=135, name=field.name, field_type=element,
                           required=field.required, doc=field.doc)
    if isinstance(field.field_type, StructType):
        inner = StructType(*[_int_equality_ids(f) for f in field.field_type.fields])
        return NestedField(field_id=field.field_id, name=field.name, field_type=inner,
                           required=field.required, doc=field.doc)
    return field


def _field(name: str, type_: pa.DataType, field_id: int) -> pa.Field:
    return pa.field(name, type_, nullable=False, metadata={b"PARQUET:field_id": str(field_id).encode()})


def _write_parquet(io, location: str, table: pa.Table) -> int:
    with io.new_output(location).create(overwrite=True) as out:
        pq.write_table(table, out)
    return len(io.new_input(location))


def live_data_files(table) -> list[tuple[str, list[int]]]:
    """Each live data file of ``table``'s current snapshot with its rows' ids in file
    order, in path order."""
    out = []
    for manifest in table.current_snapshot().manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            path = entry.data_file.file_path
            with table.io.new_input(path).open() as f:
                ids = pq.read_table(f, columns=["id"]).column("id").to_pylist()
            out.append((path, ids))
    return sorted(out)


def delete_rows(catalog, identifier: str, ids: list[int], equality: bool = False) -> list[str]:
    """Deletes the rows of ``identifier`` whose ``id`` is in ``ids`` (module doc); returns
    the delete files' locations."""
    table = catalog.load_table(identifier)
    io = table.io
    location = table.metadata.location
    files: list[DataFile] = []
    if equality:
        id_field = table.schema().find_field("id").field_id
        path = f"{location}/data/{uuid.uuid4()}-eq-deletes.parquet"
        rows = pa.table({"id": pa.array(sorted(ids), pa.int64())},
                        schema=pa.schema([_field("id", pa.int64(), id_field)]))
        size = _write_parquet(io, path, rows)
        files.append(DataFile.from_args(
            _table_format_version=2,
            content=DataFileContent.EQUALITY_DELETES,
            file_path=path,
            file_format=FileFormat.PARQUET,
            partition=Record(),
            record_count=len(ids),
            file_size_in_bytes=size,
            equality_ids=[id_field],
        ))
    else:
        wanted = set(ids)
        for data_path, file_ids in live_data_files(table):
            positions = [pos for pos, id_ in enumerate(file_ids) if id_ in wanted]
            if not positions:
                continue
            path = f"{location}/data/{uuid.uuid4()}-deletes.parquet"
            rows = pa.table(
                {"file_path": [data_path] * len(positions), "pos": positions},
                schema=pa.schema([_field("file_path", pa.string(), FILE_PATH_ID),
                                  _field("pos", pa.int64(), POS_ID)]),
            )
            size = _write_parquet(io, path, rows)
            bound = data_path.encode()
            files.append(DataFile.from_args(
                _table_format_version=2,
                content=DataFileContent.POSITION_DELETES,
                file_path=path,
                file_format=FileFormat.PARQUET,
                partition=Record(),
                record_count=len(positions),
                file_size_in_bytes=size,
                lower_bounds={FILE_PATH_ID: bound},
                upper_bounds={FILE_PATH_ID: bound},
            ))
    assert files, f"no row of {ids} in {identifier}"
    _commit_deletes(catalog, table, files)
    return [f.file_path for f in files]


def _commit_deletes(catalog, table, files: list[DataFile]) -> None:
    io = table.io
    metadata = table.metadata
    parent = table.current_snapshot()
    snapshot_id = metadata.new_snapshot_id()
    sequence_number = metadata.next_sequence_number()
    commit = uuid.uuid4()
    manifest_path = f"{metadata.location}/metadata/{commit}-m0.avro"
    with _DeleteManifestWriter(
        spec=table.spec(),
        schema=table.schema(),
        output_file=io.new_output(manifest_path),
        snapshot_id=snapshot_id,
        avro_compression="deflate",
    ) as writer:
        for file in files:
            writer.add_entry(ManifestEntry.from_args(
                status=ManifestEntryStatus.ADDED,
                snapshot_id=snapshot_id,
                sequence_number=None,
                file_sequence_number=None,
                data_file=file,
            ))
    delete_manifest = writer.to_manifest_file()
    list_path = f"{metadata.location}/metadata/snap-{snapshot_id}-0-{commit}.avro"
    with write_manifest_list(
        format_version=2,
        output_file=io.new_output(list_path),
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=sequence_number,
        avro_compression="deflate",
    ) as list_writer:
        list_writer.add_manifests([delete_manifest, *parent.manifests(io)])
    totals = parent.summary.additional_properties if parent.summary else {}
    positions = sum(f.record_count for f in files if f.content == DataFileContent.POSITION_DELETES)
    equalities = sum(f.record_count for f in files if f.content == DataFileContent.EQUALITY_DELETES)
    summary = {
        "added-delete-files": str(len(files)),
        "added-position-deletes": str(positions),
        "added-equality-deletes": str(equalities),
        "total-records": totals.get("total-records", "0"),
        "total-data-files": totals.get("total-data-files", "0"),
        "total-files-size": totals.get("total-files-size", "0"),
        "total-delete-files": str(int(totals.get("total-delete-files", "0")) + len(files)),
        "total-position-deletes": str(int(totals.get("total-position-deletes", "0")) + positions),
        "total-equality-deletes": str(int(totals.get("total-equality-deletes", "0")) + equalities),
    }
    snapshot = Snapshot(
        snapshot_id=snapshot_id,
        parent_snapshot_id=parent.snapshot_id,
        sequence_number=sequence_number,
        timestamp_ms=max(int(time.time() * 1000), metadata.last_updated_ms + 1),
        manifest_list=list_path,
        summary=Summary(operation=Operation.DELETE, **summary),
        schema_id=table.schema().schema_id,
    )
    catalog.commit_table(
        table,
        requirements=(
            AssertTableUUID(uuid=metadata.table_uuid),
            AssertRefSnapshotId(ref="main", snapshot_id=parent.snapshot_id),
        ),
        updates=(
            AddSnapshotUpdate(snapshot=snapshot),
            SetSnapshotRefUpdate(ref_name="main", type="branch", snapshot_id=snapshot_id),
        ),
    )
