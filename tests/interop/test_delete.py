"""Interop: ``DELETE`` over Flight SQL with the stock ADBC driver, read back by other
implementations, against a real ``skade serve``.

* Every filter form of the SELECT suite (every primitive type, nested fields, AND / OR /
  NOT, IN, BETWEEN, IS [NOT] NULL, LIKE) run as ``DELETE FROM t WHERE <filter>`` on v2
  and v3 tables: the rows left are the rows for which DuckDB (a second implementation
  of the filter) says the filter is not TRUE, read back through ``DoGet``, pyiceberg and
  DuckDB's Iceberg reader (through skade's REST catalog); the rows-affected count is
  the difference.
* The paths a client takes: ``cursor.execute`` (``CommandStatementQuery``, one row
  ``rows_affected``), ``execute_update`` (``CommandStatementUpdate``), ``executemany``
  with parameters (a prepared ``CommandPreparedStatementUpdate``).
* The form written: v2 tables get Parquet position-delete files only, v3 tables Puffin
  deletion vectors only (pyiceberg reads both; its Puffin reader decodes every DV); a
  data file whose rows all go is removed whole on v2 (a whole partition leaves no delete
  file); rows deleted twice count once.
* A transaction across four tables (delete a repository's rows and ingest its new
  rows in each) is ONE catalog commit, invisible before COMMIT; ROLLBACK changes nothing;
  retried with its exactly-once key it commits nothing the second time.
* Bad statements (unknown column, unknown table, a value of the wrong type, syntax
  outside the subset) are refused naming what is wrong, and nothing changes.
* ADBC's ``mode="replace"`` replaces a table's schema and rows in one commit with the
  transaction's other tables: same uuid, older snapshots still readable.
* A ``DoPut`` with the ``x-skade-overwrite-where`` header replaces the rows the filter
  matches with the stream's, in one snapshot, once when resent with its key.

Run from the repository root (after ``cargo build``)::

    .venv/bin/pytest tests/interop/test_delete.py
"""

from __future__ import annotations

import itertools
from pathlib import Path

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import duckdb
import pyarrow as pa
import pyarrow.flight as flight
import pytest
from pyiceberg.catalog import load_catalog

from test_flight_sql import ALL_TYPES, LITERAL_QUERIES, all_types_rows, duckdb_over

_names = itertools.count()


@pytest.fixture(scope="module")
def server(skade_local_server):
    return skade_local_server


@pytest.fixture(scope="module")
def rest(server):
    catalog = load_catalog(f"rest-del-{server.metrics_url}", type="rest", uri=server.metrics_url)
    catalog.create_namespace_if_not_exists("del")
    return catalog


def connect(server, autocommit: bool = True):
    return flightsql.connect(server.flight_uri, autocommit=autocommit)


