"""The contract's value space, derived from the record classes' fields and type hints.

Every field of every record class gets the edge values of its type, read off its
type hint (``int | None``, ``float``, ``str``, the events map of ``EventStats``),
and every field whose hint allows None is None in some record. A record class
that gains a field, or a field of a type this module does not know, is covered
without a hand list, or refused by ``value_space_records`` with a ``TypeError``
naming it.

The ranges are the contract's: a record is one row of a SQLite projection table,
so an integer is a SQLite ``INTEGER`` (signed 64 bits: ``INT_EDGES`` reach both
ends) and a float is any IEEE double. The ordinary doubles (the largest, the
smallest subnormal, ...) are in every check's records; the IEEE special values
(``NON_FINITE``: -0.0, NaN and the infinities) go to their own check,
``special_floats``, so a sink whose format has none of them (JSON writes NaN as
``null``, a JSON or SQL numeric has no -0.0) fails that check by name rather than
every check at once, and can declare it. The contract's own rules narrow a few
fields (``RULES``): ``gpu_available`` and ``distributed_initialized`` are 0 or 1,
``gpu_idx`` is a position, ``line`` is never empty, and the two nanosecond stamps
are readings of a Unix clock (``time.time_ns()``), after the epoch.
"""

from __future__ import annotations

import math
import sys
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from ..records import RECORD_TYPES, EventStats, Record

__all__ = [
    "BOOL_EDGES",
    "FLOAT_EDGES",
    "INT64_MAX",
    "INT64_MIN",
    "INT_EDGES",
    "NON_FINITE",
    "RULES",
    "STR_EDGES",
    "FieldSpec",
    "Rule",
    "allowed_edges",
    "field_specs",
    "is_events",
    "value_space_gaps",
    "value_space_records",
]

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

FLOAT_EDGES: tuple[float, ...] = (
    0.0,
    1.0,  # integral: 1.0 is not 1
    -1.5,
    0.1,
    sys.float_info.max,
    -sys.float_info.max,
    5e-324,  # the smallest subnormal
    -5e-324,
    2.225073858507201e-308,  # the largest subnormal
    sys.float_info.min,  # the smallest normal
    9007199254740993.0,  # 2**53 + 1 rounded: an integral float past exact integers
    -2.5e-300,
)
"""Doubles every float field takes: zero, integral values, the largest magnitude,
subnormals."""

NON_FINITE: tuple[float, ...] = (-0.0, math.nan, math.inf, -math.inf)
"""The IEEE special values a float field may also hold: -0.0, NaN and the infinities;
kept apart, as many formats have none of them (see the module docstring)."""

INT_EDGES: tuple[int, ...] = (
    0,
    1,
    -1,
    INT64_MAX,
    INT64_MIN,
    2**53 + 1,  # the first integer a double cannot hold
    -(2**53 + 1),
    2**31,
    1_764_230_400_123_456_789,  # a 19-digit nanosecond stamp
    7,
    4096,
    65_535,
)
"""Integers every int field takes: as many as ``FLOAT_EDGES`` and all distinct, so each
generated record of a stream has its own stream key."""

STR_EDGES: tuple[str, ...] = (
    "",
    "0",
    "null",
    "NaN",
    "ünïcødé 日本語 🚀",
    "line\nbreak",
    "cr\r\nlf",
    "para\u2028sep\u2029",
    "\t",
    " leading and trailing ",
    "true",
    "-0",
)
"""Text every str field takes (the hostile text and the longest line have their own check)."""

BOOL_EDGES: tuple[bool, ...] = (True, False)


class Rule(typing.NamedTuple):
    """A contract rule narrowing one field: its only values, a least value, a least length."""

    values: tuple[Any, ...] | None = None
    min_value: int | None = None
    min_size: int | None = None

    def allows(self, value: Any) -> bool:
        if self.values is not None and value not in self.values:
            return False
        if self.min_value is not None and value < self.min_value:
            return False
        return self.min_size is None or len(value) >= self.min_size


