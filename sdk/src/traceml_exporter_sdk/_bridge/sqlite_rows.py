"""Rows of a TraceML SQLite projection table -> export records, coerced as the payload path.

SQLite keeps whatever type a value was given, so every value is coerced exactly
as the payload path coerces the field it came from (``_build.projection``): text in
``rank`` is parsed as an identity int is, a REAL ``timestamp_unix_ns`` or a BLOB
``step`` becomes None, ``events_json`` is decoded (integers exact however long)
and normalised as the payload's events map is. A row whose values are of the
record's types is built as it is (the usual case); any other goes through the
per-field coercers, which give the same values for those rows.

A row that cannot become a record (``events_json`` that is not a JSON object,
nested too deep, a missing ``observed_timestamp_unix_ns`` or ``gpu_idx``, an
empty ``line``) is handed to the caller's ``bad`` callback with its id and the
reason; the other rows go on. Used by the backfill (``_bridge.sqlite_source``) and
the follower (``_bridge.follow``) alike, for both table layouts.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable, Sequence
from dataclasses import fields as dataclasses_fields
from typing import Any

import orjson

from .._build.coerce import (
    FloatNCalls,
    as_str,
    normalised_events,
    opt_int,
    opt_str,
    to_float,
    to_int,
    to_str,
    unix_ns,
)
from ..records import RECORD_TYPE_BY_STREAM, RECORD_TYPES, Record, builder, twin

__all__ = ["BadRowSink", "RowConverter"]

BadRowSink = Callable[[int, str], None]
"""Called with a row's id and the reason it cannot become a record."""


class RowConverter:
    """Turns rows ``(id, *columns)`` of one stream's table, read in the record's
    column order (``events_json`` last for step_time), into records.

    A row whose values are all of their fields' types (NULL where a field may be
    None; a flag 0 or 1; a line not empty) is built as it is, straight from the
    row: the coercers would give each value itself. A page whose columns hold only
    such types is taken whole; otherwise which tuples of value types are such is
    learnt once per tuple seen. ``trust_types=False`` coerces every row (the
    reference the tests hold the other to).
    """

    __slots__ = (
        "_allowed",
        "_build",
        "_check_values",
        "_coercers",
        "_flags",
        "_from_row",
        "_is_step_time",
        "_known",
        "_trust",
        "stream",
    )

    def __init__(self, stream: str, *, trust_types: bool = True) -> None:
        self.stream = stream
        self._build = builder(RECORD_TYPE_BY_STREAM[stream])
        self._from_row = _row_builder(RECORD_TYPE_BY_STREAM[stream])
        self._coercers = _COERCERS[stream]
        self._allowed = _allowed_types(stream)
        self._flags = _FLAG_INDEXES[stream]
        self._check_values = bool(self._flags) or stream == "stdout_stderr"
        self._known: dict[tuple[type[Any], ...], bool] = {}
        self._trust = trust_types
        self._is_step_time = stream == "step_time"

    def records(self, rows: Sequence[tuple[Any, ...]], bad: BadRowSink) -> list[Record]:
        """The records of ``rows``, in order; each row that does not fit goes to ``bad``."""
        build, from_row, coercers, known = self._build, self._from_row, self._coercers, self._known
        is_step_time, check_values = self._is_step_time, self._check_values
        decode = _FAST_DECODE
        records: list[Record] = []
        append = records.append
        all_own_types = self._all_own_types(rows)
        for row in rows:
            try:
                if all_own_types:
                    exact = not check_values or self._values_exact(row)
                else:
                    types = tuple(map(type, row))
                    learnt = known.get(types)
                    exact = self._learn(types) if learnt is None else learnt
                    if check_values and exact:
                        exact = self._values_exact(row)
                if is_step_time:
                    text = row[-1]
                    try:
                        events = decode(text) if decode and type(text) is str else None
                    except Exception:  # the careful decoding decides
                        events = None
                    if events is None:
                        events = _careful_events(text)
                        if type(events) is str:
                            bad(row[0], events)
                            continue
                    if exact:
                        append(from_row(row, events))
                    else:
                        append(build(*_coerce(coercers, row[1:-1]), events))
                elif exact:
                    append(from_row(row))
                else:
                    append(build(*_coerce(coercers, row[1:])))
            except _UnfitError as exc:
                bad(row[0], str(exc))
            except Exception as exc:
                bad(row[0], f"cannot be coerced: {type(exc).__name__}")
        return records

    def _all_own_types(self, rows: Sequence[tuple[Any, ...]]) -> bool:
        """Whether every value of ``rows`` (id and ``events_json`` aside) is of a type its
        field takes as it is: checked column by column, which costs a fifth of looking
        up each row's tuple of types; a page of rows that are not goes row by row."""
        if not self._trust or not rows:
            return False
        columns = zip(*rows, strict=False)  # a row of another length fails in from_row
        next(columns)  # the ids
        return all(
            allowed.issuperset(map(type, column))
            for allowed, column in zip(self._allowed, columns, strict=False)  # not events_json
        )

    def _learn(self, types: tuple[type[Any], ...]) -> bool:
        """Whether rows of these types (id and ``events_json`` included) may be taken
        as they are; remembered."""
        values = types[1:-1] if self._is_step_time else types[1:]
        exact = self._trust and all(
            kind in allowed for kind, allowed in zip(values, self._allowed, strict=True)
        )
        if len(self._known) < MAX_KNOWN:
            self._known[types] = exact
        return exact

    def _values_exact(self, row: tuple[Any, ...]) -> bool:
        """A stored flag is exact only when it is 0 or 1; a line only when not empty."""
        for index in self._flags:
            if row[index] not in (0, 1, None):
                return False
        return self.stream != "stdout_stderr" or bool(row[-1])


