"""Read a TraceML SQLite database, finished or live, back into export records.

Two table layouts are read, told apart per table by its columns:

* ``traceml-0.5.0``: what the released TraceML 0.5.0 writes (``recv_ts_ns``
  and ``sample_ts_s`` where the contract has ``observed_timestamp_unix_ns`` and
  ``timestamp_unix_ns``). ``recv_ts_ns`` is the observed stamp; ``sample_ts_s``
  is REAL seconds, so by the contract's rule (only an integer source time is
  kept) ``timestamp_unix_ns`` is None, as the mapper makes it from the float
  seconds 0.5.0 ranks send.
* ``contract``: the autoincrement ``id`` and then one column per field of the
  record, named as the field.

Both keep step_time's events map as JSON text in ``events_json``. Tables are
read one after another in the contract's record-table order, each in ``id``
order, and every row becomes one record of its class (``_bridge.sqlite_rows``).

Reads are short: a page of rows per statement, each statement its own read
transaction, ended before the rows go anywhere, so no snapshot is held while an
exporter runs or the reader sleeps (a snapshot held across a live run's final
checkpoint makes that checkpoint give up). The database is opened read-only;
nothing is written to it.

The database is read through apsw, not the standard library's ``sqlite3``:
``sqlite3`` lets go of the GIL around every column of every row it fetches,
so each row costs about twice as much, and far more while the export worker's
thread wants the GIL too (``docs/follow.md``, "What it costs"). A process must
not open one database file with two SQLite libraries at once (closing one's
file handle drops the other's POSIX locks), so nothing here opens it with
``sqlite3``; a caller may hand ``open_database`` a ``sqlite3`` connection of its
own instead.

AUTOINCREMENT ids are never reused, so a gap in ids is a row deleted before it
was read (TraceML's history retention): such rows are counted as ``pruned``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from .._build.projection import TABLE_RECORDS
from .._export import run_files
from .._export.shown import shown
from ..records import RECORD_TYPES, Record
from .sqlite_connect import (
    DATABASE_ERRORS,
    BackfillError,
    Connection,
    connect_read_only,
)
from .sqlite_pages import ByteBounds, PageQueries, page_queries, read_bounded
from .sqlite_rows import RowConverter

__all__ = [
    "TABLE_BY_STREAM",
    "BadRow",
    "Layout",
    "SqliteSource",
    "TablePlan",
    "mark_partial",
    "no_table_message",
    "open_database",
]

TABLE_BY_STREAM: dict[str, str] = {
    record_type.STREAM: table for table, record_type in TABLE_RECORDS.items()
}
"""STREAM -> the projection table that holds its rows."""

EVENTS_COLUMN = "events_json"
MAX_KEPT = 1000
PAGE_ROWS = 2000
"""Rows per read statement (and per batch handed on)."""

Layout = Literal["contract", "traceml-0.5.0"]

_RENAMED_050 = {"observed_timestamp_unix_ns": "recv_ts_ns", "timestamp_unix_ns": "sample_ts_s"}
"""Contract column -> TraceML 0.5.0's name for it."""


