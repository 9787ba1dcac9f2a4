"""Broken exporters of the contract's value space: each keeps all but one kind of value.

Each is ``broken_exporters.Good`` (the jsonl layout, so ``read_jsonl`` reads it back)
with one mistake in how it writes a value.
"""

from __future__ import annotations

import json
import math
from typing import Any

from broken_exporters import Good


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


class NonFiniteAsNull(Good):
    """Writes NaN and the infinities as null, as a strict JSON encoder must: a measured NaN
    then reads back as unavailable."""

    def line(self, record: Any) -> str:
        data = _finite(record.to_dict())
        if not self.include_hostname:
            data.pop("hostname", None)
        return json.dumps(data, allow_nan=False) + "\n"


def make_non_finite_as_null(context: Any) -> NonFiniteAsNull:
    return NonFiniteAsNull(context)


class IntegralFloatsAsInts(Good):
    """Writes an integral float as an int (1.0 as 1), as a sink with one number type does."""

    def line(self, record: Any) -> str:
        data = record.to_dict()
        if not self.include_hostname:
            data.pop("hostname", None)
        return json.dumps(_ints(data)) + "\n"


def _ints(value: Any) -> Any:
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _ints(v) for k, v in value.items()}
    return value


def make_integral_floats_as_ints(context: Any) -> IntegralFloatsAsInts:
    return IntegralFloatsAsInts(context)


class NegativeZeroLost(Good):
    """Writes -0.0 as 0.0 (``value + 0.0``), as a sink that normalises its floats does."""

    def line(self, record: Any) -> str:
        data = record.to_dict()
        if not self.include_hostname:
            data.pop("hostname", None)
        return json.dumps(_plus_zero(data)) + "\n"


def _plus_zero(value: Any) -> Any:
    if isinstance(value, float):
        return value + 0.0
    if isinstance(value, dict):
        return {k: _plus_zero(v) for k, v in value.items()}
    return value


def make_negative_zero_lost(context: Any) -> NegativeZeroLost:
    return NegativeZeroLost(context)


class BoolsAsInts(Good):
    """Writes True/False in an events map as 1/0, as a sink with no boolean type does."""

    def line(self, record: Any) -> str:
        data = record.to_dict()
        if not self.include_hostname:
            data.pop("hostname", None)
        return json.dumps(_bools(data)) + "\n"


def _bools(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, dict):
        return {k: _bools(v) for k, v in value.items()}
    return value


def make_bools_as_ints(context: Any) -> BoolsAsInts:
    return BoolsAsInts(context)