def _row_builder(record_type: type[Record]) -> Callable[..., Record]:
    """``from_row(row)``, or ``from_row(row, events)`` for step_time: the record of a row
    ``(id, *fields)`` (its last item, ``events_json``, replaced by ``events``), equal to
    ``builder(record_type)(*row[1:])``; it unpacks the row instead of slicing it."""
    names = record_type.COLUMNS
    step_time = record_type.STREAM == "step_time"
    unpacked = ", ".join(
        ["_id", *(n for n in names if n != "events"), *(["_text"] if step_time else [])]
    )
    stores = "".join(f"    self.{name} = {name}\n" for name in names)
    source = (
        f"def from_row(row{', events' if step_time else ''}):\n"
        f"    {unpacked} = row\n    self = _new(_twin)\n{stores}"
        "    self.__class__ = _cls\n    return self\n"
    )
    namespace: dict[str, Any] = {
        "_new": object.__new__,
        "_twin": twin(record_type),
        "_cls": record_type,
    }
    exec(source, namespace)  # noqa: S102 - generated from the class's own field names
    from_row: Callable[..., Record] = namespace["from_row"]
    from_row.__qualname__ = f"from_row({record_type.__qualname__})"
    return from_row


def _msgspec_decode() -> Callable[[str], Any] | None:
    """With msgspec: text -> the events map as dicts, in C; it raises on anything the
    careful decoding below might read differently (a missing key, a value of another type).

    The dicts are made as the text is read, so a stats map's keys come in the text's
    order (TraceML 0.5.0 writes them sorted), not the payload path's: the maps are
    equal, and building them costs half of decoding typed structs and converting those.
    """
    try:
        types = importlib.import_module("traceml_exporter_sdk._build.step_structs")
    except ImportError:
        return None
    decode: Callable[[str], Any] = types.decode_events_map
    return decode


_FAST_DECODE = _msgspec_decode()


def _careful_events(text: Any) -> dict[str, Any] | str:
    """The events map, decoded and normalised as the payload path's; else a reason.
    For the rows ``_FAST_DECODE`` leaves (or all of them without it).

    orjson turns an integer past 64 bits into a float; the only integer the map
    keeps is ``n_calls``, so a float there sends the text to ``json``, which keeps
    integers exact (a float field gets the same float either way).
    """
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
        return normalised_events(value, strict=True)
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
    return normalised_events(value)


class _UnfitError(Exception):
    """A row that cannot become its record; the message is the reason."""


def _required_int(name: str) -> Callable[[Any], int]:
    def coerce(value: Any) -> int:
        if type(value) is int:
            return value
        raise _UnfitError(f"{name} is {_kind(value)}, not an integer")

    return coerce


def _line(value: Any) -> str:
    line = value if type(value) is str or value is None else as_str(value)
    if not line:
        raise _UnfitError("line is empty" if line == "" else "line is NULL")
    return line


def _stored01(value: Any) -> int | None:
    """0/1 as the writer stored it; anything else is None (``_build.coerce.bool01`` reads a payload's True/False)."""
    return value if type(value) is int and value in (0, 1) else None


def _kind(value: Any) -> str:
    return "NULL" if value is None else type(value).__name__


_IDENTITY = {
    "rank": opt_int,
    "global_rank": opt_int,
    "local_rank": opt_int,
    "world_size": opt_int,
    "local_world_size": opt_int,
    "node_rank": opt_int,
    "pid": opt_int,
    "hostname": opt_str,
    "observed_timestamp_unix_ns": _required_int("observed_timestamp_unix_ns"),
    "timestamp_unix_ns": unix_ns,
    "gpu_idx": _required_int("gpu_idx"),
    "gpu_available": _stored01,
    "distributed_initialized": _stored01,
    "line": _line,
}
_BY_HINT: dict[str, Callable[[Any], Any]] = {"int": to_int, "float": to_float, "str": to_str}
_RUNTIME_BEST_EFFORT = {"seq": opt_int, "topology": opt_str, "distributed_backend": opt_str}
_RUNTIME_BEST_EFFORT |= dict.fromkeys(
    ("training_strategy", "strategy_source", "strategy_confidence"), opt_str
)


def _coercer(stream: str, name: str, hint: str) -> Callable[[Any], Any]:
    """The payload path's coercion of the field ``name`` (``_build.projection``)."""
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
MAX_KNOWN = 256
"""Type tuples remembered per converter (a table of hostile rows may show many)."""
_NONE = type(None)


def _allowed_types(stream: str) -> tuple[frozenset[type[Any]], ...]:
    """Per column but ``events``: the value types taken as they are (NoneType where
    the field may be None, but never for a line)."""
    record_type = RECORD_TYPE_BY_STREAM[stream]
    hints = _field_hints(record_type)
    allowed = []
    for name in record_type.COLUMNS:
        if name == "events":
            continue
        hint = hints[name]
        kinds: set[type[Any]] = {{"int": int, "float": float, "str": str}[hint.split(" ")[0]]}
        if "None" in hint and name != "line":
            kinds.add(_NONE)
        allowed.append(frozenset(kinds))
    return tuple(allowed)


_FLAG_INDEXES: dict[str, tuple[int, ...]] = {
    t.STREAM: tuple(
        i
        for i, name in enumerate((n for n in t.COLUMNS if n != "events"), start=1)
        if name in ("gpu_available", "distributed_initialized")
    )
    for t in RECORD_TYPES
}
"""Per stream: where in a row ``(id, *columns)`` its flags are."""


def _coerce(coercers: tuple[Callable[[Any], Any], ...], values: tuple[Any, ...]) -> tuple[Any, ...]:
    return tuple(coerce(value) for coerce, value in zip(coercers, values, strict=True))