@dataclass(frozen=True, slots=True)
class TablePlan:
    """One table to read: its record class, layout, row count at planning, and the query."""

    stream: str
    table: str
    layout: Layout
    rows: int
    query: str
    """``SELECT id, <columns> ... WHERE id > ? ORDER BY id LIMIT ?``."""
    pages: PageQueries
    """The same, bounded in bytes (``_bridge.sqlite_pages``): what ``read_page`` runs."""


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
    tables of the selected streams, ``unreadable`` the present ones of neither
    layout (table -> the contract's columns it lacks). ``last_id`` is the
    highest id read per table, ``pruned`` the rows found gone (id gaps).
    """

    path: Path
    connection: Connection
    tables: list[TablePlan]
    missing: list[str]
    unreadable: dict[str, list[str]]
    rows_read: int = 0
    skipped: int = 0
    bad_rows: list[BadRow] = field(default_factory=list)
    last_id: dict[str, int] = field(default_factory=dict)
    pruned: dict[str, int] = field(default_factory=dict)
    read: dict[str, int] = field(default_factory=dict)
    """Rows read per table."""
    bounds: ByteBounds = field(default_factory=ByteBounds)
    """The bytes a row and a page may hold; a row over is skipped, never loaded."""
    page_cut: bool = False
    """The last page ended on its byte bound (rows may follow at once)."""
    _converters: dict[str, RowConverter] = field(default_factory=dict)

    @property
    def total_rows(self) -> int:
        return sum(plan.rows for plan in self.tables)

    @property
    def pruned_rows(self) -> int:
        return sum(self.pruned.values())

    @property
    def layouts(self) -> list[Layout]:
        """The layouts of the tables read, each once, in table order."""
        return list(dict.fromkeys(plan.layout for plan in self.tables))

    def batches(self, size: int = PAGE_ROWS) -> Iterator[list[Record]]:
        """Yield the records in batches of at most ``size``, table by table, in id order.

        Raises:
            BackfillError: SQLite failed while reading (a corrupt file).
        """
        for plan in self.tables:
            while True:
                rows, records = self.read_page(plan, size)
                if not rows:
                    break
                yield records

    def read_page(self, plan: TablePlan, size: int = PAGE_ROWS) -> tuple[int, list[Record]]:
        """Read the next ``size`` rows of ``plan`` after ``last_id``, and no more than
        ``bounds`` allows: (rows read, records). A row over ``bounds.row`` is read as
        skipped; ``page_cut`` says the page ended on ``bounds.page``.

        Its statements end here, so does their read transaction.

        Raises:
            BackfillError: SQLite failed while reading.
        """
        after = self.last_id.get(plan.table, 0)
        try:
            page = read_bounded(self.connection, plan.pages, after, size, self.bounds)
        except DATABASE_ERRORS as exc:
            raise BackfillError(f"{self.path}: reading table {plan.table}: {exc}") from None
        self.page_cut = page.cut
        covered = page.covered
        if not covered:
            return 0, []
        last = page.last_id
        gap = last - after - covered
        if gap:
            self.pruned[plan.table] = self.pruned.get(plan.table, 0) + gap
        self.last_id[plan.table] = last
        self.rows_read += covered
        self.read[plan.table] = self.read.get(plan.table, 0) + covered
        converter = self._converters.get(plan.stream)
        if converter is None:
            converter = self._converters[plan.stream] = RowConverter(plan.stream)
        table = plan.table

        def bad(row_id: int, reason: str) -> None:
            self.skipped += 1
            if len(self.bad_rows) < MAX_KEPT:
                self.bad_rows.append(BadRow(table, row_id, reason))

        for row_id, row_bytes in page.oversized:
            bad(row_id, f"{row_bytes:,} bytes, over the row bound of {self.bounds.row:,}")
        return covered, converter.records(page.rows, bad)

    def highest_ids(self) -> dict[str, int]:
        """The highest id each planned table ever gave (``sqlite_sequence``), 0 for none.

        Rows between ``last_id`` and this were deleted before they were read.
        """
        try:
            seqs = dict(self.connection.execute("SELECT name, seq FROM sqlite_sequence").fetchall())
        except DATABASE_ERRORS:
            return {}
        return {plan.table: int(seqs.get(plan.table) or 0) for plan in self.tables}

    def lowest_ids(self) -> dict[str, int | None]:
        """The lowest id left in each planned table (None: empty), each one short
        statement: rows after ``last_id`` and below it were deleted before they were read.

        Raises:
            BackfillError: SQLite failed while reading.
        """
        out: dict[str, int | None] = {}
        for plan in self.tables:
            try:
                query = f"SELECT min(id) FROM {_quote(plan.table)}"  # noqa: S608
                row = self.connection.execute(query).fetchone()
            except DATABASE_ERRORS as exc:
                raise BackfillError(f"{self.path}: reading table {plan.table}: {exc}") from None
            out[plan.table] = None if row is None or row[0] is None else int(row[0])
        return out

    def count_tail_pruned(self) -> int:
        """Add the rows deleted after the last one read (no later row shows the gap)."""
        added = 0
        for table, highest in self.highest_ids().items():
            gap = highest - self.last_id.get(table, 0)
            if gap > 0:
                self.pruned[table] = self.pruned.get(table, 0) + gap
                self.last_id[table] = highest
                added += gap
        return added

    def close(self) -> None:
        self.connection.close()


def mark_partial(session_root: Path, reason: str, rows_read: int, rows_total: int) -> Path | None:
    """Record in ``finalization_warning.json`` that a backfill stopped before its end.

    Adds a ``backfill`` block beside the worker's ``export`` block (kept when there
    is one), so a partial export folder can be told from a complete one.
    """
    return add_warning_block(
        session_root,
        "backfill",
        {"partial": True, "error": shown(reason), "rows_read": rows_read, "rows_total": rows_total},
    )


def add_warning_block(session_root: Path, name: str, block: dict[str, Any]) -> Path | None:
    """Set ``name`` in ``<session_root>/aggregator/finalization_warning.json``, keeping the rest."""
    path = session_root / "aggregator" / "finalization_warning.json"
    try:
        data: Any = orjson.loads(run_files.read_file(path, root=session_root))
    except (OSError, orjson.JSONDecodeError):
        data = {}
    if type(data) is not dict:
        data = {}
    data[name] = block
    try:
        run_files.write_json(path, data, root=session_root)
    except OSError:
        return None
    return path


def no_table_message(source: SqliteSource, streams: Iterable[str]) -> str:
    """The one line for a database with no readable table of the selected streams."""
    problems = source.missing + [
        f"{table} (lacks columns {', '.join(cols)})" for table, cols in source.unreadable.items()
    ]
    message = (
        f"{source.path} has no readable table of the selected streams ({', '.join(streams)}): "
        f"{', '.join(problems)}"
    )
    if source.unreadable:
        message += (
            "; readable are TraceML 0.5.0's table layout (recv_ts_ns, sample_ts_s) and the "
            "export contract's (observed_timestamp_unix_ns, timestamp_unix_ns)"
        )
    return message


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _select(columns: list[str], layout: Layout) -> list[str]:
    """The select list giving the record's columns from a table of ``layout``."""
    if layout == "contract":
        return [_quote(EVENTS_COLUMN if c == "events" else c) for c in columns]
    out = []
    for name in columns:
        if name == "events":
            out.append(_quote(EVENTS_COLUMN))
        elif name == "timestamp_unix_ns":
            # REAL seconds: only an integer source time is kept, so this is NULL
            # unless another writer stored an integer there.
            ts = _quote(_RENAMED_050[name])
            out.append(f"CASE WHEN typeof({ts}) = 'integer' THEN {ts} END")
        else:
            out.append(_quote(_RENAMED_050.get(name, name)))
    return out


