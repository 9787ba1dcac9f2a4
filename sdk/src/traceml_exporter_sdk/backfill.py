"""Read a finished run's TraceML SQLite database back into export records.

Each projection table has the contract's layout: the autoincrement ``id`` and
then one column per field of its record, named as the field, except that
``step_time_samples`` stores the events map as JSON text in ``events_json``.
Tables are read one after another in the contract's record-table order, each
in ``id`` order, and every row becomes one record of its class.

Only the tables of the selected streams are read. A table that is not there
is reported as missing and the rest are read; a table that lacks a column is
reported as unreadable (with the columns it lacks) and passed over.

SQLite keeps whatever type a value was given, so every value is coerced exactly
as the payload path coerces the field it came from (``projection.py``): text in
``rank`` is parsed as an identity int is, a REAL ``timestamp_unix_ns`` or a BLOB
``step`` becomes None, ``events_json`` is decoded (integers exact however long)
and normalised as the payload's events map is. A row that cannot become a record
(``events_json`` that is not a JSON object, nested too deep, a missing
``observed_timestamp_unix_ns`` or ``gpu_idx``, an empty ``line``) is counted as a
skipped unit with its table, id and reason; the other rows go on.

The database is opened read-only; nothing is written to it.
"""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from dataclasses import fields as dataclasses_fields
from pathlib import Path
from typing import Any

import orjson

from .fastpath import FloatNCalls
from .fastpath import _events as _normalise_events
from .projection import (
    TABLE_RECORDS,
    _as_str,
    _float,
    _int,
    _opt_int,
    _opt_str,
    _str,
    _time,
)
from .records import RECORD_TYPE_BY_STREAM, RECORD_TYPES, Record, builder

