"""Pages of a projection table bounded in bytes as well as rows: a run folder's database
is written by another user, and one row of 100 MB (or a page of 25 MB rows) must not
cost the follower what it holds. SQLite's ``SQLITE_LIMIT_LENGTH`` on the connection
makes it refuse to load a value longer than the limit, and a page is read the first of
three ways that holds:

1. *plain*, as before bounds: the page in one statement, with values limited to
   ``min(row, page / rows) / values a row`` bytes, so each row and the page are within
   their bounds whatever they hold. Every page of a well-behaved run is read so, at no extra cost.
2. *sized*, when a value was longer: each row's size comes with it (the bytes of its
   columns declared text and of any text or blob in its other columns, by
   ``octet_length``, which SQLite answers from the record header without loading the
   value; the other columns are looked at only in a row where one holds text or a blob,
   which TraceML never writes), rows are taken one at a time until the page holds
   ``page`` bytes (the first row always), values limited to ``row`` bytes.
3. *careful*, when a row is over ``row`` bytes: the sizes alone first, then the rows
   that fit, in one read transaction; the others are *skipped* (counted, never loaded).

TraceML 0.5.0 bounds neither a log line nor a step's events (a frame may be 4 GiB), but
what it writes is far under the defaults: 16 MiB a row, 64 MiB a page. Both are
settings (``TRACEML_EXPORTER_MAX_ROW_BYTES``, ``TRACEML_EXPORTER_MAX_PAGE_BYTES``).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import apsw

__all__ = [
    "MAX_PAGE_BYTES",
    "MAX_ROW_BYTES",
    "PAGE_BYTES_ENV",
    "ROW_BYTES_ENV",
    "ByteBounds",
    "Page",
    "PageQueries",
    "page_queries",
    "read_bounded",
]

MAX_ROW_BYTES = 16 << 20
"""A row's text and blob bytes past which it is skipped (16x the suite's 1 MiB text)."""
MAX_PAGE_BYTES = 64 << 20
"""The bytes of values one page holds, the first row aside."""
ROW_BYTES_ENV = "TRACEML_EXPORTER_MAX_ROW_BYTES"
PAGE_BYTES_ENV = "TRACEML_EXPORTER_MAX_PAGE_BYTES"
LEAST_BYTES = 1024
"""The smallest bound accepted (a well-behaved row of TraceML's is a few KiB at most)."""

_TOO_BIG = (apsw.TooBigError, sqlite3.DataError)


@dataclass(frozen=True, slots=True)
class ByteBounds:
    """The bytes a row and a page may hold; a page is never bounded below a row."""

    row: int = MAX_ROW_BYTES
    page: int = MAX_PAGE_BYTES

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> ByteBounds:
        """The bounds the environment sets, else the defaults.

        Raises:
            ValueError: a setting that is not a whole number of bytes of at least 1024.
        """
        environ = os.environ if environ is None else environ
        row = _setting(environ, ROW_BYTES_ENV, MAX_ROW_BYTES)
        page = _setting(environ, PAGE_BYTES_ENV, MAX_PAGE_BYTES)
        return cls(row, max(page, row))


def _setting(environ: Mapping[str, str], name: str, default: int) -> int:
    text = environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        value = 0
    if value < LEAST_BYTES:
        raise ValueError(
            f"{name} must be a whole number of bytes, at least {LEAST_BYTES}, got {text!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class PageQueries:
    """The statements that read one table's pages within bounds."""

    plain: str
    """``SELECT id, <columns> ... WHERE id > ? ORDER BY id LIMIT ?``."""
    values: int
    """Values a row holds (``id`` aside)."""
    sized: str
    """``SELECT id, <columns>, <size> ... WHERE id > ? ORDER BY id LIMIT ?``."""
    sizes: str
    """``SELECT id, <size> ... WHERE id > ? ORDER BY id LIMIT ?``: no value loaded."""
    between: str
    """``SELECT id, <columns> ... WHERE id >= ? AND id <= ? ORDER BY id``."""
    octet: bool = True
    """Sizes come without loading a value, so SQLite may refuse to load one too big."""


def page_queries(
    table: str, select: Sequence[str], text: Sequence[str], other: Sequence[str], *, octet: bool
) -> PageQueries:
    """The statements for ``table`` (quoted) whose select list is ``select``; ``text``
    and ``other`` are its quoted value columns declared text and not. ``octet``: SQLite
    has ``octet_length`` (3.43); an older one measures by ``length(CAST(x AS BLOB))``,
    which loads the value (only a caller's own ``sqlite3`` connection is that old)."""

    def measured(column: str) -> str:
        length = f"octet_length({column})" if octet else f"length(CAST({column} AS BLOB))"
        return f"coalesce({length}, 0)"

    def stored_as_bytes(column: str) -> str:
        return f"CASE WHEN typeof({column}) IN ('text', 'blob') THEN {measured(column)} ELSE 0 END"

    cheap = " + ".join(measured(c) for c in text) or "0"
    exact = cheap
    if other:
        others = " + ".join(map(stored_as_bytes, other))
        exact = f"{exact} + {others}"
        strange = " OR ".join(f"{c} >= ''" for c in other)  # text and blobs sort after numbers
        cheap = f"{cheap} + CASE WHEN {strange} THEN {others} ELSE 0 END"
    columns = ", ".join(select)
    return PageQueries(
        plain=f"SELECT {columns} FROM {table} WHERE id > ? ORDER BY id LIMIT ?",  # noqa: S608
        values=len(select) - 1,
        sized=f"SELECT {columns}, {cheap} FROM {table} WHERE id > ? ORDER BY id LIMIT ?",  # noqa: S608
        sizes=f"SELECT id, {exact} FROM {table} WHERE id > ? ORDER BY id LIMIT ?",  # noqa: S608
        between=f"SELECT {columns} FROM {table} WHERE id >= ? AND id <= ? ORDER BY id",  # noqa: S608
        octet=octet,
    )


@dataclass(slots=True)
class Page:
    """What one bounded read gave: the rows, those skipped, and where it ended."""

    rows: list[tuple[Any, ...]] = field(default_factory=list)
    """``(id, *columns)`` of the rows taken, in id order."""
    oversized: list[tuple[int, int]] = field(default_factory=list)
    """``(id, bytes)`` of the rows over the row bound, never loaded."""
    last_id: int = 0
    """The highest id the page covers (taken or skipped); 0 for an empty page."""
    cut: bool = False
    """The page ended on its byte bound: more rows may follow at once."""

    @property
    def covered(self) -> int:
        return len(self.rows) + len(self.oversized)


class _OversizedError(Exception):
    """A row over the row bound: the page is read again the careful way."""


def read_bounded(
    connection: Any, queries: PageQueries, after: int, limit: int, bounds: ByteBounds
) -> Page:
    """The rows after id ``after``, at most ``limit`` of them and ``bounds.page`` bytes
    (the first row always), each at most ``bounds.row`` bytes.

    The connection's value limit is as it was after (other statements on it, such as
    the table plans, read longer text than a page's values may hold).

    Raises:
        apsw.Error, sqlite3.DatabaseError: SQLite failed while reading.
    """
    before = _limit_values(connection, -1) if queries.octet else None  # -1: only asks
    try:
        values = max(1, queries.values)
        small = min(bounds.row, bounds.page // max(1, limit)) // values
        if before is not None and _limit_values(connection, max(1, small)) is not None:
            try:
                return _plain(connection, queries, after, limit)
            except _TOO_BIG:
                pass
        if before is not None:
            _limit_values(connection, bounds.row)
        try:
            return _sized(connection, queries, after, limit, bounds)
        except (_OversizedError, *_TOO_BIG):
            return _careful(connection, queries, after, limit, bounds)
    finally:
        if before is not None:
            _limit_values(connection, before)


def _limit_values(connection: Any, most: int) -> int | None:
    """Set the longest value SQLite loads (apsw's ``limit``, sqlite3's ``setlimit``;
    a negative ``most`` leaves it): the limit it had, or None when the connection
    cannot say."""
    setter = getattr(connection, "limit", None) or getattr(connection, "setlimit", None)
    if setter is None:
        return None
    try:
        return int(setter(apsw.SQLITE_LIMIT_LENGTH, most))
    except Exception:
        return None


def _plain(connection: Any, queries: PageQueries, after: int, limit: int) -> Page:
    """The page whole, as before bounds, when no value in it is over the limit set
    (SQLite refuses to load one that is): such rows and their page are within bounds
    whatever they hold, and cost nothing more to read."""
    rows = connection.execute(queries.plain, (after, limit)).fetchall()
    return Page(rows, last_id=rows[-1][0] if rows else 0)


def _sized(
    connection: Any, queries: PageQueries, after: int, limit: int, bounds: ByteBounds
) -> Page:
    """One statement, rows taken until the page is full; its read transaction ends here
    (the statement is closed when cut short)."""
    cursor = connection.execute(queries.sized, (after, limit))
    page = Page()
    rows = page.rows
    append = rows.append
    total, row_bound, page_bound = 0, bounds.row, bounds.page
    try:
        for row in cursor:
            size = row[-1]
            if size > row_bound:
                raise _OversizedError
            total += size
            if total > page_bound and rows:
                page.cut = True
                break
            append(row[:-1])
    finally:
        _close(cursor)
    if rows:
        page.last_id = rows[-1][0]
    return page


def _careful(
    connection: Any, queries: PageQueries, after: int, limit: int, bounds: ByteBounds
) -> Page:
    """The sizes first (no value loaded), then the rows that fit, a run of ids at a time,
    all in one read transaction: the rows read are the rows measured."""
    page = Page()
    with _read_transaction(connection):
        sizes = connection.execute(queries.sizes, (after, limit)).fetchall()
        total = 0
        runs: list[list[int]] = []
        run: list[int] = []
        for row_id, size in sizes:
            if size > bounds.row:
                page.oversized.append((row_id, size))
                if run:
                    runs.append(run)
                    run = []
                page.last_id = row_id
                continue
            total += size
            if total > bounds.page and (page.oversized or runs or run):
                page.cut = True
                break
            if not run:
                run = [row_id, row_id]
            run[1] = row_id
            page.last_id = row_id
        if run:
            runs.append(run)
        for first, last in runs:
            page.rows.extend(connection.execute(queries.between, (first, last)).fetchall())
    return page


@contextlib.contextmanager
def _read_transaction(connection: Any) -> Iterator[None]:
    """One snapshot for the statements inside; none begun when a transaction is open
    already (a caller's own ``sqlite3`` connection in its default mode)."""
    try:
        connection.execute("BEGIN")
    except (apsw.Error, sqlite3.Error):
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(apsw.Error, sqlite3.Error):
            connection.execute("COMMIT")


def _close(cursor: Any) -> None:
    close = getattr(cursor, "close", None)
    if close is not None:
        with contextlib.suppress(Exception):
            close()
