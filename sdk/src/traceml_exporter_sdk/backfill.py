"""Read a finished run's TraceML SQLite database back into export records.

Each projection table has the contract's layout: the autoincrement ``id`` and
then one column per field of its record, named as the field, except that
``step_time_samples`` stores the events map as JSON text in ``events_json``.
Tables are read one after another in the contract's record-table order, each
in ``id`` order, and every row becomes one record of its class.

Only the tables of the selected streams are read. A table that is not there
is reported as missing and the rest are read; a table that lacks a column is
reported as unreadable (with the columns it lacks) and passed over. A row
whose ``events_json`` is not a JSON object does not fit its record: it is
counted as a skipped unit and its table and id are kept.

The database is opened read-only; nothing is written to it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .projection import TABLE_RECORDS
from .records import RECORD_TYPES, Record

__all__ = [
    "TABLE_BY_STREAM",
    "BackfillError",
    "BadRow",
    "SqliteSource",
    "TablePlan",
    "open_database",
]

TABLE_BY_STREAM: dict[str, str] = {
    record_type.STREAM: table for table, record_type in TABLE_RECORDS.items()
}
"""STREAM -> the projection table that holds its rows."""

EVENTS_COLUMN = "events_json"
SQLITE_MAGIC = b"SQLite format 3\x00"
MAX_KEPT = 1000


class BackfillError(Exception):
    """The file is not a readable SQLite database; the message says why."""


@dataclass(frozen=True, slots=True)
class TablePlan:
    """One table to read: its record class, its row count and the query."""

    stream: str
    table: str
    record_type: type[Record]
    rows: int
    query: str


@dataclass(frozen=True, slots=True)
class BadRow:
    """A row that does not fit its record."""

    table: str
    row_id: int
    reason: str


@dataclass
class SqliteSource:
    """What ``open_database`` found, and the reader of its records.

    ``tables`` are read in record-table order; ``missing`` lists the absent
    tables of the selected streams, ``unreadable`` the present ones that lack
    columns (table -> the missing columns).
    """

    path: Path
    connection: sqlite3.Connection
    tables: list[TablePlan]
    missing: list[str]
    unreadable: dict[str, list[str]]
    rows_read: int = 0
    skipped: int = 0
    bad_rows: list[BadRow] = field(default_factory=list)

    @property
    def total_rows(self) -> int:
        return sum(plan.rows for plan in self.tables)

    def batches(self, size: int = 2000) -> Iterator[list[Record]]:
        """Yield the records in batches of at most ``size``, table by table, in id order.

        Raises:
            BackfillError: SQLite failed while reading (a corrupt file).
        """
        for plan in self.tables:
            try:
                yield from self._read(plan, size)
            except sqlite3.DatabaseError as exc:
                raise BackfillError(f"{self.path}: reading table {plan.table}: {exc}") from None

    def _read(self, plan: TablePlan, size: int) -> Iterator[list[Record]]:
        cursor = self.connection.execute(plan.query)
        build: Any = plan.record_type
        is_step_time = plan.stream == "step_time"
        while True:
            rows = cursor.fetchmany(size)
            if not rows:
                return
            self.rows_read += len(rows)
            records: list[Record] = []
            append = records.append
            for row in rows:
                if is_step_time:
                    events = _events(row[-1])
                    if isinstance(events, str):
                        self._bad(plan.table, row[0], events)
                        continue
                    append(build(*row[1:-1], events))
                else:
                    append(build(*row[1:]))
            yield records

    def _bad(self, table: str, row_id: int, reason: str) -> None:
        self.skipped += 1
        if len(self.bad_rows) < MAX_KEPT:
            self.bad_rows.append(BadRow(table, row_id, reason))

    def close(self) -> None:
        self.connection.close()


def _events(text: Any) -> dict[str, Any] | str:
    """The decoded events map, or a reason string when it is not a JSON object."""
    if isinstance(text, (str, bytes)):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            try:
                value = json.loads(text)
            except ValueError as exc:
                return f"events_json is not valid JSON: {' '.join(str(exc).split())}"
    else:
        return f"events_json is {type(text).__name__}, not JSON text"
    if not isinstance(value, dict):
        return f"events_json is a JSON {type(value).__name__}, not an object"
    return value


def _columns(record_type: type[Record]) -> list[str]:
    return [EVENTS_COLUMN if name == "events" else name for name in record_type.COLUMNS]


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def open_database(path: Path, streams: tuple[str, ...]) -> SqliteSource:
    """Open ``path`` read-only and plan the tables of ``streams`` (STREAM names).

    Raises:
        BackfillError: the file is missing, unreadable, or not a SQLite database.
    """
    try:
        with path.open("rb") as fh:
            head = fh.read(len(SQLITE_MAGIC))
    except FileNotFoundError:
        raise BackfillError(f"database not found: {path}") from None
    except IsADirectoryError:
        raise BackfillError(f"{path} is a directory, not a SQLite database") from None
    except OSError as exc:
        raise BackfillError(f"cannot read {path}: {exc}") from None
    if head and head != SQLITE_MAGIC:
        raise BackfillError(f"{path} is not a SQLite database")
    try:
        connection = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        present = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
    except sqlite3.DatabaseError as exc:
        raise BackfillError(f"{path} cannot be read as a SQLite database: {exc}") from None
    tables: list[TablePlan] = []
    missing: list[str] = []
    unreadable: dict[str, list[str]] = {}
    selected = set(streams)
    try:
        for record_type in RECORD_TYPES:
            if record_type.STREAM not in selected:
                continue
            table = TABLE_BY_STREAM[record_type.STREAM]
            if table not in present:
                missing.append(table)
                continue
            have = {row[1] for row in connection.execute(f"PRAGMA table_info({_quote(table)})")}
            wanted = ["id", *_columns(record_type)]
            lacking = [name for name in wanted if name not in have]
            if lacking:
                unreadable[table] = lacking
                continue
            # Table and column names are the records' own, quoted; no user text.
            (count,) = connection.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()  # noqa: S608
            columns = ", ".join(map(_quote, wanted))
            query = f"SELECT {columns} FROM {_quote(table)} ORDER BY id"  # noqa: S608
            tables.append(TablePlan(record_type.STREAM, table, record_type, count, query))
    except sqlite3.DatabaseError as exc:
        connection.close()
        raise BackfillError(f"{path} cannot be read as a SQLite database: {exc}") from None
    return SqliteSource(path, connection, tables, missing, unreadable)
