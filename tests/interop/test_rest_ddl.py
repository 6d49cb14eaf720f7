"""Interop: the DDL half of skade's Iceberg REST catalog, driven by pyiceberg's
``RestCatalog`` and by raw HTTP, against a real ``skade serve`` (``conftest.py``).

* pyiceberg creates ``events`` partitioned by ``day(ts)`` and ``bucket(8, id)`` and a
  table partitioned by ``identity(category)``; the loaded tables carry those specs.
* ``update_spec`` from day to hour, and ``update_schema().add_column`` are committed and
  visible to a fresh client.
* ``purge_table`` removes the table's files; ``rename_table`` keeps rows put over Flight
  readable under the new name through pyiceberg and DoGet.
* Every response body of the DDL routes validates against the schema the vendored
  OpenAPI document (``rest-catalog-open-api.yaml``, apache/iceberg) gives that route and
  status; invalid requests get the spec's 400 with its ``ErrorModel``; list endpoints
  round-trip ``pageSize``/``pageToken``.

Each test's docstring says how it was seen failing once (RED).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import jsonschema
import pyarrow as pa
import pyarrow.flight as flight
import pytest
import referencing
import yaml
from pyiceberg.catalog import load_catalog
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, HourTransform, IdentityTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType, TimestamptzType

from test_flight_roundtrip import assert_tables_equal, put_table

NS = "ddl"
SPEC_PATH = Path(__file__).with_name("rest-catalog-open-api.yaml")
SPEC_URI = "urn:iceberg-rest-spec"

_NO_PROXY_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


# ---------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def catalog(skade_server):
    cat = load_catalog("skade", type="rest", uri=skade_server.metrics_url)
    if NS not in [n[0] for n in cat.list_namespaces()]:
        cat.create_namespace(NS)
    return cat


@pytest.fixture(scope="module")
def client(skade_server):
    c = flight.FlightClient(skade_server.flight_uri, generic_options=[("grpc.enable_http_proxy", 0)])
    yield c
    c.close()


@pytest.fixture(scope="module")
def spec() -> dict:
    return with_nullable_types(yaml.safe_load(SPEC_PATH.read_text()))


def with_nullable_types(node):
    """The spec with OpenAPI's ``nullable: true`` spelled as JSON Schema understands it
    (``type: [T, "null"]``): ``PageToken`` is ``type: string, nullable: true`` and the
    spec asks for ``next-page-token: null`` on the last page."""
    if isinstance(node, dict):
        node = {k: with_nullable_types(v) for k, v in node.items()}
        if node.get("nullable") is True and isinstance(node.get("type"), str):
            node["type"] = [node["type"], "null"]
        return node
    if isinstance(node, list):
        return [with_nullable_types(v) for v in node]
    return node


def events_schema() -> Schema:
    return Schema(
        NestedField(1, "id", LongType(), required=False),
        NestedField(2, "ts", TimestamptzType(), required=False),
        NestedField(3, "score", DoubleType(), required=False),
        NestedField(4, "name", StringType(), required=False),
        NestedField(5, "category", StringType(), required=False),
    )


def events_spec() -> PartitionSpec:
    return PartitionSpec(
        PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"),
        PartitionField(source_id=1, field_id=1001, transform=BucketTransform(8), name="id_bucket"),
    )


def rows(first_id: int, n: int) -> pa.Table:
    ids = list(range(first_id, first_id + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" for i in ids], pa.string()),
            "score": pa.array([i * 0.5 for i in ids], pa.float64()),
            "ts": pa.array([1_700_000_000_000_000 + i for i in ids], pa.timestamp("us", tz="UTC")),
        }
    )


def http(server, method: str, path: str, body=None) -> tuple[int, dict | None]:
    """``method path`` (a JSON body when given) → status and parsed JSON (None if empty)."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"{server.metrics_url}{path}", data=data, method=method, headers={"content-type": "application/json"}
    )
    try:
        with _NO_PROXY_OPENER.open(request, timeout=30) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    return status, (json.loads(raw) if raw else None)


