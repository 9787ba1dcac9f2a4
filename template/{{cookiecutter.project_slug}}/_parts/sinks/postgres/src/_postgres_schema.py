"""Tables, column types and the value rules of the PostgreSQL exporter.

Each stream's table holds the record's ``COLUMNS`` with a type that holds
every value a record carries: integers as ``bigint`` (19-digit nanosecond
timestamps fit up to the year 2262), measurements as ``double precision``,
text as ``text``, the events map (and any column this version does not know)
as ``jsonb``. Around them, sink columns: ``_row_id`` (arrival order),
``_run_id`` and ``_session_root`` (which run wrote the row) and ``_exact``.

A value its column cannot hold is stored as close as the column allows, and
its exact value goes into ``_exact`` (``{column: exact JSON text}``), from
which ``read_export`` restores it:

* an integer outside ``bigint`` (or a non-integer in an integer column): NULL;
* a NUL character or an unpaired surrogate in text: replaced by U+FFFD;
* in the events map, the same for its strings, and NaN/Infinity become null;
  a float of 1e16 or more is kept as the number jsonb makes of it, which reads
  back as an integer of the same value (so its exact form goes to ``_exact``);
* an integer beyond 2**53 in a ``double precision`` column: the nearest float;
* anything else the column cannot hold (a string in a number column): NULL.

Rows travel as ``COPY ... (FORMAT BINARY)`` when every column has a type of this
module's own (``binary_types``): numbers then cross as 8 bytes, with no text to
print or parse on either side (twice the rows/s on a table of numbers), and the
JSON text orjson made goes as it is (``register_binary_dumpers``). A table kept
from an older version with another type (``numeric``, say) gets text COPY. A
``numeric(p,s)`` integer column that cannot hold every bigint exactly (a negative
scale, or fewer than 19 digits left of the point) is refused, not used.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

import orjson
from psycopg import Cursor, postgres, sql
from psycopg.abc import AdaptContext
from psycopg.adapt import Dumper
from psycopg.errors import DatatypeMismatch
from psycopg.pq import Format

from ._contract import kept_columns

__all__ = [
    "ROW_ID",
    "SINK_COLUMNS",
    "STREAM_COLUMNS",
    "UNIQUE_VIEW_SUFFIX",
    "Layout",
    "binary_types",
    "column_type",
    "ensure_table",
    "layout_for",
    "register_binary_dumpers",
    "restore_exact",
]

ROW_ID = "_row_id"
RUN_ID = "_run_id"
SESSION_ROOT = "_session_root"
EXACT = "_exact"
SINK_COLUMNS = (ROW_ID, RUN_ID, SESSION_ROOT, EXACT)
"""Columns the exporter adds to every stream table; never record fields."""

UNIQUE_VIEW_SUFFIX = "_unique"
"""``<stream>_unique``: one row per stream key and session (the first to arrive)."""

_IDS = ("rank", "global_rank", "local_rank", "world_size", "local_world_size", "node_rank")
_HEAD = ("observed_timestamp_unix_ns", *_IDS, "hostname")
STREAM_COLUMNS: dict[str, tuple[str, ...]] = {
    "step_time": (*_HEAD, "timestamp_unix_ns", "seq", "step", "events"),
    "step_memory": (*_HEAD, "timestamp_unix_ns", "seq", "device", "step",
                    "peak_alloc_bytes", "peak_reserved_bytes"),
    "system": ("observed_timestamp_unix_ns", *_IDS[1:], "hostname", "timestamp_unix_ns", "seq",
               "cpu_percent", "ram_used_bytes", "ram_total_bytes", "gpu_available", "gpu_count"),
    "system_gpu": ("observed_timestamp_unix_ns", *_IDS[1:], "hostname", "timestamp_unix_ns",
                   "seq", "gpu_idx", "util", "mem_used_bytes", "mem_total_bytes",
                   "temperature_c", "power_usage_w", "power_limit_w"),
    "process": (*_HEAD, "timestamp_unix_ns", "seq", "cpu_percent", "cpu_logical_core_count",
                "ram_used_bytes", "ram_total_bytes", "gpu_available", "gpu_count",
                "gpu_device_index", "gpu_mem_used_bytes", "gpu_mem_reserved_bytes",
                "gpu_mem_total_bytes"),
    "runtime_environment": (*_HEAD, "pid", "timestamp_unix_ns", "seq", "topology",
                            "distributed_initialized", "distributed_backend",
                            "training_strategy", "strategy_source", "strategy_confidence"),
    "stdout_stderr": ("observed_timestamp_unix_ns", "rank", "timestamp_unix_ns", "line"),
}  # fmt: skip
"""Each stream's ``COLUMNS`` (schema version 1): the tables ``open()`` creates."""