def _plan_table(
    connection: Connection, record_type: type[Record], table: str, *, octet: bool
) -> TablePlan | list[str]:
    """The plan for ``table``, or the contract's columns it lacks (a layout of neither kind)."""
    have = {row[1] for row in connection.execute(f"PRAGMA table_info({_quote(table)})")}
    fields = list(record_type.COLUMNS)
    wanted = ["id", *(EVENTS_COLUMN if c == "events" else c for c in fields)]
    lacking = [name for name in wanted if name not in have]
    layout: Layout = "contract"
    if lacking and {"recv_ts_ns", "sample_ts_s"} <= have:
        old = [_RENAMED_050.get(name, name) for name in wanted]
        if all(name in have for name in old):
            layout, lacking = "traceml-0.5.0", []
    if lacking:
        return lacking
    # Table and column names are the records' own, quoted; no user text.
    (count,) = connection.execute(f"SELECT count(*) FROM {_quote(table)}").fetchone()  # noqa: S608
    select = ["id", *_select(fields, layout)]
    columns = ", ".join(select)
    query = f"SELECT {columns} FROM {_quote(table)} WHERE id > ? ORDER BY id LIMIT ?"  # noqa: S608
    hints = {f.name: str(f.type) for f in dataclasses.fields(record_type)}
    text: list[str] = []
    other: list[str] = []
    for name in fields:
        stored = _quote(_stored_name(name, layout))
        (text if name == "events" or hints[name].startswith("str") else other).append(stored)
    pages = page_queries(_quote(table), select, text, other, octet=octet)
    return TablePlan(record_type.STREAM, table, layout, count, query, pages)


def _stored_name(field_name: str, layout: Layout) -> str:
    if field_name == "events":
        return EVENTS_COLUMN
    return field_name if layout == "contract" else _RENAMED_050.get(field_name, field_name)


def _has_octet_length(connection: Connection) -> bool:
    """SQLite 3.43 or later: a value's bytes are known without loading it."""
    try:
        connection.execute("SELECT octet_length('')").fetchall()
    except DATABASE_ERRORS:
        return False
    return True


def open_database(
    path: Path, streams: tuple[str, ...], connection: Connection | None = None
) -> SqliteSource:
    """Open ``path`` read-only and plan the tables of ``streams`` (STREAM names).

    Raises:
        BackfillError: the file is missing, unreadable, or not a SQLite database.
    """
    if connection is None:
        connection = connect_read_only(path)
    try:
        bounds = ByteBounds.from_environment()
    except ValueError as exc:
        connection.close()
        raise BackfillError(str(exc)) from None
    source = SqliteSource(path, connection, [], [], {}, bounds=bounds)
    try:
        plan_tables(source, streams)
    except BackfillError:
        connection.close()
        raise
    return source


def plan_tables(source: SqliteSource, streams: tuple[str, ...]) -> None:
    """(Re)plan the selected streams' tables of ``source``: a live database may still
    be creating them. Tables already planned keep their plan.

    Raises:
        BackfillError: the file cannot be read as a SQLite database.
    """
    connection = source.connection
    planned = {plan.table: plan for plan in source.tables}
    try:
        present = {
            row[0]
            for row in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        }
        tables: list[TablePlan] = []
        missing: list[str] = []
        unreadable: dict[str, list[str]] = {}
        selected = set(streams)
        octet = _has_octet_length(connection)
        for record_type in RECORD_TYPES:
            if record_type.STREAM not in selected:
                continue
            table = TABLE_BY_STREAM[record_type.STREAM]
            if table in planned:
                tables.append(planned[table])
                continue
            if table not in present:
                missing.append(table)
                continue
            plan = _plan_table(connection, record_type, table, octet=octet)
            if isinstance(plan, list):
                unreadable[table] = plan
            else:
                tables.append(plan)
    except DATABASE_ERRORS as exc:
        raise BackfillError(f"{source.path} cannot be read as a SQLite database: {exc}") from None
    source.tables, source.missing, source.unreadable = tables, missing, unreadable