RULES: Mapping[str, Rule] = {
    "gpu_available": Rule(values=(0, 1)),  # "an integer boolean from the row, 1 or 0"
    "distributed_initialized": Rule(values=(0, 1)),
    "gpu_idx": Rule(min_value=0),  # "the GPU's position in the snapshot"
    "line": Rule(min_size=1),  # "never None; empty lines are not recorded"
    # a reading of time.time_ns(), "ns since Unix epoch": after it (0 is OTLP's "unset")
    "observed_timestamp_unix_ns": Rule(min_value=1),
    "timestamp_unix_ns": Rule(min_value=1),
}
"""The contract's narrower rules, by field name: a value the rule refuses is not drawn."""

_EDGES: dict[Any, tuple[Any, ...]] = {
    int: INT_EDGES,
    float: FLOAT_EDGES,
    str: STR_EDGES,
    bool: BOOL_EDGES,
}


class FieldSpec(typing.NamedTuple):
    """One field as its type hint states it: the value type and whether None is allowed."""

    name: str
    kind: Any
    nullable: bool


def _spec(name: str, hint: Any) -> FieldSpec:
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [a for a in args if a is not type(None)]
        if len(kinds) != 1:
            raise TypeError(f"field {name}: {hint} is a union this value space does not know")
        return FieldSpec(name, kinds[0], len(kinds) < len(args))
    return FieldSpec(name, hint, False)


_SPECS: dict[Any, tuple[FieldSpec, ...]] = {}


def field_specs(cls: Any) -> tuple[FieldSpec, ...]:
    """The fields of a record class (or of ``EventStats``), in order, from its type hints."""
    specs = _SPECS.get(cls)
    if specs is None:
        hints = typing.get_type_hints(cls)
        names = getattr(cls, "COLUMNS", None) or tuple(hints)
        specs = _SPECS[cls] = tuple(_spec(name, hints[name]) for name in names)
    return specs


def _is_events(kind: Any) -> bool:
    """``dict[str, dict[str, EventStats]]``, the events map."""
    if typing.get_origin(kind) is not dict:
        return False
    key, inner = typing.get_args(kind)
    if key is not str or typing.get_origin(inner) is not dict:
        return False
    return typing.get_args(inner) == (str, EventStats)


def is_events(kind: Any) -> bool:
    """Whether a field's type is the events map, ``dict[str, dict[str, EventStats]]``."""
    return _is_events(kind)


def _allowed(name: str, values: Iterable[Any]) -> list[Any]:
    rule = RULES.get(name)
    return [v for v in values if rule is None or rule.allows(v)]


def allowed_edges(spec: FieldSpec, *, non_finite: bool = False) -> list[Any]:
    """The edge values of a scalar field's type that its rule allows ([] for other types)."""
    if spec.kind is float:
        return _allowed(spec.name, FLOAT_EDGES + (NON_FINITE if non_finite else ()))
    return _allowed(spec.name, _EDGES.get(spec.kind, ()))


def _edge(
    spec: FieldSpec,
    index: int,
    floats: tuple[float, ...],
    texts: tuple[str, ...] = STR_EDGES,
    ints: tuple[int, ...] = INT_EDGES,
) -> Any:
    kind = spec.kind
    if kind is float:
        values = _allowed(spec.name, floats)
    elif kind in _EDGES:
        values = _allowed(
            spec.name, texts if kind is str else ints if kind is int else _EDGES[kind]
        )
    elif _is_events(kind):
        return _events(index, floats, texts)
    else:
        raise TypeError(
            f"field {spec.name}: type {kind!r} has no edge values in the value space; "
            "add them to testing/value_space.py"
        )
    return values[index % len(values)]


def _stats(index: int, floats: tuple[float, ...], *, none: bool = False) -> dict[str, Any]:
    return {
        s.name: None if none and s.nullable else _edge(s, index, floats)
        for s in field_specs(EventStats)
    }


