"""Records as the checks handle them: snapshots taken before an exporter sees a record, and
a poisoned record that makes any exporter's method fail.

A snapshot is what the suite computes its expected values from. Records are
frozen dataclasses, but a field may hold a dict (``events``), which an
exporter could change in place; the snapshot copies such values, so an
exporter that edits the records it was given is compared with what it was
given, not with what it left behind. Only ``STREAM``, ``COLUMNS``, the fields
and the constructor of the suite's own record classes are used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..records import StepTimeRecord

__all__ = ["POISON_ERROR", "PoisonedRecord", "snapshot", "snapshots"]


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind is dict:
        return {key: _copy(item) for key, item in value.items()}
    if kind is list:
        return [_copy(item) for item in value]
    return value


def snapshot(record: Any) -> Any:
    """``record`` itself when every field is immutable, else a copy with its maps copied."""
    columns = record.COLUMNS
    try:
        values = [getattr(record, name) for name in columns]
    except Exception:
        return record
    if not any(type(value) in (dict, list) for value in values):
        return record
    return type(record)(**{name: _copy(value) for name, value in zip(columns, values, strict=True)})


def snapshots(records: Sequence[Any]) -> list[Any]:
    """``snapshot`` of each record, in order."""
    return [snapshot(record) for record in records]


POISON_ERROR = "a poisoned record (the conformance suite's injected failure)"


class _Poison:
    def __get__(self, instance: object, owner: type | None = None) -> Any:
        if instance is None:
            return self
        raise RuntimeError(POISON_ERROR)


class PoisonedRecord(StepTimeRecord):
    """A step_time record whose ``to_dict()`` and every field raise ``RuntimeError``.

    The suite writes it to make an exporter fail mid-run in a way that does not
    depend on the sink (the restart checks); ``STREAM`` and ``COLUMNS`` are
    readable, so an exporter dispatches it as usual, on its STREAM or even with
    ``isinstance`` (it subclasses the SDK's class), and fails on its data.
    """

    def __new__(cls) -> PoisonedRecord:
        return object.__new__(cls)

    def __init__(self) -> None:
        pass

    def to_dict(self) -> dict[str, Any]:
        raise RuntimeError(POISON_ERROR)

    def __repr__(self) -> str:
        return "PoisonedRecord()"


for _name in StepTimeRecord.COLUMNS:
    setattr(PoisonedRecord, _name, _Poison())