def put(server, name: str, table: pa.Table, files: int = 3) -> None:
    """``table`` in ``files`` puts (one data file each) into ``del.<name>``."""
    client = flight.FlightClient(server.flight_uri)
    try:
        step = -(-table.num_rows // files)
        for start in range(0, table.num_rows, step):
            part = table.slice(start, step)
            writer, reader = client.do_put(flight.FlightDescriptor.for_path("del", name), part.schema)
            writer.write_table(part)
            writer.done_writing()
            while reader.read() is not None:
                pass
            writer.close()
    finally:
        client.close()


def do_get(server, name: str) -> pa.Table:
    client = flight.FlightClient(server.flight_uri)
    try:
        info = client.get_flight_info(flight.FlightDescriptor.for_path("del", name))
        return client.do_get(info.endpoints[0].ticket).read_all()
    finally:
        client.close()


def duckdb_rows(server, name: str) -> pa.Table:
    """The rows DuckDB's Iceberg reader reads from ``del.<name>`` through skade's REST
    catalog (offline extension wheel)."""
    import duckdb_ext

    con = duckdb.connect()
    extensions = Path(list(duckdb_ext.__path__)[0]) / "extensions"
    con.execute("SET extension_directory = ?", [str(extensions)])
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET TimeZone = 'UTC'")
    con.execute("LOAD iceberg")
    con.execute(f"ATTACH '' AS skade (TYPE iceberg, ENDPOINT '{server.metrics_url}', "
                "AUTHORIZATION_TYPE 'none')")
    return con.execute(f"SELECT id FROM skade.del.{name} ORDER BY id").fetch_arrow_table()


def ids(table: pa.Table) -> list[int]:
    return sorted(table.column("id").to_pylist())


def create(rest, version: int, schema=ALL_TYPES) -> tuple[str, object]:
    name = f"t{next(_names)}_v{version}"
    table = rest.create_table(f"del.{name}", schema, properties={"format-version": str(version)})
    return name, table


def live_files(rest, name: str) -> list:
    """Every live file (data and delete) of ``del.<name>``'s current snapshot, read from
    its manifests by pyiceberg."""
    table = rest.load_table(f"del.{name}")
    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    out = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            out.append(entry.data_file)
    return out


def delete_files(rest, name: str) -> list[tuple[int, str]]:
    """(content, file format) of every live delete file of ``del.<name>``."""
    return [(int(f.content), str(f.file_format.value)) for f in live_files(rest, name) if int(f.content) != 0]


def data_file_count(rest, name: str) -> int:
    return sum(1 for f in live_files(rest, name) if int(f.content) == 0)


def assert_readers_agree(server, rest, name: str, expected: list[int]) -> None:
    assert ids(do_get(server, name)) == expected, "DoGet"
    assert ids(rest.load_table(f"del.{name}").scan().to_arrow()) == expected, "pyiceberg"
    assert ids(duckdb_rows(server, name)) == expected, "DuckDB"


def execute(server, sql: str, params=None) -> int:
    """Runs ``sql`` with ``cursor.execute`` (a query to the driver) and returns the one
    ``rows_affected`` value skade answers."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.execute(sql, params)
            rows = cur.fetchall()
    finally:
        conn.close()
    assert len(rows) == 1, rows
    return rows[0][0]


def execute_update(server, sql: str) -> int:
    """Runs ``sql`` as an update (``CommandStatementUpdate``): the rows affected."""
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.adbc_statement.set_sql_query(sql)
            return cur.adbc_statement.execute_update()
    finally:
        conn.close()


FILTERS = [q.split(" WHERE ", 1)[1] for q in LITERAL_QUERIES if " WHERE " in q and " LIMIT " not in q]


@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("where", FILTERS)
def test_delete_leaves_the_rows_the_filter_does_not_match(server, rest, version, where):
    """Catches a DELETE that removes a row its filter does not match (or keeps one it
    matches) for any column type, or a reader that does not see the delete files."""
    name, table = create(rest, version)
    rows = all_types_rows(table.schema().as_arrow())
    put(server, name, rows)
    con = duckdb_over(rows)
    kept = con.execute(f"SELECT id FROM doget WHERE ({where}) IS NOT TRUE ORDER BY id").fetchall()
    expected = [r[0] for r in kept]
    deleted = execute(server, f"DELETE FROM del.{name} WHERE {where}")
    assert deleted == rows.num_rows - len(expected)
    assert_readers_agree(server, rest, name, expected)
    forms = {fmt for _, fmt in delete_files(rest, name)}
    assert forms <= ({"PARQUET"} if version == 2 else {"PUFFIN"}), forms


def id_rows(n: int, group: str = "a", start: int = 0) -> pa.Table:
    return pa.table({
        "id": pa.array(range(start, start + n), pa.int64()),
        "grp": pa.array([group] * n, pa.string()),
    })


@pytest.mark.parametrize("version", [2, 3])
def test_every_path_deletes_and_counts_once(server, rest, version):
    """Catches a client path that does not run the DELETE or misreports its count, rows
    deleted twice counted twice, and a wrong delete form for the table's version."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "grp", StringType()))
    name, _ = create(rest, version, schema)
    put(server, name, pa.concat_tables([id_rows(100, "a"), id_rows(100, "b", 100), id_rows(100, "c", 200)]))
    left = set(range(300))
    # CommandStatementQuery.
    assert execute(server, f"DELETE FROM del.{name} WHERE id < 10") == 10
    left -= set(range(10))
    assert execute(server, f"DELETE FROM del.{name} WHERE id < 10") == 0
    # CommandStatementUpdate.
    assert execute_update(server, f"DELETE FROM del.{name} WHERE id BETWEEN 5 AND 14") == 5
    left -= set(range(15))
    # A prepared statement with one row of parameters per run (executemany).
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.executemany(f"DELETE FROM del.{name} WHERE id = ?", [(20,), (21,), (20,), (9999,)])
            assert cur.rowcount == 2
    finally:
        conn.close()
    left -= {20, 21}
    # Every row of the second file: removed whole on v2, one DV of all its rows on v3.
    files_before = data_file_count(rest, name)
    assert execute(server, f"DELETE FROM del.{name} WHERE grp = 'b'") == 100
    left -= set(range(100, 200))
    if version == 2:
        assert data_file_count(rest, name) == files_before - 1
    assert_readers_agree(server, rest, name, sorted(left))
    forms = delete_files(rest, name)
    assert forms, "no delete file was written"
    if version == 2:
        assert {fmt for _, fmt in forms} == {"PARQUET"} and {c for c, _ in forms} == {1}
    else:
        assert {fmt for _, fmt in forms} == {"PUFFIN"} and {c for c, _ in forms} == {1}
        # One DV per data file: the first file's three deletes were merged into one,
        # beside the second file's.
        assert len(forms) == 2, forms
        # pyiceberg's Puffin reader (a second implementation) decodes every blob.
        from pyiceberg.table.puffin import PuffinFile

        table = rest.load_table(f"del.{name}")
        data_paths = {f.file_path for f in live_files(rest, name) if int(f.content) == 0}
        for path in {f.file_path for f in live_files(rest, name) if int(f.content) == 1}:
            with table.io.new_input(path).open() as stream:
                vectors = PuffinFile(stream.read()).to_vector()
            assert set(vectors) <= data_paths, (set(vectors), data_paths)
    # DELETE without WHERE: every row.
    assert execute(server, f"DELETE FROM del.{name}") == len(left)
    assert_readers_agree(server, rest, name, [])


def commits(server) -> float:
    import re
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{server.metrics_url}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(r"^skade_catalog_commits_total ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def test_scope_replace_across_four_tables_is_one_commit(server, rest):
    """Catches a transaction's DELETEs and ingests landing in more than one catalog
    commit, being visible before COMMIT, or surviving a ROLLBACK."""
    names = [f"scope{next(_names)}" for _ in range(4)]
    for name in names:
        put(server, name, pa.concat_tables([id_rows(50, "a"), id_rows(50, "b", 50)]), files=2)
    # ROLLBACK: nothing changes.
    conn = connect(server, autocommit=False)
    try:
        with conn.cursor() as cur:
            for name in names:
                cur.execute(f"DELETE FROM del.{name} WHERE grp = 'a'")
                assert cur.fetchall() == [(50,)]
        conn.rollback()
    finally:
        conn.close()
    for name in names:
        assert ids(do_get(server, name)) == list(range(100))
    # COMMIT: the re-scan of repository 'a' replaces its rows in all four at once.
    before = commits(server)
    conn = connect(server, autocommit=False)
    try:
        with conn.cursor() as cur:
            for name in names:
                cur.execute(f"DELETE FROM del.{name} WHERE grp = 'a'")
                cur.fetchall()
                cur.adbc_ingest(name, id_rows(20, "a", 1000), mode="append", db_schema_name="del")
            for name in names:
                assert ids(do_get(server, name)) == list(range(100)), "visible before COMMIT"
        conn.commit()
    finally:
        conn.close()
    assert commits(server) - before == 1
    for name in names:
        assert_readers_agree(server, rest, name, list(range(50, 100)) + list(range(1000, 1020)))


@pytest.mark.parametrize(
    "sql, words",
    [
        ("DELETE FROM del.{t} WHERE nope = 1", "nope"),
        ("DELETE FROM del.no_such_table WHERE id = 1", "no_such_table"),
        ("DELETE FROM del.{t} WHERE id = 'abc'", "abc"),
        ("DELETE FROM del.{t} USING del.{t} AS o WHERE id = 1", "USING"),
        ("UPDATE del.{t} SET grp = 'x'", "UPDATE"),
        ("DELETE FROM del.{t} WHERE lower(grp) = 'a'", "lower"),
    ],
)
def test_bad_delete_is_refused_by_name_and_changes_nothing(server, rest, sql, words):
    """Catches a bad DELETE that changes rows, or a refusal that does not say what is
    wrong."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "grp", StringType()))
    name, _ = create(rest, 2, schema)
    put(server, name, id_rows(10), files=1)
    snapshot = rest.load_table(f"del.{name}").current_snapshot().snapshot_id
    with pytest.raises(adbc_driver_manager.Error) as refused:
        execute(server, sql.format(t=name))
    assert words in str(refused.value), str(refused.value)
    assert rest.load_table(f"del.{name}").current_snapshot().snapshot_id == snapshot
    assert ids(do_get(server, name)) == list(range(10))


def test_replace_keeps_the_table_and_its_history(server, rest):
    """Catches ADBC's mode="replace" refused, dropping the table (a new uuid, lost
    history), leaving old rows or the old schema current, or committing apart from the
    transaction's other tables."""
    name, other = f"rep{next(_names)}", f"rep{next(_names)}"
    put(server, name, id_rows(100, "a"), files=2)
    put(server, other, id_rows(10, "x"), files=1)
    before = rest.load_table(f"del.{name}")
    old_snapshot = before.current_snapshot().snapshot_id
    new_rows = pa.table({
        "id": pa.array(range(500, 530), pa.int64()),
        "name": pa.array([f"n{i}" for i in range(30)], pa.string()),
        "score": pa.array([i * 0.5 for i in range(30)], pa.float64()),
    })
    commits_before = commits(server)
    conn = connect(server, autocommit=False)
    try:
        with conn.cursor() as cur:
            cur.adbc_ingest(name, new_rows, mode="replace", db_schema_name="del")
            cur.adbc_ingest(other, id_rows(5, "y", 10), mode="append", db_schema_name="del")
            assert ids(do_get(server, name)) == list(range(100)), "visible before COMMIT"
        conn.commit()
    finally:
        conn.close()
    assert commits(server) - commits_before == 1, "the replace and the append are one commit"
    after = rest.load_table(f"del.{name}")
    assert after.metadata.table_uuid == before.metadata.table_uuid
    assert [f.name for f in after.schema().fields] == ["id", "name", "score"]
    got = do_get(server, name)
    assert got.column_names == ["id", "name", "score"]
    assert sorted(got.to_pylist(), key=lambda r: r["id"]) == new_rows.to_pylist()
    assert ids(after.scan().to_arrow()) == list(range(500, 530)), "pyiceberg"
    assert ids(duckdb_rows(server, name)) == list(range(500, 530)), "DuckDB"
    # History kept: the replaced snapshot still reads its rows.
    assert after.snapshot_by_id(old_snapshot) is not None
    assert ids(after.scan(snapshot_id=old_snapshot).to_arrow()) == list(range(100))
    assert ids(do_get(server, other)) == list(range(15))
    # A replace of a table that does not exist creates it.
    missing = f"rep{next(_names)}"
    conn = connect(server)
    try:
        with conn.cursor() as cur:
            cur.adbc_ingest(missing, new_rows, mode="replace", db_schema_name="del")
        conn.commit()
    finally:
        conn.close()
    assert ids(do_get(server, missing)) == list(range(500, 530))


def test_a_keyed_scope_replace_retried_lands_once(server, rest):
    """Catches a retried exactly-once transaction (same writer id and sequence, as after a
    lost COMMIT answer) whose DELETE and ingest run again: the re-scan's rows would land
    twice."""
    header = "adbc.flight.sql.rpc.call_header."
    names = [f"eo{next(_names)}" for _ in range(2)]
    for name in names:
        put(server, name, pa.concat_tables([id_rows(50, "a"), id_rows(50, "b", 50)]), files=2)

    def rescan(sequence: int) -> None:
        conn = flightsql.connect(
            server.flight_uri,
            db_kwargs={header + "x-skade-writer-id": "rescanner"},
            autocommit=False,
        )
        try:
            conn.adbc_connection.set_options(**{header + "x-skade-sequence": str(sequence)})
            with conn.cursor() as cur:
                for name in names:
                    cur.execute(f"DELETE FROM del.{name} WHERE grp = 'a'")
                    cur.fetchall()
                    cur.adbc_ingest(name, id_rows(20, "a", 1000), mode="append", db_schema_name="del")
            conn.commit()
        finally:
            conn.close()

    expected = list(range(50, 100)) + list(range(1000, 1020))
    rescan(1)
    snapshots = len(rest.load_table(f"del.{names[0]}").metadata.snapshots)
    rescan(1)  # the retry: commits nothing, succeeds
    for name in names:
        assert ids(do_get(server, name)) == expected
    assert len(rest.load_table(f"del.{names[0]}").metadata.snapshots) == snapshots
    rescan(2)  # the next re-scan replaces the rows again
    for name in names:
        assert ids(do_get(server, name)) == expected
    summary = rest.load_table(f"del.{names[1]}").current_snapshot().summary
    assert summary["skade.writer-last-sequence"] == "2"


@pytest.mark.parametrize("version", [2, 3])
def test_a_whole_partition_goes_with_its_files_and_no_delete_file(server, rest, version):
    """Catches a DELETE of a whole partition that writes delete files on v2 (its files'
    statistics prove every row matches: they are removed whole) or leaves a row of it."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import IdentityTransform
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "grp", StringType()))
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=IdentityTransform(), name="grp"))
    name = f"part{next(_names)}_v{version}"
    rest.create_table(f"del.{name}", schema, partition_spec=spec,
                      properties={"format-version": str(version)})
    put(server, name, pa.concat_tables([id_rows(30, "a"), id_rows(30, "b", 30), id_rows(30, "c", 60)]), files=2)
    files_before = data_file_count(rest, name)
    assert execute(server, f"DELETE FROM del.{name} WHERE grp = 'b'") == 30
    expected = list(range(30)) + list(range(60, 90))
    assert_readers_agree(server, rest, name, expected)
    if version == 2:
        assert delete_files(rest, name) == [], "a whole partition needs no delete file"
        assert data_file_count(rest, name) < files_before
    else:
        assert {fmt for _, fmt in delete_files(rest, name)} == {"PUFFIN"}


@pytest.mark.parametrize("version", [2, 3])
def test_a_merged_vector_leaves_its_puffin_neighbours_live(server, rest, version):
    """Catches a DELETE that merges one data file's deletion vector and drops every
    vector of the same Puffin file with it (their entries share its path): the other
    files' deleted rows come back."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "grp", StringType()))
    name, _ = create(rest, version, schema)
    put(server, name, id_rows(300), files=3)
    # One commit, three files: on v3 one Puffin file of three vectors.
    assert execute(server, f"DELETE FROM del.{name} WHERE id < 10 OR id IN (150, 151, 299)") == 13
    # The first file's vector merged into a new one; the other two stay.
    assert execute(server, f"DELETE FROM del.{name} WHERE id BETWEEN 5 AND 20") == 11
    gone = set(range(21)) | {150, 151, 299}
    assert_readers_agree(server, rest, name, [i for i in range(300) if i not in gone])


def test_an_overwriting_put_replaces_the_matching_rows_in_one_snapshot(server, rest):
    """Catches a DoPut with x-skade-overwrite-where that keeps the matching rows, deletes
    others, lands in more than one snapshot, or lands twice when resent with its key."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "grp", StringType()))
    name, _ = create(rest, 2, schema)
    put(server, name, pa.concat_tables([id_rows(40, "a"), id_rows(40, "b", 40)]), files=2)
    snapshots = len(rest.load_table(f"del.{name}").metadata.snapshots)

    def overwrite(rows: pa.Table, where: str, sequence: int | None = None) -> None:
        headers = [(b"x-skade-overwrite-where", where.encode())]
        if sequence is not None:
            headers += [(b"x-skade-writer-id", b"rescanner"), (b"x-skade-sequence", str(sequence).encode())]
        client = flight.FlightClient(server.flight_uri)
        try:
            options = flight.FlightCallOptions(headers=headers)
            writer, reader = client.do_put(flight.FlightDescriptor.for_path("del", name), rows.schema, options)
            # Small batches: many data files, still one snapshot.
            for batch in rows.to_batches(max_chunksize=5):
                writer.write_batch(batch)
            writer.done_writing()
            acks = []
            while (ack := reader.read()) is not None:
                acks.append(ack)
            writer.close()
        finally:
            client.close()
        assert len(acks) == 1, acks

    overwrite(id_rows(25, "a", 1000), "grp = 'a'", sequence=1)
    expected = list(range(40, 80)) + list(range(1000, 1025))
    assert_readers_agree(server, rest, name, expected)
    assert len(rest.load_table(f"del.{name}").metadata.snapshots) == snapshots + 1, "one snapshot"
    overwrite(id_rows(25, "a", 1000), "grp = 'a'", sequence=1)  # the resend: nothing
    assert_readers_agree(server, rest, name, expected)
    assert len(rest.load_table(f"del.{name}").metadata.snapshots) == snapshots + 1
    # A bad filter is refused naming it, and changes nothing.
    with pytest.raises((flight.FlightError, pa.ArrowException)) as refused:
        overwrite(id_rows(3, "a", 2000), "nope = 1")
    assert "nope" in str(refused.value), str(refused.value)
    assert_readers_agree(server, rest, name, expected)
