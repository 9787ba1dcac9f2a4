"""The SDK's throwaway PostgreSQL test peer: it starts, serves, breaks on request and cleans up."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import psycopg
import pytest
from traceml_exporter_sdk.testing.peers import postgres_server as peer  # monkeypatched
from traceml_exporter_sdk.testing.postgres_server import (
    HOW_TO_GET_A_SERVER,
    PostgresServer,
    PostgresUnavailableError,
    postgres_server,
)

pytestmark = pytest.mark.skipif(
    peer.find_bindir() is None and os.environ.get("TRACEML_EXPORTER_REQUIRE_POSTGRES") != "1",
    reason=f"no PostgreSQL server binaries here; {HOW_TO_GET_A_SERVER}",
)


@pytest.fixture
def no_libpq_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """A throwaway cluster is started only when PGHOST/PGSERVICE name no server."""
    for key in ("PGHOST", "PGSERVICE", "PGPORT", "PGUSER", "PGDATABASE"):
        monkeypatch.delenv(key, raising=False)


@pytest.fixture
def server(no_libpq_env: None) -> Iterator[PostgresServer]:
    del no_libpq_env
    with postgres_server() as started:
        yield started


def _refused(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(2)
        return probe.connect_ex(("127.0.0.1", port)) != 0


def test_a_cluster_on_127_0_0_1_as_an_unprivileged_user(server: PostgresServer) -> None:
    assert server.owned
    assert server.host == "127.0.0.1"
    assert server.port is not None
    rows = server.execute("SELECT current_setting('listen_addresses'), current_user")
    assert rows == [("127.0.0.1", "postgres")]
    assert server._data is not None
    owner = (server._data / "PG_VERSION").stat().st_uid
    if os.geteuid() == 0:
        assert owner != 0, "initdb refuses root: the cluster must belong to another user"
    with psycopg.connect(**server.conninfo_kwargs()) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_env_points_libpq_at_it(server: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    with psycopg.connect("") as conn:
        assert conn.info.port == server.port


def test_terminate_kills_the_named_backends_only(server: PostgresServer) -> None:
    victim = psycopg.connect(**server.conninfo_kwargs(application_name="victim"))
    bystander = psycopg.connect(**server.conninfo_kwargs(application_name="bystander"))
    try:
        assert server.terminate("victim") == 1
        with pytest.raises(psycopg.OperationalError):
            victim.execute("SELECT 1")
        assert bystander.execute("SELECT 1").fetchone() == (1,)
    finally:
        victim.close()
        bystander.close()


def test_stop_and_start_again_on_the_same_port(server: PostgresServer) -> None:
    assert server.port is not None
    server.stop()
    assert _refused(server.port)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(**server.conninfo_kwargs(connect_timeout=2))
    server.start()
    assert server.execute("SELECT 1") == [(1,)]


def test_everything_is_gone_after_the_block(no_libpq_env: None) -> None:
    del no_libpq_env
    with postgres_server() as server:
        assert server._data is not None
        folder = server._data.parent
        port = server.port
    assert port is not None
    assert not folder.exists()
    assert _refused(port)


def test_an_existing_server_named_by_pghost_is_used_as_is(
    server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in server.env().items():
        monkeypatch.setenv(key, value)
    with postgres_server() as existing:
        assert not existing.owned
        assert existing.execute("SELECT current_setting('port')") == [(str(server.port),)]
        with pytest.raises(PostgresUnavailableError, match="only a throwaway cluster"):
            existing.stop()
    assert server.execute("SELECT 1") == [(1,)]  # left running


def test_no_binaries_and_no_server_says_how_to_get_one(
    no_libpq_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    del no_libpq_env
    monkeypatch.setattr(peer, "find_bindir", lambda: None)
    server = postgres_server()
    with pytest.raises(PostgresUnavailableError, match="apt-get install postgresql"):
        server.__enter__()
