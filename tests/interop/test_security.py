"""Interop: bearer tokens and TLS with the clients users use.

Against ``skade serve --auth-token-file`` (``skade_auth_server`` in ``conftest.py``,
running with ``RUST_LOG=debug``) and ``--tls-cert``/``--tls-key`` with a self-signed
certificate made by the fixture (``skade_tls_server``):

* pyarrow.flight without a token and with a wrong one: ``FlightUnauthenticatedError``
  on DoPut, ListFlights and GetFlightInfo; nothing is written.
* pyarrow.flight with ``FlightCallOptions(headers=[(b"authorization", b"Bearer ...")])``:
  the put is acked and reads back.
* pyarrow's ``authenticate_basic_token`` (the token as the basic-auth password) returns
  the bearer header pair, which then works; a wrong password is refused.
* The ADBC Flight SQL driver with ``adbc.flight.sql.authorization_header``: a two-table
  transaction commits; without it, the ingest fails. With ``username``/``password`` (the
  token as password) the driver's Handshake gets the bearer token and ingests.
* SIGHUP re-reads the token file: a token added to it works from then on.
* Over TLS, pyarrow with ``tls_root_certs`` puts and reads back; without the root it
  cannot connect.
* Last: no token appears anywhere in the server's debug log.

RED once: with the basic-auth password decoded as padded base64 only, the ADBC
username/password connection failed ``UNAUTHENTICATED ... (AuthenticateBasicToken)``
while pyarrow's (padded) ``authenticate_basic_token`` passed.
"""

from __future__ import annotations

import signal
import time
import warnings

import adbc_driver_flightsql.dbapi as flightsql
import adbc_driver_manager
import pyarrow as pa
import pyarrow.flight as flight
import pytest

from conftest import SkadeServer

NEW_TOKEN = "interop-token-added-77d2"


def bearer(token: str) -> flight.FlightCallOptions:
    return flight.FlightCallOptions(headers=[(b"authorization", f"Bearer {token}".encode())])


def put(client: flight.FlightClient, path: list[str], table: pa.Table, options=None) -> None:
    descriptor = flight.FlightDescriptor.for_path(*path)
    if options is None:
        writer, reader = client.do_put(descriptor, table.schema)
    else:
        writer, reader = client.do_put(descriptor, table.schema, options=options)
    writer.write_table(table)
    writer.done_writing()
    while reader.read() is not None:
        pass
    writer.close()


def read(client: flight.FlightClient, path: list[str], options) -> pa.Table:
    info = client.get_flight_info(flight.FlightDescriptor.for_path(*path), options=options)
    return client.do_get(info.endpoints[0].ticket, options=options).read_all()


def people(n: int = 3) -> pa.Table:
    return pa.table({"id": list(range(n)), "name": [f"p{i}" for i in range(n)]})


def parquet_files(server: SkadeServer) -> list:
    return sorted(server.warehouse.rglob("*.parquet"))


def test_no_token_or_a_wrong_one_is_unauthenticated_and_writes_nothing(
    skade_auth_server: SkadeServer,
) -> None:
    client = flight.FlightClient(skade_auth_server.flight_uri)
    for options in (None, bearer("wrong-token"), bearer("")):
        with pytest.raises(flight.FlightUnauthenticatedError):
            put(client, ["sec", "refused"], people(), options)
        with pytest.raises(flight.FlightUnauthenticatedError):
            list(client.list_flights(options=options or flight.FlightCallOptions()))
        with pytest.raises(flight.FlightUnauthenticatedError):
            client.get_flight_info(
                flight.FlightDescriptor.for_path("sec", "refused"),
                options=options or flight.FlightCallOptions(),
            )
    assert parquet_files(skade_auth_server) == []


def test_pyarrow_with_the_bearer_header_puts_and_reads_back(
    skade_auth_server: SkadeServer,
) -> None:
    client = flight.FlightClient(skade_auth_server.flight_uri)
    options = bearer(skade_auth_server.token)
    put(client, ["sec", "header"], people(5), options)
    assert read(client, ["sec", "header"], options).sort_by("id") == people(5)


def test_pyarrow_authenticate_basic_token_returns_the_bearer_header(
    skade_auth_server: SkadeServer,
) -> None:
    client = flight.FlightClient(skade_auth_server.flight_uri)
    with pytest.raises(flight.FlightUnauthenticatedError):
        client.authenticate_basic_token(b"anyone", b"not-the-token")
    pair = client.authenticate_basic_token(b"anyone", skade_auth_server.token.encode())
    assert pair == (b"authorization", f"Bearer {skade_auth_server.token}".encode())
    options = flight.FlightCallOptions(headers=[pair])
    put(client, ["sec", "basic"], people(4), options)
    assert read(client, ["sec", "basic"], options).num_rows == 4


