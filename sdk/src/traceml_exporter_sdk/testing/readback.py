"""Readers that turn an exporter's output back into dicts, for ``read_back``.

``read_jsonl(context)`` reads the built-in jsonl exporter's layout
(``<export_dir>/<stream>.jsonl``, one ``to_dict()`` per line, closing lines
left out) and works as ``read_back`` for any exporter that writes that
layout. ``read_jsonl_lines(path)`` and ``group_by_stream(dicts)`` cover a
single file that holds every stream, like the contract's ``OneFileExporter``::

    def read_back(self, context):
        return group_by_stream(read_jsonl_lines(context.export_dir / "records.jsonl"))
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from ..context import ExporterContext
from ..records import RECORD_TYPE_BY_STREAM

__all__ = ["group_by_stream", "jsonl_parts", "read_jsonl", "read_jsonl_lines"]

CLOSING_KEY = "closing"


def read_jsonl_lines(path: str | Path, *, skip_closing: bool = True) -> list[dict[str, Any]]:
    """Decode one JSON object per ``\\n``-terminated line; a missing file gives ``[]``.

    Lines are split on ``\\n`` only (never on U+2028 or ``\\r``, which may sit
    inside a string); a line with a ``closing`` key (the jsonl exporter's
    summary line) is left out unless ``skip_closing`` is False.

    Raises:
        ValueError: a line is not a JSON object; the message names the line.
    """
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for number, raw in enumerate(blob.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: not a JSON line ({exc}): {raw[:200]!r}") from None
        if not isinstance(data, dict):
            raise ValueError(f"{path}:{number}: a JSON line must be an object, got {raw[:200]!r}")
        if skip_closing and CLOSING_KEY in data:
            continue
        out.append(data)
    return out


def group_by_stream(dicts: Iterable[Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Split dicts by their ``stream`` key, keeping file order within each stream.

    Raises:
        ValueError: a dict has no ``stream`` key or names an unknown stream.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for data in dicts:
        stream = data.get("stream")
        if stream not in RECORD_TYPE_BY_STREAM:
            raise ValueError(
                f"a line has stream {stream!r}; expected one of {', '.join(RECORD_TYPE_BY_STREAM)}"
            )
        out.setdefault(str(stream), []).append(dict(data))
    return out


def jsonl_parts(export_dir: Path, stream: str) -> list[Path]:
    """``<stream>.jsonl`` and then its parts ``<stream>.N.jsonl`` in order of N, as there."""
    parts = [(0, export_dir / f"{stream}.jsonl")]
    for path in export_dir.glob(f"{stream}.*.jsonl"):
        number = path.name[len(stream) + 1 : -len(".jsonl")]
        if number.isdigit():
            parts.append((int(number), path))
    return [path for _, path in sorted(parts) if path.exists()]


def read_jsonl(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """Read ``<export_dir>/<stream>.jsonl`` (and its parts ``<stream>.N.jsonl``, in
    order) for every selected stream (the jsonl layout).

    Usable as ``read_back`` for any exporter that writes this layout; streams
    whose file does not exist are left out.
    """
    out: dict[str, list[dict[str, Any]]] = {}
    for stream in context.streams:
        paths = jsonl_parts(context.export_dir, stream)
        if paths:
            out[stream] = [line for path in paths for line in read_jsonl_lines(path)]
    return out
