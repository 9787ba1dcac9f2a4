"""A real PostgreSQL for the tests, and the sink hooks of the conformance suite.

The ``postgres`` fixture (session scope) starts a throwaway cluster with the
SDK's ``postgres_server()`` (``initdb`` + ``pg_ctl`` on a temporary folder, on
127.0.0.1; as an unprivileged user when run as root), or uses the server
``PGHOST``/``PGSERVICE`` names. Either way the tests get a fresh database,
dropped at the end, and libpq's ``PG*`` variables point at it. When no server
can be had the tests skip and say how to get one; with
``TRACEML_EXPORTER_REQUIRE_POSTGRES=1`` (CI) that is an error instead.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from psycopg import sql
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.testing.postgres_server import (
    PostgresServer,
    PostgresUnavailableError,
    postgres_server,
)

from {{ cookiecutter.package_name }} import exporter
from {{ cookiecutter.package_name }}.exporter import APPLICATION_NAME, CONNINFO_ENV

REQUIRE_ENV = "TRACEML_EXPORTER_REQUIRE_POSTGRES"


@dataclass(frozen=True)
class Database:
    """The test database on a running server, and how to break and mend it."""

    server: PostgresServer
    name: str

    def execute(self, query: str | sql.Composable, params: tuple[Any, ...] = ()) -> Any:
        """One statement in the test database, as the server's superuser; its rows (or None)."""
        return self.server.execute(query, params, dbname=self.name)

    def refuse_connections(self, refuse: bool = True) -> None:
        """Let no new connection into the test database (or let them in again)."""
        self.server.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                sql.Identifier(self.name), sql.SQL("false" if refuse else "true")
            )
        )

    def kill_exporters(self) -> int:
        """Terminate every exporter backend (``application_name`` traceml-exporter)."""
        return self.server.terminate(APPLICATION_NAME)


_ACTIVE: list[Database] = []
"""The session's database, once the ``postgres`` fixture made it (for the hooks below)."""


def _start() -> Iterator[PostgresServer]:
    try:
        with postgres_server() as server:
            yield server
    except PostgresUnavailableError as exc:
        message = f"no PostgreSQL server for the tests: {exc}"
        if os.environ.get(REQUIRE_ENV, "").strip() not in {"", "0"}:
            pytest.fail(f"{message} ({REQUIRE_ENV} is set, so this is an error)")
        pytest.skip(message)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Database]:
    """A fresh database on a real server, with ``PG*`` pointing at it for the whole session."""
    for server in _start():
        name = f"traceml_test_{os.getpid()}_{secrets.token_hex(3)}"
        server.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        saved = {key: os.environ.get(key) for key in (*server.env(name), CONNINFO_ENV)}
        os.environ.update(server.env(name))
        os.environ.pop(CONNINFO_ENV, None)
        _ACTIVE.append(Database(server, name))
        try:
            yield _ACTIVE[-1]
        finally:
            _ACTIVE.clear()
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
            server.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture(autouse=True)
def mend_sink(postgres: Database) -> Iterator[None]:
    """Every test starts and ends with a reachable database and no override of the conninfo."""
    yield
    os.environ.pop(CONNINFO_ENV, None)
    postgres.refuse_connections(False)


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (bound, then released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


# -- the sink interface the shared conformance test uses ----------------------------------


def read_export(context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
    """What this context's exporters committed, per stream, read back from the tables."""
    return exporter.read_export(context)


def break_sink(context: ExporterContext) -> None:
    """Kill the exporter's backend and let no new connection into the database."""
    del context
    (database,) = _ACTIVE
    database.refuse_connections()
    database.kill_exporters()


def broken_context(context: ExporterContext) -> ExporterContext:
    """The same context, with the exporter pointed at a port where nothing listens.

    (The connection settings are libpq's environment, not the context, so this
    sets ``TRACEML_POSTGRES_CONNINFO``; ``mend_sink`` removes it after the test.)
    """
    os.environ[CONNINFO_ENV] = f"host=127.0.0.1 port={closed_port()}"
    return context
