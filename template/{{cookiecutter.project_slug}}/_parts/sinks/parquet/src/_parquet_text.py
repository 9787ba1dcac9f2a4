"""Text as UTF-8 can hold it: the rule for lone surrogates, applied only when needed."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["EXACT_TEXT", "TEXT_RULE", "clean_text", "exact_text", "to_array"]

EXACT_TEXT = "_exact_text"
"""The last column of every stream: the exact values of a row's fields UTF-8 cannot hold."""

TEXT_RULE = (
    "text is UTF-8; a lone surrogate (which UTF-8 cannot encode) is stored as "
    "U+FFFD in its column, and the row's column _exact_text holds, as ASCII JSON, "
    "the exact value of every field of that row that held one (null otherwise), "
    "which read_export puts back (a surrogate pair given as two code points reads "
    "back as the character it encodes, as JSON has it); NUL, U+2028 and every "
    "other character are stored unchanged"
)


def clean_text(text: str) -> str:
    """``text`` as UTF-8 can hold it, by ``TEXT_RULE``."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _not_utf8(value: Any) -> bool:
    """Whether ``value`` holds a ``str`` that UTF-8 cannot encode, map keys included."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, dict):
        return any(_not_utf8(key) or _not_utf8(item) for key, item in value.items())
    return False


def exact_text(names: Sequence[str], rows: Sequence[Sequence[Any]]) -> pa.Array[Any]:
    """The ``EXACT_TEXT`` column of ``rows``: per row, its fields UTF-8 cannot hold, as JSON.

    ``json.dumps`` writes ASCII with ``\\udXXX`` escapes, which ``json.loads`` reads
    back as the same ``str``.
    """
    values: list[str | None] = []
    for row in rows:
        kept = {name: value for name, value in zip(names, row, strict=True) if _not_utf8(value)}
        values.append(json.dumps(kept) if kept else None)
    return pa.array(values, type=pa.string())


def _clean(value: Any) -> Any:
    """``value`` with ``clean_text`` applied to every string in it, map keys included."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {_clean(key): _clean(item) for key, item in value.items()}
    return value


def to_array(values: Sequence[Any], type_: pa.DataType) -> pa.Array[Any]:
    """``pa.array(values, type_)``; on a lone surrogate, again with ``TEXT_RULE`` applied."""
    try:
        array: pa.Array[Any] = pa.array(values, type=type_)
    except UnicodeEncodeError:  # rare: pay for the cleaning only then
        array = pa.array([_clean(v) for v in values], type=type_)
    return array
