"""What the shared conformance suite needs from this sink: its export, read back.

``read_export`` reads every Parquet file of a stream with pyarrow, the way a
reader globbing ``<export_dir>/<stream>/*.parquet`` sees them. The suite's
default ``break_sink`` and ``broken_context`` (a regular file where
``export_dir`` should be) fit this sink, so they are not overridden.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import duckdb
from traceml_exporter_sdk import ExporterContext

from traceml_exporter_example.exporter import ExampleExporter
from traceml_exporter_example.exporter import read_export as _read_export

__all__ = ["query", "read_export"]

SKIP_CHECKS = {
    "permanent_fault_marked": (
        "a file sink has no fault waiting cannot fix (a full disk, a folder moved away or "
        "a file another process holds may all pass), so there is no break_sink_permanently "
        "to check the permanent marker with"
    ),
}
"""The suite's checks this sink cannot run, and why (the shared class reads it)."""


def read_export(context: ExporterContext) -> Mapping[str, list[dict[str, Any]]]:
    """What this context's exporter wrote, per selected stream, as record dicts."""
    return _read_export(context.export_dir, context.streams)


def query(sql: str) -> list[dict[str, Any]]:
    """Run ``sql`` in a fresh in-memory DuckDB: its rows as dicts, by column name."""
    with duckdb.connect() as connection:
        cursor = connection.execute(sql)
        names = [column[0] for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def crash_exporter(context: ExporterContext) -> ExampleExporter:
    """The crash driver's exporter: a small part limit, so compactions happen all the time."""
    return ExampleExporter(context.export_dir, part_limit=3)