STREAM_KEYS: dict[str, tuple[str, ...]] = {
    "step_time": ("global_rank", "step"),
    "step_memory": ("global_rank", "device", "step"),
    "system": ("global_rank", "seq"),
    "system_gpu": ("global_rank", "seq", "gpu_idx"),
    "process": ("global_rank", "seq"),
    "runtime_environment": ("global_rank",),
}
"""The SDK's ``stream_key`` fields; stdout_stderr has none (its view keeps every line)."""

_INTEGER = "bigint"
_FLOAT = "double precision"
_TEXT = "text"
_JSON = "jsonb"
_TYPES: dict[str, str] = {
    **dict.fromkeys(
        ("schema_version", "observed_timestamp_unix_ns", "timestamp_unix_ns", *_IDS, "seq",
         "step", "gpu_idx", "gpu_available", "gpu_count", "cpu_logical_core_count",
         "gpu_device_index", "pid", "distributed_initialized"),
        _INTEGER,
    ),
    **dict.fromkeys(
        ("peak_alloc_bytes", "peak_reserved_bytes", "cpu_percent", "ram_used_bytes",
         "ram_total_bytes", "util", "mem_used_bytes", "mem_total_bytes", "temperature_c",
         "power_usage_w", "power_limit_w", "gpu_mem_used_bytes", "gpu_mem_reserved_bytes",
         "gpu_mem_total_bytes"),
        _FLOAT,
    ),
    **dict.fromkeys(
        ("hostname", "device", "topology", "distributed_backend", "training_strategy",
         "strategy_source", "strategy_confidence", "line"),
        _TEXT,
    ),
    "events": _JSON,
}  # fmt: skip
_SINK_TYPES = {RUN_ID: "uuid", SESSION_ROOT: _TEXT, EXACT: _JSON}

_HOLDS: dict[str, frozenset[str]] = {
    _INTEGER: frozenset({"bigint", "numeric"}),
    _FLOAT: frozenset({"double precision"}),
    _TEXT: frozenset({"text"}),
    _JSON: frozenset({"jsonb"}),
    "uuid": frozenset({"uuid"}),
}
"""Existing column types used as they are."""
_WIDENS: dict[str, frozenset[str]] = {
    _INTEGER: frozenset({"smallint", "integer"}),
    _FLOAT: frozenset({"real", "smallint", "integer", "bigint", "numeric"}),
    _TEXT: frozenset({"character varying", "character"}),
    _JSON: frozenset({"json"}),
}
"""Existing column types widened with ``ALTER COLUMN ... TYPE`` (lossless)."""

_BINARY: dict[str, str] = {
    _INTEGER: "int8",
    _FLOAT: "float8",
    _TEXT: "text",
    _JSON: "jsonb",
    "uuid": "uuid",
}
"""Column types whose binary COPY form the rows of ``Layout.row`` match exactly."""

