"""{{ cookiecutter.exporter_class }}: one SQLite table per stream, in one database file.

Select it in TraceML with ``{{ cookiecutter.package_name }}.exporter:make_exporter``.

The database is ``<export_dir>/records.sqlite3`` (``export_dir`` is
``<session_root>/aggregator/export``), in WAL mode so readers never block the
exporter. Each stream gets the table ``"<STREAM>"`` with one column per name of
the record's ``COLUMNS`` (after a leading ``schema_version``), created when
the first record of that stream arrives; ``hostname`` is left out unless
``context.include_hostname``. Values are stored as they are (the columns have
no type affinity, so 0 stays 0, 0.0 stays 0.0 and None stays NULL), except a
map or list such as StepTimeRecord's ``events``, which is stored as JSON text
in a column declared ``TEXT``. ``ROW_ID`` (an ``INTEGER PRIMARY KEY``, so
stable even through ``VACUUM``) numbers the rows in arrival order.
``_export_runs`` gets one row per ``close()``, with ``dropped_batches``.

Transactions: a ``write`` batch is inserted inside a transaction (never row by
row in autocommit); ``flush`` and ``close`` commit it, with
``synchronous=FULL``. If any call fails, the exporter rolls back what was not
committed and closes the connection (TraceML never calls it again). So the
database holds exactly what TraceML counts as delivered: everything up to the
last good flush.

The rules of TraceML's export contract this class keeps:

* the factory only stores settings; the connection is created in ``open()``,
  on the export worker's thread (a sqlite3 connection refuses any other thread);
* records are told apart by ``record.STREAM``, never by their class;
* ``close(*, dropped_batches=0)`` commits what was written and closes the connection;
* a failure is raised, not hidden: the worker then stops using the exporter
  (it never calls ``close``), so the failing method first rolls back and
  closes, and TraceML records the loss in ``finalization_warning.json``.
"""

from __future__ import annotations

import contextlib
import json
import operator
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._contract import ExporterContext, ExportRecord

__all__ = [
    "DATABASE_FILE",
    "ROW_ID",
    "RUNS_TABLE",
    "{{ cookiecutter.exporter_class }}",
    "make_exporter",
    "read_export",
]

DATABASE_FILE = "records.sqlite3"
RUNS_TABLE = "_export_runs"
"""One row per ``close()``: ``closed_unix_ns``, ``dropped_batches``, ``written_records`` (JSON)."""

ROW_ID = "_row_id"
"""First column of every stream table: arrival order (the rowid; never a record field)."""

JSON_TYPE = "TEXT"
"""Declared type of the columns that hold JSON text (maps and lists, e.g. ``events``)."""


def quote(name: str) -> str:
    """Quote a STREAM or column name as an SQL identifier; refuse anything but a plain name."""
    if not name.isidentifier():
        raise ValueError(f"{name!r} is not a plain name; refusing to use it as a table or column")
    return f'"{name}"'


_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), check_circular=False)


def to_json(value: Any) -> str:
    """JSON text for a map or list column; exact for floats and big integers."""
    return _ENCODER.encode(value)


@dataclass(frozen=True, slots=True)
class _Table:
    """How rows of one stream are inserted."""

    columns: tuple[str, ...]
    json_positions: tuple[int, ...]
    insert: str
    values: Callable[[dict[str, Any]], tuple[Any, ...]]
    """``to_dict()`` -> the row's values in column order (an ``operator.itemgetter``)."""