def response_schema(spec: dict, path: str, method: str, status: int) -> dict | None:
    """The JSON schema the spec gives ``method path`` answering ``status`` (``None`` for a
    response without a body), following ``$ref``s to ``components/responses``."""
    operation = spec["paths"][path][method.lower()]
    responses = operation["responses"]
    response = responses.get(status) or responses.get(str(status))
    if response is None and status >= 500:
        response = responses.get("5XX")
    assert response is not None, f"the spec gives {method} {path} no {status} response"
    while "$ref" in response:
        name = response["$ref"].rsplit("/", 1)[-1]
        response = spec["components"]["responses"][name]
    content = response.get("content")
    if content is None:
        return None
    return content["application/json"]["schema"]


def check_against_spec(spec: dict, path: str, method: str, answer: tuple[int, dict | None]) -> None:
    """Validates an answer's body against the spec's schema for that route and status."""
    status, body = answer
    schema = response_schema(spec, path, method, status)
    if schema is None:
        assert body is None, f"{method} {path} {status}: the spec declares no body, got {body}"
        return
    registry = referencing.Registry().with_resource(
        SPEC_URI, referencing.Resource.from_contents(spec, default_specification=referencing.jsonschema.DRAFT202012)
    )
    wrapped = {"$ref": SPEC_URI + schema["$ref"]} if "$ref" in schema else schema
    validator = jsonschema.Draft202012Validator(wrapped, registry=registry)
    errors = sorted(validator.iter_errors(body), key=lambda e: list(e.path))
    assert not errors, f"{method} {path} {status} does not match the spec: " + "; ".join(
        f"{list(e.path)}: {e.message}" for e in errors[:5]
    )


# ------------------------------------------------------------------------- tests


def test_pyiceberg_creates_partitioned_tables(catalog):
    """RED once: with `POST /v1/namespaces/{namespace}/tables` not advertised in
    `/v1/config`, pyiceberg raised NotImplementedError before sending anything."""
    events = catalog.create_table((NS, "events"), schema=events_schema(), partition_spec=events_spec())
    by_category = catalog.create_table(
        (NS, "by_category"),
        schema=events_schema(),
        partition_spec=PartitionSpec(
            PartitionField(source_id=5, field_id=1000, transform=IdentityTransform(), name="category")
        ),
        properties={"owner": "interop"},
    )
    for created in (events, by_category):
        assert created.metadata_location.startswith("/"), created.metadata_location

    loaded = catalog.load_table((NS, "events")).spec()
    assert [(f.name, str(f.transform)) for f in loaded.fields] == [("ts_day", "day"), ("id_bucket", "bucket[8]")]
    assert [loaded.fields[0].source_id, loaded.fields[1].source_id] == [2, 1]
    other = catalog.load_table((NS, "by_category"))
    assert [(f.name, str(f.transform)) for f in other.spec().fields] == [("category", "identity")]
    assert other.properties["owner"] == "interop"
    assert {t[1] for t in catalog.list_tables(NS)} >= {"events", "by_category"}


def test_spec_evolution_from_day_to_hour(catalog, skade_server):
    """Catches a spec update that is refused or not persisted (a fresh client must see
    the hour spec as default and both specs in the metadata)."""
    table = catalog.create_table((NS, "hourly"), schema=events_schema(), partition_spec=events_spec())
    with table.update_spec() as update:
        update.remove_field("ts_day")
        update.add_field("ts", HourTransform(), "ts_hour")
    fresh = load_catalog("fresh", type="rest", uri=skade_server.metrics_url).load_table((NS, "hourly"))
    assert [(f.name, str(f.transform)) for f in fresh.spec().fields] == [("id_bucket", "bucket[8]"), ("ts_hour", "hour")]
    assert len(fresh.specs()) == 2
    assert fresh.metadata_location == table.metadata_location


