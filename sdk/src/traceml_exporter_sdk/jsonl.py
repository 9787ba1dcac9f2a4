"""The built-in ``jsonl`` exporter: one JSON Lines file per selected stream.

Each record is one line, ``orjson.dumps(record.to_dict())``, with ``hostname``
dropped unless ``include_hostname``. Each file ends with one closing line::

    {"stream": "step_time", "closing": true, "written_records": 1200, "dropped_batches": 0}

which a reader tells from a record line by its ``closing`` key (no record has
that field). ``written_records`` counts the lines of that file;
``dropped_batches`` is the worker-wide count, the same in every file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson

from .context import ExporterContext
from .records import ExportRecord

__all__ = ["CLOSING_KEY", "JsonlExporter", "encode_line", "make_exporter"]

CLOSING_KEY = "closing"
_OPTIONS = orjson.OPT_APPEND_NEWLINE


def encode_line(data: dict[str, Any]) -> bytes:
    """One JSON line; integers beyond 64 bits (which orjson rejects) go through ``json``."""
    try:
        return orjson.dumps(data, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


class JsonlExporter:
    """Write ``<export_dir>/<stream>.jsonl`` for every selected stream.

    Files are opened in ``open`` with mode ``x``: an earlier export in the
    same folder is never overwritten (``open`` raises ``FileExistsError``).
    """

    def __init__(self, context: ExporterContext) -> None:
        self._dir = context.export_dir
        self._streams = context.streams
        self._include_hostname = context.include_hostname
        self._files: dict[str, IO[bytes]] = {}
        self._written: dict[str, int] = {}

    def paths(self) -> dict[str, Path]:
        """Stream -> the file this exporter writes it to."""
        return {stream: self._dir / f"{stream}.jsonl" for stream in self._streams}

    def open(self) -> None:
        self._dir.mkdir(parents=True, exist_ok=True)
        try:
            for stream, path in self.paths().items():
                self._files[stream] = open(path, "xb")  # noqa: SIM115 - closed in close()
                self._written[stream] = 0
        except BaseException:
            self._close_files()
            raise

    def write(self, records: Sequence[ExportRecord]) -> None:
        chunks: dict[str, list[bytes]] = {stream: [] for stream in self._files}
        drop_hostname = not self._include_hostname
        for record in records:
            data = record.to_dict()
            if drop_hostname:
                data.pop("hostname", None)
            try:
                out = chunks[record.STREAM]
            except KeyError:
                raise ValueError(
                    f"record of stream {record.STREAM!r} is not selected; "
                    f"this exporter writes {', '.join(self._streams)}"
                ) from None
            out.append(encode_line(data))
        for stream, lines in chunks.items():
            if lines:
                self._files[stream].write(b"".join(lines))
                self._written[stream] += len(lines)

    def flush(self) -> None:
        for handle in self._files.values():
            handle.flush()

    def close(self, *, dropped_batches: int = 0) -> None:
        try:
            for stream, handle in self._files.items():
                closing = {
                    "stream": stream,
                    CLOSING_KEY: True,
                    "written_records": self._written[stream],
                    "dropped_batches": dropped_batches,
                }
                handle.write(encode_line(closing))
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            self._close_files()

    def _close_files(self) -> None:
        files, self._files = self._files, {}
        for handle in files.values():
            handle.close()


def make_exporter(context: ExporterContext) -> JsonlExporter:
    """Factory for ``traceml_exporter_sdk.jsonl:make_exporter`` (same as the ``jsonl`` setting)."""
    return JsonlExporter(context)