_INT_MIN, _INT_MAX = -(2**63), 2**63 - 1
_CHUNK = 512
"""Records checked together, column by column, by ``Layout.rows``."""
_NONE = type(None)
_INTS = frozenset({int, _NONE})
_FLOATS = frozenset({float, _NONE})
_TEXTS = frozenset({str, _NONE})
_FLOAT_EXACT = 2**53
_SURROGATE = re.compile("[\ud800-\udfff]")
_BIG_FLOAT = re.compile(rb"\de\+")
_DUMP = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, check_circular=False, separators=(",", ":")
).encode
"""For the cleaned stand-in of a value orjson cannot write (it holds any integer)."""
_DUMP_EXACT = json.JSONEncoder(separators=(",", ":"), default=repr).encode
"""ASCII JSON with NaN tokens: holds any value as text PostgreSQL accepts."""


def column_type(name: str) -> str:
    """The PostgreSQL type of a record column; ``jsonb`` for a name this version does not know."""
    return _TYPES.get(name, _JSON)


@dataclass(frozen=True, slots=True, eq=False)
class Layout:
    """How one stream's records become COPY rows (compared and hashed by identity: a dict key)."""

    stream: str
    record_columns: tuple[str, ...]
    columns: tuple[str, ...]
    """``_run_id``, ``_session_root``, ``schema_version``, the COLUMNS, ``_exact``: COPY order."""
    values: Callable[[dict[str, Any]], tuple[Any, ...]]
    integers: tuple[int, ...]
    floats: tuple[int, ...]
    texts: tuple[int, ...]
    jsons: tuple[int, ...]

    def row(
        self, data: dict[str, Any], prefix: tuple[Any, str], *, binary: bool = False
    ) -> tuple[Any, ...]:
        """The COPY row of one record's ``to_dict()``, following the module's value rules.

        ``prefix``: the run id and the session root. With ``binary`` (for binary COPY
        with ``register_binary_dumpers``) the run id is its 16 bytes and JSON is
        UTF-8 bytes; otherwise the run id and JSON are text.
        """
        return self._row(list(self.values(data)), prefix, binary)

    def _row(self, values: list[Any], prefix: tuple[Any, str], binary: bool) -> tuple[Any, ...]:
        exact: dict[str, str] | None = None
        for i in self.integers:
            value = values[i]
            if value is not None and (type(value) is not int or not _INT_MIN <= value <= _INT_MAX):
                exact = self._keep(exact, i, value)
                values[i] = None
        for i in self.floats:
            value = values[i]
            if value is not None and type(value) is not float:
                if type(value) is int and -_FLOAT_EXACT <= value <= _FLOAT_EXACT:
                    continue
                exact = self._keep(exact, i, value)
                values[i] = float(value) if type(value) is int else None
        for i in self.texts:
            value = values[i]
            if value is not None and (
                type(value) is not str
                or "\x00" in value
                or (not value.isascii() and _SURROGATE.search(value) is not None)
            ):
                exact = self._keep(exact, i, value)
                values[i] = _clean_text(value) if isinstance(value, str) else None
        for i in self.jsons:
            value = values[i]
            if value is not None:
                data = _storable_json(value)
                if data is None:
                    exact = self._keep(exact, i, value)
                    data = _DUMP(_clean_json(value)).encode()
                values[i] = data if binary else data.decode()
        if exact is None:
            return (*prefix, *values, None)
        text = _DUMP_EXACT(exact)
        return (*prefix, *values, text.encode() if binary else text)

    def rows(
        self, records: Iterable[Any], prefix: tuple[Any, str], *, binary: bool = False
    ) -> Iterator[tuple[Any, ...]]:
        """The COPY rows of records (``to_dict()`` of each), equal to ``row`` of each, faster.

        A chunk of records whose number and text columns all hold values their
        columns store as they are (checked a column at a time, in C) skips the
        per-value checks of ``row``; any other chunk, and any row whose JSON needs
        the rules, goes through ``row``.
        """
        values, jsons = self.values, self.jsons
        it = iter(records)
        while chunk := [values(record.to_dict()) for record in islice(it, _CHUNK)]:
            if not self._plain(chunk):
                for row in chunk:
                    yield self._row(list(row), prefix, binary)
            elif not jsons:
                for row in chunk:
                    yield (*prefix, *row, None)
            else:
                for row in chunk:
                    out = list(row)
                    for i in jsons:
                        if out[i] is not None:
                            data = _storable_json(out[i])
                            if data is None:
                                yield self._row(list(row), prefix, binary)
                                break
                            out[i] = data if binary else data.decode()
                    else:
                        yield (*prefix, *out, None)

    def _plain(self, chunk: list[tuple[Any, ...]]) -> bool:
        """Whether every number and text of these rows is stored as it is (no rule applies)."""
        columns = list(zip(*chunk, strict=True))
        for i in self.integers:
            column = columns[i]
            kinds = set(map(type, column))
            if not kinds <= _INTS:
                return False
            numbers = [v for v in column if v is not None] if _NONE in kinds else column
            if numbers and (min(numbers) < _INT_MIN or max(numbers) > _INT_MAX):
                return False
        for i in self.floats:
            if not set(map(type, columns[i])) <= _FLOATS:
                return False
        for i in self.texts:
            column = columns[i]
            if not set(map(type, column)) <= _TEXTS:
                return False
            text = "".join(filter(None, column))
            if "\x00" in text or not (text.isascii() or _SURROGATE.search(text) is None):
                return False
        return True

    def _keep(self, exact: dict[str, str] | None, i: int, value: Any) -> dict[str, str]:
        exact = {} if exact is None else exact
        exact[self.columns[i + 2]] = _DUMP_EXACT(value)
        return exact


