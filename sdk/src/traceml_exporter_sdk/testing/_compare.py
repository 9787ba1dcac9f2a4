"""Compare what an exporter read back with the records it was given, type-strictly.

Each value is compared by type and value: None is not 0, True is not 1, 1.0 is
not 1, a 19-digit integer must come back exact (a float that rounded it does
not match), and floats are compared bit for bit: -0.0 is not 0.0, and NaN
matches only the NaN with the same bits. Maps compare key by key (keys as
text), lists and tuples element by element.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..records import RECORD_TYPE_BY_STREAM, SCHEMA_VERSION
from .expected import _text, expected_by_stream, same_value

__all__ = ["ReadBack", "canonical", "expected_by_stream", "same_value", "validate_read_back"]

ReadBack = dict[str, list[dict[str, Any]]]
META_KEYS = ("stream", "schema_version")
IGNORED = frozenset({"hostname", *META_KEYS})


def canonical(data: Mapping[str, Any], drop: Iterable[str] = IGNORED) -> str:
    """A comparable, type-strict text form of one record dict, without the ``drop`` keys."""
    dropped = frozenset(drop)
    return _text({k: v for k, v in data.items() if k not in dropped})


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
            if "schema_version" in row and not same_value(row["schema_version"], SCHEMA_VERSION):
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
        originals: dict[str, Mapping[str, Any]] = {}
        want, got = Counter[str](), Counter[str]()
        for counter, rows in ((want, expected.get(stream, [])), (got, actual.get(stream, []))):
            for row in rows:
                text = canonical(row, dropped)
                originals.setdefault(text, {k: v for k, v in row.items() if k not in dropped})
                counter[text] += 1
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
            diff = field_diff(originals[missing[0]], originals[extra[0]])
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
        elif not same_value(want[key], got[key]):
            parts.append(f"{key}: expected {_shown(want[key])}, got {_shown(got[key])}")
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


def _shown(value: Any) -> str:
    """A value as a diff shows it: its type too where the text alone would not tell."""
    text = _short(_text(value))
    return (
        text
        if value is None or type(value) in (str, dict, list)
        else f"{text} ({type(value).__name__})"
    )


def _short(text: str, limit: int = 240) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
