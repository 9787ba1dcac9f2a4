"""Text as UTF-8 can hold it: the rule for lone surrogates, applied only when needed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

__all__ = ["TEXT_RULE", "clean_text", "to_array"]

TEXT_RULE = (
    "text is UTF-8; a lone surrogate (which UTF-8 cannot encode) is stored as "
    "U+FFFD, a surrogate pair given as two code points as the character it "
    "encodes; NUL, U+2028 and every other character are stored unchanged"
)


def clean_text(text: str) -> str:
    """``text`` as UTF-8 can hold it, by ``TEXT_RULE``."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


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