def layout_for(stream: str, record_columns: Sequence[str], *, include_hostname: bool) -> Layout:
    """The COPY layout of a stream whose records have these ``COLUMNS``.

    Without ``include_hostname`` the ``hostname`` column is left out of the COPY (NULL).
    """
    fields = (
        "schema_version",
        *kept_columns(record_columns, include_hostname),
    )
    kinds = [column_type(name) for name in fields]
    return Layout(
        stream=stream,
        record_columns=tuple(record_columns),
        columns=(RUN_ID, SESSION_ROOT, *fields, EXACT),
        values=operator.itemgetter(*fields),  # at least two names: always a tuple
        integers=tuple(i for i, kind in enumerate(kinds) if kind == _INTEGER),
        floats=tuple(i for i, kind in enumerate(kinds) if kind == _FLOAT),
        texts=tuple(i for i, kind in enumerate(kinds) if kind == _TEXT),
        jsons=tuple(i for i, kind in enumerate(kinds) if kind == _JSON),
    )


def binary_types(columns: Sequence[str], table: dict[str, str]) -> tuple[str, ...] | None:
    """The types for ``COPY ... (FORMAT BINARY)`` of these columns of a table, or None.

    ``table`` maps the table's column names to their types (what ``ensure_table``
    returns). None when a column has a type this module does not make (an older
    table used as it is): its rows then go as text, which the server converts.
    """
    types = [_BINARY.get(table.get(name, "")) for name in columns]
    return None if None in types else tuple(t for t in types if t is not None)


class _JsonbText(Dumper):
    """jsonb in binary COPY from JSON text already UTF-8 encoded: format version 1, the text."""

    oid = postgres.types["jsonb"].oid
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return b"\x01" + bytes(obj)


class _UuidBytes(Dumper):
    """uuid in binary COPY from its 16 bytes (the run id, made once per run)."""

    oid = postgres.types["uuid"].oid
    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        return bytes(obj)


def register_binary_dumpers(context: AdaptContext) -> None:
    """Let binary COPY (``set_types``) take ``row(..., binary=True)``'s bytes as they are.

    Registered by type oid only, so they serve COPY and nothing else; psycopg's
    own dumpers would serialise the JSON again and build the uuid per row.
    """
    context.adapters.register_dumper(None, _JsonbText)
    context.adapters.register_dumper(None, _UuidBytes)


