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

import json
import os
import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
from psycopg import sql
from traceml_exporter_sdk import ExporterContext
from traceml_exporter_sdk.testing.fault_proxy import TcpFaultProxy, unused_port
from traceml_exporter_sdk.testing.postgres_server import (
    PostgresServer,
    PostgresUnavailableError,
    postgres_server,
)

from traceml_exporter_example._postgres_schema import SINK_COLUMNS, restore_exact
from traceml_exporter_example.exporter import (
    APPLICATION_NAME,
    CONNECT_TIMEOUT_S,
    CONNINFO_ENV,
    RECEIPT_FILE,
)

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
    """Every test starts and ends with a reachable database that takes rows, and no override
    of the conninfo."""
    yield
    os.environ.pop(CONNINFO_ENV, None)
    postgres.refuse_connections(False)
    _accept_rows(postgres)


def proxy_to(server: PostgresServer) -> TcpFaultProxy:
    """The SDK's TCP fault proxy in front of ``server``: ``stall()`` it, or lose the answer
    to a COMMIT with ``lose_answer_after(b"COMMIT")``."""
    return TcpFaultProxy(int(server.port or 5432), server.host or "127.0.0.1")


# -- the sink interface the shared conformance test uses ----------------------------------


def read_export(
    context: ExporterContext, *, conninfo: str | None = None, streams: Iterable[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """What the exporters of this run committed: stream -> rows as dicts, in arrival order.

    The runs are the ones listed in ``<export_dir>/postgres_runs.jsonl``; each
    dict is the record's ``to_dict()`` as stored (exact values restored from
    ``_exact``; ``hostname`` only with ``context.include_hostname``).
    """
    wanted = list(context.streams if streams is None else streams)
    out: dict[str, list[dict[str, Any]]] = {stream: [] for stream in wanted}
    receipt = context.export_dir / RECEIPT_FILE
    if not receipt.exists():
        return out
    runs: dict[str, list[str]] = {}
    for line in receipt.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        runs.setdefault(entry["schema"], []).append(entry["run_id"])
    info = os.environ.get(CONNINFO_ENV, "") if conninfo is None else conninfo
    with psycopg.connect(info, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S) as conn:
        for schema, run_ids in runs.items():
            for stream in wanted:
                out[stream].extend(_read_stream(conn, schema, stream, run_ids, context))
    return out


def _read_stream(
    conn: psycopg.Connection[Any],
    schema: str,
    stream: str,
    run_ids: list[str],
    context: ExporterContext,
) -> list[dict[str, Any]]:
    names = [
        name
        for (name,) in conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position",
            (schema, stream),
        )
        if name not in SINK_COLUMNS and (context.include_hostname or name != "hostname")
    ]
    if not names:
        return []
    query = sql.SQL("SELECT _exact, {} FROM {}.{} WHERE _run_id = ANY(%s) ORDER BY _row_id").format(
        sql.SQL(", ").join(map(sql.Identifier, names)),
        sql.Identifier(schema),
        sql.Identifier(stream),
    )
    rows: list[dict[str, Any]] = []
    for exact, *values in conn.execute(query, (run_ids,)):
        row = {"stream": stream, **dict(zip(names, values, strict=True))}
        rows.append(restore_exact(row, exact))
    if not context.include_hostname:
        for row in rows:
            row.pop("hostname", None)
    return rows


def break_sink(context: ExporterContext) -> None:
    """Kill the exporter's backend and let no new connection into the database."""
    del context
    (database,) = _ACTIVE
    database.refuse_connections()
    database.kill_exporters()


def repair_sink(context: ExporterContext) -> None:
    """Let connections into the database again."""
    del context
    (database,) = _ACTIVE
    database.refuse_connections(False)


_REFUSE = "traceml_test_refuses_rows"
"""The constraint ``break_sink_permanently`` adds: a schema that refuses every new row."""


def _exporter_tables(database: Database) -> list[tuple[str, str]]:
    """Every table with the exporter's ``_run_id`` column (its stream tables)."""
    rows = database.execute(
        "SELECT c.table_schema, c.table_name FROM information_schema.columns c "
        "JOIN information_schema.tables t USING (table_schema, table_name) "
        "WHERE c.column_name = '_run_id' AND t.table_type = 'BASE TABLE'"
    )
    return [(schema, table) for schema, table in rows or ()]


def break_sink_permanently(context: ExporterContext) -> None:
    """Change every table the exporter writes to a schema that refuses every new row (a
    ``CHECK (false)`` constraint, SQLSTATE 23514): a schema the sink refuses."""
    del context
    (database,) = _ACTIVE
    for schema, table in _exporter_tables(database):
        database.execute(
            sql.SQL("ALTER TABLE {}.{} ADD CONSTRAINT {} CHECK (false) NOT VALID").format(
                sql.Identifier(schema), sql.Identifier(table), sql.Identifier(_REFUSE)
            )
        )


def _accept_rows(database: Database) -> None:
    """Drop the constraint ``break_sink_permanently`` added, wherever it is."""
    refusing = database.execute(
        "SELECT n.nspname, c.relname FROM pg_constraint k "
        "JOIN pg_class c ON c.oid = k.conrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE k.conname = %s",
        (_REFUSE,),
    )
    for schema, table in refusing or ():
        database.execute(
            sql.SQL("ALTER TABLE {}.{} DROP CONSTRAINT {}").format(
                sql.Identifier(schema), sql.Identifier(table), sql.Identifier(_REFUSE)
            )
        )


def broken_context(context: ExporterContext) -> ExporterContext:
    """The same context, with the exporter pointed at a port where nothing listens.

    (The connection settings are libpq's environment, not the context, so this
    sets ``TRACEML_POSTGRES_CONNINFO``; ``mend_sink`` removes it after the test.)
    """
    os.environ[CONNINFO_ENV] = f"host=127.0.0.1 port={unused_port()}"
    return context
