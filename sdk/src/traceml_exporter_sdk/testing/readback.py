"""Readers that turn an exporter's output back into dicts, for ``read_back``.

``read_jsonl(context)`` reads the built-in jsonl exporter's layout
(``<export_dir>/<stream>.jsonl`` and its parts, one ``to_dict()`` per line,
closing lines left out) and works as ``read_back`` for any exporter that writes
that layout. ``read_jsonl_lines(path)`` and ``group_by_stream(dicts)`` cover a
single file that holds every stream, like the contract's ``OneFileExporter``::

    def read_back(self, context):
        return group_by_stream(read_jsonl_lines(context.export_dir / "records.jsonl"))

A file's last line without its ``\\n`` was cut off by a crash or a full disk:
it is not data, so every reader leaves it out, and none does so silently.
``read_jsonl_file`` and ``read_jsonl_export`` report it in ``JsonlLines.torn``;
``read_jsonl_lines`` and ``read_jsonl`` emit a ``TornLineWarning`` per file.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..context import ExporterContext
from ..records import RECORD_TYPE_BY_STREAM

__all__ = [
    "JsonlLines",
    "TornLineWarning",
    "group_by_stream",
    "jsonl_parts",
    "read_jsonl",
    "read_jsonl_export",
    "read_jsonl_file",
    "read_jsonl_lines",
]

CLOSING_KEY = "closing"


class TornLineWarning(UserWarning):
    """A file's last line had no ``\\n`` (cut off by a crash or a full disk) and was left out."""


@dataclass(frozen=True)
class JsonlLines:
    """The lines read from one or more JSON Lines files, and the torn last lines left out."""

    lines: list[dict[str, Any]] = field(default_factory=list)
    torn: dict[Path, int] = field(default_factory=dict)
    """File -> how many bytes its torn last line held; only files that had one."""

    @property
    def torn_lines(self) -> int:
        """How many torn last lines were left out (at most one per file)."""
        return len(self.torn)


def read_jsonl_file(path: str | Path, *, skip_closing: bool = True) -> JsonlLines:
    """Decode one JSON object per ``\\n``-terminated line; a missing file gives no lines.

    Lines are split on ``\\n`` only (never on U+2028 or ``\\r``, which may sit
    inside a string); a line with a ``closing`` key (the jsonl exporter's
    summary line) is left out unless ``skip_closing`` is False. Bytes after the
    last ``\\n`` are a torn line: left out, and counted in ``torn``.

    Raises:
        ValueError: a ``\\n``-terminated line is not a JSON object; the message names it.
    """
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return JsonlLines()
    pieces = blob.split(b"\n")
    tail = pieces.pop()
    out: list[dict[str, Any]] = []
    for number, raw in enumerate(pieces, start=1):
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
    return JsonlLines(out, {path: len(tail)} if tail.strip() else {})


def read_jsonl_lines(path: str | Path, *, skip_closing: bool = True) -> list[dict[str, Any]]:
    """``read_jsonl_file(path).lines``, with a ``TornLineWarning`` if a torn line was left out.

    Raises:
        ValueError: a ``\\n``-terminated line is not a JSON object; the message names it.
    """
    read = read_jsonl_file(path, skip_closing=skip_closing)
    _warn_torn(read.torn)
    return read.lines


def _warn_torn(torn: Mapping[Path, int]) -> None:
    for path, size in torn.items():
        warnings.warn(
            f"{path}: left out a torn last line, {size} bytes with no trailing newline "
            "(a write cut off by a crash or a full disk)",
            TornLineWarning,
            stacklevel=3,
        )


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
        if number.isascii() and number.isdigit():
            parts.append((int(number), path))
    return [path for _, path in sorted(parts) if path.exists()]


def read_jsonl_export(context: ExporterContext) -> dict[str, JsonlLines]:
    """Every selected stream's lines in the jsonl layout, its file and then its parts.

    Streams with no file are left out. Torn last lines are left out and
    reported in each stream's ``torn``, with no warning.
    """
    out: dict[str, JsonlLines] = {}
    for stream in context.streams:
        paths = jsonl_parts(context.export_dir, stream)
        if paths:
            reads = [read_jsonl_file(path) for path in paths]
            out[stream] = JsonlLines(
                [line for read in reads for line in read.lines],
                {path: size for read in reads for path, size in read.torn.items()},
            )
    return out


def read_jsonl(context: ExporterContext) -> dict[str, list[dict[str, Any]]]:
    """Read ``<export_dir>/<stream>.jsonl`` (and its parts ``<stream>.N.jsonl``, in
    order) for every selected stream (the jsonl layout).

    Usable as ``read_back`` for any exporter that writes this layout; streams
    whose file does not exist are left out. A torn last line of a file is left
    out with a ``TornLineWarning``; ``read_jsonl_export`` gives the counts.
    """
    export = read_jsonl_export(context)
    for read in export.values():
        _warn_torn(read.torn)
    return {stream: read.lines for stream, read in export.items()}