__all__ = [
    "TABLE_BY_STREAM",
    "BackfillError",
    "BadRow",
    "SqliteSource",
    "TablePlan",
    "mark_partial",
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
        build = builder(plan.record_type)
        coercers = _COERCERS[plan.stream]
        exact = _exact_signatures(plan.stream)
        is_step_time = plan.stream == "step_time"
        while True:
            rows = cursor.fetchmany(size)
            if not rows:
                return
            self.rows_read += len(rows)
            records: list[Record] = []
            append = records.append
            for row in rows:
                try:
                    if is_step_time:
                        events = _events(row[-1])
                        if type(events) is str:
                            self._bad(plan.table, row[0], events)
                            continue
                        values = row[1:-1]
                    else:
                        values = row[1:]
                    if tuple(map(type, values)) not in exact or not _bool01_exact(plan, values):
                        values = _coerce(coercers, values)
                    if is_step_time:
                        append(build(*values, events))
                    else:
                        append(build(*values))
                except _UnfitError as exc:
                    self._bad(plan.table, row[0], str(exc))
                except Exception as exc:
                    self._bad(plan.table, row[0], f"cannot be coerced: {type(exc).__name__}")
            yield records

    def _bad(self, table: str, row_id: int, reason: str) -> None:
        self.skipped += 1
        if len(self.bad_rows) < MAX_KEPT:
            self.bad_rows.append(BadRow(table, row_id, reason))

    def close(self) -> None:
        self.connection.close()


def _msgspec_events() -> Callable[[str], dict[str, Any]] | None:
    """With msgspec: text -> the normalised events map, built in C; raises on
    anything the careful decoding below might read differently."""
    try:
        types = importlib.import_module("traceml_exporter_sdk._step_structs")
    except ImportError:
        return None
    decode, to_builtins = types.decode_events, types.to_builtins

    def events(text: str) -> dict[str, Any]:
        value: dict[str, Any] = to_builtins(decode(text))
        if {} in value.values():  # a name with no device is dropped
            value = {name: devices for name, devices in value.items() if devices}
        return value

    return events


_FAST_EVENTS = _msgspec_events()


def _events(text: Any) -> dict[str, Any] | str:
    """The events map, decoded and normalised as the payload path's; else a reason.

    orjson turns an integer past 64 bits into a float; the only integer the map
    keeps is ``n_calls``, so a float there sends the text to ``json``, which keeps
    integers exact (a float field gets the same float either way).
    """
    if _FAST_EVENTS is not None and type(text) is str:
        try:
            return _FAST_EVENTS(text)
        except Exception:  # noqa: S110 - the careful decoding decides
            pass
    if type(text) is not str:
        if type(text) is not bytes:
            return f"events_json is {type(text).__name__}, not JSON text"
        try:
            text = text.decode()
        except UnicodeDecodeError:
            return "events_json is not UTF-8 text"
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return _events_by_json(text)
    if type(value) is not dict:
        return f"events_json is a JSON {type(value).__name__}, not an object"
    try:
        return _normalise_events(value, strict=True)
    except FloatNCalls:
        return _events_by_json(text)


def _events_by_json(text: str) -> dict[str, Any] | str:
    """``json``: NaN and Infinity, which orjson refuses, and exact long integers."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return f"events_json is not valid JSON: {' '.join(str(exc).split())}"
    except RecursionError:
        return "events_json is nested too deeply"
    if type(value) is not dict:
        return f"events_json is a JSON {type(value).__name__}, not an object"
    return _normalise_events(value)


class _UnfitError(Exception):
    """A row that cannot become its record; the message is the reason."""


def _required_int(name: str) -> Callable[[Any], int]:
    def coerce(value: Any) -> int:
        if type(value) is int:
            return value
        raise _UnfitError(f"{name} is {_kind(value)}, not an integer")

    return coerce


def _line(value: Any) -> str:
    line = value if type(value) is str or value is None else _as_str(value)
    if not line:
        raise _UnfitError("line is empty" if line == "" else "line is NULL")
    return line


def _bool01(value: Any) -> int | None:
    """0/1 as stored by the writer; anything else is None (the payload path's _bool01)."""
    return value if type(value) is int and value in (0, 1) else None


def _kind(value: Any) -> str:
    return "NULL" if value is None else type(value).__name__


_IDENTITY = {
    "rank": _opt_int,
    "global_rank": _opt_int,
    "local_rank": _opt_int,
    "world_size": _opt_int,
    "local_world_size": _opt_int,
    "node_rank": _opt_int,
    "pid": _opt_int,
    "hostname": _opt_str,
    "observed_timestamp_unix_ns": _required_int("observed_timestamp_unix_ns"),
    "timestamp_unix_ns": _time,
    "gpu_idx": _required_int("gpu_idx"),
    "gpu_available": _bool01,
    "distributed_initialized": _bool01,
    "line": _line,
}
_BY_HINT: dict[str, Callable[[Any], Any]] = {"int": _int, "float": _float, "str": _str}
_RUNTIME_BEST_EFFORT = {"seq": _opt_int, "topology": _opt_str, "distributed_backend": _opt_str}
_RUNTIME_BEST_EFFORT |= dict.fromkeys(
    ("training_strategy", "strategy_source", "strategy_confidence"), _opt_str
)


def _coercer(stream: str, name: str, hint: str) -> Callable[[Any], Any]:
    """The payload path's coercion of the field ``name`` (``projection.py``)."""
    if stream == "runtime_environment" and name in _RUNTIME_BEST_EFFORT:
        return _RUNTIME_BEST_EFFORT[name]
    if name in _IDENTITY:
        return _IDENTITY[name]
    return _BY_HINT[hint.split(" ")[0]]


def _field_hints(record_type: type[Record]) -> dict[str, str]:
    return {f.name: str(f.type) for f in dataclasses_fields(record_type)}


def _coercers(record_type: type[Record]) -> tuple[Callable[[Any], Any], ...]:
    hints = _field_hints(record_type)
    return tuple(
        _coercer(record_type.STREAM, name, hints[name])
        for name in record_type.COLUMNS
        if name != "events"
    )


_COERCERS: dict[str, tuple[Callable[[Any], Any], ...]] = {
    t.STREAM: _coercers(t) for t in RECORD_TYPES
}
_NONE = type(None)
_EXACT: dict[str, frozenset[tuple[type[Any], ...]]] = {}


def _exact_signatures(stream: str) -> frozenset[tuple[type[Any], ...]]:
    """Column type tuples a row may have to be taken as it is (ints, floats, text as typed).

    Only the all-present and the usual NULL patterns are listed; any other row
    goes through the coercers, which give the same values for these.
    """
    if stream in _EXACT:
        return _EXACT[stream]
    record_type = RECORD_TYPE_BY_STREAM[stream]
    hints = _field_hints(record_type)
    base: list[type[Any]] = []
    nullable: list[bool] = []
    for name in record_type.COLUMNS:
        if name == "events":
            continue
        hint = hints[name]
        base.append({"int": int, "float": float, "str": str}[hint.split(" ")[0]])
        nullable.append("None" in hint and name != "line")
    signatures = {tuple(base)}
    # One NULL at a time, and every nullable column NULL: the shapes real tables have.
    for i, can in enumerate(nullable):
        if can:
            signatures.add(tuple(_NONE if j == i else t for j, t in enumerate(base)))
    signatures.add(tuple(_NONE if can else t for t, can in zip(base, nullable, strict=True)))
    _EXACT[stream] = frozenset(signatures)
    return _EXACT[stream]


def _bool01_exact(plan: TablePlan, values: tuple[Any, ...]) -> bool:
    """A stored 0/1 flag is exact only when it is 0 or 1."""
    for index in _FLAG_INDEXES[plan.stream]:
        if values[index] not in (0, 1, None):
            return False
    return plan.stream != "stdout_stderr" or bool(values[-1])


_FLAG_INDEXES: dict[str, tuple[int, ...]] = {
    t.STREAM: tuple(
        i
        for i, name in enumerate(n for n in t.COLUMNS if n != "events")
        if name in ("gpu_available", "distributed_initialized")
    )
    for t in RECORD_TYPES
}


def _coerce(coercers: tuple[Callable[[Any], Any], ...], values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(coerce(value) for coerce, value in zip(coercers, values, strict=True))


def mark_partial(session_root: Path, reason: str, rows_read: int, rows_total: int) -> Path | None:
    """Record in ``finalization_warning.json`` that a backfill stopped before its end.

    Adds a ``backfill`` block beside the worker's ``export`` block (kept when there
    is one), so a partial export folder can be told from a complete one.
    """
    path = session_root / "aggregator" / "finalization_warning.json"
    try:
        data: dict[str, Any] = orjson.loads(path.read_bytes()) if path.exists() else {}
    except (OSError, orjson.JSONDecodeError):
        data = {}
    if type(data) is not dict:
        data = {}
    data["backfill"] = {
        "partial": True,
        "error": reason,
        "rows_read": rows_read,
        "rows_total": rows_total,
    }
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2))
        os.replace(tmp, path)
    except OSError:
        return None
    return path


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
