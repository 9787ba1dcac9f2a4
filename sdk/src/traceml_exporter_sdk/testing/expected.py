"""What a sink must give back for the records it was handed: for an exporter's own tests.

``expected_by_stream(records, include_hostname=...)`` is the contract's answer
to "what should my sink hold now?", in the shape ``read_back`` returns::

    written = read_my_sink(context)
    assert written == expected_by_stream(records, include_hostname=context.include_hostname)

It relies only on ``STREAM`` and ``to_dict()``, so TraceML's own record
classes work as well as the SDK's. Compare with ``export_differences`` (or
``same_value``) rather than ``==``, which takes ``True`` for ``1``, ``1.0`` for
``1`` and ``0.0`` for ``-0.0``, and never NaN for NaN::

    assert not export_differences(written, expected_by_stream(records))
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..records import ExportRecord

__all__ = ["expected_by_stream", "export_differences", "same_value"]

_QUIET_NAN = struct.pack(">d", math.nan)


def _float_text(value: float) -> str:
    """The exact text of a float: its shortest round-trip repr (which keeps -0.0 and every
    bit of a finite double), ``NaN``/``Infinity``/``-Infinity``, or ``NaN(<bits>)`` for a
    NaN with other bits than Python's own."""
    if math.isfinite(value):
        return repr(value)
    if math.isnan(value):
        bits = struct.pack(">d", value)
        return "NaN" if bits == _QUIET_NAN else f"NaN(0x{bits.hex()})"
    return "Infinity" if value > 0 else "-Infinity"


def _text(value: Any) -> str:
    """JSON-like text of ``value`` in which values of different types never coincide."""
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return json.dumps(value, ensure_ascii=False)
    if kind is int:  # hex past Python's int-to-text limit (4300 digits)
        return int.__repr__(value) if value.bit_length() < 14_000 else hex(value)
    if kind is float:
        return _float_text(value)
    if isinstance(value, Mapping):
        items = sorted((_text(k), _text(v)) for k, v in value.items())
        return "{" + ", ".join(f"{k}: {v}" for k, v in items) + "}"
    if kind is list or kind is tuple:
        return "[" + ", ".join(map(_text, value)) + "]"
    return json.dumps(f"<{kind.__name__}: {value!r}>", ensure_ascii=False)


def same_value(a: Any, b: Any) -> bool:
    """True when ``a`` and ``b`` are the same value of the same type (floats bit for bit)."""
    return _text(a) == _text(b)


def export_differences(
    actual: Mapping[str, Sequence[Mapping[str, Any]]],
    expected: Mapping[str, Sequence[Mapping[str, Any]]],
) -> list[str]:
    """Where ``actual`` differs from ``expected`` (both ``{STREAM: [dict, ...]}``), type-strictly
    and in order: one line per stream whose records differ, naming the first difference."""
    problems = []
    for stream in sorted(set(expected) | set(actual)):
        want, got = list(expected.get(stream, [])), list(actual.get(stream, []))
        if len(want) != len(got):
            problems.append(f"{stream}: expected {len(want)} records, got {len(got)}")
            continue
        for index, (a, b) in enumerate(zip(want, got, strict=True)):
            if not same_value(a, b):
                keys = sorted(set(a) | set(b))
                diff = [k for k in keys if k not in a or k not in b or not same_value(a[k], b[k])]
                problems.append(
                    f"{stream}[{index}]: "
                    + "; ".join(
                        f"{k}: expected {_text(a[k]) if k in a else '(absent)'}, "
                        f"got {_text(b[k]) if k in b else '(absent)'}"
                        for k in diff[:4]
                    )
                )
                break
    return problems


def expected_by_stream(
    records: Iterable[ExportRecord], *, include_hostname: bool = False
) -> dict[str, list[dict[str, Any]]]:
    """``to_dict()`` of each record grouped by ``STREAM``, in the order given.

    ``hostname`` is left out unless ``include_hostname`` (the context's
    ``include_hostname``, TraceML's ``exporter_hostname`` setting). Duplicates
    stay: an exporter passes every record through.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        data = record.to_dict()
        if not include_hostname:
            data.pop("hostname", None)
        out.setdefault(record.STREAM, []).append(data)
    return out