def test_adbc_driver_with_an_authorization_header(skade_auth_server: SkadeServer) -> None:
    header = {"adbc.flight.sql.authorization_header": f"Bearer {skade_auth_server.token}"}
    with flightsql.connect(
        skade_auth_server.flight_uri, db_kwargs=header, autocommit=False
    ) as conn:
        with conn.cursor() as cur:
            cur.adbc_ingest("orders", people(6), mode="create_append", db_schema_name="adbc")
            cur.adbc_ingest("lines", people(7), mode="create_append", db_schema_name="adbc")
        conn.commit()
    client = flight.FlightClient(skade_auth_server.flight_uri)
    options = bearer(skade_auth_server.token)
    assert read(client, ["adbc", "orders"], options).num_rows == 6
    assert read(client, ["adbc", "lines"], options).num_rows == 7

    # Without the header the driver's first calls fail (it warns that it cannot turn
    # autocommit off, as GetSqlInfo was refused, then the ingest raises).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(adbc_driver_manager.Error, match="(?i)unauthenticated|bearer token"):
            with flightsql.connect(skade_auth_server.flight_uri, autocommit=False) as conn:
                with conn.cursor() as cur:
                    cur.adbc_ingest("nope", people(), mode="create_append", db_schema_name="adbc")
                conn.commit()
    assert not (skade_auth_server.warehouse / "adbc" / "nope").exists()


def test_adbc_driver_with_username_and_password(skade_auth_server: SkadeServer) -> None:
    """The driver's basic auth: a Handshake with the token as password (unpadded
    base64), then the bearer header skade returns on every call."""
    login = {"username": "anyone", "password": skade_auth_server.token}
    with flightsql.connect(skade_auth_server.flight_uri, db_kwargs=login, autocommit=False) as conn:
        with conn.cursor() as cur:
            cur.adbc_ingest("basic", people(3), mode="create_append", db_schema_name="adbc")
        conn.commit()
    client = flight.FlightClient(skade_auth_server.flight_uri)
    assert read(client, ["adbc", "basic"], bearer(skade_auth_server.token)).num_rows == 3
    wrong = {"username": "anyone", "password": "not-the-token"}
    with pytest.raises(adbc_driver_manager.Error, match="(?i)unauthenticated|bearer token"):
        flightsql.connect(skade_auth_server.flight_uri, db_kwargs=wrong).close()


def test_sighup_rereads_the_token_file(skade_auth_server: SkadeServer) -> None:
    client = flight.FlightClient(skade_auth_server.flight_uri)
    with pytest.raises(flight.FlightUnauthenticatedError):
        list(client.list_flights(options=bearer(NEW_TOKEN)))
    skade_auth_server.token_file.write_text(f"{skade_auth_server.token}\n{NEW_TOKEN}\n")
    skade_auth_server.process.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while True:
        try:
            list(client.list_flights(options=bearer(NEW_TOKEN)))
            break
        except flight.FlightUnauthenticatedError:
            assert time.monotonic() < deadline, "SIGHUP did not re-read the token file"
            time.sleep(0.05)
    # The old token still works.
    list(client.list_flights(options=bearer(skade_auth_server.token)))


def test_tls_with_the_root_certificate(skade_tls_server: SkadeServer) -> None:
    assert skade_tls_server.flight_uri.startswith("grpc+tls://localhost:")
    client = flight.FlightClient(
        skade_tls_server.flight_uri, tls_root_certs=skade_tls_server.tls_root_certs
    )
    options = bearer(skade_tls_server.token)
    with pytest.raises(flight.FlightUnauthenticatedError):
        put(client, ["tls", "t"], people())
    put(client, ["tls", "t"], people(8), options)
    assert read(client, ["tls", "t"], options).num_rows == 8

    untrusting = flight.FlightClient(skade_tls_server.flight_uri)
    with pytest.raises(flight.FlightUnavailableError):
        list(untrusting.list_flights(options=options))


def test_no_token_in_the_debug_log(skade_auth_server: SkadeServer) -> None:
    log = skade_auth_server.log_path.read_text(errors="replace")
    assert "unauthenticated" in log  # the refusals above were logged...
    for token in (skade_auth_server.token, NEW_TOKEN, "not-the-token", "wrong-token"):
        assert token not in log, f"{token!r} appears in the server log"
