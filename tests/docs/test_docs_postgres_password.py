"""The unit's way of giving the postgres sink its password works against a real server.

docs/follow.md's unit names libpq's variables (the postgres sink leaves the
connection to libpq) and a password file. Here a throwaway PostgreSQL cluster asks
the unit's ``PGUSER`` for a SCRAM password; with the unit's variables (host and port
pointed at the cluster) and its password file made as the section says (one
``host:port:database:user:password`` line, mode 0600), a connection made as the sink
makes it (``psycopg.connect`` of its empty conninfo) gets in. The same file readable
by the group is ignored by libpq, and the variable the unit used to name
(``PGPASSWORD_FILE``) gets no password at all.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from doc_blocks import ROOT, blocks
from psycopg import sql
from traceml_exporter_sdk.testing.peers import postgres_server as peer

pytestmark = pytest.mark.skipif(
    peer.find_bindir() is None and os.environ.get("TRACEML_EXPORTER_REQUIRE_POSTGRES") != "1",
    reason=f"no PostgreSQL server binaries here; {peer.HOW_TO_GET_A_SERVER}",
)
SECRET = "s3cret:with@odd chars"


def unit_environment() -> dict[str, str]:
    """The ``Environment=`` assignments of docs/follow.md's unit."""
    (unit,) = [b for b in blocks(ROOT / "docs" / "follow.md") if b.language == "ini"]
    out = {}
    for line in unit.text.splitlines():
        if line.startswith("Environment="):
            for word in shlex.split(line.removeprefix("Environment=")):
                key, value = word.split("=", 1)
                out[key] = value
    return out


@pytest.fixture(scope="module")
def server() -> Iterator[peer.PostgresServer]:
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("PG")}
    try:
        with peer.postgres_server() as server:
            yield server
    finally:
        os.environ.update(saved)


def connect_as_the_sink(server: peer.PostgresServer, env: dict[str, str]) -> str:
    """Connect with libpq's environment ``env`` (the cluster's host and port) alone; the
    user the server let in."""
    variables = {**env, "PGHOST": str(server.host), "PGPORT": str(server.port)}
    before = {k: os.environ.get(k) for k in variables}
    os.environ.update(variables)
    try:
        with psycopg.connect("", connect_timeout=10) as conn:
            row = conn.execute("SELECT current_user").fetchone()
            return str(row[0]) if row else ""
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_the_units_password_file_lets_the_sink_in(
    server: peer.PostgresServer, tmp_path: Path
) -> None:
    env = unit_environment()
    assert sorted(k for k in env if "PASS" in k) == ["PGPASSFILE"]
    user, database = env["PGUSER"], env["PGDATABASE"]
    data = server._data
    assert data is not None
    hba = data / "pg_hba.conf"
    hba.write_text(f"host all {user} 127.0.0.1/32 scram-sha-256\n" + hba.read_text())
    server.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(user)))
    server.execute(
        sql.SQL("CREATE DATABASE {} OWNER {}").format(*map(sql.Identifier, (database, user)))
    )
    server.execute("SET password_encryption = 'scram-sha-256'")
    server.execute(
        sql.SQL("ALTER ROLE {} PASSWORD {}").format(sql.Identifier(user), sql.Literal(SECRET))
    )
    server.execute("SELECT pg_reload_conf()")

    escaped = SECRET.replace("\\", "\\\\").replace(":", "\\:")
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{server.host}:{server.port}:{database}:{user}:{escaped}\n")
    passfile.chmod(0o600)
    assert connect_as_the_sink(server, {**env, "PGPASSFILE": str(passfile)}) == user

    passfile.chmod(0o640)
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        connect_as_the_sink(server, {**env, "PGPASSFILE": str(passfile)})

    passfile.chmod(0o600)
    old = {k: v for k, v in env.items() if k != "PGPASSFILE"}
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        connect_as_the_sink(server, {**old, "PGPASSWORD_FILE": str(passfile)})
