"""This sink's part of the shared tests: how to read back what the exporter committed.

``tests/test_conformance.py`` gives ``read_export`` to the SDK's conformance suite
(it turns the data-fidelity checks on). The suite's default ``break_sink`` and
``broken_context`` break this sink (its database lives under ``export_dir``), so
this module defines neither.
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from traceml_exporter_sdk import ExporterContext

from traceml_exporter_example.exporter import DATABASE_FILE, JSON_TYPE, ROW_ID, quote

SKIP_CHECKS = {
    "special_floats": (
        "SQLite stores a NaN as NULL (as TraceML's own telemetry database does), so a "
        "measured NaN reads back as unavailable; -0.0 and the infinities are kept"
    ),
    "permanent_fault_marked": (
        "a file sink has no fault waiting cannot fix (a full disk, a folder moved away or "
        "a file another process holds may all pass), so there is no break_sink_permanently "
        "to check the permanent marker with"
    ),
}
"""The suite's checks this sink cannot pass or run, with the reason (declared limitations)."""


def read_export(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """Each selected stream's committed rows as ``to_dict()`` dicts, in arrival order.

    Read by a connection of its own, so only committed rows are seen. ``stream``
    comes from the table name, JSON text columns are decoded, a BLOB (a ``str`` that
    held a lone surrogate) is decoded back to that ``str``; a stream with no table
    reads as ``[]``.
    """
    database = context.export_dir / DATABASE_FILE
    if not database.exists():
        return {stream: [] for stream in context.streams}
    out: dict[str, list[dict[str, Any]]] = {}
    conn = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)
    try:
        for stream in context.streams:
            info = conn.execute(f"PRAGMA table_info({quote(stream)})").fetchall()
            names = [row[1] for row in info if row[1] != ROW_ID]
            is_json = [row[2] == JSON_TYPE for row in info if row[1] != ROW_ID]
            columns = ", ".join(map(quote, names))
            select = f"SELECT {columns} FROM {quote(stream)} ORDER BY rowid"  # noqa: S608
            rows = conn.execute(select).fetchall() if names else []
            out[stream] = [
                {"stream": stream, **dict(zip(names, map(_decode, row, is_json), strict=True))}
                for row in rows
            ]
    finally:
        conn.close()
    return out


def _decode(stored: Any, is_json: bool) -> Any:
    if isinstance(stored, bytes):
        return stored.decode("utf-8", "surrogatepass")
    if is_json and stored is not None:
        return json.loads(stored)
    return stored