def restore_exact(row: dict[str, Any], exact: dict[str, str] | None) -> dict[str, Any]:
    """Put the exact values kept in ``_exact`` back into a row read from a table."""
    if exact:
        for name, text in exact.items():
            row[name] = json.loads(text)
    return row


def _storable_json(value: Any) -> bytes | None:
    """JSON text (UTF-8) ``jsonb`` accepts and gives back as it is, or None when it would not.

    orjson writes it (ten times faster than the standard library); None for what
    orjson refuses (an integer beyond 64 bits, a non-str key, an unpaired
    surrogate), a NUL, NaN or Infinity (which orjson would write as null) and a
    float of 1e16 or more (which jsonb would give back as an integer).
    """
    try:
        out = orjson.dumps(value)
    except TypeError:
        return None
    if (
        b"\\u0000" in out
        or (b"null" in out and _has_non_finite(value))
        or (b"e+" in out and _BIG_FLOAT.search(out) is not None)
    ):
        return None
    return out


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return any(_has_non_finite(item) for item in value)
    return False


def _clean_text(value: str) -> str:
    return _SURROGATE.sub("\ufffd", value.replace("\x00", "\ufffd"))


def _clean_json(value: Any) -> Any:
    """``value`` with its strings cleaned and NaN/Infinity (or anything not JSON) as None."""
    if isinstance(value, str):
        return _clean_text(value)
    if isinstance(value, dict):
        return {_clean_text(str(k)): _clean_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return None


# -- DDL ---------------------------------------------------------------------------------


def _table_sql(schema: str, name: str) -> sql.Composed:
    return sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(name))


def ensure_table(
    cur: Cursor[Any], schema: str, stream: str, record_columns: Sequence[str]
) -> dict[str, str]:
    """Create the stream's table (and its unique-rows view), or reuse and widen an older one.

    Returns the table's column types (name to type) as they are afterwards. Never drops a table. A missing column is added; a narrower type is widened
    losslessly (the view is made again around it); a column whose type cannot
    hold the values raises ``psycopg.errors.DatatypeMismatch``, a permanent error.
    """
    table = _table_sql(schema, stream)
    wanted = {
        **_SINK_TYPES,
        **{name: column_type(name) for name in ("schema_version", *record_columns)},
    }
    found = dict(
        cur.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = %s",
            (schema, stream),
        ).fetchall()
    )
    view_changed = False
    types = dict(found)
    if not found:
        columns = [
            sql.SQL("{} bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY").format(
                sql.Identifier(ROW_ID)
            ),
            *(
                sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(kind))
                for name, kind in wanted.items()
                if name != EXACT
            ),
            sql.SQL("{} jsonb").format(sql.Identifier(EXACT)),
        ]
        cur.execute(sql.SQL("CREATE TABLE {} ({})").format(table, sql.SQL(", ").join(columns)))
        types = {ROW_ID: _INTEGER, **wanted}
        view_changed = True
    else:
        if ROW_ID not in found:
            cur.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} bigint GENERATED ALWAYS AS IDENTITY").format(
                    table, sql.Identifier(ROW_ID)
                )
            )
        for name, kind in wanted.items():
            have = found.get(name)
            if have is None:
                cur.execute(
                    sql.SQL("ALTER TABLE {} ADD COLUMN {} {}").format(
                        table, sql.Identifier(name), sql.SQL(kind)
                    )
                )
                types[name] = kind
                view_changed = True
            elif have not in _HOLDS[kind]:
                _widen(cur, schema, stream, name, (have, kind))
                types[name] = kind
                view_changed = True
            elif have == "numeric" and kind == _INTEGER:
                _check_numeric(cur, schema, stream, name)
    if view_changed or not _view_exists(cur, schema, stream):
        _make_view(cur, schema, stream, set(found) | set(wanted))
    return types


