"""A real PostgreSQL server for exporter tests (public path; the code is in ``peers/postgres_server.py``).

Every name of the peer's ``__all__``, re-exported, so
``from traceml_exporter_sdk.testing.postgres_server import ...`` keeps working.
"""

from __future__ import annotations

from .peers.postgres_server import (
    HOW_TO_GET_A_SERVER,
    PostgresServer,
    PostgresUnavailableError,
    find_bindir,
    postgres_server,
)

__all__ = [
    "HOW_TO_GET_A_SERVER",
    "PostgresServer",
    "PostgresUnavailableError",
    "find_bindir",
    "postgres_server",
]