def test_schema_evolution_add_column(catalog, skade_server):
    """Catches an `add-schema` commit that is refused or lost, and a stale commit that
    is applied instead of failing its `assert-current-schema-id` (409 CommitFailed).
    Before this change the commit route answered 405."""
    table = catalog.create_table((NS, "evolving"), schema=events_schema())
    with table.update_schema() as update:
        update.add_column("note", StringType(), doc="added over REST")
    fresh = load_catalog("fresh", type="rest", uri=skade_server.metrics_url).load_table((NS, "evolving"))
    field = fresh.schema().find_field("note")
    assert field.doc == "added over REST"
    assert fresh.schema().schema_id == 1
    # A commit on the stale table: its requirement no longer holds → CommitFailed (409).
    from pyiceberg.exceptions import CommitFailedException

    stale = catalog.load_table((NS, "evolving"))
    with table.update_schema() as update:
        update.add_column("other", StringType())
    with pytest.raises(CommitFailedException):
        with stale.update_schema() as update:
            update.add_column("late", StringType())


def test_drop_with_purge_removes_the_files(catalog, client, skade_server):
    """Catches `purgeRequested` being ignored (a plain drop keeps the files) and a
    purge reaching past the table's own location (the neighbour stays intact). RED once:
    pyiceberg sends `purgeRequested=True` and the first version answered 400 to it."""
    put_table(client, (NS, "purged"), rows(0, 100))
    location = Path(catalog.load_table((NS, "purged")).location())
    assert any(location.rglob("*.parquet"))
    neighbour = catalog.create_table((NS, "purged_neighbour"), schema=events_schema())
    catalog.purge_table((NS, "purged"))
    assert not catalog.table_exists((NS, "purged"))
    assert not location.exists(), sorted(str(p) for p in location.rglob("*"))
    assert catalog.load_table((NS, "purged_neighbour")).metadata_location == neighbour.metadata_location


def test_rename_keeps_the_data_readable(catalog, client):
    """Catches a rename that loses the table's pointer or data. Before this change
    pyiceberg refused `rename_table` (NotImplementedError: not advertised)."""
    source = rows(0, 250)
    put_table(client, (NS, "before"), source)
    catalog.rename_table((NS, "before"), (NS, "after"))
    assert not catalog.table_exists((NS, "before"))
    scanned = catalog.load_table((NS, "after")).scan().to_arrow()
    assert_tables_equal(scanned, source, what="pyiceberg scan after rename", ordered=False)
    info = client.get_flight_info(flight.FlightDescriptor.for_path(NS, "after"))
    got = client.do_get(info.endpoints[0].ticket).read_all()
    assert_tables_equal(got, source, what="DoGet after rename", ordered=False)


