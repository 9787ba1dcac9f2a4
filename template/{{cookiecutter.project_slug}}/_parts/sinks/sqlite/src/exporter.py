"""ExampleExporter: one SQLite table per stream, in one database file.

Select it in TraceML with ``traceml_exporter_example.exporter:make_exporter``; the
rules of TraceML's export contract it keeps are listed in ``_contract.py``.

The database is ``<export_dir>/records.sqlite3`` in WAL mode, so readers never block
the exporter. Each stream gets the table ``"<STREAM>"``, created from the first record
of that stream (and widened if a later schema adds a field): ``ROW_ID`` (arrival
order), ``schema_version``, then the record's ``COLUMNS``, ``hostname`` left out
unless ``context.include_hostname``. The columns have no type affinity, so values
keep their type (0 stays 0, 0.0 stays 0.0, None stays NULL), except:

* a map or list, such as StepTimeRecord's ``events``, is stored as JSON text (ASCII,
  every other character as a ``\\u`` escape) in a column declared ``TEXT``;
* a ``str`` holding a lone surrogate, which is not UTF-8 and so cannot be SQLite text,
  is stored as a BLOB of its bytes (``encode("utf-8", "surrogatepass")``). No record
  field is ever bytes, so a BLOB always means such a ``str``.

NUL, U+2028 and lines of any length are stored as they are. ``_export_runs`` gets one
row per ``close()``, with ``dropped_batches``.

Each ``write`` batch is inserted inside a transaction; ``flush()`` and ``close()``
commit it, with ``synchronous=FULL``. On any failure the exporter rolls back to the
last commit and closes the connection, so the database holds exactly what TraceML
counts as delivered.
"""

from __future__ import annotations

import contextlib
import json
import operator
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._contract import ExporterContext, ExportRecord, kept_columns, permanent
from ._files import export_folder, refuse_link
from ._lifecycle import Lifecycle

__all__ = [
    "DATABASE_FILE",
    "JSON_TYPE",
    "ROW_ID",
    "RUNS_TABLE",
    "ExampleExporter",
    "make_exporter",
    "quote",
]

DATABASE_FILE = "records.sqlite3"
RUNS_TABLE = "_export_runs"
"""One row per ``close()``: ``closed_unix_ns``, ``dropped_batches``, ``written_records`` (JSON)."""

ROW_ID = "_row_id"
"""First column of every stream table: an ``INTEGER PRIMARY KEY``, so arrival order."""

JSON_TYPE = "TEXT"
"""Declared type of the columns that hold JSON text (maps and lists, e.g. ``events``)."""

_to_json = json.JSONEncoder(separators=(",", ":"), check_circular=False).encode


def quote(name: str) -> str:
    """Quote a STREAM or column name as an SQL identifier; refuse anything but a plain name
    (permanently, ``_contract`` rule 8: the same record is refused again)."""
    if not name.isidentifier():
        raise permanent(
            ValueError(f"{name!r} is not a plain name; refusing to use it as a table or column")
        )
    return f'"{name}"'


def _text(value: str) -> str | bytes:
    """``value`` as SQLite can keep it: a ``str`` that is not UTF-8 becomes its bytes."""
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # a lone surrogate
            return value.encode("utf-8", "surrogatepass")
    return value


@dataclass(frozen=True, slots=True)
class _Table:
    """How rows of one stream are inserted."""

    insert: str
    values: Callable[[dict[str, Any]], tuple[Any, ...]]
    """``to_dict()`` -> the row's values in column order (an ``operator.itemgetter``)."""
    json_positions: tuple[int, ...]


