"""Compare what an exporter read back with the records it was given.

Values are compared after a light normalisation that keeps every distinction
the contract cares about: None is not 0, True is not 1, a 19-digit integer
must come back exact (a float that rounded it does not match), while 5.0 and
5 are the same number (a sink may store an integral float as an integer).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..records import RECORD_TYPE_BY_STREAM, SCHEMA_VERSION
from .expected import expected_by_stream

__all__ = ["ReadBack", "canonical", "expected_by_stream", "validate_read_back"]

ReadBack = dict[str, list[dict[str, Any]]]
META_KEYS = ("stream", "schema_version")
IGNORED = frozenset({"hostname", *META_KEYS})


def normalise(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return int(value)
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Mapping):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    return f"<{type(value).__name__}: {value!r}>"


def canonical(data: Mapping[str, Any], drop: Iterable[str] = IGNORED) -> str:
    """A comparable text form of one record dict, without the ``drop`` keys."""
    dropped = frozenset(drop)
    view = {k: normalise(v) for k, v in data.items() if k not in dropped}
    return json.dumps(view, sort_keys=True, ensure_ascii=False)


def validate_read_back(value: Any) -> ReadBack:
    """Check the shape ``read_back`` must return and copy it into plain dicts and lists.

    Raises:
        TypeError: the shape is wrong; the message says what was expected.
    """
    if not isinstance(value, Mapping):
        raise TypeError(
            f"read_back must return a mapping of STREAM name -> list of dicts, "
            f"got {type(value).__name__}"
        )
    out: ReadBack = {}
    for stream, rows in value.items():
        if stream not in RECORD_TYPE_BY_STREAM:
            raise TypeError(
                f"read_back returned key {stream!r}, which is not a STREAM name; "
                f"use one of {', '.join(RECORD_TYPE_BY_STREAM)} (system_gpu is its own stream)"
            )
        if isinstance(rows, (str, bytes)) or not isinstance(rows, Sequence):
            raise TypeError(
                f"read_back()[{stream!r}] must be a list of dicts, got {type(rows).__name__}"
            )
        converted = []
        for index, row in enumerate(rows):
            if not isinstance(row, Mapping):
                raise TypeError(
                    f"read_back()[{stream!r}][{index}] must be a dict (one record's to_dict()), "
                    f"got {type(row).__name__}"
                )
            converted.append(dict(row))
        out[str(stream)] = converted
    return out


def meta_problems(actual: ReadBack) -> list[str]:
    """``stream``/``schema_version`` keys, where present, must match the record."""
    problems = []
    for stream, rows in actual.items():
        for index, row in enumerate(rows):
            if "stream" in row and row["stream"] != stream:
                problems.append(
                    f"{stream}[{index}] has stream {row['stream']!r} but was read back under {stream!r}"
                )
            if "schema_version" in row and row["schema_version"] != SCHEMA_VERSION:
                problems.append(
                    f"{stream}[{index}] has schema_version {row['schema_version']!r}, "
                    f"expected {SCHEMA_VERSION}"
                )
            if len(problems) >= 5:
                return problems
    return problems


def count_problems(expected: ReadBack, actual: ReadBack) -> list[str]:
    """Per-stream record counts that differ."""
    problems = []
    for stream in sorted(set(expected) | set(actual)):
        want, got = len(expected.get(stream, [])), len(actual.get(stream, []))
        if want != got:
            problems.append(f"{stream}: wrote {want} records, read back {got}")
    return problems


def multiset_problems(
    expected: ReadBack, actual: ReadBack, drop: Iterable[str] = IGNORED, limit: int = 3
) -> list[str]:
    """Records (as canonical text) whose number of copies differs, with a field diff."""
    dropped = frozenset(drop)
    problems = []
    for stream in sorted(set(expected) | set(actual)):
        want = Counter(canonical(d, dropped) for d in expected.get(stream, []))
        got = Counter(canonical(d, dropped) for d in actual.get(stream, []))
        if want == got:
            continue
        missing = list((want - got).elements())
        extra = list((got - want).elements())
        problems.append(
            f"{stream}: {len(missing)} written record(s) not read back as written, "
            f"{len(extra)} read-back record(s) that were never written"
        )
        for text in missing[:limit]:
            problems.append(f"  missing:    {_short(text)}")
        for text in extra[:limit]:
            problems.append(f"  unexpected: {_short(text)}")
        if missing and extra:
            diff = field_diff(json.loads(missing[0]), json.loads(extra[0]))
            if diff:
                problems.append(f"  first difference: {diff}")
    return problems


def field_diff(want: Mapping[str, Any], got: Mapping[str, Any]) -> str:
    parts = []
    for key in sorted(set(want) | set(got)):
        if key not in got:
            parts.append(f"{key} missing (expected {want[key]!r})")
        elif key not in want:
            parts.append(f"unexpected key {key} = {got[key]!r}")
        elif want[key] != got[key] or type(want[key]) is not type(got[key]):
            parts.append(f"{key}: expected {want[key]!r}, got {got[key]!r}")
    return "; ".join(parts[:4])


def order_problems(
    expected: ReadBack, actual: ReadBack, drop: Iterable[str] = IGNORED
) -> list[str]:
    """Records of one stream that came back in another relative order than written.

    Only records present on both sides are compared (k-th copy to k-th copy),
    so a lost or altered record does not count here.
    """
    dropped = frozenset(drop)
    problems = []
    for stream in sorted(set(expected) & set(actual)):
        want = _numbered(canonical(d, dropped) for d in expected[stream])
        got = _numbered(canonical(d, dropped) for d in actual[stream])
        common = set(want) & set(got)
        want_seq = [item for item in want if item in common]
        got_seq = [item for item in got if item in common]
        if want_seq != got_seq:
            index = next(
                i for i, (a, b) in enumerate(zip(want_seq, got_seq, strict=True)) if a != b
            )
            problems.append(
                f"{stream}: position {index} of {len(want_seq)} differs; "
                f"expected {_short(want_seq[index][0])}, read back {_short(got_seq[index][0])}"
            )
    return problems


def _numbered(texts: Iterable[str]) -> list[tuple[str, int]]:
    seen: Counter[str] = Counter()
    out = []
    for text in texts:
        out.append((text, seen[text]))
        seen[text] += 1
    return out


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