def _widen(cur: Cursor[Any], schema: str, stream: str, name: str, types: tuple[str, str]) -> None:
    """Widen column ``name`` from ``types[0]`` (what it is) to ``types[1]`` (what it must be)."""
    have, kind = types
    if have not in _WIDENS.get(kind, frozenset()):
        raise DatatypeMismatch(
            f"column {schema}.{stream}.{name} is {have}, which cannot hold {kind} values and "
            f"cannot be widened to it; alter or rename that table (the exporter never drops one)"
        )
    view = _table_sql(schema, stream + UNIQUE_VIEW_SUFFIX)
    cur.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(view))
    cur.execute(
        sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE {} USING {}::{}").format(
            _table_sql(schema, stream),
            sql.Identifier(name),
            sql.SQL(kind),
            sql.Identifier(name),
            sql.SQL(kind),
        )
    )


_NUMERIC = re.compile(r"numeric\((\d+),(-?\d+)\)")
_BIGINT_DIGITS = 19
"""Decimal digits of the largest bigint (9223372036854775807)."""


def _check_numeric(cur: Cursor[Any], schema: str, stream: str, name: str) -> None:
    """Refuse a ``numeric(p,s)`` integer column that would round a bigint or overflow on one.

    ``information_schema`` reports a negative scale wrongly (2042 for -6), so the
    declared type is read with ``format_type``. A negative scale rounds every value
    to a multiple of 10**-s; fewer than 19 digits left of the point cannot hold a bigint.
    """
    row = cur.execute(
        "SELECT format_type(atttypid, atttypmod) FROM pg_attribute "
        "WHERE attrelid = to_regclass(quote_ident(%s) || '.' || quote_ident(%s)) "
        "AND attname = %s AND NOT attisdropped",
        (schema, stream, name),
    ).fetchone()
    declared = str(row[0]) if row else "numeric"
    match = _NUMERIC.fullmatch(declared)
    if match is None:
        return  # unconstrained numeric: any integer, exactly
    precision, scale = int(match.group(1)), int(match.group(2))
    if scale < 0:
        why = f"it rounds every value to a multiple of 10^{-scale}"
    elif precision - scale < _BIGINT_DIGITS:
        why = f"it holds {precision - scale} digits left of the point; a bigint needs 19"
    else:
        return
    raise DatatypeMismatch(
        f"column {schema}.{stream}.{name} is {declared}, which cannot hold every bigint value "
        f"exactly ({why}); alter it to bigint or unconstrained numeric, or rename that table "
        "(the exporter never drops one)"
    )


def _view_exists(cur: Cursor[Any], schema: str, stream: str) -> bool:
    return (
        cur.execute(
            "SELECT 1 FROM pg_views WHERE schemaname = %s AND viewname = %s",
            (schema, stream + UNIQUE_VIEW_SUFFIX),
        ).fetchone()
        is not None
    )


def _make_view(cur: Cursor[Any], schema: str, stream: str, columns: set[str]) -> None:
    """``<stream>_unique``: the first row of each (session, stream key); every line of stdout."""
    key = STREAM_KEYS.get(stream)
    table = _table_sql(schema, stream)
    view = _table_sql(schema, stream + UNIQUE_VIEW_SUFFIX)
    if key and set(key) <= columns:
        by = [sql.Identifier(SESSION_ROOT), *map(sql.Identifier, key)]
        query = sql.SQL("SELECT DISTINCT ON ({}) * FROM {} ORDER BY {}, {}").format(
            sql.SQL(", ").join(by), table, sql.SQL(", ").join(by), sql.Identifier(ROW_ID)
        )
    else:
        query = sql.SQL("SELECT * FROM {}").format(table)
    cur.execute(sql.SQL("DROP VIEW IF EXISTS {}").format(view))
    cur.execute(sql.SQL("CREATE VIEW {} AS {}").format(view, query))