class ExampleExporter(Lifecycle):
    """Insert every record as one row of the table named by its ``record.STREAM``."""

    def __init__(
        self, database: Path, streams: Sequence[str], *, include_hostname: bool = False
    ) -> None:
        # Settings only: open() connects, on the export worker's thread (a sqlite3
        # connection refuses any other thread).
        self.database = database
        self.streams = tuple(streams)
        self.include_hostname = include_hostname
        self._conn: sqlite3.Connection | None = None  # None unless open
        self._tables: dict[str, _Table] = {}
        self._written: dict[str, int] = {}

    def open(self) -> None:
        """Create the folder and connect: WAL journal, full sync on commit."""
        with self._opening():
            export_folder(self.database.parent)  # no planted link, no other user's folder
            for suffix in ("", "-wal", "-shm"):  # SQLite would follow one
                refuse_link(self.database.with_name(self.database.name + suffix))
            # isolation_level=None: no implicit transactions; BEGIN and COMMIT are explicit.
            self._conn = sqlite3.connect(self.database, isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {quote(RUNS_TABLE)} "
                "(closed_unix_ns INTEGER, dropped_batches INTEGER, written_records TEXT)"
            )

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Insert the batch into the open transaction (begun here if none is open)."""
        with self._running("write"):
            conn = self._held(self._conn)
            if not conn.in_transaction:
                conn.execute("BEGIN")
            rows: dict[str, list[list[Any]]] = {}
            for record in records:
                data = record.to_dict()
                table = self._tables.get(record.STREAM) or self._prepare(record, data)
                row = [_text(v) if type(v) is str else v for v in table.values(data)]
                for position in table.json_positions:
                    row[position] = _to_json(row[position])
                rows.setdefault(record.STREAM, []).append(row)
            for stream, batch in rows.items():
                conn.executemany(self._tables[stream].insert, batch)
                self._written[stream] = self._written.get(stream, 0) + len(batch)

    def flush(self) -> None:
        """Commit everything written so far (durably: ``synchronous=FULL``)."""
        with self._running("flush"):
            conn = self._held(self._conn)
            if conn.in_transaction:
                conn.execute("COMMIT")

    def close(self, *, dropped_batches: int = 0) -> None:
        """Commit, log this run in ``RUNS_TABLE`` and close the connection."""
        with self._closing():
            conn = self._held(self._conn)
            if not conn.in_transaction:
                conn.execute("BEGIN")
            conn.execute(
                f"INSERT INTO {quote(RUNS_TABLE)} VALUES (?, ?, ?)",  # noqa: S608 - quoted constant
                (time.time_ns(), dropped_batches, _to_json(self._written)),
            )
            conn.execute("COMMIT")

    def _release(self) -> None:
        """Roll back what was not committed and close, raising nothing.

        After a failure TraceML calls nothing more, and counts every record since the
        last good flush as failed: rolling back keeps the database equal to what it
        counted as delivered.
        """
        conn, self._conn = self._conn, None
        self._tables.clear()
        if conn is None:
            return
        with contextlib.suppress(sqlite3.Error):  # the sink may already be broken
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _prepare(self, record: ExportRecord, sample: dict[str, Any]) -> _Table:
        """Create (or widen) the table of ``record.STREAM`` from its first record."""
        conn = self._held(self._conn)
        kept = kept_columns(record.COLUMNS, self.include_hostname)
        columns = ("schema_version", *kept)
        json_positions = tuple(
            i for i, name in enumerate(columns) if isinstance(sample[name], (dict, list))
        )
        declared = [
            f"{quote(name)} {JSON_TYPE}" if i in json_positions else quote(name)
            for i, name in enumerate(columns)
        ]
        table = quote(record.STREAM)
        conn.execute(
            f"CREATE TABLE IF NOT EXISTS {table} "
            f"({quote(ROW_ID)} INTEGER PRIMARY KEY, {', '.join(declared)})"
        )
        existing = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, declaration in zip(columns, declared, strict=True):
            if name not in existing:  # a later schema added a field
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {declaration}")
        names = ", ".join(map(quote, columns))
        placeholders = ", ".join("?" * len(columns))
        insert = f"INSERT INTO {table} ({names}) VALUES ({placeholders})"  # noqa: S608 - quoted names
        values = operator.itemgetter(*columns)  # at least two columns: always a tuple
        prepared = self._tables[record.STREAM] = _Table(insert, values, json_positions)
        return prepared


def make_exporter(context: ExporterContext) -> ExampleExporter:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    return ExampleExporter(
        context.export_dir / DATABASE_FILE,
        context.streams,
        include_hostname=context.include_hostname,
    )