class {{ cookiecutter.exporter_class }}:
    """Insert every record as one row of the table named by its ``record.STREAM``."""

    def __init__(
        self, database: Path, streams: Sequence[str], *, include_hostname: bool = False
    ) -> None:
        # No connection here: the factory runs on another thread than open/write/flush/close.
        self.database = database
        self.streams = tuple(streams)
        self.include_hostname = include_hostname
        self._conn: sqlite3.Connection | None = None
        self._tables: dict[str, _Table] = {}
        self._written: dict[str, int] = {}
        self._state = "new"

    def open(self) -> None:
        """Create the folder and connect; WAL journal, full sync on commit."""
        if self._state != "new":
            raise RuntimeError(f"open() called on a {self._state} exporter")
        self._state = "failed"  # until the connection is ready
        self.database.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level=None: no implicit transactions; BEGIN/COMMIT are explicit below.
        conn = sqlite3.connect(self.database, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(
                f"CREATE TABLE IF NOT EXISTS {quote(RUNS_TABLE)} "
                "(closed_unix_ns INTEGER, dropped_batches INTEGER, written_records TEXT)"
            )
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._state = "open"

    def write(self, records: Sequence[ExportRecord]) -> None:
        """Insert the batch into the open transaction (begun here if none is open)."""
        conn = self._connection("write")
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            tables = self._tables
            rows: dict[str, list[Sequence[Any]]] = {}
            for record in records:
                stream = record.STREAM
                data = record.to_dict()
                table = tables.get(stream)
                if table is None:
                    table = self._prepare(conn, stream, record.COLUMNS, data)
                values: Sequence[Any] = table.values(data)
                if table.json_positions:
                    values = list(values)
                    for position in table.json_positions:
                        values[position] = to_json(values[position])
                batch = rows.get(stream)
                if batch is None:
                    rows[stream] = [values]
                else:
                    batch.append(values)
            for stream, batch in rows.items():
                conn.executemany(tables[stream].insert, batch)
                self._written[stream] = self._written.get(stream, 0) + len(batch)
        except BaseException:
            self._abort()
            raise

    def flush(self) -> None:
        """Commit everything written so far (durably: ``synchronous=FULL``)."""
        conn = self._connection("flush")
        try:
            if conn.in_transaction:
                conn.execute("COMMIT")
        except BaseException:
            self._abort()
            raise

    def close(self, *, dropped_batches: int = 0) -> None:
        """Commit, log this run in ``_export_runs`` and close the connection.

        ``dropped_batches`` is the number of payload batches TraceML's worker
        never handed to ``write``: one count for the whole worker.
        """
        conn = self._connection("close")
        try:
            if not conn.in_transaction:
                conn.execute("BEGIN")
            conn.execute(
                f"INSERT INTO {quote(RUNS_TABLE)} VALUES (?, ?, ?)",  # noqa: S608 - quoted constant
                (time.time_ns(), dropped_batches, to_json(self._written)),
            )
            conn.execute("COMMIT")
            conn.close()
        except BaseException:
            self._abort()
            raise
        self._conn = None
        self._state = "closed"

    def _connection(self, method: str) -> sqlite3.Connection:
        if self._state != "open" or self._conn is None:
            hint = "; call open() first" if self._state == "new" else ""
            raise RuntimeError(f"{method}() called on a {self._state} exporter{hint}")
        return self._conn

    def _abort(self) -> None:
        """After a failure: roll back what was not committed and close the connection.

        TraceML never calls the exporter again, and counts every record since
        the last good flush as failed; rolling back keeps the database equal
        to what it counted as delivered.
        """
        self._state = "failed"
        conn, self._conn = self._conn, None
        self._tables.clear()
        if conn is None:
            return
        with contextlib.suppress(sqlite3.Error):  # the sink may already be broken
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        with contextlib.suppress(sqlite3.Error):
            conn.close()

    def _prepare(
        self,
        conn: sqlite3.Connection,
        stream: str,
        record_columns: Sequence[str],
        sample: dict[str, Any],
    ) -> _Table:
        """Create (or widen) the stream's table from the first record seen of it."""
        kept = (name for name in record_columns if self.include_hostname or name != "hostname")
        columns = ("schema_version", *kept)
        json_positions = tuple(
            i for i, name in enumerate(columns) if isinstance(sample[name], (dict, list))
        )
        declared = [
            f"{quote(name)} {JSON_TYPE}" if i in json_positions else quote(name)
            for i, name in enumerate(columns)
        ]
        table = quote(stream)
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
        getter = operator.itemgetter(*columns)  # at least two columns: always a tuple
        prepared = self._tables[stream] = _Table(columns, json_positions, insert, getter)
        return prepared


def make_exporter(context: ExporterContext) -> {{ cookiecutter.exporter_class }}:
    """The factory TraceML calls as ``factory(context)`` on the aggregator's main thread."""
    return {{ cookiecutter.exporter_class }}(
        context.export_dir / DATABASE_FILE,
        context.streams,
        include_hostname=context.include_hostname,
    )


def read_export(
    database: Path, streams: Iterable[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """Read back what the exporter committed: stream -> its rows as dicts, in arrival order.

    Each dict is the record's ``to_dict()`` as stored (``stream`` from the
    table name, JSON text columns decoded). ``streams`` defaults to every
    stream table; a stream with no table reads as an empty list.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    if not database.exists():
        return {stream: [] for stream in streams or ()}
    conn = sqlite3.connect(f"{database.resolve().as_uri()}?mode=ro", uri=True)
    try:
        if streams is None:
            streams = [
                name
                for (name,) in conn.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
                )
                if name != RUNS_TABLE
            ]
        for stream in streams:
            table = quote(stream)
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            if not info:
                out[stream] = []
                continue
            names = [row[1] for row in info if row[1] != ROW_ID]
            decode = {row[1] for row in info if row[2] == JSON_TYPE}
            columns = ", ".join(map(quote, names))
            rows = conn.execute(f"SELECT {columns} FROM {table} ORDER BY rowid")  # noqa: S608
            out[stream] = [
                {
                    "stream": stream,
                    **{
                        name: json.loads(value) if name in decode and value is not None else value
                        for name, value in zip(names, values, strict=True)
                    },
                }
                for values in rows
            ]
    finally:
        conn.close()
    return out