def test_ddl_responses_validate_against_the_spec(skade_server, spec):
    """Every DDL answer's body against the schema the vendored spec gives its route and
    status. RED once: `next-page-token: null` failed `PageToken` until the validator
    read OpenAPI's `nullable: true` (the spec asks for `null` on the last page)."""
    checked = []

    def call(path_template: str, method: str, path: str, body=None, want: int | None = None):
        answer = http(skade_server, method, path, body)
        if want is not None:
            assert answer[0] == want, answer
        check_against_spec(spec, path_template, method, answer)
        checked.append((method, path_template, answer[0]))
        return answer

    ns_path = "/v1/{prefix}/namespaces"
    one_ns = "/v1/{prefix}/namespaces/{namespace}"
    tables = "/v1/{prefix}/namespaces/{namespace}/tables"
    one_table = "/v1/{prefix}/namespaces/{namespace}/tables/{table}"
    call("/v1/config", "GET", "/v1/config", want=200)
    call(ns_path, "POST", "/v1/namespaces", {"namespace": ["spec"], "properties": {"a": "1"}}, want=200)
    call(ns_path, "POST", "/v1/namespaces", {"namespace": ["spec"]}, want=409)
    call(ns_path, "GET", "/v1/namespaces?pageToken=&pageSize=1", want=200)
    call(one_ns, "GET", "/v1/namespaces/spec", want=200)
    call(
        one_ns + "/properties",
        "POST",
        "/v1/namespaces/spec/properties",
        {"removals": ["a", "absent"], "updates": {"b": "2"}},
        want=200,
    )
    create = {
        "name": "t",
        "schema": {"type": "struct", "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]},
        "partition-spec": {"fields": [{"source-id": 1, "field-id": 1000, "name": "b", "transform": "bucket[4]"}]},
    }
    _, created = call(tables, "POST", "/v1/namespaces/spec/tables", create, want=200)
    call(tables, "POST", "/v1/namespaces/spec/tables", create, want=409)
    call(tables, "POST", "/v1/namespaces/spec/tables", create | {"name": "staged", "stage-create": True}, want=400)
    call(tables, "GET", "/v1/namespaces/spec/tables?pageToken=", want=200)
    call(one_table, "GET", "/v1/namespaces/spec/tables/t", want=200)
    commit = {
        "requirements": [{"type": "assert-table-uuid", "uuid": created["metadata"]["table-uuid"]}],
        "updates": [
            {"action": "set-properties", "updates": {"k": "v"}},
            {"action": "add-sort-order", "sort-order": {"order-id": 1, "fields": [
                {"source-id": 1, "transform": "identity", "direction": "desc", "null-order": "nulls-last"}]}},
            {"action": "set-default-sort-order", "sort-order-id": -1},
        ],
    }
    _, committed = call(one_table, "POST", "/v1/namespaces/spec/tables/t", commit, want=200)
    assert committed["metadata"]["properties"]["k"] == "v"
    assert committed["metadata"]["default-sort-order-id"] == 1
    call(one_table, "POST", "/v1/namespaces/spec/tables/t", commit | {"requirements": [
        {"type": "assert-current-schema-id", "current-schema-id": 7}]}, want=409)
    call(one_table, "POST", "/v1/namespaces/spec/tables/t", {"requirements": [], "updates": [
        {"action": "upgrade-format-version", "format-version": 3}]}, want=400)
    call(one_table, "POST", "/v1/namespaces/nope/tables/t", commit, want=404)
    call("/v1/{prefix}/tables/rename", "POST", "/v1/tables/rename", {
        "source": {"namespace": ["spec"], "name": "t"}, "destination": {"namespace": ["spec"], "name": "u"}}, want=204)
    call(one_table, "DELETE", "/v1/namespaces/spec/tables/t", want=404)
    call(one_table, "DELETE", "/v1/namespaces/spec/tables/u?purgeRequested=true", want=204)
    call(one_ns, "DELETE", "/v1/namespaces/spec", want=204)
    call(one_ns, "DELETE", "/v1/namespaces/spec", want=404)
    assert len(checked) == 20, checked


@pytest.mark.parametrize(
    ("path_template", "path"),
    [
        ("/v1/{prefix}/namespaces", "/v1/namespaces?pageSize=0"),
        ("/v1/{prefix}/namespaces", "/v1/namespaces?pageSize=-5"),
        ("/v1/{prefix}/namespaces/{namespace}/tables", f"/v1/namespaces/{NS}/tables?pageSize=0&pageToken="),
        ("/v1/{prefix}/namespaces/{namespace}/tables", f"/v1/namespaces/{NS}/tables?pageToken=not-ours%21"),
        ("/v1/{prefix}/namespaces/{namespace}/tables/{table}", f"/v1/namespaces/{NS}/tables/events?snapshots=bogus"),
    ],
)
def test_invalid_requests_are_the_spec_400(catalog, skade_server, spec, path_template, path):
    """RED once: `pageSize=0`, `pageSize=-5` and `snapshots=bogus` answered 200."""
    if not catalog.table_exists((NS, "events")):
        catalog.create_table((NS, "events"), schema=events_schema())
    status, body = http(skade_server, "GET", path)
    assert status == 400, body
    assert body["error"]["type"] == "BadRequestException", body
    check_against_spec(spec, path_template, "GET", (status, body))


def test_pagination_round_trips(catalog, skade_server):
    """Catches a page that repeats or skips a name, or ignores `pageSize`. Before this
    change `pageSize=2` answered all seven tables at once."""
    catalog.create_namespace("paged")
    names = [f"t{i}" for i in range(7)]
    for name in reversed(names):
        catalog.create_table(("paged", name), schema=events_schema())
    seen, token, pages = [], "", 0
    while True:
        status, page = http(skade_server, "GET", f"/v1/namespaces/paged/tables?pageSize=2&pageToken={token}")
        assert status == 200, page
        assert len(page["identifiers"]) <= 2, page
        seen += [i["name"] for i in page["identifiers"]]
        pages += 1
        if page["next-page-token"] is None:
            break
        token = urllib.parse.quote(page["next-page-token"])
    assert seen == names
    assert pages == 4
    # pyiceberg's own listing (no pageToken) gets everything.
    assert sorted(t[1] for t in catalog.list_tables("paged")) == names


def test_writes_over_https_need_the_bearer_token(skade_tls_server, tmp_path, monkeypatch):
    """pyiceberg over HTTPS (the Flight certificate, `ssl={"cabundle": …}`): refused
    without the bearer token, creating and dropping a partitioned table with it. Catches
    a plain-text metrics port beside a TLS Flight port (the Rust test
    `security::the_http_address_serves_tls_and_guards_rest_writes_with_the_token` checks a
    write without the token is 401 and creates nothing)."""
    from pyiceberg.exceptions import UnauthorizedError

    # requests lets these override a session's own CA bundle (pyiceberg's `cabundle`).
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    ca = tmp_path / "ca.pem"
    ca.write_bytes(skade_tls_server.tls_root_certs)
    assert skade_tls_server.metrics_url.startswith("https://")
    # Without the token even `/v1/config` is refused (401), so the client cannot start.
    with pytest.raises(UnauthorizedError):
        load_catalog("anon", type="rest", uri=skade_tls_server.metrics_url, ssl={"cabundle": str(ca)})
    authorized = load_catalog(
        "authed",
        type="rest",
        uri=skade_tls_server.metrics_url,
        token=skade_tls_server.token,
        ssl={"cabundle": str(ca)},
    )
    authorized.create_namespace("tls_ns")
    created = authorized.create_table(("tls_ns", "t"), schema=events_schema(), partition_spec=events_spec())
    assert [f.name for f in created.spec().fields] == ["ts_day", "id_bucket"]
    authorized.drop_table(("tls_ns", "t"))
    assert not authorized.table_exists(("tls_ns", "t"))


def test_the_guides_pyiceberg_and_curl_examples_run_in_order(tmp_path):
    """Catches a guide whose examples do not run as written one after the other: its
    curl block's first request answered 409 because the pyiceberg example before it had
    made the namespace (the issue's reader hit exactly that). Runs both blocks of
    docs/rest-ddl.md against a fresh server and checks that no curl request is refused."""
    import re
    import shutil
    import subprocess
    import sys

    from conftest import REPO_ROOT, launch_skade

    guide = (REPO_ROOT / "docs" / "rest-ddl.md").read_text()
    [python] = [b for b in re.findall(r"^```python\n(.*?)^```", guide, flags=re.S | re.M)
                if "create_table" in b]
    [shell] = re.findall(r"^```sh\n(.*?)^```", guide, flags=re.S | re.M)
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    for server in launch_skade(tmp_path):
        local = "http://127.0.0.1:9464"
        script = tmp_path / "ddl.py"
        script.write_text(python.replace(local, server.metrics_url))
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert shell.count("-w '\\n'") >= 3, shell
        commands = (shell.replace(local, server.metrics_url)
                    .replace("-w '\\n'", "--noproxy '*' -w '\\n%{http_code}\\n'"))
        done = subprocess.run(["bash", "-e", "-c", commands], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        codes = re.findall(r"^(\d{3})$", done.stdout, flags=re.M)
        assert codes and all(c.startswith("2") for c in codes), done.stdout