def _events(
    index: int, floats: tuple[float, ...], texts: tuple[str, ...] = STR_EDGES
) -> dict[str, dict[str, Any]]:
    """The events map of generated record ``index``: empty first, then names and devices
    of edge text, stats of edge values, and a stats map with every value None."""
    if index == 0:
        return {}
    name, device = texts[index % len(texts)], texts[(index + 1) % len(texts)]
    return {
        name: {
            device: _stats(index - 1, floats),
            f"{device}#unmeasured": _stats(0, floats, none=True),
        },
        f"{name}#second": {device: _stats(index, floats)},
    }


def _count(floats: tuple[float, ...]) -> int:
    return max(len(floats), *(len(v) for v in _EDGES.values()))


def value_space_records(
    record_types: Iterable[type[Any]] = RECORD_TYPES,
    *,
    non_finite: bool = False,
    texts: tuple[str, ...] | None = None,
) -> list[Record]:
    """Records of each class that together take every edge value of every field.

    Per class: record ``k`` gives each field the ``k``-th edge of its type (cycling),
    then one record has every nullable field None. With ``non_finite``, the float
    fields take -0.0, NaN, +inf and -inf instead (classes without a float field give
    none). With ``texts``, every str field (event names and devices too) cycles through
    those instead of ``STR_EDGES``, one record per text, every other value ordinary
    (small ints, halves); classes without a str field give none.

    Raises:
        TypeError: a field's type has no edge values here (a new field type).
    """
    floats = NON_FINITE if non_finite else FLOAT_EDGES
    out: list[Any] = []
    for cls in record_types:
        specs = field_specs(cls)
        if non_finite and not any(s.kind is float or _is_events(s.kind) for s in specs):
            continue
        if texts is not None:
            if not any(s.kind is str or _is_events(s.kind) for s in specs):
                continue
            count = len(texts)
        else:
            count = len(floats) if non_finite else _count(floats)
        words, ints = STR_EDGES, INT_EDGES
        if texts is not None:  # the text is the point: every other value ordinary
            words, ints = texts, tuple(range(1, count + 1))
            floats = tuple(i + 0.5 for i in range(count))
        for index in range(count):
            out.append(cls(*(_edge(s, index, floats, words, ints) for s in specs)))
        if not non_finite and texts is None:
            out.append(cls(*(None if s.nullable else _edge(s, 1, floats) for s in specs)))
    return out


def value_space_gaps(
    records: Iterable[Any],
    record_types: Iterable[type[Any]] = RECORD_TYPES,
    *,
    non_finite: bool = False,
) -> list[str]:
    """What of the value space ``records`` leave out, one line per gap (``[]``: none).

    For each class, from its type hints: a nullable field never None, a field that never
    takes an edge value of its type (compared type-strictly, so -0.0 is not 0.0), and the
    same for the events stats. With ``non_finite``, only NaN and the infinities of the
    float fields are looked for.
    """
    from .expected import _text

    seen: dict[tuple[str, str], set[str]] = {}
    by_stream: dict[str, list[Any]] = {}
    for record in records:
        by_stream.setdefault(record.STREAM, []).append(record)
    for stream, group in by_stream.items():
        for record in group:
            for name in record.COLUMNS:
                value = getattr(record, name)
                seen.setdefault((stream, name), set()).add(_text(value))
                if type(value) is dict:
                    for devices in value.values():
                        for stats in devices.values():
                            for key, item in stats.items():
                                seen.setdefault((stream, f"{name}.{key}"), set()).add(_text(item))
    gaps = []
    for cls in record_types:
        for spec in field_specs(cls):
            specs = [(spec.name, spec)]
            if _is_events(spec.kind):
                specs = [(f"{spec.name}.{s.name}", s) for s in field_specs(EventStats)]
            for label, each in specs:
                got = seen.get((cls.STREAM, label), set())
                wanted = list(NON_FINITE) if non_finite and each.kind is float else []
                if not non_finite:
                    wanted = allowed_edges(each) + ([None] if each.nullable else [])
                missing = [v for v in wanted if _text(v) not in got]
                if missing:
                    shown = ", ".join(_text(v) for v in missing[:6])
                    gaps.append(f"{cls.__name__}.{label} never takes {shown}")
    return gaps
