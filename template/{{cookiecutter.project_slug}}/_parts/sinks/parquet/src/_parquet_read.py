"""Read an export back as record dicts, the way any glob reader sees it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ._parquet_arrow import JSON_ENCODING
from ._parquet_layout import list_parts
from ._parquet_text import EXACT_TEXT

__all__ = ["read_export", "read_stream"]

_ATTEMPTS = 10
"""How often a read starts over when a compaction removed a listed file (see ``_parquet_layout``)."""


def read_export(
    export_dir: Path, streams: Iterable[str] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """What the exporter wrote: stream -> its records as ``to_dict()``-like dicts, in order.

    ``streams`` defaults to every stream folder under ``export_dir``; a stream
    with no folder reads as an empty list.
    """
    if streams is None:
        streams = sorted(p.name for p in export_dir.iterdir() if p.is_symlink() and p.is_dir())
    return {stream: read_stream(export_dir / stream) for stream in streams}


def read_stream(folder: Path) -> list[dict[str, Any]]:
    """The records of one stream folder (``<export_dir>/<stream>``), in write order."""
    for _ in range(_ATTEMPTS - 1):
        records = _read_or_none(folder)
        if records is not None:
            return records
    return _read_once(folder)


def _read_or_none(folder: Path) -> list[dict[str, Any]] | None:
    """One read, or None when a compaction swapped generations between list and open."""
    try:
        return _read_once(folder)
    except FileNotFoundError:
        return None


def _read_once(folder: Path) -> list[dict[str, Any]]:
    if not folder.exists():
        return []
    out: list[dict[str, Any]] = []
    for path in list_parts(folder):
        table = pq.read_table(path)
        converters = [_converter(field) for field in table.schema]
        columns = [
            column.to_pylist() if convert is None else [convert(v) for v in column.to_pylist()]
            for column, convert in zip(table.columns, converters, strict=True)
        ]
        names = table.schema.names
        out.extend(_exact(dict(zip(names, row, strict=True))) for row in zip(*columns, strict=True))
    return out


def _exact(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` with the exact values of its ``EXACT_TEXT`` column put back, without it."""
    exact = row.pop(EXACT_TEXT, None)
    if exact is not None:
        row.update(json.loads(exact))
    return row


def _converter(field: pa.Field[Any]) -> Callable[[Any], Any] | None:
    """How a column's Python values become the record's: maps to dicts, JSON text decoded."""
    if field.metadata == JSON_ENCODING:
        return _from_json
    return _map_converter(field.type)


def _from_json(value: Any) -> Any:
    return None if value is None else json.loads(value)


def _map_converter(type_: pa.DataType) -> Callable[[Any], Any] | None:
    """``to_pylist`` gives a map as a list of (key, value) pairs; this turns them into dicts."""
    if not pa.types.is_map(type_):
        return None
    inner = _map_converter(type_.item_type)

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if inner is None:
            return dict(value)
        return {key: inner(item) for key, item in value}

    return convert
